"""The Monte Carlo hit count of whole blocks as explicit vector code (a numba intrinsic).

``group_counts(key, j0, n)`` counts the samples of the blocks ``j0 .. j0 + n - 1``
(``n <= GROUP``; a call costs as much as ``n = GROUP``) of the stream keyed ``key`` (see :mod:`pympi_gpu.rng`): each lane
of a ``LANES``-wide uint64 vector is one block's xoroshiro128+ generator, and
``CHAINS`` vectors are advanced side by side so that their dependency chains overlap.
It returns the hits of the blocks it could decide and a mask of those it could not,
which the caller counts again with the definition (:func:`pympi_gpu.rng.block_hits`).

Why a float filter.  Two outputs ``r0, r1`` hold two samples, the points of their low
and of their high 32-bit words, so the 2 x LANES words of ``r0`` are the x coordinates
of 2 x LANES samples and those of ``r1`` their y coordinates.  Converted to float32
(16 lanes a conversion on AVX-512, 8 on AVX2) they give ``f = x*x + y*y`` in three
instructions, where the exact test needs the 64-bit products of 32-bit words, two
multiplies and their shuffles per sample.  ``f`` is within 2**40.01 of the exact
``S = A**2 + B**2`` (see :func:`pympi_gpu.rng.square32`): each conversion is within
half an ulp (2**-24 relative) of the word, the word within 1 of ``A`` (the set low
bit), and the two products and their sum add three roundings, so
``|f - S| <= 4.01 * 2**-24 * S + 2**34``, below 2**40.01 near the circle
``S = 2**62``.  So ``f < 2**62 - 2**41`` proves a hit, ``f >= 2**62 + 2**41`` a miss,
and the rest, a band of relative width 2**-20 around the circle, is undecided: about
7.5e-7 of the samples, one block in 1,300.  Each 32-bit lane counts its certain hits (twice) in
its low 16 bits and the samples below the upper threshold in its high 16 bits; a block
whose two counts differ anywhere is reported, and counted again exactly.  The result
is the definition's integer, whatever the float rounding (fused or not).

Measured with ``benchmarks/pi.py`` (one thread; ``docs/pi.md``).  numba keys a cached
kernel on its own source file only: after editing this module, clear the cache
(``__pycache__/*.nbi``, ``*.nbc``) to see the change.
"""

from __future__ import annotations

import os

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from pympi_gpu.rng import _M1, _M2, GAMMA, PAIRS

__all__ = ["LANES", "CHAINS", "GROUP", "group_counts", "wide_vectors"]


def wide_vectors() -> bool:
    """Whether numba compiles for AVX-512 (its CPU features, or the host's when it uses those)."""
    from numba.core import config

    feats = config.CPU_FEATURES
    if feats is None:
        if config.CPU_NAME not in (None, "host"):
            return False  # a named CPU without features: take the narrow layout, safe everywhere
        import llvmlite.binding as llvm

        llvm.initialize_native_target()
        feats = llvm.get_host_cpu_features().flatten()
    return "+avx512f" in feats.split(",")


#: uint64 lanes per vector and vectors in flight: 8 x 4 fill AVX-512's 32 registers with
#: room to spare; with AVX2's 16, 4 x 4 (measured: docs/pi.md)
LANES, CHAINS = (8, 4) if os.environ.get("PYMPI_PI_NARROW") is None and wide_vectors() else (4, 4)
#: blocks of one call
GROUP = LANES * CHAINS

_I32, _I64, _F32 = ir.IntType(32), ir.IntType(64), ir.FloatType()
#: the float filter's thresholds, 2**62 -+ 2**41 (exact in float32)
_LO, _HI = float(2**62 - 2**41), float(2**62 + 2**41)
#: what a sample adds to its lane's count: 2 if a certain hit (the low half: at most 1024 a block), and
#: 2**16 if below the upper threshold (the high half).  2, not 1: LLVM makes ``+ (k ? 1 : 0)`` a
#: subtraction of the mask widened to a vector, two instructions on AVX-512 where a masked add is one
_SURE, _MAYBE = 2, 1 << 16


def _vec(t, n):
    return ir.VectorType(t, n)


def _splat(t, n, value):
    c = ir.Constant(t, value % 2**64 if isinstance(t, ir.IntType) and value < 0 else value)
    return ir.Constant(_vec(t, n), [c] * n)


def _broadcast(b: ir.IRBuilder, value, n):
    vt = _vec(value.type, n)
    one = b.insert_element(ir.Constant(vt, ir.Undefined), value, ir.Constant(_I32, 0))
    return b.shuffle_vector(one, ir.Constant(vt, ir.Undefined), ir.Constant(_vec(_I32, n), [0] * n))


