"""How numba compiles for this process: where it caches kernels, for which CPU.

Cache
-----

numba caches next to the source when that directory is writable, else in
``$NUMBA_CACHE_DIR`` or the user's cache directory.  Inside an Apptainer image
the package directory is read-only and ``$HOME`` may be too, and numba rejects
a read-only cache outright, so every rank would recompile on every run.

:func:`configure` runs once at the command-line edge, before numba is
imported: it picks a writable cache directory and, when the image ships a
cache compiled at build time (``$PYMPI_NUMBA_CACHE_SEED``, see the docker
recipes), copies it there once, atomically, so concurrent ranks never see half
a cache.

CPU tuning
----------
numba compiles for the host CPU model.  LLVM's tuning of recent Intel server
parts (Skylake-SP to Emerald Rapids) prefers 256-bit vectors even where
AVX-512 is available; the pi kernels (64-bit integer hashing, division-bound
quadrature) run 1.3-1.6x faster with 512-bit vectors (see benchmarks/pi.py).
Where the host has AVX-512, :func:`configure` therefore asks numba for the
generic CPU model with every feature of the host: the same instructions,
without that preference.  ``NUMBA_CPU_NAME`` set by the user wins, and
``PYMPI_WIDE_VECTORS=0`` turns this off.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

__all__ = ["configure", "cache_dir_writable", "tune_cpu"]

SEED_ENV = "PYMPI_NUMBA_CACHE_SEED"


def _writable(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
        return True
    except OSError:
        return False


def cache_dir_writable() -> tuple[bool, str]:
    """Return (writable, directory) for the cache numba will use for this package."""
    env = os.environ.get("NUMBA_CACHE_DIR")
    if env:
        return _writable(Path(env)), env
    pkg = Path(__file__).resolve().parent
    if _writable(pkg / "__pycache__"):
        return True, str(pkg / "__pycache__")
    user = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "numba"
    return _writable(user), str(user)


def _fallback_dir() -> Path:
    base = Path(os.environ.get("TMPDIR") or tempfile.gettempdir())
    return base / f"pympi-gpu-numba-{os.getuid()}"


def _seed(src: Path, dest: Path) -> None:
    """Copy a prebuilt cache into ``dest`` once; safe against concurrent ranks."""
    marker = dest / ".seeded"
    if marker.exists() or not src.is_dir():
        return
    tmp = Path(tempfile.mkdtemp(prefix=".seed-", dir=dest))
    try:
        shutil.copytree(src, tmp, dirs_exist_ok=True)
        for item in tmp.iterdir():
            target = dest / item.name
            if not target.exists():
                try:
                    os.rename(item, target)
                except OSError:  # another rank won the race
                    pass
        marker.touch()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def tune_cpu() -> str | None:
    """Ask for 512-bit vectors where the host has AVX-512 (see module docs).

    Returns the CPU name set, or None when nothing was changed.
    """
    if "NUMBA_CPU_NAME" in os.environ or os.environ.get("PYMPI_WIDE_VECTORS", "1") == "0":
        return None
    try:
        import llvmlite.binding as llvm

        llvm.initialize_native_target()
        features = llvm.get_host_cpu_features()
    except Exception:  # an llvmlite without these calls: leave numba's defaults
        return None
    if not features.get("avx512f"):
        return None
    os.environ["NUMBA_CPU_NAME"] = "generic"
    os.environ["NUMBA_CPU_FEATURES"] = features.flatten()
    return "generic"


def configure() -> str:
    """Set numba up for this process; return the cache directory used.

    Must be called before numba is first imported (it sets ``NUMBA_CACHE_DIR``
    and, see :func:`tune_cpu`, ``NUMBA_CPU_NAME``).
    """
    if "numba" not in sys.modules:
        tune_cpu()
    seed = os.environ.get(SEED_ENV)
    ok, where = cache_dir_writable()
    if seed:
        # A seeded image: always run from a writable copy of the seed.
        where = os.environ.get("NUMBA_CACHE_DIR") or str(_fallback_dir())
        if not _writable(Path(where)):
            where = str(_fallback_dir())
            _writable(Path(where))
        os.environ["NUMBA_CACHE_DIR"] = where
        _seed(Path(seed), Path(where))
        return where
    if not ok:
        where = str(_fallback_dir())
        _writable(Path(where))
        os.environ["NUMBA_CACHE_DIR"] = where
    return where
