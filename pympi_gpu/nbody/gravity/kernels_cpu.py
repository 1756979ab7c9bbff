"""CPU force kernels for the n-body: numba (``parallel=True``) and a NumPy reference.

Bodies are structure-of-arrays: ``x, y, z`` positions and ``m`` masses, one
1-D array each, in the run's precision (float32 or float64).  A kernel adds to
the accelerations of *targets* the pull of a block of *sources*:

    a_i += sum_j m_j (r_j - r_i) / (|r_j - r_i|^2 + eps^2)^(3/2)      (G = 1)

The softening ``eps > 0`` makes the self term vanish (``r_j - r_i = 0``), so
the inner loop needs no ``i == j`` branch and vectorises.  Potentials (for the
energy diagnostics only) accumulate in float64 and leave out the self term.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from pympi_gpu.device.jitcache import guard_cache, keyed_by_code

guard_cache()  # this module's kernels are cached: numba's cache mended first (see jitcache)

__all__ = ["NumbaKernels", "NumpyKernels", "direct_sum_fp64", "FLOPS_PER_INTERACTION", "R2_MIN"]

#: the customary count (cuda-samples nbody): 3 sub, 3 fma + 1 add for r^2, rsqrt,
#: 2 mul for m/r^3, 3 fma into the acceleration, counted as 20 flops.
FLOPS_PER_INTERACTION = 20


@njit(parallel=True, fastmath=True, cache=True)
def _axpy(y, h, x):
    """y += h * x, element-wise (kicks and drifts)."""
    for i in prange(y.size):
        y[i] += h * x[i]


@njit(fastmath=True, inline="always")
def _rsqrt32(r2):
    """1/sqrt(r2) in float32; with fastmath the hardware estimate plus one Newton step."""
    return np.float32(1.0) / np.sqrt(r2)


@njit(fastmath=True, inline="always")
def _rsqrt64(r2):
    """1/sqrt(r2) without the slow float64 sqrt and divide.

    The float32 hardware estimate (~23 bits), then two Newton steps in float64
    (~46, then ~53 bits).  Needs r2 within float32 range, which softening
    >= 1e-15 and |r| < 1e18 guarantee.
    """
    y = np.float64(np.float32(1.0) / np.sqrt(np.float32(r2)))
    h = 0.5 * r2
    y = y * (1.5 - h * y * y)
    return y * (1.5 - h * y * y)


#: The smallest r**2 (softening included) the force kernels use: 1/r**3 times a body's
#: mass must stay finite.  At the smallest softening (1e-15) the self term (r = 0) has
#: 1/r = 1e15, whose cube overflows float32 to inf, and inf * 0 is NaN.  Clamped, the
#: float32 self term is an exact 0 and 1/r at most 1e12 (finite for masses below ~300;
#: N-body units have total mass 1): only a pair closer than 1e-12, which only a softening
#: below 1e-12 lets through, pulls as if at 1e-12.  Float64 never needs it above the
#: smallest softening (eps**2 = 1e-30), which is also what its float32 rsqrt estimate
#: can hold.  One max per interaction, vectorised (vmaxps; FMNMX on the GPU).
R2_MIN = {np.float32: 1e-24, np.float64: 1e-30}


def _make_accel(dtype):
    zero = dtype(0.0)
    rsqrt = _rsqrt32 if dtype is np.float32 else _rsqrt64
    r2_min = dtype(R2_MIN[dtype])

    @njit(parallel=True, nogil=True, fastmath=True, error_model="numpy", cache=True)
    def accel(tx, ty, tz, sx, sy, sz, sm, eps2, ax, ay, az):
        for i in prange(tx.size):
            xi, yi, zi = tx[i], ty[i], tz[i]
            axi, ayi, azi = zero, zero, zero
            for j in range(sx.size):
                dx = sx[j] - xi
                dy = sy[j] - yi
                dz = sz[j] - zi
                inv = rsqrt(max(dx * dx + dy * dy + dz * dz + eps2, r2_min))  # see R2_MIN
                s = sm[j] * inv * inv * inv
                axi += s * dx
                ayi += s * dy
                azi += s * dz
            ax[i] += axi
            ay[i] += ayi
            az[i] += azi

    return keyed_by_code(accel)  # it closes over rsqrt, a kernel: see jitcache


def _make_potential(dtype):
    zero = dtype(0.0)
    rsqrt = _rsqrt32 if dtype is np.float32 else _rsqrt64

    @njit(parallel=True, nogil=True, fastmath=True, error_model="numpy", cache=True)
    def potential(tx, ty, tz, sx, sy, sz, sm, eps2, phi):
        for i in prange(tx.size):
            xi, yi, zi = tx[i], ty[i], tz[i]
            acc = 0.0
            for j in range(sx.size):
                dx = sx[j] - xi
                dy = sy[j] - yi
                dz = sz[j] - zi
                r2 = dx * dx + dy * dy + dz * dz
                w = sm[j] * rsqrt(r2 + eps2)
                # the self term (and exact coincidences) left out, as a select: the loop vectorises
                acc += np.float64(w if r2 > zero else zero)
            phi[i] -= acc

    return keyed_by_code(potential)


_accel32, _accel64 = _make_accel(np.float32), _make_accel(np.float64)
_pot32, _pot64 = _make_potential(np.float32), _make_potential(np.float64)


class NumbaKernels:
    """numba-compiled kernels (``--backend numba``) on host arrays."""

    name = "numba"

    def accel(self, tx, ty, tz, sx, sy, sz, sm, eps2, ax, ay, az) -> None:
        """Add the pull of sources ``s*`` to accelerations ``a*`` of targets ``t*``."""
        if tx.size == 0 or sx.size == 0:
            return
        f = _accel32 if tx.dtype == np.float32 else _accel64
        f(tx, ty, tz, sx, sy, sz, sm, tx.dtype.type(eps2), ax, ay, az)

    def potential(self, tx, ty, tz, sx, sy, sz, sm, eps2, phi) -> None:
        """Add the potential of sources at the targets to ``phi`` (float64)."""
        if tx.size == 0 or sx.size == 0:
            return
        f = _pot32 if tx.dtype == np.float32 else _pot64
        f(tx, ty, tz, sx, sy, sz, sm, tx.dtype.type(eps2), phi)

    def warmup(self, dtype) -> None:
        """Compile (or load from the cache) the kernels of ``dtype`` once."""
        a = np.ones(3, dtype=dtype)
        a[1], a[2] = 2, 3
        z = np.zeros(3, dtype=dtype)
        self.accel(a, a, a, a, a, a, a, 0.1, z, z.copy(), z.copy())
        self.potential(a, a, a, a, a, a, a, 0.1, np.zeros(3))
        self.axpy(z, 0.5, a)

    def axpy(self, y, h, x) -> None:
        """y += h * x (h cast to y's precision)."""
        _axpy(y, y.dtype.type(h), x)


class NumpyKernels:
    """The readable reference (``--backend numpy``): the same sums with NumPy arrays."""

    name = "numpy"
    _chunk = 256  # targets per pass: bounds the (chunk x sources) temporaries

    def _separations(self, tx, ty, tz, sx, sy, sz):
        """Per chunk of targets ``[lo, hi)``: source minus target coordinates, ``(hi - lo, sources)``."""
        for lo in range(0, tx.size, self._chunk):
            hi = min(lo + self._chunk, tx.size)
            yield (lo, hi, sx[None, :] - tx[lo:hi, None], sy[None, :] - ty[lo:hi, None],
                   sz[None, :] - tz[lo:hi, None])

    def accel(self, tx, ty, tz, sx, sy, sz, sm, eps2, ax, ay, az) -> None:
        dt = tx.dtype
        eps2 = dt.type(eps2)
        for lo, hi, dx, dy, dz in self._separations(tx, ty, tz, sx, sy, sz):
            inv = dt.type(1) / np.sqrt(np.maximum(dx * dx + dy * dy + dz * dz + eps2, dt.type(R2_MIN[dt.type])))
            s = sm[None, :] * inv * inv * inv
            ax[lo:hi] += (s * dx).sum(axis=1, dtype=dt)
            ay[lo:hi] += (s * dy).sum(axis=1, dtype=dt)
            az[lo:hi] += (s * dz).sum(axis=1, dtype=dt)

    def potential(self, tx, ty, tz, sx, sy, sz, sm, eps2, phi) -> None:
        dt = tx.dtype
        eps2 = dt.type(eps2)
        for lo, hi, dx, dy, dz in self._separations(tx, ty, tz, sx, sy, sz):
            r2 = dx * dx + dy * dy + dz * dz
            with np.errstate(divide="ignore"):
                term = sm[None, :] * (dt.type(1) / np.sqrt(r2 + eps2))
            phi[lo:hi] -= np.where(r2 > 0, term, 0).sum(axis=1, dtype=np.float64)

    def axpy(self, y, h, x) -> None:
        y += y.dtype.type(h) * x

    def warmup(self, dtype) -> None:
        pass


def direct_sum_fp64(pos: np.ndarray, mass: np.ndarray, eps: float, targets: np.ndarray) -> np.ndarray:
    """Accelerations of bodies ``targets`` in float64 over all bodies: the reference.

    Parameters
    ----------
    pos : (N, 3) array, positions (length units)
    mass : (N,) array, masses
    eps : float, softening length
    targets : (k,) int array, indices of the bodies wanted

    Returns
    -------
    (k, 3) float64 array of accelerations (G = 1).
    """
    pos = np.asarray(pos, dtype=np.float64)
    mass = np.asarray(mass, dtype=np.float64)
    out = np.empty((len(targets), 3))
    for row, i in enumerate(targets):
        d = pos - pos[i]
        r2 = np.einsum("ij,ij->i", d, d) + eps * eps
        s = mass / (r2 * np.sqrt(r2))
        out[row] = s @ d
    return out
