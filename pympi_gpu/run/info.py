"""What a job runs on: versions, MPI, launcher, ranks per host, GPUs, container.

:func:`collect` is collective over comm and returns an :class:`InfoReport`
on every rank (rank 0 holds the per-rank details of all).  Nothing here
prints; ``pympi-info`` does.
"""

from __future__ import annotations

import dataclasses
import os
import platform
from collections import Counter
from importlib import metadata
from typing import Any

from pympi_gpu import __version__
from pympi_gpu.mpi.environment import container, expected_world_size, launcher_env, started_by
from pympi_gpu.mpi.library import library_name, vendor_of_text
from pympi_gpu.run.provenance import version_of

__all__ = ["RankInfo", "InfoReport", "cupy_version", "guess_launcher", "rank_info", "collect"]


@dataclasses.dataclass(frozen=True)
class RankInfo:
    """One rank's view: host, node-local rank, the GPUs it sees and the one it uses.

    ``gpu_used`` is the index among ``gpus`` that :func:`pympi_gpu.device.gpu.bind_device`
    selects (node-local rank modulo the visible devices), None without a GPU.
    """

    rank: int
    host: str
    local_rank: int
    local_size: int
    cuda_visible_devices: str | None
    gpus: tuple[str, ...]
    gpu_used: int | None
    gpu_reason: str


@dataclasses.dataclass(frozen=True)
class InfoReport:
    """Everything ``pympi-info`` reports."""

    package: str
    python: str
    versions: dict[str, str | None]
    mpi_library: str
    mpi_vendor: str
    mpi_standard: str
    ranks: int
    ranks_per_host: dict[str, int]
    launcher: str
    launcher_env: dict[str, str]
    expected_ranks: int | None
    expected_from: str | None
    cuda_aware: dict[str, Any]
    container: str | None
    numba_cache_writable: bool
    numba_cache_dir: str
    rank_info: tuple[RankInfo, ...]
    warnings: tuple[str, ...]


def cupy_version() -> str | None:
    """Version of an installed CuPy distribution (``cupy-cuda12x`` etc.), never importing it."""
    names = sorted({(d.metadata["Name"] or "").lower() for d in metadata.distributions()})
    for name in names:
        if name == "cupy" or name.startswith("cupy-cuda") or name.startswith("cupy-rocm"):
            return f"{version_of(name)} ({name})"
    return None


def guess_launcher(environ: dict[str, str] | None = None) -> str:
    """Which launcher started this process, from the variables it set."""
    return started_by(environ)


def rank_info(comm, probe_gpus: bool = True) -> RankInfo:
    """This rank's host, node-local rank and GPUs (numba.cuda only if it is usable).

    Collective over comm (it splits a node communicator).
    """
    from mpi4py import MPI

    from pympi_gpu.device.gpu import gpu_usable, local_rank

    lrank, lsize = local_rank(comm)
    gpus: tuple[str, ...] = ()
    used = None
    if probe_gpus:
        ok, why = gpu_usable()
    else:
        ok, why = False, "not probed"
    if ok:
        from numba import cuda

        gpus = tuple(g.name.decode() if isinstance(g.name, bytes) else str(g.name) for g in cuda.gpus)
        used = lrank % len(gpus) if gpus else None
    return RankInfo(rank=comm.Get_rank(), host=MPI.Get_processor_name(), local_rank=lrank, local_size=lsize,
                    cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"), gpus=gpus, gpu_used=used,
                    gpu_reason=why)


def collect(comm, probe_gpus: bool = True, cuda_aware: bool | None = None) -> InfoReport:
    """The report of the whole job; collective over comm.

    Per-rank details are gathered to rank 0; other ranks get only their own.
    ``cuda_aware``: the user's own answer on CUDA-awareness (``PYMPI_CUDA_AWARE``), if any.
    """
    from mpi4py import MPI

    from pympi_gpu.mpi.cuda_aware import detect
    from pympi_gpu.device.jitcache import cache_dir_writable
    from pympi_gpu.mpi.worldcheck import world_mismatch

    mine = rank_info(comm, probe_gpus)
    gathered = comm.gather(mine, root=0)
    ranks = tuple(gathered) if comm.Get_rank() == 0 else (mine,)
    hosts = Counter(comm.allgather(mine.host))
    lib = MPI.Get_library_version().strip()
    aware = detect(library_version=lib, forced=cuda_aware)
    writable, cache_dir = cache_dir_writable()
    major, minor = MPI.Get_version()
    import mpi4py

    versions = {"mpi4py": mpi4py.__version__, "numpy": version_of("numpy"), "numba": version_of("numba"),
                "cupy": cupy_version(), "numba-cuda": version_of("numba-cuda")}
    warnings = []
    mismatch = world_mismatch(comm.Get_size(), library=lib.splitlines()[0] if lib else None)
    if mismatch:
        warnings.append(mismatch)
    expected, var = expected_world_size()
    return InfoReport(
        package=__version__, python=platform.python_version(), versions=versions,
        mpi_library=library_name(lib), mpi_vendor=vendor_of_text(lib) or "unknown",
        mpi_standard=f"{major}.{minor}", ranks=comm.Get_size(), ranks_per_host=dict(sorted(hosts.items())),
        launcher=guess_launcher(), launcher_env=launcher_env(), expected_ranks=expected, expected_from=var,
        cuda_aware=dataclasses.asdict(aware), container=container(),
        numba_cache_writable=writable, numba_cache_dir=cache_dir, rank_info=ranks, warnings=tuple(warnings))
