"""``pympi-pi SAMPLES``: estimate pi over MPI ranks."""

from __future__ import annotations

import json
import sys

import click

from pympi_gpu.cli import settings
from pympi_gpu.cli.common import configure_threads, fail, mpi_command, mpi_world, select_gpu_early
from pympi_gpu.cli.options import CONTEXT_SETTINGS, Command, Count, IntRange, version_option
from pympi_gpu.cli.counts import MAX_COUNT
from pympi_gpu.cli.signals import Stop, exit_status, signal_name
from pympi_gpu.device.device import AUTO, CHOICES

SCHEMA = "pympi_gpu.pi/1"


def _si(x: float, unit: str = "") -> str:
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= factor:
            return f"{x / factor:.3f} {prefix}{unit}"
    return f"{x:.3f} {unit}".rstrip()


def format_run(run, threads: int, verbose: bool = False, reason: str | None = None) -> str:
    """The human summary of a :class:`~pympi_gpu.pi.record.PiRun`."""
    label = {"mc": "Monte Carlo", "trapezoid": "trapezoid rule"}
    lines = []
    for r in run.results:
        unit = "samples" if r.method == "mc" else "intervals"
        lines.append(f"pi ~= {r.estimate:.16f}  ({label[r.method]})")
        lines.append(f"  error      {r.error:+.3e}" + (f"   standard error {r.stderr:.3e}"
                                                     f"  ({abs(r.error) / r.stderr:.2f} sigma)"
                                                     if r.stderr else ""))
        if r.hits is not None:
            lines.append(f"  hits       {r.hits:,} of {r.n:,}")
        lines.append(f"  {unit:<10} {r.n:,}" + (" (per rank x ranks)" if run.per_rank else ""))
        lines.append(f"  time       wall {r.wall_time:.4f} s, compute {r.compute_time:.4f} s, "
                     f"reduce {r.reduce_time:.2e} s (max over ranks)")
        lines.append(f"  throughput {_si(r.throughput, unit[:-1] + '/s')} total, "
                     f"{_si(r.throughput_per_rank, unit[:-1] + '/s')} per rank")
        if verbose:
            for s in r.shares:
                lines.append(f"    rank {s.rank:>4} of {run.ranks} on {s.host}: [{s.start:,}, "
                             f"{s.start + s.count:,}) {s.count:,} {unit}, {s.compute_time:.4f} s")
    lines.append(f"ranks {run.ranks}, backend {run.backend}, threads/rank {threads}, seed {run.seed}")
    if reason:
        lines.append(f"  backend {run.backend}: {reason}")
    return "\n".join(lines)


@mpi_command
@click.command(cls=Command, context_settings=CONTEXT_SETTINGS)
@version_option()
@click.argument("samples", type=Count())
@click.option("--method", type=click.Choice(["mc", "trapezoid", "both"]), default="mc", show_default=True,
              help="Monte Carlo sampling, the trapezoid rule, or both.")
@click.option("--per-rank", is_flag=True,
              help="SAMPLES per rank (weak scaling) instead of in total (strong scaling).")
@click.option("--seed", type=IntRange(0, 2**64 - 1), default=None,
              help="Seed of the Monte Carlo stream [default: 20240601].")
@click.option("--backend", type=click.Choice(CHOICES), default=AUTO,
              show_default=True,
              help="Kernels. auto: NumPy for small work (starts fastest), else the GPU if every "
                   "rank has one, else numba; the run says which and why.")
@click.option("--threads", type=IntRange(1, 4096), default=None,
              help="numba threads per rank [default: this node's CPUs / its ranks].")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (its schema: docs/pi.md).")
