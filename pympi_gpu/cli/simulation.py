"""The run harness both n-body commands share (``pympi-nbody``, gravity and LJ).

What a model's command needs between parsing its options and printing its
record, but the device (:mod:`pympi_gpu.cli.devices`): the output files
claimed before the run (:func:`claim_outputs`: a trajectory or
thermo log of another run refused, the checkpoint locked), rank 0's progress
display, the temporaries a killed checkpoint writer left, a checkpoint or
output error and the blow-up made one message each (a blow-up exits 3), the
summary's closing lines and the exit status of a failed ``--verify`` (the
stop signals are :mod:`pympi_gpu.cli.signals`).  It imports no model: each
model's command imports it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys

import click

from pympi_gpu.cli.common import fail
from pympi_gpu.cli.options import given
from pympi_gpu.cli.signals import Stop
from pympi_gpu.device.device import Device
from pympi_gpu.nbody.blowup import EXIT_STATUS
from pympi_gpu.nbody.loop import Labels, RunOptions, Writer

#: what a second Ctrl-C says of the run's files
TWICE = "nothing more written (checkpoints on disk are as they were)"

__all__ = ["TWICE", "arithmetic_unsaid", "ThermoOutput", "check_thermo_file", "Outputs", "claim_outputs", "labels",
           "progress", "simulating", "format_tail", "exit_if_unverified", "exit_if_stopped",
           "clear_stale_temporaries", "unusable", "recorded_values", "restart_values", "recorded_row", "execute",
           "StopAgreed", "OutputsKept", "report"]


def labels(device: Device, provenance) -> Labels:
    """What a run's record says of where it ran, and why: the device's choice and the run's provenance."""
    return Labels(backend=device.backend, backend_reason=device.backend_reason, transport=device.transport,
                  transport_reason=device.transport_reason, provenance=provenance)


def progress(comm, enabled: bool, bar_ok: bool):
    """Rank 0's progress: a bar on a terminal (``bar_ok``), else plain lines every ~10 s.

    Returns ``(bar, on_step)``: the rich bar to stop at the end (or None) and
    the per-step callback (or None).
    """
    if not enabled or comm.Get_rank() != 0:
        return None, None
    if not sys.stderr.isatty():
        from pympi_gpu.cli.settings import progress_interval
        from pympi_gpu.run.progress import DEFAULT_INTERVAL, LineProgress

        return None, LineProgress(sys.stderr, "pympi-nbody", interval=progress_interval(default=DEFAULT_INTERVAL))
    if not bar_ok:
        return None, None
    from rich.console import Console
    from rich.progress import Progress

    bar = Progress(transient=True, console=Console(stderr=True))
    task = bar.add_task("n-body steps", total=None)
    bar.start()

    def on_step(step, last):
        bar.update(task, completed=step, total=last)
    return bar, on_step


class BlownUp(click.ClickException):
    """A run that blew up, as one message and exit status 3."""

    exit_code = EXIT_STATUS


@contextlib.contextmanager
def simulating(bar, stop: Stop):
    """Around a run: a checkpoint error or a blow-up becomes one message; the bar stops, the stop request is over."""
    from pympi_gpu.nbody.blowup import BlowUp
    from pympi_gpu.nbody.checkpoint import CheckpointError
    from pympi_gpu.run.outputs import OutputError

    try:
        yield
    except (CheckpointError, OutputError) as exc:  # raised on every rank alike: one message, exit 1
        raise click.ClickException(str(exc)) from None
    except BlowUp as exc:
        raise BlownUp(str(exc)) from None
    finally:
        if bar is not None:
            bar.stop()
        stop.finished()


