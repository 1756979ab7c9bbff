"""Finding and binding GPUs: one per rank, from the node-local rank.

Nothing here imports CuPy; numba.cuda is imported only when asked.
"""

from __future__ import annotations

import os

__all__ = ["simulator", "gpu_usable", "local_rank", "bind_device"]


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

        if not cuda.is_available():
            return False, "numba.cuda finds no usable CUDA driver or device"
        n = len(cuda.gpus)
    except Exception as exc:  # driver errors come in many types
        return False, f"CUDA is not usable: {exc}"
    return (n > 0), f"{n} CUDA device(s) visible"


def _driver_present() -> bool:
    """A cheap look for the CUDA driver before importing numba.cuda (~0.1 s per rank)."""
    import ctypes.util
    import glob

    return bool(glob.glob("/dev/nvidia[0-9]*") or glob.glob("/dev/dxg")  # WSL2 exposes /dev/dxg
                or ctypes.util.find_library("cuda"))


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


def bind_device(comm) -> dict[str, object]:
    """Select this rank's GPU: node-local rank modulo the visible devices.

    Honours ``CUDA_VISIBLE_DEVICES`` (the driver enumerates only those).
    Collective over comm. Returns a description of the binding.
    """
    from numba import cuda

    lrank, lsize = local_rank(comm)
    ndev = len(cuda.gpus)
    if ndev == 0:
        raise RuntimeError("no CUDA device visible to this rank")
    index = lrank % ndev
    cuda.select_device(index)
    dev = cuda.current_context().device
    name = getattr(dev, "name", "CUDA simulator" if simulator() else "unknown")
    name = name.decode() if isinstance(name, bytes) else str(name)
    return {"local_rank": lrank, "local_size": lsize, "visible": ndev, "device": index, "name": name,
            "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES")}
