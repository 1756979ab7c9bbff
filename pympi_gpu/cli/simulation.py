"""The run harness both n-body commands share (``pympi-nbody``, gravity and LJ).

What a model's command needs between parsing its options and printing its
record: one collective choice of backend and transport, the GPU bound, rank
0's progress display, the temporaries a killed checkpoint writer left, the
checkpoint error and the blow-up made one message each (a blow-up exits 3),
the summary's closing lines and the exit status of a failed ``--verify``
(the stop signals are :mod:`pympi_gpu.cli.signals`).  It imports no model:
each model's command imports it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys

import click

from pympi_gpu.cli.common import fail, given, prove_device_transport
from pympi_gpu.cli.signals import Stop
from pympi_gpu.nbody.blowup import EXIT_STATUS
from pympi_gpu.nbody.loop import Labels, RunOptions, Writer

#: what a second Ctrl-C says of the run's files
TWICE = "nothing more written (checkpoints on disk are as they were)"

__all__ = ["TWICE", "ThermoOutput", "check_thermo_file", "open_trajectory", "Devices", "choose_devices", "progress",
           "simulating", "format_tail", "exit_if_unverified", "exit_if_stopped", "clear_stale_temporaries",
           "restart_values", "execute", "StopAgreed", "report"]


@dataclasses.dataclass(frozen=True)
class Devices:
    """Where a run computes and how its messages travel, with the reasons, the same on every rank."""

    backend: str
    backend_reason: str
    transport: str
    transport_reason: str
    binding: dict          # the GPU binding (pympi_gpu.device.gpu.bind_device), {} on CPUs
    awareness: object      # the agreed CudaAwareness, or None where it was not asked

    @property
    def gpu(self) -> bool:
        return self.backend == "gpu"

    def provenance(self) -> dict[str, str]:
        """The backend's entries for the run's provenance."""
        from pympi_gpu.device.gpu import describe

        return {"backend_reason": self.backend_reason,
                **({"gpu": describe(self.binding)} if self.binding else {})}

    def labels(self, provenance) -> Labels:
        """What the run's record says of where it ran, and why."""
        return Labels(backend=self.backend, backend_reason=self.backend_reason, transport=self.transport,
                      transport_reason=self.transport_reason, provenance=provenance)


def choose_devices(comm, backend: str, transport: str, early, dtype) -> Devices:
    """Decide the backend and the transport once for the whole job; collective over comm.

    ``backend`` is the option (``auto`` takes the GPU only if every rank has
    one; ``gpu`` is refused, with the rank, where some rank has none);
    ``early`` the binding made before ``MPI_Init``
    (:func:`~pympi_gpu.cli.common.select_gpu_early`); ``dtype`` that of the
    device buffers that prove a CUDA-aware MPI with a round trip (the run's
    own).  Every refusal is one usage error on every rank.
    """
    if backend == "auto":
        from pympi_gpu.device.backend_choice import gpu_everywhere

        has_gpu, why = gpu_everywhere(comm)
        name, reason = ("gpu" if has_gpu else "numba"), f"auto: {why}"
    else:
        name, reason = backend, "requested"
    if backend == "gpu":
        from pympi_gpu.device.gpu import gpu_usable, simulator

        usable, why = gpu_usable()
        # Decided together, so that a rank on a node without a GPU leaves none waiting.
        verdicts = comm.allgather((usable or simulator(), why))
        bad = [(r, w) for r, (ok, w) in enumerate(verdicts) if not ok]
        if bad:
            fail(f"--backend gpu: no usable GPU on rank {bad[0][0]} ({bad[0][1]}); use --backend numba or auto")
    binding, awareness = {}, None
    if name == "gpu":
        from pympi_gpu.device.gpu import bind_device

        binding = bind_device(comm, early)
        if transport in ("auto", "device"):
            from pympi_gpu.mpi.cuda_aware import agree, detect

            awareness = agree(comm, detect())  # one verdict, so that no rank refuses alone
    from pympi_gpu.mpi.cuda_aware import choose_transport

    try:
        transport_name, transport_why = choose_transport(transport, name == "gpu", awareness)
    except ValueError as exc:
        fail(str(exc))
    if transport_name == "device" and not awareness.forced:
        from pympi_gpu.device.buffers import DeviceBuffers

        transport_why = prove_device_transport(comm, DeviceBuffers(dtype), transport, transport_why)
    return Devices(name, reason, transport_name, transport_why, binding, awareness)


