"""Migration and ghosts on the device; collective over the Cartesian communicator.

The device twin of :class:`~pympi_gpu.nbody.lj.halo.Halo` for the GPU path,
written against the array namespace of a
:class:`~pympi_gpu.device.buffers.DeviceArrays` (CuPy on a GPU, NumPy under
the simulator): the same stages, hops and order of rows as the CPU's, so the
two paths hold the same atoms in the same order.  Which atoms leave the brick
and which are ghosts is found by comparisons on the device and gathered by
compaction (CuPy's boolean indexing: a scan behind it); only the counts of
rows (one integer per message) and, with ``transport="host"``, the packed
messages themselves come to the host.  With ``transport="device"`` the device
arrays go to MPI, the stream synchronised first.

With half lists (Newton's third law across bricks) :meth:`DeviceHalo.reverse`
sends the ghosts' forces back to their owners, as the CPU's ``Halo.reverse``.
"""

from __future__ import annotations

import time

import numpy as np

from pympi_gpu.nbody.lj.domain import Brick
from pympi_gpu.nbody.lj.halo import _TAG_BORDER, _TAG_FORWARD, _TAG_MIGRATE, _TAG_REVERSE
from pympi_gpu.run.phases import PhaseClock

__all__ = ["DeviceHalo", "fold"]


