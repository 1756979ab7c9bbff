"""The LJ model's system: velocity Verlet over bricks with Verlet lists; collective over the Cartesian comm.

Each step: ``v += f dt/2; x += v dt``; if any atom moved more than half the
skin since the last rebuild (checked on every rank, decided together), the
atoms migrate to their bricks, are sorted by cell (locality), the ghosts and
the Verlet lists are rebuilt; otherwise only the ghost positions are
refreshed, while the owned-owned forces are computed; then the owned-ghost
forces, with ``newton`` (one thread per rank, the CPU) the ghosts' forces sent
back to their owners (:meth:`Halo.reverse`), and ``v += f dt/2``.  This is
LAMMPS's ``fix nve`` with ``neigh_modify delay 0 every 1 check yes`` and
``newton on``.  :class:`LjSystem` is what the run loop
(:mod:`pympi_gpu.nbody.loop`) drives: the steps, thermo rows, frames and
checkpoints of this model.

Order of summation: atoms are sorted by (cell, id) at every rebuild, so a
rebuild's outcome depends on the positions only, not on the history.  After
every checkpoint the next step rebuilds, as a restarted run does, so a run
restarted from a checkpoint on the same number of ranks continues bit for bit
(the positions are folded into the box at a checkpoint, as the restart's first
rebuild folds them).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from pympi_gpu.nbody.blowup import BlowUp, finite_rows, moved_too_far
from pympi_gpu.nbody.lj import kernels_cpu as kc
from pympi_gpu.nbody.lj.config import DEFAULT_SEED, LjConfig
from pympi_gpu.nbody.lj.domain import brick_of, wrap
from pympi_gpu.nbody.lj.halo import Halo
from pympi_gpu.nbody.lj import lattice
from pympi_gpu.nbody.lj.record import LjRun
from pympi_gpu.nbody.lj.thermo import thermo

__all__ = ["LjConfig", "LjSystem", "initial_arrays", "DEFAULT_SEED"]

def initial_arrays(config: LjConfig, brick, comm=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """This brick's atoms of the initial state: ``(x, v, ids)``; collective over ``comm`` if given.

    The state is :func:`~pympi_gpu.nbody.lj.lattice.fcc_positions` and
    :func:`~pympi_gpu.nbody.lj.lattice.velocities` of the whole system, bit
    for bit and so the same for any number of ranks, but each rank makes only
    its brick's atoms (:func:`~pympi_gpu.nbody.lj.lattice.brick_lattice`,
    :func:`~pympi_gpu.nbody.lj.lattice.draws`): no rank holds more than its
    share and a block.  The two sums over all atoms come out as NumPy's: the
    momentum's, which adds the atoms one after the other, streamed by rank 0
    and broadcast; the kinetic energy's pairwise tree, its leaves shared by
    the ranks and added in the tree's order on each, so every rank scales by
    the same float.  Without ``comm`` this process computes both sums alone.
    """
    x, ids = lattice.brick_lattice(config.cells, config.density, config.box, brick.dims, brick.coords)
    v = lattice.draws(config.seed, ids)
    rank, size = (0, 1) if comm is None else (comm.Get_rank(), comm.Get_size())
    mean = lattice.momentum_sum(config.atoms, config.seed) / config.atoms if rank == 0 else None
    if comm is not None:
        mean = comm.bcast(mean, root=0)
    leaves = lattice.square_sum_leaves(config.atoms)
    mine = [lattice.square_sum_leaf(config.seed, mean, *leaf) for leaf in leaves[rank::size]]
    parts = [mine] if comm is None else comm.allgather(mine)
    sums = [parts[i % size][i // size] for i in range(len(leaves))]  # leaf i was rank i % size's
    lattice.scale_velocities(v, mean, lattice.square_sum(config.atoms, sums), config.atoms, config.temperature)
    return x, v, ids


class LjSystem:
    """The atoms of one brick, their ghosts and Verlet lists.

    Parameters
    ----------
    cart : periodic Cartesian communicator (this object does not free it)
    config : :class:`LjConfig`
    x, v : ``(n, 3)`` owned positions and velocities
    ids : ``(n,)`` int64 global atom ids (1-based)
    f : ``(n, 3)`` forces at ``x``, or None to compute them
    timestep : the step the state is at (a restart's)
    initial : the thermo row of step 0 (a restart's, for the energy drift), or None
    """

    #: atom arrays copied from a device to the host so far (None: the atoms live on the host)
    host_copies: int | None = None

    def __init__(self, cart, config: LjConfig, x, v, ids, f=None, *, timestep: int = 0, initial=None):
        self.cart = self.comm = cart
        self.forces = kc.force_kernels(config.pair_term)
        self.timestep = timestep
        self.initial = initial
        self._rebuild_next = False  # after a checkpoint (and a restart) the next step rebuilds
        self._fold_next = False  # after a checkpoint the next step first folds the positions into the box
        self._stop_request, self._stop_agreed = 0, None  # carried by the displacement test (advance)
        self.config = config
        self.brick = brick_of(config.box, cart.Get_topo()[0], cart.Get_coords(cart.Get_rank()))
        self.halo = Halo(cart, self.brick, config.cutneigh)
        self.pos = np.ascontiguousarray(x, dtype=np.float64)
        self.v = np.ascontiguousarray(v, dtype=np.float64)
        self.ids = np.ascontiguousarray(ids, dtype=np.int64)
        self.f = np.zeros_like(self.v) if f is None else np.ascontiguousarray(f, dtype=np.float64)
        self.have_forces = f is not None
        self.nlocal = self.v.shape[0]
        self.energy = 0.0
        self.virial = 0.0
        self.rebuilds = 0
        self.pairs = 0
        self.gid = self.ids
        self.lists = None
        ext = [self.brick.hi[d] - self.brick.lo[d] + 2 * config.cutneigh for d in range(3)]
        # cells of at least half the neighbour cutoff, searched `reach` = 2 cells out
        self.reach = 2
        self.ncell = np.array([max(1, int(2 * e / config.cutneigh)) for e in ext], np.int64)
        # capacities of the padded lists; grown when a rebuild finds more neighbours
        shell = 4.0 / 3.0 * math.pi * config.cutneigh ** 3 * config.density
        self.cap = [int(0.75 * shell) + 16] * 2 if config.newton else [int(1.3 * shell) + 16] * 2
        self.cell_lo = np.array([self.brick.lo[d] - config.cutneigh for d in range(3)])
        self.cell_inv = np.array([self.ncell[d] / ext[d] for d in range(3)])

    # -- neighbour lists --------------------------------------------------
    def rebuild(self) -> None:
        """Migrate, sort by cell, rebuild ghosts and Verlet lists; collective.

        Raises :class:`~pympi_gpu.nbody.blowup.BlowUp` on every rank where some
        rank holds non-finite velocities or forces, or where the migration
        left more or fewer atoms than the system has.
        """
        x = self.pos[:self.nlocal]
        finite = finite_rows(self.v, self.f[:self.nlocal])
        rows = np.hstack([self.v, self.f[:self.nlocal], self.ids[:, None].astype(np.float64)])
        x, rows = self.halo.migrate(x, rows)
        self.agree_migration(x.shape[0], finite)
        cell_of, _, _ = kc.bin_atoms(x, x.shape[0], self.cell_lo, self.cell_inv, self.ncell)
        ids = rows[:, 6].astype(np.int64)
        order = np.lexsort((ids, cell_of))
        x, rows, ids = x[order], rows[order], ids[order]
        self.nlocal = x.shape[0]
        self.v = np.ascontiguousarray(rows[:, 0:3])
        self.ids = ids
        self.pos, self.gid = self.halo.borders(np.ascontiguousarray(x), ids)
        # forces have ghost rows too: with newton they gather the ghosts' share before going back
        self.f = np.zeros_like(self.pos)
        self.f[:self.nlocal] = rows[:, 3:6]
        self.x0 = self.pos[:self.nlocal].copy()
        cell_of, start, atoms = kc.bin_atoms(self.pos, self.pos.shape[0], self.cell_lo, self.cell_inv, self.ncell)
        cut2 = self.config.cutneigh ** 2
        while True:
            *lists, ok = kc.neighbor_lists(self.pos, self.nlocal, self.gid, cell_of, start, atoms, self.ncell,
                                           self.reach, cut2, self.config.cutoff ** 2, self.config.newton,
                                           self.cap[0], self.cap[1])
            if ok:
                break
            self.cap = [max(self.cap[0], int(lists[0].max(initial=0)) + 8),
                        max(self.cap[1], int(lists[2].max(initial=0)) + 8)]
        self.lists = lists
        # distinct pairs within cutoff + skin (without newton each is listed from both sides)
        self.pairs = (1.0 if self.config.newton else 0.5) * (int(lists[0].sum()) + int(lists[2].sum()))
        self.rebuilds += 1

    def agree_migration(self, owned: int, finite: bool) -> None:
        """After a migration: do the ranks' owned atoms sum to N, and were all forces finite? Collective.

        Raises :class:`~pympi_gpu.nbody.blowup.BlowUp` on every rank if not.
        """
        from mpi4py import MPI

        tally = np.array([owned, 0 if finite else 1], np.int64)  # [atoms owned, ranks not finite]
        with self.halo.clock.phase("waiting"):
            self.cart.Allreduce(MPI.IN_PLACE, tally, op=MPI.SUM)
        self.halo.clock.sent(tally.nbytes)
        if tally[1]:
            raise BlowUp(None, "non-finite velocities or forces", "the forces overflowed: reduce --dt or --temperature")
        if tally[0] != self.config.atoms:
            what = "lost" if tally[0] < self.config.atoms else "duplicated"
            raise BlowUp(None, f"{abs(int(tally[0]) - self.config.atoms)} atoms {what} in the migration to their bricks",
                         "atoms moved too far between list builds: reduce --dt or --temperature")

    @property
    def move_limit(self) -> float:
        """The farthest an atom may move between list builds: its ghosts' reach, or a brick if thinner."""
        return min(self.config.cutneigh, *(self.brick.hi[d] - self.brick.lo[d] for d in range(3)))

    def needs_rebuild(self) -> bool:
        """Has any atom on any rank moved more than skin/2 since the last rebuild?  Collective.

        Raises :class:`~pympi_gpu.nbody.blowup.BlowUp` on every rank where one
        moved beyond :attr:`move_limit` or has a non-finite position.
        """
        if self.lists is None:
            return True
        return self.agree_displacement(kc.max_displacement2(self.pos, self.x0, self.nlocal))

    def agree_displacement(self, d2: float) -> bool:
        """All ranks' largest squared displacement ``d2`` (NaN counts as infinite): rebuild?  Collective.

        The same reduction carries the ranks' stop requests (the run loop's, see :meth:`advance`).
        """
        from mpi4py import MPI

        top = np.array([d2 if d2 == d2 else np.inf, self._stop_request])
        clock = self.halo.clock
        with clock.phase("waiting"):  # every rank's step meets here: the imbalance shows
            self.cart.Allreduce(MPI.IN_PLACE, top, op=MPI.MAX)
        clock.sent(top.nbytes)
        self._stop_agreed = int(top[1])
        if bad := moved_too_far(None, float(top[0]), self.move_limit, "sigma"):
            raise bad
        return bool(top[0] > (0.5 * self.config.skin) ** 2)

    # -- forces -----------------------------------------------------------
    def compute_forces(self, forward: bool, eflag: bool = True) -> None:
        """Forces at the current positions, energy and virial if ``eflag``; collective if ``forward``.

        With ``forward`` the ghost positions are refreshed stage by stage while
        a third of the owned-owned pairs is computed behind each stage.  With
        newton the ghosts' forces then go back to their owners (collective).
        Without ``eflag`` (LAMMPS skips the sums on steps without thermo output)
        :meth:`local_sums` computes them when asked, from the same positions.
        """
        self.f[...] = 0.0
        self._pairs(self.f, forward, eflag)
        if self.config.newton:
            self.halo.reverse(self.f)
        self.have_forces = True

    def _pairs(self, f, forward: bool, eflag: bool) -> None:
        """Add the pair forces to ``f``; set ``energy``/``virial`` (None without ``eflag``)."""
        own_cnt, own_nbr, gh_cnt, gh_nbr = self.lists
        rc2 = self.config.cutoff ** 2
        n = self.nlocal
        newton = self.config.newton
        bounds = [0, n // 3, (2 * n) // 3, n]
        sums = [0.0, 0.0]

        def work(stage):
            e, w = self.forces.pair_forces(self.pos, f, bounds[stage], bounds[stage + 1], own_cnt, own_nbr, rc2,
                                           newton, eflag)
            scale = 1.0 if newton else 0.5
            sums[0] += scale * e
            sums[1] += scale * w

        if forward:
            self.halo.forward(self.pos, work)
        else:
            for s in range(3):
                work(s)
        e, w = self.forces.pair_forces(self.pos, f, 0, n, gh_cnt, gh_nbr, rc2, newton, eflag)
        scale = 1.0 if newton else 0.5  # without newton the other rank computes the pair too
        if eflag:
            self.energy = sums[0] + scale * e
            self.virial = sums[1] + scale * w
        else:
            self.energy = self.virial = None

    def local_sums(self) -> np.ndarray:
        """``[sum v^2, px, py, pz, E_pair, virial]`` of this brick."""
        if self.energy is None:  # the last step skipped the sums: the same pair loops into scratch forces
            # (no reverse communication: each pair's energy is counted where it is computed)
            self._pairs(np.zeros_like(self.f), False, True)
        return np.concatenate([kc.kinetic_sums(self.v, self.nlocal), [self.energy, self.virial]])

    def step(self, force_rebuild: bool = False, eflag: bool = False) -> None:
        """One velocity-Verlet step; collective.  ``eflag``: sum energy and virial (a thermo step).

        Raises :class:`~pympi_gpu.nbody.blowup.BlowUp` (on every rank) where the state blew up.
        """
        h = 0.5 * self.config.dt
        kc.kick(self.v, self.f, h, self.nlocal)
        kc.drift(self.pos, self.v, self.config.dt, self.nlocal)
        if self.needs_rebuild() or force_rebuild:
            self.rebuild()
            self.compute_forces(forward=False, eflag=eflag)
        else:
            self.compute_forces(forward=True, eflag=eflag)
        kc.kick(self.v, self.f, h, self.nlocal)

    def start(self) -> bool:
        """Lists and (unless loaded) forces at the current positions; collective.

        Returns whether the forces came loaded (a restart), after which the
        first step must rebuild, as the run that wrote the checkpoint did.
        """
        had = self.have_forces
        self.rebuild()
        f = self.f.copy()
        self.compute_forces(forward=False)
        if had:  # a restart: keep the checkpoint's forces (bit-identical continuation)
            self.f[...] = f
        return had

    def wrap(self) -> None:
        """Fold the owned positions into the box, as a restart's first rebuild does (ghosts go stale).

        The reference positions of the rebuild test move with them: a fold is not a displacement.
        """
        n = self.nlocal
        folded = wrap(self.pos[:n], self.config.box)
        if self.lists is not None:
            self.x0 += folded - self.pos[:n]
        self.pos[:n] = folded

    def owned(self) -> dict[str, np.ndarray]:
        """Host copies of the owned atoms: ``x v f`` ``(n, 3)`` and ``id``."""
        n = self.nlocal
        return {"x": self.pos[:n].copy(), "v": self.v[:n].copy(), "f": self.f[:n].copy(), "id": self.ids.copy()}



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
        self._copies0, self._rebuilds0 = self.host_copies, self.rebuilds
        self._rebuild_next = self.start()

    def advance(self, energy: bool, stop: int) -> int | None:
        """One step (``timestep += 1``); ``energy``: sum energy and virial on the way (a thermo step).

        The step's displacement test is a reduction over the ranks: this rank's
        stop request ``stop`` travels in it, and the agreed one is returned.
        """
        self.timestep += 1
        self._stop_request, self._stop_agreed = stop, None
        if self._fold_next:  # the first step after a checkpoint starts where a restart from it would
            self.wrap()
            self._fold_next = False
        self.step(force_rebuild=self._rebuild_next, eflag=energy)
        self._rebuild_next = False
        return self._stop_agreed

    def healthy(self, thorough: bool) -> bool:
        """This brick's state finite?  Every step's rebuild test already catches positions that are not;
        ``thorough`` (before anything is written) looks at the velocities and forces too."""
        n = self.nlocal
        return not thorough or finite_rows(self.pos[:n], self.v, self.f[:n])

    def fault(self) -> BlowUp:
        return BlowUp(None, "non-finite positions, velocities or forces",
                      "the forces overflowed: reduce --dt or --temperature")

    def thermo(self):
        """The thermo row at this step (collective); a non-finite one is a blow-up."""
        clock = self.clock
        with clock.phase("waiting"):
            row = thermo(self.cart, self.timestep, self.local_sums(), self.config.atoms, self.config.box ** 3)
        clock.sent(6 * 8)
        if not all(math.isfinite(v) for v in (row.temp, row.e_pair, row.etotal, row.press, *row.momentum)):
            raise BlowUp(None, f"non-finite thermo (temperature {row.temp:.4g}, energy {row.etotal:.4g} per atom)",
                         "the forces overflowed: reduce --dt or --temperature")
        return row

    def frame(self) -> dict | None:
        """Every atom on rank 0 (None elsewhere), in id order, folded into the box; collective."""
        from pympi_gpu.nbody.lj import checkpoint as ckpt

        full = ckpt.gather(self.cart, self.owned())
        if full is not None:
            full["x"] = wrap(full["x"], self.config.box)
        return full

    def meta(self, initial) -> dict:
        return {**self.config.meta(), "step": self.timestep, "time": self.timestep * self.config.dt,
                "initial": None if initial is None else dataclasses.asdict(initial)}

    def save(self, path: str, initial) -> None:
        """A checkpoint in id order (collective); a next step folds and rebuilds, as a restart from it would."""
        from pympi_gpu.nbody.lj import checkpoint as ckpt

        ckpt.save(self.cart, path, self.owned(), self.meta(initial))
        self._fold_next = self._rebuild_next = True

    def save_broken(self, path: str, initial, note: str) -> None:
        """A blown-up state in rank order, as it is (its atoms may be lost or held twice); collective."""
        from pympi_gpu.nbody.lj import checkpoint as ckpt

        ckpt.save(self.cart, path, self.owned(), dict(self.meta(initial), blowup=note), by_id=False)

    def record(self, result, labels) -> LjRun:
        """The run's record from the loop's :class:`~pympi_gpu.nbody.loop.LoopResult`; collective."""
        from mpi4py import MPI

        comm, config = self.cart, self.config
        copies = None
        if self._copies0 is not None:  # the most any rank copied, over the whole run, checkpoints and frames included
            copies = comm.allreduce(self.host_copies - self._copies0, op=MPI.MAX)
        steps = result.steps
        return LjRun(
            atoms=config.atoms, cells=config.cells, box=config.box, density=config.density,
            temperature=config.temperature, pair=config.pair, pair_coeffs=config.coefficients, cutoff=config.cutoff, skin=config.skin, dt=config.dt, seed=config.seed,
            ranks=comm.Get_size(), grid=tuple(self.brick.dims), backend=labels.backend,
            backend_reason=labels.backend_reason, transport=labels.transport, transport_reason=labels.transport_reason,
            newton=config.newton, first_step=result.first_step, last_step=result.last_step, steps=steps,
            wall_time=result.wall_time, time_per_step=result.time_per_step, median_step_time=result.median_step_time,
            comm_time=result.comm_time, comm_per_step=result.comm_time / steps if steps else 0.0,
            cpu_time=result.cpu_time, rate=result.rate(config.atoms), rebuilds=self.rebuilds - self._rebuilds0,
            neighbors_per_atom=comm.allreduce(self.pairs) / config.atoms,
            ghosts_per_rank=comm.allreduce(self.halo.ghosts) / comm.Get_size(),
            atoms_per_rank=tuple(comm.allgather(self.nlocal)), thermo=result.thermo,
            energy_drift=result.energy_drift, momentum_change=result.momentum_change, checkpoint=result.checkpoint,
            checkpoints_written=result.checkpoints_written, restarted_from=result.restarted_from,
            stopped_by=result.stopped_by, provenance=labels.provenance, phases=result.phases,
            traffic=result.traffic,
            host_copies_per_step=None if copies is None else (copies / steps if steps else float(copies)))
