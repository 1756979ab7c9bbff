"""MPI calls made from numba-compiled code (pympi_gpu.mpi.numba_calls), in one process over COMM_SELF.

The step's kernels start and wait for persistent requests themselves; the MPI
tier (tests/mpi/test_lj_mpi.py) runs them over ranks under MPICH, Open MPI
and Intel MPI, and holds them to the Python calls bit for bit.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from numba import njit

from pympi_gpu.mpi import numba_calls
from pympi_gpu.nbody.lj.pairs import compiled


@pytest.fixture(scope="module")
def linked():
    assert numba_calls.link(), "the MPI symbols did not resolve in the libmpi mpi4py loaded"
    return True


def test_the_handles_are_mpi4pys_bytes(linked):
    from mpi4py import MPI

    buf = np.zeros(3)
    requests = [MPI.COMM_SELF.Recv_init(buf, 0, 5), MPI.COMM_SELF.Send_init(buf, 0, 5)]
    try:
        size = MPI._sizeof(MPI.Request)
        raw = numba_calls.handles(requests)
        assert raw.dtype == np.uint8 and raw.shape == (2 * size,) and numba_calls.request_size() == size
        for k, r in enumerate(requests):
            assert raw[k * size:(k + 1) * size].tobytes() == ctypes.string_at(MPI._addressof(r), size)
        assert numba_calls.handles([]).shape == (0,)
    finally:
        for r in requests:
            r.Free()


@njit
def _round_trips(reqs, status, send, recv, times):
    """Send ``send`` to this process ``times`` times, each with a new value; the codes and the clock's span."""
    t0 = numba_calls.wtime()
    codes = 0
    for k in range(times):
        send[0] = k + 1.0
        codes += numba_calls.start_all(reqs, 0, 2)
        codes += numba_calls.wait_all(reqs, 0, 2, status)
    return codes, numba_calls.wtime() - t0


def test_a_kernel_starts_and_waits_for_persistent_requests(linked):
    """Recv_init and Send_init to oneself, started and completed 50 times by a compiled loop."""
    from mpi4py import MPI

    send, recv = np.arange(4.0), np.zeros(4)
    requests = [MPI.COMM_SELF.Recv_init(recv, 0, 7), MPI.COMM_SELF.Send_init(send, 0, 7)]
    try:
        codes, span = _round_trips(numba_calls.handles(requests), numba_calls.statuses(2), send, recv, 50)
        assert codes == 0
        assert recv.tolist() == [50.0, 1.0, 2.0, 3.0]  # the last message's values
        assert 0.0 <= span < 60.0
        # the requests are mpi4py's still, and persistent: Python can start them after the kernel
        send[0] = -1.0
        MPI.Prequest.Startall(requests)
        MPI.Request.Waitall(requests)
        assert recv[0] == -1.0
    finally:
        for r in requests:
            r.Free()


def test_a_kernel_compiled_without_the_symbols_reports_it():
    """The stand-ins of numba_calls.calls(False): a call answers NOT_LINKED, which names the cause."""
    start_all, wait_all, wtime = numba_calls.calls(False)

    @njit
    def calls(reqs, status):
        return start_all(reqs, 0, 1), wait_all(reqs, 0, 1, status), wtime()

    none = np.zeros(0, np.uint8)
    assert calls(none, none) == (numba_calls.NOT_LINKED, numba_calls.NOT_LINKED, 0.0)
    error = numba_calls.failure(numba_calls.NOT_LINKED)
    assert isinstance(error, RuntimeError) and "without MPI's symbols" in str(error)


def test_an_mpi_error_code_becomes_mpi4pys_exception():
    from mpi4py import MPI

    error = numba_calls.failure(MPI.ERR_REQUEST)
    assert isinstance(error, MPI.Exception) and error.Get_error_class() == MPI.ERR_REQUEST


def test_a_step_kernel_stops_at_a_failed_call():
    """``run_ops`` compiled without the symbols, given a program that posts: MPI_FAILED, and the code."""
    from pympi_gpu.nbody.lj.cpu import kernels as kc
    from pympi_gpu.nbody.lj.config import LjConfig

    from pympi_gpu.nbody.lj.cpu import records

    forces = kc.force_kernels(LjConfig(cells=1).pair_term)
    run_ops = kc.make_run_ops(forces.newton, forces.one_sided, False)
    f = np.ones((4, 3))
    atoms = records.make(records.Rows, pos=np.zeros((4, 3)), f=f, v=np.zeros((4, 3)), gid=np.zeros(4, np.int64), n=4,
                         held=4)
    _, _, lists, _, plan, _, grid, work = records.idle(np.zeros(0, np.int64))
    tally, no_requests = np.zeros(6), np.zeros(0, np.uint8)
    mpi = records.make(records.Mpi, reqs=no_requests, req_at=np.zeros((6, 2), np.int64), agree=no_requests,
                       total=no_requests, top=np.zeros(4), status=np.zeros(64, np.uint8), tally=tally, comm=0,
                       double=0, requests=no_requests, rsize=0, rstatus=no_requests, got=np.zeros(3, np.int64))
    ops = np.array([[kc.OP_ZERO, 0], [kc.OP_POST, 0], [kc.OP_KICK, 0]], np.int64)
    status = run_ops(ops, 0.1, False, 1.0, atoms, lists, plan, mpi, grid, work, records.idle_bath())
    assert status == kc.MPI_FAILED and tally[kc.TALLY_ERROR] == numba_calls.NOT_LINKED
    assert not f.any()  # zeroed, and no kick after the failed post
