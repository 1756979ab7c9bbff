"""LAMMPS data files (``read_data``'s format, ``atom_style atomic``, as ``write_data`` writes them).

A title line; header lines (``N atoms``, ``1 atom types``, ``xlo xhi`` ...,
each keyword after its numbers); then sections, each a name line, a blank
line and its rows: ``Masses`` (``type mass``), ``Atoms # atomic`` (``id type
x y z`` and optionally the image flags ``ix iy iz``, which are dropped: the
atoms are folded into the box), ``Velocities`` (``id vx vy vz``), and the
``Pair Coeffs`` (or ``PairIJ Coeffs``) ``write_data`` adds, which the command
line holds against its ``--pair-coeff``.  Comments (``#``) and blank lines
between sections are skipped, as LAMMPS skips them.

The box is orthogonal (``xlo xhi``, ``ylo yhi``, ``zlo zhi``, three edges that may
differ).  Refused, naming the line: a box with tilt factors (triclinic, or LAMMPS's
general triclinic ``avec``...), several atom types or a mass other than 1,
bonds and the other sections of molecules, another atom style (``# charge``,
``# full``...), a section cut short (a truncated file), a row of other words.

The header pass skips the ``Atoms`` and ``Velocities`` rows (counting
newlines), so a file whose sections come in any order is read in one pass
each: the atoms, then the velocities, a round of :data:`ROUND_ROWS` lines at
a time.
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np

from pympi_gpu.nbody.lj.readers import ROUND_ROWS, RUNS, Block, Header, InitError, Spec, orthogonal_edges
from pympi_gpu.nbody.lj.readers.lines import Lines, deal, numbers, strip_comment

__all__ = ["KIND", "sniff", "open_file", "parse"]

KIND = "lammps"
#: header keywords whose count must be 0 here: the topology of molecules, and what other atom styles carry
_MOLECULES = ("bonds", "angles", "dihedrals", "impropers", "bond types", "angle types", "dihedral types",
              "improper types", "ellipsoids", "lines", "triangles", "bodies", "crossterms")
_IGNORED = ("extra bond per atom", "extra angle per atom", "extra dihedral per atom", "extra improper per atom",
            "extra special per atom")
_HEADER = re.compile(rb"^\s*[-+0-9.eE]+(\s+[-+0-9.eE]+)*\s+[a-z]")
#: the sections read here, and those that hold molecules' topology or other styles' data
_READ = ("Masses", "Atoms", "Velocities", "Pair Coeffs", "PairIJ Coeffs", "Atom Type Labels")
_TOPOLOGY = ("Bonds", "Angles", "Dihedrals", "Impropers", "Bond Coeffs", "Angle Coeffs", "Dihedral Coeffs",
             "Improper Coeffs", "BondBond Coeffs", "BondAngle Coeffs", "MiddleBondTorsion Coeffs",
             "EndBondTorsion Coeffs", "AngleTorsion Coeffs", "AngleAngleTorsion Coeffs", "BondBond13 Coeffs",
             "AngleAngle Coeffs", "Ellipsoids", "Lines", "Triangles", "Bodies", "CMAP", "Bond Type Labels", "Angle Type Labels", "Dihedral Type Labels", "Improper Type Labels")


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where the rows are: the ``Atoms`` section's first line (number and byte offset) and its columns (5, or 8
    with image flags); the ``Velocities`` section's, or None."""

    atoms_line: int
    atoms_offset: int
    columns: int
    velocities_line: int | None = None
    velocities_offset: int | None = None


def sniff(head: bytes) -> bool:
    """A title line, then header lines of numbers and keywords, one of them ``N atoms``."""
    lines = head.split(b"\n")[1:40]
    return any(re.match(rb"^\s*\d+\s+atoms\s*$", strip_comment(x)) for x in lines[:-1])


def open_file(spec: Spec) -> _Reader:
    if spec.frame is not None:
        raise InitError(f"--init {spec.text!r}: a LAMMPS data file holds one state, not frames: give it without "
                        f"@{spec.frame}")
    return _Reader(spec.path)


