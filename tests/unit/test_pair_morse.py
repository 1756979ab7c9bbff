"""``--pair morse``: the term is LAMMPS's ``PairMorse`` (the registry's tests run it like every style)."""

from __future__ import annotations

import math

import pytest

from pympi_gpu.nbody.lj import pairs


def test_morse_is_lammps_formula():
    """E = D0 [exp(-2a(r - r0)) - 2 exp(-a(r - r0))]: the minimum -D0 at r0 with no force, zero energy where
    exp(-a(r - r0)) = 2, and LAMMPS's pair_coeff order D0 alpha r0."""
    style = pairs.style("morse")
    coeffs = {"d0": 2.0, "alpha": 3.0, "r0": 1.5}
    pair = style.pair(coeffs)
    assert pair(1.5 ** 2) == (0.0, -2.0)
    r = 1.5 - math.log(2.0) / 3.0
    assert pair(r * r)[1] == pytest.approx(0.0, abs=1e-15)
    dexp = math.exp(-3.0 * (2.0 - 1.5))
    assert pair(4.0) == (2.0 * 2.0 * 3.0 * (dexp * dexp - dexp) / 2.0, 2.0 * (dexp * dexp - 2.0 * dexp))
    assert style.lammps(coeffs, 2.5) == ("pair_style morse 2.5", "pair_coeff * * 2.0 3.0 1.5")
