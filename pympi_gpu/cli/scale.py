"""``pympi-scale -- COMMAND...``: a strong or weak scaling study of a pympi command.

The study is a driver on one process: it launches COMMAND at each size
through :func:`pympi_gpu.mpi.launch.plan`, reads each run's JSON record and
writes PREFIX.jsonl (every run, appended as it ends), PREFIX.json,
PREFIX.csv and PREFIX.png.  The projection's options, floor probes and table
are :mod:`pympi_gpu.cli.scale_projection`'s.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
from pathlib import Path

import click

from pympi_gpu.cli.common import fail
from pympi_gpu.cli.options import CONTEXT_SETTINGS, IntRange, escape, version_option
from pympi_gpu.mpi.environment import expected_world_size, node_cpus
from pympi_gpu.mpi.launch import launcher_choices


def _sizes(value, what, words=None):
    """The list of sizes an option gives (``what``: its parameter; ``words``: how messages name them)."""
    from pympi_gpu.scale.points import parse_sizes

    if value is None:
        return None
    try:
        return parse_sizes(value, words or what)
    except ValueError as exc:
        ctx = click.get_current_context()
        param = next(p for p in ctx.command.params if p.name == what)
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


def _default_prefix(command, weak: bool) -> str:
    name = os.path.basename(command[0]) if command else "study"
    name = name[len("pympi-"):] if name.startswith("pympi-") else name
    return f"scale-{name}-{'weak' if weak else 'strong'}"


def _planner(launcher: str, image: str | None, gpu: bool):
    """``planner(argv, point)`` through :func:`pympi_gpu.mpi.launch.plan`."""
    from pympi_gpu.cli import settings
    from pympi_gpu.mpi import launch

    found: list[tuple[str | None, str]] = []  # the MPI in use, probed once, as pympi-launch does

    def plan(argv, point):
        if not found:
            found.append(launch.probe_mpi(told=settings.told_mpi()) if launch.needs_mpi(launcher)
                         else (None, "--mpi"))
        mpi, how = found[0]
        return launch.plan(argv, point.ranks, nodes=point.nodes, tasks_per_node=point.tasks_per_node,
                           image=image, gpu=gpu, launcher=launcher, mpi=mpi, mpi_how=how,
                           pmi=settings.told_pmi())
    return plan


def _cores_per_node() -> int | None:
    """Cores of a node of this job: the scheduler's word in an allocation, else this process's CPUs."""
    told = node_cpus()
    if told:
        return told
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def _fmt(x, spec: str, none: str = "-") -> str:
    return none if x is None else format(x, spec)


def _si(x) -> str:
    if x is None:
        return "-"
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= factor:
            return f"{x / factor:.4g} {prefix}"
    return f"{x:.3f}"


def render_table(summary):
    """The study as a rich Table."""
    from rich.table import Table

    weak = summary.kind == "weak"
    unit = summary.work_unit or "units"
    table = Table(title=f"{summary.kind} scaling: {escape(' '.join(summary.command))}",
                  caption=(f"time = median of the command's wall_time over repeats; vs "
                           f"{summary.baseline_ranks} rank(s); {summary.threads_per_rank} thread(s) per rank; "
                           f"cores = busy cores per node (of {summary.cores_per_node})"
                           + (f"; load average before the runs {summary.load_range[0]:.2f}.."
                              f"{summary.load_range[1]:.2f}" if summary.load_range else "")
                           if summary.baseline_ranks else None))
    nodes = any(p.nodes is not None for p in summary.points)
    table.add_column("ranks", justify="right")
    if nodes:
        table.add_column("nodes x tpn", justify="right")
    table.add_column("cores", justify="right")
    for name in ("runs", "time [s]", "min..max [s]", "scaled speedup" if weak else "speedup",
                 "ideal", "efficiency", f"{unit}/s", "status"):
        table.add_column(escape(name), justify="right" if name != "status" else "left")
    for p in summary.points:
        status = {"ok": "[green]ok[/]", "partial": "[yellow]partial[/]", "failed": "[red]failed[/]",
                  "missing": "[dim]not run[/]"}[p.status]
        row = [str(p.ranks)]
        if nodes:
            row.append(f"{p.nodes} x {p.tasks_per_node}" if p.nodes else "")
        cores = "-" if p.cores is None else f"{p.cores}" + (" [red]over[/]" if p.oversubscribed else "")
        row += [cores, f"{p.repeats}/{summary.repeat}", _fmt(p.time, ".4f"),
                f"{p.time_min:.4f}..{p.time_max:.4f}" if p.times else "-",
                _fmt(p.speedup, ".2f"), _fmt(p.ideal, ".0f"),
                _fmt(p.efficiency * 100 if p.efficiency is not None else None, ".1f") + ("%" if p.efficiency is not None else ""),
                _si(p.throughput), status]
        table.add_row(*row)
    return table


def _bytes(x) -> str:
    if x is None:
        return "-"
    for factor, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if x >= factor:
            return f"{x / factor:.3g} {unit}"
    return f"{x:.0f} B"


def render_phases(summary):
    """Where the time goes at each size: a rich Table, or None when the records carry no phases."""
    from rich.table import Table

    rows = [p for p in summary.points if p.phases]
    if not rows:
        return None
    per = next((p.traffic_per for p in rows if p.traffic_per), "step")
    table = Table(title="where the time goes (seconds, mean over ranks; median over repeats)",
                  caption=("waiting = blocked until other ranks catch up (imbalance); traffic = what each rank "
                           f"hands to MPI per {per}; e = Karp-Flatt serial fraction"))
    for name in ("ranks", "time [s]", "compute", "comm", "waiting", "wait max", "io", f"bytes/rank/{per}",
                 f"msgs/rank/{per}", "e"):
        table.add_column(escape(name), justify="right")
    for p in rows:
        ph = p.phases
        table.add_row(str(p.ranks), _fmt(p.time, ".4f"), *(_fmt(ph.get(k), ".4f") for k in
                                                          ("compute", "communication", "waiting")),
                      _fmt((p.phases_max or {}).get("waiting"), ".4f"), _fmt(ph.get("io"), ".4f"),
                      _bytes(p.bytes_per_rank), _fmt(p.messages_per_rank, ".3g"), _fmt(p.serial_fraction, ".3f"))
    return table


@click.command(context_settings=dict(CONTEXT_SETTINGS, allow_interspersed_args=False))
@version_option()
@click.option("--ranks", metavar="LIST", help="Rank counts, e.g. 1,2,4,8.")
@click.option("--nodes", metavar="LIST", help="Node counts, e.g. 1,2,4 (with --tasks-per-node).")
@click.option("--tasks-per-node", type=IntRange(min=1), default=None, help="Ranks per node with --nodes.")
@click.option("--repeat", type=IntRange(min=1), default=1, show_default=True,
              help="Runs per size; the table shows the median.")
@click.option("--weak", is_flag=True,
              help="A weak-scaling study (fixed work per rank, e.g. pympi-pi --per-rank): efficiency t_b/t_p.")
@click.option("--out", metavar="PREFIX", default=None,
              help="Write PREFIX.jsonl/.json/.csv/.png [default: scale-<app>-<strong|weak>].")
@click.option("--fresh", is_flag=True, help="Set earlier results aside (PREFIX.jsonl.N.bak) instead of resuming.")
@click.option("--launcher", type=click.Choice(launcher_choices()), default="auto", show_default=True,
              help="How to start each run (auto: ibrun, else srun in Slurm, else mpiexec).")
@click.option("--image", metavar="SIF", default=None, help="Run the command inside this Apptainer image.")
@click.option("--gpu", is_flag=True, help="Make GPUs visible inside --image (apptainer --nv).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Seconds one run may take before it is killed and counted as failed.")
@click.option("--threads", type=IntRange(min=1), default=1, show_default=True,
              help="Threads per rank, the same at every size (added to COMMAND as --threads unless "
                   "it has its own).")
@click.option("--json", "as_json", is_flag=True, help="Print the study as one JSON object instead of the table.")
@click.option("--dry-run", is_flag=True, help="Print the command line of each size (and why that launcher); run nothing.")
@click.option("--project-nodes", metavar="LIST", default=None,
              help="Also predict time, speedup and efficiency at these node counts from a model fitted to "
                   "the measured sizes (a projection, labelled as one: docs/scaling.md).")
@click.option("--project-tasks-per-node", type=IntRange(min=1), default=None,
              help="Ranks per node of the projection [default: --tasks-per-node, else the largest measured "
                   "rank count].")
@click.option("--latency", type=click.FloatRange(min=0, min_open=True), default=1.0e-6, show_default=True,
              help="Projection: seconds per message (default: Frontera's HDR-100 InfiniBand).")
@click.option("--bandwidth", type=click.FloatRange(min=0, min_open=True), default=12.5e9, show_default=True,
              help="Projection: bytes per second per rank's link (default: HDR-100, 100 Gb/s).")
@click.option("--floor-sizes", metavar="LIST", default=None,
              help="Projection of a pympi-nbody study: also run the command with this many atoms (bodies) per "
                   "rank at the largest measured rank count, the floor probes, and fit the per-step floor to "
                   "them [default: 250,2000].")
@click.option("--no-floor", is_flag=True,
              help="Projection without floor probes: compute fitted over the measured rank counts only.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def scale(ranks, nodes, tasks_per_node, repeat, weak, out, fresh, launcher, image, gpu,
          timeout, threads, as_json, dry_run, project_nodes, project_tasks_per_node, latency, bandwidth,
          floor_sizes, no_floor, command):
    """Run COMMAND at each size, REPEAT times, and report speedup and efficiency.

    \b
      pympi-scale --ranks 1,2,4,8 --repeat 3 -- pympi-pi 1e10
      pympi-scale --ranks 1,2,4 --weak -- pympi-pi 1e9 --per-rank
      pympi-scale --nodes 1,2,4 --tasks-per-node 56 -- pympi-pi 1e12

    COMMAND is a pympi command; --json is added to it, and --threads (1 unless
    given) so that every size runs the same threads per rank: only the rank
    count changes.  Each size says how many cores it keeps busy, and a size
    that needs more cores than a node has is flagged as oversubscribed.  Every finished run is
    appended to PREFIX.jsonl at once, so an interrupted study keeps its runs
    and the same command run again resumes it.  A failed size is reported
    with its error and the study goes on; the exit status is then 1.
    """
    from pympi_gpu.cli import scale_projection
    from pympi_gpu.scale.points import fix_threads, make_points
    from pympi_gpu.scale.runner import with_json

    _check_sizes(command, ranks, nodes, tasks_per_node)
    ranks = _sizes(ranks, "ranks")
    nodes = _sizes(nodes, "nodes")
    projection = scale_projection.options(_sizes(project_nodes, "project_nodes"), project_tasks_per_node,
                                          tasks_per_node, latency, bandwidth,
                                          _sizes(floor_sizes, "floor_sizes", "atoms per rank"), no_floor)
    _check_where(command, image, gpu)
    points = make_points(ranks=ranks, nodes=nodes, tasks_per_node=tasks_per_node)
    try:
        command, threads = fix_threads(command, threads)
    except ValueError:
        fail("the command's --threads is not a whole number")
    probes = scale_projection.floor_probes(command, points, projection)
    batches = [(command, points)] + ([(cmd, (pt,)) for pt, cmd in probes] if isinstance(probes, tuple) else [])
    cores = _cores_per_node()
    _warn_oversubscribed(points, threads, cores)
    planner = _planner(launcher, image, gpu)
    try:  # refuse a plan that cannot be made before running anything
        plans = [(p, planner(with_json(cmd), p)) for cmd, pts in batches for p in pts]
    except ValueError as exc:
        fail(str(exc))
    if dry_run:
        _print_plans(plans, threads, cores)
        return
    if projection is not None:
        projection = dict(projection, why_no_floor=probes if isinstance(probes, str) else None)
    _study(command, batches, repeat, "weak" if weak else "strong", planner,
           Path(out or _default_prefix(command, weak)), fresh, timeout, as_json, threads, cores, projection)


def _check_sizes(command, ranks, nodes, tasks_per_node) -> None:
    """Refuse a study without a command or with sizes that do not go together."""
    if not command:
        fail("no command to study: give it after --, e.g. pympi-scale --ranks 1,2 -- pympi-pi 1e8")
    if ranks is None and nodes is None:
        fail("give the sizes: --ranks 1,2,4 or --nodes 1,2 --tasks-per-node 56")
    if ranks is not None and nodes is not None:
        fail("give --ranks or --nodes, not both")
    if nodes is not None and tasks_per_node is None:
        fail("--nodes needs --tasks-per-node")
    if ranks is not None and tasks_per_node is not None:
        fail("--tasks-per-node goes with --nodes (with --ranks the launcher places the ranks)")


def _check_where(command, image, gpu) -> None:
    """Refuse a study started under a launcher, of a command not on PATH, or --gpu without an image."""
    # a launcher's world size, not the allocation's: inside an allocation the study is one process
    size, var = expected_world_size(scheduler=False)
    if size and size > 1:
        fail(f"pympi-scale runs on one process and launches the ranks itself, but {var}={size}: "
             "start it without srun/mpiexec/ibrun")
    if image is None and shutil.which(command[0]) is None:
        fail(f"command {command[0]!r} not found on PATH")
    if gpu and image is None:
        fail("--gpu goes with --image")


def _warn_oversubscribed(points, threads, cores) -> None:
    """Say which sizes keep more cores busy than a node has: their times measure contention."""
    from pympi_gpu.scale.points import cores_used, oversubscribed

    for p in points:
        if oversubscribed(p, threads, cores):
            click.echo(f"pympi-scale: warning: {p.label()}: {p.ranks_per_node} rank(s) x {threads} thread(s) "
                       f"= {cores_used(p, threads)} cores per node, but a node has {cores}: oversubscribed, "
                       "its time measures contention, not scaling", err=True)


def _print_plans(plans, threads, cores) -> None:
    """--dry-run: each size's command line (and each floor probe's), and why that launcher."""
    import shlex

    from pympi_gpu.scale.points import cores_used

    for p, plan in plans:
        click.echo(f"# {p.label()}, {threads} thread(s) per rank, {cores_used(p, threads)} cores per "
                   f"node (of {cores}): {plan.launcher} ({plan.reason})")
        click.echo(shlex.join(plan.argv))


def _study(command, batches, repeat, kind, planner, prefix, fresh, timeout, as_json, threads=None, cores=None,
           projection=None):
    """Run the study's ``batches`` (its points with its command, then each floor probe with its own) and report."""
    from rich.console import Console

    from pympi_gpu.scale.store import ResultsStore, StudyLocked, StudyRefused

    err = Console(stderr=True, soft_wrap=True)
    out = Console()
    if not out.is_terminal:  # a job's log: room for every column
        out = Console(width=160)
    jsonl = prefix.with_name(prefix.name + ".jsonl")
    store = ResultsStore(jsonl, list(command), kind)
    held = contextlib.ExitStack()
    try:  # one study per results file: a second one is refused, never interleaved
        held.enter_context(store.lock())
    except (StudyLocked, StudyRefused) as exc:
        fail(str(exc))
    if store.unlocked_reason:
        err.print(f"pympi-scale: warning: {escape(store.unlocked_reason)}", highlight=False)
    with held:
        _claim_reports(store, prefix)
        try:
            _study_locked(command, batches, repeat, kind, planner, prefix, fresh, timeout, as_json,
                          err, out, jsonl, store, threads, cores, projection)
        except OSError as exc:  # a results line or a report that cannot be written (a full disk)
            raise click.ClickException(f"cannot write {exc.filename or 'a file of --out'}: "
                                       f"{exc.strerror or exc} (the files there keep what they held before)") \
                from None


