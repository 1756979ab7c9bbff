"""The n-body run: leapfrog kick-drift-kick over MPI ranks; collective over comm.

Physics: softened Newtonian gravity with G = 1,

    a_i = sum_j m_j (r_j - r_i) / (|r_j - r_i|^2 + eps^2)^(3/2),

integrated by the leapfrog in kick-drift-kick form (symplectic, second order,
time-reversible): v += a dt/2; r += v dt; a = a(r); v += a dt/2.  The
accelerations at the end of one step are those at the start of the next, so
each step costs one force evaluation.  Diagnostics (float64 sums): kinetic
energy sum m v^2 / 2, potential energy -1/2 sum_{i != j} m_i m_j /
sqrt(r_ij^2 + eps^2) (the energy the softened forces conserve), and total
momentum sum m v.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable

import numpy as np

from pympi_gpu.mpi.decomposition import block_range
from pympi_gpu.nbody.blowup import BlowUp
from pympi_gpu.nbody.gravity import checkpoint as ckpt
from pympi_gpu.nbody.gravity.initial import generate
from pympi_gpu.nbody.gravity.kernels_cpu import FLOPS_PER_INTERACTION
from pympi_gpu.nbody.gravity.record import Diagnostics, NbodyRun
from pympi_gpu.run.phases import summarise

__all__ = ["DEFAULT_SEED", "NbodyConfig", "State", "initial_state", "state_from_arrays",
           "compute_forces", "diagnostics", "simulate", "local_arrays"]

DEFAULT_SEED = 20240601


@dataclasses.dataclass(frozen=True)
class NbodyConfig:
    """What to run.  ``steps`` is the step number to reach (restarts count from 0)."""

    bodies: int
    steps: int
    dt: float = 1e-3
    softening: float = 0.01
    precision: str = "fp32"
    init: str = "plummer"
    seed: int = DEFAULT_SEED
    diagnostics: bool = True
    #: a thermo row (energies, virial ratio, momentum) every K steps; 0: the first and the last
    thermo_every: int = 0
    #: a trajectory frame every K steps (and at the first); 0: none
    dump_every: int = 0
    dump: str | None = None
    checkpoint: str | None = None
    checkpoint_every: int | None = None
    #: where a stop (SIGTERM, SIGINT) writes its checkpoint when ``checkpoint`` is None
    stop_checkpoint: str | None = None
    #: where a blown-up state is saved for inspection (``--on-blowup save``); None: not saved
    blowup_save: str | None = None


@dataclasses.dataclass
class State:
    """This rank's bodies (backend arrays) and the step they are at; mutable, internal."""

    pos: list
    vel: list
    acc: list | None
    mass: object
    step: int
    initial: Diagnostics | None = None


def initial_state(comm, backend, config: NbodyConfig) -> State:
    """This rank's block of the initial conditions, on the backend."""
    start, stop = block_range(config.bodies, comm.Get_size(), comm.Get_rank())
    pos, vel, mass = generate(config.init, config.seed, config.bodies, start, stop - start)
    return State(pos=[backend.from_host(a) for a in pos], vel=[backend.from_host(a) for a in vel],
                 acc=None, mass=backend.from_host(mass), step=0)


def state_from_arrays(backend, local: dict, meta: dict) -> State:
    """A state from a checkpoint's local arrays and meta record."""
    initial = meta.get("initial")
    if isinstance(initial, dict):
        initial = Diagnostics(**{**initial, "momentum": tuple(initial["momentum"])})
    else:
        initial = None
    return State(pos=[backend.from_host(local[f]) for f in ("x", "y", "z")],
                 vel=[backend.from_host(local[f]) for f in ("vx", "vy", "vz")],
                 acc=[backend.from_host(local[f]) for f in ("ax", "ay", "az")],
                 mass=backend.from_host(local["m"]), step=int(meta["step"]), initial=initial)


def local_arrays(backend, state: State) -> dict[str, np.ndarray]:
    """Host copies of this rank's bodies, keyed as in a checkpoint."""
    backend.sync()
    names = ("x", "y", "z", "vx", "vy", "vz", "ax", "ay", "az")
    arrays = [*state.pos, *state.vel, *state.acc]
    out = {k: backend.to_host(a) for k, a in zip(names, arrays)}
    out["m"] = backend.to_host(state.mass)
    return out


def compute_forces(comm, backend, exchange, state: State, eps2: float) -> None:
    """Overwrite ``state.acc`` with the accelerations at ``state.pos``; collective over comm."""
    if state.acc is None:
        n = state.mass.shape[0]
        state.acc = [backend.zeros(n) for _ in range(3)]
    for a in state.acc:
        backend.fill_zero(a)
    tx, ty, tz = state.pos
    ax, ay, az = state.acc
    exchange.visit(comm, state.pos,
                   lambda sx, sy, sz, sm: backend.accel(tx, ty, tz, sx, sy, sz, sm, eps2, ax, ay, az))


