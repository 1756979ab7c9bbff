"""Migration and ghosts on the device; collective over the Cartesian communicator.

The device twin of :class:`~pympi_gpu.nbody.lj.cpu.halo.Halo` for the GPU path:
the same stages, hops and order of rows as the CPU's, so the two paths hold
the same atoms in the same order.  The plan is cut into *segments*
(:class:`Segment`): a stage whose messages travel (more than one brick along
its dimension), and each run of stages between two that travel, along which
the brick is its own periodic image.  A run's ghosts are written by one
count, one scan and one write over its base rows, all its stages at once
(:func:`~pympi_gpu.nbody.lj.gpu.rebuild_kernels.write_images`: the ghost rows
where the CPU's stage-by-stage copies put them); a stage that travels packs
its two messages the same way
(:func:`~pympi_gpu.nbody.lj.gpu.rebuild_kernels.pack_border`), waits once for
the device (the messages' sizes, which MPI needs), exchanges them and puts
what arrived in place.  The migration of atoms between bricks is the same
again, a stage that travels at a time: the atoms counted by class (staying,
leaving down, leaving up) and written in order
(:func:`~pympi_gpu.nbody.lj.gpu.rebuild_kernels.migrate_write`), a wait for
the counts, the exchange, one kernel for what arrived.  On one rank nothing travels: the
whole plan is one run, and the rebuild needs the host for nothing (the
sizes stay on the device, in the rebuild's ``meta``).  With
``transport="device"`` the device arrays go to MPI, the stream synchronised
first; with ``"host"`` they are staged through host memory.  Between
rebuilds :meth:`DeviceHalo.forward` costs one launch per stage that travels
(both of its messages packed by :func:`~pympi_gpu.nbody.lj.gpu.kernels.gather_rows`)
and one wait for the device, and one launch per run of the brick's own images
(:func:`~pympi_gpu.nbody.lj.gpu.rebuild_kernels.gather_images`).

With half lists (Newton's third law across bricks) :meth:`DeviceHalo.reverse`
sends the ghosts' forces back to their owners, as the CPU step's reverse pass.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from pympi_gpu.nbody.lj.domain import TAG_BORDER, TAG_FORWARD, TAG_MIGRATE, TAG_REVERSE, Brick
from pympi_gpu.nbody.lj.gpu import rebuild_kernels as rk
from pympi_gpu.nbody.lj.gpu.kernels import BLOCK, add_rows, gather_rows, grid, strided_grid
from pympi_gpu.run.phases import PhaseClock

__all__ = ["DeviceHalo", "Segment", "layout"]


def _flat(a):
    """A C-contiguous array as one flat view of its memory (never a copy: the kernels write through it)."""
    if not a.flags.c_contiguous:
        raise ValueError("a kernel's flat view needs a C-contiguous array")
    return a.reshape(-1)


def layout(travels) -> list[tuple[int, ...]]:
    """The plan's segments, as the stages (0, 1, 2) each holds: a stage that travels alone, the stages between
    two that travel together (``[True, False, False]`` -> ``[(0,), (1, 2)]``)."""
    segments, run = [], []
    for d in range(3):
        if travels[d]:
            if run:
                segments.append(tuple(run))
                run = []
            segments.append((d,))
        else:
            run.append(d)
    if run:
        segments.append(tuple(run))
    return segments


class Segment(NamedTuple):
    """A stage whose messages travel, or a run of stages of the brick's own images, and its constants on the
    device (kernel views): ``dims`` its stages, ``bounds`` ``(2, 3)`` each stage's low and high faces' reach
    (the CPU's ``below``, ``above``), ``shifts`` ``(2, 3)`` the shifts of the rows copied from them; ``steps``
    the shifts on the host, per stage ``(low, high)`` as ``(3,)`` arrays."""

    stages: tuple[int, ...]
    travels: bool
    dims: object
    bounds: object
    shifts: object
    steps: tuple
    held: tuple

    @property
    def d0(self) -> int:
        return self.stages[0]

    @property
    def k(self) -> int:
        return len(self.stages)


class _Local(NamedTuple):
    """Ghost rows ``[start, end)`` of a run of the brick's own images, refreshed from their base rows (``count``:
    the host's word, None where only the device knows it; the end is then ``meta[M_END + d0]``)."""

    stages: tuple[int, ...]
    start: int
    count: int | None
    d0: int


class _Travel(NamedTuple):
    """Stage ``d``'s two messages: ``sends``/``recvs`` ``(rank, first row, rows)`` each, down then up."""

    d: int
    sends: tuple
    recvs: tuple
    rows: int       # rows sent, both messages
    idx: object     # kernel views of the rows packed and their shifts (flat)
    shift: object
    buf: object     # the send buffer (device), and its kernel view
    buf_view: object
    host: tuple | None  # pinned (send, receive) buffers with the host transport


class DeviceHalo:
    """The ghost plan of one brick, its rows on the device.

    Parameters
    ----------
    cart : periodic 3-D Cartesian communicator (not freed here)
    brick : this rank's :class:`~pympi_gpu.nbody.lj.domain.Brick`
    cutneigh : halo thickness, ``rc + skin`` (sigma)
    dev : :class:`~pympi_gpu.device.buffers.DeviceArrays` (the namespace, the stream, the copy counter)
    transport : ``"device"`` (device arrays to CUDA-aware MPI) or ``"host"`` (staged through pinned memory)
    half_shell : the ghosts of half lists, as the CPU's (:class:`~pympi_gpu.nbody.lj.cpu.halo.Halo`)
    build : the rebuild's :class:`~pympi_gpu.nbody.lj.gpu.rebuild.DeviceBuild`, whose buffers the ghosts go into
    """

    def __init__(self, cart, brick: Brick, cutneigh: float, dev, transport: str, half_shell: bool = False,
                 build=None):
        if transport not in ("device", "host"):
            raise ValueError(f"transport must be 'device' or 'host', got {transport!r}")
        self.cart = cart
        self.brick = brick
        self.cut = cutneigh
        self.dev = dev
        #: the box's three edges, on the device (what the migration folds the positions into), once it migrates
        self._box = None
        self.transport = transport
        self.half_shell = bool(half_shell)
        self.build = build
        self.me = cart.Get_rank()
        self.nbrs = [cart.Shift(d, 1) for d in range(3)]
        #: per stage, do its messages go to other ranks (more than one brick along its dimension)?
        self.travels = [self.nbrs[d] != (self.me, self.me) for d in range(3)]
        #: the segments of the plan (:func:`layout`), their constants on the device once the first rebuild made them
        self.segments_of_plan: list[Segment] = []
        #: per stage and direction: (d, idx, shift, dest, source, start, count); idx on the device
        self.plan: list = []
        #: per stage that travels: its messages' packed rows and shifts (device), as ``pack_border`` wrote them
        self.packed: dict[int, tuple] = {}
        #: per stage that travels: the ghost rows its two messages brought (from above, from below)
        self.received: dict[int, tuple[int, int]] = {}
        #: what :meth:`forward` launches, per rebuild (:meth:`_stage`): :class:`_Local` and :class:`_Travel`
        self.segments: list = []
        self._pos = self._pos_view = None
        self._f = self._f_view = None
        self._n = 0
        self._idx_views: list | None = None
        self._pinned: dict[int, np.ndarray] = {}
        #: page-locked buffers allocated so far (the host transport; grown, never one per rebuild)
        self.pinned_allocations = 0
        #: seconds in halo packing and waiting for halo/migration messages (reset by the caller)
        self.comm_time = 0.0
        #: the rank's communication and waiting time and traffic (the driver adds its collectives)
        self.clock = PhaseClock()

    def _edges(self):
        """The box's three edges on the device, uploaded by the first migration."""
        if self._box is None:
            self._box = self.dev.from_host(np.array(self.brick.box), np.float64)
        return self._box

    # -- the plan's segments ----------------------------------------------
    def layout(self) -> list[Segment]:
        """The plan's :class:`Segment` s, their constants uploaded once (the first rebuild's)."""
        if not self.segments_of_plan:
            b = self.brick
            for stages in layout(self.travels):
                dims, bounds, shifts = np.zeros(3, np.int64), np.zeros((2, 3)), np.zeros((2, 3))
                steps = []
                for j, d in enumerate(stages):
                    dims[j] = d
                    bounds[0, j], bounds[1, j] = b.lo[d] + self.cut, b.hi[d] - self.cut
                    low, high = np.zeros(3), np.zeros(3)
                    if b.coords[d] == 0:
                        low[d] = shifts[0, j] = b.box[d]
                    if b.coords[d] == b.dims[d] - 1:
                        high[d] = shifts[1, j] = -b.box[d]
                    steps.append((low, high))
                held = tuple(self.dev.from_host(a) for a in (dims, bounds, shifts))
                view = self.dev.view
                self.segments_of_plan.append(Segment(stages, self.travels[stages[0]], *(view(a) for a in held),
                                                     tuple(steps), held))
        return self.segments_of_plan

    @property
    def fused(self) -> bool:
        """Does the plan begin with a run of the brick's own images (whose classes the owned atoms' order
        counts as it writes them)?"""
        return not self.travels[0]

    # -- messages ---------------------------------------------------------
    def _swap(self, rows, split: int, lower: int, upper: int, tag: int):
        """Device ``rows[:split]`` to ``lower`` and ``rows[split:]`` to ``upper``; the rows each sends back, in one
        device array (from upper, then from lower), and the two counts.  The caller has waited for the device
        already, where it read the sizes: MPI reads ``rows`` as they are (the device transport), or they come
        to the host in one copy (the host transport)."""
        dev, xp = self.dev, self.dev.xp
        width = rows.shape[1]
        sizes = np.array([split, rows.shape[0] - split], np.int64)
        got = np.empty(2, np.int64)
        self.cart.Sendrecv(sizes[:1], lower, tag, got[:1], upper, tag)
        self.cart.Sendrecv(sizes[1:], upper, tag + 2, got[1:], lower, tag + 2)
        c_up, c_down = int(got[0]), int(got[1])
        out = xp.empty((c_up + c_down, width), np.float64)
        if self.transport == "device":
            sent, into = (dev.mpi_buffer(rows[:split]), dev.mpi_buffer(rows[split:])), out
            recv = (dev.mpi_buffer(out[:c_up]), dev.mpi_buffer(out[c_up:]))
        else:
            host = dev.to_host(rows, "message")  # (even empty: a wait per message buffer, whatever it holds)
            sent, into = (host[:split], host[split:]), np.empty(out.shape, np.float64)
            recv = (into[:c_up], into[c_up:])
        reqs = [self.cart.Irecv(recv[0], upper, tag + 1), self.cart.Irecv(recv[1], lower, tag + 3),
                self.cart.Isend(sent[0], lower, tag + 1), self.cart.Isend(sent[1], upper, tag + 3)]
        from mpi4py import MPI

        MPI.Request.Waitall(reqs)
        if self.transport == "host":
            dev.into_device(into, out)
        self.clock.sent(sizes.nbytes + 8 * width * rows.shape[0], 4)
        return out, c_up, c_down

    def migrate(self, sets, n: int) -> tuple[int, int, bool]:
        """Send atoms to the bricks that own them, stage by stage where the stage travels; collective.

        ``sets``: two sets of owned-atom arrays ``(x, v, f, gid)``, the atoms in the first;
        returns ``(n, which, finite)``: the atoms held after, the set that holds them (0, 1),
        and whether every velocity and force was finite (the rebuild's ``meta`` says so too).
        Per stage: the atoms counted by class (staying, leaving down, leaving up) and
        written in order, a wait for the counts, the exchange, the arrivals put after those
        staying: the CPU's rows in the CPU's order.  The positions are folded into the box
        by the first stage; where no stage travels, that is all (the atoms are copied into
        the second set; :class:`~pympi_gpu.nbody.lj.gpu.atoms.DeviceAtoms` folds them in its
        sort instead, and calls this only where a stage travels).  Where the atoms that
        arrive do not fit, :attr:`room` grows both sets, keeping their first rows.
        """
        dev, xp, b, build = self.dev, self.dev.xp, self.brick, self.build
        view = dev.view
        t0 = time.perf_counter()
        which, fold = 0, True
        for d in [d for d in range(3) if self.travels[d]] or [None]:
            src, dst = sets[which], sets[1 - which]
            chunks = grid(n)
            p, coord = (1, 0) if d is None else (b.dims[d], b.coords[d])  # none travels: every atom stays
            dev.launch(rk.migrate_count, strided_grid(n, dev.most_blocks), BLOCK, *(view(a) for a in src[:3]), n,
                       fold, view(self._edges()), d or 0, p / b.box[d or 0], p, coord, view(build.faces),
                       view(build.ccount), chunks, view(build.meta))
            with dev.ops(1):
                xp.cumsum(build.ccount[:4 * chunks], out=build.cstart[1:4 * chunks + 1])
            leaving = xp.empty((n, 10), np.float64)  # those leaving down, then those leaving up
            dev.launch(rk.migrate_write, min(chunks, dev.most_blocks), BLOCK, *(view(a) for a in src), n,
                       view(build.faces), view(build.ccount), view(build.cstart), chunks, *(view(a) for a in dst),
                       view(leaving), view(build.meta))
            meta = build.read()  # the stage's counts: its one wait (the rows leaving are written)
            stay, nd, nu, lost = (int(meta[k]) for k in (rk.M_STAY, rk.M_DOWN, rk.M_UP, rk.M_LOST))
            if lost:
                raise RuntimeError("an atom moved more than one brick between neighbour-list rebuilds "
                                   "(the system is unstable: is dt too large?)")
            if d is None:
                n, which = stay, 1
                break
            lower, upper = self.nbrs[d]
            rows, c_up, c_down = self._swap(leaving[:nd + nu], nd, lower, upper, TAG_MIGRATE + 4 * d)
            n = stay + c_up + c_down
            if n > dst[0].shape[0]:
                sets = self.room(n, stay, 1 - which)
                dst = sets[1 - which]
            dev.launch(rk.unpack_owned, strided_grid(c_up + c_down, dev.most_blocks), BLOCK, view(rows),
                       c_up + c_down, *(view(a) for a in dst), stay)
            which, fold = 1 - which, False
        self.comm_time += time.perf_counter() - t0
        self.clock.add("communication", time.perf_counter() - t0)
        return n, which, not meta[rk.M_NONFINITE]

    #: ``room(rows, keep, which)``: the caller's, growing its owned-atom sets to ``rows`` (the first ``keep`` rows
    #: of set ``which`` kept); returns the sets (set by :class:`~pympi_gpu.nbody.lj.gpu.atoms.DeviceAtoms`)
    room = None

    def borders(self, pos, gid, n: int, grow_rows, counted: bool) -> None:
        """The ghosts of owned rows [0, n) of device ``pos``/``gid`` into their rows after them; collective.

        Segment by segment: a run of the brick's own images, one count (none for a run
        that starts the plan: the owned atoms' order counted its classes), one scan, one
        write; a stage that travels, one count, one scan, one pack, one wait (its messages'
        sizes), the exchange, one unpack.  ``counted``: the first segment is such a run and
        the owned atoms' order counted its classes (:meth:`DeviceBuild.sort`).  No size
        comes to the host for a run: each segment reads the rows held before it from the
        device (``meta``).  ``grow_rows(rows,
        keep)``: the caller's, making room for ``rows`` rows (the first ``keep`` kept) where
        a stage that travels receives more than ``pos`` holds.  :meth:`settle` makes the
        plan from the sizes the rebuild left.
        """
        dev, xp, build = self.dev, self.dev.xp, self.build
        t0 = time.perf_counter()
        view = dev.view
        up0 = n if self.half_shell else 0
        chunks = build.capacity.chunks
        base = rk.M_N
        for seg in self.layout():
            k = seg.k
            classes = 3 ** k - 1
            if not (counted and seg is self.segments_of_plan[0]):
                dev.launch(rk.count_images, strided_grid(build.capacity.rows, dev.most_blocks), BLOCK, view(pos),
                           base, k, seg.dims, seg.bounds, view(build.faces), view(build.ccount), chunks, up0,
                           view(build.meta))
            with dev.ops(1):
                xp.cumsum(build.ccount[:classes * chunks], out=build.cstart[1:classes * chunks + 1])
            blocks = min(chunks, dev.most_blocks)
            if not seg.travels:
                dev.launch(rk.write_images, blocks, BLOCK, view(pos), view(gid), n, base, k, up0, seg.dims,
                           seg.shifts, view(build.faces), view(build.ccount), view(build.cstart), chunks,
                           view(build.gsrc), view(build.gshift), view(build.gisrc), view(build.lo), view(build.inv),
                           view(build.nc), view(build.gcount), view(build.gbucket), build.capacity.cell, seg.d0,
                           view(build.meta))
            else:
                pos, gid = self._border(seg, pos, gid, base, up0, blocks, grow_rows)
            base = rk.M_END + seg.d0
        self.comm_time += time.perf_counter() - t0
        self.clock.add("communication", time.perf_counter() - t0)

    def _border(self, seg: Segment, pos, gid, base: int, up0: int, blocks: int, grow_rows):
        """A stage that travels: its two messages packed, sized (a wait), exchanged, put in place.  Returns
        ``(pos, gid)``, grown where what arrived did not fit."""
        dev, xp, build = self.dev, self.dev.xp, self.build
        view = dev.view
        d = seg.d0
        rows = build.capacity.rows
        msg = xp.empty((rows, 4), np.float64)
        pidx, pshift = xp.empty(rows, np.int64), xp.empty((rows, 3), np.float64)
        dev.launch(rk.pack_border, blocks, BLOCK, view(pos), view(gid), base, up0, d, seg.shifts, view(build.faces),
                   view(build.ccount), view(build.cstart), build.capacity.chunks, view(msg), view(pidx), view(pshift),
                   view(build.meta))
        meta = build.read()  # the messages' sizes: the one wait of the stage (the device's rows are written)
        m, nl, nh = int(meta[base]), int(meta[rk.M_MSG + 2 * d]), int(meta[rk.M_MSG + 2 * d + 1])
        self.packed[d] = (pidx[:nl + nh], pshift[:nl + nh])
        lower, upper = self.nbrs[d]
        # the low face's rows go down, the high face's up; from above come its low rows, our low ghosts
        got, c_low, c_high = self._swap(msg[:nl + nh], nl, lower, upper, TAG_BORDER + 4 * d)
        self.received[d] = (c_low, c_high)
        if m + c_low + c_high > pos.shape[0]:
            pos, gid = grow_rows(m + c_low + c_high, m)
        dev.launch(rk.unpack_border, strided_grid(c_low + c_high, dev.most_blocks), BLOCK, view(got), c_low + c_high,
                   view(pos), view(gid), m, view(build.lo), view(build.inv), view(build.nc), view(build.gcount),
                   view(build.gbucket), build.capacity.cell, d, view(build.meta))
        return pos, gid

    def settle(self, meta: np.ndarray, n: int, known: bool = True) -> int:
        """The plan from the sizes a rebuild left (``meta`` on the host, ``n`` owned rows): every message's
        rows, what :meth:`forward` launches (:meth:`_stage`); the rows held.  ``known`` False: the device
        decides the rebuilds and may have made others since ``meta`` was read: the runs' ghosts are then
        refreshed up to the device's own count (:class:`_Local` ``count`` None)."""
        self.plan = [None] * 6
        build = self.build
        m = n
        for seg in self.layout():
            if seg.travels:
                d = seg.d0
                nl, nh = int(meta[rk.M_MSG + 2 * d]), int(meta[rk.M_MSG + 2 * d + 1])
                c_low, c_high = self.received[d]
                lower, upper = self.nbrs[d]
                pidx = self.packed[d][0]
                low, high = seg.steps[0]
                # received: the low message's rows (from upper) first, then the high one's (from lower)
                self.plan[2 * d] = (d, pidx[:nl], low, lower, upper, m, c_low)
                self.plan[2 * d + 1] = (d, pidx[nl:nl + nh], high, upper, lower, m + c_low, c_high)
                m += c_low + c_high
                continue
            at = m
            for j, d in enumerate(seg.stages):
                for k in (0, 1):
                    count = int(meta[rk.M_MSG + 2 * d + k])
                    self.plan[2 * d + k] = (d, build.gisrc[at - n:at - n + count], seg.steps[j][k], self.me, self.me,
                                            at, count)
                    at += count
            m = int(meta[rk.M_END + seg.d0])
        self._stage(n, known)
        return m

    def _stage(self, n: int, known: bool = True) -> None:
        """What :meth:`forward` launches, from the plan: :attr:`segments`, made once per rebuild.

        A stage whose messages travel is a :class:`_Travel`: both directions' rows gathered
        and shifted into one send buffer by one launch (from :attr:`packed`).  A run of stages
        of the brick's own images is one :class:`_Local`: every ghost row it made refreshed in
        one launch from its base row, with the shifts of the stages it passed through summed
        (each stage shifts its own dimension only, so the sum adds, coordinate by coordinate,
        the one shift the stages would have added one after the other: the same rows, bit for
        bit).  ``n``: the owned rows; ``known``: the runs' ghost counts are the host's.
        """
        self.segments = []
        self._n = n
        self._idx_views = None  # made by the first reverse after the rebuild (half lists only)
        for stages in layout(self.travels):
            if self.travels[stages[0]]:
                self.segments.append(self._travel(stages[0]))
                continue
            first = self.plan[2 * stages[0]][5]
            count = sum(self.plan[2 * d + k][6] for d in stages for k in (0, 1))
            self.segments.append(_Local(stages, first, count if known else None, stages[0]))

    def _travel(self, d: int) -> _Travel:
        """Stage ``d``'s two messages: their rows and shifts in one send buffer, its pinned twins if staged."""
        xp = self.dev.xp
        (_, low, _, down, up, start, c_low), (_, high, _, _, _, _, c_high) = self.plan[2 * d:2 * d + 2]
        idx, shift = self.packed[d]
        n_low, m = int(low.shape[0]), int(low.shape[0] + high.shape[0])
        buf = xp.empty((m, 3), np.float64)  # (no launch)
        host = ((self._pinned_rows(2 * d, m), self._pinned_rows(2 * d + 1, c_low + c_high))
                if self.transport == "host" else None)
        view = self.dev.view
        return _Travel(d, ((down, 0, n_low), (up, n_low, m - n_low)),
                       ((up, start, c_low), (down, start + c_low, c_high)), m, view(idx), view(_flat(shift)), buf,
                       view(_flat(buf)), host)

    def _pinned_rows(self, key: int, rows: int) -> np.ndarray:
        """``(rows, 3)`` float64 of pinned buffer ``key``, grown (never shrunk) with a quarter to spare.

        The pinned buffers are views of page-locked arrays kept from one rebuild to the next and
        replaced only by larger ones: CuPy's pinned-memory pool keeps every block it ever handed
        out for reuse at the same size, so new buffers at every rebuild, whose sizes change with
        the atoms near each face, would grow the process's page-locked memory for the whole run.
        """
        held = self._pinned.get(key)
        if held is None or held.shape[0] < rows:
            held = self._pinned[key] = self.dev.pinned((rows + rows // 4 + 16, 3))
            self.pinned_allocations += 1
        return held[:rows]

    def forward(self, pos, work=None, go_on=None) -> bool:
        """Refresh the ghost rows of device ``pos`` from their owners, segment by segment; collective.

        ``work(stage)`` (stage 0, 1, 2) is launched while that stage's
        messages are in flight (on the stream: it runs as they travel).
        Per stage that travels: one launch packs both messages, one wait
        (the copy to pinned memory, or the sync before MPI reads device
        memory), and with the host transport one copy of both received
        messages back; a run of the brick's own images: one launch.  Nothing
        waits for ``work``'s kernels.  ``go_on()``, where given, is asked after
        the first travelling stage's wait, before anything is sent: what the
        device left for the host by then is on the host (the step's largest
        displacement), and False (every rank's answer, a collective decision)
        ends the refresh there, nothing sent.  Returns whether it went on.
        """
        from mpi4py import MPI

        dev = self.dev
        if pos is not self._pos:  # a kernel's view of pos, made once per array (the array held: ids stay unique)
            self._pos, self._pos_view = pos, dev.view(_flat(pos))
        t0 = time.perf_counter()
        busy = waited = 0.0
        for seg in self.segments:
            if isinstance(seg, _Local):
                self._refresh(seg, pos)
                tw = time.perf_counter()
                for d in seg.stages:
                    if work is not None:
                        work(d)
                busy += time.perf_counter() - tw
                continue
            posted = self._post(pos, seg, go_on)
            go_on = None  # (asked once: at the first stage that travels)
            if posted is None:
                self._spent(t0, busy, waited)
                return False
            reqs, unstage = posted
            tw = time.perf_counter()
            if work is not None:
                work(seg.d)  # launched on the stream: runs while the messages travel
            busy += time.perf_counter() - tw
            tw = time.perf_counter()
            MPI.Request.Waitall(reqs)
            waited += time.perf_counter() - tw
            if unstage is not None:
                dev.into_device(*unstage)
        self._spent(t0, busy, waited)
        return True

    def _spent(self, t0: float, busy: float, waited: float) -> None:
        """The seconds since ``t0`` less ``busy`` (the work launched behind the messages) to :attr:`comm_time`,
        and to the clock: ``waited`` as waiting, the rest as communication."""
        spent = time.perf_counter() - t0 - busy
        self.comm_time += spent
        self.clock.add("waiting", waited)
        self.clock.add("communication", spent - waited)

    def _refresh(self, seg: _Local, pos) -> None:
        """A run's ghost rows from their base rows (:func:`~pympi_gpu.nbody.lj.gpu.rebuild_kernels.gather_images`),
        up to the device's count of them (its last rebuild's, which the host may not know yet)."""
        if seg.count == 0:
            return
        dev, build = self.dev, self.build
        rows = seg.count if seg.count is not None else pos.shape[0] - seg.start
        dev.launch(rk.gather_images, strided_grid(rows, dev.most_blocks), BLOCK, self._pos_view, dev.view(build.gsrc),
                   dev.view(build.gshift), self._n, seg.start, dev.view(build.meta), seg.d0)

    def _post(self, pos, seg: _Travel, go_on=None) -> tuple[list, tuple | None] | None:
        """Pack stage ``seg``'s messages and post them; the requests, and what to copy in once they are done
        (None where ``go_on()``, asked after the stage's wait, says not to: nothing posted)."""
        dev = self.dev
        if seg.rows:
            dev.launch(gather_rows, grid(seg.rows), BLOCK, self._pos_view, seg.idx, seg.shift, seg.buf_view, 0,
                       seg.rows)
        reqs, unstage = [], None
        if self.transport == "device":
            dev.sync()  # MPI reads what the kernel wrote
            recv = [dev.mpi_buffer(pos[start:start + count]) for _, start, count in seg.recvs]
            send = [dev.mpi_buffer(seg.buf[a:a + n]) for _, a, n in seg.sends]
        else:
            hsend, hrecv = seg.host
            if seg.rows:
                dev.to_host(seg.buf, "message", out=hsend)  # waits for the stream: so does the next line
            else:  # the last step's copy out of hrecv is done before MPI writes into it again
                dev.sync()
            start = seg.recvs[0][1]
            recv = [hrecv[a - start:a - start + count] for _, a, count in seg.recvs]
            send = [hsend[a:a + n] for _, a, n in seg.sends]
            total = hrecv.shape[0]
            unstage = (hrecv, pos[start:start + total]) if total else None
        if go_on is not None and not go_on():
            return None
        for k in (0, 1):
            tag = TAG_FORWARD + 2 * seg.d + k
            reqs.append(self.cart.Irecv(recv[k], seg.recvs[k][0], tag))
            reqs.append(self.cart.Isend(send[k], seg.sends[k][0], tag))
            self.clock.sent(seg.sends[k][2] * 3 * 8)
        return reqs, unstage

    def reverse(self, f) -> None:
        """Add the forces on the ghost rows of device ``f`` ``(n_all, 3)`` into the rows they came from.

        Stage by stage in reverse order, as the CPU's ``Halo.reverse``, one launch a message
        (:func:`~pympi_gpu.nbody.lj.gpu.kernels.add_rows`; a message's rows are distinct): a
        brick's own periodic image adds its ghost rows in place; a stage that travels sends them
        back and adds what comes back.  The same additions in the same order as the CPU's: the
        same forces bit for bit.  Collective over the Cartesian communicator.
        """
        dev = self.dev
        if f is not self._f:  # the kernels' view of f, made once per array
            self._f, self._f_view = f, dev.view(_flat(f))
        if self._idx_views is None:  # the kernels' views of each message's rows, once per rebuild
            self._idx_views = [dev.view(p[1]) for p in self.plan]
        t0 = time.perf_counter()
        waited = 0.0
        for d in (2, 1, 0):
            if self.travels[d]:
                waited += self._send_back(f, d)
                continue
            for k in (0, 1):
                start, count = self.plan[2 * d + k][5:7]
                if count:
                    dev.launch(add_rows, grid(count), BLOCK, self._f_view, self._idx_views[2 * d + k], self._f_view,
                               start, count)
        self.comm_time += time.perf_counter() - t0
        self.clock.add("waiting", waited)
        self.clock.add("communication", time.perf_counter() - t0 - waited)

    def _send_back(self, f, d: int) -> float:
        """Stage ``d``'s ghost forces to their owners, theirs added here; the seconds waited."""
        from mpi4py import MPI

        dev, xp = self.dev, self.dev.xp
        reqs, back = [], []
        for k in (0, 1):
            _, idx, _, dest, source, start, count = self.plan[2 * d + k]
            # the rows sent to dest come back from dest; those received from source go back to it
            tag = TAG_REVERSE + 2 * d + k
            n = idx.shape[0]
            if self.transport == "device":
                buf = xp.empty((n, 3), np.float64)
                dev.sync()  # MPI reads the forces the kernels wrote
                reqs.append(self.cart.Irecv(dev.mpi_buffer(buf), dest, tag))
                reqs.append(self.cart.Isend(dev.mpi_buffer(f[start:start + count]), source, tag))
                back.append((2 * d + k, buf, None))
            else:
                sent = dev.to_host(f[start:start + count], "message") if count else np.empty((0, 3))
                got = np.empty((n, 3), np.float64)
                reqs.append(self.cart.Irecv(got, dest, tag))
                reqs.append(self.cart.Isend(sent, source, tag))
                back.append((2 * d + k, got, sent))
            self.clock.sent(count * 3 * 8)
        tw = time.perf_counter()
        MPI.Request.Waitall(reqs)
        waited = time.perf_counter() - tw
        for message, rows, _ in back:  # one message after the other, in stream order: the two may share rows
            m = self.plan[message][1].shape[0]
            if m:
                rows = rows if isinstance(rows, xp.ndarray) else dev.from_host(rows)
                dev.launch(add_rows, grid(m), BLOCK, self._f_view, self._idx_views[message], dev.view(_flat(rows)),
                           0, m)
        return waited

    @property
    def ghosts(self) -> int:
        return sum(p[-1] for p in self.plan if p is not None)
