"""Launching the runs of a study and reading each run's JSON record."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from pympi_gpu.scale.points import Point
from pympi_gpu.scale.store import ResultsStore

__all__ = ["REQUIRED_KEYS", "Launch", "SimpleLaunch", "Planner", "RunOutcome", "with_json", "parse_record",
           "run_once", "run_study", "StudyRun"]

#: Keys every pympi command's ``--json`` object carries (docs/pi.md, "JSON schema", and docs/nbody.md, "Output").
REQUIRED_KEYS = ("schema", "app", "ranks", "wall_time", "throughput", "work_unit")

STDERR_TAIL = 2000  # characters of a failed run's stderr kept in the results


class Launch(Protocol):
    """What a planner returns (``pympi_gpu.mpi.launch.LaunchPlan`` has this shape)."""

    argv: tuple[str, ...]
    launcher: str
    reason: str


@dataclasses.dataclass(frozen=True)
class SimpleLaunch:
    """A launch given by hand (tests, or a site's own launcher line)."""

    argv: tuple[str, ...]
    launcher: str
    reason: str = ""


#: ``planner(command, point)`` -> the launch of ``command`` at ``point``
Planner = Callable[[Sequence[str], Point], Launch]


@dataclasses.dataclass(frozen=True)
class RunOutcome:
    """One run of the command at one point: its record, or why there is none.

    ``elapsed`` is the launch-to-exit time in seconds seen by the driver
    (start-up included); the command's own ``wall_time`` is in ``record``.
    ``load`` is this node's 1-minute load average just before the launch:
    what else was running (a study measures its neighbours too).
    """

    point: Point
    repeat: int
    ok: bool
    argv: tuple[str, ...]
    launcher: str
    returncode: int | None
    elapsed: float
    record: dict[str, Any] | None = None
    error: str | None = None
    stderr_tail: str = ""
    load: float | None = None

    def to_run(self) -> dict[str, Any]:
        """The dict stored in the results file (a floor probe's marked ``floor_probe``, with its ``size``)."""
        return {"point": self.point.key, "ranks": self.point.ranks, "nodes": self.point.nodes,
                "tasks_per_node": self.point.tasks_per_node, "floor_probe": self.point.size is not None,
                "size": self.point.size, "repeat": self.repeat, "ok": self.ok,
                "argv": list(self.argv), "launcher": self.launcher, "returncode": self.returncode,
                "elapsed": self.elapsed, "load": self.load, "error": self.error, "stderr_tail": self.stderr_tail,
                "record": self.record, "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


@dataclasses.dataclass(frozen=True)
class StudyRun:
    """What :func:`run_study` did: the runs it made and the ones it skipped."""

    outcomes: tuple[RunOutcome, ...]
    skipped: int
    runs: tuple[dict[str, Any], ...]   # every stored run, old and new, in file order


def with_json(command: Sequence[str]) -> list[str]:
    """The command with ``--json`` added (once) so that it prints its record."""
    cmd = list(command)
    return cmd if "--json" in cmd else cmd + ["--json"]


def parse_record(stdout: str) -> dict[str, Any]:
    """The one JSON object a pympi command printed on stdout.

    Tolerates lines printed around it (a launcher's banner, say): the last
    top-level object that decodes wins.

    Raises
    ------
    ValueError
        No JSON object, or one without the keys of a pympi record.
    """
    text = stdout.strip()
    doc = None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        decoder = json.JSONDecoder()
        starts = [i for i, ch in enumerate(text) if ch == "{" and (i == 0 or text[i - 1] == "\n")]
        for i in reversed(starts):
            try:
                doc, _ = decoder.raw_decode(text, i)
                break
            except json.JSONDecodeError:
                continue
    if not isinstance(doc, dict):
        raise ValueError("no JSON object on stdout" + (f" (it began {text[:120]!r})" if text else " (empty)"))
    missing = [k for k in REQUIRED_KEYS if k not in doc]
    if missing:
        raise ValueError(f"the JSON record lacks {', '.join(missing)}")
    return doc


def _kill_group(proc: subprocess.Popen) -> None:
    """End a launcher and every rank it started, at once (SIGKILL): the run is discarded.

    Not a stop request (SIGTERM): the ranks would answer it as one and write
    a checkpoint of their own (``pympi-nbody-N.ckpt.npz`` in the working
    directory) for a run no one resumes.  Its descendants are killed too, not
    only its session: MPICH's proxy and ranks run in sessions of their own,
    and Open MPI's ranks outlive a killed mpirun.
    """
    victims = [proc.pid, *_descendants(proc.pid)]
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _descendants(root: int) -> list[int]:
    """The processes below ``root`` (children first), from /proc; none where there is no /proc."""
    parents = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat") as fh:
                parents[int(entry)] = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    found, frontier = [], [root]
    while frontier:
        frontier = [pid for pid, ppid in parents.items() if ppid in frontier]
        found += frontier
    return found


def run_once(launch: Launch, point: Point, repeat: int, *, timeout: float | None = None,
             env: Mapping[str, str] | None = None) -> RunOutcome:
    """Run one launch to completion and read its record; never raises for a failed run.

    The launcher runs in its own session so that a timeout or an interrupt
    ends all its ranks; ``KeyboardInterrupt`` is passed on after that.
    """
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return dataclasses.replace(_launch(launch, point, repeat, timeout, env), load=load)


def _launch(launch: Launch, point: Point, repeat: int, timeout: float | None,
            env: Mapping[str, str] | None) -> RunOutcome:
    argv = tuple(launch.argv)
    t0 = time.perf_counter()
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=None if env is None else dict(env), start_new_session=True)
    except OSError as exc:
        return RunOutcome(point, repeat, False, argv, launch.launcher, None,
                          time.perf_counter() - t0, error=f"cannot start {argv[0]}: {exc}")
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        return RunOutcome(point, repeat, False, argv, launch.launcher, proc.returncode,
                          time.perf_counter() - t0, error=f"timed out after {timeout:g} s",
                          stderr_tail=(err or "")[-STDERR_TAIL:])
    except BaseException:
        _kill_group(proc)
        raise
    elapsed = time.perf_counter() - t0
    tail = (err or "")[-STDERR_TAIL:]
    if proc.returncode != 0:
        last = next((ln for ln in reversed(tail.splitlines()) if ln.strip()), "")
        return RunOutcome(point, repeat, False, argv, launch.launcher, proc.returncode, elapsed,
                          error=f"exit status {proc.returncode}" + (f": {last.strip()}" if last else ""),
                          stderr_tail=tail)
    try:
        record = parse_record(out)
    except ValueError as exc:
        return RunOutcome(point, repeat, False, argv, launch.launcher, 0, elapsed, error=str(exc),
                          stderr_tail=tail)
    if record.get("ranks") != point.ranks:
        # Typically a container MPI that does not talk to the host launcher:
        # every rank is a world of its own.
        return RunOutcome(point, repeat, False, argv, launch.launcher, 0, elapsed, record=record,
                          error=f"the command ran on {record.get('ranks')} rank(s), not {point.ranks} "
                                "(does its MPI match the launcher's?)", stderr_tail=tail)
    return RunOutcome(point, repeat, True, argv, launch.launcher, 0, elapsed, record=record,
                      stderr_tail=tail)


def run_study(command: Sequence[str], points: Sequence[Point], repeat: int, planner: Planner,
              store: ResultsStore, *, timeout: float | None = None,
              env: Mapping[str, str] | None = None,
              on_start: Callable[[Point, int, Launch], None] | None = None,
              on_done: Callable[[RunOutcome], None] | None = None) -> StudyRun:
    """Run ``command`` ``repeat`` times at each point, skipping runs already stored.

    Each run is appended to ``store`` as soon as it ends.  A failed run is
    stored with its error and ends that point (its remaining repeats would
    fail alike); the study goes on with the next point.  Failed runs are
    tried again by a later call (resume), successful ones never.

    Parameters
    ----------
    command : sequence of str
        The pympi command as the user gave it; ``--json`` is added.
    points : sequence of Point
    repeat : int
        Runs per point (>= 1).
    planner : callable
        ``planner(argv, point)`` -> a launch with ``argv``, ``launcher`` and
        ``reason`` (``pympi_gpu.mpi.launch.plan`` at the command line).
    timeout : float, optional
        Seconds one run may take before its launcher is killed.
    """
    if repeat < 1:
        raise ValueError("repeat must be >= 1")
    stored = store.load()
    done = {(r["point"], r["repeat"]) for r in stored if r.get("ok")}
    argv = with_json(command)
    outcomes, skipped = [], 0
    for point in points:
        for i in range(repeat):
            if (point.key, i) in done:
                skipped += 1
                continue
            launch = planner(argv, point)
            if on_start:
                on_start(point, i, launch)
            outcome = run_once(launch, point, i, timeout=timeout, env=env)
            store.append(outcome.to_run())
            outcomes.append(outcome)
            if on_done:
                on_done(outcome)
            if not outcome.ok:
                break
    return StudyRun(tuple(outcomes), skipped, tuple(store.load()))
