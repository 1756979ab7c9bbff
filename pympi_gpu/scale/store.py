"""The results file of a study: JSON Lines, one finished run a line.

Every run is appended as soon as it ends, in one ``write`` followed by
``fsync``, so an interrupted study (Ctrl-C, a job's time limit, a node
failure) keeps every run that finished and never leaves a file rewritten
half-way.  A torn last line (the machine died inside the write) is skipped
when reading and the next append starts on a fresh line.

One study at a time writes a results file: :meth:`ResultsStore.lock` takes an
exclusive ``flock`` on ``PREFIX.jsonl.lock`` for the whole study, and a second
study on the same prefix is refused at once (the kernel drops the lock when
its holder dies, so a killed study never leaves a stale one).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["RUN_SCHEMA", "StudyMismatch", "StudyLocked", "ResultsStore"]

RUN_SCHEMA = "pympi_gpu.scale.run/1"


class StudyMismatch(ValueError):
    """The results file belongs to another study (other command or kind)."""


class StudyLocked(RuntimeError):
    """Another study holds the results file."""


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

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the study's lock file for the block; refuse if another process holds it.

        Where the filesystem has no ``flock`` (some network mounts), the block
        runs unguarded and :attr:`unlocked_reason` says why.

        Raises
        ------
        StudyLocked
            If another study (another process) writes this results file now.
        """
        lock_path = self.path.with_name(self.path.name + ".lock")
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        self.unlocked_reason = None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # EWOULDBLOCK: another process holds it
                holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
                raise StudyLocked(
                    f"{self.path} is in use by another pympi-scale study"
                    + (f" (pid {holder})" if holder.isdigit() else "")
                    + ": wait for it to end, or choose another --out") from None
            except OSError as exc:  # no flock on this filesystem (ENOLCK, EOPNOTSUPP...): go on, unguarded
                self.unlocked_reason = (f"cannot lock {lock_path} ({exc.strerror or exc}): the filesystem "
                                        "does not support flock; a second study on the same --out would not "
                                        "be refused")
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
            yield
        finally:
            os.close(fd)  # releases the lock

    def load(self) -> list[dict[str, Any]]:
        """Every run recorded so far for this study, in file order.

        Raises
        ------
        StudyMismatch
            If the file holds runs of a different command or kind.
        """
        if not self.path.exists():
            return []
        runs, self.torn_lines = [], 0
        with open(self.path, encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    continue
                try:
                    run = json.loads(line)
                except json.JSONDecodeError:
                    self.torn_lines += 1
                    continue
                if not isinstance(run, dict) or run.get("schema") != RUN_SCHEMA:
                    self.torn_lines += 1
                    continue
                if run.get("command") != self.command or run.get("kind") != self.kind:
                    raise StudyMismatch(
                        f"{self.path} holds a {run.get('kind')} study of "
                        f"{' '.join(map(str, run.get('command') or []))!r}, not a {self.kind} study of "
                        f"{' '.join(self.command)!r}: choose another --out, or --fresh to set it aside")
                runs.append(run)
        return runs

    def append(self, run: dict[str, Any]) -> None:
        """Append one run durably (write, flush, fsync)."""
        doc = {"schema": RUN_SCHEMA, "command": self.command, "kind": self.kind}
        doc.update(run)
        line = json.dumps(doc, separators=(",", ":"), allow_nan=False) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size:
                with open(self.path, "rb") as fh:
                    fh.seek(size - 1)
                    if fh.read(1) != b"\n":
                        line = "\n" + line
            os.write(fd, line.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)

    def set_aside(self) -> Path | None:
        """Rename an existing results file out of the way (nothing is deleted)."""
        if not self.path.exists():
            return None
        n = 1
        while True:
            target = self.path.with_name(f"{self.path.name}.{n}.bak")
            if not target.exists():
                os.rename(self.path, target)
                return target
            n += 1
