"""The one run loop of every n-body model: steps, the stop agreement, timing, writers on triggers.

A model hands the loop a *system* (this rank's share of the state, see
:class:`System`) and the loop drives it from its step to ``options.steps``:

1. ``system.advance(energy, stop)``: one step, collective (``energy``: the
   step's end is a thermo row, so the model sums its energies on the way).
   The steps before the next at which a writer is due (and not the last) are
   *quiet*: the loop hands them to ``system.advance_quiet(most, stop)``, which
   takes up to ``most`` of them where the model can (the LJ model on the CPU:
   compiled calls of many steps, a rebuild between two, until the ranks agree
   on a stop), else one.  A batch lasts no more than :data:`BATCH_SECONDS`, so
   a stop request waits no longer for it; a rank's batches may be shorter or
   longer than another's (their steps make the same MPI calls, one step at a
   time or many), so the ranks need not agree on them;
2. the stop agreement: every rank's stop request (a signal number, or 0) and
   fault (its state not finite) reduced with MAX over the ranks, so that all
   stop after the same step and none is left waiting.  A model whose step
   already makes a reduction carries the stop request in it (the LJ model's
   displacement test: :meth:`System.advance` returns the agreed signal) and
   the step costs no synchronisation of its own; otherwise
   :func:`agree` makes one (8 bytes, where the ranks' imbalance shows as
   ``waiting``).  Before anything is written the ranks also agree that no
   state is broken;
3. the writers whose trigger fires at this step (:class:`Writer`): thermo
   rows, trajectory frames, checkpoints, progress.  A row or frame that
   cannot be written (a full disk) ends the run on every rank, after the
   state is saved (:func:`save_and_raise`).

A stop request ends the run after the step in which every rank has seen it,
with a checkpoint (the writers' :meth:`Writer.finish`); a fault, or a
:class:`~pympi_gpu.nbody.blowup.BlowUp` raised by the model's own checks,
raises :class:`~pympi_gpu.nbody.blowup.BlowUp` on every rank with the step it
was found at, the broken state saved first where ``options.blowup_save`` asks.
The loop returns a :class:`LoopResult`; each model turns it into its record.
"""

from __future__ import annotations

import dataclasses
import math
import signal
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from pympi_gpu.nbody.blowup import BlowUp
from pympi_gpu.run.phases import PhaseClock, Phases, Traffic, summarise

__all__ = ["RunOptions", "Labels", "System", "Writer", "ThermoRows", "Frames", "Checkpoints", "Progress", "agree",
           "LoopResult", "run", "simulate", "standard_writers", "save_and_raise", "files_lost", "save_new",
           "STATE_SUFFIXES"]


#: the longest a batch of quiet steps may take (seconds, as the last step took): as long a stop request waits
BATCH_SECONDS = 0.05


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """How far a run goes and what it leaves, the same for every model (the physics is the model's config).

    ``steps`` is the step to reach (a restart counts from its checkpoint's
    step); ``thermo`` False makes no thermo rows at all (gravity's
    ``--benchmark``), ``thermo_every`` 0 only the first and the last;
    ``dump_every``/``checkpoint_every`` 0 or None: none between the first and
    the last.  ``stop_checkpoint`` is where a stop request writes the state
    when ``checkpoint`` is None; ``blowup_save`` where a blown-up state goes
    for inspection (None: nowhere).
    """

    steps: int
    thermo: bool = True
    thermo_every: int = 0
    dump: str | None = None
    dump_every: int = 0
    checkpoint: str | None = None
    checkpoint_every: int | None = None
    stop_checkpoint: str | None = None
    blowup_save: str | None = None
    restarted_from: str | None = None


@dataclasses.dataclass(frozen=True)
class Labels:
    """What a record says of where and why it ran, chosen at the command line's edge, not by the model."""

    backend: str = "numba"
    backend_reason: str = ""
    transport: str = "host"
    transport_reason: str = ""
    provenance: Any = None


