"""CUDA kernels for pi (numba.cuda); they run under ``NUMBA_ENABLE_CUDASIM=1`` too.

The Monte Carlo kernel draws from the same counter-based stream as the CPU
kernels: each thread runs whole blocks of :mod:`pympi_gpu.rng` (its
``block_state``, ``xoro_next`` and ``pair_misses``), so its hit count is
bit-identical to theirs for the same seed and range; the at most two partial
blocks at the ends of a range are counted on the host by the definition.

The trapezoid rule's terms are :func:`pympi_gpu.pi.grid.terms` with the
explicitly rounded multiply and add, so each chunk's integer is the CPU's.

``pair_misses`` is the one piece written for the device apart: NVVM cannot see
that the squares are of 32-bit words (LLVM folds the sign extension into 64-bit
shifts) and makes each a 64-bit multiply, three or four instructions.  The same
arithmetic in PTX, ``mul.wide.s32`` and ``mad.wide.s32``, becomes an ``IMAD.WIDE``
and an ``IMAD.HI`` a sample (only the high word of the sum is read).  The
simulator runs the definition.
"""

from __future__ import annotations

import numpy as np
from numba import config, cuda, float64, int32, int64, uint32, uint64

from pympi_gpu import rng
from pympi_gpu.device.buffers import quiet_small_grids
from pympi_gpu.pi import grid
from pympi_gpu.rng import BLOCK, PAIRS, block_state, pair_misses, xoro_next

rng.register_numba()
quiet_small_grids()  # a small batch is a grid of a few blocks

__all__ = ["CudaKernels"]

_THREADS = 256
_UNROLL = 4  # output pairs a pass of the inner loop (PAIRS is a multiple): 19.62 SASS a sample for sm_90, 20.0 at 2

#: rng.pair_misses in PTX: the low words of r0, r1 are one point, the high words another
_PAIR_MISSES_PTX = """{
.reg .b32 x0, x1, y0, y1, l0, l1, h0, h1;
.reg .b64 q0, q1;
mov.b64 {x0, x1}, $1;
mov.b64 {y0, y1}, $2;
or.b32 x0, x0, 1;
or.b32 x1, x1, 1;
or.b32 y0, y0, 1;
or.b32 y1, y1, 1;
mul.wide.s32 q0, x0, x0;
mad.wide.s32 q0, y0, y0, q0;
mul.wide.s32 q1, x1, x1;
mad.wide.s32 q1, y1, y1, q1;
mov.b64 {l0, h0}, q0;
mov.b64 {l1, h1}, q1;
shr.u32 h0, h0, 30;
shr.u32 h1, h1, 30;
add.u32 $0, h0, h1;
}"""

if config.ENABLE_CUDASIM:  # kernels run as Python: the definition itself, the trapezoid's plain operators
    _pair_misses = pair_misses
    _quad, _single = grid.terms(lambda a, b: a * b, lambda a, b: a + b)

    def _bits(x):
        return np.float64(x).view(np.int64)
else:
    from llvmlite import ir
    from numba.core import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def _pair_misses(typingctx, r0, r1):
        """rng.pair_misses of two uint64 outputs, as uint32, in PTX (see the module docs)."""
        sig = types.uint32(types.uint64, types.uint64)

        def codegen(context, builder, signature, args):
            i32, i64 = ir.IntType(32), ir.IntType(64)
            asm = ir.InlineAsm(ir.FunctionType(i32, [i64, i64]), _PAIR_MISSES_PTX, "=r,l,l")
            return builder.call(asm, [context.cast(builder, v, t, types.uint64)
                                      for v, t in zip(args, signature.args)])

        return sig, codegen

    from numba.cuda import libdevice

    # mul.rn and add.rn: NVVM contracts a plain multiply and add into an FMA (its -fma=1, the default
    # without fastmath too), which rounds once where the CPU rounds twice
    _quad, _single = (cuda.jit(device=True)(f) for f in grid.terms(libdevice.dmul_rn, libdevice.dadd_rn))
    _bits = libdevice.double_as_longlong


@cuda.jit(device=True)
def _block_sum(buf, value):
    """Sum ``value`` over the block through shared ``buf``, in a fixed tree order."""
    t = cuda.threadIdx.x
    buf[t] = value
    cuda.syncthreads()
    s = _THREADS // 2
    while s > 0:
        if t < s:
            buf[t] += buf[t + s]
        cuda.syncthreads()
        s //= 2
    return buf[0]


