"""A run that blew up: the checks both n-body models make, and the error they raise.

A blown-up system (an atom flung across the box, an overflow, a NaN) must not
go on and must not be written over a good checkpoint.  Each model checks its
state where it already meets the other ranks, so that every rank reaches the
same verdict from one reduction, and raises :class:`BlowUp` on every rank
together: the LJ model at every step's rebuild test (the largest displacement,
a non-finite one counting as infinite), at a rebuild (atoms lost or
duplicated, non-finite velocities or forces: on the CPU only the first,
which follows no displacement test) and at every thermo and
checkpoint step; the gravity model at every step's stop agreement (non-finite
positions or velocities) and at every thermo step (energies whose sums
overflow).  The command line turns it into one message and exit status
:data:`EXIT_STATUS`.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

__all__ = ["BlowUp", "EXIT_STATUS", "ON_BLOWUP", "moved_too_far", "finite_rows", "blowup_path"]

#: the exit status of a blown-up run (2 is bad input, 1 an internal error)
EXIT_STATUS = 3

#: what ``--on-blowup`` may ask for: stop only, or stop and save the broken state for inspection
ON_BLOWUP = ("stop", "save")


class BlowUp(Exception):
    """The state became unphysical at ``step``: what failed and what likely caused it.

    Raised on every rank together (the checks are collective); ``saved`` is
    the file the broken state went to with ``--on-blowup save``.
    """

    def __init__(self, step: int, check: str, cause: str, saved: str | None = None):
        super().__init__(step, check, cause, saved)
        self.step, self.check, self.cause, self.saved = step, check, cause, saved
        self.unsaved: str | None = None  # why ``--on-blowup save`` could not save it

    def __str__(self) -> str:
        text = f"the run blew up at step {self.step}: {self.check}: {self.cause}"
        if self.saved:
            text += f"; the broken state is in {self.saved} (for inspection: it cannot be restarted)"
        if self.unsaved:
            text += f"; the broken state could not be saved: {self.unsaved}"
        return text


def moved_too_far(step: int, displacement2: float, limit: float, unit: str) -> BlowUp | None:
    """The verdict on the largest squared displacement since the last list build (all ranks' maximum).

    ``limit`` is the farthest an atom may move between builds (the ghost cutoff,
    or a brick if that is thinner): beyond it the ghosts miss pairs and the
    migration loses atoms.  Non-finite positions arrive as an infinite displacement.
    """
    if displacement2 <= limit * limit:
        return None
    if not math.isfinite(displacement2):
        return BlowUp(step, "non-finite positions", "the forces overflowed: reduce --dt or --temperature")
    return BlowUp(step, f"an atom moved {math.sqrt(displacement2):.3g} {unit} between neighbour-list builds, "
                        f"more than the {limit:.3g} {unit} its ghosts reach",
                  "reduce --dt or --temperature")


def finite_rows(*arrays) -> bool:
    """Are all values of these host arrays finite?"""
    return all(bool(np.isfinite(a).all()) for a in arrays)


def blowup_path(checkpoint: str | None, default: str) -> str:
    """Where ``--on-blowup save`` writes the broken state: beside the checkpoint, never over it."""
    if not checkpoint:
        return default
    p = Path(checkpoint)
    stem = p.name[:-4] if p.name.endswith(".npz") else p.name
    return os.fspath(p.with_name(stem + ".blowup.npz"))
