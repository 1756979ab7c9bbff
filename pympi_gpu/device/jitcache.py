"""How numba compiles for this process: where it caches kernels, for which CPU.

Cache
-----

numba caches next to the source when that directory is writable, else in
``$NUMBA_CACHE_DIR`` or the user's cache directory.  Inside an Apptainer image
the package directory is read-only and ``$HOME`` may be too, and numba rejects
a read-only cache outright, so every rank would recompile on every run.

Next to the source is right for a checkout (an editable install among them),
but not for a copy pip installed: pip's uninstall removes the files it
installed, not numba's, and the ``pympi_gpu/*/__pycache__`` directories it
leaves make ``pympi_gpu`` a namespace package that hides the next (editable)
install, so every command failed to import (issue 60, item 20).  An installed
copy's cache goes to the user's cache directory instead,
``$XDG_CACHE_HOME/pympi_gpu/numba`` (``~/.cache/...``), with numba's
``NUMBA_CACHE_DIR`` layout (a directory per source path, so installs in two
venvs never share an entry).

:func:`configure` runs once at the command-line edge, before numba is
imported: it picks a writable cache directory and, when the image ships a
cache compiled at build time (its ``seed``: the command line reads
``$PYMPI_NUMBA_CACHE_SEED``, see the docker recipes), copies it there once,
atomically, so concurrent ranks never see half a cache.  The seed is
``NUMBA_CACHE_DIR``'s layout too (the recipes compile it with that variable
set), and a ``NUMBA_CACHE_DIR`` the user set always wins.

CPU tuning
----------
numba compiles for the host CPU model.  LLVM's tuning of recent Intel server
parts (Skylake-SP to Emerald Rapids) carries ``prefer-256-bit``: it vectorises
with 256-bit registers even where AVX-512 is available.  The pi kernels (64-bit
integer hashing, division-bound quadrature) run 1.3-1.6x faster with 512-bit
vectors and the n-body force loop nearly 2x, so where the host has AVX-512,
:func:`tune_cpu` hands numba the host's features minus that one preference.
``NUMBA_CPU_NAME`` or ``NUMBA_CPU_FEATURES`` set by the user win (an image
compiled for a generic CPU, say), and ``wide=False`` (the command line's
``PYMPI_WIDE_VECTORS=0``) turns this off.

Kernels made around kernels
---------------------------
numba keys the cache entry of a closure by pickling its cells, and a compiled
kernel (a ``Dispatcher``) pickles with a uuid drawn afresh in every process.
A kernel that a factory compiles around another kernel (the LJ force phase
around a pair style's half-list kernel, gravity's ``accel`` around its
``rsqrt``) therefore missed the cache in every new process: each rank compiled
it again at start-up (1-2 s on a 2-core Zen 3) and added one more entry to the
index, which grew by one per run.  :func:`keyed_by_code` keys such a kernel by
what numba compiles from the kernels in its cells, their code, cells and
options, the same in every process.

Two faults of numba's cache, guarded
------------------------------------
:func:`guard_cache` mends two faults of numba's cache (0.68) that end a run
in a segmentation fault.  Every module that compiles with ``cache=True``
calls it once numba is imported (a test holds them to it).

*Entries saved by several processes at once.*  numba's index of a kernel's
entries maps each key (its signature, the CPU it was compiled for) to a data
file numbered by the first number the index did not hold when it was read.
Ranks that compile different entries of one kernel at once (an MPMD launch
where one rank's CPU features differ; ranks of two runs on one cache) read
the same index, pick the same number, and the index left names one entry's
file for another's key (numba issues 4807 and 10128).  Guarded, each save is
one step under a lock file in the cache directory (``.pympi-numba.lock``):
the index read afresh under it, the data file written before the index
names it.

*A kernel loaded before numba's thread pool exists.*  A kernel that calls a
``parallel=True`` kernel, compiled in a process that loaded that callee from
the cache, is saved without the note that its code needs numba's thread
pool; a later process that loads it and calls it before anything launched
the pool jumps to a null pointer (numba issue 9938).  The LJ step program
(``run_ops``, around the threaded pair kernel) is such a kernel, compiled
again wherever its key changes (another MPI library, a thermostat module
edited) while its callees still load; the command line launches the pool
when it sets the threads, but a script or the MPI test tier need not.
Guarded, the pool is launched before any kernel is loaded from the cache (the
code loaded is linked to the pool's entry points as it loads: after, is too
late).

A start-up that imports scipy's linear algebra
----------------------------------------------
numba's array functions (``numba.np.arraymath``, imported at a process's first
compile or cache load) probe for a BLAS by importing ``scipy.linalg``, where
scipy is installed (ase brings it): 0.3-0.6 CPU-s on every rank of every run,
a tenth to a quarter of a short LJ run's start-up, for a library no kernel
here calls.  :func:`guard_cache` imports that module with the probe answered
"no BLAS" where ``scipy.linalg`` is not imported yet: a 1-D ``np.dot`` of
floats in a compiled function (none here; a user's pair style might) then
takes numba's own loop, and a 2-D one imports scipy when it compiles, as
before.

numba also keys an entry by the stamp of the kernel's own source file only: a
kernel that calls kernels of other modules would be loaded as it was compiled
when only those changed.  :func:`sources` is a key part for such a kernel
(:func:`~pympi_gpu.mpi.numba_calls.keyed_by_handles` takes it): the contents
of the modules it calls.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import io
import itertools
import os
import shutil
import sys
import tempfile
from pathlib import Path

__all__ = ["configure", "guard_cache", "cache_dir_writable", "installed", "user_cache_dir", "tune_cpu", "host_cpu",
           "keyed_by_code", "sources"]


def _writable(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
        return True
    except OSError:
        return False


def installed(package: Path | None = None) -> bool:
    """Is the package (this one by default) a copy pip installed, in a site-packages directory (a venv's, the
    system's, the user's), rather than a checkout, where an editable install also points?"""
    import site
    import sysconfig

    package = (package or Path(__file__).resolve().parent.parent).resolve()
    paths = sysconfig.get_paths()
    roots = {paths["purelib"], paths["platlib"], *site.getsitepackages()}
    if site.ENABLE_USER_SITE:
        roots.add(site.getusersitepackages())
    return any(package.is_relative_to(Path(root).resolve()) for root in roots)


def user_cache_dir() -> Path:
    """Where an installed copy's kernels are cached: ``$XDG_CACHE_HOME/pympi_gpu/numba``."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pympi_gpu" / "numba"