def diagnostics(comm, backend, exchange, state: State, eps2: float) -> Diagnostics:
    """Energies and momentum of the whole system; collective over comm."""
    from mpi4py import MPI

    n = state.mass.shape[0]
    phi = backend.zeros(n, np.float64)
    tx, ty, tz = state.pos
    exchange.visit(comm, state.pos,
                   lambda sx, sy, sz, sm: backend.potential(tx, ty, tz, sx, sy, sz, sm, eps2, phi))
    m = backend.to_host(state.mass).astype(np.float64)
    v = [backend.to_host(a).astype(np.float64) for a in state.vel]
    sums = np.array([0.5 * np.sum(m * (v[0] ** 2 + v[1] ** 2 + v[2] ** 2)),
                     0.5 * np.sum(m * backend.to_host(phi)),
                     np.sum(m * v[0]), np.sum(m * v[1]), np.sum(m * v[2])])
    comm.Allreduce(MPI.IN_PLACE, sums, op=MPI.SUM)
    kin, pot = float(sums[0]), float(sums[1])
    return Diagnostics(step=state.step, kinetic=kin, potential=pot, energy=kin + pot,
                       momentum=(float(sums[2]), float(sums[3]), float(sums[4])))


def _meta(config: NbodyConfig, state: State) -> dict:
    meta = {"step": state.step, "time": state.step * config.dt, "seed": config.seed,
            "init": config.init, "precision": config.precision, "dt": config.dt,
            "softening": config.softening}
    if state.initial is not None:
        meta["initial"] = dataclasses.asdict(state.initial)
    return meta


def _frame(comm, config: NbodyConfig, backend, state: State, dump) -> None:
    """One trajectory frame: every body in index order (ids 1..N), positions and velocities; collective."""
    from pympi_gpu.nbody.dump import write_frame

    full = ckpt.gather(comm, local_arrays(backend, state), fields=("x", "y", "z", "vx", "vy", "vz"))
    if full is not None:
        n = full["x"].size
        full = {"id": np.arange(1, n + 1), "x": np.column_stack([full["x"], full["y"], full["z"]]),
                "v": np.column_stack([full["vx"], full["vy"], full["vz"]])}
    write_frame(comm, dump, state.step, state.step * config.dt, full, config.dump)


def _blew_up(comm, config: NbodyConfig, backend, state: State) -> None:
    """Raise the blow-up on every rank, the broken state saved first if asked; collective."""
    exc = BlowUp(state.step, "non-finite positions or velocities",
                 f"the integration overflowed: reduce --dt (now {config.dt:g}) or raise --softening "
                 f"(now {config.softening:g})")
    if config.blowup_save:
        ckpt.save(comm, config.blowup_save, local_arrays(backend, state),
                  dict(_meta(config, state), blowup=f"{exc.check}: {exc.cause}"))
        exc.saved = config.blowup_save
    raise exc


