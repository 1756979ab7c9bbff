"""The floating-point precisions of the LJ model, by their ``--precision`` names (pure, no numba).

``fp64``: everything in double precision, the model's bit-for-bit reference.
``mixed``: each pair's force and energy in single precision (the pair term's
arithmetic, the force components it adds, a list row's sums), everything else
in double: positions, velocities, forces as stored, the integrator, the lists'
distances and cutoff test, and the sums over a rank's atoms that make the
thermo (as GROMACS's and OpenMM's mixed precision).  A precision is one name
here; the pair term is made in its type by the pair style
(:meth:`~pympi_gpu.nbody.lj.pairs.style.PairStyle.pair`), and the force kernels
of the CPU and the GPU are compiled from the same code for each
(:func:`~pympi_gpu.nbody.lj.cpu.kernels.force_kernels`,
:func:`~pympi_gpu.nbody.lj.gpu.kernels.force_kernels`).

Its own module so that the pair styles, the kernels and the command line all
read it, and none of them imports another for it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["Precision", "PRECISIONS", "DEFAULT", "precision"]


@dataclasses.dataclass(frozen=True)
class Precision:
    """A precision of the LJ model: its name, the NumPy scalar type a pair's force and energy are computed
    in (``real``), ``--verify``'s bounds on the force error and on the momentum's change per atom it can
    meet (:mod:`~pympi_gpu.nbody.lj.verify`), and one line for ``--help``."""

    name: str
    real: type
    force_bound: float
    momentum_bound: float
    summary: str


#: ``--precision`` name -> :class:`Precision`
PRECISIONS = {
    "fp64": Precision("fp64", np.float64, 1e-12, 1e-12, "double precision throughout"),
    # single precision's unit roundoff is 6e-8: a row's force sums some 50 terms of it, and a half list's
    # reactions (each added in double) no longer cancel its row's sum (rounded in single) exactly
    "mixed": Precision("mixed", np.float32, 1e-5, 1e-5, "pair forces and energies in single precision, positions, "
                                                  "velocities, the integrator and the thermo sums in double"),
}
#: the precision of a run that names none, and of a checkpoint written before precisions
DEFAULT = "fp64"


def precision(name: str) -> Precision:
    """The precision called ``name``; ValueError naming the known ones if there is none."""
    if name not in PRECISIONS:
        raise ValueError(f"unknown precision {name!r} (known: {', '.join(PRECISIONS)})")
    return PRECISIONS[name]
