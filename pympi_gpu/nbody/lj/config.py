"""What an LJ system is: its lattice (or the file it starts from), density, temperature, pair style, cutoff and
step (pure data, no numba).

The defaults are LAMMPS's ``bench/in.lj``; the command line reads them from
here, so each is written once.
"""

from __future__ import annotations

import dataclasses
import re

from pympi_gpu.nbody.lj import pairs, thermostats
from pympi_gpu.nbody.lj import precision as precisions
from pympi_gpu.nbody.lj.box import Edges, edges, volume, word
from pympi_gpu.run.outputs import RunIdentity

__all__ = ["LjConfig", "FileStart", "DEFAULT_SEED", "half_lists"]

#: the seed of ``velocity all create 1.44 87287`` in LAMMPS's bench/in.lj
DEFAULT_SEED = 87287


def half_lists(gpu: bool, threads: int) -> bool:
    """Which lists a run takes (``LjConfig.newton``), the same on every rank.

    CPU: half lists with one thread per rank, full lists with more (threads then write only their
    own atoms' forces).  GPU: full lists at every size: on an H100 they were 1.32x as fast as half
    lists at 1,000,188 atoms (a quiet step 0.74 ms against 1.51: the half lists' atomic adds of the
    reactions cost more than the pairs they save), and on an H200 1.44x at 32,000
    (``benchmarks/lj.py --mode gpu-profile``; benchmarks/results/gpu-h100/lj-lists-1000188.json).
    """
    if gpu:
        return False
    return threads == 1


@dataclasses.dataclass(frozen=True)
class FileStart:
    """A start from a file (``--init``): ``spec`` as given (``PATH`` or ``PATH@FRAME``), and once its header is
    read (:mod:`~pympi_gpu.nbody.lj.start`) its ``kind`` (``lammps``, ``extxyz``, ``gsd``), ``atoms``, orthogonal
    ``box`` (its three edges; a number is a cube's edge) and whether it gives the ``velocities`` (else they are
    drawn at the temperature)."""

    spec: str
    kind: str = ""
    atoms: int = 0
    box: Edges = (0.0, 0.0, 0.0)
    velocities: bool = False

    def __post_init__(self):
        object.__setattr__(self, "box", edges(self.box))

    @property
    def read(self) -> bool:
        """Is the header read (the atoms and box known)?"""
        return self.atoms > 0

    def meta(self) -> dict:
        return {"spec": self.spec, "kind": self.kind, "velocities": self.velocities}


