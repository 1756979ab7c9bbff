"""The pi estimates' result records: frozen dataclasses of plain values."""

from __future__ import annotations

import dataclasses
import math

from pympi_gpu.run.phases import Phases, Traffic
from pympi_gpu.run.records import Provenance

__all__ = ["RankShare", "PiResult", "PiRun"]


@dataclasses.dataclass(frozen=True)
class RankShare:
    """What one rank did: its share of the work and how long it took."""

    rank: int
    host: str
    start: int
    count: int
    compute_time: float


@dataclasses.dataclass(frozen=True)
class PiResult:
    """One method's estimate of pi.

    ``n`` is the number of samples (Monte Carlo) or intervals (trapezoid);
    times are in seconds, the maximum over ranks; throughputs in items/s.
    """

    method: str
    estimate: float
    error: float
    stderr: float | None
    n: int
    hits: int | None
    compute_time: float
    reduce_time: float
    wall_time: float
    throughput: float
    throughput_per_rank: float
    shares: tuple[RankShare, ...] = ()


@dataclasses.dataclass(frozen=True)
class PiRun:
    """A ``pympi-pi`` run: one or two methods, with their provenance."""

    samples: int
    per_rank: bool
    ranks: int
    backend: str
    seed: int
    results: tuple[PiResult, ...]
    wall_time: float
    provenance: Provenance | None = None
    phases: Phases | None = None
    traffic: Traffic | None = None

    @property
    def throughput(self) -> float:
        """Items per second over the whole run (all methods)."""
        return sum(r.n for r in self.results) / self.wall_time if self.wall_time > 0 else math.inf
