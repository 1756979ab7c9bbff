"""CPU kernels of the LJ model (numba): cell binning, Verlet lists, forces, kicks.

Layout: ``pos`` is ``(n_all, 3)`` float64, rows ``[0, nlocal)`` the atoms this
rank owns and ``[nlocal, n_all)`` its ghosts (periodic images and copies of
the neighbours' atoms).  Forces are wanted on owned atoms only.

Neighbour lists (padded rows, built every rebuild, radius ``rc + skin``; cells of half
that radius, searched two cells out):

* ``own``: owned-owned pairs.  ``half=True`` lists each pair once (j > i) and
  the force kernel applies Newton's third law (half the pair work; serial);
  ``half=False`` lists both directions and a parallel kernel writes only
  ``f[i]`` (for several numba threads per rank, where ``f[j]`` would race).
* ``ghost``: owned-ghost pairs, each listed on the owned side only; the rank
  that owns the ghost computes the pair too, so the pair's energy and virial
  count half here (no reverse communication of ghost forces).

LJ 12-6 with epsilon = sigma = 1: ``u(r) = 4 (r^-12 - r^-6)`` for ``r < rc``
(no shift, as LAMMPS's ``pair_style lj/cut``), ``F = 24 (2 r^-12 - r^-6) r / r^2``.
No ``fastmath``: the results must not depend on how the compiler reassociates.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

__all__ = ["bin_atoms", "neighbor_lists", "pair_forces", "kick", "drift", "max_displacement2",
           "kinetic_sums", "warmup"]


@njit(cache=True, inline="always")
def _cell_index(pos, i, lo, inv, ncell):
    cx = min(max(int(np.floor((pos[i, 0] - lo[0]) * inv[0])), 0), ncell[0] - 1)
    cy = min(max(int(np.floor((pos[i, 1] - lo[1]) * inv[1])), 0), ncell[1] - 1)
    cz = min(max(int(np.floor((pos[i, 2] - lo[2]) * inv[2])), 0), ncell[2] - 1)
    return (cx * ncell[1] + cy) * ncell[2] + cz


@njit(cache=True)
def bin_atoms(pos, n_all, lo, inv, ncell):
    """Counting sort of atoms into cells: ``(cell_of, start, atoms)``.

    ``cell_of[i]`` is atom i's cell; the atoms of cell c are
    ``atoms[start[c]:start[c + 1]]``, in increasing index.
    """
    ncells = ncell[0] * ncell[1] * ncell[2]
    cell_of = np.empty(n_all, np.int64)
    start = np.zeros(ncells + 1, np.int64)
    for i in range(n_all):
        c = _cell_index(pos, i, lo, inv, ncell)
        cell_of[i] = c
        start[c + 1] += 1
    for c in range(ncells):
        start[c + 1] += start[c]
    fill = start[:-1].copy()
    atoms = np.empty(n_all, np.int64)
    for i in range(n_all):
        c = cell_of[i]
        atoms[fill[c]] = i
        fill[c] += 1
    return cell_of, start, atoms


@njit(parallel=True, cache=True)
def neighbor_lists(pos, nlocal, cell_of, start, atoms, ncell, reach, cut2, half, cap_own, cap_gh):
    """Verlet lists of the owned atoms, padded: ``(own_cnt, own_nbr, gh_cnt, gh_nbr, ok)``.

    ``own_nbr[i, :own_cnt[i]]`` are the owned neighbours of owned atom i (j > i
    if ``half``), ``gh_nbr[i, :gh_cnt[i]]`` its ghost neighbours; cells within
    ``reach`` cells in each direction are searched.  With ``half`` the owned
    atoms must be sorted by cell (as :meth:`LjSystem.rebuild` leaves them):
    the owned atoms of cells before atom i's are then skipped unread.  ``ok`` is False if some
    atom has more neighbours than the capacities ``cap_own``/``cap_gh``
    (the caller retries with larger ones).
    """
    own_cnt = np.zeros(nlocal, np.int64)
    gh_cnt = np.zeros(nlocal, np.int64)
    own_nbr = np.empty((nlocal, cap_own), np.int32)
    gh_nbr = np.empty((nlocal, cap_gh), np.int32)
    over = 0
    # positions in cell order: the search reads them contiguously
    sp = np.empty((atoms.size, 3))
    for k in prange(atoms.size):
        for d in range(3):
            sp[k, d] = pos[atoms[k], d]
    # end of the owned atoms of each cell (atoms[] lists a cell's atoms by index: owned first)
    ncells = start.size - 1
    own_end = np.empty(ncells, np.int64)
    for cc in prange(ncells):
        k = start[cc]
        while k < start[cc + 1] and atoms[k] < nlocal:
            k += 1
        own_end[cc] = k
    for i in prange(nlocal):
        c = cell_of[i]
        cz = c % ncell[2]
        cy = (c // ncell[2]) % ncell[1]
        cx = c // (ncell[1] * ncell[2])
        no = 0
        ng = 0
        xi, yi, zi = pos[i, 0], pos[i, 1], pos[i, 2]
        for ax in range(max(cx - reach, 0), min(cx + reach + 1, ncell[0])):
            for ay in range(max(cy - reach, 0), min(cy + reach + 1, ncell[1])):
                base = (ax * ncell[1] + ay) * ncell[2]
                for az in range(max(cz - reach, 0), min(cz + reach + 1, ncell[2])):
                    cc = base + az
                    # half lists: the owned atoms of an earlier cell all have j < i (sorted by cell)
                    k0 = own_end[cc] if (half and cc < c) else start[cc]
                    for k in range(k0, start[cc + 1]):
                        j = atoms[k]
                        if j == i or (half and j < i):
                            continue
                        dx = xi - sp[k, 0]
                        dy = yi - sp[k, 1]
                        dz = zi - sp[k, 2]
                        if dx * dx + dy * dy + dz * dz < cut2:
                            if j < nlocal:
                                if no < cap_own:
                                    own_nbr[i, no] = j
                                no += 1
                            else:
                                if ng < cap_gh:
                                    gh_nbr[i, ng] = j
                                ng += 1
        own_cnt[i] = no
        gh_cnt[i] = ng
        if no > cap_own or ng > cap_gh:
            over += 1
    return own_cnt, own_nbr, gh_cnt, gh_nbr, over == 0


@njit(cache=True)
def _newton(pos, f, i0, i1, cnt, nbr, rc2):
    """Half list, Newton's third law: adds to f[i] and f[j]; returns (energy, virial)."""
    e = 0.0
    w = 0.0
    for i in range(i0, i1):
        xi, yi, zi = pos[i, 0], pos[i, 1], pos[i, 2]
        fx = 0.0
        fy = 0.0
        fz = 0.0
        for k in range(cnt[i]):
            j = nbr[i, k]
            dx = xi - pos[j, 0]
            dy = yi - pos[j, 1]
            dz = zi - pos[j, 2]
            r2 = dx * dx + dy * dy + dz * dz
            if r2 < rc2:
                r2i = 1.0 / r2
                r6i = r2i * r2i * r2i
                fpair = r6i * (48.0 * r6i - 24.0) * r2i
                fx += dx * fpair
                fy += dy * fpair
                fz += dz * fpair
                f[j, 0] -= dx * fpair
                f[j, 1] -= dy * fpair
                f[j, 2] -= dz * fpair
                e += 4.0 * r6i * (r6i - 1.0)
                w += r2 * fpair
        f[i, 0] += fx
        f[i, 1] += fy
        f[i, 2] += fz
    return e, w


