"""Counter-based random numbers: value ``k`` of a stream depends only on (seed, k).

Two generators, each a pure function of (key, counter):

* **SplitMix64** (Steele, Lea & Flood, "Fast splittable pseudorandom number
  generators", OOPSLA 2014) as a counter-based generator: output ``k`` is the
  64-bit finaliser applied to ``key + (k + 1) * GAMMA``, exactly the ``k``-th
  output of the sequential SplitMix64 stream started from ``key`` (it passes
  BigCrush and PractRand): :func:`bits`, :func:`uniform`.  The n-body initial
  conditions draw from it.
* **The Monte Carlo stream of pi.** Samples come in blocks of :data:`BLOCK`;
  block ``j`` is a xoroshiro128+ generator (Blackman & Vigna, "Scrambled linear
  pseudorandom number generators", ACM TOMS 47, 2021; version 1.0, a=24, b=16,
  c=37) seeded, as its authors advise, with SplitMix64 outputs ``2j`` and
  ``2j + 1`` (:func:`block_state`).  So sample ``k`` is a pure function of
  (key, k) that any rank, thread or GPU thread finds without coordination, and
  the hit count of a range does not depend on how the range is split.  Two
  outputs ``r0, r1`` give two samples: the point of their low 32-bit words and
  the point of their high words (:func:`pair_misses`).  A step costs two
  rotations, a shift, four xors and an add (no multiply): a third of what
  SplitMix64 costs a sample on a GPU, and it vectorises on AVX2 and AVX-512.

Every function here has one body for every backend: marked
:func:`numba_callable` and registered with numba's ``register_jitable`` by
:func:`register_numba`, it is inlined into CPU loops, ``prange`` loops and CUDA
kernels, and called as plain Python it works element-wise on NumPy uint64
arrays (the CUDA simulator runs it so).

Importing this module does not import numba (0.4 s or more per rank, most of
a short run): the functions are registered with numba by
:func:`register_numba`, which the numba and CUDA kernel modules call, or at
once if numba is already loaded.
"""

from __future__ import annotations

import sys

import numpy as np

__all__ = ["GAMMA", "MIX1", "MIX2", "BLOCK", "PAIRS", "seed_key", "mix64", "counter", "bits", "uniform", "xoro_next",
           "block_state", "square32", "miss_of", "pair_misses", "block_hits", "count_hits", "count_hits_numpy",
           "register_numba"]

GAMMA = np.uint64(0x9E3779B97F4A7C15)
#: SplitMix64's finaliser's multipliers (Stafford's Mix13)
MIX1 = np.uint64(0xBF58476D1CE4E5B9)
MIX2 = np.uint64(0x94D049BB133111EB)
_ONE = np.uint64(1)
_ZERO = np.uint64(0)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)
_S24, _S40, _S16, _S37 = np.uint64(24), np.uint64(40), np.uint64(16), np.uint64(37)
_S32, _S62 = np.uint64(32), np.uint64(62)
_LOW32, _SIGN32 = np.uint64(0xFFFFFFFF), np.uint64(0x80000000)
_TWO_M53 = 2.0**-53
_SEED_SALT = np.uint64(0x6A09E667F3BCC909)  # fractional bits of sqrt(2)
#: samples of a block of the Monte Carlo stream: one xoroshiro128+ generator each
BLOCK = 1024
#: output pairs of a block (a pair gives two samples)
PAIRS = BLOCK // 2

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
    z = (z ^ (z >> _S30)) * MIX1
    z = (z ^ (z >> _S27)) * MIX2
    return z ^ (z >> _S31)


def seed_key(seed: int, stream: int = 0) -> np.uint64:
    """Key of the stream ``stream`` of ``seed`` (plain Python, run once per run)."""
    mask = (1 << 64) - 1
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps by design
        s = np.uint64(seed & mask)
        return mix64(s ^ _SEED_SALT) + mix64(np.uint64(stream & mask) * GAMMA + _ONE)


@numba_callable
def counter(key, k):
    """The SplitMix64 state before output ``k``: ``key + (k + 1) * GAMMA`` (wrapping)."""
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
def xoro_next(s0, s1):
    """One step of xoroshiro128+ 1.0 from the state ``(s0, s1)``: ``(output, s0', s1')`` (uint64)."""
    t = s0 ^ s1
    return s0 + s1, ((s0 << _S24) | (s0 >> _S40)) ^ t ^ (t << _S16), (t << _S37) | (t >> _S27)


@numba_callable
def block_state(key, j):
    """The xoroshiro128+ state that starts block ``j`` (uint64): SplitMix64 outputs ``2j`` and ``2j + 1``."""
    return bits(key, j + j), bits(key, j + j + _ONE)


@numba_callable
def square32(w):
    """``A**2``, exact, for the coordinate ``A`` of the low 32-bit word of ``w`` (uint64).

    ``A`` is that word with its lowest bit set, read as a signed 32-bit integer: an odd
    number in [-(2**31 - 1), 2**31 - 1], so ``A / 2**31`` is the centre of a cell of the
    grid of 2**31 x 2**31 cells (side 2**-30) over [-1, 1]^2; the word's low bit picks
    nothing.  It is sign-extended and squared in wrapping uint64 arithmetic, which is exact
    since ``A**2 < 2**62``.
    """
    a = (((w | _ONE) & _LOW32) ^ _SIGN32) - _SIGN32
    return a * a


