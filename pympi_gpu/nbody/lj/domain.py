"""The Cartesian decomposition of the periodic orthogonal box into bricks.

``MPI.Compute_dims`` factors the ranks into a ``px x py x pz`` grid (as even
as it can; a box whose edges differ by the least brick surface, :func:`grid_dims`),
``Create_cart`` makes the periodic Cartesian communicator, and
rank with grid coordinates ``c`` owns the brick ``[c_d L_d / p_d, (c_d + 1) L_d / p_d)``
in each dimension ``d`` (``L_d`` the box's edge along ``d``).  Ghosts come only from the 26 neighbouring bricks, so
every brick must be at least the neighbour cutoff (``rc + skin``) thick.
The brick geometry is pure (no MPI) and tested serially, as is the grid of
cells a brick and its halo are binned into for the neighbour lists
(:class:`CellGrid`).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from pympi_gpu.nbody.lj.box import Edges, edges, text
from pympi_gpu.nbody.lj.config import LjConfig

__all__ = ["Brick", "CellGrid", "brick_of", "grid_problem", "owner_coords", "wrap", "grid_dims", "make_cart",
           "TAG_MIGRATE", "TAG_BORDER", "TAG_FORWARD", "TAG_REVERSE"]

#: the tags of the halo's messages between bricks (each plus an offset of its dimension and side), on
#: either engine: the migration, the ghosts' borders, the forward (positions) and reverse (forces) halo
TAG_MIGRATE = 0x4C00
TAG_BORDER = 0x4C10
TAG_FORWARD = 0x4C20
TAG_REVERSE = 0x4C30


@dataclasses.dataclass(frozen=True)
class Brick:
    """One rank's brick of a periodic orthogonal box of edges ``box``."""

    dims: tuple[int, int, int]
    coords: tuple[int, int, int]
    box: Edges
    lo: tuple[float, float, float]
    hi: tuple[float, float, float]


@dataclasses.dataclass(frozen=True)
class CellGrid:
    """The cells a brick and its halo are binned into for the list build, and the lists' first capacities.

    Cells of at least half the list radius (``rc + skin``), searched ``reach``
    = 2 cells out; ``lo`` the grid's corner, ``inv`` cells per unit length,
    ``ncell`` cells per dimension; ``capacity`` the padded list rows' first
    widths (own, ghost), grown when a rebuild finds more neighbours.
    """

    lo: np.ndarray
    inv: np.ndarray
    ncell: np.ndarray
    reach: int
    capacity: tuple[int, int]

    @functools.cached_property
    def cells(self) -> int:
        """How many cells the grid has."""
        return int(self.ncell[0] * self.ncell[1] * self.ncell[2])

    @classmethod
    def of(cls, config: LjConfig, brick: Brick) -> CellGrid:
        cut = config.cutneigh
        ext = [brick.hi[d] - brick.lo[d] + 2 * cut for d in range(3)]
        ncell = np.array([max(1, int(2 * e / cut)) for e in ext], np.int64)
        shell = 4.0 / 3.0 * math.pi * cut ** 3 * config.density
        width = int(0.75 * shell) + 16 if config.newton else int(1.3 * shell) + 16
        return cls(lo=np.array([brick.lo[d] - cut for d in range(3)]),
                   inv=np.array([ncell[d] / ext[d] for d in range(3)]), ncell=ncell, reach=2,
                   capacity=(width, width))


def brick_of(box, dims, coords) -> Brick:
    """The brick at grid ``coords`` of a ``dims`` grid over the box ``[0, Lx) x [0, Ly) x [0, Lz)`` (``box``: its
    three edges, or a cube's one)."""
    box = edges(box)
    dims, coords = tuple(int(d) for d in dims), tuple(int(c) for c in coords)
    lo = tuple(e * c / d for e, c, d in zip(box, coords, dims))
    hi = tuple(e * (c + 1) / d for e, c, d in zip(box, coords, dims))
    return Brick(dims=dims, coords=coords, box=box, lo=lo, hi=hi)


def grid_problem(box, dims, cutneigh: float, remedy: str = "use fewer ranks or more atoms") -> str | None:
    """Why ``dims`` bricks of the box ``box`` (three edges) cannot carry a halo of ``cutneigh`` (None if they can):
    a brick thinner than ``cutneigh`` along some axis; ``remedy`` ends the message."""
    for axis, edge, d in zip("xyz", edges(box), dims):
        width = edge / d
        if width < cutneigh:
            grid = "x".join(str(int(p)) for p in dims)
            return (f"the box ({text(box, '.4g')} sigma) cut into a {grid} rank grid makes bricks {width:.4g} sigma "
                    f"thick along {axis}, thinner than the cutoff + skin ({cutneigh:.4g}); {remedy}")
    return None


def wrap(x: np.ndarray, box) -> np.ndarray:
    """Positions ``(n, 3)`` folded into the box ``[0, L_d)`` along each axis (a new array; positions inside are
    returned unchanged, bit for bit); ``box`` its three edges (or a cube's one)."""
    box = np.asarray(edges(box))
    w = x - box * np.floor(x / box)
    over = w >= box  # -tiny + L rounds to L
    w[over] = 0.0
    return w


def owner_coords(x: np.ndarray, box, dims) -> np.ndarray:
    """Grid coordinates ``(n, 3)`` of the bricks that own positions ``x`` (in the box, of edges ``box``)."""
    d = np.asarray(dims, dtype=np.int64)
    return np.minimum((x * (d / np.asarray(edges(box)))).astype(np.int64), d - 1)


def grid_dims(ranks: int, box=None, cutneigh: float | None = None) -> tuple[int, int, int]:
    """The rank grid that splits the box ``box`` (three edges, a cube's one, or None: a cube) among ``ranks``.

    A cube is split as ``MPI_Dims_create`` splits it (as even as it can be).  A box whose edges differ is
    split as LAMMPS's ``processors * * *`` splits it: of every way to factor the ranks into three, the one
    whose bricks have the least surface (the least halo to exchange), among those whose bricks are at least
    ``cutneigh`` thick along each axis where there are any; a tie goes to MPI's grid, then to the grid that
    splits the later axes.  The same on every rank (the box is agreed).
    """
    from mpi4py import MPI

    dims = tuple(MPI.Compute_dims(ranks, 3))
    if box is None or len(set(edges(box))) == 1:
        return dims
    length = edges(box)
    faces = length[0] * length[1] + length[1] * length[2] + length[0] * length[2]

    def cost(d):
        b = [length[k] / d[k] for k in range(3)]
        thin = cutneigh is not None and grid_problem(length, d, cutneigh) is not None
        surface = round((b[0] * b[1] + b[1] * b[2] + b[0] * b[2]) / faces, 9)  # equal to 1e-9: a tie
        return thin, surface, d != dims, d

    grids = [(p, q, ranks // p // q) for p in range(1, ranks + 1) if ranks % p == 0
             for q in range(1, ranks // p + 1) if (ranks // p) % q == 0]
    return min(grids, key=cost)


def make_cart(comm, box=None, cutneigh: float | None = None):
    """A periodic 3-D Cartesian communicator over comm's ranks, its grid :func:`grid_dims`'s for the box ``box``;
    collective over comm.

    The caller frees it (``Free()``) when done.
    """
    dims = grid_dims(comm.Get_size(), box, cutneigh)
    return comm.Create_cart(list(dims), periods=[True, True, True], reorder=False)
