"""A thermo log users can watch while the job runs: CSV or LAMMPS-style YAML, one row at a time.

:class:`ThermoLog` appends each row as it is computed and flushes it, so a
job killed at any moment keeps every row it printed, and ``tail -f`` or a
plot of the file shows the run as it goes.  The format comes from the
suffix: ``.csv`` (a header line, then one line a row) or ``.yaml``/``.yml``
(LAMMPS's ``thermo_style yaml`` layout: a document with ``keywords`` and
``data``, one flow list a row, ``...`` when the run ends).  A run that
continues a log (a restart) appends to it and skips the rows up to the step
the log already holds, so no step is written twice.  Written by rank 0 only.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Sequence
from pathlib import Path

__all__ = ["ThermoLog", "FORMATS", "format_of", "last_step", "read"]

#: the suffixes understood, and their format
FORMATS = {".csv": "csv", ".yaml": "yaml", ".yml": "yaml"}


def format_of(path: str | os.PathLike) -> str:
    """``"csv"`` or ``"yaml"`` from the suffix; ValueError for any other."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"thermo file {os.fspath(path)!r}: the suffix must be one of "
                         f"{', '.join(sorted(FORMATS))} (it chooses the format)")
    return FORMATS[suffix]


def last_step(path: str | os.PathLike) -> int | None:
    """The step of the last whole row in an existing log (None if there is none)."""
    p = Path(path)
    if not p.is_file():
        return None
    with open(p, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        fh.seek(max(0, fh.tell() - 65536))
        lines = fh.read().decode("utf-8", "replace").splitlines()
    for line in reversed(lines):
        text = line.strip().removeprefix("- [").lstrip("[")
        head = text.split(",", 1)[0].strip()
        if head.lstrip("-").isdigit() and (line.rstrip().endswith("]") or format_of(p) == "csv"):
            return int(head)
    return None


class ThermoLog:
    """Append thermo rows of ``keywords`` (the first is the step) to ``path``, flushed per row."""

    def __init__(self, path: str | os.PathLike, keywords: Sequence[str]):
        self.path = Path(path)
        self.format = format_of(path)
        self.keywords = list(keywords)
        self.after = last_step(self.path)
        new = not self.path.exists() or self.path.stat().st_size == 0
        self.fh = open(self.path, "a", encoding="utf-8", newline="")
        if self.format == "csv":
            if new:
                self._write(",".join(self.keywords) + "\n")
        else:
            self._write("---\nkeywords: [" + ", ".join(f"'{k}'" for k in self.keywords) + ", ]\ndata:\n")

    def _write(self, text: str) -> None:
        self.fh.write(text)
        self.fh.flush()

    def write(self, values: Sequence[float]) -> None:
        """One row: the step first, then the values in the order of ``keywords``."""
        if self.after is not None and int(values[0]) <= self.after:
            return  # the log already holds this step (a restart)
        if self.format == "csv":
            buf = io.StringIO()
            csv.writer(buf, lineterminator="\n").writerow([_text(v) for v in values])
            self._write(buf.getvalue())
        else:
            self._write("  - [" + ", ".join(_yaml(v) for v in values) + ", ]\n")

    def close(self) -> None:
        if self.fh.closed:
            return
        if self.format == "yaml":
            self._write("...\n")
        self.fh.close()

    def __enter__(self) -> ThermoLog:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _text(v) -> str:
    """A value as the log writes it: integers as they are, floats with every digit kept."""
    return str(v) if isinstance(v, int) else repr(float(v))


def _yaml(v) -> str:
    """As :func:`_text`, with YAML's names for the non-finite (``.inf``, ``-.inf``, ``.nan``)."""
    text = _text(v)
    return {"inf": ".inf", "-inf": "-.inf", "nan": ".nan"}.get(text, text)


def read(path: str | os.PathLike) -> tuple[list[str], list[list[float]]]:
    """A log's keywords and rows (every document of a YAML log, in order); ValueError if it has none."""
    fmt = format_of(path)
    text = Path(path).read_text(encoding="utf-8")
    if fmt == "csv":
        lines = list(csv.reader(io.StringIO(text)))
        if not lines:
            raise ValueError(f"{os.fspath(path)!r} is empty")
        keywords, rows = lines[0], [[float(v) for v in r] for r in lines[1:] if len(r) == len(lines[0])]
    else:
        import yaml

        docs = [d for d in yaml.safe_load_all(text) if isinstance(d, dict) and "keywords" in d]
        if not docs:
            raise ValueError(f"{os.fspath(path)!r} holds no thermo document (keywords, data)")
        keywords = [str(k) for k in docs[0]["keywords"]]
        rows = [[float(v) for v in r] for d in docs for r in (d.get("data") or []) if len(r) == len(keywords)]
    if not rows:
        raise ValueError(f"{os.fspath(path)!r} holds no thermo rows")
    return keywords, rows
