"""The test run's schedule for numba's CUDA simulator: loaded by Python at start-up in every child of
the test run (``tests/conftest.py`` puts this folder on PYTHONPATH); it acts only in a process
started with ``NUMBA_ENABLE_CUDASIM=1``.  (It also installs ``numba_blas_probe``, beside it: numba's
BLAS probe kept from scipy, as in a user's install, in every child.)

The simulator runs a kernel's threads as Python threads: each thread of each block is an OS thread
started for the launch, and the launching thread polls them all, holding the GIL, until every one has
ended (``numba.cuda.simulator.kernel.BlockManager``).  For the small kernels of an n-body step that
costs far more than the kernel's own Python: about 0.5 ms a thread, a minute and more for a few
dozen steps.  This module keeps what each thread executes and changes only when:

- a kernel that never synchronises its threads (no ``syncthreads*``, shared memory, warp
  intrinsics or grid group, in its code or the device functions it calls) runs its threads one after
  the other in the launching thread, each to its end: one of the orders a GPU may take, since such a
  kernel's threads may run in any order.  Its arrays are handed to it as the NumPy arrays the
  simulator's own wrappers hold (the wrappers give structured arrays attribute access, which those
  keep), so an element costs an index, not three calls;
- a kernel that does synchronise runs each CUDA thread as a greenlet of the launching thread (the
  ``greenlet`` package, which the ``test`` extra brings): in thread order each runs until it reaches
  the block's barrier or its end, and when every one not ended waits at the barrier they all go on,
  the simulator's rule.  No OS thread is started and none is polled: an LJ step's kernels with a
  barrier (the integration's displacement maximum, the lists' build) cost a thread start and a GIL
  hand-over per CUDA thread and barrier with OS threads: a 256-atom run of 10 steps on the simulated
  GPU took 11-13 s with them (a condition as the barrier), 2.8-3.4 s with greenlets (the run's
  ``wall_time``, AMD EPYC Zen 4, 2026-12-07).  Where greenlet is missing, such a kernel runs as the
  simulator runs it.

What a thread raises is raised by the launch, with the thread and block it came from, as the
simulator does.  ``tests/gpu/test_simulator_schedule.py`` checks both paths against the simulator's
own.  Set ``PYMPI_TEST_SIMULATOR=threads`` to run the simulator as numba ships it, but for one
repair, made under either schedule: the simulator's ``cuda.shared.array`` looks up a block's array
and creates it if missing without a lock, so two threads of a block could each create their own and
one would read memory no thread wrote (:func:`_lock_shared_arrays`; a cold CI run saw an LJ step on
the simulated GPU stop with "an atom moved 1.14e+39 sigma", once).
"""

from __future__ import annotations

import os
import sys

#: names in a kernel's code that mean its threads depend on one another
COOPERATION = frozenset({
    "syncthreads", "syncthreads_count", "syncthreads_and", "syncthreads_or", "shared", "this_grid", "sync",
    "syncwarp", "shfl_sync", "shfl_up_sync", "shfl_down_sync", "shfl_xor_sync", "all_sync", "any_sync",
    "eq_sync", "ballot_sync", "match_any_sync", "match_all_sync", "activemask", "lanemask_lt", "laneid",
})


def _code_names(code, seen: set) -> set:
    """The global and attribute names ``code`` and the functions defined in it use."""
    if code in seen:
        return set()
    seen.add(code)
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _code_names(const, seen)
    return names


_COOPERATES: dict = {}


def cooperates(fn, seen: set | None = None) -> bool:
    """Do the threads of kernel ``fn`` (a Python function) depend on one another?  Conservative: a
    name of :data:`COOPERATION` anywhere in its code or a device function it calls says yes."""
    known = _COOPERATES.get(fn)
    if known is not None:
        return known
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    seen = set() if seen is None else seen
    names = _code_names(fn.__code__, seen)
    found = bool(names & COOPERATION)
    if not found:
        cells = []
        for cell in fn.__closure__ or ():
            try:
                cells.append(cell.cell_contents)
            except ValueError:  # an empty cell
                pass
        called = [fn.__globals__.get(name) for name in names] + cells
        found = any(isinstance(obj, FakeCUDAKernel) and obj.fn.__code__ not in seen and cooperates(obj.fn, seen)
                    for obj in called)
    _COOPERATES[fn] = found
    return found


def _plain(arg):
    """A kernel argument as its thread sees it: the NumPy array inside the simulator's wrapper (not for
    structured arrays, whose fields the wrapper gives as attributes)."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeWithinKernelCUDAArray

    if isinstance(arg, FakeWithinKernelCUDAArray):
        ary = arg._item._ary
        if ary.dtype.names is None:
            return ary
    return arg


def _failed(exc: Exception, thread, block) -> Exception:
    """``exc`` as the simulator reports it: which thread of which block raised it."""
    where = f"tid={list(thread)} ctaid={list(block)}"
    return type(exc)(f"{where}: {exc}" if str(exc) else where)


def _lock_shared_arrays() -> None:
    """``cuda.shared.array`` of the simulator with its lookup and creation under one lock.

    numba's ``FakeCUDAShared.array`` keys a block's shared array by the caller's file and line,
    gets it from a dict and, if missing, creates it and stores it: two threads of one block between
    the get and the store each make an array of their own (``np.empty``, whatever was in memory),
    and the threads no longer share it.  The same, atomically (the caller's frame read directly)."""
    import threading

    import numpy as np
    from numba.core import types
    from numba.cuda.simulator import kernelapi
    from numba.np import numpy_support

    lock = threading.Lock()
    shipped = kernelapi.FakeCUDAShared.array

    def array(self, shape, dtype):
        if shape == 0:  # the dynamic shared memory: one buffer made with the module
            return shipped(self, shape, dtype)
        if isinstance(dtype, types.Type):
            dtype = numpy_support.as_dtype(dtype)
        caller = sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)
        with lock:
            res = self._allocations.get(key)
            if res is None:
                res = self._allocations[key] = np.empty(shape, dtype)
        return res

    kernelapi.FakeCUDAShared.array = array


