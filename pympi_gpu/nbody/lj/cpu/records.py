"""The CPU engine's state as named records, each defined once: what its compiled calls take.

A step's program (``ForceKernels.run_ops``), a batch of steps
(:mod:`~pympi_gpu.nbody.lj.cpu.steps`) and a rebuild
(:func:`~pympi_gpu.nbody.lj.cpu.rebuild.rebuild_brick`) read and write some
sixty arrays.  They travel as eight records, numba structrefs (a record is a
pointer to its fields: a call unboxes it in about half a microsecond, where
forty arrays of their own cost microseconds), in this order wherever a call
takes several:

* :class:`Rows`, one set of a brick's row buffers (there are two: a rebuild
  sorts the atoms from one into the other): positions, forces, ids of every
  row held, velocities of the owned, and how many rows are owned and held;
* :class:`Lists`, the Verlet lists the steps use and what they were built at
  (``x0``);
* :class:`Build`, what a rebuild writes before its lists are the steps': the
  migration's rows, the border messages', the sort's, the list build's buffers
  (:class:`~pympi_gpu.nbody.lj.cpu.lists.VerletLists`);
* :class:`Plan`, the halo's ghost plan, message regions and the steps'
  message buffers (:class:`~pympi_gpu.nbody.lj.cpu.halo.Halo`);
* :class:`Mpi`, the handles of the MPI calls the kernels make, and the
  step's agreement (``top``) and the calls' tally;
* :class:`Grid`, what stays for the run: the cell grid, the radii, ``dt``;
* :class:`Work`, the scratch: the step's energy sums, a batch's step times
  and what its rebuilds left, a rebuild's state and tally;
* :class:`Bath`, the run's thermostat (:mod:`~pympi_gpu.nbody.lj.thermostats`):
  its number, constants and state, its random stream's key, the step under
  way and the sums of m v^2 it reduces.

The fields of each are named here, once; the Python side makes a record with
keywords (:func:`make`) and the kernels read fields by name.  A record holds
the arrays themselves (views of the buffers the Python objects keep): where a
buffer is replaced, the records are made again (``HostAtoms._records``); what
a rebuild changes inside a compiled call (the counts ``Rows.n``, ``Rows.held``;
the steps' lists and plan entries, views of what it built) it writes into the
records.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.experimental import structref

from pympi_gpu.device.jitcache import guard_cache
from pympi_gpu.mpi import numba_calls
from pympi_gpu.nbody.lj.cpu import lists as lists_cpu

guard_cache()  # this module's kernels are cached: numba's cache mended first (see jitcache)

__all__ = ["Rows", "Lists", "Build", "Plan", "Mpi", "Grid", "Work", "Bath", "make", "count", "idle", "idle_bath", "bath"]


class _Record(types.StructRef):
    """A record's numba type: its fields' types as the values given (literals unliteral)."""

    def preprocess_fields(self, fields):
        return tuple((name, types.unliteral(t)) for name, t in fields)


@structref.register
class RowsType(_Record):
    pass


@structref.register
class ListsType(_Record):
    pass


@structref.register
class BuildType(_Record):
    pass


@structref.register
class PlanType(_Record):
    pass


@structref.register
class MpiType(_Record):
    pass


@structref.register
class GridType(_Record):
    pass


@structref.register
class WorkType(_Record):
    pass


@structref.register
class BathType(_Record):
    pass


class Rows(structref.StructRefProxy):
    """One set of a brick's row buffers: ``pos``, ``f``, ``gid`` (every row: ``held`` of them, owned
    first), ``v`` (the ``n`` owned rows), each with room to spare."""

    FIELDS = ("pos", "f", "v", "gid", "n", "held")


class Lists(structref.StructRefProxy):
    """The Verlet lists the steps use (``own_cnt, own_nbr, gh_cnt, gh_nbr``: rows of the owned atoms) and
    the owned positions they were built at (``x0``): views of a :class:`Build`'s buffers, made by the
    last rebuild."""

    FIELDS = ("x0", "own_cnt", "own_nbr", "gh_cnt", "gh_nbr")


class Build(structref.StructRefProxy):
    """What a rebuild writes before its lists are the steps' (:class:`Lists`): the migration's ``rows``
    and the migrants ``leaving`` (the halo's), a border stage's ``message`` and the rows ``received``
    (the halo's), the sort's ``order``, ``cell``, ``start`` and ``x0``, the list build's buffers
    (``lcell ... far``: the records by field and the stencils' copies,
    :mod:`~pympi_gpu.nbody.lj.cpu.lists`) and the lists' rows (``own_cnt ... gh_nbr``, with room to
    spare)."""

    FIELDS = ("rows", "leaving", "message", "received", "order", "cell", "start", "x0", "lcell", "ostart", "gstart",
              "orec", "grec", "bo", "bg", "near", "far", "own_cnt", "own_nbr", "gh_cnt", "gh_nbr")


class Plan(structref.StructRefProxy):
    """The halo of one brick as the kernels use it (:class:`~pympi_gpu.nbody.lj.cpu.halo.Halo`): the
    brick's place (``dims``, ``coords``, ``remote``: the dimensions whose neighbours are other ranks,
    ``one``: those where both are one rank, ``nbrs`` ``(3, 2)``), the first message ``tags`` of a
    migration and of the borders, ``up0`` (a half shell: a stage sends only ghosts up); the ghost
    plan (``below``, ``above``: the faces' reach; ``pidx``, the steps' entries, a view of
    ``plan_rows``, the buffer a rebuild writes; ``poff``, ``pstart``, ``counts``, ``pshift``), the
    message regions (``regions``, ``soff``, ``roff``, ``nrecv``) and the step's
    message buffers (``fsend``, ``frecv``, ``rsend``, ``rrecv``)."""

    FIELDS = ("dims", "coords", "remote", "one", "nbrs", "tags", "up0", "below", "above", "pidx", "plan_rows", "poff",
              "pstart", "counts", "pshift", "regions", "soff", "roff", "nrecv", "fsend", "frecv", "rsend", "rrecv")


class Mpi(structref.StructRefProxy):
    """The MPI calls the kernels make (:mod:`~pympi_gpu.mpi.numba_calls`): the halo's persistent
    requests (``reqs``, stage d's forward ones at ``req_at[2d]``, reverse at ``req_at[2d + 1]``), the
    step's agreement (``agree``, the reduction of ``top[:2]`` into ``top[2:]``), the thermostat's sum
    (``total``, the reduction (SUM) of the :class:`Bath`'s ``mv2[:1]`` into ``mv2[1:]``; empty where
    none is made) and their ``status`` room, the calls' ``tally`` (``kernels_cpu.TALLY_*``); a
    rebuild's exchanges (the communicator's and ``MPI_DOUBLE``'s handles ``comm``, ``double``, room
    for two ``requests`` of ``rsize`` bytes and their ``rstatus``, the counts ``got``)."""

    FIELDS = ("reqs", "req_at", "agree", "total", "top", "status", "tally", "comm", "double", "requests", "rsize",
              "rstatus", "got")


class Grid(structref.StructRefProxy):
    """What stays for a run: the cell grid (``lo``, ``inv``, ``ncell``, ``reach``), the box's three edges, the
    squared list radius and cutoff (``cut2``, ``rc2``), ``dt``, ``half`` (half lists, Newton's third
    law), and the list build's vector lanes and block (``simd``, ``block``)."""

    FIELDS = ("lo", "inv", "ncell", "reach", "box", "cut2", "rc2", "dt", "half", "simd", "block")


