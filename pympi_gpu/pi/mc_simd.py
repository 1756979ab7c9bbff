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

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from pympi_gpu.rng import MIX1, MIX2, GAMMA, PAIRS

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
LANES, CHAINS = (8, 4) if wide_vectors() else (4, 4)
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


class _Ops:
    """uint64 vector operations of ``lanes`` lanes on a builder."""

    def __init__(self, b: ir.IRBuilder, lanes: int):
        self.b, self.lanes = b, lanes

    def const(self, x):
        return _splat(_I64, self.lanes, int(x))

    def shl(self, x, k):
        return self.b.shl(x, self.const(k))

    def shr(self, x, k):
        return self.b.lshr(x, self.const(k))

    def rotl(self, x, k):
        return self.b.or_(self.shl(x, k), self.shr(x, 64 - k))

    def mix64(self, z):  # rng.mix64
        b = self.b
        z = b.mul(b.xor(z, self.shr(z, 30)), self.const(MIX1))
        z = b.mul(b.xor(z, self.shr(z, 27)), self.const(MIX2))
        return b.xor(z, self.shr(z, 31))

    def step(self, a, z):  # rng.xoro_next: (output, a', z')
        b = self.b
        t = b.xor(a, z)
        return b.add(a, z), b.xor(b.xor(self.rotl(a, 24), t), self.shl(t, 16)), self.rotl(t, 37)


def _states(v: _Ops, key, j0, chains: int):
    """rng.block_state of each lane's block, chain ``c`` lane ``i`` block ``j0 + c * lanes + i``:
    SplitMix64's finaliser of ``key + (2j + 1) GAMMA`` and ``key + (2j + 2) GAMMA``, in allocas."""
    b, lanes = v.b, v.lanes
    kv, jv, gamma = _broadcast(b, key, lanes), _broadcast(b, j0, lanes), v.const(GAMMA)
    s0, s1 = [], []
    for c in range(chains):
        j = b.add(jv, ir.Constant(_vec(_I64, lanes), [ir.Constant(_I64, c * lanes + i) for i in range(lanes)]))
        base = b.add(kv, b.mul(b.add(v.shl(j, 1), v.const(1)), gamma))
        s0.append(cgutils.alloca_once_value(b, v.mix64(base)))
        s1.append(cgutils.alloca_once_value(b, v.mix64(b.add(base, gamma))))
    return s0, s1


def _count_pairs(v: _Ops, s0, s1):
    """The block's PAIRS output pairs of every lane through the float filter: each chain's counts."""
    b, words = v.b, 2 * v.lanes
    v32, vf = _vec(_I32, words), _vec(_F32, words)
    counts = [cgutils.alloca_once_value(b, _splat(_I32, words, 0)) for _ in s0]
    mad = cgutils.get_or_insert_function(b.module, ir.FunctionType(vf, [vf, vf, vf]), f"llvm.fmuladd.v{words}f32")
    lo, hi = _splat(_F32, words, _LO), _splat(_F32, words, _HI)
    sure, maybe, zero = _splat(_I32, words, _SURE), _splat(_I32, words, _MAYBE), _splat(_I32, words, 0)
    with cgutils.for_range(b, ir.Constant(_I64, PAIRS)):
        out = []
        for a_ptr, z_ptr in zip(s0, s1):  # two outputs of every chain, each stage across the chains
            r0, a, z = v.step(b.load(a_ptr), b.load(z_ptr))
            r1, a, z = v.step(a, z)
            b.store(a, a_ptr)
            b.store(z, z_ptr)
            out.append((r0, r1))
        for n_ptr, (r0, r1) in zip(counts, out):
            x = b.sitofp(b.bitcast(r0, v32), vf)
            y = b.sitofp(b.bitcast(r1, v32), vf)
            f = b.call(mad, [x, x, b.fmul(y, y)])
            n = b.add(b.load(n_ptr), b.select(b.fcmp_ordered("<", f, lo), sure, zero))
            b.store(b.add(n, b.select(b.fcmp_ordered("<", f, hi), maybe, zero)), n_ptr)
    return counts


def _decide(b: ir.IRBuilder, counts, nblocks, lanes: int):
    """``hits | mask << 32``: a block's certain hits where both counts of its two words agree, else its bit."""
    clean, mask = ir.Constant(_I64, 0), ir.Constant(_I64, 0)
    low16, c1, c16, zero = ir.Constant(_I32, 0xFFFF), ir.Constant(_I32, 1), ir.Constant(_I32, 16), ir.Constant(_I64, 0)
    for c, n_ptr in enumerate(counts):
        n = b.load(n_ptr)
        for i in range(lanes):
            w0 = b.extract_element(n, ir.Constant(_I32, 2 * i))
            w1 = b.extract_element(n, ir.Constant(_I32, 2 * i + 1))
            certain = b.lshr(b.add(b.and_(w0, low16), b.and_(w1, low16)), c1)
            same = b.icmp_unsigned("==", certain, b.add(b.lshr(w0, c16), b.lshr(w1, c16)))
            wanted = b.icmp_unsigned(">", nblocks, ir.Constant(_I64, c * lanes + i))
            clean = b.add(clean, b.select(b.and_(same, wanted), b.zext(certain, _I64), zero))
            bit = ir.Constant(_I64, 1 << (c * lanes + i))
            mask = b.or_(mask, b.select(b.and_(b.not_(same), wanted), bit, zero))
    return b.or_(clean, b.shl(mask, ir.Constant(_I64, 32)))


def _group_ir(b: ir.IRBuilder, key, j0, nblocks, lanes: int = None, chains: int = None):
    lanes, chains = lanes or LANES, chains or CHAINS
    v = _Ops(b, lanes)
    s0, s1 = _states(v, key, j0, chains)
    return _decide(b, _count_pairs(v, s0, s1), nblocks, lanes)


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
