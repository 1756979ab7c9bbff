"""The Monte Carlo hit count written as explicit vector code (a numba intrinsic).

``hits(state, nvec)`` counts the hits among ``WIDTH * nvec`` consecutive
samples whose first SplitMix64 state is ``state``: the same integers as the
scalar loop over :func:`pympi_gpu.rng.mix64` and :func:`pympi_gpu.rng.inside`
(it is tested against it), in ``LANES``-wide uint64 vectors of LLVM IR.

Why not let LLVM vectorise the scalar loop?  It does, but on AVX2, which has
no 64-bit vector multiply, each of the four multiplications per sample becomes
two or three 32-bit ones, all on one execution pipe of a Zen 2 core, and the
rest of the loop competes for the same pipes.  Written out here:

* ``CHAINS`` independent vectors of samples are advanced one stage at a time
  (interleaved), so the long multiply-latency chains overlap; the state and
  the hit counter are single registers, so nothing spills at ``CHAINS = 6``;
* the hit test ``A**2 + B**2 < 2**64`` (see :func:`~pympi_gpu.rng.inside`) is
  ``A**2 ^ 2**63 < (2**63 - B**2)`` as a signed compare, one operation fewer
  than LLVM's unsigned compare.

Measured, one thread, side by side with LLVM's vectorisation of the scalar
loop (``benchmarks/pi.py`` times both in the same run): on Zen 2 (AVX2, no
64-bit vector multiply) 1.205e9 samples/s against 1.115e9; on Zen 4 (AVX-512
with ``vpmullq``, 512-bit vectors) 2.83e9 against 2.66e9.  So it is used on
every target: even where the 64-bit vector multiply is a single instruction
the interleaved chains win.  (Intel's ``vpmullq`` is slower than Zen 4's, so
LLVM's form has less to gain there; the benchmark says so per machine.)

numba keys a cached kernel on its own source file only: after editing this
module, clear the cache (``__pycache__/*.nbi``, ``*.nbc``) to see the change.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from pympi_gpu.rng import _M1, _M2, GAMMA

__all__ = ["LANES", "CHAINS", "WIDTH", "hits"]

LANES = 4  #: uint64 lanes per vector (one AVX2 register)
CHAINS = 6  #: vectors in flight per loop iteration
WIDTH = LANES * CHAINS  #: samples per loop iteration

_I32, _I64 = ir.IntType(32), ir.IntType(64)
_VEC = ir.VectorType(_I64, LANES)


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
        z = stage(lambda v: b.mul(xorshift(v, 30), _splat(_M1)), z)
        z = stage(lambda v: b.mul(xorshift(v, 27), _splat(_M2)), z)
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

