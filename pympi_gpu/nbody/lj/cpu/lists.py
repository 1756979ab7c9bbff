"""The Verlet lists of one brick, built on one CPU thread.

The rows are those of a plain cell search in double precision (the tests'
reference, ``tests/helpers/lj_lists.py``), entry for entry
and in the same order, so that the GPU's build still equals the CPU's row
for row: owned atoms in cells of half the list radius, searched two cells
out, the stencil's rows of cells (x, then y) scanned in order and each row's
cells along z; a row lists the pairs within ``rc`` first, then the skin's.

The owned rows and the ghost rows are each put in cell order once, as
records ``(x, y, z, row)`` stored by field (four rows of one float32 array:
every record's x, then every y, z, and the rows as int32), the coordinates
less the grid's origin in single precision, so that a vector of candidates'
coordinates is three loads, with no shuffle, and holds twice the candidates
double precision would.  Then, for a block of cells of one column along
z (:data:`BLOCK`), the records of the block's whole stencil are copied into
two contiguous buffers (owned, ghosts), one block copy per row of cells, and
each of the block's atoms scans them in one pass: memory read in a few long
streams.  The rows of cells a block copies reach two cells past its first
and last cells along z, so an atom also scans the cells beyond its own
stencil in the block's other cells; they are more than the list radius away
(cells are at least half of it wide) and are never listed, so the rows are
the same as one cell's stencil at a time gives, in the same order.  A copy
serves more atoms and costs less than the candidates it adds (copies of a
few records each are what the search spent its time on).

The scan tests single-precision distances, and decides by them wherever a
candidate is farther than a margin from both radii (:func:`_margin`: the
most the rounding of the coordinates and of the arithmetic can move a
squared distance); a vector of candidates with one within the margin is
tested again in double precision, from ``pos``, as the parallel build tests
it (:func:`_exact`), so the rows are the double build's, entry for entry.
(At 500 atoms on 2 ranks a few candidates a build are.)  Otherwise the scan
has no branch: every candidate tested is written to two index lists (within
``rc``, within ``rc + skin``), whose lengths grow by the test's outcome.
On AVX-512 it takes sixteen candidates at a time with vector code, the kept
ones compressed into a register (one ``vpcompressd``) and stored whole;
on AVX2, which has no compress, eight at a time, the kept lanes' positions
read from a table of the 256 masks' compressions (:func:`_compressions`)
and stored whole; elsewhere four at a time the same way (SSE2's vectors).
(Against the double scan of eight lanes on AVX-512: a build 0.82-0.89x at
500 atoms on 2 ranks and 0.75-0.84x at 4,000, a rebuild 0.78-0.82x at 500;
on AVX2's code 0.88-0.90x, on generic code 0.79-0.81x.)  The half
lists' rule for owned pairs (``j > i``, the atoms sorted by (cell, id)) is
where the scan starts, and every ghost within reach is listed: with half
lists the halo is a half shell (:class:`~pympi_gpu.nbody.lj.cpu.halo.Halo`),
whose ghosts are each pair's one side.  Nothing is allocated per build
once the buffers are large enough.

(A second search, which read each atom's stencil in place pruned to the
list sphere, served small bricks while the halo was a full shell; with half
the ghosts the copy per cell is as fast or faster at every size measured,
on AVX-512 and AVX2 code alike, and the second search went.)
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba import uint64 as u64
from numba.core import cgutils
from numba.extending import intrinsic

from pympi_gpu.device.jitcache import guard_cache

guard_cache()  # this module's kernels are cached: numba's cache mended first (see jitcache)

__all__ = ["VerletLists", "build", "build_rows", "cell_index"]


@njit(cache=True, inline="always")
def cell_index(pos, i, lo, inv, ncell):
    """The search cell of row i of ``pos``: the one definition, which every binning and sort uses."""
    cx = min(max(int(np.floor((pos[i, 0] - lo[0]) * inv[0])), 0), ncell[0] - 1)
    cy = min(max(int(np.floor((pos[i, 1] - lo[1]) * inv[1])), 0), ncell[1] - 1)
    cz = min(max(int(np.floor((pos[i, 2] - lo[2]) * inv[2])), 0), ncell[2] - 1)
    return (cx * ncell[1] + cy) * ncell[2] + cz


def _vector_lanes() -> int:
    """The candidates the scan tests at a time on the CPU numba compiles for: 16 with AVX-512 (where
    :func:`_scan16`'s compress is one instruction), 8 with AVX2 (:func:`_scan8`), else 4 (:func:`_scan4`:
    SSE2's single-precision vectors, which every x86-64 has, or NEON's).

    The features numba is told (``NUMBA_CPU_FEATURES``, as ``jitcache.tune_cpu``
    sets them) or, for the host CPU, the host's; a CPU named without features
    (``NUMBA_CPU_NAME=generic``, an image built for any CPU) counts as without.
    """
    import llvmlite.binding as ll
    from numba.core import config

    if config.CPU_FEATURES is not None:
        features = config.CPU_FEATURES
    elif config.CPU_NAME not in (None, "host"):
        return 4
    else:
        features = ll.get_host_cpu_features().flatten()
    features = features.split(",")
    return 16 if "+avx512f" in features else 8 if "+avx2" in features else 4


#: the candidates the scan tests at a time (the same lists whatever it is): 16 on AVX-512, 8 on AVX2, else 4
SIMD = _vector_lanes()
#: cells of a column along z whose atoms share one gather of their stencils' candidates (measured with sixteen
#: lanes at 250 and 2,000 atoms a rank: 4 ahead of 1, 2, 6 and 8, the more candidates costing less than the gathers
#: saved; with four double lanes on AVX2, 2 and 4 were level at 250 atoms a rank and 2 ahead at 2,000)
BLOCK = 4 if SIMD == 16 else 2
#: single precision's unit roundoff
_EPS32 = 2.0 ** -24


_F32, _I64, _I32, _I16, _I1 = ir.FloatType(), ir.IntType(64), ir.IntType(32), ir.IntType(16), ir.IntType(1)
_V8L = ir.VectorType(_I64, 8)


def _lanes(*items) -> ir.Constant:
    return ir.Constant(ir.VectorType(_I32, len(items)), [ir.Constant(_I32, i) for i in items])


@njit(nogil=True, cache=True)
def _records(pos, nlocal, n_all, lo, inv, ncell, cell, ostart, gstart, orec, grec):
    """Owned rows and ghost rows each in cell order (stable) as records ``(x, y, z, row)``; returns the
    largest distance of a coordinate from ``lo``.

    ``orec``/``grec`` ``(4, m)`` float32: field f of record r is ``rec[f, r]``,
    the coordinates less ``lo`` in single precision, the row's int32 in field 3
    (``rec.view(np.int32)[3, r]``); ``ostart``/``gstart`` (``ncells + 1``) are the
    cells' first records.
    """
    ncells = ncell[0] * ncell[1] * ncell[2]
    oid, gid = orec.view(np.int32), grec.view(np.int32)
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
    for c in range(ncells):
        ostart[c + 1] += ostart[c]
        gstart[c + 1] += gstart[c]
    far = 0.0
    for i in range(n_all):  # ostart[c], gstart[c] advance to the next cell's start, then step back
        c = cell[i]
        if i < nlocal:
            r = u64(ostart[c])
            ostart[c] += 1
            rec, rid = orec, oid
        else:
            r = u64(gstart[c])
            gstart[c] += 1
            rec, rid = grec, gid
        for f in range(3):
            x = pos[i, f] - lo[f]
            far = max(far, abs(x))
            rec[f, r] = np.float32(x)
        rid[3, r] = i
    for c in range(ncells, 0, -1):
        ostart[c] = ostart[c - 1]
        gstart[c] = gstart[c - 1]
    ostart[0] = 0
    gstart[0] = 0
    return far


@njit(cache=True, inline="always")
def _margin(far, cut2):
    """How far a squared distance in single precision can be from the double one the lists are built
    by, for records at most ``far`` from the origin and distances up to the list radius (+1); inf where
    that bound is no use (a flown-off atom), so that every candidate is tested again in double.

    Each stored coordinate is off by at most ``far eps``, a difference of two
    by ``e = (2 far + rl + 1) eps`` with its rounding (``|dx| <= rl + 1``);
    its square by ``e (2 |dx| + e)``, three of them, and five roundings of
    values below ``rl^2 + 1``: doubled.
    """
    rl = np.sqrt(cut2)
    e = (2.0 * far + 2.0 * rl + 2.0) * _EPS32
    tol = 2.0 * (3.0 * e * (2.0 * rl + 2.0 + e) + 8.0 * (cut2 + 1.0) * _EPS32)
    return tol if tol < 0.25 else np.inf


@intrinsic
def _copy64(typingctx, src, s, dst, d):
    """``dst.flat[d:d + k] = src.flat[s:s + k]`` for the ``k`` values of 64 bytes (C-contiguous arrays):
    one unaligned 64-byte load and store, no bounds check."""
    sig = types.void(src, s, dst, d)

    def codegen(context, builder, signature, args):
        src_, s_, dst_, d_ = args
        ptr = [builder.bitcast(builder.gep(context.make_array(ty)(context, builder, a).data, [i]), _V8L.as_pointer())
               for ty, a, i in ((signature.args[0], src_, s_), (signature.args[2], dst_, d_))]
        builder.store(builder.load(ptr[0], align=4), ptr[1], align=4)
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, inline="always")
def _copy(k0, k1, nb, src, dst):
    """Records ``[k0, k1)`` of ``src`` appended to ``dst`` after its first ``nb``; the new count.

    Sixteen values of a field a move: each field of ``src`` and ``dst`` needs
    sixteen values of room past its last record (which hold no candidate: the
    count says where they end).
    """
    ms, md = u64(src.shape[1]), u64(dst.shape[1])
    for f in range(4):
        o = u64(f) * md + u64(nb)
        for k in range(u64(f) * ms + u64(k0), u64(f) * ms + u64(k1), u64(16)):
            _copy64(src, k, dst, o)
            o += u64(16)
    return nb + (k1 - k0)


@njit(nogil=True, cache=True)
def _gather(c, c1, ncell, reach, half, ostart, gstart, orec, grec, bo, bg):
    """The stencil candidates of cells ``[c, c1)`` (a block of one column along z), in scan order.

    Owned (half lists: cells from c on) and ghosts, each row of cells from
    the block's first cell's stencil to its last's.  Returns ``(owned count,
    ghost count, buffer index of cell c's first owned atom)``.
    """
    n2 = ncell[2]
    cz = c % n2
    cy = (c // n2) % ncell[1]
    cx = c // (ncell[1] * n2)
    cz1 = cz + (c1 - c) - 1  # the block's last cell along z
    nbo = 0
    nbg = 0
    bself = 0
    for ax in range(max(cx - reach, 0), min(cx + reach + 1, ncell[0])):
        for ay in range(max(cy - reach, 0), min(cy + reach + 1, ncell[1])):
            base = (ax * ncell[1] + ay) * n2
            z0 = base + max(cz - reach, 0)
            z1 = base + min(cz1 + reach + 1, n2)
            nbg = _copy(gstart[z0], gstart[z1], nbg, grec, bg)
            if half:  # the owned atoms of the cells before c have smaller rows: their pairs are listed there
                if z1 <= c:
                    continue
                z0 = max(z0, c)
            if z0 <= c < z1:
                bself = nbo + ostart[c] - ostart[z0]
            nbo = _copy(ostart[z0], ostart[z1], nbo, orec, bo)
    return nbo, nbg, bself


def _classify(context, builder, b_ty, b_, k_, xi_, yi_, zi_, bounds, lim_, lanes: int):
    """The masks of records ``k..k+lanes-1`` of ``b`` (within rc; within the skin; within the margin of
    either radius), lanes from ``lim`` on off, and ``splat``.

    ``bounds``: rc^2 less and plus the margin, then the list radius's square
    less and plus it, single precision.  Where no lane is within the margin,
    the first two masks are the double build's.
    """
    b = context.make_array(b_ty)(context, builder, b_)
    row = builder.extract_value(b.shape, 1)  # the values of a field
    vt = ir.VectorType(_F32, lanes)
    xyz = [builder.load(builder.bitcast(builder.gep(b.data, [builder.add(builder.mul(row, ir.Constant(_I64, f)), k_)]),
                                        vt.as_pointer()), align=4) for f in range(3)]

    def splat(value, ty=vt):
        one = builder.insert_element(ir.Constant(ty, ir.Undefined), value, ir.Constant(_I32, 0))
        return builder.shuffle_vector(one, ir.Constant(ty, ir.Undefined), _lanes(*[0] * lanes))

    dx, dy, dz = (builder.fsub(splat(q), w) for q, w in zip((xi_, yi_, zi_), xyz))
    d2 = builder.fadd(builder.fadd(builder.fmul(dx, dx), builder.fmul(dy, dy)), builder.fmul(dz, dz))
    below = [builder.fcmp_ordered("<", d2, splat(t)) for t in bounds]
    vi = ir.VectorType(_I32, lanes)
    valid = builder.icmp_signed("<", ir.Constant(vi, [ir.Constant(_I32, j) for j in range(lanes)]),
                                splat(builder.trunc(lim_, _I32), vi))
    near = builder.and_(below[0], valid)
    far = builder.and_(builder.xor(below[2], below[0]), valid)  # [rc, rl): no lane is within a margin
    bits = [builder.bitcast(m, ir.IntType(lanes)) for m in below]
    odd = builder.or_(builder.xor(bits[0], bits[1]), builder.xor(bits[2], bits[3]))  # any lane within one
    return (near, far, odd), splat


def _scan_signature(b, k, xi, yi, zi, r0, r1, c0, c1, near, far, a, c, lim, *more):
    return types.UniTuple(types.int64, 3)(b, k, xi, yi, zi, r0, r1, c0, c1, near, far, a, c, lim, *more)


@intrinsic
def _scan16(typingctx, b, k, xi, yi, zi, r0, r1, c0, c1, near, far, a, c, lim):
    """Records ``k..k+15`` of ``b`` as :func:`_scan` treats them, in 16-lane single-precision vectors:
    ``(a, c, odd)``, ``(a, c)`` advanced, ``odd`` not 0 where a lane is within the margin of a radius (then
    the double test decides, and what this stored is written over).  Lanes from ``lim`` on are not
    candidates (the last few of a buffer).

    The squared distances are the scalar loop's operations in its order
    (``(dx dx + dy dy) + dz dz``, no fused multiply-add); the indices kept
    are compressed into a vector (``llvm.experimental.vector.compress``: one
    ``vpcompressd`` to a register on AVX-512) stored whole at ``near[a]`` and
    ``far[c]``, so both need 16 entries of room past their counts.
    """
    sig = _scan_signature(b, k, xi, yi, zi, r0, r1, c0, c1, near, far, a, c, lim)

    def codegen(context, builder, signature, args):
        b_, k_, xi_, yi_, zi_, r0_, r1_, c0_, c1_, near_, far_, a_, c_, lim_ = args
        masks, splat = _classify(context, builder, signature.args[0], b_, k_, xi_, yi_, zi_, (r0_, r1_, c0_, c1_),
                                 lim_, 16)
        v16i, v16b = ir.VectorType(_I32, 16), ir.VectorType(_I1, 16)
        idx = builder.add(splat(builder.trunc(k_, _I32), v16i), ir.Constant(v16i, [ir.Constant(_I32, j)
                                                                                  for j in range(16)]))
        compress = cgutils.get_or_insert_function(builder.module, ir.FunctionType(v16i, [v16i, v16b, v16i]),
                                                  "llvm.experimental.vector.compress.v16i32")
        popcount = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I16, [_I16]), "llvm.ctpop.i16")
        out = []
        for arr, ty, count, mask in ((near_, signature.args[9], a_, masks[0]), (far_, signature.args[10], c_, masks[1])):
            dst = builder.gep(context.make_array(ty)(context, builder, arr).data, [count])
            builder.store(builder.call(compress, [idx, mask, ir.Constant(v16i, ir.Undefined)]),
                          builder.bitcast(dst, v16i.as_pointer()), align=4)
            out.append(builder.add(count, builder.zext(builder.call(popcount, [builder.bitcast(mask, _I16)]), _I64)))
        out.append(builder.zext(masks[2], _I64))
        return context.make_tuple(builder, signature.return_type, out)

    return sig, codegen


def _compressions(lanes: int) -> np.ndarray:
    """A compress as a table: row m holds the lanes set in the mask m, in order (then zeros)."""
    return np.array([[j for j in range(lanes) if m >> j & 1] + [0] * (lanes - bin(m).count("1"))
                     for m in range(1 << lanes)], np.int32)


#: the compressions of 8 and 4 lanes' masks (:func:`_scan8`, :func:`_scan4`)
_LANES8, _LANES4 = _compressions(8), _compressions(4)


def _table_scan(lanes: int):
    """The scan of ``lanes`` candidates for a CPU with no compress instruction: records
    ``k..k+lanes-1`` of ``b`` as :func:`_scan16` treats sixteen, lanes from ``lim`` on masked off; the kept
    lanes of each mask are row ``mask`` of ``lut`` (:func:`_compressions`), added to ``k`` and stored whole
    at ``near[a]`` and ``far[c]`` (``lanes`` entries of room past their counts)."""

    @intrinsic
    def scan(typingctx, b, k, xi, yi, zi, r0, r1, c0, c1, near, far, a, c, lim, lut):
        sig = _scan_signature(b, k, xi, yi, zi, r0, r1, c0, c1, near, far, a, c, lim, lut)
        vi, mask_ty = ir.VectorType(_I32, lanes), ir.IntType(lanes)

        def codegen(context, builder, signature, args):
            b_, k_, xi_, yi_, zi_, r0_, r1_, c0_, c1_, near_, far_, a_, c_, lim_, lut_ = args
            table = context.make_array(signature.args[14])(context, builder, lut_).data
            masks, splat = _classify(context, builder, signature.args[0], b_, k_, xi_, yi_, zi_,
                                     (r0_, r1_, c0_, c1_), lim_, lanes)
            base = splat(builder.trunc(k_, _I32), vi)
            popcount = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I64, [_I64]), "llvm.ctpop.i64")
            out = []
            for arr, ty, count, mask in ((near_, signature.args[9], a_, masks[0]),
                                         (far_, signature.args[10], c_, masks[1])):
                bits = builder.zext(builder.bitcast(mask, mask_ty), _I64)
                kept = builder.load(builder.bitcast(builder.gep(table, [builder.mul(bits, ir.Constant(_I64, lanes))]),
                                                    vi.as_pointer()), align=4)
                dst = builder.gep(context.make_array(ty)(context, builder, arr).data, [count])
                builder.store(builder.add(base, kept), builder.bitcast(dst, vi.as_pointer()), align=4)
                out.append(builder.add(count, builder.call(popcount, [bits])))
            out.append(builder.zext(masks[2], _I64))
            return context.make_tuple(builder, signature.return_type, out)

        return sig, codegen

    return scan


#: AVX2's scan (8 lanes), and that of any other CPU (4 lanes: SSE2's vectors, NEON's)
_scan8, _scan4 = _table_scan(8), _table_scan(4)


@njit(cache=True, inline="always")
def _exact(xi, yi, zi, q0, q1, ids, pos, cut2, rc2, near, far, a, c):
    """Candidates ``[q0, q1)`` tested in double precision, from their rows of ``pos``: the lists' own
    test, ``(dx dx + dy dy) + dz dz`` against rc^2 and the list radius's square."""
    for q in range(u64(q0), u64(q1)):
        j = ids[3, q]
        dx = xi - pos[j, 0]
        dy = yi - pos[j, 1]
        dz = zi - pos[j, 2]
        d2 = dx * dx + dy * dy + dz * dz
        near[u64(a)] = q
        far[u64(c)] = q
        a += d2 < rc2
        c += (d2 >= rc2) & (d2 < cut2)
    return a, c


