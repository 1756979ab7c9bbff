"""The LJ run: velocity Verlet over bricks with Verlet lists; collective over comm.

Each step: ``v += f dt/2; x += v dt``; if any atom moved more than half the
skin since the last rebuild (checked on every rank, decided together), the
atoms migrate to their bricks, are sorted by cell (locality), the ghosts and
the Verlet lists are rebuilt; otherwise only the ghost positions are
refreshed, while the owned-owned forces are computed; then the owned-ghost
forces, with ``newton`` (one thread per rank, the CPU) the ghosts' forces sent
back to their owners (:meth:`Halo.reverse`), and ``v += f dt/2``.  This is
LAMMPS's ``fix nve`` with ``neigh_modify delay 0 every 1 check yes`` and
``newton on``.

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
import statistics
import time
from collections.abc import Callable

import numpy as np

from pympi_gpu.nbody.blowup import BlowUp, finite_rows, moved_too_far
from pympi_gpu.nbody.lj import kernels_cpu as kc
from pympi_gpu.nbody.lj.domain import brick_of, owner_coords, wrap
from pympi_gpu.nbody.lj.halo import Halo
from pympi_gpu.nbody.lj.lattice import fcc_positions, velocities
from pympi_gpu.nbody.lj.record import LjRun
from pympi_gpu.nbody.lj.thermo import thermo
from pympi_gpu.run.phases import summarise

__all__ = ["LjConfig", "LjSystem", "initial_arrays", "simulate", "DEFAULT_SEED"]

#: the seed of ``velocity all create 1.44 87287`` in LAMMPS's bench/in.lj
DEFAULT_SEED = 87287


@dataclasses.dataclass(frozen=True)
class LjConfig:
    """What to run.  ``steps`` is the step number to reach; ``thermo_every`` 0 means first and last only."""

    cells: int
    steps: int
    density: float = 0.8442
    temperature: float = 1.44
    cutoff: float = 2.5
    skin: float = 0.3
    dt: float = 0.005
    seed: int = DEFAULT_SEED
    thermo_every: int = 0
    newton: bool = True
    checkpoint: str | None = None
    checkpoint_every: int | None = None
    stop_checkpoint: str | None = None
    #: where a blown-up state is saved for inspection (``--on-blowup save``); None: not saved
    blowup_save: str | None = None
    #: a trajectory frame every K steps (and at the first); 0: none
    dump_every: int = 0
    dump: str | None = None

    @property
    def atoms(self) -> int:
        return 4 * self.cells ** 3

    @property
    def box(self) -> float:
        return self.cells * (4.0 / self.density) ** (1.0 / 3.0)

    @property
    def cutneigh(self) -> float:
        return self.cutoff + self.skin


def initial_arrays(config: LjConfig, brick) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """This brick's atoms of the initial state: ``(x, v, ids)``.

    Every rank draws the whole (cheap) lattice and velocity set in id order,
    so the state is the same for any number of ranks.
    """
    x = fcc_positions(config.cells, config.density)
    v = velocities(config.atoms, config.temperature, config.seed)
    mine = np.all(owner_coords(x, config.box, brick.dims) == np.array(brick.coords), axis=1)
    return x[mine].copy(), v[mine].copy(), np.nonzero(mine)[0].astype(np.int64) + 1


class LjSystem:
    """The atoms of one brick, their ghosts and Verlet lists.

    Parameters
    ----------
    cart : periodic Cartesian communicator (this object does not free it)
    config : :class:`LjConfig`
    x, v : ``(n, 3)`` owned positions and velocities
    ids : ``(n,)`` int64 global atom ids (1-based)
    f : ``(n, 3)`` forces at ``x``, or None to compute them
    """

    #: atom arrays copied from a device to the host so far (None: the atoms live on the host)
    host_copies: int | None = None

    def __init__(self, cart, config: LjConfig, x, v, ids, f=None):
        self.cart = cart
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
        self.at_step = 0  # the step being taken, for the blow-up message (set by the driver)
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
        """All ranks' largest squared displacement ``d2`` (NaN counts as infinite): rebuild?  Collective."""
        from mpi4py import MPI

        top = np.array([d2 if d2 == d2 else np.inf])
        clock = self.halo.clock
        with clock.phase("waiting"):  # every rank's step meets here: the imbalance shows
            self.cart.Allreduce(MPI.IN_PLACE, top, op=MPI.MAX)
        clock.sent(top.nbytes)
        if bad := moved_too_far(None, float(top[0]), self.move_limit, "sigma"):
            raise bad
        return bool(top[0] > (0.5 * self.config.skin) ** 2)

    def check_finite(self) -> None:
        """Raise :class:`~pympi_gpu.nbody.blowup.BlowUp` on every rank if any rank's state is not finite.

        Collective; called before anything is written.
        """
        from mpi4py import MPI

        owned = self.owned()
        bad = self.cart.allreduce(0 if finite_rows(owned["x"], owned["v"], owned["f"]) else 1, op=MPI.SUM)
        if bad:
            raise BlowUp(None, "non-finite positions, velocities or forces",
                         "the forces overflowed: reduce --dt or --temperature")

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
            e, w = kc.pair_forces(self.pos, f, bounds[stage], bounds[stage + 1], own_cnt, own_nbr, rc2, newton,
                                  eflag)
            scale = 1.0 if newton else 0.5
            sums[0] += scale * e
            sums[1] += scale * w

        if forward:
            self.halo.forward(self.pos, work)
        else:
            for s in range(3):
                work(s)
        e, w = kc.pair_forces(self.pos, f, 0, n, gh_cnt, gh_nbr, rc2, newton, eflag)
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


