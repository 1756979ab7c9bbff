"""Trajectories users open in OVITO, ASE or HOOMD-blue: extended XYZ and GSD, one frame at a time.

:func:`open_dump` picks the format from the suffix: ``.extxyz`` (also
``.xyz``) writes extended XYZ, whose comment line carries the box
(``Lattice``), the periodic directions, the step and time, and whose columns
are ``species id pos velo`` (OVITO and ``ase.io.read`` read it); ``.gsd``
writes HOOMD-blue's GSD through the ``gsd`` package (the ``dump`` extra),
with the ids in each frame's ``log['particles/id']``.  Frames hold every
body in id order, written by rank 0 (the caller gathers them).

Every frame names its run (:class:`~pympi_gpu.run.outputs.RunIdentity`):
extended XYZ as ``key=value`` fields of its header (``model=lj n=4000
box=... seed=...``, which ASE puts in ``atoms.info``), GSD as the text of
``log['pympi/run']``.  :func:`inspect` reads what a file already there holds,
so that a run never writes onto another run's trajectory or onto a file that
is none (see :func:`pympi_gpu.run.outputs.decide`).

A frame is added in one write (short writes continued) and flushed, so a
reader sees whole frames (bar the one being written); a write that fails (a
full disk) cuts the file back to its last whole frame and raises.  A job
killed mid-frame leaves at most one torn frame at the end, which the next
:func:`open_dump` that continues the file (a restart) cuts off, after
reading the file whole: damaged anywhere else, or holding a frame past the
restart's checkpoint, it is refused and left as it is.  GSD commits a
frame only after all its data are written: a torn one is never read.  A
writer continuing a file skips the frames up to the step the file already
holds: a restarted run repeats none.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
from pathlib import Path

import numpy as np

from pympi_gpu.run.fileio import NEW_FILE_MODE, append_whole
from pympi_gpu.run.outputs import (APPEND, NEW, Cadence, Found, OutputError, OutputRefused, RunIdentity, damaged,
                                   past_checkpoint,
                                   parse_fields)

__all__ = ["FORMATS", "DumpError", "format_of", "open_dump", "write_frame", "read_frame", "inspect", "ExtxyzDump",
           "GsdDump", "IDENTITY_LOG"]

#: the suffixes understood, and their format
FORMATS = {".extxyz": "extxyz", ".xyz": "extxyz", ".gsd": "gsd"}
#: the GSD log entry that names the run (its ``key=value`` text as bytes)
IDENTITY_LOG = "pympi/run"
#: bytes of an extended-XYZ file read to judge what it is
_PEEK = 65536


class DumpError(OutputError):
    """A trajectory frame that cannot be written; the message is for people."""


def write_frame(comm, writer, step: int, time: float, full: dict | None, path: str) -> None:
    """Rank 0 appends the gathered ``full`` (``id x v``) to ``writer``; a failure raises on every rank.

    Collective over comm (the verdict is broadcast), so no rank runs on alone.
    """
    error = None
    if comm.Get_rank() == 0:
        try:
            writer.write(step, time, full["id"], full["x"], full["v"])
        except OSError as exc:
            error = (f"cannot write dump {path!r}: {exc.strerror or exc} (the trajectory keeps every frame "
                     "before this one)")
    error = comm.bcast(error, root=0)
    if error:
        raise DumpError(error)


def format_of(path: str | os.PathLike) -> str:
    """``"extxyz"`` or ``"gsd"`` from the suffix; ValueError for any other."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"dump file {os.fspath(path)!r}: the suffix must be one of "
                         f"{', '.join(sorted(FORMATS))} (it chooses the format)")
    if FORMATS[suffix] == "gsd" and importlib.util.find_spec("gsd") is None:
        raise ValueError(f"dump file {os.fspath(path)!r}: GSD needs the gsd package: "
                         "pip install 'pympi_gpu[dump]'")
    return FORMATS[suffix]


