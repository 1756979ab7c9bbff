"""``pympi_gpu.device.buffers`` under numba's CUDA simulator, at 2 and 3 ranks.

``tests/cli/test_mpi_suite.py`` runs this file with ``NUMBA_ENABLE_CUDASIM=1`` (marker
``cudasim``).  What the GPU paths rely on: values survive every copy between host,
device and pinned memory unchanged (fp32 and fp64, empty arrays too) and copies are
copies, not views; a kernel launched on :meth:`DeviceArrays.view` writes the array
itself; every device-to-host copy of :class:`DeviceArrays` is counted under its kind
and only there; and what :func:`mpi_buffer` hands mpi4py travels through a real
``Sendrecv`` around the ranks and arrives in the device array.
"""

import numpy as np
import pytest
from mpi4py import MPI
from numba import cuda  # a module global: the simulator swaps it inside kernels

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.cudasim]

DTYPES = [np.float64, np.float32]


@pytest.fixture
def buffers():
    from functools import partial

    from pympi_gpu.device.buffers import DeviceBuffers

    return partial(DeviceBuffers, simulated=True)


@pytest.fixture
def arrays():
    from pympi_gpu.device.buffers import DeviceArrays

    return DeviceArrays(simulated=True)


def _values(n, dtype, seed=0):
    return np.random.default_rng(seed).normal(size=n).astype(dtype)


# ---------------------------------------------------------------- DeviceBuffers

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [0, 1, 1000])
def test_device_buffers_round_trip(buffers, dtype, n):
    """from_host -> to_host gives the values back in the buffers' dtype; copy_into, d2h and h2d too."""
    b = buffers(dtype)
    host = _values(n, np.float64)
    dev = b.from_host(host)
    back = b.to_host(dev)
    assert back.dtype == np.dtype(dtype) and back.tobytes() == host.astype(dtype).tobytes()
    host[...] = 7  # the device copy does not follow the host array
    assert b.to_host(dev).tobytes() == back.tobytes()

    other = b.empty(n)
    b.copy_into(other, dev)  # device to device
    assert b.to_host(other).tobytes() == back.tobytes()

    pinned = b.pinned(n)
    assert isinstance(pinned, np.ndarray) and pinned.dtype == np.dtype(dtype) and pinned.shape == (n,)
    b.d2h(dev, pinned)
    b.sync()
    assert pinned.tobytes() == back.tobytes()
    pinned[...] = 3
    again = b.empty(n)
    b.h2d(pinned, again)
    b.sync()
    assert np.all(b.to_host(again) == 3)
    assert b.empty(n, np.int64).dtype == np.int64 and b.pinned(n, np.int32).dtype == np.int32


def test_device_buffers_mpi_buffer_around_the_ring(agree, buffers):
    """A device array handed to Sendrecv through mpi_buffer: each rank gets its left neighbour's values."""
    comm = MPI.COMM_WORLD
    size, rank = comm.Get_size(), comm.Get_rank()
    b = buffers(np.float64)
    send = b.from_host(np.full(5, float(rank)) + np.arange(5))
    recv = b.empty(5)
    b.sync()
    comm.Sendrecv(b.mpi_buffer(send), (rank + 1) % size, 7, b.mpi_buffer(recv), (rank - 1) % size, 7)
    got = b.to_host(recv)
    agree(comm, lambda: np.testing.assert_array_equal(got, (rank - 1) % size + np.arange(5.0)))