def progress(comm, enabled: bool, bar_ok: bool):
    """Rank 0's progress: a bar on a terminal (``bar_ok``), else plain lines every ~10 s.

    Returns ``(bar, on_step)``: the rich bar to stop at the end (or None) and
    the per-step callback (or None).
    """
    if not enabled or comm.Get_rank() != 0:
        return None, None
    if not sys.stderr.isatty():
        from pympi_gpu.run.progress import LineProgress, interval_from_env

        return None, LineProgress(sys.stderr, "pympi-nbody", interval=interval_from_env())
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
    from pympi_gpu.nbody.dump import DumpError

    try:
        yield
    except (CheckpointError, DumpError) as exc:
        raise click.ClickException(str(exc)) from None
    except BlowUp as exc:
        raise BlownUp(str(exc)) from None
    finally:
        if bar is not None:
            bar.stop()
        stop.finished()


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
    ``--json``, whose stdout is one object), ``title`` first; ``path`` is
    ``--thermo-file`` (CSV or YAML by its suffix, flushed per row).  Called
    with each row on every rank; only rank 0 acts.  :meth:`close` ends the file.
    """

    def __init__(self, comm, model, *, echo: bool, path: str | None, title: str | None = None):
        from pympi_gpu.run.thermolog import ThermoLog

        self.rank0 = comm.Get_rank() == 0
        self.model, self.echo, self.title = model, echo and self.rank0, title
        self.log = ThermoLog(path, model.KEYWORDS) if path and self.rank0 else None
        self.rows = 0

    def start(self) -> None:
        """Print the run's title line (before the rows)."""
        if self.echo and self.title:
            click.echo(self.title)

    def __call__(self, row) -> None:
        if not self.rank0:
            return
        if self.echo:
            if not self.rows:
                click.echo("  thermo   " + self.model.HEADER)
            click.echo("           " + self.model.format_row(row))  # click.echo flushes
        if self.log is not None:
            self.log.write(self.model.values(row))
        self.rows += 1

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


def open_trajectory(comm, path: str | None, box: float | None):
    """Rank 0's trajectory writer for ``--dump`` (None elsewhere or without one), as a context manager."""
    from pympi_gpu.nbody.dump import open_dump

    writer = open_dump(path, box) if path and comm.Get_rank() == 0 else None
    return contextlib.closing(writer) if writer is not None else contextlib.nullcontext()


def restart_values(ctx, restart: str, meta: dict, values: dict) -> dict:
    """The options a checkpoint fixes, from its ``meta``: an option given that differs is refused (exit 2).

    ``values`` maps each such option's name to what the command line holds.
    """
    for name, value in values.items():
        if given(ctx, name) and value != meta[name]:
            fail(f"--restart: {restart!r} was run with --{name} {meta[name]}, not {value}")
    return {name: meta[name] for name in values}


def execute(comm, system, options: RunOptions, *, devices: Devices, provenance, stop: Stop, thermo_module,
            title: str, args, box: float | None):
    """Run ``system`` through the loop with the command's writers; collective over comm.

    Rank 0 prints the title and each thermo row as it comes (not with
    ``--json``) and appends them to ``--thermo-file``, shows progress, writes
    the ``--dump`` frames.  Returns ``(record, shown)``: ``shown`` says the
    title and rows are on stdout already.
    """
    from pympi_gpu.nbody import loop

    clear_stale_temporaries(comm, [options.checkpoint, options.stop_checkpoint])
    rows = ThermoOutput(comm, thermo_module, echo=not args.as_json and options.thermo, path=args.thermo_file,
                        title=title)
    rows.start()
    bar, on_step = progress(comm, not args.quiet, not args.as_json and options.steps - system.timestep >= 20)
    with simulating(bar, stop), contextlib.closing(rows), open_trajectory(comm, options.dump, box) as frames:
        writers = [StopAgreed(stop), *loop.standard_writers(comm, options, on_thermo=[rows], dump=frames,
                                                            on_step=on_step)]
        run = loop.simulate(comm, system, options, writers, stop_requested=stop.requested,
                            labels=devices.labels(provenance))
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