@contextlib.contextmanager
def arithmetic_unsaid():
    """NumPy's floating-point warnings (an overflow, an invalid value, a division by zero) left unsaid for
    the block: a run's arithmetic overflows only in a state that blew up, and the run's own checks find
    that state and say so in one message (:class:`BlownUp`, exit status 3); the warnings, printed first,
    once per rank and by the simulator's kernels too, said it again in NumPy's words.  The filter is the
    process's, so it holds in every thread (the simulator runs kernels in threads of its own)."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"(overflow|invalid value|divide by zero|underflow) encountered",
                                RuntimeWarning)
        yield


def clear_stale_temporaries(comm, paths) -> None:
    """Remove what killed checkpoint writers left beside ``paths``; rank 0 says so once.  Collective."""
    from pympi_gpu.run.fileio import remove_stale_temporaries

    if comm.Get_rank() == 0:
        for path in dict.fromkeys(p for p in paths if p):
            removed = remove_stale_temporaries(path)
            if removed:
                click.echo(f"pympi-nbody: removed {len(removed)} temporary file(s) a killed checkpoint writer "
                           f"left beside {path} ({', '.join(p.name for p in removed)})", err=True)
    comm.Barrier()


def format_tail(run, quantity: str, items: str, bound: str = ".3e") -> list[str]:
    """The lines that end both models' summaries: stopped, checkpoint, verify.

    ``quantity`` is what verify compared (``acceleration``, ``force``), ``items``
    what it sampled (``bodies``, ``atoms``), ``bound`` the format of its bound.
    """
    lines = []
    if run.stopped_by:
        lines.append(f"  stopped    by {run.stopped_by} after step {run.last_step}")
    if run.checkpoint:
        lines.append(f"  checkpoint {run.checkpoint} (step {run.last_step}; resume with --restart)")
    v = run.verification
    if v is not None:
        lines.append(f"  verify     {'PASSED' if v.passed else 'FAILED'}: {quantity} error {v.max_error:.3e} "
                     f"(bound {v.error_bound:{bound}}, {v.sample} {items}, median relative "
                     f"{v.median_relative_error:.3e})"
                     + (f", energy drift {v.energy_drift:.3e} (bound {v.drift_bound:.1e})"
                        if v.energy_drift is not None else ""))
        for f in v.failures:
            lines.append(f"  FAILED     {f}")
    return lines


def exit_if_unverified(comm, verification) -> None:
    """Exit with status 1 (rank 0 says why) where ``--verify`` ran and failed."""
    if verification is not None and not verification.passed:
        if comm.Get_rank() == 0:
            click.echo("pympi-nbody: verification FAILED: " + "; ".join(verification.failures), err=True)
        sys.exit(1)  # every rank holds the same verdict; click's Exit would be swallowed here


def exit_if_stopped(comm, run) -> None:
    """After a run that a signal stopped: one line on stderr (where, what was saved), then its exit status
    (:func:`~pympi_gpu.cli.signals.exit_status`: 130 for Ctrl-C, 129 for a closed terminal, else 0)."""
    import signal

    from pympi_gpu.cli.signals import exit_status, signal_name

    if not run.stopped_by:
        return
    signum = signal.Signals[run.stopped_by]
    if comm.Get_rank() == 0:
        saved = (f"checkpoint {run.checkpoint} written (resume with --restart {run.checkpoint})"
                 if run.checkpoint else "no checkpoint asked for")
        click.echo(f"pympi-nbody: stopped by {signal_name(signum)} after step {run.last_step}; {saved}", err=True)
    if exit_status(signum):
        sys.exit(exit_status(signum))


class ThermoOutput:
    """Rank 0's thermo as it happens: each row printed when it is computed, and appended to a file.

    ``model`` is the model's thermo module (``KEYWORDS``, ``HEADER``,
    ``values``, ``format_row``); ``echo`` prints the rows on stdout (not with
    ``--json``, whose stdout is one object), ``title`` first; ``log`` is rank
    0's :class:`~pympi_gpu.run.thermolog.ThermoLog` of ``--thermo-file``
    (:func:`claim_outputs` opens it), or ``path`` to open one here.  Called
    with each row on every rank: only rank 0 writes, and where there is a
    file its verdict is broadcast, so a row that cannot be written raises
    :class:`~pympi_gpu.run.outputs.OutputError` on every rank.  :meth:`close`
    ends the file.
    """

    def __init__(self, comm, model, *, echo: bool, path: str | None = None, title: str | None = None, log=None):
        from pympi_gpu.run.thermolog import ThermoLog

        self.comm, self.rank0 = comm, comm.Get_rank() == 0
        self.model, self.echo, self.title = model, echo and self.rank0, title
        self.checked = bool(path) or log is not None  # the same on every rank: a file is written
        if self.rank0 and log is None and path:
            log = ThermoLog(path, model.KEYWORDS)
        self.log = log if self.rank0 else None
        self.rows = 0

    def start(self) -> None:
        """Print the run's title line (before the rows)."""
        if self.echo and self.title:
            click.echo(self.title)

    def __call__(self, row) -> None:
        """Print and write ``row`` on rank 0; collective where there is a file (the write's verdict)."""
        from pympi_gpu.run.outputs import OutputError

        error = None
        if self.rank0:
            if self.log is not None:  # the file first: a row on the screen is in the file, whenever the job dies
                try:
                    self.log.write(self.model.values(row))
                except OutputError as exc:
                    error = str(exc)
            if self.echo:
                if not self.rows:
                    click.echo("  thermo   " + self.model.HEADER)
                click.echo("           " + self.model.format_row(row))  # click.echo flushes
            self.rows += 1
        if self.checked:
            error = self.comm.bcast(error, root=0)
            if error:
                raise OutputError(error)

    @property
    def shown(self) -> bool:
        """Whether the title and the rows are on stdout already (the summary then leaves them out)."""
        return self.echo

    def close(self) -> None:
        if self.log is not None:
            self.log.close()


