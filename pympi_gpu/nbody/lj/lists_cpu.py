"""The Verlet lists of one brick on one CPU thread: the same rows as ``kernels_cpu.neighbor_lists``, faster.

The rows are those of :func:`~pympi_gpu.nbody.lj.kernels_cpu.neighbor_lists`
(the parallel build, which several threads per rank keep), entry for entry
and in the same order, so that the GPU's build still equals the CPU's row
for row: owned atoms in cells of half the list radius, searched two cells
out, the stencil's rows of cells (x, then y) scanned in order and each row's
cells along z; a row lists the pairs within ``rc`` first, then the skin's.

Two searches, by the brick (:meth:`VerletLists.build`; both measured, each
the faster where it is used):

* **pruned** (small bricks, where the ghosts outnumber the owned atoms: the
  strong-scaling end).  The owned rows and the ghost rows are each put in
  cell order once, as records in columns (x, y, z, row; the ghosts' global
  ids).  Each atom then reads its own stencil in place, pruned to the sphere
  of the list radius: a row of cells (fixed x, y) whose slab the sphere
  misses is skipped, the others are cut to the z-cells it reaches (about
  half the candidates of the whole stencil); what is left out holds no pair
  within the radius, so the rows do not change.  250 atoms a rank with
  their 1,470 ghosts: 123 to 86 us a build (new positions each time).
* **gathered** (large bricks).  The owned and ghost records ``(x, y, z,
  row)`` of each cell's whole stencil are copied once into two contiguous
  buffers, one block copy per stencil row, and each of the cell's atoms
  scans them in one pass.  Inside a large brick this reads memory in fewer,
  longer streams, which the pruned search's many short runs lose to when
  several ranks share the memory (256,000 atoms on 2 ranks: 37 ms a build,
  against up to 60 ms pruned).

Either way a run of candidates is scanned eight at a time with vector code
(the last few under a mask in the pruned search; the gathered one keeps
its vector scan to AVX-512, where the compress is one instruction), with no
branch: every candidate is written to both of two index lists (within
``rc``, within ``rc + skin``) and each list's length grows by the test's
outcome.  The half lists' rule for owned pairs (``j > i``, the atoms sorted
by (cell, id)) is where the scan starts; the ghosts' (the smaller global id
lists the pair) is a mask (pruned) or applied to the kept ones (gathered).
Nothing is allocated per build once the buffers are large enough.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba import uint64 as u64
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["VerletLists", "build", "cell_index"]

@njit(cache=True, inline="always")
def cell_index(pos, i, lo, inv, ncell):
    """The search cell of row i of ``pos``: the one definition, which every binning and sort uses."""
    cx = min(max(int(np.floor((pos[i, 0] - lo[0]) * inv[0])), 0), ncell[0] - 1)
    cy = min(max(int(np.floor((pos[i, 1] - lo[1]) * inv[1])), 0), ncell[1] - 1)
    cz = min(max(int(np.floor((pos[i, 2] - lo[2]) * inv[2])), 0), ncell[2] - 1)
    return (cx * ncell[1] + cy) * ncell[2] + cz


def _avx512() -> bool:
    """Does numba compile for a CPU with AVX-512 (where :func:`_scan8`'s compress is one instruction)?

    The features numba is told (``NUMBA_CPU_FEATURES``, as ``jitcache.tune_cpu``
    sets them) or, for the host CPU, the host's; a CPU named without features
    (``NUMBA_CPU_NAME=generic``, an image built for any CPU) counts as without.
    """
    import llvmlite.binding as ll
    from numba.core import config

    if config.CPU_FEATURES is not None:
        features = config.CPU_FEATURES
    elif config.CPU_NAME not in (None, "host"):
        return False
    else:
        features = ll.get_host_cpu_features().flatten()
    return "+avx512f" in features.split(",")


#: compress the kept candidates of eight in one instruction (AVX-512 hosts; elsewhere lane by lane)
COMPRESS = _avx512()

#: scan eight candidates at a time with vector code (else one at a time: the reference the tests hold it to)
SIMD = True

#: each atom's stencil pruned and read in place (True), or each cell's whole stencil gathered once for its
#: atoms (False); None: by the brick (:meth:`VerletLists.build`)
PRUNE = None

#: the records a vector scan reads at once (a run's last read may reach past its end, never past the array's)
LANES = 8

#: the pruning's margin: a column or cell is left out only if it lies farther than the list radius
#: by this much (relative), far beyond the round-off of a binning, so no pair within it is ever missed
_MARGIN = 1e-9


_F64, _I64, _I32, _I8, _I1 = ir.DoubleType(), ir.IntType(64), ir.IntType(32), ir.IntType(8), ir.IntType(1)
_V8D, _V8L, _V8B = ir.VectorType(_F64, 8), ir.VectorType(_I64, 8), ir.VectorType(_I1, 8)


def _lanes(*items) -> ir.Constant:
    return ir.Constant(ir.VectorType(_I32, len(items)), [ir.Constant(_I32, i) for i in items])


def _append(builder, base, rows, mask, count):
    """IR: the lanes of ``rows`` where ``mask`` holds, stored in order at ``base[count]``; the new count.

    With :data:`COMPRESS`, one compress to a register stored whole (8 entries
    of room past the count); elsewhere lane by lane, each row stored at the
    count, which grows by the lane's outcome.
    """
    if COMPRESS:
        compress = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_V8L, [_V8L, _V8B, _V8L]),
                                                  "llvm.experimental.vector.compress.v8i64")
        popcount = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I8, [_I8]), "llvm.ctpop.i8")
        builder.store(builder.call(compress, [rows, mask, ir.Constant(_V8L, ir.Undefined)]),
                      builder.bitcast(builder.gep(base, [count]), _V8L.as_pointer()), align=8)
        return builder.add(count, builder.zext(builder.call(popcount, [builder.bitcast(mask, _I8)]), _I64))
    for lane in range(8):
        at = ir.Constant(_I32, lane)
        builder.store(builder.extract_element(rows, at), builder.gep(base, [count]))
        count = builder.add(count, builder.zext(builder.extract_element(mask, at), _I64))
    return count


@njit(cache=True, inline="always")
def _count_cells(pos, nlocal, n_all, lo, inv, ncell, cell, ostart, gstart):
    """``cell[i]``: row i's cell; ``ostart``/``gstart[c + 1]``: where the owned/ghost rows of the cells up to c
    end (a counting sort's first pass).  Returns the most owned and ghost atoms one cell holds."""
    ncells = ncell[0] * ncell[1] * ncell[2]
    for c in range(ncells + 1):
        ostart[c] = 0
        gstart[c] = 0
    for i in range(n_all):
        c = cell_index(pos, i, lo, inv, ncell)
        cell[i] = c
        if i < nlocal:
            ostart[c + 1] += 1
        else:
            gstart[c + 1] += 1
    most_o = 0
    most_g = 0
    for c in range(ncells):
        most_o = max(most_o, ostart[c + 1])
        most_g = max(most_g, gstart[c + 1])
        ostart[c + 1] += ostart[c]
        gstart[c + 1] += gstart[c]
    return most_o, most_g


@njit(cache=True, inline="always")
def _rewind(ostart, gstart):
    """After the placing pass, which advanced each cell's start to the next cell's: back to the cells' starts."""
    for c in range(ostart.size - 1, 0, -1):
        ostart[c] = ostart[c - 1]
        gstart[c] = gstart[c - 1]
    ostart[0] = 0
    gstart[0] = 0


# -- the pruned search (small bricks: ghosts outnumber the owned atoms) ---------------------------------

@njit(nogil=True, cache=True)
def _columns(pos, nlocal, n_all, gid, lo, inv, ncell, cell, ostart, gstart, oxyz, orow, gxyz, grow, ggid, bounds):
    """The owned rows and the ghost rows, each in cell order (stable), as records in columns.

    Owned record k is row ``orow[k]`` at ``oxyz[:, k]``; ghost record k row
    ``grow[k]`` at ``gxyz[:, k]``, of global id ``ggid[k]``; ``ostart`` and
    ``gstart`` (``ncells + 1``) are the cells' first records.  ``bounds[d]``
    are set to the cells' boundaries along d, ``lo + k / inv`` for k = 0..ncell.
    Returns a bound on the atoms one cell holds.
    """
    for d in range(3):
        for k in range(ncell[d] + 1):
            bounds[d, k] = lo[d] + k / inv[d]
    most_o, most_g = _count_cells(pos, nlocal, n_all, lo, inv, ncell, cell, ostart, gstart)
    for i in range(n_all):  # ostart[c], gstart[c] advance to the next cell's start, then step back
        c = cell[i]
        if i < nlocal:
            k = ostart[c]
            ostart[c] += 1
            orow[k] = i
            for d in range(3):
                oxyz[d, k] = pos[i, d]
        else:
            k = gstart[c]
            gstart[c] += 1
            grow[k] = i
            ggid[k] = gid[i]
            for d in range(3):
                gxyz[d, k] = pos[i, d]
    _rewind(ostart, gstart)
    return most_o + most_g


@intrinsic
def _scan8(typingctx, x, y, z, rows, gids, k, m, xi, yi, zi, idi, rc2, cut2, near, far, a, c):
    """Records ``k..k+m-1`` (``m`` <= 8) as :func:`_scan` treats them, in 8-lane vectors.

    The squared distances are the scalar loop's operations in its order
    (``(dx dx + dy dy) + dz dz``, no fused multiply-add).  The rows of the
    records kept are appended to ``near`` and ``far`` (:func:`_append`: on
    AVX-512 one ``vpcompressq``), which need 8 entries of room past their
    counts.  The loads read 8 records whatever ``m`` (the lanes past ``m`` are
    masked out), so the columns must hold 8 records past any run's end.
    ``gids`` (None: every record kept): the records' global ids, of which
    only those above ``idi`` are kept.  Returns ``(a, c)`` advanced.
    """
    rule = not isinstance(gids, types.NoneType)
    sig = types.UniTuple(types.int64, 2)(x, y, z, rows, gids, k, m, xi, yi, zi, idi, rc2, cut2, near, far, a, c)

    def codegen(context, builder, signature, args):
        k_, m_, xi_, yi_, zi_, idi_, rc2_, cut2_, near_, far_, a_, c_ = args[5:]

        def load(n, vt):
            data = context.make_array(signature.args[n])(context, builder, args[n]).data
            return builder.load(builder.bitcast(builder.gep(data, [k_]), vt.as_pointer()), align=8)

        def splat(value, vt=_V8D):
            one = builder.insert_element(ir.Constant(vt, ir.Undefined), value, ir.Constant(_I32, 0))
            return builder.shuffle_vector(one, ir.Constant(vt, ir.Undefined), _lanes(*[0] * 8))

        dx, dy, dz = (builder.fsub(splat(q), load(n, _V8D)) for n, q in enumerate((xi_, yi_, zi_)))
        d2 = builder.fadd(builder.fadd(builder.fmul(dx, dx), builder.fmul(dy, dy)), builder.fmul(dz, dz))
        keep = builder.icmp_signed("<", ir.Constant(_V8L, [ir.Constant(_I64, j) for j in range(8)]), splat(m_, _V8L))
        if rule:
            keep = builder.and_(keep, builder.icmp_signed(">", load(4, _V8L), splat(idi_, _V8L)))
        r = splat(rc2_)
        masks = (builder.and_(keep, builder.fcmp_ordered("<", d2, r)),
                 builder.and_(keep, builder.and_(builder.fcmp_ordered(">=", d2, r),
                                                 builder.fcmp_ordered("<", d2, splat(cut2_)))))
        rows = load(3, _V8L)
        out = [_append(builder, context.make_array(ty)(context, builder, arr).data, rows, mask, count)
               for arr, ty, count, mask in ((near_, signature.args[13], a_, masks[0]),
                                            (far_, signature.args[14], c_, masks[1]))]
        return context.make_tuple(builder, signature.return_type, out)

    return sig, codegen


@njit(cache=True, inline="always")
def _scan(xyz, rows, gids, k0, k1, xi, yi, zi, idi, cut2, rc2, near, far, a, c, simd):
    """Records ``[k0, k1)`` as candidates: the rows within rc appended to ``near[a:]``, the skin's to ``far[c:]``.

    ``gids`` (None: all): the records' global ids, of which only those above
    ``idi`` are kept.  Every candidate is written to both lists and each
    list's length grows by its test's outcome: no branch.  With ``simd``,
    eight at a time (:func:`_scan8`), the last few too.
    """
    if simd:
        x, y, z = xyz[0], xyz[1], xyz[2]
        for k in range(k0, k1, LANES):
            a, c = _scan8(x, y, z, rows, gids, k, min(k1 - k, LANES), xi, yi, zi, idi, rc2, cut2, near, far, a, c)
        return a, c
    for q in range(u64(k0), u64(k1)):
        dx = xi - xyz[0, q]
        dy = yi - xyz[1, q]
        dz = zi - xyz[2, q]
        d2 = dx * dx + dy * dy + dz * dz
        j = rows[q]
        near[u64(a)] = j
        far[u64(c)] = j
        keep = True if gids is None else gids[q] > idi
        a += keep & (d2 < rc2)
        c += keep & (d2 >= rc2) & (d2 < cut2)
    return a, c


@njit(cache=True, inline="always")
def _row(i, a, c, near, far, nbr):
    """Row i of ``nbr``: the near rows, then the skin's; returns the row's length.

    Entries past the row's capacity are not kept (the last column is
    overwritten), and the caller retries wider.
    """
    last = u64(nbr.shape[1] - 1)
    ii = u64(i)
    for q in range(u64(a)):
        nbr[ii, min(q, last)] = near[q]
    for q in range(u64(c)):
        nbr[ii, min(u64(a) + q, last)] = far[q]
    return a + c


@njit(cache=True, inline="always")
def _gaps(p, cp, bounds, reach, n, out):
    """``out[k]``: the squared distance from coordinate ``p`` (in cell ``cp``) to the slab of cell
    ``cp - reach + k`` along one axis (0 for its own; infinite for a cell off the grid)."""
    for k in range(2 * reach + 1):
        a = cp - reach + k
        if a < 0 or a >= n:
            g = np.inf
        elif a < cp:
            g = p - bounds[a + 1]
        elif a > cp:
            g = bounds[a] - p
        else:
            g = 0.0
        out[k] = g * g


@njit(cache=True, inline="always")
def _pruned(gid, bounds, ncell, reach, cut2, rc2, half, own_cnt, own_nbr, gh_cnt, gh_nbr,
                ostart, gstart, oxyz, orow, gxyz, grow, ggid, near, far, simd):
    """Every owned atom's two rows; returns the longest owned and ghost rows.

    Each atom searches its cell's stencil (``reach`` cells out, the rows of
    cells along z in order, x then y) pruned to what the list sphere
    reaches: a row of cells whose slab lies beyond the list radius is
    skipped, the others are cut to the z-cells within it (``bounds[d]``: the
    cells' boundaries along d).  What is left out holds no pair within the
    radius (by :data:`_MARGIN`), so the rows are the whole stencil's, entry
    for entry and in order.  With half lists the owned atoms of the cells
    before the atom's, and those of its own cell up to itself, are not read.
    """
    ncells = ostart.size - 1
    most_own = 0
    most_gh = 0
    n1, n2 = ncell[1], ncell[2]
    reach2 = cut2 * (1.0 + _MARGIN) + _MARGIN
    w = 2 * reach + 1
    g2 = np.empty((3, w))
    for cc in range(ncells):
        if ostart[cc + 1] == ostart[cc]:
            continue
        cz = cc % n2
        cy = (cc // n2) % n1
        cx = cc // (n1 * n2)
        # are there ghosts anywhere in the cell's stencil (inside a large brick, none)?
        ghosts = False
        for ax in range(max(cx - reach, 0), min(cx + reach + 1, ncell[0])):
            for ay in range(max(cy - reach, 0), min(cy + reach + 1, n1)):
                base = (ax * n1 + ay) * n2
                ghosts |= gstart[base + min(cz + reach + 1, n2)] > gstart[base + max(cz - reach, 0)]
        for m in range(ostart[cc], ostart[cc + 1]):
            i = orow[m]
            xi = oxyz[0, m]
            yi = oxyz[1, m]
            zi = oxyz[2, m]
            idi = gid[u64(i)]
            _gaps(xi, cx, bounds[0], reach, ncell[0], g2[0])
            _gaps(yi, cy, bounds[1], reach, n1, g2[1])
            _gaps(zi, cz, bounds[2], reach, n2, g2[2])
            a = 0
            f = 0
            ga = 0
            gf = 0
            for kx in range(w):
                if g2[0, kx] >= reach2:
                    continue
                for ky in range(w):
                    left = reach2 - g2[0, kx] - g2[1, ky]
                    if left <= 0.0:
                        continue
                    below = 0  # the z-cells within reach: their gaps grow away from the atom's own cell
                    above = 0
                    for k in range(reach):
                        below += g2[2, reach - 1 - k] < left
                        above += g2[2, reach + 1 + k] < left
                    base = ((cx - reach + kx) * n1 + cy - reach + ky) * n2 + cz
                    z0 = base - below
                    z1 = base + above + 1
                    if half:
                        if ghosts:
                            ga, gf = _scan(gxyz, grow, ggid, gstart[z0], gstart[z1], xi, yi, zi, idi, cut2, rc2,
                                           near[1], far[1], ga, gf, simd)
                        if z1 <= cc:  # the owned atoms of cells before the atom's: their pairs are listed there
                            continue
                        k0 = max(ostart[z0], m + 1)  # (sorted by cell: in the atom's own cell, those after it)
                    else:
                        if ghosts:
                            ga, gf = _scan(gxyz, grow, None, gstart[z0], gstart[z1], xi, yi, zi, idi, cut2, rc2,
                                           near[1], far[1], ga, gf, simd)
                        k0 = ostart[z0]
                        if k0 <= m < ostart[z1]:  # its own cell: all but itself
                            a, f = _scan(oxyz, orow, None, k0, m, xi, yi, zi, idi, cut2, rc2, near[0], far[0], a, f,
                                         simd)
                            k0 = m + 1
                    a, f = _scan(oxyz, orow, None, k0, ostart[z1], xi, yi, zi, idi, cut2, rc2, near[0], far[0], a, f,
                                 simd)
            n = _row(i, a, f, near[0], far[0], own_nbr)
            own_cnt[u64(i)] = n
            most_own = max(most_own, n)
            n = _row(i, ga, gf, near[1], far[1], gh_nbr)
            gh_cnt[u64(i)] = n
            most_gh = max(most_gh, n)
    return most_own, most_gh


def _compiled(half: bool, simd: bool):
    """:func:`_pruned` compiled for one list kind and one scan (both constants in it)."""

    def lists(gid, bounds, ncell, reach, cut2, rc2, own_cnt, own_nbr, gh_cnt, gh_nbr, ostart, gstart, oxyz, orow,
              gxyz, grow, ggid, near, far):
        return _pruned(gid, bounds, ncell, reach, cut2, rc2, half, own_cnt, own_nbr, gh_cnt, gh_nbr, ostart, gstart,
                       oxyz, orow, gxyz, grow, ggid, near, far, simd)

    lists.__name__ = lists.__qualname__ = f"lists_{'half' if half else 'full'}_{'simd' if simd else 'scalar'}"
    return njit(nogil=True, cache=True)(lists)


#: the pruned search, by (half lists, vector scan)
_PRUNED = {(half, simd): _compiled(half, simd) for half in (True, False) for simd in (True, False)}


# -- the gathered search (large bricks) -------------------------------------------------------------------

@njit(nogil=True, cache=True)
def _cell_records(pos, nlocal, n_all, lo, inv, ncell, cell, ostart, gstart, orec, grec):
    """Owned rows and ghost rows each in cell order (stable) as records ``(x, y, z, row)``.

    ``ostart``/``gstart`` (``ncells + 1``) are the cells' first records;
    returns the most owned and ghost atoms one cell holds.
    """
    most_o, most_g = _count_cells(pos, nlocal, n_all, lo, inv, ncell, cell, ostart, gstart)
    for i in range(n_all):  # ostart[c], gstart[c] advance to the next cell's start, then step back
        c = cell[i]
        if i < nlocal:
            r = u64(4 * ostart[c])
            ostart[c] += 1
            rec = orec
        else:
            r = u64(4 * gstart[c])
            gstart[c] += 1
            rec = grec
        rec[r] = pos[i, 0]
        rec[r + 1] = pos[i, 1]
        rec[r + 2] = pos[i, 2]
        rec[r + 3] = i
    _rewind(ostart, gstart)
    return most_o, most_g


@njit(cache=True, inline="always")
def _copy_records(k0, k1, nb, src, dst):
    """Records ``[k0, k1)`` of ``src`` appended to ``dst`` after its first ``nb``; the new count.

    Unsigned indices: numba's wraparound of negative indices would cost more than the copy.
    """
    o = u64(4 * nb) - u64(4 * k0)
    for k in range(u64(4 * k0), u64(4 * k1)):
        dst[k + o] = src[k]
    return nb + (k1 - k0)


@njit(nogil=True, cache=True)
def _gather(c, ncell, reach, half, ostart, gstart, orec, grec, bo, bg):
    """Cell c's stencil candidates, in scan order: owned (half lists: cells from c on) and ghosts.

    Returns ``(owned count, ghost count, buffer index of cell c's first owned atom)``.
    """
    n2 = ncell[2]
    cz = c % n2
    cy = (c // n2) % ncell[1]
    cx = c // (ncell[1] * n2)
    nbo = 0
    nbg = 0
    bself = 0
    for ax in range(max(cx - reach, 0), min(cx + reach + 1, ncell[0])):
        for ay in range(max(cy - reach, 0), min(cy + reach + 1, ncell[1])):
            base = (ax * ncell[1] + ay) * n2
            z0 = base + max(cz - reach, 0)
            z1 = base + min(cz + reach + 1, n2)
            nbg = _copy_records(gstart[z0], gstart[z1], nbg, grec, bg)
            if half:  # the owned atoms of the cells before c have smaller rows: their pairs are listed there
                if z1 <= c:
                    continue
                z0 = max(z0, c)
            if z0 <= c < z1:
                bself = nbo + ostart[c] - ostart[z0]
            nbo = _copy_records(ostart[z0], ostart[z1], nbo, orec, bo)
    return nbo, nbg, bself


@intrinsic
def _scan8_records(typingctx, b, k, xi, yi, zi, rc2, cut2, near, far, a, c):
    """Records ``k..k+7`` of ``b`` as :func:`_scan_records` treats them, in 8-lane vectors: ``(a, c)`` advanced.

    The squared distances are the scalar loop's operations in its order
    (``(dx dx + dy dy) + dz dz``, no fused multiply-add); the indices kept
    are compressed into a vector (``llvm.experimental.vector.compress``: one
    ``vpcompressq`` to a register on AVX-512) stored whole at ``near[a]`` and
    ``far[c]``, so both need 8 entries of room past their counts.
    """
    sig = types.UniTuple(types.int64, 2)(b, k, xi, yi, zi, rc2, cut2, near, far, a, c)

    def codegen(context, builder, signature, args):
        b_, k_, xi_, yi_, zi_, rc2_, cut2_, near_, far_, a_, c_ = args
        rec = context.make_array(signature.args[0])(context, builder, b_).data
        vec32 = ir.VectorType(_F64, 32)
        v = builder.load(builder.bitcast(builder.gep(rec, [builder.mul(k_, ir.Constant(_I64, 4))]),
                                         vec32.as_pointer()), align=8)

        def splat(value, vt=_V8D):
            one = builder.insert_element(ir.Constant(vt, ir.Undefined), value, ir.Constant(_I32, 0))
            return builder.shuffle_vector(one, ir.Constant(vt, ir.Undefined), _lanes(*[0] * 8))

        xyz = [builder.shuffle_vector(v, ir.Constant(vec32, ir.Undefined), _lanes(*range(e, 32, 4))) for e in range(3)]
        dx, dy, dz = (builder.fsub(splat(q), w) for q, w in zip((xi_, yi_, zi_), xyz))
        d2 = builder.fadd(builder.fadd(builder.fmul(dx, dx), builder.fmul(dy, dy)), builder.fmul(dz, dz))
        r = splat(rc2_)
        masks = (builder.fcmp_ordered("<", d2, r),
                 builder.and_(builder.fcmp_ordered(">=", d2, r), builder.fcmp_ordered("<", d2, splat(cut2_))))
        idx = builder.add(splat(k_, _V8L), ir.Constant(_V8L, [ir.Constant(_I64, j) for j in range(8)]))
        compress = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_V8L, [_V8L, _V8B, _V8L]),
                                                  "llvm.experimental.vector.compress.v8i64")
        popcount = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I8, [_I8]), "llvm.ctpop.i8")
        out = []
        for arr, ty, count, mask in ((near_, signature.args[7], a_, masks[0]), (far_, signature.args[8], c_, masks[1])):
            dst = builder.gep(context.make_array(ty)(context, builder, arr).data, [count])
            builder.store(builder.call(compress, [idx, mask, ir.Constant(_V8L, ir.Undefined)]),
                          builder.bitcast(dst, _V8L.as_pointer()), align=8)
            out.append(builder.add(count, builder.zext(builder.call(popcount, [builder.bitcast(mask, _I8)]), _I64)))
        return context.make_tuple(builder, signature.return_type, out)

    return sig, codegen


