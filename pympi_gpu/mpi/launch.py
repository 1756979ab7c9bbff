"""Choosing how to start an MPI program: ibrun, srun, mpiexec or mpirun, in a container or not.

:func:`plan` is pure: it looks only at the environment and PATH it is given and
returns the argv to exec, so every branch is tested without a cluster.  What
needs a subprocess (asking ``mpiexec --version`` which MPI it is) lives in
:func:`probe_mpi`, which the command line calls and hands to :func:`plan`.

The rules, in order:

1. ``ibrun`` where it is on PATH (TACC systems: it knows the fabric, the
   affinity and the MPI stack of the machine).
2. ``srun`` inside a Slurm allocation (``SLURM_JOB_ID`` set), with ``--mpi=`` the
   PMI plugin the MPI in use speaks: ``pmi2`` for MPICH, MVAPICH and Intel MPI,
   ``pmix`` for Open MPI.
3. ``mpiexec`` (else ``mpirun``) of the MPI in use, with the flags Open MPI needs
   (``--oversubscribe``, and ``--allow-run-as-root`` as root).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata

from pympi_gpu import launchers
from pympi_gpu.mpi.library import vendor_of_text

__all__ = ["LaunchPlan", "LaunchError", "LAUNCHERS", "MPI_VENDORS", "PMI_FOR", "plan", "mpi_from_env",
           "probe_mpi", "loaded_mpi_library", "mpi_choices"]

#: launchers plan() can choose or be told to use
LAUNCHERS = ("auto", "ibrun", "srun", "mpiexec", "mpirun")


def mpi_choices() -> tuple[str, ...]:
    """What ``--mpi`` takes: the MPI libraries of the table that pympi-launch knows how to start."""
    return tuple(lib.name for lib in launchers.MPI_LIBRARIES if lib.pmi is not None)


def __getattr__(name: str):
    # The names this module has always offered, read from the table when asked for.
    if name == "MPI_VENDORS":  # MPI implementations told apart (names as in provenance.mpi_vendor)
        return mpi_choices()
    if name == "PMI_FOR":  # the srun --mpi plugin each MPI speaks to Slurm through
        return {lib.name: lib.pmi for lib in launchers.MPI_LIBRARIES if lib.pmi is not None}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class LaunchError(ValueError):
    """The request cannot be turned into a command line (bad input)."""


@dataclass(frozen=True)
class LaunchPlan:
    """How to start the job.

    Attributes
    ----------
    argv : tuple of str
        The full command line to exec, never a shell string.
    launcher : str
        ``"ibrun"``, ``"srun"``, ``"mpiexec"`` or ``"mpirun"``.
    reason : str
        Why this launcher (and PMI plugin) was chosen, for ``--dry-run`` and logs.
    """

    argv: tuple[str, ...]
    launcher: str
    reason: str


def _installed_wheel() -> tuple[str | None, str]:
    """The MPI library of the first MPI wheel installed, in recognition order."""
    for lib in launchers.recognition_order():
        for dist in lib.wheels:
            try:
                metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
            return lib.name, f"the installed {dist} wheel"
    return None, ""


def _built_with() -> str | None:
    """The MPI library whose install path mpi4py's build configuration (its ``mpicc``) names."""
    try:
        import mpi4py  # the package only: importing mpi4py.MPI would start MPI

        config = " ".join(str(v) for v in mpi4py.get_config().values()).lower()
    except Exception:  # no mpi4py, or one built without a config
        return None
    return next((lib.name for lib in launchers.recognition_order() if any(w in config for w in lib.paths)), None)


def mpi_from_env(environ: Mapping[str, str] | None = None) -> tuple[str | None, str]:
    """The MPI in use as far as can be told without running anything.

    Returns ``(vendor, how)``; vendor is None where nothing tells.  In order:
    ``PYMPI_MPI`` (the user's word), the MPI wheel installed next to mpi4py, the
    build configuration of mpi4py (its ``mpicc``), the environment modules of
    TACC-style systems (``I_MPI_ROOT``, ``MPICH_HOME``...).  Libraries are tried
    in :func:`pympi_gpu.launchers.recognition_order`: a derivative of MPICH
    before MPICH.
    """
    env = os.environ if environ is None else environ
    told = env.get("PYMPI_MPI", "").strip().lower()
    if told:
        if told not in mpi_choices():
            raise LaunchError(f"PYMPI_MPI={told!r} is not one of {', '.join(mpi_choices())}")
        return told, "PYMPI_MPI"
    vendor, how = _installed_wheel()
    if vendor:
        return vendor, how
    vendor = _built_with()
    if vendor:
        return vendor, "mpi4py.get_config()"
    for lib in launchers.recognition_order():
        for var in lib.homes:
            if env.get(var):
                return lib.name, f"${var}"
    return None, "no MPI wheel, mpi4py config or MPI module variable names one"


