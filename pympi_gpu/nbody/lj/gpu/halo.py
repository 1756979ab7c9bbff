"""Migration and ghosts on the device; collective over the Cartesian communicator.

The device twin of :class:`~pympi_gpu.nbody.lj.cpu.halo.Halo` for the GPU path,
written against the array namespace of a
:class:`~pympi_gpu.device.buffers.DeviceArrays` (CuPy on a GPU, NumPy under
the simulator): the same stages, hops and order of rows as the CPU's, so the
two paths hold the same atoms in the same order.  Which atoms leave the brick
and which are ghosts is found by comparisons on the device and gathered by
compaction (CuPy's boolean indexing: a scan behind it); only the counts of
rows (one integer per message) and, with ``transport="host"``, the packed
messages themselves come to the host.  With ``transport="device"`` the device
arrays go to MPI, the stream synchronised first.  Between rebuilds
:meth:`DeviceHalo.forward` costs one launch per stage that travels (both of
its messages packed by :func:`~pympi_gpu.nbody.lj.gpu.kernels.gather_rows`)
and one wait for the device, and one launch for the brick's own periodic
images of all stages between two that travel.

With half lists (Newton's third law across bricks) :meth:`DeviceHalo.reverse`
sends the ghosts' forces back to their owners, as the CPU's ``Halo.reverse``.
"""

from __future__ import annotations

import time

import numpy as np

from typing import NamedTuple

from pympi_gpu.nbody.lj.domain import TAG_BORDER, TAG_FORWARD, TAG_MIGRATE, TAG_REVERSE, Brick
from pympi_gpu.nbody.lj.gpu.kernels import BLOCK, add_rows, chain_rows, gather_rows, grid
from pympi_gpu.run.phases import PhaseClock

__all__ = ["DeviceHalo", "fold"]


def _flat(a):
    """A C-contiguous array as one flat view of its memory (never a copy: the kernels write through it)."""
    if not a.flags.c_contiguous:
        raise ValueError("a kernel's flat view needs a C-contiguous array")
    return a.reshape(-1)


class _Local(NamedTuple):
    """Ghost rows ``[start, start + count)`` of a brick's own periodic images: ``pos[row] = pos[idx] + shift``."""

    stages: tuple[int, ...]
    start: int
    count: int
    idx: object     # kernel views: the rows copied, and the shifts (flat)
    shift: object
    held: tuple     # the device arrays behind the views


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
    held: tuple


