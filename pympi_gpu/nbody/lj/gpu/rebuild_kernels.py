"""CUDA kernels of the LJ model's rebuild (numba.cuda): counting sorts into cells, the ghosts, the migration.

A rebuild on the device is a few kernels whose sizes stay on the device
(issue 50): what the host must know (rows held, the lists' longest rows, a
full buffer) is written into one small int64 array, ``meta`` (the ``M_*``
slots), read once at the end of the rebuild, or, where the device decides the
rebuild itself, at the next output.  Every buffer has a fixed capacity; a
kernel that would write past one writes nothing there and leaves the most it
needed in ``meta``, so that a full buffer is seen, grown, and the work done
again, never a row or a pair silently dropped.

* **Owned atoms by (cell, id)**, as the CPU sorts them: :func:`bin_owned`
  (the positions folded into the box where nothing migrates, each atom's cell
  and its place in the cell's bucket by an atomic add, the velocities' and
  forces' finiteness), a scan of the cells' counts (one CuPy ``cumsum``: the
  cells' first rows), then :func:`order_cells`, one thread a cell: its few
  atoms sorted by id and their rows gathered in that order into the other set
  of arrays.  No 64-bit key, no radix sort.
* **Ghosts** of a run of stages whose neighbours are the brick itself (one
  rank: all three) in one pass, stage after stage as the CPU makes them: a
  ghost is a base row (one held before the run) and a *class*, one digit per
  stage of the run (0: not copied along it, 1: copied up from the low face,
  2: down from the high face), and the CPU's order of the ghost rows is the
  classes' order (the digits base 3, the run's first stage the least
  significant), each class's rows in the order of their base rows.  So
  :func:`count_images` (or :func:`order_cells`, for a run that starts the
  plan) counts each chunk of :data:`BLOCK` base rows per class, a scan of
  those counts (class-major: one ``cumsum``) gives every chunk's first row in
  every class, and :func:`write_images` writes each ghost at its row: the
  position shifted once per coordinate (the stages' shifts summed, exact: a
  stage shifts its own dimension only), its id, the base row it refreshes
  from at every step (:func:`gather_images`) and the row it is a copy of
  (half lists' reverse halo adds the ghost's force there).  A stage whose
  messages travel is the same count and scan over its two classes, written
  by :func:`pack_border` as the message; what arrives is put in place by
  :func:`unpack_border`.
* **Ghosts by cell**: each ghost writer puts its rows in their cells' buckets
  (fixed width, an atomic add each), and :func:`order_ghost_cells`, one thread
  a cell, sorts each bucket by row: the cell order the CPU's lists search.
* **The device's own decision** (:func:`bin_owned`): with the lists' policy
  (``neigh_modify every K check yes|no``) and the step's largest displacement
  in device memory, the kernels rebuild where the policy says so, and every
  later kernel of the rebuild returns at once where it did not; the step's
  bookkeeping (the last build's step, the rebuilds, LAMMPS's dangerous
  builds, the first step an atom moved farther than its ghosts reach) is kept
  in ``meta`` for the host to read at its next wait.

The loops are grid-stride: a kernel is correct for any grid, so that one
launched at every step (the device's decision) may take a grid the host
chose without knowing the sizes.  Importing this module imports numba.cuda:
do it only for ``--backend gpu``.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import boolean, cuda, float64, int32, int64, void

from pympi_gpu.nbody.lj.gpu.kernels import BLOCK, launch_bounds

__all__ = ["META", "M_GO", "M_N", "M_NONFINITE", "M_CELL_MOST", "M_OWN_MOST", "M_GH_MOST", "M_ROWS_MOST",
           "M_PAIRS", "M_BUILT_AT", "M_REBUILDS", "M_DANGEROUS", "M_BAD_STEP", "M_STAY", "M_DOWN", "M_UP", "M_LOST",
           "M_MSG", "M_END", "CLASSES",
           "cell_of", "fold_owned", "bin_owned", "order_cells", "count_images", "write_images",
           "pack_border", "unpack_border", "order_ghost_cells", "gather_images", "build_lists", "migrate_count",
           "migrate_write", "unpack_owned", "P_EVERY", "P_CHECK", "P_REBUILD2", "P_LIMIT2", "BIN_SIGNATURE", "ORDER_SIGNATURE",
           "COUNT_SIGNATURE", "WRITE_SIGNATURE", "PACK_SIGNATURE", "UNPACK_SIGNATURE", "GHOST_ORDER_SIGNATURE",
           "GATHER_IMAGES_SIGNATURE", "BUILD_SIGNATURE", "MIGRATE_COUNT_SIGNATURE", "MIGRATE_WRITE_SIGNATURE",
           "UNPACK_OWNED_SIGNATURE",
           "FOLD_SIGNATURE"]

#: ``meta``'s slots (int64).  Per rebuild: ``M_GO`` (does this step rebuild: the device's decision, 1
#: where the host asked), ``M_N`` (the owned rows), ``M_PAIRS`` (list entries of the last build),
#: ``M_MSG + 2 d + k`` (stage d's message k's rows, 0 down, 1 up), ``M_END + d`` (the row after the ghosts
#: of the run of stages, or the stage, that starts at stage d).  Kept over the run, the most any rebuild
#: needed since the buffers were made, which the host compares with the capacities: ``M_CELL_MOST`` (a
#: cell bucket's rows), ``M_OWN_MOST``/``M_GH_MOST`` (a list row's entries), ``M_ROWS_MOST`` (rows, owned
#: and ghosts); ``M_NONFINITE`` (the first step at which a rebuild found a velocity or force not finite, at least 1;
#: 0: none); and the books of the
#: device's decisions: ``M_BUILT_AT`` (the step of the last build), ``M_REBUILDS``, ``M_DANGEROUS``
#: (LAMMPS's dangerous builds), ``M_BAD_STEP`` (the first step an atom moved farther than its ghosts reach,
#: 0: none); a migration's stage: its atoms staying, leaving down, leaving up, and lost (``M_STAY`` ...)
(M_GO, M_N, M_NONFINITE, M_CELL_MOST, M_OWN_MOST, M_GH_MOST, M_ROWS_MOST, M_PAIRS, M_BUILT_AT, M_REBUILDS,
 M_DANGEROUS, M_BAD_STEP, M_STAY, M_DOWN, M_UP, M_LOST) = range(16)
M_MSG = 16
M_END = 22
META = 25

#: the most classes of a run of stages: three digits base 3, all zero (the base row itself) left out
CLASSES = 26

#: ``policy``'s entries (float64): the lists' look every K steps, checked or not (1.0/0.0), the squared
#: displacement that asks for a rebuild (half the skin's), the squared one beyond which an atom moved too far
P_EVERY, P_CHECK, P_REBUILD2, P_LIMIT2 = range(4)

_i64 = int64[::1]
_i32 = int32[::1]
_f64 = float64[::1]
_rows = float64[:, ::1]
_nbr = int32[::1, :]
#: the types the kernels are launched with (CuPy arrays through ``__cuda_array_interface__``)
FOLD_SIGNATURE = void(_rows, _rows, int64, _f64)
BIN_SIGNATURE = void(_rows, _rows, _rows, _i64, int64, boolean, boolean, _f64, _rows, _rows, _rows, _i64, _f64, _f64,
                     _i64, _i64, _i32, int64, _i64, _i64, _f64, _f64, int64, int64, int64)
ORDER_SIGNATURE = void(_i64, _i32, int64, _i64, _rows, _rows, _rows, _i64, _rows, _rows, _rows, _i64, _rows, _i64,
                       _i64, _f64, _f64, int64, int64, _i64, _rows, _i32, _i64, int64, int64)
COUNT_SIGNATURE = void(_rows, int64, int64, _i64, _rows, _i32, _i64, int64, int64, _i64)
WRITE_SIGNATURE = void(_rows, _i64, int64, int64, int64, int64, _i64, _rows, _i32, _i64, _i64, int64, _i64, _f64,
                       _i64, _f64, _f64, _i64, _i64, _i32, int64, int64, _i64)
PACK_SIGNATURE = void(_rows, _i64, int64, int64, int64, _rows, _i32, _i64, _i64, int64, _rows, _i64, _rows, _i64)
UNPACK_SIGNATURE = void(_rows, int64, _rows, _i64, int64, _f64, _f64, _i64, _i64, _i32, int64, int64, _i64)
GHOST_ORDER_SIGNATURE = void(_i64, _i32, int64, int64, _i64)
GATHER_IMAGES_SIGNATURE = void(_f64, _i64, _f64, int64, int64, _i64, int64)
BUILD_SIGNATURE = void(_rows, int64, _i64, _i64, _i64, _i32, int64, _i64, int64, float64, float64, boolean, _i64,
                       _nbr, _i64, _nbr, _i64)
MIGRATE_COUNT_SIGNATURE = void(_rows, _rows, _rows, int64, boolean, _f64, int64, float64, int64, int64, _i32,
                               _i64, int64, _i64)
MIGRATE_WRITE_SIGNATURE = void(_rows, _rows, _rows, _i64, int64, _i32, _i64, _i64, int64, _rows, _rows, _rows, _i64,
                               _rows, _i64)
UNPACK_OWNED_SIGNATURE = void(_rows, int64, _rows, _rows, _rows, _i64, int64)

if numba.config.ENABLE_CUDASIM:  # kernels run as Python: NumPy's floor and rounding
    _floor = np.floor

    def _mul(a, b):
        return a * b

    def _add(a, b):
        return a + b
else:  # rounded each, never contracted into an FMA (the CPU's fold: a multiply, then a subtraction)
    from numba.cuda import libdevice

    _floor = libdevice.floor
    _mul, _add = libdevice.dmul_rn, libdevice.dadd_rn


# ------------------------------------------------------------------ pieces every kernel shares

@cuda.jit(device=True, inline=True)
def _axis_cell(x, lo, inv, n):
    """The cell along one axis of coordinate x: ``floor((x - lo) inv)`` clamped to ``[0, n)``, as the CPU's
    ``cell_index`` (truncation is the floor of a value >= 0; NaN lands in cell 0, as a clamp would put it)."""
    v = (x - lo) * inv
    if v >= 0.0:
        if v < n:
            return int64(v)
        return n - 1
    return int64(0)


@cuda.jit(device=True, inline=True)
def cell_of(x, y, z, lo, inv, nc):
    """The search cell of a position: ``(cx ny + cy) nz + cz`` (the one definition the CPU's ``cell_index`` is)."""
    cx = _axis_cell(x, lo[0], inv[0], nc[0])
    cy = _axis_cell(y, lo[1], inv[1], nc[1])
    cz = _axis_cell(z, lo[2], inv[2], nc[2])
    return (cx * nc[1] + cy) * nc[2] + cz


@cuda.jit(device=True, inline=True)
def _fold(x, box):
    """``x`` folded into ``[0, box)`` as ``domain.wrap`` folds it, the same operations on any value."""
    w = _add(x, -_mul(box, _floor(x / box)))  # x - box floor(x / box), the subtraction exact as an addition
    if w >= box:  # -tiny + box rounds to box
        w = 0.0
    return w


@cuda.jit(device=True, inline=True)
def _finite3(a, i):
    return math.isfinite(a[i, 0]) and math.isfinite(a[i, 1]) and math.isfinite(a[i, 2])


@cuda.jit(device=True, inline=True)
def _first(i0):
    """A grid-stride loop's first index and stride."""
    return cuda.grid(1) + i0, cuda.gridsize(1)


@cuda.jit(device=True, inline=True)
def _faces(pos, b, k, dims, bounds):
    """Row b's faces within reach along each stage of a run: bit 2j (``pos < bounds[0, j]``, the low face's
    reach) and bit 2j+1 (``pos >= bounds[1, j]``, the high face's) for the run's stage j (dimension
    ``dims[j]``), the CPU's ``below`` and ``above``."""
    m = 0
    for j in range(k):
        d = dims[j]
        if pos[b, d] < bounds[0, j]:
            m |= 1 << (2 * j)
        if pos[b, d] >= bounds[1, j]:
            m |= 2 << (2 * j)
    return m


@cuda.jit(device=True, inline=True)
def _member(faces, s, k, ghost):
    """Is a base row with these faces copied into class ``s`` (digit j of s base 3: 0 not along stage j, 1 from
    the low face, 2 from the high face)?  ``ghost``: the row is not an owned one; half lists' high faces send
    only rows that are ghosts by then (the half shell: a ghost, or a copy made by an earlier stage)."""
    copied = ghost
    for j in range(k):
        digit = s % 3
        s //= 3
        if digit == 1:
            if not (faces >> (2 * j)) & 1:
                return False
            copied = True
        elif digit == 2:
            if not ((faces >> (2 * j + 1)) & 1) or not copied:
                return False
            copied = True
    return True


@cuda.jit(device=True, inline=True)
def _count_classes(faces, b, k, nclass, up0, ccount, nchunks):
    """Add base row b's classes to its chunk's counts (class-major: ``ccount[(s - 1) nchunks + chunk]``)."""
    chunk = b // BLOCK
    for s in range(1, nclass + 1):
        if _member(faces, s, k, b >= up0):
            cuda.atomic.add(ccount, (s - 1) * nchunks + chunk, 1)


@cuda.jit(device=True, inline=True)
def _rank(sh, t, chunk, s, k, up0):
    """How many rows before thread t's in its chunk (their faces in shared ``sh``) are copied into class s."""
    r = 0
    for u in range(t):
        f = sh[u]
        if f and _member(f, s, k, chunk * BLOCK + u >= up0):
            r += 1
    return r


@cuda.jit(device=True, inline=True)
def _shift(s, k, dims, shifts, q):
    """Class s's shift of coordinate q: the shift of the stage along q that copies it (``shifts[0, j]`` from
    the low face, ``shifts[1, j]`` from the high one), else 0."""
    for j in range(k):
        digit = s % 3
        s //= 3
        if dims[j] == q and digit:
            return shifts[digit - 1, j]
    return 0.0


@cuda.jit(device=True, inline=True)
def _bucket(cell, row, count, bucket, capc, meta):
    """Row ``row`` into its cell's bucket (``bucket[cell capc + slot]``); a full bucket keeps it out and leaves
    the width it needed in ``meta[M_CELL_MOST]``."""
    slot = cuda.atomic.add(count, cell, 1)
    if slot < capc:
        bucket[cell * capc + slot] = row
    else:
        cuda.atomic.max(meta, M_CELL_MOST, slot + 1)


@cuda.jit(device=True, inline=True)
def _sort_bucket(bucket, a, k, key):
    """Insertion sort of ``bucket[a:a + k]`` by ``key[row]`` (a cell's few rows)."""
    for p in range(a + 1, a + k):
        r = bucket[p]
        kr = key[r]
        q = p - 1
        while q >= a and key[bucket[q]] > kr:
            bucket[q + 1] = bucket[q]
            q -= 1
        bucket[q + 1] = r


@cuda.jit(device=True, inline=True)
def _sort_rows(bucket, a, k):
    """Insertion sort of ``bucket[a:a + k]`` (row numbers) in increasing order."""
    for p in range(a + 1, a + k):
        r = bucket[p]
        q = p - 1
        while q >= a and bucket[q] > r:
            bucket[q + 1] = bucket[q]
            q -= 1
        bucket[q + 1] = r


# ------------------------------------------------------------------ owned atoms by (cell, id)

@cuda.jit
def fold_owned(x, x0, n, box):
    """Fold the owned positions [0, n) into the box (``box``: its three edges) in place, as ``domain.wrap`` folds
    them, and move the
    reference positions ``x0`` with them (``x0 += folded - x``): a fold is not a displacement.  Grid-stride."""
    i, stride = _first(0)
    while i < n:
        for q in range(3):
            w = _fold(x[i, q], box[q])
            x0[i, q] = x0[i, q] + (w - x[i, q])
            x[i, q] = w
        i += stride


@cuda.jit
def bin_owned(x, v, f, gid, n, fold, copy, box, xb, vb, fb, gb, lo, inv, nc, count, bucket, capc, gcount, meta, dmax,
              policy, slot, step, force):
    """Decide the rebuild; then each owned atom [0, n) into its cell's bucket (the counting sort's count).

    The decision (every thread makes it, from the same numbers; thread 0 writes it
    to ``meta[M_GO]``, which every later kernel of the rebuild reads): ``force``
    (the host's), or the policy's look (``step - meta[M_BUILT_AT]`` a multiple of
    ``policy[P_EVERY]``) that rebuilds unchecked, or finds the step's largest squared
    displacement ``dmax[slot]`` above ``policy[P_REBUILD2]``.  Thread 0 also marks the
    first step whose displacement passed ``policy[P_LIMIT2]`` (``meta[M_BAD_STEP]``).

    Then, where it rebuilds: each atom of ``x v f gid`` copied to the same row of
    ``xb vb fb gb`` if ``copy`` (else they are the same arrays), its position folded
    into the box (``box``: its three edges) there if ``fold`` (where no migration folded them); the atom into
    bucket ``bucket[c capc:]`` of its cell c (``count``: zero before, :func:`order_cells`
    leaves them so); the velocities and forces tested (``meta[M_NONFINITE]``); the
    ghost cells' counts ``gcount`` zeroed for the ghost writers; ``meta[M_N]`` set.
    A velocity or force that is not finite leaves the step in ``meta[M_NONFINITE]``
    (the first such step, at least 1).  Grid-stride over the atoms.
    """
    go = force != 0
    if not go and (step - meta[M_BUILT_AT]) % int64(policy[P_EVERY]) == 0:
        go = policy[P_CHECK] == 0.0 or dmax[slot] > policy[P_REBUILD2]
    i, stride = _first(0)
    if i == 0:
        meta[M_GO] = 1 if go else 0
        if dmax[slot] > policy[P_LIMIT2] and meta[M_BAD_STEP] == 0:
            meta[M_BAD_STEP] = step
        if go:
            meta[M_N] = n
    if not go:
        return
    for c in range(i, gcount.shape[0], stride):
        gcount[c] = 0
    while i < n:
        for q in range(3):
            w = _fold(x[i, q], box[q]) if fold else x[i, q]
            if copy or fold:
                xb[i, q] = w
            if copy:
                vb[i, q] = v[i, q]
                fb[i, q] = f[i, q]
        if copy:
            gb[i] = gid[i]
        if not (_finite3(v, i) and _finite3(f, i)) and meta[M_NONFINITE] == 0:
            meta[M_NONFINITE] = max(step, int64(1))
        _bucket(cell_of(xb[i, 0], xb[i, 1], xb[i, 2], lo, inv, nc), i, count, bucket, capc, meta)
        i += stride


@cuda.jit
def order_cells(count, bucket, capc, start, xb, vb, fb, gb, x, v, f, gid, x0, ocell, meta, dmax, policy, step, k,
                dims, bounds, faces, ccount, nchunks, up0):
    """Each cell's atoms sorted by id and their rows gathered in that order: the owned atoms by (cell, id).

    One thread a cell (grid-stride): the ``count[c]`` atoms of bucket ``bucket[c capc:]``
    (:func:`bin_owned`: rows of ``xb vb fb gb``) sorted by id, then each one's
    position, velocity, force and id copied to row ``start[c] + p`` of ``x v f gid``
    (``start``: the cells' first rows, a scan of the counts), the position also to ``x0``
    (the displacement's reference) and the cell to ``ocell``.  The counts are zeroed for
    the next rebuild.  Where the ghost plan begins with a run of ``k`` stages of the
    brick's own images (``dims``, ``bounds``), each row's ``faces`` and its classes
    counted per chunk, as :func:`count_images` counts them.  Unless ``step`` is -1 (a
    rebuild made again), thread 0 keeps step ``step``'s books: the last build's step, the
    rebuilds, LAMMPS's dangerous builds (a build at the first look ``policy[P_EVERY] > 1``
    steps after the last, checked, whose displacement ``dmax[0]`` (the step's slot) was
    above half the skin) and the list entries of the build to come, reset.  Only where
    ``meta[M_GO]``.
    """
    if meta[M_GO] == 0:
        return
    c, stride = _first(0)
    if c == 0 and step >= 0:
        every = int64(policy[P_EVERY])
        if policy[P_CHECK] != 0.0 and every > 1 and step - meta[M_BUILT_AT] == every and \
                dmax[0] > policy[P_REBUILD2]:
            meta[M_DANGEROUS] += 1
        meta[M_BUILT_AT] = step
        meta[M_REBUILDS] += 1
    if c == 0:
        meta[M_PAIRS] = 0
    nclass = 3 ** k - 1
    while c < count.shape[0]:
        held = min(count[c], capc)
        a = c * capc
        _sort_bucket(bucket, a, held, gb)
        r0 = start[c]
        for p in range(held):
            src = bucket[a + p]
            row = r0 + p
            for q in range(3):
                x[row, q] = xb[src, q]
                x0[row, q] = xb[src, q]
                v[row, q] = vb[src, q]
                f[row, q] = fb[src, q]
            gid[row] = gb[src]
            ocell[row] = c
            if k:
                fc = _faces(x, row, k, dims, bounds)
                faces[row] = fc
                if fc:
                    _count_classes(fc, row, k, nclass, up0, ccount, nchunks)
        count[c] = 0
        c += stride


# ------------------------------------------------------------------ ghosts

@cuda.jit
def count_images(pos, base, k, dims, bounds, faces, ccount, nchunks, up0, meta):
    """Base rows [0, m) of ``pos``, ``m = meta[base]`` (the rows held before the run or stage): each one's faces along a run's ``k`` stages (``dims``, ``bounds``) into
    ``faces``, its classes counted per chunk into ``ccount`` (class-major: ``ccount[(s - 1) nchunks +
    chunk]``, chunks of :data:`BLOCK` rows; zero before: the writers leave them so).  Grid-stride; only where
    ``meta[M_GO]``."""
    if meta[M_GO] == 0:
        return
    b, stride = _first(0)
    m = meta[base]
    nclass = 3 ** k - 1
    while b < m:
        fc = _faces(pos, b, k, dims, bounds)
        faces[b] = fc
        if fc:
            _count_classes(fc, b, k, nclass, up0, ccount, nchunks)
        b += stride


@cuda.jit(device=True, inline=True)
def _row_of(sh, t, chunk, s, k, up0, cstart, nchunks):
    """Thread t's base row's place in class s, counted from the run's first ghost: its class's earlier rows."""
    return cstart[(s - 1) * nchunks + chunk] + _rank(sh, t, chunk, s, k, up0)


@cuda.jit
def write_images(pos, gid, n, base, k, up0, dims, shifts, faces, ccount, cstart, nchunks, gsrc, gshift, gisrc, lo,
                 inv, nc, gcount, gbucket, capc, d0, meta):
    """A run of ``k`` stages of the brick's own images: every ghost row written where the CPU makes it.

    One block a chunk of :data:`BLOCK` base rows (grid-stride over the ``nchunks``
    chunks; the base rows are [0, m), ``m = meta[base]``), their ``faces`` in shared
    memory: a base row's ghost of class s
    is row ``m + cstart[(s - 1) nchunks + chunk]`` (the scan of the counts) plus the
    rows of its chunk before it in that class.  Each ghost gets the base row's position
    with each coordinate's shift added once (``shifts``), its id (``gid``), and at its
    row less the ``n`` owned ones: the base row and the summed shift it is refreshed
    from at every step (``gsrc``, ``gshift`` flat), and the row it is a copy of
    (``gisrc``: the base row, or the ghost of its class without the run's last stage
    that copied it; half lists add its force back there).  Each ghost goes into its
    cell's bucket (``gcount``, ``gbucket``).  A row past ``pos``'s capacity is not
    written (``meta[M_ROWS_MOST]`` says how many were needed).  The chunks' counts are
    zeroed for the next rebuild; block 0 leaves the run's end row in ``meta[M_END + d0]``
    (``d0``: the run's first stage), each stage's two messages' rows in
    ``meta[M_MSG + 2 dims[j] + (0, 1)]``.  Only where ``meta[M_GO]``.
    """
    if meta[M_GO] == 0:
        return
    sh = cuda.shared.array(BLOCK, int32)
    t = cuda.threadIdx.x
    m = meta[base]
    nclass = 3 ** k - 1
    total = cstart[nclass * nchunks]
    cap = pos.shape[0]
    if cuda.blockIdx.x == 0 and t == 0:
        end = m + total
        meta[M_END + d0] = end
        if end > meta[M_ROWS_MOST]:
            meta[M_ROWS_MOST] = end
        w = 1
        for j in range(k):  # stage j's messages: the classes whose last nonzero digit is j's, 1 then 2
            meta[M_MSG + 2 * dims[j]] = cstart[(2 * w - 1) * nchunks] - cstart[(w - 1) * nchunks]
            meta[M_MSG + 2 * dims[j] + 1] = cstart[(3 * w - 1) * nchunks] - cstart[(2 * w - 1) * nchunks]
            w *= 3
    for chunk in range(cuda.blockIdx.x, nchunks, cuda.gridDim.x):
        b = chunk * BLOCK + t
        fc = faces[b] if b < m else 0
        sh[t] = fc
        cuda.syncthreads()
        if fc:
            for s in range(1, nclass + 1):
                if not _member(fc, s, k, b >= up0):
                    continue
                row = m + _row_of(sh, t, chunk, s, k, up0, cstart, nchunks)
                if row >= cap:
                    continue
                top = 1  # the class without its last stage: the row this ghost is a copy of
                while top * 3 <= s:
                    top *= 3
                parent = s % top
                g = row - n
                gisrc[g] = b if parent == 0 else m + _row_of(sh, t, chunk, parent, k, up0, cstart, nchunks)
                gsrc[g] = b
                for q in range(3):
                    sq = _shift(s, k, dims, shifts, q)
                    pos[row, q] = pos[b, q] + sq
                    gshift[3 * g + q] = sq
                gid[row] = gid[b]
                _bucket(cell_of(pos[row, 0], pos[row, 1], pos[row, 2], lo, inv, nc), row, gcount, gbucket, capc,
                        meta)
        cuda.syncthreads()
        if t < nclass:
            ccount[t * nchunks + chunk] = 0


@cuda.jit
def pack_border(pos, gid, base, up0, d, shifts, faces, ccount, cstart, nchunks, msg, pidx, pshift, meta):
    """A stage whose messages travel: base rows [0, m) (``m = meta[base]``) copied down (class 1, from the low face) then up
    (class 2), each class in row order, into ``msg`` ``(rows, 4)``: ``[x + shift, id]`` (ids exact in
    float64), with each message row's base row ``pidx`` and shift ``pshift`` ``(rows, 3)`` (the halo's
    forward pass packs from them at every step).  :func:`write_images` for a run of the one stage ``d``
    (``shifts[:, 0]``: its low face's shift, its high face's), from :func:`count_images`' counts; block 0
    leaves the two messages' rows in ``meta[M_MSG + 2 d + (0, 1)]``."""
    if meta[M_GO] == 0:
        return
    sh = cuda.shared.array(BLOCK, int32)
    t = cuda.threadIdx.x
    m = meta[base]
    if cuda.blockIdx.x == 0 and t == 0:
        meta[M_MSG + 2 * d] = cstart[nchunks]
        meta[M_MSG + 2 * d + 1] = cstart[2 * nchunks] - cstart[nchunks]
    cap = msg.shape[0]
    for chunk in range(cuda.blockIdx.x, nchunks, cuda.gridDim.x):
        b = chunk * BLOCK + t
        fc = faces[b] if b < m else 0
        sh[t] = fc
        cuda.syncthreads()
        if fc:
            for s in range(1, 3):
                if not _member(fc, s, 1, b >= up0):
                    continue
                r = _row_of(sh, t, chunk, s, 1, up0, cstart, nchunks)
                if r >= cap:
                    continue
                for q in range(3):
                    sq = shifts[s - 1, 0] if q == d else 0.0
                    msg[r, q] = pos[b, q] + sq
                    pshift[r, q] = sq
                msg[r, 3] = gid[b] + 0.0
                pidx[r] = b
        cuda.syncthreads()
        if t < 2:
            ccount[t * nchunks + chunk] = 0


@cuda.jit
def unpack_border(rows, r, pos, gid, at, lo, inv, nc, gcount, gbucket, capc, d, meta):
    """The ``r`` ghost rows stage d received (``rows`` ``[x, y, z, id]``) put at rows ``at..`` of ``pos`` and
    ``gid``, each into its cell's bucket; thread 0 leaves the end row in ``meta[M_END + d]``.  Grid-stride."""
    g, stride = _first(0)
    if g == 0:
        meta[M_END + d] = at + r
        if at + r > meta[M_ROWS_MOST]:
            meta[M_ROWS_MOST] = at + r
    while g < r:
        row = at + g
        if row < pos.shape[0]:
            for q in range(3):
                pos[row, q] = rows[g, q]
            gid[row] = int64(rows[g, 3])
            _bucket(cell_of(pos[row, 0], pos[row, 1], pos[row, 2], lo, inv, nc), row, gcount, gbucket, capc, meta)
        g += stride


@cuda.jit
def order_ghost_cells(gcount, gbucket, capc, ncells, meta):
    """Each cell's ghost rows in increasing order (one thread a cell, grid-stride): the order the lists search
    them in, the CPU's.  Only where ``meta[M_GO]``."""
    if meta[M_GO] == 0:
        return
    c, stride = _first(0)
    while c < ncells:
        _sort_rows(gbucket, c * capc, min(gcount[c], capc))
        c += stride


@cuda.jit
def gather_images(pos, gsrc, gshift, n, first, meta, d):
    """The ghost rows of a run of the brick's own images refreshed from their base rows, all stages at once:
    ``pos[g] = pos[gsrc[g - n]] + gshift[g - n]`` for rows g in ``[first, meta[M_END + d])`` (``pos`` and
    ``gshift`` flat: row g's x, y, z at 3g..3g+2).  The end is the device's (its last rebuild's), so that a step
    launched before the host knows it refreshes what that rebuild made.  Grid-stride."""
    g, stride = _first(first)
    end = min(meta[M_END + d], pos.shape[0] // 3)  # (a run whose rows overflowed wrote no more)
    while g < end:
        j = 3 * gsrc[g - n]
        s = 3 * (g - n)
        r = 3 * g
        pos[r] = pos[j] + gshift[s]
        pos[r + 1] = pos[j + 1] + gshift[s + 1]
        pos[r + 2] = pos[j + 2] + gshift[s + 2]
        g += stride


# ------------------------------------------------------------------ the Verlet lists

@cuda.jit(device=True, inline=True)
def _skin_behind(nbr, i, near, far, cap):
    """Row i's ``far`` skin entries, written from its last slot down, put behind its ``near`` ones in the order
    they were found: turned in place, then moved up (``near + far <= cap``, so the move reads ahead of it)."""
    for k in range(far // 2):
        a = cap - far + k
        b = cap - 1 - k
        t = nbr[i, a]
        nbr[i, a] = nbr[i, b]
        nbr[i, b] = t
    if near + far < cap:
        for k in range(far):
            nbr[i, near + k] = nbr[i, cap - far + k]


@cuda.jit
def build_lists(pos, n, ocell, start, gcount, gbucket, capc, nc, reach, cut2, rc2, half, own_cnt, own_nbr, gh_cnt,
                gh_nbr, meta):
    """Verlet lists of the owned atoms [0, n), one thread an atom (grid-stride), in one pass over the candidates.

    Full lists, or with ``half`` each pair once: owned neighbours j > i, and
    every ghost (the halo's half shell holds each pair between bricks on one
    side only, as the CPU's).

    The owned atoms are sorted by cell: cell c's are rows ``[start[c],
    start[c + 1])``, and a z-row of cells within ``reach`` of atom i's cell
    (``ocell[i]``) is one run of rows.  The ghosts of cell c are the first
    ``gcount[c]`` of bucket ``gbucket[c capc:]``, in increasing row order
    (:func:`order_ghost_cells`).  Row i lists its neighbours within ``rc2`` (at
    these positions) first, then those in the skin (within ``cut2``), each in the
    order of the search, cells in increasing order and each cell's rows so: the
    CPU's lists, row for row.  Each candidate is tested once: those within
    ``rc2`` are written from the row's front, those in the skin from its back
    (last slot first), and the skin's are then turned and moved up behind the
    others (:func:`_skin_behind`).  Where the capacity (the rows' width) is
    short, a row holds as many of its entries as fit and its count says so
    (a force kernel never reads past a row): the rows are then not valid, and the longest rows
    (``meta[M_OWN_MOST]``, ``meta[M_GH_MOST]``, the most of any build since the
    lists were made) tell the caller how wide to build them again.  The entries
    listed are added to ``meta[M_PAIRS]`` (a block's sum, one atomic add).  Only
    where ``meta[M_GO]``.
    """
    if meta[M_GO] == 0:
        return
    most = cuda.shared.array((3, BLOCK), int32)
    t = cuda.threadIdx.x
    cap_own = own_nbr.shape[1]
    cap_gh = gh_nbr.shape[1]
    nx, ny, nz = nc[0], nc[1], nc[2]
    top_own = int32(0)
    top_gh = int32(0)
    listed = int32(0)
    i, stride = _first(0)
    while i < n:
        c = ocell[i]
        cz = c % nz
        cy = (c // nz) % ny
        cx = c // (ny * nz)
        xi = pos[i, 0]
        yi = pos[i, 1]
        zi = pos[i, 2]
        no = int32(0)   # owned neighbours within rc, and (fo) in the skin
        fo = int32(0)
        ng = int32(0)   # ghosts likewise
        fg = int32(0)
        z0 = max(cz - reach, 0)
        z1 = min(cz + reach + 1, nz)
        for ax in range(max(cx - reach, 0), min(cx + reach + 1, nx)):
            for ay in range(max(cy - reach, 0), min(cy + reach + 1, ny)):
                base = (ax * ny + ay) * nz
                for j in range(int32(start[base + z0]), int32(start[base + z1])):
                    dx = xi - pos[j, 0]
                    dy = yi - pos[j, 1]
                    dz = zi - pos[j, 2]
                    r2 = dx * dx + dy * dy + dz * dz
                    if (j > i if half else j != i) and r2 < cut2:
                        near = r2 < rc2
                        if no + fo < cap_own:
                            own_nbr[i, no if near else cap_own - 1 - fo] = j
                        if near:
                            no += int32(1)
                        else:
                            fo += int32(1)
                for cell in range(base + z0, base + z1):
                    a = int32(cell * capc)
                    for q in range(a, a + int32(min(gcount[cell], capc))):
                        j = gbucket[q]
                        dx = xi - pos[j, 0]
                        dy = yi - pos[j, 1]
                        dz = zi - pos[j, 2]
                        r2 = dx * dx + dy * dy + dz * dz
                        if r2 < cut2:
                            near = r2 < rc2
                            if ng + fg < cap_gh:
                                gh_nbr[i, ng if near else cap_gh - 1 - fg] = j
                            if near:
                                ng += int32(1)
                            else:
                                fg += int32(1)
        if no + fo <= cap_own:
            _skin_behind(own_nbr, i, no, fo, cap_own)
        if ng + fg <= cap_gh:
            _skin_behind(gh_nbr, i, ng, fg, cap_gh)
        own_cnt[i] = min(no + fo, cap_own)  # (a short row is flagged below: its entries stay within it)
        gh_cnt[i] = min(ng + fg, cap_gh)
        top_own = max(top_own, int32(no + fo))
        top_gh = max(top_gh, int32(ng + fg))
        listed += int32(no + fo + ng + fg)
        i += stride
    most[0, t] = top_own
    most[1, t] = top_gh
    most[2, t] = listed
    cuda.syncthreads()
    half_block = BLOCK // 2
    while half_block > 0:
        if t < half_block:
            most[0, t] = max(most[0, t], most[0, t + half_block])
            most[1, t] = max(most[1, t], most[1, t + half_block])
            most[2, t] += most[2, t + half_block]
        cuda.syncthreads()
        half_block //= 2
    if t == 0:
        cuda.atomic.max(meta, M_OWN_MOST, int64(most[0, 0]))
        cuda.atomic.max(meta, M_GH_MOST, int64(most[1, 0]))
        cuda.atomic.add(meta, M_PAIRS, int64(most[2, 0]))


# ------------------------------------------------------------------ migration (stages that travel)

@cuda.jit
def migrate_count(x, v, f, n, fold, box, d, scale, p, coord, cls, ccount, nchunks, meta):
    """The owned atoms [0, n) by the brick that owns them along d (``min(int(x_d scale), p - 1)``, the CPU's
    ``owner_coords``): each one's class ``cls`` (0 staying, 1 leaving down, 2 leaving up, 3 owned by neither
    neighbour: it moved more than a brick) counted per chunk of :data:`BLOCK` rows into ``ccount`` (class-major
    over ``nchunks``; zero before, :func:`migrate_write` leaves them so).  ``fold``: the positions folded into
    the box (``box``: its three edges) in place first and the velocities and forces tested (``meta[M_NONFINITE]``): the migration's
    first stage.  Grid-stride."""
    i, stride = _first(0)
    lower = (coord - 1) % p
    upper = (coord + 1) % p
    while i < n:
        if fold:
            for q in range(3):
                x[i, q] = _fold(x[i, q], box[q])
            if not (_finite3(v, i) and _finite3(f, i)):
                meta[M_NONFINITE] = 1
        c = min(int64(x[i, d] * scale), p - 1)
        k = 0 if c == coord else 1 if c == lower else 2 if c == upper else 3
        cls[i] = k
        cuda.atomic.add(ccount, k * nchunks + i // BLOCK, 1)
        i += stride


@cuda.jit
def migrate_write(x, v, f, gid, n, cls, ccount, cstart, nchunks, xo, vo, fo, go, leaving, meta):
    """The owned atoms [0, n) by their class (:func:`migrate_count`), each class in row order: those staying to
    ``xo vo fo go``, those leaving to ``leaving`` as rows ``[x v f id]`` (ids exact in float64), those leaving
    down first, then those leaving up (one message each way, from one buffer).  One
    block a chunk (grid-stride over the chunks), the chunk's classes in shared memory; a row's place is its
    class's rows in earlier chunks (``cstart``, the scan of the counts) and in its chunk before it.  The counts
    are zeroed for the next use; block 0 leaves each class's rows in ``meta[M_STAY:M_LOST + 1]``."""
    sh = cuda.shared.array(BLOCK, int32)
    t = cuda.threadIdx.x
    if cuda.blockIdx.x == 0 and t == 0:
        for k in range(4):
            meta[M_STAY + k] = cstart[(k + 1) * nchunks] - cstart[k * nchunks]
    for chunk in range(cuda.blockIdx.x, nchunks, cuda.gridDim.x):
        i = chunk * BLOCK + t
        k = cls[i] if i < n else -1
        sh[t] = k
        cuda.syncthreads()
        if k >= 0 and k < 3:
            r = cstart[k * nchunks + chunk] - cstart[(1 if k else 0) * nchunks]  # (leaving: down's, then up's)
            for u in range(t):
                if sh[u] == k:
                    r += 1
            if k == 0:
                for q in range(3):
                    xo[r, q] = x[i, q]
                    vo[r, q] = v[i, q]
                    fo[r, q] = f[i, q]
                go[r] = gid[i]
            else:
                for q in range(3):
                    leaving[r, q] = x[i, q]
                    leaving[r, 3 + q] = v[i, q]
                    leaving[r, 6 + q] = f[i, q]
                leaving[r, 9] = gid[i] + 0.0
        cuda.syncthreads()
        if t < 4:
            ccount[t * nchunks + chunk] = 0


@cuda.jit
def unpack_owned(rows, r, xo, vo, fo, go, at):
    """``r`` atoms received in a migration (rows ``[x v f id]``) put at rows ``at..`` of ``xo vo fo go``.
    Grid-stride."""
    g, stride = _first(0)
    while g < r:
        k = at + g
        for q in range(3):
            xo[k, q] = rows[g, q]
            vo[k, q] = rows[g, 3 + q]
            fo[k, q] = rows[g, 6 + q]
        go[k] = int64(rows[g, 9])
        g += stride
