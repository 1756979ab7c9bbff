"""GSD frames in HOOMD-blue's schema (HOOMD-blue's ``write.GSD``, the ``gsd`` package, ``--dump``'s ``.gsd``).

The file is opened with the ``gsd`` package (the ``dump`` extra), which
checks it and counts its frames; a frame's small chunks (the box, ``N``, the
types, the topology's counts) are read through it.  Its per-particle chunks
are read a round of rows at a time from their places in the file, which the
GSD index gives (the file layer's specification: a 256-byte header, index
entries of ``frame N location M id type flags``, the names): no rank holds a
chunk whole.  As in HOOMD-blue, a chunk a frame leaves out is frame 0's, else
the schema's default (no velocities: drawn at ``--temperature``; masses 1,
charges 0, bodies -1).

HOOMD's box is centred on the origin (``[-L/2, L/2)`` along each axis, of its own edge ``L``); ``--dump`` writes
positions so and the ids in ``log/particles/id`` (else 1..N in the frame's
order).  Refused: a file the package cannot read (damaged, or cut short), a
frame with tilt factors (triclinic), a 2-D one, several
particle types, masses other than 1, charges, rigid bodies, bonds and the
other topology, an open-space trajectory (gravity's ``--dump``).  The frame is
the last unless ``PATH@FRAME`` says which.
"""

from __future__ import annotations

import dataclasses
import os
import struct

import numpy as np

from pympi_gpu.nbody.lj.readers import ROUND_ROWS, RUNS, Block, Header, InitError, Spec, orthogonal_edges

__all__ = ["KIND", "sniff", "open_file", "parse", "MAGIC"]

KIND = "gsd"
#: the first 8 bytes of every GSD file (the file layer's magic number, little-endian)
MAGIC = struct.pack("<Q", 0x65DF65DF65DF65DF)
_HEADER = struct.Struct("<QQQQQII64s64s80s")
_INDEX = np.dtype([("frame", "<u8"), ("N", "<u8"), ("location", "<i8"), ("M", "<u4"), ("id", "<u2"),
                   ("type", "u1"), ("flags", "u1")])
_DTYPES = {1: np.uint8, 2: np.uint16, 3: np.uint32, 4: np.uint64, 5: np.int8, 6: np.int16, 7: np.int32,
           8: np.int64, 9: np.float32, 10: np.float64}
#: the per-particle chunks read, their width, and their default where a frame (and frame 0) has none
_PER_PARTICLE = {"particles/position": (3, None), "particles/velocity": (3, None), "particles/typeid": (1, 0),
                 "particles/mass": (1, 1.0), "particles/charge": (1, 0.0), "particles/body": (1, -1),
                 "log/particles/id": (1, None)}
_TOPOLOGY = ("bonds", "angles", "dihedrals", "impropers", "constraints", "pairs")


@dataclasses.dataclass(frozen=True)
class Layout:
    """The frame's per-particle chunks present (name -> ``(location, dtype)``), the first particle's type."""

    chunks: dict
    first_type: int


def sniff(head: bytes) -> bool:
    return head.startswith(MAGIC)


def _gsd():
    try:
        import gsd.fl
    except ImportError:
        raise InitError("--init: reading a GSD file needs the gsd package: pip install 'pympi_gpu[dump]'") from None
    return gsd.fl


def open_file(spec: Spec):
    return _Reader(spec)