def _meta(config: LjConfig, step: int, initial) -> dict:
    return {"model": "lj", "step": step, "time": step * config.dt, "cells": config.cells, "atoms": config.atoms,
            "density": config.density, "temperature": config.temperature, "cutoff": config.cutoff,
            "skin": config.skin, "dt": config.dt, "seed": config.seed,
            "initial": None if initial is None else dataclasses.asdict(initial)}


def simulate(comm, config: LjConfig, system: LjSystem, step: int, *, initial=None,
             backend: str = "numba", backend_reason: str = "", transport: str = "host",
             transport_reason: str = "", on_step: Callable[[int, int], None] | None = None,
             stop_requested: Callable[[], int] | None = None, restarted_from: str | None = None,
             provenance=None, on_thermo: Callable[[object], None] | None = None, dump=None) -> LjRun:
    """Advance ``system`` from ``step`` to ``config.steps``; collective over comm.

    ``initial`` is the thermo at step 0 of a restarted run (for the drift);
    ``on_thermo(row)`` is called on every rank with each thermo row as it is
    computed (the first at ``step``, then every ``config.thermo_every`` steps
    and the last); ``dump`` is rank 0's trajectory writer
    (:func:`pympi_gpu.nbody.dump.open_dump`) for a frame at the first step and
    every ``config.dump_every`` steps (None on the other ranks, or for none).
    Stop requests (SIGTERM, SIGINT), progress and checkpoints as the gravity
    model's :func:`pympi_gpu.nbody.gravity.driver.simulate`.  A blown-up state
    raises :class:`~pympi_gpu.nbody.blowup.BlowUp` on every rank with the step
    it was found at, having written nothing but, with ``config.blowup_save``,
    the broken state to that file.
    """
    try:
        return _simulate(comm, config, system, step, initial=initial, backend=backend,
                         backend_reason=backend_reason, transport=transport, transport_reason=transport_reason,
                         on_step=on_step, stop_requested=stop_requested, restarted_from=restarted_from,
                         provenance=provenance, on_thermo=on_thermo, dump=dump)
    except BlowUp as exc:
        exc.step = system.at_step
        if config.blowup_save:
            from pympi_gpu.nbody.lj import checkpoint as ckpt

            ckpt.save(comm, config.blowup_save, system.owned(), dict(_meta(config, exc.step, initial),
                                                                      blowup=f"{exc.check}: {exc.cause}"),
                      by_id=False)  # its atoms may be lost or held twice
            exc.saved = config.blowup_save
        raise


def _frame(comm, system, config, step, dump) -> None:
    """One trajectory frame: every atom, in id order, folded into the box; collective."""
    from pympi_gpu.nbody.dump import write_frame
    from pympi_gpu.nbody.lj import checkpoint as ckpt

    system.check_finite()  # nothing broken into the trajectory either
    full = ckpt.gather(comm, system.owned())
    if full is not None:
        full["x"] = wrap(full["x"], config.box)
    write_frame(comm, dump, step, step * config.dt, full, config.dump)


def _checked_thermo(comm, step, system, config, volume, on_thermo=None):
    """The thermo row at ``step`` (collective), passed to ``on_thermo``; a non-finite one is a blow-up."""
    row = thermo(comm, step, system.local_sums(), config.atoms, volume)
    if not all(math.isfinite(v) for v in (row.temp, row.e_pair, row.etotal, row.press, *row.momentum)):
        raise BlowUp(None, f"non-finite thermo (temperature {row.temp:.4g}, energy {row.etotal:.4g} per atom)",
                     "the forces overflowed: reduce --dt or --temperature")
    if on_thermo is not None:
        on_thermo(row)
    return row