def open_dump(path: str | os.PathLike, box, identity: RunIdentity | None = None,
              mode: str | None = None, through: int | None = None):
    """A writer for ``path`` (format by suffix); ``box`` is the periodic orthogonal box from the origin, its
    three edges (or a cube's one), or None (open space).

    ``identity`` names the run in every frame; ``mode``: ``NEW`` (start the
    file afresh), ``APPEND`` (continue it) or None (continue a file that
    exists, else start it).  A file continued is checked whole first: a torn
    last frame is cut, anything else damaged refused (:func:`~pympi_gpu.run.outputs.damaged`),
    and so are frames past the restart's checkpoint ``through`` (its step, or
    its :class:`~pympi_gpu.run.outputs.Cadence`) but those the restart writes
    again, which are cut and said in the writer's ``note``
    (:func:`~pympi_gpu.run.outputs.past_checkpoint`), the file left as it
    was where refused.  Raises OSError where the file cannot be opened.
    """
    return (GsdDump if format_of(path) == "gsd" else ExtxyzDump)(path, box, identity, mode, through)


def inspect(path: str | os.PathLike) -> Found:
    """What the file at ``path`` holds (see :class:`~pympi_gpu.run.outputs.Found`), without reading it whole."""
    p = Path(path)
    if not p.exists() or (p.is_file() and p.stat().st_size == 0):
        return Found("nothing")
    if format_of(p) == "gsd":
        return _inspect_gsd(p)
    what = "a trajectory (extended XYZ: an atom count, a header line, a line per atom)"
    if not p.is_file():
        return Found("foreign", detail=what)
    with open(p, "rb") as fh:
        lines = fh.read(_PEEK).split(b"\n")
    count = lines[0].strip()
    if not count.isdigit() or (len(lines) > 2 and int(count) and len(lines[2].split()) < 4):
        return Found("foreign", detail=what)
    header = lines[1].decode("utf-8", "replace") if len(lines) > 2 else ""
    fields = parse_fields(header)
    start = f", from step {fields['step']}" if "step" in fields else ""
    return Found("data", fields, f"a trajectory of {int(count):,} atoms{start}")


def _inspect_gsd(path: Path) -> Found:
    import gsd.fl

    try:
        _scan_gsd(path)  # its index whole first: a damaged one can hide the records read below
    except OutputRefused as exc:
        return Found("data", None, "a damaged GSD trajectory", damage=str(exc))
    except (OSError, ValueError) as exc:
        if isinstance(exc, PermissionError):
            raise
        return Found("foreign", detail="a GSD trajectory")
    try:
        with gsd.fl.open(os.fspath(path), "r") as f:
            if f.nframes == 0:
                return Found("nothing")
            fields = None
            if f.chunk_exists(frame=0, name=f"log/{IDENTITY_LOG}"):
                fields = parse_fields(bytes(f.read_chunk(frame=0, name=f"log/{IDENTITY_LOG}")).decode("utf-8",
                                                                                                     "replace"))
            last = f.nframes - 1
            step = (int(f.read_chunk(frame=last, name="configuration/step")[0])
                    if f.chunk_exists(frame=last, name="configuration/step") else 0)
            return Found("data", fields, f"a GSD trajectory of {f.nframes} frame(s), the last at step {step}")
    except (RuntimeError, OSError, ValueError, KeyError) as exc:
        if isinstance(exc, PermissionError):
            raise
        return Found("foreign", detail="a GSD trajectory")


def _edges(box) -> tuple[float, float, float] | None:
    """The three edges of a periodic box given as one number (a cube) or three; None: open space."""
    if box is None:
        return None
    if isinstance(box, (int, float)):
        return (float(box),) * 3
    lx, ly, lz = (float(e) for e in box)
    return lx, ly, lz