class System(Protocol):
    """What the loop drives: one model's state on this rank.  Collective methods are called on every rank.

    ``timestep`` is the step the state is at; ``initial`` the thermo row of step 0
    (from a restart's checkpoint) or None; ``clock`` the rank's
    :class:`~pympi_gpu.run.phases.PhaseClock` (its communication and waiting);
    ``comm_time`` the seconds of communication not hidden behind work.
    :meth:`advance` returns the stop signal all ranks agreed on where the step's
    own reduction carried ``stop`` (this rank's request), else None.
    """

    comm: Any
    timestep: int
    initial: Any
    clock: PhaseClock
    comm_time: float

    def prepare(self) -> None: ...                                # collective: forces, lists
    def advance(self, energy: bool, stop: int) -> int | None: ... # collective: one step, ``timestep += 1``
    # collective: 1 to ``most`` steps without energy sums, ``timestep`` moved on by as many; their seconds
    # and the stop agreed, as advance's (a model that can make each step's reduction carry the stop)
    def advance_quiet(self, most: int, stop: int) -> tuple[Sequence[float], int | None]: ...
    def healthy(self, thorough: bool) -> bool: ...                # this rank's state finite? (local)
    def thermo(self) -> Any: ...                                  # collective: a row at ``timestep``
    def frame(self) -> dict | None: ...                           # collective: ``id x v`` on rank 0
    def save(self, path: str, initial) -> None: ...               # collective: a checkpoint
    def save_broken(self, path: str, initial, note: str) -> None: ...  # collective: a blown-up state
    def fault(self) -> BlowUp: ...                                # the error of a state found not finite
    def record(self, result: LoopResult, labels: Labels) -> Any: ...  # collective: the model's run record
    def close(self) -> None: ...                                  # what it holds on comm, freed


