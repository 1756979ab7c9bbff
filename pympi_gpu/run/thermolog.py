"""A thermo log users can watch while the job runs: CSV or LAMMPS-style YAML, one row at a time.

:class:`ThermoLog` appends each row as it is computed, in one write, so a job
killed at any moment keeps every row it printed, and ``tail -f`` or a plot of
the file shows the run as it goes.  The format comes from the suffix:
``.csv`` (a header line, then one line a row) or ``.yaml``/``.yml``
(LAMMPS's ``thermo_style yaml`` layout: a document with ``keywords`` and
``data``, one flow list a row, ``...`` when the run ends).  The first line
is a comment naming the run (``# pympi-nbody model=lj n=4000 ...``, see
:mod:`pympi_gpu.run.outputs`): YAML readers skip it, pandas with
``comment="#"``.

A run that continues a log (a restart) first checks it whole and cuts a
torn last row (a job killed mid-row), then appends and skips the rows up to
the step the log already holds, so no step is written twice; a log damaged
before its end, or holding a row past the restart's checkpoint, is refused
and left as it is.  A row that cannot be written
(a full disk) is cut off again and raises :class:`~pympi_gpu.run.outputs.OutputError`.
Written by rank 0 only.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
from collections.abc import Sequence
from pathlib import Path

from pympi_gpu.run.fileio import NEW_FILE_MODE, append_whole
from pympi_gpu.run.outputs import (APPEND, NEW, Cadence, Found, OutputError, RunIdentity, damaged, parse_fields,
                                   past_checkpoint)

__all__ = ["ThermoLog", "FORMATS", "format_of", "last_step", "check", "read", "inspect", "IDENTITY_MARK"]

#: the suffixes understood, and their format
FORMATS = {".csv": "csv", ".yaml": "yaml", ".yml": "yaml"}
#: how the comment line naming the run begins
IDENTITY_MARK = "# pympi-nbody "
#: bytes read from either end of a log to judge it (rows are short)
_PEEK = 65536


def format_of(path: str | os.PathLike) -> str:
    """``"csv"`` or ``"yaml"`` from the suffix; ValueError for any other."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"thermo file {os.fspath(path)!r}: the suffix must be one of "
                         f"{', '.join(sorted(FORMATS))} (it chooses the format)")
    return FORMATS[suffix]


def _whole_lines(data: bytes) -> list[str]:
    """The lines of ``data`` that end in a newline (a torn last one is left out)."""
    return data[:data.rfind(b"\n") + 1].decode("utf-8", "replace").splitlines()


def _row_step(line: str, fmt: str) -> int | None:
    """The step of a whole row line, or None if the line is no row."""
    if fmt == "yaml" and not (line.startswith("  - [") and line.rstrip().endswith("]")):
        return None
    head = line.strip().removeprefix("- [").split(",", 1)[0].strip()
    return int(head) if head.lstrip("-").isdigit() else None


