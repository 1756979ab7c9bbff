"""``pympi-nbody BODIES`` (the gravity model): its recipe (:mod:`pympi_gpu.cli.models`) and its summary."""

from __future__ import annotations

import dataclasses

import click

from pympi_gpu.cli.common import fail, refuse_together
from pympi_gpu.cli.models import Restart
from pympi_gpu.cli.options import PositiveFloat, step_problem
from pympi_gpu.cli.simulation import format_tail, restart_values
from pympi_gpu.nbody.gravity.config import DEFAULT_SEED, NbodyConfig

SCHEMA = "pympi_gpu.nbody/1"
MIN_SOFTENING = 1e-15
#: options a restart file fixes; giving a different value is an error
_FROM_FILE = ("dt", "softening", "precision", "seed", "init")


def gravity_title(config, ranks: int) -> str:
    """The summary's first line, from the run's :class:`~pympi_gpu.nbody.gravity.driver.NbodyConfig` (or record)."""
    return (f"n-body: {config.bodies:,} bodies, {ranks} rank(s), {config.precision}, {config.init} "
            f"(seed {config.seed}), dt {config.dt:g}, softening {config.softening:g}")


def format_run(run, threads: int, shown: bool = False) -> str:
    """The human summary of a :class:`~pympi_gpu.nbody.gravity.record.NbodyRun`.

    ``shown``: the title line and the thermo rows were printed as the run went (left out here).
    """
    from pympi_gpu.nbody.gravity.thermo import HEADER, format_row

    lines = [] if shown else [gravity_title(run, run.ranks)]
    lines.append(f"  steps      {run.steps} (step {run.first_step} -> {run.last_step})"
                 + (f", restarted from {run.restarted_from}" if run.restarted_from else ""))
    lines.append(f"  backend    {run.backend} ({run.backend_reason}), threads/rank {threads}")
    lines.append(f"  exchange   {run.exchange}, transport {run.transport} ({run.transport_reason})")
    if run.steps:
        lines.append(f"  time       {run.wall_time:.4f} s, {run.time_per_step:.4e} s/step "
                     f"(median {run.median_step_time:.4e}), MPI wait {run.comm_time:.3e} s (max over ranks)")
        lines.append(f"  rate       {run.throughput:.4e} interactions/s, {run.gflops:.2f} GFLOP/s "
                     f"(20 flops/interaction)")
    if run.initial is not None and run.final is not None:
        lines.append(f"  energy     {run.initial.energy:.10g} (step {run.initial.step}) -> {run.final.energy:.10g}"
                     f", relative drift {run.energy_drift:.3e}")
        lines.append(f"  momentum   |P1 - P0| = {run.momentum_change:.3e}")
    if run.thermo and not shown:
        lines.append("  thermo   " + HEADER)
        lines += ["           " + format_row(t) for t in run.thermo]
    lines += format_tail(run, "acceleration", "bodies")
    return "\n".join(lines)


def _config(args) -> NbodyConfig:
    """The system the command line asks for (a restart may replace it); refusals before MPI starts."""
    own = args.model_options
    if args.bodies < 2:
        fail(f"BODIES ({args.bodies}) must be at least 2: a lone body feels no force, and its virial ratio "
             "-2K/U has no potential energy to divide by")
    if why := _softening_problem(own["softening"], own["precision"]):
        fail(why)
    if args.dt is not None and (why := _step_problem(args.dt, own["precision"])):
        fail(why)
    return NbodyConfig(bodies=args.bodies, dt=NbodyConfig.dt if args.dt is None else args.dt,
                       softening=own["softening"], precision=own["precision"], init=own["init"],
                       seed=NbodyConfig.seed if args.seed is None else args.seed)


