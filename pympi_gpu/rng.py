"""Counter-based random numbers: value ``k`` of a stream depends only on (seed, k).

The generator is SplitMix64 (Steele, Lea & Flood, "Fast splittable
pseudorandom number generators", OOPSLA 2014), used as a counter-based
generator: output ``k`` is the 64-bit finaliser applied to ``key + (k + 1) *
GAMMA``.  That is exactly the ``k``-th output of the sequential SplitMix64
stream started from ``key``, which passes BigCrush and PractRand; being a pure
function of the counter, any rank, thread or GPU thread computes any sample
without coordination, so results do not depend on how work is split.

Every function here has one body for every backend: marked
:func:`numba_callable` and registered with numba's ``register_jitable`` by
:func:`register_numba`, it is inlined into CPU loops, ``prange`` loops and CUDA
kernels, and called as plain Python it works element-wise on NumPy uint64
arrays (the NumPy backend).

Importing this module does not import numba (0.4 s or more per rank, most of
a short run): the functions are registered with numba by
:func:`register_numba`, which the numba and CUDA kernel modules call, or at
once if numba is already loaded.
"""

from __future__ import annotations

import sys

import numpy as np

__all__ = ["GAMMA", "HIT_RADIUS2", "seed_key", "mix64", "counter", "bits", "uniform", "inside",
           "mc_hit", "hit_of", "count_hits_numpy", "register_numba"]

GAMMA = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_ONE = np.uint64(1)
_ZERO = np.uint64(0)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_S34, _S2, _S11 = np.uint64(34), np.uint64(2), np.uint64(11)
_TWO_M53 = 2.0**-53
#: (2 * 2**30)**2: the squared radius of the quarter circle on the 31-bit grid.
HIT_RADIUS2 = np.uint64(1 << 62)
_SEED_SALT = np.uint64(0x6A09E667F3BCC909)  # fractional bits of sqrt(2)
_S32, _MASK_A = np.uint64(32), np.uint64(0xFFFFFFFC)

_JITABLE: list = []
_registered = False


def numba_callable(fn):
    """Mark ``fn`` for :func:`register_numba` (numba's ``register_jitable``, deferred); returns ``fn`` itself."""
    _JITABLE.append(fn)
    return fn


def register_numba() -> None:
    """Make every function of this module callable from numba-compiled code (idempotent).

    numba's ``register_jitable`` returns the function unchanged, so names bound
    before registration (``from pympi_gpu.rng import bits``) work afterwards.
    """
    global _registered
    if _registered:
        return
    from numba.extending import register_jitable as numba_jitable

    for fn in _JITABLE:
        numba_jitable(fn)
    _registered = True


@numba_callable
def mix64(z):
    """SplitMix64 finaliser: a bijective avalanche mix of a uint64."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


def seed_key(seed: int, stream: int = 0) -> np.uint64:
    """Key of the stream ``stream`` of ``seed`` (plain Python, run once per run)."""
    mask = (1 << 64) - 1
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps by design
        s = np.uint64(seed & mask)
        return mix64(s ^ _SEED_SALT) + mix64(np.uint64(stream & mask) * GAMMA + _ONE)


@numba_callable
def counter(key, k):
    """The SplitMix64 state before output ``k``: ``key + (k + 1) * GAMMA`` (wrapping).

    State ``k + 1`` is state ``k`` plus ``GAMMA``: loops over consecutive
    samples add instead of multiplying, which on CPUs without a 64-bit vector
    multiply (AVX2) saves a third of the emulated multiplications.
    """
    return key + (k + _ONE) * GAMMA


@numba_callable
def bits(key, k):
    """64 random bits: output ``k`` of the stream keyed ``key`` (uint64 args)."""
    return mix64(counter(key, k))


@numba_callable
def uniform(key, k):
    """A float64 uniform on [0, 1) with 53 random bits."""
    return np.float64(bits(key, k) >> _S11) * _TWO_M53


@numba_callable
def inside(h):
    """Whether the point drawn from 64 random bits ``h`` is in the quarter disc.

    The bits give two 30-bit coordinates ``u, v``; the point is the centre of
    grid cell ``((2u+1)/2**31, (2v+1)/2**31)`` and the test
    ``(2u+1)**2 + (2v+1)**2 < 2**62`` is exact in integer arithmetic, so CPU,
    GPU and every compiler agree on every sample (``u`` is bits 34-63 of ``h``,
    ``v`` bits 2-31).

    It is computed on the doubled values ``A = 2(2u+1)`` and ``B = 2(2v+1)``,
    which are ``h``'s words with their two low bits set to ``10``, as
    ``A**2 < 2**64 - B**2`` (that is, ``A**2 + B**2 < 2**64``) in uint64
    arithmetic: exact, since ``4 <= B**2 < 2**64``.  That form needs
    fewer shifts, the bottleneck of the AVX2 loop (15% faster there).
    """
    a2 = ((h >> _S32) & _MASK_A) | _S2  # 2(2u+1)
    b2 = (h & _MASK_A) | _S2  # 2(2v+1)
    return a2 * a2 < ~(b2 * b2) + _ONE  # 2**64 - B**2, no wrap-around on the way


@numba_callable
def mc_hit(key, k):
    """1 if sample ``k`` of the stream keyed ``key`` is a hit, else 0 (uint64)."""
    return _ONE if inside(bits(key, k)) else _ZERO


@numba_callable
def hit_of(state):
    """1 if the sample of SplitMix64 state ``state`` (see :func:`counter`) is a hit, else 0."""
    return _ONE if inside(mix64(state)) else _ZERO


def count_hits_numpy(key, start: int, count: int, block: int = 1 << 15) -> int:
    """Hits among samples ``[start, start + count)``: :func:`mc_hit` summed, in NumPy.

    The same integers as the jitted loops, computed in place on blocks that
    stay in the L2 cache: about 15x the speed of applying :func:`bits` and
    :func:`inside` to whole arrays, which allocate a temporary per operation.
    Two identities save work: ``((h >> 34) << 1) | 1 == (h >> 33) | 1`` and
    ``(((h >> 2) & (2**30 - 1)) << 1) | 1 == ((h >> 1) & (2**31 - 1)) | 1``.
    """
    mask = (1 << 64) - 1
    gamma = int(GAMMA)
    block = max(1, min(block, count))
    steps = np.arange(block, dtype=np.uint64)
    x = np.empty(block, dtype=np.uint64)
    t = np.empty(block, dtype=np.uint64)
    low31, s1, s33 = np.uint64((1 << 31) - 1), np.uint64(1), np.uint64(33)
    hits = 0
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps by design
        steps *= GAMMA
        for lo in range(0, count, block):
            n = min(block, count - lo)
            if n < block:
                steps, x, t = steps[:n], x[:n], t[:n]
            # state of sample k: key + (k + 1) * GAMMA, as counter()
            np.add(steps, np.uint64((int(key) + (start + lo + 1) * gamma) & mask), out=x)
            np.right_shift(x, _S30, out=t)
            x ^= t
            x *= _M1
            np.right_shift(x, _S27, out=t)
            x ^= t
            x *= _M2
            np.right_shift(x, _S31, out=t)
            x ^= t  # x = bits
            np.right_shift(x, s1, out=t)
            t &= low31
            t |= _ONE
            t *= t  # b * b
            x >>= s33
            x |= _ONE
            x *= x  # a * a
            x += t
            hits += int(np.count_nonzero(x < HIT_RADIUS2))
    return hits


if "numba" in sys.modules:  # numba is loaded anyway: register now, as before
    register_numba()