class ExtxyzDump:
    """Extended XYZ frames appended to ``path`` (see :func:`open_dump`)."""

    def __init__(self, path: str | os.PathLike, box, identity: RunIdentity | None = None,
                 mode: str | None = None, through: Cadence | int | None = None):
        self.path, self.box = Path(path), _edges(box)
        self.identity = "" if identity is None else " " + identity.text()
        if mode is None:
            mode = APPEND if self.path.is_file() and self.path.stat().st_size else NEW
        self.note = None
        self.after = self._repair(through) if mode == APPEND else None
        # opened now: a directory or file that cannot be written is found before the run
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | (0 if mode == APPEND else os.O_TRUNC),
                     NEW_FILE_MODE)
        os.close(fd)

    def _repair(self, through: Cadence | int | None) -> int | None:
        """Cut a torn last frame off an existing file; return the last whole frame's step.

        The file is read whole first (:func:`_scan_extxyz`): damaged before its
        end, or holding frames past the checkpoint ``through`` that the restart
        does not write again (:func:`~pympi_gpu.run.outputs.past_checkpoint`),
        it is refused untouched; those it writes again are cut (``note``).
        """
        if not self.path.is_file():
            return None
        data = self.path.read_bytes()
        good, frames = _scan_extxyz(self.path, data)
        if (cadence := Cadence.of(through)) is not None:
            past = [(step, at) for step, at in frames if step > cadence.through]
            self.note = past_checkpoint(self.path, [step for step, _ in past], cadence, "frames")
            if past:  # cut where the first of them begins
                good, frames = past[0][1], frames[:len(frames) - len(past)]
        last = frames[-1][0] if frames else None
        if good < len(data):
            with open(self.path, "r+b") as fh:
                fh.truncate(good)
        return last

    def write(self, step: int, time: float, ids, x, v) -> bool:
        """Append one frame (whole system, id order); False where the file already holds ``step``."""
        if self.after is not None and step <= self.after:
            return False
        n = len(ids)
        if self.box is None:
            cell = ""
            pbc = 'pbc="F F F"'
        else:
            lx, ly, lz = self.box
            cell = f'Lattice="{lx!r} 0.0 0.0 0.0 {ly!r} 0.0 0.0 0.0 {lz!r}" '
            pbc = 'pbc="T T T"'
        head = (f"{n}\n{cell}Properties=species:S:1:id:I:1:pos:R:3:velo:R:3 step={step} time={time!r} {pbc}"
                f"{self.identity}\n")
        buf = io.StringIO()
        np.savetxt(buf, np.column_stack([np.asarray(x, np.float64), np.asarray(v, np.float64)]),
                   fmt="%.17g")  # every digit: a float64 reads back exactly
        body = "".join(f"X {i} {row}\n" for i, row in zip(np.asarray(ids).tolist(), buf.getvalue().splitlines()))
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, NEW_FILE_MODE)
        try:
            append_whole(fd, (head + body).encode("ascii"))  # whole, or cut off again: readers see whole frames
        finally:
            os.close(fd)
        return True

    def close(self) -> None:
        pass


#: the words of a frame's atom line: ``X id x y z vx vy vz``
_ATOM_WORDS = 8


def _scan_extxyz(path, data: bytes) -> tuple[int, list[tuple[int, int]]]:
    """``(bytes of the whole frames, (step, first byte) of each)`` of an extended-XYZ file this module wrote.

    Each frame is its atom count (the first frame's), a header whose ``step=``
    is a whole number above the frame before's, and that many atom lines of
    :data:`_ATOM_WORDS` words.  What follows the last whole frame is a torn
    one (a writer killed mid-frame: every line it has is whole or the file's
    last) or nothing; anything else raises :func:`~pympi_gpu.run.outputs.damaged`
    naming the line.  Words are counted for every line at once (NumPy), so a
    large file takes one pass.
    """
    arr = np.frombuffer(data, np.uint8)
    ends = np.flatnonzero(arr == ord("\n"))  # where every whole line ends
    starts = np.concatenate(([0], ends[:-1] + 1)).astype(np.int64)
    blank = (arr == ord(" ")) | (arr == ord("\t")) | (arr == ord("\r")) | (arr == ord("\n"))
    first = np.flatnonzero(~blank & np.concatenate(([True], blank[:-1])))  # where every word begins
    words = np.searchsorted(first, ends) - np.searchsorted(first, starts)  # words of each whole line
    lines, line, good, last, atoms, frames = len(ends), 0, 0, None, None, []

    def text(k: int) -> str:
        return data[starts[k]:ends[k]].decode("utf-8", "replace").strip()

    while line < lines:
        count = text(line)
        if not count.isdigit() or (atoms is not None and int(count) != atoms):
            what = (f"{count[:40]!r} where the atom count of a frame ({atoms} atoms) should be" if atoms is not None
                    else f"{count[:40]!r} where a frame's atom count should be")
            raise damaged(path, f"line {line + 1}", what, "frame")
        atoms = int(count)
        if line + 1 < lines:  # the header, whole
            try:
                step = int(_field(text(line + 1), "step"))
            except ValueError:
                raise damaged(path, f"line {line + 2}", f"the frame header's step={_value(text(line + 1), 'step')} "
                              "is not a whole number", "frame") from None
            if last is not None and step <= last:
                raise damaged(path, f"line {line + 2}", f"a frame at step {step} follows the frame at step {last}",
                              "frame")
        rows = words[line + 2:line + 2 + atoms]
        wrong = np.flatnonzero(rows != _ATOM_WORDS)
        if wrong.size:
            k = line + 2 + int(wrong[0])
            raise damaged(path, f"line {k + 1}", f"{text(k)[:40]!r} ({int(words[k])} word(s)) where an atom line "
                          f"of the frame of line {line + 1} ({_ATOM_WORDS} words) should be", "frame")
        if line + 2 + atoms > lines:
            break  # the last frame, torn: every line it has whole is as it should be
        frames.append((step, good))
        last, line = step, line + 2 + atoms
        good = int(ends[line - 1]) + 1
    return good, frames