def _softening_problem(softening: float, precision: str) -> str | None:
    """Why the kernels cannot take ``softening`` in ``precision`` (None: they can)."""
    import math

    import numpy as np

    from pympi_gpu.nbody.gravity.precision import PRECISIONS

    if softening < MIN_SOFTENING:
        return f"--softening {softening:g} is below {MIN_SOFTENING:g}"
    # the kernels add eps^2 to r^2 in the run's precision: it must stay finite there
    largest = math.sqrt(float(np.finfo(PRECISIONS[precision]).max)) / 4
    if softening > largest:
        return f"--softening {softening:g} is above {largest:.3g}, where eps^2 overflows {precision}"
    return None


def _step_problem(dt: float, precision: str) -> str | None:
    """Why ``dt`` is no time step in ``precision`` (None: it is one)."""
    from pympi_gpu.nbody.gravity.precision import PRECISIONS

    return step_problem(dt, PRECISIONS[precision], precision)


def _check_size(comm, config: NbodyConfig) -> None:
    """Refuse fewer bodies than ranks, or more than some rank's memory holds (decided together)."""
    from pympi_gpu.device.gpu import local_rank
    from pympi_gpu.nbody.gravity.memory import too_large

    size = comm.Get_size()
    if config.bodies < size:
        fail(f"BODIES ({config.bodies}) must be at least the number of ranks ({size})")
    # Decided together before anything is allocated: one rank short of memory stops them all.
    refuse_together(comm, too_large(config.bodies, config.precision, size, local_rank(comm)[1]))


def _restart(ctx, comm, args, config: NbodyConfig):
    """``(config, meta, local, initial)`` of ``--restart`` (each rank's block), or None; refusals on every rank.

    Every parameter the checkpoint records is judged by the command line's
    rules (:func:`~pympi_gpu.cli.simulation.recorded_values`); one given on the
    command line must be the recorded one.
    """
    from pympi_gpu.cli.simulation import recorded_row, unusable
    from pympi_gpu.nbody.gravity import checkpoint as ckpt
    from pympi_gpu.nbody.gravity.record import Diagnostics

    if not args.restart:
        return None
    path = args.restart
    try:
        meta, local = ckpt.load(comm, path)
    except ckpt.CheckpointError as exc:
        fail(f"--restart: {exc}")
    if meta["bodies"] != config.bodies:
        fail(f"--restart: {path!r} holds {meta['bodies']} bodies, but BODIES is {config.bodies}")
    fixed = restart_values(ctx, path, meta, {name: getattr(config, name) for name in _FROM_FILE})
    if why := _softening_problem(fixed["softening"], fixed["precision"]) or _step_problem(fixed["dt"],
                                                                                          fixed["precision"]):
        unusable(path, why)
    initial = recorded_row(path, meta, Diagnostics)
    if meta["step"] > args.steps:
        fail(f"--restart: {path!r} is at step {meta['step']}, beyond --steps {args.steps}")
    return Restart(dataclasses.replace(config, **fixed), meta, local, initial)


def _system(comm, config: NbodyConfig, args, device, restart):
    """This rank's :class:`~pympi_gpu.nbody.gravity.driver.GravitySystem`: its backend, exchange and bodies."""
    from pympi_gpu.nbody.gravity.backends import make_backend
    from pympi_gpu.nbody.gravity.driver import GravitySystem, initial_state, state_from_arrays
    from pympi_gpu.nbody.gravity.exchange import make_exchange

    backend = make_backend(device, config.precision)
    backend.warmup()
    exchange = make_exchange(comm, backend, config.bodies, args.model_options["exchange"], device.transport)
    if restart:
        state = state_from_arrays(backend, restart.local, restart.meta["step"], restart.initial)
    else:
        state = initial_state(comm, backend, config)
    return GravitySystem(comm, config, backend, exchange, state)


def _verify(comm, system, config: NbodyConfig, run, args):
    from pympi_gpu.nbody.gravity.driver import local_arrays
    from pympi_gpu.nbody.gravity.verify import DRIFT_BOUND, verify

    tolerance = DRIFT_BOUND if args.energy_tolerance is None else args.energy_tolerance
    result = verify(comm, local_arrays(system.backend, system.state), config.bodies, config.softening,
                    config.precision, run.energy_drift, tolerance)
    return dataclasses.replace(run, verification=result)