class Work(structref.StructRefProxy):
    """The scratch of the compiled calls: ``sums`` (the step's pair energy and virial, owned and ghost
    pairs), a batch's step ``times``, what its rebuilds left (``held``: ``steps_cpu.H_*``) and their
    ``seconds``; a rebuild's ``state`` (``rebuild_cpu.ST_*``) and ``tally`` (``rebuild_cpu.TALLY_*``)."""

    FIELDS = ("sums", "times", "held", "seconds", "state", "tally")


class Bath(structref.StructRefProxy):
    """The run's thermostat (a :class:`~pympi_gpu.nbody.lj.thermostats.Bath`) as the kernels take it: its
    number in the registry (``kind``), its constants (``params``) and state (``state``), its random
    stream's ``key``, ``at`` (the step whose forces are made) and ``mv2`` ([this rank's sum of m v^2,
    every rank's])."""

    FIELDS = ("kind", "params", "state", "key", "at", "mv2")


for _proxy, _type in ((Rows, RowsType), (Lists, ListsType), (Build, BuildType), (Plan, PlanType), (Mpi, MpiType),
                      (Grid, GridType), (Work, WorkType), (Bath, BathType)):
    structref.define_proxy(_proxy, _type, list(_proxy.FIELDS))


# A record made in Python is made by a compiled constructor (a structref's own is compiled afresh in every
# process, about a quarter of a second each, seven or eight of them at every start of an LJ run): these are
# cached like the kernels.
@njit(cache=True)
def _new_rows(pos, f, v, gid, n, held):
    return Rows(pos, f, v, gid, n, held)


