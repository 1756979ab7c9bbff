"""The CUDA pi kernels under numba's CUDA simulator (and on a real GPU when present)."""

import json
import sys

import pytest

from helpers.commands import clean_env, mpiexec_argv, run, script

SCRIPT = r"""
import json, math, sys
import numpy as np
from pympi_gpu.pi import grid
from pympi_gpu.pi.kernels_cpu import NumbaKernels, exact_partials
from pympi_gpu.pi.kernels_cuda import CudaKernels
from pympi_gpu.rng import seed_key
gpu, cpu = CudaKernels(per_thread=int(sys.argv[1])), NumbaKernels()
out = {}
for seed, start, count in [(1, 0, 3000), (20240601, 2**33 + 5, 2049), (7, 11, 1)]:
    key = seed_key(seed)
    out[f"{seed}:{start}:{count}"] = [gpu.mc_hits(key, start, count), cpu.mc_hits(key, start, count)]
n = 3 * grid.chunk_size(10**5) // 2 + 3
g = gpu.trapezoid_chunks(n, 0, grid.n_chunks(n))
c = cpu.trapezoid_chunks(n, 0, grid.n_chunks(n))
out["trap"] = [math.fsum(exact_partials(g)), math.fsum(exact_partials(c)), len(g)]
print(json.dumps(out))
"""


@pytest.mark.parametrize("per_thread", [1, 7])
def test_cuda_kernels_match_cpu_in_simulator(per_thread):
    proc = run([sys.executable, "-c", SCRIPT, str(per_thread)], timeout=600,
               env=clean_env(NUMBA_ENABLE_CUDASIM="1"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    trap = out.pop("trap")
    for key, (gpu, cpu) in out.items():
        assert gpu == cpu, key
    assert trap[2] == 2
    assert trap[0] == pytest.approx(trap[1], rel=1e-14)


def test_cuda_kernels_on_real_gpu():
    from pympi_gpu.device.gpu import gpu_usable

    ok, why = gpu_usable()
    if not ok:
        pytest.skip(f"no real GPU here: {why}")
    proc = run([sys.executable, "-c", SCRIPT, "4096"], timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    out.pop("trap")
    for key, (gpu, cpu) in out.items():
        assert gpu == cpu, key


@pytest.mark.parametrize("ranks", [2, 3])
def test_pympi_pi_selects_its_gpu_before_mpi_init(ranks):
    """`mpiexec pympi-pi --backend gpu`: each rank's (simulated) GPU chosen before MPI_Init, same estimate."""

    argv = mpiexec_argv(ranks) + [script("pympi-pi"), "3e3", "--json"]
    gpu = run(argv + ["--backend", "gpu"], timeout=600, env=clean_env(NUMBA_ENABLE_CUDASIM="1"))
    assert gpu.returncode == 0, gpu.stderr
    cpu = run(argv + ["--backend", "numba"], timeout=600, env=clean_env())
    assert cpu.returncode == 0, cpu.stderr
    g, c = json.loads(gpu.stdout), json.loads(cpu.stdout)
    # hydra exports MPI_LOCALRANKID: rank 0's device was made current before MPI started
    assert "selected before MPI_Init, from MPI_LOCALRANKID=0" in g["provenance"]["extra_versions"]["gpu"]
    assert g["backend"] == "gpu" and c["backend"] == "numba"
    assert [r["estimate"] for r in g["results"]] == [r["estimate"] for r in c["results"]]
