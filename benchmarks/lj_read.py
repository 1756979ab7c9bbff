#!/usr/bin/env python3
"""How long ``--init`` takes to read a large file, and what each rank holds while it does (not a test).

Writes bench/in.lj's state of ``--atoms`` atoms once (``--format``: a LAMMPS
data file with velocities, as :func:`pympi_gpu.nbody.lj.lammps.write_data`
writes it; an extended XYZ or a GSD frame, as ``--dump`` writes them), then
at each of ``--ranks`` reads it as ``pympi-nbody --model lj --init`` does
(:func:`pympi_gpu.nbody.lj.start.read_header` and
:func:`~pympi_gpu.nbody.lj.start.load`, each rank keeping its brick's atoms)
and reports the seconds (the slowest rank's; the CPU seconds of each rank, what
a shared machine measures better), the rows read a second, and per
rank the most bytes allocated while reading (``tracemalloc``), its share of
the state (position, velocity, id: 56 bytes an atom), and its peak resident
memory, against the whole state's bytes.  One JSON object (``--out``) and a
table.

    python benchmarks/lj_read.py --atoms 1e7 --ranks 1,2        # 10,061,824 atoms
    python benchmarks/lj_read.py --atoms 4e6 --format gsd
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SUFFIX = {"lammps": ".data", "extxyz": ".extxyz", "gsd": ".gsd"}


def write(path: Path, cells: int, kind: str) -> float:
    """The state of ``cells``^3 fcc cells written to ``path``; the seconds it took."""
    from pympi_gpu.nbody.lj.config import LjConfig

    config = LjConfig(cells=cells)
    t0 = time.perf_counter()
    if kind == "lammps":
        from pympi_gpu.nbody.lj.lammps import write_data

        write_data(path, config)
    else:
        import numpy as np

        from pympi_gpu.nbody.dump import open_dump
        from pympi_gpu.nbody.lj.lattice import fcc_positions, velocities

        writer = open_dump(path, config.box, config.identity())
        writer.write(0, 0.0, np.arange(1, config.atoms + 1), fcc_positions(cells, config.density),
                     velocities(config.atoms, config.temperature, config.seed))
        writer.close()
    return time.perf_counter() - t0


def worker(path: str) -> None:
    """One rank's read of ``path`` (under mpiexec): rank 0 prints every rank's figures as JSON."""
    import tracemalloc

    from mpi4py import MPI

    from pympi_gpu.nbody.lj import start
    from pympi_gpu.nbody.lj.domain import make_cart

    cart = make_cart(MPI.COMM_WORLD)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    tracemalloc.start()
    cart.Barrier()
    t0, c0 = time.perf_counter(), time.process_time()
    header = start.read_header(cart, path)
    got = start.load(cart, path, header)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    mine = {"seconds": seconds, "cpu_seconds": cpu, "peak_bytes": peak,
            "share_bytes": sum(a.nbytes for a in got.values()),
            "atoms": int(got["id"].size), "rss_before": rss0, "rss_peak": rss}
    ranks = cart.gather(mine, root=0)
    if cart.Get_rank() == 0:
        print(json.dumps({"atoms": header.atoms, "kind": header.kind, "ranks": ranks}))
    cart.Free()


def _cpu() -> str:
    try:
        m = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        return m.group(1).strip() if m else ""
    except OSError:
        return ""


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker(sys.argv[2])
        return 0
    from pympi_gpu.cli.counts import parse_count
    from pympi_gpu.nbody.lj.lattice import cells_for

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--atoms", default="1e7")
    ap.add_argument("--format", choices=sorted(SUFFIX), default="lammps")
    ap.add_argument("--ranks", default="1,2")
    ap.add_argument("--keep", default=None, help="write the file here and keep it (else a temporary directory)")
    ap.add_argument("--out", default=None, help="JSON path [default: none]")
    args = ap.parse_args()
    cells = cells_for(parse_count(args.atoms))
    directory = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="pympi-read-"))
    path = directory / f"lj-{4 * cells ** 3}{SUFFIX[args.format]}"
    written = None
    if not path.exists():
        written = write(path, cells, args.format)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
    mpiexec = str(BIN / "mpiexec") if (BIN / "mpiexec").exists() else "mpiexec"
    doc = {"file_bytes": path.stat().st_size, "write_seconds": written, "cpu": _cpu(), "runs": []}
    try:
        for ranks in (int(r) for r in args.ranks.split(",")):
            out = subprocess.run([mpiexec, "-n", str(ranks), sys.executable, __file__, "--worker", str(path)],
                                 capture_output=True, text=True, env=env, timeout=7200)
            if out.returncode:
                raise RuntimeError(out.stderr[-3000:])
            doc["runs"].append(json.loads(out.stdout.strip().splitlines()[-1]))
    finally:
        if not args.keep:
            shutil.rmtree(directory)
    whole = doc["runs"][0]["atoms"] * 56
    print(f"{doc['runs'][0]['kind']}: {doc['runs'][0]['atoms']:,} atoms, a file of {doc['file_bytes'] / 1e6:,.0f} MB"
          + (f" (written in {written:.1f} s)" if written else "") + f"; the whole state {whole / 1e6:,.0f} MB")
    print(f"{'ranks':>5} {'seconds':>8} {'rows/s':>10}  per rank: CPU s, peak allocated / share / resident peak (MB)")
    for run in doc["runs"]:
        s = max(r["seconds"] for r in run["ranks"])
        each = "  ".join(f"{r.get('cpu_seconds', float('nan')):.1f} s, {r['peak_bytes'] / 1e6:,.0f}/"
                         f"{r['share_bytes'] / 1e6:,.0f}/{r['rss_peak'] / 1e6:,.0f}" for r in run["ranks"])
        print(f"{len(run['ranks']):>5} {s:>8.1f} {run['atoms'] / s:>10.3g}  {each}")
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
