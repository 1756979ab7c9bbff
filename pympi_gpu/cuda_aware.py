"""Whether the MPI library can take CUDA device memory (CUDA-aware MPI).

Call :func:`detect` after MPI is initialised.  In order:

1. ``PYMPI_CUDA_AWARE=0|1`` forces the answer (a site that knows better).
2. ``MPIX_Query_cuda_support()``, which Open MPI and MPICH export: mpi4py 4
   does not wrap it, so it is reached with ctypes on the libmpi this process
   has loaded.  It answers for the library *at run time*.
3. The known switches of libraries without that call: MVAPICH2-GDR needs
   ``MV2_USE_CUDA=1``; Intel MPI needs ``I_MPI_OFFLOAD=1`` (2021.x and newer
   only; TACC's Intel MPI 2019 bases are not CUDA-aware); MPICH honours
   ``MPIR_CVAR_ENABLE_GPU=0``; Open MPI's ``ompi_info`` reports
   ``mpi_built_with_cuda_support``.

Where nothing tells, the answer is "unknown" (``supported=None``), and the
n-body stages through host memory, which always works.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import shutil
import subprocess

from pympi_gpu.provenance import mpi_vendor

__all__ = ["CudaAwareness", "detect", "loaded_mpi_libraries"]


@dataclasses.dataclass(frozen=True)
class CudaAwareness:
    """The verdict: ``supported`` is True, False or None (unknown)."""

    supported: bool | None
    method: str
    detail: str


def loaded_mpi_libraries(maps: str = "/proc/self/maps") -> list[str]:
    """Paths of the libmpi shared objects mapped into this process."""
    try:
        with open(maps) as fh:
            paths = {line.split()[-1] for line in fh if "/libmpi" in line and ".so" in line}
    except OSError:
        return []
    return sorted(p for p in paths if os.path.basename(p).startswith(("libmpi.so", "libmpi_")) or
                  os.path.basename(p).startswith("libmpi."))


def _query_symbol() -> CudaAwareness | None:
    for path in loaded_mpi_libraries():
        try:
            lib = ctypes.CDLL(path)
            query = lib.MPIX_Query_cuda_support
        except (OSError, AttributeError):
            continue
        query.restype = ctypes.c_int
        query.argtypes = []
        value = int(query())
        return CudaAwareness(bool(value), "MPIX_Query_cuda_support",
                             f"{os.path.basename(path)} returned {value}")
    return None


def _ompi_info() -> CudaAwareness | None:
    exe = shutil.which("ompi_info")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--parsable", "--all"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        if line.startswith("mca:mpi:base:param:mpi_built_with_cuda_support:value:"):
            value = line.rsplit(":", 1)[1].strip() == "true"
            return CudaAwareness(value, "ompi_info", line)
    return None


def detect(environ=None, library_version: str | None = None) -> CudaAwareness:
    """Decide whether device buffers may be handed to MPI (see module docs)."""
    env = os.environ if environ is None else environ
    forced = env.get("PYMPI_CUDA_AWARE", "").strip().lower()
    if forced in ("1", "yes", "true", "on"):
        return CudaAwareness(True, "PYMPI_CUDA_AWARE", "forced on by the environment")
    if forced in ("0", "no", "false", "off"):
        return CudaAwareness(False, "PYMPI_CUDA_AWARE", "forced off by the environment")
    if library_version is None:
        from mpi4py import MPI

        library_version = MPI.Get_library_version()
    vendor = mpi_vendor(library_version)
    if vendor == "mpich" and env.get("MPIR_CVAR_ENABLE_GPU", "").strip() == "0":
        return CudaAwareness(False, "MPIR_CVAR_ENABLE_GPU", "MPICH GPU support switched off")
    found = _query_symbol()
    if found is not None:
        return found
    if vendor == "mvapich":
        on = env.get("MV2_USE_CUDA", "0").strip() == "1"
        return CudaAwareness(on, "MV2_USE_CUDA", "MVAPICH2(-GDR) is CUDA-aware only with MV2_USE_CUDA=1"
                             + ("" if on else "; it is not set"))
    if vendor == "intelmpi":
        on = env.get("I_MPI_OFFLOAD", "0").strip() == "1"
        return CudaAwareness(on, "I_MPI_OFFLOAD", "Intel MPI 2021+ offloads device buffers with I_MPI_OFFLOAD=1"
                             + ("" if on else "; it is not set"))
    if vendor == "openmpi":
        found = _ompi_info()
        if found is not None:
            return found
    return CudaAwareness(None, "none", f"no way to ask {vendor} MPI; assuming host staging")
