"""The LJ model's GPU path under numba's CUDA simulator (subprocesses: NUMBA_ENABLE_CUDASIM must be
set before numba.cuda is imported): device kernels, device-packed halos over both transports,
restarts; agreement with the numba CPU path to round-off."""

from __future__ import annotations

import json

import pytest

from conftest import clean_env, mpiexec_argv, run, script

NBODY = script("pympi-nbody")
SIM = clean_env(NUMBA_ENABLE_CUDASIM="1", OMP_NUM_THREADS="1")
ARGS = ["256", "--model", "lj", "--steps", "12", "--thermo", "4", "--json"]


def _doc(argv, env=SIM):
    out = run(argv, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def cpu():
    return _doc([NBODY, *ARGS, "--backend", "numba", "--threads", "1"], env=clean_env(OMP_NUM_THREADS="1"))


def _agree(doc, ref):
    assert [t["step"] for t in doc["thermo"]] == [0, 4, 8, 12]
    for a, b in zip(doc["thermo"], ref["thermo"]):
        for f in ("temp", "e_pair", "etotal", "press"):
            assert a[f] == pytest.approx(b[f], rel=1e-11, abs=1e-12), f


def test_gpu_one_rank_matches_cpu(cpu):
    doc = _doc([NBODY, *ARGS, "--backend", "gpu"])
    assert doc["backend"] == "gpu" and doc["newton"] is False
    assert doc["rebuilds"] >= 1  # a rebuild on the way: atoms went to the host and back
    _agree(doc, cpu)


@pytest.mark.parametrize("transport", ["host", "device"])
def test_gpu_two_ranks_both_transports(cpu, transport):
    # the simulator's MPI is not CUDA-aware: say it is, as the gravity model's tests do
    env = clean_env(PYMPI_CUDA_AWARE="1", **SIM) if transport == "device" else SIM
    doc = _doc(mpiexec_argv(2) + [NBODY, *ARGS, "--backend", "gpu", "--transport", transport], env=env)
    assert doc["transport"] == transport and doc["grid"] == [2, 1, 1]
    # hydra exports MPI_LOCALRANKID: the (simulated) GPU was chosen before MPI_Init, as for gravity
    assert "selected before MPI_Init, from MPI_LOCALRANKID=0" in doc["provenance"]["extra_versions"]["gpu"]
    _agree(doc, cpu)


def test_device_transport_refused_without_cuda_aware_mpi():
    out = run(mpiexec_argv(2) + [NBODY, *ARGS, "--backend", "gpu", "--transport", "device"],
              env=clean_env(PYMPI_CUDA_AWARE="0", **SIM), timeout=300)
    assert out.returncode == 2, out.stderr
    assert "--transport device: this MPI library is not CUDA-aware" in out.stderr and "Traceback" not in out.stderr


def test_gpu_restart_bit_for_bit(tmp_path):
    a, b = tmp_path / "a.npz", tmp_path / "b.npz"
    base = [NBODY, "256", "--model", "lj", "--backend", "gpu", "--json"]
    straight = _doc(base + ["--steps", "8", "--checkpoint", str(a), "--checkpoint-every", "4"])
    _doc(base + ["--steps", "4", "--checkpoint", str(b)])
    resumed = _doc(base + ["--steps", "8", "--restart", str(b)])
    assert resumed["first_step"] == 4
    assert resumed["thermo"][-1] == straight["thermo"][-1]
