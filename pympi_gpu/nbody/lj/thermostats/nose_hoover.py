"""``--thermostat nvt``: a Nose-Hoover chain, as LAMMPS's ``fix nvt temp T T TDAMP`` makes it.

Martyna, Tuckerman and Klein's chain (J. Chem. Phys. 97, 2635, 1992) of ``CHAIN`` thermostats
coupled to the atoms' kinetic energy, integrated as Martyna, Tuckerman, Tobias and Klein (Mol.
Phys. 87, 1117, 1996) and LAMMPS's ``fix nh`` do: a half-step of the chain before the opening kick
and after the closing one, each scaling the velocities by ``exp(-dt/2 eta_dot[0])``, with LAMMPS's
defaults (``tchain 3``, ``tloop 1``, ``drag 0``, the masses kept at ``Q_1 = N_f k T / omega^2``, ``Q_k
= k T / omega^2``, ``omega = 1 / TDAMP``).  A half-step, from the outermost thermostat in and back
out (:func:`half`):

    eta_dot[k] *= exp(-dt/8 eta_dot[k+1]);  eta_dot[k] += G_k dt/4;  eta_dot[k] *= exp(-dt/8 eta_dot[k+1])
        for k = M-1 .. 0, with G_0 = (N_f k T_current - N_f k T) / Q_1
    v *= exp(-dt/2 eta_dot[0]);  T_current *= that factor squared;  eta += dt/2 eta_dot
    eta_dot[0] as above with the new G_0, then for k = 1 .. M-1 G_k = (Q_(k-1) eta_dot[k-1]^2 - k T) / Q_k
        and eta_dot[k] as above

The temperature the step's first half uses is the one its second half left (scaled, not measured
again), as LAMMPS's ``t_current``; the second half measures it, ``sum m v^2 / N_f``.  The conserved
quantity is the total energy plus the chain's (``ecouple``, LAMMPS's ``compute_scalar``):

    N_f k T eta[0] + sum_k k T eta[k] (k > 0) + sum_k Q_k eta_dot[k]^2 / 2

Every operation is LAMMPS's, in its order, so that the thermo agrees with LAMMPS's from the same
state to the round-off that the dynamics amplifies (1e-8 relative after 100 steps is asked; the
tests measure it).  The state (:data:`SIZE` floats, checkpointed): ``T_current``, ``eta``,
``eta_dot`` (``CHAIN + 1``: the last stays 0), ``eta_dotdot``, the masses.
"""

from __future__ import annotations

import math

import numpy as np

from pympi_gpu.nbody.lj.thermostats.style import Setting, Thermostat, jitable

__all__ = ["STYLE", "CHAIN", "SIZE", "half", "begin", "end", "setup", "coupling", "params"]

#: LAMMPS's defaults of ``fix nvt``: ``tchain 3``, ``tloop 1``, ``drag 0``
CHAIN = 3
TLOOP = 1
DRAG = 0.0
#: k_B in LJ units
BOLTZ = 1.0

# params: the target, omega = 1 / TDAMP, N_f, 1 / N_f, dt/2, dt/4, dt/8, 1 / tloop, the drag factor
P_TARGET, P_FREQ, P_DOF, P_TFACTOR, P_DTHALF, P_DT4, P_DT8, P_NCFAC, P_TDRAG = range(9)
# state: T_current, eta, eta_dot (one more, 0), eta_dotdot, the masses
S_TCUR = 0
S_ETA = 1
S_DOT = S_ETA + CHAIN
S_DDOT = S_DOT + CHAIN + 1
S_MASS = S_DDOT + CHAIN
SIZE = S_MASS + CHAIN


def params(setting: Setting) -> np.ndarray:
    """The chain's constants: N_f = 3N - 3 (LAMMPS's ``compute temp``: the momentum fixed), its
    ``tfactor`` 1 / (N_f k), the time step's fractions and LAMMPS's ``tdrag_factor``."""
    dof = 3.0 * setting.atoms - 3.0
    t_freq = 1.0 / setting.tdamp
    dt = setting.dt
    return np.array([setting.temperature, t_freq, dof, 1.0 / (dof * BOLTZ), 0.5 * dt, 0.25 * dt, 0.125 * dt,
                     1.0 / TLOOP, 1.0 - (dt * t_freq * DRAG / TLOOP)])


@jitable
def _masses(p, s):
    """The chain's masses at the target (LAMMPS's ``eta_mass_flag``: kept at the target's, each half-step)."""
    t_target, t_freq = p[P_TARGET], p[P_FREQ]
    s[S_MASS] = p[P_DOF] * BOLTZ * t_target / (t_freq * t_freq)
    for ich in range(1, CHAIN):
        s[S_MASS + ich] = BOLTZ * t_target / (t_freq * t_freq)


