"""The Cartesian decomposition of the periodic cubic box into bricks.

``MPI.Compute_dims`` factors the ranks into a ``px x py x pz`` grid (as even
as it can), ``Create_cart`` makes the periodic Cartesian communicator, and
rank with grid coordinates ``c`` owns the brick ``[c_d L / p_d, (c_d + 1) L / p_d)``
in each dimension ``d``.  Ghosts come only from the 26 neighbouring bricks, so
every brick must be at least the neighbour cutoff (``rc + skin``) thick.
The brick geometry is pure (no MPI) and tested serially.
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["Brick", "brick_of", "grid_problem", "owner_coords", "wrap", "make_cart", "TAG_MIGRATE", "TAG_BORDER",
           "TAG_FORWARD", "TAG_REVERSE"]

#: the tags of the halo's messages between bricks (each plus an offset of its dimension and side), on
#: either engine: the migration, the ghosts' borders, the forward (positions) and reverse (forces) halo
TAG_MIGRATE = 0x4C00
TAG_BORDER = 0x4C10
TAG_FORWARD = 0x4C20
TAG_REVERSE = 0x4C30


@dataclasses.dataclass(frozen=True)
class Brick:
    """One rank's brick of a periodic cube of edge ``box``."""

    dims: tuple[int, int, int]
    coords: tuple[int, int, int]
    box: float
    lo: tuple[float, float, float]
    hi: tuple[float, float, float]


def brick_of(box: float, dims, coords) -> Brick:
    """The brick at grid ``coords`` of a ``dims`` grid over ``[0, box)^3``."""
    dims, coords = tuple(int(d) for d in dims), tuple(int(c) for c in coords)
    lo = tuple(box * c / d for c, d in zip(coords, dims))
    hi = tuple(box * (c + 1) / d for c, d in zip(coords, dims))
    return Brick(dims=dims, coords=coords, box=box, lo=lo, hi=hi)


def grid_problem(box: float, dims, cutneigh: float) -> str | None:
    """Why ``dims`` bricks of a ``box`` cube cannot carry a halo of ``cutneigh`` (None if they can)."""
    for axis, d in zip("xyz", dims):
        width = box / d
        if width < cutneigh:
            grid = "x".join(str(int(p)) for p in dims)
            return (f"the box ({box:.4g} sigma) cut into a {grid} rank grid makes bricks {width:.4g} sigma "
                    f"thick along {axis}, thinner than the cutoff + skin ({cutneigh:.4g}); use fewer ranks "
                    f"or more atoms")
    return None


def wrap(x: np.ndarray, box: float) -> np.ndarray:
    """Positions folded into ``[0, box)`` (a new array; positions inside are returned unchanged, bit for bit)."""
    w = x - box * np.floor(x / box)
    w[w >= box] = 0.0  # -tiny + box rounds to box
    return w


def owner_coords(x: np.ndarray, box: float, dims) -> np.ndarray:
    """Grid coordinates ``(n, 3)`` of the bricks that own positions ``x`` (in ``[0, box)``)."""
    d = np.asarray(dims, dtype=np.int64)
    return np.minimum((x * (d / box)).astype(np.int64), d - 1)


def make_cart(comm):
    """A periodic 3-D Cartesian communicator over comm's ranks; collective over comm.

    The caller frees it (``Free()``) when done.
    """
    from mpi4py import MPI

    dims = MPI.Compute_dims(comm.Get_size(), 3)
    return comm.Create_cart(dims, periods=[True, True, True], reorder=False)
