"""How the tests start MPI programs and the commands: the way users do, with a hard timeout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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


#: what the container tiers need on the machine (tests/system/test_containers.py, test_cuda_image.py)
CONTAINER_TOOLS = ("podman", "buildah", "runc", "debootstrap")


def need_container_tools() -> None:
    need_tool(*CONTAINER_TOOLS)
    need_root("debootstrap and podman's root storage need root")


def mpiexec() -> str:
    """The mpiexec of this Python environment (the PyPI MPI), else the one on PATH."""
    for cand in (BIN / "mpiexec", shutil.which("mpiexec")):
        if cand and Path(cand).exists():
            return str(cand)
    pytest.skip("no mpiexec found")


def mpmd(*parts: list[str], ranks=(1, 1), launcher: list[str] | None = None) -> list[str]:
    """``mpiexec -n r0 A : -n r1 B ...``: an MPMD launch, each part with its count of ranks."""
    base = launcher or mpiexec_argv(1)[:-2]
    argv = list(base)
    for i, (n, part) in enumerate(zip(ranks, parts)):
        argv += ([":"] if i else []) + ["-n", str(n), *part]
    return argv


#: PYTHONPATH for a child whose ranks fake their GPU probe: ``env PYMPI_FAKE_GPU=yes|no`` per rank
#: (``tests/data/fake_gpu/sitecustomize.py``: a test double, not in the package)
FAKE_GPU_PATH = str(ROOT / "tests" / "data" / "fake_gpu")

#: on PYTHONPATH for every child of the test run (``tests/conftest.py`` puts it there): numba's CUDA
#: simulator, where a child enables it, on a schedule without a polled OS thread per CUDA thread
#: (``tests/data/cudasim/sitecustomize.py``)
SIMULATOR_PATH = str(ROOT / "tests" / "data" / "cudasim")


def fake_gpus(argv: list[str], answers: str) -> list[str]:
    """An MPMD launch of ``argv`` whose rank k's GPU probe says ``answers.split(",")[k]`` (``yes``/``no``)."""
    said = answers.split(",")
    return mpmd(*([ "env", f"PYMPI_FAKE_GPU={a}", *argv] for a in said), ranks=(1,) * len(said))


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


def env(**extra):
    """:func:`clean_env` with this environment's scripts and mpiexec first on PATH, one thread per rank."""
    return clean_env(PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', os.defpath)}", OMP_NUM_THREADS="1",
                     **extra)


def refused(out: subprocess.CompletedProcess, match: str) -> None:
    """Bad input refused as the rules say: exit 2, ``match`` said, one ``Error:`` line (rank 0's), no traceback."""
    text = out.stderr + out.stdout
    assert out.returncode == 2, text
    assert match in text, text
    assert "Traceback" not in text
    assert sum(line.startswith("Error:") for line in text.splitlines()) == 1, text  # once, by rank 0


def one_message(p: subprocess.CompletedProcess, words: str, status: int = 2) -> None:
    """Refused as the rules say: exit status, one message that says ``words``, no traceback."""
    text = p.stdout + p.stderr
    assert p.returncode == status, text
    assert words in text, text
    assert "Traceback" not in text, text
    errors = [line for line in text.splitlines() if line.startswith("Error") or ": error" in line]
    assert len(errors) == 1, text  # once, by rank 0, not once per rank


def run(argv: list[str], timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    """Run a command as a user would, with a hard timeout (a hang is a failure)."""
    kw.setdefault("env", clean_env())
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)


def timed(argv: list[str], **kw) -> tuple[subprocess.CompletedProcess, float]:
    """Run ``argv`` (within 120 s, or the test fails as hung): the result and the seconds it took."""
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=kw.pop("env", env()), **kw)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung: no end within 120 s: {' '.join(argv)}")
    return p, time.monotonic() - t0
