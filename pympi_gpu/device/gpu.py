"""Finding and binding GPUs: one per rank, from the node-local rank.

CUDA-aware MPIs want each process's GPU chosen before ``MPI_Init`` (Open MPI's
and MVAPICH2-GDR's documentation say so: the library sets up its CUDA state,
IPC handles and registration caches for the device current at init).  Before
init there is no communicator to ask, so :func:`select_before_init` reads the
node-local rank that the launcher exports (the launcher table, :mod:`pympi_gpu.launchers`);
:func:`bind_device`, after init, checks that choice against the node's
shared-memory communicator and binds from that where no launcher said.

Nothing here imports CuPy; numba.cuda is imported only when asked, and mpi4py
only by the functions that take a communicator.
"""

from __future__ import annotations

import dataclasses
import functools
import os

from pympi_gpu import launchers

__all__ = ["simulator", "free_bytes", "gpu_usable", "local_rank", "local_rank_from_env",
           "EarlyBinding", "select_before_init", "bind_device", "describe"]


def simulator() -> bool:
    """Whether numba's CUDA simulator is on (``NUMBA_ENABLE_CUDASIM=1``)."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


def gpu_usable() -> tuple[bool, str]:
    """Whether a real CUDA GPU can run kernels here, and why (not).

    The simulator counts as usable only when asked for explicitly, so that
    ``--backend auto`` never picks a simulated GPU.
    """
    if simulator():
        return False, "NUMBA_ENABLE_CUDASIM is set (simulated GPU only on request)"
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1", "none", "NoDevFiles"):
        return False, "CUDA_VISIBLE_DEVICES hides every GPU"
    if not _driver_present():
        return False, "no NVIDIA driver (no /dev/nvidia* device, no libcuda)"
    try:
        from numba import cuda

        if getattr(cuda, "implementation", "NVIDIA") == "Built-in":
            # numba's own CUDA target, deprecated: it mistypes the package's kernels. numba-cuda
            # takes numba.cuda over through a .pth file, which Python skips in a folder that
            # another .pth file added to sys.path (not through site.addsitedir)
            return False, ("numba.cuda is numba's built-in CUDA target, not numba-cuda: pip install "
                           "numba-cuda (installed but not used: its _numba_cuda_redirector.pth was not read)")
        if not cuda.is_available():
            return False, "numba.cuda finds no usable CUDA driver or device"
        n = len(cuda.gpus)
    except Exception as exc:  # driver errors come in many types
        return False, f"CUDA is not usable: {exc}"
    return (n > 0), f"{n} CUDA device(s) visible"


@functools.lru_cache(maxsize=None)
def _driver_present() -> bool:
    """A cheap look for the CUDA driver before importing numba.cuda (~0.1 s per rank): a GPU's device
    file, or the driver library where the dynamic loader finds it (numba.cuda's own look), opened
    directly (``ctypes.util.find_library`` runs ldconfig, gcc and ld, 0.1 CPU-s, where it is absent)."""
    import ctypes
    import glob

    if glob.glob("/dev/nvidia[0-9]*") or glob.glob("/dev/dxg"):  # WSL2 exposes /dev/dxg
        return True
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def local_rank(comm) -> tuple[int, int]:
    """This rank's index among the ranks of its node, and their number.

    Collective over comm. The shared-memory communicator is created and freed here.
    """
    from mpi4py import MPI

    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return node.Get_rank(), node.Get_size()
    finally:
        node.Free()


def local_rank_from_env(environ=None) -> tuple[int, str] | None:
    """The node-local rank the launcher exported, and the variable that said it.

    The first local-rank variable of the launcher table holding a whole number wins
    (:func:`pympi_gpu.launchers.local_rank`): each launcher's own variable before
    Slurm's, since a batch script's ``mpirun``/``mpiexec`` children inherit the
    batch step's ``SLURM_LOCALID`` (0 for every one of them).  None where none
    does (e.g. a plain ``python`` or ``mpiexec`` of a launcher we do not know).
    """
    return launchers.local_rank(os.environ if environ is None else environ)


@dataclasses.dataclass(frozen=True)
class EarlyBinding:
    """A GPU selected before ``MPI_Init``: the device index, from which variable."""

    device: int
    local_rank: int
    variable: str


def select_before_init(environ=None, allow_simulator: bool = False) -> EarlyBinding | None:
    """Make this process's GPU current before MPI starts, from the launcher's local rank.

    Call it before the first ``from mpi4py import MPI`` (which initialises MPI).
    Returns None, selecting nothing, where no launcher variable is set or no GPU
    is usable (the simulator counts only with ``allow_simulator``); then
    :func:`bind_device` binds after init.  Not collective.
    """
    found = local_rank_from_env(environ)
    if found is None:
        return None
    if not (gpu_usable()[0] or (allow_simulator and simulator())):
        return None
    from numba import cuda

    ndev = len(cuda.gpus)
    if ndev == 0:
        return None
    lrank, var = found
    cuda.select_device(lrank % ndev)
    return EarlyBinding(lrank % ndev, lrank, var)


def bind_device(comm, early: EarlyBinding | None = None) -> dict[str, object]:
    """Select this rank's GPU: node-local rank modulo the visible devices.

    Keeps the device of ``early`` (:func:`select_before_init`) when the node's
    shared-memory communicator agrees with it; otherwise (no launcher variable,
    or a stale one, such as a batch step's ``SLURM_LOCALID`` seen by every rank)
    binds from that communicator now, after init.  Honours ``CUDA_VISIBLE_DEVICES``
    (the driver enumerates only those).  Collective over comm.  Returns a
    description of the binding.
    """
    from numba import cuda

    lrank, lsize = local_rank(comm)
    ndev = len(cuda.gpus)
    if ndev == 0:
        raise RuntimeError("no CUDA device visible to this rank")
    index = lrank % ndev
    if early is not None and early.device == index:
        how = f"before MPI_Init, from {early.variable}={early.local_rank}"
        if early.local_rank != lrank:
            how += f" (the node's shared-memory communicator says local rank {lrank}; same device)"
    else:
        if early is not None:
            cuda.close()  # leave the early device's context before making another current
            how = (f"after MPI_Init: {early.variable}={early.local_rank} disagrees with local rank {lrank} "
                   "of the node's shared-memory communicator")
        else:
            how = "after MPI_Init, from the node's shared-memory communicator (no launcher variable)"
        cuda.select_device(index)
    dev = cuda.current_context().device
    name = getattr(dev, "name", "CUDA simulator" if simulator() else "unknown")
    name = name.decode() if isinstance(name, bytes) else str(name)
    return {"local_rank": lrank, "local_size": lsize, "visible": ndev, "device": index, "name": name,
            "selected": how, "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES")}


def free_bytes() -> int:
    """Bytes free now on the GPU numba selected for this rank (:func:`bind_device`), as CUDA counts them."""
    import cupy
    from numba import cuda

    with cupy.cuda.Device(cuda.get_current_device().id):
        return int(cupy.cuda.runtime.memGetInfo()[0])


def describe(binding: dict[str, object]) -> str:
    """One line for a run's provenance from :func:`bind_device`'s description."""
    return ("device {device} of {visible} visible ({name}), local rank {local_rank} of {local_size}, "
            "selected {selected}".format(**binding))