@numba_callable
def miss_of(x, y):
    """1 if the point of the low words of ``x`` and ``y`` lies outside the unit disc, else 0 (uint64).

    Inside means ``A**2 + B**2 < 2**62`` (see :func:`square32`), exact in integers, so every
    backend and compiler agrees on every sample.  The sum is below 2**63: its bit 62 is
    the miss.
    """
    return (square32(x) + square32(y)) >> _S62


@numba_callable
def pair_misses(r0, r1):
    """Misses (0, 1 or 2) among the two samples drawn from the outputs ``r0, r1``.

    The first sample is the point of the low words of ``r0`` and ``r1``, the second the
    point of their high words.
    """
    return miss_of(r0, r1) + miss_of(r0 >> _S32, r1 >> _S32)


@numba_callable
def block_hits(key, j, lo, hi):
    """Hits among samples ``lo <= i < hi`` of block ``j`` (ints, ``0 <= lo <= hi <= BLOCK``).

    The definition, sample by sample: the kernels count whole blocks faster and their
    ragged edges with this.  Samples ``2p`` and ``2p + 1`` come from outputs ``2p`` and
    ``2p + 1`` of the block's generator.
    """
    s0, s1 = block_state(key, np.uint64(j))
    misses = _ZERO
    for p in range((hi + 1) // 2):
        r0, s0, s1 = xoro_next(s0, s1)
        r1, s0, s1 = xoro_next(s0, s1)
        i = 2 * p
        if i >= lo and i + 2 <= hi:
            misses += pair_misses(r0, r1)
        else:
            if lo <= i < hi:
                misses += miss_of(r0, r1)
            if lo <= i + 1 < hi:
                misses += miss_of(r0 >> _S32, r1 >> _S32)
    return np.uint64(hi - lo) - misses


@numba_callable
def count_hits(key, start, count):
    """Hits among samples ``[start, start + count)`` of the stream keyed ``key``: the definition.

    ``start`` and ``count`` are ints (int64 in compiled code); block by block with
    :func:`block_hits`.
    """
    hits = _ZERO
    k = start
    end = start + count
    while k < end:
        j = k // BLOCK
        first = j * BLOCK
        hi = min(end - first, BLOCK)
        hits += block_hits(key, j, k - first, hi)
        k = first + hi
    return hits


def count_hits_numpy(key, start: int, count: int, lanes: int = 1 << 13) -> int:
    """Hits among samples ``[start, start + count)``: :func:`count_hits`, in NumPy.

    The blocks of the range are the lanes of NumPy arrays (``lanes`` at a time), advanced
    one pair of outputs per pass, in place; the samples of the first and last block that
    lie outside the range are taken off afterwards.  The same integers as the compiled
    kernels.
    """
    if count <= 0:
        return 0
    end = start + count
    j0, j1 = start // BLOCK, (end - 1) // BLOCK + 1
    hits = 0
    for c0 in range(j0, j1, lanes):
        c1 = min(c0 + lanes, j1)
        lo = start - c0 * BLOCK if c0 == j0 else 0
        hi = end - (c1 - 1) * BLOCK if c1 == j1 else BLOCK
        hits += _lanes_hits(key, c0, c1, lo, hi)
    return hits


def _lanes_hits(key, c0: int, c1: int, lo: int, hi: int) -> int:
    """Hits of blocks ``c0 .. c1 - 1``, the first from sample ``lo``, the last up to ``hi`` (NumPy)."""
    n = c1 - c0
    j = np.arange(c0, c1, dtype=np.uint64)
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps by design
        s0, s1 = block_state(np.uint64(key), j)
    t, u = np.empty(n, np.uint64), np.empty(n, np.uint64)
    rs = (np.empty(n, np.uint64), np.empty(n, np.uint64))
    w = np.empty(2 * n, np.int32)
    sq, sq1 = np.empty(2 * n, np.int64), np.empty(2 * n, np.int64)
    acc = np.zeros(2 * n, np.int64)  # misses of each lane's low and high words, side by side
    off = 0  # misses of the first and last lane's samples outside [lo, hi)
    for p in range(PAIRS):
        for r, s in zip(rs, (sq, sq1)):
            np.add(s0, s1, out=r)  # xoroshiro128+, as xoro_next
            np.bitwise_xor(s0, s1, out=t)
            np.left_shift(s0, _S24, out=u)
            s0 >>= _S40
            s0 |= u
            s0 ^= t
            np.left_shift(t, _S16, out=u)
            s0 ^= u
            np.left_shift(t, _S37, out=s1)
            t >>= _S27
            s1 |= t
            np.bitwise_or(r.view(np.int32), 1, out=w)  # the words as signed coordinates, as square32
            np.multiply(w, w, out=s, dtype=np.int64)
        sq += sq1
        sq >>= 62  # as miss_of: 1 outside the disc
        acc += sq
        if 2 * p < lo:  # the first block's samples 2p (low words) and 2p + 1 before the range
            off += int(sq[0]) + (int(sq[1]) if 2 * p + 1 < lo else 0)
        if 2 * p + 1 >= hi:
            off += int(sq[-1]) + (int(sq[-2]) if 2 * p >= hi else 0)
    return (hi - lo) + (n - 1) * BLOCK - (int(acc.sum()) - off)


if "numba" in sys.modules:  # numba is loaded anyway: register now, as before
    register_numba()
