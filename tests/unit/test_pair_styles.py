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


# -- precisions ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", STYLES)
def test_each_style_computes_in_the_precision_it_is_made_for(name):
    """A style's term made for ``mixed`` computes in single precision where numba compiles it (a bare
    literal in its code, a double to numba, would make it double: the returned types say), within single
    precision's rounding of the double term; it names its precision for the kernels."""
    from numba import float32, float64, njit

    style = pairs.style(name)
    coeffs = scaled(name)
    single, double = style.pair(coeffs, "mixed"), style.pair(coeffs)
    assert (single.precision, double.precision) == ("mixed", "fp64") and single is not double
    assert style.pair(coeffs, "mixed") is single
    call32 = njit(lambda r2, f=pairs.compiled(single): f(r2))
    call64 = njit(lambda r2, f=pairs.compiled(double): f(r2))
    r2s = np.linspace(0.9, 2.5, 65) ** 2
    out32 = [call32(np.float32(r2)) for r2 in r2s]
    out64 = [call64(r2) for r2 in r2s]
    assert call32.nopython_signatures[0].return_type.dtype == float32
    assert call64.nopython_signatures[0].return_type.dtype == float64
    for k in (0, 1):  # fpair, energy: within a few roundings of the term's largest
        a, b = np.array([o[k] for o in out32], np.float64), np.array([o[k] for o in out64])
        assert np.all(np.abs(a - b) <= 4e-7 * np.abs(b).max()), (name, k)


def test_precisions_are_named_once():
    from pympi_gpu.nbody.lj.precision import DEFAULT, PRECISIONS, precision

    assert DEFAULT == "fp64" and list(PRECISIONS) == ["fp64", "mixed"]
    assert precision("mixed").real is np.float32 and precision("fp64").real is np.float64
    with pytest.raises(ValueError, match="unknown precision 'fp32' \\(known: fp64, mixed\\)"):
        precision("fp32")
    with pytest.raises(ValueError, match="unknown precision"):
        pairs.style("lj/cut").pair({}, "half")
    assert LjConfig(cells=1, precision="mixed").reference_term is LjConfig(cells=1).pair_term