#: the reports a study rewrites after its runs, beside PREFIX.jsonl
REPORTS = ("json", "csv", "png")


def _claim_reports(store, prefix: Path) -> None:
    """Refuse (exit 2) a study whose --out names another program's file: the results file holds no study's
    runs, or a report it would rewrite is no study's report (a user's CSV, a photo): never written over."""
    from pympi_gpu.scale.report import not_a_report
    from pympi_gpu.scale.store import StudyMismatch, StudyRefused

    resumed = False
    try:
        resumed = bool(store.load())
    except StudyMismatch:  # another study's results: _resume refuses them, or sets them aside (--fresh)
        pass
    except StudyRefused as exc:
        fail(str(exc))
    for kind in REPORTS:
        path = prefix.with_name(f"{prefix.name}.{kind}")
        why = not_a_report(path, kind, resumed)
        if why:
            fail(f"--out {str(prefix)!r}: {str(path)!r} exists and is {why}: it is never overwritten; move it "
                 "away or choose another --out")


def _study_locked(command, batches, repeat, kind, planner, prefix, fresh, timeout, as_json, err, out, jsonl,
                  store, threads, cores, projection=None):
    from pympi_gpu.cli import scale_projection
    from pympi_gpu.scale import report
    from pympi_gpu.scale.analysis import summarise

    todo = _resume(store, fresh, [p for _, pts in batches for p in pts], repeat, jsonl, err)
    interrupted = _run_with_progress(batches, repeat, kind, planner, store, timeout, todo, err)
    runs = store.load()
    points = batches[0][1]
    summary = summarise(runs, points, repeat, kind, command, threads=threads, cores_per_node=cores)
    probe_points = [p for _, pts in batches[1:] for p in pts]
    probes = list(zip((p.size for p in probe_points),
                      summarise(runs, probe_points, repeat, kind, command, threads=threads,
                                cores_per_node=cores).points)) if probe_points else []
    projected = scale_projection.project(summary, projection, probes) if projection else None
    extra = {"projection": projected} if isinstance(projected, dict) else {}
    files = [jsonl, report.write_json(summary, prefix.with_name(prefix.name + ".json"), **extra),
             report.write_csv(summary, prefix.with_name(prefix.name + ".csv"))]
    png, why = report.write_plot(summary, prefix.with_name(prefix.name + ".png"))
    if as_json:
        click.echo(json.dumps(report.study_dict(summary, **extra), indent=2))
    else:
        _print_summary(out, summary, projected, probes)
    for f in files + ([png] if png else []):
        err.print(f"wrote {escape(f)}", highlight=False)
    if png is None:
        err.print(f"plot skipped: {escape(why)}", highlight=False)
    if interrupted:
        err.print(f"interrupted: {len(runs)} run(s) kept in {escape(jsonl)}; run the same command again to resume",
                  highlight=False)
        sys.exit(130)
    if summary.failed or any(p.status in ("failed", "partial") for _, p in probes):
        sys.exit(1)