@njit(cache=True, inline="always")
def _scan(i, xi, yi, zi, bounds, b0, b1, b, ids, pos, cut2, rc2, near, far, a, c, simd):
    """Candidates ``[b0, b1)`` of the buffer ``b`` (atom i at ``(xi, yi, zi)``, single precision, less the
    records' origin): those within rc to ``near[a:]``, the skin's to ``far[c:]``; ``(a, c)`` advanced.

    Single precision decides wherever a candidate is farther than ``bounds``'
    margin from both radii; a vector with a candidate within it is tested
    again in double precision (:func:`_exact`), so the lists are the double
    build's.  Every candidate is written to both lists and each list's length
    grows by its test's outcome: no branch but that.  ``simd``
    (:data:`SIMD`) candidates at a time (:func:`_scan16`, :func:`_scan8`,
    :func:`_scan4`), the last fewer than ``simd`` in one more vector whose
    lanes past ``b1`` are masked off (the buffers hold room past their last
    record).
    """
    r0, r1, c0, c1 = bounds
    xd, yd, zd = pos[i, 0], pos[i, 1], pos[i, 2]
    k = b0
    while k < b1:
        lim = min(b1 - k, simd)
        if simd == 16:
            a1, c1_, odd = _scan16(b, k, xi, yi, zi, r0, r1, c0, c1, near, far, a, c, lim)
        elif simd == 8:
            a1, c1_, odd = _scan8(b, k, xi, yi, zi, r0, r1, c0, c1, near, far, a, c, lim, _LANES8)
        else:
            a1, c1_, odd = _scan4(b, k, xi, yi, zi, r0, r1, c0, c1, near, far, a, c, lim, _LANES4)
        if odd:
            a, c = _exact(xd, yd, zd, k, k + lim, ids, pos, cut2, rc2, near, far, a, c)
        else:
            a, c = a1, c1_
        k += lim
    return a, c