@dataclasses.dataclass(frozen=True)
class LjConfig:
    """The system: an fcc lattice of ``cells^3`` cells at ``density`` (a cube), its temperature, the pair cutoff.

    Or, with ``start``, the atoms of a file (``cells`` 0): their count and
    orthogonal box (three edges) the file's, ``density`` theirs, ``temperature`` and ``seed`` those their
    velocities are drawn at where the file gives none.

    What to run (steps, outputs) is a :class:`~pympi_gpu.nbody.loop.RunOptions`.
    ``pair`` names the pair style (:mod:`~pympi_gpu.nbody.lj.pairs`), cut at
    ``cutoff``; ``pair_coeffs`` are its coefficients that differ from the
    style's defaults, as ``(name, value)`` pairs.  ``newton``: half lists with
    Newton's third law across bricks (one thread per rank), else full lists.
    ``neigh_every`` and ``neigh_check``: LAMMPS's ``neigh_modify every K check
    yes|no``: the lists are looked at every ``neigh_every`` steps after the
    last build, and rebuilt there if some atom moved more than half the skin
    (``neigh_check``), or always (not ``neigh_check``).  ``thermostat`` names
    the thermostat (:mod:`~pympi_gpu.nbody.lj.thermostats`: ``nve``, none, by
    default), which holds ``temperature`` with the damping time ``tdamp``.
    ``precision`` names the precision of the pair forces
    (:mod:`~pympi_gpu.nbody.lj.precision`: ``fp64``, ``mixed``).
    """

    cells: int
    density: float = 0.8442
    temperature: float = 1.44
    cutoff: float = 2.5
    skin: float = 0.3
    dt: float = 0.005
    seed: int = DEFAULT_SEED
    newton: bool = True
    pair: str = "lj/cut"
    pair_coeffs: tuple[tuple[str, float], ...] = ()
    neigh_every: int = 1
    neigh_check: bool = True
    thermostat: str = thermostats.DEFAULT
    tdamp: float = thermostats.default_tdamp(0.005)
    start: FileStart | None = None
    precision: str = precisions.DEFAULT

    @classmethod
    def from_file(cls, start: FileStart, **params) -> LjConfig:
        """The system of a file whose header is read (``start.read``); ``params`` the other fields."""
        params.pop("density", None)
        return cls(cells=0, density=start.atoms / volume(start.box), start=start, **params)

    @property
    def atoms(self) -> int:
        return self.start.atoms if self.start is not None else 4 * self.cells ** 3

    @property
    def box(self) -> Edges:
        """The periodic box's three edges ``(Lx, Ly, Lz)``: the file's, else the lattice's cube."""
        if self.start is not None:
            return self.start.box
        return edges(self.cells * (4.0 / self.density) ** (1.0 / 3.0))

    @property
    def volume(self) -> float:
        """``Lx Ly Lz`` (``L ** 3`` for a cube: :func:`~pympi_gpu.nbody.lj.box.volume`)."""
        return volume(self.box)

    @property
    def cutneigh(self) -> float:
        return self.cutoff + self.skin

    @property
    def style(self) -> pairs.PairStyle:
        return pairs.style(self.pair)

    @property
    def coefficients(self) -> dict[str, float]:
        """Every coefficient of the pair style, the defaults where ``pair_coeffs`` says nothing."""
        return self.style.values(dict(self.pair_coeffs))

    @property
    def pair_term(self):
        """The pair term ``r2 -> (fpair, energy)`` the kernels are compiled around, in the run's precision."""
        return self.style.pair(self.coefficients, self.precision)

    @property
    def reference_term(self):
        """The pair term in double precision: what ``--verify`` sums directly, whatever the run's precision."""
        return self.style.pair(self.coefficients, precisions.DEFAULT)

    def identity(self) -> RunIdentity:
        """What names the run in its trajectory, thermo log and checkpoints (:mod:`pympi_gpu.run.outputs`)."""
        policy = {} if self.neigh_policy == (1, True) else {"neigh_every": self.neigh_every,
                                                             "neigh_check": "yes" if self.neigh_check else "no"}
        # the file as named (a word: a key=value reader splits the text at spaces)
        init = {} if self.start is None else {"init": re.sub(r"[\s\"'=]", "_", self.start.spec)}
        return RunIdentity.of("lj", self.atoms, word(self.box), self.seed, **init, temperature=self.temperature,
                              dt=self.dt, cutoff=self.cutoff, skin=self.skin, pair=self.pair,
                              **{f"pair_{k}": v for k, v in self.coefficients.items()}, **policy, **self._bath())

    @property
    def setting(self) -> thermostats.Setting:
        """What the thermostat is asked to do (:class:`~pympi_gpu.nbody.lj.thermostats.Setting`)."""
        return thermostats.Setting(temperature=self.temperature, tdamp=self.tdamp, dt=self.dt, atoms=self.atoms,
                                   seed=self.seed)

    @property
    def thermostatted(self) -> bool:
        """Does a thermostat act (not ``nve``)?"""
        return self.thermostat != thermostats.DEFAULT

    def _bath(self) -> dict:
        """The thermostat's parameters where one acts (none for ``nve``: an NVE run names itself as before)."""
        return {"thermostat": self.thermostat, "tdamp": self.tdamp} if self.thermostatted else {}

    @property
    def neigh_policy(self) -> tuple[int, bool]:
        """``(neigh_every, neigh_check)``: (1, True), the default, looks every step and rebuilds only when needed."""
        return self.neigh_every, self.neigh_check

    def meta(self) -> dict:
        """The parameters a checkpoint records (and a restart must match), and the run's identity."""
        return {"model": "lj", "cells": self.cells, "atoms": self.atoms, "density": self.density,
                "temperature": self.temperature, "cutoff": self.cutoff, "skin": self.skin, "dt": self.dt,
                "seed": self.seed, "pair": self.pair, "pair_coeffs": self.coefficients,
                "neigh_every": self.neigh_every, "neigh_check": "yes" if self.neigh_check else "no",
                **self._bath(), **({} if self.start is None else {"init": self.start.meta(), "box": list(self.box)}),
                "precision": self.precision, "run": self.identity().text()}
