"""What a gravity system is: its bodies, initial conditions, precision, step and softening (pure data).

The command line reads the defaults from here, so each is written once.
"""

from __future__ import annotations

import dataclasses

__all__ = ["NbodyConfig", "DEFAULT_SEED"]

DEFAULT_SEED = 20240601


@dataclasses.dataclass(frozen=True)
class NbodyConfig:
    """The system: ``bodies`` bodies drawn from ``init`` with ``seed``, the step and the softening.

    What to run (steps, outputs) is a :class:`~pympi_gpu.nbody.loop.RunOptions`.
    """

    bodies: int
    dt: float = 1e-3
    softening: float = 0.01
    precision: str = "fp32"
    init: str = "plummer"
    seed: int = DEFAULT_SEED

    def meta(self) -> dict:
        """The parameters a checkpoint records (and a restart must match)."""
        return {"seed": self.seed, "init": self.init, "precision": self.precision, "dt": self.dt,
                "softening": self.softening}
