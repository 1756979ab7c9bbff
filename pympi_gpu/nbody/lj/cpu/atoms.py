"""The atoms of one brick in host memory, with numba's kernels: the CPU half of an LJ system.

:class:`HostAtoms` holds the owned atoms and their ghosts, the Verlet lists
and the halo (:class:`~pympi_gpu.nbody.lj.cpu.halo.Halo`), and does what a step
needs on the CPU: kicks and drifts, the displacement test, the rebuild
(migration, a sort by (cell, id), ghosts, lists) and the pair forces, with
half lists and Newton's third law across bricks (``config.newton``: one
thread per rank; the halo a half shell) or full lists (several threads: the
same step, its pair kernel one thread per atom).  What every rank agrees on (the displacement,
the migration's tally) it asks of its :class:`~pympi_gpu.nbody.lj.system.LjSystem`,
which the device twin (:class:`~pympi_gpu.nbody.lj.gpu.atoms.DeviceAtoms`)
shares.

Order of summation: atoms are sorted by (cell, id) at every rebuild, so a
rebuild's outcome depends on the positions only, not on the history.

What a step costs at a few hundred atoms a rank is mostly what surrounds the
pair loops, so the one-thread engine keeps it small: serial kernels (no
parallel launch), kick, drift and the displacement in one pass, the state in
buffers kept from one rebuild to the next (two sets: a rebuild sorts from one
into the other), the lists built by :mod:`~pympi_gpu.nbody.lj.cpu.lists`, and
a step in one compiled call, its MPI calls included, and the steps between
two outputs in one compiled call, their rebuilds included
(:meth:`HostAtoms.steps`, :mod:`~pympi_gpu.nbody.lj.cpu.steps`).  The kernels
do the NumPy code's IEEE operations in its order: the states are the same bit
for bit.
"""

from __future__ import annotations

import time

import numpy as np

from pympi_gpu.mpi import numba_calls
from pympi_gpu.nbody.blowup import finite_rows
from pympi_gpu.nbody.lj.cpu import kernels as kc
from pympi_gpu.nbody.lj.cpu import lists as lists_cpu
from pympi_gpu.nbody.lj.cpu import rebuild as rebuild_cpu
from pympi_gpu.nbody.lj.cpu import records
from pympi_gpu.nbody.lj.cpu import steps as steps_cpu
from pympi_gpu.nbody.lj.domain import wrap
from pympi_gpu.nbody.lj.cpu.halo import LOST, Halo, grown
from pympi_gpu.nbody.lj.cpu.lists import VerletLists

__all__ = ["HostAtoms"]

#: the lists' rows, as :class:`~pympi_gpu.nbody.lj.cpu.records.Lists` and ``Build`` name them
LISTED = ("own_cnt", "own_nbr", "gh_cnt", "gh_nbr")


