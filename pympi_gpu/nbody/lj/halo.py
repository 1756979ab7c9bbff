"""Ghost atoms and migration between bricks; collective over the Cartesian communicator.

``migrate``: atoms that left the brick go to the neighbour brick they entered,
one dimension after another (x, then y, then z), so that an atom crossing an
edge or a corner arrives in two or three hops.  Atoms move at most half the
skin between rebuilds, far less than a brick, so one hop per dimension is enough.

``borders``: in three stages (x, y, z), each rank sends the atoms within the
neighbour cutoff of its low face to the lower neighbour and those near its
high face to the upper one, shifted by the box edge across the periodic
boundary.  A stage sends the ghosts received in the earlier stages too
(forwarding), so that edge and corner ghosts arrive without diagonal messages:
LAMMPS's ``Comm::borders``.  Along a dimension with one brick, the brick's
neighbour is its own periodic image: ``forward`` and ``reverse`` copy those
rows in place instead of sending messages to themselves (as LAMMPS does).  The plan (which rows go where) is kept, and
between rebuilds ``forward`` sends only the new positions of the same rows:
``Comm::forward_comm``.

``forward`` posts each stage's messages without blocking and runs a piece of
the caller's work (the owned-owned forces) while they travel.

``reverse`` (with Newton's third law across bricks) is ``forward`` backwards:
the forces accumulated on the ghost rows go back to the rows they were copied
from, stage by stage in reverse order (z, y, x), each rank adding what it
receives into its owned rows or into ghost rows of an earlier stage, which the
next (earlier) stage sends on: LAMMPS's ``Comm::reverse_comm``.
"""

from __future__ import annotations

import time

import numpy as np

from pympi_gpu.nbody.lj.domain import Brick, owner_coords, wrap
from pympi_gpu.nbody.lj.kernels_cpu import add_rows, pack_rows
from pympi_gpu.run.phases import PhaseClock

__all__ = ["Halo"]

_TAG_MIGRATE = 0x4C00
_TAG_BORDER = 0x4C10
_TAG_FORWARD = 0x4C20
_TAG_REVERSE = 0x4C30


def _exchange_rows(comm, rows: np.ndarray, dest: int, source: int, tag: int, clock: PhaseClock) -> np.ndarray:
    """Send ``rows`` (2-D float64) to dest, receive rows from source (any count)."""
    n = np.array([rows.shape[0]], np.int64)
    m = np.empty(1, np.int64)
    comm.Sendrecv(n, dest, tag, m, source, tag)
    out = np.empty((int(m[0]), rows.shape[1]), np.float64)
    rows = np.ascontiguousarray(rows)
    comm.Sendrecv(rows, dest, tag + 1, out, source, tag + 1)
    clock.sent(n.nbytes + rows.nbytes, 2)
    return out


