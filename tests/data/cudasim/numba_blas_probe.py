"""numba's BLAS probe kept from scipy in the test run's children, as in a user's install.

numba looks for a BLAS when its CPU target starts (``numba.np.arraymath`` calls
``numba.np.linalg.ensure_blas``, which imports ``scipy.linalg.cython_blas``): with
scipy installed that import costs about 0.3 s of CPU in every process that runs a
numba kernel, and pympi_gpu starts such a process a few thousand times in a test run.
scipy is there only because the ``test`` extra brings ASE, which needs it; a user's
``pip install ".[mpich]"`` has no scipy, and numba then has no BLAS, which no kernel
of pympi_gpu uses.  So in the test run's children (``sitecustomize`` loads this
module) the probe's import of scipy fails as it does there; every other import of
scipy, by a test or by ASE, is left alone.  ``PYMPI_TEST_SCIPY_BLAS=1`` lets the probe
find it.
"""

from __future__ import annotations

import os
import sys


class _Probe:
    """A finder that refuses scipy to numba's ``ensure_blas`` only (it is on the stack), and finds nothing."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "scipy":
            frame = sys._getframe(1)
            while frame is not None:
                code = frame.f_code
                if code.co_name == "ensure_blas" and code.co_filename.replace(os.sep, "/").endswith(
                        "numba/np/linalg.py"):
                    raise ModuleNotFoundError(f"No module named {name!r} (kept from numba's BLAS probe in the "
                                              "test run's children, as in an install without scipy)", name=name)
                frame = frame.f_back
        return None


def install() -> None:
    if os.environ.get("PYMPI_TEST_SCIPY_BLAS", "") not in ("", "0"):
        return
    sys.meta_path.insert(0, _Probe())
