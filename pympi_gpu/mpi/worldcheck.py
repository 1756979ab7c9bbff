"""Does the MPI world have the size the launcher meant?  (no MPI here: sizes come in)

A rank that finds itself alone in a world of 1 while Slurm or the PMI says the
step has more ranks was started by a launcher its MPI library cannot talk to:
typically an MPI inside a container that does not match the host's (Open MPI
under ``srun --mpi=pmi2``, an MPICH image under ``mpirun`` of Open MPI), or a
program started without ``srun`` in a batch script.  Every rank then computes the
whole problem alone, which is wrong and slow, but not an error MPI reports.
"""

from __future__ import annotations

from collections.abc import Mapping

from pympi_gpu import launchers
from pympi_gpu.mpi.environment import expected_world_size

__all__ = ["world_mismatch"]


def world_mismatch(size: int, environ: Mapping[str, str] | None = None,
                   library: str | None = None) -> str | None:
    """The warning to print when ``size`` is 1 but the launcher promised more, else None.

    Parameters
    ----------
    size : int
        ``comm.Get_size()`` of the world communicator.
    environ : mapping, optional
        The environment (default ``os.environ``); see
        :func:`pympi_gpu.mpi.environment.expected_world_size`.
    library : str, optional
        The first line of ``MPI.Get_library_version()``, named in the warning.
    """
    expected, var = expected_world_size(None if environ is None else dict(environ))
    if size != 1 or expected is None or expected <= 1:
        return None
    lib = " ({})".format(" ".join(library.split())) if library and library.strip() else ""
    return (
        f"warning: MPI started a world of 1 rank, but {var}={expected} says this job step has "
        f"{expected}: every process is running alone, each doing the whole job.\n"
        f"  The MPI library in use{lib} did not get the launcher's process-management "
        f"interface (PMI). Start it with a launcher that speaks its PMI: {pmi_advice()}, ibrun on "
        f"TACC systems, or this MPI's own mpiexec; in a container, the image's MPI must match the host's "
        f"(see docs/containers.md, 'Troubleshooting: images', MPI mismatch). pympi-launch chooses for you."
    )


def pmi_advice() -> str:
    """How to start each MPI library with a launcher that takes a PMI plugin, from the two tables.

    ``"srun --mpi=pmi2 for MPICH, Intel MPI and MVAPICH, srun --mpi=pmix for Open MPI"``
    """
    speakers: dict[str, list[str]] = {}  # plugin -> the libraries that speak it
    for lib in launchers.MPI_LIBRARIES:
        if lib.pmi is not None:
            speakers.setdefault(lib.pmi, []).append(lib.title)
    advice = []
    for entry in (e for e in launchers.startable() if e.start.pmi):
        for plugin, titles in speakers.items():
            option = " ".join((*entry.start.command, *launchers.fill(entry.start.pmi, pmi=plugin)))
            names = titles[0] if len(titles) == 1 else f"{', '.join(titles[:-1])} and {titles[-1]}"
            advice.append(f"{option} for {names}")
    return ", ".join(advice)
