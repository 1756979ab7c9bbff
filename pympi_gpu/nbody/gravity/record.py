"""The gravity model's result records: frozen dataclasses of plain values."""

from __future__ import annotations

import dataclasses

from pympi_gpu.nbody.record import Verification
from pympi_gpu.run.phases import Phases, Traffic
from pympi_gpu.run.records import Provenance

__all__ = ["Diagnostics", "NbodyRun"]


@dataclasses.dataclass(frozen=True)
class Diagnostics:
    """Conserved quantities of the whole system at one step (float64 sums, G = 1)."""

    step: int
    kinetic: float
    potential: float
    energy: float
    momentum: tuple[float, float, float]

    @property
    def total_energy(self) -> float:
        """The energy whose drift a run reports."""
        return self.energy


@dataclasses.dataclass(frozen=True)
class NbodyRun:
    """A ``pympi-nbody`` run.

    Times in seconds (maximum over ranks), rates per second; ``interactions``
    counts N^2 per step, as cuda-samples ``nbody`` does, and ``gflops`` 20
    floating-point operations per interaction.
    """

    bodies: int
    ranks: int
    first_step: int
    last_step: int
    steps: int
    dt: float
    softening: float
    precision: str
    init: str
    seed: int
    backend: str
    backend_reason: str
    exchange: str
    transport: str
    transport_reason: str
    wall_time: float
    time_per_step: float
    median_step_time: float
    comm_time: float
    interactions: int
    throughput: float
    gflops: float
    initial: Diagnostics | None
    final: Diagnostics | None
    energy_drift: float | None
    momentum_change: float | None
    checkpoint: str | None
    checkpoints_written: int
    restarted_from: str | None
    stopped_by: str | None
    verification: Verification | None = None
    provenance: Provenance | None = None
    phases: Phases | None = None
    traffic: Traffic | None = None
    #: the thermo rows: the first step, every ``--thermo`` steps, the last (none with --benchmark)
    thermo: tuple[Diagnostics, ...] = ()