def _value(header: str, key: str) -> str:
    """The text of ``key=`` in a frame header, or ``(none)``."""
    try:
        return _field(header, key)
    except ValueError:
        return "(none)"


def _field(header: str, key: str) -> str:
    for item in header.split():
        if item.startswith(key + "="):
            return item.split("=", 1)[1]
    raise ValueError(f"no {key}= in the frame header {header!r}")


class GsdDump:
    """GSD frames (HOOMD-blue's schema) appended to ``path`` (see :func:`open_dump`)."""

    def __init__(self, path: str | os.PathLike, box, identity: RunIdentity | None = None,
                 mode: str | None = None, through: Cadence | int | None = None):
        import gsd.hoomd

        self.path, self.box = Path(path), _edges(box)
        self.identity = None if identity is None else np.frombuffer(identity.text().encode("utf-8"), np.uint8)
        if mode is None:
            mode = APPEND if self.path.is_file() and self.path.stat().st_size else NEW
        self.after, self.note = None, None
        if mode == APPEND:  # checked whole before GSD writes a byte: it would append after the frames it finds
            steps = _scan_gsd(self.path)
            if (cadence := Cadence.of(through)) is not None:
                past = [step for step in steps if step > cadence.through]
                self.note = past_checkpoint(self.path, past, cadence, "frames")
                if past:
                    steps = steps[:len(steps) - len(past)]
                    _cut_gsd(self.path, len(steps))
            self.after = steps[-1] if steps else None
        self.file = gsd.hoomd.open(os.fspath(path), mode="a" if mode == APPEND else "w")

    def write(self, step: int, time: float, ids, x, v) -> bool:
        import gsd.hoomd

        if self.after is not None and step <= self.after:
            return False
        frame = gsd.hoomd.Frame()
        frame.configuration.step = step
        # open space: a cube that holds every body (GSD needs a box), marked in the log
        box = self.box if self.box is not None else (max(1.0, 2.02 * float(np.abs(x).max(initial=0.0))),) * 3
        frame.configuration.box = [*box, 0, 0, 0]
        frame.particles.N = len(ids)
        frame.particles.types = ["A"]
        frame.particles.typeid = np.zeros(len(ids), np.uint32)
        # HOOMD's box runs from -L/2 to L/2; the periodic models keep theirs from 0 to L
        shift = 0.5 * np.array(self.box) if self.box is not None else 0.0
        frame.particles.position = np.asarray(x, np.float32) - np.float32(shift)
        frame.particles.velocity = np.asarray(v, np.float32)
        frame.log["particles/id"] = np.asarray(ids, np.int64)
        frame.log["time"] = np.array([time])
        frame.log["periodic"] = np.array([self.box is not None], np.uint8)
        if self.identity is not None:
            frame.log[IDENTITY_LOG] = self.identity
        self.file.append(frame)
        self.file.flush()  # GSD writes the frame's data, then its index: a failure leaves the frames before
        return True

    def close(self) -> None:
        """Close the file; every frame was flushed when written, so an error here loses nothing."""
        with contextlib.suppress(OSError):
            self.file.close()


#: GSD's file layout (version 2): the header's first fields, an index entry, and the bytes of each chunk type
_GSD_HEADER = np.dtype([("magic", "<u8"), ("index_location", "<u8"), ("index_allocated", "<u8"),
                        ("namelist_location", "<u8"), ("namelist_allocated", "<u8"), ("schema_version", "<u4"),
                        ("gsd_version", "<u4")])
_GSD_ENTRY = np.dtype([("frame", "<u8"), ("N", "<u8"), ("location", "<i8"), ("M", "<u4"), ("id", "<u2"),
                       ("type", "u1"), ("flags", "u1")])
