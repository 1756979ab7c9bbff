"""CPU kernels of the LJ model (numba): cell binning, Verlet lists, forces, kicks.

Layout: ``pos`` is ``(n_all, 3)`` float64, rows ``[0, nlocal)`` the atoms this
rank owns and ``[nlocal, n_all)`` its ghosts (periodic images and copies of
the neighbours' atoms).  Forces are wanted on owned atoms; with half lists the
ghost rows gather the ghosts' share on the way, which goes back to the owners.

Neighbour lists (padded rows, built every rebuild, radius ``rc + skin``; cells of half
that radius, searched two cells out):

* ``own``: owned-owned pairs.  ``half=True`` lists each pair once (j > i) and
  the force kernel applies Newton's third law (half the pair work; serial);
  ``half=False`` lists both directions and a parallel kernel writes only
  ``f[i]`` (for several numba threads per rank, where ``f[j]`` would race).
* ``ghost``: owned-ghost pairs, every ghost within reach.  ``half=True``
  (LAMMPS's ``newton on``): the halo is a half shell, so each pair between
  bricks has its ghost on one side only and is listed once over all ranks;
  its force is added to the ghost's row too, and
  the step's reverse pass (:data:`OPS`) sends the ghosts' forces back
  to their owners.  ``half=False`` (the full shell): listed on the owned side
  only, on both ranks; the pair's energy and virial count half on each (no
  reverse communication; several threads per rank, and the GPU's full lists).

The force kernels are compiled around a pair style's pair term by
:func:`force_kernels` (:mod:`~pympi_gpu.nbody.lj.pairs`: LJ 12-6, ...), in
the term's precision (:mod:`~pympi_gpu.nbody.lj.precision`: a pair's force
and energy in double, or in single for ``mixed``; positions, stored forces and
the sums over atoms always double); everything else here is the same for
every style and precision.  No ``fastmath``: the
results must not depend on how the compiler reassociates.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
from numba import njit, prange
from numba.extending import register_jitable

from pympi_gpu.device.jitcache import guard_cache, keyed_by_code, sources
from pympi_gpu.mpi import numba_calls
from pympi_gpu.nbody.lj import thermostats
from pympi_gpu.nbody.lj.cpu.lists import build as build_lists
from pympi_gpu.nbody.lj.cpu.lists import cell_index as _cell_index
from pympi_gpu.nbody.lj.cpu import records
from pympi_gpu.nbody.lj.pairs import contribution
from pympi_gpu.nbody.lj.precision import DEFAULT, precision

guard_cache()  # this module's kernels are cached: numba's cache mended first (see jitcache)

__all__ = ["ForceKernels", "force_kernels", "make_row",
           "max_displacement2", "scale_rows", "square_sum", "kinetic_sums", "warmup", "warm_program", "kick_drift", "kick_serial",
           "pack_migrants", "wrap_rows", "leaving_rows", "cell_order", "sort_migrants", "border_plan", "border_pack",
           "local_stages",
           "border_rows", "unpack_ghosts", "message_regions", "forward_stages", "reverse_stages", "copy_rows",
           "put_rows", "stage_region", "ghosts_in"]


#: the operations of :meth:`ForceKernels.run_ops`, in the order a step with half lists runs them: the
#: thermostat's start (its velocity scaling), the opening kick and drift, the displacement agreed by the
#: ranks (stop there for a rebuild); the forces zeroed; per stage of the ghost plan, its rows refreshed in
#: place (the brick's own image) or packed into a message, the messages started and, once they came, the
#: ghost rows put in place; the owned pairs, a third at a time; the ghost pairs; per stage backwards, the
#: ghosts' forces added in place or packed, sent home and, once the neighbours' came, added; the
#: thermostat's forces; the closing half kick; the thermostat's end: this rank's sum of m v^2, every
#: rank's, the velocity scaling.  The operations that call MPI come last (``OP_AGREE`` on:
#: :func:`make_step_calls`); the thermostat's are only in the programs of a run that has one.
(OP_ZERO, OP_FORWARD, OP_PACK, OP_PUT, OP_OWNED, OP_GHOSTS, OP_REVERSE, OP_PACK_BACK, OP_ADD_BACK, OP_KICK,
 OP_KICK_DRIFT, OP_BEGIN, OP_BATH_FORCE, OP_MV2, OP_END, OP_AGREE, OP_POST, OP_WAIT, OP_SEND_BACK,
 OP_SUM) = range(20)
OPS = ("zero", "forward", "pack", "put", "owned", "ghosts", "reverse", "pack back", "add back", "kick",
       "kick drift", "begin", "bath force", "mv2", "end", "agree", "post", "wait", "send back", "sum")
#: what :meth:`ForceKernels.run_ops` returns: it ran every operation; it stopped after ``OP_AGREE`` (a
#: rebuild); an MPI call failed (its code in ``tally[TALLY_ERROR]``)
RAN, REBUILD, MPI_FAILED = range(3)
#: ``run_ops``'s ``tally``: seconds starting the halo's messages, waiting for them, waiting in the
#: agreement; bytes and messages handed to MPI; the code of a failed MPI call
TALLY_POSTING, TALLY_WAITING, TALLY_AGREEING, TALLY_BYTES, TALLY_MESSAGES, TALLY_ERROR = range(6)


class ForceKernels(NamedTuple):
    """The force kernels of one pair term (:func:`force_kernels`)."""

    #: ``(pos, i, cnt, nbr, rc2) -> (fx, fy, fz, e, w)``: one list row, one-sided (also the CUDA kernels')
    row: object
    #: half lists, Newton's third law (serial)
    newton: object
    #: one-sided lists (parallel over atoms)
    one_sided: object
    #: a piece of a step's force phase with half lists, as a list of operations (:data:`OPS`)
    run_ops: object
    #: do the kernels' MPI calls (and clock, ``MPI_Wtime``) reach the loaded libmpi (:func:`make_step_calls`)?
    linked: bool = False

    def pair_forces(self, pos, f, i0, i1, cnt, nbr, rc2, newton, eflag=True):
        """Add the pair forces of the listed pairs of atoms ``[i0, i1)`` to ``f``.

        Returns ``(energy, virial)`` of those pairs counted once each (``(0, 0)``
        without ``eflag``: as LAMMPS, the sums are skipped on steps without thermo output;
        the forces do not depend on ``eflag``):
        ``newton=True`` for a half list (serial; adds to the rows of both atoms,
        ghosts included), ``False`` for a one-sided list (parallel), whose sums the
        caller weighs (1/2 for both-direction lists).
        """
        if newton:
            return self.newton(pos, f, i0, i1, cnt, nbr, rc2, eflag)
        return self.one_sided(pos, f, i0, i1, cnt, nbr, rc2, eflag)


def make_row(pair, real=np.float64):
    """The one-sided row of a pair term: force on atom i from its listed neighbours, their energy and virial.

    Each pair's body is the model's one (:func:`~pympi_gpu.nbody.lj.pairs.contribution`: the distance and
    cutoff test in double precision, the lists', the force and energy in ``real``, the pair term's type,
    :mod:`~pympi_gpu.nbody.lj.precision`), and so the row's sums; in double precision every conversion
    is none, and the row is the model's reference bit for bit."""
    contribute = contribution(pair, real)
    zero = real(0.0)

    @register_jitable
    def row(pos, i, cnt, nbr, rc2):
        xi, yi, zi = pos[i, 0], pos[i, 1], pos[i, 2]
        fx = zero
        fy = zero
        fz = zero
        e = zero
        w = zero
        for k in range(cnt[i]):
            j = nbr[i, k]
            inside, px, py, pz, u, v = contribute(xi - pos[j, 0], yi - pos[j, 1], zi - pos[j, 2], rc2)
            if inside:
                fx += px
                fy += py
                fz += pz
                e += u
                w += v
        return fx, fy, fz, e, w

    return row