@njit(cache=True, inline="always")
def _scan_records(xi, yi, zi, b0, b1, b, cut2, rc2, near, far, a, c, simd):
    """Candidates ``[b0, b1)`` of the buffer ``b``: those within rc to ``near[a:]``, the skin's to ``far[c:]``.

    Every candidate is written to both lists and each list's length grows
    by its test's outcome: no branch.  With ``simd`` (AVX-512), eight at a
    time (:func:`_scan8`), the rest one by one.
    """
    k = b0
    if simd:
        while k + 8 <= b1:
            a, c = _scan8_records(b, k, xi, yi, zi, rc2, cut2, near, far, a, c)
            k += 8
    for q in range(u64(k), u64(b1)):
        dx = xi - b[4 * q]
        dy = yi - b[4 * q + 1]
        dz = zi - b[4 * q + 2]
        d2 = dx * dx + dy * dy + dz * dz
        near[u64(a)] = q
        far[u64(c)] = q
        a += d2 < rc2
        c += (d2 >= rc2) & (d2 < cut2)
    return a, c


@njit(cache=True, inline="always")
def _row_records(i, a, c, near, far, b, nbr, gid, idi, rule):
    """Row i of ``nbr``: the near candidates, then the skin's (with ``rule``, those of larger global id).

    Returns the row's length; entries past the row's capacity are not kept
    (the last column is overwritten), and the caller retries wider.
    """
    last = u64(nbr.shape[1] - 1)
    ii = u64(i)
    n = 0
    for q in range(u64(a)):
        j = np.int64(b[4 * near[q] + 3])
        nbr[ii, min(u64(n), last)] = j
        n += (not rule) or gid[u64(j)] > idi
    for q in range(u64(c)):
        j = np.int64(b[4 * far[q] + 3])
        nbr[ii, min(u64(n), last)] = j
        n += (not rule) or gid[u64(j)] > idi
    return n


