"""Runs the pytest-mpi suites of tests/mpi/ under mpiexec at 2 and 3 ranks."""

import sys

import pytest

from conftest import ROOT, mpiexec_argv, run


@pytest.mark.parametrize("ranks", [2, 3])
def test_mpi_suite(ranks):
    argv = mpiexec_argv(ranks) + [sys.executable, "-m", "pytest", "--with-mpi", "-q", "-p", "no:cacheprovider",
                                  "-o", "addopts=", str(ROOT / "tests" / "mpi")]
    proc = run(argv, timeout=900, cwd=ROOT)
    tail = (proc.stdout + proc.stderr)[-6000:]
    assert proc.returncode == 0, tail
    assert " passed" in proc.stdout and " failed" not in proc.stdout, tail
