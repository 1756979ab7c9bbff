"""Pair styles of the short-range model: each one file, named as LAMMPS names it, registered here.

A pair style is a :class:`~pympi_gpu.nbody.lj.pairs.style.PairStyle`: its
coefficients and an *evaluator*, a function of the coefficients that returns
the pair term, a scalar function of the squared distance ``r2`` giving
``(fpair, energy)`` (the force on i from j is ``fpair * (x_i - x_j)``).  The
force kernels of the CPU (:mod:`~pympi_gpu.nbody.lj.cpu.kernels`) and of the
GPU (:mod:`~pympi_gpu.nbody.lj.gpu.kernels`) are compiled around the pair
term, and ``--verify``'s direct sum calls the same term (HOOMD-blue's
evaluators, LAMMPS's ``pair_*.cpp``).  Every one of their pair loops, half
lists and full, on the CPU and the GPU, in each precision, takes its body
from :func:`contribution`: the distance, the cutoff, the term, the force's
components, the energy and the virial, written once.

A new style is its module beside these and one line in :data:`MODULES`.
"""

from __future__ import annotations

import functools
import importlib

from pympi_gpu.nbody.lj.pairs.style import Coeff, PairStyle

__all__ = ["MODULES", "styles", "style", "compiled", "contribution", "Coeff", "PairStyle"]

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


@functools.cache
def contribution(pair, real):
    """The body of every pair loop (CPU and GPU, half lists and full, each precision), made once for the
    pair term ``pair`` and the precision's type ``real``: a jitable function
    ``(dx, dy, dz, rc2) -> (inside, fx, fy, fz, energy, virial)`` of a pair's separation ``x_i - x_j``.

    The squared distance and the cutoff test in the separation's type (double: the lists'); within the
    cutoff the term, the force on i (``fpair * (x_i - x_j)``), the energy and the virial ``r2 * fpair``
    in ``real`` (:mod:`~pympi_gpu.nbody.lj.precision`: in double every conversion is none); beyond it
    ``inside`` is False and the rest zeros, which the loops do not add.  The loops add the sums in the
    order they list the pairs, so each is bit for bit the loop it replaced."""
    from numba.extending import register_jitable

    term = compiled(pair)
    zero = real(0.0)

    @register_jitable
    def contribute(dx, dy, dz, rc2):
        r2 = dx * dx + dy * dy + dz * dz
        if r2 < rc2:
            r2r = real(r2)
            fpair, u = term(r2r)
            return True, real(dx) * fpair, real(dy) * fpair, real(dz) * fpair, u, r2r * fpair
        return False, zero, zero, zero, zero, zero

    return contribute
