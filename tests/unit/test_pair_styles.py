"""Pair styles (``--pair``): every registered style, checked the same way, in one process.

Each test here runs over every style of the registry
(:data:`pympi_gpu.nbody.lj.pairs.MODULES`), so a new style is checked by its
registry line: its force is minus the slope of its energy, its coefficients are
checked, and LJ's defaults are the historical term bit for bit; the reader of
LAMMPS's log refuses an unfinished one.  Run as users run them:
tests/cli/test_pair_styles_cli.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from helpers.pair_styles import STYLES, scaled
from pympi_gpu.nbody.lj import pairs
from pympi_gpu.nbody.lj.config import LjConfig


def test_the_registry_knows_its_styles():
    assert "lj/cut" in pairs.styles() and len(STYLES) == len(pairs.MODULES)
    with pytest.raises(ValueError, match="unknown pair style 'no-such'"):
        pairs.style("no-such")


@pytest.mark.parametrize("name", STYLES)
def test_force_is_minus_the_energy_slope(name):
    """fpair * r = -dE/dr, by a central difference of the energy, between 0.9 and 2.5 (any style's contract)."""
    style = pairs.style(name)
    pair = style.pair(scaled(name))
    for r in np.linspace(0.9, 2.5, 33):
        h = 1e-6 * r
        slope = (pair((r + h) ** 2)[1] - pair((r - h) ** 2)[1]) / (2 * h)
        fpair, _ = pair(r * r)
        assert fpair * r == pytest.approx(-slope, rel=1e-6, abs=1e-8), (name, r)


@pytest.mark.parametrize("name", STYLES)
def test_coefficients_are_checked(name):
    style = pairs.style(name)
    with pytest.raises(ValueError, match="has no coefficient no_such"):
        style.values({"no_such": 1.0})
    first = style.coeffs[0].name
    with pytest.raises(ValueError, match=f"{first} must be > 0"):
        style.values({first: 0.0})
    assert style.pair(scaled(name)) is style.pair(scaled(name))  # the same term: its kernels compile once
    line_style, line_coeff = style.lammps(scaled(name), 2.5)
    assert line_style == f"pair_style {name} 2.5" and len(line_coeff.split()) == 3 + len(style.coeffs)


def test_lj_defaults_are_the_historical_term_bit_for_bit():
    pair = LjConfig(cells=1).pair_term
    for r2 in np.linspace(0.8, 6.25, 101):
        r2i = 1.0 / r2
        r6i = r2i * r2i * r2i
        assert pair(r2) == (r6i * (48.0 * r6i - 24.0) * r2i, 4.0 * r6i * (r6i - 1.0))


# -- against LAMMPS ---------------------------------------------------------------------------------------


def test_lammps_log_reader_refuses_an_unfinished_log():
    from pympi_gpu.nbody.lj.lammps import read_log

    with pytest.raises(ValueError, match="no finished run"):
        read_log("LAMMPS (22 Jul 2025)\nStep Temp\n0 1.44\n")