def cache_dir_writable() -> tuple[bool, str]:
    """Return (writable, directory) for the cache numba will use for this package."""
    env = os.environ.get("NUMBA_CACHE_DIR")
    if env:
        return _writable(Path(env)), env
    if installed():
        return _writable(user_cache_dir()), str(user_cache_dir())
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


def tune_cpu(wide: bool = True, environ=None) -> str:
    """Ask for 512-bit vectors where the host has AVX-512 (see module docs); ``wide=False``: leave it.

    Must run before numba is imported.  ``environ`` is the environment numba
    reads (this process's by default), which it sets.  Returns what was done, for reports.
    """
    env = os.environ if environ is None else environ
    if not wide:
        return "off (PYMPI_WIDE_VECTORS=0)"
    if env.get("NUMBA_CPU_NAME") or env.get("NUMBA_CPU_FEATURES"):
        return "left to NUMBA_CPU_NAME/NUMBA_CPU_FEATURES"
    if "numba" in sys.modules:
        return "too late (numba already imported)"
    try:
        import llvmlite.binding as llvm

        llvm.initialize_native_target()
        features = llvm.get_host_cpu_features().flatten()
    except Exception as exc:  # an llvmlite without host introspection
        return f"host features unknown ({exc})"
    if "+avx512f" not in features.split(","):
        return "no AVX-512"
    env["NUMBA_CPU_FEATURES"] = features + ",-prefer-256-bit"
    return "512-bit vectors"


def host_cpu() -> dict[str, str]:
    """The CPU numba compiles for: model name, LLVM's name for it, and its widest vector ISA.

    For benchmark records: kernel speeds differ by ISA (``avx512``, ``avx2``,
    ``sse4.2``, ``neon``...) more than by anything else about a core.
    """
    import platform

    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), model)
    except OSError:
        pass
    try:
        import llvmlite.binding as llvm

        llvm.initialize_native_target()
        name = llvm.get_host_cpu_name()
        features = set(llvm.get_host_cpu_features().flatten().split(","))
    except Exception:  # an llvmlite without host introspection
        name, features = "unknown", set()
    isa = next((label for flag, label in (("+avx512f", "avx512"), ("+avx2", "avx2"), ("+avx", "avx"),
                                          ("+sse4.2", "sse4.2"), ("+neon", "neon"), ("+sve", "sve"))
                if flag in features), "unknown")
    return {"model": model, "llvm_cpu": name, "vector_isa": isa}


def configure(seed: str | None = None, wide: bool = True) -> str:
    """Set numba up for this process; return the cache directory used.

    Must be called before numba is first imported (it sets ``NUMBA_CACHE_DIR``
    and, see :func:`tune_cpu`, ``NUMBA_CPU_FEATURES``).  ``seed``: the
    directory of a cache compiled when the image was built, or None; ``wide``:
    as :func:`tune_cpu`.
    """
    tune_cpu(wide)
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
    elif installed() and not os.environ.get("NUMBA_CACHE_DIR"):  # never beside an installed copy (see above)
        os.environ["NUMBA_CACHE_DIR"] = where
    return where


