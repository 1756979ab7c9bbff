"""Baseline: pympi's Monte Carlo kernel before issue 52, for side-by-side timing.

Each sample was one SplitMix64 output (the counter-based finaliser of ``key + (k + 1) * GAMMA``,
two 64x64-bit multiplies) split into two 30-bit coordinates of the quarter disc, counted by
explicit vector code (``pympi_gpu/pi/mc_simd.py`` as it was: six vectors of four uint64 lanes)
and a scalar loop for the ragged end.  Another stream than today's, so other hit counts; it
agrees with ``pi_kernels_v1`` (the same stream before issue 10), which ``benchmarks/pi.py`` checks.
"""

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from pympi_gpu import rng
from pympi_gpu.rng import MIX1, MIX2, GAMMA, counter, mix64

rng.register_numba()

LANES = 4  #: uint64 lanes per vector (one AVX2 register)
CHAINS = 6  #: vectors in flight per loop iteration
WIDTH = LANES * CHAINS  #: samples per loop iteration

_I32, _I64 = ir.IntType(32), ir.IntType(64)
_VEC = ir.VectorType(_I64, LANES)
_ONE, _ZERO, _S2, _S32 = np.uint64(1), np.uint64(0), np.uint64(2), np.uint64(32)
_MASK_A = np.uint64(0xFFFFFFFC)

def _splat(value: int) -> ir.Constant:
    return ir.Constant(_VEC, [ir.Constant(_I64, int(value) % 2**64)] * LANES)


def _ramp(first: int, step: int) -> ir.Constant:
    return ir.Constant(_VEC, [ir.Constant(_I64, (first + j * step) % 2**64) for j in range(LANES)])


def _count_loop(b: ir.IRBuilder, state0, nvec):
    gamma = int(GAMMA)
    xorshift = lambda z, k: b.xor(z, b.lshr(z, _splat(k)))  # noqa: E731
    stage = lambda fn, zs: [fn(z) for z in zs]  # noqa: E731  (one stage of every chain)

    lane0 = b.insert_element(ir.Constant(_VEC, ir.Undefined), state0, ir.Constant(_I32, 0))
    zero_mask = ir.Constant(ir.VectorType(_I32, LANES), [ir.Constant(_I32, 0)] * LANES)
    first = b.shuffle_vector(lane0, ir.Constant(_VEC, ir.Undefined), zero_mask)
    state = cgutils.alloca_once_value(b, b.add(first, _ramp(0, gamma)))  # lane j: sample j
    count = cgutils.alloca_once_value(b, _splat(0))

    with cgutils.for_range(b, nvec):
        s = b.load(state)
        b.store(b.add(s, _splat(WIDTH * gamma)), state)
        z = [s] + [b.add(s, _splat(LANES * c * gamma)) for c in range(1, CHAINS)]
        # mix64
        z = stage(lambda v: b.mul(xorshift(v, 30), _splat(MIX1)), z)
        z = stage(lambda v: b.mul(xorshift(v, 27), _splat(MIX2)), z)
        h = stage(lambda v: xorshift(v, 31), z)
        # inside(): A = 2(2u+1) from bits 34-63, B = 2(2v+1) from bits 2-31
        a = stage(lambda v: b.or_(b.and_(b.lshr(v, _splat(32)), _splat(0xFFFFFFFC)), _splat(2)), h)
        c = stage(lambda v: b.or_(b.and_(v, _splat(0xFFFFFFFC)), _splat(2)), h)
        lhs = stage(lambda v: b.xor(b.mul(v, v), _splat(1 << 63)), a)
        rhs = stage(lambda v: b.sub(_splat(1 << 63), b.mul(v, v)), c)
        total = b.load(count)
        for x, y in zip(lhs, rhs):
            total = b.sub(total, b.sext(b.icmp_signed("<", x, y), _VEC))  # a hit is -1
        b.store(total, count)

    total = b.load(count)
    out = b.extract_element(total, ir.Constant(_I32, 0))
    for j in range(1, LANES):
        out = b.add(out, b.extract_element(total, ir.Constant(_I32, j)))
    return out


@intrinsic
def hits(typingctx, state, nvec):
    """Hits among the ``WIDTH * nvec`` samples from SplitMix64 state ``state`` (uint64, int64)."""
    if not (isinstance(state, types.Integer) and isinstance(nvec, types.Integer)):
        return None
    sig = types.uint64(state, nvec)

    def codegen(context, builder, signature, args):
        s0 = context.cast(builder, args[0], signature.args[0], types.uint64)
        n = context.cast(builder, args[1], signature.args[1], types.int64)
        return _count_loop(builder, s0, n)

    return sig, codegen



@njit(inline="always")
def inside(h):
    """The disc test of the SplitMix64 stream: A = 2(2u+1), B = 2(2v+1) from bits 34-63 and 2-31."""
    a2 = ((h >> _S32) & _MASK_A) | _S2
    b2 = (h & _MASK_A) | _S2
    return a2 * a2 < ~(b2 * b2) + _ONE


@njit(cache=True, error_model="numpy")
def _scalar_hits(state, count):
    hits = np.uint64(0)
    for _ in range(count):
        if inside(mix64(state)):
            hits += _ONE
        state += GAMMA
    return hits


@njit(cache=True, nogil=True, error_model="numpy")
def mc_count(key, start, count):
    """Hits among samples ``[start, start + count)`` of the SplitMix64 stream, as pympi counted them."""
    state = counter(key, np.uint64(start))
    nvec = count // WIDTH
    done = nvec * WIDTH
    return hits(state, nvec) + _scalar_hits(state + np.uint64(done) * GAMMA, count - done)
