"""The results file of a study: JSON Lines, one finished run a line.

Every run is appended as soon as it ends, in one ``write`` followed by
``fsync``, so an interrupted study (Ctrl-C, a job's time limit, a node
failure) keeps every run that finished and never leaves a file rewritten
half-way.  A torn last line (the machine died inside the write) is skipped
when reading and the next append starts on a fresh line.

One study at a time writes a results file: :meth:`ResultsStore.lock` takes an
exclusive ``flock`` on ``PREFIX.jsonl.lock`` for the whole study
(:class:`~pympi_gpu.run.locks.LockFile`: it names its holder, pid and host,
and is removed at the end; a file of that name that is no lock is never
touched) and one on the results file itself
(:func:`~pympi_gpu.run.locks.lock_in_place`: the file, not its name, so that
two prefixes whose results files are one file, a hard or symbolic link, are
two names of one study), and a second study on it is refused at once (the
kernel drops the locks when their holder dies, so a killed study never leaves
a stale one).  A results file that is a symbolic link to nothing is refused,
as every output is, never followed to make its target; one that holds
anything but a study's lines (a torn one aside) is another program's: it is
refused, never appended to; a study's line whose fields are not what a run writes (a
``wall_time`` lost, a ``repeat`` in quotes) is refused by its number.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pympi_gpu.run.fileio import NEW_FILE_MODE, append_whole
from pympi_gpu.run.locks import HeldFile, LockError, Locked, LockFile, holder_of, lock_in_place

__all__ = ["RUN_SCHEMA", "StudyMismatch", "StudyLocked", "StudyRefused", "ResultsStore"]

RUN_SCHEMA = "pympi_gpu.scale.run/1"
#: how every line of a results file begins (a torn one: as much of it as was written)
_LINE_START = '{"schema":"' + RUN_SCHEMA + '"'


class StudyMismatch(ValueError):
    """The results file belongs to another study (other command or kind)."""


class StudyLocked(RuntimeError):
    """Another study holds the results file."""


class StudyRefused(ValueError):
    """The results file (or its lock file's name) is another program's, or cannot be made."""


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _damage(run: dict[str, Any]) -> str | None:
    """What is wrong with a run's line (None: nothing): the fields the study's report reads, of their kinds.

    Each is checked as :class:`~pympi_gpu.scale.runner.RunOutcome` writes it,
    so that a line changed by hand (a ``wall_time`` lost, ``"repeat": "0"``)
    is refused with its number instead of failing the report.
    """
    if not isinstance(run.get("point"), str):
        return "its 'point' is not a point's name"
    repeat = run.get("repeat")
    if not isinstance(repeat, int) or isinstance(repeat, bool) or repeat < 0:
        return f"its 'repeat' {repeat!r} is not a whole number >= 0"
    if not isinstance(run.get("ok"), bool):
        return f"its 'ok' {run.get('ok')!r} is not true or false"
    if not _number(run.get("elapsed")):
        return f"its 'elapsed' {run.get('elapsed')!r} is not a number of seconds"
    if run.get("load") is not None and not _number(run["load"]):
        return f"its 'load' {run['load']!r} is not a number"
    if not run["ok"]:
        return None
    rec = run.get("record")
    if not isinstance(rec, dict):
        return "it succeeded but holds no record"
    if not _number(rec.get("wall_time")) or rec["wall_time"] < 0:
        return f"its record's 'wall_time' {rec.get('wall_time', '(none)')!r} is not a number of seconds"
    if rec.get("throughput") is not None and not _number(rec["throughput"]):
        return f"its record's 'throughput' {rec['throughput']!r} is not a number"
    threads = rec.get("threads_per_rank")
    if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool)):
        return f"its record's 'threads_per_rank' {threads!r} is not a whole number"
    return None


class ResultsStore:
    """Append-only store of run dicts for one study.

    Parameters
    ----------
    path : Path
        The ``.jsonl`` file; created with its directory on first append.
    command : sequence of str
        The study's command (as the user gave it); identifies the study.
    kind : {"strong", "weak"}
    """

    def __init__(self, path: Path, command: list[str], kind: str):
        self.path = Path(path)
        self.command = list(command)
        self.kind = kind
        self.torn_lines = 0
        self.unlocked_reason = None
        self._held: HeldFile | None = None  # the results file, locked in place while the study runs

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the study's lock file and the results file itself for the block; refuse if another process
        holds either.

        The results file is made (empty) if absent, and removed again at the
        end if it is still empty (the study was refused, or ran nothing).
        Where the filesystem has no ``flock`` (some network mounts), the block
        runs unguarded and :attr:`unlocked_reason` says why.

        Raises
        ------
        StudyLocked
            If another study (another process) writes this results file now, under this name or another.
        StudyRefused
            If the lock file's name holds something else, the results file is no regular file (a link to
            nothing), or either cannot be made.
        """
        lock = LockFile(self.path.with_name(self.path.name + ".lock"))
        self.unlocked_reason = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            lock.acquire()
        except Locked as exc:
            raise self._locked(exc.holder) from None
        except LockError as exc:
            raise StudyRefused(f"--out {str(self.path)!r}: {exc}") from None
        except OSError as exc:
            raise StudyRefused(f"--out {str(self.path)!r}: cannot make its directory: {exc.strerror or exc}") \
                from None
        try:
            if lock.write_error is not None:  # not even a line fits: the study could record no run
                raise StudyRefused(f"--out {str(self.path)!r} cannot be written: "
                                   f"{lock.write_error.strerror or lock.write_error}")
            self._held = self._lock_in_place()
            why = lock.unlocked or self._held.unlocked
            if why:
                self.unlocked_reason = f"{why}; a second study on the same --out would not be refused"
            yield
        finally:
            if self._held is not None:
                self._held.release(remove=self._empty())
                self._held = None
            lock.release()

    def _lock_in_place(self) -> HeldFile:
        try:
            return lock_in_place(self.path)
        except Locked as exc:
            raise self._locked(exc.holder) from None
        except LockError as exc:  # its words name the file
            raise StudyRefused(f"--out {exc}") from None

    def _locked(self, holder) -> StudyLocked:
        return StudyLocked(f"{self.path} is in use by another pympi-scale study{holder_of(holder)}: wait "
                           "for it to end, or choose another --out")

    def _empty(self) -> bool:
        try:
            return os.fstat(self._held.fd).st_size == 0
        except (OSError, TypeError):
            return False

    def load(self) -> list[dict[str, Any]]:
        """Every run recorded so far for this study, in file order.

        Raises
        ------
        StudyMismatch
            If the file holds runs of a different command or kind.
        StudyRefused
            If it holds anything else than runs (a torn last line aside).
        """
        if not self.path.exists():
            return []
        runs, self.torn_lines = [], 0
        if not self.path.is_file():
            raise StudyRefused(f"{self.path} is not a regular file: choose another --out")
        with open(self.path, encoding="utf-8", errors="replace") as fh:
            for number, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    run = json.loads(line)
                except json.JSONDecodeError:
                    run = None
                if not isinstance(run, dict) or run.get("schema") != RUN_SCHEMA:
                    text = "".join(line.split())  # (a writer with spaces after the separators too)
                    if run is None and (text.startswith(_LINE_START) or _LINE_START.startswith(text)):
                        self.torn_lines += 1  # a run's line, cut short by a machine that died mid-write
                        continue
                    raise StudyRefused(f"{self.path} is not the results file of a pympi-scale study (line "
                                       f"{number} is no run of one): it is never written; choose another --out")
                if problem := _damage(run):
                    raise StudyRefused(f"{self.path}: line {number} is a run of a pympi-scale study, but {problem}: "
                                       "it is never read or written over; mend or remove that line, or choose "
                                       "another --out")
                if run.get("command") != self.command or run.get("kind") != self.kind:
                    raise StudyMismatch(
                        f"{self.path} holds a {run.get('kind')} study of "
                        f"{' '.join(map(str, run.get('command') or []))!r}, not a {self.kind} study of "
                        f"{' '.join(self.command)!r}: choose another --out, or --fresh to set it aside")
                runs.append(run)
        return runs

    def append(self, run: dict[str, Any]) -> None:
        """Append one run durably (write, flush, fsync); OSError (with the file's name) where it cannot be."""
        doc = {"schema": RUN_SCHEMA, "command": self.command, "kind": self.kind}
        doc.update(run)
        line = json.dumps(doc, separators=(",", ":"), allow_nan=False) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, NEW_FILE_MODE)
        try:
            size = os.fstat(fd).st_size
            if size:
                with open(self.path, "rb") as fh:
                    fh.seek(size - 1)
                    if fh.read(1) != b"\n":
                        line = "\n" + line
            append_whole(fd, line.encode("utf-8"))
            os.fsync(fd)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, str(self.path)) from None
        finally:
            os.close(fd)

    def set_aside(self) -> Path | None:
        """Rename an existing results file out of the way (nothing is deleted; an empty one stays)."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return None
        n = 1
        while True:
            target = self.path.with_name(f"{self.path.name}.{n}.bak")
            if not target.exists():
                os.rename(self.path, target)
                break
            n += 1
        if self._held is not None:  # the lock went with the file set aside: hold the new one
            held, self._held = self._held, self._lock_in_place()
            held.release()
        return target