class _Reader:
    """A GSD file open on the reading rank: the frame found, its small chunks read and checked."""

    def __init__(self, spec: Spec):
        fl = _gsd()
        self.path = spec.path
        try:
            self.file = fl.open(spec.path, "r")
        except (RuntimeError, OSError, ValueError) as exc:
            if isinstance(exc, PermissionError):
                raise InitError(f"--init {spec.path!r} cannot be read: {exc.strerror or exc}") from None
            raise InitError(f"--init {spec.path!r} is not a readable GSD file (damaged, or cut short): {exc}") from None
        self.fh = None
        try:
            self.header = self._header(spec)
            self.fh = open(spec.path, "rb")
        except (RuntimeError, KeyError, ValueError, struct.error) as exc:  # a chunk the package cannot read
            self.close()
            if isinstance(exc, InitError):
                raise
            raise InitError(f"--init {spec.path!r} is not a readable GSD file (damaged, or cut short): {exc}") from None
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()
        self.file.close()

    def _header(self, spec: Spec) -> Header:
        f = self.file
        if f.schema != "hoomd":
            raise InitError(f"--init {self.path!r} is a GSD file of the schema {f.schema!r}, not HOOMD-blue's "
                            "('hoomd')")
        count = f.nframes
        index = -1 if spec.frame is None else spec.frame
        if count == 0:
            raise InitError(f"--init {self.path!r} holds no frame")
        if not -count <= index < count:
            raise InitError(f"--init {spec.text!r}: the file holds {count} frame(s): there is no frame {index} "
                            f"(0 to {count - 1}, or -{count} to -1 from the end)")
        self.frame = index % count
        step = self._small("configuration/step", np.array([0]))
        where = f"frame {self.frame} of {count}, step {int(step[0])}" if count > 1 else ""
        name = repr(self.path) + (f" ({where})" if where else "")

        def fail(why: str) -> InitError:
            return InitError(f"--init {name}: {why}")

        log = self._small("log/pympi/run", None)
        if log is not None and b"model=gravity" in bytes(np.asarray(log, np.uint8)):
            raise fail(f"a trajectory of the gravity model (open space): {RUNS}")
        periodic = self._small("log/periodic", None)
        if periodic is not None and not int(np.asarray(periodic).ravel()[0]):
            raise fail(f"a trajectory of open space: {RUNS}")
        if int(self._small("configuration/dimensions", np.array([3]))[0]) != 3:
            raise fail(f"a 2-D system: {RUNS}")
        box = np.asarray(self._small("configuration/box", np.array([1.0, 1.0, 1.0, 0.0, 0.0, 0.0])), np.float64)
        if box.size != 6:
            raise fail(f"configuration/box holds {box.size} values, not 6")
        if np.count_nonzero(box[3:]):
            raise fail(f"a triclinic box (tilt factors {box[3]:g} {box[4]:g} {box[5]:g}): {RUNS}")
        edges = orthogonal_edges(name, box[:3])
        n = int(self._small("particles/N", np.array([0]))[0])
        if n < 1:
            raise fail("the frame holds no particles")
        for group in _TOPOLOGY:
            k = int(self._small(f"{group}/N", np.array([0]))[0])
            if k:
                raise fail(f"{k} {group}: {RUNS}")
        chunks = self._locate(n, fail)
        if "particles/position" not in chunks:
            raise fail("no particles/position: the positions are needed")
        first_type = int(self._rows(chunks, "particles/typeid", 0, 1, fail)[0]) if "particles/typeid" in chunks else 0
        return Header(kind=KIND, path=self.path, atoms=n, lo=tuple(-0.5 * e for e in edges), box=edges,
                      velocities="particles/velocity" in chunks, ids="log/particles/id" in chunks, where=where,
                      layout=Layout(chunks=chunks, first_type=first_type))

    def _small(self, name: str, default):
        """A chunk of the frame, else frame 0's, else ``default``."""
        for frame in (self.frame, 0):
            if self.file.chunk_exists(frame=frame, name=name):
                return self.file.read_chunk(frame=frame, name=name)
        return default

    def _locate(self, n: int, fail) -> dict:
        """The per-particle chunks of the frame (else frame 0's): ``name -> (location, dtype, width)``."""
        with open(self.path, "rb") as fh:
            head = fh.read(_HEADER.size)
            if len(head) < _HEADER.size:
                raise fail("the GSD header is cut short")
            (_, index_at, entries, names_at, names_count, *_rest) = _HEADER.unpack(head)
            fh.seek(names_at)
            names = [s.decode("utf-8", "replace") for s in fh.read(names_count * 64).split(b"\x00") if s]
            fh.seek(index_at)
            index = np.frombuffer(fh.read(entries * _INDEX.itemsize), _INDEX)
        index = index[: int(np.argmax(index["location"] == 0)) if (index["location"] == 0).any() else index.size]
        ids = {name: i for i, name in enumerate(names)}
        size = os.path.getsize(self.path)
        found = {}
        for name, (width, _default) in _PER_PARTICLE.items():
            if name not in ids:
                continue
            for frame in (self.frame, 0):
                hit = index[(index["frame"] == frame) & (index["id"] == ids[name])]
                if hit.size:
                    e = hit[-1]
                    dtype = _DTYPES.get(int(e["type"]))
                    if dtype is None or int(e["N"]) != n or int(e["M"]) != width:
                        raise fail(f"{name} holds {int(e['N'])} x {int(e['M'])} values, not {n} x {width}")
                    end = int(e["location"]) + n * width * np.dtype(dtype).itemsize
                    if end > size:
                        raise fail(f"{name} runs past the end of the file: it is cut short")
                    found[name] = (int(e["location"]), np.dtype(dtype).str, width)
                    break
        return found

    def _rows(self, chunks: dict, name: str, start: int, stop: int, fail=None) -> np.ndarray:
        location, dtype, width = chunks[name]
        dtype = np.dtype(dtype)
        fh = self.fh or open(self.path, "rb")
        try:
            fh.seek(location + start * width * dtype.itemsize)
            data = fh.read((stop - start) * width * dtype.itemsize)
        finally:
            if fh is not self.fh:
                fh.close()
        if len(data) != (stop - start) * width * dtype.itemsize:
            raise InitError(f"--init {self.path!r}: {name} is cut short: the file changed while it was read")
        rows = np.frombuffer(data, dtype)
        return rows.reshape(-1, width) if width > 1 else rows

    def pieces(self, parts: int, rows: int = ROUND_ROWS):
        """The frame's per-particle chunks, ``rows`` a round: ``parts`` payloads ``(first, arrays)``."""
        h = self.header
        chunks = h.layout.chunks
        for start in range(0, h.atoms, rows):
            stop = min(start + rows, h.atoms)
            arrays = {name: self._rows(chunks, name, start, stop) for name in chunks}
            out = []
            for p in range(parts):
                a, b = (p * (stop - start)) // parts, ((p + 1) * (stop - start)) // parts
                out.append((start + a, {name: rows[a:b] for name, rows in arrays.items()}))
            yield out


