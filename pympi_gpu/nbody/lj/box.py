"""The LJ engine's periodic box: an orthogonal box of three edges ``(Lx, Ly, Lz)`` from the origin (pure).

A cube is the box whose three edges are one number; its volume is written
``L ** 3``, as before the box had three edges, so that a cubic run's
pressure and density are the same floats (``L * L * L`` can differ from
``L ** 3`` in the last bit).
"""

from __future__ import annotations

import math

__all__ = ["Edges", "edges", "volume", "is_cube", "text", "word", "finite"]

#: the three edges of the box, in sigma
Edges = tuple[float, float, float]


def edges(box) -> Edges:
    """The three edges of ``box``: a number (a cube's edge) or three numbers."""
    if isinstance(box, (int, float)):
        return (float(box),) * 3
    lx, ly, lz = (float(e) for e in box)
    return lx, ly, lz


def is_cube(box) -> bool:
    lx, ly, lz = edges(box)
    return lx == ly == lz


def volume(box) -> float:
    """``Lx Ly Lz``; ``L ** 3`` for a cube (bit for bit what a cubic box gave before it had three edges)."""
    lx, ly, lz = edges(box)
    return lx ** 3 if lx == ly == lz else lx * ly * lz


def finite(box) -> bool:
    """Are the three edges finite and > 0?"""
    return all(math.isfinite(e) and e > 0 for e in edges(box))


def text(box, fmt: str = ".6g") -> str:
    """The box for people: one edge for a cube (``16.796``), else ``10 x 10 x 30``."""
    lx, ly, lz = edges(box)
    if lx == ly == lz:
        return format(lx, fmt)
    return " x ".join(format(e, fmt) for e in (lx, ly, lz))


def word(box) -> str | float:
    """The box in a run's identity (``box=...``): a cube's edge as before, else ``Lx,Ly,Lz`` (one word)."""
    lx, ly, lz = edges(box)
    if lx == ly == lz:
        return lx
    return ",".join(repr(e) for e in (lx, ly, lz))
