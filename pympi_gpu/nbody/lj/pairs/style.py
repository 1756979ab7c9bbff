"""What a pair style is: its coefficients, its pair term, and how LAMMPS writes it (pure, no numba).

The pair term is made by the style's ``evaluator(real=..., **coefficients)``: a plain
Python function of ``r2`` that returns ``(fpair, energy)``, using only
arithmetic and :mod:`math`, so that numba compiles it into the CPU kernels
and numba.cuda into the GPU kernels, the coefficients folded in as
constants.  ``real`` is the NumPy scalar type the term computes in
(:mod:`~pympi_gpu.nbody.lj.precision`: ``np.float64``, or ``np.float32`` for
``--precision mixed``): every constant of the term is made one of it
(``real(4.0 * epsilon)``, ``real(1.0)``, never a bare literal, which numba
types as a double), so that the kernels, which hand it ``r2`` in that type,
compute it in that type.  :meth:`PairStyle.pair` returns the same function
object for the same coefficients and precision, so each set of kernels is
compiled (or found in numba's cache, which keys closures by their contents)
once; the term carries its precision's name (``pair.precision``), which the
kernels read.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping

from pympi_gpu.nbody.lj.precision import DEFAULT
from pympi_gpu.nbody.lj.precision import precision as _precision

__all__ = ["Coeff", "PairStyle"]


@dataclasses.dataclass(frozen=True)
class Coeff:
    """One coefficient of a pair style: its name (as ``--pair-coeff NAME=VALUE`` takes it), default and meaning."""

    name: str
    default: float
    help: str
    positive: bool = True


@dataclasses.dataclass(frozen=True)
class PairStyle:
    """A pair style: ``name`` as LAMMPS's ``pair_style``, its coefficients in LAMMPS's ``pair_coeff`` order.

    ``evaluator(real=..., **coefficients)`` returns the pair term (see the module
    docstring); ``summary`` is one line for ``--help``.
    """

    name: str
    summary: str
    coeffs: tuple[Coeff, ...]
    evaluator: Callable[..., Callable[[float], tuple[float, float]]]

    def values(self, given: Mapping[str, float] | None = None) -> dict[str, float]:
        """The coefficients, the defaults overridden by ``given``; ValueError for a name or value it cannot take."""
        given = dict(given or {})
        names = [c.name for c in self.coeffs]
        unknown = sorted(set(given) - set(names))
        if unknown:
            raise ValueError(f"pair style {self.name} has no coefficient {', '.join(unknown)} "
                             f"(its coefficients: {', '.join(names)})")
        out = {}
        for c in self.coeffs:
            v = float(given.get(c.name, c.default))
            if not math.isfinite(v) or (c.positive and v <= 0):
                raise ValueError(f"pair style {self.name}: {c.name} must be {'> 0' if c.positive else 'finite'}, "
                                 f"not {v!r}")
            out[c.name] = v
        return out

    def pair(self, coefficients: Mapping[str, float], precision: str = DEFAULT):
        """The pair term for these coefficients in ``precision`` (a name of
        :data:`~pympi_gpu.nbody.lj.precision.PRECISIONS`; the same object for the same values)."""
        return _pair(self, tuple(self.values(coefficients).items()), _precision(precision).name)

    def lammps(self, coefficients: Mapping[str, float], cutoff: float) -> tuple[str, str]:
        """LAMMPS's ``pair_style`` and ``pair_coeff`` lines for one atom type."""
        values = self.values(coefficients)
        return (f"pair_style {self.name} {cutoff!r}",
                "pair_coeff * * " + " ".join(repr(values[c.name]) for c in self.coeffs))

    def describe(self, coefficients: Mapping[str, float]) -> str:
        """``lj/cut (epsilon 1, sigma 1)``: the style and its coefficients, for titles."""
        values = self.values(coefficients)
        return f"{self.name} (" + ", ".join(f"{k} {v:g}" for k, v in values.items()) + ")"


@functools.cache
def _pair(style: PairStyle, items: tuple[tuple[str, float], ...], precision: str):
    term = style.evaluator(real=_precision(precision).real, **dict(items))
    term.precision = precision  # what the kernels compile it for
    return term
