"""Whether the MPI library can take CUDA device memory (CUDA-aware MPI).

Call :func:`detect` after MPI is initialised; it answers for this process.
:func:`agree` makes one verdict of all the ranks' (collective), and
:func:`round_trip` proves a "yes" with a few bytes of device memory, and
:func:`choose_transport` turns the verdict into the path device buffers take.

The order :func:`detect` asks in:

1. ``forced``: the user's own answer (the command line reads ``PYMPI_CUDA_AWARE=0|1``,
   :mod:`pympi_gpu.cli.settings`), the documented override of a user who knows
   better (``1`` also skips the round trip).
2. ``MPIR_CVAR_ENABLE_GPU=0`` switches MPICH's GPU support off at run time.
3. ``MPIX_Query_cuda_support()``, which Open MPI and MPICH export: mpi4py 4
   does not wrap it, so it is reached with ctypes on the libmpi this process
   has loaded.  MPICH and Open MPI 5 answer for this run; Open MPI 4.1 answers
   how it was built (``OPAL_CUDA_SUPPORT``), like ``ompi_info``.
4. Libraries without that call: MVAPICH2-GDR takes device buffers with
   ``MV2_USE_CUDA=1``; Intel MPI only from 2021.12 (earlier releases drive
   Level Zero GPUs only) and only with ``I_MPI_OFFLOAD`` set; Open MPI's
   ``ompi_info`` tells how the library was *built*, which is the last resort.

Where nothing tells, the answer is "unknown" (``supported=None``).
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import re
import shutil
import subprocess

from pympi_gpu.mpi.library import vendor_of_text

__all__ = ["TRANSPORTS", "CudaAwareness", "detect", "agree", "round_trip", "choose_transport",
           "loaded_mpi_libraries", "intel_mpi_version",
           "INTEL_MPI_CUDA_SINCE"]

#: ``--transport``: device buffers straight to MPI, staged through the host, or chosen by :func:`detect`
TRANSPORTS = ("auto", "device", "host")

#: The first Intel MPI release that takes CUDA device buffers (with I_MPI_OFFLOAD set).
INTEL_MPI_CUDA_SINCE = (2021, 12)


@dataclasses.dataclass(frozen=True)
class CudaAwareness:
    """The verdict: ``supported`` is True, False or None (unknown)."""

    supported: bool | None
    method: str
    detail: str

    @property
    def forced(self) -> bool:
        """Whether the user set the answer (``PYMPI_CUDA_AWARE``)."""
        return self.method == "PYMPI_CUDA_AWARE"


def loaded_mpi_libraries(maps: str = "/proc/self/maps") -> list[str]:
    """Paths of the libmpi shared objects mapped into this process."""
    try:
        with open(maps) as fh:
            paths = {line.split()[-1] for line in fh if "/libmpi" in line and ".so" in line}
    except OSError:
        return []
    return sorted(p for p in paths if os.path.basename(p).startswith(("libmpi.so", "libmpi_", "libmpi.")))


def _query_symbol() -> CudaAwareness | None:
    for path in loaded_mpi_libraries():
        try:
            lib = ctypes.CDLL(path)
            query = lib.MPIX_Query_cuda_support
        except (OSError, AttributeError):
            continue
        query.restype = ctypes.c_int
        query.argtypes = []
        value = int(query())
        return CudaAwareness(bool(value), "MPIX_Query_cuda_support",
                             f"{os.path.basename(path)} returned {value}")
    return None


def _ompi_info() -> CudaAwareness | None:
    exe = shutil.which("ompi_info")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--parsable", "--all"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        if line.startswith("mca:mpi:base:param:mpi_built_with_cuda_support:value:"):
            value = line.rsplit(":", 1)[1].strip() == "true"
            return CudaAwareness(value, "ompi_info", "built with CUDA support" if value else
                                 "built without CUDA support")
    return None


def intel_mpi_version(library_version: str) -> tuple[int, int] | None:
    """``(year, minor)`` of an Intel MPI library version string, or None.

    ``"Intel(R) MPI Library 2021.12 for Linux* OS"`` gives ``(2021, 12)``; the
    older ``"... 2019 Update 7 ..."`` gives ``(2019, 7)`` (same order).
    """
    m = re.search(r"Intel\(R\) MPI Library (\d{4})(?:\.(\d+))?(?: Update (\d+))?", library_version)
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2) or m.group(3) or 0)


def _intel(env, library_version: str, query) -> CudaAwareness:
    version = intel_mpi_version(library_version)
    shown = "unknown version" if version is None else "%d.%d" % version
    if version is None or version < INTEL_MPI_CUDA_SINCE:
        return CudaAwareness(False, "Intel MPI version",
                             f"Intel MPI {shown}: CUDA device buffers need 2021.12 or newer")
    offload = env.get("I_MPI_OFFLOAD", "0").strip()
    mode = env.get("I_MPI_OFFLOAD_MODE", "auto").strip().lower()
    if offload in ("", "0"):
        return CudaAwareness(False, "I_MPI_OFFLOAD",
                             f"Intel MPI {shown} takes device buffers only with I_MPI_OFFLOAD=1; it is not set")
    if mode not in ("auto", "cuda", ""):
        return CudaAwareness(False, "I_MPI_OFFLOAD_MODE", f"I_MPI_OFFLOAD_MODE={mode} is not CUDA")
    found = query()  # 2021.x exports it (2021.19 answers 0 without I_MPI_OFFLOAD)
    if found is not None:
        return dataclasses.replace(found, detail=f"Intel MPI {shown}, I_MPI_OFFLOAD={offload}: {found.detail}")
    return CudaAwareness(True, "I_MPI_OFFLOAD", f"Intel MPI {shown} with I_MPI_OFFLOAD={offload}")


def detect(environ=None, library_version: str | None = None, forced: bool | None = None) -> CudaAwareness:
    """Decide whether this process may hand device buffers to MPI (see module docs).

    ``environ``: the environment whose MPI variables are judged (default this
    process's); ``forced``: the user's own answer, if any (``PYMPI_CUDA_AWARE``).
    """
    env = os.environ if environ is None else environ
    if forced is not None:
        return CudaAwareness(bool(forced), "PYMPI_CUDA_AWARE", f"forced {'on' if forced else 'off'} by the "
                                                                "environment")
    if library_version is None:
        from mpi4py import MPI

        library_version = MPI.Get_library_version()
    vendor = vendor_of_text(library_version) or "unknown"
    if vendor == "intelmpi":
        # Before 2021.12 Intel MPI drives no CUDA device whatever it exports;
        # from then on only with I_MPI_OFFLOAD, and then its MPIX answer counts.
        return _intel(env, library_version, _query_symbol)
    if vendor == "mpich" and env.get("MPIR_CVAR_ENABLE_GPU", "").strip() == "0":
        return CudaAwareness(False, "MPIR_CVAR_ENABLE_GPU", "MPICH GPU support switched off")
    found = _query_symbol()
    if found is not None:
        return found
    if vendor == "mvapich":
        on = env.get("MV2_USE_CUDA", "0").strip() == "1"
        return CudaAwareness(on, "MV2_USE_CUDA", "MVAPICH2(-GDR) is CUDA-aware only with MV2_USE_CUDA=1"
                             + ("" if on else "; it is not set"))
    if vendor == "openmpi":
        found = _ompi_info()
        if found is not None:
            return found
    return CudaAwareness(None, "none", f"no way to ask {vendor} MPI")


def agree(comm, mine: CudaAwareness) -> CudaAwareness:
    """One verdict for all ranks: yes only if every rank says yes.

    Collective over comm.  A "no" anywhere wins over "unknown"; the verdict
    carries the method and detail of the first rank that was not sure, with
    its rank number, so the message names where the job would break.
    """
    verdicts = comm.allgather((mine.supported, mine.method, mine.detail))
    for wanted in (False, None):
        for rank, (supported, method, detail) in enumerate(verdicts):
            if supported is wanted:
                where = f"rank {rank}: " if len(verdicts) > 1 else ""
                return CudaAwareness(wanted, method, where + detail)
    # rank 0's yes, not each rank's own: whether it was forced decides the round trip, a collective
    return CudaAwareness(True, *verdicts[0][1:])


def round_trip(comm, backend) -> tuple[bool, str]:
    """Pass a few numbers in device memory around the ring of ranks: a yes proven.

    Collective over comm; call it only after :func:`agree` said yes (a library
    that cannot read device memory may crash here instead of answering).
    ``backend`` is a GPU backend (``empty``, ``from_host``, ``to_host``,
    ``sync``, ``mpi_buffer``).  Returns ``(ok, detail)``, the same on every rank.
    """
    import numpy as np

    rank, size = comm.Get_rank(), comm.Get_size()
    mark = np.arange(4, dtype=np.float64) + 1000.0 * rank
    send = backend.from_host(mark.astype(backend.dtype))
    recv = backend.empty(4)
    backend.sync()
    left, right = (rank - 1) % size, (rank + 1) % size
    comm.Sendrecv(backend.mpi_buffer(send), dest=right, sendtag=0x6361,
                  recvbuf=backend.mpi_buffer(recv), source=left, recvtag=0x6361)
    want = (np.arange(4, dtype=np.float64) + 1000.0 * left).astype(backend.dtype)
    ok = bool(np.array_equal(backend.to_host(recv), want))
    bad = [r for r, good in enumerate(comm.allgather(ok)) if not good]
    if bad:
        return False, f"device-buffer round trip gave wrong data on rank(s) {bad}"
    return True, f"device-buffer round trip over {size} rank(s) correct"

def choose_transport(requested: str, device_backend: bool, awareness=None) -> tuple[str, str]:
    """Which path device buffers take through MPI, and why: a pure function.

    Parameters
    ----------
    requested : {"auto", "device", "host"}
    device_backend : whether the bodies live in GPU memory
    awareness : :class:`CudaAwareness` or None
        The verdict on the MPI library, agreed by all ranks
        (:func:`agree`); only consulted for GPU backends.

    Raises ValueError for ``device`` unless the verdict is a yes: device
    pointers handed to an MPI that cannot read them crash it.
    """
    if requested not in TRANSPORTS:
        raise ValueError(f"unknown transport {requested!r} (choose from {', '.join(TRANSPORTS)})")
    if not device_backend:
        if requested == "device":
            raise ValueError("--transport device needs the GPU backend (bodies in device memory)")
        return "host", "CPU backend: the bodies are in host memory"
    verdict = ""
    if awareness is not None:
        verdict = f"{awareness.method}: {awareness.detail}".strip(": ")
    if requested == "device":
        if awareness is None or awareness.supported is not True:
            what = ("is not CUDA-aware" if awareness is not None and awareness.supported is False
                    else "may not be CUDA-aware (nothing tells)")
            raise ValueError(f"--transport device: this MPI library {what} ({verdict or 'no verdict'}); "
                             "handing it GPU memory would crash the job. Use --transport host or auto "
                             "(staged through host memory), or set PYMPI_CUDA_AWARE=1 if you know it "
                             "takes device buffers.")
        return "device", f"requested; CUDA-aware MPI ({verdict})"
    if requested == "host":
        return "host", "requested: staged through pinned host buffers"
    if awareness is not None and awareness.supported:
        return "device", f"CUDA-aware MPI ({verdict})"
    why = "not CUDA-aware" if awareness is not None and awareness.supported is False else "CUDA-awareness unknown"
    return "host", f"{why} ({verdict or 'no verdict'}): staged through pinned host buffers"
