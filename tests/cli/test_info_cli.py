"""pympi-info under mpiexec -n 2 and -n 3, plain and --json, and its mismatch warning."""

from __future__ import annotations

import json
import platform
from importlib import metadata

import pytest

from helpers.commands import clean_env, run, script
from pympi_gpu import __version__
from pympi_gpu.mpi.environment import container

INFO = script("pympi-info")


@pytest.mark.parametrize("n", [2, 3])
def test_info_json_under_mpiexec(mpirun, n):
    p = mpirun(n, INFO, "--json", timeout=120)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)  # one object: rank 0 prints, the others do not
    assert doc["schema"] == "pympi_gpu.info/1" and doc["app"] == "info"
    assert doc["package"] == __version__ and doc["python"] == platform.python_version()
    for dist in ("mpi4py", "numpy", "numba"):
        assert doc["versions"][dist] == metadata.version(dist)
    assert doc["ranks"] == n and sum(doc["ranks_per_host"].values()) == n
    assert [r["rank"] for r in doc["rank_info"]] == list(range(n))
    assert sorted(r["local_rank"] for r in doc["rank_info"]) == list(range(n))  # one host here
    assert all(r["local_size"] == n for r in doc["rank_info"])
    for r in doc["rank_info"]:
        assert r["gpu_reason"]
        assert (r["gpu_used"] is None) == (not r["gpus"])
    from pympi_gpu.mpi.library import vendor_of_text
    from pympi_gpu.run.provenance import version_of

    assert doc["mpi_vendor"] == vendor_of_text(doc["mpi_library"]) != "unknown"
    if doc["mpi_vendor"] == "mpich" and version_of("mpich"):  # the wheel's own version
        assert version_of("mpich") in doc["mpi_library"]
    assert doc["launcher_env"].get("PMI_SIZE", doc["launcher_env"].get("OMPI_COMM_WORLD_SIZE")) == str(n)
    assert doc["expected_ranks"] == n and doc["warnings"] == []
    assert set(doc["cuda_aware"]) == {"supported", "method", "detail"}
    assert doc["container"] == container()
    assert isinstance(doc["numba_cache_writable"], bool) and doc["numba_cache_dir"]


@pytest.mark.parametrize("n", [2, 3])
def test_info_plain_under_mpiexec(mpirun, n):
    p = mpirun(n, INFO, timeout=120)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert out.count("pympi_gpu ") == 1  # printed once
    assert f"ranks           {n} on 1 host(s)" in out
    for r in range(n):
        assert f"rank {r:>3} on " in out
    assert f"mpi4py {metadata.version('mpi4py')}" in out and f"NumPy {metadata.version('numpy')}" in out
    assert "CUDA-aware MPI" in out and "numba cache" in out and "container" in out
    assert "warning" not in (out + p.stderr).lower()


def test_mismatch_warning_without_launcher():
    # two processes started by hand while Slurm says 2 tasks: each is a world of one
    env = clean_env(SLURM_NTASKS="2")
    p = run([INFO], env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "warning: MPI started a world of 1 rank" in p.stdout and "SLURM_NTASKS=2" in p.stdout
    assert "warning" not in p.stderr  # said once, in the report, not again by mpi_world()
    p = run([INFO, "--json"], env=env, timeout=120)
    doc = json.loads(p.stdout)
    assert doc["ranks"] == 1 and doc["expected_ranks"] == 2 and doc["expected_from"] == "SLURM_NTASKS"
    assert len(doc["warnings"]) == 1 and "SLURM_NTASKS=2" in doc["warnings"][0]
    # the second of those processes says only the warning, not a second report
    p = run([INFO], env=clean_env(SLURM_NTASKS="2", SLURM_PROCID="1"), timeout=120)
    assert p.returncode == 0 and p.stdout == "" and "launcher rank 1 is alone" in p.stderr


def test_no_mismatch_when_the_launcher_agrees(mpirun):
    p = mpirun(2, INFO, "--json", timeout=120, env=clean_env(SLURM_NTASKS="2"))
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["warnings"] == []


def test_info_subcommand_no_gpu():
    p = run([script("pympi"), "info", "--no-gpu", "--json"], timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["rank_info"][0]["gpu_reason"] == "not probed"
