"""Extended XYZ frames (ASE's ``ase.io.write``, OVITO, and ``--dump``'s ``.extxyz``).

A frame is an atom count, a line of ``key=value`` fields, and a row per atom
whose columns ``Properties`` names (``species:S:1:pos:R:3:momenta:R:3``;
without it ASE's ``species:S:1:pos:R:3``).  Read here: ``Lattice`` (the box:
orthogonal, its three edges on the diagonal), ``pbc`` (periodic along x, y and z; with a
``Lattice`` and no ``pbc``, periodic, as ASE reads it), ``Origin`` (the box's
corner, OVITO's; else 0), and the columns ``pos`` (positions), ``id`` (ids;
else 1..N in the frame's order), ``velo`` or ``velocities`` (velocities;
``--dump`` writes ``velo``), or ASE's ``momenta`` divided by the mass,
``masses`` (each 1: the engine runs mass 1; without them a species' mass as
ASE takes it: ``X`` 1, ``Ar`` 39.948, refused), ``species``, ``Z`` and
``type`` (one value: one atom type) and ``charge`` (0).  The frame is the
last unless ``PATH@FRAME`` says which (from 0, or negative from the end).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pympi_gpu.nbody.lj.readers import ROUND_ROWS, RUNS, Block, Header, InitError, Spec, orthogonal_edges
from pympi_gpu.nbody.lj.readers.lines import Lines, deal, first_words, numbers

__all__ = ["KIND", "sniff", "open_file", "parse"]

KIND = "extxyz"
_WIDTH = {"S": None, "R": "f", "I": "i", "L": None}
_POSITIONS = ("pos", "positions")
_VELOCITIES = ("velo", "velocities", "vel")
_TYPES = ("species", "z", "type", "numbers", "symbols")
_CHARGES = ("charge", "charges", "initial_charges")


@dataclasses.dataclass(frozen=True)
class Layout:
    """The frame's rows: the line of its first row and the byte offset; how many words a row holds at least; the
    word of each column read (``None``: not in the file); the first row's atom type; momenta's mass."""

    first_line: int
    offset: int
    words: int
    pos: int
    velocity: int | None
    momenta: bool
    mass: int | None
    ident: int | None
    kind_column: int | None
    kind_is_text: bool
    first_kind: str
    charge: int | None
    momentum_mass: float


def sniff(head: bytes) -> bool:
    """An atom count alone on the first line, and rows of at least four words from the third."""
    lines = head.split(b"\n")
    return len(lines) > 2 and lines[0].strip().isdigit() and len(lines[2].split()) >= 4


def open_file(spec: Spec):
    return _Reader(spec)


class _Reader:
    """An extended XYZ file open on the reading rank: the frame found, its header read."""

    def __init__(self, spec: Spec):
        self.path = spec.path
        self.fh = open(spec.path, "rb")
        try:
            self.header = self._find(spec)
        except BaseException:
            self.fh.close()
            raise

    def close(self) -> None:
        self.fh.close()

    def _fail(self, line: int, why: str) -> InitError:
        return InitError(f"--init {self.path!r}: line {line:,}: {why}")

    def _find(self, spec: Spec) -> Header:
        """Walk the frames (their rows skipped, newlines counted) to the one asked for."""
        lines = Lines(self.fh)
        frames = []  # (count line, rows' first line, byte offset, atoms, header text)
        torn = None
        while True:
            raw = lines.readline()
            while raw is not None and not raw.strip() and frames:  # blank lines after the last frame
                raw = lines.readline()
            if raw is None:
                break
            at = lines.line - 1
            count = raw.strip()
            if not count.isdigit():
                raise self._fail(at, f"{raw[:60].decode('utf-8', 'replace')!r} is not an atom count: a frame "
                                     f"starts with one (after {len(frames)} frame(s))")
            n = int(count)
            text = lines.readline()
            if text is None:
                torn = (at, 0, n)
                break
            first, offset = lines.line, lines.offset()
            got = lines.skip(n)
            if got < n:
                torn = (at, got, n)
                break
            frames.append((at, first, offset, n, text.decode("utf-8", "replace")))
            if spec.frame is not None and 0 <= spec.frame < len(frames):
                break
        index = -1 if spec.frame is None else spec.frame
        if torn is not None and (index < 0 or index == len(frames)):
            at, got, n = torn
            hint = f"; give {self.path}@{len(frames) - 1} for the last whole frame" if frames else ""
            raise InitError(f"--init {self.path!r}: line {at:,}: frame {len(frames)} is cut short after {got:,} of "
                            f"its {n:,} atoms: the file is truncated{hint}")
        if not frames:
            raise InitError(f"--init {self.path!r} holds no frame")
        if not -len(frames) <= index < len(frames):
            whole = " whole" if torn else ""
            raise InitError(f"--init {spec.text!r}: the file holds {len(frames)}{whole} frame(s): there is no frame "
                            f"{index} (0 to {len(frames) - 1}, or -{len(frames)} to -1 from the end)")
        at, first, offset, n, text = frames[index]
        self.frames = len(frames)
        where = f"frame {index % len(frames)} of {len(frames)}" if len(frames) > 1 else ""
        return self._header(at, first, offset, n, text, where)

    def _header(self, at: int, first: int, offset: int, n: int, text: str, where: str) -> Header:
        from pympi_gpu.run.outputs import parse_fields

        if n < 1:
            raise self._fail(at, "the frame holds no atoms")
        fields = {k.lower(): v for k, v in parse_fields(text).items()}
        line = at + 1
        if "lattice" not in fields:
            raise self._fail(line, f"no Lattice=\"...\": the box is needed ({RUNS})")
        cell = self._numbers(line, "Lattice", fields["lattice"], 9).reshape(3, 3)
        if np.count_nonzero(cell - np.diag(np.diag(cell))):
            raise self._fail(line, f"the Lattice {fields['lattice']!r} is not orthogonal (a triclinic box): {RUNS}")
        periodic = fields.get("pbc", "T T T").split()
        if len(periodic) != 3 or any(p not in ("T", "F", "True", "False", "1", "0") for p in periodic):
            raise self._fail(line, f"pbc={fields['pbc']!r} is not three of T and F")
        if any(p in ("F", "False", "0") for p in periodic):
            raise self._fail(line, f"pbc=\"{' '.join(periodic)}\": the box is not periodic along every axis: {RUNS}")
        lo = tuple(self._numbers(line, "Origin", fields["origin"], 3)) if "origin" in fields else (0.0, 0.0, 0.0)
        name = repr(self.path) + (f" ({where})" if where else "")
        box = orthogonal_edges(name, np.diag(cell))
        layout = self._columns(line, first, offset, fields.get("properties", "species:S:1:pos:R:3"))
        return Header(kind=KIND, path=self.path, atoms=n, lo=tuple(float(c) for c in lo), box=box,
                      velocities=layout.velocity is not None, ids=layout.ident is not None, where=where,
                      layout=layout)

    def _numbers(self, line: int, key: str, value: str, count: int) -> np.ndarray:
        try:
            out = np.array([float(w) for w in value.split()])
        except ValueError:
            out = np.zeros(0)
        if out.size != count or not np.isfinite(out).all():
            raise self._fail(line, f"{key}={value!r} is not {count} finite numbers")
        return out

    def _columns(self, line: int, first: int, offset: int, spec: str) -> Layout:
        """Which word of a row holds each column read (``Properties=name:type:count:...``)."""
        words = spec.split(":")
        if len(words) % 3:
            raise self._fail(line, f"Properties={spec!r} is not name:type:count triples")
        at, columns = 0, {}
        for name, kind, count in zip(words[0::3], words[1::3], words[2::3]):
            if kind not in _WIDTH or not count.isdigit():
                raise self._fail(line, f"Properties={spec!r}: {name}:{kind}:{count} is not name:S|R|I|L:count")
            columns[name.lower()] = (at, kind, int(count))
            at += int(count)

        def column(names, kinds, count, what):
            for n in names:
                if n in columns:
                    start, kind, width = columns[n]
                    if kind not in kinds or width != count:
                        raise self._fail(line, f"the {what} column {n}:{kind}:{width} is not {count} "
                                               f"{'numbers' if kinds != 'S' else 'words'}")
                    return start
            return None

        pos = column(_POSITIONS, "R", 3, "positions")
        if pos is None:
            raise self._fail(line, f"Properties={spec!r} has no pos:R:3 column: the positions are needed")
        velocity = column(_VELOCITIES, "R", 3, "velocities")
        momenta = velocity is None and (velocity := column(("momenta",), "R", 3, "momenta")) is not None
        mass = column(("masses", "mass"), "R", 1, "masses")
        ident = column(("id",), "I", 1, "id")
        charge = column(_CHARGES, "R", 1, "charges")
        kind_column, text_kind = None, False
        for n in _TYPES:
            if n in columns:
                kind_column, text_kind = columns[n][0], columns[n][1] == "S"
                break
        here = self.fh.tell()
        self.fh.seek(offset)
        row, got = Lines(self.fh, first).take(1)
        words = row.split()
        if got < 1 or len(words) < at:
            raise self._fail(first, f"a row of {len(words)} words, where Properties names {at}")
        self.fh.seek(here)
        first_kind = words[kind_column].decode("utf-8", "replace") if kind_column is not None else ""
        momentum_mass = 1.0
        if momenta and mass is None:
            momentum_mass = _species_mass(first_kind if text_kind else "X", lambda why: self._fail(first, why))
        return Layout(first_line=first, offset=offset, words=at, pos=pos, velocity=velocity, momenta=momenta,
                      mass=mass, ident=ident, kind_column=kind_column, kind_is_text=text_kind, first_kind=first_kind,
                      charge=charge, momentum_mass=momentum_mass)

    def pieces(self, parts: int, rows: int = ROUND_ROWS):
        """The frame's rows, ``rows`` a round: ``parts`` payloads ``(first line, lines, text)``."""
        h = self.header
        self.fh.seek(h.layout.offset)
        lines = Lines(self.fh, h.layout.first_line)
        done = 0
        while done < h.atoms:
            start = lines.line
            block, got = lines.take(min(rows, h.atoms - done))
            if got < min(rows, h.atoms - done):
                raise self._fail(start + got, "the frame ends early: the file changed while it was read")
            out, line = [], start
            for text, count in deal(block, got, parts):
                out.append((line, count, text))
                line += count
            yield out
            done += got


