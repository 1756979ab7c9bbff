"""Initial conditions: body ``i`` depends only on ``(seed, i)``, whatever the rank count.

Every body draws its random numbers from the counter-based stream of
:mod:`pympi_gpu.rng` at counters ``i * DRAWS + j``, so a rank generates exactly
its own block, and the bodies are the same for any decomposition.

Units are Hénon's N-body units (G = 1, total mass 1, total energy -1/4 for
the Plummer sphere); every body has mass ``1 / N``.
"""

from __future__ import annotations

import math

import numpy as np

from pympi_gpu.rng import seed_key, uniform

__all__ = ["INITS", "DRAWS", "generate"]

INITS = ("plummer", "uniform")
#: random numbers reserved per body: 3 for the position, 2 for the velocity
#: direction, and TRIES pairs for the rejection sampling of the speed.
TRIES = 32
DRAWS = 5 + 2 * TRIES
_STREAM = {"plummer": 1, "uniform": 2}
_CHUNK = 1 << 14
#: the Plummer sphere is cut at 99.9% of its mass (r < ~22 scale radii), as
#: Aarseth, Hénon & Wielen (1974) do, so no body starts absurdly far out.
_MASS_CUT = 0.999
_HENON = 3.0 * math.pi / 16.0  # Plummer scale radius in Hénon units


def _draws(key: np.uint64, first: int, count: int) -> np.ndarray:
    """The (count, DRAWS) float64 uniforms of bodies [first, first + count)."""
    i = np.arange(first, first + count, dtype=np.uint64)[:, None]
    j = np.arange(DRAWS, dtype=np.uint64)[None, :]
    with np.errstate(over="ignore"):
        return uniform(np.uint64(key), i * np.uint64(DRAWS) + j)


def _isotropic(radius: np.ndarray, u: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Vectors of length ``radius`` in directions uniform on the sphere, shape (3, n)."""
    cos_t = 2.0 * u - 1.0
    sin_t = np.sqrt(np.maximum(0.0, 1.0 - cos_t * cos_t))
    phi = 2.0 * math.pi * w
    return radius * np.stack((sin_t * np.cos(phi), sin_t * np.sin(phi), cos_t))


def _plummer(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # Radius from the cumulative mass m(r) = r^3 / (1 + r^2)^(3/2) (scale radius 1).
    mfrac = np.maximum(d[:, 0] * _MASS_CUT, 1e-300)
    r = 1.0 / np.sqrt(mfrac ** (-2.0 / 3.0) - 1.0)
    pos = _isotropic(r, d[:, 1], d[:, 2])
    # Speed q * v_escape with q ~ q^2 (1 - q^2)^(7/2) by von Neumann rejection
    # (max of that density < 0.1); the first accepted try wins, and after TRIES
    # refusals (probability ~1e-10) the last candidate is taken.
    q = d[:, 5::2]
    g = 0.1 * d[:, 6::2]
    ok = g < q * q * (1.0 - q * q) ** 3.5
    first = np.where(ok.any(axis=1), ok.argmax(axis=1), TRIES - 1)
    qq = q[np.arange(len(q)), first]
    speed = qq * math.sqrt(2.0) * (1.0 + r * r) ** -0.25
    vel = _isotropic(speed, d[:, 3], d[:, 4])
    return pos * _HENON, vel / math.sqrt(_HENON)


def _uniform(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A cold homogeneous ball of radius 1 (collapses in t_ff = pi / 2^(3/2) ~ 1.11)."""
    r = np.cbrt(d[:, 0])
    return _isotropic(r, d[:, 1], d[:, 2]), np.zeros((3, len(d)))


def generate(init: str, seed: int, n: int, start: int, count: int):
    """Bodies ``[start, start + count)`` of an ``n``-body system.

    Parameters
    ----------
    init : {"plummer", "uniform"}
    seed : int
    n : int, total number of bodies (sets the masses, 1/n each)
    start, count : int, the block wanted

    Returns
    -------
    pos, vel : (3, count) float64 arrays (length, length/time units)
    mass : (count,) float64 array
    """
    if init not in _STREAM:
        raise ValueError(f"unknown initial conditions {init!r} (choose from {', '.join(INITS)})")
    if not (0 <= start and count >= 0 and start + count <= n):
        raise ValueError(f"block [{start}, {start + count}) is not inside [0, {n})")
    key = seed_key(seed, _STREAM[init])
    make = _plummer if init == "plummer" else _uniform
    pos = np.empty((3, count))
    vel = np.empty((3, count))
    for lo in range(0, count, _CHUNK):
        hi = min(lo + _CHUNK, count)
        pos[:, lo:hi], vel[:, lo:hi] = make(_draws(key, start + lo, hi - lo))
    return pos, vel, np.full(count, 1.0 / n)