@njit(nogil=True, cache=True)
def _gathered(gid, ncell, reach, cut2, rc2, half, own_cnt, own_nbr, gh_cnt, gh_nbr,
                ostart, gstart, orec, grec, bo, bg, near, far, simd):
    """Every owned atom's two rows, cell by cell; returns the longest owned and ghost rows."""
    ncells = ostart.size - 1
    most_own = 0
    most_gh = 0
    for c in range(ncells):
        m0 = ostart[c]
        m1 = ostart[c + 1]
        if m1 == m0:
            continue
        nbo, nbg, bself = _gather(c, ncell, reach, half, ostart, gstart, orec, grec, bo, bg)
        for m in range(m0, m1):
            i = np.int64(orec[4 * m + 3])
            xi = orec[4 * m]
            yi = orec[4 * m + 1]
            zi = orec[4 * m + 2]
            idi = gid[u64(i)]
            # skip the atom itself (full lists), or with half lists its cell's atoms up to itself (j > i)
            e1 = bself + (m - m0) + 1
            e0 = bself if half else e1 - 1
            a, f = _scan_records(xi, yi, zi, 0, e0, bo, cut2, rc2, near, far, 0, 0, simd)
            a, f = _scan_records(xi, yi, zi, e1, nbo, bo, cut2, rc2, near, far, a, f, simd)
            n = _row_records(i, a, f, near, far, bo, own_nbr, gid, idi, False)
            own_cnt[u64(i)] = n
            most_own = max(most_own, n)
            a, f = _scan_records(xi, yi, zi, 0, nbg, bg, cut2, rc2, near, far, 0, 0, simd)
            n = _row_records(i, a, f, near, far, bg, gh_nbr, gid, idi, half)
            gh_cnt[u64(i)] = n
            most_gh = max(most_gh, n)
    return most_own, most_gh


