"""Pair styles of the short-range model: each one file, named as LAMMPS names it, registered here.

A pair style is a :class:`~pympi_gpu.nbody.lj.pairs.style.PairStyle`: its
coefficients and an *evaluator*, a function of the coefficients that returns
the pair term, a scalar function of the squared distance ``r2`` giving
``(fpair, energy)`` (the force on i from j is ``fpair * (x_i - x_j)``).  The
force kernels of the CPU (:mod:`~pympi_gpu.nbody.lj.cpu.kernels`) and of the
GPU (:mod:`~pympi_gpu.nbody.lj.gpu.kernels`) are compiled around the pair
term by one factory each, and ``--verify``'s direct sum calls the same term
(HOOMD-blue's evaluators, LAMMPS's ``pair_*.cpp``).

A new style is its module beside these and one line in :data:`MODULES`.
"""

from __future__ import annotations

import functools
import importlib

from pympi_gpu.nbody.lj.pairs.style import Coeff, PairStyle

__all__ = ["MODULES", "styles", "style", "compiled", "Coeff", "PairStyle"]

#: the modules of the pair styles, each defining ``STYLE``: a new style is one line here
MODULES = (
    "pympi_gpu.nbody.lj.pairs.lj_cut",
    "pympi_gpu.nbody.lj.pairs.morse",
)


@functools.cache
def styles() -> dict[str, PairStyle]:
    """Every registered style by its name (the modules are imported on first use)."""
    found = [importlib.import_module(m).STYLE for m in MODULES]
    return {s.name: s for s in found}


def style(name: str) -> PairStyle:
    """The style called ``name``; ValueError naming the known ones if there is none."""
    known = styles()
    if name not in known:
        raise ValueError(f"unknown pair style {name!r} (known: {', '.join(known)})")
    return known[name]


@functools.cache
def compiled(pair):
    """The pair term ``pair`` (:meth:`PairStyle.pair`) made callable from numba-compiled code, the CPU's
    kernels and the CUDA ones alike (registered once; numba is imported here, not with this package)."""
    from numba.extending import register_jitable

    return register_jitable(pair)