def simulate(comm, config: NbodyConfig, backend, exchange, state: State, *,
             backend_reason: str = "", transport_reason: str = "",
             on_step: Callable[[int, int], None] | None = None,
             stop_requested: Callable[[], int] | None = None,
             restarted_from: str | None = None, provenance=None,
             on_thermo: Callable[[Diagnostics], None] | None = None, dump=None) -> tuple[NbodyRun, State]:
    """Advance ``state`` to step ``config.steps``; collective over comm.

    ``on_step(step, last)`` is called after every step (progress display);
    ``stop_requested()`` (a signal number, or 0) is polled after every step on
    every rank, and if it is set on any rank all ranks stop together, write a
    checkpoint and return with ``stopped_by`` the signal's name.  The same
    agreement finds non-finite positions or velocities on any rank: then every
    rank raises :class:`~pympi_gpu.nbody.blowup.BlowUp`, having written
    nothing but, with ``config.blowup_save``, the broken state to that file.
    With ``config.diagnostics`` a thermo row (:class:`Diagnostics`) is made at
    the first step, every ``config.thermo_every`` steps and at the last, and
    passed to ``on_thermo`` on every rank as it is computed (each row after
    the first costs one potential evaluation, as much as a force step).
    ``dump`` is rank 0's trajectory writer (:func:`pympi_gpu.nbody.dump.open_dump`)
    for a frame at the first step and every ``config.dump_every`` steps.
    Returns the record and the final state.
    """
    import signal

    from mpi4py import MPI

    eps2 = config.softening ** 2
    h, dt = 0.5 * config.dt, config.dt
    exchange.set_masses(state.mass)
    if state.acc is None:
        compute_forces(comm, backend, exchange, state, eps2)
    if config.diagnostics and state.initial is None and state.step == 0:
        state.initial = diagnostics(comm, backend, exchange, state, eps2)
    rows = []

    def emit(row):
        rows.append(row)
        if on_thermo is not None:
            on_thermo(row)

    if config.diagnostics:
        emit(state.initial if state.step == 0 else diagnostics(comm, backend, exchange, state, eps2))
    if config.dump_every:
        _frame(comm, config, backend, state, dump)
    first = state.step
    written = 0
    stopped = None
    step_times = []
    exchange.comm_time = 0.0
    clock = exchange.clock
    clock.reset()
    flag = np.zeros(2, np.int32)  # [the stop signal, 1 if the state is not finite]; the largest of all ranks
    backend.sync()
    comm.Barrier()
    t0 = MPI.Wtime()
    while state.step < config.steps:
        ts = MPI.Wtime()
        for v, a in zip(state.vel, state.acc):
            backend.axpy(v, h, a)
        for x, v in zip(state.pos, state.vel):
            backend.axpy(x, dt, v)
        compute_forces(comm, backend, exchange, state, eps2)
        for v, a in zip(state.vel, state.acc):
            backend.axpy(v, h, a)
        backend.sync()
        state.step += 1
        step_times.append(MPI.Wtime() - ts)
        if on_step is not None:
            on_step(state.step, config.steps)
        flag[0] = (stop_requested() or 0) if stop_requested is not None else 0
        flag[1] = not backend.finite([*state.pos, *state.vel])
        with clock.phase("waiting"):  # every rank's step ends here: the imbalance shows
            comm.Allreduce(MPI.IN_PLACE, flag, op=MPI.MAX)
        clock.sent(flag.nbytes)
        if flag[1]:
            _blew_up(comm, config, backend, state)
        if flag[0]:
            stopped = signal.Signals(int(flag[0])).name
            break
        if config.diagnostics and config.thermo_every and state.step % config.thermo_every == 0 \
                and state.step < config.steps:
            emit(diagnostics(comm, backend, exchange, state, eps2))  # its ring messages time themselves
        if config.dump_every and state.step % config.dump_every == 0:
            with clock.phase("io"):
                _frame(comm, config, backend, state, dump)
        if (config.checkpoint and config.checkpoint_every and state.step % config.checkpoint_every == 0
                and state.step < config.steps):
            with clock.phase("io"):
                ckpt.save(comm, config.checkpoint, local_arrays(backend, state), _meta(config, state))
            written += 1
    wall = MPI.Wtime() - t0
    # compute: the rest of the timed steps (kernels, integration), per rank
    clock.seconds["compute"] = max(0.0, wall - sum(clock.seconds[k] for k in ("communication", "waiting", "io")))
    path = config.checkpoint or (config.stop_checkpoint if stopped else None)
    if path:
        with clock.phase("io"):
            ckpt.save(comm, path, local_arrays(backend, state), _meta(config, state))
        written += 1
    phases, traffic = summarise(comm, clock, state.step - first)
    final = diagnostics(comm, backend, exchange, state, eps2) if config.diagnostics else None
    if final is not None and rows and rows[-1].step != final.step:
        emit(final)
    timing = np.array([wall, exchange.comm_time])
    comm.Allreduce(MPI.IN_PLACE, timing, op=MPI.MAX)
    wall, comm_time = float(timing[0]), float(timing[1])
    steps = state.step - first
    interactions = config.bodies * config.bodies * steps
    rate = interactions / wall if wall > 0 and steps else 0.0
    med = comm.allreduce(statistics.median(step_times) if step_times else 0.0, op=MPI.MAX)
    drift = dp = None
    if state.initial is not None and final is not None:
        drift = abs((final.energy - state.initial.energy) / state.initial.energy) \
            if state.initial.energy else abs(final.energy)
        dp = math.dist(final.momentum, state.initial.momentum)
    run = NbodyRun(
        bodies=config.bodies, ranks=comm.Get_size(), first_step=first, last_step=state.step, steps=steps,
        dt=config.dt, softening=config.softening, precision=config.precision, init=config.init,
        seed=config.seed, backend=backend.name, backend_reason=backend_reason, exchange=exchange.kind,
        transport=exchange.transport, transport_reason=transport_reason, wall_time=wall,
        time_per_step=wall / steps if steps else 0.0, median_step_time=med, comm_time=comm_time,
        interactions=interactions, throughput=rate, gflops=rate * FLOPS_PER_INTERACTION / 1e9,
        initial=state.initial, final=final, energy_drift=drift, momentum_change=dp,
        checkpoint=path, checkpoints_written=written, restarted_from=restarted_from,
        stopped_by=stopped, provenance=provenance, phases=phases, traffic=traffic, thermo=tuple(rows))
    return run, state
