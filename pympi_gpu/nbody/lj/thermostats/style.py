"""What a thermostat is: its state, its hooks at the integrator's points, how LAMMPS writes it (pure, no numba).

The integrator (velocity Verlet, ``fix nve``) calls a thermostat at three points of a step:

* ``begin(params, state) -> factor``: before the opening kick, the velocities scaled by ``factor``
  (Nose-Hoover's first half-step of its chain);
* ``force(params, key, step, id, vx, vy, vz) -> (fx, fy, fz)``: after the pair forces, before the
  closing kick, a force added to each atom (Langevin's drag and random force, LAMMPS's
  ``post_force``), drawn from the counter-based stream keyed ``key`` at step ``step`` for atom ``id``;
* ``end(params, state, mv2) -> factor``: after the closing kick, ``mv2`` the sum of m v^2 over every
  atom of every rank, the velocities scaled by ``factor`` (the chain's second half-step).

``begin`` and ``end`` update ``state`` (a float64 array of ``state_size``, the thermostat's own
variables, written into checkpoints) in place.  Each hook is a plain Python function of arithmetic,
:mod:`math` and :mod:`~pympi_gpu.rng`, so that one body serves numba's CPU kernels, numba.cuda's and
the host (LAMMPS's fixes, HOOMD-blue's methods).  ``scales`` says that a style has ``begin`` and
``end`` (the engines then take the sum of m v^2 each step: a reduction over the ranks), ``forces``
that it has ``force``; where it has not, the engines never call them.  The hooks, and every function
of a style's module they call, are marked :func:`jitable` (numba's ``register_jitable``, deferred, as
:mod:`~pympi_gpu.rng` marks its functions): importing a style imports no numba.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

__all__ = ["Thermostat", "Setting", "jitable", "register_numba", "no_begin", "no_end", "no_force"]

_JITABLE: list = []
_registered: set = set()


def jitable(fn):
    """Mark ``fn`` callable from numba-compiled code (registered by :func:`register_numba`); returns ``fn``."""
    _JITABLE.append(fn)
    return fn


def register_numba() -> None:
    """Register every function marked :func:`jitable` so far with numba (each once)."""
    from numba.extending import register_jitable

    for fn in _JITABLE:
        if fn not in _registered:
            register_jitable(fn)
            _registered.add(fn)


@jitable
def no_begin(p, s):
    return 1.0


@jitable
def no_end(p, s, mv2):
    return 1.0


@jitable
def no_force(p, key, step, gid, vx, vy, vz):
    return 0.0, 0.0, 0.0


@dataclasses.dataclass(frozen=True)
class Setting:
    """What a run asks of its thermostat: the target temperature, the damping time (LJ time units), the
    time step, the atoms and the seed of the random stream."""

    temperature: float
    tdamp: float
    dt: float
    atoms: int
    seed: int


@dataclasses.dataclass(frozen=True)
class Thermostat:
    """A thermostat: ``name`` as ``--thermostat`` takes it, a one-line ``summary``, its hooks (the module
    docstring), the size of its state, and:

    ``params(setting) -> float64 array``: the constants its hooks read, made once;
    ``setup(params, state, mv2)``: the state at the start of a run (not a restart), ``mv2`` the sum of
    m v^2 then (LAMMPS's ``setup``); ``coupling(params, state) -> float``: the energy it exchanged with
    the atoms, over every atom (LAMMPS's ``ecouple``; ``econserve`` is the total energy plus it);
    ``lammps(setting) -> lines``: the fixes that make the same dynamics in LAMMPS; ``couples``: the
    coupling energy means something (a conserved ``econserve``); ``positive``: the target temperature
    must be above 0.
    """

    name: str
    summary: str
    lammps: Callable[[Setting], list[str]]
    params: Callable[[Setting], np.ndarray] = lambda setting: np.zeros(1)
    state_size: int = 0
    scales: bool = False
    forces: bool = False
    couples: bool = False
    positive: bool = False
    begin: Callable = no_begin
    end: Callable = no_end
    force: Callable = no_force
    setup: Callable[[np.ndarray, np.ndarray, float], None] = lambda p, s, mv2: None
    coupling: Callable[[np.ndarray, np.ndarray], float] = lambda p, s: 0.0
