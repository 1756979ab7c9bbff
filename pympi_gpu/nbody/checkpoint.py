"""Checkpoint files of both n-body models: one ``.npz`` written atomically, streamed in blocks.

A checkpoint is a NumPy ``.npz`` archive (uncompressed members ``NAME.npy``)
of named arrays and a ``meta`` JSON string; each model (``gravity.checkpoint``,
``lj.checkpoint``) says which arrays and which meta fields, and validates its
own.  ``numpy.load`` reads it as any ``.npz``.

Writing (:func:`save_rows`) streams the ranks' rows through rank 0 in blocks
of at most :data:`BLOCK_ROWS` rows (:func:`pympi_gpu.mpi.blocks.gather_rows`),
member after member, straight into the archive: no rank ever holds the whole
system.  The archive is written to a temporary file beside the target, flushed
to disk (``fsync``) and renamed over it (``os.replace``, atomic on POSIX): a
reader sees the old checkpoint or the new one, never half of one.  A writer
killed mid-write leaves its temporary file (named with its host and pid);
the next write of the same checkpoint removes it once that writer is gone
(:func:`pympi_gpu.run.fileio.stale_temporaries`), never one a live writer is
still writing.  One run at a time writes a checkpoint path: the command claims
it before the run (:mod:`pympi_gpu.run.claims`: an ``flock`` on ``NAME.lock``
beside it, held by rank 0 for the run), after :func:`inspect` says what the
path holds: nothing, a checkpoint (and of which run), or another kind of file,
which is never replaced.  Reading (:class:`NpzRows`) goes block by block too, each
member through its own stream, so a loader can scatter a block to its owners
before it reads the next.
"""

from __future__ import annotations

import contextlib
import json
import os
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from numpy.lib import format as npy

from pympi_gpu.mpi.blocks import gather_rows
from pympi_gpu.run.fileio import atomic_open, remove_stale_temporaries
from pympi_gpu.run.outputs import Found, parse_fields

__all__ = ["BLOCK_ROWS", "CheckpointError", "unusable", "write_file", "check_writable", "inspect", "save_rows",
           "NpzRows", "KIND"]

#: the most rows of one array that pass through rank 0 at once, written or read
BLOCK_ROWS = 1 << 18
#: the most bytes a checkpoint's ``meta`` record may inflate to: it holds a few kB (the run's options, the
#: step-0 thermo row); a larger one is refused unread (damaged, or a decompression bomb)
META_MOST = 64 << 10
#: the most bytes of an array record's ``.npy`` header, and of one of its rows (three float64 values: 24)
HEADER_MOST, ROW_MOST = 4096, 64

class CheckpointError(Exception):
    """A checkpoint that cannot be written, read or used; the message is for people."""


def unusable(path: str, why: str) -> CheckpointError:
    """The error of a checkpoint whose record or arrays a run cannot take: ``why``."""
    return CheckpointError(f"{path!r} is not a usable checkpoint: {why}")


#: what a checkpoint is, in messages about a file that is not one
KIND = "a pympi-nbody checkpoint (an .npz archive with a 'meta' record)"


def inspect(path: str | os.PathLike) -> Found:
    """What the file at ``path`` holds (see :class:`~pympi_gpu.run.outputs.Found`): reads its ``meta`` only.

    A checkpoint names its run in ``meta["run"]`` (the ``key=value`` words of
    :class:`~pympi_gpu.run.outputs.RunIdentity`); one written before that
    field holds data but records no run.
    """
    p = Path(path)
    if not p.exists() or (p.is_file() and p.stat().st_size == 0):
        return Found("nothing")
    if not p.is_file():
        return Found("foreign", detail=KIND)
    try:
        with NpzRows(p) as f:
            meta = f.meta
    except CheckpointError:
        return Found("foreign", detail=KIND)
    if not isinstance(meta, dict) or not str(meta.get("format", "")).startswith("pympi_gpu.nbody"):
        return Found("foreign", detail=KIND)
    fields = parse_fields(meta["run"]) if isinstance(meta.get("run"), str) else None
    return Found("data", fields, f"a checkpoint at step {meta.get('step')}")


def write_file(path: str | os.PathLike, arrays: dict[str, np.ndarray], meta: dict) -> None:
    """Write ``arrays`` and ``meta`` to ``path`` atomically (temp file, fsync, rename).

    First removes the temporaries that writers of ``path`` killed mid-write
    left (the command line says so at the start of a run; here it happens
    silently), never those of a writer still running.
    """
    remove_stale_temporaries(path)
    with atomic_open(path) as fh:
        np.savez(fh, meta=np.array(json.dumps(meta)), **arrays)


def check_writable(path: str) -> str | None:
    """Why a checkpoint cannot be written to ``path`` (None if it can); no side effects."""
    p = Path(path)
    if p.is_dir():
        return f"checkpoint path {path!r} is a directory"
    directory = p.parent if str(p.parent) else Path(".")
    if not directory.is_dir():
        return f"the directory of checkpoint {path!r} does not exist"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"the directory of checkpoint {path!r} is not writable"
    return None