def check_thermo_file(path: str | None) -> None:
    """Refuse a ``--thermo-file`` whose suffix names no format or whose directory is missing (exit 2)."""
    if not path:
        return
    import os

    from pympi_gpu.run.thermolog import format_of

    try:
        format_of(path)
    except ValueError as exc:
        fail(f"--thermo-file: {exc}")
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        fail(f"--thermo-file: the directory of {path!r} does not exist")
    if os.path.isdir(path):
        fail(f"--thermo-file: {path!r} is a directory")


@dataclasses.dataclass
class Outputs:
    """A run's output files, claimed before it starts by :func:`claim_outputs` (rank 0's; None elsewhere).

    ``thermo`` the open :class:`~pympi_gpu.run.thermolog.ThermoLog`, ``dump``
    the trajectory writer, ``claim`` the :class:`~pympi_gpu.run.claims.Claim`
    that holds every file (the checkpoint's lock, the trajectory's and the
    log's own) until :meth:`close`.
    """

    thermo: object = None
    dump: object = None
    claim: object = None

    def close(self) -> None:
        """End the files and let go of them."""
        self._end(abandon=False)

    def abandon(self) -> None:
        """Close, and remove the files the claim made: a refused run leaves the directory as it was."""
        self._end(abandon=True)

    def _end(self, abandon: bool) -> None:
        for item in (self.thermo, self.dump):
            if item is not None:
                item.close()
        self.thermo = self.dump = None
        if self.claim is not None:
            self.claim.abandon() if abandon else self.claim.release()
            self.claim = None