def _simulate(comm, config, system, step, *, initial, backend, backend_reason, transport, transport_reason,
              on_step, stop_requested, restarted_from, provenance, on_thermo, dump) -> LjRun:
    import signal

    from mpi4py import MPI

    from pympi_gpu.nbody.lj import checkpoint as ckpt

    volume = config.box ** 3
    copies0 = system.host_copies
    system.at_step = step
    force = system.start()
    rows = [_checked_thermo(comm, step, system, config, volume, on_thermo)]
    if config.dump_every:
        _frame(comm, system, config, step, dump)
    if initial is None:
        initial = rows[0]
    first = step
    written = 0
    stopped = None
    times = []
    asked = np.zeros(2, np.int32)  # [this rank's stop flag, the answer of all ranks]
    pending = None
    system.halo.comm_time = 0.0
    clock = system.halo.clock
    clock.reset()
    rebuilds0 = system.rebuilds
    comm.Barrier()
    c0 = time.process_time()
    t0 = MPI.Wtime()
    try:
        while step < config.steps:
            ts = time.perf_counter()
            step += 1
            system.at_step = step
            system.step(force_rebuild=force,
                        eflag=bool(config.thermo_every and step % config.thermo_every == 0) or step == config.steps)
            force = False
            times.append(time.perf_counter() - ts)
            if (config.thermo_every and step % config.thermo_every == 0) or step == config.steps:
                with clock.phase("waiting"):
                    rows.append(_checked_thermo(comm, step, system, config, volume, on_thermo))
                clock.sent(6 * 8)
            if on_step is not None:
                on_step(step, config.steps)
            # A stop request (SIGTERM, SIGINT): each step posts its signal number without waiting and reads
            # the previous step's answer, so the stop costs no synchronisation of its own and comes one
            # step after the signal
            if pending is not None:
                with clock.phase("waiting"):
                    pending.Wait()
                pending = None
            if asked[1]:
                stopped = signal.Signals(int(asked[1])).name
                if rows[-1].step != step:
                    rows.append(_checked_thermo(comm, step, system, config, volume, on_thermo))
                break
            if config.dump_every and step % config.dump_every == 0:
                with clock.phase("io"):
                    _frame(comm, system, config, step, dump)
            asked[0] = (stop_requested() or 0) if stop_requested is not None else 0
            pending = comm.Iallreduce(asked[:1], asked[1:], op=MPI.MAX)
            clock.sent(asked[:1].nbytes)
            if config.checkpoint and config.checkpoint_every and step % config.checkpoint_every == 0 \
                    and step < config.steps:
                system.check_finite()  # nothing broken over a good checkpoint
                with clock.phase("io"):
                    ckpt.save(comm, config.checkpoint, system.owned(), _meta(config, step, initial))
                written += 1
                system.wrap()
                force = True  # as a restart from this checkpoint would
    finally:
        if pending is not None:  # a signal during the last step, or a blow-up: every rank completes it
            pending.Wait()
    wall = MPI.Wtime() - t0
    cpu = time.process_time() - c0
    # compute: the rest of the timed steps (pair forces, lists, integration), per rank
    clock.seconds["compute"] = max(0.0, wall - sum(clock.seconds[k] for k in ("communication", "waiting", "io")))
    path = config.checkpoint or (config.stop_checkpoint if stopped else None)
    if path:
        system.check_finite()
        with clock.phase("io"):
            ckpt.save(comm, path, system.owned(), _meta(config, step, initial))
        written += 1
    phases, traffic = summarise(comm, clock, step - first)
    copies = None
    if copies0 is not None:  # the most any rank copied, over the whole run, checkpoints and frames included
        copies = comm.allreduce(system.host_copies - copies0, op=MPI.MAX)
    timing = np.array([wall, system.halo.comm_time, cpu])
    comm.Allreduce(MPI.IN_PLACE, timing, op=MPI.MAX)
    wall, comm_time, cpu = float(timing[0]), float(timing[1]), float(timing[2])
    steps = step - first
    med = comm.allreduce(statistics.median(times) if times else 0.0, op=MPI.MAX)
    counts = tuple(comm.allgather(system.nlocal))
    pairs = comm.allreduce(system.pairs)
    ghosts = comm.allreduce(system.halo.ghosts)
    last = rows[-1]
    drift = abs((last.etotal - initial.etotal) / initial.etotal) if steps and initial.etotal else None
    dp = math.dist(last.momentum, initial.momentum) if steps else None
    return LjRun(
        atoms=config.atoms, cells=config.cells, box=config.box, density=config.density,
        temperature=config.temperature, cutoff=config.cutoff, skin=config.skin, dt=config.dt, seed=config.seed,
        ranks=comm.Get_size(), grid=tuple(system.brick.dims), backend=backend, backend_reason=backend_reason,
        transport=transport, transport_reason=transport_reason, newton=config.newton, first_step=first,
        last_step=step, steps=steps, wall_time=wall, time_per_step=wall / steps if steps else 0.0,
        median_step_time=med, comm_time=comm_time, comm_per_step=comm_time / steps if steps else 0.0, cpu_time=cpu,
        rate=config.atoms * steps / wall if steps and wall > 0 else 0.0,
        rebuilds=system.rebuilds - rebuilds0, neighbors_per_atom=pairs / config.atoms,
        ghosts_per_rank=ghosts / comm.Get_size(), atoms_per_rank=counts, thermo=tuple(rows),
        energy_drift=drift, momentum_change=dp, checkpoint=path, checkpoints_written=written,
        restarted_from=restarted_from, stopped_by=stopped, provenance=provenance, phases=phases, traffic=traffic,
        host_copies_per_step=None if copies is None else (copies / steps if steps else float(copies)))