def _species_mass(species: str, fail) -> float:
    """A species' mass as ASE takes it (``X``, ASE's dummy atom, 1)."""
    if species == "X":
        return 1.0
    try:
        from ase.data import atomic_masses, atomic_numbers
    except ImportError:
        raise fail(f"momenta of species {species!r} without masses: their mass is ASE's, which is not installed "
                   "(pip install ase), or give the velocities or masses of 1") from None
    if species not in atomic_numbers:
        return 1.0
    return float(atomic_masses[atomic_numbers[species]])


def parse(header: Header, payload) -> Block:
    """One part's rows: positions, velocities (or momenta over the mass), ids, checked types, masses, charges."""
    first, count, text = payload
    lay: Layout = header.layout
    wanted = sorted({c for c in (lay.pos, lay.pos + 1, lay.pos + 2, lay.mass, lay.ident, lay.charge)
                     + ((lay.velocity, lay.velocity + 1, lay.velocity + 2) if lay.velocity is not None else ())
                     + ((lay.kind_column,) if lay.kind_column is not None and not lay.kind_is_text else ())
                     if c is not None})
    table, why = numbers(text, count, lay.words, first, usecols=wanted, comments=False)
    if why:
        raise InitError(f"--init {header.name}: {why} (a row of {lay.words} words, as Properties names)")
    col = {c: i for i, c in enumerate(wanted)}
    rows = np.arange(first, first + count, dtype=np.int64)

    def fail(i: int, why: str) -> InitError:
        return InitError(f"--init {header.name}: line {int(rows[i]):,}: {why}")

    if lay.kind_column is not None:
        if lay.kind_is_text:
            kinds = first_words(text) if lay.kind_column == 0 else [ln.split()[lay.kind_column]
                                                                     for ln in text.split(b"\n")[:count]]
            other = [i for i, k in enumerate(kinds) if k.decode("utf-8", "replace") != lay.first_kind]
        else:
            values = table[:, col[lay.kind_column]]
            other = np.flatnonzero(values != float(lay.first_kind)).tolist()
        if other:
            i = other[0]
            found = kinds[i].decode("utf-8", "replace") if lay.kind_is_text else f"{values[i]:g}"
            raise fail(i, f"an atom of type {found}, where the first is {lay.first_kind}: several atom types: {RUNS}")
    if lay.mass is not None:
        masses = table[:, col[lay.mass]]
        if (masses != 1.0).any():
            i = int(np.flatnonzero(masses != 1.0)[0])
            raise fail(i, f"an atom of mass {masses[i]:g}: {RUNS}")
    if lay.charge is not None:
        charges = table[:, col[lay.charge]]
        if (charges != 0.0).any():
            i = int(np.flatnonzero(charges != 0.0)[0])
            raise fail(i, f"an atom of charge {charges[i]:g}: {RUNS}")
    if lay.momenta and lay.momentum_mass != 1.0:
        raise InitError(f"--init {header.name}: momenta of atoms of mass {lay.momentum_mass:g} (species "
                        f"{lay.first_kind}, as ASE takes it): {RUNS}; write their masses as 1 or their velocities")
    x = np.ascontiguousarray(table[:, [col[lay.pos + k] for k in range(3)]])
    v = None
    if lay.velocity is not None:
        v = np.ascontiguousarray(table[:, [col[lay.velocity + k] for k in range(3)]])
    if lay.ident is not None:
        ids = table[:, col[lay.ident]]
        if (ids != np.floor(ids)).any():
            i = int(np.flatnonzero(ids != np.floor(ids))[0])
            raise fail(i, f"atom id {ids[i]!r} is not a whole number")
        ids = ids.astype(np.int64)
    else:
        ids = rows - lay.first_line + 1
    return Block(ids=ids, x=x, v=v, rows=rows)
