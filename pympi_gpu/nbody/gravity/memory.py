"""How much host memory a run needs, so that a run too large is refused before it allocates.

Per body a rank holds its state (positions, velocities, accelerations, mass:
10 values in the run's precision), the ring exchange's two travelling blocks
(x, y, z, m twice: 8 values) and, while the initial conditions are made, the
float64 positions, velocities and mass (7 values).  The estimate is a floor:
numba's and MPI's own buffers come on top.
"""

from __future__ import annotations

from pympi_gpu.nbody.memory import available_bytes, human_bytes

__all__ = ["bytes_per_body", "need_bytes", "available_bytes", "human_bytes", "too_large"]

_ITEMSIZE = {"fp32": 4, "fp64": 8}


def bytes_per_body(precision: str) -> int:
    """Host bytes one body costs its rank (see the module's docstring)."""
    return (10 + 8) * _ITEMSIZE[precision] + 7 * 8


def need_bytes(bodies: int, precision: str, ranks: int = 1) -> int:
    """Bytes one rank needs for its block of ``bodies`` spread over ``ranks``."""
    per_rank = -(-bodies // ranks)
    return per_rank * bytes_per_body(precision)


def too_large(bodies: int, precision: str, ranks: int, ranks_on_node: int,
              available: int | None = None) -> str | None:
    """Why ``bodies`` do not fit in this node's memory (None if they do, or if unknown).

    ``ranks_on_node`` ranks share this node's ``available`` bytes (default: its
    MemAvailable).
    """
    available = available_bytes() if available is None else available
    if available is None:
        return None
    per_rank = need_bytes(bodies, precision, ranks)
    node = per_rank * ranks_on_node
    if node <= available:
        return None
    return (f"{bodies:,} bodies ({precision}) need about {human_bytes(node)} of memory on this node "
            f"({ranks_on_node} rank(s) x {human_bytes(per_rank)}, {bytes_per_body(precision)} bytes a body), "
            f"but it has {human_bytes(available)} available: use fewer bodies or more nodes")
