"""A node's host memory as both models' size checks read it: what is available, and bytes as people read them."""

from __future__ import annotations

__all__ = ["available_bytes", "human_bytes"]


def available_bytes(meminfo: str = "/proc/meminfo") -> int | None:
    """MemAvailable of this node in bytes, or None where the OS does not say."""
    try:
        with open(meminfo, encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def human_bytes(n: float) -> str:
    """``1.5 GB`` style (powers of 1000, as memory is sold)."""
    for factor, unit in ((1e15, "PB"), (1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if n >= factor:
            return f"{n / factor:.3g} {unit}"
    return f"{int(n)} B"