def _group_ir(b: ir.IRBuilder, key, j0, nblocks, lanes: int = None, chains: int = None):
    lanes, chains = lanes or LANES, chains or CHAINS
    words = 2 * lanes
    v64, v32, vf = _vec(_I64, lanes), _vec(_I32, words), _vec(_F32, words)
    c64 = lambda x: _splat(_I64, lanes, int(x))  # noqa: E731
    shl = lambda x, k: b.shl(x, c64(k))  # noqa: E731
    shr = lambda x, k: b.lshr(x, c64(k))  # noqa: E731
    rotl = lambda x, k: b.or_(shl(x, k), shr(x, 64 - k))  # noqa: E731

    def mix64(z):  # rng.mix64
        z = b.mul(b.xor(z, shr(z, 30)), c64(_M1))
        z = b.mul(b.xor(z, shr(z, 27)), c64(_M2))
        return b.xor(z, shr(z, 31))

    # rng.block_state: SplitMix64 outputs 2j and 2j + 1, i.e. the finaliser of key + (2j+1) GAMMA, key + (2j+2) GAMMA
    kv, jv = _broadcast(b, key, lanes), _broadcast(b, j0, lanes)
    gamma = c64(int(GAMMA))
    s0, s1 = [], []
    for c in range(chains):
        j = b.add(jv, ir.Constant(v64, [ir.Constant(_I64, c * lanes + i) for i in range(lanes)]))
        base = b.add(kv, b.mul(b.add(shl(j, 1), c64(1)), gamma))
        s0.append(cgutils.alloca_once_value(b, mix64(base)))
        s1.append(cgutils.alloca_once_value(b, mix64(b.add(base, gamma))))
    counts = [cgutils.alloca_once_value(b, _splat(_I32, words, 0)) for _ in range(chains)]

    mad = cgutils.get_or_insert_function(b.module, ir.FunctionType(vf, [vf, vf, vf]), f"llvm.fmuladd.v{words}f32")
    lo, hi = _splat(_F32, words, _LO), _splat(_F32, words, _HI)
    sure, maybe = _splat(_I32, words, _SURE), _splat(_I32, words, _MAYBE)
    zero32 = _splat(_I32, words, 0)

    def step(a, z):  # rng.xoro_next: (output, a', z')
        t = b.xor(a, z)
        return b.add(a, z), b.xor(b.xor(rotl(a, 24), t), shl(t, 16)), rotl(t, 37)

    with cgutils.for_range(b, ir.Constant(_I64, PAIRS)):
        state = [(b.load(s0[c]), b.load(s1[c])) for c in range(chains)]
        out = []
        for c in range(chains):  # two outputs of every chain, each stage across the chains
            a, z = state[c]
            r0, a, z = step(a, z)
            r1, a, z = step(a, z)
            b.store(a, s0[c])
            b.store(z, s1[c])
            out.append((r0, r1))
        for c, (r0, r1) in enumerate(out):
            x = b.sitofp(b.bitcast(r0, v32), vf)
            y = b.sitofp(b.bitcast(r1, v32), vf)
            f = b.call(mad, [x, x, b.fmul(y, y)])
            n = b.load(counts[c])
            n = b.add(n, b.select(b.fcmp_ordered("<", f, lo), sure, zero32))
            n = b.add(n, b.select(b.fcmp_ordered("<", f, hi), maybe, zero32))
            b.store(n, counts[c])

    # per block: certain hits if both counts of both its words agree, else a bit of the mask
    clean, mask = ir.Constant(_I64, 0), ir.Constant(_I64, 0)
    low16 = ir.Constant(_I32, 0xFFFF)
    for c in range(chains):
        n = b.load(counts[c])
        for i in range(lanes):
            w0 = b.extract_element(n, ir.Constant(_I32, 2 * i))
            w1 = b.extract_element(n, ir.Constant(_I32, 2 * i + 1))
            certain = b.lshr(b.add(b.and_(w0, low16), b.and_(w1, low16)), ir.Constant(_I32, 1))
            below = b.add(b.lshr(w0, ir.Constant(_I32, 16)), b.lshr(w1, ir.Constant(_I32, 16)))
            same = b.icmp_unsigned("==", certain, below)
            wanted = b.icmp_unsigned(">", nblocks, ir.Constant(_I64, c * lanes + i))
            clean = b.add(clean, b.select(b.and_(same, wanted), b.zext(certain, _I64), ir.Constant(_I64, 0)))
            undecided = b.and_(b.not_(same), wanted)
            mask = b.or_(mask, b.select(undecided, ir.Constant(_I64, 1 << (c * lanes + i)), ir.Constant(_I64, 0)))
    return b.or_(clean, b.shl(mask, ir.Constant(_I64, 32)))


@intrinsic
def group_counts(typingctx, key, j0, n):
    """Blocks ``j0 .. j0 + min(n, GROUP) - 1`` of the stream keyed ``key`` (integers).

    Returns ``hits | mask << 32``: ``hits`` of the blocks decided by the float filter,
    bit ``i`` of ``mask`` set where block ``j0 + i`` was not (count it with
    ``rng.block_hits``).
    """
    if not all(isinstance(t, types.Integer) for t in (key, j0, n)):
        return None
    sig = types.uint64(key, j0, n)

    def codegen(context, builder, signature, args):
        k, j, m = (context.cast(builder, v, t, types.uint64) for v, t in zip(args, signature.args))
        return _group_ir(builder, k, j, m)

    return sig, codegen