@njit(cache=True, inline="always")
def _row(i, a, c, near, far, ids, nbr):
    """Row i of ``nbr``: the near candidates' rows, then the skin's; returns the row's length.

    Entries past the row's capacity are not kept (the last column is
    overwritten), and the caller retries wider.
    """
    last = u64(nbr.shape[1] - 1)
    ii = u64(i)
    for q in range(u64(a)):
        nbr[ii, min(q, last)] = ids[3, near[q]]
    for q in range(u64(c)):
        nbr[ii, min(u64(a) + q, last)] = ids[3, far[q]]
    return a + c


@njit(nogil=True, cache=True)
def _search(pos, far_, ncell, reach, cut2, rc2, half, own_cnt, own_nbr, gh_cnt, gh_nbr, ostart, gstart, orec, grec,
            bo, bg, near, far, simd, block):
    """Every owned atom's two rows, cell by cell; returns the longest owned and ghost rows.  ``far_``:
    the records' largest coordinate (:func:`_records`)."""
    ncells = ostart.size - 1
    n2 = ncell[2]
    tol = _margin(far_, cut2)
    bounds = (np.float32(rc2 - tol), np.float32(rc2 + tol), np.float32(cut2 - tol), np.float32(cut2 + tol))
    oid, bio, big = orec.view(np.int32), bo.view(np.int32), bg.view(np.int32)
    most_own = 0
    most_gh = 0
    c1 = 0
    for c in range(ncells):
        m0 = ostart[c]
        if c < c1 or ostart[c + 1] == m0:  # in the last block, or no atom to start one
            continue
        c1 = min(c + block, c - c % n2 + n2)  # a block: BLOCK cells of one column along z, or fewer
        m1 = ostart[c1]
        nbo, nbg, bself = _gather(c, c1, ncell, reach, half, ostart, gstart, orec, grec, bo, bg)
        for m in range(m0, m1):
            i = np.int64(oid[3, m])
            xi = orec[0, m]
            yi = orec[1, m]
            zi = orec[2, m]
            # skip the atom itself (full lists), or with half lists its cell's atoms up to itself (j > i)
            e1 = bself + (m - m0) + 1
            e0 = bself if half else e1 - 1
            a, f = _scan(i, xi, yi, zi, bounds, 0, e0, bo, bio, pos, cut2, rc2, near, far, 0, 0, simd)
            a, f = _scan(i, xi, yi, zi, bounds, e1, nbo, bo, bio, pos, cut2, rc2, near, far, a, f, simd)
            n = _row(i, a, f, near, far, bio, own_nbr)
            own_cnt[u64(i)] = n
            most_own = max(most_own, n)
            a, f = _scan(i, xi, yi, zi, bounds, 0, nbg, bg, big, pos, cut2, rc2, near, far, 0, 0, simd)
            n = _row(i, a, f, near, far, big, gh_nbr)
            gh_cnt[u64(i)] = n
            most_gh = max(most_gh, n)
    return most_own, most_gh


