"""A stop request's rules in one process (``pympi_gpu.cli.signals``): one Ctrl-C delivered twice is one
request; the exit statuses; the grace period, read from the environment and stretched by a slow step.
Stop requests sent to real jobs: tests/cli/test_stop_signals.py, test_interrupt.py, test_stop_launchers.py.
"""

from __future__ import annotations

import os
import signal
import time


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
