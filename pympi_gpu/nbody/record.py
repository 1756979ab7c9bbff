"""The record both n-body models share: what ``--verify`` checked and found."""

from __future__ import annotations

import dataclasses

__all__ = ["Verification"]

@dataclasses.dataclass(frozen=True)
class Verification:
    """What ``--verify`` checked and found.

    ``max_error`` is, over the sampled bodies, ``|a - a_ref| / sum_j |a_ij|``:
    the error of the acceleration relative to the sum of the magnitudes of its
    terms, which bounds summation error whatever the cancellation.
    ``median_relative_error`` is the plain ``|a - a_ref| / |a_ref|``.
    """

    passed: bool
    sample: int
    max_error: float
    error_bound: float
    median_relative_error: float
    energy_drift: float | None
    drift_bound: float
    failures: tuple[str, ...]