class _Rows:
    """One set of a brick's row buffers: positions, forces and ids of every row, velocities of the owned;
    and the set as the kernels take it (:meth:`record`)."""

    def __init__(self, rows: int):
        self.pos = np.empty((rows, 3))
        self.f = np.empty((rows, 3))
        self.gid = np.empty(rows, np.int64)
        self.v = np.empty((rows, 3))
        self._record, self.counts = None, (0, 0)

    def ensure(self, rows: int) -> None:
        """Room for ``rows`` rows (their contents are not kept: the set is written next)."""
        if rows > self.pos.shape[0]:
            self.__init__(rows + rows // 4 + 64)

    def replace(self, **arrays: np.ndarray) -> None:
        """Buffers in place of some (grown, their first rows kept)."""
        for name, a in arrays.items():
            setattr(self, name, a)
        self._record = None

    def record(self, n: int, held: int) -> records.Rows:
        """The set as a :class:`~pympi_gpu.nbody.lj.cpu.records.Rows` record of ``n`` owned rows and ``held``
        rows in all (made once for its buffers; the counts set where they differ)."""
        if self._record is None:
            self._record = records.make(records.Rows, pos=self.pos, f=self.f, v=self.v, gid=self.gid, n=n, held=held)
        elif self.counts != (n, held):
            records.count(self._record, n, held)
        self.counts = (n, held)
        return self._record

    def counted(self, n: int, held: int) -> None:
        """The counts a compiled rebuild wrote into the record."""
        self.counts = (n, held)


class HostAtoms:
    """This brick's atoms, ghosts and lists in host memory (see the module docstring): an
    :class:`~pympi_gpu.nbody.lj.atoms.Atoms`.

    ``system`` is the :class:`~pympi_gpu.nbody.lj.system.LjSystem` they belong
    to (its config, brick, cell grid and agreements); ``x, v`` ``(n, 3)``,
    ``ids`` ``(n,)``, ``f`` ``(n, 3)`` or None to compute them; ``reference``
    ``(n, 3)`` or None: a restart's positions at the run's last rebuild, from
    which :meth:`start` makes the lists (see there).  ``pos``, ``f``, ``gid``
    (every row), ``v``, ``ids``, ``x0`` (the owned rows) are views of the kept
    buffers.
    """

    #: atom arrays copied from a device to the host (none: the atoms live on the host)
    host_copies = None

    def __init__(self, system, x, v, ids, f=None, reference=None):
        self.system = system
        config = self.config = system.config
        self.forces = kc.force_kernels(config.pair_term)
        self.halo = Halo(system.cart, system.brick, config.cutneigh, half_shell=config.newton,
                         kernels=system.kernels_call_mpi)
        n = self.nlocal = int(np.shape(v)[0])
        self._set, self._spare = _Rows(n + n // 4 + 64), _Rows(n + n // 4 + 64)
        self._set.pos[:n] = x if reference is None else reference
        self._set.v[:n] = v
        self._set.gid[:n] = ids
        # a restart from the references: the positions ride in the forces' rows through the first rebuild
        self._set.f[:n] = x if reference is not None else 0.0 if f is None else f
        self._view(n)
        self.have_forces = f is not None
        self._moving = reference is not None
        # a restart's loaded forces, by id, where its thermostat adds forces of its own (Langevin's): the pair
        # forces made again at the restored positions are the run's, bit for bit, but those are not
        self._loaded = None
        if self._moving and f is not None and system.bath.style.forces:
            by_id = np.argsort(ids)
            self._loaded = (np.asarray(ids)[by_id], np.asarray(f)[by_id].copy())
        self.energy = 0.0
        self.virial = 0.0
        self.rebuilds = 0
        #: seconds spent in rebuilds (migration, sort, ghosts, lists; their waits included)
        self.rebuild_seconds = 0.0
        #: (the host decides every rebuild: the system keeps the books)
        self.books = None
        self.lists = None
        self.x0 = None
        self._verlet = VerletLists(system.grid.capacity)
        self._work: dict[str, np.ndarray] = {}
        self._sort_space = None
        self._sums = np.zeros(4)
        self._tally = np.zeros(6)  # the MPI calls of a program's kernels: kc.TALLY_*
        self._rebuild_tally = np.zeros(3)  # a compiled rebuild's: rebuild_cpu.TALLY_*
        self._rebuild_state = rebuild_cpu.state(0)  # and where it is: rebuild_cpu.ST_*
        #: seconds in the MPI calls the kernels made (``MPI_Wtime``; the halo's clock has them by phase)
        self.kernel_mpi_seconds = 0.0
        self._status = numba_calls.statuses(4)
        self._bound, self._bound_to = None, None  # the records but the rows' (:meth:`_records`)
        self.halo.clock.defer(self._account)
        # the kernels make the step's MPI calls (or there are none: one rank), else Python between pieces
        inline = self._inline = system.kernels_call_mpi or self.halo.local
        #: the run's thermostat, as the kernels take it (its arrays are the system's ``bath``'s)
        self.bath = records.bath(system.bath)
        hooks = (system.bath.style.scales, system.bath.style.forces)
        self._programs = {(refresh, kick, step): _program(self.halo.remote, refresh, kick, step, inline, config.newton,
                                                          hooks)
                          for refresh in (True, False) for kick in (True, False) for step in (True, False)}
        #: can :meth:`steps` take several steps in one compiled call (the whole step one piece, timed)?
        self.batched = bool(inline and self.forces.linked)
        self._batch = steps_cpu.kernel(self.forces)  # (compiled on first use: only where batched)
        self._times = np.zeros(64)  # their seconds
        self._held = np.zeros(3, np.int64)  # what the rebuilds a batch made left: steps_cpu.H_*
        self._rebuild_clock = np.zeros(1)  # and their seconds

    def _view(self, n_all: int) -> None:
        """``pos``, ``f``, ``gid`` (rows held), ``v``, ``ids`` (owned rows): views of the current set."""
        s, n = self._set, self.nlocal
        self.pos, self.f, self.gid = s.pos[:n_all], s.f[:n_all], s.gid[:n_all]
        self.v, self.ids = s.v[:n], s.gid[:n]

    def _buffer(self, name: str, shape, dtype=np.float64) -> np.ndarray:
        """A kept workspace array of at least ``shape[0]`` rows."""
        a = self._work.get(name)
        if a is None or a.shape[0] < shape[0]:
            a = self._work[name] = np.empty((shape[0] + shape[0] // 4 + 64, *shape[1:]), dtype)
            self._bound = None
        return a

    def _sorting(self, n: int):
        """The kept buffers of a rebuild's sort for ``n`` owned atoms: ``(x0, order, cell, start)``.  ``x0``
        holds the positions of the last build (the steps measure the displacement from them): kept where
        the buffers grow."""
        space = self._sort_space
        if space is None or space[0].shape[0] < n:
            rows = max(n, self.nlocal) + n // 4 + 64
            space = self._sort_space = (np.empty((rows, 3)), np.empty(rows, np.int64), np.empty(rows, np.int64),
                                        np.empty(self.system.grid.cells + 1, np.int64))
            if self.x0 is not None:
                space[0][:self.nlocal] = self.x0
                self.x0 = space[0][:self.nlocal]
            self._bound = None
        return space

    # -- neighbour lists --------------------------------------------------
    def rebuild(self, checked: bool = False) -> None:
        """Migrate, sort by cell, rebuild ghosts and Verlet lists; collective.

        Raises :class:`~pympi_gpu.nbody.blowup.BlowUp` on every rank where some
        rank holds non-finite velocities or forces, or where the migration
        left more or fewer atoms than the system has (the state as it was).
        ``checked``: the ranks have just agreed on the displacement test, which
        vouches for both (every position finite, so every velocity and force
        that moved it; no atom farther than a brick from its own, so none lost
        or doubled), and the tally's reduction is left out.
        """
        if self.halo.compiled:  # the one path where the kernels make the MPI calls
            self._rebuild_compiled(check=not checked)
            return
        t0 = time.perf_counter()
        n = self.nlocal
        rows = self._buffer("rows", (n, 10))
        finite = kc.pack_migrants(self.pos, self.v, self.f, self.ids, n, rows, np.array(self.config.box))
        rows = self.halo.migrate_rows(rows, n, wrapped=True)
        n = rows.shape[0]
        if not checked:
            self.system.agree_migration(n, finite)
        grid = self.system.grid
        new = self._spare
        new.ensure(n)
        x0, order, cell, start = self._sorting(n)
        self.x0 = x0[:n]
        kc.sort_migrants(rows, n, grid.lo, grid.inv, grid.ncell, order, cell, start, new.pos, new.v, new.f, new.gid,
                         self.x0)
        pos, gid, n_all = self.halo.build(new.pos, new.gid, n)
        if pos is not new.pos:  # the ghosts needed more rows: the other arrays follow
            new.replace(pos=pos, gid=gid, f=grown(new.f, n, pos.shape[0]), v=grown(new.v, n, pos.shape[0]))
        new.f[n:n_all] = 0.0  # forces have ghost rows too: with newton they gather the ghosts' share
        self._set, self._spare = new, self._set
        self.nlocal = n
        self._view(n_all)
        self._lists()
        self._bound = None  # (the lists, the halo's plan and messages: made again)
        self.rebuilds += 1
        self.rebuild_seconds += time.perf_counter() - t0

    def _rebuild_compiled(self, done: int | None = None, check: bool = False) -> None:
        """:meth:`rebuild` as one compiled call (:func:`~pympi_gpu.nbody.lj.cpu.rebuild.rebuild_brick`;
        again after growing a short buffer, and after the ranks agreed on the migration where ``check``:
        no displacement's agreement vouched for the state).  ``done``: the code of a rebuild a batch
        of steps began and stopped short (:meth:`steps`), to finish from where it stopped."""
        t0 = time.perf_counter()
        st, tally = self._rebuild_state, self._rebuild_tally
        if done is None:
            rebuild_cpu.state(self.nlocal, st, check)
            tally.fill(0.0)
            self._rebuild_room()
        while done != rebuild_cpu.DONE:
            if done == rebuild_cpu.AGREE:
                self.system.agree_migration(int(st[rebuild_cpu.ST_N]), bool(st[rebuild_cpu.ST_FINITE]))
            elif done is not None:
                self._grow(done, st)
            new = self._spare
            done = rebuild_cpu.rebuild_brick(self._current(), new.record(*new.counts), *self._records())
        self._set, self._spare = self._spare, self._set
        self._rebuilt(int(st[rebuild_cpu.ST_N]), int(st[rebuild_cpu.ST_HELD]), bool(st[rebuild_cpu.ST_CHANGED]))
        self.rebuilds += 1
        self.rebuild_seconds += time.perf_counter() - t0

    def _rebuild_room(self) -> None:
        """The rebuild's workspace for the atoms owned now (the migration's rows, the sort's)."""
        self._buffer("rows", (self.nlocal, 10))
        self._sorting(self.nlocal)

    def _current(self) -> records.Rows:
        """The current set of rows as the kernels take it (its owned rows and all rows as now)."""
        return self._set.record(self.nlocal, self.pos.shape[0])

    def _records(self) -> tuple:
        """The records of the state but the rows (:mod:`~pympi_gpu.nbody.lj.cpu.records`), in the kernels'
        order: ``(lists, build, plan, mpi, grid, work)``; made again where a buffer of theirs was replaced
        (the halo's and the list build's own say so by their ``version``, this object's by forgetting
        them).  After the first lists."""
        key = (self.halo.version, self._verlet.version)
        if self._bound is None or self._bound_to != key:
            self._rebuild_room()
            halo, grid, config, system = self.halo, self.system.grid, self.config, self.system
            x0, order, cell, start = self._sort_space
            built = self._verlet.kernel_buffers()
            own_cnt, own_nbr, gh_cnt, gh_nbr = self.lists or (built[k][:0] for k in LISTED)  # (none yet: empty)
            lists = records.make(records.Lists, x0=x0[:0] if self.x0 is None else self.x0, own_cnt=own_cnt,
                                 own_nbr=own_nbr, gh_cnt=gh_cnt, gh_nbr=gh_nbr)
            build = records.make(records.Build, rows=self._work["rows"], order=order, cell=cell, start=start, x0=x0,
                                 **halo.rebuild_buffers(), **built)
            mpi = records.make(records.Mpi, reqs=halo.requests, req_at=halo.request_at, agree=system.agreement,
                               total=system.total, top=system.top, status=self._status, tally=self._tally, **halo.kernel_handles())
            grid = records.make(records.Grid, lo=grid.lo, inv=grid.inv, ncell=grid.ncell, reach=grid.reach,
                                box=np.array(config.box), cut2=config.cutneigh ** 2, rc2=config.cutoff ** 2,
                                dt=config.dt, half=config.newton, simd=lists_cpu.SIMD, block=lists_cpu.BLOCK)
            work = records.make(records.Work, sums=self._sums, times=self._times, held=self._held,
                                seconds=self._rebuild_clock, state=self._rebuild_state, tally=self._rebuild_tally)
            self._bound, self._bound_to = (lists, build, halo.plan(), mpi, grid, work), key
        return self._bound

    def _rebuilt(self, n: int, n_all: int, changed: bool) -> None:
        """After compiled rebuilds (the current set theirs): the views, the lists, and the halo's
        messages (``changed``: their regions) and clock."""
        self.halo.kernel_rebuilt(self._rebuild_tally, changed)
        self._rebuild_tally.fill(0.0)
        self.nlocal = n
        self._set.counted(n, n_all)
        self.x0 = self._sort_space[0][:n]
        self._view(n_all)
        self.lists = self._verlet.rows(n)

    def _grow(self, done: int, st: np.ndarray) -> None:
        """What a compiled rebuild that stopped with ``done`` needs before it goes on (as the Python path
        grows its buffers), or its error."""
        if done == rebuild_cpu.LOST:
            raise RuntimeError(LOST)
        if done == rebuild_cpu.FAILED:
            raise numba_calls.failure(int(self.halo.kernel_handles()["got"][2]))
        short, need = rebuild_cpu.GROW[done], int(st[rebuild_cpu.ST_NEED])
        n, held, new = int(st[rebuild_cpu.ST_N]), int(st[rebuild_cpu.ST_HELD]), self._spare
        self._bound = None
        if short == "rows":  # the migration's arrivals (on their way), after the rows staying
            self._work["rows"] = grown(self._work["rows"], int(st[rebuild_cpu.ST_STAY]), need + need // 4 + 64)
        elif short == "set":
            new.ensure(need)
            self._sorting(need)
        elif short == "ghosts":  # the ghost rows (received, or the brick's own images), after the rows held
            if new.pos.shape[0] < need:
                cap = max(need, 2 * new.pos.shape[0])
                new.replace(pos=grown(new.pos, held, cap), gid=grown(new.gid, held, cap))
            if new.f.shape[0] < new.pos.shape[0]:  # forces have ghost rows too, velocities follow
                new.replace(f=grown(new.f, n, new.pos.shape[0]), v=grown(new.v, n, new.pos.shape[0]))
        elif short in ("lists", "widths"):
            widest = st[rebuild_cpu.ST_WIDTHS:rebuild_cpu.ST_WIDTHS + 2] if short == "widths" else None
            self._verlet.grow(n, held - n, self.system.grid.cells, widest)
        else:
            self.halo.grow(short, st)

    def _lists(self) -> None:
        """The Verlet lists of the current rows (retried wider where a row overflows its capacity)."""
        grid, config = self.system.grid, self.config
        self.lists = self._verlet.build(self.pos, self.nlocal, grid, config.cutneigh ** 2, config.cutoff ** 2,
                                        config.newton)

    @property
    def pairs(self) -> float:
        """Distinct pairs within cutoff + skin in the lists (without newton each is listed from both sides)."""
        if self.lists is None:
            return 0
        return (1.0 if self.config.newton else 0.5) * (int(self.lists[0].sum()) + int(self.lists[2].sum()))

    def needs_rebuild(self, d2: float | None = None) -> bool:
        """Has any atom on any rank moved more than skin/2 since the last rebuild?  Collective.

        ``d2``: this rank's largest squared displacement, if already measured.
        """
        if self.lists is None:
            return True
        if d2 is None:
            d2 = kc.max_displacement2(self.pos, self.x0, self.nlocal)
        return self.system.agree_displacement(d2)

    # -- forces -----------------------------------------------------------
    def compute_forces(self, forward: bool, eflag: bool = True, kick: float | None = None) -> None:
        """Forces at the current positions, energy and virial if ``eflag``; collective if ``forward``.

        With ``forward`` the ghost positions are refreshed stage by stage while
        the owned-owned pairs are computed behind the messages.  With newton
        the ghosts' forces then go back to their owners (collective).  Without
        ``eflag`` (LAMMPS skips the sums on steps without thermo output)
        :meth:`local_sums` computes them when asked, from the same positions.
        ``kick``: then ``v += kick f`` (a step's closing half kick).
        """
        self._force_program(forward, eflag, kick)
        self.have_forces = True

    def _force_program(self, forward: bool, eflag: bool, kick: float | None, step: bool = False,
                       force_rebuild: bool = False) -> bool:
        """The force phase: compiled pieces (:meth:`ForceKernels.run_ops`); on one rank,
        or where the kernels make the MPI calls, one piece.  Where they do not, Python makes the calls
        between pieces, at the stages whose neighbours are other ranks.

        ``step``: the step's opening kick, drift and agreement first (the kick is ``kick``); returns
        False where the ranks agreed on a rebuild (or ``force_rebuild``): the piece stopped there, and
        the forces are left to be computed after it.
        """
        h, system = self.halo, self.system
        sums, top = self._sums, system.top
        sums.fill(0.0)
        system.carry_stop()
        run_ops = self.forces.run_ops
        atoms, (lists, _, plan, mpi, grid, work) = self._current(), self._records()
        ran = True
        for ops, stage, then in self._programs[forward, kick is not None, step]:
            status = run_ops(ops, kick or 0.0, eflag, -1.0 if force_rebuild else system.threshold2, atoms, lists,
                             plan, mpi, grid, work, self.bath)
            if status == kc.MPI_FAILED:
                raise self._mpi_failure()
            if status == kc.REBUILD:
                ran = False
                break
            if then == "post":
                h.post(stage)
            elif then == "wait":
                h.wait(stage)
            elif then == "back":  # the ghosts' forces home: nothing left to overlap with
                h.post(stage, back=True)
                h.wait(stage, back=True)
            elif then == "agree":  # Python's reduction (the kernels' is OP_AGREE)
                if self.needs_rebuild(top[0]) or force_rebuild:
                    return False
            elif then == "sum":  # the thermostat's sum over the ranks (the kernels' is OP_SUM)
                system.sum_mv2()
        if step and self._inline:  # the kernel agreed, and stopped where that meant a rebuild
            system.agreed(*top.tolist()[2:])
            if not ran:
                return False
        if eflag:  # (full lists: each pair from both sides, halved; exactly)
            e_own, w_own, e_ghost, w_ghost = sums.tolist()
            once = self._once
            self.energy, self.virial = once * (e_own + e_ghost), once * (w_own + w_ghost)
        else:
            self.energy = self.virial = None
        return True

    def _account(self) -> None:
        """The seconds, bytes and messages of the MPI calls the kernels made, onto the halo's clock: when the
        clock is settled (registered with it), not after every step."""
        t, h = self._tally, self.halo
        if not t[kc.TALLY_MESSAGES]:
            return
        posting, waiting, agreeing, nbytes, messages, _ = t.tolist()
        h.clock.add("communication", posting)
        h.clock.add("waiting", waiting + agreeing)
        h.clock.sent(nbytes, messages)
        h.comm_time += posting + waiting
        self.kernel_mpi_seconds += posting + waiting + agreeing
        t.fill(0.0)

    def _mpi_failure(self) -> Exception:
        """The error of the MPI call a kernel made that failed (its code in the tally), the calls' time and
        traffic put on the clock first (which clears the tally: the code is read before)."""
        code = int(self._tally[kc.TALLY_ERROR])
        self._account()
        return numba_calls.failure(code)

    def pair_forces(self, f, eflag: bool) -> None:
        """Add the pair forces at the ghosts' current positions to ``f`` (no message: the step's forces are
        :meth:`_force_program`'s); set ``energy``/``virial`` (None without ``eflag``)."""
        own_cnt, own_nbr, gh_cnt, gh_nbr = self.lists
        rc2 = self.config.cutoff ** 2
        n = self.nlocal
        newton, once = self.config.newton, self._once
        bounds = [0, n // 3, (2 * n) // 3, n]
        energy = virial = 0.0
        for s in range(3):  # the owned pairs in the step's thirds, so the sums are the step's
            e, w = self.forces.pair_forces(self.pos, f, bounds[s], bounds[s + 1], own_cnt, own_nbr, rc2, newton, eflag)
            energy += once * e
            virial += once * w
        e, w = self.forces.pair_forces(self.pos, f, 0, n, gh_cnt, gh_nbr, rc2, newton, eflag)
        if eflag:
            self.energy = energy + once * e
            self.virial = virial + once * w
        else:
            self.energy = self.virial = None

    @property
    def _once(self) -> float:
        """The share of a listed pair's energy counted here: 1 with half lists, 1/2 with full (each pair is
        listed from both of its atoms)."""
        return 1.0 if self.config.newton else 0.5

    def local_sums(self) -> np.ndarray:
        """``[sum v^2, px, py, pz, E_pair, virial]`` of this brick."""
        if self.energy is None:  # the last step skipped the sums: the same pair loops into scratch forces
            # (no reverse communication: each pair's energy is counted where it is computed)
            self.pair_forces(np.zeros_like(self.f), True)
        return np.concatenate([kc.kinetic_sums(self.v, self.nlocal), [self.energy, self.virial]])

    # -- the step ---------------------------------------------------------
    def step(self, force_rebuild: bool = False, eflag: bool = False) -> None:
        """One velocity-Verlet step; collective.  ``eflag``: sum energy and virial (a thermo step).

        Raises :class:`~pympi_gpu.nbody.blowup.BlowUp` (on every rank) where the state blew up.
        """
        h = 0.5 * self.config.dt
        self.system.bath.at[0] = self.system.timestep  # (the thermostat's stream is drawn at the step's number)
        # kick, drift, agreement and forces: one program (it stops where the ranks agreed on a rebuild)
        if not self._force_program(True, eflag, h, step=True, force_rebuild=force_rebuild):
            self.rebuild(checked=True)
            self.compute_forces(forward=False, eflag=eflag, kick=h)

    def steps(self, most: int) -> list[float]:
        """Up to ``most`` steps without energy sums, ``system.timestep`` moved on by those taken; collective.

        Only where :attr:`batched`, after the first lists: compiled calls
        (:mod:`~pympi_gpu.nbody.lj.cpu.steps`), the
        rebuilds the ranks agree on made inside where the rebuild is compiled;
        where a rebuild needs Python (a short buffer, new messages, an atom
        that moved too far) it is made here, in the step that asked for it (as
        :meth:`step` makes it), and the next call goes on.  The last step is the
        ``most``-th, or the one that carried a stop request the ranks agreed on.
        The operations of :meth:`step`, in its order, one step after another.
        Returns the steps' seconds as the kernels timed them, a rebuild's on its
        step (the Python around the calls is the caller's to place).
        """
        system = self.system
        if self._times.shape[0] < most:
            self._times = np.zeros(most + 64)
            self._bound = None
        h, top = 0.5 * self.config.dt, system.top
        times: list[float] = []
        while True:
            system.carry_stop()  # (a request heard during the call is written into top[1]: the next step carries it)
            code, taken, done = self._run_steps(most - len(times), h)
            t1 = time.perf_counter()
            system.timestep += taken
            if code == kc.MPI_FAILED:
                raise self._mpi_failure()
            times += self._times[:taken].tolist()
            system.agreed(*top.tolist()[2:])  # (raises where an atom moved too far: else a rebuild if it stopped)
            if code == kc.RAN:
                break
            if code == kc.REBUILD:
                self.rebuild(checked=True)
            elif code == steps_cpu.REBUILDING:
                self._rebuild_compiled(done)
            self.compute_forces(forward=False, eflag=False, kick=h)
            times[-1] += time.perf_counter() - t1
            if len(times) == most or top[3]:
                break
        self.energy = self.virial = None
        return times

    def _run_steps(self, most: int, h: float) -> tuple[int, int, int]:
        """One call of the batch kernel (:meth:`steps`), and what its rebuilds left adopted."""
        system, held, seconds = self.system, self._held, self._rebuild_clock
        inside = self.halo.compiled
        if inside:
            self._rebuild_room()
        held.fill(0)
        seconds[0] = 0.0
        (ops, _, _), = self._programs[True, True, True]
        (after, _, _), = self._programs[False, True, False]
        spare = self._spare
        system.bath.at[0] = system.timestep  # (the batch moves it on as each step starts)
        code, taken, done = self._batch(ops, after, most, h, system.batch_stop2, system.move_limit2, inside,
                                        self._current(), spare.record(*spare.counts), *self._records(), self.bath)
        rebuilt = int(held[steps_cpu.H_REBUILDS])
        if rebuilt:
            if rebuilt % 2:
                self._set, self._spare = self._spare, self._set
            self.rebuilds += rebuilt
            if code != steps_cpu.REBUILDING:  # (else the rebuild it began adopts them when it is done)
                self._rebuilt(int(held[steps_cpu.H_N]), int(held[steps_cpu.H_HELD]), code == steps_cpu.REBUILT)
        self.rebuild_seconds += seconds[0]
        return code, taken, done

    def start(self) -> None:
        """Lists and (unless loaded) forces at the current positions; collective.

        A restart given the references (the positions at the run's last rebuild)
        makes the run's own rebuild: the same atoms on each rank, sorted by (cell,
        id) into the same order, the same ghosts and lists; then the atoms move to
        their positions (which came through it in the forces' rows, migrated and
        sorted with them), the ghosts follow, and the forces are the run's, bit
        for bit.  Without them (a checkpoint written before they were kept), the
        lists are made at the positions and the checkpoint's forces are kept.
        """
        had = self.have_forces
        self.rebuild()
        if self._moving:
            n = self.nlocal
            self.pos[:n] = self.f[:n]
            self._moving = False
            self.compute_forces(forward=True)
            if self._loaded is not None:  # a thermostat's forces are no pair forces: the checkpoint's, by id
                ids, f = self._loaded
                self.f[:n] = f[np.searchsorted(ids, self.ids)]
                self._loaded = None
        else:
            f = self.f.copy()
            self.compute_forces(forward=False)
            if had:  # a restart: keep the checkpoint's forces
                self.f[...] = f
        self._start_bath(had)

    def _start_bath(self, had: bool) -> None:
        """The thermostat at the start (LAMMPS's ``setup``): its forces added to the forces just computed (not
        to a checkpoint's, which hold them), and its state from every atom's sum of m v^2 (not a
        checkpoint's); collective."""
        bath = self.system.bath
        ops = []
        if bath.style.forces and not had:
            bath.at[0] = self.system.timestep
            ops.append((kc.OP_BATH_FORCE, 0))
        if bath.style.scales and not bath.restored:
            ops.append((kc.OP_MV2, 0))
        if ops:
            self._run(ops)
        if bath.style.scales and not bath.restored:
            self.system.sum_mv2()
            bath.setup(float(bath.mv2[1]))

    def _run(self, ops) -> None:
        """A program of operations that make no MPI call (:data:`~pympi_gpu.nbody.lj.cpu.kernels.OPS`)."""
        lists, _, plan, mpi, grid, work = self._records()
        status = self.forces.run_ops(np.array(ops, np.int64).reshape(-1, 2), 0.0, False, 0.0, self._current(), lists,
                                     plan, mpi, grid, work, self.bath)
        if status != kc.RAN:
            raise self._mpi_failure()

    def settle(self) -> None:
        """(Every call runs to its end before it returns: nothing is ever queued on the host.)"""

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

    def bath_state(self) -> np.ndarray:
        """A copy of the thermostat's state (the kernels update the system's ``bath.state`` in place)."""
        return self.system.bath.state.copy()

    def reference(self) -> np.ndarray:
        """A copy of the owned atoms' positions at the last rebuild ``(n, 3)``, in :meth:`owned`'s order."""
        return self.x0.copy()

    def close(self) -> None:
        """Free the halo's persistent messages (before the communicator is freed)."""
        self.halo.free()

    def calls(self) -> None:
        """(The CPU counts no device launches or host syncs.)"""
        return None

    def calls_per_step(self, comm, since, steps: int) -> None:
        return None


def _program(remote, refresh: bool, kick: bool, step: bool = False, inline: bool = False,
             half: bool = True, bath: tuple[bool, bool] = (False, False)) -> list[tuple[np.ndarray, int | None,
                                                                                       str | None]]:
    """A step's force phase as pieces ``(ops, stage, then)`` for ``ForceKernels.run_ops``.

    After each piece, ``then`` for stage ``stage``'s messages: ``post`` (the piece ended by packing them),
    ``wait``, ``back`` (the ghosts' forces sent home and waited for), ``agree`` (the step's displacement
    agreed) or ``sum`` (the thermostat's sum); None after the last.  The owned pairs run while the first
    remote stage's messages travel; a stage of the brick's own image costs no call of its own.
    ``refresh``: the ghosts' positions first (not right after a rebuild, which made them); ``kick``: the
    closing half kick; ``step``: the step's opening kick, drift and agreement first.  ``inline``: the
    kernels make the MPI calls: one piece.  ``half``: the ghosts' forces go home (full lists have no
    reverse pass).  ``bath``: the thermostat scales the velocities (before the opening kick, after the
    closing one), adds forces (before the closing kick)."""
    pieces, ops = [], []
    owned = [(kc.OP_OWNED, s) for s in range(3)]

    def cut(stage, then):
        pieces.append((np.array(ops, np.int64).reshape(-1, 2), stage, then))
        ops.clear()

    def mpi(op, d, stage, then):  # an MPI call: the kernel's, or Python's after the piece
        ops.append((op, d)) if inline else cut(stage, then)

    scales, forces = bath
    if step:
        ops.extend([(kc.OP_BEGIN, 0)] if scales else [])
        ops.append((kc.OP_KICK_DRIFT, 0))
        mpi(kc.OP_AGREE, 0, None, "agree")
    ops.append((kc.OP_ZERO, 0))
    for d in range(3 if refresh else 0):
        if not remote[d]:
            ops.append((kc.OP_FORWARD, d))
            continue
        ops.append((kc.OP_PACK, d))
        mpi(kc.OP_POST, d, d, "post")
        ops.extend(owned)
        owned = []
        mpi(kc.OP_WAIT, d, d, "wait")
        ops.append((kc.OP_PUT, d))
    ops.extend(owned)
    ops.append((kc.OP_GHOSTS, 0))
    for d in (2, 1, 0) if half else ():
        if not remote[d]:
            ops.append((kc.OP_REVERSE, d))
            continue
        ops.append((kc.OP_PACK_BACK, d))
        mpi(kc.OP_SEND_BACK, d, d, "back")
        ops.append((kc.OP_ADD_BACK, d))
    if kick:
        ops.extend([(kc.OP_BATH_FORCE, 0)] if forces else [])
        ops.append((kc.OP_KICK, 0))
        if scales:
            ops.append((kc.OP_MV2, 0))
            mpi(kc.OP_SUM, 0, None, "sum")
            ops.append((kc.OP_END, 0))
    cut(None, None)
    return pieces