def claim_outputs(comm, args, identity, *, thermo_module, box, through: int | None = None) -> Outputs:
    """Claim ``--checkpoint``, ``--dump`` and ``--thermo-file`` for this run and open them; collective over comm.

    Rank 0 claims every file (:mod:`pympi_gpu.run.claims`: locked for the
    run, none named twice, each a regular file or absent), then judges what
    each holds (:func:`pympi_gpu.run.outputs.decide`: another run's file, a
    file of another kind, one that holds data without ``--restart`` or
    ``--overwrite``, one that cannot be written) and opens them; its verdict
    is broadcast, so a refusal is one message and exit status 2 on every
    rank, before anything was written.  ``identity`` is the run's
    :class:`~pympi_gpu.run.outputs.RunIdentity`, ``box`` the periodic box's edges
    (three, or a cube's one; None: open space), ``through`` the step of the restart's checkpoint: a
    trajectory or log continued is checked whole, and refused where damaged
    before its end (a torn last frame or row is cut) or holding a step past it
    that the restart does not write again (those it does, the rows and frames
    of a run killed after its last checkpoint, are cut, said on stderr).
    """
    from pympi_gpu.nbody.checkpoint import CheckpointError
    from pympi_gpu.run.outputs import OutputError

    outputs, error = Outputs(), None
    if comm.Get_rank() == 0:
        try:
            _claim(outputs, args, identity, thermo_module, box, through)
        except (OutputError, CheckpointError) as exc:
            outputs.abandon()
            error = str(exc)
    error = comm.bcast(error, root=0)
    if error:
        fail(error)
    if outputs.claim is not None:
        for why in outputs.claim.unlocked:
            click.echo(f"pympi-nbody: {why}", err=True)
    for item in (outputs.thermo, outputs.dump):
        if getattr(item, "note", None):
            click.echo(f"pympi-nbody: {item.note}", err=True)
    return outputs


#: what another run does with a file this one claims, in the refusal
_BUSY = "being written by another pympi-nbody run"


def _claim(outputs: Outputs, args, identity, thermo_module, box, through) -> None:
    """Rank 0's part of :func:`claim_outputs`: every file locked and judged first, then the files opened."""
    from pympi_gpu.nbody import checkpoint, dump
    from pympi_gpu.run import thermolog
    from pympi_gpu.run.claims import Claim, file_key, lock_path_of
    from pympi_gpu.run.outputs import Cadence, OutputRefused, decide

    claim = outputs.claim = Claim("pympi-nbody")
    claim.distinct(("--checkpoint", args.checkpoint),
                   ("--checkpoint's lock file", args.checkpoint and lock_path_of(args.checkpoint)),
                   ("--dump", args.dump), ("--thermo-file", args.thermo_file))
    overwrite, restart = bool(getattr(args, "overwrite", False)), bool(args.restart)
    if args.checkpoint:
        claim.beside("--checkpoint", args.checkpoint, _BUSY)
        if not (restart and file_key(args.restart) == file_key(args.checkpoint)):  # a run continues its own
            decide("--checkpoint", args.checkpoint, checkpoint.inspect(args.checkpoint), identity,
                   restart=restart, overwrite=overwrite)
    modes = {}
    for option, path, module in (("--dump", args.dump, dump), ("--thermo-file", args.thermo_file, thermolog)):
        if path:
            claim.in_place(option, path, _BUSY)
            try:
                found = module.inspect(path)
            except OSError as exc:
                raise OutputRefused(f"{option} {path!r} cannot be read: {exc.strerror or exc}") from None
            modes[option] = decide(option, path, found, identity, restart=restart, overwrite=overwrite)
    if args.dump:
        try:
            outputs.dump = dump.open_dump(args.dump, box, identity, modes["--dump"],
                                          None if through is None else Cadence(through, args.dump_every or 100,
                                                                               args.steps))
        except OSError as exc:
            raise OutputRefused(f"--dump {args.dump!r} cannot be written: {exc.strerror or exc}") from None
        except OutputRefused as exc:  # damaged, or past the checkpoint: its words name the file
            raise OutputRefused(f"--dump {exc}") from None
    if args.thermo_file:
        try:
            outputs.thermo = thermolog.ThermoLog(args.thermo_file, thermo_module.KEYWORDS, identity,
                                                 modes["--thermo-file"],
                                                 None if through is None else Cadence(through, args.thermo,
                                                                                      args.steps))
        except OutputRefused as exc:
            raise OutputRefused(f"--thermo-file {exc}") from None


def unusable(path: str, why: str) -> None:
    """Refuse a ``--restart`` file whose record cannot be run (exit 2)."""
    fail(f"--restart: {path!r} is not a usable checkpoint: {why}")