class Halo:
    """The ghost plan of one brick.

    Parameters
    ----------
    cart : periodic 3-D Cartesian communicator (from :func:`~pympi_gpu.nbody.lj.domain.make_cart`)
    brick : this rank's :class:`~pympi_gpu.nbody.lj.domain.Brick`
    cutneigh : halo thickness, ``rc + skin`` (sigma)
    """

    def __init__(self, cart, brick: Brick, cutneigh: float):
        self.cart = cart
        self.brick = brick
        self.cut = cutneigh
        # (lower, upper) neighbour ranks per dimension
        self.nbrs = [cart.Shift(d, 1) for d in range(3)]
        self.plan: list = []
        #: seconds in halo packing and waiting for halo/migration messages (reset by the caller)
        self.comm_time = 0.0
        #: the rank's communication and waiting time and traffic (the driver adds its collectives)
        self.clock = PhaseClock()

    def migrate(self, x: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Wrap positions into the box and send atoms to the bricks that own them.

        ``x`` ``(n, 3)`` positions, ``rows`` ``(n, k)`` what travels with them
        (velocities, forces, ids as float64).  Returns the new ``(x, rows)``.
        """
        t0 = time.perf_counter()
        b = self.brick
        x = wrap(x, b.box)
        for d in range(3):
            p = b.dims[d]
            if p == 1:
                continue
            c = owner_coords(x, b.box, b.dims)[:, d]
            down_c, up_c = (b.coords[d] - 1) % p, (b.coords[d] + 1) % p
            stay = c == b.coords[d]
            down = c == down_c
            up = (c == up_c) & ~down
            if not np.all(stay | down | up):
                raise RuntimeError("an atom moved more than one brick between neighbour-list rebuilds "
                                   "(the system is unstable: is dt too large?)")
            lower, upper = self.nbrs[d][0], self.nbrs[d][1]
            both = np.hstack([x, rows])
            from_up = _exchange_rows(self.cart, both[down], lower, upper, _TAG_MIGRATE + 4 * d, self.clock)
            from_down = _exchange_rows(self.cart, both[up], upper, lower, _TAG_MIGRATE + 4 * d + 2, self.clock)
            both = np.vstack([both[stay], from_up, from_down])
            x, rows = both[:, :3].copy(), both[:, 3:].copy()
        self.comm_time += time.perf_counter() - t0
        self.clock.add("communication", time.perf_counter() - t0)
        return np.ascontiguousarray(x), np.ascontiguousarray(rows)

    def borders(self, x: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Build the ghost plan for owned positions ``x`` and global ids ``ids``.

        Returns ``(pos, gid)``: owned rows then ghosts, positions and ids.
        """
        t0 = time.perf_counter()
        b = self.brick
        pos = np.column_stack([x, ids.astype(np.float64)])  # ids < 2^53 travel exactly as float64
        self.plan = []
        for d in range(3):
            n0 = pos.shape[0]
            cand = pos[:n0, d]
            lower, upper = self.nbrs[d]
            low = np.nonzero(cand < b.lo[d] + self.cut)[0]
            high = np.nonzero(cand >= b.hi[d] - self.cut)[0]
            s_low = np.zeros(4)
            s_high = np.zeros(4)
            if b.coords[d] == 0:
                s_low[d] = b.box
            if b.coords[d] == b.dims[d] - 1:
                s_high[d] = -b.box
            got = []
            for k, (idx, shift, dest, source) in enumerate(((low, s_low, lower, upper),
                                                            (high, s_high, upper, lower))):
                recv = _exchange_rows(self.cart, pos[idx] + shift, dest, source, _TAG_BORDER + 4 * d + 2 * k,
                                      self.clock)
                start = n0 + sum(g.shape[0] for g in got)
                self.plan.append((d, idx, shift[:3], dest, source, start, recv.shape[0]))
                got.append(recv)
            pos = np.vstack([pos, *got])
        self.comm_time += time.perf_counter() - t0
        self.clock.add("communication", time.perf_counter() - t0)
        return np.ascontiguousarray(pos[:, :3]), pos[:, 3].astype(np.int64)

    def forward(self, pos: np.ndarray, work=None) -> None:
        """Refresh the ghost rows of ``pos`` from their owners, stage by stage.

        ``work(stage)`` (stage 0, 1, 2) runs while that stage's messages are
        in flight.  Collective over the Cartesian communicator.
        """
        from mpi4py import MPI

        busy = waited = 0.0
        t0 = time.perf_counter()
        me = self.cart.Get_rank()
        for d in range(3):
            reqs = []
            keep = []
            for k, (dd, idx, shift, dest, source, start, count) in enumerate(self.plan[2 * d:2 * d + 2]):
                if dest == me and source == me:  # one brick along d: the periodic image is this brick
                    pack_rows(pos, idx, shift, pos[start:start + count])
                    continue
                buf = np.empty((idx.size, 3))
                pack_rows(pos, idx, shift, buf)
                keep.append(buf)
                tag = _TAG_FORWARD + 2 * d + k
                reqs.append(self.cart.Irecv(pos[start:start + count], source, tag))
                reqs.append(self.cart.Isend(buf, dest, tag))
                self.clock.sent(buf.nbytes)
            if work is not None:
                tw = time.perf_counter()
                work(d)
                busy += time.perf_counter() - tw
            tw = time.perf_counter()
            MPI.Request.Waitall(reqs)
            waited += time.perf_counter() - tw
        self.comm_time += time.perf_counter() - t0 - busy
        self.clock.add("waiting", waited)
        self.clock.add("communication", time.perf_counter() - t0 - busy - waited)

    def reverse(self, f: np.ndarray) -> None:
        """Add the forces on the ghost rows of ``f`` ``(n_all, 3)`` into the rows they came from.

        Stage by stage in reverse order; afterwards the owned rows hold the
        whole forces (the ghost rows are left as they were).  Collective over
        the Cartesian communicator.
        """
        from mpi4py import MPI

        t0 = time.perf_counter()
        waited = 0.0
        me = self.cart.Get_rank()
        for d in (2, 1, 0):
            reqs = []
            back = []
            for k, (dd, idx, shift, dest, source, start, count) in enumerate(self.plan[2 * d:2 * d + 2]):
                if dest == me and source == me:
                    back.append((idx, f[start:start + count]))
                    continue
                # the rows sent to dest come back from dest; those received from source go back to it
                tag = _TAG_REVERSE + 2 * d + k
                buf = np.empty((idx.size, 3))
                reqs.append(self.cart.Irecv(buf, dest, tag))
                reqs.append(self.cart.Isend(f[start:start + count], source, tag))
                self.clock.sent(count * 3 * f.itemsize)
                back.append((idx, buf))
            tw = time.perf_counter()
            MPI.Request.Waitall(reqs)
            waited += time.perf_counter() - tw
            for idx, buf in back:  # one message after the other: the two may share rows
                add_rows(f, idx, buf)
        self.comm_time += time.perf_counter() - t0
        self.clock.add("waiting", waited)
        self.clock.add("communication", time.perf_counter() - t0 - waited)

    @property
    def ghosts(self) -> int:
        return sum(p[-1] for p in self.plan)