_GSD_TYPE_BYTES = {1: 1, 2: 2, 3: 4, 4: 8, 5: 1, 6: 2, 7: 4, 8: 8, 9: 4, 10: 8, 11: 1}
_GSD_MAGIC, _GSD_NAME = 0x65DF65DF65DF65DF, 64


def _scan_gsd(path: Path) -> list[int]:
    """The steps of the frames of a GSD file this module wrote, after checking it whole.

    GSD finds its frames by a binary search of its index, so an entry lost
    in the middle (erased, or pointing past the file) can hide every frame
    after it, and an append then writes over their entries: the trajectory
    cut silently.  Every entry is checked (in the file, of a known type and
    name, the frames in order, none after the first empty one), then each
    frame's step (above the one before) and its atom count (the first
    frame's); anything else raises :func:`~pympi_gpu.run.outputs.damaged`
    naming the entry (ValueError: the file is no GSD file at all).  A frame
    GSD did not commit (a writer killed mid-frame: its data without its
    index) is not a frame, and GSD writes over it.
    """
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = np.frombuffer(fh.read(_GSD_HEADER.itemsize).ljust(_GSD_HEADER.itemsize, b"\0"), _GSD_HEADER)[0]
        if int(head["magic"]) != _GSD_MAGIC or int(head["gsd_version"]) >> 16 != 2:
            raise ValueError(f"{os.fspath(path)!r} is not a GSD file of version 2")  # another kind of file
        where, count, names = (int(head[k]) for k in ("index_location", "index_allocated", "namelist_allocated"))
        if where + count * _GSD_ENTRY.itemsize > size or int(head["namelist_location"]) + names * _GSD_NAME > size:
            raise damaged(path, "its header", "its index or its list of names runs past the end of the file",
                          "frame")
        fh.seek(where)
        index = np.frombuffer(fh.read(count * _GSD_ENTRY.itemsize), _GSD_ENTRY)
    used = index["location"] != 0
    n = int(np.argmin(used)) if not used.all() else count
    if used[n:].any():
        k = n + int(np.argmax(used[n:]))
        raise damaged(path, f"index entry {n}", f"it is empty, but entry {k} (frame {int(index['frame'][k])}) and "
                      "others follow: the frames after it would be lost", "frame")
    entries = index[:n]
    nbytes = entries["N"] * entries["M"] * np.array([_GSD_TYPE_BYTES.get(int(t), 0) for t in entries["type"]],
                                                    np.uint64)
    frames = entries["frame"].astype(np.int64)
    step = np.diff(frames, prepend=0)  # from one entry's frame to the next: 0 or 1, from frame 0
    bad = ((entries["location"] < _GSD_HEADER.itemsize) | (entries["location"].astype(np.uint64) + nbytes > size)
           | ~np.isin(entries["type"], list(_GSD_TYPE_BYTES)) | (entries["id"] >= names)
           | (step < 0) | (step > 1) | ((np.arange(n) == 0) & (frames != 0)))
    if bad.any():
        k = int(np.argmax(bad))
        raise damaged(path, f"index entry {k}", f"its chunk of frame {int(frames[k])} is not one GSD wrote (out of "
                      "order, past the end of the file, or of no known type or name)", "frame")
    return _gsd_steps(path) if n else []


def _gsd_steps(path: Path) -> list[int]:
    """The steps of a GSD file's frames, each above the one before, every frame of the first's atom count."""
    import gsd.fl

    steps = []
    with gsd.fl.open(os.fspath(path), "r") as f:
        atoms = _gsd_value(f, 0, "particles/N", 0)
        for frame in range(f.nframes):
            step = _gsd_value(f, frame, "configuration/step", 0)
            if steps and step <= steps[-1]:
                raise damaged(path, f"frame {frame}", f"its step {step} follows step {steps[-1]}", "frame")
            if _gsd_value(f, frame, "particles/N", atoms) != atoms:
                raise damaged(path, f"frame {frame}", f"it holds {_gsd_value(f, frame, 'particles/N', atoms)} "
                              f"atoms, the first frame {atoms}", "frame")
            steps.append(step)
    return steps


