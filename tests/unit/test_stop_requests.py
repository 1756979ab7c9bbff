"""A stop request's rules in one process (``pympi_gpu.cli.signals``): one Ctrl-C delivered twice is one
request; the exit statuses; the grace period, read from the environment and stretched by a slow step.
Stop requests sent to real jobs: tests/cli/test_stop_signals.py, test_interrupt.py, test_stop_launchers.py.
"""

from __future__ import annotations

import os
import signal
import time

import pytest


def test_stop_unit_rules():
    """The exit statuses, and the grace period: read from the environment, stretched by a slow step."""
    from pympi_gpu.cli.signals import Stop, exit_status, grace_from_env

    assert [exit_status(s) for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)] == [0, 0, 0]
    assert exit_status(signal.SIGINT) == 130 and exit_status(signal.SIGHUP) == 129
    os.environ["PYMPI_STOP_GRACE"] = "7.5"
    try:
        assert grace_from_env() == 7.5
        os.environ["PYMPI_STOP_GRACE"] = "soon"
        assert grace_from_env() == 60.0
    finally:
        del os.environ["PYMPI_STOP_GRACE"]
    stop = Stop("t", grace=0.01)
    for _ in range(3):
        stop.requested()
        time.sleep(0.02)
    assert stop.slowest >= 0.02  # the time between two polls: a step
    stop.arrived(signal.SIGUSR1)
    # not installed (it took no signals): no watchdog, which would end this very process
    assert stop.requested() == signal.SIGUSR1 and stop._timer is None


def test_repeated_delivery_of_one_ctrl_c_counts_once():
    """The terminal and the launcher can both deliver the same keypress: within the window it is one request."""
    from pympi_gpu.cli.signals import REPEAT_WINDOW, Stop

    stop = Stop("t")
    stop.arrived(signal.SIGINT)
    stop.arrived(signal.SIGINT)  # at once: the same Ctrl-C, not a second (else this process would exit)
    assert stop.requested() == signal.SIGINT and REPEAT_WINDOW > 0
    stop.arrived(signal.SIGTERM)  # a SIGTERM after the request changes nothing
    assert stop.requested() == signal.SIGINT


def test_a_request_during_the_set_up_waits_for_the_steps_and_the_grace_counts_from_them(monkeypatch):
    """pympi-nbody polls once a step: a request that came while the run still set up (its atoms, its
    lists: minutes for a large run on a busy machine) is no stuck rank (was: MPI_Abort after the grace
    period from the signal, exit 1, no checkpoint, the run sound).  Once the steps began, a rank that
    polls no more is ended after the grace period, as before."""
    from pympi_gpu.cli import signals

    ended = []
    monkeypatch.setattr(signals, "abort_job", ended.append)
    stop = signals.Stop("t", grace=0.1, steps=True)
    stop._installed = True  # (its watchdog armed, its abort this list)
    stop.arrived(signal.SIGTERM)
    time.sleep(0.4)
    assert ended == []  # setting up: no step has polled yet
    assert stop.requested() == signal.SIGTERM  # the first step sees it...
    time.sleep(0.4)  # ...and the steps stop polling: a rank waits in MPI for good
    assert ended == [signals.OVERDUE]


def test_a_stop_request_is_told_to_the_listeners_once():
    """A run whose batch of compiled steps polls no Python is told of the request from the signal's thread."""
    from pympi_gpu.cli.signals import Stop

    heard = []
    stop = Stop("t")
    stop.listen(heard.append)
    stop.arrived(signal.SIGUSR1)
    stop.arrived(signal.SIGTERM)
    late = []
    stop.listen(late.append)  # a listener that comes after the request hears it at once
    assert heard == [signal.SIGUSR1] and late == [signal.SIGUSR1]


def test_a_request_heard_during_a_batch_of_compiled_steps_ends_it_at_the_next_step():
    """The LJ engine takes the quiet steps in compiled calls of many steps, which look at no Python; a stop
    request that comes meanwhile is carried by the next step's agreement (``LjSystem.hear_stop``, from the
    signals' thread), not after the batch (was: after it, seconds to minutes on a loaded machine)."""
    import threading

    from mpi4py import MPI

    from pympi_gpu.nbody.lj.domain import brick_of, make_cart
    from pympi_gpu.nbody.lj.system import LjConfig, LjSystem, initial_arrays

    config = LjConfig(cells=5)
    cart = make_cart(MPI.COMM_SELF)
    try:
        system = LjSystem(cart, config, *initial_arrays(config, brick_of(config.box, (1, 1, 1), (0, 0, 0))))
        assert system.atoms.batched
        system.prepare()
        system.advance_quiet(10, 0)  # (compiled, or loaded from numba's cache)
        timer = threading.Timer(0.3, system.hear_stop, args=(signal.SIGTERM,))
        timer.start()
        t0 = time.monotonic()
        times, agreed = system.advance_quiet(1_000_000, 0)
        took = time.monotonic() - t0
        timer.join()
    finally:
        cart.Free()
    assert agreed == signal.SIGTERM and took < 5.0, (agreed, took)
    assert len(times) < 1_000_000 and system.timestep == 10 + len(times)


@pytest.mark.parametrize("heard, waits", [(None, False), (signal.SIGTERM, False), (signal.SIGINT, True)])
def test_an_mpi_error_after_a_ctrl_c_waits_for_the_job_ending_at_once(monkeypatch, heard, waits):
    """An MPI error on a rank a Ctrl-C reached (the others ending at once on a second one, whose abort has
    not killed this rank yet) waits for that end before it is told; after no Ctrl-C it is told at once."""
    from pympi_gpu.cli import signals

    stop = signals.Stop("pympi-nbody")
    stop.signal = heard
    monkeypatch.setattr(signals, "_taken", stop)
    t0 = time.monotonic()
    assert signals.after_an_interrupt(0.3) is waits
    assert (time.monotonic() - t0 >= 0.3) is waits
    monkeypatch.setattr(signals, "_taken", None)
    assert signals.after_an_interrupt(0.3) is False
