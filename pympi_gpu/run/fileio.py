"""Writing files so that a crash never leaves half of one: temp file, fsync, rename."""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = ["atomic_open", "atomic_write_bytes", "stale_temporaries", "remove_stale_temporaries"]


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: int = 0o644) -> Iterator[BinaryIO]:
    """Open a temporary file beside ``path`` for binary writing.

    When the block ends normally the data are flushed and fsync'd, the file is
    renamed over ``path`` (atomic on POSIX) and the rename itself is made
    durable; on an exception the temporary file is removed and ``path`` is
    left as it was.
    """
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=_prefix(path), suffix=_SUFFIX, dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename durable where the OS allows
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_open`)."""
    with atomic_open(path) as fh:
        fh.write(data)


_SUFFIX = ".tmp"


def _prefix(path: Path) -> str:
    return f".{path.name}."


def stale_temporaries(path: str | os.PathLike) -> list[Path]:
    """The temporary files that writers of ``path`` killed mid-write left beside it (:func:`atomic_open`'s names)."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    pattern = re.compile(re.escape(_prefix(path)) + r"[A-Za-z0-9_]{8}" + re.escape(_SUFFIX))
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(directory / n for n in names if pattern.fullmatch(n) and (directory / n).is_file())


def remove_stale_temporaries(path: str | os.PathLike) -> list[Path]:
    """Remove :func:`stale_temporaries` of ``path``; return those removed.

    Call it where no other writer of ``path`` can be running: the start of a
    run, or just before the run's own next write.
    """
    removed = []
    for tmp in stale_temporaries(path):
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
            removed.append(tmp)
    return removed