@njit(nogil=True, cache=True)
def build_rows(pos, nlocal, n_all, grid, bufs):
    """:func:`_records` then :func:`_search`, one compiled call: the longest owned and ghost rows.

    ``grid``: the cell grid (``lo``, ``inv``, ``ncell``, ``reach``), the
    squared radii (``cut2``, ``rc2``), ``half`` and the scan's ``simd`` and
    ``block``; ``bufs``: the buffers written (``lcell ... far``) and the
    rows (``own_cnt ... gh_nbr``): a rebuild's records
    (:class:`~pympi_gpu.nbody.lj.cpu.records.Grid`, ``Build``), or
    :class:`_Scan` and :class:`_Buffers`.
    """
    extent = _records(pos, nlocal, n_all, grid.lo, grid.inv, grid.ncell, bufs.lcell, bufs.ostart, bufs.gstart,
                      bufs.orec, bufs.grec)
    return _search(pos, extent, grid.ncell, grid.reach, grid.cut2, grid.rc2, grid.half, bufs.own_cnt, bufs.own_nbr,
                   bufs.gh_cnt, bufs.gh_nbr, bufs.ostart, bufs.gstart, bufs.orec, bufs.grec, bufs.bo, bufs.bg,
                   bufs.near, bufs.far, grid.simd, grid.block)