class Writer:
    """An operation the loop runs at the steps its trigger names (HOOMD's writers, LAMMPS's outputs).

    ``every`` > 0: at every step that is a multiple of it; ``first``: also at
    the run's first step (before any step is taken); ``last``: also at the
    last step reached.  ``writes_state``: it writes the atoms or bodies, so
    the loop first makes sure no rank's state is broken.  :meth:`write` is
    collective; :meth:`finish` runs once after the last step (``stopped``:
    a stop request ended the run there).
    """

    every: int = 0
    first: bool = False
    last: bool = False
    writes_state: bool = False
    #: its :meth:`write` is collective (a writer that is not, rank 0's progress, may skip the steps of a batch)
    collective: bool = True

    def due(self, step: int, last_step: int) -> bool:
        return bool(self.every and step % self.every == 0) or (self.last and step == last_step)

    def next_due(self, step: int, last_step: int) -> int:
        """The first step after ``step`` at which it may be due (a writer whose :meth:`due` is not
        periodic says so here: the loop takes the steps before it in one call)."""
        return min(last_step, (step // self.every + 1) * self.every) if self.every else last_step

    def write(self, run: Run) -> None:
        raise NotImplementedError

    def finish(self, run: Run, stopped: bool) -> None:
        pass

    def lost(self) -> str | None:
        """Why the run's files are no longer its own (agreed by every rank), None where they are; a writer
        that watches them says so (collective).  Asked by :func:`save_and_raise` before it saves."""
        return None


class ThermoRows(Writer):
    """Thermo rows at the first step, every ``every`` steps and the last, handed to ``sinks`` as they come.

    The rows are the run's record (``rows``); ``sinks`` (rank 0's printer, its
    thermo file) are called on every rank with each row.  The first row is
    the run's ``initial`` unless a restart brought the one of step 0.
    """

    first = True
    last = True

    def __init__(self, every: int, sinks: Sequence[Callable[[Any], None]] = ()):
        self.every = every
        self.sinks = tuple(sinks)
        self.rows: list = []

    def due(self, step: int, last_step: int) -> bool:
        return super().due(step, last_step) and (not self.rows or self.rows[-1].step != step)

    def write(self, run: Run) -> None:
        from pympi_gpu.run.outputs import OutputError

        row = run.system.thermo()
        self.rows.append(row)
        if run.initial is None:
            run.initial = row
        try:
            for sink in self.sinks:
                sink(row)
        except OutputError as exc:  # raised on every rank alike (the sink agrees)
            save_and_raise(run, exc)

    def finish(self, run: Run, stopped: bool) -> None:
        if self.rows and self.rows[-1].step != run.system.timestep:  # a stop between two rows
            self.write(run)


class Frames(Writer):
    """A trajectory frame at the first step and every ``every`` steps (``--dump``).

    A frame that cannot be written ends the run on every rank (the verdict is
    rank 0's, broadcast) with the state saved first (:func:`save_and_raise`).
    """

    first = True
    writes_state = True

    def __init__(self, every: int, writer, path: str):
        self.every, self.writer, self.path = every, writer, path

    def write(self, run: Run) -> None:
        from pympi_gpu.nbody.dump import DumpError, write_frame

        system = run.system
        try:
            with run.clock.phase("io"):
                write_frame(run.comm, self.writer, system.timestep, system.timestep * system.dt, system.frame(),
                            self.path)
        except DumpError as exc:
            save_and_raise(run, exc)


def files_lost(run: Run) -> str | None:
    """Why the run's files are no longer its own, from the writers that watch them (:meth:`Writer.lost`),
    None where they are; asking one that lost the checkpoint's file sends the last state to a name of its
    own.  Collective.

    For a write that fails between a watcher's last look and the write (a
    directory removed in between): the removal is the cause to tell.
    """
    return next((why for why in (w.lost() for w in run.writers) if why), None)


def save_and_raise(run: Run, exc: Exception):
    """After an output that failed on every rank (a full disk): save the state, then raise ``exc`` with where.

    Nothing computed is lost: where steps were taken, the state goes to the
    checkpoint a stop would write (``--checkpoint``, else the stop's default
    name), and the message says so, or that this failed too.  Collective.
    """
    ckpt = next((w for w in run.writers if isinstance(w, Checkpoints)), None)
    if not run.step_times or not (ckpt and (ckpt.path or ckpt.on_stop)):  # nothing computed yet: the start
        raise exc
    why = files_lost(run)  # a write that failed because its files were taken from the run: the cause to tell
    if why and str(exc) != why:
        from pympi_gpu.run.outputs import OutputError

        exc = OutputError(why)
    from pympi_gpu.nbody.checkpoint import CheckpointError

    step = run.system.timestep
    try:
        run.check_health()
        path = ckpt.save_final(run)
    except CheckpointError as failed:
        raise type(exc)(f"{exc}; the state at step {step} could not be saved either: {failed}") from None
    raise type(exc)(f"{exc}; the state at step {step} is saved in {path} (resume with --restart {path})") from None


class Checkpoints(Writer):
    """A checkpoint every ``every`` steps before the last, and at the end (``path``, else, if stopped, a
    name of its own from ``on_stop``: :func:`save_new`).

    :meth:`lose_path` gives ``path`` up (it is no longer the run's: removed
    with its directory, or taken): the state then goes to a name of its own.
    """

    writes_state = True

    def __init__(self, path: str | None, every: int | None, on_stop: str | None = None):
        self.path, self.every, self.on_stop = path, (every or 0) if path else 0, on_stop
        self.written = 0
        self.final: str | None = None

    def due(self, step: int, last_step: int) -> bool:
        return super().due(step, last_step) and step < last_step

    def write(self, run: Run, path: str | None = None) -> None:
        from pympi_gpu.nbody.checkpoint import CheckpointError

        try:
            with run.clock.phase("io"):
                run.system.save(path or self.path, run.initial)
        except CheckpointError as exc:  # on every rank alike
            if path is None and files_lost(run):  # a checkpoint on the way, its directory taken since the last look
                save_and_raise(run, exc)
            raise
        self.written += 1

    def finish(self, run: Run, stopped: bool) -> None:
        if self.path or (stopped and self.on_stop):
            run.check_health()  # nothing broken over a good checkpoint
            self.save_final(run)

    def lose_path(self) -> None:
        """``path`` is no longer this run's to write: the last state goes to a file named from ``on_stop``
        (the same on every rank)."""
        self.path, self.every = None, 0

    def save_final(self, run: Run) -> str:
        """The last checkpoint: to ``path``, else to a new file named from ``on_stop``; where it went."""
        if self.path:
            self.write(run, self.path)
            self.final = self.path
        else:
            with run.clock.phase("io"):
                self.final = save_new(run.comm, self.on_stop, lambda name: run.system.save(name, run.initial))
            self.written += 1
        return self.final


#: what a file :func:`save_new` names ends in, kept after its number (``run-1.ckpt.npz``)
STATE_SUFFIXES = (".ckpt.npz", ".blowup.npz", ".npz")


def save_new(comm, path: str, save: Callable[[str], None]) -> str:
    """Write a state through ``save(name)`` (collective) to a file of its own: ``path``, or ``path-1``...
    if that is taken (:func:`~pympi_gpu.run.fileio.reserve_new`); its name.  Collective over comm.

    For a file the run names itself (a stop's checkpoint without
    ``--checkpoint``, a blown-up state): it never replaces another file, and
    two runs stopped at once write two.  A failure raises
    :class:`~pympi_gpu.nbody.checkpoint.CheckpointError` on every rank and
    leaves no file.
    """
    import contextlib
    import os

    from pympi_gpu.nbody.checkpoint import CheckpointError
    from pympi_gpu.run.fileio import reserve_new

    name = error = None
    if comm.Get_rank() == 0:
        try:
            name = reserve_new(path, STATE_SUFFIXES)
        except OSError as exc:
            error = f"cannot write checkpoint {path!r}: {exc.strerror or exc}"
    name, error = comm.bcast((name, error), root=0)
    if error:
        raise CheckpointError(error)
    try:
        save(name)
    except BaseException:
        if comm.Get_rank() == 0:
            with contextlib.suppress(OSError):
                if os.path.getsize(name) == 0:  # still the empty file that held the name
                    os.unlink(name)
        raise
    return name


class Progress(Writer):
    """Rank 0's progress display: ``on_step(step, last)`` after every step (not collective)."""

    every = 1
    collective = False

    def __init__(self, on_step: Callable[[int, int], None]):
        self.on_step = on_step

    def write(self, run: Run) -> None:
        self.on_step(run.system.timestep, run.last)


def agree(comm, clock: PhaseClock, signal_number: int, fault: bool) -> tuple[int, bool]:
    """The largest stop signal (0: none) and whether any rank is broken; collective over comm."""
    from mpi4py import MPI

    flags = np.array([signal_number, int(fault)], np.int32)
    with clock.phase("waiting"):  # every rank's step meets here: the imbalance shows
        comm.Allreduce(MPI.IN_PLACE, flags, op=MPI.MAX)
    clock.sent(flags.nbytes)
    return int(flags[0]), bool(flags[1])


@dataclasses.dataclass(frozen=True)
class LoopResult:
    """What the loop measured and made; times in seconds, the largest over the ranks.

    ``median_step_time`` is the largest of the ranks' medians of the time of
    one iteration of the loop (the step, the ranks' agreement, the writers
    due), what the wall time over the steps averages; ``checkpoint``
    the file written at the end (None: none); ``energy_drift`` the relative
    change of the total energy from the initial row to the final one (None
    without rows, or where the initial energy is 0 and a relative change
    means nothing); ``momentum_change`` the distance between their momenta.
    """

    first_step: int
    last_step: int
    steps: int
    wall_time: float
    cpu_time: float
    median_step_time: float
    comm_time: float
    stopped_by: str | None
    checkpoint: str | None
    checkpoints_written: int
    restarted_from: str | None
    thermo: tuple
    initial: Any
    final: Any
    energy_drift: float | None
    momentum_change: float | None
    phases: Phases
    traffic: Traffic

    @property
    def time_per_step(self) -> float:
        return self.wall_time / self.steps if self.steps else 0.0

    def rate(self, work_per_step: float) -> float:
        """Work (interactions, atom-steps) per second over the timed steps."""
        return work_per_step * self.steps / self.wall_time if self.steps and self.wall_time > 0 else 0.0


class Run:
    """One pass of the loop over a system (see the module docstring); :func:`run` makes and drives one."""

    def __init__(self, comm, system: System, options: RunOptions, writers: Sequence[Writer], stop_requested):
        self.comm, self.system, self.options = comm, system, options
        self.writers = list(writers)
        self._thermo_writers = [w for w in self.writers if isinstance(w, ThermoRows)]
        self._collective = [w for w in self.writers if w.collective]
        self._local = [w for w in self.writers if not w.collective]
        self._event = -1  # the next step at which a collective writer may be due (-1: to be found)
        self.stop_requested = stop_requested or (lambda: 0)
        self.last = options.steps
        self.initial = system.initial
        self.clock = system.clock
        self.step_times: list[float] = []
        self.stopped: str | None = None
        self._healthy_at = None  # the step whose health every rank agreed on last

    def check_health(self) -> None:
        """Agree at once that no rank's state is broken (at this step); collective."""
        step = self.system.timestep
        if self._healthy_at != step:
            self._judge(*agree(self.comm, self.clock, 0, not self.system.healthy(thorough=True)))
            self._healthy_at = step

    def _judge(self, signal_number: int, fault: bool) -> None:
        if fault:
            raise self.system.fault()  # the step is set by run()
        if signal_number and self.stopped is None:
            self.stopped = signal.Signals(signal_number).name

    def _one_step(self) -> None:
        """One step, or a batch of quiet steps; the stop agreement; the writers due."""
        system = self.system
        t = time.perf_counter()
        step = system.timestep
        if step >= self._event:  # the next step at which a collective writer may be due, or the last
            self._event = min((w.next_due(step, self.last) for w in self._collective), default=self.last)
        # the steps before it, no more than BATCH_SECONDS take at the last step's pace
        pace = max(self.step_times[-1], 1e-9) if self.step_times else 1.0
        quiet = min(self._event - step - 1, int(BATCH_SECONDS / pace))
        request = self.stop_requested() or 0
        times = None
        if quiet > 1:
            times, agreed = system.advance_quiet(quiet, request)
        else:
            thermo_next = any(w.due(system.timestep + 1, self.last) for w in self._thermo_writers)
            agreed = system.advance(thermo_next, request)
        now = system.timestep  # (before the next event only the writers that are not collective may be due)
        due = [w for w in (self.writers if now >= self._event else self._local) if w.due(now, self.last)]
        sync = system.timestep == self.last or any(w.writes_state for w in due)
        if agreed is None:
            self._judge(*agree(self.comm, self.clock, request, not system.healthy(thorough=sync)))
            self._healthy_at = system.timestep if sync else None
        else:
            self._judge(agreed, False)
            if sync:
                self.check_health()
        if self.stopped is None:
            for w in due:
                w.write(self)
        # the whole iteration, as the mean step (the wall time over the steps) counts it: a batch's
        # steps as the model timed them, what surrounds them on its first
        elapsed = time.perf_counter() - t
        if times is None:
            self.step_times.append(elapsed)
        else:
            self.step_times.append(times[0] + elapsed - sum(times))
            self.step_times += times[1:]

    def loop(self) -> tuple[float, float]:
        """Start, step to the last step (or a stop); returns (wall, cpu) seconds of the steps."""
        system = self.system
        system.prepare()
        if any(w.first and w.writes_state for w in self.writers):
            self.check_health()
        for w in self.writers:
            if w.first:
                w.write(self)
        self.clock.reset()
        system.comm_time = 0.0
        self.comm.Barrier()
        c0, t0 = time.process_time(), time.perf_counter()
        while system.timestep < self.last and self.stopped is None:
            self._one_step()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        self.clock.settle()
        # compute: the rest of the timed steps (kernels, integration, packing), per rank
        self.clock.seconds["compute"] = max(0.0, wall - sum(self.clock.seconds[k]
                                                            for k in ("communication", "waiting", "io")))
        return wall, cpu


def run(comm, system: System, options: RunOptions, writers: Sequence[Writer] = (), *,
        stop_requested: Callable[[], int] | None = None) -> LoopResult:
    """Advance ``system`` to step ``options.steps``; collective over comm.

    ``writers`` are run at their triggers (:func:`standard_writers` makes the
    usual ones from ``options``); ``stop_requested()`` (a signal number, or 0)
    is polled after every step on every rank.  Raises
    :class:`~pympi_gpu.nbody.blowup.BlowUp` on every rank where the state blew
    up, after saving it to ``options.blowup_save`` if given.
    """
    r = Run(comm, system, options, writers, stop_requested)
    first = system.timestep
    try:
        wall, cpu = r.loop()
        for w in r.writers:
            w.finish(r, r.stopped is not None)
    except BlowUp as exc:
        if exc.step is None:
            exc.step = system.timestep
        if options.blowup_save:
            from pympi_gpu.nbody.checkpoint import CheckpointError

            note = f"{exc.check}: {exc.cause}"
            try:
                exc.saved = save_new(comm, options.blowup_save, lambda name: system.save_broken(name, r.initial, note))
            except CheckpointError as failed:  # still a blow-up (exit 3), which says what could not be saved
                exc.unsaved = str(failed)
        raise
    return _result(comm, r, first, wall, cpu)


def _result(comm, r: Run, first: int, wall: float, cpu: float) -> LoopResult:
    """The :class:`LoopResult` of a finished run (collective: the ranks' times are reduced)."""
    from mpi4py import MPI

    system = r.system
    steps = system.timestep - first
    phases, traffic = summarise(comm, r.clock, steps)
    timing = np.array([wall, cpu, system.comm_time,
                       statistics.median(r.step_times) if r.step_times else 0.0])
    comm.Allreduce(MPI.IN_PLACE, timing, op=MPI.MAX)
    rows = next((w.rows for w in r.writers if isinstance(w, ThermoRows)), [])
    ckpt = next((w for w in r.writers if isinstance(w, Checkpoints)), None)
    final = rows[-1] if rows else None
    drift = dp = None
    if r.initial is not None and final is not None:
        e0, e1 = r.initial.total_energy, final.total_energy
        drift = abs((e1 - e0) / e0) if e0 else None
        dp = math.dist(final.momentum, r.initial.momentum)
    return LoopResult(
        first_step=first, last_step=system.timestep, steps=steps, wall_time=float(timing[0]),
        cpu_time=float(timing[1]), comm_time=float(timing[2]), median_step_time=float(timing[3]),
        stopped_by=r.stopped, checkpoint=ckpt.final if ckpt else None,
        checkpoints_written=ckpt.written if ckpt else 0, restarted_from=r.options.restarted_from,
        thermo=tuple(rows), initial=r.initial, final=final, energy_drift=drift, momentum_change=dp,
        phases=phases, traffic=traffic)


def standard_writers(comm, options: RunOptions, *, on_thermo: Sequence[Callable] = (), dump=None,
                     on_step: Callable[[int, int], None] | None = None) -> list[Writer]:
    """The writers ``options`` asks for: thermo rows (to ``on_thermo``), frames (rank 0's ``dump``
    writer), checkpoints, and progress (``on_step``, rank 0's)."""
    writers: list[Writer] = []
    if options.thermo:
        writers.append(ThermoRows(options.thermo_every, on_thermo))
    if options.dump and options.dump_every:
        writers.append(Frames(options.dump_every, dump, options.dump))
    writers.append(Checkpoints(options.checkpoint, options.checkpoint_every, options.stop_checkpoint))
    if on_step is not None:
        writers.append(Progress(on_step))
    return writers


def simulate(comm, system: System, options: RunOptions, writers: Sequence[Writer] | None = None, *,
             stop_requested: Callable[[], int] | None = None, labels: Labels = Labels()):
    """:func:`run`, then the model's record of it (``system.record``); collective over comm.

    Without ``writers``, those :func:`standard_writers` makes from ``options`` (no sinks).
    """
    if writers is None:
        writers = standard_writers(comm, options)
    return system.record(run(comm, system, options, writers, stop_requested=stop_requested), labels)
