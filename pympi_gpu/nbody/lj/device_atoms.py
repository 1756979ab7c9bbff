"""The atoms of one brick in GPU memory: the device half of an LJ system, every step's work on the device.

:class:`DeviceAtoms` keeps the atoms in device memory (CuPy arrays on a GPU,
NumPy under the simulator: :class:`~pympi_gpu.device.buffers.DeviceArrays`)
and never brings them to the host between checkpoints.  A step is: kick,
drift and the displacement since the last rebuild (CuPy elementwise), its
maximum (a reduction; one number to the host, then the ranks' MAX), then either the
forward halo with the owned-owned forces of each third of the atoms launched
behind each stage, or, when some atom moved more than skin/2, a rebuild; then
the owned-ghost forces and the second kick.

A rebuild on the device (:meth:`DeviceAtoms.rebuild`): migration
(:class:`~pympi_gpu.nbody.lj.halo_device.DeviceHalo`: the atoms leaving the
brick found by comparisons, gathered by compaction and sent from the device),
a sort by (cell, id) of the owned atoms (CuPy's radix sort of one key), the
ghosts stage by stage, then the cells of all rows (elementwise keys, a sort,
the cell starts by a scan of the counts) and the Verlet lists (a kernel,
one thread per atom, retried wider when a row overflows).  What comes to the
host per step: the largest displacement, and with thermo the six sums
(``[sum v^2, px, py, pz, E_pair, virial]``); per rebuild a few counts; with
``--transport host`` the packed messages.  Atom arrays come to the host only
for checkpoints, trajectory frames, ``--verify`` and a blown-up state's file
(:meth:`DeviceAtoms.owned`); every such copy is counted
(:attr:`DeviceAtoms.host_copies`).

Two kinds of lists.  Full lists (``config.newton`` False, what the command
runs): one thread per atom writing only its own rows, no atomics, no reverse
halo, twice the pair work.  Half lists with Newton's third law
(``config.newton`` True): each pair once over all ranks (the CPU's id rule for
ghost pairs), the reaction added to the neighbour's row by an atomic add
(float64 atomics: compute capability 6.0 and up; their order varies, so the
forces agree with the CPU's to round-off, not bit for bit), and the ghosts'
forces sent home by the reverse halo.  Which is faster is a measurement on a
GPU (``benchmarks/lj.py --mode gpu`` times both); none was lent when this was
written.  Importing this module imports numba.cuda: do it only for
``--backend gpu``.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np

from pympi_gpu.nbody.lj import kernels_cuda as kg
from pympi_gpu.nbody.lj.halo_device import DeviceHalo, fold

__all__ = ["DeviceAtoms", "PHASES"]

#: the phases :attr:`DeviceAtoms.phase_seconds` times (with ``profile``)
PHASES = ("forces", "list build", "halo", "integrate", "thermo")


def _flat(a):
    """A C-contiguous array as one flat view of its memory (never a copy: the kernels write through it)."""
    if not a.flags.c_contiguous:
        raise ValueError("a kernel's flat view needs a C-contiguous array")
    return a.reshape(-1)


class DeviceAtoms:
    """This brick's atoms, ghosts and lists in GPU memory: the twin of
    :class:`~pympi_gpu.nbody.lj.host_atoms.HostAtoms`.

    ``system`` is the :class:`~pympi_gpu.nbody.lj.system.LjSystem` they
    belong to (its config, brick, cell grid and agreements); ``device`` the
    :class:`~pympi_gpu.device.device.Device`: its array namespace and stream
    (:meth:`~pympi_gpu.device.device.Device.arrays`) and its transport,
    ``"device"`` (CUDA-aware MPI gets device buffers) or ``"host"`` (staged
    through pinned host memory).  ``config.newton``: half
    lists with Newton's third law (atomic adds of the reactions, the ghosts'
    forces sent home by :meth:`DeviceHalo.reverse`) instead of full lists (the
    default of the command: see the module's docstring).  ``profile``: synchronise the stream around
    each phase and add its seconds to :attr:`phase_seconds` (for the
    benchmark; it serialises what otherwise overlaps).
    """

    def __init__(self, system, x, v, ids, f, device, profile: bool = False):
        self.system = system
        config = self.config = system.config
        grid = system.grid
        self.transport = device.transport
        dev = self.dev = device.arrays()
        self._kernels = kg.force_kernels(config.pair_term)
        self.halo = DeviceHalo(system.cart, system.brick, config.cutneigh, dev, device.transport)
        self.pos = dev.from_host(x, np.float64)
        self.v = dev.from_host(v, np.float64)
        self.ids = dev.from_host(ids, np.int64)
        self.f = dev.from_host(np.zeros_like(x) if f is None else f, np.float64)
        self.have_forces = f is not None
        self.nlocal = int(np.shape(v)[0])
        self.energy = self.virial = None
        self.rebuilds = 0
        self.pairs = 0
        self.lists = None
        self.cap = list(grid.capacity)
        self.gid = None
        self.x0 = None
        self._cell_lo = dev.from_host(grid.lo, np.float64)
        self._cell_inv = dev.from_host(grid.inv, np.float64)
        self._cell_top = dev.from_host(grid.ncell - 1, np.int64)
        #: seconds per phase (:data:`PHASES`) with ``profile``, else None
        self.phase_seconds = dict.fromkeys(PHASES, 0.0) if profile else None
        self._open: list[str] = []

    @property
    def host_copies(self) -> int:
        """Atom arrays copied from the device to the host so far (``DeviceArrays.copies["atoms"]``)."""
        return self.dev.copies["atoms"]

    @contextlib.contextmanager
    def _phase(self, name: str):
        """Time a phase (with ``profile``); a phase inside another (forces behind the halo) is its own."""
        if self.phase_seconds is None:
            yield
            return
        self.dev.sync()
        t = time.perf_counter()
        self._open.append(name)
        try:
            yield
        finally:
            self.dev.sync()
            spent = time.perf_counter() - t
            self._open.pop()
            self.phase_seconds[name] += spent
            if self._open:  # not the enclosing phase's time
                self.phase_seconds[self._open[-1]] -= spent

    def _launch(self, kernel, n: int, *args) -> None:
        """``kernel`` over ``n`` threads on the stream; device arrays among ``args`` passed as views."""
        if n:
            dev = self.dev
            xp = dev.xp
            kernel[kg.grid(n), kg.BLOCK, dev.stream](*(dev.view(a) if isinstance(a, xp.ndarray) else a
                                                       for a in args))

    # -- neighbour lists --------------------------------------------------
    def _cell_of(self, pos):
        """Each row's cell: the CPU's ``bin_atoms`` rule, elementwise (``floor((x - lo) * inv)``, clamped)."""
        xp = self.dev.xp
        nc = [int(c) for c in self.system.grid.ncell]
        c = xp.floor((pos - self._cell_lo) * self._cell_inv).astype(np.int64)
        c = xp.minimum(xp.maximum(c, 0), self._cell_top)
        return (c[:, 0] * nc[1] + c[:, 1]) * nc[2] + c[:, 2]

    def _cells(self, pos):
        """``(cell, start, atoms)``: each row's cell, the rows sorted by (cell, row), the cells' starts."""
        xp = self.dev.xp
        n = pos.shape[0]
        nc = [int(c) for c in self.system.grid.ncell]
        cell = self._cell_of(pos)
        ncells = nc[0] * nc[1] * nc[2]
        # one key per row, unique: a sort of any stability gives the CPU's order (by cell, then row)
        atoms = xp.argsort(cell * n + xp.arange(n, dtype=np.int64))
        start = xp.zeros(ncells + 1, np.int64)
        start[1:] = xp.cumsum(xp.bincount(cell, minlength=ncells))
        return cell, start, atoms

    def rebuild(self) -> None:
        """Migrate, sort by cell, rebuild ghosts and Verlet lists, all on the device; collective.

        Raises :class:`~pympi_gpu.nbody.blowup.BlowUp` as the CPU's :meth:`HostAtoms.rebuild` does.
        """
        dev, xp = self.dev, self.dev.xp
        n = self.nlocal
        with self._phase("halo"):
            finite = dev.scalar(xp.all(xp.isfinite(self.v)) & xp.all(xp.isfinite(self.f[:n])))
            rows = xp.concatenate([self.v, self.f[:n], self.ids[:, None].astype(np.float64)], axis=1)
            x, rows = self.halo.migrate(self.pos[:n], rows)
            self.system.agree_migration(x.shape[0], finite)
        with self._phase("list build"):
            ids = rows[:, 6].astype(np.int64)
            cell = self._cell_of(x)  # the keys only: the rows are sorted by (cell, id) here, by (cell, row) below
            order = xp.argsort(cell * (self.config.atoms + 1) + ids)  # by (cell, id), as the CPU sorts
            x, rows, ids = x[order], rows[order], ids[order]
            n = self.nlocal = x.shape[0]
            self.v = xp.ascontiguousarray(rows[:, 0:3])
            f = rows[:, 3:6]
            self.ids = ids
        with self._phase("halo"):
            self.pos, self.gid = self.halo.borders(xp.ascontiguousarray(x), ids)
        with self._phase("list build"):
            if self.config.newton:  # forces have ghost rows too: they gather the ghosts' share before going home
                self.f = xp.zeros_like(self.pos)
                self.f[:n] = f
            else:
                self.f = xp.ascontiguousarray(f)
            self.x0 = self.pos[:n].copy()
            cell, start, atoms = self._cells(self.pos)
            nc = self.system.grid.ncell
            cut2, rc2 = self.config.cutneigh ** 2, self.config.cutoff ** 2
            while True:
                # rows of neighbours in column-major order: the threads of a warp read one column together
                lists = (xp.empty(n, np.int64), xp.empty((n, self.cap[0]), np.int32, order="F"),
                         xp.empty(n, np.int64), xp.empty((n, self.cap[1]), np.int32, order="F"))
                self._launch(kg.build_lists, n, self.pos, n, self.gid, cell, start, atoms, int(nc[0]), int(nc[1]),
                             int(nc[2]), self.system.grid.reach, cut2, rc2, self.config.newton, *lists)
                most = self.dev.to_host(xp.stack([lists[0].max(), lists[2].max()]) if n
                                        else xp.zeros(2, np.int64), "sums")
                if most[0] <= self.cap[0] and most[1] <= self.cap[1]:
                    break
                self.cap = [max(self.cap[0], int(most[0]) + 8), max(self.cap[1], int(most[1]) + 8)]
            self.lists = lists
            # distinct pairs within cutoff + skin (full lists list each from both sides)
            self.pairs = self._once * dev.scalar(lists[0].sum() + lists[2].sum()) if n else 0.0
            self.e = xp.zeros(max(n, 1), np.float64)
            self.w = xp.zeros(max(n, 1), np.float64)
            self._bind()
        self.rebuilds += 1

    @property
    def _once(self) -> float:
        """The share of a listed pair's energy counted here: 1 with half lists, 1/2 with full."""
        return 1.0 if self.config.newton else 0.5

    def _bind(self) -> None:
        """The force kernels' views of their arrays, made once per rebuild (not per launch: each costs).

        Flat, as the kernels index them: positions and forces ``(3 n,)``, each list column-major
        ``(cap n,)`` (row i's k-th neighbour at ``i + k n``); views of the same memory, no copies.
        """
        view = self.dev.view
        own_cnt, own_nbr, gh_cnt, gh_nbr = self.lists
        self._views = tuple(view(a) for a in (_flat(self.pos), _flat(self.f), self.e, self.w, own_cnt,
                                              _flat(own_nbr.T), gh_cnt, _flat(gh_nbr.T)))

    def finite(self) -> bool:
        """Are this brick's positions, velocities and forces finite?  A reduction on the device, one number out."""
        xp, n = self.dev.xp, self.nlocal
        return bool(self.dev.scalar(xp.all(xp.isfinite(self.pos[:n])) & xp.all(xp.isfinite(self.v))
                                    & xp.all(xp.isfinite(self.f[:n]))))

    # -- forces -----------------------------------------------------------
    def compute_forces(self, forward: bool, eflag: bool = True) -> None:
        """Forces at the current positions (and each atom's pair energy and virial); collective if ``forward``.

        ``eflag`` is not needed: the per-atom sums cost two stores, and are summed only for thermo.
        """
        pos, f, e, w, own_cnt, own_nbr, gh_cnt, gh_nbr = self._views
        rc2 = self.config.cutoff ** 2
        n = self.nlocal
        bounds = [0, n // 3, (2 * n) // 3, n]
        s = self.dev.stream
        newton = self.config.newton
        kernel = self._kernels.forces_newton if newton else self._kernels.forces
        if newton:
            self.f.fill(0.0)  # owned and ghost rows: the reactions are added into them

        def work(stage):
            a, b = bounds[stage], bounds[stage + 1]
            if b > a:
                with self._phase("forces"):
                    kernel[kg.grid(b - a), kg.BLOCK, s](pos, f, e, w, a, b, own_cnt, own_nbr, rc2, 0)

        if forward:
            with self._phase("halo"):
                self.halo.forward(self.pos, work)
        else:
            for st in range(3):
                work(st)
        if n:
            with self._phase("forces"):
                kernel[kg.grid(n), kg.BLOCK, s](pos, f, e, w, 0, n, gh_cnt, gh_nbr, rc2, 1)
        if newton:
            with self._phase("halo"):
                self.halo.reverse(self.f)
        self.energy = self.virial = None  # summed when asked (local_sums)
        self.have_forces = True

    def local_sums(self) -> np.ndarray:
        """``[sum v^2, px, py, pz, E_pair, virial]`` of this brick: six numbers to the host."""
        xp, n = self.dev.xp, self.nlocal
        with self._phase("thermo"):
            if not n:
                return np.zeros(6)
            v = self.v
            sums = xp.stack([xp.sum(v * v), *v.sum(axis=0), self._once * xp.sum(self.e[:n]),
                             self._once * xp.sum(self.w[:n])])
            return self.dev.to_host(sums, "sums")

    def step(self, force_rebuild: bool = False, eflag: bool = False) -> None:
        """One velocity-Verlet step on the device; collective."""
        dev = self.dev
        n = self.nlocal
        h = 0.5 * self.config.dt
        d2 = 0.0
        with self._phase("integrate"):
            if n:
                v, x = self.v, self.pos[:n]
                v += h * self.f[:n]  # CuPy's elementwise kernels (in the namespace's order of rounding)
                x += self.config.dt * v
                # squared displacements; NaN propagates through the max and counts as infinite
                d = x - self.x0
                d2 = dev.scalar((d * d).sum(axis=1).max())
        if self.system.agree_displacement(d2) or force_rebuild:  # collective; a blow-up raises on every rank
            self.rebuild()
            self.compute_forces(forward=False)
        else:
            self.compute_forces(forward=True)
        with self._phase("integrate"):
            self.v += h * self.f[:self.nlocal]  # a rebuild migrated atoms: this rank's may be others now

    def start(self) -> bool:
        """Lists and (unless loaded) forces at the current positions; collective."""
        had = self.have_forces
        self.rebuild()  # migrates the loaded forces along with the atoms
        keep = self.f.copy()
        self.compute_forces(forward=False)
        if had:  # a restart: keep the checkpoint's forces (bit-identical continuation)
            self.f = keep
            self._bind()
        return had

    def wrap(self) -> None:
        """Fold the owned positions into the box on the device (the reference positions move with them)."""
        xp, n = self.dev.xp, self.nlocal
        folded = fold(xp, self.pos[:n], self.config.box)
        if self.lists is not None:
            self.x0 += folded - self.pos[:n]
        self.pos[:n] = folded

    def owned(self) -> dict[str, np.ndarray]:
        """Host copies of the owned atoms (four atom arrays, counted): ``x v f`` ``(n, 3)`` and ``id``."""
        n = self.nlocal
        dev = self.dev
        return {"x": dev.to_host(self.pos[:n], "atoms"), "v": dev.to_host(self.v, "atoms"),
                "f": dev.to_host(self.f[:n], "atoms"), "id": dev.to_host(self.ids, "atoms")}
