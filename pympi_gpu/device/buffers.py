"""Device memory on one CUDA stream, as the n-body models and the MPI layer use it.

:class:`DeviceBuffers` allocates, copies and synchronises on its own stream
and says what to hand mpi4py for a device array (:func:`mpi_buffer`).  The
gravity model's GPU backend builds on it; the CUDA-aware MPI check
(:func:`pympi_gpu.mpi.cuda_aware.round_trip`) takes one.  Importing this
module imports numba.cuda: import it on GPU paths (or under the simulator) only.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from pympi_gpu.device.gpu import simulator

__all__ = ["DeviceBuffers", "mpi_buffer"]


def mpi_buffer(a):
    """What mpi4py takes for device array ``a``: the array itself (it exposes
    ``__cuda_array_interface__``), or under the simulator, whose "device"
    arrays are host arrays without that interface, the array underneath."""
    return a._ary if simulator() else a


class DeviceBuffers:
    """Device arrays of one dtype on one stream, and pinned host arrays to stage them.

    Every copy is asynchronous on :attr:`stream` except :meth:`to_host`, which
    waits for its result; call :meth:`sync` before handing a buffer to MPI.
    """

    device = True

    def __init__(self, dtype):
        self.dtype = np.dtype(dtype)
        self.stream = cuda.stream()

    def empty(self, n: int, dtype=None):
        return cuda.device_array(n, dtype=dtype or self.dtype, stream=self.stream)

    def from_host(self, a: np.ndarray):
        return cuda.to_device(np.ascontiguousarray(a, dtype=self.dtype), stream=self.stream)

    def to_host(self, a) -> np.ndarray:
        out = a.copy_to_host(stream=self.stream)
        self.stream.synchronize()
        return out

    def copy_into(self, dst, src) -> None:
        if src.shape[0]:
            dst.copy_to_device(src, stream=self.stream)

    def sync(self) -> None:
        self.stream.synchronize()

    def mpi_buffer(self, a):
        return mpi_buffer(a)

    def pinned(self, n: int, dtype=None) -> np.ndarray:
        return cuda.pinned_array(n, dtype=dtype or self.dtype)

    def d2h(self, dev, host) -> None:
        if dev.shape[0]:
            dev.copy_to_host(host, stream=self.stream)

    def h2d(self, host, dev) -> None:
        if dev.shape[0]:
            dev.copy_to_device(host, stream=self.stream)
