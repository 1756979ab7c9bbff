"""What the process can see of its launcher, scheduler and container: no MPI here."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["LAUNCHER_VARS", "launcher_env", "expected_world_size", "container"]

#: Variables set by the launchers and schedulers we know, in report order.
LAUNCHER_VARS = (
    "SLURM_JOB_ID", "SLURM_JOB_NAME", "SLURM_JOB_NUM_NODES", "SLURM_NNODES", "SLURM_NTASKS",
    "SLURM_NPROCS", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE", "SLURM_CPUS_PER_TASK",
    "SLURM_STEP_ID", "SLURM_STEP_NUM_TASKS", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID",
    "SLURM_JOB_PARTITION", "SLURM_MPI_TYPE",
    "PMI_SIZE", "PMI_RANK", "PMIX_RANK", "PMIX_NAMESPACE",
    "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_RANK",
    "MV2_COMM_WORLD_LOCAL_RANK", "HYDRA_PROXY_RETRY_COUNT", "TACC_SYSTEM", "CUDA_VISIBLE_DEVICES",
)


def launcher_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The launcher and scheduler variables that are set, in a stable order."""
    env = os.environ if environ is None else environ
    return {k: env[k] for k in LAUNCHER_VARS if k in env}


def expected_world_size(environ: dict[str, str] | None = None) -> tuple[int | None, str | None]:
    """The number of ranks the launcher or scheduler says this job step has.

    Returns ``(size, variable)``, or ``(None, None)`` where nothing says.
    Step-level variables win over job-level ones: inside ``salloc -n 4`` a
    plain ``python`` is a job of 4 tasks but a step of 1.
    """
    env = os.environ if environ is None else environ
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE",
                "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"):
        value = env.get(var, "")
        if value.isdigit():
            return int(value), var
    return None, None


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