@jitable
def half(p, s):
    """A half-step of the chain (LAMMPS's ``nhc_temp_integrate``, one loop): ``s`` updated in place;
    returns the factor the velocities are scaled by."""
    t_target = p[P_TARGET]
    ke_target = p[P_DOF] * BOLTZ * t_target
    kecurrent = p[P_DOF] * BOLTZ * s[S_TCUR]
    _masses(p, s)
    if s[S_MASS] > 0.0:
        s[S_DDOT] = (kecurrent - ke_target) / s[S_MASS]
    else:
        s[S_DDOT] = 0.0
    ncfac, dt8, dt4, tdrag = p[P_NCFAC], p[P_DT8], p[P_DT4], p[P_TDRAG]
    for ich in range(CHAIN - 1, 0, -1):
        expfac = math.exp(-ncfac * dt8 * s[S_DOT + ich + 1])
        s[S_DOT + ich] *= expfac
        s[S_DOT + ich] += s[S_DDOT + ich] * ncfac * dt4
        s[S_DOT + ich] *= tdrag
        s[S_DOT + ich] *= expfac
    expfac = math.exp(-ncfac * dt8 * s[S_DOT + 1])
    s[S_DOT] *= expfac
    s[S_DOT] += s[S_DDOT] * ncfac * dt4
    s[S_DOT] *= tdrag
    s[S_DOT] *= expfac
    factor = math.exp(-ncfac * p[P_DTHALF] * s[S_DOT])
    s[S_TCUR] *= factor * factor  # the velocities' scaling, without measuring them again
    kecurrent = p[P_DOF] * BOLTZ * s[S_TCUR]
    if s[S_MASS] > 0.0:
        s[S_DDOT] = (kecurrent - ke_target) / s[S_MASS]
    else:
        s[S_DDOT] = 0.0
    for ich in range(CHAIN):
        s[S_ETA + ich] += ncfac * p[P_DTHALF] * s[S_DOT + ich]
    s[S_DOT] *= expfac
    s[S_DOT] += s[S_DDOT] * ncfac * dt4
    s[S_DOT] *= expfac
    for ich in range(1, CHAIN):
        expfac = math.exp(-ncfac * dt8 * s[S_DOT + ich + 1])
        s[S_DOT + ich] *= expfac
        s[S_DDOT + ich] = (s[S_MASS + ich - 1] * s[S_DOT + ich - 1] * s[S_DOT + ich - 1]
                           - BOLTZ * t_target) / s[S_MASS + ich]
        s[S_DOT + ich] += s[S_DDOT + ich] * ncfac * dt4
        s[S_DOT + ich] *= expfac
    return factor


@jitable
def begin(p, s):
    """Before the opening kick: a half-step from the temperature the last one left."""
    return half(p, s)


@jitable
def end(p, s, mv2):
    """After the closing kick: the temperature measured (``mv2``: sum m v^2 over every atom), a half-step."""
    s[S_TCUR] = mv2 * p[P_TFACTOR]
    return half(p, s)


def setup(p, s, mv2) -> None:
    """The chain at rest at the start of a run (LAMMPS's ``setup``): the temperature measured, the masses,
    the forces on the outer thermostats."""
    s[:] = 0.0
    s[S_TCUR] = mv2 * p[P_TFACTOR]
    _masses(p, s)
    for ich in range(1, CHAIN):
        s[S_DDOT + ich] = (s[S_MASS + ich - 1] * s[S_DOT + ich - 1] * s[S_DOT + ich - 1]
                           - BOLTZ * p[P_TARGET]) / s[S_MASS + ich]


def coupling(p, s) -> float:
    """The chain's energy, over every atom (LAMMPS's ``FixNH::compute_scalar``, its ``ecouple``)."""
    kt = BOLTZ * p[P_TARGET]
    ke_target = p[P_DOF] * BOLTZ * p[P_TARGET]
    energy = 0.0
    energy += ke_target * s[S_ETA] + 0.5 * s[S_MASS] * s[S_DOT] * s[S_DOT]
    for ich in range(1, CHAIN):
        energy += kt * s[S_ETA + ich] + 0.5 * s[S_MASS + ich] * s[S_DOT + ich] * s[S_DOT + ich]
    return float(energy)


STYLE = Thermostat(
    name="nvt",
    summary="Nose-Hoover chain of 3 (fix nvt temp T T TDAMP)",
    lammps=lambda st: [f"fix 1 all nvt temp {st.temperature!r} {st.temperature!r} {st.tdamp!r}"],
    params=params,
    state_size=SIZE,
    scales=True,
    couples=True,
    positive=True,
    begin=begin,
    end=end,
    setup=setup,
    coupling=coupling,
)
