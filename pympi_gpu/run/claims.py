"""The files a run will write, claimed before its first step: each its own, none a stranger's.

A command names every file it will write before it starts (a run's
checkpoint, trajectory and thermo log; a study's results and reports) and
claims them together, on the rank that writes them, through one
:class:`Claim`:

1. no two outputs may name one file (:meth:`Claim.distinct`: the same device
   and inode where it exists, else the same resolved path);
2. each is locked for the whole run, before what it holds is judged, so no
   other run can start on it between the verdict and the first write, nor
   during the run: the file itself where it is appended to in place
   (:meth:`Claim.in_place`), a lock file ``NAME.lock`` beside it where it is
   replaced whole (:meth:`Claim.beside`: a checkpoint);
3. a path that is not a regular file (a directory, FIFO, device, a link to
   nothing) is refused, and a lock file's name taken by a user's file too
   (:mod:`pympi_gpu.run.locks`);
4. the caller then judges what each file holds by its kind's rule
   (:func:`pympi_gpu.run.outputs.decide`).

A refusal raises :class:`~pympi_gpu.run.outputs.OutputRefused` (bad input:
exit status 2), after :meth:`Claim.abandon` let go of everything and removed
the files the claim made: a refused run leaves the directory as it was.

While the run goes on, :meth:`Claim.lost` says which files are no longer
the ones claimed (removed, with their directory or not, moved away, or
replaced by another file: the inode held against the one at the path, and
its link count), so that the run stops instead of writing into a file
nobody can read any more, or making a removed directory again.
"""

from __future__ import annotations

import os

from pympi_gpu.run.locks import (LOCK_SUFFIX, MOVED, REMOVED, REMOVED_WITH_DIRECTORY, REPLACED, HeldFile, LockError,
                                  Locked, LockFile, holder_of, lock_in_place)
from pympi_gpu.run.outputs import OutputRefused

__all__ = ["Claim", "file_key", "lock_path_of"]


def file_key(path: str | os.PathLike):
    """What names one file: ``(device, inode)`` where ``path`` exists (links followed), else its resolved path."""
    try:
        st = os.stat(path)
    except OSError:
        return os.path.realpath(path)
    return st.st_dev, st.st_ino


def lock_path_of(path: str | os.PathLike) -> str:
    """The lock file beside ``path`` (``NAME.lock``)."""
    return os.fspath(path) + LOCK_SUFFIX


class Claim:
    """What one run holds of its files (on the rank that writes them); see the module's docstring.

    ``prog`` names the command in the messages (``pympi-nbody``).  Each
    ``option`` is the option that named the file (``--dump``), for messages.
    :attr:`unlocked` collects why a file could not be locked (a filesystem
    without ``flock``): the run goes on, and says so.
    """

    def __init__(self, prog: str):
        self.prog = prog
        self.keys: dict = {}
        self.held: list[HeldFile | LockFile] = []
        self.named: list[tuple[str, str, HeldFile | LockFile]] = []  # (option, path, what holds it)
        self.unlocked: list[str] = []

    def distinct(self, *named: tuple[str, str | None]) -> None:
        """Refuse two outputs that name one file: ``named`` is ``(option, path)`` pairs (None: not asked for)."""
        for option, path in named:
            if not path:
                continue
            key = file_key(path)
            if key in self.keys:
                first, where = self.keys[key]
                same = f"{first} {where!r} and {option} {path!r}" if where != path else f"{first} and {option}"
                raise OutputRefused(f"{same} name one file {path!r}: give each output a file of its own")
            self.keys[key] = (option, path)

    def in_place(self, option: str, path: str, busy: str) -> HeldFile:
        """Lock the file ``path`` itself (made empty if absent) for the run.

        ``busy`` says what the other holder does with it (``being written by another pympi-nbody run``).
        """
        return self._take(option, path, busy, lambda: lock_in_place(path))

    def beside(self, option: str, path: str, busy: str) -> LockFile:
        """Lock ``path`` through its lock file ``NAME.lock`` for the run (``busy``: as :meth:`in_place`)."""
        return self._take(option, path, busy, lambda: LockFile(lock_path_of(path)).acquire())

    def _take(self, option: str, path: str, busy: str, lock):
        try:
            item = lock()
        except Locked as exc:
            raise OutputRefused(f"{option} {path!r} is {busy}{holder_of(exc.holder)}: wait for it to end, or "
                                "choose another path") from None
        except LockError as exc:  # its words name the file (the output, or its lock file)
            raise OutputRefused(f"{option} {exc}") from None
        self.named.append((option, path, item))
        return self._hold(item)

    def lost(self) -> tuple[str | None, list[str]]:
        """Which claimed files are no longer the ones held: a message for people (None: every one is), and
        the options that named them.

        A file locked in place is judged itself; one locked beside (a
        checkpoint) by its lock file, which goes with its directory.
        """
        found: dict[tuple[str, str], list[str]] = {}
        options = []
        for option, path, item in self.named:
            why = item.lost()
            if why is None:
                continue
            options.append(option)
            where = (os.path.dirname(path) or ".") if why == REMOVED_WITH_DIRECTORY else ""
            label = f"{option} {path!r}" + (" (its lock file)" if isinstance(item, LockFile) else "")
            found.setdefault((why, where), []).append(label)
        if not found:
            return None, []
        parts = []
        for (why, where), labels in found.items():
            many = len(labels) > 1
            names = labels[0] if not many else ", ".join(labels[:-1]) + " and " + labels[-1]
            was = "were" if many else "was"
            parts.append(f"{names} {was} " + {
                REMOVED_WITH_DIRECTORY: f"removed during the run with {'their' if many else 'its'} directory "
                                        f"{where!r}, which a run never makes again",
                REMOVED: "removed during the run",
                MOVED: "moved away during the run",
                REPLACED: "replaced by another file during the run"}[why])
        return "; ".join(parts), options

    def _hold(self, item):
        self.held.append(item)
        if item.unlocked:
            self.unlocked.append(f"{item.unlocked}; a second run on the same file would not be refused")
        return item

    def release(self) -> None:
        """Let go of every file (the run is over): lock files are removed, the outputs stay."""
        for item in reversed(self.held):
            item.release()
        self.held = []

    def abandon(self) -> None:
        """Let go of every file and remove those the claim made (the run was refused)."""
        for item in reversed(self.held):
            if isinstance(item, HeldFile):
                item.release(remove=True)
            else:
                item.release()
        self.held = []
