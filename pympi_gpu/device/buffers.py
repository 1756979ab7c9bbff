"""Device memory on one CUDA stream, as the n-body models and the MPI layer use it.

:class:`DeviceBuffers` allocates, copies and synchronises on its own stream
and says what to hand mpi4py for a device array (:func:`mpi_buffer`).  The
gravity model's GPU backend builds on it; the CUDA-aware MPI check
(:func:`pympi_gpu.mpi.cuda_aware.round_trip`) takes one.  :class:`DeviceArrays`
holds the LJ model's device-resident arrays in an array namespace (CuPy on a
GPU, NumPy under the simulator) and counts every copy to the host.  Importing this
module imports numba.cuda: import it on GPU paths (or under the simulator) only.
"""

from __future__ import annotations

import contextlib
import sys
import time

import numpy as np


def _numpy_names_numba_cuda_reads() -> None:
    """Give NumPy back ``row_stack`` (an alias of ``vstack``), where NumPy 2.5 removed it.

    numba-cuda up to 0.30 registers its overload of ``np.row_stack`` when it types the first
    kernel that uses an array function, and with NumPy >= 2.5 that import fails
    (``AttributeError: module 'numpy' has no attribute 'row_stack'``): every GPU run stopped
    there on an H200 with numba-cuda 0.30.4 and NumPy 2.5.2.  The alias is the one NumPy had.
    """
    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack


_numpy_names_numba_cuda_reads()

from numba import cuda  # noqa: E402  (after the alias: numba.cuda may read it)

__all__ = ["DeviceBuffers", "DeviceArrays", "array_namespace", "mpi_buffer", "COPY_KINDS", "CALL_KINDS",
           "quiet_small_grids"]

#: numba.cuda's warning at every launch of fewer than 128 blocks (its text since numba 0.57; numba-cuda
#: starts it with a terminal's bold escape, and a warnings filter matches from the message's start)
SMALL_GRID_WARNING = r"(?:\x1b\[1m)*Grid size \d+ will likely result in GPU under-utilization due to low occupancy"


def quiet_small_grids() -> None:
    """Silence numba.cuda's low-occupancy warning, which the package's small launches would print.

    numba.cuda warns at every launch configured with fewer than 128 blocks, once per grid size:
    the LJ model's thirds of the atoms and its ghost lists, a small rank's gravity kernels and the
    finiteness counts are small by design, and a run would print a line on stderr for each new
    size.  Only that warning is filtered (by its text); numba's other performance warnings stay.
    """
    import warnings

    warnings.filterwarnings("ignore", message=SMALL_GRID_WARNING)


def mpi_buffer(a, simulated: bool):
    """What mpi4py takes for device array ``a``: the array itself (it exposes
    ``__cuda_array_interface__``), or under the simulator (``simulated``), whose
    "device" arrays wrap host arrays, the array underneath."""
    return a._ary if simulated else a


class DeviceBuffers:
    """Device arrays of one dtype on one stream, and pinned host arrays to stage them.

    Every copy is asynchronous on :attr:`stream` except :meth:`to_host`, which
    waits for its result; call :meth:`sync` before handing a buffer to MPI.
    ``simulated``: the GPU is numba's CUDA simulator (the device's word,
    :class:`~pympi_gpu.device.device.Device`).
    """

    device = True

    def __init__(self, dtype, simulated: bool = False):
        self.dtype = np.dtype(dtype)
        self.simulated = simulated
        self.stream = cuda.stream()

    def empty(self, n: int, dtype=None):
        return cuda.device_array(n, dtype=dtype or self.dtype, stream=self.stream)

    def from_host(self, a: np.ndarray):
        return cuda.to_device(np.ascontiguousarray(a, dtype=self.dtype), stream=self.stream)

    def to_host(self, a) -> np.ndarray:
        out = a.copy_to_host(stream=self.stream)
        self.stream.synchronize()
        return out

    def copy_into(self, dst, src) -> None:
        if src.shape[0]:
            dst.copy_to_device(src, stream=self.stream)

    def sync(self) -> None:
        self.stream.synchronize()

    def mpi_buffer(self, a):
        return mpi_buffer(a, self.simulated)

    def pinned(self, n: int, dtype=None) -> np.ndarray:
        return cuda.pinned_array(n, dtype=dtype or self.dtype)

    def d2h(self, dev, host) -> None:
        if dev.shape[0]:
            dev.copy_to_host(host, stream=self.stream)

    def h2d(self, host, dev) -> None:
        if dev.shape[0]:
            dev.copy_to_device(host, stream=self.stream)