def recorded_values(ctx, path: str, meta: dict, names) -> dict:
    """The values a checkpoint records for the options ``names``, checked by the rules of the command line.

    Each goes through its option's own type (the same conversion and range
    as when typed), so a checkpoint can hold nothing the command line would
    refuse; one that does is refused by :func:`unusable` (exit 2).
    """
    params = {p.name: p for p in ctx.command.params}
    out = {}
    for name in names:
        param = params[name]
        label = param.opts[0]
        if name not in meta:
            unusable(path, f"it records no {label}")
        value = meta[name]
        try:
            if isinstance(param.type, click.types.IntParamType) and isinstance(value, float) \
                    and not value.is_integer():  # click would cut 7.5 to 7
                raise click.BadParameter(f"{value!r} is not a whole number")
            out[name] = param.type.convert(value, param, ctx)
        except click.BadParameter as exc:
            unusable(path, f"its {label} {meta[name]!r} is refused: {exc.message}")
    return out


def restart_values(ctx, restart: str, meta: dict, values: dict) -> dict:
    """The options a checkpoint fixes, from its ``meta`` (:func:`recorded_values`); an option given that
    differs is refused (exit 2).  ``values`` maps each such option's name to what the command line holds."""
    recorded = recorded_values(ctx, restart, meta, values)
    for name, value in values.items():
        if given(ctx, name) and value != recorded[name]:
            fail(f"--restart: {restart!r} was run with --{name.replace('_', '-')} {recorded[name]}, not {value}")
    return recorded


def recorded_row(path: str, meta: dict, row_type):
    """The thermo row of step 0 a checkpoint records (``meta["initial"]``) as ``row_type``, or None.

    ``row_type`` is the model's frozen dataclass of a row: ``step`` a whole
    number, ``momentum`` three numbers, every other field a number; all
    finite.  A field with a default of None (the LJ row's ``econserve``) may be
    None or left out.  Anything else is refused by :func:`unusable`.
    """
    import math

    initial = meta.get("initial")
    if initial is None:
        return None
    fields = dataclasses.fields(row_type)
    names = [f.name for f in fields]
    optional = {f.name for f in fields if f.default is None}
    if not isinstance(initial, dict) or not set(names) - optional <= set(initial) <= set(names):
        unusable(path, f"its initial thermo row is not a record of {', '.join(names)}")

    def number(v) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    values = {}
    for name in names:
        v = initial.get(name)
        if name in optional and v is None:
            ok = True
        elif name == "momentum":
            ok = isinstance(v, (list, tuple)) and len(v) == 3 and all(number(c) for c in v)
            v = tuple(float(c) for c in v) if ok else v
        elif name == "step":
            ok = isinstance(v, int) and not isinstance(v, bool) and v >= 0
        else:
            ok = number(v)
        if not ok:
            unusable(path, f"its initial thermo row's {name} {v!r} is not a finite number"
                     + (" triple" if name == "momentum" else ""))
        values[name] = v
    return row_type(**values)


def execute(comm, system, options: RunOptions, *, device: Device, provenance, stop: Stop, thermo_module,
            title: str, args, box, outputs: Outputs | None = None):
    """Run ``system`` through the loop with the command's writers; collective over comm.

    Rank 0 prints the title and each thermo row as it comes (not with
    ``--json``) and appends them to ``--thermo-file``, shows progress, writes
    the ``--dump`` frames, into the files ``outputs`` holds (claimed here,
    with no run identity to check, if None).  Returns ``(record, shown)``:
    ``shown`` says the title and rows are on stdout already.
    """
    from pympi_gpu.nbody import loop

    if outputs is None:
        outputs = claim_outputs(comm, args, None, thermo_module=thermo_module, box=box)
    clear_stale_temporaries(comm, [options.checkpoint, options.stop_checkpoint])
    rows = ThermoOutput(comm, thermo_module, echo=not args.as_json and options.thermo, path=args.thermo_file,
                        title=title, log=outputs.thermo)
    rows.start()
    bar, on_step = progress(comm, not args.quiet, not args.as_json and options.steps - system.timestep >= 20)
    with simulating(bar, stop), contextlib.closing(outputs):
        writers = [StopAgreed(stop), *loop.standard_writers(comm, options, on_thermo=[rows], dump=outputs.dump,
                                                            on_step=on_step)]
        if args.checkpoint or args.dump or args.thermo_file:  # (the same on every rank)
            writers.insert(1, OutputsKept(comm, outputs.claim, writers, rows_to_file=bool(args.thermo_file)))
        if hasattr(system, "hear_stop"):  # a request that comes during a batch of steps, carried in it
            stop.listen(system.hear_stop)
        run = loop.simulate(comm, system, options, writers, stop_requested=stop.requested,
                            labels=labels(device, provenance))
    return run, rows.shown


