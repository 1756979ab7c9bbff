"""pi over MPI ranks: run under ``mpiexec -n 2`` and ``-n 3`` with ``--with-mpi``.

Each check runs on COMM_WORLD, a Dup() of it and COMM_SELF, and compares
against two references that do not share the code path under test:

* the same computation on another communicator (COMM_SELF for the world and
  its Dup, the world for COMM_SELF), which must agree bit for bit: the split of
  the work over the ranks must not change the answer;
* a serial computation written independently here: the Monte Carlo hit count
  from the NumPy counter (:func:`pympi_gpu.rng.count_hits_numpy`, not the numba
  kernel), and the trapezoid rule as a correctly rounded ``math.fsum`` of its
  terms in NumPy (agreeing to rounding: the kernels group four divisions into one
  and count each group's term in fixed point).
"""

import math

import numpy as np
import pytest

from pympi_gpu.pi.driver import estimate_pi, monte_carlo, trapezoid
from pympi_gpu.pi.kernels_cpu import NumbaKernels, NumpyKernels
from pympi_gpu.rng import count_hits_numpy, seed_key

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


def _other(comm):
    """A communicator of another size than comm's (COMM_SELF, or the world for COMM_SELF)."""
    from mpi4py import MPI

    return MPI.COMM_WORLD if comm.Get_size() == 1 else MPI.COMM_SELF


def _serial_hits(samples: int, seed: int) -> int:
    """Hits among samples 0..samples-1 by the NumPy counter (no numba, no MPI)."""
    return int(count_hits_numpy(seed_key(seed), 0, samples))


def _serial_trapezoid(intervals: int) -> float:
    """h (f(0)/2 + f(1)/2 + sum of f at the interior nodes), the sum correctly rounded."""
    x = np.arange(1, intervals, dtype=np.float64) / intervals
    return math.fsum(np.concatenate((4.0 / (1.0 + x * x), [3.0]))) / intervals


@pytest.fixture(scope="module")
def kernels():
    k = NumbaKernels()
    k.warmup()
    return k


@pytest.mark.parametrize("samples", [1, 2, 3, 1_000_003, 5_000_000])
def test_monte_carlo_rank_invariant(comm, kernels, samples):
    """The hit count is the serial count of the same stream, whatever the split over ranks."""
    r = monte_carlo(comm, samples, kernels, seed=17)
    other = monte_carlo(_other(comm), samples, kernels, seed=17)
    assert r.hits == other.hits and r.estimate == other.estimate
    assert r.hits == _serial_hits(samples, 17)
    assert r.estimate == 4.0 * (r.hits / samples)
    assert r.n == samples
    assert sum(s.count for s in r.shares) == samples
    assert len(r.shares) == comm.Get_size()
    if samples >= 1_000_000:
        assert abs(r.error) < 5 * r.stderr


@pytest.mark.parametrize("intervals", [2, 3, 1000, 40_000, 100_003, 3_000_001])
def test_trapezoid_rank_invariant(comm, kernels, intervals):
    """The trapezoid sum is bit-identical over any split and backend, and agrees with a serial fsum to
    rounding."""
    r = trapezoid(comm, intervals, kernels)
    other = trapezoid(_other(comm), intervals, kernels)
    assert r.estimate == other.estimate  # bit-identical
    assert trapezoid(comm, intervals, NumpyKernels()).estimate == r.estimate
    assert r.estimate == pytest.approx(_serial_trapezoid(intervals), rel=4e-15, abs=0)
    if intervals >= 100_000:
        assert abs(r.error + 1 / (6 * intervals**2)) < 4 * math.ulp(math.pi)


def test_numpy_and_numba_backends_agree(comm, kernels):
    """Both CPU backends give the same hits and the same trapezoid sum, bit for bit."""
    a = estimate_pi(comm, 300_007, kernels, methods=("mc", "trapezoid"), seed=99)
    b = estimate_pi(comm, 300_007, NumpyKernels(), methods=("mc", "trapezoid"), seed=99)
    assert a.results[0].hits == b.results[0].hits
    assert a.results[0].estimate == b.results[0].estimate
    assert a.results[1].estimate == b.results[1].estimate


def test_per_rank_is_weak_scaling(comm, kernels):
    """``per_rank``: each rank draws the count asked for, so the total grows with the ranks."""
    run = estimate_pi(comm, 1001, kernels, per_rank=True, seed=3)
    assert run.samples == 1001 * comm.Get_size()
    assert run.results[0].n == 1001 * comm.Get_size()
    assert all(s.count in (1001,) for s in run.results[0].shares)
    assert run.results[0].hits == _serial_hits(1001 * comm.Get_size(), 3)


def test_timings_are_maxima_and_consistent(comm, kernels):
    """The record's times are the slowest rank's, and every rank returns the same record."""
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
    """Ranks left without a sample take part and add nothing."""
    r = monte_carlo(comm, 1, kernels, seed=5)
    assert sum(s.count for s in r.shares) == 1
    assert [s.count for s in r.shares] == [1] + [0] * (comm.Get_size() - 1)
    assert r.hits == _serial_hits(1, 5)
