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

from pympi_gpu.device.jitcache import sources
from pympi_gpu.mpi import numba_calls
from pympi_gpu.nbody.lj.cpu import kernels as kc
from pympi_gpu.nbody.lj.cpu import lists as lists_cpu

__all__ = ["rebuild_brick", "warmup", "idle_args", "state", "DONE", "GROW", "LOST", "FAILED", "ST_N", "ST_HELD",
           "ST_NEED", "ST_STAY", "ST_WIDTHS", "ST_D", "ST_CHANGED", "TALLY_SECONDS", "TALLY_BYTES",
           "TALLY_MESSAGES"]

#: ``st``'s entries: where the call is (phase, dimension, a message on its way), the owned rows and the
#: rows held, what a short buffer needs, the migration's rows staying, leaving down and up, a border
#: stage's rows to each side, whether the plan's message regions changed, and the longest list rows found
(ST_PHASE, ST_D, ST_RESUME, ST_N, ST_HELD, ST_NEED, ST_STAY, ST_DOWN, ST_UP, ST_LOW, ST_HIGH, ST_CHANGED,
 ST_WIDTHS) = range(13)
_ST_SIZE = ST_WIDTHS + 2
_PACK, _MIGRATE, _SORT, _GHOSTS, _LISTS = range(5)
#: ``st[ST_RESUME]``: nothing on its way; a probe found the receive buffer short (receive, then go on);
#: the ghosts received, the rows they go to short
_FRESH, _RECEIVE, _RECEIVED = range(3)

#: what :func:`rebuild_brick` returns: done, or a short buffer (grow it and call again), an atom that
#: moved more than a brick, or a failed MPI call (its code in ``got[2]``)
DONE = 0
GROW_ROWS, GROW_LEAVING, GROW_SET, GROW_PLAN, GROW_MESSAGE, GROW_RECEIVED, GROW_GHOSTS, GROW_LISTS, GROW_WIDTHS = \
    range(1, 10)
GROW = {GROW_ROWS: "rows", GROW_LEAVING: "leaving", GROW_SET: "set", GROW_PLAN: "plan", GROW_MESSAGE: "message",
        GROW_RECEIVED: "received", GROW_GHOSTS: "ghosts", GROW_LISTS: "lists", GROW_WIDTHS: "widths"}
LOST, FAILED = 10, 11
#: ``tally``: seconds in the migration and the ghost plan (as the Python path's clock counts them),
#: bytes and messages handed to MPI
TALLY_SECONDS, TALLY_BYTES, TALLY_MESSAGES = range(3)


def state(n: int, st: np.ndarray | None = None) -> np.ndarray:
    """``st`` for a rebuild of ``n`` owned atoms: a new one, or ``st`` set back."""
    st = np.zeros(_ST_SIZE, np.int64) if st is None else st
    st.fill(0)
    st[ST_N] = n
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
            stay, nd, nu = kc.leaving_rows(rows, n, dims[d] / box, dims[d], coords[d], d, leaving[:n], leaving[n:])
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
def _ghosts(st, got, tally, pos, gid, below, above, pidx, poff, pstart, counts, pshift, up0, remote, nbrs, tag,
            message, received, mpi):
    """Phase 4: the ghost plan from stage ``st[ST_D]`` on (``Halo.build``); :data:`DONE` or a code."""
    comm, double, requests, rsize, status = mpi
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
def _lists(st, pos, f, lo, inv, ncell, reach, cut2, rc2, half, lists, simd, block):
    """Phase 5: the ghosts' force rows zeroed, the Verlet lists built; :data:`DONE` or a code."""
    cell, ostart, gstart, orec, grec, bo, bg, near, far, own_cnt, own_nbr, gh_cnt, gh_nbr = lists
    n, held = st[ST_N], st[ST_HELD]
    if f.shape[0] < held:
        st[ST_NEED] = held
        return GROW_GHOSTS
    if (own_cnt.shape[0] < n or cell.shape[0] - own_cnt.shape[0] < held - n
            or ostart.shape[0] != ncell[0] * ncell[1] * ncell[2] + 1):
        return GROW_LISTS
    for r in range(n, held):
        for c in range(3):
            f[r, c] = 0.0
    most_own, most_gh = lists_cpu._build(pos, n, held, lo, inv, ncell, reach, cut2, rc2, half, cell, ostart, gstart,
                                         orec, grec, bo, bg, near, far, own_cnt, own_nbr, gh_cnt, gh_nbr, simd, block)
    if most_own > own_nbr.shape[1] - 1 or most_gh > gh_nbr.shape[1] - 1:
        st[ST_WIDTHS], st[ST_WIDTHS + 1] = most_own, most_gh
        return GROW_WIDTHS
    return DONE


