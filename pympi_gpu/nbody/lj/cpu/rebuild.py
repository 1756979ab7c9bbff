"""A brick's rebuild as one compiled call, its MPI calls included: migration, sort, ghosts, Verlet lists.

At a few hundred atoms a rank a rebuild is some fifteen compiled pieces
(:mod:`~pympi_gpu.nbody.lj.cpu.kernels`, the list build of
:mod:`~pympi_gpu.nbody.lj.cpu.lists`, the messages of
:func:`~pympi_gpu.mpi.numba_calls.exchange_rows`) and the Python between
them, which cost about a third of it.  :func:`rebuild_brick` runs the same
pieces in the same order on the same buffers, from one call:

1. the owned atoms packed as migration rows (positions folded into the box);
2. per dimension whose neighbours are other ranks, the rows that left sent to
   them and theirs received (``halo._migrate_dim``'s messages);
3. the owned atoms sorted by (cell, id) into the other set of buffers;
4. the ghost plan stage by stage, the brick's own images in place and the
   others' rows exchanged (``Halo.build``'s messages);
5. the ghosts' force rows zeroed and the Verlet lists built.

Where a buffer is short it returns a code saying which (:data:`GROW`) and
how many rows it needs (``st[ST_NEED]``), with where it stopped in ``st``; the
caller grows that buffer, its first rows kept as the Python path keeps
them, and calls again with the same ``st``: the call goes on from there,
receiving the messages already on their way where a probe found the
receive buffer short.  The state, the plan, the messages and their bytes are
the Python path's, bit for bit (:meth:`HostAtoms.rebuild
<pympi_gpu.nbody.lj.cpu.atoms.HostAtoms.rebuild>` takes it where the
step's kernels make its MPI calls).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from pympi_gpu.device.jitcache import guard_cache, sources
from pympi_gpu.mpi import numba_calls
from pympi_gpu.nbody.lj.cpu import kernels as kc
from pympi_gpu.nbody.lj.cpu import lists as lists_cpu
from pympi_gpu.nbody.lj.cpu import records

guard_cache()  # this module's kernels are cached: numba's cache mended first (see jitcache)

__all__ = ["rebuild_brick", "warmup", "state", "DONE", "GROW", "LOST", "FAILED", "AGREE", "ST_N", "ST_HELD",
           "ST_NEED", "ST_STAY", "ST_WIDTHS", "ST_D", "ST_CHANGED", "ST_FINITE", "TALLY_SECONDS", "TALLY_BYTES",
           "TALLY_MESSAGES"]

#: ``st``'s entries: where the call is (phase, dimension, a message on its way), the owned rows and the
#: rows held, what a short buffer needs, the migration's rows staying, leaving down and up, a border
#: stage's rows to each side, whether the plan's message regions changed, the longest list rows found (two);
#: whether the ranks must agree on the migration (a rebuild no displacement's agreement vouched for: the
#: run's first) and whether every velocity and force packed was finite
(ST_PHASE, ST_D, ST_RESUME, ST_N, ST_HELD, ST_NEED, ST_STAY, ST_DOWN, ST_UP, ST_LOW, ST_HIGH, ST_CHANGED,
 ST_WIDTHS) = range(13)
ST_CHECK, ST_FINITE = ST_WIDTHS + 2, ST_WIDTHS + 3
_ST_SIZE = ST_FINITE + 1
_PACK, _MIGRATE, _SORT, _GHOSTS, _LISTS = range(5)
#: ``st[ST_RESUME]``: nothing on its way; a probe found the receive buffer short (receive, then go on);
#: the ghosts received, the rows they go to short
_FRESH, _RECEIVE, _RECEIVED = range(3)

#: what :func:`rebuild_brick` returns: done, or a short buffer (grow it and call again), an atom that
#: moved more than a brick, a failed MPI call (its code in ``got[2]``), or (where ``st[ST_CHECK]``) the
#: migration made: the ranks agree on it (``LjSystem.agree_migration``), and the call goes on
DONE = 0
GROW_ROWS, GROW_LEAVING, GROW_SET, GROW_PLAN, GROW_MESSAGE, GROW_RECEIVED, GROW_GHOSTS, GROW_LISTS, GROW_WIDTHS = \
    range(1, 10)
GROW = {GROW_ROWS: "rows", GROW_LEAVING: "leaving", GROW_SET: "set", GROW_PLAN: "plan", GROW_MESSAGE: "message",
        GROW_RECEIVED: "received", GROW_GHOSTS: "ghosts", GROW_LISTS: "lists", GROW_WIDTHS: "widths"}
LOST, FAILED, AGREE = 10, 11, 12
#: ``tally``: seconds in the migration and the ghost plan (as the Python path's clock counts them),
#: bytes and messages handed to MPI
TALLY_SECONDS, TALLY_BYTES, TALLY_MESSAGES = range(3)


def state(n: int, st: np.ndarray | None = None, check: bool = False) -> np.ndarray:
    """``st`` for a rebuild of ``n`` owned atoms: a new one, or ``st`` set back.  ``check``: the ranks
    agree on the migration (:data:`AGREE`)."""
    st = np.zeros(_ST_SIZE, np.int64) if st is None else st
    st.fill(0)
    st[ST_N], st[ST_CHECK] = n, check
    return st


@njit(cache=True, inline="always")
def _sent(tally, rows, width, one):
    """Count a rebuild exchange's messages as ``halo._exchange`` does: one message of the rows and the
    split's row where the neighbours are one rank, else two."""
    tally[TALLY_BYTES] += 8.0 * (rows + one) * width
    tally[TALLY_MESSAGES] += 1.0 if one else 2.0


