"""What an LJ system is: its lattice, density, temperature, cutoff and step (pure data, no numba, no MPI).

The defaults are LAMMPS's ``bench/in.lj``; the command line reads them from
here, so each is written once.
"""

from __future__ import annotations

import dataclasses

__all__ = ["LjConfig", "DEFAULT_SEED"]

#: the seed of ``velocity all create 1.44 87287`` in LAMMPS's bench/in.lj
DEFAULT_SEED = 87287


@dataclasses.dataclass(frozen=True)
class LjConfig:
    """The system: an fcc lattice of ``cells^3`` cells at ``density``, its temperature, the pair cutoff.

    What to run (steps, outputs) is a :class:`~pympi_gpu.nbody.loop.RunOptions`.
    ``newton``: half lists with Newton's third law across bricks (one thread
    per rank), else full lists.
    """

    cells: int
    density: float = 0.8442
    temperature: float = 1.44
    cutoff: float = 2.5
    skin: float = 0.3
    dt: float = 0.005
    seed: int = DEFAULT_SEED
    newton: bool = True

    @property
    def atoms(self) -> int:
        return 4 * self.cells ** 3

    @property
    def box(self) -> float:
        return self.cells * (4.0 / self.density) ** (1.0 / 3.0)

    @property
    def cutneigh(self) -> float:
        return self.cutoff + self.skin

    def meta(self) -> dict:
        """The parameters a checkpoint records (and a restart must match)."""
        return {"model": "lj", "cells": self.cells, "atoms": self.atoms, "density": self.density,
                "temperature": self.temperature, "cutoff": self.cutoff, "skin": self.skin, "dt": self.dt,
                "seed": self.seed}
