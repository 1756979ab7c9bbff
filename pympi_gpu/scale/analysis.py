"""From runs to a scaling table: median times, speedup, parallel efficiency.

Strong scaling (fixed total work): speedup ``S = t_b / t_p`` and efficiency
``E = S / (p / p_b)`` against the smallest successful point ``b``.
Weak scaling (fixed work per rank): efficiency is time-based, ``E = t_b / t_p``,
and the scaled speedup is ``(p / p_b) * t_b / t_p``.  Times are the command's
own ``wall_time`` (seconds; launch and start-up excluded), the median over
repeats.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from typing import Any

from pympi_gpu.scale.points import Point, cores_used, oversubscribed

__all__ = ["KINDS", "PointSummary", "StudySummary", "summarise"]

KINDS = ("strong", "weak")


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
    def mixed_backends(self) -> tuple[str, ...]:
        """The backends the points ran on, when they differ (a study should hold it fixed)."""
        names = sorted({p.backend for p in self.points if p.backend})
        return tuple(names) if len(names) > 1 else ()

    @property
    def complete(self) -> bool:
        return all(p.status == "ok" for p in self.points)


def _latest(runs: Sequence[dict[str, Any]], repeat: int) -> dict[str, dict[int, dict[str, Any]]]:
    """point key -> repeat -> the last stored run (a later success supersedes a failure)."""
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for r in runs:
        if 0 <= r.get("repeat", -1) < repeat:
            slot = out.setdefault(r["point"], {})
            if not (slot.get(r["repeat"], {}).get("ok") and not r.get("ok")):
                slot[r["repeat"]] = r
    return out


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
    rows = []
    first_ok = None
    for p in points:
        got = latest.get(p.key, {})
        ok = [got[i] for i in sorted(got) if got[i].get("ok")]
        bad = [got[i] for i in sorted(got) if not got[i].get("ok")]
        if ok and first_ok is None:
            first_ok = ok[0]
        times = tuple(float(r["record"]["wall_time"]) for r in ok)
        status = ("missing" if not got else "failed" if not ok
                  else "ok" if len(ok) == repeat else "partial")
        err = bad[-1] if bad else None
        thr = [float(r["record"]["throughput"]) for r in ok if r["record"].get("throughput") is not None]
        seen = [int(r["record"]["threads_per_rank"]) for r in ok if r["record"].get("threads_per_rank")]
        nthreads = max(seen) if seen else threads
        backends = sorted({str(r["record"]["backend"]) for r in ok if r["record"].get("backend")})
        rows.append(dict(
            backend=",".join(backends) or None,
            threads_per_rank=nthreads,
            cores=cores_used(p, nthreads) if nthreads else None,
            oversubscribed=bool(nthreads) and oversubscribed(p, nthreads, cores_per_node),
            ranks=p.ranks, nodes=p.nodes, tasks_per_node=p.tasks_per_node, status=status,
            repeats=len(ok), times=times,
            time=statistics.median(times) if times else None,
            time_min=min(times) if times else None, time_max=max(times) if times else None,
            elapsed=statistics.median(float(r["elapsed"]) for r in ok) if ok else None,
            throughput=statistics.median(thr) if thr else None,
            throughput_per_rank=statistics.median(thr) / p.ranks if thr else None,
            launcher=(ok or bad)[-1].get("launcher") if got else None,
            error=err.get("error") if err else None,
            returncode=err.get("returncode") if err else None,
            stderr_tail=err.get("stderr_tail", "") if err else ""))
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
    rec = first_ok["record"] if first_ok else {}
    return StudySummary(
        kind=kind, command=tuple(command), app=rec.get("app"), work_unit=rec.get("work_unit"),
        record_schema=rec.get("schema"), baseline_ranks=base["ranks"] if base else None,
        repeat=repeat, points=tuple(PointSummary(**r) for r in rows),
        provenance=rec.get("provenance"), threads_per_rank=threads, cores_per_node=cores_per_node)