def _become(me, point, dims, dim3) -> None:
    """The launching thread ``me`` takes CUDA thread ``point``'s indices, as the simulator's ``BlockThread``
    holds them (``cuda.threadIdx`` and ``laneid`` read them from the current thread)."""
    me.threadIdx = dim3(*point)
    me.thread_id = point[0] + dims[0] * (point[1] + dims[1] * point[2])


def _greenlet():
    """greenlet's module, or None where it is not installed."""
    try:
        import greenlet
    except ImportError:
        return None
    return greenlet


def _in_greenlets(greenlet, manager, grid_point, args) -> None:
    """The block at ``grid_point`` of a kernel whose threads synchronise: each CUDA thread a greenlet of
    the launching thread, which takes that thread's indices (and its ``syncthreads``, as the simulator's
    ``BlockThread`` has them) whenever it switches to it."""
    import threading

    import numpy as np
    from numba.cuda.simulator import kernel as sim

    me = threading.current_thread()
    hub = greenlet.getcurrent()
    state = manager.block_state
    dims = manager._block_dim

    def syncthreads():
        hub.switch()

    def voted(value, reduce):
        state[tuple(me.threadIdx)] = value
        syncthreads()
        result = reduce(state)
        syncthreads()
        return result

    me.syncthreads = syncthreads
    me.syncthreads_count = lambda value: voted(value, np.count_nonzero)
    me.syncthreads_and = lambda value: 1 if voted(value, np.all) else 0
    me.syncthreads_or = lambda value: 1 if voted(value, np.any) else 0
    me.blockIdx = sim.Dim3(*grid_point)
    plain = [_plain(a) for a in args]
    live = [(point, greenlet.greenlet(lambda: manager._f(*plain))) for point in np.ndindex(*dims)]
    try:
        while live:  # a round: each thread not ended runs to the barrier or its end
            waiting = []
            for point, g in live:
                _become(me, point, dims, sim.Dim3)
                try:
                    g.switch()
                except Exception as exc:
                    raise _failed(exc, point, grid_point).with_traceback(exc.__traceback__) from None
                if not g.dead:
                    waiting.append((point, g))
            live = waiting
    finally:
        del me.blockIdx, me.threadIdx, me.thread_id
        del me.syncthreads, me.syncthreads_count, me.syncthreads_and, me.syncthreads_or


def install() -> None:
    """Replace ``BlockManager.run`` of numba's simulator by the schedule the module docstring gives."""
    import threading

    import numpy as np
    from numba.cuda.simulator import kernel as sim

    _lock_shared_arrays()
    shipped = sim.BlockManager.run
    greenlet = _greenlet()

    def run(self, grid_point, *args):
        dims = self._block_dim
        if cooperates(self._f):
            if greenlet is None:
                return shipped(self, grid_point, *args)
            return _in_greenlets(greenlet, self, grid_point, args)
        me = threading.current_thread()
        me.blockIdx = sim.Dim3(*grid_point)
        plain = [_plain(a) for a in args]
        try:
            for point in np.ndindex(*dims):
                _become(me, point, dims, sim.Dim3)
                try:
                    self._f(*plain)
                except Exception as exc:
                    raise _failed(exc, point, grid_point).with_traceback(exc.__traceback__) from None
        finally:
            del me.blockIdx, me.threadIdx, me.thread_id

    sim.BlockManager.run = run


def _on_import(module_name: str, then) -> None:
    """Call ``then()`` once ``module_name`` has been imported (a finder ahead of the others)."""
    import importlib.abc
    import importlib.util

    class _Hook(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name != module_name:
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            execute = spec.loader.exec_module

            def exec_module(module):
                execute(module)
                then()

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _Hook())


def _chain() -> None:
    """Run the ``sitecustomize`` this one shadows (the distribution's), if any."""
    here = os.path.dirname(os.path.abspath(__file__))
    for folder in sys.path:
        path = os.path.join(folder or os.getcwd(), "sitecustomize.py")
        if os.path.dirname(os.path.abspath(path)) != here and os.path.isfile(path):
            with open(path) as f:
                exec(compile(f.read(), path, "exec"), {"__name__": "sitecustomize", "__file__": path})
            return


if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
    _on_import("numba.cuda.simulator.kernel",
               _lock_shared_arrays if os.environ.get("PYMPI_TEST_SIMULATOR", "") == "threads" else install)
__import__("numba_blas_probe").install()  # the module beside this one: numba without scipy's BLAS, as users run
_chain()
