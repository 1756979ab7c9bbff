#!/usr/bin/env python3
"""Checkpoint save and load, streamed in blocks, against the gather-everything baseline (not a test).

Run under the launcher:

    mpiexec -n 2 python benchmarks/checkpoint.py
    mpiexec -n 3 python benchmarks/checkpoint.py --out benchmarks/results/checkpoint-cpu.json

For each model it writes and reads the same system with pympi's checkpoints
(``pympi_gpu.nbody.{gravity,lj}.checkpoint``: rows streamed through rank 0 a
block at a time) and with the code they replaced
(``baselines/checkpoint_gather.py``: the whole system gathered on rank 0,
``numpy.savez``; loaded whole and scattered, or for LJ broadcast), the two
interleaved, medians of ``--repeat``.  Times are wall seconds of the slowest
rank (the file is fsync'd in both).  A separate pass measures, with
``tracemalloc``, the most memory any rank allocated during each operation.
The loaded rows are checked equal between the two.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
from mpi4py import MPI

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "baselines"))
import checkpoint_gather as old  # noqa: E402

from pympi_gpu.mpi.decomposition import block_counts  # noqa: E402
from pympi_gpu.nbody.gravity import checkpoint as gravity_ckpt  # noqa: E402
from pympi_gpu.nbody.lj import checkpoint as lj_ckpt  # noqa: E402
from pympi_gpu.nbody.lj.domain import make_cart, owner_coords  # noqa: E402


def timed(comm, fn):
    """(result, wall seconds of the slowest rank)."""
    comm.Barrier()
    t0 = time.perf_counter()
    out = fn()
    return out, comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)


def peak(comm, fn) -> int:
    """The most bytes any rank allocated while ``fn`` ran, beyond what it held before."""
    comm.Barrier()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    fn()
    extra = tracemalloc.get_traced_memory()[1] - before
    tracemalloc.stop()
    return comm.allreduce(extra, op=MPI.MAX)


def gravity_case(comm, n, directory):
    size, rank = comm.Get_size(), comm.Get_rank()
    counts = block_counts(n, size)
    rng = np.random.default_rng(rank)
    local = {f: rng.normal(size=counts[rank]) for f in gravity_ckpt.FIELDS}
    meta = {"step": 1, "time": 0.01, "seed": 1, "init": "plummer", "precision": "fp64", "dt": 0.01,
            "softening": 0.01}
    full_meta = dict(meta, format=gravity_ckpt.FORMAT, bodies=n, ranks=size)
    new_path, old_path = f"{directory}/g-new.npz", f"{directory}/g-old.npz"
    ops = {
        "pympi": (lambda: gravity_ckpt.save(comm, new_path, local, meta),
                  lambda: gravity_ckpt.load(comm, new_path)[1]),
        "gather baseline": (lambda: old.gravity_save(comm, old_path, local, full_meta, gravity_ckpt.FIELDS),
                            lambda: old.gravity_load(comm, old_path, gravity_ckpt.FIELDS, np.float64)),
    }
    return ops, n * 8 * len(gravity_ckpt.FIELDS), local


def lj_case(comm, cells, directory):
    cart = make_cart(comm)
    size, rank, dims = cart.Get_size(), cart.Get_rank(), cart.Get_topo()[0]
    n = 4 * cells ** 3
    box = cells * 1.6796
    rng = np.random.default_rng(7)  # the same system on every rank; each keeps its brick's atoms
    x = rng.uniform(0, box, (n, 3))
    mine = np.all(owner_coords(x, box, dims) == np.array(cart.Get_coords(rank)), axis=1)
    ids = np.arange(1, n + 1)[mine]
    owned = {"x": x[mine], "v": rng.normal(size=(n, 3))[mine], "f": rng.normal(size=(n, 3))[mine], "id": ids}
    del x
    meta = {"model": "lj", "step": 1, "cells": cells, "atoms": n, "density": 0.8442, "temperature": 1.44,
            "cutoff": 2.5, "skin": 0.3, "dt": 0.005, "seed": 7}
    new_path, old_path = f"{directory}/lj-new.npz", f"{directory}/lj-old.npz"
    ops = {
        "pympi": (lambda: lj_ckpt.save(cart, new_path, owned, meta),
                  lambda: lj_ckpt.load(cart, new_path, lambda m: box, dims)[1]),
        "gather baseline": (lambda: old.lj_save(cart, old_path, owned, dict(meta, format=lj_ckpt.FORMAT, ranks=size)),
                            lambda: old.lj_load(cart, old_path, box, dims)),
    }
    return ops, n * 80, owned


def measure(comm, name, size_label, ops, nbytes, local, repeat):
    rows = []
    times = {k: {"save": [], "load": []} for k in ops}
    loaded = {}
    for _ in range(repeat):
        for impl, (save, load) in ops.items():
            times[impl]["save"].append(timed(comm, save)[1])
            loaded[impl], t = timed(comm, load)
            times[impl]["load"].append(t)
    for key in loaded["pympi"]:
        assert loaded["pympi"][key].tobytes() == loaded["gather baseline"][key].tobytes(), key
        assert loaded["pympi"][key].tobytes() == local[key].tobytes(), key
    for impl, (save, load) in ops.items():
        rows.append({"model": name, "size": size_label, "implementation": impl, "bytes": nbytes,
                     "save_s": statistics.median(times[impl]["save"]),
                     "load_s": statistics.median(times[impl]["load"]),
                     "save_peak_bytes": peak(comm, save), "load_peak_bytes": peak(comm, load)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bodies", type=int, default=1 << 21, help="gravity bodies (fp64)")
    ap.add_argument("--cells", type=int, default=64, help="LJ fcc cells per edge (4 cells^3 atoms)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where to write the files (default: a temporary directory)")
    ap.add_argument("--out", type=Path, default=None, help="JSON output (rank 0)")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    directory = comm.bcast(tempfile.mkdtemp(dir=args.dir) if rank == 0 else None, root=0)
    rows = []
    try:
        ops, nbytes, local = gravity_case(comm, args.bodies, directory)
        rows += measure(comm, "gravity", f"{args.bodies:,} bodies", ops, nbytes, local, args.repeat)
        del ops, local
        ops, nbytes, local = lj_case(comm, args.cells, directory)
        rows += measure(comm, "lj", f"{4 * args.cells ** 3:,} atoms", ops, nbytes, local, args.repeat)
    finally:
        comm.Barrier()
        if rank == 0:
            for p in Path(directory).iterdir():
                p.unlink()
            os.rmdir(directory)
    if rank != 0:
        return
    from rich.console import Console
    from rich.table import Table

    from pympi_gpu.device.jitcache import host_cpu

    cpu = host_cpu()
    table = Table(title=f"checkpoints over {comm.Get_size()} ranks: {cpu['model']} ({cpu['llvm_cpu']}, {cpu['vector_isa']}), "
                        f"load {os.getloadavg()[0]:.2f}")
    for col in ("model", "size", "implementation", "file MB", "save s", "load s", "save peak MB (max rank)",
                "load peak MB (max rank)"):
        table.add_column(col, justify="left" if col in ("model", "size", "implementation") else "right")
    for r in rows:
        table.add_row(r["model"], r["size"], r["implementation"], f"{r['bytes'] / 1e6:.0f}", f"{r['save_s']:.3f}",
                      f"{r['load_s']:.3f}", f"{r['save_peak_bytes'] / 1e6:.1f}", f"{r['load_peak_bytes'] / 1e6:.1f}")
    Console().print(table)
    ratios = {}
    for model in ("gravity", "lj"):
        new, base = (next(r for r in rows if r["model"] == model and r["implementation"] == i)
                     for i in ("pympi", "gather baseline"))
        ratios[model] = {k: new[k] / base[k] for k in ("save_s", "load_s", "save_peak_bytes", "load_peak_bytes")}
        print(f"{model}: pympi / baseline: save {ratios[model]['save_s']:.2f}x time, "
              f"{ratios[model]['save_peak_bytes']:.2f}x peak memory; load {ratios[model]['load_s']:.2f}x time, "
              f"{ratios[model]['load_peak_bytes']:.2f}x peak memory")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"benchmark": "checkpoint", "ranks": comm.Get_size(), "repeat": args.repeat,
                                        "machine": cpu, "load_average": os.getloadavg(), "rows": rows,
                                        "ratios": ratios}, indent=2) + "\n")
        print(f"JSON written to {args.out}")


if __name__ == "__main__":
    main()
