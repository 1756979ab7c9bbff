"""Locks that say who holds a file, and never take a stranger's file for one.

Two kinds, both ``flock`` (the kernel drops a lock when its holder dies, so a
killed run never leaves a lock standing):

- :class:`LockFile`: a lock file ``NAME.lock`` beside a file that is replaced
  whole (a checkpoint, by rename) or that a whole job owns (a study's results).
  It holds ``PID HOST`` of its holder, for the message a second job gets, and
  is removed when the holder lets go.  A file at that name that is not such a
  lock (a user's ``notes.lock``, a directory, a link) is never truncated or
  removed: taking the lock is refused instead;
- :func:`lock_in_place`: the lock on the file itself, for a file a run appends
  to in place (a trajectory, a thermo log), so that no file is added beside it.

Where the filesystem has no ``flock`` (some network mounts) the holder goes
on unguarded and is told why (:attr:`LockFile.unlocked`, :attr:`HeldFile.unlocked`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import os
import re
import stat

from pympi_gpu.run.fileio import NEW_FILE_MODE, host_name

__all__ = ["LockError", "Locked", "NotALock", "LockFile", "HeldFile", "lock_in_place", "holder_of", "flock_holder",
           "LOCK_SUFFIX", "REMOVED", "REMOVED_WITH_DIRECTORY", "MOVED", "REPLACED", "lost"]

#: what a lock file adds to the name of the file it guards
LOCK_SUFFIX = ".lock"
#: what a lock file holds: its holder's pid, and host (older study locks hold the pid alone)
_HOLDER = re.compile(rb"\s*(?P<pid>[0-9]{1,10})(?:[ \t]+(?P<host>[A-Za-z0-9._-]{1,255}))?\s*")
#: the most bytes of a lock file read to judge it
_PEEK = 512


class LockError(Exception):
    """A lock that cannot be taken; the message is for people."""


class Locked(LockError):
    """Another live process holds the lock: ``holder`` is ``(pid, host)`` where the lock file says so."""

    def __init__(self, path: str, holder: tuple[str, str | None] | None):
        self.path, self.holder = path, holder
        super().__init__(f"{path!r} is locked by another process{holder_of(holder)}")


class NotALock(LockError):
    """The lock file's name is taken by something that is not a lock file (never touched)."""


def holder_of(holder: tuple[str, str | None] | None) -> str:
    """`` (pid 12 on node3)`` for a message; empty where the holder is not known."""
    if not holder:
        return ""
    pid, host = holder
    return f" (pid {pid}" + (f" on {host}" if host else "") + ")"


def _read_holder(fd: int) -> tuple[str, str | None] | None:
    match = _HOLDER.fullmatch(os.pread(fd, _PEEK, 0))
    if not match:
        return None
    return match["pid"].decode(), match["host"].decode() if match["host"] else None


def flock_holder(fd: int) -> tuple[str, str] | None:
    """``(pid, this host)`` of the process holding an ``flock`` on the file open at ``fd``, from
    ``/proc/locks`` (None where it says nothing: another OS, or a lock taken on another host)."""
    try:
        st = os.fstat(fd)
        with open("/proc/locks", encoding="ascii", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    inode = f":{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in lines:
        words = line.split()
        # "1: FLOCK  ADVISORY  WRITE 4242 00:2e:2146450 0 EOF" (blocked waiters are marked "->")
        if len(words) >= 6 and words[1] == "FLOCK" and words[3] == "WRITE" and (":" + words[5]).endswith(inode):
            return words[4], host_name()
    return None


def _is_lock_content(data: bytes) -> bool:
    return not data.strip() or _HOLDER.fullmatch(data) is not None


#: why a file held open is no longer the one at its path (:func:`lost`)
REMOVED, REMOVED_WITH_DIRECTORY, MOVED, REPLACED = "removed", "removed with its directory", "moved", "replaced"


def lost(fd: int | None, path: str, follow: bool = True) -> str | None:
    """Why the file open at ``fd`` is no longer the file ``path`` names, or None where it still is.

    :data:`REMOVED_WITH_DIRECTORY` (the path's directory is gone), :data:`REMOVED`
    (no link to it is left), :data:`MOVED` (renamed, or only another link is
    left) or :data:`REPLACED` (another file has the name); ``follow``: a link
    at ``path`` counts as the file it names.  Where it cannot tell (``fd``
    None: nothing held; the path unreadable) it says nothing.
    """
    if fd is None:
        return None
    try:
        held = os.fstat(fd)
        now = os.stat(path) if follow else os.lstat(path)
    except FileNotFoundError:
        now = None
    except OSError:
        return None
    if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino) and held.st_nlink > 0:
        return None
    if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        return REMOVED_WITH_DIRECTORY
    if now is None:
        return REMOVED if held.st_nlink == 0 else MOVED
    return REPLACED


def _same_file(fd: int, path: str) -> bool:
    try:
        a, b = os.fstat(fd), os.lstat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