def array_namespace(simulated: bool):
    """The array namespace of device arrays: NumPy under the simulator (``simulated``), else CuPy.

    CuPy is imported here and only here, when a real GPU is in use, so that a
    CPU-only path (and the simulator in CI) never imports it.
    """
    if simulated:
        return np
    import cupy

    return cupy


#: what a device-to-host copy carries: a row per atom (positions, velocities, forces, ids), a halo or
#: migration message staged for a host-transport MPI, or a few numbers (reductions, counts)
COPY_KINDS = ("atoms", "message", "sums")

#: what :attr:`DeviceArrays.calls` counts, per phase: kernels queued on the stream (numba.cuda launches and
#: CuPy operations, each operation counted once), waits of the host for the stream (synchronisations and
#: the device-to-host copies, which wait), and host-to-device copies queued on the stream
CALL_KINDS = ("launches", "syncs", "uploads")


class DeviceArrays:
    """Device arrays in an array namespace (:attr:`xp`), on one stream that CuPy and numba.cuda share.

    On a GPU, :attr:`xp` is CuPy: its operations (sorts, scans, compaction,
    reductions; CUB behind them) and its memory pool serve the device
    arrays, and numba.cuda kernels launched on :attr:`stream` take the same
    arrays through ``__cuda_array_interface__`` (:meth:`view`, which skips
    numba's synchronisation on the array's stream: both libraries queue on
    one stream, so they are ordered without it).  Under numba's simulator
    :attr:`xp` is NumPy and the "device" is the host, so the same code is
    tested in CI.

    Every device-to-host copy goes through :meth:`to_host` (or
    :meth:`scalar`), which counts it in :attr:`copies` by kind
    (:data:`COPY_KINDS`): the count of ``"atoms"`` copies is the run's
    ``host_copies_per_step``.

    What a step costs the host is counted too, in :attr:`calls` under the
    current :attr:`phase` (:data:`CALL_KINDS`): each numba.cuda kernel
    launched through :meth:`launch`, each CuPy operation declared by the
    block that makes it (:meth:`ops`: CuPy has no hook to count its
    launches, so the code says what it launches, and the simulator's tests
    check every declaration against the operations the block really made),
    each wait for the stream (:meth:`sync`, :meth:`to_host`, :meth:`scalar`)
    and each copy to the device (:meth:`from_host`, :meth:`into_device`).
    """

    def __init__(self, simulated: bool = False):
        self.xp = array_namespace(simulated)
        self.simulated = simulated
        if self.simulated:
            self.stream = cuda.stream()
            self._stream = None
        else:
            import cupy

            cupy.cuda.Device(cuda.get_current_device().id).use()  # the GPU this rank was bound to (numba)
            self._stream = cupy.cuda.Stream(non_blocking=True)
            self._stream.use()  # CuPy's work of this thread goes on it
            self.stream = cuda.external_stream(self._stream.ptr)  # and numba's kernels too
        #: device-to-host copies so far, by kind
        self.copies = dict.fromkeys(COPY_KINDS, 0)
        #: per phase, ``[launches, syncs, uploads]`` so far (:data:`CALL_KINDS`)
        self.calls: dict[str, list[int]] = {}
        #: the phase the next calls are counted under (the caller's: ``DeviceAtoms`` names its phases)
        self.phase = "other"
        #: a profile, where set to a dict: the seconds of each :meth:`ops` block (by its place,
        #: ``package.module.function:line``) and each :meth:`launch` (``kernel NAME``), the stream waited
        #: for before and after each (waits that :attr:`calls` does not count); None, the default: nothing
        #: timed, no waits
        self.op_seconds: dict[str, float] | None = None

    @property
    def most_blocks(self) -> int:
        """The most blocks a grid-stride kernel is launched with: enough to fill any GPU, and under the
        simulator, which runs each CUDA thread as a Python thread, a few (a grid-stride kernel is correct
        for any grid, and its loop is then exercised)."""
        return 4 if self.simulated else 2048

    def count(self, launches: int = 0, syncs: int = 0, uploads: int = 0) -> None:
        """Add to the current phase's :attr:`calls`."""
        c = self.calls.get(self.phase)
        if c is None:
            c = self.calls[self.phase] = [0, 0, 0]
        c[0] += launches
        c[1] += syncs
        c[2] += uploads

    @contextlib.contextmanager
    def ops(self, launches: int, syncs: int = 0):
        """A block of array-namespace (CuPy) operations that launches ``launches`` kernels and waits ``syncs`` times.

        A CuPy call counts as one launch (a sort, scan or compaction launches a few kernels behind it);
        ``syncs`` are the waits hidden in calls whose result's size depends on the data (boolean
        indexing, ``nonzero``, ``bincount``: CuPy reads a count back before it allocates).
        """
        self.count(launches, syncs)
        if self.op_seconds is None:
            yield
            return
        caller = sys._getframe(1)  # out past contextlib and any ops() wrapping this one: the block's own frame
        while caller.f_code.co_filename == contextlib.__file__ or caller.f_code.co_name == "ops":
            caller = caller.f_back
        module = ".".join(caller.f_globals.get("__name__", "?").split(".")[-2:])  # its package and module
        with self._timed(f"{module}.{caller.f_code.co_name}:{caller.f_lineno}"):
            yield

    def launch(self, kernel, blocks: int, threads: int, *args) -> None:
        """``kernel[blocks, threads]`` on the stream, counted; ``args`` as the kernel takes them (see :meth:`view`)."""
        self.count(launches=1)
        if self.op_seconds is None:
            kernel[blocks, threads, self.stream](*args)
            return
        name = getattr(kernel, "__name__", None) or getattr(getattr(kernel, "py_func", None), "__name__", "?")
        with self._timed(f"kernel {name}"):
            kernel[blocks, threads, self.stream](*args)

    @contextlib.contextmanager
    def _timed(self, place: str):
        """Add the block's time to ``op_seconds[place]``, the stream drained before and after it."""
        self._wait()
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._wait()
            self.op_seconds[place] = self.op_seconds.get(place, 0.0) + time.perf_counter() - t0

    def view(self, a):
        """``a`` as a numba.cuda kernel argument (no copy)."""
        if self.simulated:  # wrapped, so that the simulator neither copies it in nor back
            from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

            return FakeCUDAArray(np.asarray(a))
        return cuda.as_cuda_array(a, sync=False)

    def sync(self) -> None:
        """Wait for the stream: before MPI reads or writes a device buffer, and before host timers."""
        self.count(syncs=1)
        self._wait()

    def _wait(self) -> None:
        """Wait for the stream (not counted: :meth:`sync` counts its waits)."""
        if self.simulated:
            self.stream.synchronize()
        else:
            self._stream.synchronize()

    def from_host(self, a, dtype=None):
        """A device copy of host array ``a`` (on the stream)."""
        a = np.ascontiguousarray(a, dtype=dtype)
        self.count(uploads=1)
        if self.simulated:
            return a.copy()
        out = self.xp.empty(a.shape, a.dtype)
        out.set(a, stream=self._stream)
        return out

    def into_device(self, host, dev) -> None:
        """``dev[...] = host`` (host array, e.g. a pinned receive buffer, into a device array)."""
        if dev.size:
            self.count(uploads=1)
            if self.simulated:
                dev[...] = host
            else:
                dev.set(host, stream=self._stream)

    def to_host(self, a, what: str, out=None) -> np.ndarray:
        """A host copy of device array ``a`` (into ``out`` if given, e.g. pinned), counted as ``what``.

        Waits for the copy: the result can be read (or handed to MPI) at once.
        """
        if what not in COPY_KINDS:
            raise ValueError(f"unknown kind of copy {what!r}; one of {COPY_KINDS}")
        self.copies[what] += 1
        self.count(syncs=1)
        if self.simulated:
            if out is None:
                return np.array(a)
            out[...] = a
            return out
        res = a.get(stream=self._stream, out=out)
        self._stream.synchronize()
        return res

    def fetch(self, a, out: np.ndarray) -> None:
        """Queue a copy of device array ``a`` into pinned host array ``out`` (:meth:`pinned`), no wait: it can be
        read after the next wait for the stream (:meth:`sync`, :meth:`to_host`).  Counted as ``"sums"``."""
        self.copies["sums"] += 1
        if self.simulated:
            out[...] = a
            return
        from cupy.cuda import runtime

        runtime.memcpyAsync(out.ctypes.data, a.data.ptr, a.nbytes, runtime.memcpyDeviceToHost, self._stream.ptr)

    def scalar(self, a) -> float:
        """A device 0-d array (a reduction) as a Python number, counted as ``"sums"``."""
        return self.to_host(self.xp.asarray(a), "sums").item()

    def pinned(self, shape, dtype=np.float64) -> np.ndarray:
        """A page-locked host array (a plain one under the simulator) to stage messages through."""
        if self.simulated:
            return np.empty(shape, dtype)
        import cupyx

        return cupyx.empty_pinned(shape, dtype)

    def mpi_buffer(self, a):
        """What mpi4py takes for device array ``a``: the array itself (CuPy arrays expose
        ``__cuda_array_interface__``; under the simulator they are host arrays).  Call :meth:`sync` first."""
        return a
