"""LAMMPS-style thermodynamic output of the LJ model; collective over comm."""

from __future__ import annotations

import numpy as np

from pympi_gpu.nbody.lj.lattice import dof
from pympi_gpu.nbody.lj.record import Thermo

__all__ = ["thermo", "KEYWORDS", "HEADER", "values", "format_row"]

#: the columns of a thermo row, named as LAMMPS names them
KEYWORDS = ("Step", "Temp", "E_pair", "KinEng", "TotEng", "Press")
HEADER = " ".join(f"{k:>10}" if k == "Step" else f"{k:>12}" for k in KEYWORDS)


def thermo(comm, step: int, local: np.ndarray, atoms: int, volume: float) -> Thermo:
    """One thermo line from this rank's sums ``[sum v^2, px, py, pz, E_pair, virial]``."""
    from mpi4py import MPI

    s = np.array(local, dtype=np.float64)
    comm.Allreduce(MPI.IN_PLACE, s, op=MPI.SUM)
    ke = 0.5 * s[0]
    pe = s[4]
    return Thermo(step=step, temp=2.0 * ke / dof(atoms), e_pair=pe / atoms, ke=ke / atoms,
                  etotal=(ke + pe) / atoms, press=(2.0 * ke + s[5]) / (3.0 * volume),
                  momentum=(float(s[1]), float(s[2]), float(s[3])))


def values(t: Thermo) -> tuple:
    """The row's values in the order of :data:`KEYWORDS`."""
    return (t.step, t.temp, t.e_pair, t.ke, t.etotal, t.press)


def format_row(t: Thermo) -> str:
    return f"{t.step:>10d} {t.temp:>12.8g} {t.e_pair:>12.8g} {t.ke:>12.8g} {t.etotal:>12.8g} {t.press:>12.8g}"