def _document(run, nthreads: int, device) -> dict:
    from pympi_gpu.run.records import to_dict

    doc = to_dict(run, schema=SCHEMA, app="nbody", work_unit="interactions")
    doc["threads_per_rank"] = nthreads
    aware = device.awareness
    doc["awareness"] = None if aware is None else {"supported": aware.supported, "method": aware.method,
                                                  "detail": aware.detail}
    return doc


class Gravity:
    """All-pairs softened gravity (the recipe :class:`~pympi_gpu.cli.models.Model` describes)."""

    name = "gravity"
    summary = "all-pairs softened gravity over a ring"
    defaults = {"dt": NbodyConfig.dt, "seed": DEFAULT_SEED, "energy_tolerance": 1e-3}
    options = (
        click.Option(["--softening"], type=PositiveFloat(), default=NbodyConfig.softening, show_default=True,
                     help="gravity: softening length eps (> 0): forces ~ 1/(r^2 + eps^2)."),
        click.Option(["--precision"], type=click.Choice(["fp32", "fp64"]), default=NbodyConfig.precision,
                     show_default=True, help="gravity: floating-point precision of positions, velocities and "
                                             "forces."),
        click.Option(["--exchange"], type=click.Choice(["ring", "allgather"]), default="ring", show_default=True,
                     help="gravity: how bodies travel between ranks."),
        click.Option(["--init"], type=click.Choice(["plummer", "uniform"]), default=NbodyConfig.init,
                     show_default=True, help="gravity: initial conditions, Plummer sphere or cold uniform ball."),
        click.Option(["--benchmark"], is_flag=True,
                     help="gravity: time the steps only, no energy diagnostics (unless --verify)."),
    )

    def thermo(self, config: NbodyConfig):
        from pympi_gpu.nbody.gravity import thermo

        return thermo

    def config(self, args) -> NbodyConfig:
        return _config(args)

    def communicator(self, world, config, args):
        return world

    def check(self, comm, config: NbodyConfig, args) -> None:
        _check_size(comm, config)

    def restart(self, ctx, comm, args, config: NbodyConfig) -> Restart | None:
        return _restart(ctx, comm, args, config)

    def fits(self, comm, config: NbodyConfig, args) -> None:
        """(Any system that passed :meth:`check` runs on any rank count.)"""

    def dtype(self, config: NbodyConfig):
        from pympi_gpu.nbody.gravity.precision import PRECISIONS

        return PRECISIONS[config.precision]

    def on_device(self, comm, config: NbodyConfig, device, threads: int) -> NbodyConfig:
        return config

    def system(self, comm, config: NbodyConfig, device, restart: Restart | None, args):
        return _system(comm, config, args, device, restart)

    def box(self, config: NbodyConfig) -> None:
        return None  # open space

    def sized_by(self, args) -> str | None:
        return None  # BODIES is always given

    def stop_name(self, config: NbodyConfig) -> str:
        return f"pympi-nbody-{config.bodies}"

    def title(self, config: NbodyConfig, comm) -> str:
        return gravity_title(config, comm.Get_size())

    def provenance(self, note: str) -> dict[str, str]:
        return {"simd": note}

    def thermo_rows(self, args) -> bool:
        return not args.model_options["benchmark"] or args.verify

    def verify(self, comm, system, config: NbodyConfig, run, args):
        return _verify(comm, system, config, run, args)

    def human(self, run, threads: int, shown: bool) -> str:
        return format_run(run, threads, shown=shown)

    def document(self, run, threads: int, device) -> dict:
        return _document(run, threads, device)


#: this module's model, as the registry (:data:`pympi_gpu.cli.models.MODULES`) finds it
MODEL = Gravity()
