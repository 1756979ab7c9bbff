"""The LJ model's system: what the run loop drives, over the bricks of a Cartesian communicator.

Each step: ``v += f dt/2; x += v dt``; if any atom moved more than half the
skin since the last rebuild (checked on every rank, decided together), the
atoms migrate to their bricks, are sorted by cell (locality), the ghosts and
the Verlet lists are rebuilt; otherwise only the ghost positions are
refreshed, while the owned-owned forces are computed; then the owned-ghost
forces, with ``newton`` (one thread per rank, the CPU) the ghosts' forces sent
back to their owners, and ``v += f dt/2``.  This is LAMMPS's ``fix nve`` with
``neigh_modify delay 0 every 1 check yes`` and ``newton on``; another lists'
policy, ``every K check yes|no`` (``config.neigh_every``, ``neigh_check``),
looks at the lists only every K steps after the last build (:meth:`LjSystem.threshold`),
and there rebuilds if an atom moved half the skin, or always.

:class:`LjSystem` is the one system of both backends
(:class:`~pympi_gpu.nbody.loop.System`: the steps, thermo rows, frames and
checkpoints of this model) and holds what they share: the config, the brick,
the cell grid (:class:`CellGrid`) and the agreements every rank makes
together (the displacement test, which carries the run loop's stop request,
and the migration's tally).  The atoms themselves, their ghosts, lists,
halo and kernels are its ``atoms``: :class:`~pympi_gpu.nbody.lj.cpu.atoms.HostAtoms`
(numba, host memory) or, on a GPU,
:class:`~pympi_gpu.nbody.lj.gpu.atoms.DeviceAtoms` (device-resident),
chosen by the :class:`~pympi_gpu.device.device.Device` it is given.

A checkpoint changes nothing: it holds, beside the state, the positions at the
last rebuild and its step, from which a restart makes the run's own rebuild
again (the same atoms on each rank, in the same order, the same ghosts and
lists, the displacement measured from the same references) before it moves the
atoms to their positions; so a run restarted on the same number of ranks and
threads continues bit for bit, and so does one that wrote no checkpoint.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from pympi_gpu.device.device import CPU
from pympi_gpu.nbody.blowup import BlowUp, moved_too_far
from pympi_gpu.nbody.lj import lattice, thermostats
from pympi_gpu.nbody.lj.atoms import Atoms
from pympi_gpu.nbody.lj.config import DEFAULT_SEED, LjConfig
from pympi_gpu.nbody.lj.domain import CellGrid, brick_of, wrap
from pympi_gpu.nbody.lj.record import LjRun
from pympi_gpu.nbody.lj.thermo import thermo

__all__ = ["LjConfig", "LjSystem", "CellGrid", "initial_arrays", "drawn_velocities", "kernels_call_mpi", "DEFAULT_SEED"]


def initial_arrays(config: LjConfig, brick, comm=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """This brick's atoms of the initial state: ``(x, v, ids)``; collective over ``comm`` if given.

    The state is :func:`~pympi_gpu.nbody.lj.lattice.fcc_positions` and
    :func:`~pympi_gpu.nbody.lj.lattice.velocities` of the whole system, bit
    for bit and so the same for any number of ranks, but each rank makes only
    its brick's atoms (:func:`~pympi_gpu.nbody.lj.lattice.brick_lattice`,
    :func:`drawn_velocities`): no rank holds more than its share and a block.
    """
    x, ids = lattice.brick_lattice(config.cells, config.density, config.box, brick.dims, brick.coords)
    return x, drawn_velocities(config.atoms, config.temperature, config.seed, ids, comm), ids


def drawn_velocities(atoms: int, temperature: float, seed: int, ids: np.ndarray, comm=None) -> np.ndarray:
    """The velocities of the atoms ``ids`` (ascending, some of 1..``atoms``) in
    :func:`~pympi_gpu.nbody.lj.lattice.velocities` of all ``atoms`` at ``temperature`` and ``seed``, bit for
    bit, without any rank holding them all; collective over ``comm`` if given (every rank's ``ids`` together
    are 1..``atoms``).

    Each atom's draws are its own (:func:`~pympi_gpu.nbody.lj.lattice.draws`).  The two sums over all atoms come
    out as NumPy's: the momentum's, which adds the atoms one after the other, streamed by rank 0 and broadcast;
    the kinetic energy's pairwise tree, its leaves shared by the ranks and added in the tree's order on each, so
    every rank scales by the same float.  Without ``comm`` this process computes both sums alone.
    """
    v = lattice.draws(seed, ids)
    rank, size = (0, 1) if comm is None else (comm.Get_rank(), comm.Get_size())
    mean = lattice.momentum_sum(atoms, seed) / atoms if rank == 0 else None
    if comm is not None:
        mean = comm.bcast(mean, root=0)
    leaves = lattice.square_sum_leaves(atoms)
    mine = [lattice.square_sum_leaf(seed, mean, *leaf) for leaf in leaves[rank::size]]
    parts = [mine] if comm is None else comm.allgather(mine)
    sums = [parts[i % size][i // size] for i in range(len(leaves))]  # leaf i was rank i % size's
    return lattice.scale_velocities(v, mean, lattice.square_sum(atoms, sums), atoms, temperature)


def kernels_call_mpi(cart, device=CPU) -> bool:
    """Do the step's kernels make its MPI calls themselves (:mod:`~pympi_gpu.mpi.numba_calls`)?  On the
    CPU, where numba can call the loaded libmpi and it has MPI 4's persistent collectives, unless the
    device says not (``device.compiled_mpi``: the command line's ``PYMPI_COMPILED_MPI=0``).  Agreed by
    the ranks of ``cart``
    (collective): the step's reduction is a persistent collective where they do and a call from Python
    where they do not, and every rank must make the same."""
    from mpi4py import MPI

    from pympi_gpu.mpi import numba_calls

    mine = not device.gpu and device.compiled_mpi and numba_calls.persistent_collectives() and numba_calls.link()
    return bool(cart.allreduce(int(mine), op=MPI.MIN)) if cart.Get_size() > 1 else bool(mine)


class LjSystem:
    """The LJ atoms of one brick as the run loop drives them (see the module docstring).

    Parameters
    ----------
    cart : periodic Cartesian communicator (this object does not free it)
    config : :class:`LjConfig`
    x, v : ``(n, 3)`` owned positions and velocities
    ids : ``(n,)`` int64 global atom ids (1-based)
    f : ``(n, 3)`` forces at ``x``, or None to compute them
    device : the :class:`~pympi_gpu.device.device.Device` (default: numba on the CPU)
    timestep : the step the state is at (a restart's)
    initial : the thermo row of step 0 (a restart's, for the energy drift), or None
    profile : on a GPU, synchronise around each phase and time it (``atoms.phase_seconds``)
    bath_state : the thermostat's state (a restart's), or None to set it up at the start
    reference : ``(n, 3)`` a restart's positions at the run's last rebuild (the checkpoint's ``x0``), or
        None: the lists are made from them (see the module docstring)
    built_at : the step of that rebuild (a restart's; default ``timestep``)
    written_in : the precision the restart's checkpoint was written in (the record's ``written_in``; None:
        no restart)
    """

    def __init__(self, cart, config: LjConfig, x, v, ids, f=None, *, device=CPU, timestep: int = 0,
                 initial=None, profile: bool = False, bath_state=None, reference=None, built_at: int | None = None,
                 written_in: str | None = None):
        self.cart = self.comm = cart
        self.config = config
        self.written_in = written_in
        self.brick = brick_of(config.box, cart.Get_topo()[0], cart.Get_coords(cart.Get_rank()))
        self.grid = CellGrid.of(config, self.brick)
        self.timestep = timestep
        self.initial = initial
        self._stop_request, self._stop_agreed = 0, None  # carried by the displacement test (advance)
        self._heard = 0  # a stop request heard while the steps run (:meth:`hear_stop`, another thread)
        self._ranks = cart.Get_size()
        #: the squared displacement that asks for a rebuild (half the skin's)
        self.rebuild_distance2 = (0.5 * config.skin) ** 2
        #: the step under way's: above it the step rebuilds (:meth:`threshold`; the lists' policy)
        self.threshold2 = self.rebuild_distance2
        #: the step of the last rebuild, and the rebuilds counted then (the policy counts from it)
        self.built_at, self._built, self._agreed2 = timestep if built_at is None else built_at, 0, 0.0
        #: rebuilds at the first step the policy allowed, where it checks (LAMMPS's "dangerous builds")
        self.dangerous_builds = 0
        #: the step's agreement: this rank's [largest squared displacement, stop request], then the ranks'
        self.top = np.zeros(4)
        if self._ranks > 1:  # what the reduction of every step hands MPI, looked up once
            from mpi4py import MPI

            self._reduce = (cart.Allreduce, MPI.IN_PLACE, MPI.MAX)
        #: the squared displacement beyond which an atom moved too far (``moved_too_far``'s)
        self.move_limit2 = self.move_limit * self.move_limit
        #: a displacement that ends a batch of steps (``HostAtoms.steps``): a rebuild's, or one too far
        self.batch_stop2 = min(self.rebuild_distance2, self.move_limit2)
        #: do the step's kernels make its MPI calls themselves (:func:`kernels_call_mpi`)?
        self.kernels_call_mpi = kernels_call_mpi(cart, device)
        #: the thermostat (:mod:`~pympi_gpu.nbody.lj.thermostats`), the same on every rank
        self.bath = thermostats.Bath(config.thermostat, config.setting, bath_state)
        self._gpu = device.gpu
        if device.gpu:
            from pympi_gpu.nbody.lj.gpu.atoms import DeviceAtoms

            self.atoms: Atoms = DeviceAtoms(self, x, v, ids, f, device, profile, reference)
        else:
            from pympi_gpu.nbody.lj.cpu.atoms import HostAtoms

            self.atoms = HostAtoms(self, x, v, ids, f, reference)
        #: the agreement's persistent reduction as bytes, for a step's kernel that starts it (empty where
        #: the step's MPI calls stay in Python, and on one rank: the kernel copies)
        self.agreement = np.zeros(0, np.uint8)
        #: and the thermostat's sum of m v^2 over the ranks (empty where none is made)
        self.total = np.zeros(0, np.uint8)
        if self.kernels_call_mpi and self._ranks > 1:
            self.agreement = self.halo.agreement(self.top[:2], self.top[2:])
            if self.bath.style.scales:
                self.total = self.halo.total(self.bath.mv2[:1], self.bath.mv2[1:])

    @property
    def halo(self):
        return self.atoms.halo

    @property
    def nlocal(self) -> int:
        return self.atoms.nlocal

    # -- what every rank agrees on ----------------------------------------
    def agree_migration(self, owned: int, finite: bool, short: bool = False) -> bool:
        """After a migration: do the ranks' owned atoms sum to N, and were all forces finite? Collective.

        Raises :class:`~pympi_gpu.nbody.blowup.BlowUp` on every rank if not.  ``short``: this rank's
        rebuild found a buffer short (the device's: it grew it); returns whether any rank's did, so
        that all make the rebuild again together (their ghosts are each other's messages).
        """
        tally = np.array([owned, 0 if finite else 1, int(short)], np.int64)  # [atoms owned, not finite, short]
        if self._ranks > 1:  # (one rank's tally is its own)
            from mpi4py import MPI

            with self.halo.clock.phase("waiting"):
                self.cart.Allreduce(MPI.IN_PLACE, tally, op=MPI.SUM)
            self.halo.clock.sent(tally.nbytes)
        if tally[1]:
            raise BlowUp(None, "non-finite velocities or forces", "the forces overflowed: reduce --dt or --temperature")
        if tally[0] != self.config.atoms:
            what = "lost" if tally[0] < self.config.atoms else "duplicated"
            count = abs(int(tally[0]) - self.config.atoms)
            raise BlowUp(None, f"{count} atoms {what} in the migration to their bricks",
                         "atoms moved too far between list builds: reduce --dt or --temperature")
        return bool(tally[2])

    def sum_mv2(self) -> None:
        """The thermostat's sum of m v^2 over the ranks, ``bath.mv2[0]`` of each into ``bath.mv2[1]``, from
        Python (collective; the compiled steps' is ``OP_SUM``)."""
        mv2 = self.bath.mv2
        if self._ranks == 1:
            mv2[1] = mv2[0]
            return
        from mpi4py import MPI

        with self.halo.clock.phase("waiting"):
            self.cart.Allreduce(mv2[:1], mv2[1:], op=MPI.SUM)
        self.halo.clock.sent(mv2[:1].nbytes)

    @property
    def move_limit(self) -> float:
        """The farthest an atom may move between list builds: its ghosts' reach, or a brick if thinner."""
        return min(self.config.cutneigh, *(self.brick.hi[d] - self.brick.lo[d] for d in range(3)))

    def agree_displacement(self, d2: float) -> bool:
        """All ranks' largest squared displacement ``d2`` (NaN counts as infinite): rebuild?  Collective.

        The same reduction carries the ranks' stop requests (the run loop's, see :meth:`advance`).
        """
        d2 = float(d2) if d2 == d2 else math.inf
        if self._ranks > 1:  # once a step, at a few hundred atoms a rank a few microseconds: lean Python
            top = self.top[:2]
            top[0], top[1] = d2, self.stop_request
            allreduce, in_place, op = self._reduce
            clock = self.halo.clock
            t0 = time.perf_counter()
            allreduce(in_place, top, op)
            clock.add("waiting", time.perf_counter() - t0)  # every rank's step meets here: the imbalance shows
            clock.sent(top.nbytes)
            d2, stop = top.tolist()
        else:  # one rank agrees with itself: no message
            stop = self.stop_request
        return self.agreed(d2, stop)

    def agreed(self, d2: float, stop) -> bool:
        """What the ranks agreed (the largest squared displacement ``d2``, the stop request ``stop``):
        rebuild?  Raises where an atom moved too far; the stop request is :meth:`advance`'s answer."""
        self._stop_agreed, self._agreed2 = int(stop), d2
        if d2 > self.move_limit2 and (bad := moved_too_far(None, d2, self.move_limit, "sigma")):
            raise bad
        return bool(d2 > self.threshold2)

    def threshold(self, step: int) -> float:
        """The squared displacement above which step ``step`` (its number once taken) rebuilds the lists:
        LAMMPS's ``neigh_modify every K check yes|no`` (``config.neigh_every``, ``neigh_check``).  The lists
        are looked at only where ``K`` steps have passed since the last build (infinity elsewhere: no
        rebuild, but an atom that moved farther than its ghosts reach still ends the run); there half the
        skin's, or -1 (a rebuild whatever the displacement) where the policy does not check."""
        every, check = self.config.neigh_policy
        if (step - self.built_at) % every:
            return math.inf
        return self.rebuild_distance2 if check else -1.0

    def _steps_to_look(self) -> int:
        """Steps from the current one to the next at which the policy looks at the lists (1: the next)."""
        every = self.config.neigh_every
        return every - (self.timestep - self.built_at) % every

    def _note_rebuilds(self) -> None:
        """After a step: where it rebuilt, the policy counts from it (and LAMMPS's dangerous builds).  Where the
        device decides the rebuilds, its books at its last wait (``atoms.books``)."""
        if self.atoms.books is not None:
            self.built_at, self.dangerous_builds = self.atoms.books
            self._built = self.atoms.rebuilds
        elif self.atoms.rebuilds != self._built:
            every, check = self.config.neigh_policy
            first = self.timestep - self.built_at == every  # rebuilt at the first step the policy allowed:
            if check and every > 1 and first and self._agreed2 > self.rebuild_distance2:
                self.dangerous_builds += 1  # an atom may have moved more than half the skin before
            self.built_at, self._built = self.timestep, self.atoms.rebuilds

    @property
    def stop_request(self) -> int:
        """This rank's stop request of the step under way (it travels in the displacement's agreement)."""
        return max(self._stop_request, self._heard)

    def hear_stop(self, signum: int) -> None:
        """A stop request that came while this rank steps (called from the signals' thread): the next
        step's agreement carries it, also inside a batch of steps made in one compiled call, which reads
        ``top[1]`` at each step (there ``top[:2]`` is only sent: the agreed values come into ``top[2:]``).

        Before this, a rank in a batch carried its request only after the batch; the other ranks,
        between their own batches, carried none, so the stop waited for the batch's end, which on a
        loaded machine (a batch's length planned from one step's pace) took seconds to minutes.
        """
        self._heard = max(self._heard, int(signum))
        if self.kernels_call_mpi or self._ranks == 1:  # (Python's reduction is in place: never written to)
            self.top[1] = max(self.top[1], self._heard)

    def carry_stop(self) -> None:
        """Put this rank's stop request into the step's agreement (``top[1]``), one heard meanwhile kept."""
        self.top[1] = self.stop_request
        if self._heard > self.top[1]:  # heard between the read and the write: :meth:`hear_stop` wrote first
            self.top[1] = self._heard

    # -- what the run loop drives (pympi_gpu.nbody.loop.System) ----------
    @property
    def dt(self) -> float:
        return self.config.dt

    @property
    def clock(self):
        return self.halo.clock

    @property
    def comm_time(self) -> float:
        return self.halo.comm_time

    @comm_time.setter
    def comm_time(self, value: float) -> None:
        self.halo.comm_time = value

    def prepare(self) -> None:
        """Lists and forces before the first step (:meth:`start`); collective."""
        self._copies0, self._rebuilds0 = self.atoms.host_copies, self.atoms.rebuilds
        self.atoms.start()  # (a restart's rebuild: the run's last, at built_at)
        self._built = self.atoms.rebuilds
        self._calls0 = self.atoms.calls()  # the device's launches and syncs (None on the CPU)
        # the rebuilds of the steps from here on (the loop times those): their count and seconds
        self._timed0 = (self.atoms.rebuilds, self.atoms.rebuild_seconds)

    def advance(self, energy: bool, stop: int) -> int | None:
        """One step (``timestep += 1``); ``energy``: sum energy and virial on the way (a thermo step).

        The step's displacement test is a reduction over the ranks: this rank's
        stop request ``stop`` travels in it, and the agreed one is returned.
        """
        self.timestep += 1
        self._stop_request, self._stop_agreed = stop, None
        self.threshold2 = self.threshold(self.timestep)
        self.atoms.step(eflag=energy)
        if self.atoms.books is not None:  # queued, the device deciding: one rank, whose request is agreed
            self._stop_agreed = stop
        self._note_rebuilds()
        return self._stop_agreed

    def advance_quiet(self, most: int, stop: int) -> tuple[list[float], int | None]:
        """Up to ``most`` steps without energy sums, in compiled calls where the atoms can
        (``HostAtoms.steps``: a call until a rebuild, and on, until a stop request); collective.
        Returns the steps' seconds and the stop request agreed (as :meth:`advance`)."""
        until = self._steps_to_look()  # the policy's next look at the lists (every step by default)
        queued = self.atoms.books is not None  # the device decides the rebuilds, its policy's looks included
        if not self.atoms.batched or (stop if queued else until == 1 < self.config.neigh_every):
            t0 = time.perf_counter()
            stop = self.advance(False, stop)
            return [time.perf_counter() - t0], stop
        self._stop_request, self._stop_agreed = stop, None
        if queued:  # the steps queued, one wait at their end (one rank: no stop request, or it took one step)
            times = self.atoms.steps(most)
            self._note_rebuilds()
            return times, stop
        if self.config.neigh_every > 1:  # the steps before the look: none rebuilds (the look is a step alone);
            most = min(most, until - 1)  # a batch stops only where an atom moved farther than its ghosts reach
            self.threshold2, self.batch_stop2 = math.inf, self.move_limit2
        else:
            self.threshold2, self.batch_stop2 = self.rebuild_distance2, min(self.rebuild_distance2, self.move_limit2)
        times = self.atoms.steps(most)
        self._note_rebuilds()
        return times, self._stop_agreed

    def healthy(self, thorough: bool) -> bool:
        """This brick's state finite?  Every step's rebuild test already catches positions that are not;
        ``thorough`` (before anything is written) looks at the velocities and forces too."""
        if not thorough:
            return True
        self.settle()
        return self.atoms.finite()

    def settle(self) -> None:
        """Wait for the steps the atoms queued (a GPU's one brick, whose device decides the rebuilds), made again
        where a buffer was short, and take the device's books; at once where none are queued.  Before every
        output."""
        self.atoms.settle()
        self._note_rebuilds()

    def fault(self) -> BlowUp:
        return BlowUp(None, "non-finite positions, velocities or forces",
                      "the forces overflowed: reduce --dt or --temperature")

    def thermo(self):
        """The thermo row at this step (collective); a non-finite one is a blow-up."""
        clock = self.clock
        self.settle()
        coupling = self.bath.coupling(self.atoms.bath_state()) if self.bath.style.couples else None
        with clock.phase("waiting"):
            row = thermo(self.cart, self.timestep, self.atoms.local_sums(), self.config.atoms, self.config.volume,
                         coupling)
        clock.sent(6 * 8)
        if not all(math.isfinite(v) for v in (row.temp, row.e_pair, row.etotal, row.press, *row.momentum)):
            raise BlowUp(None, f"non-finite thermo (temperature {row.temp:.4g}, energy {row.etotal:.4g} per atom)",
                         "the forces overflowed: reduce --dt or --temperature")
        return row

    def frame(self) -> dict | None:
        """Every atom on rank 0 (None elsewhere), in id order, folded into the box; collective."""
        from pympi_gpu.nbody.lj import checkpoint as ckpt

        full = ckpt.gather(self.cart, self.atoms.owned())
        if full is not None:
            full["x"] = wrap(full["x"], self.config.box)
        return full

    def meta(self, initial) -> dict:
        """What a checkpoint records besides the atoms: the config, the step, the step-0 row, and the
        thermostat's state (where it has one: exact, as JSON writes a float)."""
        bath = {"thermostat_state": self.bath.saved(self.atoms.bath_state())} if self.bath.style.state_size else {}
        row = None if initial is None else {k: v for k, v in dataclasses.asdict(initial).items()
                                            if not (k == "econserve" and v is None)}  # (an NVE run's as before)
        return {**self.config.meta(), "step": self.timestep, "time": self.timestep * self.config.dt,
                "built_at": self.built_at, "initial": row, **bath}

    def save(self, path: str, initial) -> None:
        """A checkpoint in id order, with the positions at the last rebuild (collective); the run goes on as
        it would have without it."""
        from pympi_gpu.nbody.lj import checkpoint as ckpt

        self.settle()  # (the device's books: the step of its last rebuild)
        ckpt.save(self.cart, path, {**self.atoms.owned(), ckpt.REFERENCE: self.atoms.reference()},
                  self.meta(initial))

    def save_broken(self, path: str, initial, note: str) -> None:
        """A blown-up state in rank order, as it is (its atoms may be lost or held twice); collective."""
        from pympi_gpu.nbody.lj import checkpoint as ckpt

        ckpt.save(self.cart, path, self.atoms.owned(), dict(self.meta(initial), blowup=note), by_id=False)

    def close(self) -> None:
        """Free what the atoms hold on the communicator (the host halo's persistent messages); call it
        before ``cart.Free()``: a request freed after its communicator, by a garbage collection at
        any point, destroys the communicator there, and a rank of the MPI suite hung in it."""
        self.atoms.close()

    def record(self, result, labels) -> LjRun:
        """The run's record from the loop's :class:`~pympi_gpu.nbody.loop.LoopResult`; collective."""
        from mpi4py import MPI

        self.settle()
        comm, config = self.cart, self.config
        copies = None
        if self._copies0 is not None:  # the most any rank copied, over the whole run, checkpoints and frames included
            copies = comm.allreduce(self.atoms.host_copies - self._copies0, op=MPI.MAX)
        steps = result.steps
        calls = None if self._calls0 is None else self.atoms.calls_per_step(comm, self._calls0, steps)
        return LjRun(
            atoms=config.atoms, cells=config.cells, box=list(config.box), density=config.density,
            temperature=config.temperature, pair=config.pair, pair_coeffs=config.coefficients, cutoff=config.cutoff,
            skin=config.skin, dt=config.dt, seed=config.seed,
            ranks=comm.Get_size(), grid=tuple(self.brick.dims), backend=labels.backend,
            backend_reason=labels.backend_reason, transport=labels.transport, transport_reason=labels.transport_reason,
            newton=config.newton, first_step=result.first_step, last_step=result.last_step, steps=steps,
            wall_time=result.wall_time, time_per_step=result.time_per_step, median_step_time=result.median_step_time,
            comm_time=result.comm_time, comm_per_step=result.comm_time / steps if steps else 0.0,
            cpu_time=result.cpu_time, rate=result.rate(config.atoms), rebuilds=self.atoms.rebuilds - self._rebuilds0,
            neighbors_per_atom=comm.allreduce(self.atoms.pairs) / config.atoms,
            ghosts_per_rank=comm.allreduce(self.halo.ghosts) / comm.Get_size(),
            atoms_per_rank=tuple(comm.allgather(self.nlocal)), thermo=result.thermo,
            energy_drift=result.energy_drift, momentum_change=result.momentum_change, checkpoint=result.checkpoint,
            checkpoints_written=result.checkpoints_written, restarted_from=result.restarted_from,
            stopped_by=result.stopped_by, provenance=labels.provenance, phases=result.phases,
            traffic=result.traffic,
            host_copies_per_step=None if copies is None else (copies / steps if steps else float(copies)),
            launches_per_step=calls and calls["launches"], host_syncs_per_step=calls and calls["syncs"],
            device_calls_per_step=calls and calls["phases"],
            step_mpi=None if self._gpu else "kernels" if self.kernels_call_mpi else "python",
            neigh_every=config.neigh_every, neigh_check=config.neigh_check,
            dangerous_builds=comm.allreduce(self.dangerous_builds, op=MPI.MAX) if config.neigh_check else None,
            thermostat=config.thermostat, tdamp=config.tdamp if config.thermostatted else None,
            init=None if config.start is None else config.start.meta(), precision=config.precision,
            written_in=self.written_in,
            **self._rebuild_times(comm))

    def _rebuild_times(self, comm) -> dict:
        """``rebuild_time``, ``time_per_rebuild`` of the timed steps (the slowest rank's; None where not
        measured); collective."""
        from mpi4py import MPI

        count0, seconds0 = self._timed0
        seconds = self.atoms.rebuild_seconds
        if seconds is None or seconds0 is None:
            return {}
        total = comm.allreduce(seconds - seconds0, op=MPI.MAX)
        count = self.atoms.rebuilds - count0
        return {"rebuild_time": total, "time_per_rebuild": total / count if count else None}
