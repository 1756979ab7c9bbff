"""Choosing the pi kernels: done once, at the command-line edge."""

from __future__ import annotations

__all__ = ["BACKENDS", "resolve", "kernels_for"]

BACKENDS = ("auto", "numba", "numpy", "gpu")


def resolve(name: str) -> tuple[str, str]:
    """Turn ``auto`` into a concrete backend; return ``(backend, reason)``."""
    from pympi_gpu.gpu import gpu_usable

    if name != "auto":
        return name, "requested"
    ok, why = gpu_usable()
    return ("gpu", why) if ok else ("numba", f"no GPU: {why}")


def kernels_for(name: str):
    """The kernel object of a concrete backend name."""
    if name == "numba":
        from pympi_gpu.pi.kernels_cpu import NumbaKernels

        return NumbaKernels()
    if name == "numpy":
        from pympi_gpu.pi.kernels_cpu import NumpyKernels

        return NumpyKernels()
    if name == "gpu":
        from pympi_gpu.pi.kernels_cuda import CudaKernels

        return CudaKernels()
    raise ValueError(f"unknown backend {name!r} (choose from {', '.join(BACKENDS)})")
