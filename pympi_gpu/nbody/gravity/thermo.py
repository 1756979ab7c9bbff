"""Thermo rows of the gravity model: energies, the virial ratio and the momentum at one step."""

from __future__ import annotations

from pympi_gpu.nbody.gravity.record import Diagnostics

__all__ = ["KEYWORDS", "HEADER", "values", "format_row", "virial_ratio"]

#: the columns of a thermo row (G = 1, the model's units)
KEYWORDS = ("Step", "KinEng", "PotEng", "TotEng", "Virial", "Px", "Py", "Pz")
HEADER = " ".join(f"{k:>10}" if k == "Step" else f"{k:>16}" for k in KEYWORDS)


def virial_ratio(d: Diagnostics) -> float:
    """-2K/U: 1 for a self-gravitating system in virial equilibrium (a Plummer sphere), 0 for a cold one."""
    return -2.0 * d.kinetic / d.potential if d.potential else float("nan")


def values(d: Diagnostics) -> tuple:
    """The row's values in the order of :data:`KEYWORDS`."""
    return (d.step, d.kinetic, d.potential, d.energy, virial_ratio(d), *d.momentum)


def format_row(d: Diagnostics) -> str:
    return " ".join(f"{v:>10d}" if i == 0 else f"{v:>16.10g}" for i, v in enumerate(values(d)))