class _Reader:
    """A data file open on the reading rank: its header read, its sections found."""

    def __init__(self, path: str):
        self.path = path
        self.fh = open(path, "rb")
        try:
            self.header = self._read_header()
        except BaseException:
            self.fh.close()
            raise

    def close(self) -> None:
        self.fh.close()

    def _fail(self, line: int, why: str) -> InitError:
        return InitError(f"--init {self.path!r}: line {line:,}: {why}")

    def _read_header(self) -> Header:
        lines = Lines(self.fh)
        lines.readline()  # the title
        counts: dict[str, int] = {}
        bounds: dict[str, tuple[float, float]] = {}
        section = None
        while (raw := lines.readline()) is not None:
            at = lines.line - 1
            text = strip_comment(raw).strip()
            if not text:
                continue
            if not _HEADER.match(text):
                section = (raw.decode("utf-8", "replace").strip(), at)
                break
            words = text.decode("utf-8", "replace").split()
            numbers_, keyword = _split_header(words)
            self._header_line(at, numbers_, keyword, counts, bounds)
        if "atoms" not in counts:
            raise InitError(f"--init {self.path!r}: no 'N atoms' line in the header: not a LAMMPS data file, or a "
                            "damaged one")
        n = counts["atoms"]
        for axis in "xyz":
            if axis not in bounds:
                raise InitError(f"--init {self.path!r}: no '{axis}lo {axis}hi' line in the header: the box is "
                                "needed")
        lo = tuple(bounds[a][0] for a in "xyz")
        box = orthogonal_edges(repr(self.path), [bounds[a][1] - bounds[a][0] for a in "xyz"])
        layout, pair = self._sections(lines, section, n, counts)
        first, offset, columns = layout["atoms"]
        vfirst, voffset = layout.get("velocities", (None, None))
        return Header(kind=KIND, path=self.path, atoms=n, lo=lo, box=box, velocities=vfirst is not None, ids=True,
                      pair=pair, layout=Layout(first, offset, columns, vfirst, voffset))

    def _sections(self, lines: Lines, section, n: int, counts: dict) -> tuple[dict, tuple | None]:
        """The sections from ``section`` (its name and line) on: where the Atoms and Velocities rows are, and the
        Pair Coeffs; the masses checked."""
        layout, pair, masses = {}, None, None
        while section is not None:
            name, at = section
            title, _, comment = name.partition("#")
            title, comment = title.strip(), comment.strip()
            if title in _TOPOLOGY:
                raise self._fail(at, f"its {title} section: {RUNS}")
            if title not in _READ:
                raise self._fail(at, f"{name!r} is no section of a LAMMPS data file this engine reads (Masses, "
                                     "Atoms, Velocities, Pair Coeffs): a damaged file, or one of another atom style")
            blank = lines.readline()
            if blank is None or strip_comment(blank).strip():
                raise self._fail(at + 1, f"a blank line belongs after the {title} line")
            first, offset = lines.line, lines.offset()
            if title == "Atoms":
                layout["atoms"] = self._atoms_section(lines, at, comment, first, offset, n)
            elif title == "Velocities":
                layout["velocities"] = (first, offset)
                self._skip_rows(lines, "Velocities", first, n)
            elif title == "Masses":
                masses = [[self._number(first, w) for w in row]
                          for row in self._small_rows(lines, "Masses", first, counts.get("atom types", 1), 2)]
            elif title == "Atom Type Labels":  # (the one type's name: nothing the engine needs)
                self._small_rows(lines, title, first, counts.get("atom types", 1), 2)
            else:  # (one type: one row, "1 coeffs..." or PairIJ's "1 1 coeffs...")
                row = self._small_rows(lines, title, first, 1, None)[0]
                pair = (comment.split()[0] if comment else None, tuple(row[1 if title == "Pair Coeffs" else 2:]))
            section = self._next_section(lines)
        if "atoms" not in layout:
            raise InitError(f"--init {self.path!r}: no Atoms section: the file holds no atoms")
        self._check_masses(masses)
        return layout, pair

    def _header_line(self, at: int, values: list[str], keyword: str, counts: dict, bounds: dict) -> None:
        if keyword in ("xlo xhi", "ylo yhi", "zlo zhi"):
            if len(values) != 2:
                raise self._fail(at, f"'{keyword}' takes two numbers")
            lo, hi = (self._number(at, v) for v in values)
            if not (math.isfinite(lo) and math.isfinite(hi) and hi > lo):
                raise self._fail(at, f"the box bounds {lo:g} {hi:g} are not finite with {keyword[-2:]} > "
                                     f"{keyword[:3]}")
            bounds[keyword[0]] = (lo, hi)
        elif keyword == "xy xz yz":
            tilts = [self._number(at, v) for v in values]
            if any(t != 0 for t in tilts):
                raise self._fail(at, f"a triclinic box (tilt factors {' '.join(values)}): {RUNS}")
        elif keyword in ("avec", "bvec", "cvec", "abc origin"):
            raise self._fail(at, f"a general triclinic box ('{keyword}'): {RUNS}")
        elif keyword in ("atoms", "atom types", *_MOLECULES, *_IGNORED):
            if len(values) != 1 or not values[0].isdigit():
                raise self._fail(at, f"'{keyword}' takes one whole number, not {' '.join(values)!r}")
            count = int(values[0])
            if keyword == "atoms" and count < 1:
                raise self._fail(at, "the file holds no atoms")
            if keyword == "atom types" and count != 1:
                raise self._fail(at, f"{count} atom types: {RUNS}")
            if keyword in _MOLECULES and count:
                raise self._fail(at, f"{count} {keyword}: {RUNS}")
            counts[keyword] = count
        else:
            raise self._fail(at, f"'{keyword}' is no header keyword of a LAMMPS data file this engine reads")

    def _number(self, at: int, word: str) -> float:  # (a header's or a Masses row's)
        try:
            return float(word)
        except ValueError:
            raise self._fail(at, f"{word!r} is not a number") from None

    def _atoms_section(self, lines: Lines, at: int, style: str, first: int, offset: int, n: int):
        if style and style.split()[0] != "atomic":
            raise self._fail(at, f"atom_style {style.split()[0]}: {RUNS} (atom_style atomic: id type x y z)")
        head, got = lines.take(1)
        if got == 0:
            raise self._fail(first, f"the Atoms section ends before its first atom (of {n:,}): the file is cut short")
        words = len(strip_comment(head).split())
        if words not in (5, 8):
            raise self._fail(first, f"an atom of {words} words: atom_style atomic's are id type x y z [ix iy iz], "
                                    f"{RUNS}")
        self._skip_rows(lines, "Atoms", first + 1, n - 1, done=1, total=n)
        return first, offset, words

    def _skip_rows(self, lines: Lines, title: str, first: int, k: int, done: int = 0, total: int | None = None
                   ) -> None:
        total = k if total is None else total
        got = lines.skip(k)
        if got < k:
            raise self._fail(first + got, f"the {title} section ends after {done + got:,} of its {total:,} rows: "
                                          "the file is cut short")

    def _small_rows(self, lines: Lines, title: str, first: int, k: int, columns: int | None) -> list[list[str]]:
        block, got = lines.take(k)
        if got < k:
            raise self._fail(first + got, f"the {title} section ends after {got} of its {k} rows: the file is cut "
                                          "short")
        rows = []
        for i, raw in enumerate(block.split(b"\n")[:k]):
            words = strip_comment(raw).split()
            if not words or (columns is not None and len(words) != columns):
                raise self._fail(first + i, f"a {title} row of {len(words)} words"
                                            + (f", not {columns}" if columns else ""))
            rows.append([w.decode("utf-8", "replace") for w in words])
        return rows

    def _check_masses(self, masses) -> None:
        if masses is None:
            raise InitError(f"--init {self.path!r}: no Masses section: the atoms' mass is needed ({RUNS})")
        for t, m in masses:
            if m != 1.0:
                raise InitError(f"--init {self.path!r}: atom type {t:g} has mass {m:g}: {RUNS}")

    def _next_section(self, lines: Lines):
        while (raw := lines.readline()) is not None:
            if strip_comment(raw).strip():
                return raw.decode("utf-8", "replace").strip(), lines.line - 1
        return None

    def pieces(self, parts: int, rows: int = ROUND_ROWS):
        """The Atoms rows, then the Velocities rows, ``rows`` at a time: rounds of ``parts`` payloads ``(what,
        first line, lines, text)``."""
        h = self.header
        layout = h.layout
        yield from self._section("atoms", layout.atoms_offset, layout.atoms_line, h.atoms, parts, rows)
        if layout.velocities_line is not None:
            yield from self._section("velocities", layout.velocities_offset, layout.velocities_line, h.atoms, parts,
                                     rows)

    def _section(self, what: str, offset: int, first: int, n: int, parts: int, rows: int):
        self.fh.seek(offset)
        lines = Lines(self.fh, first)
        done = 0
        while done < n:
            start = lines.line
            block, got = lines.take(min(rows, n - done))
            if got < min(rows, n - done):  # the header pass counted them: the file changed since
                raise self._fail(start + got, f"the {what} section ends early: the file changed while it was read")
            out, line = [], start
            for text, count in deal(block, got, parts):
                out.append((what, line, count, text))
                line += count
            yield out
            done += got