#: Run in a subprocess: the MPI library mpi4py loads, without starting MPI.
_LIBRARY_PROBE = ("import mpi4py; mpi4py.rc.initialize = mpi4py.rc.finalize = False; "
                  "from mpi4py import MPI; print(MPI.Get_library_version())")


def loaded_mpi_library(timeout: float = 30) -> str | None:
    """``MPI.Get_library_version()`` of the library mpi4py loads here, or None.

    Asked of a child Python (MPI is neither initialised there nor here), so the
    answer is the library that a rank started from this environment will load:
    with the mpich extra and ``impi-rt`` both installed, that is Intel MPI.
    """
    import subprocess
    import sys

    try:
        out = subprocess.run([sys.executable, "-c", _LIBRARY_PROBE], capture_output=True, text=True,
                             timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = out.stdout.replace("\x00", "").strip()  # Open MPI's string ends in a NUL
    return (text or None) if out.returncode == 0 else None


def probe_mpi(environ: Mapping[str, str] | None = None,
              which: Callable[[str], str | None] = shutil.which, timeout: float = 20,
              library: Callable[[], str | None] = loaded_mpi_library) -> tuple[str | None, str]:
    """The MPI in use, and how that was found (runs subprocesses; MPI is not started here).

    ``PYMPI_MPI`` (the user's word) first, then the library mpi4py loads
    (:func:`loaded_mpi_library`), then :func:`mpi_from_env`, then
    ``mpiexec --version``.
    """
    env = os.environ if environ is None else environ
    if not env.get("PYMPI_MPI", "").strip():
        text = library()
        vendor = vendor_of_text(text) if text else None
        if vendor:
            first = " ".join(text.strip().splitlines()[0].split()).split(", ")[0]
            return vendor, f"the MPI library mpi4py loads: {first}"
    vendor, how = mpi_from_env(environ)
    if vendor:
        return vendor, how
    import subprocess

    for name in ("mpiexec", "mpirun"):
        exe = which(name)
        if exe is None:
            continue
        try:
            out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=timeout,
                                 stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired):
            continue
        vendor = vendor_of_text(out.stdout + out.stderr)
        if vendor:
            return vendor, f"`{name} --version`"
    return None, how


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def plan(command: Sequence[str], ntasks: int, *, nodes: int | None = None,
         tasks_per_node: int | None = None, image: str | None = None, gpu: bool = False,
         launcher: str = "auto", environ: Mapping[str, str] | None = None,
         which: Callable[[str], str | None] = shutil.which, mpi: str | None = None,
         pmi: str | None = None, as_root: bool | None = None, mpi_how: str = "as told") -> LaunchPlan:
    """The command line that starts ``command`` on ``ntasks`` MPI ranks.

    Parameters
    ----------
    command : sequence of str
        The program and its arguments, run by every rank.
    ntasks : int
        Number of MPI ranks, >= 1.
    nodes, tasks_per_node : int, optional
        Spread over this many nodes / this many ranks per node (srun, mpiexec).
        ibrun takes both from the allocation.
    image : str, optional
        Apptainer image (``.sif`` path or URI): each rank runs ``apptainer run
        [--nv] IMAGE command...`` under the host's launcher.
    gpu : bool
        Make the host's NVIDIA GPUs visible in the image (``--nv``).
    launcher : str
        ``"auto"`` (the rules in the module docstring) or one of :data:`LAUNCHERS`.
    environ : mapping, optional
        The environment to judge (default ``os.environ``).
    which : callable
        ``shutil.which`` or a stand-in for tests.
    mpi : str, optional
        The MPI in use, one of :func:`mpi_choices`; default :func:`mpi_from_env`.
    pmi : str, optional
        srun's ``--mpi`` plugin; default from the MPI (its ``pmi`` in the table), else
        ``PYMPI_PMI``.  ``"default"`` leaves srun to the cluster's ``MpiDefault``.
    as_root : bool, optional
        Whether the launcher runs as root (Open MPI refuses without a flag);
        default: this process's effective uid.
    mpi_how : str
        How ``mpi`` was found out, for the reason (e.g. "`mpiexec --version`").

    Returns
    -------
    LaunchPlan

    Raises
    ------
    LaunchError
        Empty command, ``ntasks < 1``, unknown launcher, MPI or a launcher not on PATH.
    """
    env = os.environ if environ is None else environ
    command = tuple(str(c) for c in command)
    if not command or not command[0]:
        raise LaunchError("no command to launch: give it after --, e.g. pympi-launch -n 2 -- pympi-pi 1e7")
    if isinstance(ntasks, bool) or not isinstance(ntasks, int) or ntasks < 1:
        raise LaunchError(f"the number of tasks must be a whole number >= 1, not {ntasks!r}")
    for name, value in (("nodes", nodes), ("tasks per node", tasks_per_node)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise LaunchError(f"the number of {name} must be a whole number >= 1, not {value!r}")
    if nodes is not None and nodes > ntasks:
        raise LaunchError(f"{nodes} nodes cannot each get one of {ntasks} tasks")
    if launcher not in LAUNCHERS:
        raise LaunchError(f"unknown launcher {launcher!r}: choose one of {', '.join(LAUNCHERS)}")
    if mpi is not None and mpi not in mpi_choices():
        raise LaunchError(f"unknown MPI {mpi!r}: choose one of {', '.join(mpi_choices())}")
    if image is not None and not str(image).strip():
        raise LaunchError("the image path is empty")

    payload = command
    if image is not None:
        runtime = "apptainer" if which("apptainer") or not which("singularity") else "singularity"
        payload = (runtime, "run", *(("--nv",) if gpu else ()), str(image), *command)

    if launcher == "auto":
        if which("ibrun"):
            launcher, why = "ibrun", "ibrun is on PATH (a TACC system)"
        elif env.get("SLURM_JOB_ID"):
            launcher, why = "srun", f"inside Slurm allocation {env['SLURM_JOB_ID']} (SLURM_JOB_ID)"
        elif which("mpiexec"):
            launcher, why = "mpiexec", "no ibrun and no Slurm allocation"
        elif which("mpirun"):
            launcher, why = "mpirun", "no ibrun, no Slurm allocation and no mpiexec"
        else:
            raise LaunchError("no launcher found: no ibrun, no Slurm allocation (SLURM_JOB_ID), "
                              "no mpiexec or mpirun on PATH")
    else:
        why = "asked for"
        if which(launcher) is None:
            raise LaunchError(f"launcher {launcher!r} is not on PATH")

    if gpu and image is None:
        why += "; --gpu without an image changes nothing (GPUs are bound per rank by the program)"
    if launcher == "ibrun":
        if nodes is not None or tasks_per_node is not None:
            why += "; ibrun places the ranks as the allocation says (sbatch -N/--ntasks-per-node)"
        return _ibrun(payload, ntasks, env, why)
    if mpi is None:
        mpi, mpi_how = mpi_from_env(env)
    if launcher == "srun":
        return _srun(payload, ntasks, nodes, tasks_per_node, env, why, mpi, mpi_how, pmi)
    return _mpiexec(launcher, payload, ntasks, nodes, tasks_per_node, why, mpi, mpi_how,
                    _is_root() if as_root is None else as_root)


def _ibrun(payload, ntasks, env, why) -> LaunchPlan:
    # ibrun starts SLURM_NTASKS ranks by default; -n with -o 0 runs a subset of them.
    allocated = env.get("SLURM_NTASKS", "")
    argv: tuple[str, ...] = ("ibrun",)
    if not (allocated.isdigit() and int(allocated) == ntasks):
        argv += ("-n", str(ntasks), "-o", "0")
    return LaunchPlan(argv + payload, "ibrun", why)


def _srun(payload, ntasks, nodes, tasks_per_node, env, why, mpi, mpi_how, pmi) -> LaunchPlan:
    argv = ["srun", f"--ntasks={ntasks}"]
    if nodes is not None:
        argv.append(f"--nodes={nodes}")
    if tasks_per_node is not None:
        argv.append(f"--ntasks-per-node={tasks_per_node}")
    pmi = pmi or env.get("PYMPI_PMI") or None
    if pmi is not None:
        pmi_why = f"--mpi={pmi} as asked"
    elif mpi is not None:
        pmi = launchers.mpi_library(mpi).pmi
        pmi_why = f"--mpi={pmi} for {mpi} ({mpi_how})"
    else:
        pmi = "default"
        pmi_why = f"the cluster's MpiDefault: the MPI in use is unknown ({mpi_how})"
    if pmi != "default":
        argv.append(f"--mpi={pmi}")
    return LaunchPlan((*argv, *payload), "srun", f"{why}; {pmi_why}")


def _mpiexec(launcher, payload, ntasks, nodes, tasks_per_node, why, mpi, mpi_how, as_root) -> LaunchPlan:
    argv = [launcher, "-n", str(ntasks)]
    notes = [f"{mpi or 'unknown MPI'} ({mpi_how})"]
    lib = launchers.mpi_library(mpi) if mpi is not None else None
    if lib is not None:  # the flags this MPI's own mpiexec needs (Open MPI: cores are not tasks, root)
        argv += [*lib.mpiexec_flags, *(lib.mpiexec_root_flags if as_root else ())]
    if tasks_per_node is not None:
        argv += launchers.fill((lib and lib.mpiexec_tasks_per_node) or ("-ppn", "{tasks_per_node}"),
                               tasks_per_node=tasks_per_node)
    if nodes is not None and nodes > 1:
        notes.append(f"--nodes {nodes}: the hosts come from the MPI's hostfile, not from pympi-launch")
    return LaunchPlan((*argv, *payload), launcher, f"{why}; " + "; ".join(notes))
