"""LAMMPS-style thermodynamic output of the LJ model; collective over comm.

A run with a thermostat that exchanges energy with the atoms (Nose-Hoover's chain) has one more
column, ``Econserve``: the total energy plus the thermostat's (LAMMPS's ``econserve``, ``etotal +
ecouple``), which it conserves.  :func:`columns` gives a run's columns; the module's own
:data:`KEYWORDS`, :data:`HEADER`, :func:`values` and :func:`format_row` are those of a run without
(``nve``, ``langevin``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pympi_gpu.nbody.lj.lattice import dof
from pympi_gpu.nbody.lj.record import Thermo

__all__ = ["thermo", "KEYWORDS", "HEADER", "values", "format_row", "Columns", "columns"]

#: the columns of a thermo row, named as LAMMPS names them
KEYWORDS = ("Step", "Temp", "E_pair", "KinEng", "TotEng", "Press")
#: and of a run whose thermostat has an energy of its own (``econserve``)
COUPLED = (*KEYWORDS, "Econserve")


def thermo(comm, step: int, local: np.ndarray, atoms: int, volume: float, coupling: float | None = None) -> Thermo:
    """One thermo line from this rank's sums ``[sum v^2, px, py, pz, E_pair, virial]``; ``coupling``: the
    thermostat's energy over every atom (``ecouple``), where it has one."""
    from mpi4py import MPI

    s = np.array(local, dtype=np.float64)
    comm.Allreduce(MPI.IN_PLACE, s, op=MPI.SUM)
    ke = 0.5 * s[0]
    pe = s[4]
    etotal = (ke + pe) / atoms
    return Thermo(step=step, temp=2.0 * ke / dof(atoms), e_pair=pe / atoms, ke=ke / atoms,
                  etotal=etotal, press=(2.0 * ke + s[5]) / (3.0 * volume),
                  momentum=(float(s[1]), float(s[2]), float(s[3])),
                  econserve=None if coupling is None else etotal + coupling / atoms)


@dataclasses.dataclass(frozen=True)
class Columns:
    """The thermo columns of a run (:func:`columns`): ``KEYWORDS``, ``HEADER``, :meth:`values` and
    :meth:`format_row`, as the command line's printer and thermo file take a model's thermo module."""

    KEYWORDS: tuple[str, ...]

    @property
    def HEADER(self) -> str:  # noqa: N802 (the thermo module's name)
        return " ".join(f"{k:>10}" if k == "Step" else f"{k:>12}" for k in self.KEYWORDS)

    def values(self, t: Thermo) -> tuple:
        """The row's values in the order of ``KEYWORDS``."""
        row = (t.step, t.temp, t.e_pair, t.ke, t.etotal, t.press)
        return (*row, t.econserve) if len(self.KEYWORDS) > len(row) else row

    def format_row(self, t: Thermo) -> str:
        step, *rest = self.values(t)
        return f"{step:>10d} " + " ".join(f"{v:>12.8g}" for v in rest)


def columns(coupled: bool) -> Columns:
    """The columns of a run whose thermostat has an energy of its own (``coupled``: ``Econserve`` too), or not."""
    return Columns(COUPLED if coupled else KEYWORDS)


_PLAIN = columns(False)
HEADER = _PLAIN.HEADER
values = _PLAIN.values
format_row = _PLAIN.format_row