class _NpzWriter:
    """Rank 0's side of :func:`save_rows`: an ``.npz`` written member by member.

    The first ``OSError`` is kept (:attr:`error`) and every later call does
    nothing, so that rank 0 still takes part in every block of the transfer.
    """

    def __init__(self, path: str):
        self.path = path
        self.error: str | None = None
        self._stack = contextlib.ExitStack()
        self._member = None
        try:
            remove_stale_temporaries(path)
            fh = self._stack.enter_context(atomic_open(path))
            self._zip = self._stack.enter_context(zipfile.ZipFile(fh, "w", zipfile.ZIP_STORED, allowZip64=True))
        except OSError as exc:
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = f"cannot write checkpoint {self.path!r}: {getattr(exc, 'strerror', None) or exc}"
            # the member and the archive closed first (their writes fail too): else the archive, still
            # writing a member, complains when it is collected
            for item in (self._member, getattr(self, "_zip", None)):
                if item is not None:
                    with contextlib.suppress(Exception):
                        item.close()
            self._member = None
            with contextlib.suppress(BaseException):
                self._stack.__exit__(type(exc), exc, exc.__traceback__)  # removes the temporary file

    def begin(self, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> None:
        if self.error:
            return
        try:
            self._member = self._zip.open(f"{name}.npy", "w", force_zip64=True)
            header = {"descr": npy.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": shape}
            npy.write_array_header_1_0(self._member, header)  # a shape's header is far below 1.0's 64 KiB
        except OSError as exc:
            self._fail(exc)

    def write(self, start: int, rows: np.ndarray) -> None:
        if self.error:
            return
        try:
            self._member.write(memoryview(np.ascontiguousarray(rows)).cast("B"))
        except OSError as exc:
            self._fail(exc)

    def end(self) -> None:
        if self.error:
            return
        try:
            self._member.close()
        except OSError as exc:
            self._fail(exc)

    def finish(self, meta: dict) -> str | None:
        """Write ``meta`` and put the file in place; return the error, if any."""
        if not self.error:
            try:
                with self._zip.open("meta.npy", "w") as fp:
                    npy.write_array(fp, np.array(json.dumps(meta)))
                self._stack.close()  # closes the archive, fsyncs and renames
            except OSError as exc:
                self._fail(exc)
        return self.error


def save_rows(comm, path: str, key: np.ndarray, local: dict[str, np.ndarray], total: int, meta: dict,
              block: int = BLOCK_ROWS) -> None:
    """Write every rank's rows of ``local`` to one checkpoint at ``path``; collective over comm.

    ``key`` ``(n,)`` gives the global row (``0..total-1``) of each local row;
    the file holds each array in that order.  Rows stream through rank 0 in
    blocks of at most ``block`` rows.  A failure on rank 0 (the disk, or a row
    lost or held twice) raises :class:`CheckpointError` on every rank, and
    ``path`` keeps what it held before.
    """
    writer = _NpzWriter(path) if comm.Get_rank() == 0 else None
    for name, array in local.items():
        if writer:
            writer.begin(name, array.dtype, (int(total), *array.shape[1:]))
        try:
            gather_rows(comm, key, array, int(total), block, writer.write if writer else _nowhere)
        except (OSError, ValueError) as exc:  # raised on rank 0 only, after the last block
            writer._fail(exc)
        if writer:
            writer.end()
    error = writer.finish(meta) if writer else None
    error = comm.bcast(error, root=0)
    if error:
        raise CheckpointError(error)


def _nowhere(start: int, rows: np.ndarray) -> None:  # the sink of ranks other than the root
    raise AssertionError("rows reach only the root")


def _size(nbytes: int) -> str:
    """``64 MiB``, ``4,096 bytes``: a size for a message."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:,} bytes"


_READ_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile, json.JSONDecodeError, KeyError)


class NpzRows:
    """A checkpoint read block by block: its ``meta`` and, per array, dtype, shape and rows.

    ``NpzRows(path)`` opens the archive and reads ``meta``; :meth:`open`
    reads the headers of the arrays named (not their data), and
    :meth:`blocks` then yields their rows side by side, each member read
    through its own stream.  Everything unusable raises
    :class:`CheckpointError` with a message for people.  A context manager; use
    it on one rank.
    """

    def __init__(self, path: str | os.PathLike, *, file=None):
        self.path = str(path)
        self.dtype, self.shape = {}, {}
        self._streams, self._zip, self._file = {}, None, None
        p = Path(path)
        if file is None:
            if not p.exists():
                raise CheckpointError(f"restart file {self.path!r} does not exist")
            if p.is_dir():
                raise CheckpointError(f"restart file {self.path!r} is a directory")
        with self._reading():
            # the file opened once: a run that replaces the path meanwhile (a checkpoint every K
            # steps) leaves this reader, and those made by again(), on the file it opened
            self._file = open(p, "rb") if file is None else file
            if not zipfile.is_zipfile(self._file):
                raise CheckpointError(f"{self.path!r} is not a readable checkpoint: not an .npz archive "
                                      "(truncated, corrupt, or another kind of file)")
            self._zip = zipfile.ZipFile(self._file)
            if "meta.npy" not in self._zip.namelist():
                raise CheckpointError(f"{self.path!r} is not a pympi-nbody checkpoint (no 'meta' record)")
            self._bound("meta.npy", META_MOST, "the 'meta' record", "a checkpoint's (a few kB)")
            with self._zip.open("meta.npy") as fp:
                self.meta = json.loads(str(npy.read_array(fp, allow_pickle=False)))

    @contextlib.contextmanager
    def _reading(self):
        """Turn what a damaged or unreadable file raises into one :class:`CheckpointError` (and close)."""
        try:
            yield
        except CheckpointError:
            self.close()
            raise
        except PermissionError:
            self.close()
            raise CheckpointError(f"restart file {self.path!r} is not readable (permission denied)") from None
        except _READ_ERRORS as exc:
            self.close()
            raise CheckpointError(f"{self.path!r} is not a readable checkpoint (truncated or corrupt?): "
                                  f"{exc}") from None

    def _bound(self, member: str, most: int, what: str, whose: str) -> None:
        """Refuse ``member`` unread where the archive's directory says it inflates to more than ``most`` bytes.

        A reader of the member never gets more than the directory's size (zipfile stops there), so this
        bounds what reading it can take: a 1 MB file whose record inflates to 1 GB is refused at once.
        """
        size = self._zip.getinfo(member).file_size
        if size > most:
            raise CheckpointError(f"{self.path!r} is not a readable checkpoint: {what} holds {_size(size)} once "
                                  f"inflated, far more than {whose}: refused unread (damaged, or a decompression "
                                  "bomb)")

    def open(self, names, rows: int) -> None:
        """Read the headers of the arrays ``names`` into :attr:`dtype` and :attr:`shape`.

        ``rows`` is the count of atoms (bodies) the record says: an array's record that inflates to more
        than that many rows can hold is refused before any of it is read.
        """
        with self._reading():
            members = set(self._zip.namelist())
            missing = [n for n in names if f"{n}.npy" not in members]
            if missing:
                raise CheckpointError(f"{self.path!r} lacks the array(s) {', '.join(missing)}")
            for n in names:
                self._bound(f"{n}.npy", HEADER_MOST + rows * ROW_MOST, f"array {n!r}",
                            f"{rows:,} rows fill (at most {_size(HEADER_MOST + rows * ROW_MOST)})")
                fp = self._streams[n] = self._zip.open(f"{n}.npy")
                version = npy.read_magic(fp)
                read_header = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}.get(version)
                if read_header is None:
                    raise ValueError(f"array {n!r}: .npy format version {version} is not supported")
                self.shape[n], fortran, self.dtype[n] = read_header(fp)
                if fortran or self.dtype[n].hasobject:
                    raise ValueError(f"array {n!r} is not a plain C-ordered array")

    def holds(self, name: str) -> bool:
        """Does the archive hold the array ``name`` (an optional one)?"""
        with self._reading():
            return f"{name}.npy" in self._zip.namelist()

    def blocks(self, names, block: int = BLOCK_ROWS) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        """Yield ``(first row, {name: rows})`` for consecutive blocks of at most ``block`` rows.

        The arrays ``names`` must have the same number of rows; each is read
        once, in order, from its own stream (so :meth:`blocks` runs once per
        array: open a new :class:`NpzRows` to read again).
        """
        total = self.shape[names[0]][0] if names else 0
        for first in range(0, total, block):
            m = min(block, total - first)
            rows = {}
            for n in names:
                tail = self.shape[n][1:]
                want = m * int(np.prod(tail, dtype=np.int64)) * self.dtype[n].itemsize
                with self._reading():
                    data = self._streams[n].read(want)
                if len(data) != want:
                    raise CheckpointError(f"{self.path!r} is not a readable checkpoint (truncated or corrupt?): "
                                          f"array {n!r} ends early")
                rows[n] = np.frombuffer(data, self.dtype[n]).reshape(m, *tail)
            yield first, rows

    def again(self) -> NpzRows:
        """A reader of the same file from its start (:meth:`blocks` reads once): the file this one
        opened, not the path, which a run writing checkpoints may have replaced since.  This one is
        closed; the new one closes the file."""
        file, self._file = self._file, None
        self.close()
        return NpzRows(self.path, file=file)

    def close(self) -> None:
        for fp in self._streams.values():
            with contextlib.suppress(Exception):
                fp.close()
        self._streams = {}
        if self._zip is not None:
            self._zip.close()
            self._zip = None
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
