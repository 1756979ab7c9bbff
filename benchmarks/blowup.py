#!/usr/bin/env python3
"""What the blow-up checks cost, as a share of a step (not a test): prints a table, writes JSON.

Run under the launcher, e.g. ``mpiexec -n 2 python benchmarks/blowup.py``.
For each model and size it measures, in the same run, the median time of a
step of the real loop and the time of every operation the checks added
(``pympi_gpu/nbody/blowup.py``), each timed alone over many repetitions at
the run's own array sizes and communicator:

- LJ, every step: the largest displacement with its NaN test against the same
  loop without it (the reduction itself was there before, as the rebuild test);
- LJ, every list build: velocities and forces finite, and the 2-integer
  reduction of the atom count, weighted by the measured builds per step;
- LJ, every thermo step: the finiteness of one thermo row (counted as if every
  step printed thermo, an upper bound);
- gravity, every step: positions and velocities finite on the backend, and
  the stop agreement's second integer.

Checks before a checkpoint write are not counted per step: they cost a copy
of the owned state, less than the write they guard.

    mpiexec -n 1 python benchmarks/blowup.py
    mpiexec -n 2 python benchmarks/blowup.py --out benchmarks/results/blowup-cpu.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import numpy as np
from numba import njit, prange


@njit(parallel=True, cache=True)
def _max_displacement2_unchecked(x, x0, n):
    """The displacement loop as it was before the checks (a NaN passes unseen)."""
    m = 0.0
    for i in prange(n):
        dx = x[i, 0] - x0[i, 0]
        dy = x[i, 1] - x0[i, 1]
        dz = x[i, 2] - x0[i, 2]
        m = max(m, dx * dx + dy * dy + dz * dz)
    return m


def per_call(fn, repeats: int) -> float:
    """Median seconds of one call of ``fn`` over 5 batches of ``repeats`` calls."""
    return per_call_pair(fn, None, repeats)[0]


def per_call_pair(fn, baseline, repeats: int, batches: int = 5) -> tuple[float, float]:
    """Median seconds of one call of ``fn`` and of ``baseline`` (or None), their batches alternated.

    Alternating puts both under the same load, which on a shared machine moves by
    more than the difference being measured.
    """
    fns = [f for f in (fn, baseline) if f is not None]
    for f in fns:
        f()
    times = [[] for _ in fns]
    for _ in range(batches):
        for f, t in zip(fns, times):
            t0 = time.perf_counter()
            for _ in range(repeats):
                f()
            t.append((time.perf_counter() - t0) / repeats)
    medians = [statistics.median(t) for t in times]
    return medians[0], (medians[1] if baseline is not None else 0.0)


def lj_case(comm, atoms: int, steps: int) -> dict:
    from mpi4py import MPI

    from pympi_gpu.nbody.blowup import finite_rows
    from pympi_gpu.nbody.lj.cpu import kernels as kc
    from pympi_gpu.nbody.lj.domain import brick_of, make_cart
    from pympi_gpu.nbody.lj.system import LjConfig, LjSystem, initial_arrays
    from pympi_gpu.nbody.lj.lattice import cells_for
    from pympi_gpu.nbody.lj.record import Thermo

    config = LjConfig(cells=cells_for(atoms))
    kc.warmup(kc.force_kernels(config.pair_term))
    cart = make_cart(comm)
    try:
        brick = brick_of(config.box, cart.Get_topo()[0], cart.Get_coords(cart.Get_rank()))
        system = LjSystem(cart, config, *initial_arrays(config, brick)).atoms
        system.start()
        rebuilds0 = system.rebuilds
        times = []
        for _ in range(steps):
            cart.Barrier()
            t0 = time.perf_counter()
            system.step()
            times.append(time.perf_counter() - t0)
        step = comm.allreduce(statistics.median(times), op=MPI.MAX)
        builds_per_step = (system.rebuilds - rebuilds0) / steps
        n = system.nlocal
        pos, x0 = system.pos, system.x0
        new, old = per_call_pair(lambda: kc.max_displacement2(pos, x0, n),
                                 lambda: _max_displacement2_unchecked(pos, x0, n), 200, batches=15)
        tally = np.zeros(2, np.int64)
        finite = per_call(lambda: finite_rows(system.v, system.f[:n]), 50)
        reduce2 = per_call(lambda: cart.Allreduce(MPI.IN_PLACE, tally, op=MPI.SUM), 200)
        row = Thermo(step=1, temp=1.0, e_pair=-5.0, ke=1.5, etotal=-3.5, press=0.7, momentum=(0.0, 0.0, 0.0))
        thermo = per_call(lambda: all(math.isfinite(v) for v in (row.temp, row.e_pair, row.etotal, row.press,
                                                                  *row.momentum)), 2000)
        parts = {"displacement_nan_test": max(0.0, new - old), "finite_v_f_per_build": finite * builds_per_step,
                 "atom_count_reduction_per_build": reduce2 * builds_per_step, "thermo_row_every_step": thermo}
        parts = {k: comm.allreduce(v, op=MPI.MAX) for k, v in parts.items()}
        system.close()
        return {"model": "lj", "size": config.atoms, "ranks": comm.Get_size(), "median_step_s": step,
                "builds_per_step": builds_per_step, "checks_s": parts, "checks_per_step_s": sum(parts.values()),
                "share": sum(parts.values()) / step}
    finally:
        cart.Free()


def gravity_case(comm, bodies: int, steps: int) -> dict:
    from mpi4py import MPI

    from pympi_gpu.device.device import CPU
    from pympi_gpu.nbody.gravity.backends import make_backend
    from pympi_gpu.nbody.gravity.driver import NbodyConfig, compute_forces, initial_state
    from pympi_gpu.nbody.gravity.exchange import make_exchange

    be = make_backend(CPU, "fp32")
    be.warmup()
    config = NbodyConfig(bodies=bodies)
    ex = make_exchange(comm, be, bodies, "ring", "host")
    state = initial_state(comm, be, config)
    ex.set_masses(state.mass)
    times = []
    for _ in range(steps):
        comm.Barrier()
        t0 = time.perf_counter()
        compute_forces(comm, be, ex, state, config.softening ** 2)
        times.append(time.perf_counter() - t0)
    step = comm.allreduce(statistics.median(times), op=MPI.MAX)
    arrays = [*state.pos, *state.vel]
    finite = per_call(lambda: be.finite(arrays), 200)
    one, two = np.zeros(1, np.int32), np.zeros(2, np.int32)
    with_two, with_one = per_call_pair(lambda: comm.Allreduce(MPI.IN_PLACE, two, op=MPI.MAX),
                                       lambda: comm.Allreduce(MPI.IN_PLACE, one, op=MPI.MAX), 500)
    extra = max(0.0, with_two - with_one)
    parts = {"finite_x_v": comm.allreduce(finite, op=MPI.MAX), "second_integer_in_agreement": comm.allreduce(extra, op=MPI.MAX)}
    return {"model": "gravity", "size": bodies, "ranks": comm.Get_size(), "median_step_s": step,
            "checks_s": parts, "checks_per_step_s": sum(parts.values()), "share": sum(parts.values()) / step}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lj", default="32000,256000", help="LJ atom counts")
    parser.add_argument("--gravity", default="16384,65536", help="gravity body counts")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--out", type=Path, default=None, help="JSON file (rank 0)")
    args = parser.parse_args()
    from mpi4py import MPI

    from pympi_gpu.device.jitcache import configure

    configure()
    comm = MPI.COMM_WORLD
    from pympi_gpu.cli.common import configure_threads

    threads = configure_threads(comm, None)  # each rank its share of the cores, as the commands give it
    rows = [lj_case(comm, int(n), args.steps) for n in args.lj.split(",") if n]
    rows += [gravity_case(comm, int(n), max(3, args.steps // 8)) for n in args.gravity.split(",") if n]
    if comm.Get_rank() != 0:
        return
    import os

    import numba

    from pympi_gpu.device.jitcache import host_cpu

    cpu = host_cpu()
    load = os.getloadavg()[0]
    print(f"blow-up checks, {comm.Get_size()} rank(s), {cpu['model']} ({cpu['llvm_cpu']}, {cpu['vector_isa']}), "
          f"numba {numba.__version__}, {threads} thread(s) per rank, load average {load:.2f}")
    print(f"{'model':8} {'size':>9} {'step (median)':>14} {'checks/step':>12} {'share':>8}")
    for r in rows:
        print(f"{r['model']:8} {r['size']:>9,} {r['median_step_s'] * 1e3:>11.3f} ms {r['checks_per_step_s'] * 1e6:>9.1f} us "
              f"{100 * r['share']:>7.3f}%")
    if args.out:
        doc = {"benchmark": "blowup-checks", "cpu": cpu["model"], "llvm_cpu": cpu["llvm_cpu"],
               "vector_isa": cpu["vector_isa"], "load_average": load, "ranks": comm.Get_size(),
               "threads_per_rank": threads,
               "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rows": rows}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        existing = json.loads(args.out.read_text()) if args.out.exists() else {}
        existing[f"ranks={comm.Get_size()}"] = doc
        args.out.write_text(json.dumps(existing, indent=2) + "\n")
        print(f"written: {args.out}")


if __name__ == "__main__":
    main()
