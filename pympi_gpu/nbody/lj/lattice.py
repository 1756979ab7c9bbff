"""The initial state of LAMMPS ``bench/in.lj``: fcc lattice, random velocities; pure, no MPI.

``lattice fcc 0.8442`` makes the cubic cell edge ``a = (4 / rho)^(1/3)``
(4 atoms per cell); ``region box block 0 k 0 k 0 k`` a box of ``k^3`` cells,
``N = 4 k^3`` atoms.  ``velocity all create T seed`` draws each component
uniformly, removes the total momentum and scales to temperature ``T`` with
``3N - 3`` degrees of freedom.  Our stream is NumPy's PCG64 seeded with
``seed`` (not LAMMPS's Park-Miller), drawn for all atoms in id order, so the
state does not depend on the number of ranks; the benchmark hands LAMMPS this
very state as a data file.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["FCC_BASIS", "cells_for", "cell_edge", "fcc_positions", "velocities", "temperature", "dof"]

FCC_BASIS = np.array([[0.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.5, 0.0, 0.5], [0.0, 0.5, 0.5]])


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
    if not (temp >= 0 and math.isfinite(temp)):
        raise ValueError(f"temperature must be finite and >= 0, got {temp!r}")
    v = np.random.Generator(np.random.PCG64(seed)).random((atoms, 3)) - 0.5
    v -= v.mean(axis=0)
    t = temperature(v)
    if t > 0:
        v *= math.sqrt(temp / t)
    return v
