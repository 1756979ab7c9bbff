"""The n-body backends, chosen once at the command-line edge and passed down.

A backend owns where the bodies live (host or GPU memory) and the kernels that
act on them.  Every backend offers the same methods, so the exchange and the
integrator are written once:

``empty(n)``, ``zeros(n, dtype=None)``, ``from_host(a)``, ``to_host(a)``,
``fill_zero(a)``, ``copy_into(dst, src)``, ``axpy(y, h, x)``,
``accel(tx, ty, tz, sx, sy, sz, sm, eps2, ax, ay, az)``,
``potential(tx, ty, tz, sx, sy, sz, sm, eps2, phi)``, ``sync()``,
``finite(arrays)`` (are all their entries finite?), ``mpi_buffer(a)`` (the object
handed to mpi4py), ``device`` (bool).

GPU backends add ``pinned(n)``, ``d2h(dev, host)`` and ``h2d(host, dev)``
(asynchronous on the backend's stream) for staging through host memory.
"""

from __future__ import annotations

import numpy as np

from pympi_gpu.device.device import BACKENDS
from pympi_gpu.nbody.gravity.precision import PRECISIONS

__all__ = ["PRECISIONS", "HostBackend", "make_backend"]



class HostBackend:
    """Bodies in host memory; ``kernels`` is a numba or NumPy kernel object."""

    device = False

    def __init__(self, kernels, precision: str):
        self.kernels = kernels
        self.name = kernels.name
        self.precision = precision
        self.dtype = np.dtype(PRECISIONS[precision])

    def empty(self, n: int, dtype=None) -> np.ndarray:
        return np.empty(n, dtype=dtype or self.dtype)

    def zeros(self, n: int, dtype=None) -> np.ndarray:
        return np.zeros(n, dtype=dtype or self.dtype)

    def from_host(self, a: np.ndarray) -> np.ndarray:
        return np.array(a, dtype=self.dtype, copy=True)

    def to_host(self, a) -> np.ndarray:
        return np.asarray(a)

    def fill_zero(self, a) -> None:
        a[...] = 0

    def copy_into(self, dst, src) -> None:
        dst[...] = src

    def axpy(self, y, h: float, x) -> None:
        self.kernels.axpy(y, h, x)

    def accel(self, *args) -> None:
        self.kernels.accel(*args)

    def potential(self, *args) -> None:
        self.kernels.potential(*args)

    def sync(self) -> None:
        pass

    def finite(self, arrays) -> bool:
        return all(bool(np.isfinite(a).all()) for a in arrays)

    def mpi_buffer(self, a):
        return a

    def warmup(self) -> None:
        self.kernels.warmup(self.dtype.type)


def make_backend(device, precision: str):
    """The backend object of a :class:`~pympi_gpu.device.device.Device` (its ``backend``) and a precision."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r} (choose from {', '.join(PRECISIONS)})")
    name = device.backend
    if name == "numba":
        from pympi_gpu.nbody.gravity.kernels_cpu import NumbaKernels

        return HostBackend(NumbaKernels(), precision)
    if name == "numpy":
        from pympi_gpu.nbody.gravity.kernels_cpu import NumpyKernels

        return HostBackend(NumpyKernels(), precision)
    if name == "gpu":
        from pympi_gpu.nbody.gravity.kernels_cuda import CudaBackend

        return CudaBackend(precision, device.simulated)
    raise ValueError(f"unknown backend {name!r} (choose from {', '.join(BACKENDS)})")