def fold(dev, x, box: float):
    """Positions folded into ``[0, box)``, as :func:`~pympi_gpu.nbody.lj.domain.wrap` folds them, on ``dev``."""
    xp = dev.xp
    with dev.ops(6, syncs=1):  # the boolean assignment reads its count back
        w = x - box * xp.floor(x / box)
        w[w >= box] = 0.0  # -tiny + box rounds to box
    return w


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
    """

    def __init__(self, cart, brick: Brick, cutneigh: float, dev, transport: str, half_shell: bool = False):
        if transport not in ("device", "host"):
            raise ValueError(f"transport must be 'device' or 'host', got {transport!r}")
        self.cart = cart
        self.brick = brick
        self.cut = cutneigh
        self.dev = dev
        self.transport = transport
        self.half_shell = bool(half_shell)
        self.me = cart.Get_rank()
        self.nbrs = [cart.Shift(d, 1) for d in range(3)]
        #: per stage, do its messages go to other ranks (more than one brick along its dimension)?
        self.travels = [self.nbrs[d] != (self.me, self.me) for d in range(3)]
        #: per stage and direction: (d, idx, shift, dest, source, start, count); idx on the device
        self.plan: list = []
        #: what :meth:`forward` launches, per rebuild (:meth:`_stage`): :class:`_Local` and :class:`_Travel`
        self.segments: list = []
        self._pos = self._pos_view = None
        self._f = self._f_view = None
        self._idx_views: list | None = None
        self._pinned: dict[int, np.ndarray] = {}
        #: page-locked buffers allocated so far (the host transport; grown, never one per rebuild)
        self.pinned_allocations = 0
        #: seconds in halo packing and waiting for halo/migration messages (reset by the caller)
        self.comm_time = 0.0
        #: the rank's communication and waiting time and traffic (the driver adds its collectives)
        self.clock = PhaseClock()

    # -- one message of any length ----------------------------------------
    def _exchange(self, rows, dest: int, source: int, tag: int):
        """Send device ``rows`` (2-D float64) to dest, receive rows from source (any count), on the device."""
        xp, dev = self.dev.xp, self.dev
        if dest == self.me and source == self.me:  # one brick along d: the periodic image is this brick
            with dev.ops(1):
                return rows.copy()
        n = np.array([rows.shape[0]], np.int64)
        m = np.empty(1, np.int64)
        self.cart.Sendrecv(n, dest, tag, m, source, tag)
        out = xp.empty((int(m[0]), rows.shape[1]), np.float64)
        rows = xp.ascontiguousarray(rows)
        if self.transport == "device":
            dev.sync()  # MPI reads what the stream wrote
            self.cart.Sendrecv(dev.mpi_buffer(rows), dest, tag + 1, dev.mpi_buffer(out), source, tag + 1)
        else:
            sent = dev.to_host(rows, "message")
            got = np.empty(out.shape, np.float64)
            self.cart.Sendrecv(sent, dest, tag + 1, got, source, tag + 1)
            dev.into_device(got, out)
        self.clock.sent(n.nbytes + rows.nbytes, 2)
        return out

    def _owner(self, x, d: int):
        """Grid coordinate along d of the brick that owns each position (``domain.owner_coords``'s rule)."""
        xp, b = self.dev.xp, self.brick
        p = b.dims[d]
        with self.dev.ops(3):
            return xp.minimum((x[:, d] * (p / b.box)).astype(np.int64), p - 1)

    def migrate(self, x, rows):
        """Fold positions into the box and send atoms to the bricks that own them; collective.

        ``x`` ``(n, 3)`` device positions, ``rows`` ``(n, k)`` what travels with
        them.  Returns the new ``(x, rows)`` (device arrays, owned atoms only).
        """
        xp, dev = self.dev.xp, self.dev
        t0 = time.perf_counter()
        b = self.brick
        x = fold(dev, x, b.box)
        for d in range(3):
            p = b.dims[d]
            if p == 1:
                continue
            c = self._owner(x, d)
            down_c, up_c = (b.coords[d] - 1) % p, (b.coords[d] + 1) % p
            with dev.ops(8):
                stay = c == b.coords[d]
                down = c == down_c
                up = (c == up_c) & ~down
                known = xp.all(stay | down | up)
            if not dev.scalar(known):
                raise RuntimeError("an atom moved more than one brick between neighbour-list rebuilds "
                                   "(the system is unstable: is dt too large?)")
            lower, upper = self.nbrs[d]
            with dev.ops(3, syncs=2):  # a compaction reads its count back
                both = xp.concatenate([x, rows], axis=1)
                leaving = both[down], both[up]
            from_up = self._exchange(leaving[0], lower, upper, TAG_MIGRATE + 4 * d)
            from_down = self._exchange(leaving[1], upper, lower, TAG_MIGRATE + 4 * d + 2)
            with dev.ops(4, syncs=1):
                both = xp.concatenate([both[stay], from_up, from_down])
                x, rows = both[:, :3].copy(), both[:, 3:].copy()
        self.comm_time += time.perf_counter() - t0
        self.clock.add("communication", time.perf_counter() - t0)
        return x, rows

    def borders(self, x, ids):
        """Build the ghost plan for owned device positions ``x`` and global ids ``ids``; collective.

        Returns ``(pos, gid)``: owned rows then ghosts, positions and ids, on the device.
        """
        dev, xp = self.dev, self.dev.xp
        t0 = time.perf_counter()
        b = self.brick
        with dev.ops(2):
            pos = xp.concatenate([x, ids[:, None].astype(np.float64)], axis=1)  # ids < 2^53 travel exactly
        self.plan = []
        up0 = x.shape[0] if self.half_shell else 0  # the first row a stage may send up
        for d in range(3):
            n0 = pos.shape[0]
            lower, upper = self.nbrs[d]
            with dev.ops(4 + (up0 > 0), syncs=2):  # nonzero reads its count back
                low = xp.nonzero(pos[:, d] < b.lo[d] + self.cut)[0]
                high = xp.nonzero(pos[up0:, d] >= b.hi[d] - self.cut)[0]
                if up0:
                    high += up0
            s_low, s_high = [0.0] * 4, [0.0] * 4
            if b.coords[d] == 0:
                s_low[d] = b.box
            if b.coords[d] == b.dims[d] - 1:
                s_high[d] = -b.box
            got = []
            for k, (idx, shift, dest, source) in enumerate(((low, s_low, lower, upper),
                                                            (high, s_high, upper, lower))):
                shift = dev.from_host(np.array(shift))
                with dev.ops(2):
                    rows = pos[idx] + shift
                recv = self._exchange(rows, dest, source, TAG_BORDER + 4 * d + 2 * k)
                start = n0 + sum(g.shape[0] for g in got)
                self.plan.append((d, idx, shift[:3], dest, source, start, recv.shape[0]))
                got.append(recv)
            with dev.ops(1):
                pos = xp.concatenate([pos, *got])
        self._stage()
        self.comm_time += time.perf_counter() - t0
        self.clock.add("communication", time.perf_counter() - t0)
        with dev.ops(2):
            return pos[:, :3].copy(), pos[:, 3].astype(np.int64)

    def _stage(self) -> None:
        """What :meth:`forward` launches, from the plan: :attr:`segments`, made once per rebuild.

        A stage whose messages travel (more than one brick along its dimension) is a
        :class:`_Travel`: both directions' rows gathered and shifted into one send buffer by one
        launch.  The stages between two that travel (a brick's own periodic images) are one
        :class:`_Local`: every ghost row they make, gathered in one launch from the row it is
        finally a copy of, with the shifts of the stages it passed through summed.  Each stage
        shifts its own dimension only, so the sum adds, coordinate by coordinate, the one shift the
        stages would have added one after the other: the same rows, bit for bit.
        """
        self.segments = []
        self._pos = self._pos_view = self._f = self._f_view = None  # the last rebuild's arrays: let them go
        self._idx_views = None  # made by the first reverse after the rebuild (half lists only)
        local: list = []
        for d in range(3):
            if not self.travels[d]:
                local.append(d)
                continue
            if local:
                self.segments.append(self._local(local))
                local = []
            self.segments.append(self._travel(d))
        if local:
            self.segments.append(self._local(local))

    def _local(self, stages: list[int]) -> _Local:
        """The ghost rows of consecutive self-image ``stages``, each resolved to the row it copies (:func:`chain_rows`)."""
        dev, xp, view = self.dev, self.dev.xp, self.dev.view
        messages = [self.plan[2 * d + k] for d in stages for k in (0, 1)]
        first, total = messages[0][5], sum(m[6] for m in messages)
        src, shift = xp.empty(total, np.int64), xp.empty((total, 3), np.float64)  # (no launches)
        src_view, shift_view = view(src), view(_flat(shift))
        at = 0
        for _, idx, step, _, _, _, count in messages:
            if count:
                dev.launch(chain_rows, grid(count), BLOCK, view(idx), view(step), first, src_view, shift_view, at,
                           count)
            at += count
        return _Local(tuple(stages), first, total, src_view, shift_view, (src, shift))

    def _travel(self, d: int) -> _Travel:
        """Stage ``d``'s two messages: their rows and shifts in one send buffer, its pinned twins if staged."""
        dev, xp = self.dev, self.dev.xp
        (_, low, s_low, down, up, start, c_low), (_, high, s_high, _, _, _, c_high) = self.plan[2 * d:2 * d + 2]
        n_low, m = int(low.shape[0]), int(low.shape[0] + high.shape[0])
        with dev.ops(3):
            idx = xp.concatenate([low, high])
            shift = xp.empty((m, 3), np.float64)
            shift[:n_low] = s_low
            shift[n_low:] = s_high
            buf = xp.empty((m, 3), np.float64)  # (no launch)
        host = ((self._pinned_rows(2 * d, m), self._pinned_rows(2 * d + 1, c_low + c_high))
                if self.transport == "host" else None)
        view = self.dev.view
        return _Travel(d, ((down, 0, n_low), (up, n_low, m - n_low)), ((up, start, c_low), (down, start + c_low, c_high)),
                       m, view(idx), view(_flat(shift)), buf, view(_flat(buf)), host, (idx, shift))

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

    def forward(self, pos, work=None) -> None:
        """Refresh the ghost rows of device ``pos`` from their owners, stage by stage; collective.

        ``work(stage)`` (stage 0, 1, 2) is launched while that stage's
        messages are in flight (on the stream: it runs as they travel).
        Per stage that travels: one launch packs both messages, one wait
        (the copy to pinned memory, or the sync before MPI reads device
        memory), and with the host transport one copy of both received
        messages back; the stages of a brick's own periodic images between
        two that travel: one launch.  Nothing waits for ``work``'s kernels.
        """
        from mpi4py import MPI

        dev, clock = self.dev, self.clock
        if pos is not self._pos:  # a kernel's view of pos, made once per array (the array held: ids stay unique)
            self._pos, self._pos_view = pos, dev.view(_flat(pos))
        t0 = time.perf_counter()
        busy = waited = 0.0
        for seg in self.segments:
            if isinstance(seg, _Local):
                if seg.count:
                    dev.launch(gather_rows, grid(seg.count), BLOCK, self._pos_view, seg.idx, seg.shift,
                               self._pos_view, seg.start, seg.count)
                tw = time.perf_counter()
                for d in seg.stages:
                    if work is not None:
                        work(d)
                busy += time.perf_counter() - tw
                continue
            reqs, unstage = self._post(pos, seg)
            tw = time.perf_counter()
            if work is not None:
                work(seg.d)  # launched on the stream: runs while the messages travel
            busy += time.perf_counter() - tw
            tw = time.perf_counter()
            MPI.Request.Waitall(reqs)
            waited += time.perf_counter() - tw
            if unstage is not None:
                dev.into_device(*unstage)
        self.comm_time += time.perf_counter() - t0 - busy
        clock.add("waiting", waited)
        clock.add("communication", time.perf_counter() - t0 - busy - waited)

    def _post(self, pos, seg: _Travel) -> tuple[list, tuple | None]:
        """Pack stage ``seg``'s messages and post them; the requests, and what to copy in once they are done."""
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
        return sum(p[-1] for p in self.plan)