@njit(inline="always")
def _migrate(st, got, tally, rows, leaving, box, dims, coords, remote, nbrs, tag, mpi):
    """Phase 2: every dimension's migration from ``st[ST_D]`` on; :data:`DONE` or a code."""
    comm, double, requests, rsize, status = mpi
    n = st[ST_N]
    for d in range(st[ST_D], 3):
        if not remote[d]:
            continue
        st[ST_D] = d
        lower, upper = nbrs[d, 0], nbrs[d, 1]
        if st[ST_RESUME] == _FRESH:
            if leaving.shape[0] < 2 * n + 1:
                st[ST_NEED] = 2 * n + 1
                return GROW_LEAVING
            stay, nd, nu = kc.leaving_rows(rows, n, dims[d] / box[d], dims[d], coords[d], d, leaving[:n], leaving[n:])
            if stay < 0:
                return LOST
            for k in range(nu):  # the rows going up after those going down
                for e in range(leaving.shape[1]):
                    leaving[nd + k, e] = leaving[n + k, e]
            st[ST_STAY], st[ST_DOWN], st[ST_UP] = stay, nd, nu
            _sent(tally, nd + nu, leaving.shape[1], lower == upper)
        stay, nd, nu = st[ST_STAY], st[ST_DOWN], st[ST_UP]
        done = numba_calls.exchange_rows(leaving, nd, nd + nu, rows, stay, lower, upper, tag + 4 * d, comm, double,
                                         requests, rsize, status, st[ST_RESUME] == _RECEIVE, got)
        if done == numba_calls.NEED_ROOM:
            st[ST_RESUME], st[ST_NEED] = _RECEIVE, stay + got[0] + got[1]
            return GROW_ROWS
        if done == numba_calls.EXCHANGE_FAILED:
            return FAILED
        st[ST_RESUME] = _FRESH
        n = st[ST_N] = stay + got[0] + got[1]
    st[ST_D] = 0
    return DONE