def parse(header: Header, payload) -> Block:
    """One part's particles: positions and velocities (as float64), ids, the checks of type, mass, charge, body."""
    first, arrays = payload
    m = len(arrays["particles/position"])
    rows = np.arange(first, first + m, dtype=np.int64)  # particles counted from 0, as HOOMD's tags
    block = Block(ids=np.asarray(arrays["log/particles/id"], np.int64) if "log/particles/id" in arrays else rows + 1,
                  x=np.asarray(arrays["particles/position"], np.float64), rows=rows, unit="particle",
                  v=np.asarray(arrays["particles/velocity"], np.float64) if "particles/velocity" in arrays else None)

    def check(name: str, bad, what: str) -> None:
        if name in arrays and (hit := np.flatnonzero(bad(np.asarray(arrays[name])))).size:
            i = int(hit[0])
            raise InitError(f"--init {header.name}: particle {int(rows[i]):,}: {what(arrays[name][i])}: {RUNS}")

    first_type = header.layout.first_type
    check("particles/typeid", lambda t: t != first_type,
          lambda t: f"of type {int(t)}, where the first is of type {first_type}: several particle types")
    check("particles/mass", lambda a: a != 1, lambda a: f"of mass {float(a):g}")
    check("particles/charge", lambda a: a != 0, lambda a: f"of charge {float(a):g}")
    check("particles/body", lambda a: a != -1, lambda a: f"in rigid body {int(a)}")
    return block
