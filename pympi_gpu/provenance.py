"""Provenance of a run: versions, MPI library, hosts, launcher (collective)."""

from __future__ import annotations

import platform
from collections import Counter
from importlib import metadata

from pympi_gpu import __version__
from pympi_gpu.environment import container, launcher_env
from pympi_gpu.records import Provenance

__all__ = ["collect", "version_of", "mpi_vendor", "mpi_library_name"]


def version_of(dist: str) -> str | None:
    """Installed version of a distribution, or None (never imports it)."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def mpi_vendor(library_version: str) -> str:
    """Short name of the MPI implementation from ``MPI.Get_library_version()``."""
    text = library_version.lower()
    for key, name in (("open mpi", "openmpi"), ("mvapich", "mvapich"), ("intel", "intelmpi"),
                      ("mpich", "mpich"), ("microsoft", "msmpi")):
        if key in text:
            return name
    return "unknown"


def mpi_library_name(library_version: str) -> str:
    """First line of ``MPI.Get_library_version()`` with runs of blanks made one space."""
    lines = library_version.replace("\x00", "").strip().splitlines()  # Open MPI's ends in a NUL
    return " ".join(lines[0].split()) if lines else ""


def collect(comm, extra: dict[str, str] | None = None) -> Provenance:
    """Gather provenance from every rank of ``comm``; collective over comm."""
    from mpi4py import MPI

    hosts = comm.allgather(MPI.Get_processor_name())
    per_host = Counter(hosts)
    lib = MPI.Get_library_version().strip()
    import mpi4py
    import numpy

    return Provenance(
        package=__version__,
        python=platform.python_version(),
        mpi4py=mpi4py.__version__,
        numpy=numpy.__version__,
        numba=version_of("numba") or "not installed",  # without importing it (0.4 s)
        mpi_library=mpi_library_name(lib),
        mpi_vendor=mpi_vendor(lib),
        ranks=comm.Get_size(),
        hosts=tuple(sorted(per_host)),
        ranks_per_host=dict(sorted(per_host.items())),
        launcher=launcher_env(),
        container=container(),
        extra_versions=dict(extra or {}),
    )