@functools.cache
def force_kernels(pair) -> ForceKernels:
    """The CPU force kernels compiled around ``pair`` (a style's pair term, :mod:`~pympi_gpu.nbody.lj.pairs`).

    ``pair(r2) -> (fpair, energy)``; the force on i from j is ``fpair * (x_i -
    x_j)`` and the pair's virial ``r2 * fpair``, computed in the term's precision
    (``pair.precision``; a term without one is double).  numba compiles on first use
    (or loads from its cache, keyed by the pair term's code and coefficients).
    """
    real = precision(getattr(pair, "precision", DEFAULT)).real
    row = make_row(pair, real)
    newton = make_newton(pair, real)
    linked = numba_calls.link()
    one_sided = make_one_sided(row)
    return ForceKernels(row, newton, one_sided, make_run_ops(newton, one_sided, linked), linked)


def make_newton(pair, real=np.float64):
    """The half-list kernel of a pair term (Newton's third law, serial), each pair's body as :func:`make_row`'s."""
    contribute = contribution(pair, real)
    zero = real(0.0)

    @njit(nogil=True, cache=True)
    def newton(pos, f, i0, i1, cnt, nbr, rc2, eflag):
        """Half list, Newton's third law: adds to f[i] and f[j]; returns (energy, virial) (0, 0 unless eflag)."""
        e = 0.0
        w = 0.0
        for i in range(i0, i1):
            xi, yi, zi = pos[i, 0], pos[i, 1], pos[i, 2]
            fx = zero
            fy = zero
            fz = zero
            for k in range(cnt[i]):
                j = nbr[i, k]
                inside, px, py, pz, u, v = contribute(xi - pos[j, 0], yi - pos[j, 1], zi - pos[j, 2], rc2)
                if inside:
                    fx += px
                    fy += py
                    fz += pz
                    f[j, 0] -= px
                    f[j, 1] -= py
                    f[j, 2] -= pz
                    if eflag:
                        e += u
                        w += v
            f[i, 0] += fx
            f[i, 1] += fy
            f[i, 2] += fz
        return e, w

    return newton


def make_one_sided(row):
    """The one-sided-list kernel around a pair term's :func:`make_row` (parallel over atoms)."""

    @njit(parallel=True, nogil=True, cache=True)
    def one_sided(pos, f, i0, i1, cnt, nbr, rc2, eflag):
        """Adds to f[i] only (parallel over i); returns the full (energy, virial) of the listed pairs (if eflag)."""
        e = 0.0
        w = 0.0
        for i in prange(i0, i1):
            fx, fy, fz, ei, wi = row(pos, i, cnt, nbr, rc2)
            f[i, 0] += fx
            f[i, 1] += fy
            f[i, 2] += fz
            if eflag:
                e += ei
                w += wi
        return e, w

    return one_sided


