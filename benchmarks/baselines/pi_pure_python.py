"""Baseline: the pure-Python MPI pi estimator of the TACC containers tutorial (pi-mpi.py),
written anew: every rank draws its share of points with ``random.random()`` in a Python
loop, counts those inside the unit circle and rank 0 sums the counts.

    mpiexec -n 2 python benchmarks/baselines/pi_pure_python.py 10000000
"""

import random
import sys
import time

from mpi4py import MPI


def inside(n: int) -> int:
    count = 0
    for _ in range(n):
        x, y = random.random(), random.random()
        if x * x + y * y <= 1.0:
            count += 1
    return count


def main() -> None:
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    total = int(float(sys.argv[1]))
    mine = total // size + (rank < total % size)
    random.seed(rank)
    t0 = time.perf_counter()
    hits = comm.reduce(inside(mine), op=MPI.SUM, root=0)
    if rank == 0:
        print(f"pi ~= {4.0 * hits / total:.6f} in {time.perf_counter() - t0:.3f} s")


if __name__ == "__main__":
    main()
