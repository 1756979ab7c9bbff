"""The files of a study: JSON, CSV and a PNG plot, each replaced atomically.

They are derived from the results file (``.jsonl``) and rewritten whole after
every study, through a temporary file and ``os.replace``: a reader sees the
old file or the new one, never half of one.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from pympi_gpu.run.fileio import atomic_write_bytes
from pympi_gpu.run.records import to_dict
from pympi_gpu.scale.analysis import PHASES, StudySummary

__all__ = ["SCHEMA", "CSV_COLUMNS", "study_dict", "write_json", "write_csv", "write_plot"]

SCHEMA = "pympi_gpu.scale/1"

CSV_COLUMNS = ("ranks", "nodes", "tasks_per_node", "threads_per_rank", "cores", "oversubscribed", "backend",
               "status", "repeats", "time", "time_min", "time_max", "elapsed", "speedup", "ideal",
               "efficiency", "serial_fraction", "superlinear", "throughput", "throughput_per_rank", "work_unit",
               "compute_s", "communication_s", "waiting_s", "io_s", "waiting_max_s", "traffic_per",
               "bytes_per_rank", "messages_per_rank", "load", "launcher", "error")


def study_dict(summary: StudySummary, **extra) -> dict:
    """The study as one JSON-ready dict (schema ``pympi_gpu.scale/1``); ``extra`` keys added (``projection``)."""
    doc = to_dict(summary, schema=SCHEMA)
    doc["complete"] = summary.complete
    doc.update(extra)
    return doc


def write_json(summary: StudySummary, path: Path, **extra) -> Path:
    atomic_write_bytes(path, (json.dumps(study_dict(summary, **extra), indent=2) + "\n").encode())
    return Path(path)


def write_csv(summary: StudySummary, path: Path) -> Path:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for p in summary.points:
        row = dict(to_dict(p), work_unit=summary.work_unit,
                   **{f"{ph}_s": (p.phases or {}).get(ph) for ph in PHASES},
                   waiting_max_s=(p.phases_max or {}).get("waiting"))
        w.writerow(["" if row[c] is None else (f"{row[c]:.9g}" if isinstance(row[c], float) else row[c])
                    for c in CSV_COLUMNS])
    atomic_write_bytes(path, buf.getvalue().encode())
    return Path(path)


def write_plot(summary: StudySummary, path: Path) -> tuple[Path | None, str]:
    """Speedup (log-log, with the ideal line) and efficiency against ranks, and where the time goes.

    The third panel, when the records carry ``phases``, stacks the mean over
    ranks of compute, communication, waiting and I/O seconds at each size.

    Returns ``(path, "")``, or ``(None, reason)`` when there is nothing to
    plot or matplotlib is not installed (it is the ``plot`` extra).
    """
    rows = [p for p in summary.points if p.speedup is not None]
    if not rows:
        return None, "no successful point to plot"
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullLocator
    except ImportError as exc:
        return None, f"matplotlib is not installed ({exc}); pip install 'pympi_gpu[plot]'"

    x = [p.ranks for p in rows]
    weak = summary.kind == "weak"
    phased = [p for p in rows if p.phases]
    fig, axes = plt.subplots(1, 3 if phased else 2, figsize=(15 if phased else 10, 4.2), dpi=100,
                             layout="constrained")
    ax1, ax2 = axes[0], axes[1]
    ideal_x = [min(x), max(x)]
    ideal_y = [p / summary.baseline_ranks for p in ideal_x]
    ax1.plot(ideal_x, ideal_y, "--", color="0.5", label="ideal")
    ax1.plot(x, [p.speedup for p in rows], "o-", color="C0", label="measured")
    ax1.set_xscale("log", base=2)
    ax1.set_yscale("log", base=2)
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax1.yaxis.set_major_locator(LogLocator(base=2))
    ax1.yaxis.set_major_formatter(plain)
    ax1.set_xlabel("MPI ranks")
    ax1.set_ylabel("scaled speedup" if weak else "speedup")
    ax1.set_title(("weak scaling: scaled speedup" if weak else "strong scaling: speedup")
                  + f" vs {summary.baseline_ranks} rank(s)")
    ax1.grid(True, which="both", alpha=0.3)
    ax1.legend()

    ax2.axhline(1.0, ls="--", color="0.5", label="ideal")
    ax2.plot(x, [p.efficiency for p in rows], "o-", color="C1", label="measured")
    ax2.set_xscale("log", base=2)
    for ax in (ax1, ax2):  # a tick at every measured size
        ax.xaxis.set_major_locator(FixedLocator(x))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(plain)
    ax2.set_ylim(0, max(1.1, max(p.efficiency for p in rows) * 1.1))
    ax2.set_xlabel("MPI ranks")
    ax2.set_ylabel("parallel efficiency")
    ax2.set_title("weak scaling: efficiency t_b / t_p" if weak
                  else "strong scaling: efficiency S / (p / p_b)")
    ax2.grid(True, alpha=0.3)
    ax2.legend()
    if phased:
        ax3 = axes[2]
        labels = [str(p.ranks) for p in phased]
        bottom = [0.0] * len(phased)
        for i, ph in enumerate(PHASES):
            height = [p.phases.get(ph) or 0.0 for p in phased]
            ax3.bar(labels, height, bottom=bottom, color=f"C{i + 2}", label=ph)
            bottom = [b + h for b, h in zip(bottom, height)]
        ax3.plot(labels, [p.time for p in phased], "k_", markersize=18, label="wall time")
        ax3.set_xlabel("MPI ranks")
        ax3.set_ylabel("seconds (mean over ranks)")
        ax3.set_title("where the time goes")
        ax3.legend(fontsize=8)
        ax3.grid(True, axis="y", alpha=0.3)
    fig.suptitle(" ".join(summary.command), fontsize=9)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return Path(path), ""
