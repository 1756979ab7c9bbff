"""Where a run's time goes, and what it sends: measured per rank, summarised over ranks.

Each rank keeps a :class:`PhaseClock`: seconds in each of :data:`PHASES` and
the bytes and messages it handed to MPI.  The phases are

``compute``        the kernels and the work around them (integration, packing)
``communication``  time inside message calls (posting sends and receives,
                   collectives whose ranks all arrived, copies to and from
                   pinned buffers for a host-staged transport)
``waiting``        time blocked until the other ranks catch up: in the
                   barrier before a reduction, or in the wait for a halo or
                   ring message while the network is idle, that is the load
                   imbalance
``io``             checkpoints, trajectories, thermo files

Traffic is what the program hands to MPI: the send buffer of each
point-to-point send and each collective call counts once, in bytes and as one
message; how the library moves it (trees, rings, eager or rendezvous) is not
seen.  :func:`summarise` turns the clocks of all ranks into a
:class:`Phases` and a :class:`Traffic` record (collective).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import weakref
from collections.abc import Iterator

import numpy as np

__all__ = ["PHASES", "PhaseClock", "Spread", "Phases", "Traffic", "summarise"]

PHASES = ("compute", "communication", "waiting", "io")


class PhaseClock:
    """One rank's seconds per phase and its traffic; not thread-safe, not collective.

    Counts kept elsewhere in the meantime (by compiled kernels, in an array
    they add to) join the clock when it is settled: :meth:`defer` registers
    what moves them over, :meth:`settle` (before the clock is read) and
    :meth:`reset` (which drops them) run it.
    """

    def __init__(self):
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.bytes = 0
        self.messages = 0
        self._deferred: list = []

    def defer(self, settle) -> None:
        """``settle()``, a bound method, moves counts its object keeps onto this clock (and zeroes them
        there); held weakly, so the clock does not keep that object alive."""
        self._deferred.append(weakref.WeakMethod(settle))

    def settle(self) -> None:
        """Every deferred count onto the clock: call before reading it."""
        for ref in self._deferred:
            settle = ref()
            if settle is not None:
                settle()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Add the time the block takes to phase ``name``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - t0

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] += seconds

    def sent(self, nbytes: int, messages: int = 1) -> None:
        """Count ``messages`` handed to MPI carrying ``nbytes`` in all."""
        self.bytes += int(nbytes)
        self.messages += int(messages)

    def reset(self) -> None:
        """Zero the clock, the counts deferred to it included (they stay registered)."""
        self.settle()
        deferred = self._deferred
        self.__init__()
        self._deferred = deferred


@dataclasses.dataclass(frozen=True)
class Spread:
    """A per-rank quantity over the ranks: the largest and the mean."""

    max: float
    mean: float


@dataclasses.dataclass(frozen=True)
class Phases:
    """Seconds in each phase over the timed region, max and mean over ranks."""

    compute: Spread
    communication: Spread
    waiting: Spread
    io: Spread


@dataclasses.dataclass(frozen=True)
class Traffic:
    """Bytes and messages each rank sent, per ``per`` (``"step"`` or ``"run"``), max and mean over ranks."""

    per: str
    bytes: Spread
    messages: Spread


def summarise(comm, clock: PhaseClock, steps: int | None = None) -> tuple[Phases, Traffic]:
    """The phases and traffic of every rank's ``clock``; collective over comm.

    ``steps``: traffic per step over that many steps; None (pi) per run.
    """
    from mpi4py import MPI

    per = max(steps, 1) if steps is not None else 1
    mine = np.array([clock.seconds[p] for p in PHASES] + [clock.bytes / per, clock.messages / per])
    high, total = np.empty_like(mine), np.empty_like(mine)
    comm.Allreduce(mine, high, op=MPI.MAX)
    comm.Allreduce(mine, total, op=MPI.SUM)
    mean = total / comm.Get_size()
    spreads = [Spread(float(h), float(m)) for h, m in zip(high, mean)]
    phases = Phases(*spreads[:len(PHASES)])
    traffic = Traffic("step" if steps is not None else "run", *spreads[len(PHASES):])
    return phases, traffic
