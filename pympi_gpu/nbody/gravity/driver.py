"""The gravity model's system: leapfrog kick-drift-kick over MPI ranks; collective over comm.

Physics: softened Newtonian gravity with G = 1,

    a_i = sum_j m_j (r_j - r_i) / (|r_j - r_i|^2 + eps^2)^(3/2),

integrated by the leapfrog in kick-drift-kick form (symplectic, second order,
time-reversible): v += a dt/2; r += v dt; a = a(r); v += a dt/2.  The
accelerations at the end of one step are those at the start of the next, so
each step costs one force evaluation.  Diagnostics (float64 sums): kinetic
energy sum m v^2 / 2, potential energy -1/2 sum_{i != j} m_i m_j /
sqrt(r_ij^2 + eps^2) (the energy the softened forces conserve), and total
momentum sum m v.  :class:`GravitySystem` is what the run loop
(:mod:`pympi_gpu.nbody.loop`) drives.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from pympi_gpu.mpi.decomposition import block_range
from pympi_gpu.nbody.blowup import BlowUp
from pympi_gpu.nbody.gravity import checkpoint as ckpt
from pympi_gpu.nbody.gravity.config import DEFAULT_SEED, NbodyConfig
from pympi_gpu.nbody.gravity.initial import generate
from pympi_gpu.nbody.gravity.kernels_cpu import FLOPS_PER_INTERACTION
from pympi_gpu.nbody.gravity.record import Diagnostics, NbodyRun

__all__ = ["DEFAULT_SEED", "NbodyConfig", "State", "GravitySystem", "initial_state", "state_from_arrays",
           "compute_forces", "diagnostics", "local_arrays"]


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


def state_from_arrays(backend, local: dict, step: int, initial: Diagnostics | None = None) -> State:
    """A state from a checkpoint's local arrays, its step and its step-0 diagnostics (if recorded)."""
    return State(pos=[backend.from_host(local[f]) for f in ("x", "y", "z")],
                 vel=[backend.from_host(local[f]) for f in ("vx", "vy", "vz")],
                 acc=[backend.from_host(local[f]) for f in ("ax", "ay", "az")],
                 mass=backend.from_host(local["m"]), step=int(step), initial=initial)


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


