"""The collective pi computations: each takes ``comm`` and returns a record."""

from __future__ import annotations

import math

import numpy as np

from pympi_gpu.mpi.decomposition import block_range
from pympi_gpu.pi import grid
from pympi_gpu.pi.record import PiResult, PiRun, RankShare
from pympi_gpu.rng import seed_key
from pympi_gpu.run.phases import PhaseClock, summarise

__all__ = ["DEFAULT_SEED", "METHODS", "monte_carlo", "trapezoid", "estimate_pi"]

DEFAULT_SEED = 20240601
METHODS = ("mc", "trapezoid")


def _record(comm, method: str, n: int, estimate: float, stderr: float | None, hits: int | None,
            times: tuple[float, float, float], share: tuple[int, int]) -> PiResult:
    """Build the record of one method; collective over comm.

    ``times`` are this rank's (start, end of compute, end of reduction) from
    MPI.Wtime; the record holds the maximum over ranks of each interval.
    """
    from mpi4py import MPI

    t0, t1, t2 = times
    mx = np.array([t1 - t0, t2 - t1, t2 - t0])
    comm.Allreduce(MPI.IN_PLACE, mx, op=MPI.MAX)
    compute, reduce, wall = (float(x) for x in mx)
    mine = (comm.Get_rank(), MPI.Get_processor_name(), share[0], share[1], t1 - t0)
    rate = n / wall if wall > 0 else math.inf
    return PiResult(
        method=method, estimate=estimate, error=estimate - math.pi, stderr=stderr, n=n, hits=hits,
        compute_time=compute, reduce_time=reduce, wall_time=wall,
        throughput=rate, throughput_per_rank=rate / comm.Get_size(),
        shares=tuple(RankShare(*row) for row in comm.allgather(mine)),
    )


def _settle(comm, clock: PhaseClock | None) -> None:
    """Wait for every rank before a reduction, timed as ``waiting`` (the load imbalance)."""
    if clock is not None:
        with clock.phase("waiting"):
            comm.Barrier()


def monte_carlo(comm, samples: int, kernels, *, seed: int = DEFAULT_SEED, clock: PhaseClock | None = None) -> PiResult:
    """Estimate pi from ``samples`` points in the unit square; collective over comm.

    Sample ``k`` (global index) depends on ``(seed, k)`` alone, and hits are
    summed as integers, so the estimate is bit-identical for any number of
    ranks and any backend.  ``clock`` collects compute, waiting and
    communication time and the traffic.
    """
    from mpi4py import MPI

    rank, size = comm.Get_rank(), comm.Get_size()
    start, stop = block_range(samples, size, rank)
    key = seed_key(seed)
    comm.Barrier()
    t0 = MPI.Wtime()
    local = kernels.mc_hits(key, start, stop - start)
    t1 = MPI.Wtime()
    _settle(comm, clock)
    t1w = MPI.Wtime()
    hits = comm.allreduce(local, op=MPI.SUM)
    t2 = MPI.Wtime()
    if clock is not None:
        clock.add("compute", t1 - t0)
        clock.add("communication", t2 - t1w)
        clock.sent(8)  # one int64 into the allreduce
    p = hits / samples
    return _record(comm, "mc", samples, 4.0 * p, 4.0 * math.sqrt(p * (1.0 - p) / samples), hits,
                   (t0, t1, t2), (start, stop - start))


def trapezoid(comm, intervals: int, kernels, *, clock: PhaseClock | None = None) -> PiResult:
    """Integrate 4/(1+x^2) on [0, 1] with ``intervals`` trapezoids; collective over comm.

    Ranks sum whole chunks of a global grid fixed by ``intervals`` alone; a
    chunk's sum is an integer (its terms in fixed point, :mod:`~pympi_gpu.pi.grid`),
    each rank adds its chunks' exactly, rank 0 adds the ranks' and rounds the
    result once.  The result is thus bit-identical for any number of ranks,
    threads and any backend.
    """
    from mpi4py import MPI

    rank, size = comm.Get_rank(), comm.Get_size()
    c0, c1 = grid.rank_chunks(intervals, size, rank)
    comm.Barrier()
    t0 = MPI.Wtime()
    local = sum(kernels.trapezoid_chunks(intervals, c0, c1).tolist())  # exact: Python integers
    t1 = MPI.Wtime()
    _settle(comm, clock)
    t1w = MPI.Wtime()
    gathered = comm.gather(local, root=0)
    estimate = grid.estimate(intervals, sum(gathered)) if rank == 0 else None
    estimate = comm.bcast(estimate, root=0)
    t2 = MPI.Wtime()
    if clock is not None:
        clock.add("compute", t1 - t0)
        clock.add("communication", t2 - t1w)
        clock.sent(max(8, -(-local.bit_length() // 8)))  # this rank's integer into the gather
        if rank == 0:
            clock.sent(8)  # the estimate, broadcast
    # The rank's share in intervals: interior node i closes interval [i-1, i); the
    # rank holding node n-1 also has the last interval, so shares add up to n.
    if c1 > c0:
        lo = grid.chunk_nodes(intervals, c0)[0] - 1
        hi = grid.chunk_nodes(intervals, c1 - 1)[1]
        hi = intervals if hi == intervals else hi - 1
    else:
        lo = hi = 0
    return _record(comm, "trapezoid", intervals, estimate, None, None, (t0, t1, t2), (lo, hi - lo))


def estimate_pi(comm, samples: int, kernels, *, methods=("mc",), seed: int = DEFAULT_SEED,
                per_rank: bool = False, backend: str | None = None, provenance=None) -> PiRun:
    """Run each method of ``methods``; collective over comm.

    ``samples`` is the total over all ranks, or with ``per_rank`` the count of
    each rank (the total is then ``samples * comm.size``).
    """
    from mpi4py import MPI

    size = comm.Get_size()
    total = samples * size if per_rank else samples
    clock = PhaseClock()
    t0 = MPI.Wtime()
    results = []
    for method in methods:
        if method == "mc":
            results.append(monte_carlo(comm, total, kernels, seed=seed, clock=clock))
        elif method == "trapezoid":
            results.append(trapezoid(comm, total, kernels, clock=clock))
        else:
            raise ValueError(f"unknown method {method!r}")
    wall = MPI.Wtime() - t0
    phases, traffic = summarise(comm, clock)
    return PiRun(samples=total, per_rank=per_rank, ranks=size,
                 backend=backend or getattr(kernels, "name", "?"), seed=seed,
                 results=tuple(results), wall_time=wall, provenance=provenance, phases=phases, traffic=traffic)
