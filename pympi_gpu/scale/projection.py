"""A projection of a measured study to more nodes: a model, labelled as one.

The model (docs/scaling.md writes it out), per step (per run for ``pympi-pi``):

    T(P) = a + b / P + m(P) * latency + B(P) / bandwidth        (strong)
    T(P) = a + b     + m(P) * latency + B(P) / bandwidth        (weak)

``a + b / P`` is the compute and I/O time of the mean rank, fitted by least
squares to the study's measured phases (``a`` the part that does not shrink
with ``P``: Amdahl's serial work; for a weak study the work per rank is fixed
and the fit is its median); ``m(P)`` and ``B(P)`` are the messages and bytes
each rank sends, fitted as power laws ``c * P**k`` to the measured traffic (held
at the largest measured size's value where only one size sent anything).
Every message is taken to cross the network (none stays in a node), at the
given latency and bandwidth; no imbalance, no contention and no collective
trees are modelled.  The projection is a lower bound on time where the
measured sizes had no such effects, and its use is to show which term grows:
the compute that shrinks with P against messages that do not.

The default network is Frontera's: HDR-100 InfiniBand to each node, 100 Gb/s
(12.5e9 B/s) in a fat tree (TACC Frontera user guide, "System Architecture");
1 microsecond of MPI latency, the order of HDR end-to-end latency (0.6 us by
the switch vendor's figure) plus the MPI library's software overhead.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence

from pympi_gpu.scale.analysis import StudySummary

__all__ = ["Network", "FRONTERA", "Model", "fit", "ProjectedPoint", "project"]


@dataclasses.dataclass(frozen=True)
class Network:
    """Point-to-point cost of one message: ``latency`` seconds plus its bytes over ``bandwidth`` B/s."""

    latency: float
    bandwidth: float
    source: str = ""


FRONTERA = Network(latency=1.0e-6, bandwidth=12.5e9,
                   source="Frontera HDR-100 InfiniBand: 100 Gb/s per node (TACC Frontera user guide); "
                          "1 us MPI latency")


@dataclasses.dataclass(frozen=True)
class Model:
    """The fitted terms: seconds per unit (step or run) and traffic power laws."""

    kind: str
    per: str            # "step" or "run"
    units: float        # steps in a run (1 per run)
    serial: float       # a: seconds per unit that do not shrink with P
    parallel: float     # b: seconds per unit at P = 1 that do
    messages: tuple[float, float]   # (c, k): messages per rank per unit = c * P**k
    bytes: tuple[float, float]      # (c, k): bytes per rank per unit = c * P**k
    fitted_on: tuple[int, ...]      # the rank counts the fit used

    def compute(self, ranks: int) -> float:
        return self.serial + (self.parallel / ranks if self.kind == "strong" else self.parallel)

    def traffic(self, ranks: int) -> tuple[float, float]:
        (cm, km), (cb, kb) = self.messages, self.bytes
        if ranks <= 1:
            return 0.0, 0.0
        return cm * ranks ** km, cb * ranks ** kb

    def time(self, ranks: int, network: Network) -> float:
        """Predicted seconds of the run at ``ranks`` ranks."""
        m, b = self.traffic(ranks)
        return self.units * (self.compute(ranks) + m * network.latency + b / network.bandwidth)


def _power_law(points: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """``(c, k)`` with ``y = c * p**k`` through ``points`` (least squares in log-log); k 0 with one point."""
    pts = [(p, y) for p, y in points if p > 1 and y and y > 0]
    if not pts:
        return 0.0, 0.0
    if len(pts) == 1 or len({p for p, _ in pts}) == 1:
        return statistics.median(y for _, y in pts), 0.0
    xs = [math.log(p) for p, _ in pts]
    ys = [math.log(y) for _, y in pts]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    k = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return math.exp(my - k * mx), k


def fit(summary: StudySummary, ranks: Sequence[int] | None = None) -> Model:
    """The model of ``summary``'s measured points (those of ``ranks`` only, if given).

    Raises ValueError where the records carry no phases (a command without
    them, or an older record) or no point succeeded.
    """
    rows = [p for p in summary.points if p.phases and p.time and (ranks is None or p.ranks in ranks)]
    if not rows:
        raise ValueError("no measured point with phases to fit (run the study with a pympi command "
                         "whose --json record has 'phases' and 'traffic')")
    per = rows[0].traffic_per or "run"
    units = [float(p.steps) if per == "step" and p.steps else 1.0 for p in rows]
    work = [((p.phases.get("compute") or 0.0) + (p.phases.get("io") or 0.0)) / u for p, u in zip(rows, units)]
    if summary.kind == "weak" or len({p.ranks for p in rows}) == 1:
        serial, parallel = 0.0, statistics.median(work)
    else:  # least squares of work = a + b / P
        xs = [1.0 / p.ranks for p in rows]
        mx, my = statistics.fmean(xs), statistics.fmean(work)
        b = sum((x - mx) * (y - my) for x, y in zip(xs, work)) / sum((x - mx) ** 2 for x in xs)
        a = my - b * mx
        if a < 0:  # superlinear measurements: no serial part rather than a negative one
            a, b = 0.0, statistics.fmean(y * p.ranks for y, p in zip(work, rows))
        serial, parallel = a, max(b, 0.0)
    return Model(kind=summary.kind, per=per, units=statistics.median(units), serial=serial, parallel=parallel,
                 messages=_power_law([(p.ranks, p.messages_per_rank) for p in rows]),
                 bytes=_power_law([(p.ranks, p.bytes_per_rank) for p in rows]),
                 fitted_on=tuple(p.ranks for p in rows))


@dataclasses.dataclass(frozen=True)
class ProjectedPoint:
    """One predicted size: seconds, and speedup and efficiency against the model's own baseline."""

    nodes: int
    ranks: int
    time: float
    compute: float
    communication: float
    speedup: float
    efficiency: float


def project(model: Model, nodes: Sequence[int], tasks_per_node: int, network: Network,
            baseline_ranks: int) -> tuple[ProjectedPoint, ...]:
    """Predicted time, speedup and efficiency at each node count (``tasks_per_node`` ranks each)."""
    base = model.time(baseline_ranks, network)
    out = []
    for n in nodes:
        p = n * tasks_per_node
        t = model.time(p, network)
        m, b = model.traffic(p)
        ideal = p / baseline_ranks
        ratio = base / t
        speedup = ratio if model.kind == "strong" else ideal * ratio
        out.append(ProjectedPoint(nodes=n, ranks=p, time=t, compute=model.units * model.compute(p),
                                  communication=model.units * (m * network.latency + b / network.bandwidth),
                                  speedup=speedup, efficiency=speedup / ideal))
    return tuple(out)
