"""Where the time goes (pympi_gpu.run.phases): the phase clock accumulates, and counts deferred to the end of
a compiled call join it once settled.  Measured in the n-body records: tests/cli/test_phases.py."""

from __future__ import annotations

import time


def test_phase_clock_accumulates():
    from pympi_gpu.run.phases import PHASES, PhaseClock

    clock = PhaseClock()
    with clock.phase("waiting"):
        time.sleep(0.02)
    clock.add("io", 0.5)
    clock.sent(100)
    clock.sent(50, messages=2)
    assert clock.seconds["waiting"] >= 0.02 and clock.seconds["io"] == 0.5
    assert (clock.bytes, clock.messages) == (150, 3)
    clock.reset()
    assert clock.seconds == dict.fromkeys(PHASES, 0.0) and clock.bytes == clock.messages == 0


def test_deferred_counts_join_the_clock_when_it_is_settled():
    """Counts kept elsewhere (a kernel's tally) join at ``settle``; ``reset`` drops them; the clock holds
    their keeper weakly."""
    import gc

    from pympi_gpu.run.phases import PhaseClock

    class Kept:
        def __init__(self, clock):
            self.clock, self.n = clock, 0
            clock.defer(self.move)

        def move(self):
            self.clock.sent(8 * self.n, self.n)
            self.clock.add("waiting", 0.5 * self.n)
            self.n = 0

    clock = PhaseClock()
    kept = Kept(clock)
    kept.n = 3
    assert (clock.bytes, clock.messages) == (0, 0)
    clock.settle()
    assert (clock.bytes, clock.messages, clock.seconds["waiting"]) == (24, 3, 1.5) and kept.n == 0
    kept.n = 2
    clock.reset()
    assert (clock.bytes, clock.messages, clock.seconds["waiting"]) == (0, 0, 0.0) and kept.n == 0
    kept.n = 1
    clock.settle()
    assert clock.messages == 1
    del kept
    gc.collect()
    clock.settle()  # its keeper gone: nothing to add, and no error
    assert clock.messages == 1
