"""The quiet steps between two outputs as one compiled call, their rebuilds included.

Between two steps at which a collective writer may be due the run loop hands
the system a number of *quiet* steps (:meth:`LjSystem.advance_quiet
<pympi_gpu.nbody.lj.system.LjSystem.advance_quiet>`), which
:meth:`HostAtoms.steps <pympi_gpu.nbody.lj.cpu.atoms.HostAtoms.steps>` takes
with :func:`make_run_steps`'s kernel (:func:`kernel`): step after step the step's one
program (``ForceKernels.run_ops``: kick, drift, the displacement's
agreement, forces, halo, closing kick), and where the ranks agree on a
rebuild, the rebuild (:func:`~pympi_gpu.nbody.lj.cpu.rebuild.rebuild_brick`)
and the forces after it (the program of a step right after a rebuild) in the
same call, the atoms sorted into the other set of buffers and the step's
arguments taken from there.  The operations, their order and their buffers
are those of :meth:`HostAtoms.step`, so the state is the same bit for bit.

The call returns to Python where a rebuild needs what only Python does:

* :data:`REBUILD`: an atom moved farther than the ghosts reach (Python
  raises), or the rebuild's workspace is short for the atoms now owned;
  nothing of the rebuild was done;
* :data:`REBUILDING`: the rebuild found a buffer short and stopped (its code,
  :data:`~pympi_gpu.nbody.lj.cpu.rebuild.GROW`, is the third value returned):
  Python grows it and finishes the rebuild from where it stopped;
* :data:`REBUILT`: the rebuild is done but the plan's message regions changed,
  so the persistent messages are made anew (MPI handles, in Python).

Each returns with the forces of that step left to compute.  ``work.held``
(``H_*``) says what the rebuilds made inside left: the owned rows and all rows
of the current set and how many there were (the sets swapped as many times).

The kernel takes up to ``most`` steps of program ``ops`` (a whole step, its
MPI calls in it) without energy sums, each step's number in ``bath.at[0]``
(moved on by one as each step starts: a thermostat's random stream is drawn
at it), and returns ``(code, steps, rebuild code)``, each step's seconds (``MPI_Wtime``) in ``work.times``:
``kernels_cpu.RAN`` after ``most`` steps or the step whose stop request the
ranks agreed on (``mpi.top[3]``), else one of the codes above.  Where ``inside``
(the rebuild is compiled), a rebuild whose displacement is no more than
``limit2`` is made in the call, then the forces (program ``after``);
``work.seconds[0]``: the rebuilds' seconds, added.  The state is the records
of :mod:`~pympi_gpu.nbody.lj.cpu.records`, the current set of rows and the
spare one first.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import njit

from pympi_gpu.device.jitcache import guard_cache, keyed_by_code, sources
from pympi_gpu.mpi import numba_calls
from pympi_gpu.nbody.lj import thermostats
from pympi_gpu.nbody.lj.cpu import kernels as kc
from pympi_gpu.nbody.lj.cpu import lists as lists_cpu
from pympi_gpu.nbody.lj.cpu import rebuild as rebuild_cpu
from pympi_gpu.nbody.lj.cpu import records

guard_cache()  # this module's kernels are cached: numba's cache mended first (see jitcache)

__all__ = ["make_run_steps", "kernel", "warm", "warmup", "REBUILDING", "REBUILT", "H_N", "H_HELD",
           "H_REBUILDS"]

#: what :func:`make_run_steps`'s kernel returns besides ``kernels_cpu``'s RAN, REBUILD and MPI_FAILED
REBUILDING, REBUILT = 3, 4
#: ``held``'s entries: the owned rows and all rows of the current set, the rebuilds made inside
H_N, H_HELD, H_REBUILDS = range(3)
#: the compiled rebuild the kernels call (as this module found it)
_rebuild_brick = rebuild_cpu.rebuild_brick


def make_run_steps(run_ops, linked: bool):
    """Whole steps in one call, rebuilds included, around a step's program (``ForceKernels.run_ops``),
    timed with ``MPI_Wtime`` where ``linked`` (the kernels call the loaded libmpi): the module docstring
    says what it takes and returns."""
    wtime = numba_calls.calls(linked)[2]
    rebuild = _rebuild_brick

    @njit(nogil=True, cache=True)
    def run_steps(ops, after, most, h, stop2, limit2, inside, cur, spare, lists, build, plan, mpi, grid, work, bath):
        """(:func:`make_run_steps`)"""
        t0, done = wtime(), rebuild_cpu.DONE
        sums, times, held, st, top = work.sums, work.times, work.held, work.state, mpi.top
        for s in range(most):
            sums[:] = 0.0
            bath.at[0] += 1  # the step under way (the thermostat's random stream is drawn at it)
            code = run_ops(ops, h, False, stop2, cur, lists, plan, mpi, grid, work, bath)
            if (code == kc.REBUILD and inside and top[2] <= limit2 and build.rows.shape[0] >= cur.n
                    and build.order.shape[0] >= cur.n):
                t1 = wtime()
                st[:] = 0
                st[rebuild_cpu.ST_N] = cur.n
                done = rebuild(cur, spare, lists, build, plan, mpi, grid, work)
                work.seconds[0] += wtime() - t1
                code = REBUILDING
                if done == rebuild_cpu.DONE:  # the atoms are in the other set: the steps go on from there
                    cur, spare = spare, cur
                    held[H_N], held[H_HELD], held[H_REBUILDS] = cur.n, cur.held, held[H_REBUILDS] + 1
                    code = REBUILT if st[rebuild_cpu.ST_CHANGED] else kc.RAN
                if code == kc.RAN:
                    sums[:] = 0.0
                    code = run_ops(after, h, False, stop2, cur, lists, plan, mpi, grid, work, bath)
            t1 = wtime()
            times[s] = t1 - t0
            t0 = t1
            if code != kc.RAN or top[3] != 0.0:
                return code, s + 1, done
        return kc.RAN, most, done

    # it closes over kernels (see jitcache), and the rebuild's code declares the library's handle types
    return keyed_by_code(run_steps, lambda: ("MPI handle bytes", numba_calls.handle_width()),
                         sources(kc, lists_cpu, rebuild_cpu, numba_calls, records, *thermostats.modules()))


@functools.cache
def kernel(forces):
    """The batch of steps of the force kernels ``forces`` (``kernels_cpu.force_kernels``), made once."""
    return make_run_steps(forces.run_ops, forces.linked)


def warmup(forces) -> None:
    """Compile (or load from numba's cache) the batch of steps of ``forces`` (:func:`kernel`) for the
    record types :class:`~pympi_gpu.nbody.lj.cpu.atoms.HostAtoms` gives it, by a call of no step, where
    numba can call MPI (:func:`~pympi_gpu.mpi.numba_calls.link`: else no batch is taken)."""
    if not forces.linked or not numba_calls.link():
        return
    ops = np.zeros((0, 2), np.int64)
    kernel(forces)(ops, ops, 0, 0.1, 1.0, 1.0, True, *records.idle(rebuild_cpu.state(0)), records.idle_bath())


def warm(pair, compiled_mpi: bool = True, kernels_call_mpi: bool = False) -> None:
    """Compile (or load from numba's cache) every kernel a CPU run of pair term ``pair`` calls, before
    the run.

    Where the step's kernels make its MPI calls (``kernels_call_mpi``: the ranks' word,
    :func:`~pympi_gpu.nbody.lj.system.kernels_call_mpi`) a run calls four compiled functions from Python,
    the records' constructors, the step's program, the rebuild and the batch of steps: those only (the
    seventeen kernels of Python's step, loaded from the cache, cost each rank 0.2 CPU-s at start-up, a
    tenth of a short run's).  Otherwise everything Python's step calls (``kernels_cpu.warmup``) and,
    where the kernels may call MPI (``compiled_mpi``: the device's word), the rebuild and the batch."""
    forces = kc.force_kernels(pair)
    if kernels_call_mpi and forces.linked:
        kc.warm_program(forces)
        rebuild_cpu.warmup()
        warmup(forces)
        return
    kc.warmup(forces)
    if compiled_mpi:
        rebuild_cpu.warmup()
        warmup(forces)
