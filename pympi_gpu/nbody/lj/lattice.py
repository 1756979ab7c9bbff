"""The initial state of LAMMPS ``bench/in.lj``: fcc lattice, random velocities; pure, no MPI.

``lattice fcc 0.8442`` makes the cubic cell edge ``a = (4 / rho)^(1/3)``
(4 atoms per cell); ``region box block 0 k 0 k 0 k`` a box of ``k^3`` cells,
``N = 4 k^3`` atoms.  ``velocity all create T seed`` draws each component
uniformly, removes the total momentum and scales to temperature ``T`` with
``3N - 3`` degrees of freedom.  Our stream is NumPy's PCG64 seeded with
``seed`` (not LAMMPS's Park-Miller), drawn for all atoms in id order, so the
state does not depend on the number of ranks; the benchmark hands LAMMPS this
very state as a data file.

:func:`fcc_positions` and :func:`velocities` make the whole state at once.
A rank makes only its brick's atoms, the same values bit for bit, from
pieces that never hold the whole lattice: :func:`brick_lattice` (the
positions and ids whose owner is the brick), :func:`draws` (their uniform
draws: PCG64 advanced to each run of ids), and the two sums that
:func:`velocities` takes over all atoms, in NumPy's own order, so that they
round alike: :func:`momentum_sum` (``v.mean(axis=0)`` adds the rows one after
the other: streamed in blocks) and the pairwise sum of ``v * v`` that
``np.sum`` makes (:func:`square_sum_leaves`, :func:`square_sum_leaf`,
:func:`square_sum`: its tree cut into leaves that ranks can share).
"""

from __future__ import annotations

import math

import numpy as np

from pympi_gpu.nbody.lj.box import edges

__all__ = ["FCC_BASIS", "cells_for", "cell_edge", "fcc_positions", "velocities", "temperature", "dof",
           "cell_range", "brick_lattice", "draws", "momentum_sum", "square_sum_leaves", "square_sum_leaf",
           "square_sum", "scale_velocities", "BLOCK"]

FCC_BASIS = np.array([[0.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.5, 0.0, 0.5], [0.0, 0.5, 0.5]])
#: which half-cell offset (0: 0, 1: 0.5) each basis atom has along each axis
_HALF = (2 * FCC_BASIS).astype(np.int64)
#: atoms handled at once by the pieces below: what bounds their working memory
BLOCK = 1 << 16


def cells_for(atoms: int) -> int:
    """Cells per edge ``k`` of the cube whose ``4 k^3`` atoms are nearest ``atoms`` (>= 4)."""
    if atoms < 4:
        raise ValueError(f"{atoms} atoms are too few for the fcc lattice (one cell holds 4)")
    k = max(1, round((atoms / 4) ** (1 / 3)))
    # round() of the cube root can miss the nearest cube by one near the midpoints
    return min((c for c in (k - 1, k, k + 1) if c >= 1), key=lambda c: (abs(4 * c ** 3 - atoms), c))


def cell_edge(density: float) -> float:
    """Edge of the cubic fcc cell at reduced number density ``density`` (> 0)."""
    if not (density > 0 and math.isfinite(density)):
        raise ValueError(f"density must be finite and > 0, got {density!r}")
    return (4.0 / density) ** (1.0 / 3.0)


def fcc_positions(cells: int, density: float) -> np.ndarray:
    """``(4 cells^3, 3)`` float64 positions in ``[0, L)^3``, atom id = row + 1."""
    a = cell_edge(density)
    g = np.arange(cells, dtype=np.float64)
    corners = np.stack(np.meshgrid(g, g, g, indexing="ij"), axis=-1).reshape(-1, 3)
    return ((corners[:, None, :] + FCC_BASIS[None, :, :]).reshape(-1, 3) * a)


def dof(atoms: int) -> int:
    """Degrees of freedom with the total momentum fixed (LAMMPS's default)."""
    return max(3 * atoms - 3, 1)


def temperature(vel: np.ndarray, atoms: int | None = None) -> float:
    """Kinetic temperature of ``vel`` (unit masses, k_B = 1)."""
    n = vel.shape[0] if atoms is None else atoms
    return float(np.sum(vel * vel)) / dof(n)


