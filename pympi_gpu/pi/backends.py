"""The pi kernels of each backend, and how ``auto`` weighs the work (the choice itself is the
command line's, one for every command: :mod:`pympi_gpu.cli.devices`).

``auto`` picks by the work, then by the hardware:

* small work goes to NumPy: its kernels give the same results (the hit count
  bit for bit) and start at once, while numba costs 0.4-0.6 s per rank to
  import and load its cached kernels (more than NumPy needs for tens of
  millions of samples);
* larger work goes to the GPU if every rank has one (decided collectively,
  :func:`pympi_gpu.device.backend_choice.gpu_everywhere`), else to numba.
"""

from __future__ import annotations

from pympi_gpu.device.device import BACKENDS

__all__ = ["NUMPY_RATE", "NUMPY_MAX_SECONDS", "numpy_seconds", "small_work", "small_reason", "kernels_for"]


#: items/s of one core running the NumPy kernels (benchmarks/pi.py: Monte Carlo 1.8e8 on an Intel
#: Xeon with AVX-512, pi-avx512-xeon.json; the trapezoid rule 5e8 on an AMD EPYC Zen 2, 6.4e8 on the Xeon)
NUMPY_RATE = {"mc": 1.8e8, "trapezoid": 5.0e8}
#: ``auto`` takes NumPy while its estimated compute per rank stays below this:
#: about half of numba's start-up, so NumPy wins even on a core twice as fast.
NUMPY_MAX_SECONDS = 0.25


def numpy_seconds(total: int, ranks: int, methods) -> float:
    """Estimated NumPy compute time of the busiest rank (the same on every rank)."""
    per_rank = -(-total // ranks)
    return sum(per_rank / NUMPY_RATE[m] for m in methods)


def small_work(total: int, ranks: int, methods) -> bool:
    """Whether ``auto`` runs this work with NumPy (a pure function: every rank agrees)."""
    return numpy_seconds(total, ranks, methods) <= NUMPY_MAX_SECONDS


def small_reason(total: int, ranks: int, methods) -> str:
    """Why ``auto`` takes NumPy for this work (see :func:`small_work`)."""
    est = numpy_seconds(total, ranks, methods)
    return (f"auto: small work ({-(-total // ranks):,} per rank, about {est:.2f} s in NumPy, less than "
            "numba's start-up)")


def kernels_for(name: str):
    """The kernel object of a concrete backend name."""
    if name == "numba":
        from pympi_gpu.pi.kernels_cpu import NumbaKernels

        return NumbaKernels()
    if name == "numpy":
        from pympi_gpu.pi.kernels_numpy import NumpyKernels

        return NumpyKernels()
    if name == "gpu":
        from pympi_gpu.pi.kernels_cuda import CudaKernels

        return CudaKernels()
    raise ValueError(f"unknown backend {name!r} (choose from {', '.join(BACKENDS)})")
