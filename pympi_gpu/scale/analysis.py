"""From runs to a scaling table: median times, speedup, parallel efficiency.

Strong scaling (fixed total work): speedup ``S = t_b / t_p`` and efficiency
``E = S / (p / p_b)`` against the smallest successful point ``b``.
Weak scaling (fixed work per rank): efficiency is time-based, ``E = t_b / t_p``,
and the scaled speedup is ``(p / p_b) * t_b / t_p``.  Times are the command's
own ``wall_time`` (seconds; launch and start-up excluded), the median over
repeats.

Where the time goes: the records' ``phases`` (compute, communication,
waiting, I/O: seconds, mean over ranks) and ``traffic`` (bytes and messages
each rank sent per step, or per run) are carried per size as the median over
repeats.  The Karp-Flatt metric, the experimentally determined serial
fraction ``e = (1/S - 1/p) / (1 - 1/p)`` with ``p`` the ranks relative to the
baseline and ``S`` the (scaled) speedup, says whether efficiency falls for
serial work (``e`` steady) or for overhead that grows with ``p`` (``e``
rising).  A size whose efficiency stays above 100% even when its slowest
repeat is set against the baseline's fastest is flagged ``superlinear``.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from typing import Any

from pympi_gpu.scale.points import Point, cores_used, oversubscribed

__all__ = ["KINDS", "PHASES", "PointSummary", "StudySummary", "summarise", "karp_flatt"]

KINDS = ("strong", "weak")
PHASES = ("compute", "communication", "waiting", "io")  # as pympi_gpu.run.phases.PHASES


@dataclasses.dataclass(frozen=True)
class PointSummary:
    """One row of the table.

    ``status`` is ``"ok"`` (every repeat ran), ``"partial"`` (some did),
    ``"failed"`` (none did; ``error`` says why) or ``"missing"`` (not run
    yet).  Times in seconds, throughput in work units per second.
    """

    ranks: int
    nodes: int | None
    tasks_per_node: int | None
    status: str
    repeats: int
    times: tuple[float, ...]
    time: float | None
    time_min: float | None
    time_max: float | None
    elapsed: float | None
    speedup: float | None
    ideal: float | None
    efficiency: float | None
    throughput: float | None
    throughput_per_rank: float | None
    launcher: str | None
    error: str | None = None
    returncode: int | None = None
    stderr_tail: str = ""
    threads_per_rank: int | None = None
    cores: int | None = None
    oversubscribed: bool = False
    backend: str | None = None
    phases: dict[str, float] | None = None
    phases_max: dict[str, float] | None = None
    traffic_per: str | None = None
    bytes_per_rank: float | None = None
    messages_per_rank: float | None = None
    steps: int | None = None
    serial_fraction: float | None = None
    superlinear: bool = False
    #: this node's 1-minute load average before the runs (median): what else was running
    load: float | None = None
    #: work units of one run, throughput x wall_time (atom-steps, interactions, samples; median)
    work: float | None = None


@dataclasses.dataclass(frozen=True)
class StudySummary:
    """A whole study: what ran, against which baseline, and the table."""

    kind: str
    command: tuple[str, ...]
    app: str | None
    work_unit: str | None
    record_schema: str | None
    baseline_ranks: int | None
    repeat: int
    points: tuple[PointSummary, ...]
    provenance: dict[str, Any] | None
    threads_per_rank: int | None = None
    cores_per_node: int | None = None

    @property
    def failed(self) -> tuple[PointSummary, ...]:
        return tuple(p for p in self.points if p.status in ("failed", "partial"))

    @property
    def load_range(self) -> tuple[float, float] | None:
        """The lowest and highest load average the sizes ran under (None where not recorded)."""
        loads = [p.load for p in self.points if p.load is not None]
        return (min(loads), max(loads)) if loads else None

    @property
    def mixed_backends(self) -> tuple[str, ...]:
        """The backends the points ran on, when they differ (a study should hold it fixed)."""
        names = sorted({p.backend for p in self.points if p.backend})
        return tuple(names) if len(names) > 1 else ()

    @property
    def complete(self) -> bool:
        return all(p.status == "ok" for p in self.points)

    @property
    def superlinear(self) -> tuple[PointSummary, ...]:
        return tuple(p for p in self.points if p.superlinear)


def karp_flatt(speedup: float | None, p: float | None) -> float | None:
    """The experimentally determined serial fraction at ``p`` times the baseline's ranks (None at p <= 1)."""
    if speedup is None or p is None or p <= 1 or speedup <= 0:
        return None
    return (1.0 / speedup - 1.0 / p) / (1.0 - 1.0 / p)


def _median_of(records: list[dict[str, Any]], *path: str) -> float | None:
    values = []
    for r in records:
        for key in path:
            r = r.get(key) if isinstance(r, dict) else None
        if isinstance(r, (int, float)) and not isinstance(r, bool):
            values.append(float(r))
    return statistics.median(values) if values else None


