"""A made-up launcher, "fakeflux", added to pympi_gpu's launcher table as one entry.

Shaped like Flux (``flux run -n N -N NODES --tasks-per-node K``), with variables of
its own that no real launcher sets.  tests/unit/test_launcher_table.py and
tests/cli/test_launcher_table_cli.py add it to the table in the test process
(monkeypatch) and, through :func:`register`, in the pympi commands they start,
then watch every reader of the table see it.
"""

from __future__ import annotations

from pympi_gpu import launchers
from pympi_gpu.launchers import Launcher, Start

#: its world size, world rank and node-local rank; URI: set inside one of its instances
SIZE, RANK, LOCAL, URI = "FAKEFLUX_JOB_SIZE", "FAKEFLUX_TASK_RANK", "FAKEFLUX_TASK_LOCAL_ID", "FAKEFLUX_URI"

FAKE = Launcher(
    "fakeflux", title="fakeflux run (a made-up launcher)", marks=(RANK,),
    world_size=(SIZE,), world_rank=(RANK,), local_rank=(LOCAL,), about=(URI,),
    start=Start(command=("fakeflux", "run"), env=URI, chosen="inside fakeflux instance {value} (" + URI + ")",
                absent="no fakeflux instance", ntasks=("-n", "{ntasks}"), nodes=("-N", "{nodes}"),
                tasks_per_node=("--tasks-per-node={tasks_per_node}",)))


def with_fake(table: tuple[Launcher, ...]) -> tuple[Launcher, ...]:
    """``table`` with FAKE after the last scheduler (srun) and before the MPI's own mpiexec, as Flux would go."""
    at = max(i for i, entry in enumerate(table) if entry.scheduler) + 1
    return (*table[:at], FAKE, *table[at:])


def register() -> None:
    """Add FAKE to the table of this process (for the pympi commands a test starts)."""
    launchers.LAUNCHERS = with_fake(launchers.LAUNCHERS)
