"""The pair styles as the tests take them: every registered one, each with its energy scale moved."""

from __future__ import annotations

from pympi_gpu.nbody.lj import pairs

STYLES = sorted(pairs.styles())


def scaled(name: str) -> dict[str, float]:
    """The style's coefficients with its energy scale (the first) at 1.2 times its default."""
    first = pairs.style(name).coeffs[0]
    return {first.name: 1.2 * first.default}
