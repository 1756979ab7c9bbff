"""Ghost atoms and migration between bricks; collective over the Cartesian communicator.

Migration (:meth:`Halo.migrate_rows`): atoms that left the brick go to the neighbour brick they entered,
one dimension after another (x, then y, then z), so that an atom crossing an
edge or a corner arrives in two or three hops.  Atoms move at most half the
skin between rebuilds, far less than a brick, so one hop per dimension is enough.

Ghosts (:meth:`Halo.build`, LAMMPS's ``Comm::borders``): in three stages (x, y, z), each rank sends the atoms within the
neighbour cutoff of its low face to the lower neighbour and those near its
high face to the upper one, shifted by the box edge across the periodic
boundary.  A stage sends the ghosts received in the earlier stages too
(forwarding), so that edge and corner ghosts arrive without diagonal messages.  Along a dimension with one brick, the brick's
neighbour is its own periodic image: every stage copies those rows in place
instead of sending messages to itself (as LAMMPS does).  The plan (which rows
go where) is kept, and between rebuilds the step's *forward* pass sends only the new
positions of the same rows: ``Comm::forward_comm``.  The step's passes are operations of its compiled
program (:data:`~pympi_gpu.nbody.lj.cpu.kernels.OPS`: pack, post, wait, put), over this plan and its
persistent requests (:meth:`Halo.kernel_handles`); no Python runs between them.

With half lists (Newton's third law across bricks) the halo is a *half
shell*: a stage sends its owned atoms down only, and up only the ghosts of
earlier stages.  A ghost's offset from the brick (per dimension -1, 0 or +1:
below, inside, above) then always has +1 as its first nonzero entry, and the
other brick of any pair between bricks sees the pair's other atom at the
opposite offset, which it does not hold: each such pair has its ghost on
exactly one side, and is listed there with no rule to apply.  The offsets
come from the stages the ghost travelled, not from its rounded coordinates,
so this holds exactly.  Half the ghosts of the full shell, half the
messages' rows, and the lists scan half the ghosts.

The forward pass starts each stage's messages without blocking and runs a piece of
the step's work (the owned-owned forces) while they travel.

The *reverse* pass (with Newton's third law across bricks) is the forward one backwards:
the forces accumulated on the ghost rows go back to the rows they were copied
from, stage by stage in reverse order (z, y, x), each rank adding what it
receives into its owned rows or into ghost rows of an earlier stage, which the
next (earlier) stage sends on: LAMMPS's ``Comm::reverse_comm``.

What a step costs when the bricks are small (a few hundred atoms): the rows
are packed and added by numba kernels over a flat copy of the plan, the stages
of a brick's own images together in one call; between rebuilds the messages
are persistent requests (``Send_init``/``Recv_init``, one ``Startall`` and one
``Waitall`` a stage); each message is a region a little longer than its
rows, which outlives the plan while they fit it: so do the persistent
requests, and most rebuilds make none (the padding rows travel with the
rows).  Where the lower and the upper neighbour are the same rank (two bricks
along a dimension) a stage's two messages each way travel as one, the rows of
both in the order the receiver keeps them; the migration and the ghosts'
first messages of a rebuild travel as one message each way there too.
"""

from __future__ import annotations

import atexit
import time
import weakref

import numpy as np

from pympi_gpu.mpi import numba_calls
from pympi_gpu.nbody.lj.cpu import kernels as kc
from pympi_gpu.nbody.lj.cpu import rebuild as rebuild_cpu
from pympi_gpu.nbody.lj.cpu import records
from pympi_gpu.nbody.lj.domain import TAG_BORDER, TAG_FORWARD, TAG_MIGRATE, TAG_REVERSE, Brick
from pympi_gpu.run.phases import PhaseClock

__all__ = ["Halo", "grown", "LOST"]

#: a migration's error: an atom neither in its brick nor in a neighbour's
LOST = ("an atom moved more than one brick between neighbour-list rebuilds "
        "(the system is unstable: is dt too large?)")

_NONE = np.empty((0, 3))  # "no message": the kernels copy to and from the brick's own rows
_NO_REQUESTS = np.zeros(0, np.uint8)


