"""Runs the pytest-mpi suite of tests/mpi/ under mpiexec at 2 and 3 ranks (pytest leaves that
directory out of its own collection: setup.cfg's ``--ignore``, so its tests run only here).
This driver starts mpiexec, so it is not in tests/mpi/ itself, where pytest-mpi would skip it.

Twice per rank count: the whole directory as it is, then the tests marked ``cudasim``
again in a run of their own with ``NUMBA_ENABLE_CUDASIM=1`` (numba reads it once, at
import, so those tests skip in the first run and run only in the second).  In the quick
tier (``-m "not system and not slow"``) the runs under mpiexec leave ``slow`` out too.

A rank stuck in a collective cannot be interrupted by a signal, so each test has
``PER_TEST`` seconds, watched from a thread: past them the rank prints every thread's
stack and exits, and mpiexec ends the others (a failure in minutes, with the place it
hung, rather than the whole run's timeout).
"""

import sys

import pytest

from helpers.commands import ROOT, clean_env, mpiexec_argv, run

MPI_TESTS = ROOT / "tests" / "mpi"
PER_TEST = 300  # seconds: far beyond any test of the tier, well inside the run's 900


def _suite(ranks, *args, env=None):
    argv = mpiexec_argv(ranks) + [sys.executable, "-m", "pytest", "--with-mpi", "-q", "-p", "no:cacheprovider",
                                  "-o", "addopts=", "-o", "timeout_method=thread", f"--timeout={PER_TEST}",
                                  *args, str(MPI_TESTS)]
    proc = run(argv, timeout=900, cwd=ROOT, env=env or clean_env())
    tail = (proc.stdout + proc.stderr)[-6000:]
    assert proc.returncode == 0, tail
    assert " passed" in proc.stdout and " failed" not in proc.stdout, tail
    return proc.stdout


def _quick(config) -> bool:
    """Whether this run leaves ``slow`` tests out (the quick tier): then so does the run under mpiexec."""
    return "not slow" in (config.getoption("markexpr") or "")


@pytest.mark.parametrize("ranks", [2, 3])
def test_mpi_suite(request, ranks):
    _suite(ranks, *(["-m", "not slow"] if _quick(request.config) else []))


@pytest.mark.parametrize("ranks", [2, 3])
def test_mpi_suite_under_the_cuda_simulator(request, ranks):
    """The device halo, device buffers and the GPU exchange under numba's simulator (NumPy as the device)."""
    marks = "cudasim and not slow" if _quick(request.config) else "cudasim"
    out = _suite(ranks, "-m", marks, env=clean_env(NUMBA_ENABLE_CUDASIM="1", OMP_NUM_THREADS="1"))
    assert " skipped" not in out, out[-3000:]  # each of them ran
