"""Moving source bodies between ranks so that every rank sees every body.

Each rank owns a contiguous block of bodies (:func:`pympi_gpu.mpi.decomposition.block_range`,
uneven splits allowed).  A rank's bodies travel packed in one flat buffer,
``[x | y | z | m]`` of ``4 * count`` numbers, so that one message carries a
block.

``ring``
    P - 1 steps: every rank sends the block in hand to its right neighbour and
    receives the next one from its left neighbour, with non-blocking calls into
    a second buffer, while it computes the pull of the block in hand.  Memory
    per rank: two blocks, ~8 N / P numbers.
``allgather``
    One ``Allgatherv`` of every block, then the pull of each in turn.  Memory
    per rank: 4 N numbers.  The simple variant, for comparison.

Transport (GPU backends only): ``device`` hands device buffers straight to
mpi4py (CUDA-aware MPI), synchronising the backend's stream before every MPI
call so that MPI never reads a buffer a kernel is still writing or vice
versa; ``host`` stages through pinned host buffers: a received block is kept
on the host to be forwarded and copied to the device for the kernel.
"""

from __future__ import annotations

import time

from pympi_gpu.mpi.decomposition import block_counts, block_starts
from pympi_gpu.run.phases import PhaseClock

__all__ = ["EXCHANGES", "Exchange", "make_exchange"]

EXCHANGES = ("ring", "allgather")
_TAG = 0x6E62  # "nb"


def _views(buf, count: int):
    """The x, y, z, m views of a packed block of ``count`` bodies."""
    return buf[0:count], buf[count:2 * count], buf[2 * count:3 * count], buf[3 * count:4 * count]


class Exchange:
    """Visits every block of sources for the local targets; see the module docstring.

    Parameters
    ----------
    comm : mpi4py communicator the bodies are spread over
    backend : the backend object holding the bodies
    n : int, total number of bodies
    kind : {"ring", "allgather"}
    transport : {"device", "host"}; "host" for host backends
    """

    def __init__(self, comm, backend, n: int, kind: str, transport: str):
        if kind not in EXCHANGES:
            raise ValueError(f"unknown exchange {kind!r} (choose from {', '.join(EXCHANGES)})")
        if transport not in ("device", "host"):
            raise ValueError(f"transport must be 'device' or 'host', got {transport!r}")
        self.backend = backend
        self.kind = kind
        self.transport = transport
        self.size, self.rank = comm.Get_size(), comm.Get_rank()
        self.counts = block_counts(n, self.size)
        self.starts = block_starts(n, self.size)
        self.count = self.counts[self.rank]
        self.staging = backend.device and transport == "host"
        maxc = max(self.counts)
        self.home = backend.zeros(4 * max(self.count, 1))
        if kind == "ring":
            self.bufs = [backend.zeros(4 * maxc), backend.zeros(4 * maxc)]
            if self.staging:
                self.hbufs = [backend.pinned(4 * maxc), backend.pinned(4 * maxc)]
        else:
            self.full = backend.zeros(4 * n)
            if self.staging:
                self.hhome = backend.pinned(4 * max(self.count, 1))
                self.hfull = backend.pinned(4 * n)
        #: seconds spent waiting for MPI, summed over calls (reset by the caller)
        self.comm_time = 0.0
        #: communication (posting, staging copies), waiting (for a block not yet arrived) and traffic
        self.clock = PhaseClock()

    def set_masses(self, mass) -> None:
        """Store the (constant) masses of the local bodies in the home block."""
        c = self.count
        self.backend.copy_into(self.home[3 * c:4 * c], mass)

    def _pack(self, x, y, z) -> None:
        c = self.count
        for k, a in enumerate((x, y, z)):
            self.backend.copy_into(self.home[k * c:(k + 1) * c], a)

    def visit(self, comm, pos, fn) -> None:
        """Call ``fn(sx, sy, sz, sm)`` once for every rank's block of sources.

        Collective over comm.  ``pos`` are the local x, y, z arrays; the masses
        come from :meth:`set_masses`.  ``fn`` may be asynchronous on the
        backend's stream; the stream is synchronised on return.
        """
        self._pack(*pos)
        if self.kind == "ring":
            self._ring(comm, fn)
        else:
            self._allgather(comm, fn)
        self.backend.sync()

    def _wait(self, requests) -> None:
        from mpi4py import MPI

        t0 = time.perf_counter()
        MPI.Request.Waitall(requests)
        dt = time.perf_counter() - t0
        self.comm_time += dt
        self.clock.add("waiting", dt)

    def _ring(self, comm, fn) -> None:
        b, size, rank = self.backend, self.size, self.rank
        right, left = (rank + 1) % size, (rank - 1) % size
        cur, nxt = self.bufs
        c = self.count
        b.copy_into(cur[:4 * c], self.home[:4 * c])
        if self.staging:
            hcur, hnxt = self.hbufs
            b.d2h(cur[:4 * c], hcur[:4 * c])
        for s in range(size):
            c = self.counts[(rank - s) % size]
            requests = []
            if s < size - 1:
                cin = self.counts[(rank - s - 1) % size]
                b.sync()  # no MPI call while the stream may touch its buffers (the kernels' time: compute)
                tc = time.perf_counter()
                if self.staging:
                    send, recv = hcur[:4 * c], hnxt[:4 * cin]
                else:
                    send, recv = b.mpi_buffer(cur[:4 * c]), b.mpi_buffer(nxt[:4 * cin])
                # mpi4py infers the datatype from the buffer (its typecode or __cuda_array_interface__)
                requests = [comm.Irecv(recv, source=left, tag=_TAG), comm.Isend(send, dest=right, tag=_TAG)]
                self.clock.add("communication", time.perf_counter() - tc)
                self.clock.sent(send.nbytes)
            fn(*_views(cur, c))  # the block in hand, while the next one travels
            if requests:
                self._wait(requests)
                if self.staging:
                    with self.clock.phase("communication"):
                        b.h2d(hnxt[:4 * cin], nxt[:4 * cin])
                    hcur, hnxt = hnxt, hcur
                cur, nxt = nxt, cur

    def _allgather(self, comm, fn) -> None:
        b = self.backend
        counts4 = [4 * c for c in self.counts]
        displs4 = [4 * s for s in self.starts]
        c = self.count
        with self.clock.phase("waiting"):  # the imbalance, apart from the collective itself
            comm.Barrier()
        t0 = time.perf_counter()
        if self.staging:
            b.d2h(self.home[:4 * c], self.hhome[:4 * c])
            b.sync()
            comm.Allgatherv(self.hhome[:4 * c], [self.hfull, (counts4, displs4)])
            b.h2d(self.hfull, self.full)
        else:
            b.sync()
            comm.Allgatherv(b.mpi_buffer(self.home[:4 * c]), [b.mpi_buffer(self.full), (counts4, displs4)])
        self.comm_time += time.perf_counter() - t0
        self.clock.add("communication", time.perf_counter() - t0)
        self.clock.sent(4 * c * b.dtype.itemsize)
        for r in range(self.size):
            lo = 4 * self.starts[r]
            fn(*_views(self.full[lo:lo + 4 * self.counts[r]], self.counts[r]))


def make_exchange(comm, backend, n: int, kind: str, transport: str) -> Exchange:
    """An :class:`Exchange`; collective over comm only in that all ranks must agree."""
    return Exchange(comm, backend, n, kind, transport)