def _cut_gsd(path: Path, frames: int) -> None:
    """Leave the first ``frames`` frames of a GSD file :func:`_scan_gsd` checked, in place (the file claimed
    stays the same file): the index entries of the later ones are emptied, as those of a frame GSD had not
    committed, and the next frame appended writes over them (their data stays, unreferenced)."""
    with open(path, "r+b") as fh:
        head = np.frombuffer(fh.read(_GSD_HEADER.itemsize), _GSD_HEADER)[0]
        where, count = int(head["index_location"]), int(head["index_allocated"])
        fh.seek(where)
        index = np.frombuffer(fh.read(count * _GSD_ENTRY.itemsize), _GSD_ENTRY)
        first = int(np.argmax((index["frame"] >= frames) | (index["location"] == 0)))
        used = int(np.count_nonzero(index["location"] != 0))
        fh.seek(where + first * _GSD_ENTRY.itemsize)
        fh.write(bytes((used - first) * _GSD_ENTRY.itemsize))
        fh.flush()
        os.fsync(fh.fileno())


def _gsd_value(f, frame: int, name: str, default: int) -> int:
    """A frame's one-number chunk ``name``; where the frame has none, the first frame's, else ``default``
    (HOOMD's schema: a chunk a frame leaves out is the first frame's)."""
    for k in (frame, 0):
        if f.chunk_exists(frame=k, name=name):
            return int(f.read_chunk(frame=k, name=name)[0])
    return default


def read_frame(path: str | os.PathLike, index: int = -1) -> dict:
    """One frame of a trajectory this module wrote: ``step``, ``id``, ``x``, ``v``, ``box`` (the periodic box's three
    edges; None: open space).

    ``index`` counts frames from 0 (negative from the end).  ValueError, with
    a message for people, if there is no such frame or the file cannot be
    read as its format (damaged, or another kind of file).
    """
    reader = _read_gsd_frame if format_of(path) == "gsd" else _read_extxyz_frame
    try:
        return reader(path, index)
    except (ValueError, KeyError, IndexError, UnicodeDecodeError, RuntimeError, OSError) as exc:
        if isinstance(exc, (FileNotFoundError, PermissionError)):
            raise
        if isinstance(exc, _NoFrame):
            raise ValueError(str(exc)) from None
        kind = "GSD" if reader is _read_gsd_frame else "extended XYZ"
        raise ValueError(f"{os.fspath(path)!r} is not a readable {kind} trajectory (damaged, or another kind of "
                         f"file): {exc}") from None


class _NoFrame(ValueError):
    """A frame index the file does not hold."""


def _pick(path, count: int, index: int) -> int:
    """The frame ``index`` (negative: from the end) of ``count`` frames, as a position from 0."""
    if count == 0:
        raise _NoFrame(f"{os.fspath(path)!r} holds no frame")
    if not -count <= index < count:
        raise _NoFrame(f"{os.fspath(path)!r} holds {count} frame(s): there is no frame {index} (0 to {count - 1}, "
                       f"or -{count} to -1 from the end)")
    return index % count


def _read_gsd_frame(path, index: int) -> dict:
    import gsd.hoomd

    with gsd.hoomd.open(os.fspath(path)) as f:
        fr = f[_pick(path, len(f), index)]
        periodic = bool(fr.log["periodic"][0]) if "periodic" in fr.log else True
        box = _edges(fr.configuration.box[:3])
        x = fr.particles.position.astype(np.float64) + (0.5 * np.array(box) if periodic else 0.0)
        return {"step": int(fr.configuration.step), "id": np.asarray(fr.log["particles/id"]), "x": x,
                "v": fr.particles.velocity.astype(np.float64), "box": box if periodic else None}


def _read_extxyz_frame(path, index: int) -> dict:
    data = Path(path).read_bytes().decode("utf-8")
    lines = data.split("\n")
    starts, line = [], 0
    while line < len(lines) and lines[line].strip().isdigit():
        n = int(lines[line])
        if line + 2 + n > len(lines):
            break
        starts.append(line)
        line += 2 + n
    start = starts[_pick(path, len(starts), index)]
    n, header = int(lines[start]), lines[start + 1]
    table = np.loadtxt(lines[start + 2:start + 2 + n], usecols=range(1, 8), ndmin=2)
    box = None
    if 'pbc="T T T"' in header and 'Lattice="' in header:
        cell = header.split('Lattice="', 1)[1].split('"', 1)[0].split()
        box = (float(cell[0]), float(cell[4]), float(cell[8]))
    return {"step": int(_field(header, "step")), "id": table[:, 0].astype(np.int64), "x": table[:, 1:4],
            "v": table[:, 4:7], "box": box}
