"""pi over MPI ranks: run under ``mpiexec -n 2`` and ``-n 3`` with ``--with-mpi``.

Each check runs on COMM_WORLD, a Dup() of it and COMM_SELF, and compares
against the same computation on COMM_SELF (one rank), which must agree bit for
bit.
"""

import math

import pytest

from pympi_gpu.pi.driver import estimate_pi, monte_carlo, trapezoid
from pympi_gpu.pi.kernels_cpu import NumbaKernels, NumpyKernels

pytestmark = pytest.mark.mpi(min_size=2)


@pytest.fixture(params=["world", "dup", "self"])
def comm(request):
    from mpi4py import MPI

    if request.param == "dup":
        c = MPI.COMM_WORLD.Dup()
        yield c
        c.Free()
    else:
        yield MPI.COMM_WORLD if request.param == "world" else MPI.COMM_SELF


@pytest.fixture(scope="module")
def kernels():
    k = NumbaKernels()
    k.warmup()
    return k


@pytest.mark.parametrize("samples", [1, 2, 3, 1_000_003, 5_000_000])
def test_monte_carlo_rank_invariant(comm, kernels, samples):
    from mpi4py import MPI

    r = monte_carlo(comm, samples, kernels, seed=17)
    ref = monte_carlo(MPI.COMM_SELF, samples, kernels, seed=17)
    assert r.hits == ref.hits and r.estimate == ref.estimate
    assert r.n == samples
    assert sum(s.count for s in r.shares) == samples
    assert len(r.shares) == comm.Get_size()
    if samples >= 1_000_000:
        assert abs(r.error) < 5 * r.stderr


@pytest.mark.parametrize("intervals", [2, 3, 1000, 100_003, 3_000_001])
def test_trapezoid_rank_invariant(comm, kernels, intervals):
    from mpi4py import MPI

    r = trapezoid(comm, intervals, kernels)
    ref = trapezoid(MPI.COMM_SELF, intervals, kernels)
    assert r.estimate == ref.estimate  # bit-identical
    if intervals >= 100_000:
        assert abs(r.error + 1 / (6 * intervals**2)) < 4 * math.ulp(math.pi)


def test_numpy_and_numba_backends_agree(comm, kernels):
    a = estimate_pi(comm, 300_007, kernels, methods=("mc", "trapezoid"), seed=99)
    b = estimate_pi(comm, 300_007, NumpyKernels(), methods=("mc", "trapezoid"), seed=99)
    assert a.results[0].hits == b.results[0].hits
    assert a.results[0].estimate == b.results[0].estimate
    assert abs(a.results[1].estimate - b.results[1].estimate) <= 2 * math.ulp(math.pi)


def test_per_rank_is_weak_scaling(comm, kernels):
    run = estimate_pi(comm, 1001, kernels, per_rank=True, seed=3)
    assert run.samples == 1001 * comm.Get_size()
    assert run.results[0].n == 1001 * comm.Get_size()
    assert all(s.count in (1001,) for s in run.results[0].shares)


def test_timings_are_maxima_and_consistent(comm, kernels):
    from mpi4py import MPI

    r = monte_carlo(comm, 2_000_000, kernels)
    mine = [s.compute_time for s in r.shares]
    assert r.compute_time == pytest.approx(max(mine))
    assert r.wall_time >= r.compute_time
    # every rank got the same record
    gathered = comm.allgather((r.hits, r.estimate, r.compute_time, r.wall_time))
    assert all(g == gathered[0] for g in gathered)
    assert r.throughput == pytest.approx(r.n / r.wall_time)
    assert MPI.Is_initialized()


def test_more_ranks_than_samples(comm, kernels):
    r = monte_carlo(comm, 1, kernels, seed=5)
    assert sum(s.count for s in r.shares) == 1
    assert r.hits in (0, 1)
