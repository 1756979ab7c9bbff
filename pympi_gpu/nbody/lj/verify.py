"""``--verify`` for the LJ model: forces against a direct sum, conservation laws.

Rank 0 gathers the system, takes a sample of atoms (fixed by their ids) and
sums their pair forces (the run's pair style's term) directly over every atom
and its 27 nearest periodic images (no cells, no ghosts, no lists), in float64.  The error measure is
``|f - f_ref| / sum_j |f_ij|`` (relative to the sum of the pair-force
magnitudes, which bounds summation error whatever the cancellation); the
cell/halo path must agree to ``FORCE_BOUND`` in double precision, and to its
precision's bound in another (:mod:`~pympi_gpu.nbody.lj.precision`: the direct
sum is always double, so ``--precision mixed`` is checked against double).  The total momentum must stay
within ``MOMENTUM_BOUND`` per atom of its start and the relative energy drift
within the tolerance asked for.
"""

from __future__ import annotations

import functools

import numpy as np

from pympi_gpu.nbody.lj.box import edges
from pympi_gpu.nbody.lj.checkpoint import gather
from pympi_gpu.nbody.record import Verification

__all__ = ["reference_forces", "verify", "FORCE_BOUND", "MOMENTUM_BOUND", "DRIFT_BOUND"]

FORCE_BOUND = 1e-12
MOMENTUM_BOUND = 1e-12
#: the relative energy drift ``--verify`` accepts by default: the unshifted cutoff makes the energy jump as
#: pairs cross it (LAMMPS's own bench/in.lj drifts 1.9e-3 in its 100 steps), so 1e-3 would fail correct runs
DRIFT_BOUND = 1e-2
SAMPLE = 64


def reference_forces(x: np.ndarray, box, cutoff: float, which: np.ndarray,
                     pair=None) -> tuple[np.ndarray, np.ndarray]:
    """Direct-sum forces on atoms ``which`` of ``x`` ``(N, 3)``: ``(forces, sum of |f_ij|)``.

    ``pair`` is the pair term (``LjConfig.pair_term``; default LJ 12-6 at
    epsilon = sigma = 1), summed over every atom and its 27 nearest periodic
    images, in float64: no cells, no ghosts, no lists.  ``box``: the periodic box's three edges (or a cube's one).
    """
    if pair is None:
        from pympi_gpu.nbody.lj.config import LjConfig

        pair = LjConfig(cells=1).pair_term
    box = np.asarray(edges(box))
    xw = x - box * np.floor(x / box)
    out = np.zeros((which.size, 3))
    mag = np.zeros(which.size)
    _direct_sum(pair)(xw, box, cutoff * cutoff, np.asarray(which, np.int64), out, mag)
    return out, mag


@functools.cache
def _direct_sum(pair):
    """The direct sum of :func:`reference_forces`, compiled around ``pair``: each pair's body the model's
    one (:func:`~pympi_gpu.nbody.lj.pairs.contribution`) in double precision."""
    from numba import njit

    from pympi_gpu.device.jitcache import guard_cache
    from pympi_gpu.nbody.lj.pairs import contribution

    guard_cache()  # cached below: numba's cache mended first (see jitcache)
    contribute = contribution(pair, np.float64)

    @njit(cache=True)
    def direct(xw, box, rc2, which, out, mag):
        for n in range(which.size):
            i = which[n]
            for sx in range(-1, 2):
                for sy in range(-1, 2):
                    for sz in range(-1, 2):
                        for j in range(xw.shape[0]):
                            dx = xw[i, 0] - xw[j, 0] - sx * box[0]
                            dy = xw[i, 1] - xw[j, 1] - sy * box[1]
                            dz = xw[i, 2] - xw[j, 2] - sz * box[2]
                            if dx == 0.0 and dy == 0.0 and dz == 0.0:
                                continue  # the atom itself (or one on top of it)
                            inside, px, py, pz, _, _ = contribute(dx, dy, dz, rc2)
                            if inside:
                                out[n, 0] += px
                                out[n, 1] += py
                                out[n, 2] += pz
                                mag[n] += np.sqrt(px * px + py * py + pz * pz)

    return direct


def verify(comm, owned: dict, box, cutoff: float, energy_drift: float | None,
           momentum_change: float | None, tolerance: float, pair=None,
           force_bound: float = FORCE_BOUND, momentum_bound: float = MOMENTUM_BOUND) -> Verification:
    """Check forces, momentum and energy; collective over comm, same verdict on every rank.

    ``pair``: the run's pair term in double precision (:func:`reference_forces`), whatever precision the run's
    forces were computed in; ``force_bound``, ``momentum_bound``: the errors that precision can meet
    (:class:`~pympi_gpu.nbody.lj.precision.Precision`: :data:`FORCE_BOUND`, :data:`MOMENTUM_BOUND` in double).
    """
    full = gather(comm, owned)
    result = None
    if comm.Get_rank() == 0:
        n = full["id"].size
        which = np.random.Generator(np.random.PCG64(12345)).choice(n, size=min(SAMPLE, n), replace=False)
        ref, mag = reference_forces(full["x"], box, cutoff, which, pair)
        err = np.linalg.norm(full["f"][which] - ref, axis=1)
        scaled = err / np.maximum(mag, 1e-300)
        rel = err / np.maximum(np.linalg.norm(ref, axis=1), 1e-300)
        failures = []
        max_err = float(scaled.max())
        if not max_err <= force_bound:
            failures.append(f"force error {max_err:.3e} exceeds {force_bound:.0e}")
        if momentum_change is not None and not momentum_change <= momentum_bound * n:
            failures.append(f"momentum changed by {momentum_change:.3e} (bound {momentum_bound * n:.1e})")
        if energy_drift is not None and not energy_drift <= tolerance:
            failures.append(f"energy drift {energy_drift:.3e} exceeds {tolerance:.1e}")
        result = Verification(passed=not failures, sample=int(which.size), max_error=max_err,
                              error_bound=force_bound, median_relative_error=float(np.median(rel)),
                              energy_drift=energy_drift, drift_bound=tolerance, failures=tuple(failures))
    return comm.bcast(result, root=0)
