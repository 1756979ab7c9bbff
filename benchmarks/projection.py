#!/usr/bin/env python3
"""Projection of 32,000 LJ atoms to 1, 4 and 16 Frontera nodes, pympi beside LAMMPS (not a test).

A model, not a measurement: prints a table and writes JSON.  The model is
``pympi-scale``'s (docs/scaling.md, "A projection, labelled as one"): per
step and rank ``f + w n`` seconds of compute (``n`` atoms per rank, ``f`` the
per-step floor, ``w`` the time per atom-step, both fitted by relative least
squares to measured sizes per rank), plus the study's messages at 1 us and its
bytes at 12.5 GB/s (HDR-100).  At 56 ranks a node, 32,000 atoms are 571, 143
and 36 atoms per rank on 1, 4 and 16 nodes.

pympi: the projection of a ``pympi-scale`` study with floor probes, from its
JSON (``--study PREFIX.json``) or from a study this script runs::

    pympi-scale --ranks 1,2 --project-nodes 1,4,16 --project-tasks-per-node 56 --repeat R \\
        -- pympi-nbody 32000 --model lj --steps N --threads 1

(the probes: 500 and 4,000 atoms on 2 ranks; the study: 32,000 on 1 and 2).
Its ``f`` and ``w`` are fitted to the mean rank's compute + I/O seconds.

LAMMPS (plain, OPT, OMP): projected the same way from its mean step times in
``benchmarks/results/lj-sizes.json`` (``--lammps``; measured by
``benchmarks/lj.py`` side by side with pympi) at the same sizes and ranks as
the pympi fit's points, with the study's network and messages and twice its
bytes: LAMMPS's ``Comm::borders`` stages are pympi's, but its ghosts are the
full shell (every image within the cutoff), where pympi's half lists keep a
half shell (``nbody/lj/cpu/halo.py``), half the rows each way.  A LAMMPS step
time holds everything: its MPI calls and waits inside the node too, where
pympi's compute + I/O does not; so pympi's own mean steps of the same file
are projected beside them, like for like (``pympi (lj-sizes)``).

Efficiency is given against the model's own 1-rank time and against 1 node
(56 ranks).

    python benchmarks/projection.py                          # runs the study (--steps 200, --repeat 3)
    python benchmarks/projection.py --study lj-strong.json   # from a study already made
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from lj import _cpu_detail, _cpu_model, _exe

from pympi_gpu.run.records import to_dict
from pympi_gpu.scale.projection import Model, Network, project, with_floor

ROOT = Path(__file__).resolve().parent.parent
ATOMS = 32000
NODES = (1, 4, 16)
TASKS_PER_NODE = 56
#: the codes of lj-sizes.json projected beside the pympi study
FILE_CODES = ("pympi", "lammps", "lammps-opt", "lammps-omp")
#: LAMMPS's ghosts and reverse forces against pympi's half shell: bytes per step, relative
FULL_SHELL = 2.0


def run_study(prefix: Path, steps: int, repeat: int) -> Path:
    """The pympi-scale study of :data:`ATOMS` atoms on 1 and 2 ranks with its floor probes; its JSON."""
    argv = [_exe("pympi-scale"), "--ranks", "1,2", "--project-nodes", ",".join(map(str, NODES)),
            "--project-tasks-per-node", str(TASKS_PER_NODE), "--repeat", str(repeat), "--out", str(prefix),
            "--json", "--", _exe("pympi-nbody"), str(ATOMS), "--model", "lj", "--steps", str(steps),
            "--threads", "1"]
    prefix.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(argv, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode})")
    return prefix.with_name(prefix.name + ".json")


def file_points(rows: list[dict], code: str, like: Model) -> list[tuple[int, float, float]]:
    """``(ranks, atoms per rank, mean step seconds)`` of ``code`` in lj-sizes.json at the pympi fit's sizes."""
    wanted = {(r, round(n * r)) for r, n, _ in like.floor_fitted_on}
    return [(r["ranks"], r["atoms"] / r["ranks"], r["step_s"]) for r in rows
            if r["code"] == code and (r["ranks"], r["atoms"]) in wanted and r.get("step_s")]


def projected(code: str, model: Model, network: Network) -> dict:
    """One code's fitted terms and its points at :data:`NODES`, efficiency against 1 rank and 1 node."""
    rows = project(model, NODES, TASKS_PER_NODE, network, baseline_ranks=1)
    node = rows[0].time * rows[0].ranks
    return {"code": code, "floor_s": model.floor, "per_unit_s": model.per_unit, "source": model.floor_source,
            "fitted_on": [dict(ranks=r, atoms_per_rank=n, seconds_per_step=y) for r, n, y in model.floor_fitted_on],
            "one_rank_step_s": model.time(1, network) / model.units,
            "points": [dict(to_dict(p), step_s=p.time / model.units, efficiency_vs_node=node / (p.time * p.ranks))
                       for p in rows]}


