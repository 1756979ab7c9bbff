"""The random streams as their authors published them, in plain Python ints (slow, obviously right).

Vigna's SplitMix64 and Blackman & Vigna's xoroshiro128+ 1.0, and pi's Monte Carlo stream built from
them as ``pympi_gpu.rng`` defines it; tests/unit/test_rng.py checks them against the published
known-answer vectors, and the package's kernels against them.
"""

from pympi_gpu.rng import BLOCK

MASK = (1 << 64) - 1


def splitmix64_stream(state, count):
    """The sequential SplitMix64 generator (Vigna's reference), in plain Python ints."""
    out = []
    for _ in range(count):
        state = (state + 0x9E3779B97F4A7C15) & MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        out.append(z ^ (z >> 31))
    return out


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & MASK


def xoroshiro128plus(s0, s1, count):
    """xoroshiro128+ 1.0 (a=24, b=16, c=37), Blackman & Vigna's reference, in plain Python ints."""
    out = []
    for _ in range(count):
        out.append((s0 + s1) & MASK)
        s1 ^= s0
        s0 = rotl(s0, 24) ^ s1 ^ ((s1 << 16) & MASK)
        s1 = rotl(s1, 37)
    return out


def coordinate(word):
    """The signed odd coordinate A of a 32-bit word: the word with its low bit set, two's complement."""
    a = (word & 0xFFFFFFFF) | 1
    return a - (1 << 32) if a >= 1 << 31 else a


def reference_hits(key, start, count):
    """Hits among samples [start, start + count), from the published algorithms (slow, plain ints).

    Block j: xoroshiro128+ seeded with SplitMix64's outputs 2j and 2j+1 of the key; its
    outputs 2p, 2p+1 give samples 2p (low words) and 2p+1 (high words); a hit is
    A**2 + B**2 < 2**62 with A, B the signed odd coordinates.
    """
    hits, k, end = 0, start, start + count
    while k < end:
        j = k // BLOCK
        s0, s1 = splitmix64_stream((int(key) + 2 * j * 0x9E3779B97F4A7C15) & MASK, 2)
        r = xoroshiro128plus(s0, s1, BLOCK)
        for i in range(k - j * BLOCK, min(end - j * BLOCK, BLOCK)):
            p, half = divmod(i, 2)
            a, b = coordinate(r[2 * p] >> (32 * half)), coordinate(r[2 * p + 1] >> (32 * half))
            hits += a * a + b * b < 1 << 62
        k = (j + 1) * BLOCK
    return hits
