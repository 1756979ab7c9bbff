"""Choosing how to start an MPI program: ibrun, srun, mpiexec or mpirun, in a container or not.

:func:`plan` is pure: it looks only at the environment and PATH it is given and
returns the argv to exec, so every branch is tested without a cluster.  What
needs a subprocess (asking ``mpiexec --version`` which MPI it is) lives in
:func:`probe_mpi`, which the command line calls and hands to :func:`plan`.

The launchers, the order ``auto`` tries them in and their flags are the table
:data:`pympi_gpu.launchers.LAUNCHERS`; the MPI libraries, the PMI plugin each
speaks and the flags their own mpiexec needs are :data:`pympi_gpu.launchers.MPI_LIBRARIES`.
Today that makes the rules, in order:

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

__all__ = ["LaunchPlan", "LaunchError", "plan", "mpi_from_env",
           "probe_mpi", "loaded_mpi_library", "launcher_choices", "mpi_choices", "needs_mpi"]


def launcher_choices() -> tuple[str, ...]:
    """What ``--launcher`` takes: ``auto`` and every launcher of the table that pympi-launch can start."""
    return ("auto", *(entry.name for entry in launchers.startable()))


def mpi_choices() -> tuple[str, ...]:
    """What ``--mpi`` takes: the MPI libraries of the table that pympi-launch knows how to start."""
    return tuple(lib.name for lib in launchers.MPI_LIBRARIES if lib.pmi is not None)


def needs_mpi(launcher: str) -> bool:
    """Whether the command line for ``launcher`` depends on the MPI in use (``auto``: it may).

    ibrun brings the site's MPI stack and needs no word of it; srun's PMI plugin
    and mpiexec's flags follow the MPI, so the command line asks for it first.
    """
    entry = next((e for e in launchers.startable() if e.name == launcher), None)
    return entry is None or entry.start.needs_mpi


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
        The launcher's name in :data:`pympi_gpu.launchers.LAUNCHERS`: ``"ibrun"``,
        ``"srun"``, ``"mpiexec"`` or ``"mpirun"``.
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


def mpi_from_env(environ: Mapping[str, str] | None = None, told: str | None = None) -> tuple[str | None, str]:
    """The MPI in use as far as can be told without running anything.

    Returns ``(vendor, how)``; vendor is None where nothing tells.  In order:
    ``told`` (the user's word: the command line reads ``PYMPI_MPI``), the MPI wheel installed next to mpi4py, the
    build configuration of mpi4py (its ``mpicc``), the environment modules of
    TACC-style systems (``I_MPI_ROOT``, ``MPICH_HOME``...).  Libraries are tried
    in :func:`pympi_gpu.launchers.recognition_order`: a derivative of MPICH
    before MPICH.
    """
    env = os.environ if environ is None else environ
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
              library: Callable[[], str | None] = loaded_mpi_library, told: str | None = None
              ) -> tuple[str | None, str]:
    """The MPI in use, and how that was found (runs subprocesses; MPI is not started here).

    ``told`` (the user's word, ``PYMPI_MPI``) first, then the library mpi4py loads
    (:func:`loaded_mpi_library`), then :func:`mpi_from_env`, then
    ``mpiexec --version``.
    """
    if not told:
        text = library()
        vendor = vendor_of_text(text) if text else None
        if vendor:
            first = " ".join(text.strip().splitlines()[0].split()).split(", ")[0]
            return vendor, f"the MPI library mpi4py loads: {first}"
    vendor, how = mpi_from_env(environ, told)
    if vendor:
        return vendor, how
    import subprocess

    for name in (e.start.command[0] for e in launchers.startable() if e.start.own_mpi):
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
        ``"auto"`` (the rules in the module docstring) or one of :func:`launcher_choices`.
    environ : mapping, optional
        The environment to judge (default ``os.environ``).
    which : callable
        ``shutil.which`` or a stand-in for tests.
    mpi : str, optional
        The MPI in use, one of :func:`mpi_choices`; default :func:`mpi_from_env`.
    pmi : str, optional
        srun's ``--mpi`` plugin (``--pmi``, else the command line's ``PYMPI_PMI``); default from
        the MPI (its ``pmi`` in the table).  ``"default"`` leaves srun to the cluster's ``MpiDefault``.
    as_root : bool, optional
        Whether the launcher runs as root (Open MPI refuses without a flag);
        default: this process's effective uid.
    mpi_how : str
        How ``mpi`` was found out, for the reason (e.g. "`mpiexec --version`").

    Raises
    ------
    LaunchError
        Empty command, ``ntasks < 1``, unknown launcher, MPI or a launcher not on PATH.
    """
    env = os.environ if environ is None else environ
    command = _checked(command, ntasks, nodes, tasks_per_node, launcher, mpi, image)
    entry, why = _choose(launcher, env, which)
    if gpu and image is None:
        why += "; --gpu without an image changes nothing (GPUs are bound per rank by the program)"
    if mpi is None and entry.start.needs_mpi:
        mpi, mpi_how = mpi_from_env(env)
    lib = launchers.mpi_library(mpi) if mpi is not None else None
    flags, notes = _options(entry.start, lib, mpi_how, ntasks, nodes, tasks_per_node, env, as_root)
    plugin, pmi_note = _pmi(entry.start, lib, pmi or None, mpi_how)
    argv = (*entry.start.command, *flags, *plugin, *_payload(command, image, gpu, which))
    return LaunchPlan(argv, entry.name, "; ".join([why, *pmi_note, *notes]))


def _checked(command, ntasks, nodes, tasks_per_node, launcher, mpi, image) -> tuple[str, ...]:
    """The command as a tuple of str; a LaunchError for any bad part of the request."""
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
    if launcher not in launcher_choices():
        raise LaunchError(f"unknown launcher {launcher!r}: choose one of {', '.join(launcher_choices())}")
    if mpi is not None and mpi not in mpi_choices():
        raise LaunchError(f"unknown MPI {mpi!r}: choose one of {', '.join(mpi_choices())}")
    if image is not None and not str(image).strip():
        raise LaunchError("the image path is empty")
    return command


def _payload(command, image, gpu, which) -> tuple[str, ...]:
    """What every rank runs: the command, inside ``apptainer run [--nv] IMAGE`` with an image."""
    if image is None:
        return command
    runtime = "apptainer" if which("apptainer") or not which("singularity") else "singularity"
    return (runtime, "run", *(("--nv",) if gpu else ()), str(image), *command)


def _choose(launcher, env, which) -> tuple[launchers.Launcher, str]:
    """The launcher's table entry, and why: as told, else the first that ``auto`` finds."""
    if launcher != "auto":
        entry = launchers.launcher(launcher)
        if which(entry.start.command[0]) is None:
            raise LaunchError(f"launcher {launcher!r} is not on PATH")
        return entry, "asked for"
    passed, looked = [], []
    for entry in (e for e in launchers.startable() if e.start.automatic):
        start = entry.start
        value = env.get(start.env) if start.env else None
        if value or (start.on_path and which(start.command[0])):
            return entry, start.chosen.format(value=value) if start.chosen else _and(passed) or "found"
        passed.append(start.absent or f"no {entry.name}")
        looked.append(f"{start.command[0]} on PATH" if start.on_path else f"{start.env} set")
    raise LaunchError(f"no launcher found: {_and(passed)} (looked for {_and(looked, 'or')})")


def _and(words: Sequence[str], last: str = "and") -> str:
    """``a, b and c``."""
    return f"{', '.join(words[:-1])} {last} {words[-1]}" if len(words) > 1 else "".join(words)


def _options(start, lib, mpi_how, ntasks, nodes, tasks_per_node, env,
             as_root) -> tuple[tuple[str, ...], list[str]]:
    """The launcher's options for the size and placement asked for, and notes on what it left out.

    Where the launcher is the MPI library's own mpiexec, the library's flags come
    in (Open MPI's ``--oversubscribe``; ``--allow-run-as-root`` when ``as_root``,
    which defaults to this process's effective uid).
    """
    values = dict(ntasks=ntasks, nodes=nodes, tasks_per_node=tasks_per_node)
    allocated = launchers.whole_number(env, (start.all_tasks,)) if start.all_tasks else None
    flags = () if allocated and allocated[0] == ntasks else launchers.fill(start.ntasks, **values)
    notes = [f"{lib.name if lib else 'unknown MPI'} ({mpi_how})"] if start.own_mpi else []
    if nodes is not None:
        flags += launchers.fill(start.nodes, **values)
    own = lib if start.own_mpi else None
    if own is not None:
        root = _is_root() if as_root is None else as_root
        flags += own.mpiexec_flags + (own.mpiexec_root_flags if root else ())
    if tasks_per_node is not None:
        flags += launchers.fill((own and own.mpiexec_tasks_per_node) or start.tasks_per_node, **values)
    flags += start.whole_job
    if start.placed_by and (nodes is not None or tasks_per_node is not None):
        notes.append(start.placed_by)
    if start.hosts_from and not start.nodes and nodes is not None and nodes > 1:
        notes.append(f"--nodes {nodes}: {start.hosts_from}")
    return flags, notes


def _pmi(start, lib, asked, mpi_how) -> tuple[tuple[str, ...], list[str]]:
    """The launcher's PMI plugin option for the MPI in use, and why; nothing for a launcher without one.

    ``asked`` (``--pmi``, ``PYMPI_PMI``) wins; ``"default"`` leaves the choice to the cluster.
    """
    if not start.pmi:
        return (), []
    if asked is not None:
        plugin, why = asked, "as asked"
    elif lib is not None and lib.pmi is not None:
        plugin, why = lib.pmi, f"for {lib.name} ({mpi_how})"
    else:
        return (), [f"the cluster's MpiDefault: the MPI in use is unknown ({mpi_how})"]
    option = launchers.fill(start.pmi, pmi=plugin)
    return (() if plugin == "default" else option), [f"{' '.join(option)} {why}"]
