"""The atoms of one brick in GPU memory: the device half of an LJ system, every step's work on the device.

:class:`DeviceAtoms` keeps the atoms in device memory (CuPy arrays on a GPU,
NumPy under the simulator: :class:`~pympi_gpu.device.buffers.DeviceArrays`)
and never brings them to the host between checkpoints.  A step is: kick,
drift and the displacement since the last rebuild with its maximum, in one
kernel, then either the forward halo with the owned-owned forces of a part of
the atoms launched behind each stage whose messages travel, or, when some atom
moved more than skin/2, a rebuild; then the owned-ghost forces with the second
kick, in one kernel.  Over several ranks the displacement reaches the host at
the first travelling stage's wait, and the ranks decide the rebuild together.
On one rank (:attr:`DeviceAtoms.queued`) the device decides it: every step
launches the rebuild's kernels behind the device's decision, and the host
queues the steps between two outputs without waiting, reading what the device
decided at the next wait (:meth:`DeviceAtoms.settle`), where a buffer found
short is grown and the steps since made again.  The launches and host waits
are counted per phase (``DeviceArrays.calls``): a step on one rank is 11
launches and no wait (docs/gpu.md says what each costs on an H100).

A rebuild on the device (:meth:`DeviceAtoms.rebuild`, :meth:`DeviceAtoms._build`): the migration where a
stage travels (:class:`~pympi_gpu.nbody.lj.gpu.halo.DeviceHalo`: the atoms counted by class and written in
order, sent from the device), the owned atoms' counting sort by (cell, id), the ghosts, their cells and the
Verlet lists, in kernels of :mod:`~pympi_gpu.nbody.lj.gpu.rebuild_kernels` whose sizes stay on the device
(:class:`~pympi_gpu.nbody.lj.gpu.rebuild.DeviceBuild`'s ``meta``); a buffer found short is grown and the
rebuild made again.  What comes to the host per step over several ranks: the largest displacement, and with
thermo the six sums
(``[sum v^2, px, py, pz, E_pair, virial]``); per rebuild a few counts; with
``--transport host`` the packed messages.  Atom arrays come to the host only
for checkpoints, trajectory frames, ``--verify`` and a blown-up state's file
(:meth:`DeviceAtoms.owned`); every such copy is counted
(:attr:`DeviceAtoms.host_copies`).

Two kinds of lists.  Full lists (``config.newton`` False, what the command
runs): one thread per atom writing only its own rows, no atomics, no reverse
halo, twice the pair work.  Half lists with Newton's third law
(``config.newton`` True): each pair once over all ranks (the halo a half
shell, as the CPU's), the reaction added to the neighbour's row by an atomic add
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
from typing import NamedTuple

import numpy as np

from pympi_gpu.nbody.lj.gpu import kernels as kg
from pympi_gpu.nbody.lj.gpu import rebuild_kernels as rk
from pympi_gpu.nbody.lj.gpu.bath import DeviceBath
from pympi_gpu.nbody.lj.gpu.halo import DeviceHalo
from pympi_gpu.nbody.lj.gpu.rebuild import Capacity, DeviceBuild
from pympi_gpu.nbody.lj.memory import cell_width, first_rows

__all__ = ["DeviceAtoms", "PHASES", "COUNTED"]

#: the phases :attr:`DeviceAtoms.phase_seconds` times (with ``profile``)
PHASES = ("forces", "list build", "halo", "integrate", "thermo")
#: the phases the launches and syncs are counted under (``other``: checks, checkpoints, folding)
COUNTED = (*PHASES, "other")


class _Kept(NamedTuple):
    """The state at the last wait, from which the steps queued since are made again (:meth:`DeviceAtoms.settle`):
    the step, the displacement's next slot, ``meta`` (host copy), device copies of the owned rows of the
    positions, velocities, forces, ids and reference positions, and the thermostat's state
    (:meth:`DeviceBath.kept`)."""

    step: int
    slot: int
    meta: np.ndarray
    rows: tuple
    bath: object = None


def _flat(a):
    """A C-contiguous array as one flat view of its memory (never a copy: the kernels write through it)."""
    if not a.flags.c_contiguous:
        raise ValueError("a kernel's flat view needs a C-contiguous array")
    return a.reshape(-1)


class DeviceAtoms:
    """This brick's atoms, ghosts and lists in GPU memory, an :class:`~pympi_gpu.nbody.lj.atoms.Atoms`: the
    twin of :class:`~pympi_gpu.nbody.lj.cpu.atoms.HostAtoms`.

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

    The arrays are made once with room to spare (:class:`~pympi_gpu.nbody.lj.gpu.rebuild.Capacity`)
    and grown where a rebuild finds them short: the owned atoms and their ghosts
    (``_pos``, ``_f``, ``_gid``, the owned rows first), the owned atoms' velocities and
    reference positions, a second set of owned rows the rebuild sorts from, the lists.
    :attr:`pos`, :attr:`v`, :attr:`f`, :attr:`ids`, :attr:`gid`, :attr:`lists` are views
    of their rows in use.
    """

    #: (a rebuild's kernels run behind the host's back: their seconds are the profile's, ``phase_seconds``)
    rebuild_seconds = None

    def __init__(self, system, x, v, ids, f, device, profile: bool = False, reference=None):
        self.system = system
        config = self.config = system.config
        self.transport = device.transport
        dev = self.dev = device.arrays()
        self._kernels = kg.force_kernels(config.pair_term)
        #: the thermostat's state and launches (:mod:`~pympi_gpu.nbody.lj.gpu.bath`)
        self.bath = DeviceBath(system.bath, dev)
        n = int(np.shape(v)[0])
        brick = system.brick
        travels = system.cart.Get_size() > 1 and any(d > 1 for d in brick.dims)
        atoms, rows = first_rows(config, n, [brick.hi[d] - brick.lo[d] for d in range(3)], travels)
        capacity = Capacity(atoms=atoms, rows=rows, cell=cell_width(config, system.grid),
                            widths=list(system.grid.capacity))
        self.build = DeviceBuild(dev, system, capacity)
        self.halo = DeviceHalo(system.cart, brick, config.cutneigh, dev, device.transport, half_shell=config.newton,
                               build=self.build)
        self.halo.room = self._room
        #: does the device decide the rebuilds, the steps between two outputs queued without a wait
        #: (:meth:`settle`)?  Where nothing travels (one rank) and the lists are full (half lists' reverse
        #: halo launches by the host's counts); not when profiled (each phase waited for)
        self.queued = not any(self.halo.travels) and not config.newton and not profile
        self._meta = None  # what the last rebuild (or wait) left, host copy
        self._log: list[tuple[bool, bool]] = []  # the steps queued since the last wait: (folded first, forced)
        self._folded = False  # (wrap: the next step's entry says so)
        self._kept: _Kept | None = None
        #: steps made again after a buffer was found short or a step failed (:meth:`settle`), so far
        self.redone = 0
        #: the largest squared displacement of a step, two slots used in turn (see :meth:`step`)
        self._dmax = dev.from_host(np.zeros(2), np.float64)
        self._box = dev.from_host(np.array(self.config.box), np.float64)  # the three edges (wrap)
        self._d2 = dev.pinned(1)  # the step's, on the host after the first travelling stage's wait
        self._slot = self._step_slot = 0
        self._make_atoms()
        self._make_lists()
        # a restart from the references (its positions at the run's last rebuild): the positions ride in the
        # forces' rows through the first rebuild (:meth:`start`)
        moving = reference is not None
        for host, dest in ((reference if moving else x, self._pos), (v, self._v), (ids, self._gid),
                           (x if moving else np.zeros_like(x) if f is None else f, self._f)):
            dev.into_device(np.ascontiguousarray(host, dest.dtype), dest[:n])
        self.have_forces = f is not None
        self._moving = moving
        # a restart's loaded forces, by id, where its thermostat adds forces of its own (Langevin's): the pair
        # forces made again at the restored positions are the run's, bit for bit, but those are not
        self._loaded = None
        if moving and f is not None and system.bath.style.forces:
            by_id = np.argsort(ids)
            self._loaded = (dev.from_host(np.ascontiguousarray(np.asarray(ids)[by_id]), np.int64),
                            dev.from_host(np.ascontiguousarray(np.asarray(f)[by_id]), np.float64))
        self.nlocal = self.n_all = n
        self.rebuilds = 0
        self.pairs = 0
        self._built = False
        self._bind()
        #: seconds per phase (:data:`PHASES`) with ``profile``, else None
        self.phase_seconds = dict.fromkeys(PHASES, 0.0) if profile else None
        self._open: list[str] = []

    # -- buffers ----------------------------------------------------------
    def _make_atoms(self, keep: int = 0, rows: int = 0) -> None:
        """The atom buffers at the capacities of :attr:`build`, the first ``keep`` owned rows (and ``rows`` rows of
        ``_pos``, ``_f``, ``_gid``) of the current ones copied over."""
        dev, xp, cap = self.dev, self.dev.xp, self.build.capacity
        old = getattr(self, "_pos", None) is not None and (self._pos, self._f, self._gid, self._v, self._x0,
                                                            self._xb, self._vb, self._fb, self._gb)
        self._pos = xp.empty((cap.rows, 3), np.float64)
        self._f = xp.empty((cap.rows, 3), np.float64)
        self._gid = xp.empty(cap.rows, np.int64)
        self._v, self._x0 = xp.empty((cap.atoms, 3), np.float64), xp.empty((cap.atoms, 3), np.float64)
        self._xb, self._vb, self._fb = (xp.empty((cap.atoms, 3), np.float64) for _ in range(3))
        self._gb = xp.empty(cap.atoms, np.int64)
        self._e, self._w = xp.empty(cap.atoms, np.float64), xp.empty(cap.atoms, np.float64)
        if old and (keep or rows):
            new = (self._pos, self._f, self._gid, self._v, self._x0, self._xb, self._vb, self._fb, self._gb)
            with dev.ops(9):
                for k, (a, b) in enumerate(zip(old, new)):
                    b[:rows if k < 3 else keep] = a[:rows if k < 3 else keep]

    def _make_lists(self) -> None:
        """The Verlet lists' buffers, rows of :attr:`cap` entries (column-major: the threads of a warp read one
        column together)."""
        xp, cap = self.dev.xp, self.build.capacity
        self._lists = (xp.empty(cap.atoms, np.int64), xp.empty((cap.atoms, cap.widths[0]), np.int32, order="F"),
                       xp.empty(cap.atoms, np.int64), xp.empty((cap.atoms, cap.widths[1]), np.int32, order="F"))

    def _room(self, atoms: int, keep: int, which: int):
        """Room for ``atoms`` owned rows, the first ``keep`` of each owned set kept (``which``, the one being
        filled, is the migration's business): the migration's (:attr:`DeviceHalo.room`).  Returns the two sets."""
        self.build.grow_atoms(atoms)
        self._make_atoms(keep=keep, rows=keep)
        self._make_lists()
        self._bind()
        return [self._owned_set(), self._sort_set()]

    def _grow_rows(self, rows: int, keep: int):
        """Room for ``rows`` rows, owned and ghosts, the first ``keep`` kept and the ghosts' plan of them: a
        stage that travels brought more ghosts than there is room for.  Returns ``(pos, gid)``."""
        n = self._sorting
        self.build.grow_rows(rows, keep - n)
        self._make_atoms(keep=n, rows=keep)
        self._bind()
        return self._pos, self._gid

    def _owned_set(self) -> tuple:
        return self._pos, self._v, self._f, self._gid

    def _sort_set(self) -> tuple:
        return self._xb, self._vb, self._fb, self._gb

    @property
    def cap(self) -> list[int]:
        """The list rows' widths (owned, ghosts), grown where a build finds longer rows."""
        return list(self.build.capacity.widths)

    @cap.setter
    def cap(self, widths) -> None:
        self.build.capacity.widths = [int(w) for w in widths]
        self._make_lists()
        self._bind()

    # -- the rows in use --------------------------------------------------
    @property
    def pos(self):
        """Positions ``(n_all, 3)``: the owned rows, then the ghosts."""
        return self._pos[:self.n_all]

    @property
    def v(self):
        return self._v[:self.nlocal]

    @property
    def f(self):
        """Forces: of the owned rows, and with half lists the ghosts' too (their share, sent home)."""
        return self._f[:self.n_all if self.config.newton else self.nlocal]

    @property
    def ids(self):
        return self._gid[:self.nlocal]

    @property
    def gid(self):
        """Global ids of all rows, owned then ghosts."""
        return self._gid[:self.n_all]

    @property
    def x0(self):
        """The owned positions at the last rebuild (the displacement's reference)."""
        return self._x0[:self.nlocal]

    @property
    def lists(self):
        """``(own_cnt, own_nbr, gh_cnt, gh_nbr)`` of the owned rows (None before the first rebuild)."""
        if not self._built:
            return None
        n = self.nlocal
        return tuple(a[:n] for a in self._lists)

    @property
    def host_copies(self) -> int:
        """Atom arrays copied from the device to the host so far (``DeviceArrays.copies["atoms"]``)."""
        return self.dev.copies["atoms"]

    def calls(self) -> dict[str, list[int]]:
        """Launches, host syncs and uploads so far, per phase (a copy of ``DeviceArrays.calls``)."""
        return {k: list(v) for k, v in self.dev.calls.items()}

    def calls_per_step(self, comm, since: dict[str, list[int]], steps: int) -> dict:
        """Launches and host syncs per step since ``since`` (:meth:`calls`), the most of any rank; collective.

        Returns ``{"launches": .., "syncs": .., "phases": {phase: {"launches", "syncs", "uploads"}}}``,
        each figure the largest of any rank, divided by ``steps`` (not divided when there were none).
        """
        from mpi4py import MPI

        now = self.calls()
        per = np.array([[now.get(p, [0, 0, 0])[k] - since.get(p, [0, 0, 0])[k] for k in range(3)]
                        for p in COUNTED], np.float64)
        mine = np.concatenate([per.sum(axis=0)[:2], per.ravel()])
        comm.Allreduce(MPI.IN_PLACE, mine, op=MPI.MAX)
        mine /= max(steps, 1)
        phases = {p: dict(zip(("launches", "syncs", "uploads"), mine[2 + 3 * i:5 + 3 * i].tolist()))
                  for i, p in enumerate(COUNTED)}
        return {"launches": float(mine[0]), "syncs": float(mine[1]),
                "phases": {p: c for p, c in phases.items() if any(c.values())}}

    @contextlib.contextmanager
    def _phase(self, name: str):
        """The launches and syncs of a phase counted under its name (``dev.calls``); with ``profile``, its time.

        A phase inside another (forces behind the halo) is its own.
        """
        dev = self.dev
        outer, dev.phase = dev.phase, name
        if self.phase_seconds is None:
            try:
                yield
            finally:
                dev.phase = outer
            return
        dev.sync()
        t = time.perf_counter()
        self._open.append(name)
        try:
            yield
        finally:
            dev.sync()
            spent = time.perf_counter() - t
            self._open.pop()
            dev.phase = outer
            self.phase_seconds[name] += spent
            if self._open:  # not the enclosing phase's time
                self.phase_seconds[self._open[-1]] -= spent

    # -- neighbour lists --------------------------------------------------
    def rebuild(self, step: int | None = None) -> None:
        """Migrate, sort by cell, rebuild ghosts and Verlet lists, all on the device; collective.

        The migration where a stage travels (:meth:`DeviceHalo.migrate`), the owned
        atoms' counting sort by (cell, id) (:meth:`DeviceBuild.sort`), the ghosts
        (:meth:`DeviceHalo.borders`), the ghost cells' order and the lists, then the
        rebuild's sizes read back in one copy.  On one rank: seven launches and that one
        wait.  A buffer found short is grown and the rebuild made again from the
        migrated atoms (every rank together: a rank's ghosts are its neighbours'
        messages); rows too narrow for a list are built again wider.  Raises
        :class:`~pympi_gpu.nbody.blowup.BlowUp` as the CPU's :meth:`HostAtoms.rebuild` does.
        ``step``: the step the device's books say the lists were built at (the current one by default).
        """
        system, build = self.system, self.build
        n = self.nlocal
        with self._phase("halo"):
            finite = True
            if any(self.halo.travels):
                n, which, finite = self.halo.migrate([self._owned_set(), self._sort_set()], n)
                copy, fold = which == 0, False  # folded by the migration; sorted from the set that holds them
            else:
                copy, fold = True, True
        self._sorting = n  # the owned rows of the rebuild under way
        decide = (self._dmax, self._step_slot, system.timestep if step is None else step, 1)
        books = True
        while True:
            self._build(n, fold=fold, copy=copy, decide=decide, books=books)
            with self._phase("list build"):
                meta = build.read()
                rows, cells = build.grow(meta)
                while not (rows or cells) and build.widen(meta):  # rows too narrow: the lists alone again
                    self._make_lists()
                    self._bind()
                    build.forget_pairs()
                    build.lists(self._pos, n, self._lists)
                    meta = build.read()
            if rows:
                self._make_atoms(keep=n, rows=n)
                self._bind()
            again = system.agree_migration(n, finite and not meta[rk.M_NONFINITE], short=rows or cells)
            if not again:
                break
            if build.widen(meta):
                self._make_lists()
                self._bind()
            copy = fold = books = False  # again from the sort's set: the migrated atoms, folded
        self.nlocal = n
        self._adopt(meta)
        self._built = True

    def _build(self, n: int, *, fold: bool, copy: bool, decide, books: bool) -> None:
        """The kernels of a rebuild of owned rows [0, n) after the migration, no wait: the sort by (cell, id),
        the ghosts, their cells, the lists (:meth:`DeviceBuild.sort`'s arguments); behind the device's
        decision where ``decide``'s force is 0 (every kernel returns at once where it does not rebuild)."""
        build = self.build
        with self._phase("list build"):
            build.sort(self._owned_set(), self._sort_set(), self._x0, n, fold=fold, copy=copy, decide=decide,
                       books=books, run=self.halo.layout()[0], fused=self.halo.fused,
                       up0=n if self.config.newton else 0)
        with self._phase("halo"):
            self.halo.borders(self._pos, self._gid, n, self._grow_rows, counted=self.halo.fused)
        with self._phase("list build"):
            build.ghost_cells()
            build.lists(self._pos, n, self._lists)

    def _adopt(self, meta: np.ndarray) -> None:
        """What the last rebuild left (``meta``, host copy): the ghost plan and rows held, the pairs listed, the
        rebuilds so far and, where queued, the device's books."""
        self.n_all = self.halo.settle(meta, self.nlocal, known=not self.queued)
        self.pairs = self._once * float(meta[rk.M_PAIRS])
        self.rebuilds = int(meta[rk.M_REBUILDS])  # (one a rebuild, made again or not: its first pass's books)
        self._meta = meta

    @property
    def batched(self) -> bool:
        """Does :meth:`steps` take many steps?  Where they are queued."""
        return self.queued

    @property
    def books(self) -> tuple[int, int] | None:
        """The device's books at the last wait, where it decides the rebuilds (``Atoms.books``): the step of the
        last build and LAMMPS's dangerous builds, from ``meta``; else None."""
        if not self.queued or self._meta is None:
            return None
        return int(self._meta[rk.M_BUILT_AT]), int(self._meta[rk.M_DANGEROUS])

    @property
    def _once(self) -> float:
        """The share of a listed pair's energy counted here: 1 with half lists, 1/2 with full."""
        return 1.0 if self.config.newton else 0.5

    def _bind(self) -> None:
        """The kernels' views of their arrays, made once per allocation (not per launch: each costs).

        Flat, as the kernels index them: positions and forces ``(3 rows,)``, each list column-major
        ``(width rows,)`` (row i's k-th neighbour at ``i + k atoms``, ``atoms`` the lists' capacity);
        views of the same memory, no copies.
        """
        view = self.dev.view
        own_cnt, own_nbr, gh_cnt, gh_nbr = self._lists
        self._views = tuple(view(a) for a in (_flat(self._pos), _flat(self._f), self._e, self._w, own_cnt,
                                              _flat(own_nbr.T), gh_cnt, _flat(gh_nbr.T)))
        # the integration's: v, f, x (the owned rows first), x0, and the displacement's two slots
        self._step_views = (view(_flat(self._v)), self._views[1], self._views[0], view(_flat(self._x0)),
                            view(self._dmax))
        self._gid_view = view(self._gid)  # (the thermostat's forces draw by atom id)

    def finite(self) -> bool:
        """Are this brick's positions, velocities and forces finite?  A reduction on the device, one number out."""
        xp, n = self.dev.xp, self.nlocal
        with self.dev.ops(8):
            ok = xp.all(xp.isfinite(self._pos[:n])) & xp.all(xp.isfinite(self._v[:n])) & \
                xp.all(xp.isfinite(self._f[:n]))
        return bool(self.dev.scalar(ok))

    # -- forces -----------------------------------------------------------
    def compute_forces(self, forward: bool, eflag: bool = True, kick: bool = False, go_on=None) -> bool:
        """Forces at the current positions (and each atom's pair energy and virial); collective if ``forward``.

        With ``forward`` the ghost positions are refreshed first (the halo), and
        the owned list's forces are launched in one part behind each stage whose
        messages travel (in one launch where none does, or without ``forward``:
        after a rebuild).  Then one launch for the ghost list, which with
        ``kick`` ends with the second kick (``v += f dt/2``).  Half lists
        (``config.newton``): :meth:`_forces_newton`.  ``eflag`` is not needed:
        the per-atom sums cost two stores, and are summed only for thermo.
        ``go_on``: the halo's question to the caller after its first travelling
        stage's wait (:meth:`DeviceHalo.forward`); where it says no, nothing more
        is launched and False returned.
        """
        if self.config.newton:
            return self._forces_newton(forward, kick, go_on)
        pos, f, e, w, own_cnt, own_nbr, gh_cnt, gh_nbr = self._views
        rc2 = self.config.cutoff ** 2
        n = self.nlocal
        kernels = self._kernels
        work, parts = self._owned_parts(kernels.forces, forward)
        if forward:
            with self._phase("halo"):
                if not self.halo.forward(self._pos, work, go_on):
                    return False
        bath = self.bath.style.forces
        if n:
            with self._phase("forces"):
                if not parts:
                    self.dev.launch(kernels.forces, kg.grid(n), kg.BLOCK, pos, f, e, w, 0, n, own_cnt, own_nbr, rc2, 0)
                if kick and not bath:
                    self.dev.launch(kernels.forces_kick, kg.grid(n), kg.BLOCK, pos, f, e, w, self._step_views[0],
                                    0.5 * self.config.dt, n, gh_cnt, gh_nbr, rc2)
                else:  # (a thermostat's forces come after the pair forces, and the kick with them)
                    self.dev.launch(kernels.forces, kg.grid(n), kg.BLOCK, pos, f, e, w, 0, n, gh_cnt, gh_nbr, rc2, 1)
        if kick:
            self._bath_kick(bath)
        self.energy = self.virial = None  # summed when asked (local_sums)
        self.have_forces = True
        return True

    def _owned_parts(self, kernel, forward: bool):
        """``(work, parts)``: the halo's ``work(stage)``, which launches ``kernel`` over the owned list of one
        part of the atoms behind each stage whose messages travel, and the number of parts (0: none travel)."""
        pos, f, e, w, own_cnt, own_nbr, _, _ = self._views
        rc2 = self.config.cutoff ** 2
        n = self.nlocal
        stages = [d for d in range(3) if self.halo.travels[d]] if forward else []
        bounds = [n * k // len(stages) for k in range(len(stages) + 1)] if stages else []

        def work(stage):
            if stage in stages:
                k = stages.index(stage)
                a, b = bounds[k], bounds[k + 1]
                if b > a:
                    with self._phase("forces"):
                        self.dev.launch(kernel, kg.grid(b - a), kg.BLOCK, pos, f, e, w, a, b, own_cnt, own_nbr, rc2, 0)

        return work, len(stages)

    def _forces_newton(self, forward: bool, kick: bool, go_on=None) -> bool:
        """Half lists: the owned list behind the halo's travelling stages (or in one launch), the ghost list,
        the ghosts' forces sent home (the reverse halo), then the second kick if ``kick``; collective."""
        pos, f, e, w, own_cnt, own_nbr, gh_cnt, gh_nbr = self._views
        rc2 = self.config.cutoff ** 2
        n = self.nlocal
        kernel = self._kernels.forces_newton
        with self._phase("forces"), self.dev.ops(1):
            self._f[:self.n_all].fill(0.0)  # owned and ghost rows: the reactions are added into them
        work, parts = self._owned_parts(kernel, forward)
        if forward:
            with self._phase("halo"):
                if not self.halo.forward(self._pos, work, go_on):
                    return False
        with self._phase("forces"):
            if n and not parts:
                self.dev.launch(kernel, kg.grid(n), kg.BLOCK, pos, f, e, w, 0, n, own_cnt, own_nbr, rc2, 0)
            if n:
                self.dev.launch(kernel, kg.grid(n), kg.BLOCK, pos, f, e, w, 0, n, gh_cnt, gh_nbr, rc2, 1)
        with self._phase("halo"):
            self.halo.reverse(self._f)
        if kick and n and not self.bath.style.forces:
            with self._phase("integrate"):
                v, f = self._step_views[:2]
                self.dev.launch(kg.kick, kg.grid(n), kg.BLOCK, v, f, 0.5 * self.config.dt, n)
        if kick:
            self._bath_kick(self.bath.style.forces)
        self.energy = self.virial = None
        self.have_forces = True
        return True

    def _bath_kick(self, forces: bool) -> None:
        """The thermostat after the pair forces: its forces and the closing kick (where it has ``forces``: the
        step's force launches left the kick out), then its end (collective over the ranks where it scales)."""
        if not self.bath.active:
            return
        v, f = self._step_views[:2]
        n = self.nlocal
        with self._phase("integrate"):
            if forces:
                self.bath.force_kick(v, f, self._gid_view, n, self.system.timestep, 0.5 * self.config.dt)
            self.bath.end(v, n, self.system.cart)

    def bath_state(self) -> np.ndarray:
        """A host copy of the thermostat's state (one wait where it has one on the device)."""
        with self._phase("thermo"):
            return self.bath.state_host()

    def local_sums(self) -> np.ndarray:
        """``[sum v^2, px, py, pz, E_pair, virial]`` of this brick: six numbers to the host."""
        xp, n = self.dev.xp, self.nlocal
        with self._phase("thermo"):
            if not n:
                return np.zeros(6)
            v = self._v[:n]
            with self.dev.ops(8):
                sums = xp.stack([xp.sum(v * v), *v.sum(axis=0), self._once * xp.sum(self._e[:n]),
                                 self._once * xp.sum(self._w[:n])])
            return self.dev.to_host(sums, "sums")

    def step(self, force_rebuild: bool = False, eflag: bool = False) -> None:
        """One velocity-Verlet step on the device; collective.

        The first kick, the drift and the largest squared displacement in one launch
        (:func:`~pympi_gpu.nbody.lj.gpu.kernels.integrate`), that one number read (the step's one
        wait for the device besides the halo's), the ranks' MAX; then the forces with the second
        kick (:meth:`compute_forces`).
        """
        if self.queued:
            self._queue(force_rebuild)
            return
        system = self.system
        with self._phase("integrate"):
            slot = self._integrate()
            if any(self.halo.travels):  # read at the first travelling stage's wait: no wait of its own
                self.dev.fetch(self._dmax[slot:slot + 1], self._d2)
                d2 = None
            else:
                d2 = self.dev.scalar(self._dmax[slot])  # NaN counted as infinite by the kernel
        if d2 is None:  # the halo asks, after that wait and before it sends, whether the ranks go on
            if self.compute_forces(forward=True, kick=True,
                                   go_on=lambda: not (system.agree_displacement(self._d2[0]) or force_rebuild)):
                return
        elif not (system.agree_displacement(d2) or force_rebuild):  # collective; a blow-up raises on every rank
            self.compute_forces(forward=True, kick=True)
            return
        self.rebuild()
        self.compute_forces(forward=False, kick=True)  # a rebuild migrated atoms: this rank's may be others

    def _integrate(self) -> int:
        """The first kick, the drift and the largest squared displacement (one launch); the slot it went to."""
        n = self.nlocal
        slot, self._slot = self._slot, 1 - self._slot  # the kernel zeroes the other slot for the next step
        self._step_slot = slot
        v, f, x, x0, dmax = self._step_views
        self.bath.begin(v, n)  # the thermostat's start (where it scales the velocities)
        self.dev.launch(kg.integrate, kg.grid(n), kg.BLOCK, v, f, x, x0, 0.5 * self.config.dt, self.config.dt, n,
                        dmax, slot)
        return slot

    # -- the steps the device decides (one brick) --------------------------
    def _queue(self, force: bool) -> None:
        """Step ``system.timestep`` queued, no wait: the integration, the rebuild's kernels behind the device's
        decision (:func:`~pympi_gpu.nbody.lj.gpu.rebuild_kernels.bin_owned`: ``force``, or the lists' policy
        and the step's largest displacement, all in device memory), the ghosts refreshed (up to the device's
        count of them), the forces with the second kick.  Logged, to be made again from the last wait's state
        (:meth:`settle`)."""
        self._log.append((self._folded, bool(force)))
        self._folded = False
        with self._phase("integrate"):
            slot = self._integrate()
        self._build(self.nlocal, fold=True, copy=True, decide=(self._dmax, slot, self.system.timestep, int(force)),
                    books=True)
        self.compute_forces(forward=True, kick=True)

    def settle(self) -> None:
        """Wait for the steps queued since the last wait and take what the device decided; one wait (a read
        of the rebuild's ``meta``).  At once where nothing is queued.

        A buffer a device-decided rebuild found short (a cell's bucket, the rows of
        the ghosts, a list row: ``meta``'s ``*_MOST`` above the capacity) is grown, the
        state of the last wait put back (:meth:`_restore`) and the steps made again:
        the run goes on as if the buffer had been large enough, bit for bit.  A step
        at which an atom moved farther than its ghosts reach, or a rebuild found a
        velocity or force not finite (``meta``'s ``M_BAD_STEP``, ``M_NONFINITE``),
        is reached again from there and raises the host's
        :class:`~pympi_gpu.nbody.blowup.BlowUp` at that step, the state as the host's
        own step leaves it.  Then the books, the ghost plan and the state are kept
        for the next wait.
        """
        if not self._log:
            return
        with self._phase("other"):
            meta = self.build.read()
        log = self._log
        while True:
            if any(self.build.short(meta)):
                self._grow(meta)
                meta = self._again(log)
                continue
            bad = [int(meta[k]) for k in (rk.M_BAD_STEP, rk.M_NONFINITE) if meta[k]]
            if not bad:
                break
            before = log[:min(bad) - self._kept.step - 1]
            self._again(before)
            self._fail(log[len(before)][0])
        self._adopt(meta)
        self._keep(meta)

    def decide_on_host(self) -> None:
        """From here on the host decides the rebuilds, one wait a step, as over several ranks: for a profile
        that times each step, phase or rebuild alone (``benchmarks/lj.py --mode gpu-profile``)."""
        self.settle()
        self.queued = False

    def _grow(self, meta: np.ndarray) -> None:
        """The buffers ``meta`` found short made larger (their contents are the restore's to fill)."""
        rows, _ = self.build.grow(meta)
        if rows:
            self._make_atoms()
        if self.build.widen(meta):
            self._make_lists()
        self._bind()

    def _again(self, entries) -> np.ndarray:
        """The state of the last wait put back and the logged steps ``entries`` queued again; ``meta`` read
        after them (a wait)."""
        self._restore()
        self.redone += len(entries)
        system = self.system
        for folded, forced in entries:
            if folded:
                self.wrap()
            system.timestep += 1
            self._queue(forced)
        with self._phase("other"):
            return self.build.read()

    def _fail(self, folded: bool) -> None:
        """The step after the state now held, made by the host's rules up to its test: the integration, the
        largest displacement read and judged (:meth:`LjSystem.agreed`: an atom that moved too far), else the
        rebuild's finding of a velocity or force that was not finite.  Raises
        :class:`~pympi_gpu.nbody.blowup.BlowUp`."""
        system = self.system
        if folded:
            self.wrap()
        system.timestep += 1
        with self._phase("integrate"):
            d2 = self.dev.scalar(self._dmax[self._integrate()])
        system.agreed(d2, 0)
        system.agree_migration(system.config.atoms, False)

    def _keep(self, meta: np.ndarray) -> None:
        """The state now, to make the steps queued from here again: the owned rows copied on the device (five
        copies), ``meta``, the step and the displacement's next slot."""
        n, xp = self.nlocal, self.dev.xp
        rows = self._kept.rows if self._kept is not None else ()
        if not rows or rows[0].shape[0] < n:
            rows = tuple(xp.empty((n, 3), np.float64) for _ in range(4)) + (xp.empty(n, np.int64),)
        with self._phase("other"), self.dev.ops(5):
            for dst, src in zip(rows, (self._pos, self._v, self._f, self._x0, self._gid)):
                dst[:n] = src[:n]
        with self._phase("other"):
            bath = self.bath.kept()
        self._kept = _Kept(self.system.timestep, self._slot, meta.copy(), rows, bath)
        self._log = []

    def _restore(self) -> None:
        """The state of the last wait (:meth:`_keep`) back in place, with the lists it had.

        The lists of that state were built at the positions of its last rebuild,
        which it keeps as the displacement's reference, folded into the box and
        sorted by (cell, id): a rebuild from them sorts nothing (the order is the
        identity), and makes the same ghosts, cells and lists.  So the positions are
        set to the references, rebuilt from (the books not counted: it is no new
        rebuild), and set to the kept positions; the ghosts follow at the next
        step's refresh.
        """
        kept, n, dev = self._kept, self.nlocal, self.dev
        x, v, f, x0, gid = kept.rows
        with self._phase("other"):
            with dev.ops(6):
                self._pos[:n] = x0[:n]
                self._x0[:n] = x0[:n]
                self._v[:n] = v[:n]
                self._f[:n] = f[:n]
                self._gid[:n] = gid[:n]
                self._dmax.fill(0.0)
            dev.into_device(kept.meta, self.build.meta)
            self.bath.restore(kept.bath)
        self._slot = self._step_slot = kept.slot
        self._build(n, fold=True, copy=True, decide=(self._dmax, kept.slot, kept.step, 1), books=False)
        with self._phase("other"), dev.ops(1):
            self._pos[:n] = x[:n]
        self.system.timestep = kept.step
        self._log = []

    def start(self) -> None:
        """Lists and (unless loaded) forces at the current positions; collective.

        A restart given the references makes the run's last rebuild again and then moves the atoms to their
        positions, as :meth:`HostAtoms.start` (the device's books: built at the run's step of it)."""
        had = self.have_forces
        self._step_slot = self._slot
        self.rebuild(step=self.system.built_at)  # migrates the loaded forces along with the atoms
        n = self.nlocal
        if self._moving:
            with self.dev.ops(1):
                self._pos[:n] = self._f[:n]
            self._moving = False
            self.compute_forces(forward=True)
            if self._loaded is not None:  # a thermostat's forces are no pair forces: the checkpoint's, by id
                ids, f = self._loaded
                with self.dev.ops(2):
                    self._f[:n] = f[self.dev.xp.searchsorted(ids, self._gid[:n])]
                self._loaded = None
        else:
            with self.dev.ops(1):
                keep = self._f[:n].copy()
            self.compute_forces(forward=False)
            if had:  # a restart from a checkpoint without references: keep its forces
                with self.dev.ops(1):
                    self._f[:n] = keep
        v, f = self._step_views[:2]
        self.bath.setup(v, f, self._gid_view, n, self.system.timestep, had, self.system.cart)
        if not self.dev.simulated:  # nothing to compile: the simulator runs the kernels' Python
            self._warm()
        if self.queued:  # the first state the queued steps can be made again from (the forces left meta as it was)
            self._keep(self._meta)

    def _warm(self) -> None:
        """Compile, before the clock starts, the kernels a step launches that the start did not; collective.

        numba.cuda compiles a kernel at its first launch (a fraction of a second each on the host):
        without this the first timed step would pay for the integration's, the second kick's and
        the halo's.  Each is launched here with the arguments of a real step, over no atom (``n``
        0: no thread touches an array but the scratch slots of the displacement), and the halo's
        forward pass refreshes the ghosts from the owners they were just copied from (the same
        rows, bit for bit); half lists send zero forces back.  The loop resets its clocks and
        the call counts after :meth:`start`, so none of this is counted as a step's.
        """
        dev, xp = self.dev, self.dev.xp
        v, f, x, x0, _ = self._step_views
        h = 0.5 * self.config.dt
        dev.launch(kg.integrate, 1, kg.BLOCK, v, f, x, x0, h, self.config.dt, 0, dev.view(xp.zeros(2, np.float64)), 0)
        pos, fv, e, w, _, _, gh_cnt, gh_nbr = self._views
        if self.config.newton:
            dev.launch(kg.kick, 1, kg.BLOCK, v, f, h, 0)
        else:
            dev.launch(self._kernels.forces_kick, 1, kg.BLOCK, pos, fv, e, w, v, h, 0, gh_cnt, gh_nbr,
                       self.config.cutoff ** 2)
        self.halo.forward(self._pos)
        if self.config.newton:
            self.halo.reverse(xp.zeros_like(self._f))
        if self.bath.active:
            self.bath.warm(v, f, self._gid_view, h)
        dev.sync()

    def wrap(self) -> None:
        """Fold the owned positions into the box on the device (the reference positions move with them): one
        launch (:func:`~pympi_gpu.nbody.lj.gpu.rebuild_kernels.fold_owned`)."""
        n, view = self.nlocal, self.dev.view
        self._folded = True
        self.dev.launch(rk.fold_owned, kg.strided_grid(n, self.dev.most_blocks), kg.BLOCK, view(self._pos),
                        view(self._x0), n, view(self._box))

    def steps(self, most: int) -> list[float]:
        """Up to ``most`` steps without energy sums, ``system.timestep`` moved on by those taken; collective.

        Where :attr:`queued`, ``most`` steps queued and one wait at their end
        (:meth:`settle`), each step given an equal share of the seconds (the device
        runs them behind the host: no step is timed alone); else one step.
        """
        t0 = time.perf_counter()
        if not self.queued:
            self.step()
            return [time.perf_counter() - t0]
        for _ in range(most):
            self.system.timestep += 1
            self._queue(False)
        self.settle()
        return [(time.perf_counter() - t0) / most] * most

    def close(self) -> None:
        """(The device halo's messages are made and waited for within each step: nothing to free.)"""

    def owned(self) -> dict[str, np.ndarray]:
        """Host copies of the owned atoms (four atom arrays, counted): ``x v f`` ``(n, 3)`` and ``id``."""
        self.settle()
        n = self.nlocal
        dev = self.dev
        return {"x": dev.to_host(self._pos[:n], "atoms"), "v": dev.to_host(self._v[:n], "atoms"),
                "f": dev.to_host(self._f[:n], "atoms"), "id": dev.to_host(self._gid[:n], "atoms")}

    def reference(self) -> np.ndarray:
        """A host copy of the owned atoms' positions at the last rebuild ``(n, 3)``, in :meth:`owned`'s order
        (one atom array, counted)."""
        self.settle()
        return self.dev.to_host(self._x0[:self.nlocal], "atoms")