@cuda.jit
def _mc_kernel(key, j0, nblocks, per_thread, out):
    """Each thread counts ``per_thread`` whole stream blocks from ``j0``; the CUDA block sums in shared memory."""
    tid = cuda.grid(1)
    first = tid * per_thread
    last = min(first + per_thread, nblocks)
    misses = uint64(0)
    for j in range(first, last):
        s0, s1 = block_state(key, uint64(j0 + j))
        m = uint32(0)
        p = int32(0)
        while p < PAIRS:  # _UNROLL pairs a pass: not range(), whose 64-bit countdown costs 5 instructions
            for _ in range(_UNROLL):  # a constant trip count: unrolled
                r0, s0, s1 = xoro_next(s0, s1)
                r1, s0, s1 = xoro_next(s0, s1)
                m = uint32(m + _pair_misses(r0, r1))
            p = int32(p + _UNROLL)
        misses += m
    acc = uint64(max(last - first, 0) * BLOCK) - misses
    buf = cuda.shared.array(_THREADS, uint64)
    total = _block_sum(buf, acc)
    if cuda.threadIdx.x == 0:
        cuda.atomic.add(out, 0, total)


@cuda.jit
def _trap_kernel(n, c0, csize, c, out):
    """One block per chunk: threads stride over its groups of four nodes (and its last nodes), each term the
    same integer as on the CPU (:mod:`~pympi_gpu.pi.grid`), summed as int64s: any order, one sum."""
    k = c0 + cuda.blockIdx.x
    lo = 1 + k * csize
    hi = min(lo + csize, n)
    h = 1.0 / n
    m = (hi - lo) // 4
    fm = float64(m)
    unit = _bits(c)
    t = cuda.threadIdx.x
    acc = int64(0)
    for j in range(t, m, _THREADS):
        acc += _bits(_quad(float64(lo + j), fm, h, c)) - unit
    i = lo + 4 * m + t
    if i < hi:
        acc += _bits(_single(float64(i), h, c)) - unit
    buf = cuda.shared.array(_THREADS, int64)
    total = _block_sum(buf, acc)
    if t == 0:
        out[cuda.blockIdx.x] = total


class CudaKernels:
    """numba.cuda kernels (``--backend gpu``) on the device bound to this rank."""

    name = "gpu"

    def __init__(self, per_thread: int = 4, max_batch: int = 1 << 36):
        self.per_thread = per_thread  # stream blocks a thread counts
        self.max_batch = max_batch  # samples a launch counts at most

    def mc_hits(self, key: np.uint64, start: int, count: int) -> int:
        """Whole stream blocks on the device; the partial blocks at the ends on the host (the definition)."""
        from pympi_gpu.pi.kernels_cpu import count_scalar

        j0, j1 = -(-start // BLOCK), (start + count) // BLOCK
        if j1 <= j0:
            return int(count_scalar(key, np.int64(start), np.int64(count))) if count > 0 else 0
        end = start + count
        total = int(count_scalar(key, np.int64(start), np.int64(j0 * BLOCK - start)))
        total += int(count_scalar(key, np.int64(j1 * BLOCK), np.int64(end - j1 * BLOCK)))
        out = cuda.to_device(np.zeros(1, dtype=np.uint64))
        step = max(1, self.max_batch // BLOCK)
        for j in range(j0, j1, step):
            n = min(step, j1 - j)
            per = max(1, min(self.per_thread, -(-n // (_THREADS * 1024))))
            blocks = -(-n // (per * _THREADS))
            out.copy_to_device(np.zeros(1, dtype=np.uint64))
            _mc_kernel[blocks, _THREADS](np.uint64(key), np.uint64(j), np.int64(n), np.int64(per), out)
            total += int(out.copy_to_host()[0])
        return total

    def trapezoid_chunks(self, n: int, c0: int, c1: int) -> np.ndarray:
        if c1 <= c0:
            return np.empty(0, np.int64)
        out = cuda.device_array(c1 - c0, dtype=np.int64)
        _trap_kernel[c1 - c0, _THREADS](np.int64(n), np.int64(c0), np.int64(grid.chunk_size(n)), grid.shift(n), out)
        return out.copy_to_host()

    def warmup(self, methods=("mc", "trapezoid")) -> None:
        if "mc" in methods:
            self.mc_hits(np.uint64(1), 0, BLOCK)  # one whole block: the kernel runs
        if "trapezoid" in methods:
            self.trapezoid_chunks(1 << 15, 0, 1)