def _resume(store, fresh, points, repeat, jsonl, err) -> int:
    """The runs still to do: all with --fresh (earlier results set aside), else those not done yet."""
    from pympi_gpu.scale.store import StudyMismatch

    if fresh:
        moved = store.set_aside()
        if moved:
            err.print(f"earlier results set aside as {escape(moved)}", highlight=False)
    try:
        before = store.load()
    except StudyMismatch as exc:
        fail(str(exc))
    done = {(r["point"], r["repeat"]) for r in before if r.get("ok")}
    todo = sum(1 for p in points for i in range(repeat) if (p.key, i) not in done)
    if done:
        err.print(f"resuming {escape(jsonl)}: {len(points) * repeat - todo} run(s) already done, {todo} to go")
    return todo


def _run_with_progress(batches, repeat, kind, planner, store, timeout, todo, err) -> bool:
    """Run each batch (command, points) under a progress bar, a line per run; whether Ctrl-C or SIGTERM stopped it."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from pympi_gpu.scale.runner import run_study

    def _term(signum, frame):
        raise KeyboardInterrupt
    previous = signal.signal(signal.SIGTERM, _term)
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=err, transient=True)
    try:
        with progress:
            task = progress.add_task(f"{kind} scaling", total=todo)

            def on_start(point, i, launch):
                progress.update(task, description=escape(f"{point.label()}, run {i + 1}/{repeat} ({launch.launcher})"))

            def on_done(o):
                progress.advance(task)
                if o.ok:
                    progress.console.print(f"  {o.point.label():>14} run {o.repeat + 1}/{repeat}: "
                                           f"{o.record['wall_time']:.4f} s (elapsed {o.elapsed:.2f} s)",
                                           highlight=False)
                else:
                    progress.console.print(f"  {o.point.label():>14} run {o.repeat + 1}/{repeat}: "
                                           f"[red]FAILED[/] {escape(o.error)}", highlight=False)
            for command, points in batches:
                run_study(command, points, repeat, planner, store, timeout=timeout,
                          on_start=on_start, on_done=on_done)
    except KeyboardInterrupt:
        return True
    finally:
        signal.signal(signal.SIGTERM, previous)
    return False


def _print_summary(out, summary, projected, probes=()) -> None:
    """The study for people: the table, where the time goes, the projection, the warnings, the failures."""
    from pympi_gpu.cli import scale_projection

    out.print(render_table(summary))
    phases = render_phases(summary)
    if phases is not None:
        out.print(phases)
    if isinstance(projected, dict):
        out.print(scale_projection.render(projected))
    elif projected:
        out.print(f"[yellow]no projection[/]: {escape(projected)}", highlight=False)
    for p in summary.superlinear:
        out.print(f"[yellow]warning[/]: {p.ranks} ranks: efficiency {100 * p.efficiency:.1f}% is above 100% "
                  f"beyond the run-to-run spread ({p.repeats} run(s); slowest {p.time_max:.4f} s against the "
                  f"baseline's fastest): a cache effect, or the baseline measured under load; re-take it on a "
                  "quiet machine with --repeat 3 or more", highlight=False)
    if summary.mixed_backends:
        out.print(f"[yellow]warning[/]: the points ran on different backends "
                  f"({', '.join(summary.mixed_backends)}); give the command --backend to compare like "
                  "with like", highlight=False)
    failed = [(p, "") for p in summary.failed]
    failed += [(p, f", floor probe of size {size}") for size, p in probes if p.status in ("failed", "partial")]
    for p, probe in failed:
        where = f"{p.ranks} ranks" + (f" ({p.nodes} nodes x {p.tasks_per_node})" if p.nodes else "") + probe
        out.print(f"[red]{where} failed[/]: {escape(p.error)}", highlight=False)
        if p.stderr_tail.strip():
            tail = "\n".join(p.stderr_tail.strip().splitlines()[-5:])
            out.print("  " + tail.replace("\n", "\n  "), highlight=False, markup=False)