# ---------------------------------------------------------------- DeviceArrays

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(0, 3), (1, 3), (257, 3), (11,)])
def test_device_arrays_round_trip(arrays, dtype, shape):
    """from_host, into_device, to_host (also into a pinned array): the same values, independent copies."""
    host = _values(int(np.prod(shape)), dtype, seed=3).reshape(shape)
    dev = arrays.from_host(host)
    assert dev.shape == shape and dev.dtype == np.dtype(dtype)
    host_before = host.copy()
    host += 1  # the device copy does not follow the host array
    back = arrays.to_host(dev, "atoms")
    assert back.tobytes() == host_before.tobytes()
    back += 1  # nor the device array the host copy
    assert arrays.to_host(dev, "atoms").tobytes() == host_before.tobytes()

    arrays.into_device(host, dev)
    pinned = arrays.pinned(shape, dtype)
    assert isinstance(pinned, np.ndarray) and pinned.shape == shape and pinned.dtype == np.dtype(dtype)
    out = arrays.to_host(dev, "message", out=pinned)
    assert out is pinned and pinned.tobytes() == host.tobytes()
    assert arrays.from_host(host, np.float64).dtype == np.float64


def test_device_arrays_count_every_copy_by_kind(arrays):
    """Each to_host counts one copy of its kind and no other; scalar counts a "sums"; unknown kinds refused."""
    from pympi_gpu.device.buffers import COPY_KINDS

    xp = arrays.xp
    assert arrays.simulated and xp is np
    assert arrays.copies == dict.fromkeys(COPY_KINDS, 0)
    a = arrays.from_host(np.arange(12.0).reshape(4, 3))
    arrays.from_host(np.ones(3))  # host to device: not counted
    arrays.into_device(np.zeros((4, 3)), a)
    assert arrays.copies == dict.fromkeys(COPY_KINDS, 0)
    expect = dict.fromkeys(COPY_KINDS, 0)
    for kind, times in zip(COPY_KINDS, (3, 2, 1)):
        for _ in range(times):
            arrays.to_host(a, kind)
        expect[kind] += times
        assert arrays.copies == expect
    assert arrays.scalar(xp.sum(a)) == 0.0
    expect["sums"] += 1
    arrays.to_host(a, "atoms", out=arrays.pinned((4, 3)))
    expect["atoms"] += 1
    assert arrays.copies == expect
    with pytest.raises(ValueError, match="unknown kind of copy 'positions'"):
        arrays.to_host(a, "positions")
    assert arrays.copies == expect  # a refused copy is not counted


def _double(a):
    i = cuda.grid(1)
    if i < a.shape[0]:
        a[i] *= 2.0


def test_a_kernel_on_a_view_writes_the_array_itself(arrays):
    """view() hands a kernel the array without a copy: what the kernel writes is in the array."""
    a = arrays.from_host(np.arange(40.0))
    cuda.jit(_double)[2, 32, arrays.stream](arrays.view(a))
    arrays.sync()
    assert np.array_equal(arrays.to_host(a, "atoms"), 2.0 * np.arange(40.0))


def test_device_arrays_mpi_buffer_around_the_ring(agree, arrays):
    """mpi_buffer of a device array, after sync: a real Sendrecv fills the receiving device array."""
    comm = MPI.COMM_WORLD
    size, rank = comm.Get_size(), comm.Get_rank()
    send = arrays.from_host(np.full((4, 3), float(rank)))
    recv = arrays.xp.empty((4, 3))
    arrays.sync()
    comm.Sendrecv(arrays.mpi_buffer(send), (rank + 1) % size, 9, arrays.mpi_buffer(recv), (rank - 1) % size, 9)
    got = arrays.to_host(recv, "message")
    agree(comm, lambda: np.testing.assert_array_equal(got, np.full((4, 3), float((rank - 1) % size))))


def test_module_mpi_buffer_is_what_mpi_reads(buffers):
    """Under the simulator mpi_buffer gives the host memory under a numba device array: its values, in place."""
    from pympi_gpu.device.buffers import mpi_buffer

    b = buffers(np.float64)
    dev = b.from_host(np.arange(6.0))
    view = memoryview(mpi_buffer(dev, True))
    assert view.nbytes == 48 and np.array_equal(np.frombuffer(view), np.arange(6.0))
    np.frombuffer(view)[...] = -1.0  # what MPI writes there is in the device array
    assert np.all(b.to_host(dev) == -1.0)
