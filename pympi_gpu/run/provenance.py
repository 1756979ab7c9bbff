"""Provenance of a run: versions, MPI library, hosts, launcher (collective)."""

from __future__ import annotations

import platform
from collections import Counter
from importlib import metadata

from pympi_gpu import __version__
from pympi_gpu.mpi.environment import container, launcher_env
from pympi_gpu.mpi.library import library_name, vendor_of_text
from pympi_gpu.run.records import Provenance

__all__ = ["collect", "version_of"]


def version_of(dist: str) -> str | None:
    """Installed version of a distribution, or None (never imports it)."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


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
        mpi_library=library_name(lib),
        mpi_vendor=vendor_of_text(lib) or "unknown",
        ranks=comm.Get_size(),
        hosts=tuple(sorted(per_host)),
        ranks_per_host=dict(sorted(per_host.items())),
        launcher=launcher_env(),
        container=container(),
        extra_versions=dict(extra or {}),
    )
