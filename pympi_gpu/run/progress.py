"""Progress as plain lines, for runs whose stderr is a log file, not a terminal.

Under ``mpiexec`` or in a batch job, a progress bar is either invisible or
garbage in the log; a long run then says nothing for minutes.  A
:class:`LineProgress` writes one line every ``interval`` seconds (10 by
default; the command line reads ``PYMPI_PROGRESS_INTERVAL``), with the rate
and an estimate of the time left.  The command line creates one on rank 0 only.
"""

from __future__ import annotations

import time
from typing import Callable, TextIO

__all__ = ["DEFAULT_INTERVAL", "LineProgress"]

DEFAULT_INTERVAL = 10.0


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, s = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {s:02d} s"
    hours, m = divmod(minutes, 60)
    return f"{hours} h {m:02d} min"


class LineProgress:
    """Call it as ``on_step(step, last)``; it writes a line when ``interval`` has passed.

    ``stream`` receives lines such as
    ``pympi-nbody: step 40/100 (40%), 3.91 steps/s, about 15 s left``.
    """

    def __init__(self, stream: TextIO, prog: str, *, interval: float = DEFAULT_INTERVAL,
                 unit: str = "step", clock: Callable[[], float] = time.monotonic):
        self.stream, self.prog, self.interval, self.unit, self.clock = stream, prog, interval, unit, clock
        self.lines = 0
        self._t0 = clock()
        self._first: int | None = None
        self._next = self._t0 + interval

    def __call__(self, step: int, last: int) -> None:
        now = self.clock()
        if self._first is None:  # a restarted run starts above 0: count from the first step seen
            self._first = step - 1
        if now < self._next:
            return
        self._next = now + self.interval
        done = step - self._first
        rate = done / (now - self._t0) if now > self._t0 else 0.0
        pct = f" ({100.0 * step / last:.0f}%)" if last else ""
        left = f", about {_duration((last - step) / rate)} left" if rate > 0 and last >= step else ""
        self.stream.write(f"{self.prog}: {self.unit} {step}/{last}{pct}, {rate:.3g} {self.unit}s/s{left}\n")
        self.stream.flush()
        self.lines += 1