#: the lock file that makes a cache entry's save one step (see module docs), in the cache directory
SAVE_LOCK = ".pympi-numba.lock"


@functools.cache
def guard_cache() -> bool:
    """Mend the two faults of numba's cache the module docs name: saves by processes at once, kernels
    loaded before the thread pool exists; once per process, after numba is importable.  Returns whether
    the saves could be guarded (a numba whose cache file lacks the parts it builds on is left as it is)."""
    import numba
    from numba.core.caching import Cache, IndexDataCacheFile

    _arraymath_without_blas_probe()
    load = Cache.load_overload

    def load_launched(self, sig, target_context):
        numba.get_num_threads()  # launches the pool where it is not yet: before the code is linked
        return load(self, sig, target_context)

    Cache.load_overload = load_launched

    needed = ("_load_index", "_save_index", "_save_data", "_data_name", "_cache_path")
    probe = IndexDataCacheFile.__new__(IndexDataCacheFile)
    probe._cache_path = ""
    if not all(hasattr(probe, name) for name in needed):
        return False
    unguarded = IndexDataCacheFile.save

    def save(self, key, data):
        try:
            fd = os.open(os.path.join(self._cache_path, SAVE_LOCK), os.O_RDWR | os.O_CREAT, 0o666)
        except OSError:
            return unguarded(self, key, data)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:  # a filesystem without locks: numba's own save
                return unguarded(self, key, data)
            overloads = self._load_index()  # afresh, under the lock
            name = overloads.get(key)
            if name is None:
                taken = set(overloads.values())
                name = next(n for n in map(self._data_name, itertools.count(1)) if n not in taken)
            self._save_data(name, data)  # before the index names it: a reader finds it whole or not at all
            if overloads.get(key) != name:
                overloads[key] = name
                self._save_index(overloads)
        finally:
            os.close(fd)

    save.unguarded = unguarded
    IndexDataCacheFile.save = save
    return True


def _arraymath_without_blas_probe() -> None:
    """Import ``numba.np.arraymath`` with its BLAS probe (an import of ``scipy.linalg``) answered "no",
    where neither is imported yet (see module docs)."""
    blas = "scipy.linalg.cython_blas"
    if "numba.np.arraymath" in sys.modules or blas in sys.modules:
        return
    sys.modules[blas] = None  # an import of it raises ImportError: numba's probe says no BLAS
    try:
        import numba.np.arraymath  # noqa: F401
    finally:
        del sys.modules[blas]


def keyed_by_code(kernel, *more):
    """Key ``kernel``'s on-disk cache entries by the code of the kernels it closes over (see module docs).

    ``kernel``: a ``numba.njit(cache=True)`` function whose cells hold other
    compiled kernels.  ``more``: functions of no argument whose answers join
    the key (:func:`sources`' digests, say, of the modules whose kernels it
    calls by name).  Returns it, its cache replaced (a plain function, with
    ``NUMBA_DISABLE_JIT=1``, as it is).
    """
    if hasattr(kernel, "py_func"):
        kernel._cache = _code_keyed_cache()(kernel.py_func)
        kernel._cache.more = more
    return kernel


def sources(*modules):
    """A cache key part: a function of no argument that answers the digest of the modules' source files
    (those of the kernels a kernel calls in other modules, whose changes numba's own key misses)."""
    paths = [Path(m.__file__) for m in modules]

    def digest():
        h = hashlib.sha256()
        for path in paths:
            h.update(path.read_bytes())
        return ("sources", h.hexdigest())

    return digest


@functools.cache
def _code_keyed_cache():
    """numba's ``FunctionCache`` whose index key pickles a cell's kernel as its function, locals and options."""
    from numba.core.caching import FunctionCache
    from numba.core.dispatcher import Dispatcher
    from numba.core.serialize import NumbaPickler

    class KernelsByCode(NumbaPickler):
        def reducer_override(self, obj):
            if isinstance(obj, Dispatcher):  # everything numba's own pickle holds but the uuid
                return tuple, (("kernel", obj.py_func, obj.locals, obj.targetoptions),)
            return super().reducer_override(obj)

    class CodeKeyedCache(FunctionCache):
        more = ()

        def _index_key(self, sig, codegen):
            func = self._py_func
            with io.BytesIO() as buf:
                KernelsByCode(buf, protocol=4).dump(tuple(c.cell_contents for c in func.__closure__ or ()))
                cells = buf.getvalue()
            return (sig, codegen.magic_tuple(),
                    (hashlib.sha256(func.__code__.co_code).hexdigest(), hashlib.sha256(cells).hexdigest()),
                    *(part() for part in self.more))

    return CodeKeyedCache
