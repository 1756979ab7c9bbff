"""Writing files so that a crash never leaves half of one: temp file, fsync, rename.

A temporary file carries its writer: ``.NAME.HOST.PID.XXXXXXXX.tmp`` beside
``NAME``.  A writer killed mid-write (SIGKILL, a node failure) leaves it
behind; :func:`stale_temporaries` finds those whose writer is surely gone, so
that a second job never removes a file another job is still writing:

- written on this host: stale when no process ``PID`` runs here;
- written on another host (a shared filesystem), or by a writer older than
  these names (``.NAME.XXXXXXXX.tmp``): stale when untouched for
  :data:`STALE_AFTER` seconds (a live writer keeps adding to its file, a block
  at a time; this host cannot ask another whether a process lives).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import socket
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = ["atomic_open", "atomic_write_bytes", "append_whole", "stale_temporaries", "remove_stale_temporaries",
           "host_name", "STALE_AFTER", "numbered", "reserve_new", "umask", "NEW_FILE_MODE"]

#: seconds without a change after which a temporary of another host (or of no known writer) is stale
STALE_AFTER = 15 * 60

#: the mode every file a run makes asks for, as ``open()`` does: the process's umask takes from it
NEW_FILE_MODE = 0o666


def umask() -> int:
    """This process's umask, read without changing it where the OS tells it (``/proc/self/status``):
    setting it to read it back would race with another thread making a file."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _mode_of(path: Path) -> int:
    """The mode the file written to ``path`` gets: that of the regular file it replaces (a user's
    ``chmod 600`` is kept), else :data:`NEW_FILE_MODE` less the umask, as a new file made by ``open()``."""
    try:
        st = os.stat(path)
    except OSError:
        st = None
    if st is not None and stat.S_ISREG(st.st_mode):
        return stat.S_IMODE(st.st_mode)
    return NEW_FILE_MODE & ~umask()


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """Open a temporary file beside ``path`` for binary writing.

    When the block ends normally the data are flushed and fsync'd, the file is
    renamed over ``path`` (atomic on POSIX) and the rename itself is made
    durable; on an exception the temporary file is removed and ``path`` is
    left as it was.  The temporary's name says which host and process write it.
    The file keeps the mode of the one it replaces, and a new one gets what
    the umask leaves of ``rw-rw-rw-`` (the temporary is ``rw-------`` while
    it is written).  The directory must exist: it is never made here.  An ``OSError`` raised on the way names ``path`` (its
    ``filename``).
    """
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    try:  # (a missing directory is an error: one removed during a run is never made again)
        fd, tmp = tempfile.mkstemp(prefix=f"{_prefix(path)}{host_name()}.{os.getpid()}.", suffix=_SUFFIX,
                                   dir=directory)
    except OSError as exc:
        exc.filename = os.fspath(path)
        raise
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fchmod(fh.fileno(), _mode_of(path))  # (the mode of the file it replaces, as it is now)
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            exc.filename = os.fspath(path)
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
#: what tempfile puts between prefix and suffix
_RANDOM = r"[A-Za-z0-9_]{8}"


def _prefix(path: Path) -> str:
    return f".{path.name}."


def host_name() -> str:
    """This host's name as temporaries and lock files carry it (letters, digits, ``.`` and ``-`` only)."""
    return re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname()) or "localhost"


def _writer_gone(host: str | None, pid: int | None, mtime: float, now: float) -> bool:
    """Whether the writer of a temporary is surely gone (see the module's docstring)."""
    if host == host_name() and pid is not None:
        if pid == os.getpid():
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # another user's live process
            return False
        return False
    return now - mtime > STALE_AFTER


def stale_temporaries(path: str | os.PathLike, now: float | None = None) -> list[Path]:
    """The temporaries of ``path`` that writers killed mid-write left beside it (their writers gone)."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    owned = re.compile(re.escape(_prefix(path)) + r"(?P<host>[A-Za-z0-9._-]+)\.(?P<pid>[0-9]+)\." + _RANDOM
                       + re.escape(_SUFFIX))
    legacy = re.compile(re.escape(_prefix(path)) + _RANDOM + re.escape(_SUFFIX))
    now = time.time() if now is None else now
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    stale = []
    for name in names:
        match = owned.fullmatch(name)
        if not (match or legacy.fullmatch(name)):
            continue
        try:
            st = os.stat(directory / name)
        except OSError:
            continue
        host, pid = (match["host"], int(match["pid"])) if match else (None, None)
        if os.path.isfile(directory / name) and _writer_gone(host, pid, st.st_mtime, now):
            stale.append(directory / name)
    return sorted(stale)


def remove_stale_temporaries(path: str | os.PathLike) -> list[Path]:
    """Remove :func:`stale_temporaries` of ``path``; return those removed.

    A temporary whose writer may still run (this host's live process, or
    another host's file changed within :data:`STALE_AFTER`) is kept.
    """
    removed = []
    for tmp in stale_temporaries(path):
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
            removed.append(tmp)
    return removed


def numbered(path: str | os.PathLike, n: int, suffixes: tuple[str, ...] = ()) -> str:
    """``path`` with ``-n`` before the first of ``suffixes`` that ends it (else before its last suffix):
    ``numbered("run.ckpt.npz", 2, (".ckpt.npz",))`` is ``run-2.ckpt.npz``; ``n`` 0 is ``path`` itself."""
    path = os.fspath(path)
    if n == 0:
        return path
    head, name = os.path.split(path)
    tail = next((s for s in suffixes if name.endswith(s) and len(name) > len(s)), None)
    if tail is None:
        stem, tail = os.path.splitext(name)
    else:
        stem = name[:-len(tail)]
    return os.path.join(head, f"{stem}-{n}{tail}")


def reserve_new(path: str | os.PathLike, suffixes: tuple[str, ...] = (), tries: int = 1000) -> str:
    """The first of ``path``, ``path-1``, ``path-2``... (:func:`numbered`) that holds no file, made empty
    here (``O_EXCL``) so that no other writer takes it; its name.

    For a file a run writes under a name of its own choosing (a stop's
    checkpoint, a blown-up state): it never replaces a file already there,
    another run's or a user's, and two runs writing at once get two names.
    The caller replaces the empty file with the data (:func:`atomic_open`),
    or removes it.  Raises OSError where none can be made.
    """
    for n in range(tries):
        name = numbered(path, n, suffixes)
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, NEW_FILE_MODE)
        except FileExistsError:
            continue
        os.close(fd)
        return name
    raise OSError(errno.EEXIST, f"{tries} names beside it are taken", os.fspath(path))


def append_whole(fd: int, data: bytes) -> None:
    """Append ``data`` to the file open at ``fd`` (``O_APPEND``) whole, or not at all.

    ``os.write`` may write part of its data and return (a filesystem filling
    up); the rest is written by further calls, and a failure of any of them
    cuts the file back to its length before the call and raises the
    ``OSError``: a reader never finds a torn frame or row at the end.
    """
    size = os.fstat(fd).st_size
    view = memoryview(data)
    try:
        while view:
            written = os.write(fd, view)
            if written == 0:  # no progress and no error: as full as a full disk
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            view = view[written:]
    except OSError:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)
        raise
