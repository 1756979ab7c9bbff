"""Shared test fixtures: how to start MPI programs the way users do."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def require_system() -> bool:
    """In CI (PYMPI_REQUIRE_SYSTEM=1) a missing system tool fails instead of skipping."""
    return os.environ.get("PYMPI_REQUIRE_SYSTEM", "0") not in ("", "0")


def need_tool(*names: str) -> None:
    """Skip (developer machine) or fail (CI) when a system tool is missing."""
    missing = [n for n in names if shutil.which(n) is None]
    if missing:
        msg = f"system tool(s) not installed: {', '.join(missing)}"
        if require_system():
            pytest.fail(msg + " (PYMPI_REQUIRE_SYSTEM=1: .ci/setup.d must install them)")
        pytest.skip(msg)


def need_root(why: str) -> None:
    """Skip (developer machine) or fail (CI) when the tests are not run as root."""
    if os.geteuid() != 0:
        if require_system():
            pytest.fail(why)
        pytest.skip(why)


def mpiexec() -> str:
    """The mpiexec of this Python environment (the PyPI MPI), else the one on PATH."""
    for cand in (BIN / "mpiexec", shutil.which("mpiexec")):
        if cand and Path(cand).exists():
            return str(cand)
    pytest.skip("no mpiexec found")


def mpiexec_argv(n: int) -> list[str]:
    """argv prefix that starts ``n`` ranks with this environment's MPI."""
    exe = mpiexec()
    out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    argv = [exe, "-n", str(n)]
    if "Open MPI" in out or "OpenRTE" in out:
        argv[1:1] = ["--oversubscribe", "--allow-run-as-root"]
    return argv


def script(name: str) -> str:
    """Path of an installed console script of this environment."""
    path = BIN / name
    return str(path) if path.exists() else name


#: what a launcher (mpiexec, srun, PMI) sets for the ranks it starts: a child run must not inherit it,
#: or its own mpiexec would take itself for a rank of the outer job.  The user's own settings stay:
#: OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM), and OMPI_MCA_* parameters such as plm_rsh_agent, without which
#: Open MPI 4.1 as root on a machine without ssh (the GPU machine) starts nothing.
LAUNCHER_VARS = ("PMI_", "PMIX_", "SLURM_", "MPI_LOCAL", "HYDRA_", "MV2_", "PRTE_", "OMPI_COMM_WORLD_",
                 "OMPI_UNIVERSE_SIZE", "OMPI_FILE_LOCATION", "OMPI_APP_CTX_", "OMPI_FIRST_RANKS",
                 "OMPI_NUM_APP_CTX", "OMPI_ARGV", "OMPI_COMMAND", "OMPI_MCA_orte_", "OMPI_MCA_ess",
                 "OMPI_MCA_pmix", "OMPI_MCA_initial_wdir", "OMPI_MCA_shmem_RUNTIME_QUERY_hint")


def clean_env(**extra: str) -> dict[str, str]:
    """The environment for child runs: launcher variables of an outer job removed (:data:`LAUNCHER_VARS`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_VARS)}
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(extra)
    return env


def refused(out: subprocess.CompletedProcess, match: str) -> None:
    """Bad input refused as the rules say: exit 2, ``match`` said, one ``Error:`` line (rank 0's), no traceback."""
    text = out.stderr + out.stdout
    assert out.returncode == 2, text
    assert match in text, text
    assert "Traceback" not in text
    assert sum(line.startswith("Error:") for line in text.splitlines()) == 1, text  # once, by rank 0


def run(argv: list[str], timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    """Run a command as a user would, with a hard timeout (a hang is a failure)."""
    kw.setdefault("env", clean_env())
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)


@pytest.fixture
def mpirun():
    """``mpirun(n, *argv)`` runs argv over n ranks of this environment's MPI."""
    def _run(n: int, *argv: str, timeout: float = 300, **kw):
        return run(mpiexec_argv(n) + list(argv), timeout=timeout, **kw)
    return _run


#: The tiers that build container images run last.  In CI those images are made in the
#: background meanwhile (``.ci/run`` starts ``tests/system/containers.py prebuild``), and
#: these tests wait only for what is not made yet.
CONTAINER_TIERS = ("test_apptainer.py", "test_containers.py", "test_cuda_image.py")


def pytest_collection_modifyitems(items):
    def tier(item) -> int:  # the others first, in their order; then these, in the prebuild's
        if item.path.parent.name == "system" and item.path.name in CONTAINER_TIERS:
            return 1 + CONTAINER_TIERS.index(item.path.name)
        return 0
    items.sort(key=tier)
