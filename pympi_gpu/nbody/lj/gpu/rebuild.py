"""The rebuild's device buffers and launches: the owned atoms sorted into cells, the ghosts' cells, the lists.

:class:`DeviceBuild` holds what a rebuild on the device works in, each buffer
of a fixed capacity (:class:`Capacity`), and launches the kernels of
:mod:`~pympi_gpu.nbody.lj.gpu.rebuild_kernels` that are not the halo's: the
owned atoms' counting sort by (cell, id) (:meth:`DeviceBuild.sort`: a kernel,
a scan, a kernel), the ghost cells' order (:meth:`DeviceBuild.ghost_cells`)
and the Verlet lists (:meth:`DeviceBuild.lists`).  The ghosts themselves are
the halo's (:class:`~pympi_gpu.nbody.lj.gpu.halo.DeviceHalo` writes them into
these buffers).  Every size the host needs after a rebuild is in ``meta``
(the ``M_*`` slots), which :meth:`DeviceBuild.read` brings back in one copy;
a capacity found short there is grown (:meth:`DeviceBuild.grow`) and the
rebuild made again.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pympi_gpu.nbody.lj.gpu import rebuild_kernels as rk
from pympi_gpu.nbody.lj.gpu.kernels import BLOCK, grid, strided_grid

__all__ = ["Capacity", "DeviceBuild"]


@dataclasses.dataclass
class Capacity:
    """What the device's buffers hold: ``atoms`` owned rows, ``rows`` rows owned and ghosts, ``cell`` rows a
    cell's bucket, ``widths`` a list row's entries (owned, ghosts)."""

    atoms: int
    rows: int
    cell: int
    widths: list[int]

    @property
    def chunks(self) -> int:
        """Chunks of :data:`~pympi_gpu.nbody.lj.gpu.kernels.BLOCK` base rows the ghost classes are counted in."""
        return grid(self.rows)


class DeviceBuild:
    """The buffers and kernels of a rebuild that are not the halo's (see the module's docstring).

    ``dev``: the :class:`~pympi_gpu.device.buffers.DeviceArrays`; ``system``: the
    :class:`~pympi_gpu.nbody.lj.system.LjSystem` (its config, cell grid and lists'
    policy); ``capacity``: the :class:`Capacity` to make the buffers with.
    """

    def __init__(self, dev, system, capacity: Capacity):
        self.dev = dev
        xp = dev.xp
        grid_ = system.grid
        self.config = system.config
        self.capacity = capacity
        self.ncells = grid_.cells
        self.reach = grid_.reach
        self.lo = dev.from_host(grid_.lo, np.float64)
        self.inv = dev.from_host(grid_.inv, np.float64)
        self.nc = dev.from_host(grid_.ncell, np.int64)
        self.box = dev.from_host(np.array(self.config.box), np.float64)  # the three edges the positions fold into
        every, check = self.config.neigh_policy
        #: the lists' policy the device decides by (rebuild_kernels.P_*)
        self.policy = dev.from_host(np.array([every, 1.0 if check else 0.0, system.rebuild_distance2,
                                              system.move_limit2]), np.float64)
        with dev.ops(4):
            #: the sizes and books a rebuild leaves for the host (rebuild_kernels.M_*)
            self.meta = xp.zeros(rk.META, np.int64)
            self.count = xp.zeros(self.ncells, np.int64)  # each kernel that counts into these leaves them zero
            self.start = xp.zeros(self.ncells + 1, np.int64)
            self.gcount = xp.zeros(self.ncells, np.int64)
        self._make_cells()
        self.ocell = xp.empty(capacity.atoms, np.int64)
        self._make_rows()

    # -- buffers ----------------------------------------------------------
    def _make_cells(self) -> None:
        """The cells' buckets, ``capacity.cell`` wide (no launch: their contents are written before read)."""
        xp, c = self.dev.xp, self.capacity.cell
        self.bucket = xp.empty(self.ncells * c, np.int32)
        self.gbucket = xp.empty(self.ncells * c, np.int32)

    def _make_rows(self, keep: int = 0) -> None:
        """The buffers of a row each: the base rows' faces, the ghosts' sources and shifts (at the ghost's row
        less the owned ones; the first ``keep`` ghosts' copied over), the ghost classes' chunk counts."""
        dev, xp, cap = self.dev, self.dev.xp, self.capacity
        old = (self.gsrc, self.gisrc, self.gshift) if keep else ()
        self.faces = xp.empty(cap.rows, np.int32)
        self.gsrc = xp.empty(cap.rows, np.int64)
        self.gisrc = xp.empty(cap.rows, np.int64)
        self.gshift = xp.empty(3 * cap.rows, np.float64)
        with dev.ops(2):
            self.ccount = xp.zeros(rk.CLASSES * cap.chunks, np.int64)
            self.cstart = xp.zeros(rk.CLASSES * cap.chunks + 1, np.int64)
        if old:
            with dev.ops(3):
                for a, b, k in zip(old, (self.gsrc, self.gisrc, self.gshift), (keep, keep, 3 * keep)):
                    b[:k] = a[:k]

    def grow_rows(self, rows: int, ghosts: int) -> None:
        """Room for ``rows`` rows (a quarter to spare), the plan of the first ``ghosts`` ghost rows kept: a stage
        that travels brought more ghosts than there is room for."""
        self.capacity.rows = rows + rows // 4 + 64
        self._make_rows(keep=ghosts)

    def short(self, meta: np.ndarray) -> tuple[bool, bool, bool]:
        """What the rebuilds that left ``meta`` (host copy) needed more of than the buffers hold: ``(rows,
        cell, lists)``, the rows owned and ghosts, a cell's bucket, a list row (owned or ghosts)."""
        cap = self.capacity
        return (int(meta[rk.M_ROWS_MOST]) > cap.rows, int(meta[rk.M_CELL_MOST]) > cap.cell,
                int(meta[rk.M_OWN_MOST]) > cap.widths[0] or int(meta[rk.M_GH_MOST]) > cap.widths[1])

    def grow(self, meta: np.ndarray) -> tuple[bool, bool]:
        """Grow what the rebuild that left ``meta`` (host copy) found short: ``(rows, cell)``, which were.

        Rows (owned and ghosts) with a quarter to spare, a cell's bucket to twice what
        it needed.  The caller grows its own row buffers to :attr:`capacity`'s rows
        and makes the rebuild again; the lists' widths are :meth:`widen`'s.
        """
        cap = self.capacity
        rows, cell, _ = self.short(meta)
        if rows:
            need = int(meta[rk.M_ROWS_MOST])
            cap.rows = need + need // 4 + 64
            self._make_rows()
        if cell:
            cap.cell = 2 * int(meta[rk.M_CELL_MOST])
            self._make_cells()
        return rows, cell

    def grow_atoms(self, atoms: int) -> None:
        """Room for ``atoms`` owned rows (a migration brought more), with a quarter to spare."""
        cap = self.capacity
        if atoms > cap.atoms:
            cap.atoms = atoms + atoms // 4 + 64
            self.ocell = self.dev.xp.empty(cap.atoms, np.int64)
            if cap.rows < cap.atoms:
                cap.rows = cap.atoms + cap.atoms // 4
                self._make_rows()

    def widen(self, meta: np.ndarray) -> bool:
        """Widen the list rows where the build that left ``meta`` found longer rows; were they short?"""
        if not self.short(meta)[2]:
            return False
        widths = self.capacity.widths
        most = [int(meta[rk.M_OWN_MOST]), int(meta[rk.M_GH_MOST])]
        self.capacity.widths = [max(widths[0], most[0] + 8), max(widths[1], most[1] + 8)]
        return True

    # -- launches ---------------------------------------------------------
    def _strided(self, kernel, items: int, *args) -> None:
        """``kernel`` over a grid-stride grid for ``items`` items (at most ``dev.most_blocks`` blocks)."""
        self.dev.launch(kernel, strided_grid(items, self.dev.most_blocks), BLOCK, *args)

    def sort(self, atoms, scratch, x0, n: int, *, fold: bool, copy: bool, decide, books: bool, run, fused: bool,
             up0: int) -> None:
        """The owned atoms [0, n) sorted by (cell, id) into ``atoms`` ``(x, v, f, gid)``: three launches.

        :func:`~pympi_gpu.nbody.lj.gpu.rebuild_kernels.bin_owned` (from ``atoms``
        copied to ``scratch`` if ``copy``, else from ``scratch``; positions folded if
        ``fold``), a scan of the cells' counts (``cumsum``: their first rows),
        :func:`~pympi_gpu.nbody.lj.gpu.rebuild_kernels.order_cells` (back into
        ``atoms``, ``x0`` the positions).  ``decide``: ``(dmax, slot, step, force)``, the
        rebuild's decision's numbers (``force`` 1: the host's); ``books``: keep the
        rebuild's books (not on a rebuild made again); ``run``: the halo's first
        segment, whose ghost classes the order counts where ``fused`` (a run of the
        brick's own images that starts the plan); ``up0``: the first row half lists'
        high faces send.
        """
        dev, xp, cap = self.dev, self.dev.xp, self.capacity
        v = dev.view
        dmax, slot, step, force = decide
        a = [v(t) for t in atoms]
        b = [v(t) for t in scratch]
        src = a if copy else b
        self._strided(rk.bin_owned, n, *src, n, fold, copy, v(self.box), *b, v(self.lo), v(self.inv), v(self.nc),
                      v(self.count), v(self.bucket), cap.cell, v(self.gcount), v(self.meta), v(dmax), v(self.policy),
                      slot, step, force)
        with dev.ops(1):
            xp.cumsum(self.count, out=self.start[1:])
        self._strided(rk.order_cells, self.ncells, v(self.count), v(self.bucket), cap.cell, v(self.start), *b, *a,
                      v(x0), v(self.ocell), v(self.meta), v(dmax[slot:]), v(self.policy), step if books else -1,
                      run.k if fused else 0, run.dims, run.bounds, v(self.faces), v(self.ccount), cap.chunks, up0)

    def ghosts_of(self, n: int) -> None:
        """Ready the device to make the ghosts of owned rows [0, n) as they lie, without the sort (the halo's
        :meth:`~pympi_gpu.nbody.lj.gpu.halo.DeviceHalo.borders` alone): what the sort's first kernel leaves, the
        rebuild on, ``n`` owned rows, the ghost cells empty (an upload, a launch)."""
        self.dev.into_device(np.array([1, n], np.int64), self.meta[rk.M_GO:rk.M_N + 1])
        with self.dev.ops(1):
            self.gcount.fill(0)

    def ghost_cells(self) -> None:
        """Each cell's ghost rows in increasing order (one launch)."""
        v = self.dev.view
        self._strided(rk.order_ghost_cells, self.ncells, v(self.gcount), v(self.gbucket), self.capacity.cell,
                      self.ncells, v(self.meta))

    def lists(self, pos, n: int, lists) -> None:
        """The Verlet lists of the owned rows [0, n) of ``pos`` into ``lists`` ``(own_cnt, own_nbr, gh_cnt,
        gh_nbr)`` (one launch: :func:`~pympi_gpu.nbody.lj.gpu.rebuild_kernels.build_lists`)."""
        v, config = self.dev.view, self.config
        self._strided(rk.build_lists, n, v(pos), n, v(self.ocell), v(self.start), v(self.gcount), v(self.gbucket),
                      self.capacity.cell, v(self.nc), self.reach, config.cutneigh ** 2, config.cutoff ** 2,
                      config.newton, *(v(t) for t in lists), v(self.meta))

    def read(self) -> np.ndarray:
        """``meta`` on the host: the rebuild's sizes and books, one copy (a wait for the device)."""
        return self.dev.to_host(self.meta, "sums")

    def forget_pairs(self) -> None:
        """The list entries counted so far set back to none, before the lists are built again wider."""
        with self.dev.ops(1):
            self.meta[rk.M_PAIRS] = 0
