"""The states ``--init`` starts an LJ run from: a LAMMPS data file, an extended XYZ or a GSD frame.

One module a format (``lammps``, ``extxyz``, ``gsd``), one line in
:data:`MODULES`.  A format's module defines ``KIND`` (its name), ``sniff(head)``
(do these first bytes look like it) and ``open_file(spec)``, which returns a
:class:`Reader` on the rank that reads the file (rank 0): its :class:`Header`
(atoms, box, whether it gives velocities and ids, checked through), and its
``pieces(parts)``: the atoms' rows a round at a time, each round cut into
``parts`` payloads (text lines or binary rows) that any rank turns into a
:class:`Block` with the module's ``parse(header, payload)``.  The reading is
pure (no MPI): :mod:`pympi_gpu.nbody.lj.start` deals the pieces to the ranks,
which parse them and send each atom to its brick.

A file the engine cannot run is refused with :class:`InitError`, whose message
names the file and the line or record, and says what the engine runs instead.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import os
from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np

__all__ = ["MODULES", "InitError", "Spec", "Header", "Block", "Reader", "parse_spec", "kind_of", "open_file",
           "parse", "ROUND_ROWS", "RUNS", "FOLD_LIMIT", "check_rows", "orthogonal_edges"]

#: the formats by kind: a new one is a module and a line here
MODULES = {
    "lammps": "pympi_gpu.nbody.lj.readers.lammps",
    "extxyz": "pympi_gpu.nbody.lj.readers.extxyz",
    "gsd": "pympi_gpu.nbody.lj.readers.gsd",
}
#: the atoms' rows read in one round, over all parts: what bounds the reading rank's buffers
ROUND_ROWS = 1 << 18
#: what the engine runs, said where a file asks for something else
RUNS = ("this engine runs one atom type of mass 1 (LJ units) without charges or molecules, in an orthogonal "
        "periodic box")
#: positions farther than this many box edges from the box are refused: folding them in would lose them to rounding
FOLD_LIMIT = 1e6
#: bytes of a file read to tell its kind
_SNIFF = 4096


class InitError(ValueError):
    """A ``--init`` file that cannot start a run; the message is for people (it names the file and where)."""


@dataclasses.dataclass(frozen=True)
class Spec:
    """What ``--init`` names: ``path`` and, for a trajectory, the ``frame`` (negative from the end; None: the last)."""

    path: str
    frame: int | None = None

    @property
    def text(self) -> str:
        return self.path if self.frame is None else f"{self.path}@{self.frame}"


def parse_spec(text: str) -> Spec:
    """``PATH`` or ``PATH@FRAME`` (``run.gsd@-1``, ``run.extxyz@0``): the suffix is a frame only if it is an integer."""
    path, at, frame = text.rpartition("@")
    if at and path and frame.lstrip("-").isdigit() and frame.isascii():
        return Spec(path, int(frame))
    return Spec(text)


@dataclasses.dataclass(frozen=True)
class Header:
    """What a file holds, read and checked on the reading rank and handed to every rank.

    ``atoms``: how many; ``lo``: the box's low corner (positions are moved by
    ``-lo``, so the box is ``[0, Lx) x [0, Ly) x [0, Lz)``); ``box``: its three
    edges ``(Lx, Ly, Lz)``; ``velocities``,
    ``ids``: whether the file gives them (else they are drawn at the
    temperature, and numbered 1..N in the file's order); ``where``: which
    frame, for messages (``frame 3 of 4, step 300``), or ``""``; ``pair``:
    the pair coefficients the file records (LAMMPS's ``Pair Coeffs``: the
    style its comment names or None, and the first type's values), or None;
    ``layout``: what the format's ``parse`` needs (columns, dtypes).
    """

    kind: str
    path: str
    atoms: int
    lo: tuple[float, float, float]
    box: tuple[float, float, float]
    velocities: bool
    ids: bool
    where: str = ""
    pair: tuple[str | None, tuple[float, ...]] | None = None
    layout: Any = None

    @property
    def name(self) -> str:
        return f"{self.path!r}" + (f" ({self.where})" if self.where else "")


@dataclasses.dataclass
class Block:
    """Rows parsed from one piece: ``ids`` ``(m,)`` int64, ``x`` ``(m, 3)`` float64 in the file's frame (or None:
    a block of velocities only), ``v`` ``(m, 3)`` or None, ``rows`` ``(m,)`` int64 the line (or particle) of each
    row, for messages; ``unit`` what ``rows`` counts (``line``, ``particle``)."""

    ids: np.ndarray
    x: np.ndarray | None
    v: np.ndarray | None
    rows: np.ndarray
    unit: str = "line"

    def label(self, i: int) -> str:
        return f"{self.unit} {int(self.rows[i]):,}"


class Reader(Protocol):
    """A file open on the reading rank (see the module docstring)."""

    header: Header

    def pieces(self, parts: int, rows: int = ROUND_ROWS) -> Iterator[list[Any]]: ...  # rounds of ``parts`` payloads
    def close(self) -> None: ...


def _module(kind: str):
    return importlib.import_module(MODULES[kind])


def kind_of(path: str) -> str:
    """The format of the file at ``path``, from its first bytes; :class:`InitError` where it is none of
    :data:`MODULES`, missing or unreadable."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(_SNIFF)
    except FileNotFoundError:
        raise InitError(f"--init {path!r} does not exist") from None
    except IsADirectoryError:
        raise InitError(f"--init {path!r} is a directory, not a file") from None
    except OSError as exc:
        raise InitError(f"--init {path!r} cannot be read: {exc.strerror or exc}") from None
    for kind in MODULES:
        if _module(kind).sniff(head):
            return kind
    what = "empty" if not head else "none of them"
    raise InitError(f"--init {path!r} is of no known kind ({what}): it reads a LAMMPS data file (atom_style "
                    "atomic, as write_data writes it), an extended XYZ (.extxyz, as ASE and --dump write it) or a "
                    "GSD frame (.gsd, HOOMD-blue's and --dump's; PATH@FRAME for a frame other than the last)")


def open_file(spec: Spec) -> Reader:
    """The reader of ``spec``'s file, its header read and checked; :class:`InitError` if it cannot start a run."""
    if os.path.isdir(spec.path):
        raise InitError(f"--init {spec.path!r} is a directory, not a file")
    kind = kind_of(spec.path)
    return _module(kind).open_file(spec)


def parse(header: Header, payload) -> Block:
    """The rows of one piece of ``header``'s file (any rank; :class:`InitError` naming the line if damaged)."""
    return _module(header.kind).parse(header, payload)


def check_rows(header: Header, block: Block) -> None:
    """What every format's rows must meet: finite positions and velocities, within :data:`FOLD_LIMIT` box edges,
    ids from 1 to N (:class:`InitError` naming the first row that does not)."""
    if block.x is not None:
        bad = ~np.isfinite(block.x).all(axis=1)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InitError(f"--init {header.name}: {block.label(i)}: atom {int(block.ids[i])} is at "
                            f"{_triple(block.x[i])}, not a finite position")
        lo, box = np.asarray(header.lo), np.asarray(header.box)
        far = np.abs(block.x - (lo + 0.5 * box)) > (FOLD_LIMIT + 0.5) * box
        if far.any():
            i = int(np.flatnonzero(far.any(axis=1))[0])
            edges = " x ".join(f"{e:.6g}" for e in header.box) if len(set(header.box)) > 1 else f"{box[0]:.6g}"
            raise InitError(f"--init {header.name}: {block.label(i)}: atom {int(block.ids[i])} is at "
                            f"{_triple(block.x[i])}, more than {FOLD_LIMIT:g} box edges ({edges}) outside "
                            "the box: folding it in would lose its position to rounding")
    if block.v is not None:
        bad = ~np.isfinite(block.v).all(axis=1)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InitError(f"--init {header.name}: {block.label(i)}: atom {int(block.ids[i])} has the velocity "
                            f"{_triple(block.v[i])}, not a finite one")
    bad = (block.ids < 1) | (block.ids > header.atoms)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InitError(f"--init {header.name}: {block.label(i)}: atom id {int(block.ids[i])} is not between 1 and "
                        f"the {header.atoms:,} atoms: this engine numbers the atoms 1..N (LAMMPS: reset_atoms id "
                        "sort no renumbers them)")


def _triple(v) -> str:
    return "(" + ", ".join(f"{float(c):.17g}" for c in v) + ")"


def orthogonal_edges(name: str, edges, what: str = "box") -> tuple[float, float, float]:
    """The three edges ``(Lx, Ly, Lz)`` of an orthogonal box, or :class:`InitError` (an edge not finite and > 0).

    Edges a few rounding errors apart (``-5.1 5.1`` against ``0 10.2``) are a
    cube's, ``(Lx, Lx, Lx)``: a cube read from a file runs as the cube it was
    meant to be (its volume ``Lx ** 3``, as a cubic box always had).
    """
    lx, ly, lz = (float(e) for e in edges)
    if not all(math.isfinite(e) and e > 0 for e in (lx, ly, lz)):
        raise InitError(f"--init {name}: the {what} edges {lx:g} x {ly:g} x {lz:g} are not finite and > 0")
    if max(abs(ly - lx), abs(lz - lx)) <= 4 * np.finfo(np.float64).eps * lx:
        return lx, lx, lx
    return lx, ly, lz
