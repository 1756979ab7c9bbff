"""The floating-point precisions of the gravity model, by their command-line names.

Its own module so that the backends (which choose a kernel module) and the
kernel modules (which build their kernels for a precision) both import it,
and neither imports the other.
"""

from __future__ import annotations

import numpy as np

__all__ = ["PRECISIONS"]

#: ``--precision`` name -> NumPy scalar type of positions, velocities and accelerations
PRECISIONS = {"fp32": np.float32, "fp64": np.float64}