class GravitySystem:
    """This rank's bodies as the run loop drives them (:class:`~pympi_gpu.nbody.loop.System`).

    Parameters
    ----------
    comm : the communicator the bodies are spread over
    config : :class:`NbodyConfig`
    backend : the backend holding the bodies (:mod:`pympi_gpu.nbody.gravity.backends`)
    exchange : the :class:`~pympi_gpu.nbody.gravity.exchange.Exchange` that brings every block
    state : this rank's :class:`State` (:func:`initial_state`, or :func:`state_from_arrays` for a restart)
    """

    def __init__(self, comm, config: NbodyConfig, backend, exchange, state: State):
        self.comm, self.config, self.backend, self.exchange, self.state = comm, config, backend, exchange, state
        self.eps2 = config.softening ** 2
        self.dt = config.dt

    @property
    def timestep(self) -> int:
        return self.state.step

    @property
    def initial(self) -> Diagnostics | None:
        return self.state.initial

    @property
    def clock(self):
        return self.exchange.clock

    @property
    def comm_time(self) -> float:
        return self.exchange.comm_time

    @comm_time.setter
    def comm_time(self, value: float) -> None:
        self.exchange.comm_time = value

    def prepare(self) -> None:
        """The masses into the exchange's home block, and the accelerations unless a restart brought them."""
        self.exchange.set_masses(self.state.mass)
        if self.state.acc is None:
            compute_forces(self.comm, self.backend, self.exchange, self.state, self.eps2)

    def advance(self, energy: bool, stop: int) -> None:
        """One kick-drift-kick step; collective.  ``energy`` is not needed (the thermo row sums its own), and
        the step makes no reduction to carry ``stop`` in: the loop agrees on it (and on :meth:`healthy`)."""
        b, s = self.backend, self.state
        h, dt = 0.5 * self.config.dt, self.config.dt
        for v, a in zip(s.vel, s.acc):
            b.axpy(v, h, a)
        for x, v in zip(s.pos, s.vel):
            b.axpy(x, dt, v)
        compute_forces(self.comm, b, self.exchange, s, self.eps2)
        for v, a in zip(s.vel, s.acc):
            b.axpy(v, h, a)
        b.sync()
        s.step += 1

    def advance_quiet(self, most: int, stop: int) -> tuple[list[float], None]:
        """One step (:meth:`advance`) and its seconds: the loop agrees on each step's health and stop."""
        t0 = time.perf_counter()
        self.advance(False, stop)
        return [time.perf_counter() - t0], None

    def healthy(self, thorough: bool) -> bool:
        """Are this rank's positions and velocities finite?  Checked every step: nothing else would tell."""
        return self.backend.finite([*self.state.pos, *self.state.vel])

    def fault(self) -> BlowUp:
        c = self.config
        return BlowUp(None, "non-finite positions or velocities",
                      f"the integration overflowed: reduce --dt (now {c.dt:g}) or raise --softening "
                      f"(now {c.softening:g})")

    def thermo(self) -> Diagnostics:
        """Energies and momentum at this step (one potential evaluation, as much as a force step); a
        non-finite one is a blow-up (finite velocities whose squares overflow: the positions stay finite,
        and the run would go on with an infinite energy)."""
        row = diagnostics(self.comm, self.backend, self.exchange, self.state, self.eps2)
        if not all(math.isfinite(v) for v in (row.kinetic, row.potential, row.energy, *row.momentum)):
            c = self.config
            raise BlowUp(None, f"non-finite thermo (kinetic energy {row.kinetic:.4g}, potential "
                               f"{row.potential:.4g})",
                         f"the integration overflowed: reduce --dt (now {c.dt:g}) or raise --softening "
                         f"(now {c.softening:g})")
        return row

    def frame(self) -> dict | None:
        """Every body on rank 0 (None elsewhere), in index order (ids 1..N); collective."""
        full = ckpt.gather(self.comm, local_arrays(self.backend, self.state),
                           fields=("x", "y", "z", "vx", "vy", "vz"))
        if full is None:
            return None
        return {"id": np.arange(1, full["x"].size + 1), "x": np.column_stack([full["x"], full["y"], full["z"]]),
                "v": np.column_stack([full["vx"], full["vy"], full["vz"]])}

    def meta(self, initial) -> dict:
        meta = {**self.config.meta(), "step": self.state.step, "time": self.state.step * self.config.dt}
        if initial is not None:
            meta["initial"] = dataclasses.asdict(initial)
        return meta

    def save(self, path: str, initial) -> None:
        ckpt.save(self.comm, path, local_arrays(self.backend, self.state), self.meta(initial))

    def close(self) -> None:
        """(Nothing to free: the exchange's messages are made and waited for within each step.)"""

    def save_broken(self, path: str, initial, note: str) -> None:
        ckpt.save(self.comm, path, local_arrays(self.backend, self.state), dict(self.meta(initial), blowup=note))

    def record(self, result, labels) -> NbodyRun:
        """The run's record from the loop's :class:`~pympi_gpu.nbody.loop.LoopResult`."""
        c = self.config
        work = c.bodies * c.bodies  # interactions per step, as cuda-samples counts them
        rate = result.rate(work)
        return NbodyRun(
            bodies=c.bodies, ranks=self.comm.Get_size(), first_step=result.first_step, last_step=result.last_step,
            steps=result.steps, dt=c.dt, softening=c.softening, precision=c.precision, init=c.init, seed=c.seed,
            backend=labels.backend, backend_reason=labels.backend_reason, exchange=self.exchange.kind,
            transport=labels.transport, transport_reason=labels.transport_reason, wall_time=result.wall_time,
            time_per_step=result.time_per_step, median_step_time=result.median_step_time,
            comm_time=result.comm_time, interactions=work * result.steps, throughput=rate,
            gflops=rate * FLOPS_PER_INTERACTION / 1e9, initial=result.initial, final=result.final,
            energy_drift=result.energy_drift, momentum_change=result.momentum_change,
            checkpoint=result.checkpoint, checkpoints_written=result.checkpoints_written,
            restarted_from=result.restarted_from, stopped_by=result.stopped_by, provenance=labels.provenance,
            phases=result.phases, traffic=result.traffic, thermo=result.thermo)
