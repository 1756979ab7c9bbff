"""``pair_style morse``: the Morse potential, cut at ``rc``, not shifted (LAMMPS's ``pair_style morse``).

    E(r) = D0 [exp(-2 alpha (r - r0)) - 2 exp(-alpha (r - r0))]     for r < rc

with the force ``F(r) = 2 alpha D0 [exp(-2 alpha (r - r0)) - exp(-alpha (r - r0))]``
along the pair, as LAMMPS's ``PairMorse::compute`` writes it.  The defaults
put the minimum where LJ 12-6's is (r0 = 2^(1/6)) with a curvature near LJ's
there (alpha r0 = 6).
"""

from __future__ import annotations

import math

from pympi_gpu.nbody.lj.pairs.style import Coeff, PairStyle

__all__ = ["STYLE", "evaluator"]


def evaluator(d0: float, alpha: float, r0: float, real=float):
    """The pair term ``r2 -> (fpair, energy)`` of the Morse potential, computed in ``real``."""
    morse1 = real(2.0 * d0 * alpha)
    d0, alpha, r0, two = real(d0), real(alpha), real(r0), real(2.0)

    def pair(r2):
        r = math.sqrt(r2)
        dexp = math.exp(-alpha * (r - r0))
        return morse1 * (dexp * dexp - dexp) / r, d0 * (dexp * dexp - two * dexp)

    return pair


STYLE = PairStyle(
    name="morse",
    summary="Morse: D0 [exp(-2 alpha (r - r0)) - 2 exp(-alpha (r - r0))], unshifted",
    coeffs=(Coeff("d0", 1.0, "depth of the well"), Coeff("alpha", 5.345, "stiffness (1/distance)"),
            Coeff("r0", 1.122462048309373, "distance of the minimum")),
    evaluator=evaluator,
)