def make_step_calls(linked: bool):
    """The MPI operations of a step's program (``OP_AGREE``, ``OP_POST``, ``OP_WAIT``, ``OP_SEND_BACK``),
    as one jitable function: with the calls of :mod:`~pympi_gpu.mpi.numba_calls` where ``linked``
    (:func:`~pympi_gpu.mpi.numba_calls.link` resolved them), else with calls that answer
    :data:`~pympi_gpu.mpi.numba_calls.NOT_LINKED`, for programs that hold none of these operations."""
    start_all, wait_all, wtime = numba_calls.calls(linked)

    @register_jitable
    def step_call(op, d, mpi, mv2, soff, roff):
        """Operation ``op`` of stage ``d`` (see :func:`make_run_ops`) with the :class:`~records.Mpi` record
        ``mpi``; MPI's return code.  ``OP_SUM``: the thermostat's sum, ``mv2[:1]`` of every rank into
        ``mv2[1:]`` (:func:`make_bath_ops`)."""
        top, reqs, req_at, agree, status, tally = mpi.top, mpi.reqs, mpi.req_at, mpi.agree, mpi.status, mpi.tally
        rc = 0
        if op == OP_SUM:
            if mpi.total.shape[0] == 0:  # one rank: no message
                mv2[1] = mv2[0]
                return 0
            t0 = wtime()
            rc = start_all(mpi.total, 0, 1)
            if rc == 0:
                rc = wait_all(mpi.total, 0, 1, status)
            tally[TALLY_AGREEING] += wtime() - t0
            tally[TALLY_BYTES] += 8.0
            tally[TALLY_MESSAGES] += 1.0
        elif op == OP_AGREE:
            if agree.shape[0] == 0:  # one rank: no message
                top[2] = top[0]
                top[3] = top[1]
                return 0
            t0 = wtime()
            rc = start_all(agree, 0, 1)
            if rc == 0:
                rc = wait_all(agree, 0, 1, status)
            tally[TALLY_AGREEING] += wtime() - t0
            tally[TALLY_BYTES] += 16.0
            tally[TALLY_MESSAGES] += 1.0
        elif op == OP_POST:
            t0 = wtime()
            rc = start_all(reqs, req_at[2 * d, 0], req_at[2 * d, 1])
            tally[TALLY_POSTING] += wtime() - t0
            tally[TALLY_BYTES] += 24.0 * (soff[2 * d + 2] - soff[2 * d])
            tally[TALLY_MESSAGES] += req_at[2 * d, 1] // 2
        elif op == OP_WAIT:
            t0 = wtime()
            rc = wait_all(reqs, req_at[2 * d, 0], req_at[2 * d, 1], status)
            tally[TALLY_WAITING] += wtime() - t0
        elif op == OP_SEND_BACK:  # nothing left to overlap with: started and waited for
            t0 = wtime()
            rc = start_all(reqs, req_at[2 * d + 1, 0], req_at[2 * d + 1, 1])
            t1 = wtime()
            if rc == 0:
                rc = wait_all(reqs, req_at[2 * d + 1, 0], req_at[2 * d + 1, 1], status)
            tally[TALLY_POSTING] += t1 - t0
            tally[TALLY_WAITING] += wtime() - t1
            tally[TALLY_BYTES] += 24.0 * (roff[2 * d + 2] - roff[2 * d])
            tally[TALLY_MESSAGES] += req_at[2 * d + 1, 1] // 2
        return rc

    return step_call


def make_bath_ops():
    """The thermostat's operations of a step's program, as one jitable function around every registered
    thermostat's hooks (:func:`~pympi_gpu.nbody.lj.thermostats.hooks`), the run's (``bath``, a
    :class:`~pympi_gpu.nbody.lj.cpu.records.Bath`) called by its number: ``OP_BEGIN`` scales the
    velocities by its start's factor, ``OP_BATH_FORCE`` adds its forces at step ``bath.at[0]`` to the
    owned atoms', ``OP_MV2`` sums this rank's m v^2 into ``bath.mv2[0]`` and ``OP_END`` scales by its
    end's factor (from every rank's sum, ``mv2[1]``: ``OP_SUM``, :func:`make_step_calls`)."""
    begin, end, force = thermostats.hooks()

    @register_jitable
    def bath_op(op, v, f, gid, n, bath):
        """Operation ``op`` on the ``n`` owned rows of velocities ``v``, forces ``f`` and ids ``gid``."""
        if op == OP_BEGIN:
            scale_rows(v, begin(bath.kind, bath.params, bath.state), n)
        elif op == OP_END:
            scale_rows(v, end(bath.kind, bath.params, bath.state, bath.mv2[1]), n)
        elif op == OP_MV2:
            bath.mv2[0] = square_sum(v, n)
        elif op == OP_BATH_FORCE:
            kind, p, key, step = bath.kind, bath.params, bath.key, bath.at[0]
            for i in range(n):
                fx, fy, fz = force(kind, p, key, step, gid[i], v[i, 0], v[i, 1], v[i, 2])
                f[i, 0] += fx
                f[i, 1] += fy
                f[i, 2] += fz

    return bath_op