def _exchange(comm, buf, split: int, total: int, lower: int, upper: int, tag: int, clock: PhaseClock,
              into=None, at: int = 0, kernel: _KernelExchange | None = None) -> tuple[np.ndarray, tuple[int, int]]:
    """Send ``buf[:split]`` to ``lower`` and ``buf[split:total]`` to ``upper``; receive theirs.

    Rows are 2-D float64 of any count: a receive learns its size from a
    probe, so no message of counts goes first.  Where the two neighbours are
    one rank (two bricks along the dimension), the rows go as one message
    each way, the split in one more row (``buf`` needs that row of room).
    Returns the rows received, the upper neighbour's then the lower's, in
    one array, and their counts.  ``into``: the rows go to ``into[at:]``,
    after its first ``at`` rows, and the array returned holds those too;
    where they do not fit (the split's row included), a larger copy of them.
    ``kernel``: the same messages made by a compiled call (:class:`_KernelExchange`).
    """
    one = lower == upper
    clock.sent(buf[:total + one].nbytes, 1 if one else 2)
    if kernel is not None:
        return kernel.exchange(buf, split, total, lower, upper, tag, into, at)
    from mpi4py import MPI

    width = buf.shape[1]
    status = MPI.Status()
    if one:
        buf[total, 0] = split
        req = comm.Isend(buf[:total + 1], lower, tag)
        comm.Probe(lower, tag, status)
        m = status.Get_count(MPI.DOUBLE) // width
        out = _with_room(into, at, at + m, width)
        comm.Recv(out[at:at + m], lower, tag)
        req.Wait()
        c0 = int(out[at + m - 1, 0])  # the neighbour's split: its rows sent down came first
        return out[:at + m - 1], (c0, m - 1 - c0)
    reqs = [comm.Isend(buf[:split], lower, tag), comm.Isend(buf[split:total], upper, tag + 2)]
    counts = []
    for source, t in ((upper, tag), (lower, tag + 2)):
        comm.Probe(source, t, status)
        counts.append(status.Get_count(MPI.DOUBLE) // width)
    m = at + counts[0] + counts[1]
    out = _with_room(into, at, m, width)
    comm.Recv(out[at:at + counts[0]], upper, tag)
    comm.Recv(out[at + counts[0]:m], lower, tag + 2)
    MPI.Request.Waitall(reqs)
    return out[:m], (counts[0], counts[1])


class _KernelExchange:
    """:func:`_exchange` as one compiled call (:func:`~pympi_gpu.mpi.numba_calls.exchange_rows`): the
    communicator's and ``MPI_DOUBLE``'s handles, and the call's requests, statuses and counts, kept."""

    def __init__(self, cart):
        from mpi4py import MPI

        if not numba_calls.link():  # (before the kernel is compiled or loaded: it calls MPI by name)
            raise RuntimeError("MPI's symbols do not resolve for numba: the rebuild's messages need Python's calls")
        self.comm, self.double = numba_calls.handle(cart), numba_calls.handle(MPI.DOUBLE)
        self.rsize = numba_calls.request_size()
        self.requests, self.status = np.zeros(2 * self.rsize, np.uint8), numba_calls.statuses(2)
        self.got = np.zeros(3, np.int64)
        self.rows = np.empty((0, 4))  # the rows received where the caller gives no buffer (kept)

    def exchange(self, buf, split: int, total: int, lower: int, upper: int, tag: int, into,
                 at: int) -> tuple[np.ndarray, tuple[int, int]]:
        width = buf.shape[1]
        out = into if into is not None else self.rows if self.rows.shape[1] == width else np.empty((0, width))
        args = (split, total, out, at, lower, upper, tag, self.comm, self.double, self.requests, self.rsize,
                self.status)
        done = numba_calls.exchange_rows(buf, *args, False, self.got)
        if done == numba_calls.NEED_ROOM:  # (the messages are on their way: this call receives them)
            out = _with_room(into, at, at + int(self.got[0] + self.got[1]), width)
            if into is None:
                self.rows = out
            done = numba_calls.exchange_rows(buf, split, total, out, *args[3:], True, self.got)
        if done == numba_calls.EXCHANGE_FAILED:
            raise numba_calls.failure(int(self.got[2]))
        c0, c1 = int(self.got[0]), int(self.got[1])
        return out[:at + c0 + c1], (c0, c1)


def _with_room(into, at: int, rows: int, width: int) -> np.ndarray:
    """``into`` if it has ``rows`` rows, else a new array (with room to spare) holding its first ``at``."""
    if into is not None and into.shape[0] >= rows:
        return into
    out = np.empty((rows + rows // 4 + 64 if into is not None else rows, width))
    if at:
        out[:at] = into[:at]
    return out


class _Stage:
    """The persistent messages of one stage whose neighbours are other ranks.

    ``fsend`` holds the rows this rank sends (its two entries' rows), ``frecv``
    the ghost rows it receives, in the order of its plan; ``rsend``/``rrecv``
    the same backwards (ghost forces home): views of the halo's flat buffers,
    each the stage's region (:meth:`Halo._messages`).  ``s0``, ``r0``: where
    the second entry's rows begin in them, sent and received (where the
    neighbours are two ranks, its message's first row).
    """

    def __init__(self, cart, d: int, lower: int, upper: int, s0: int, r0: int, fsend, frecv, rsend, rrecv):
        self.fsend, self.frecv, self.rsend, self.rrecv = fsend, frecv, rsend, rrecv
        if lower == upper:  # two bricks along d: both entries to and from the one neighbour, as one message
            self.fwd = [cart.Recv_init(frecv, upper, TAG_FORWARD + 2 * d),
                        cart.Send_init(fsend, lower, TAG_FORWARD + 2 * d)]
            self.rev = [cart.Recv_init(rrecv, lower, TAG_REVERSE + 2 * d),
                        cart.Send_init(rsend, upper, TAG_REVERSE + 2 * d)]
        else:  # entry 2d's rows go to the lower neighbour and its ghosts come from the upper; 2d + 1 the other way
            s, r = s0, r0
            self.fwd = [cart.Recv_init(frecv[:r], upper, TAG_FORWARD + 2 * d),
                        cart.Recv_init(frecv[r:], lower, TAG_FORWARD + 2 * d + 1),
                        cart.Send_init(fsend[:s], lower, TAG_FORWARD + 2 * d),
                        cart.Send_init(fsend[s:], upper, TAG_FORWARD + 2 * d + 1)]
            self.rev = [cart.Recv_init(rrecv[:s], lower, TAG_REVERSE + 2 * d),
                        cart.Recv_init(rrecv[s:], upper, TAG_REVERSE + 2 * d + 1),
                        cart.Send_init(rsend[:r], upper, TAG_REVERSE + 2 * d),
                        cart.Send_init(rsend[r:], lower, TAG_REVERSE + 2 * d + 1)]
        self.messages = len(self.fwd) // 2
        self.fbytes, self.rbytes = fsend.nbytes, rsend.nbytes  # the bytes a post hands MPI, either way
        from mpi4py import MPI

        self.startall, self.waitall = MPI.Prequest.Startall, MPI.Request.Waitall  # once a step each: looked up once

    def free(self) -> None:
        for r in self.fwd + self.rev:
            r.Free()
        self.fwd = self.rev = []


class _Agreement:
    """A persistent reduction (MAX, or SUM where ``total``) of ``send`` into ``recv``, its handle as bytes
    for the kernels."""

    def __init__(self, cart, send, recv, total: bool = False):
        from mpi4py import MPI

        self.request = cart.Allreduce_init(send, recv, MPI.SUM if total else MPI.MAX)
        self.handles = numba_calls.handles([self.request])

    def free(self) -> None:
        self.request.Free()
        self.handles = _NO_REQUESTS


class Halo:
    """The ghost plan of one brick.

    Parameters
    ----------
    cart : periodic 3-D Cartesian communicator (from :func:`~pympi_gpu.nbody.lj.domain.make_cart`)
    brick : this rank's :class:`~pympi_gpu.nbody.lj.domain.Brick`
    cutneigh : halo thickness, ``rc + skin`` (sigma)
    half_shell : the ghosts of half lists (module docstring), else every image within ``cutneigh``
    kernels : compiled calls make the rebuild's messages (the same messages; every rank alike)

    The plan, after :meth:`build`, flat for the kernels:
    entry ``e`` (``2d`` for stage d's low face, sent to the lower neighbour,
    ``2d + 1`` for its high face) sends rows ``pidx[poff[e]:poff[e + 1]]``
    shifted by ``pshift[e]``, and its ghosts (``counts[e]`` rows, from the
    other side's matching entry) are rows ``pstart[e]`` on.
    """

    def __init__(self, cart, brick: Brick, cutneigh: float, half_shell: bool = False, kernels: bool = False):
        self.cart = cart
        #: the rebuild's messages made by compiled calls (``kernels``: :mod:`~pympi_gpu.mpi.numba_calls`)
        self._kernel = _KernelExchange(cart) if kernels else None
        self.half_shell = bool(half_shell)
        self.brick = brick
        self.cut = cutneigh
        # (lower, upper) neighbour ranks per dimension
        self.nbrs = [cart.Shift(d, 1) for d in range(3)]
        #: the dimensions along which the neighbours are other ranks (else the brick is its own image)
        self.remote = tuple(brick.dims[d] > 1 for d in range(3))
        #: the plan, flat (see the class docstring): entry 2d is stage d's low face, 2d + 1 its high face;
        #: the shifts are the brick's (the box edge where it meets the periodic boundary), made once
        self.pshift = np.zeros((6, 3))
        for d in range(3):
            if brick.coords[d] == 0:
                self.pshift[2 * d, d] = brick.box[d]
            if brick.coords[d] == brick.dims[d] - 1:
                self.pshift[2 * d + 1, d] = -brick.box[d]
        self.pidx = np.zeros(0, np.int64)
        self.poff, self.pstart = np.zeros(7, np.int64), np.zeros(6, np.int64)
        #: ghost rows of each entry
        self.counts = np.zeros(6, np.int64)
        self._plan_rows = np.zeros(64, np.int64)  # pidx's kept buffer
        #: per dimension, where the rows sent to the lower neighbour end and those to the upper begin
        self._below = np.array([brick.lo[d] + cutneigh for d in range(3)])
        self._above = np.array([brick.hi[d] - cutneigh for d in range(3)])
        # kept buffers: border rows, migrants (grown on first use), messages
        self._msg, self._leaving, self._flat = np.empty((0, 4)), np.empty((0, 10)), None
        #: the message regions of the last plan (:meth:`_messages`; -1: none), and where each entry's rows start
        self._regions = np.full(12, -1, np.int64)
        self.soff, self.roff = np.zeros(7, np.int64), np.zeros(7, np.int64)
        self._one = np.array([self.nbrs[d][0] == self.nbrs[d][1] for d in range(3)])
        self._remote = np.array(self.remote)
        self._idle = None  # (kernel_handles where there is no compiled exchange)
        self._place = (np.array(brick.dims, np.int64), np.array(brick.coords, np.int64),
                       np.array(self.nbrs, np.int64), np.array([TAG_MIGRATE, TAG_BORDER], np.int64))
        #: counts the replacements of the buffers the kernels hold (:meth:`plan`: its record is made again)
        self.version = 0
        self._plan = None  # (the record, the version it was made at)
        self.nrecv = np.zeros(3, np.int64)
        #: the step's message buffers (:meth:`_messages`): none before the first plan
        self.fsend = self.frecv = self.rsend = self.rrecv = _NONE
        self._stages: dict[int, _Stage] = {}
        self._held: dict[str, _Agreement] = {}  # persistent collectives of the step (:meth:`agreement`)
        #: the stages' persistent requests as bytes for the kernels that start them
        #: (:func:`~pympi_gpu.mpi.numba_calls.handles`): stage d's forward ones from byte
        #: ``request_at[2d, 0]``, ``request_at[2d, 1]`` of them, its reverse ones ``request_at[2d + 1]``
        self.requests, self.request_at = _NO_REQUESTS, np.zeros((6, 2), np.int64)
        _keep_track(self)
        #: seconds in halo packing and waiting for halo/migration messages (reset by the caller)
        self.comm_time = 0.0
        #: the rank's communication and waiting time and traffic (the driver adds its collectives)
        self.clock = PhaseClock()

    @property
    def local(self) -> bool:
        """Is the brick its own periodic image along every dimension (one rank: no messages at all)?"""
        return not any(self.remote)

    # -- migration ----------------------------------------------------------
    def migrate_rows(self, rows: np.ndarray, n: int | None = None, wrapped: bool = False) -> np.ndarray:
        """Wrap the atoms into the box and send those that left to the bricks that own them, in place: rows
        ``(n, 3 + k)`` whose first three columns are the positions, the rest what travels with them.

        ``rows``: a buffer whose first ``n`` rows (all, if None) are the
        atoms (a view is copied first).  Returns the rows this brick owns afterwards: the first rows
        of ``rows`` (those staying, then those that came), or where the
        buffer is too short for them, of a larger one.  ``wrapped``: the
        positions are in the box already.
        """
        t0 = time.perf_counter()
        n = rows.shape[0] if n is None else n
        if rows.base is not None:  # a view: the arrivals go to a buffer of its own
            rows = rows[:n].copy()
        if not wrapped:
            kc.wrap_rows(rows, n, np.asarray(self.brick.box))
        for d in range(3):
            if self.remote[d]:
                rows, n = self._migrate_dim(d, rows, n)
        self.comm_time += time.perf_counter() - t0
        self.clock.add("communication", time.perf_counter() - t0)
        self.version += 1  # (the migrants' buffer may be a new one)
        return rows[:n]

    def _migrate_dim(self, d: int, rows: np.ndarray, n: int) -> tuple[np.ndarray, int]:
        """One dimension of :meth:`migrate_rows`: the atoms that left along d to their neighbours, those
        that came after the ones staying (in ``rows`` while they fit); ``(buffer, rows held)``."""
        b = self.brick
        out = self._leaving = _rows_for(self._leaving, 2 * n + 1, rows.shape[1])
        stay, nd, nu = kc.leaving_rows(rows, n, b.dims[d] / b.box[d], b.dims[d], b.coords[d], d, out[:n], out[n:])
        if stay < 0:
            raise RuntimeError(LOST)
        if nu:  # the rows going up after those going down
            out[nd:nd + nu] = out[n:n + nu]
        came, _ = _exchange(self.cart, out, nd, nd + nu, *self.nbrs[d], TAG_MIGRATE + 4 * d, self.clock,
                            into=rows, at=stay, kernel=self._kernel)
        return came.base, came.shape[0]  # (the rows of a buffer that owns its memory, as ``rows`` does)

    # -- the ghost plan -----------------------------------------------------
    def build(self, pos: np.ndarray, gid: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, int]:
        """The ghost plan of the owned rows ``pos[:n]``, ``gid[:n]``: the ghosts appended in place.

        ``pos`` ``(cap, 3)`` and ``gid`` ``(cap,)`` are buffers, replaced by
        larger ones (the rows kept) where the ghosts need more; returns
        ``(pos, gid, rows held)``.  Collective.  The stages along which the
        brick is its own image go in one compiled call each run of them.
        """
        _free_orphans()
        t0 = time.perf_counter()
        poff, pstart, counts = self.poff, self.pstart, self.counts
        up0 = n if self.half_shell else 0  # the first row a stage may send up
        d = 0
        while d < 3:
            if self.remote[d]:
                pos, gid, n = self._remote_stage(d, pos, gid, n, up0)
                d += 1
                continue
            d1 = d + 1
            while d1 < 3 and not self.remote[d1]:
                d1 += 1
            while True:
                m, entries, rows = kc.local_stages(pos, gid, n, d, d1, self._below, self._above, self._plan_rows,
                                                   poff, up0, self.pshift, pstart, counts)
                if m >= 0:
                    break
                if entries:  # short of room: the one short grows, and the stages run again
                    self._plan_rows = grown(self._plan_rows, poff[2 * d], max(entries, 2 * self._plan_rows.shape[0]))
                if rows:
                    pos, gid = _room(pos, gid, n, rows)
            n, d = m, d1
        self.pidx = self._plan_rows[:poff[6]]
        self._messages()
        self.comm_time += time.perf_counter() - t0
        self.clock.add("communication", time.perf_counter() - t0)
        self.version += 1  # (the plan's and the messages' buffers may be new ones)
        return pos, gid, n

    def _remote_stage(self, d: int, pos, gid, n: int, up0: int):
        """Stage d of :meth:`build` where the neighbours are other ranks: ``(pos, gid, rows held)``."""
        poff, o = self.poff, int(self.poff[2 * d])
        if self._plan_rows.shape[0] < o + 2 * n + 1:
            self._plan_rows = grown(self._plan_rows, o, max(o + 2 * n + 1, 2 * self._plan_rows.shape[0]))
        msg = self._msg = _rows_for(self._msg, 2 * n + 1, 4)
        nl, nh = kc.border_pack(pos, gid, n, d, self._below[d], self._above[d], self._plan_rows, o, up0, self.pshift,
                                msg)
        poff[2 * d + 1], poff[2 * d + 2] = o + nl, o + nl + nh
        got, (c0, c1) = _exchange(self.cart, msg, nl, nl + nh, *self.nbrs[d], TAG_BORDER + 4 * d, self.clock,
                                  kernel=self._kernel)
        self.counts[2 * d], self.counts[2 * d + 1] = c0, c1
        pos, gid = _room(pos, gid, n, n + c0 + c1)
        kc.unpack_ghosts(got, c0 + c1, pos, gid, n)
        self.pstart[2 * d], self.pstart[2 * d + 1] = n, n + c0
        return pos, gid, n + c0 + c1

    def _messages(self, changed: bool | None = None) -> None:
        """The flat message buffers of the plan, and the persistent messages of its remote stages.

        ``fsend``/``rrecv`` hold the rows each remote stage sends (and gets
        back), entry e's from row ``soff[e]``; ``frecv``/``rsend`` its ghosts,
        from ``roff[e]``, stage d's ``nrecv[d]`` of them.  Each message is a
        region a little longer than its rows, kept, rows of padding and all,
        while the rows fit it with at most two paddings to spare
        (:func:`~pympi_gpu.nbody.lj.cpu.kernels.message_regions`; both ranks
        see the same counts, the sender's rows being the receiver's ghosts, so
        they agree on it), and with it the persistent messages: most rebuilds
        make none.  ``changed``: the regions already worked out (a compiled
        rebuild), and whether they changed.
        """
        if changed is None:
            changed = kc.message_regions(self.poff, self.counts, self._remote, self._one, self._regions, self.soff,
                                         self.roff, self.nrecv)
        if not changed and self._stages:  # the same regions of the same buffer: the messages stand
            return
        self.version += 1
        soff, roff = self.soff.tolist(), self.roff.tolist()
        ns, nr = soff[6], roff[6]
        flat = self._flat = _rows_for(self._flat, 2 * (ns + nr), 3)  # one kept buffer, four views
        self.fsend, self.rrecv = flat[:ns], flat[ns:2 * ns]
        self.frecv, self.rsend = flat[2 * ns:2 * ns + nr], flat[2 * ns + nr:2 * (ns + nr)]
        _free_stages(self._stages)
        for d in range(3):
            if self.remote[d]:
                s0, s1, r0, r1 = soff[2 * d], soff[2 * d + 2], roff[2 * d], roff[2 * d + 2]
                self._stages[d] = _Stage(self.cart, d, *self.nbrs[d], soff[2 * d + 1] - s0, roff[2 * d + 1] - r0,
                                         self.fsend[s0:s1], self.frecv[r0:r1], self.rsend[r0:r1], self.rrecv[s0:s1])
        self._handles()

    # -- the rebuild as one compiled call (:mod:`~pympi_gpu.nbody.lj.cpu.rebuild`) -------------------------
    @property
    def compiled(self) -> bool:
        """Do compiled calls make the rebuild's messages (``kernels``)?"""
        return self._kernel is not None

    def plan(self) -> records.Plan:
        """The halo as the kernels take it, a :class:`~pympi_gpu.nbody.lj.cpu.records.Plan` record: made
        again after its buffers were replaced (:attr:`version`).  After the first plan (:meth:`build`)."""
        if self._plan is None or self._plan[1] != self.version:
            dims, coords, nbrs, tags = self._place
            plan = records.make(records.Plan, dims=dims, coords=coords, remote=self._remote, one=self._one, nbrs=nbrs,
                                tags=tags, up0=self.half_shell, below=self._below, above=self._above,
                                pidx=self.pidx, plan_rows=self._plan_rows, poff=self.poff, pstart=self.pstart,
                                counts=self.counts, pshift=self.pshift, regions=self._regions, soff=self.soff,
                                roff=self.roff, nrecv=self.nrecv, fsend=self.fsend, frecv=self.frecv,
                                rsend=self.rsend, rrecv=self.rrecv)
            self._plan = (plan, self.version)
        return self._plan[0]

    def rebuild_buffers(self) -> dict:
        """The halo's buffers a compiled rebuild writes, fields of a
        :class:`~pympi_gpu.nbody.lj.cpu.records.Build` record: the migrants (``leaving``), a border stage's
        rows sent (``message``) and received (``received``)."""
        received = self._kernel.rows if self._kernel is not None else np.empty((0, 4))
        return {"leaving": self._leaving, "message": self._msg, "received": received}

    def kernel_handles(self) -> dict:
        """The fields of an :class:`~pympi_gpu.nbody.lj.cpu.records.Mpi` record a compiled rebuild's
        exchanges use (:class:`_KernelExchange`: the communicator's and ``MPI_DOUBLE``'s handles, room for
        the requests and statuses, the counts ``got``); of no use, but of their types, where Python makes
        the rebuild's messages."""
        _free_orphans()  # (as :meth:`build` does)
        k = self._kernel
        if k is None:
            if self._idle is None:
                size = numba_calls.request_size()
                self._idle = {"comm": 0, "double": 0, "requests": np.zeros(2 * size, np.uint8), "rsize": size,
                              "rstatus": numba_calls.statuses(2), "got": np.zeros(3, np.int64)}
            return self._idle
        return {"comm": k.comm, "double": k.double, "requests": k.requests, "rsize": k.rsize, "rstatus": k.status,
                "got": k.got}

    def grow(self, short: str, st: np.ndarray) -> None:
        """Grow the buffer a compiled rebuild found ``short`` (``rebuild_cpu.GROW``'s names), as the Python
        path grows it; ``st`` its state."""
        need = int(st[rebuild_cpu.ST_NEED])
        self.version += 1
        if short == "leaving":
            self._leaving = _rows_for(self._leaving, need, 10)
        elif short == "plan":
            keep = int(self.poff[2 * st[rebuild_cpu.ST_D]])
            self._plan_rows = grown(self._plan_rows, keep, max(need, 2 * self._plan_rows.shape[0]))
        elif short == "message":
            self._msg = _rows_for(self._msg, need, 4)
        elif short == "received":
            self._kernel.rows = _with_room(None, 0, need, 4)
        else:
            raise ValueError(f"not a halo buffer: {short}")

    def kernel_rebuilt(self, tally: np.ndarray, changed: bool) -> None:
        """After a compiled rebuild: the plan's messages (:meth:`_messages`; ``changed``: their regions)
        and the rebuild's traffic and time on the clock, as :meth:`migrate_rows` and :meth:`build` count them."""
        t0 = time.perf_counter()
        self.pidx = self._plan_rows[:self.poff[6]]
        self._messages(changed)
        seconds = float(tally[rebuild_cpu.TALLY_SECONDS]) + time.perf_counter() - t0
        self.comm_time += seconds
        self.clock.add("communication", seconds)
        self.clock.sent(tally[rebuild_cpu.TALLY_BYTES], tally[rebuild_cpu.TALLY_MESSAGES])

    def _handles(self) -> None:
        """:attr:`requests` and :attr:`request_at` of the current stages."""
        kept, at = [], np.zeros((6, 2), np.int64)
        size = numba_calls.request_size() if self._stages else 0
        for d, stage in self._stages.items():
            for back, requests in enumerate((stage.fwd, stage.rev)):
                at[2 * d + back] = (len(kept) * size, len(requests))
                kept += requests
        self.requests, self.request_at = numba_calls.handles(kept), at
        self.version += 1

    def agreement(self, send: np.ndarray, recv: np.ndarray) -> np.ndarray:
        """The step's agreement, a persistent reduction (MAX) of ``send`` into ``recv`` over the
        communicator, made once (collective): its handle as bytes for the kernels that start it.
        Freed with the plan's messages (:meth:`free`)."""
        held = self._held["agreement"] = _Agreement(self.cart, send, recv)
        return held.handles

    def total(self, send: np.ndarray, recv: np.ndarray) -> np.ndarray:
        """A thermostat's sum over the ranks, a persistent reduction (SUM) of ``send`` into ``recv``, made
        once (collective): its handle as bytes for the kernels.  Freed as :meth:`agreement`'s."""
        held = self._held["total"] = _Agreement(self.cart, send, recv, total=True)
        return held.handles

    def free(self) -> None:
        """Free the persistent messages of the plan and the step's agreement (no more steps: before
        the communicator is freed, whose last request would destroy it wherever it is freed)."""
        _free_stages(self._stages)
        _free_stages(self._held)
        self.requests, self.request_at = _NO_REQUESTS, np.zeros((6, 2), np.int64)

    def post(self, d: int, back: bool = False) -> None:
        """Start stage d's messages (``back``: the reverse ones), their rows already packed (the step's
        program packs them; Python starts them where the kernels make no MPI calls)."""
        t0 = time.perf_counter()
        stage = self._stages[d]
        if back:
            stage.startall(stage.rev)
            self.clock.sent(stage.rbytes, stage.messages)
        else:
            stage.startall(stage.fwd)
            self.clock.sent(stage.fbytes, stage.messages)
        dt = time.perf_counter() - t0
        self.comm_time += dt
        self.clock.add("communication", dt)

    def wait(self, d: int, back: bool = False) -> None:
        """Wait for stage d's messages (``back``: the reverse ones); the wait is the imbalance."""
        t0 = time.perf_counter()
        stage = self._stages[d]
        stage.waitall(stage.rev if back else stage.fwd)
        dt = time.perf_counter() - t0
        self.comm_time += dt
        self.clock.add("waiting", dt)

    @property
    def ghosts(self) -> int:
        return int(self.counts.sum())


# Persistent requests are freed where Python code runs between MPI calls: by the halo's owner
# (:meth:`Halo.free`, before the communicator goes; ``LjSystem.close``), at the next plan (those of
# collected halos) or at exit (those left), never by a garbage collection itself.  A collection can run
# inside an MPI call (a reduction's Python callback), where freeing a request (and with it, after
# ``cart.Free()``, the communicator) is a second MPI call: a rank of the MPI suite hung there.
_LIVE: weakref.WeakSet = weakref.WeakSet()   # halos, for exit
_ORPHANS: list[dict] = []                    # the stages of collected halos
_EXIT: list = []                             # the exit handler, once registered


def _keep_track(halo: Halo) -> None:
    if not _EXIT:  # registered after mpi4py's own exit handler (MPI is up: the halo has its neighbours),
        _EXIT.append(atexit.register(_free_left))  # so run before it
    _LIVE.add(halo)
    weakref.finalize(halo, _ORPHANS.extend, (halo._stages, halo._held)).atexit = False


def _free_orphans() -> None:
    while _ORPHANS:
        _free_stages(_ORPHANS.pop())


def _free_left() -> None:
    _free_orphans()
    for halo in list(_LIVE):
        halo.free()


def _free_stages(stages: dict) -> None:
    """Free the persistent requests of ``stages`` (or of the step's collectives, while MPI runs) and
    forget them."""
    from mpi4py import MPI

    if not MPI.Is_finalized():
        for stage in stages.values():
            stage.free()
    stages.clear()


def grown(a: np.ndarray, keep: int, rows: int) -> np.ndarray:
    """``a`` with ``rows`` rows, its first ``keep`` kept."""
    out = np.empty((rows, *a.shape[1:]), a.dtype)
    out[:keep] = a[:keep]
    return out


def _rows_for(buf: np.ndarray | None, rows: int, width: int) -> np.ndarray:
    """``buf`` if it has ``rows`` rows of ``width``, else a new buffer with room to spare (contents not kept)."""
    if buf is None or buf.shape[0] < rows or buf.shape[1] != width:
        buf = np.empty((rows + rows // 4 + 64, width))
    return buf


def _room(pos: np.ndarray, gid: np.ndarray, keep: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """``pos``, ``gid`` with room for ``rows`` rows: larger copies of their first ``keep`` rows if needed."""
    if rows <= pos.shape[0]:
        return pos, gid
    cap = max(rows, 2 * pos.shape[0])
    return grown(pos, keep, cap), grown(gid, keep, cap)