@njit(parallel=True, cache=True)
def _one_sided(pos, f, i0, i1, cnt, nbr, rc2):
    """Adds to f[i] only (parallel over i); returns the full (energy, virial) of the listed pairs."""
    e = 0.0
    w = 0.0
    for i in prange(i0, i1):
        xi, yi, zi = pos[i, 0], pos[i, 1], pos[i, 2]
        fx = 0.0
        fy = 0.0
        fz = 0.0
        ei = 0.0
        wi = 0.0
        for k in range(cnt[i]):
            j = nbr[i, k]
            dx = xi - pos[j, 0]
            dy = yi - pos[j, 1]
            dz = zi - pos[j, 2]
            r2 = dx * dx + dy * dy + dz * dz
            if r2 < rc2:
                r2i = 1.0 / r2
                r6i = r2i * r2i * r2i
                fpair = r6i * (48.0 * r6i - 24.0) * r2i
                fx += dx * fpair
                fy += dy * fpair
                fz += dz * fpair
                ei += 4.0 * r6i * (r6i - 1.0)
                wi += r2 * fpair
        f[i, 0] += fx
        f[i, 1] += fy
        f[i, 2] += fz
        e += ei
        w += wi
    return e, w


def pair_forces(pos, f, i0, i1, cnt, nbr, rc2, newton):
    """Add the LJ forces of the listed pairs of atoms ``[i0, i1)`` to ``f``.

    Returns ``(energy, virial)`` of those pairs counted once each:
    ``newton=True`` for a half list (serial), ``False`` for a one-sided list
    (parallel), whose sums the caller weighs (1/2 for both-direction or ghost lists).
    """
    if newton:
        return _newton(pos, f, i0, i1, cnt, nbr, rc2)
    return _one_sided(pos, f, i0, i1, cnt, nbr, rc2)


@njit(parallel=True, cache=True)
def kick(v, f, h, n):
    """v += h f for the first n rows (unit masses)."""
    for i in prange(n):
        for d in range(3):
            v[i, d] += h * f[i, d]


@njit(parallel=True, cache=True)
def drift(x, v, dt, n):
    """x += dt v for the first n rows."""
    for i in prange(n):
        for d in range(3):
            x[i, d] += dt * v[i, d]


@njit(parallel=True, cache=True)
def max_displacement2(x, x0, n):
    """Largest squared displacement of the first n rows since ``x0``."""
    m = 0.0
    for i in prange(n):
        dx = x[i, 0] - x0[i, 0]
        dy = x[i, 1] - x0[i, 1]
        dz = x[i, 2] - x0[i, 2]
        m = max(m, dx * dx + dy * dy + dz * dz)
    return m


def kinetic_sums(v, n):
    """``[sum v^2, sum vx, sum vy, sum vz]`` of the first n rows (float64)."""
    vv = v[:n]
    return np.array([float(np.sum(vv * vv)), *vv.sum(axis=0)])


def warmup() -> None:
    """Compile (or load from the cache) every kernel on a tiny system."""
    pos = np.random.default_rng(0).random((8, 3)) * 3.0
    lo = np.zeros(3)
    inv = np.full(3, 1.0)
    ncell = np.full(3, 3, np.int64)
    cell_of, start, atoms = bin_atoms(pos, 8, lo, inv, ncell)
    for half in (True, False):
        p = neighbor_lists(pos, 4, cell_of, start, atoms, ncell, 1, 1.0, half, 8, 8)
        f = np.zeros((8, 3))
        pair_forces(pos, f, 0, 4, p[0], p[1], 1.0, half)
        pair_forces(pos, f, 0, 4, p[2], p[3], 1.0, False)
    v = np.zeros((8, 3))
    kick(v, f, 0.1, 8)
    drift(pos, v, 0.1, 8)
    max_displacement2(pos, pos, 8)