def velocities(atoms: int, temp: float, seed: int) -> np.ndarray:
    """``(atoms, 3)`` float64 velocities at temperature ``temp`` with zero total momentum."""
    _check_temperature(temp)
    v = np.random.Generator(np.random.PCG64(seed)).random((atoms, 3)) - 0.5
    v -= v.mean(axis=0)
    t = temperature(v)
    if t > 0:
        v *= math.sqrt(temp / t)
    return v


def _check_temperature(temp: float) -> None:
    if not (temp >= 0 and math.isfinite(temp)):
        raise ValueError(f"temperature must be finite and >= 0, got {temp!r}")


# -- one brick's share, bit for bit as above ---------------------------------------------------------------

def cell_range(cells: int, parts: int, part: int) -> tuple[int, int]:
    """Cells ``[lo, hi)`` along an axis cut in ``parts`` whose atoms may belong to ``part`` (a cell of margin)."""
    return max(0, (part * cells) // parts - 1), min(cells, -(-((part + 1) * cells) // parts) + 1)


def _axis(cells: int, a: float, box: float, parts: int, part: int):
    """Along one axis: ``lo``, the coordinates ``(i + h) a`` of the candidate cells for ``h`` = 0, 0.5
    (shape ``(2, m)``, computed as :func:`fcc_positions` does) and whether brick ``part`` owns each
    (as :func:`~pympi_gpu.nbody.lj.domain.owner_coords` decides)."""
    lo, hi = cell_range(cells, parts, part)
    i = np.arange(lo, hi, dtype=np.float64)
    values = np.stack([(i + h) * a for h in (0.0, 0.5)])
    owner = np.minimum((values * (parts / box)).astype(np.int64), parts - 1)
    return lo, values, owner == part


def brick_lattice(cells: int, density: float, box, dims, coords) -> tuple[np.ndarray, np.ndarray]:
    """The atoms of :func:`fcc_positions` that the brick at ``coords`` of a ``dims`` grid owns: ``(x, ids)``;
    ``box`` the lattice's cube (its edge, or its three equal edges).

    Positions bit for bit as :func:`fcc_positions` gives them, ids (1-based)
    ascending; only the cells near the brick are looked at, a slab of cells
    at a time, so the memory is the brick's share.
    """
    a = cell_edge(density)
    axes = [_axis(cells, a, e, int(p), int(c)) for e, p, c in zip(edges(box), dims, coords)]
    (lox, vx, ox), (loy, vy, oy), (loz, vz, oz) = axes
    per_b = [ox[hx][:, None, None] & oy[hy][None, :, None] & oz[hz][None, None, :] for hx, hy, hz in _HALF]
    n = sum(int(m.sum()) for m in per_b)
    x, ids = np.empty((n, 3)), np.empty(n, np.int64)
    my, mz = oy.shape[1], oz.shape[1]
    step, done = max(1, BLOCK // (4 * my * mz)), 0
    for s0 in range(0, ox.shape[1], step):
        flat = np.flatnonzero(np.stack([m[s0:s0 + step] for m in per_b], axis=-1))  # in id order
        b, cell = flat % 4, flat // 4
        iz, iy, ix = cell % mz, (cell // mz) % my, cell // (mz * my) + s0
        k = slice(done, done + flat.size)
        x[k, 0], x[k, 1], x[k, 2] = vx[_HALF[b, 0], ix], vy[_HALF[b, 1], iy], vz[_HALF[b, 2], iz]
        ids[k] = (((ix + lox) * cells + iy + loy) * cells + iz + loz) * 4 + b + 1
        done += flat.size
    return x, ids


def draws(seed: int, ids: np.ndarray, gap: int = 64) -> np.ndarray:
    """The uniform draws minus 0.5 that :func:`velocities` starts from, for the atoms ``ids`` (ascending).

    Atom ``id`` has draws ``3 (id - 1)`` to ``3 id - 1`` of PCG64(``seed``):
    the generator is advanced over the ids of other bricks, and runs of ids at
    most ``gap`` apart are drawn in one go, at most :data:`BLOCK` atoms at once.
    """
    bits = np.random.PCG64(seed)
    gen, at = np.random.Generator(bits), 0  # at: the atom index the generator stands at
    out = np.empty((ids.size, 3))
    first = 0
    while first < ids.size:  # a window of ids less than BLOCK apart, its runs found there (memory: a block)
        end = int(np.searchsorted(ids, ids[first] + BLOCK))
        cuts = [first, *(first + 1 + np.flatnonzero(np.diff(ids[first:end]) > gap)).tolist(), end]
        for a, b in zip(cuts[:-1], cuts[1:]):
            start = int(ids[a]) - 1
            bits.advance(3 * (start - at))
            block = gen.random((int(ids[b - 1]) - start, 3)) - 0.5
            at = int(ids[b - 1])
            out[a:b] = block[ids[a:b] - 1 - start]
        first = end
    return out


def momentum_sum(atoms: int, seed: int) -> np.ndarray:
    """``np.add.reduce(v, axis=0)`` of the draws of all ``atoms`` (the sum ``v.mean(axis=0)`` takes).

    NumPy adds the rows of an ``(N, 3)`` array one after the other along
    axis 0; so does this, a block of :data:`BLOCK` rows at a time after the
    running sum: the same float, with memory for a block.  O(atoms) time: a
    sum in this order cannot be split between ranks without changing it.
    """
    gen, total = np.random.Generator(np.random.PCG64(seed)), None
    for start in range(0, atoms, BLOCK):
        rows = gen.random((min(BLOCK, atoms - start), 3)) - 0.5
        total = np.add.reduce(rows if total is None else np.concatenate([total[None], rows]), axis=0)
    return total


def square_sum_leaves(atoms: int, limit: int = 3 * BLOCK) -> list[tuple[int, int]]:
    """The leaves ``[start, stop)`` of NumPy's pairwise sum over the ``3 atoms`` values of ``v * v``.

    ``np.sum`` of a contiguous array halves it (the first half a multiple of
    8 long) until a part is at most 128 values; this cuts the same tree where
    a part is at most ``limit`` values, and ``np.add.reduce`` of such a part
    is that part's subtree.  The leaves are independent: ranks can share them.
    """
    leaves: list[tuple[int, int]] = []

    def cut(start: int, n: int) -> None:
        if n <= limit:
            leaves.append((start, start + n))
            return
        half = n // 2 - (n // 2) % 8
        cut(start, half)
        cut(start + half, n - half)

    cut(0, 3 * atoms)
    return leaves


def square_sum_leaf(seed: int, mean: np.ndarray, start: int, stop: int) -> float:
    """The pairwise sum of values ``start..stop-1`` of ``(draws - mean)^2`` flattened (a leaf's subtree)."""
    first = start // 3
    bits = np.random.PCG64(seed)
    bits.advance(3 * first)
    v = np.random.Generator(bits).random((-(-stop // 3) - first, 3)) - 0.5
    v -= mean
    return float(np.add.reduce((v * v).ravel()[start - 3 * first:stop - 3 * first]))


def square_sum(atoms: int, leaf_sums, limit: int = 3 * BLOCK) -> float:
    """``np.sum(v * v)`` from the sums of :func:`square_sum_leaves` (in their order), added as NumPy's tree adds."""
    values = iter(leaf_sums)

    def add(n: int) -> np.float64:
        if n <= limit:
            return np.float64(next(values))
        half = n // 2 - (n // 2) % 8
        return add(half) + add(n - half)

    return float(add(3 * atoms))


def scale_velocities(v: np.ndarray, mean: np.ndarray, squares: float, atoms: int, temp: float) -> np.ndarray:
    """:func:`velocities`' last two steps on some atoms' draws ``v`` (in place): momentum removed, scaled to ``temp``.

    ``mean`` is :func:`momentum_sum` over ``atoms`` divided by ``atoms`` (NumPy's mean), ``squares``
    :func:`square_sum`.
    """
    _check_temperature(temp)
    v -= mean
    t = squares / dof(atoms)
    if t > 0:
        v *= math.sqrt(temp / t)
    return v
