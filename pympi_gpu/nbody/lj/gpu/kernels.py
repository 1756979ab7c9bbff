"""CUDA kernels of the LJ model's step (numba.cuda): the forces, the integration, the halo's rows.

The kernels take device arrays of any library that exposes
``__cuda_array_interface__`` (CuPy's, on a GPU) or, under the simulator, NumPy
arrays; :class:`~pympi_gpu.nbody.lj.gpu.atoms.DeviceAtoms` launches them on
the stream its CuPy work runs on.  One thread per atom throughout.  With full lists
(each pair listed from both sides) a thread writes only its own atom's rows
and no two threads write the same memory; with half lists (Newton's third
law, each pair once) a thread adds the reaction to its neighbours' rows
with atomic adds.  The force kernels are compiled around a pair style's term
by :func:`force_kernels`, as the CPU's are (:mod:`~pympi_gpu.nbody.lj.pairs`).

The rebuild's kernels (the cells, the ghosts, the Verlet lists) are
:mod:`~pympi_gpu.nbody.lj.gpu.rebuild_kernels`'.  Here is every launch of a
step without a rebuild, each doing in one kernel what CuPy would do in
several (issue 30: at a million atoms a step's work is a few hundred
microseconds, and each launch from Python costs a few): :func:`integrate`
(kick, drift, the squared displacement and its maximum, one number for the
rebuild's decision), the ghost list's forces with the second kick
(``forces_kick``), :func:`gather_rows` (a halo message packed), and half
lists' :func:`kick` and reverse halo (:func:`add_rows`).

The integration rounds each multiply and add (libdevice's ``_rn``
operations, which the compiler never fuses into an FMA): ``v + h f`` and
``x + dt v`` are the CPU's numbers for the CPU's forces, as CuPy's separate
elementwise kernels gave them.  Under the simulator the same operations are
NumPy's, rounded each.
Importing this module imports numba.cuda: do it only for ``--backend gpu``.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numba
import numpy as np
from numba import cuda, float64, int32, int64, uint32, uint64, void

from pympi_gpu.device.buffers import quiet_small_grids
from pympi_gpu.nbody.lj.pairs import contribution
from pympi_gpu.nbody.lj.precision import DEFAULT, precision

__all__ = ["BLOCK", "grid", "strided_grid", "CudaForceKernels", "force_kernels", "integrate", "kick", "gather_rows",
           "add_rows", "launch_bounds", "FORCES_SIGNATURE", "FORCES_KICK_SIGNATURE", "INTEGRATE_SIGNATURE", "KICK_SIGNATURE",
           "GATHER_SIGNATURE", "ADD_SIGNATURE"]

_flat = float64[::1]
#: the types the kernels are launched with (CuPy arrays through ``__cuda_array_interface__``)
FORCES_SIGNATURE = void(_flat, _flat, _flat, _flat, int64, int64, int64[::1], int32[::1], float64, int64)
FORCES_KICK_SIGNATURE = void(_flat, _flat, _flat, _flat, _flat, float64, int64, int64[::1], int32[::1], float64)
INTEGRATE_SIGNATURE = void(_flat, _flat, _flat, _flat, float64, float64, int64, _flat, int64)
KICK_SIGNATURE = void(_flat, _flat, float64, int64)
GATHER_SIGNATURE = void(_flat, int64[::1], _flat, _flat, int64, int64)
ADD_SIGNATURE = void(_flat, int64[::1], _flat, int64, int64)

BLOCK = 128

quiet_small_grids()  # a third of a small brick, a ghost list: launches of a few blocks

# unsigned index constants: with signed indices numba adds a negative-index wraparound to every access
_1 = np.uint64(1)
_2 = np.uint64(2)
_3 = np.uint64(3)


if numba.config.ENABLE_CUDASIM:  # kernels run as Python: NumPy rounds each operation
    def _mul(a, b):
        return a * b

    def _add(a, b):
        return a + b
else:  # rounded each, never contracted into an FMA (PTX mul.rn/add.rn)
    from numba.cuda import libdevice

    _mul, _add = libdevice.dmul_rn, libdevice.dadd_rn


def grid(n: int) -> int:
    """Blocks of :data:`BLOCK` threads for ``n`` threads (at least one)."""
    return max(1, math.ceil(n / BLOCK))


def strided_grid(n: int, most: int) -> int:
    """Blocks of a grid-stride kernel over ``n`` items: one a :data:`BLOCK` of them, no more than ``most``."""
    return max(1, min(most, math.ceil(n / BLOCK)))


def launch_bounds(blocks: int) -> dict:
    """``cuda.jit``'s launch bounds: ``blocks`` resident blocks of :data:`BLOCK` threads (caps the
    registers); none where numba.cuda has no such option (the simulator, older releases)."""
    import inspect

    try:
        ok = "launch_bounds" in inspect.signature(cuda.jit).parameters
    except (TypeError, ValueError):
        ok = False
    return {"launch_bounds": (BLOCK, blocks)} if ok else {}


class CudaForceKernels(NamedTuple):
    """The force kernels of one pair term (:func:`force_kernels`), launched with :data:`FORCES_SIGNATURE`
    (``forces_kick``: :data:`FORCES_KICK_SIGNATURE`)."""

    #: full lists: one-sided, a thread writes only its own atom's rows
    forces: object
    #: half lists, Newton's third law: the reactions by atomic adds
    forces_newton: object
    #: full lists, the step's last force launch: the ghost list added to the owned list's forces, and
    #: the second kick
    forces_kick: object


@functools.cache
def force_kernels(pair) -> CudaForceKernels:
    """The CUDA force kernels compiled around ``pair`` (a style's pair term, :mod:`~pympi_gpu.nbody.lj.pairs`).

    ``pair(r2) -> (fpair, energy)``, as the CPU's
    :func:`~pympi_gpu.nbody.lj.cpu.kernels.force_kernels` takes it, in its
    precision (``pair.precision``: a pair's force and energy in single precision
    for ``mixed``, the arrays and the stored sums double); the
    coefficients are folded in as constants.  Compiled on first launch.
    """
    real = precision(getattr(pair, "precision", DEFAULT)).real
    row = _make_row(pair, real)
    return CudaForceKernels(_make_forces(row), _make_forces_newton(pair, real), _make_forces_kick(row))


def _make_row(pair, real=np.float64):
    """The one-sided row of a list around ``pair`` (a device function), each pair's body the model's one
    (:func:`~pympi_gpu.nbody.lj.pairs.contribution`), in ``real`` as the CPU's."""
    contribute = contribution(pair, real)
    zero = real(0.0)

    @cuda.jit(device=True, inline=True)
    def row(pos, i, nbr, stride, c, rc2):
        """Force on atom i from its c listed neighbours, and their energy and virial: ``(fx, fy, fz, e, w)``.

        The CPU's row (:func:`~pympi_gpu.nbody.lj.cpu.kernels.make_row`), in the same order of operations,
        with the index arithmetic of a GPU loop: ``pos`` flat (atom j's x, y, z at 3j, 3j+1, 3j+2),
        row i's k-th neighbour at ``nbr[i + k * stride]`` (the lists column-major, flat), all indices
        unsigned (no negative-index wraparound) and the position in the list advanced by one add.
        """
        b = _3 * i
        xi = pos[b]
        yi = pos[b + _1]
        zi = pos[b + _2]
        fx = zero
        fy = zero
        fz = zero
        e = zero
        w = zero
        at = i
        end = i + c * stride
        while at < end:
            j = _3 * uint64(uint32(nbr[at]))  # list entries are row numbers, >= 0
            at += stride
            inside, px, py, pz, u, v = contribute(xi - pos[j], yi - pos[j + _1], zi - pos[j + _2], rc2)
            if inside:
                fx += px
                fy += py
                fz += pz
                e += u
                w += v
        return fx, fy, fz, e, w

    return row


def _make_forces(row):
    """The full-list kernel around a list row."""

    # at most 40 registers (ptxas takes 44): 12 blocks of 128, 0.75 of an SM, no spill (gpu-static.json)
    @cuda.jit(**launch_bounds(12))
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


def _make_forces_kick(row):
    """The full-list kernel that ends a step's forces, around a list row."""

    # the bounds of forces: 40 registers, no spill (a flag to make the kick optional spilled two)
    @cuda.jit(**launch_bounds(12))
    def forces_kick(pos, f, e, w, v, h, n, cnt, nbr, rc2):
        """Atoms [0, n): the ghost list's forces added to what :func:`forces` stored, then ``v += h f``.

        The sums are those of a second :func:`forces` launch with ``add`` (``f += f_ghost``, and so
        e and w), then the second kick (``v + h f``, each operation rounded, as the CPU's): one
        launch where there were two (three CuPy kernels with the kick's).  The arrays flat, as
        :func:`forces` takes them (``cnt``/``nbr`` the ghost list); ``v`` ``(3 n,)``.
        """
        i = uint64(cuda.grid(1))
        if i >= uint64(n):
            return
        stride = uint64(cnt.shape[0])
        gx, gy, gz, eg, wg = row(pos, i, nbr, stride, uint64(cnt[i]), rc2)
        b = _3 * i
        fx = f[b] + gx
        fy = f[b + _1] + gy
        fz = f[b + _2] + gz
        f[b] = fx
        f[b + _1] = fy
        f[b + _2] = fz
        e[i] += eg
        w[i] += wg
        v[b] = _add(v[b], _mul(h, fx))
        v[b + _1] = _add(v[b + _1], _mul(h, fy))
        v[b + _2] = _add(v[b + _2], _mul(h, fz))

    return forces_kick


@cuda.jit
def integrate(v, f, x, x0, h, dt, n, dmax, slot):
    """The first half of a step for atoms [0, n), one thread each, and the largest displacement.

    ``v += h f``, ``x += dt v``, then the squared displacement since ``x0``
    (``dx dx + dy dy + dz dz``, each operation rounded: the CPU's
    ``max_displacement2``; NaN counts as infinite).  A block's largest by a
    tree in shared memory, then one atomic max per block into ``dmax[slot]``,
    the one number the host reads.  Block 0 zeroes ``dmax[1 - slot]``, which
    the next step (the other slot) maxes into: the host has read it already,
    and the stream orders the two launches.  Launch with :data:`BLOCK`
    threads a block, at least one block (``n`` may be 0).  Arrays flat:
    ``v``, ``x0`` ``(3 n,)``, ``f`` and ``x`` the first ``3 n`` of theirs.
    """
    best = cuda.shared.array(BLOCK, float64)
    t = cuda.threadIdx.x
    i = uint64(cuda.grid(1))
    d2 = 0.0
    if i < uint64(n):
        b = _3 * i
        vx = _add(v[b], _mul(h, f[b]))
        vy = _add(v[b + _1], _mul(h, f[b + _1]))
        vz = _add(v[b + _2], _mul(h, f[b + _2]))
        v[b] = vx
        v[b + _1] = vy
        v[b + _2] = vz
        px = _add(x[b], _mul(dt, vx))
        py = _add(x[b + _1], _mul(dt, vy))
        pz = _add(x[b + _2], _mul(dt, vz))
        x[b] = px
        x[b + _1] = py
        x[b + _2] = pz
        dx = px - x0[b]
        dy = py - x0[b + _1]
        dz = pz - x0[b + _2]
        d2 = _add(_add(_mul(dx, dx), _mul(dy, dy)), _mul(dz, dz))
        if d2 != d2:
            d2 = math.inf
    best[t] = d2
    cuda.syncthreads()
    half = BLOCK // 2
    while half > 0:
        if t < half:
            best[t] = max(best[t], best[t + half])
        cuda.syncthreads()
        half //= 2
    if t == 0:
        cuda.atomic.max(dmax, slot, best[0])
        if cuda.blockIdx.x == 0:
            dmax[1 - slot] = 0.0


@cuda.jit
def kick(v, f, h, n):
    """``v += h f`` for atoms [0, n), each operation rounded (half lists' second kick, after the reverse halo)."""
    i = uint64(cuda.grid(1))
    if i >= uint64(n):
        return
    b = _3 * i
    v[b] = _add(v[b], _mul(h, f[b]))
    v[b + _1] = _add(v[b + _1], _mul(h, f[b + _1]))
    v[b + _2] = _add(v[b + _2], _mul(h, f[b + _2]))


@cuda.jit
def gather_rows(src, idx, shift, dst, row0, m):
    """Rows ``dst[row0 + g] = src[idx[g]] + shift[g]`` for g in [0, m), one thread a row (flat ``(3 rows,)``).

    A halo message packed (``dst`` the send buffer, ``row0`` 0), or the ghost
    rows of the brick's own periodic images written in place (``dst`` is
    ``src``: the rows read, ``idx``, all lie before the rows written).  One
    add per coordinate: a ghost's shift is nonzero along one dimension at
    most per stage, so the stages' shifts summed are the ones they add.
    """
    g = uint64(cuda.grid(1))
    if g >= uint64(m):
        return
    j = _3 * uint64(idx[g])
    s = _3 * g
    r = _3 * (g + uint64(row0))
    dst[r] = src[j] + shift[s]
    dst[r + _1] = src[j + _1] + shift[s + _1]
    dst[r + _2] = src[j + _2] + shift[s + _2]


@cuda.jit
def add_rows(dst, idx, src, row0, m):
    """Rows ``dst[idx[g]] += src[row0 + g]`` for g in [0, m), one thread a row (flat ``(3 rows,)``).

    One message of the reverse halo: the forces of its ghost rows (``src`` from ``row0``: a
    brick's own periodic image, ``dst`` itself; or the message received back) added into the rows
    they were copied from.  A message's rows are distinct, and those added to lie before those
    read, so plain adds, in the CPU's order: the same sums bit for bit.
    """
    g = uint64(cuda.grid(1))
    if g >= uint64(m):
        return
    j = _3 * uint64(idx[g])
    s = _3 * (g + uint64(row0))
    dst[j] += src[s]
    dst[j + _1] += src[s + _1]
    dst[j + _2] += src[s + _2]


def _make_forces_newton(pair, real=np.float64):
    """The half-list kernel around ``pair``: the reactions by atomic adds, each pair's body as :func:`_make_row`'s."""
    contribute = contribution(pair, real)
    zero = real(0.0)

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
        fx = zero
        fy = zero
        fz = zero
        ei = zero
        wi = zero
        at = i
        end = i + uint64(cnt[i]) * stride
        while at < end:
            j = _3 * uint64(uint32(nbr[at]))
            at += stride
            inside, px, py, pz, u, v = contribute(xi - pos[j], yi - pos[j + _1], zi - pos[j + _2], rc2)
            if inside:
                fx += px
                fy += py
                fz += pz
                cuda.atomic.add(f, j, -px)
                cuda.atomic.add(f, j + _1, -py)
                cuda.atomic.add(f, j + _2, -pz)
                ei += u
                wi += v
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
