"""The atoms of one brick in host memory, with numba's kernels: the CPU half of an LJ system.

:class:`HostAtoms` holds the owned atoms and their ghosts, the Verlet lists
and the halo (:class:`~pympi_gpu.nbody.lj.halo.Halo`), and does what a step
needs on the CPU: kicks and drifts, the displacement test, the rebuild
(migration, a sort by (cell, id), ghosts, lists) and the pair forces, with
half lists and Newton's third law across bricks (``config.newton``: one
thread per rank) or full lists.  What every rank agrees on (the displacement,
the migration's tally) it asks of its :class:`~pympi_gpu.nbody.lj.system.LjSystem`,
which the device twin (:class:`~pympi_gpu.nbody.lj.device_atoms.DeviceAtoms`)
shares.

Order of summation: atoms are sorted by (cell, id) at every rebuild, so a
rebuild's outcome depends on the positions only, not on the history.
"""

from __future__ import annotations

import numpy as np

from pympi_gpu.nbody.blowup import finite_rows
from pympi_gpu.nbody.lj import kernels_cpu as kc
from pympi_gpu.nbody.lj.domain import wrap
from pympi_gpu.nbody.lj.halo import Halo

__all__ = ["HostAtoms"]


class HostAtoms:
    """This brick's atoms, ghosts and lists in host memory (see the module docstring).

    ``system`` is the :class:`~pympi_gpu.nbody.lj.system.LjSystem` they belong
    to (its config, brick, cell grid and agreements); ``x, v`` ``(n, 3)``,
    ``ids`` ``(n,)``, ``f`` ``(n, 3)`` or None to compute them.
    """

    #: atom arrays copied from a device to the host (none: the atoms live on the host)
    host_copies = None

    def __init__(self, system, x, v, ids, f=None):
        self.system = system
        config = self.config = system.config
        self.forces = kc.force_kernels(config.pair_term)
        self.halo = Halo(system.cart, system.brick, config.cutneigh)
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
        self.x0 = None
        self.cap = list(system.grid.capacity)

    # -- neighbour lists --------------------------------------------------
    def rebuild(self) -> None:
        """Migrate, sort by cell, rebuild ghosts and Verlet lists; collective.

        Raises :class:`~pympi_gpu.nbody.blowup.BlowUp` on every rank where some
        rank holds non-finite velocities or forces, or where the migration
        left more or fewer atoms than the system has.
        """
        grid = self.system.grid
        x = self.pos[:self.nlocal]
        finite = finite_rows(self.v, self.f[:self.nlocal])
        rows = np.hstack([self.v, self.f[:self.nlocal], self.ids[:, None].astype(np.float64)])
        x, rows = self.halo.migrate(x, rows)
        self.system.agree_migration(x.shape[0], finite)
        cell_of, _, _ = kc.bin_atoms(x, x.shape[0], grid.lo, grid.inv, grid.ncell)
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
        self._lists()
        self.rebuilds += 1

    def _lists(self) -> None:
        """The Verlet lists of the current rows, retried wider where a row overflows its capacity."""
        grid, config = self.system.grid, self.config
        cell_of, start, atoms = kc.bin_atoms(self.pos, self.pos.shape[0], grid.lo, grid.inv, grid.ncell)
        while True:
            *lists, ok = kc.neighbor_lists(self.pos, self.nlocal, self.gid, cell_of, start, atoms, grid.ncell,
                                           grid.reach, config.cutneigh ** 2, config.cutoff ** 2, config.newton,
                                           self.cap[0], self.cap[1])
            if ok:
                break
            self.cap = [max(self.cap[0], int(lists[0].max(initial=0)) + 8),
                        max(self.cap[1], int(lists[2].max(initial=0)) + 8)]
        self.lists = lists
        # distinct pairs within cutoff + skin (without newton each is listed from both sides)
        self.pairs = (1.0 if config.newton else 0.5) * (int(lists[0].sum()) + int(lists[2].sum()))

    def needs_rebuild(self) -> bool:
        """Has any atom on any rank moved more than skin/2 since the last rebuild?  Collective."""
        if self.lists is None:
            return True
        return self.system.agree_displacement(kc.max_displacement2(self.pos, self.x0, self.nlocal))

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
        self.pair_forces(self.f, forward, eflag)
        if self.config.newton:
            self.halo.reverse(self.f)
        self.have_forces = True

    def pair_forces(self, f, forward: bool, eflag: bool) -> None:
        """Add the pair forces to ``f``; set ``energy``/``virial`` (None without ``eflag``)."""
        own_cnt, own_nbr, gh_cnt, gh_nbr = self.lists
        rc2 = self.config.cutoff ** 2
        n = self.nlocal
        newton = self.config.newton
        scale = 1.0 if newton else 0.5  # without newton the other side computes the pair too
        bounds = [0, n // 3, (2 * n) // 3, n]
        sums = [0.0, 0.0]

        def work(stage):
            e, w = self.forces.pair_forces(self.pos, f, bounds[stage], bounds[stage + 1], own_cnt, own_nbr, rc2,
                                           newton, eflag)
            sums[0] += scale * e
            sums[1] += scale * w

        if forward:
            self.halo.forward(self.pos, work)
        else:
            for s in range(3):
                work(s)
        e, w = self.forces.pair_forces(self.pos, f, 0, n, gh_cnt, gh_nbr, rc2, newton, eflag)
        if eflag:
            self.energy = sums[0] + scale * e
            self.virial = sums[1] + scale * w
        else:
            self.energy = self.virial = None

    def local_sums(self) -> np.ndarray:
        """``[sum v^2, px, py, pz, E_pair, virial]`` of this brick."""
        if self.energy is None:  # the last step skipped the sums: the same pair loops into scratch forces
            # (no reverse communication: each pair's energy is counted where it is computed)
            self.pair_forces(np.zeros_like(self.f), False, True)
        return np.concatenate([kc.kinetic_sums(self.v, self.nlocal), [self.energy, self.virial]])

    # -- the step ---------------------------------------------------------
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

    def finite(self) -> bool:
        """Are this brick's positions, velocities and forces finite?"""
        n = self.nlocal
        return finite_rows(self.pos[:n], self.v, self.f[:n])

    def owned(self) -> dict[str, np.ndarray]:
        """Host copies of the owned atoms: ``x v f`` ``(n, 3)`` and ``id``."""
        n = self.nlocal
        return {"x": self.pos[:n].copy(), "v": self.v[:n].copy(), "f": self.f[:n].copy(), "id": self.ids.copy()}