def table(codes: list[dict], about: list[str]) -> str:
    """The projected points of every code, its fit, and ``about`` (what was measured where) above them."""
    head = (f"{'code':<16}{'nodes':>6}{'ranks':>6}{'atoms/rank':>11}{'step us':>10}{'floor us':>10}"
            f"{'net us':>9}{'E vs 1 rank':>13}{'E vs 1 node':>13}")
    lines = about + [head, "-" * len(head)]
    for c in codes:
        for p in c["points"]:
            units = p["time"] / p["step_s"]
            lines.append(f"{c['code']:<16}{p['nodes']:>6}{p['ranks']:>6}{p['per_rank']:>11.0f}"
                         f"{1e6 * p['step_s']:>10.1f}{1e6 * p['floor'] / units:>10.1f}"
                         f"{1e6 * p['communication'] / units:>9.1f}{100 * p['efficiency']:>12.1f}%"
                         f"{100 * p['efficiency_vs_node']:>12.1f}%")
    lines.append("fits (f + w n per step, n atoms per rank):")
    for c in codes:
        lines.append(f"  {c['code']:<16} f {1e6 * c['floor_s']:6.2f} us   w {1e9 * c['per_unit_s']:6.1f} ns/atom-step"
                     f"   1 rank {1e3 * c['one_rank_step_s']:.3f} ms/step; fitted on "
                     + ", ".join(f"{p['ranks']}x{p['atoms_per_rank']:.0f}" for p in c["fitted_on"]))
    return "\n".join(lines)


def _shown(path: Path) -> str:
    """``path`` relative to the repository where it is inside it."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--study", default=None, help="a pympi-scale study's PREFIX.json (with its projection) "
                                                  "[default: run the study]")
    ap.add_argument("--steps", type=int, default=200, help="steps of each run of the study [200]")
    ap.add_argument("--repeat", type=int, default=3, help="runs per size of the study [3]")
    ap.add_argument("--lammps", default=str(ROOT / "benchmarks" / "results" / "lj-sizes.json"),
                    help="benchmarks/lj.py's JSON with LAMMPS's step times [benchmarks/results/lj-sizes.json]")
    ap.add_argument("--out", default=None, help="JSON output [benchmarks/results/projection-<host>.json]")
    args = ap.parse_args()
    before = os.getloadavg()
    study = Path(args.study) if args.study else run_study(ROOT / "benchmarks" / "out" / "projection-lj-32000",
                                                          args.steps, args.repeat)
    doc = json.loads(study.read_text())
    proj = doc.get("projection")
    if not proj or proj["model"]["floor"] is None:
        sys.exit(f"{study}: no projection with a floor (run pympi-scale with --project-nodes on pympi-nbody)")
    model = Model.from_dict(proj["model"])
    network = Network(**proj["network"])
    lj_floor = json.loads(Path(args.lammps).read_text())
    codes = [projected("pympi (study)", model, network)]
    for code in FILE_CODES:
        points = file_points(lj_floor["rows"], code, model)
        source = (f"{code} mean steps in {Path(args.lammps).name} at {len(points)} of the pympi fit's sizes "
                  "(ranks x atoms per rank); relative least squares")
        fitted = with_floor(model, points, model.work, source)
        if code != "pympi":  # the full shell's traffic
            fitted = dataclasses.replace(fitted, bytes=(FULL_SHELL * fitted.bytes[0], fitted.bytes[1]))
        codes.append(projected(code if code != "pympi" else "pympi (lj-sizes)", fitted, network))
    result = {"schema": "pympi_gpu.bench.projection/1", "label": "a model, not a measurement",
              "host": socket.gethostname(), "cpu": _cpu_model(), "cpu_detail": _cpu_detail(),
              "cores": os.cpu_count(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
                  timespec="seconds"), "load_average_before": before, "load_average_after": os.getloadavg(),
              "study": {"file": _shown(study), "command": doc["command"], "repeat": doc["repeat"],
                        "provenance": doc.get("provenance"),
                        "points": [{k: p[k] for k in ("ranks", "time", "phases", "steps", "load")}
                                   for p in doc["points"]],
                        "floor_probes": proj.get("floor_probes", [])},
              "lammps_file": {"file": Path(args.lammps).name, "cpu": lj_floor.get("cpu"),
                              "cpu_detail": lj_floor.get("cpu_detail"), "date": lj_floor.get("date"),
                              "lammps": lj_floor.get("lammps")},
              "atoms": ATOMS, "tasks_per_node": TASKS_PER_NODE, "network": to_dict(network),
              "traffic": {"messages": model.messages, "bytes": model.bytes}, "lammps_bytes_factor": FULL_SHELL,
              "codes": codes}
    cpu = result["cpu_detail"]
    about = [f"PROJECTION (a model, not a measurement) of {ATOMS:,} LJ atoms to {', '.join(map(str, NODES))} "
             f"nodes x {TASKS_PER_NODE} ranks; {network.source}",
             f"pympi: pympi-scale --ranks {','.join(str(p['ranks']) for p in doc['points'])} --repeat {doc['repeat']} "
             f"--project-nodes {','.join(map(str, NODES))} --project-tasks-per-node {TASKS_PER_NODE} -- "
             f"{' '.join([Path(doc['command'][0]).name, *doc['command'][1:]])} (floor probes: "
             f"{', '.join(str(q['size']) for q in proj.get('floor_probes', []))} atoms on "
             f"{max(p['ranks'] for p in doc['points'])} ranks), on {result['cpu']} ({cpu.get('llvm_cpu')}, "
             f"{cpu.get('vector_isa')}), {result['cores']} cores, {result['date']}",
             f"LAMMPS {lj_floor.get('lammps')} (and pympi (lj-sizes)): {Path(args.lammps).name}, on "
             f"{lj_floor.get('cpu')} ({(lj_floor.get('cpu_detail') or {}).get('llvm_cpu')}), {lj_floor.get('date')}; "
             f"LAMMPS's bytes {FULL_SHELL:g}x the study's (its full shell of ghosts)"]
    text = table(codes, about)
    print(text)
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / f"projection-{socket.gethostname()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".txt").write_text(text + "\n")
    print(f"JSON: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