def last_step(path: str | os.PathLike) -> int | None:
    """The step of the last whole row in an existing log (None if there is none)."""
    p = Path(path)
    if not p.is_file():
        return None
    with open(p, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        fh.seek(max(0, fh.tell() - _PEEK))
        lines = _whole_lines(fh.read())
    fmt = format_of(p)
    for line in reversed(lines):
        if not line.startswith("#") and (step := _row_step(line, fmt)) is not None:
            return step
    return None


def inspect(path: str | os.PathLike) -> Found:
    """What the file at ``path`` holds (see :class:`~pympi_gpu.run.outputs.Found`); reads its first bytes only."""
    p = Path(path)
    fmt = format_of(p)
    if not p.exists() or (p.is_file() and p.stat().st_size == 0):
        return Found("nothing")
    what = "a thermo log (" + ("a header line Step,..." if fmt == "csv" else "a YAML document with keywords") + ")"
    if not p.is_file():
        return Found("foreign", detail=what)
    with open(p, "rb") as fh:
        head = fh.read(_PEEK)
    lines = _whole_lines(head)
    fields = next((parse_fields(line[len(IDENTITY_MARK):]) for line in lines if line.startswith(IDENTITY_MARK)),
                  None)
    content = [line for line in lines if line.strip() and not line.startswith("#")]
    ours = bool(content) and (content[0].split(",", 1)[0].strip() == "Step" if fmt == "csv"
                              else content[0].strip() == "---" or content[0].startswith("keywords:"))
    if not ours:
        return Found("foreign", detail=what)
    if not any(_row_step(line, fmt) is not None for line in content[1:]):
        return Found("nothing", fields)
    return Found("data", fields, f"thermo rows up to step {last_step(p)}")


def check(path: str | os.PathLike, through: Cadence | int | None = None) -> tuple[int, int | None, str | None]:
    """``(bytes to keep, the last kept row's step, a note)`` of an existing log this module wrote, checked whole.

    What follows the last newline is a torn row (a job killed mid-row; each
    row is one write ending in its newline), for the caller to cut.  Every
    whole line must be the log's: a comment (``#``), blank, the header (CSV)
    or the document's lines (YAML: ``---``, ``keywords: [...]``, ``data:``,
    ``...``), or a row of as many values as the keywords, its step a whole
    number above the row before's.  Anything else raises
    :func:`~pympi_gpu.run.outputs.damaged` naming the line.  Rows past the
    restart's checkpoint (``through``: its step, or its
    :class:`~pympi_gpu.run.outputs.Cadence`) are judged by
    :func:`~pympi_gpu.run.outputs.past_checkpoint`: the ones the restart
    writes again are left out of the bytes to keep (and said in the note),
    others refused.
    """
    fmt, cadence = format_of(path), Cadence.of(through)
    data = Path(path).read_bytes()
    whole = data.rfind(b"\n") + 1
    width, last, past, offset, keep, document, rows = None, None, [], 0, whole, 0, 0
    for number, raw in enumerate(data[:whole].split(b"\n")[:-1], start=1):
        at, offset = offset, offset + len(raw) + 1
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise damaged(path, f"line {number}", "it is not UTF-8 text", "row") from None
        if not line.strip() or line.startswith("#"):
            continue
        if fmt == "csv" and width is None:  # the header
            width = len(next(csv.reader([line])))
            if line.split(",", 1)[0].strip() != "Step":
                raise damaged(path, f"line {number}", f"{line[:40]!r} where the header line Step,... should be",
                              "row")
            continue
        if fmt == "yaml" and line.rstrip() in ("---", "data:", "..."):
            if line.rstrip() == "---":  # a run's document begins (a restart's after the run's before)
                document, rows = at, 0
            continue
        if fmt == "yaml" and line.startswith("keywords: [") and line.rstrip().endswith("]"):
            width = len([k for k in line.rstrip()[len("keywords: ["):-1].split(",") if k.strip()])
            continue
        values = _row_values(line, fmt)
        if values is None or width is None or len(values) != width:
            what = "no row" if values is None else f"{len(values)} value(s)"
            raise damaged(path, f"line {number}", f"{line[:40]!r} ({what}) where a row of {width or 'its'} values "
                          "should be", "row")
        try:
            step, _ = int(values[0]), [float(_YAML_NAMES.get(v, v)) for v in values[1:]]
        except ValueError:
            raise damaged(path, f"line {number}", f"{line[:40]!r} is a row of values that are not numbers",
                          "row") from None
        if last is not None and step <= last:
            raise damaged(path, f"line {number}", f"a row at step {step} follows the row at step {last}", "row")
        if cadence is not None and step > cadence.through:
            if not past:  # cut here, or before a document that would be left without a row
                keep, kept = (document if fmt == "yaml" and not rows else at), last
            past.append(step)
        last, rows = step, rows + 1
    note = past_checkpoint(path, past, cadence, "rows")
    return (keep, kept, note) if past else (whole, last, None)


#: YAML's names of the non-finite floats, as Python reads them
_YAML_NAMES = {".inf": "inf", "-.inf": "-inf", ".nan": "nan"}


def _row_values(line: str, fmt: str) -> list[str] | None:
    """The values of a row line as written (text), or None where the line is no row."""
    if fmt == "csv":
        return [v.strip() for v in next(csv.reader([line]))]
    if not (line.startswith("  - [") and line.rstrip().endswith("]")):
        return None
    values = [v.strip() for v in line.rstrip()[len("  - ["):-1].split(",")]
    return values[:-1] if values and not values[-1] else values


class ThermoLog:
    """Append thermo rows of ``keywords`` (the first is the step) to ``path``, one write per row.

    ``identity`` names the run in the log's first line (None: no such line);
    ``mode`` is :data:`~pympi_gpu.run.outputs.NEW` (start the file, replacing
    what it held), ``APPEND`` (continue it, after cutting a torn last row) or
    None (append to a file that holds something, else start it).  A log
    continued is checked whole first (:func:`check`: damaged before its end,
    or holding rows past the checkpoint ``through`` that the restart does not
    write again, it is refused with :class:`~pympi_gpu.run.outputs.OutputRefused`,
    untouched; those it writes again are cut, and ``note`` says so).  Raises
    :class:`~pympi_gpu.run.outputs.OutputError` where a write fails, after
    cutting what it wrote (a new file is removed).
    """

    def __init__(self, path: str | os.PathLike, keywords: Sequence[str], identity: RunIdentity | None = None,
                 mode: str | None = None, through: Cadence | int | None = None):
        self.path = Path(path)
        self.format = format_of(path)
        self.keywords = list(keywords)
        self.fd = None
        if mode is None:
            mode = APPEND if self.path.is_file() and self.path.stat().st_size else NEW
        self.after, self.note = None, None
        try:
            if mode == APPEND:  # checked whole (refused, untouched, if damaged); then a torn last row cut
                whole, self.after, self.note = check(self.path, through)
                if whole != self.path.stat().st_size:
                    os.truncate(self.path, whole)
            self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | (0 if mode == APPEND else
                                                                                  os.O_TRUNC), NEW_FILE_MODE)
            self._write(self._start(identity, mode))
        except OSError as exc:
            self._close_fd()
            if mode != APPEND:
                with contextlib.suppress(OSError):
                    self.path.unlink()
            raise OutputError(f"cannot write thermo file {os.fspath(path)!r}: {exc.strerror or exc}") from None

    def _start(self, identity: RunIdentity | None, mode: str) -> str:
        """What begins the file (a new one) or the run's part of it (a continued YAML log)."""
        text = "" if mode == APPEND or identity is None else f"{IDENTITY_MARK}{identity.text()}\n"
        if self.format == "csv":
            return text if mode == APPEND else text + ",".join(self.keywords) + "\n"
        return text + "---\nkeywords: [" + ", ".join(f"'{k}'" for k in self.keywords) + ", ]\ndata:\n"

    def _write(self, text: str) -> None:
        if text:
            append_whole(self.fd, text.encode("utf-8"))

    def write(self, values: Sequence[float]) -> None:
        """One row: the step first, then the values in the order of ``keywords``."""
        if self.after is not None and int(values[0]) <= self.after:
            return  # the log already holds this step (a restart)
        if self.format == "csv":
            buf = io.StringIO()
            csv.writer(buf, lineterminator="\n").writerow([_text(v) for v in values])
            row = buf.getvalue()
        else:
            row = "  - [" + ", ".join(_yaml(v) for v in values) + ", ]\n"
        try:
            self._write(row)
        except OSError as exc:  # the torn row is cut off already
            raise OutputError(f"cannot write thermo file {os.fspath(self.path)!r}: {exc.strerror or exc} "
                              "(the log keeps every row before this one)") from None

    def close(self) -> None:
        """End the file; YAML's end-of-document mark is left out if it cannot be written (it is optional)."""
        if self.fd is None:
            return
        if self.format == "yaml":
            with contextlib.suppress(OSError):
                self._write("...\n")
        self._close_fd()

    def _close_fd(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None

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
    """A log's keywords and rows (every document of a YAML log, in order).

    ValueError, with a message for people, if it has none or cannot be read
    as its format (damaged, or another kind of file).
    """
    fmt = format_of(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
        keywords, rows = (_read_csv if fmt == "csv" else _read_yaml)(path, text)
    except _Unreadable as exc:
        raise ValueError(str(exc)) from None
    except (ValueError, TypeError, KeyError, AttributeError, UnicodeDecodeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{os.fspath(path)!r} is not a readable {fmt.upper()} thermo log (damaged, or another "
                         f"kind of file): {first}") from None
    if not rows:
        raise ValueError(f"{os.fspath(path)!r} holds no thermo rows")
    return keywords, rows


class _Unreadable(ValueError):
    """A log with nothing to read (its message says so)."""


def _read_csv(path, text: str):
    lines = [r for r in csv.reader(io.StringIO(text)) if r and not r[0].startswith("#")]
    if not lines:
        raise _Unreadable(f"{os.fspath(path)!r} is empty")
    return lines[0], [[float(v) for v in r] for r in lines[1:] if len(r) == len(lines[0])]


def _read_yaml(path, text: str):
    try:
        import yaml
    except ImportError as exc:
        raise ImportError(f"reading the YAML thermo log {os.fspath(path)!r} needs PyYAML ({exc}); pip install "
                          "'pympi_gpu[plot]'") from None

    try:
        loaded = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        problem, mark = getattr(exc, "problem", None), getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise ValueError(f"{problem or type(exc).__name__}{where}") from None
    docs = [d for d in loaded if isinstance(d, dict) and "keywords" in d]
    if not docs:
        raise _Unreadable(f"{os.fspath(path)!r} holds no thermo document (keywords, data)")
    keywords = [str(k) for k in docs[0]["keywords"]]
    return keywords, [[float(v) for v in r] for d in docs for r in (d.get("data") or []) if len(r) == len(keywords)]