def make_run_ops(newton, one_sided, linked: bool):
    """The force phase's compiled pieces (:data:`OPS`) around the pair kernels of half lists
    (:func:`make_newton`) and of full ones (:func:`make_one_sided`, ``grid.half`` false: several
    threads); ``linked``: the step's MPI calls made by the kernel (:func:`make_step_calls`); the
    thermostat's are :func:`make_bath_ops`'."""
    step_call = make_step_calls(linked)
    bath_op = make_bath_ops()

    @njit(nogil=True, cache=True)
    def run_ops(ops, h, eflag, rebuild2, atoms, lists, plan, mpi, grid, work, bath):
        """A piece of a step (:data:`OPS`), one call: :data:`RAN`, :data:`REBUILD`, :data:`MPI_FAILED`.

        The kick ``h``, ``eflag``, ``rebuild2``, then the state's records (:mod:`~pympi_gpu.nbody.lj.cpu.records`).
        ``ops`` ``(k, 2)``: opcode and argument (a stage, a third of the owned atoms), in order.  ``work.sums``: the
        owned pairs' energy and virial, the ghost pairs'.  After ``OP_AGREE`` (the reduction (MAX) of ``mpi.top[:2]``,
        the largest squared displacement since ``lists.x0`` and the stop request, into ``top[2:]``), one above
        ``rebuild2`` stops the piece; ``mpi.tally``: the MPI calls' seconds, bytes and messages (``TALLY_*``)."""
        n = atoms.n
        pos, f, v = atoms.pos[:atoms.held], atoms.f[:atoms.held], atoms.v[:n]
        x0, own_cnt, own_nbr, gh_cnt, gh_nbr = lists.x0, lists.own_cnt, lists.own_nbr, lists.gh_cnt, lists.gh_nbr
        pidx, poff, pshift, pstart, soff, roff = plan.pidx, plan.poff, plan.pshift, plan.pstart, plan.soff, plan.roff
        top, sums, rc2, dt = mpi.top, work.sums, grid.rc2, grid.dt
        for q in range(ops.shape[0]):
            op, d = ops[q, 0], ops[q, 1]
            if op == OP_ZERO:
                f[:, :] = 0.0
            elif op == OP_KICK_DRIFT:
                top[0] = kick_drift(v, f, pos, x0, h, dt, n)
            elif OP_BEGIN <= op <= OP_END:  # the thermostat's
                bath_op(op, v, f, atoms.gid, n, bath)
            elif op >= OP_AGREE:  # an MPI call
                rc = step_call(op, d, mpi, bath.mv2, soff, roff)
                if rc != 0:
                    mpi.tally[TALLY_ERROR] = rc
                    return MPI_FAILED
                if op == OP_AGREE and top[2] > rebuild2:
                    return REBUILD
            elif op == OP_FORWARD or op == OP_PACK:  # in place (an empty message) or into the message
                out, gap = stage_region(plan.fsend[:0] if op == OP_FORWARD else plan.fsend, soff, d)
                forward_stages(pos, pidx, poff, pshift, pstart, d, d + 1, out, gap)
            elif op == OP_PUT:
                ghosts_in(pos, pstart, plan.nrecv, d, plan.frecv, roff, False)
            elif op == OP_OWNED or op == OP_GHOSTS:  # a third of the owned pairs, or the ghost pairs
                own = op == OP_OWNED
                i0, i1, k, cnt, nbr = ((d * n) // 3, ((d + 1) * n) // 3, 0, own_cnt, own_nbr) if own else \
                    (0, n, 2, gh_cnt, gh_nbr)
                e, w = newton(pos, f, i0, i1, cnt, nbr, rc2, eflag) if grid.half else \
                    one_sided(pos, f, i0, i1, cnt, nbr, rc2, eflag)
                sums[k] += e
                sums[k + 1] += w
            elif op == OP_REVERSE or op == OP_ADD_BACK:  # in place, or from the message that came home
                buf, gap = stage_region(plan.rsend[:0] if op == OP_REVERSE else plan.rrecv, soff, d)
                reverse_stages(f, pidx, poff, pstart, d, d + 1, buf, gap)
            elif op == OP_PACK_BACK:
                ghosts_in(f, pstart, plan.nrecv, d, plan.rsend, roff, True)
            elif op == OP_KICK:
                kick_serial(v, f, h, n)
        return RAN

    return keyed_by_code(run_ops, sources(*thermostats.modules()))  # (closures over kernels: see jitcache)


@njit(parallel=True, cache=True)
def max_displacement2(x, x0, n):
    """Largest squared displacement of the first n rows since ``x0``; infinite if one is not finite."""
    m = 0.0
    for i in prange(n):
        dx = x[i, 0] - x0[i, 0]
        dy = x[i, 1] - x0[i, 1]
        dz = x[i, 2] - x0[i, 2]
        d2 = dx * dx + dy * dy + dz * dz
        m = max(m, d2 if d2 == d2 else np.inf)  # max() would pass a NaN over
    return m


# -- the one-thread engine (``config.newton``) -------------------------------------------------------
# Serial kernels into buffers the caller keeps between calls: a prange kernel pays numba's parallel
# launch (microseconds) even on one thread, and at a few hundred atoms per rank that launch, an
# allocation or a NumPy temporary costs more than the loop.  Each does the same IEEE operations in
# the same order as the NumPy or parallel code it replaces, so the states are the same bit for bit.

@njit(nogil=True, cache=True)
def kick_drift(v, f, x, x0, h, dt, n):
    """``v += h f; x += dt v`` for the first n rows, then the largest squared displacement since ``x0``
    (infinite if one is not finite): NumPy's ``v += h * f``, ``x += dt * v`` and :func:`max_displacement2`
    in one pass."""
    m = 0.0
    for i in range(n):
        for d in range(3):
            v[i, d] += h * f[i, d]
        for d in range(3):
            x[i, d] += dt * v[i, d]
        dx = x[i, 0] - x0[i, 0]
        dy = x[i, 1] - x0[i, 1]
        dz = x[i, 2] - x0[i, 2]
        d2 = dx * dx + dy * dy + dz * dz
        m = max(m, d2 if d2 == d2 else np.inf)
    return m


@njit(nogil=True, cache=True)
def scale_rows(v, s, n):
    """v *= s for the first n rows (a thermostat's velocity scaling), serial."""
    for i in range(n):
        for d in range(3):
            v[i, d] *= s


@njit(nogil=True, cache=True)
def square_sum(v, n):
    """The sum of ``vx^2 + vy^2 + vz^2`` over the first n rows, one after the other (unit masses: m v^2,
    LAMMPS's ``compute temp``'s sum)."""
    t = 0.0
    for i in range(n):
        t += v[i, 0] * v[i, 0] + v[i, 1] * v[i, 1] + v[i, 2] * v[i, 2]
    return t


@njit(nogil=True, cache=True)
def kick_serial(v, f, h, n):
    """v += h f for the first n rows (unit masses), serial."""
    for i in range(n):
        for d in range(3):
            v[i, d] += h * f[i, d]


@njit(cache=True, inline="always")
def _fold(x, box):
    """``x`` folded into ``[0, box)``: :func:`~pympi_gpu.nbody.lj.domain.wrap`'s operations on one value."""
    w = x - box * np.floor(x / box)
    return 0.0 if w >= box else w


@njit(nogil=True, cache=True)
def pack_migrants(pos, v, f, ids, n, rows, box):
    """``rows[:n] = [x v f id]`` of the owned atoms (ids exact in float64), what a migration moves, the
    positions folded into the box, ``[0, box[e])`` along each axis ``e`` (:func:`_fold`); returns whether
    every velocity and force was finite."""
    ok = True
    for i in range(n):
        for e in range(3):
            rows[i, e] = _fold(pos[i, e], box[e])
            rows[i, 3 + e] = v[i, e]
            rows[i, 6 + e] = f[i, e]
            ok &= np.isfinite(v[i, e]) & np.isfinite(f[i, e])
        rows[i, 9] = ids[i] + 0.0
    return ok


@njit(nogil=True, cache=True)
def wrap_rows(x, n, box):
    """Fold the first n rows into the box (``box``: its three edges) in place, as
    :func:`~pympi_gpu.nbody.lj.domain.wrap` does."""
    for i in range(n):
        for d in range(3):
            x[i, d] = _fold(x[i, d], box[d])


@njit(nogil=True, cache=True)
def leaving_rows(rows, n, scale, p, coord, d, down, up):
    """Sort the first n rows ``[x ...]`` by the brick that owns them along d, in place: ``(stay, ndown, nup)``.

    The rows staying (grid coordinate ``min(int(x_d scale), p - 1) == coord``,
    as :func:`~pympi_gpu.nbody.lj.domain.owner_coords`) are compacted to the
    front in order; the others are copied to ``down`` (the lower neighbour's)
    or ``up``, in order.  ``stay`` is -1 if some atom is neither here nor in
    a neighbour brick.
    """
    below = (coord - 1) % p
    above = (coord + 1) % p
    width = rows.shape[1]
    stay = 0
    nd = 0
    nu = 0
    bad = False
    for i in range(n):
        c = min(int(rows[i, d] * scale), p - 1)
        if c == coord:
            for e in range(width):
                rows[stay, e] = rows[i, e]
            stay += 1
        elif c == below:
            for e in range(width):
                down[nd, e] = rows[i, e]
            nd += 1
        elif c == above:
            for e in range(width):
                up[nu, e] = rows[i, e]
            nu += 1
        else:
            bad = True
    return (-1 if bad else stay), nd, nu


@njit(nogil=True, cache=True)
def cell_order(x, key, n, lo, inv, ncell, order, cell, start):
    """``order[:n]``: the rows sorted by (cell, key), as ``np.lexsort((key, cell))`` (keys are distinct).

    A counting sort by cell (stable), then each cell's few rows by key;
    ``cell`` and ``start`` (``ncells + 1``) are workspace.
    """
    ncells = ncell[0] * ncell[1] * ncell[2]
    for c in range(ncells + 1):
        start[c] = 0
    for i in range(n):
        c = _cell_index(x, i, lo, inv, ncell)
        cell[i] = c
        start[c + 1] += 1
    for c in range(ncells):
        start[c + 1] += start[c]
    for i in range(n):
        c = cell[i]
        order[start[c]] = i
        start[c] += 1  # start[c] ends as the end of cell c
    s = 0
    for c in range(ncells):
        e = start[c]
        for a in range(s + 1, e):
            r = order[a]
            k = key[r]
            b = a - 1
            while b >= s and key[order[b]] > k:
                order[b + 1] = order[b]
                b -= 1
            order[b + 1] = r
        s = e


@njit(nogil=True, cache=True)
def sort_migrants(rows, n, lo, inv, ncell, order, cell, start, pos, v, f, gid, x0):
    """The owned atoms ``rows[:n]`` ``[x v f id]`` sorted by (cell, id) into ``pos v f gid``, and ``x0 = pos``.

    ``order``, ``cell``, ``start`` are :func:`cell_order`'s workspace.
    """
    cell_order(rows[:, :3], rows[:, 9], n, lo, inv, ncell, order, cell, start)
    for k in range(n):
        r = order[k]
        for e in range(3):
            pos[k, e] = x0[k, e] = rows[r, e]
            v[k, e] = rows[r, 3 + e]
            f[k, e] = rows[r, 6 + e]
        gid[k] = np.int64(rows[r, 9])


@njit(nogil=True, cache=True)
def border_plan(pos, n0, d, below, above, pidx, o, up0):
    """Stage d's two plan entries from the rows ``< n0``: those within reach of the low face
    (``pos[:, d] < below``) to ``pidx[o:o + nl]``, then those of the high one (``>= above``) from row
    ``up0`` on (the half shell: only ghosts go up); ``(nl, nh)``.

    ``pidx`` needs room for ``o + 2 n0 + 1`` entries (every row is written, then kept or not).
    """
    nl = 0
    for r in range(n0):
        pidx[o + nl] = r
        nl += pos[r, d] < below
    nh = 0
    for r in range(up0, n0):
        pidx[o + nl + nh] = r
        nh += pos[r, d] >= above
    return nl, nh


@njit(nogil=True, cache=True)
def border_rows(pos, gid, pidx, o, nl, nh, pshift, e, out, at):
    """The rows of plan entries e (``pidx[o:o + nl]``) and e + 1 (the next nh), each shifted by its entry's
    ``pshift``: as ghost rows ``at..`` of ``pos``/``gid`` (``out`` None: a brick's own image), or as
    message rows ``[x + shift, id]`` of ``out`` (ids exact in float64)."""
    for k in range(nl + nh):
        j = pidx[o + k]
        s = e if k < nl else e + 1
        if out is None:
            for q in range(3):
                pos[at + k, q] = pos[j, q] + pshift[s, q]
            gid[at + k] = gid[j]
        else:
            for q in range(3):
                out[k, q] = pos[j, q] + pshift[s, q]
            out[k, 3] = gid[j] + 0.0


@njit(nogil=True, cache=True)
def border_pack(pos, gid, n0, d, below, above, pidx, o, up0, pshift, out):
    """Stage d's plan (:func:`border_plan`) and its rows as a message (:func:`border_rows`); ``(nl, nh)``.

    ``out`` needs room for ``2 n0`` rows, ``pidx`` for ``o + 2 n0 + 1`` entries.
    """
    nl, nh = border_plan(pos, n0, d, below, above, pidx, o, up0)
    border_rows(pos, gid, pidx, o, nl, nh, pshift, 2 * d, out, 0)
    return nl, nh


@njit(nogil=True, cache=True)
def local_stages(pos, gid, n, d0, d1, below, above, pidx, poff, up0, pshift, pstart, counts):
    """Stages ``d0..d1-1`` of the ghost plan along which the brick is its own image, in one call.

    Each stage's plan (:func:`border_plan`, of the rows held before it) and
    its ghost rows (:func:`border_rows`) appended in place, the flat plan's
    offsets, starts and counts set.  Returns ``(rows held after them, 0, 0)``,
    or where ``pidx`` or ``pos`` lacks room ``(-1, entries pidx needs, rows
    pos needs)`` (one of them 0): then nothing is valid, and the caller grows
    that one, the first ``n`` rows or ``poff[2 d0]`` entries kept, and calls
    again.
    """
    for d in range(d0, d1):
        o = poff[2 * d]
        if pidx.shape[0] < o + 2 * n + 1:
            return -1, o + 2 * n + 1, 0
        nl, nh = border_plan(pos, n, d, below[d], above[d], pidx, o, up0)
        if n + nl + nh > pos.shape[0]:
            return -1, 0, n + nl + nh
        border_rows(pos, gid, pidx, o, nl, nh, pshift, 2 * d, None, n)
        poff[2 * d + 1] = o + nl
        poff[2 * d + 2] = o + nl + nh
        counts[2 * d] = nl
        counts[2 * d + 1] = nh
        pstart[2 * d] = n
        pstart[2 * d + 1] = n + nl
        n += nl + nh
    return n, 0, 0


@njit(cache=True, inline="always")
def _region(rows, kept):
    """The rows of a message region for ``rows`` rows: ``kept`` (the last one's; -1: none) while they fit
    it with less than two paddings to spare, else the rows and one padding."""
    pad = 16 + rows // 16
    if 0 <= kept and rows <= kept <= rows + 2 * pad:
        return kept
    return rows + pad


@njit(cache=True)
def message_regions(poff, counts, remote, one, regions, soff, roff, nrecv):
    """The message regions of the plan's stages whose neighbours are other ranks; did they change?

    Entry e's rows sent are ``fsend[soff[e]:soff[e + 1]]`` (``poff[e + 1] -
    poff[e]`` of them first, then padding) and its ghosts received
    ``frecv[roff[e]:roff[e + 1]]`` (``counts[e]`` first); stage d's
    ``nrecv[d]`` ghosts (both entries') and messages from ``soff[2d]``
    and ``roff[2d]`` to ``soff[2d + 2]`` and ``roff[2d + 2]``.  Each message
    is a region of rows kept while they fit it (:func:`_region`;
    ``regions[4d:4d + 4]``: to the lower neighbour, to the upper, from the
    upper, from the lower; -1: none yet).  Both sides of a message see the
    same rows, the sender's being the receiver's ghosts, so they agree on its
    region.  Where the two neighbours are one rank (``one[d]``) a stage's two
    entries travel as one message each way, the first region of each pair
    (the second entry's rows right after the first's).
    """
    changed = False
    for d in range(3):
        e = 2 * d
        k = 4 * d
        if not remote[d]:
            nrecv[d] = 0
            sizes = (0, 0, 0, 0)
            gaps = (0, 0)
        else:
            lo_rows, hi_rows = poff[e + 1] - poff[e], poff[e + 2] - poff[e + 1]
            lo_ghosts, hi_ghosts = counts[e], counts[e + 1]
            nrecv[d] = lo_ghosts + hi_ghosts
            if one[d]:
                sizes = (_region(lo_rows + hi_rows, regions[k]), 0, _region(lo_ghosts + hi_ghosts, regions[k + 2]), 0)
                gaps = (lo_rows, lo_ghosts)
            else:
                sizes = (_region(lo_rows, regions[k]), _region(hi_rows, regions[k + 1]),
                         _region(lo_ghosts, regions[k + 2]), _region(hi_ghosts, regions[k + 3]))
                gaps = (sizes[0], sizes[2])
        for q in range(4):
            changed |= sizes[q] != regions[k + q]
            regions[k + q] = sizes[q]
        soff[e + 1], soff[e + 2] = soff[e] + gaps[0], soff[e] + sizes[0] + sizes[1]
        roff[e + 1], roff[e + 2] = roff[e] + gaps[1], roff[e] + sizes[2] + sizes[3]
    return changed


@njit(nogil=True, cache=True)
def unpack_ghosts(rows, m, pos, gid, at):
    """Received border rows ``[x, id]`` as ghost rows ``at..at+m``."""
    for k in range(m):
        for d in range(3):
            pos[at + k, d] = rows[k, d]
        gid[at + k] = np.int64(rows[k, 3])


@njit(cache=True)
def forward_stages(pos, pidx, poff, pshift, pstart, d0, d1, out, gap):
    """Stages ``d0..d1-1`` of the ghost plan (entries ``2d, 2d + 1`` each): their rows refreshed and shifted.

    With ``out`` of no rows, into the ghost rows (a brick's own image);
    otherwise packed into ``out`` (a message region: one stage), the first
    entry's rows from its row 0, the second's from row ``gap``.
    The plan is flat: entry e's rows are ``pidx[poff[e]:poff[e + 1]]``,
    shifted by ``pshift[e]``, its ghosts from row ``pstart[e]`` on.
    """
    to_self = out.shape[0] == 0
    for e in range(2 * d0, 2 * d1):
        s0 = poff[e]
        base = pstart[e] - s0
        w = gap if e % 2 else 0
        for k in range(s0, poff[e + 1]):
            j = pidx[k]
            for d in range(3):
                y = pos[j, d] + pshift[e, d]
                if to_self:
                    pos[base + k, d] = y
                else:
                    out[w, d] = y
            w += 1


@njit(cache=True)
def reverse_stages(f, pidx, poff, pstart, d0, d1, buf, gap):
    """Stages ``d1-1`` down to ``d0`` backwards: forces added into the rows their ghosts came from.

    With ``buf`` of no rows, from the ghost rows themselves (a brick's own
    image); otherwise from ``buf``, one stage's message region (the first
    entry's rows from its row 0, the second's from row ``gap``).  Entries in
    order within a stage, as the step's reverse pass (:func:`make_run_ops`).
    """
    from_self = buf.shape[0] == 0
    for d in range(d1 - 1, d0 - 1, -1):
        for e in range(2 * d, 2 * d + 2):
            s0 = poff[e]
            base = pstart[e] - s0
            w = gap if e % 2 else 0
            for k in range(s0, poff[e + 1]):
                j = pidx[k]
                for c in range(3):
                    f[j, c] += f[base + k, c] if from_self else buf[w, c]
                w += 1


@njit(cache=True, inline="always")
def stage_region(buf, off, d):
    """Stage d's message region in ``buf`` (``off``: ``soff`` or ``roff`` of :func:`message_regions`) and
    the row in it where the stage's second entry begins."""
    return buf[off[2 * d]:off[2 * d + 2]], off[2 * d + 1] - off[2 * d]


@njit(cache=True, inline="always")
def ghosts_in(rows, pstart, nrecv, d, region, roff, back):
    """Stage d's ghost rows and the message region of its ghosts (``roff``: :func:`message_regions`), the
    first entry's ghosts at the region's start, the second's at its second message: put in place from it
    (``back`` False) or, ``back``, packed into it (the ghosts' forces going home)."""
    r0 = roff[2 * d]
    first = pstart[2 * d + 1] - pstart[2 * d]
    for e, at, m in ((2 * d, r0, first), (2 * d + 1, roff[2 * d + 1], nrecv[d] - first)):
        if back:
            copy_rows(rows, pstart[e], m, region[at:])
        else:
            put_rows(rows, pstart[e], m, region[at:])


@njit(cache=True)
def copy_rows(src, r0, m, out):
    """``out[:m] = src[r0:r0 + m]`` (3 columns): a block of rows into a message."""
    for k in range(m):
        for d in range(3):
            out[k, d] = src[r0 + k, d]


@njit(cache=True)
def put_rows(dst, r0, m, src):
    """``dst[r0:r0 + m] = src[:m]`` (3 columns): a message into a block of rows."""
    for k in range(m):
        for d in range(3):
            dst[r0 + k, d] = src[k, d]


def kinetic_sums(v, n):
    """``[sum v^2, sum vx, sum vy, sum vz]`` of the first n rows (float64)."""
    vv = v[:n]
    return np.array([float(np.sum(vv * vv)), *vv.sum(axis=0)])


def warmup(forces: ForceKernels) -> None:
    """Compile (or load from the cache) every kernel, the force kernels ``forces``, on a tiny system."""
    pos = np.random.default_rng(0).random((8, 3)) * 3.0
    lo = np.zeros(3)
    inv = np.full(3, 1.0)
    ncell = np.full(3, 3, np.int64)
    gid = np.arange(1, 9).astype(np.int64)
    for half in (True, False):
        p = build_lists(pos, 4, _Grid(lo, inv, ncell), 1.0, 0.5, half, widths=(8, 8))
        f = np.zeros((8, 3))
        for eflag in (True, False):
            forces.pair_forces(pos, f, 0, 4, p[0], p[1], 1.0, half, eflag)
            forces.pair_forces(pos, f, 0, 4, p[2], p[3], 1.0, half, eflag)
    max_displacement2(pos, pos, 8)
    _warm_engine(forces, pos, gid, lo, inv, ncell)


def _warm_engine(forces: ForceKernels, pos, gid, lo, inv, ncell) -> None:
    """The one-thread engine's kernels, with the argument types ``HostAtoms`` and ``Halo`` give them."""
    n = 4
    x, v, f = pos.copy(), np.zeros((8, 3)), np.zeros((8, 3))
    kick_drift(v, f, x, pos, 0.1, 0.1, n)
    kick_serial(v, f, 0.1, n)
    rows = np.zeros((8, 10))
    copy_rows(pos, 0, n, x)
    put_rows(x, np.int64(0), n, pos)
    pack_migrants(x, v, f, gid, n, rows, np.full(3, 3.0))
    wrap_rows(rows, n, np.full(3, 3.0))
    leaving_rows(rows, n, 1.0, 2, 0, 0, rows.copy(), rows.copy())
    order, cell, start = np.zeros(8, np.int64), np.zeros(8, np.int64), np.zeros(64, np.int64)
    sort_migrants(rows, n, lo, inv, ncell, order, cell, start, x.copy(), v.copy(), f.copy(), gid.copy(), x.copy())
    plan, pshift = np.zeros(16, np.int64), np.zeros((6, 3))
    x16, gid16 = np.zeros((16, 3)), np.zeros(16, np.int64)
    x16[:8] = pos
    gid16[:8] = gid
    msg = np.zeros((2 * n, 4))
    border_pack(x16, gid16, n, 0, 1.0, 2.0, plan, 0, 0, pshift, msg)
    unpack_ghosts(msg, 2, x16, gid16, n)
    local_stages(x16, gid16, n, 1, 3, np.full(3, 1.0), np.full(3, 2.0), np.zeros(64, np.int64), np.zeros(7, np.int64),
                 0, pshift, np.zeros(6, np.int64), np.zeros(6, np.int64))
    pidx, poff, pstart = np.zeros(0, np.int64), np.zeros(7, np.int64), np.full(6, n, np.int64)
    none = np.empty((0, 3))
    forward_stages(x, pidx, poff, pshift, pstart, 0, 3, none, 0)
    reverse_stages(f, pidx, poff, pstart, 0, 3, none, 0)
    for half in (True, False):
        build_lists(pos, n, _Grid(lo, inv, ncell), 1.0, 0.5, half, widths=(8, 8))
    warm_program(forces)


def warm_program(forces: ForceKernels) -> None:
    """Compile (or load from the cache) the step's program, ``forces.run_ops``, for the record types the run
    gives it: every operation but those that call MPI (compiled all the same), on the records of a brick
    of no atoms, with and without the energy sums."""
    every = np.array([[op, 0] for op in range(len(OPS)) if op not in (OP_POST, OP_WAIT, OP_SEND_BACK)], np.int64)
    rows, _, lists, _, plan, mpi, grid, work = records.idle(np.zeros(0, np.int64))
    for eflag in (True, False):
        forces.run_ops(every, 0.1, eflag, 1e300, rows, lists, plan, mpi, grid, work, records.idle_bath())


class _Grid(NamedTuple):
    """The fields of a :class:`~pympi_gpu.nbody.lj.domain.CellGrid` a list build reads."""

    lo: np.ndarray
    inv: np.ndarray
    ncell: np.ndarray
    reach: int = 1

    @property
    def cells(self) -> int:
        return int(self.ncell[0] * self.ncell[1] * self.ncell[2])
