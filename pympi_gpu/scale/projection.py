"""A projection of a measured study to more nodes: a model, labelled as one.

The model (docs/scaling.md writes it out), per step (per run for ``pympi-pi``):

    T(P) = a + b / P + m(P) * latency + B(P) / bandwidth        (strong)
    T(P) = a + b     + m(P) * latency + B(P) / bandwidth        (weak)

``a + b / P`` is the compute and I/O time of the mean rank.  With floor probes
(:mod:`pympi_gpu.scale.probes`: the command at small sizes per rank) it is
``f + w * n``, ``n = W / P`` the work units each rank does per step (atoms per
rank for LJ, its interactions for gravity), so ``a = f``, the per-step floor,
and ``b = w * W``; ``f`` and ``w`` are fitted to the probes and the study's
sizes together by :func:`fit_floor`.  Without probes (``pympi-pi``, whose
run has no steps; ``--no-floor``) ``a`` and ``b`` are fitted by least squares
over the measured rank counts (``a`` the part that does not shrink with
``P``: Amdahl's serial work; for a weak study the work per rank is fixed and
the fit is its median), and a study on a few ranks, many atoms each, cannot
see the floor in them.  ``m(P)`` and ``B(P)`` are the messages and bytes
each rank sends, fitted as power laws ``c * P**k`` to the measured traffic (held
at the largest measured size's value where only one size sent anything).
Every message is taken to cross the network (none stays in a node), at the
given latency and bandwidth; no imbalance, no contention and no collective
trees are modelled, and the traffic of a study on a few ranks is carried to
many as it was measured (docs/scaling.md says what that misses).  Its use is
to show which term grows: the compute that shrinks with P against the floor
and the messages that do not.

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

from pympi_gpu.scale.analysis import PointSummary, StudySummary

__all__ = ["Network", "FRONTERA", "Model", "fit_floor", "with_floor", "fit", "ProjectedPoint", "project"]


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
    """The fitted terms: seconds per unit (step or run) and traffic power laws.

    With a floor (``floor`` not None) ``serial`` is the floor ``f`` and
    ``parallel`` is ``per_unit * work``: ``w`` times the work units of a
    step (the system's in a strong study, a rank's in a weak one).
    ``floor_fitted_on`` holds each point of that fit: ranks, work units per
    rank per unit, seconds per unit; ``floor_source`` says where ``serial``
    and ``parallel`` came from.
    """

    kind: str
    per: str            # "step" or "run"
    units: float        # steps in a run (1 per run)
    serial: float       # a: seconds per unit that do not shrink with P
    parallel: float     # b: seconds per unit at P = 1 that do
    messages: tuple[float, float]   # (c, k): messages per rank per unit = c * P**k
    bytes: tuple[float, float]      # (c, k): bytes per rank per unit = c * P**k
    fitted_on: tuple[int, ...]      # the rank counts the fit used
    floor: float | None = None      # f: seconds per unit each rank spends whatever its size
    per_unit: float | None = None   # w: seconds per work unit (atom-step, interaction) of one rank
    work: float | None = None       # W: work units per unit, the system's (strong) or a rank's (weak)
    work_unit: str | None = None
    floor_fitted_on: tuple[tuple[int, float, float], ...] = ()
    floor_source: str = ""

    @classmethod
    def from_dict(cls, doc: dict) -> Model:
        """The model of a study's JSON (``projection.model``)."""
        doc = dict(doc)
        for key in ("messages", "bytes", "fitted_on"):
            doc[key] = tuple(doc[key])
        doc["floor_fitted_on"] = tuple(tuple(p) for p in doc.get("floor_fitted_on", ()))
        return cls(**doc)

    def compute(self, ranks: int) -> float:
        return self.serial + (self.parallel / ranks if self.kind == "strong" else self.parallel)

    @property
    def size_unit(self) -> str:
        """What ``per_rank`` counts: atoms for LJ (atom-steps per step), else the work unit."""
        unit = self.work_unit or "work units"
        return unit.removesuffix("-steps") + "s" if self.per == "step" and unit.endswith("-steps") else unit

    def per_rank(self, ranks: int) -> float | None:
        """Work units each rank does per unit at ``ranks`` ranks (None without a floor fit)."""
        if self.work is None:
            return None
        return self.work / ranks if self.kind == "strong" else self.work

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