class LockFile:
    """An exclusive ``flock`` on ``path`` (the lock file itself: ``NAME.lock``), held until :meth:`release`.

    :meth:`acquire` raises :class:`Locked` where a live process holds it,
    :class:`NotALock` where ``path`` is something else than a lock file
    (which is left as it was), :class:`LockError` where it cannot be made
    (a read-only directory; :class:`OSError`'s words).  A lock file a killed
    holder left is taken over.  :meth:`release` removes the file while still
    holding it; a process that locked the removed file finds, by its inode,
    that the path now names another, and tries again.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self.fd: int | None = None
        self.unlocked: str | None = None
        self.write_error: OSError | None = None  # why the holder's line could not be written (a full disk)

    def acquire(self) -> LockFile:
        for _ in range(10):
            self._refuse_a_stranger()
            try:  # O_NOFOLLOW: a link at the lock's name is refused, never followed
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                             NEW_FILE_MODE)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise NotALock(self._stranger("a symbolic link")) from None
                raise LockError(f"cannot make the lock file {self.path!r}: {exc.strerror or exc}") from None
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise NotALock(self._stranger("not a regular file"))
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:  # EWOULDBLOCK: another process holds it
                    raise Locked(self.path, _read_holder(fd)) from None
                except OSError as exc:  # no flock here (ENOLCK, EOPNOTSUPP): go on unguarded
                    self.unlocked = (f"cannot lock {self.path} ({exc.strerror or exc}): the filesystem does not "
                                     "support flock")
                    os.close(fd)
                    return self
                if not _is_lock_content(os.pread(fd, _PEEK, 0)):  # written between the look and the lock
                    raise NotALock(self._stranger("it holds something else"))
            except BaseException:
                os.close(fd)
                raise
            if _same_file(fd, self.path):
                try:  # the holder's name is a courtesy: a full disk has no room for it, and the lock holds
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, f"{os.getpid()} {host_name()}\n".encode("ascii"), 0)
                except OSError as exc:
                    self.write_error = exc
                self.fd = fd
                return self
            os.close(fd)  # we locked a lock file its holder removed on leaving: take the new one
        raise LockError(f"cannot take the lock {self.path!r}: it keeps being replaced")

    def _refuse_a_stranger(self) -> None:
        """Refuse, before opening it, a file at the lock's name that is no lock file."""
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(st.st_mode):
            raise NotALock(self._stranger("a symbolic link"))
        if not stat.S_ISREG(st.st_mode):
            raise NotALock(self._stranger("not a regular file"))
        try:
            with open(self.path, "rb") as fh:
                data = fh.read(_PEEK + 1)
        except OSError:  # unreadable: opening it for the lock says why
            return
        if len(data) > _PEEK or not _is_lock_content(data):
            raise NotALock(self._stranger("it holds something else"))

    def _stranger(self, what: str) -> str:
        return (f"{self.path!r} is in the way of the lock file of that name ({what}): it is never overwritten "
                "or removed; move it away")

    def lost(self) -> str | None:
        """Why the lock file held is no longer at its name (:func:`lost`), or None."""
        return lost(self.fd, self.path, follow=False)

    def release(self) -> None:
        if self.fd is not None:
            if _same_file(self.fd, self.path):
                with contextlib.suppress(OSError):
                    os.unlink(self.path)
            os.close(self.fd)  # releases the lock
            self.fd = None

    def __enter__(self) -> LockFile:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


@dataclasses.dataclass
class HeldFile:
    """A file locked in place (:func:`lock_in_place`): ``created`` says the lock made it (it was absent)."""

    path: str
    fd: int | None
    created: bool
    unlocked: str | None = None

    def lost(self) -> str | None:
        """Why the file held is no longer the one at its path (:func:`lost`), or None."""
        return lost(self.fd, self.path)

    def release(self, remove: bool = False) -> None:
        """Let go; with ``remove``, first remove the file if this lock made it (a claim given up)."""
        if self.fd is None:
            return
        if remove and self.created and _same_file(self.fd, self.path):
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        os.close(self.fd)
        self.fd = None


def lock_in_place(path: str | os.PathLike) -> HeldFile:
    """Lock the regular file at ``path`` itself (made empty if absent); :class:`Locked` if another holds it.

    ``path`` must be absent or a regular file (a link to one counts as that
    file): anything else raises :class:`LockError`, as does a file that cannot
    be made or opened.  A FIFO is never opened for reading (it would wait for
    a writer).
    """
    path = os.fspath(path)
    created = False
    for _ in range(10):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, NEW_FILE_MODE)
            created = True
        except FileExistsError:
            try:
                st = os.stat(path)
            except FileNotFoundError:
                if os.path.islink(path):
                    raise LockError(f"{path!r} is a symbolic link to nothing: it is never followed to make its "
                                    "target; remove it or choose another path") from None
                continue  # removed meanwhile: make it again
            if not stat.S_ISREG(st.st_mode):
                raise LockError(f"{path!r} is not a regular file") from None
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError as exc:
                raise LockError(f"{path!r} cannot be read: {exc.strerror or exc}") from None
        except OSError as exc:
            raise LockError(f"{path!r} cannot be written: {exc.strerror or exc}") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced between the look and the open
                raise LockError(f"{path!r} is not a regular file")
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = flock_holder(fd)
            os.close(fd)  # the holder's file: never removed here, even if this call made it
            raise Locked(path, holder) from None
        except LockError:
            os.close(fd)
            raise
        except OSError as exc:  # no flock on this filesystem
            return HeldFile(path, fd, created, unlocked=f"cannot lock {path} ({exc.strerror or exc}): the "
                                                         "filesystem does not support flock")
        return HeldFile(path, fd, created)
    raise LockError(f"{path!r} keeps being removed and made again")