class _Columns:
    """The pruned search's buffers for up to ``owned`` and ``ghosts`` rows in ``grid``'s cells.

    The record columns hold LANES records of room past the last (a vector
    scan's last load may reach past a run's end), zeros to begin with.
    """

    def __init__(self, owned: int, ghosts: int, grid):
        self.owned, self.ghosts, self.grid = owned + owned // 8 + 16, ghosts + ghosts // 8 + 16, grid
        ncells = int(grid.ncell[0] * grid.ncell[1] * grid.ncell[2])
        self.ostart, self.gstart = np.empty(ncells + 1, np.int64), np.empty(ncells + 1, np.int64)
        self.bounds = np.empty((3, int(max(grid.ncell)) + 1))
        self.cell = np.empty(self.owned + self.ghosts, np.int64)
        self.oxyz, self.gxyz = np.zeros((3, self.owned + LANES)), np.zeros((3, self.ghosts + LANES))
        self.orow, self.grow, self.ggid = (np.zeros(n + LANES, np.int64) for n in (self.owned, self.ghosts, self.ghosts))
        self.near = self.far = np.empty((2, 0), np.int64)


class VerletLists:
    """The two Verlet lists of a brick and the buffers they are built in, kept from one build to the next.

    ``widths``: the rows' first capacities (owned, ghost), grown when a
    build finds a longer row.  :meth:`build` returns ``(own_cnt, own_nbr,
    gh_cnt, gh_nbr)``, views of the kept buffers: ``own_nbr[i, :own_cnt[i]]``
    are the owned neighbours of owned atom i, ``gh_nbr[i, :gh_cnt[i]]`` its
    ghosts, as :func:`~pympi_gpu.nbody.lj.kernels_cpu.neighbor_lists` returns them.
    """

    def __init__(self, widths: tuple[int, int]):
        self.widths = [int(widths[0]), int(widths[1])]
        self._buf: dict[str, np.ndarray] = {}
        self._space: _Columns | None = None

    def _get(self, name: str, size: int, dtype=np.float64) -> np.ndarray:
        """The kept buffer ``name`` of at least ``size`` items (a larger one, with headroom, if not)."""
        a = self._buf.get(name)
        if a is None or a.shape[0] < size:
            a = self._buf[name] = np.empty(max(size + size // 8, 16), dtype)
        return a

    def _rows(self, nlocal: int):
        rows = self._buf.get("own_nbr")
        if rows is None or rows.shape[0] < nlocal or rows.shape[1] != self.widths[0] + 1 \
                or self._buf["gh_nbr"].shape[1] != self.widths[1] + 1:
            cap = max(nlocal + nlocal // 8, 16)
            self._buf["own_nbr"] = np.empty((cap, self.widths[0] + 1), np.int32)
            self._buf["gh_nbr"] = np.empty((cap, self.widths[1] + 1), np.int32)
        return (self._get("own_cnt", nlocal, np.int64), self._buf["own_nbr"],
                self._get("gh_cnt", nlocal, np.int64), self._buf["gh_nbr"])

    def build(self, pos, nlocal: int, gid, grid, cut2: float, rc2: float, half: bool):
        """The lists of the owned rows ``pos[:nlocal]`` among all rows of ``pos`` (owned first, then ghosts).

        With ``half`` the owned rows must be sorted by (cell, id) in ``grid``
        (as a rebuild leaves them).  The search (module docstring): pruned
        where the ghosts are at least as many as the owned atoms (three times
        as many where the vector scan compresses lane by lane: measured on
        AVX2 code, the gathered search was the faster at 2,000 atoms and
        4,150 ghosts), gathered elsewhere; :data:`PRUNE` overrides.
        """
        n_all = pos.shape[0]
        ng = n_all - nlocal
        ncell = grid.ncell
        stencil = (2 * grid.reach + 1) ** 3
        if ng >= (1 if COMPRESS else 3) * nlocal if PRUNE is None else PRUNE:
            sp = self._space
            if sp is None or nlocal > sp.owned or ng > sp.ghosts or grid is not sp.grid:
                sp = self._space = _Columns(nlocal, ng, grid)
            most = _columns(pos, nlocal, n_all, gid, grid.lo, grid.inv, ncell, sp.cell, sp.ostart, sp.gstart, sp.oxyz,
                            sp.orow, sp.gxyz, sp.grow, sp.ggid, sp.bounds)
            most = min(n_all, stencil * most) + LANES  # one list's most candidates, and a vector's room past them
            if most > sp.near.shape[1]:
                sp.near, sp.far = np.empty((2, most + most // 8), np.int64), np.empty((2, most + most // 8), np.int64)
            args = (gid, sp.bounds, ncell, grid.reach, cut2, rc2)
            scan = _PRUNED[bool(half), SIMD]
            rest = (sp.ostart, sp.gstart, sp.oxyz, sp.orow, sp.gxyz, sp.grow, sp.ggid, sp.near, sp.far)
        else:
            ncells = int(ncell[0] * ncell[1] * ncell[2])
            ostart = self._get("ostart", ncells + 1, np.int64)[:ncells + 1]
            gstart = self._get("gstart", ncells + 1, np.int64)[:ncells + 1]
            orec, grec = self._get("orec", 4 * nlocal), self._get("grec", 4 * ng)
            most_o, most_g = _cell_records(pos, nlocal, n_all, grid.lo, grid.inv, ncell,
                                           self._get("cell", n_all, np.int64), ostart, gstart, orec, grec)
            no, ng = min(nlocal, stencil * most_o), min(ng, stencil * most_g)
            bo, bg = self._get("bo", 4 * no), self._get("bg", 4 * ng)
            near, far = self._get("near", max(no, ng) + 8, np.int64), self._get("far", max(no, ng) + 8, np.int64)
            args = (gid, ncell, grid.reach, cut2, rc2, half)
            scan = _gathered
            rest = (ostart, gstart, orec, grec, bo, bg, near, far, SIMD and COMPRESS)
        while True:
            own_cnt, own_nbr, gh_cnt, gh_nbr = self._rows(nlocal)
            most_own, most_gh = scan(*args, own_cnt, own_nbr, gh_cnt, gh_nbr, *rest)
            if most_own <= self.widths[0] and most_gh <= self.widths[1]:
                return own_cnt[:nlocal], own_nbr[:nlocal], gh_cnt[:nlocal], gh_nbr[:nlocal]
            self.widths = [max(self.widths[0], most_own + 8), max(self.widths[1], most_gh + 8)]

def build(pos, nlocal, gid, grid, cut2, rc2, half, widths=(64, 64)):
    """One build of :class:`VerletLists` (fresh buffers): ``(own_cnt, own_nbr, gh_cnt, gh_nbr)``."""
    return VerletLists(widths).build(pos, nlocal, gid, grid, cut2, rc2, half)
