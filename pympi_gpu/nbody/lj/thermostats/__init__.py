"""Thermostats of the short-range model (``--thermostat``): each one file, named as ``--thermostat`` takes it.

A thermostat is a :class:`~pympi_gpu.nbody.lj.thermostats.style.Thermostat`: its state and its hooks
at the integrator's three points (the step's start, after the forces, the step's end), each a
plain function of arithmetic that numba compiles into the CPU's steps and numba.cuda into the GPU's
kernels (LAMMPS's fixes, HOOMD-blue's integration methods).  The engines call the hooks of the run's
thermostat by its number in the registry (:func:`hooks`: one compiled call for every style), and
:class:`Bath` holds what a run's thermostat needs: its constants, its state, its random stream.

A new thermostat is its module beside these and one line in :data:`MODULES`.
"""

from __future__ import annotations

import functools
import importlib
from typing import NamedTuple

import numpy as np

from pympi_gpu.nbody.lj.thermostats import style as _style
from pympi_gpu.nbody.lj.thermostats.style import Setting, Thermostat

__all__ = ["MODULES", "DEFAULT", "styles", "style", "code", "hooks", "modules", "Hooks", "Bath", "Setting", "Thermostat",
           "default_tdamp"]

#: the modules of the thermostats, each defining ``STYLE``: a new thermostat is one line here
MODULES = (
    "pympi_gpu.nbody.lj.thermostats.nve",
    "pympi_gpu.nbody.lj.thermostats.nose_hoover",
    "pympi_gpu.nbody.lj.thermostats.langevin",
)
#: the default (no thermostat)
DEFAULT = "nve"
#: ``--tdamp``'s default, in time steps (LAMMPS's documentation advises about 100)
TDAMP_STEPS = 100


def default_tdamp(dt: float) -> float:
    """The damping time when none is given: :data:`TDAMP_STEPS` time steps."""
    return TDAMP_STEPS * dt


@functools.cache
def styles() -> dict[str, Thermostat]:
    """Every registered thermostat by its name, in registry order (the modules imported on first use)."""
    found = [importlib.import_module(m).STYLE for m in MODULES]
    return {s.name: s for s in found}


def modules() -> list:
    """This package's modules whose code the compiled hooks hold (a cache key's part: ``jitcache.sources``)."""
    import sys

    return [sys.modules[__name__], _style, *(importlib.import_module(m) for m in MODULES)]


def style(name: str) -> Thermostat:
    """The thermostat called ``name``; ValueError naming the known ones if there is none."""
    known = styles()
    if name not in known:
        raise ValueError(f"unknown thermostat {name!r} (known: {', '.join(known)})")
    return known[name]


def code(name: str) -> int:
    """The thermostat's number, which the compiled hooks dispatch on (its place in :data:`MODULES`)."""
    return list(styles()).index(name)


class Hooks(NamedTuple):
    """The hooks of every registered thermostat, each dispatching on the style's number (:func:`code`) as
    its first argument: ``begin(kind, params, state)``, ``end(kind, params, state, mv2)``, ``force(kind,
    params, key, step, id, vx, vy, vz)`` (see :mod:`~pympi_gpu.nbody.lj.thermostats.style`)."""

    begin: object
    end: object
    force: object


@functools.cache
def hooks() -> Hooks:
    """:class:`Hooks` callable from numba-compiled code (registered once; numba is imported here, not with
    this package): one compiled program serves every thermostat, the run's chosen by its number."""
    from numba.extending import register_jitable

    from pympi_gpu import rng

    rng.register_numba()
    found = list(styles().values())
    _style.register_numba()  # every style's hooks and what they call
    begin = end = force = None
    for kind in reversed(range(len(found))):
        s = found[kind]
        begin = _begin(kind, s.begin, begin, register_jitable)
        end = _end(kind, s.end, end, register_jitable)
        force = _force(kind, s.force, force, register_jitable)
    return Hooks(begin, end, force)


def _begin(kind, fn, rest, jit):
    if rest is None:
        return jit(lambda k, p, s: fn(p, s))

    def begin(k, p, s):
        if k == kind:
            return fn(p, s)
        return rest(k, p, s)

    return jit(begin)


def _end(kind, fn, rest, jit):
    if rest is None:
        return jit(lambda k, p, s, mv2: fn(p, s, mv2))

    def end(k, p, s, mv2):
        if k == kind:
            return fn(p, s, mv2)
        return rest(k, p, s, mv2)

    return jit(end)


def _force(kind, fn, rest, jit):
    if rest is None:
        return jit(lambda k, p, key, step, gid, vx, vy, vz: fn(p, key, step, gid, vx, vy, vz))

    def force(k, p, key, step, gid, vx, vy, vz):
        if k == kind:
            return fn(p, key, step, gid, vx, vy, vz)
        return rest(k, p, key, step, gid, vx, vy, vz)

    return jit(force)


class Bath:
    """A run's thermostat as the engines take it (the same on every rank): the style and its number
    (``kind``), its constants (``params``), its state (``state``, a checkpoint's where restarted), the
    key of its random stream (``key``), and two scratch arrays the compiled steps share: ``at``, the
    step whose forces are being made, and ``mv2``, [this rank's sum of m v^2, every rank's]."""

    def __init__(self, name: str, setting: Setting, state=None):
        from pympi_gpu import rng
        from pympi_gpu.nbody.lj.thermostats import langevin

        self.style = style(name)
        self.kind = code(name)
        self.setting = setting
        self.params = np.ascontiguousarray(self.style.params(setting), np.float64)
        self.state = np.zeros(max(self.style.state_size, 1))
        self.restored = state is not None
        if state is not None:
            if len(state) != self.style.state_size:
                raise ValueError(f"a {name} thermostat's state holds {self.style.state_size} numbers, not "
                                 f"{len(state)}")
            self.state[:self.style.state_size] = state
        self.key = rng.seed_key(setting.seed, langevin.STREAM)
        self.at = np.zeros(1, np.int64)
        self.mv2 = np.zeros(2)

    @property
    def active(self) -> bool:
        """Does the thermostat act at all (not ``nve``)?"""
        return self.style.scales or self.style.forces

    def setup(self, mv2: float) -> None:
        """The state at the start of a run from ``mv2`` (every atom's sum of m v^2), unless a checkpoint gave it."""
        if not self.restored:
            self.style.setup(self.params, self.state, mv2)

    def saved(self, state=None) -> list[float]:
        """The state (``state``: a copy of it, a device's) as a checkpoint records it (exact: JSON writes a
        float's shortest round trip)."""
        return [float(x) for x in (self.state if state is None else state)[:self.style.state_size]]

    def coupling(self, state=None) -> float:
        """The energy the thermostat exchanged with the atoms, over every atom (``ecouple``)."""
        return self.style.coupling(self.params, self.state if state is None else state)
