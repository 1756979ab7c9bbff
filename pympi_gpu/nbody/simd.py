"""Let numba use the full width of AVX-512 for the n-body CPU kernels.

LLVM tunes Intel server cores (Skylake-X to Emerald Rapids) with
``prefer-256-bit``: it vectorises with 256-bit registers even where 512-bit
ones exist.  The force loop is compute bound and gains nearly 2x from 512-bit
vectors, so :func:`configure` asks for them by setting ``NUMBA_CPU_FEATURES``
to this host's features minus that preference.  It must run before numba is
imported; it leaves alone a site that set ``NUMBA_CPU_NAME`` or
``NUMBA_CPU_FEATURES`` (for example an image compiled for a generic CPU), and
``PYMPI_WIDE_SIMD=0`` turns it off.
"""

from __future__ import annotations

import os
import sys

__all__ = ["configure"]


def configure(environ=None) -> str:
    """Set ``NUMBA_CPU_FEATURES`` for 512-bit vectors where useful; return what was done."""
    env = os.environ if environ is None else environ
    if env.get("PYMPI_WIDE_SIMD", "1") in ("0", "", "no", "false"):
        return "off (PYMPI_WIDE_SIMD=0)"
    if env.get("NUMBA_CPU_NAME") or env.get("NUMBA_CPU_FEATURES"):
        return "left to NUMBA_CPU_NAME/NUMBA_CPU_FEATURES"
    if "numba" in sys.modules:
        return "too late (numba already imported)"
    try:
        import llvmlite.binding as ll

        features = ll.get_host_cpu_features().flatten()
    except Exception as exc:  # an llvmlite without host introspection
        return f"host features unknown ({exc})"
    if "+avx512f" not in features.split(","):
        return "no AVX-512"
    env["NUMBA_CPU_FEATURES"] = features + ",-prefer-256-bit"
    return "512-bit vectors"