@njit(inline="always")
def _ghosts(st, got, tally, pos, gid, plan, build, up0, mpi):
    """Phase 4: the ghost plan from stage ``st[ST_D]`` on (``Halo.build``), the rows into ``pos``, ``gid``;
    :data:`DONE` or a code."""
    comm, double, requests, rsize, status = mpi
    below, above, pidx, poff, pstart, counts = plan.below, plan.above, plan.plan_rows, plan.poff, plan.pstart, \
        plan.counts
    pshift, remote, nbrs, tag, message, received = plan.pshift, plan.remote, plan.nbrs, plan.tags[1], build.message, \
        build.received
    d = st[ST_D]
    while d < 3:
        st[ST_D] = d
        held = st[ST_HELD]
        if not remote[d]:  # a run of the brick's own images: in place, again from its start if short
            d1 = d + 1
            while d1 < 3 and not remote[d1]:
                d1 += 1
            m, entries, rows = kc.local_stages(pos, gid, held, d, d1, below, above, pidx, poff, up0, pshift, pstart,
                                               counts)
            if m < 0:
                st[ST_NEED] = entries if entries else rows
                return GROW_PLAN if entries else GROW_GHOSTS
            st[ST_HELD] = m
            d = d1
            continue
        lower, upper = nbrs[d, 0], nbrs[d, 1]
        o = poff[2 * d]
        if st[ST_RESUME] == _FRESH:
            if pidx.shape[0] < o + 2 * held + 1:
                st[ST_NEED] = o + 2 * held + 1
                return GROW_PLAN
            if message.shape[0] < 2 * held + 1:
                st[ST_NEED] = 2 * held + 1
                return GROW_MESSAGE
            nl, nh = kc.border_pack(pos, gid, held, d, below[d], above[d], pidx, o, up0, pshift, message)
            poff[2 * d + 1], poff[2 * d + 2] = o + nl, o + nl + nh
            st[ST_LOW], st[ST_HIGH] = nl, nh
            _sent(tally, nl + nh, message.shape[1], lower == upper)
        if st[ST_RESUME] != _RECEIVED:
            nl, nh = st[ST_LOW], st[ST_HIGH]
            done = numba_calls.exchange_rows(message, nl, nl + nh, received, 0, lower, upper, tag + 4 * d, comm,
                                             double, requests, rsize, status, st[ST_RESUME] == _RECEIVE, got)
            if done == numba_calls.NEED_ROOM:
                st[ST_RESUME], st[ST_NEED] = _RECEIVE, got[0] + got[1]
                return GROW_RECEIVED
            if done == numba_calls.EXCHANGE_FAILED:
                return FAILED
            counts[2 * d], counts[2 * d + 1] = got[0], got[1]
        c0, c1 = counts[2 * d], counts[2 * d + 1]
        if pos.shape[0] < held + c0 + c1:
            st[ST_RESUME], st[ST_NEED] = _RECEIVED, held + c0 + c1
            return GROW_GHOSTS
        kc.unpack_ghosts(received, c0 + c1, pos, gid, held)
        pstart[2 * d], pstart[2 * d + 1] = held, held + c0
        st[ST_HELD] = held + c0 + c1
        st[ST_RESUME] = _FRESH
        d += 1
    return DONE


@njit(inline="always")
def _lists(st, pos, f, build, grid):
    """Phase 5: the ghosts' force rows zeroed, the Verlet lists built; :data:`DONE` or a code."""
    n, held = st[ST_N], st[ST_HELD]
    ncell = grid.ncell
    if f.shape[0] < held:
        st[ST_NEED] = held
        return GROW_GHOSTS
    if (build.own_cnt.shape[0] < n or build.lcell.shape[0] - build.own_cnt.shape[0] < held - n
            or build.ostart.shape[0] != ncell[0] * ncell[1] * ncell[2] + 1):
        return GROW_LISTS
    for r in range(n, held):
        for c in range(3):
            f[r, c] = 0.0
    most_own, most_gh = lists_cpu.build_rows(pos, n, held, grid, build)
    if most_own > build.own_nbr.shape[1] - 1 or most_gh > build.gh_nbr.shape[1] - 1:
        st[ST_WIDTHS], st[ST_WIDTHS + 1] = most_own, most_gh
        return GROW_WIDTHS
    return DONE


