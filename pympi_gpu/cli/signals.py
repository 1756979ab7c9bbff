"""Signals that ask a run to stop: SIGTERM (Slurm, before its time limit) and SIGINT (Ctrl-C).

A first signal is a request: the run's loop sees :class:`Stop` turn true, every
rank stops after the current step (an agreement, so that none is left waiting),
writes its checkpoint and says where it stopped, exit status 130 for Ctrl-C.
A second Ctrl-C ends the process at once with one line (rank 0's), without
unwinding through MPI: no traceback, no MPI library noise; a checkpoint being
written at that moment stays as it was (files are written beside and renamed).
The same keypress can reach a rank twice, from the terminal and forwarded by
the launcher: a repeat within :data:`REPEAT_WINDOW` seconds counts once.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from pympi_gpu.cli.common import world_rank_hint

__all__ = ["Stop", "REPEAT_WINDOW", "INTERRUPTED"]

#: seconds within which a second SIGINT is the same Ctrl-C delivered twice
REPEAT_WINDOW = 0.25

#: the exit status of a run stopped by Ctrl-C (128 + SIGINT), as shells report it
INTERRUPTED = 128 + signal.SIGINT


class Stop:
    """True once SIGTERM or SIGINT came; :attr:`signal` is its number.

    Installed by :meth:`install` (from the main thread), put back by
    :meth:`restore`.  ``prog`` names the command in the line a second Ctrl-C
    prints.  The signals are read by a thread from Python's wakeup file
    descriptor, where the interpreter writes each one as it arrives: so a
    second Ctrl-C acts while the main thread is inside a compiled kernel
    (the long ones release the GIL), not only when the kernel returns.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, prog: str = "pympi", twice: str = "nothing more written"):
        self.prog, self.twice = prog, twice
        self.signal = None
        self.when = 0.0
        self.previous = {}
        self._pipe = None
        self._wakeup = -1

    def install(self) -> Stop:
        read, write = os.pipe()
        os.set_blocking(write, False)
        self._pipe = (read, write)
        self._wakeup = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        # Python-level handlers must be set for the wakeup descriptor to be written; the thread acts.
        self.previous = {s: signal.signal(s, _note) for s in self.SIGNALS}
        threading.Thread(target=self._watch, args=(read,), name="pympi-signals", daemon=True).start()
        return self

    def restore(self) -> None:
        if self._pipe is None:
            return
        for s, handler in self.previous.items():
            signal.signal(s, handler)
        signal.set_wakeup_fd(self._wakeup)
        os.close(self._pipe[1])  # the thread reads end-of-file and ends; it closes the read end
        self.previous, self._pipe = {}, None

    def _watch(self, fd: int) -> None:
        try:
            while data := os.read(fd, 64):
                for signum in data:
                    if signum in self.SIGNALS:
                        self.arrived(signum)
        finally:
            os.close(fd)

    def arrived(self, signum: int) -> None:
        """One signal: the first asks for a stop; a second Ctrl-C ends the process at once."""
        now = time.monotonic()
        if self.signal is None:
            self.signal, self.when = signum, now
        elif signum == signal.SIGINT and now - self.when > REPEAT_WINDOW:
            if world_rank_hint() == 0:
                sys.stderr.write(f"{self.prog}: interrupted twice: stopped at once, {self.twice}\n")
                sys.stderr.flush()
            os._exit(INTERRUPTED)

    def requested(self) -> int:
        """The signal number that asked for the stop, or 0."""
        return int(self.signal or 0)

    def __bool__(self):
        return self.signal is not None


def _note(signum, frame) -> None:
    """The Python-level handler: nothing to do (the watching thread acts), but no KeyboardInterrupt."""
