"""The LJ run's result records: frozen dataclasses of plain values."""

from __future__ import annotations

import dataclasses

from pympi_gpu.nbody.record import Verification
from pympi_gpu.run.phases import Phases, Traffic
from pympi_gpu.run.records import Provenance

__all__ = ["Thermo", "LjRun", "Verification"]


@dataclasses.dataclass(frozen=True)
class Thermo:
    """One line of LAMMPS-style thermo output (LJ reduced units, ``thermo_modify norm yes``).

    ``temp`` is ``2 KE / (3N - 3)``; ``e_pair``, ``ke`` and ``etotal`` are per
    atom; ``press`` is ``(2 KE + W) / (3 V)`` with ``W`` the pair virial
    ``sum r . F``; ``momentum`` is the total momentum (unit masses);
    ``econserve``, where the thermostat has an energy of its own (Nose-Hoover),
    ``etotal`` plus that energy per atom (LAMMPS's ``econserve``), else None.
    """

    step: int
    temp: float
    e_pair: float
    ke: float
    etotal: float
    press: float
    momentum: tuple[float, float, float]
    econserve: float | None = None

    @property
    def total_energy(self) -> float:
        """The energy whose drift a run reports (per atom: the relative drift is the same): the conserved
        one, ``econserve`` where a thermostat exchanges energy with the atoms."""
        return self.etotal if self.econserve is None else self.econserve


@dataclasses.dataclass(frozen=True)
class LjRun:
    """A ``pympi-nbody --model lj`` run (``pair``: the pair style, ``pair_coeffs`` its coefficients).

    Times in seconds (maximum over ranks); ``comm_time`` is halo and
    migration time not hidden behind force work, summed over the steps,
    ``comm_per_step`` its mean; ``rate`` is atom-steps per second.
    ``rebuild_time``: seconds the timed steps spent in list rebuilds
    (migration, sort, ghosts, lists, and the waits inside them; the slowest
    rank's), ``time_per_rebuild`` that over the rebuilds those steps made
    (None without any); both None where the atoms do not measure them.  A
    rebuild step costs ``median_step_time + time_per_rebuild``, and
    ``time_per_step`` is the median step plus their share.
    ``host_copies_per_step``: on a GPU, the atom arrays copied from the device
    to the host over the run (checkpoints, frames; the most of any rank)
    divided by the steps, 0 when nothing but sums and messages left the
    device; None on the CPU.  ``launches_per_step`` and
    ``host_syncs_per_step``: on a GPU, the kernels the host queued (numba.cuda
    launches and CuPy operations) and the times it waited for the device
    (synchronisations, device-to-host copies), over the run's steps (thermo
    rows, checks and checkpoints included; the most of any rank);
    ``device_calls_per_step`` the same per phase, with the host-to-device
    copies (``uploads``); None on the CPU.  ``step_mpi``: who makes a CPU
    step's MPI calls (the halo's messages, the displacement's agreement):
    ``kernels``, the step's compiled kernels themselves
    (:mod:`~pympi_gpu.mpi.numba_calls`), or ``python`` between them
    (``PYMPI_COMPILED_MPI=0``, an MPI without persistent collectives, a
    libmpi numba cannot call); None on a GPU.  ``neigh_every``, ``neigh_check``: the lists' policy
    (LAMMPS's ``neigh_modify every K check yes|no``); ``dangerous_builds``: as
    LAMMPS counts them, the rebuilds made at the first step the policy allowed
    (an atom may have moved more than half the skin before: pairs may have
    been missed); 0 where every step is checked, None where nothing is
    (``neigh_check`` no).  ``thermostat`` names the thermostat
    (:mod:`~pympi_gpu.nbody.lj.thermostats`; ``nve``: none), ``tdamp`` its damping
    time (None without one), ``temperature`` its target.  ``init``: where the run started from a file
    (``--init``): ``{"spec", "kind", "velocities"}``, the file as named, its
    format and whether its velocities were the file's (else drawn at
    ``temperature``); None: the fcc lattice (``cells``).  ``precision``: the pair forces' precision
    (:mod:`~pympi_gpu.nbody.lj.precision`); ``written_in``: a restart's checkpoint's (None: no restart).
    """

    atoms: int
    cells: int
    box: list[float]
    density: float
    temperature: float
    pair: str
    pair_coeffs: dict[str, float]
    cutoff: float
    skin: float
    dt: float
    seed: int
    ranks: int
    grid: tuple[int, int, int]
    backend: str
    backend_reason: str
    transport: str
    transport_reason: str
    newton: bool
    first_step: int
    last_step: int
    steps: int
    wall_time: float
    time_per_step: float
    median_step_time: float
    comm_time: float
    comm_per_step: float
    cpu_time: float
    rate: float
    rebuilds: int
    neighbors_per_atom: float
    ghosts_per_rank: float
    atoms_per_rank: tuple[int, ...]
    thermo: tuple[Thermo, ...]
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
    host_copies_per_step: float | None = None
    launches_per_step: float | None = None
    host_syncs_per_step: float | None = None
    device_calls_per_step: dict[str, dict[str, float]] | None = None
    rebuild_time: float | None = None
    time_per_rebuild: float | None = None
    step_mpi: str | None = None
    neigh_every: int = 1
    neigh_check: bool = True
    dangerous_builds: int | None = 0
    thermostat: str = "nve"
    tdamp: float | None = None
    init: dict | None = None
    precision: str = "fp64"
    written_in: str | None = None