@click.option("-v", "--verbose", is_flag=True, help="Add one line per rank.")
def pi(samples, method, per_rank, seed, backend, threads, as_json, verbose):
    """Estimate pi from SAMPLES points (Monte Carlo) or intervals (trapezoid rule).

    SAMPLES is a whole number such as 1e7, 10000000 or 10_000_000, at most
    2**53; by default it is the total over all ranks.
    """
    from pympi_gpu.cli.devices import choose_device
    from pympi_gpu.device import jitcache
    from pympi_gpu.mpi.environment import expected_world_size
    from pympi_gpu.pi.backends import kernels_for, small_reason, small_work
    from pympi_gpu.pi.driver import DEFAULT_SEED, estimate_pi
    from pympi_gpu.run.provenance import collect

    methods = ("mc", "trapezoid") if method == "both" else (method,)

    def compiled(total, ranks):  # whether numba (CPU or GPU kernels) may run this work
        return backend != "numpy" and not (backend == "auto" and small_work(total, ranks, methods))

    # Before MPI_Init, which mpi_world() starts: numba's set-up, and the GPU where
    # one may be used (CUDA-aware MPIs want the device chosen first). The launcher
    # tells the world size; where it does not, assume the smallest work.
    launched = expected_world_size()[0] or 1
    early, configured = None, compiled(samples * launched if per_rank else samples, launched)
    if configured:
        jitcache.configure(settings.numba_cache_seed(), settings.wide_vectors())  # before numba loads
        early = select_gpu_early(backend)
    comm = mpi_world()
    # From here on a stop request (Ctrl-C, SIGTERM, ...) lets the sampling (one pass) finish and be reported.
    stop = Stop("pympi-pi", "no result").install()
    size = comm.Get_size()
    if per_rank and samples * size > MAX_COUNT:
        fail(f"SAMPLES x ranks = {samples * size:.4g} exceeds the maximum {MAX_COUNT:.4g}")
    total = samples * size if per_rank else samples
    if method in ("trapezoid", "both") and total < 2:
        fail("the trapezoid rule needs at least 2 intervals")
    seed = DEFAULT_SEED if seed is None else seed
    if not configured and compiled(total, size):
        jitcache.configure(settings.numba_cache_seed(), settings.wide_vectors())
    device = choose_device(comm, backend, early,  # host transport: pi hands MPI no device buffers
                           small=small_reason(total, size, methods) if small_work(total, size, methods) else None)
    why = device.backend_reason
    kernels = kernels_for(device.backend)
    # NumPy runs on one thread; only numba has a thread pool to size.
    nthreads = configure_threads(comm, threads) if device.backend == "numba" else 1
    kernels.warmup(methods)
    provenance = collect(comm, extra={**device.provenance(), "threads_per_rank": str(nthreads)})
    run = estimate_pi(comm, samples, kernels, methods=methods, seed=seed, per_rank=per_rank,
                      backend=device.backend, provenance=provenance)
    stop.honoured()  # every rank is past the sampling's reduction
    if comm.Get_rank() == 0:
        click.echo(_json(run, methods, nthreads, why, verbose) if as_json else format_run(run, nthreads, verbose, why))
    stop.finished()
    _exit_if_stopped(comm, stop)


def _json(run, methods, nthreads: int, why: str, verbose: bool) -> str:
    """The JSON record of a :class:`~pympi_gpu.pi.record.PiRun` (docs/pi.md)."""
    from pympi_gpu.run.records import to_dict

    unit = "intervals" if methods == ("trapezoid",) else "samples"
    doc = to_dict(run, schema=SCHEMA, app="pi", work_unit=unit)
    doc["throughput"] = run.throughput
    doc["threads_per_rank"] = nthreads
    doc["backend_reason"] = why
    if not verbose:
        for r in doc["results"]:
            r.pop("shares")
    return json.dumps(doc, indent=2)


def _exit_if_stopped(comm, stop: Stop) -> None:
    """After a stop request: one line (the result above is whole) and its exit status, on every rank alike."""
    from mpi4py import MPI

    signum = comm.allreduce(stop.requested(), op=MPI.MAX)  # one verdict: every rank exits alike
    if signum:
        if comm.Get_rank() == 0:
            click.echo(f"pympi-pi: stopped by {signal_name(signum)} after the sampling, whose result is above "
                       "(complete: nothing to save)", err=True)
        if exit_status(signum):
            sys.exit(exit_status(signum))
