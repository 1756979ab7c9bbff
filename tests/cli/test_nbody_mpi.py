"""pympi-nbody over MPI ranks, driven as users drive it (mpiexec subprocesses).

Final states are compared through the checkpoint each run writes at its end.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers.commands import clean_env, mpiexec_argv, run, script
from helpers.jobs import sigterm_after_first_checkpoint
from pympi_gpu.nbody.gravity import checkpoint as ckpt

N = 203  # divisible by neither 2 nor 3
NBODY = script("pympi-nbody")


def nbody(ranks: int, *args: str, timeout: float = 180, env=None):
    argv = (mpiexec_argv(ranks) if ranks > 1 else []) + [NBODY, *map(str, args)]
    return run(argv, timeout=timeout, env=env or clean_env(OMP_NUM_THREADS="1"))


def final_state(path) -> dict[str, np.ndarray]:
    meta, arrays = ckpt.read_file(path)
    return {"step": meta["step"], **arrays}


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory):
    """One rank, fp64: the state every decomposition must reproduce."""
    path = tmp_path_factory.mktemp("nbody") / "one.npz"
    out = nbody(1, N, "--steps", 5, "--precision", "fp64", "--backend", "numba", "--threads", 1,
                "--checkpoint", path, "--json")
    assert out.returncode == 0, out.stderr
    return final_state(path), json.loads(out.stdout)


@pytest.mark.parametrize("ranks, exchange", [(2, "ring"), (2, "allgather"), (3, "ring"), (3, "allgather")])
def test_decompositions_agree(tmp_path, reference_run, ranks, exchange):
    ref, ref_doc = reference_run
    path = tmp_path / "c.npz"
    out = nbody(ranks, N, "--steps", 5, "--precision", "fp64", "--backend", "numba", "--threads", 1,
                "--exchange", exchange, "--checkpoint", path, "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["ranks"] == ranks and doc["exchange"] == exchange and doc["transport"] == "host"
    got = final_state(path)
    assert got["step"] == 5
    for f in ckpt.FIELDS:
        np.testing.assert_allclose(got[f], ref[f], rtol=1e-11, atol=1e-13, err_msg=f)
    assert abs(doc["final"]["energy"] - ref_doc["final"]["energy"]) < 1e-12


def test_numpy_backend_agrees_with_numba_fp32(tmp_path, reference_run):
    ref, _ = reference_run
    path = tmp_path / "c.npz"
    out = nbody(2, N, "--steps", 5, "--backend", "numpy", "--checkpoint", path)
    assert out.returncode == 0, out.stderr
    got = final_state(path)
    assert got["x"].dtype == np.float32
    for f in ("x", "y", "z", "vx", "vy", "vz"):
        np.testing.assert_allclose(got[f], ref[f], rtol=1e-4, atol=1e-5, err_msg=f)


def test_json_record(reference_run):
    _, doc = reference_run
    for key in ("schema", "app", "ranks", "wall_time", "throughput", "work_unit", "provenance"):
        assert key in doc, key
    assert doc["schema"] == "pympi_gpu.nbody/1" and doc["app"] == "nbody"
    assert doc["work_unit"] == "interactions" and doc["interactions"] == N * N * 5
    assert doc["throughput"] > 0 and doc["gflops"] == pytest.approx(doc["throughput"] * 20 / 1e9)
    assert doc["initial"]["step"] == 0 and doc["final"]["step"] == 5
    assert 0 <= doc["energy_drift"] < 1e-4
    assert doc["provenance"]["ranks"] == 1


def test_restart_is_bit_identical(tmp_path):
    common = ("--backend", "numba", "--threads", 1)
    whole, half, resumed = tmp_path / "whole.npz", tmp_path / "half.npz", tmp_path / "resumed.npz"
    out = nbody(2, N, "--steps", 6, "--checkpoint", whole, *common)
    assert out.returncode == 0, out.stderr
    out = nbody(2, N, "--steps", 3, "--checkpoint", half, *common)
    assert out.returncode == 0, out.stderr
    assert final_state(half)["step"] == 3
    out = nbody(2, N, "--steps", 6, "--restart", half, "--checkpoint", resumed, "--json", *common)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["first_step"] == 3 and doc["last_step"] == 6 and doc["restarted_from"] == str(half)
    a, b = final_state(whole), final_state(resumed)
    assert b["step"] == 6
    for f in ckpt.FIELDS:
        assert np.array_equal(a[f], b[f]), f
    # energies are relative to the original start, carried in the checkpoint
    assert doc["initial"]["step"] == 0
    # another rank count continues the same physics, up to rounding
    other = tmp_path / "other.npz"
    out = nbody(3, N, "--steps", 6, "--restart", half, "--checkpoint", other, *common)
    assert out.returncode == 0, out.stderr
    c = final_state(other)
    for f in ckpt.FIELDS:
        np.testing.assert_allclose(c[f], a[f], rtol=1e-4, atol=1e-5, err_msg=f)


def test_sigterm_writes_checkpoint_and_exits_cleanly(tmp_path):
    path = tmp_path / "ck.npz"
    argv = mpiexec_argv(2) + [NBODY, "3000", "--steps", "1000000", "--backend", "numba", "--threads", "1",
                              "--checkpoint", str(path), "--checkpoint-every", "2"]
    sigterm_after_first_checkpoint(argv, path, env=clean_env(OMP_NUM_THREADS="1"))
    state = final_state(path)
    assert 2 <= state["step"] < 1_000_000
    # and the run goes on from there
    resumed = nbody(2, 3000, "--steps", state["step"] + 1, "--restart", path, "--backend", "numba",
                    "--threads", 1, "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["last_step"] == state["step"] + 1


def test_verify_passes_and_pympi_subcommand(tmp_path):
    out = run(mpiexec_argv(2) + [script("pympi"), "nbody", "400", "--steps", "10", "--verify", "--backend",
                                 "numba", "--init", "uniform", "--precision", "fp64"],
              env=clean_env(OMP_NUM_THREADS="1"), timeout=180)
    assert out.returncode == 0, out.stderr
    assert "verify     PASSED" in out.stdout and out.stdout.count("n-body:") == 1
    for field in ("interactions/s", "GFLOP/s", "s/step", "relative drift", "transport host"):
        assert field in out.stdout
