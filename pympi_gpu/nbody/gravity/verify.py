"""``--verify``: accelerations of a sample of bodies against a float64 direct sum,
and the energy drift against a bound; collective over comm."""

from __future__ import annotations

import numpy as np

from pympi_gpu.mpi.decomposition import block_starts
from pympi_gpu.nbody.record import Verification

__all__ = ["SAMPLE", "error_bound", "DRIFT_BOUND", "reference", "check", "verify"]

SAMPLE = 256
#: relative energy drift allowed by default (leapfrog with a step that
#: resolves the softening length drifts far less)
DRIFT_BOUND = 1e-3


def error_bound(precision: str, n: int) -> float:
    """Allowed |a - a_ref| / sum_j |a_ij| for ``n`` bodies in ``precision``.

    A sum of n terms in precision u (unit roundoff) errs by about u sqrt(n)
    times the sum of the magnitudes (random-walk rounding); each term adds a
    few u from the reciprocal square root.  The bound is 8 u sqrt(n) + 64 u.
    """
    u = float(np.finfo(np.float32 if precision == "fp32" else np.float64).eps) / 2
    return u * (64.0 + 8.0 * np.sqrt(n))


def sample_indices(n: int, k: int = SAMPLE) -> np.ndarray:
    """``k`` body indices spread evenly over ``range(n)`` (first and last included)."""
    return np.unique(np.linspace(0, n - 1, min(k, n)).round().astype(np.int64))


def reference(pos: np.ndarray, mass: np.ndarray, eps: float, targets) -> tuple[np.ndarray, np.ndarray]:
    """float64 accelerations of ``targets`` and the sums of their terms' magnitudes.

    pos: (N, 3); mass: (N,); returns ((k, 3), (k,)).
    """
    pos = np.asarray(pos, dtype=np.float64)
    mass = np.asarray(mass, dtype=np.float64)
    acc = np.empty((len(targets), 3))
    scale = np.empty(len(targets))
    for row, i in enumerate(targets):
        d = pos - pos[i]
        r2 = np.einsum("ij,ij->i", d, d)
        w = mass / ((r2 + eps * eps) * np.sqrt(r2 + eps * eps))
        acc[row] = w @ d
        scale[row] = np.sum(w * np.sqrt(r2))
    return acc, scale


def check(acc: np.ndarray, ref: np.ndarray, scale: np.ndarray, precision: str, n: int,
          drift: float | None, drift_bound: float = DRIFT_BOUND) -> Verification:
    """Judge sampled accelerations ``acc`` against ``ref`` (both (k, 3)); pure."""
    err = np.linalg.norm(acc - ref, axis=1)
    norm_err = err / np.where(scale > 0, scale, 1.0)
    rel = err / np.maximum(np.linalg.norm(ref, axis=1), np.finfo(np.float64).tiny)
    bound = error_bound(precision, n)
    failures = []
    worst = int(np.argmax(norm_err)) if len(norm_err) else 0
    max_err = float(norm_err.max()) if len(norm_err) else 0.0
    if not np.isfinite(acc).all():
        failures.append("non-finite accelerations in the sample")
    elif max_err > bound:
        failures.append(f"acceleration error {max_err:.3e} (sample body #{worst}) exceeds the bound "
                        f"{bound:.3e} for {precision}")
    if drift is not None and not drift <= drift_bound:
        failures.append(f"relative energy drift {drift:.3e} exceeds the bound {drift_bound:.3e}")
    return Verification(passed=not failures, sample=len(acc), max_error=max_err, error_bound=bound,
                        median_relative_error=float(np.median(rel)) if len(rel) else 0.0,
                        energy_drift=drift, drift_bound=drift_bound, failures=tuple(failures))


def verify(comm, local: dict[str, np.ndarray], n: int, softening: float, precision: str,
           drift: float | None, drift_bound: float = DRIFT_BOUND, k: int = SAMPLE) -> Verification:
    """Check this run's final accelerations; collective over comm.

    ``local`` are this rank's host arrays (``x y z ax ay az m``, see
    :func:`pympi_gpu.nbody.gravity.driver.local_arrays`).  Rank 0 gathers every
    position (float64) and the sampled accelerations and judges; every rank
    returns the same verdict.
    """
    from mpi4py import MPI

    size, rank = comm.Get_size(), comm.Get_rank()
    counts = comm.allgather(int(local["x"].size))
    starts = block_starts(n, size)
    mine = np.stack([local[f].astype(np.float64) for f in ("x", "y", "z", "m")], axis=1)
    everything = np.empty((n, 4)) if rank == 0 else None
    comm.Gatherv([np.ascontiguousarray(mine), MPI.DOUBLE],
                 [everything, ([4 * c for c in counts], [4 * s for s in starts]), MPI.DOUBLE]
                 if rank == 0 else None, root=0)
    idx = sample_indices(n, k)
    lo = starts[rank]
    own = idx[(idx >= lo) & (idx < lo + counts[rank])]
    acc_own = np.stack([local[f][own - lo].astype(np.float64) for f in ("ax", "ay", "az")], axis=1)
    gathered = comm.gather((own, acc_own), root=0)
    result = None
    if rank == 0:
        order = np.concatenate([g[0] for g in gathered])
        acc = np.concatenate([g[1] for g in gathered])
        acc = acc[np.argsort(order, kind="stable")]
        ref, scale = reference(everything[:, :3], everything[:, 3], softening, idx)
        result = check(acc, ref, scale, precision, n, drift, drift_bound)
    return comm.bcast(result, root=0)
