"""Which MPI library a version text names: one parser for every caller.

The texts are ``MPI.Get_library_version()`` (provenance, ``pympi-info``, the
CUDA-awareness check) and ``mpiexec --version`` (the launcher's choice).  An
implementation is named by its own phrase only: an MPICH built with Intel's
compilers mentions "Intel" in its configure line and is still MPICH, and the
derivatives of MPICH (MVAPICH, Intel MPI) are recognised before MPICH itself.
"""

from __future__ import annotations

__all__ = ["VENDORS", "vendor_of_text", "library_name"]

#: (phrase, vendor) in the order they are tried, lower case
_PHRASES = (
    ("open mpi", "openmpi"), ("openrte", "openmpi"),
    ("mvapich", "mvapich"),
    ("intel(r) mpi", "intelmpi"), ("intel mpi", "intelmpi"),
    ("microsoft mpi", "msmpi"),
    ("mpich", "mpich"), ("hydra", "mpich"),
)
VENDORS = ("openmpi", "mvapich", "intelmpi", "msmpi", "mpich")


def vendor_of_text(text: str) -> str | None:
    """The MPI implementation a version text names, or None where it names none.

    >>> vendor_of_text("MPICH Version: 4.1.2\\nMPICH CC: icx -O2 (Intel oneAPI compilers)")
    'mpich'
    >>> vendor_of_text("Intel(R) MPI Library 2021.13 for Linux* OS")
    'intelmpi'
    """
    low = text.lower()
    return next((vendor for phrase, vendor in _PHRASES if phrase in low), None)


def library_name(library_version: str) -> str:
    """First line of ``MPI.Get_library_version()`` with runs of blanks made one space."""
    lines = library_version.replace("\x00", "").strip().splitlines()  # Open MPI's ends in a NUL
    return " ".join(lines[0].split()) if lines else ""