@njit(nogil=True, cache=True)
def rebuild_brick(st, got, tally, x, vel, force, ids, box, rows, leaving, dims, coords, remote, nbrs, tags, pos, v, f,
                  gid, x0, order, cell, start, lo, inv, ncell, reach, below, above, pidx, poff, pstart, counts, pshift,
                  up0, message, received, one, regions, soff, roff, nrecv, cut2, rc2, half, lcell, ostart, gstart, orec,
                  grec, bo, bg, near, far, own_cnt, own_nbr, gh_cnt, gh_nbr, simd, block, comm, double, requests, rsize,
                  status):
    """One rebuild of a brick, or as much of it as the buffers allow (module docstring).

    The owned atoms ``x vel force ids`` (``st[ST_N]`` of them); the
    migration's buffers ``rows``, ``leaving``; the brick (``dims``,
    ``coords``, ``remote``) and each dimension's lower and upper neighbour
    (``nbrs`` ``(3, 2)``); the migration's and the borders' first ``tags``;
    the other set ``pos v f gid`` the atoms are sorted into, with ``x0`` and
    the sort's workspace ``order cell start``; the cell grid ``lo inv ncell
    reach``; the halo's plan ``below ... pshift``, ``up0`` (the half shell),
    a border stage's ``message`` and ``received`` buffers, the plan's
    message regions (``one ... nrecv``: :func:`~pympi_gpu.nbody.lj.cpu.kernels.message_regions`,
    whether they changed in ``st[ST_CHANGED]``); the lists' radii
    and :class:`~pympi_gpu.nbody.lj.cpu.lists.VerletLists` buffers
    (``lcell ... gh_nbr``, ``simd``, ``block``); the handles of
    :class:`~pympi_gpu.nbody.lj.cpu.halo._KernelExchange` (``comm ... status``).
    Every array is an argument of its own: numba types a tuple of arrays
    in Python, some microseconds an array.  Returns :data:`DONE`, a
    ``GROW_*`` code (:data:`GROW`), :data:`LOST` or :data:`FAILED`;
    ``st[ST_N]``, ``st[ST_HELD]``: the owned rows and all rows after it.
    """
    mpi = (comm, double, requests, rsize, status)
    done = DONE
    if st[ST_PHASE] == _PACK:
        kc.pack_migrants(x, vel, force, ids, st[ST_N], rows, box)  # (finite: the displacement's agreement said so)
        st[ST_PHASE] = _MIGRATE
    if st[ST_PHASE] == _MIGRATE:
        t0 = numba_calls.wtime()
        done = _migrate(st, got, tally, rows, leaving, box, dims, coords, remote, nbrs, tags[0], mpi)
        tally[TALLY_SECONDS] += numba_calls.wtime() - t0
        if done != DONE:
            return done
        st[ST_PHASE] = _SORT
    if st[ST_PHASE] == _SORT:
        n = st[ST_N]
        if pos.shape[0] < n or v.shape[0] < n or order.shape[0] < n:
            st[ST_NEED] = n
            return GROW_SET
        kc.sort_migrants(rows, n, lo, inv, ncell, order, cell, start, pos, v, f, gid, x0)
        st[ST_PHASE], st[ST_HELD], st[ST_D] = _GHOSTS, n, 0
    if st[ST_PHASE] == _GHOSTS:
        t0 = numba_calls.wtime()
        done = _ghosts(st, got, tally, pos, gid, below, above, pidx, poff, pstart, counts, pshift,
                       st[ST_N] if up0 else 0, remote, nbrs, tags[1], message, received, mpi)
        tally[TALLY_SECONDS] += numba_calls.wtime() - t0
        if done != DONE:
            return done
        st[ST_CHANGED] = kc.message_regions(poff, counts, remote, one, regions, soff, roff, nrecv)
        st[ST_PHASE] = _LISTS
    lists = (lcell, ostart, gstart, orec, grec, bo, bg, near, far, own_cnt, own_nbr, gh_cnt, gh_nbr)
    return _lists(st, pos, f, lo, inv, ncell, reach, cut2, rc2, half, lists, simd, block)


# numba keys a kernel's cache entries by its own file only: the kernels it calls live in these
rebuild_brick = numba_calls.keyed_by_handles(rebuild_brick, sources(kc, lists_cpu, numba_calls))


def warmup() -> None:
    """Compile (or load from numba's cache) :func:`rebuild_brick` for the argument types
    :class:`~pympi_gpu.nbody.lj.cpu.atoms.HostAtoms` gives it, by a call that stops at once (its list
    buffers short), where numba can call MPI (:func:`~pympi_gpu.mpi.numba_calls.link`)."""
    if not numba_calls.link():
        return
    rebuild_brick(*idle_args())


def idle_args() -> tuple:
    """:func:`rebuild_brick`'s arguments, of the types a run gives, for a call that stops at once: ``st``
    at the lists, whose buffers hold no cell (:func:`warmup`; a batch of steps that makes no rebuild)."""
    f3, f10, f4, i1 = np.zeros((1, 3)), np.zeros((1, 10)), np.zeros((1, 4)), np.zeros(1, np.int64)
    b1, f1, i32 = np.zeros(3, np.bool_), np.zeros(3), np.zeros((1, 1), np.int32)
    st = state(0)
    st[ST_PHASE] = _LISTS
    rsize = numba_calls.request_size()
    i3, i2 = np.zeros(3, np.int64), np.zeros(2, np.int64)  # (no cells, and a cell count that is not theirs)
    r32, n32 = np.zeros((4, 1), np.float32), np.zeros(1, np.int32)  # the lists' records and candidates
    return (st, i3, np.zeros(3), f3, f3, f3, i1, 1.0, f10, f10, i1, i1, b1, np.zeros((3, 2), np.int64), i1, f3,
            f3, f3, i1, f3, i1, i1, i1, f1, f1, i3, 2, f1, f1, i1, i1, i1, i1, np.zeros((6, 3)), True, f4, f4,
            b1, i1, i1, i1, i1, 1.0, 1.0, True, i1, i2, i1, r32, r32, r32, r32, n32,
            n32, i1, i32, i1, i32, lists_cpu.SIMD, lists_cpu.BLOCK, 0, 0, np.zeros(2 * rsize, np.uint8), rsize,
            numba_calls.statuses(2))
