"""Which MPI library a version text names: one parser for every caller.

The texts are ``MPI.Get_library_version()`` (provenance, ``pympi-info``, the
CUDA-awareness check) and ``mpiexec --version`` (the launcher's choice).  An
implementation is named by its own phrase only: an MPICH built with Intel's
compilers mentions "Intel" in its configure line and is still MPICH, and the
derivatives of MPICH (MVAPICH, Intel MPI) are recognised before MPICH itself.
"""

from __future__ import annotations

from pympi_gpu import launchers

__all__ = ["vendor_of_text", "library_name"]


def vendor_of_text(text: str) -> str | None:
    """The MPI implementation a version text names, or None where it names none.

    The phrases are those of :data:`pympi_gpu.launchers.MPI_LIBRARIES`, tried in
    :func:`~pympi_gpu.launchers.recognition_order` (derivatives of MPICH first).

    >>> vendor_of_text("MPICH Version: 4.1.2\\nMPICH CC: icx -O2 (Intel oneAPI compilers)")
    'mpich'
    >>> vendor_of_text("Intel(R) MPI Library 2021.13 for Linux* OS")
    'intelmpi'
    """
    low = text.lower()
    return next((lib.name for lib in launchers.recognition_order() if any(p in low for p in lib.phrases)), None)


def library_name(library_version: str) -> str:
    """First line of ``MPI.Get_library_version()`` with runs of blanks made one space."""
    lines = library_version.replace("\x00", "").strip().splitlines()  # Open MPI's ends in a NUL
    return " ".join(lines[0].split()) if lines else ""
