"""Where numba keeps its compiled kernels, also inside a read-only image.

numba caches next to the source when that directory is writable, else in
``$NUMBA_CACHE_DIR`` or the user's cache directory.  Inside an Apptainer image
the package directory is read-only and ``$HOME`` may be too, and numba rejects
a read-only cache outright, so every rank would recompile on every run.

:func:`configure` runs once at the command-line edge, before numba is
imported: it picks a writable cache directory and, when the image ships a
cache compiled at build time (``$PYMPI_NUMBA_CACHE_SEED``, see the docker
recipes), copies it there once, atomically, so concurrent ranks never see half
a cache.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

__all__ = ["configure", "cache_dir_writable"]

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


def configure() -> str:
    """Make numba's cache writable for this process; return the directory used.

    Must be called before numba is first imported (it sets ``NUMBA_CACHE_DIR``).
    """
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