def _split_header(words: list[str]) -> tuple[list[str], str]:
    """A header line's numbers and its keyword (``['0', '16.8']``, ``'xlo xhi'``)."""
    for i, w in enumerate(words):
        if w[0].isalpha():
            return words[:i], " ".join(words[i:])
    return words, ""


def parse(header: Header, payload) -> Block:
    """The rows of one part: atoms ``id type x y z [ix iy iz]`` or velocities ``id vx vy vz``."""
    what, first, count, text = payload
    columns = header.layout.columns if what == "atoms" else 4
    table, why = numbers(text, count, columns, first)
    if why:
        section = "Atoms" if what == "atoms" else "Velocities"
        raise InitError(f"--init {header.path!r}: {why} (a row of the {section} section: "
                        + ("id type x y z [ix iy iz])" if what == "atoms" else "id vx vy vz)"))
    rows = np.arange(first, first + count, dtype=np.int64)
    ids = table[:, 0]
    whole = ids == np.floor(ids)
    if not whole.all():
        i = int(np.flatnonzero(~whole)[0])
        raise InitError(f"--init {header.path!r}: line {int(rows[i]):,}: atom id {ids[i]!r} is not a whole number")
    ids = ids.astype(np.int64)
    if what == "velocities":
        return Block(ids=ids, x=None, v=np.ascontiguousarray(table[:, 1:4]), rows=rows)
    types = table[:, 1]
    if (types != 1).any():
        i = int(np.flatnonzero(types != 1)[0])
        raise InitError(f"--init {header.path!r}: line {int(rows[i]):,}: atom {int(ids[i])} is of type {types[i]:g}, "
                        "but the file declares 1 atom type")
    return Block(ids=ids, x=np.ascontiguousarray(table[:, 2:5]), v=None, rows=rows)
