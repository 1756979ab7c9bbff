"""What the process can see of its launcher, scheduler and container: no MPI here.

The launcher and scheduler variables, and the order they are believed in, are
the table :data:`pympi_gpu.launchers.LAUNCHERS`; this module reads it.
"""

from __future__ import annotations

import os
from pathlib import Path

from pympi_gpu import launchers

__all__ = ["launcher_env", "expected_world_size", "world_rank", "node_cpus", "started_by",
           "container"]


def _reported() -> tuple[str, ...]:
    """Every launcher's and scheduler's variable, and the GPUs the scheduler gave (not a launcher's)."""
    return (*launchers.reported(), "CUDA_VISIBLE_DEVICES")


def launcher_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The launcher and scheduler variables that are set, in a stable order."""
    env = os.environ if environ is None else environ
    return {k: env[k] for k in _reported() if k in env}


def expected_world_size(environ: dict[str, str] | None = None,
                        scheduler: bool = True) -> tuple[int | None, str | None]:
    """The number of ranks the launcher or scheduler says this job step has.

    Returns ``(size, variable)``, or ``(None, None)`` where nothing says.
    Step-level variables win over job-level ones: inside ``salloc -n 4`` a
    plain ``python`` is a job of 4 tasks but a step of 1
    (:func:`pympi_gpu.launchers.world_size`).  With ``scheduler=False`` only a
    launcher's word counts, not the allocation's (Slurm's).
    """
    found = launchers.world_size(os.environ if environ is None else environ, schedulers=scheduler)
    return found if found is not None else (None, None)


def world_rank(environ: dict[str, str] | None = None) -> int | None:
    """This process's world rank as its launcher tells it (before MPI starts); None where none does."""
    found = launchers.world_rank(os.environ if environ is None else environ)
    return None if found is None else found[0]


def node_cpus(environ: dict[str, str] | None = None) -> int | None:
    """The CPUs of a node of this job as the scheduler tells them; None outside an allocation."""
    found = launchers.node_cpus(os.environ if environ is None else environ)
    return None if found is None else found[0]


def started_by(environ: dict[str, str] | None = None) -> str:
    """The name of the launcher that started this process, as people say it, from the variables it set.

    The first launcher of the table whose marks are set (Slurm's only inside a
    launched step: a batch script is not started by srun).
    """
    entry = launchers.started_by(os.environ if environ is None else environ)
    if entry is None:
        return "none (started directly, a singleton)"
    return entry.title


def container(environ: dict[str, str] | None = None, root: Path = Path("/")) -> str | None:
    """``"apptainer"``, ``"singularity"``, ``"docker"``, ``"podman"`` or None."""
    env = os.environ if environ is None else environ
    if "APPTAINER_CONTAINER" in env or "APPTAINER_NAME" in env:
        return "apptainer"
    if "SINGULARITY_CONTAINER" in env or "SINGULARITY_NAME" in env:
        return "singularity"
    if (root / "run/.containerenv").exists() or env.get("container") == "podman":
        return "podman"
    if (root / ".dockerenv").exists():
        return "docker"
    return None
