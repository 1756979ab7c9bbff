"""``--thermostat nve`` (the default): no thermostat, velocity Verlet alone: LAMMPS's ``fix nve``."""

from __future__ import annotations

from pympi_gpu.nbody.lj.thermostats.style import Thermostat

__all__ = ["STYLE"]

STYLE = Thermostat(
    name="nve",
    summary="no thermostat: constant energy (fix nve)",
    lammps=lambda setting: ["fix 1 all nve"],
)