def fold(xp, x, box: float):
    """Positions folded into ``[0, box)``, as :func:`~pympi_gpu.nbody.lj.domain.wrap` folds them, in ``xp``."""
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
    """

    def __init__(self, cart, brick: Brick, cutneigh: float, dev, transport: str):
        if transport not in ("device", "host"):
            raise ValueError(f"transport must be 'device' or 'host', got {transport!r}")
        self.cart = cart
        self.brick = brick
        self.cut = cutneigh
        self.dev = dev
        self.transport = transport
        self.me = cart.Get_rank()
        self.nbrs = [cart.Shift(d, 1) for d in range(3)]
        #: per stage and direction: (d, idx, shift, dest, source, start, count); idx on the device
        self.plan: list = []
        self._staging: list = []
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
        return xp.minimum((x[:, d] * (p / b.box)).astype(np.int64), p - 1)

    def migrate(self, x, rows):
        """Fold positions into the box and send atoms to the bricks that own them; collective.

        ``x`` ``(n, 3)`` device positions, ``rows`` ``(n, k)`` what travels with
        them.  Returns the new ``(x, rows)`` (device arrays, owned atoms only).
        """
        xp, dev = self.dev.xp, self.dev
        t0 = time.perf_counter()
        b = self.brick
        x = fold(xp, x, b.box)
        for d in range(3):
            p = b.dims[d]
            if p == 1:
                continue
            c = self._owner(x, d)
            down_c, up_c = (b.coords[d] - 1) % p, (b.coords[d] + 1) % p
            stay = c == b.coords[d]
            down = c == down_c
            up = (c == up_c) & ~down
            if not dev.scalar(xp.all(stay | down | up)):
                raise RuntimeError("an atom moved more than one brick between neighbour-list rebuilds "
                                   "(the system is unstable: is dt too large?)")
            lower, upper = self.nbrs[d]
            both = xp.concatenate([x, rows], axis=1)
            from_up = self._exchange(both[down], lower, upper, _TAG_MIGRATE + 4 * d)
            from_down = self._exchange(both[up], upper, lower, _TAG_MIGRATE + 4 * d + 2)
            both = xp.concatenate([both[stay], from_up, from_down])
            x, rows = xp.ascontiguousarray(both[:, :3]), xp.ascontiguousarray(both[:, 3:])
        self.comm_time += time.perf_counter() - t0
        self.clock.add("communication", time.perf_counter() - t0)
        return x, rows

    def borders(self, x, ids):
        """Build the ghost plan for owned device positions ``x`` and global ids ``ids``; collective.

        Returns ``(pos, gid)``: owned rows then ghosts, positions and ids, on the device.
        """
        xp = self.dev.xp
        t0 = time.perf_counter()
        b = self.brick
        pos = xp.concatenate([x, ids[:, None].astype(np.float64)], axis=1)  # ids < 2^53 travel exactly
        self.plan = []
        for d in range(3):
            n0 = pos.shape[0]
            lower, upper = self.nbrs[d]
            low = xp.nonzero(pos[:, d] < b.lo[d] + self.cut)[0]
            high = xp.nonzero(pos[:, d] >= b.hi[d] - self.cut)[0]
            s_low, s_high = [0.0] * 4, [0.0] * 4
            if b.coords[d] == 0:
                s_low[d] = b.box
            if b.coords[d] == b.dims[d] - 1:
                s_high[d] = -b.box
            got = []
            for k, (idx, shift, dest, source) in enumerate(((low, s_low, lower, upper),
                                                            (high, s_high, upper, lower))):
                recv = self._exchange(pos[idx] + xp.asarray(shift), dest, source, _TAG_BORDER + 4 * d + 2 * k)
                start = n0 + sum(g.shape[0] for g in got)
                self.plan.append((d, idx, xp.asarray(shift[:3]), dest, source, start, recv.shape[0]))
                got.append(recv)
            pos = xp.concatenate([pos, *got])
        self._stage()
        self.comm_time += time.perf_counter() - t0
        self.clock.add("communication", time.perf_counter() - t0)
        return xp.ascontiguousarray(pos[:, :3]), pos[:, 3].astype(np.int64)

    def _stage(self) -> None:
        """The send buffers of the plan (device), and pinned host buffers for the host transport.

        The pinned buffers are views of page-locked arrays kept from one rebuild to the next and
        replaced only by larger ones (:meth:`_pinned_rows`): CuPy's pinned-memory pool keeps every
        block it ever handed out for reuse at the same size, so new buffers at every rebuild, whose
        sizes change with the atoms near each face, would grow the process's page-locked memory
        for the whole run.
        """
        xp = self.dev.xp
        self._staging = []
        for slot, (_, idx, _, dest, source, _, count) in enumerate(self.plan):
            if dest == self.me and source == self.me:
                self._staging.append(None)
                continue
            buf = xp.empty((idx.shape[0], 3), np.float64)
            host = ((self._pinned_rows(2 * slot, idx.shape[0]), self._pinned_rows(2 * slot + 1, count))
                    if self.transport == "host" else None)
            self._staging.append((buf, host))

    def _pinned_rows(self, key: int, rows: int) -> np.ndarray:
        """``(rows, 3)`` float64 of pinned buffer ``key``, grown (never shrunk) with a quarter to spare."""
        held = self._pinned.get(key)
        if held is None or held.shape[0] < rows:
            held = self._pinned[key] = self.dev.pinned((rows + rows // 4 + 16, 3))
            self.pinned_allocations += 1
        return held[:rows]

    def forward(self, pos, work=None) -> None:
        """Refresh the ghost rows of device ``pos`` from their owners, stage by stage; collective.

        ``work(stage)`` (stage 0, 1, 2) is launched while that stage's
        messages are in flight (on the stream: it runs as they travel).
        """
        from mpi4py import MPI

        dev, xp = self.dev, self.dev.xp
        clock = self.clock
        t0 = time.perf_counter()
        busy = waited = 0.0
        for d in range(3):
            reqs, unstage = [], []
            for k in (0, 1):
                _, idx, shift, dest, source, start, count = self.plan[2 * d + k]
                n = idx.shape[0]
                staged = self._staging[2 * d + k]
                if staged is None:  # the brick's own periodic image: rows copied in place
                    if n:
                        rows = pos[start:start + count]
                        xp.take(pos, idx, axis=0, out=rows)  # idx < start: the rows read are not written
                        rows += shift
                    continue
                buf, host = staged
                if n:  # packed on the device: a gather and a shift
                    xp.take(pos, idx, axis=0, out=buf)
                    buf += shift
                tag = _TAG_FORWARD + 2 * d + k
                if self.transport == "device":
                    dev.sync()  # MPI reads what the kernel wrote
                    reqs.append(self.cart.Irecv(dev.mpi_buffer(pos[start:start + count]), source, tag))
                    reqs.append(self.cart.Isend(dev.mpi_buffer(buf), dest, tag))
                else:
                    hsend, hrecv = host
                    if n:
                        dev.to_host(buf, "message", out=hsend)  # waits for the stream: so does the next line
                    else:  # the last step's copy out of hrecv is done before MPI writes into it again
                        dev.sync()
                    reqs.append(self.cart.Irecv(hrecv, source, tag))
                    reqs.append(self.cart.Isend(hsend, dest, tag))
                    unstage.append((hrecv, start, count))
                clock.sent(n * 3 * 8)
            tw = time.perf_counter()
            if work is not None:
                work(d)  # launched on the stream: runs while the messages travel
            busy += time.perf_counter() - tw
            tw = time.perf_counter()
            MPI.Request.Waitall(reqs)
            waited += time.perf_counter() - tw
            for hrecv, start, count in unstage:
                dev.into_device(hrecv, pos[start:start + count])
        tw = time.perf_counter()
        dev.sync()  # the kernels launched by work(): compute
        busy += time.perf_counter() - tw
        self.comm_time += time.perf_counter() - t0 - busy
        clock.add("waiting", waited)
        clock.add("communication", time.perf_counter() - t0 - busy - waited)

    def reverse(self, f) -> None:
        """Add the forces on the ghost rows of device ``f`` ``(n_all, 3)`` into the rows they came from.

        Stage by stage in reverse order, as the CPU's ``Halo.reverse`` (each
        message's rows are distinct, so a gathered ``+=`` adds each once).
        Collective over the Cartesian communicator.
        """
        from mpi4py import MPI

        dev, xp = self.dev, self.dev.xp
        t0 = time.perf_counter()
        waited = 0.0
        for d in (2, 1, 0):
            reqs, back = [], []
            for k in (0, 1):
                _, idx, _, dest, source, start, count = self.plan[2 * d + k]
                if self._staging[2 * d + k] is None:  # the brick's own periodic image
                    back.append((idx, f[start:start + count], None))
                    continue
                # the rows sent to dest come back from dest; those received from source go back to it
                tag = _TAG_REVERSE + 2 * d + k
                n = idx.shape[0]
                if self.transport == "device":
                    buf = xp.empty((n, 3), np.float64)
                    dev.sync()  # MPI reads the forces the kernels wrote
                    reqs.append(self.cart.Irecv(dev.mpi_buffer(buf), dest, tag))
                    reqs.append(self.cart.Isend(dev.mpi_buffer(f[start:start + count]), source, tag))
                    back.append((idx, buf, None))
                else:
                    sent = dev.to_host(f[start:start + count], "message") if count else np.empty((0, 3))
                    got = np.empty((n, 3), np.float64)
                    reqs.append(self.cart.Irecv(got, dest, tag))
                    reqs.append(self.cart.Isend(sent, source, tag))
                    back.append((idx, got, sent))
                self.clock.sent(count * 3 * 8)
            tw = time.perf_counter()
            MPI.Request.Waitall(reqs)
            waited += time.perf_counter() - tw
            for idx, rows, _ in back:  # one message after the other: the two may share rows
                if idx.shape[0]:
                    f[idx] += rows if isinstance(rows, xp.ndarray) else dev.from_host(rows)
        self.comm_time += time.perf_counter() - t0
        self.clock.add("waiting", waited)
        self.clock.add("communication", time.perf_counter() - t0 - waited)

    @property
    def ghosts(self) -> int:
        return sum(p[-1] for p in self.plan)
