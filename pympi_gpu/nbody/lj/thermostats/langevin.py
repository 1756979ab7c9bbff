"""``--thermostat langevin``: LAMMPS's ``fix langevin T T DAMP SEED`` with ``fix nve``.

After the pair forces each atom feels a drag and a random force (Schneider and Stoll, Phys. Rev.
B 17, 1302, 1978; LAMMPS's ``fix langevin``, its defaults: no ``zero``, ``tally``, ``gjf`` or
``omega``), then velocity Verlet goes on as ``fix nve``:

    f += -m / DAMP v  +  sqrt(24 k T m / (DAMP dt)) (u - 1/2),   u uniform on [0, 1) per component

whose variance, ``2 k T m / (DAMP dt)``, is the fluctuation-dissipation theorem's for a drag of
``m / DAMP`` over a step ``dt`` (LAMMPS draws uniform numbers by default, as here).  The numbers
come from the project's counter-based stream (:mod:`~pympi_gpu.rng`, SplitMix64), not from a
stream per rank as LAMMPS's: component ``c`` of atom ``id`` at step ``s`` is value ``3 (id - 1) + c``
of the stream keyed by value ``s`` of the run's Langevin stream (``--seed``).  So an atom's kicks do
not depend on which rank holds it or on how the run was cut by restarts: the same at any rank
count, and a restart continues bit for bit.  LAMMPS's stream differs, so the two codes agree in
their statistics (the mean temperature), not step by step.  The forces are added at the start of
a run too, as LAMMPS's ``setup`` does (at step 0's stream).  No state but the step.
"""

from __future__ import annotations

import math

import numpy as np

from pympi_gpu import rng
from pympi_gpu.nbody.lj.thermostats.style import Setting, Thermostat, jitable

__all__ = ["STYLE", "STREAM", "params", "force"]

#: the stream of ``--seed`` the kicks are drawn from (the velocities draw from NumPy's PCG64)
STREAM = 0x1A6E
#: k_B in LJ units; the masses (1), and LAMMPS's unit conversions (1 in LJ units)
BOLTZ = 1.0
MASS = 1.0
# params: the drag factor -m / DAMP, the random force's scale sqrt(24 k T m / (DAMP dt))
P_DRAG, P_SCALE = range(2)
_3 = np.uint64(3)
_HALF = 0.5


def params(setting: Setting) -> np.ndarray:
    """The drag factor and the random force's scale, as LAMMPS's ``gfactor1`` and ``gfactor2 * tsqrt``."""
    gfactor1 = -MASS / setting.tdamp / 1.0
    gfactor2 = math.sqrt(MASS) * math.sqrt(24.0 * BOLTZ / setting.tdamp / setting.dt / 1.0) / 1.0
    return np.array([gfactor1, gfactor2 * math.sqrt(setting.temperature)])


@jitable
def force(p, key, step, gid, vx, vy, vz):
    """Atom ``gid``'s drag and random force at step ``step`` (``key``: the run's Langevin stream)."""
    k = rng.bits(key, np.uint64(step))
    c = np.uint64(gid - 1) * _3
    g1, g2 = p[P_DRAG], p[P_SCALE]
    fx = g1 * vx + g2 * (rng.uniform(k, c) - _HALF)
    fy = g1 * vy + g2 * (rng.uniform(k, c + np.uint64(1)) - _HALF)
    fz = g1 * vz + g2 * (rng.uniform(k, c + np.uint64(2)) - _HALF)
    return fx, fy, fz


STYLE = Thermostat(
    name="langevin",
    summary="Langevin drag and uniform random forces, then fix nve (fix langevin T T DAMP SEED)",
    lammps=lambda st: ["fix 1 all nve", f"fix 2 all langevin {st.temperature!r} {st.temperature!r} {st.tdamp!r} "
                                        f"{st.seed}"],
    params=params,
    forces=True,
    force=force,
)