class StopAgreed(Writer):
    """Tells the stop's watchdog that the ranks left the loop together: it never fires, it only finishes.

    First among the writers, so that the watchdog stands down before the
    final thermo row and checkpoint (which may take long) are written.
    """

    def __init__(self, stop: Stop):
        self.stop = stop

    def finish(self, run, stopped: bool) -> None:
        self.stop.honoured()


class OutputsKept(Writer):
    """Before the files are written, that they are still the ones claimed; else the run stops as where a
    write fails, its state saved (:func:`~pympi_gpu.nbody.loop.save_and_raise`).

    Due where a writer of files is due (the rows' only where they go to
    a file: ``rows_to_file``), and before the last ones (first after
    :class:`StopAgreed`).  Rank 0 asks its
    :class:`~pympi_gpu.run.claims.Claim` (``claim``, None elsewhere) and the
    verdict is broadcast: a file removed (a directory ``rm -rf``'d under the
    run), moved away or replaced by another is never written again, its
    directory never made again; where the checkpoint's was lost with it, the
    state goes to the file a stop without ``--checkpoint`` writes, and the
    one message says where.
    """

    def __init__(self, comm, claim, writers, rows_to_file: bool):
        from pympi_gpu.nbody.loop import Checkpoints, Frames, ThermoRows

        self.comm, self.claim = comm, claim
        self.watched = [w for w in writers if isinstance(w, (Frames, Checkpoints))
                        or (rows_to_file and isinstance(w, ThermoRows))]
        self.checkpoints = next((w for w in writers if isinstance(w, Checkpoints)), None)

    def due(self, step: int, last_step: int) -> bool:
        return any(w.due(step, last_step) for w in self.watched)

    def next_due(self, step: int, last_step: int) -> int:
        return min((w.next_due(step, last_step) for w in self.watched), default=last_step)

    def lost(self) -> str | None:
        """Rank 0's verdict on the claimed files, broadcast; where the checkpoint's was lost, the state's
        last save goes to a name of its own (collective)."""
        why, options = self.claim.lost() if self.claim is not None else (None, [])
        why, lost_checkpoint = self.comm.bcast((why, "--checkpoint" in options), root=0)
        if why and lost_checkpoint and self.checkpoints is not None:
            self.checkpoints.lose_path()
        return why

    def write(self, run) -> None:
        from pympi_gpu.nbody.loop import save_and_raise
        from pympi_gpu.run.outputs import OutputError

        why = self.lost()
        if why:
            save_and_raise(run, OutputError(why))

    def finish(self, run, stopped: bool) -> None:
        self.write(run)


def report(comm, run, *, as_json: bool, human, document) -> None:
    """Rank 0 prints the record (``document()`` as JSON, or ``human()``); then the exit status of
    a failed ``--verify`` (1) or a stop (:func:`exit_if_stopped`)."""
    if comm.Get_rank() == 0:
        if as_json:
            import json

            click.echo(json.dumps(document(), indent=2))
        else:
            click.echo(human())
    exit_if_unverified(comm, run.verification)
    exit_if_stopped(comm, run)
