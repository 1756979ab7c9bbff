"""Fixtures of the tests run under mpiexec (``--with-mpi``)."""

from __future__ import annotations

import os

import pytest


def simulated() -> bool:
    """Whether numba's CUDA simulator was on when this process started (read once, as numba does)."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cudasim`` skip, saying why, in a process without the simulator.

    NUMBA_ENABLE_CUDASIM must be set before numba is imported, so these cannot switch it on
    themselves: ``tests/cli/test_mpi_suite.py`` runs them (``-m cudasim``) in runs of their own.
    """
    if simulated():
        return
    skip = pytest.mark.skip(reason="needs NUMBA_ENABLE_CUDASIM=1 from the start of the process "
                                   "(tests/cli/test_mpi_suite.py runs these under it)")
    for item in items:
        if "cudasim" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def agree():
    """``agree(comm, check)``: run ``check()`` on every rank, then fail on every rank if it failed on any.

    A check that fails on one rank only must not leave that rank skipping the next
    collective while the others wait in it (the suite would hang until its timeout).
    Each rank runs its checks, the ranks exchange what failed, and every rank fails with
    every rank's message.  ``check`` may call collectives that every rank reaches before
    its first assertion can fail.
    """
    def _agree(comm, check) -> None:
        try:
            check()
            mine = None
        except (Exception, pytest.fail.Exception) as exc:  # an assertion's message says what differed
            mine = f"rank {comm.Get_rank()}: {type(exc).__name__}: {exc}"
        failed = [m for m in comm.allgather(mine) if m]
        assert not failed, "\n".join(failed)
    return _agree