class _Scan(NamedTuple):
    """What :func:`build_rows` reads of a build's grid, where no rebuild's record gives it."""

    lo: np.ndarray
    inv: np.ndarray
    ncell: np.ndarray
    reach: int
    cut2: float
    rc2: float
    half: bool
    simd: int
    block: int


class _Buffers(NamedTuple):
    """:class:`VerletLists`' buffers as :func:`build_rows` takes them."""

    lcell: np.ndarray
    ostart: np.ndarray
    gstart: np.ndarray
    orec: np.ndarray
    grec: np.ndarray
    bo: np.ndarray
    bg: np.ndarray
    near: np.ndarray
    far: np.ndarray
    own_cnt: np.ndarray
    own_nbr: np.ndarray
    gh_cnt: np.ndarray
    gh_nbr: np.ndarray


class VerletLists:
    """The two Verlet lists of a brick and the buffers they are built in, kept from one build to the next.

    ``widths``: the rows' first capacities (owned, ghost), grown when a
    build finds a longer row.  :meth:`build` returns ``(own_cnt, own_nbr,
    gh_cnt, gh_nbr)``, views of the kept buffers: ``own_nbr[i, :own_cnt[i]]``
    are the owned neighbours of owned atom i, ``gh_nbr[i, :gh_cnt[i]]`` its
    ghosts, as the tests' reference search returns them.
    """

    def __init__(self, widths: tuple[int, int]):
        self.widths = [int(widths[0]), int(widths[1])]
        self._room = (-1, -1, -1, -1, -1)  # (owned, ghosts, cells, widths) the buffers hold
        #: counts the buffers made (a record of them is made again after a change: ``HostAtoms._records``)
        self.version = 0

    def _buffers(self, nlocal: int, ng: int, ncells: int) -> None:
        """The kept buffers, for ``nlocal`` owned rows, ``ng`` ghosts and ``ncells`` cells, with headroom."""
        o, g = nlocal + nlocal // 8 + 16, ng + ng // 8 + 16
        self.ostart, self.gstart = np.empty(ncells + 1, np.int64), np.empty(ncells + 1, np.int64)
        self.cell = np.empty(o + g, np.int64)
        # records by field, and the stencils' copies (a block's stencil holds no more than all): sixteen values
        # of room past the last in each field for _copy, sixteen more in a copy for the vector scan's last vector
        self.orec, self.bo = np.empty((4, o + 16), np.float32), np.empty((4, o + 32), np.float32)
        self.grec, self.bg = np.empty((4, g + 16), np.float32), np.empty((4, g + 32), np.float32)
        self.near, self.far = np.empty(max(o, g) + 16, np.int32), np.empty(max(o, g) + 16, np.int32)
        self.own_cnt, self.gh_cnt = np.empty(o, np.int64), np.empty(o, np.int64)
        self.own_nbr = np.empty((o, self.widths[0] + 1), np.int32)
        self.gh_nbr = np.empty((o, self.widths[1] + 1), np.int32)
        self._room = (o, g, ncells, *self.widths)
        self.version += 1

    def build(self, pos, nlocal: int, grid, cut2: float, rc2: float, half: bool):
        """The lists of the owned rows ``pos[:nlocal]`` among all rows of ``pos`` (owned first, then ghosts).

        With ``half`` the owned rows must be sorted by (cell, id) in ``grid``
        (as a rebuild leaves them).
        """
        n_all = pos.shape[0]
        ncell = grid.ncell
        ncells = grid.cells
        o, g, c, w0, w1 = self._room
        if nlocal > o or n_all - nlocal > g or ncells != c or w0 != self.widths[0] or w1 != self.widths[1]:
            self._buffers(nlocal, n_all - nlocal, ncells)
        scan = _Scan(grid.lo, grid.inv, ncell, grid.reach, cut2, rc2, half, SIMD, BLOCK)
        while True:
            most_own, most_gh = build_rows(pos, nlocal, n_all, scan, _Buffers(**self.kernel_buffers()))
            if most_own <= self.widths[0] and most_gh <= self.widths[1]:
                return self.rows(nlocal)
            self.grow(nlocal, n_all - nlocal, ncells, (most_own, most_gh))


    # -- the buffers as :func:`~pympi_gpu.nbody.lj.cpu.rebuild.rebuild_brick` builds the lists in them
    def kernel_buffers(self) -> dict:
        """The buffers the build writes, by name (made, of no rows, before the first): the fields of a
        :class:`_Buffers`, and of a :class:`~pympi_gpu.nbody.lj.cpu.records.Build` record."""
        if self._room[0] < 0:
            self._buffers(0, 0, 0)
        return {"lcell": self.cell, "ostart": self.ostart, "gstart": self.gstart, "orec": self.orec,
                "grec": self.grec, "bo": self.bo, "bg": self.bg, "near": self.near, "far": self.far,
                "own_cnt": self.own_cnt, "own_nbr": self.own_nbr, "gh_cnt": self.gh_cnt, "gh_nbr": self.gh_nbr}

    def grow(self, nlocal: int, ng: int, ncells: int, longest: tuple[int, int] | None = None) -> None:
        """Buffers for ``nlocal`` owned rows, ``ng`` ghosts and ``ncells`` cells; ``longest``: a build's
        longest rows (owned, ghost), where they outgrew the widths."""
        if longest is not None:
            self.widths = [max(self.widths[0], int(longest[0]) + 8), max(self.widths[1], int(longest[1]) + 8)]
        self._buffers(nlocal, ng, ncells)

    def rows(self, nlocal: int) -> tuple:
        """``(own_cnt, own_nbr, gh_cnt, gh_nbr)`` of the last build, as :meth:`build` returns them."""
        return self.own_cnt[:nlocal], self.own_nbr[:nlocal], self.gh_cnt[:nlocal], self.gh_nbr[:nlocal]


def build(pos, nlocal, grid, cut2, rc2, half, widths=(64, 64)):
    """One build of :class:`VerletLists` (fresh buffers): ``(own_cnt, own_nbr, gh_cnt, gh_nbr)``."""
    return VerletLists(widths).build(pos, nlocal, grid, cut2, rc2, half)