@njit(nogil=True, cache=True)
def rebuild_brick(cur, new, lists, build, plan, mpi, grid, work):
    """One rebuild of a brick, or as much of it as the buffers allow (module docstring).

    The records of :mod:`~pympi_gpu.nbody.lj.cpu.records`: the owned atoms
    of the current set ``cur`` (``work.state[ST_N]`` of them) are migrated
    (``build.rows``, ``build.leaving``) and sorted by (cell, id) into the
    other set ``new`` (``build.order``, ``cell``, ``start``, ``x0``), the
    ghost plan and its rows made (``plan``; whether the message regions
    changed in ``st[ST_CHANGED]``), the Verlet lists built (``build``), the
    messages made with ``mpi``'s handles.  Returns :data:`DONE`, the
    steps' ``lists`` and ``plan.pidx`` then views of what it built,
    ``new.n``, ``new.held`` (and ``st[ST_N]``, ``st[ST_HELD]``) the owned
    rows and all rows; or a ``GROW_*`` code (:data:`GROW`), :data:`LOST`
    or :data:`FAILED`.
    """
    st, got, tally = work.state, mpi.got, work.tally
    handles = (mpi.comm, mpi.double, mpi.requests, mpi.rsize, mpi.rstatus)
    done = DONE
    if st[ST_PHASE] == _PACK:  # (finite, unless ST_CHECK: the displacement's agreement said so)
        st[ST_FINITE] = kc.pack_migrants(cur.pos, cur.v, cur.f, cur.gid, st[ST_N], build.rows, grid.box)
        st[ST_PHASE] = _MIGRATE
    if st[ST_PHASE] == _MIGRATE:
        t0 = numba_calls.wtime()
        done = _migrate(st, got, tally, build.rows, build.leaving, grid.box, plan.dims, plan.coords, plan.remote,
                        plan.nbrs, plan.tags[0], handles)
        tally[TALLY_SECONDS] += numba_calls.wtime() - t0
        if done != DONE:
            return done
        st[ST_PHASE] = _SORT
        if st[ST_CHECK]:
            st[ST_CHECK] = 0
            return AGREE
    if st[ST_PHASE] == _SORT:
        n = st[ST_N]
        if new.pos.shape[0] < n or new.v.shape[0] < n or build.order.shape[0] < n or build.x0.shape[0] < n:
            st[ST_NEED] = n
            return GROW_SET
        kc.sort_migrants(build.rows, n, grid.lo, grid.inv, grid.ncell, build.order, build.cell, build.start,
                         new.pos, new.v, new.f, new.gid, build.x0)
        st[ST_PHASE], st[ST_HELD], st[ST_D] = _GHOSTS, n, 0
    if st[ST_PHASE] == _GHOSTS:
        t0 = numba_calls.wtime()
        done = _ghosts(st, got, tally, new.pos, new.gid, plan, build, st[ST_N] if plan.up0 else 0, handles)
        tally[TALLY_SECONDS] += numba_calls.wtime() - t0
        if done != DONE:
            return done
        st[ST_CHANGED] = kc.message_regions(plan.poff, plan.counts, plan.remote, plan.one, plan.regions, plan.soff,
                                            plan.roff, plan.nrecv)
        st[ST_PHASE] = _LISTS
    done = _lists(st, new.pos, new.f, build, grid)
    if done == DONE:  # the steps go on with what it built
        n = new.n = st[ST_N]
        new.held = st[ST_HELD]
        plan.pidx = plan.plan_rows[:plan.poff[6]]
        lists.x0, lists.own_cnt, lists.own_nbr = build.x0[:n], build.own_cnt[:n], build.own_nbr[:n]
        lists.gh_cnt, lists.gh_nbr = build.gh_cnt[:n], build.gh_nbr[:n]
    return done


# numba keys a kernel's cache entries by its own file only: the kernels it calls live in these
rebuild_brick = numba_calls.keyed_by_handles(rebuild_brick, sources(kc, lists_cpu, numba_calls, records))


def warmup() -> None:
    """Compile (or load from numba's cache) :func:`rebuild_brick` for the record types
    :class:`~pympi_gpu.nbody.lj.cpu.atoms.HostAtoms` gives it, by a call that stops at once (a brick of
    no atoms at its lists, whose buffers hold no cell: :func:`~pympi_gpu.nbody.lj.cpu.records.idle`),
    where numba can call MPI (:func:`~pympi_gpu.mpi.numba_calls.link`)."""
    if not numba_calls.link():
        return
    st = state(0)
    st[ST_PHASE] = _LISTS
    rebuild_brick(*records.idle(st))