@njit(cache=True)
def _new_lists(x0, own_cnt, own_nbr, gh_cnt, gh_nbr):
    return Lists(x0, own_cnt, own_nbr, gh_cnt, gh_nbr)


@njit(cache=True)
def _new_build(rows, leaving, message, received, order, cell, start, x0, lcell, ostart, gstart, orec, grec, bo, bg,
               near, far, own_cnt, own_nbr, gh_cnt, gh_nbr):
    return Build(rows, leaving, message, received, order, cell, start, x0, lcell, ostart, gstart, orec, grec, bo, bg,
                 near, far, own_cnt, own_nbr, gh_cnt, gh_nbr)


@njit(cache=True)
def _new_plan(dims, coords, remote, one, nbrs, tags, up0, below, above, pidx, plan_rows, poff, pstart, counts, pshift,
              regions, soff, roff, nrecv, fsend, frecv, rsend, rrecv):
    return Plan(dims, coords, remote, one, nbrs, tags, up0, below, above, pidx, plan_rows, poff, pstart, counts,
                pshift, regions, soff, roff, nrecv, fsend, frecv, rsend, rrecv)


@njit(cache=True)
def _new_mpi(reqs, req_at, agree, total, top, status, tally, comm, double, requests, rsize, rstatus, got):
    return Mpi(reqs, req_at, agree, total, top, status, tally, comm, double, requests, rsize, rstatus, got)


@njit(cache=True)
def _new_grid(lo, inv, ncell, reach, box, cut2, rc2, dt, half, simd, block):
    return Grid(lo, inv, ncell, reach, box, cut2, rc2, dt, half, simd, block)


@njit(cache=True)
def _new_work(sums, times, held, seconds, state, tally):
    return Work(sums, times, held, seconds, state, tally)


@njit(cache=True)
def _new_bath(kind, params, state, key, at, mv2):
    return Bath(kind, params, state, key, at, mv2)


_NEW = {Rows: _new_rows, Lists: _new_lists, Build: _new_build, Plan: _new_plan, Mpi: _new_mpi, Grid: _new_grid,
        Work: _new_work, Bath: _new_bath}


def make(record: type, **fields):
    """A ``record`` (one of this module's classes) of the ``fields`` given by name (every one of its own)."""
    if fields.keys() != set(record.FIELDS):
        missing, extra = set(record.FIELDS) - fields.keys(), fields.keys() - set(record.FIELDS)
        raise TypeError(f"{record.__name__}: missing {sorted(missing)}, unknown {sorted(extra)}")
    return _NEW[record](*(fields[name] for name in record.FIELDS))


@njit(cache=True)
def count(rows, n, held):
    """Set a :class:`Rows` record's owned and held rows (after a rebuild made in Python)."""
    rows.n = n
    rows.held = held