def _where_time_goes(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Median over repeats of each phase (mean and max over ranks) and of the traffic per rank."""
    if not any(isinstance(r.get("phases"), dict) for r in records):
        return {}
    mean = {ph: _median_of(records, "phases", ph, "mean") for ph in PHASES}
    high = {ph: _median_of(records, "phases", ph, "max") for ph in PHASES}
    per = next((r["traffic"].get("per") for r in records if isinstance(r.get("traffic"), dict)), None)
    steps = _median_of(records, "steps")
    return dict(phases=mean, phases_max=high, traffic_per=per,
                bytes_per_rank=_median_of(records, "traffic", "bytes", "mean"),
                messages_per_rank=_median_of(records, "traffic", "messages", "mean"),
                steps=int(steps) if steps is not None else None)


def _latest(runs: Sequence[dict[str, Any]], repeat: int) -> dict[str, dict[int, dict[str, Any]]]:
    """point key -> repeat -> the last stored run (a later success supersedes a failure)."""
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for r in runs:
        if 0 <= r.get("repeat", -1) < repeat:
            slot = out.setdefault(r["point"], {})
            if not (slot.get(r["repeat"], {}).get("ok") and not r.get("ok")):
                slot[r["repeat"]] = r
    return out


def _point_row(p: Point, got: dict[int, dict[str, Any]], repeat: int, threads: int | None,
               cores_per_node: int | None) -> dict[str, Any]:
    """One point's row of the table from its stored runs by repeat (pure)."""
    ok = [got[i] for i in sorted(got) if got[i].get("ok")]
    bad = [got[i] for i in sorted(got) if not got[i].get("ok")]
    times = tuple(float(r["record"]["wall_time"]) for r in ok)
    status = "missing" if not got else "failed" if not ok else "ok" if len(ok) == repeat else "partial"
    err = bad[-1] if bad else None
    thr = [float(r["record"]["throughput"]) for r in ok if r["record"].get("throughput") is not None]
    seen = [int(r["record"]["threads_per_rank"]) for r in ok if r["record"].get("threads_per_rank")]
    nthreads = max(seen) if seen else threads
    backends = sorted({str(r["record"]["backend"]) for r in ok if r["record"].get("backend")})
    loads = [float(r["load"]) for r in ok if r.get("load") is not None]
    return dict(
        backend=",".join(backends) or None, threads_per_rank=nthreads,
        cores=cores_used(p, nthreads) if nthreads else None,
        oversubscribed=bool(nthreads) and oversubscribed(p, nthreads, cores_per_node),
        ranks=p.ranks, nodes=p.nodes, tasks_per_node=p.tasks_per_node, status=status, repeats=len(ok), times=times,
        time=statistics.median(times) if times else None, time_min=min(times) if times else None,
        time_max=max(times) if times else None,
        elapsed=statistics.median(float(r["elapsed"]) for r in ok) if ok else None,
        load=statistics.median(loads) if loads else None,
        throughput=statistics.median(thr) if thr else None,
        work=statistics.median(float(r["record"]["throughput"]) * float(r["record"]["wall_time"]) for r in ok
                               if r["record"].get("throughput") is not None) if thr else None,
        throughput_per_rank=statistics.median(thr) / p.ranks if thr else None,
        launcher=(ok or bad)[-1].get("launcher") if got else None,
        error=err.get("error") if err else None, returncode=err.get("returncode") if err else None,
        stderr_tail=err.get("stderr_tail", "") if err else "",
        **_where_time_goes([r["record"] for r in ok]))


def _scaling(rows: list[dict[str, Any]], kind: str) -> dict[str, Any] | None:
    """Speedup, efficiency, Karp-Flatt fraction and superlinearity of each row against the first timed one."""
    base = next((r for r in rows if r["time"]), None)
    for r in rows:
        r["speedup"] = r["ideal"] = r["efficiency"] = None
        if base is None or not r["time"]:
            continue
        ideal = r["ranks"] / base["ranks"]
        ratio = base["time"] / r["time"]
        r["ideal"] = ideal
        if kind == "strong":
            r["speedup"], r["efficiency"] = ratio, ratio / ideal
        else:
            r["speedup"], r["efficiency"] = ideal * ratio, ratio
        r["serial_fraction"] = karp_flatt(r["speedup"], ideal)
        # the most pessimistic pairing of repeats: the baseline's fastest against this size's slowest
        worst = base["time_min"] / r["time_max"]
        r["superlinear"] = r is not base and (worst / ideal if kind == "strong" else worst) > 1.0
    return base


def summarise(runs: Sequence[dict[str, Any]], points: Sequence[Point], repeat: int,
              kind: str, command: Sequence[str], *, threads: int | None = None,
              cores_per_node: int | None = None) -> StudySummary:
    """The scaling table of ``points`` from the stored ``runs`` (pure).

    ``threads`` is the threads per rank the study fixed; a point's
    ``threads_per_rank`` is what its runs' records report, when they do.
    ``cores`` is cores busy per node (ranks per node x threads), and
    ``oversubscribed`` says that is more than ``cores_per_node``.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    latest = _latest(runs, repeat)
    rows = [_point_row(p, latest.get(p.key, {}), repeat, threads, cores_per_node) for p in points]
    base = _scaling(rows, kind)
    first_ok = next((r for p in points for i, r in sorted(latest.get(p.key, {}).items()) if r.get("ok")), None)
    rec = first_ok["record"] if first_ok else {}
    return StudySummary(
        kind=kind, command=tuple(command), app=rec.get("app"), work_unit=rec.get("work_unit"),
        record_schema=rec.get("schema"), baseline_ranks=base["ranks"] if base else None,
        repeat=repeat, points=tuple(PointSummary(**r) for r in rows),
        provenance=rec.get("provenance"), threads_per_rank=threads, cores_per_node=cores_per_node)
