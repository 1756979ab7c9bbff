"""The ``PYMPI_*`` settings that are no command's option: read here, at the command line's edge.

Every option of a command can come from the environment as
``PYMPI_<COMMAND>_<OPTION>`` (click reads those).  A few settings more are for
the whole package, not one command; the library below the command line never
reads them itself (tests/unit/test_architecture.py holds it so): the commands read
them here and hand the values down.  What the platform says (the launcher's
variables, the MPI library's, numba's and CUDA's) is read where that is the
module's concern (:mod:`pympi_gpu.mpi.environment`, :mod:`pympi_gpu.device.gpu`...).

=========================== ==================================================
``PYMPI_COMPILED_MPI=0``    the LJ engine's MPI calls from Python, not from its
                            compiled kernels (agreed by the ranks)
``PYMPI_CUDA_AWARE=0|1``    the MPI library's CUDA-awareness, as the user knows it
``PYMPI_PROGRESS_INTERVAL`` seconds between the progress lines in a log (10)
``PYMPI_WIDE_VECTORS=0``    leave numba's vector width to LLVM's tuning
``PYMPI_NUMBA_CACHE_SEED``  a numba cache compiled at an image's build
``PYMPI_MPI``, ``PYMPI_PMI``  the MPI in use and srun's PMI plugin, where they
                            cannot be told (``pympi-launch``, ``pympi-scale``)
=========================== ==================================================

The stop's grace period (``PYMPI_STOP_GRACE``), the relay's mark
(``PYMPI_STOP_RELAY``) and ``PYMPI_DEBUG`` are :mod:`pympi_gpu.cli.signals`'
and :mod:`pympi_gpu.cli.common`'s.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["COMPILED_MPI", "CUDA_AWARE", "PROGRESS_INTERVAL", "WIDE_VECTORS", "NUMBA_CACHE_SEED", "MPI", "PMI",
           "compiled_mpi", "cuda_aware", "progress_interval", "wide_vectors", "numba_cache_seed", "told_mpi",
           "told_pmi"]

COMPILED_MPI = "PYMPI_COMPILED_MPI"
CUDA_AWARE = "PYMPI_CUDA_AWARE"
PROGRESS_INTERVAL = "PYMPI_PROGRESS_INTERVAL"
WIDE_VECTORS = "PYMPI_WIDE_VECTORS"
NUMBA_CACHE_SEED = "PYMPI_NUMBA_CACHE_SEED"
MPI = "PYMPI_MPI"
PMI = "PYMPI_PMI"

_YES, _NO = ("1", "yes", "true", "on"), ("0", "no", "false", "off")


def _env(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def compiled_mpi(environ: Mapping[str, str] | None = None) -> bool:
    """Whether compiled kernels may make MPI calls (``PYMPI_COMPILED_MPI`` not ``0``): this rank's word."""
    return _env(environ).get(COMPILED_MPI, "1").strip() != "0"


def cuda_aware(environ: Mapping[str, str] | None = None) -> bool | None:
    """The user's word on the MPI library's CUDA-awareness (``PYMPI_CUDA_AWARE``): True, False, or None."""
    value = _env(environ).get(CUDA_AWARE, "").strip().lower()
    return True if value in _YES else False if value in _NO else None


def progress_interval(environ: Mapping[str, str] | None = None, default: float = 10.0) -> float:
    """Seconds between two progress lines (``PYMPI_PROGRESS_INTERVAL``; a bad value is the default)."""
    try:
        value = float(_env(environ).get(PROGRESS_INTERVAL, default))
    except ValueError:
        return default
    return value if value > 0 else default


def wide_vectors(environ: Mapping[str, str] | None = None) -> bool:
    """Whether numba may be asked for 512-bit vectors (``PYMPI_WIDE_VECTORS`` not ``0``)."""
    return _env(environ).get(WIDE_VECTORS, "1").strip().lower() not in ("", *_NO)


def numba_cache_seed(environ: Mapping[str, str] | None = None) -> str | None:
    """The directory of a numba cache an image was built with (``PYMPI_NUMBA_CACHE_SEED``), or None."""
    return _env(environ).get(NUMBA_CACHE_SEED) or None


def told_mpi(environ: Mapping[str, str] | None = None) -> str | None:
    """The MPI the user names (``PYMPI_MPI``, lower case), or None."""
    return _env(environ).get(MPI, "").strip().lower() or None


def told_pmi(environ: Mapping[str, str] | None = None) -> str | None:
    """srun's PMI plugin the user names (``PYMPI_PMI``), or None."""
    return _env(environ).get(PMI, "").strip() or None
