"""Fixtures of the tests run under mpiexec (``--with-mpi``)."""

from __future__ import annotations

import pytest


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
