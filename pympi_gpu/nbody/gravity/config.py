"""What a gravity system is: its bodies, initial conditions, precision, step and softening (pure data).

The command line reads the defaults from here, so each is written once.
"""

from __future__ import annotations

import dataclasses

from pympi_gpu.run.outputs import RunIdentity

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

    def identity(self) -> RunIdentity:
        """What names the run in its trajectory, thermo log and checkpoints (:mod:`pympi_gpu.run.outputs`)."""
        return RunIdentity.of("gravity", self.bodies, None, self.seed, init=self.init, precision=self.precision,
                              dt=self.dt, softening=self.softening)

    def meta(self) -> dict:
        """The parameters a checkpoint records (and a restart must match), and the run's identity."""
        return {"seed": self.seed, "init": self.init, "precision": self.precision, "dt": self.dt,
                "softening": self.softening, "run": self.identity().text()}
