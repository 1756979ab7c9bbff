"""``pair_style lj/cut``: Lennard-Jones 12-6, cut at ``rc``, not shifted (LAMMPS's, and bench/in.lj's).

    E(r) = 4 epsilon [(sigma/r)^12 - (sigma/r)^6]        for r < rc

With the defaults (epsilon = sigma = 1) and in double precision the term is
computed exactly as the model always has, bit for bit.
"""

from __future__ import annotations

from pympi_gpu.nbody.lj.pairs.style import Coeff, PairStyle

__all__ = ["STYLE", "evaluator"]


def evaluator(epsilon: float, sigma: float, real=float):
    """The pair term ``r2 -> (fpair, energy)`` of LJ 12-6, computed in ``real``."""
    s2 = real(sigma * sigma)
    e48, e24, e4 = real(48.0 * epsilon), real(24.0 * epsilon), real(4.0 * epsilon)
    one = real(1.0)

    def pair(r2):
        r2i = one / r2
        s2i = s2 * r2i
        r6i = s2i * s2i * s2i
        return r6i * (e48 * r6i - e24) * r2i, e4 * r6i * (r6i - one)

    return pair


STYLE = PairStyle(
    name="lj/cut",
    summary="Lennard-Jones 12-6: 4 epsilon [(sigma/r)^12 - (sigma/r)^6], unshifted",
    coeffs=(Coeff("epsilon", 1.0, "depth of the well"), Coeff("sigma", 1.0, "distance where the energy is 0")),
    evaluator=evaluator,
)
