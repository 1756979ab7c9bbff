"""CUDA kernels of the LJ model (numba.cuda): the Verlet-list build and the forces.

The kernels take device arrays of any library that exposes
``__cuda_array_interface__`` (CuPy's, on a GPU) or, under the simulator, NumPy
arrays; :class:`~pympi_gpu.nbody.lj.gpu_system.GpuLjSystem` launches them on
the stream its CuPy work runs on.  One thread per atom throughout.  With full lists
(each pair listed from both sides) a thread writes only its own atom's rows
and no two threads write the same memory; with half lists (Newton's third
law, each pair once) a thread adds the reaction to its neighbours' rows
with atomic adds.  The LJ pair term and a
list row's force are the CPU kernels' (:func:`~pympi_gpu.nbody.lj.kernels_cpu.lj_row`).

What CuPy does as well in one or two of its own kernels is left to it (the
caller): the cell keys, their sort, the cell starts (a scan), compaction,
gathers (halo packing), the kicks and drifts, reductions.  What it cannot
express without a loop per neighbour (the cell search and the pair loops) is
here.
Importing this module imports numba.cuda: do it only for ``--backend gpu``.
"""

from __future__ import annotations

import math

from numba import cuda

from pympi_gpu.nbody.lj.kernels_cpu import lj_pair, lj_row

__all__ = ["BLOCK", "grid", "forces", "forces_newton", "build_lists"]

BLOCK = 128


def grid(n: int) -> int:
    """Blocks of :data:`BLOCK` threads for ``n`` threads (at least one)."""
    return max(1, math.ceil(n / BLOCK))


@cuda.jit
def forces(pos, f, e, w, i0, i1, cnt, nbr, rc2, add):
    """One-sided LJ forces of atoms [i0, i1) over their listed neighbours.

    ``add``: 0 overwrites f, e, w (the first list), 1 adds (the ghost list).
    e and w hold each atom's pairs' full energy/virial (halved by the caller's sum).
    """
    i = cuda.grid(1) + i0
    if i >= i1:
        return
    fx, fy, fz, ei, wi = lj_row(pos, i, cnt, nbr, rc2)
    if add:
        f[i, 0] += fx
        f[i, 1] += fy
        f[i, 2] += fz
        e[i] += ei
        w[i] += wi
    else:
        f[i, 0] = fx
        f[i, 1] = fy
        f[i, 2] = fz
        e[i] = ei
        w[i] = wi


@cuda.jit
def forces_newton(pos, f, e, w, i0, i1, cnt, nbr, rc2, add):
    """Half-list LJ forces of atoms [i0, i1): f[i] and f[j] (ghost rows too) by atomic adds.

    ``add``: 0 overwrites e, w (the first list), 1 adds; f must be zeroed first.
    e and w hold each atom's listed pairs' energy/virial, every pair once.
    """
    i = cuda.grid(1) + i0
    if i >= i1:
        return
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
            fpair, u = lj_pair(r2)
            fx += dx * fpair
            fy += dy * fpair
            fz += dz * fpair
            cuda.atomic.add(f, (j, 0), -dx * fpair)
            cuda.atomic.add(f, (j, 1), -dy * fpair)
            cuda.atomic.add(f, (j, 2), -dz * fpair)
            ei += u
            wi += r2 * fpair
    cuda.atomic.add(f, (i, 0), fx)
    cuda.atomic.add(f, (i, 1), fy)
    cuda.atomic.add(f, (i, 2), fz)
    if add:
        e[i] += ei
        w[i] += wi
    else:
        e[i] = ei
        w[i] = wi


@cuda.jit
def build_lists(pos, n, gid, cell, start, atoms, nx, ny, nz, reach, cut2, rc2, half, own_cnt, own_nbr, gh_cnt,
                gh_nbr):
    """Verlet lists of the owned atoms [0, n), one thread per atom.

    Full lists, or with ``half`` each pair once: owned neighbours j > i, and
    ghost neighbours whose global id ``gid[j]`` exceeds ``gid[i]`` (the rule
    of the CPU's half lists, exact whatever the round-off of the ghosts'
    shifted positions).

    The atoms of cell c are ``atoms[start[c]:start[c + 1]]`` in increasing
    index; the cells within ``reach`` of atom i's are searched, a z-row of
    cells as one run of ``atoms``.  Row i lists its neighbours within ``rc2``
    (at these positions) first, then those in the skin (within ``cut2``), in
    the order of the search: the CPU's lists, row for row.  Counts go
    beyond the capacity (the rows' width) when it is short; only what fits is
    written, and the caller retries wider.
    """
    i = cuda.grid(1)
    if i >= n:
        return
    cap_own = own_nbr.shape[1]
    cap_gh = gh_nbr.shape[1]
    c = cell[i]
    cz = c % nz
    cy = (c // nz) % ny
    cx = c // (ny * nz)
    xi = pos[i, 0]
    yi = pos[i, 1]
    zi = pos[i, 2]
    no = 0
    ng = 0
    for inside in range(2):  # pass 0: within rc; pass 1: in the skin
        for ax in range(max(cx - reach, 0), min(cx + reach + 1, nx)):
            for ay in range(max(cy - reach, 0), min(cy + reach + 1, ny)):
                base = (ax * ny + ay) * nz
                k0 = start[base + max(cz - reach, 0)]
                k1 = start[base + min(cz + reach + 1, nz)]
                for k in range(k0, k1):
                    j = atoms[k]
                    dx = xi - pos[j, 0]
                    dy = yi - pos[j, 1]
                    dz = zi - pos[j, 2]
                    r2 = dx * dx + dy * dy + dz * dz
                    if half:
                        keep = j > i if j < n else gid[j] > gid[i]
                    else:
                        keep = j != i
                    if keep and r2 < cut2 and (r2 < rc2) == (inside == 0):
                        if j < n:
                            if no < cap_own:
                                own_nbr[i, no] = j
                            no += 1
                        else:
                            if ng < cap_gh:
                                gh_nbr[i, ng] = j
                            ng += 1
    own_cnt[i] = no
    gh_cnt[i] = ng
