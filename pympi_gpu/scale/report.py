"""The files of a study: JSON, CSV and a PNG plot, each replaced atomically.

They are derived from the results file (``.jsonl``) and rewritten whole after
every study, through a temporary file and ``os.replace``: a reader sees the
old file or the new one, never half of one.  Only a study's own report is
ever replaced: :func:`not_a_report` says what else a file at that name is
(a user's CSV, a photo), and the study is refused before it runs.  The PNG
says it is one in its metadata (``Software``: :data:`PNG_SOFTWARE`).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from pympi_gpu.run.fileio import atomic_write_bytes
from pympi_gpu.run.records import to_dict
from pympi_gpu.scale.analysis import PHASES, StudySummary

__all__ = ["SCHEMA", "CSV_COLUMNS", "PNG_SOFTWARE", "study_dict", "write_json", "write_csv", "write_plot",
           "not_a_report"]

SCHEMA = "pympi_gpu.scale/1"
#: the PNG's ``Software`` text: a plot a study made
PNG_SOFTWARE = "pympi-scale"
#: the eight bytes every PNG starts with
_PNG = b"\x89PNG\r\n\x1a\n"

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
    try:  # a Figure of its own, no pyplot: no global backend chosen, no figure kept alive
        from matplotlib.figure import Figure
    except ImportError as exc:
        return None, f"matplotlib is not installed ({exc}); pip install 'pympi_gpu[plot]'"
    phased = [p for p in rows if p.phases]
    fig = Figure(figsize=(15 if phased else 10, 4.2), dpi=100, layout="constrained")
    axes = fig.subplots(1, 3 if phased else 2)
    _speedup_panel(axes[0], summary, rows)
    _efficiency_panel(axes[1], summary, rows)
    if phased:
        _phases_panel(axes[2], phased)
    fig.suptitle(" ".join(summary.command), fontsize=9)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": PNG_SOFTWARE})
    atomic_write_bytes(path, buf.getvalue())
    return Path(path), ""


def _ranks_axis(ax, x) -> None:
    """A log2 ranks axis with a tick at every measured size, labelled plainly."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(x))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("MPI ranks")


def _speedup_panel(ax, summary: StudySummary, rows) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator

    x = [p.ranks for p in rows]
    weak = summary.kind == "weak"
    ideal_x = [min(x), max(x)]
    ax.plot(ideal_x, [p / summary.baseline_ranks for p in ideal_x], "--", color="0.5", label="ideal")
    ax.plot(x, [p.speedup for p in rows], "o-", color="C0", label="measured")
    _ranks_axis(ax, x)
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_locator(LogLocator(base=2))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_ylabel("scaled speedup" if weak else "speedup")
    ax.set_title(("weak scaling: scaled speedup" if weak else "strong scaling: speedup")
                 + f" vs {summary.baseline_ranks} rank(s)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()


def _efficiency_panel(ax, summary: StudySummary, rows) -> None:
    ax.axhline(1.0, ls="--", color="0.5", label="ideal")
    ax.plot([p.ranks for p in rows], [p.efficiency for p in rows], "o-", color="C1", label="measured")
    _ranks_axis(ax, [p.ranks for p in rows])
    ax.set_ylim(0, max(1.1, max(p.efficiency for p in rows) * 1.1))
    ax.set_ylabel("parallel efficiency")
    ax.set_title("weak scaling: efficiency t_b / t_p" if summary.kind == "weak"
                 else "strong scaling: efficiency S / (p / p_b)")
    ax.grid(True, alpha=0.3)
    ax.legend()


def _phases_panel(ax, phased) -> None:
    """Mean seconds per phase, stacked, at each size, and the wall time."""
    labels = [str(p.ranks) for p in phased]
    bottom = [0.0] * len(phased)
    for i, ph in enumerate(PHASES):
        height = [p.phases.get(ph) or 0.0 for p in phased]
        ax.bar(labels, height, bottom=bottom, color=f"C{i + 2}", label=ph)
        bottom = [b + h for b, h in zip(bottom, height)]
    ax.plot(labels, [p.time for p in phased], "k_", markersize=18, label="wall time")
    ax.set_xlabel("MPI ranks")
    ax.set_ylabel("seconds (mean over ranks)")
    ax.set_title("where the time goes")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)


def not_a_report(path: Path, kind: str, resumed: bool) -> str | None:
    """What the file at ``path`` is, if it is not a study's ``kind`` (``json``, ``csv``, ``png``) report
    that may be replaced; None where it is one, or is absent.

    The JSON carries :data:`SCHEMA`, the CSV begins with :data:`CSV_COLUMNS`,
    the PNG names :data:`PNG_SOFTWARE`, or, where the study is ``resumed``
    (its results file is this study's), matplotlib, as plots of studies
    before that name were made.
    """
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return None
    if not path.is_file():
        return "not a regular file"
    try:
        with open(path, "rb") as fh:
            head = fh.read(1 << 16)
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    if not head:
        return None  # empty: nothing to lose
    if kind == "csv":
        return None if head.split(b"\n", 1)[0].decode("utf-8", "replace") == ",".join(CSV_COLUMNS) else \
            "not a study's CSV (its first line is not the study's columns)"
    if kind == "json":
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return "not a study's JSON (not JSON)"
        return None if isinstance(doc, dict) and doc.get("schema") == SCHEMA else \
            f"not a study's JSON (no schema {SCHEMA!r})"
    if not head.startswith(_PNG):
        return "not a PNG"
    software = _png_software(head)
    if software == PNG_SOFTWARE or (resumed and software and software.startswith("Matplotlib")):
        return None
    return "a PNG that no pympi-scale study made"


def _png_software(head: bytes) -> str | None:
    """The ``Software`` text of a PNG (its chunks before the image data), or None."""
    import struct

    pos = len(_PNG)
    while pos + 8 <= len(head):
        length, kind = struct.unpack(">I4s", head[pos:pos + 8])
        body = head[pos + 8:pos + 8 + length]
        if kind == b"tEXt" and b"\0" in body:
            key, text = body.split(b"\0", 1)
            if key == b"Software":
                return text.decode("latin-1")
        if kind == b"IDAT":
            return None
        pos += 12 + length
    return None

