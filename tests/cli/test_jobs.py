"""jobs/*.sbatch run: clean under shellcheck, the RTX job's image under the stand-in ibrun or its own mpiexec,
and build-cuda-mpi.sh checking its arguments first.  The scripts' headers: tests/unit/test_job_scripts.py."""

from __future__ import annotations

import pytest

from helpers.commands import ROOT, need_tool, run

JOBS = ROOT / "jobs"
SCRIPTS = sorted(JOBS.glob("*.sbatch"))


@pytest.mark.system
def test_shellcheck_is_clean():
    need_tool("shellcheck")
    out = run(["shellcheck", *map(str, SCRIPTS)], timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.system
def test_shellcheck_would_catch_a_bad_script(tmp_path):
    need_tool("shellcheck")
    bad = tmp_path / "bad.sbatch"
    bad.write_text("#!/bin/bash\n#SBATCH -n 2\nSAMPLES=${SAMPLES:-1e8}\nsrun pympi-pi $SAMPLES\n")
    out = run(["shellcheck", str(bad)], timeout=60)
    assert out.returncode != 0 and "SC2086" in out.stdout


# ---------------------------------------------------------------- frontera-rtx-nbody: image vs launcher

FAKE_APPTAINER = """#!/bin/bash
# stands for apptainer: `exec SIF cat /opt/pympi/mpi-family` answers $FAKE_FAMILY; `run` is logged
if [ "$1" = exec ]; then
    [ -n "${FAKE_FAMILY:-}" ] && { echo "$FAKE_FAMILY"; exit 0; }
    exit 1
fi
echo "apptainer $*" >> "$FAKE_LOG"
"""
FAKE_IBRUN = """#!/bin/bash
echo "ibrun $*" >> "$FAKE_LOG"
"""


def _rtx_job(tmp_path, **env):
    """Run jobs/frontera-rtx-nbody.sbatch with apptainer and ibrun standing in for the site's:
    returns (process, the commands it launched)."""
    import os

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("apptainer", FAKE_APPTAINER), ("ibrun", FAKE_IBRUN)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    sif = tmp_path / "nbody.sif"
    sif.write_text("")
    log = tmp_path / "launched.log"
    log.write_text("")
    base = {"PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE_LOG": str(log), "SIF": str(sif), "HOME": str(tmp_path),
            "SLURM_NTASKS": "8", "SLURM_JOB_NUM_NODES": "2"}
    base.update(env)
    out = run(["bash", str(JOBS / "frontera-rtx-nbody.sbatch")], timeout=60, env=base, cwd=tmp_path)
    assert os.path.exists(log)
    return out, log.read_text().splitlines()


def test_rtx_job_runs_the_mpich_image_under_ibrun(tmp_path):
    out, launched = _rtx_job(tmp_path, FAKE_FAMILY="mpich")
    assert out.returncode == 0, out.stderr
    (cmd,) = launched
    assert cmd.startswith(f"ibrun apptainer run --nv {tmp_path / 'nbody.sif'} pympi-nbody 2e6 ")
    assert "--backend gpu" in cmd and "--transport auto" in cmd


@pytest.mark.parametrize("family, why", [("openmpi", "holds Open MPI"), ("", "cannot tell which MPI")])
def test_rtx_job_refuses_an_image_ibrun_cannot_start(tmp_path, family, why):
    out, launched = _rtx_job(tmp_path, FAKE_FAMILY=family)
    assert out.returncode == 2 and why in out.stderr and launched == [], out.stderr


def test_rtx_job_runs_any_image_with_its_own_mpiexec_on_one_node(tmp_path):
    out, launched = _rtx_job(tmp_path, FAKE_FAMILY="openmpi", LAUNCH="container", SLURM_JOB_NUM_NODES="1",
                             SLURM_NTASKS="4")
    assert out.returncode == 0, out.stderr
    assert launched == [f"apptainer run --nv {tmp_path / 'nbody.sif'} mpiexec -n 4 pympi-nbody 2e6 --steps 10 "
                        "--precision fp32 --exchange ring --transport auto --backend gpu --benchmark --json"]
    out, launched = _rtx_job(tmp_path, FAKE_FAMILY="openmpi", LAUNCH="container")   # 2 nodes
    assert out.returncode == 2 and "one node" in out.stderr and launched == []


# ---------------------------------------------------------------- docker/build-cuda-mpi.sh

BUILD_MPI = JOBS.parent / "docker" / "build-cuda-mpi.sh"


@pytest.mark.system
def test_build_cuda_mpi_script_is_shellcheck_clean():
    need_tool("shellcheck")
    out = run(["shellcheck", str(BUILD_MPI)], timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("cuda, ucx, message", [
    ("empty", "none", "no include/cuda.h under CUDA_ROOT"),
    ("cuda", "empty", "no include/ucp/api/ucp.h under UCX_ROOT"),
])
def test_build_cuda_mpi_script_checks_its_arguments_first(tmp_path, cuda, ucx, message):
    """Wrong roots are named before anything is fetched or built (the build takes minutes)."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "cuda" / "include").mkdir(parents=True)
    (tmp_path / "cuda" / "include" / "cuda.h").write_text("")
    roots = [str(tmp_path / r) if r != "none" else r for r in (cuda, ucx)]
    out = run(["bash", str(BUILD_MPI), str(tmp_path / "prefix"), *roots], timeout=60, cwd=tmp_path)
    assert out.returncode == 1 and message in out.stderr, out.stderr
    assert not (tmp_path / "prefix").exists()
    usage = run(["bash", str(BUILD_MPI)], timeout=60)
    assert usage.returncode == 2 and "PREFIX CUDA_ROOT UCX_ROOT" in usage.stderr
