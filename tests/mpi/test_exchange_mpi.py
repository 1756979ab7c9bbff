"""``pympi_gpu.nbody.gravity.exchange`` directly: run under ``mpiexec -n 2`` and ``-n 3`` with ``--with-mpi``.

Every rank records what :meth:`Exchange.visit` hands its callback and checks it
against the global bodies built on every rank here: each target rank sees every
rank's block exactly once, in the documented order (ring: its own block, then
its left neighbour's, then the one before that; allgather: rank 0's, 1's, ...),
with that block's positions and masses bit for bit, over uneven splits, in fp64
and fp32, and again after the positions change.  On the host backend (NumPy);
the tests marked ``cudasim`` repeat it on the GPU backend under numba's CUDA
simulator with both transports (``tests/cli/test_mpi_suite.py`` runs them with
``NUMBA_ENABLE_CUDASIM=1``).  The ring's memory promise (two blocks a rank, not
the whole system) is measured with ``tracemalloc``.
"""

import tracemalloc

import numpy as np
import pytest
from mpi4py import MPI

from pympi_gpu.mpi.decomposition import block_counts, block_starts
from pympi_gpu.nbody.gravity.exchange import EXCHANGES, Exchange

pytestmark = pytest.mark.mpi(min_size=2)


def _bodies(n, dtype, shift=0.0):
    """Global x, y, z, m: every number distinct, so a wrong block or a wrong slot shows."""
    i = np.arange(n, dtype=np.float64)
    return [(i + 0.25 + shift).astype(dtype), (-i - 0.5).astype(dtype), (2 * i + 0.125).astype(dtype),
            (1.0 + i / 64).astype(dtype)]


def _expected_order(kind, rank, size):
    if kind == "ring":  # the block in hand goes right, the next one comes from the left
        return [(rank - s) % size for s in range(size)]
    return list(range(size))


def _visits(comm, backend, n, kind, transport, dtype, steps=2):
    """Run ``steps`` visits (positions moved between them); what each visit's callback saw, on the host."""
    size, rank = comm.Get_size(), comm.Get_rank()
    start, count = block_starts(n, size)[rank], block_counts(n, size)[rank]
    ex = Exchange(comm, backend, n, kind, transport)
    masses = _bodies(n, dtype)[3][start:start + count]
    ex.set_masses(backend.from_host(masses))
    seen = []
    for step in range(steps):
        x, y, z, _ = (a[start:start + count] for a in _bodies(n, dtype, shift=100.0 * step))
        calls = []
        ex.visit(comm, tuple(backend.from_host(a) for a in (x, y, z)),
                 lambda *arrays: calls.append([np.array(backend.to_host(a)) for a in arrays]))
        seen.append(calls)
    return seen


def _check(seen, n, kind, rank, size, dtype):
    counts, starts = block_counts(n, size), block_starts(n, size)
    order = _expected_order(kind, rank, size)
    for step, calls in enumerate(seen):
        assert len(calls) == size, f"step {step}: {len(calls)} blocks visited for {size} ranks"
        whole = _bodies(n, dtype, shift=100.0 * step)
        got_blocks = []
        for arrays in calls:
            # which rank's block is it?  identified by its first x, then compared whole
            c = arrays[0].shape[0]
            assert all(a.shape == (c,) and a.dtype == dtype for a in arrays)
            src = next(r for r in range(size) if counts[r] == c
                       and (c == 0 or arrays[0][0] == whole[0][starts[r]]))
            got_blocks.append(src)
            lo = starts[src]
            for a, ref in zip(arrays, whole):
                assert a.tobytes() == ref[lo:lo + c].tobytes(), f"step {step}: block of rank {src}"
        assert got_blocks == order, f"step {step}: blocks visited in the order {got_blocks}, not {order}"


def _host_backend(precision):
    from pympi_gpu.device.device import Device
    from pympi_gpu.nbody.gravity.backends import make_backend

    return make_backend(Device(backend="numpy"), precision)


@pytest.mark.parametrize("kind", EXCHANGES)
@pytest.mark.parametrize("n", [7, 12, 101])  # uneven over 2 and 3 ranks (7 = 4 + 3 = 3 + 2 + 2); 12 even
@pytest.mark.parametrize("precision", ["fp64", "fp32"])
def test_every_target_visits_every_source_block_once_in_order(agree, kind, n, precision):
    comm = MPI.COMM_WORLD
    backend = _host_backend(precision)
    seen = _visits(comm, backend, n, kind, "host", backend.dtype)
    agree(comm, lambda: _check(seen, n, kind, comm.Get_rank(), comm.Get_size(), backend.dtype))


@pytest.mark.parametrize("kind", EXCHANGES)
def test_a_dup_and_its_own_order(agree, kind):
    """Over a Dup of the world with the ranks reversed (Split with a key): the order follows the new ranks."""
    world = MPI.COMM_WORLD
    comm = world.Split(0, world.Get_size() - 1 - world.Get_rank())
    try:
        backend = _host_backend("fp64")
        seen = _visits(comm, backend, 11, kind, "host", backend.dtype, steps=1)
        agree(comm, lambda: _check(seen, 11, kind, comm.Get_rank(), comm.Get_size(), backend.dtype))
    finally:
        comm.Free()


def test_bad_kind_and_transport_refused():
    backend = _host_backend("fp64")
    with pytest.raises(ValueError, match="unknown exchange 'star'"):
        Exchange(MPI.COMM_WORLD, backend, 10, "star", "host")
    with pytest.raises(ValueError, match="transport must be 'device' or 'host'"):
        Exchange(MPI.COMM_WORLD, backend, 10, "ring", "pigeon")


def _peak_extra(fn):
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("kind", EXCHANGES)
def test_memory_per_rank(kind):
    """Ring: about two blocks and the home block (~12 N / P numbers); allgather: the whole system (4 N)."""
    comm = MPI.COMM_WORLD
    size, rank = comm.Get_size(), comm.Get_rank()
    n = 300_001
    backend = _host_backend("fp64")
    count, maxc = block_counts(n, size)[rank], max(block_counts(n, size))
    pos, mass = [np.zeros(count) for _ in range(3)], np.ones(count)

    def run():
        ex = Exchange(comm, backend, n, kind, "host")
        ex.set_masses(mass)
        ex.visit(comm, pos, lambda *a: None)

    extra = _peak_extra(run)
    peaks = comm.allgather(extra)
    if kind == "ring":
        bound = 8 * (4 * count + 2 * 4 * maxc) + 64 * 1024
        assert max(peaks) <= bound, f"ring: peaks {peaks} bytes, bound {bound}"  # falls as 1 / P
    else:
        assert min(peaks) >= 8 * 4 * n  # the documented cost of the simple variant


# ---------------------------------------------------------------- the GPU backend, simulated

@pytest.mark.cudasim
@pytest.mark.parametrize("kind", EXCHANGES)
@pytest.mark.parametrize("transport", ["device", "host"])
def test_gpu_backend_both_transports(agree, kind, transport):
    """Device buffers straight to MPI, or staged through pinned host buffers: the same blocks in the same order."""
    from pympi_gpu.nbody.gravity.kernels_cuda import CudaBackend

    comm = MPI.COMM_WORLD
    backend = CudaBackend("fp64", simulated=True)
    n = 3 * comm.Get_size() + 1
    seen = _visits(comm, backend, n, kind, transport, backend.dtype)
    agree(comm, lambda: _check(seen, n, kind, comm.Get_rank(), comm.Get_size(), backend.dtype))
