"""CUDA kernels of the LJ model (numba.cuda): the Verlet-list build and the forces.

The kernels take device arrays of any library that exposes
``__cuda_array_interface__`` (CuPy's, on a GPU) or, under the simulator, NumPy
arrays; :class:`~pympi_gpu.nbody.lj.device_atoms.DeviceAtoms` launches them on
the stream its CuPy work runs on.  One thread per atom throughout.  With full lists
(each pair listed from both sides) a thread writes only its own atom's rows
and no two threads write the same memory; with half lists (Newton's third
law, each pair once) a thread adds the reaction to its neighbours' rows
with atomic adds.  The force kernels are compiled around a pair style's term
by :func:`force_kernels`, as the CPU's are (:mod:`~pympi_gpu.nbody.lj.pairs`).

What CuPy does as well in one or two of its own kernels is left to it (the
caller): the cell keys, their sort, the cell starts (a scan), compaction,
gathers (halo packing), the kicks and drifts, reductions.  What it cannot
express without a loop per neighbour (the cell search and the pair loops) is
here.
Importing this module imports numba.cuda: do it only for ``--backend gpu``.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np
from numba import boolean, cuda, float64, int32, int64, uint32, uint64, void

from pympi_gpu.device.buffers import quiet_small_grids
from pympi_gpu.nbody.lj.kernels_cpu import jitable

__all__ = ["BLOCK", "grid", "CudaForceKernels", "force_kernels", "build_lists", "FORCES_SIGNATURE",
           "BUILD_SIGNATURE"]

#: the types the kernels are launched with (CuPy arrays through ``__cuda_array_interface__``)
FORCES_SIGNATURE = void(float64[::1], float64[::1], float64[::1], float64[::1], int64, int64, int64[::1],
                        int32[::1], float64, int64)
BUILD_SIGNATURE = void(float64[:, ::1], int64, int64[::1], int64[::1], int64[::1], int64[::1], int64, int64, int64,
                       int64, float64, float64, boolean, int64[::1], int32[::1, :], int64[::1], int32[::1, :])

BLOCK = 128

quiet_small_grids()  # a third of a small brick, a ghost list: launches of a few blocks

# unsigned index constants: with signed indices numba adds a negative-index wraparound to every access
_1 = np.uint64(1)
_2 = np.uint64(2)
_3 = np.uint64(3)


def grid(n: int) -> int:
    """Blocks of :data:`BLOCK` threads for ``n`` threads (at least one)."""
    return max(1, math.ceil(n / BLOCK))


def _launch_bounds(blocks: int) -> dict:
    """``cuda.jit``'s launch bounds: ``blocks`` resident blocks of :data:`BLOCK` threads (caps the
    registers); none where numba.cuda has no such option (the simulator, older releases)."""
    import inspect

    try:
        ok = "launch_bounds" in inspect.signature(cuda.jit).parameters
    except (TypeError, ValueError):
        ok = False
    return {"launch_bounds": (BLOCK, blocks)} if ok else {}


class CudaForceKernels(NamedTuple):
    """The force kernels of one pair term (:func:`force_kernels`), launched with :data:`FORCES_SIGNATURE`."""

    #: full lists: one-sided, a thread writes only its own atom's rows
    forces: object
    #: half lists, Newton's third law: the reactions by atomic adds
    forces_newton: object


@functools.cache
def force_kernels(pair) -> CudaForceKernels:
    """The CUDA force kernels compiled around ``pair`` (a style's pair term, :mod:`~pympi_gpu.nbody.lj.pairs`).

    ``pair(r2) -> (fpair, energy)``, as the CPU's
    :func:`~pympi_gpu.nbody.lj.kernels_cpu.force_kernels` takes it; the
    coefficients are folded in as constants.  Compiled on first launch.
    """
    pair = jitable(pair)
    return CudaForceKernels(_make_forces(_make_row(pair)), _make_forces_newton(pair))


def _make_row(pair):
    """The one-sided row of a list around ``pair`` (a device function)."""

    @cuda.jit(device=True, inline=True)
    def row(pos, i, nbr, stride, c, rc2):
        """Force on atom i from its c listed neighbours, and their energy and virial: ``(fx, fy, fz, e, w)``.

        The CPU's row (:func:`~pympi_gpu.nbody.lj.kernels_cpu.make_row`), in the same order of operations,
        with the index arithmetic of a GPU loop: ``pos`` flat (atom j's x, y, z at 3j, 3j+1, 3j+2),
        row i's k-th neighbour at ``nbr[i + k * stride]`` (the lists column-major, flat), all indices
        unsigned (no negative-index wraparound) and the position in the list advanced by one add.
        """
        b = _3 * i
        xi = pos[b]
        yi = pos[b + _1]
        zi = pos[b + _2]
        fx = 0.0
        fy = 0.0
        fz = 0.0
        e = 0.0
        w = 0.0
        at = i
        end = i + c * stride
        while at < end:
            j = _3 * uint64(uint32(nbr[at]))  # list entries are row numbers, >= 0
            at += stride
            dx = xi - pos[j]
            dy = yi - pos[j + _1]
            dz = zi - pos[j + _2]
            r2 = dx * dx + dy * dy + dz * dz
            if r2 < rc2:
                fpair, u = pair(r2)
                fx += dx * fpair
                fy += dy * fpair
                fz += dz * fpair
                e += u
                w += r2 * fpair
        return fx, fy, fz, e, w

    return row


def _make_forces(row):
    """The full-list kernel around a list row."""

    # at most 40 registers (ptxas takes 44): 12 blocks of 128, 0.75 of an SM, no spill (gpu-static.json)
    @cuda.jit(**_launch_bounds(12))
    def forces(pos, f, e, w, i0, i1, cnt, nbr, rc2, add):
        """One-sided pair forces of atoms [i0, i1) over their listed neighbours.

        ``pos`` ``(3 n_all,)`` and ``f`` ``(3 n,)`` flat rows of x, y, z; ``nbr`` the lists flat,
        column-major (row i's k-th neighbour at ``i + k * len(cnt)``).
        ``add``: 0 overwrites f, e, w (the first list), 1 adds (the ghost list).
        e and w hold each atom's pairs' full energy/virial (halved by the caller's sum).
        """
        i = uint64(cuda.grid(1)) + uint64(i0)
        if i >= uint64(i1):
            return
        stride = uint64(cnt.shape[0])
        fx, fy, fz, ei, wi = row(pos, i, nbr, stride, uint64(cnt[i]), rc2)
        b = _3 * i
        if add:
            f[b] += fx
            f[b + _1] += fy
            f[b + _2] += fz
            e[i] += ei
            w[i] += wi
        else:
            f[b] = fx
            f[b + _1] = fy
            f[b + _2] = fz
            e[i] = ei
            w[i] = wi

    return forces


def _make_forces_newton(pair):
    """The half-list kernel around ``pair``: the reactions by atomic adds."""

    @cuda.jit
    def forces_newton(pos, f, e, w, i0, i1, cnt, nbr, rc2, add):
        """Half-list pair forces of atoms [i0, i1): f[i] and f[j] (ghost rows too) by atomic adds.

        The arrays as :func:`forces` takes them (``f`` flat over all rows, ghosts included).
        ``add``: 0 overwrites e, w (the first list), 1 adds; f must be zeroed first.
        e and w hold each atom's listed pairs' energy/virial, every pair once.
        """
        i = uint64(cuda.grid(1)) + uint64(i0)
        if i >= uint64(i1):
            return
        stride = uint64(cnt.shape[0])
        b = _3 * i
        xi = pos[b]
        yi = pos[b + _1]
        zi = pos[b + _2]
        fx = 0.0
        fy = 0.0
        fz = 0.0
        ei = 0.0
        wi = 0.0
        at = i
        end = i + uint64(cnt[i]) * stride
        while at < end:
            j = _3 * uint64(uint32(nbr[at]))
            at += stride
            dx = xi - pos[j]
            dy = yi - pos[j + _1]
            dz = zi - pos[j + _2]
            r2 = dx * dx + dy * dy + dz * dz
            if r2 < rc2:
                fpair, u = pair(r2)
                fx += dx * fpair
                fy += dy * fpair
                fz += dz * fpair
                cuda.atomic.add(f, j, -dx * fpair)
                cuda.atomic.add(f, j + _1, -dy * fpair)
                cuda.atomic.add(f, j + _2, -dz * fpair)
                ei += u
                wi += r2 * fpair
        cuda.atomic.add(f, b, fx)
        cuda.atomic.add(f, b + _1, fy)
        cuda.atomic.add(f, b + _2, fz)
        if add:
            e[i] += ei
            w[i] += wi
        else:
            e[i] = ei
            w[i] = wi

    return forces_newton


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
