"""CUDA kernels for pi (numba.cuda); they run under ``NUMBA_ENABLE_CUDASIM=1`` too.

The Monte Carlo kernel draws from the same counter-based stream as the CPU
kernels (:func:`pympi_gpu.rng.mc_hit`), so its hit count is bit-identical to
theirs for the same seed and range.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float64, uint64

from pympi_gpu import rng
from pympi_gpu.device.buffers import quiet_small_grids
from pympi_gpu.pi.grid import chunk_size
from pympi_gpu.rng import GAMMA, counter, hit_of

rng.register_numba()
quiet_small_grids()  # a small batch is a grid of a few blocks

__all__ = ["CudaKernels"]

_THREADS = 256


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
def _mc_kernel(key, start, count, per_thread, out):
    """Each thread counts ``per_thread`` consecutive samples; the block sums in shared memory."""
    tid = cuda.grid(1)
    acc = uint64(0)
    first = tid * per_thread
    last = min(first + per_thread, count)
    state = counter(key, uint64(start + first))
    for _ in range(first, last):
        acc += hit_of(state)
        state += GAMMA
    buf = cuda.shared.array(_THREADS, uint64)
    total = _block_sum(buf, acc)
    if cuda.threadIdx.x == 0:
        cuda.atomic.add(out, 0, total)


@cuda.jit
def _trap_kernel(n, c0, csize, out):
    """One block per chunk: threads stride over its nodes, then a fixed-order tree sum."""
    c = c0 + cuda.blockIdx.x
    lo = 1 + c * csize
    hi = min(lo + csize, n)
    h = 1.0 / n
    t = cuda.threadIdx.x
    acc = 0.0
    for i in range(lo + t, hi, _THREADS):
        x = i * h
        acc += 4.0 / (1.0 + x * x)
    buf = cuda.shared.array(_THREADS, float64)
    total = _block_sum(buf, acc)
    if t == 0:
        out[cuda.blockIdx.x] = total


class CudaKernels:
    """numba.cuda kernels (``--backend gpu``) on the device bound to this rank."""

    name = "gpu"

    def __init__(self, per_thread: int = 4096, max_batch: int = 1 << 36):
        self.per_thread = per_thread
        self.max_batch = max_batch

    def mc_hits(self, key: np.uint64, start: int, count: int) -> int:
        total = 0
        out = cuda.to_device(np.zeros(1, dtype=np.uint64))
        for lo in range(0, count, self.max_batch):
            n = min(self.max_batch, count - lo)
            per = max(1, min(self.per_thread, -(-n // (_THREADS * 1024))))
            blocks = -(-n // (per * _THREADS))
            out.copy_to_device(np.zeros(1, dtype=np.uint64))
            _mc_kernel[blocks, _THREADS](np.uint64(key), np.uint64(start + lo), np.int64(n),
                                         np.int64(per), out)
            total += int(out.copy_to_host()[0])
        return total

    def trapezoid_chunks(self, n: int, c0: int, c1: int) -> np.ndarray:
        if c1 <= c0:
            return np.empty(0)
        out = cuda.device_array(c1 - c0, dtype=np.float64)
        _trap_kernel[c1 - c0, _THREADS](np.int64(n), np.int64(c0), np.int64(chunk_size(n)), out)
        return out.copy_to_host()

    def partials(self, sums: np.ndarray) -> np.ndarray:
        from pympi_gpu.pi.kernels_cpu import exact_partials

        return exact_partials(sums) if sums.size else np.empty(0)

    def warmup(self, methods=("mc", "trapezoid")) -> None:
        if "mc" in methods:
            self.mc_hits(np.uint64(1), 0, 16)
        if "trapezoid" in methods:
            from pympi_gpu.pi.kernels_cpu import exact_partials

            self.trapezoid_chunks(1 << 15, 0, 1)
            exact_partials(np.ones(2))
