"""The GPU backend: numba.cuda kernels, also runnable under ``NUMBA_ENABLE_CUDASIM=1``.

The force kernel follows NVIDIA's cuda-samples ``nbody`` (Nyland, Harris &
Prins, GPU Gems 3, ch. 31): each thread owns one target body; a block loads a
tile of ``block`` source bodies into shared memory, every thread then sweeps
the tile from shared memory (an inner loop unrolled by hand, four bodies per
pass) with a reciprocal square root per interaction, and the block moves on
to the next tile.  Global memory is read once per tile per block instead of
once per interaction.

All kernels run on the backend's own stream; :meth:`CudaBackend.sync` waits for
it, which the exchange does before every MPI call.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32, float64, uint32

from pympi_gpu.device.buffers import DeviceBuffers, quiet_small_grids
from pympi_gpu.nbody.gravity.precision import PRECISIONS
from pympi_gpu.nbody.gravity.kernels_cpu import R2_MIN

__all__ = ["CudaBackend", "make_kernels"]

quiet_small_grids()

_UNROLL = 8


def _takes(func, name: str) -> bool:
    """Whether ``func`` has a parameter ``name`` (numba-cuda's releases add them one by one)."""
    import inspect

    try:
        return name in inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False


def _aligned_shared(simulated: bool) -> bool:
    """Whether ``cuda.shared.array`` takes ``alignment`` (numba-cuda, not the simulator)."""
    return not simulated and _takes(cuda.shared.array, "alignment")


_RSQRT64 = []


def _rsqrt64():
    """``1/sqrt(x)`` in fp64 for finite normal ``x > 0``: libdevice's ``rsqrt`` without its slow path.

    libdevice's fp64 ``rsqrt`` is ``MUFU.RSQ64H`` and one cubic Newton step (5 instructions),
    then a test of ``x``'s exponent and a call out of line for zero, denormal, infinite or NaN
    ``x``: 8 to 10 instructions more per interaction, for inputs the force kernel never has
    (``r^2 + eps2 >= R2_MIN``, a normal number).  Here the same fast path, the approximation
    written as PTX's ``rsqrt.approx.ftz.f64``: the same value for every such ``x``.  None
    where numba.cuda cannot take inline PTX (numba's own, older numba.cuda).
    """
    if _RSQRT64:
        return _RSQRT64[0]
    try:
        from llvmlite import ir
        from numba.cuda.extending import intrinsic
    except ImportError:
        _RSQRT64.append(None)
        return None

    @intrinsic
    def approx(typingctx, x):
        if x != float64:
            return None

        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(ir.DoubleType(), [ir.DoubleType()])
            return builder.asm(fnty, "rsqrt.approx.ftz.f64 $0, $1;", "=d,d", args, side_effect=False)
        return float64(float64), codegen

    @cuda.jit(device=True)  # no fastmath: the step is evaluated as written (libdevice's order)
    def rsqrt(x):
        y = approx(x)
        e = 1.0 - x * (y * y)
        return y + (y * e) * (0.5 + 0.375 * e)

    _RSQRT64.append(rsqrt)
    return rsqrt


def make_kernels(dtype, block: int, simulated: bool = False):
    """Compile-on-first-use kernels for one precision and block size (``simulated``: numba's simulator).

    Returns ``(accel, potential, axpy, fill_zero)``.
    """
    dtype = np.dtype(dtype).type
    if block % _UNROLL:
        raise ValueError(f"block must be a multiple of {_UNROLL}")
    rsqrt = _rsqrt(dtype, simulated)
    accel = _make_accel(dtype, block, simulated, _make_tiles(dtype, block, rsqrt, *_clamps(dtype)))
    return (accel, _make_potential(dtype, rsqrt), *_make_axpy_fill())


def _rsqrt(dtype, simulated: bool):
    """``1/sqrt(x)`` in ``dtype`` for the kernels: libdevice's (or its fp64 fast path), NumPy's under the simulator."""
    if simulated:
        # The simulator runs kernels as Python and has no libdevice; NumPy
        # scalars keep the precision.
        one = dtype(1.0)

        def rsqrt(x):
            return one / np.sqrt(x)
        return rsqrt
    from numba.cuda import libdevice

    return libdevice.rsqrtf if dtype is np.float32 else (_rsqrt64() or libdevice.rsqrt)


def _clamps(dtype):
    """``(clamp_pair, clamp_eps2)``: where ``r**2 >= R2_MIN`` is kept: once per thread, on eps2."""
    r2_min = dtype(R2_MIN[dtype])
    # r**2 is kept at or above R2_MIN so that inv**3 stays finite: at the smallest softening the
    # self term's would overflow fp32 to inf, and inf * 0 is NaN (kernels_cpu.R2_MIN).  The CPU
    # kernels clamp each pair, max(r**2 + eps2, R2_MIN); here eps2 is clamped once per thread,
    # r**2 + max(eps2, R2_MIN): no instruction in the loop, where a max costs one of the 15 of an
    # fp32 interaction (what kept it above cuda-samples' fast-math build, 15.04) and 9 of the 42
    # of an fp64 one (DSETP, selects, NaN handling).  The same value whenever eps2 >= R2_MIN, that
    # is softening >= 1e-12 in fp32 and >= 1e-15 (the command's least) in fp64; below, in fp32 it
    # adds at most 1e-24 to r**2, which leaves every fp32 r**2 above 2e-17 as it was (pairs closer
    # than 4e-9: where fp32 positions of order 1 cannot be told apart).
    @cuda.jit(device=True, fastmath=True)
    def clamp_pair(r2):
        return r2

    @cuda.jit(device=True, fastmath=True)
    def clamp_eps2(eps2):
        return max(eps2, r2_min)

    return clamp_pair, clamp_eps2


def _make_tiles(dtype, block: int, rsqrt, clamp_pair, clamp_eps2):
    """The force of one tile of ``block`` sources on a thread's target, swept from shared memory."""
    zero = dtype(0.0)
    tile_len = 4 * block

    @cuda.jit(device=True, fastmath=True)
    def pair(xi, yi, zi, xj, yj, zj, mj, eps2, ax, ay, az):
        dx = xj - xi
        dy = yj - yi
        dz = zj - zi
        inv = rsqrt(clamp_pair(eps2 + dx * dx + dy * dy + dz * dz))
        s = mj * inv * inv * inv
        return ax + s * dx, ay + s * dy, az + s * dz

    @cuda.jit(device=True, fastmath=True)
    def accel_tiles(tile, tx, ty, tz, sx, sy, sz, sm, eps2, ax, ay, az):
        # ``tile`` holds body k at [4k, 4k + 4): x, y, z, m side by side, so
        # that with 16-byte alignment the four scalars of a body come in one
        # vector load (as cuda-samples' float4), not four.
        t = cuda.threadIdx.x
        i = cuda.blockIdx.x * cuda.blockDim.x + t
        n = tx.shape[0]
        m = sx.shape[0]
        xi, yi, zi = zero, zero, zero
        if i < n:
            xi, yi, zi = tx[i], ty[i], tz[i]
        axi, ayi, azi = zero, zero, zero
        eps2 = clamp_eps2(eps2)
        for base in range(0, m, block):
            j = base + t
            if j < m:
                tile[4 * t], tile[4 * t + 1], tile[4 * t + 2], tile[4 * t + 3] = sx[j], sy[j], sz[j], sm[j]
            else:  # padding: a massless body pulls nothing (eps2 > 0 keeps it finite)
                tile[4 * t], tile[4 * t + 1], tile[4 * t + 2], tile[4 * t + 3] = zero, zero, zero, zero
            cuda.syncthreads()
            for k in range(0, tile_len, 4 * _UNROLL):
                for u in range(_UNROLL):  # a constant trip count: unrolled by the compiler
                    # unsigned: no negative-index wraparound code in the hot loop
                    b = uint32(k + 4 * u)
                    axi, ayi, azi = pair(xi, yi, zi, tile[b], tile[b + 1], tile[b + 2], tile[b + 3],
                                         eps2, axi, ayi, azi)
            cuda.syncthreads()
        if i < n:
            ax[i] += axi
            ay[i] += ayi
            az[i] += azi

    return accel_tiles


def _make_accel(dtype, block: int, simulated: bool, accel_tiles):
    """The acceleration kernel: a shared-memory tile per block, 16-byte aligned where numba.cuda can."""
    nbt = float32 if dtype is np.float32 else float64
    tile_len = 4 * block
    if _aligned_shared(simulated):
        # fp64: at most 40 registers, so that 6 blocks of 256 (48 warps, 0.75 of the SM) fit; left to
        # itself ptxas takes 48 (5 blocks), and 40 cost no spill nor instruction (gpu-static.json)
        bounds = ({"launch_bounds": (block, max(1, 1536 // block))}
                  if dtype is np.float64 and _takes(cuda.jit, "launch_bounds") else {})

        @cuda.jit(fastmath=True, **bounds)
        def accel(tx, ty, tz, sx, sy, sz, sm, eps2, ax, ay, az):
            tile = cuda.shared.array(tile_len, nbt, alignment=16)
            accel_tiles(tile, tx, ty, tz, sx, sy, sz, sm, eps2, ax, ay, az)
    else:  # the simulator and numba's own (older) numba.cuda take no alignment
        @cuda.jit(fastmath=True)
        def accel(tx, ty, tz, sx, sy, sz, sm, eps2, ax, ay, az):
            tile = cuda.shared.array(tile_len, nbt)
            accel_tiles(tile, tx, ty, tz, sx, sy, sz, sm, eps2, ax, ay, az)
    return accel


def _make_potential(dtype, rsqrt):
    """The potential kernel (diagnostics): one thread per target, every source from global memory."""
    zero = dtype(0.0)

    @cuda.jit
    def potential(tx, ty, tz, sx, sy, sz, sm, eps2, phi):
        i = cuda.grid(1)
        if i >= tx.shape[0]:
            return
        xi, yi, zi = tx[i], ty[i], tz[i]
        acc = 0.0
        for j in range(sx.shape[0]):
            dx = sx[j] - xi
            dy = sy[j] - yi
            dz = sz[j] - zi
            r2 = dx * dx + dy * dy + dz * dz
            if r2 > zero:
                acc += float64(sm[j] * rsqrt(r2 + eps2))
        phi[i] -= acc

    return potential


def _make_axpy_fill():
    """``y += h x`` and ``y = 0``, one thread per entry."""
    @cuda.jit
    def axpy(y, h, x):
        i = cuda.grid(1)
        if i < y.shape[0]:
            y[i] += h * x[i]

    @cuda.jit
    def fill_zero(y):
        i = cuda.grid(1)
        if i < y.shape[0]:
            y[i] = 0

    return axpy, fill_zero


@cuda.jit
def _count_nonfinite(a, out):
    """out[0] += the number of entries of ``a`` that are NaN or infinite."""
    i = cuda.grid(1)
    if i < a.shape[0] and (math.isnan(a[i]) or math.isinf(a[i])):
        cuda.atomic.add(out, 0, 1)


class CudaBackend(DeviceBuffers):
    """Bodies in the memory of this rank's GPU (bind it first: :func:`pympi_gpu.device.gpu.bind_device`).

    Memory, copies, staging and the MPI view come from :class:`~pympi_gpu.device.buffers.DeviceBuffers`;
    this class adds the force kernels.

    Parameters
    ----------
    precision : {"fp32", "fp64"}
    simulated : bool
        The GPU is numba's CUDA simulator (the device's word, :class:`~pympi_gpu.device.device.Device`).
    block : int
        Threads per block and bodies per shared-memory tile (default 256 on a
        GPU, 32 under the simulator, where every thread is a Python thread).
    """

    name = "gpu"

    def __init__(self, precision: str, simulated: bool = False, block: int | None = None):
        super().__init__(PRECISIONS[precision], simulated)
        self.precision = precision
        self.block = block or (32 if simulated else 256)
        self._accel, self._potential, self._axpy, self._zero = make_kernels(self.dtype, self.block, simulated)
        self._counter = None  # finite()'s device counter, made on first use

    def _grid(self, n: int) -> int:
        return (n + self.block - 1) // self.block

    def zeros(self, n: int, dtype=None):
        a = self.empty(n, dtype)
        self.fill_zero(a)
        return a

    def fill_zero(self, a) -> None:
        if a.shape[0]:
            self._zero[self._grid(a.shape[0]), self.block, self.stream](a)

    def axpy(self, y, h: float, x) -> None:
        if y.shape[0]:
            self._axpy[self._grid(y.shape[0]), self.block, self.stream](y, self.dtype.type(h), x)

    def accel(self, tx, ty, tz, sx, sy, sz, sm, eps2, ax, ay, az) -> None:
        if tx.shape[0] and sx.shape[0]:
            self._accel[self._grid(tx.shape[0]), self.block, self.stream](
                tx, ty, tz, sx, sy, sz, sm, self.dtype.type(eps2), ax, ay, az)

    def potential(self, tx, ty, tz, sx, sy, sz, sm, eps2, phi) -> None:
        if tx.shape[0] and sx.shape[0]:
            self._potential[self._grid(tx.shape[0]), self.block, self.stream](
                tx, ty, tz, sx, sy, sz, sm, self.dtype.type(eps2), phi)

    def finite(self, arrays) -> bool:
        """Are all entries of these device arrays finite?  One small kernel each, one copy back.

        The counter is allocated once per backend and zeroed on the stream: the check runs every
        step, and an allocation each time would cost a ``cudaMalloc`` (and a free) per step.
        """
        count = self._counter
        if count is None:
            count = self._counter = self.empty(1, np.int64)
        self.fill_zero(count)
        for a in arrays:
            if a.shape[0]:
                _count_nonfinite[self._grid(a.shape[0]), self.block, self.stream](a, count)
        return int(self.to_host(count)[0]) == 0

    def warmup(self) -> None:
        a = self.from_host(np.arange(1, 4, dtype=self.dtype))
        z = self.zeros(3)
        self.accel(a, a, a, a, a, a, a, 0.1, z, z, z)
        self.potential(a, a, a, a, a, a, a, 0.1, self.zeros(3, np.float64))
        self.axpy(z, 0.5, a)
        self.finite([a])
        self.sync()