def fit_floor(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """``(f, w)`` of ``y = f + w * n`` through ``points`` ``(n, y)``, each weighted by its own ``y``.

    The residuals are relative (``(f + w n - y) / y``): the points span a
    hundredfold in size, and plain least squares would fit the largest and
    leave ``f`` to their noise, where the smallest are what measures it.
    Neither term is negative: where the best line has ``f < 0`` (the small
    sizes cost less per unit than the large ones, a cache effect, and no
    floor shows above it) ``f`` is 0 and ``w`` the best through the origin.

    Raises
    ------
    ValueError
        Fewer than two distinct ``n`` with ``y > 0``.
    """
    pts = [(float(n), float(y)) for n, y in points if y > 0]
    if len({n for n, _ in pts}) < 2:
        raise ValueError("the floor needs points at two sizes per rank or more")
    u = [1.0 / y for _, y in pts]
    suu = sum(v * v for v in u)
    snu = sum(n * v * v for (n, _), v in zip(pts, u))
    snn = sum(n * n * v * v for (n, _), v in zip(pts, u))
    su, sn = sum(u), sum(n * v for (n, _), v in zip(pts, u))
    det = suu * snn - snu * snu
    f, w = (su * snn - snu * sn) / det, (suu * sn - snu * su) / det
    if f < 0:
        return 0.0, sn / snn
    if w < 0:
        return su / suu, 0.0
    return f, w


def _unit_time(p: PointSummary, units: float) -> float:
    """The mean rank's compute and I/O seconds per unit of a measured point."""
    return ((p.phases.get("compute") or 0.0) + (p.phases.get("io") or 0.0)) / units


def with_floor(model: Model, points: Sequence[tuple[int, float, float]], work: float, source: str) -> Model:
    """``model`` with its compute from the floor fitted to ``points``: ``(ranks, n, seconds)`` per unit.

    ``work`` is the work units per unit the projected runs do (the system's
    in a strong study, a rank's in a weak one); ``source`` says where the
    points came from.
    """
    f, w = fit_floor([(n, y) for _, n, y in points])
    return dataclasses.replace(model, serial=f, parallel=w * work, floor=f, per_unit=w, work=work,
                               floor_fitted_on=tuple((int(r), float(n), float(y)) for r, n, y in points),
                               floor_source=source)


def fit(summary: StudySummary, ranks: Sequence[int] | None = None,
        probes: Sequence[PointSummary] = ()) -> Model:
    """The model of ``summary``'s measured points (those of ``ranks`` only, if given).

    With ``probes`` (the floor probes' points) the compute is ``f + w * n``,
    fitted by :func:`fit_floor` to the probes and the study's points
    together; without them, or where they leave fewer than two sizes per
    rank, ``a + b / P`` over the study's rank counts (``floor_source`` says
    which, and why).  The traffic is fitted to the study's points only (the
    probes run at one rank count).

    Raises ValueError where the records carry no phases (a command without
    them, or an older record) or no point succeeded.
    """
    rows = [p for p in summary.points if p.phases and p.time and (ranks is None or p.ranks in ranks)]
    if not rows:
        raise ValueError("no measured point with phases to fit (run the study with a pympi command "
                         "whose --json record has 'phases' and 'traffic')")
    per = rows[0].traffic_per or "run"
    units = [float(p.steps) if per == "step" and p.steps else 1.0 for p in rows]
    work = [_unit_time(p, u) for p, u in zip(rows, units)]
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
    model = Model(kind=summary.kind, per=per, units=statistics.median(units), serial=serial, parallel=parallel,
                  messages=_power_law([(p.ranks, p.messages_per_rank) for p in rows]),
                  bytes=_power_law([(p.ranks, p.bytes_per_rank) for p in rows]),
                  fitted_on=tuple(p.ranks for p in rows), work_unit=summary.work_unit,
                  floor_source=f"no floor: a + b / P fitted over {len(rows)} measured rank count(s)")
    return _floor_of(model, rows, probes) if probes else model


def _floor_of(model: Model, rows: Sequence[PointSummary], probes: Sequence[PointSummary]) -> Model:
    """``model`` with the floor fitted to ``probes`` and ``rows``, or as it is with the reason why not."""
    def point_of(p):  # (ranks, work units per rank per unit, seconds per unit)
        u = float(p.steps) if model.per == "step" else 1.0
        return p.ranks, p.work / u / p.ranks, _unit_time(p, u)

    def usable(p):
        return p.phases and p.time and p.work and (p.steps or model.per != "step")

    ok = [point_of(p) for p in probes if usable(p)]
    study = [point_of(p) for p in rows if usable(p)]
    if not ok or not study:
        return dataclasses.replace(model, floor_source=f"{model.floor_source} (the floor probes gave {len(ok)} "
                                                       f"of {len(probes)} point(s))")
    # the work of a step: the system's (n x P, the same at every size of a strong study) or a rank's
    work = statistics.median(n * r if model.kind == "strong" else n for r, n, _ in study)
    sizes = ", ".join(f"{n:,.0f}" for _, n, _ in ok + study)
    try:
        return with_floor(model, ok + study, work, (
            f"f + w n fitted to {len(ok)} floor probe(s) at {ok[0][0]} ranks and {len(study)} study size(s): "
            f"n = {sizes} {model.size_unit} per rank; relative least squares of the mean rank's compute + I/O "
            f"seconds per {model.per}"))
    except ValueError as exc:
        return dataclasses.replace(model, floor_source=f"{model.floor_source} ({exc})")


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
    per_rank: float | None = None   # work units per rank per unit (atoms per rank for LJ); None without a floor
    floor: float | None = None      # seconds of ``time`` that are the floor; None without one


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
                                  speedup=speedup, efficiency=speedup / ideal, per_rank=model.per_rank(p),
                                  floor=None if model.floor is None else model.units * model.floor))
    return tuple(out)