def idle(st: np.ndarray) -> tuple:
    """Records of a brick of no atoms, of the types a run's have (what the warmups compile for):
    ``(rows, spare, lists, build, plan, mpi, grid, work)``, ``st`` the rebuild's state
    (``rebuild_cpu.state``).  Its grid has no cell and its build's buffers are made for one: a rebuild
    stops at the lists."""
    f3, i1, b3, i32, r32 = (np.zeros((1, 3)), np.zeros(1, np.int64), np.zeros(3, np.bool_),
                            np.zeros((1, 1), np.int32), np.zeros((4, 1), np.float32))
    no_bytes = np.zeros(0, np.uint8)
    rows, spare = (make(Rows, pos=f3.copy(), f=f3.copy(), v=f3.copy(), gid=i1.copy(), n=0, held=0) for _ in range(2))
    lists = make(Lists, x0=f3, own_cnt=i1, own_nbr=i32, gh_cnt=i1, gh_nbr=i32)
    build = make(Build, rows=np.zeros((1, 10)), leaving=np.zeros((1, 10)), message=np.zeros((1, 4)),
                 received=np.zeros((1, 4)), order=i1, cell=i1, start=i1, x0=f3.copy(), lcell=i1,
                 ostart=np.zeros(2, np.int64), gstart=np.zeros(2, np.int64), orec=r32, grec=r32, bo=r32, bg=r32,
                 near=np.zeros(1, np.int32), far=np.zeros(1, np.int32), own_cnt=i1.copy(), own_nbr=i32.copy(),
                 gh_cnt=i1.copy(), gh_nbr=i32.copy())
    plan = make(Plan, dims=np.ones(3, np.int64), coords=np.zeros(3, np.int64), remote=b3, one=b3,
                nbrs=np.zeros((3, 2), np.int64), tags=np.zeros(2, np.int64), up0=True, below=np.zeros(3),
                above=np.zeros(3), pidx=i1, plan_rows=i1.copy(), poff=np.zeros(7, np.int64),
                pstart=np.zeros(6, np.int64), counts=np.zeros(6, np.int64), pshift=np.zeros((6, 3)),
                regions=np.full(12, -1, np.int64), soff=np.zeros(7, np.int64), roff=np.zeros(7, np.int64),
                nrecv=np.zeros(3, np.int64), fsend=f3, frecv=f3, rsend=f3, rrecv=f3)
    mpi = make(Mpi, reqs=no_bytes, req_at=np.zeros((6, 2), np.int64), agree=no_bytes, total=no_bytes.copy(),
               top=np.zeros(4),
               status=numba_calls.statuses(4), tally=np.zeros(6), comm=0, double=0,
               requests=np.zeros(2 * numba_calls.request_size(), np.uint8), rsize=numba_calls.request_size(),
               rstatus=numba_calls.statuses(2), got=np.zeros(3, np.int64))
    grid = make(Grid, lo=np.zeros(3), inv=np.ones(3), ncell=np.zeros(3, np.int64), reach=2, box=np.ones(3), cut2=1.0,
                rc2=1.0, dt=0.005, half=True, simd=lists_cpu.SIMD, block=lists_cpu.BLOCK)
    work = make(Work, sums=np.zeros(4), times=np.zeros(1), held=np.zeros(3, np.int64), seconds=np.zeros(1),
                state=st, tally=np.zeros(3))
    return rows, spare, lists, build, plan, mpi, grid, work


def idle_bath():
    """A :class:`Bath` record of no thermostat, of the types a run's has (what the warmups compile for)."""
    from pympi_gpu.nbody.lj.thermostats import Bath as Thermostat, Setting

    return bath(Thermostat("nve", Setting(temperature=1.0, tdamp=1.0, dt=0.005, atoms=4, seed=1)))


def bath(b) -> Bath:
    """The :class:`Bath` record of the thermostat ``b`` (a :class:`~pympi_gpu.nbody.lj.thermostats.Bath`):
    its arrays themselves, which the kernels write and the Python side reads."""
    return make(Bath, kind=np.int64(b.kind), params=b.params, state=b.state, key=np.uint64(b.key), at=b.at,
                mv2=b.mv2)
