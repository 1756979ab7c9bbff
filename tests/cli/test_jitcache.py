"""numba's cache across processes: a kernel around a kernel and every kernel of a run load from it in the
next process, a kernel calling another module's kernel is compiled again when that module changes, and a
fresh process's wide-vector tuning.  Where the cache goes when the package (and even $HOME) are
read-only: tests/unit/test_jitcache_dirs.py."""

import pytest

from helpers.commands import clean_env, run

TUNE = ("from pympi_gpu.device import jitcache; from pympi_gpu.cli import settings; import os; "
        "print(jitcache.tune_cpu(settings.wide_vectors())); print(os.environ.get('NUMBA_CPU_FEATURES', 'unset'))")


def _host_has_avx512() -> bool:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    return "+avx512f" in llvm.get_host_cpu_features().flatten().split(",")


def test_wide_vector_tuning_in_a_fresh_process():
    import sys

    env = clean_env()
    for var in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES", "PYMPI_WIDE_VECTORS"):
        env.pop(var, None)
    what, features = run([sys.executable, "-c", TUNE], env=env).stdout.splitlines()
    if _host_has_avx512():
        assert what == "512-bit vectors" and features.endswith(",-prefer-256-bit")
        assert "+avx512f" in features
    else:
        assert what == "no AVX-512" and features == "unset"
    out = run([sys.executable, "-c", TUNE], env=dict(env, PYMPI_WIDE_VECTORS="0")).stdout.splitlines()
    assert out == ["off (PYMPI_WIDE_VECTORS=0)", "unset"]
    out = run([sys.executable, "-c", TUNE], env=dict(env, NUMBA_CPU_NAME="skylake")).stdout.splitlines()
    assert out == ["left to NUMBA_CPU_NAME/NUMBA_CPU_FEATURES", "unset"]


# -- kernels made around kernels: one compile, then the cache in every new process --------------------------

AROUND = """
import sys
from numba import njit
from pympi_gpu.device.jitcache import keyed_by_code

def make(inner):
    @njit(cache=True)
    def outer(x):
        return inner(x) + 1
    return keyed_by_code(outer) if sys.argv[1] == "keyed" else outer

@njit
def twice(x):
    return 2 * x

@njit
def thrice(x):
    return 3 * x

a, b = make(twice), make(thrice)
print(a(1), b(1), a.stats.cache_hits.get(a.signatures[0], 0), b.stats.cache_hits.get(b.signatures[0], 0))
"""


@pytest.mark.parametrize("keyed", [True, False])
def test_a_kernel_around_a_kernel_loads_from_the_cache_in_a_new_process(tmp_path, keyed):
    """numba pickles a kernel in a closure with a uuid of the process: only keyed_by_code hits the cache again."""
    import sys

    (tmp_path / "around.py").write_text(AROUND)
    env = clean_env(NUMBA_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(tmp_path))
    argv = [sys.executable, str(tmp_path / "around.py"), "keyed" if keyed else "numba"]
    first, second = (run(argv, env=env, cwd=tmp_path) for _ in range(2))
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert first.stdout.split() == ["3", "4", "0", "0"]  # the two closures kept apart by their cells
    assert second.stdout.split() == (["3", "4", "1", "1"] if keyed else ["3", "4", "0", "0"])


@pytest.mark.parametrize("model", ["gravity", "lj"])
def test_a_second_run_compiles_nothing(model):
    """Every kernel of a run, the force kernels made around a style's or a precision's kernels included,
    comes from numba's cache in the next process (each rank compiled them again before keyed_by_code)."""
    import sys

    argv = [sys.executable, "-m", "pympi_gpu", "nbody", "256" if model == "gravity" else "500", "--model", model,
            "--steps", "2", "--threads", "1"]
    env = clean_env(NUMBA_DEBUG_CACHE="1")
    first, second = run(argv, env=env), run(argv, env=env)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    saved = [line for line in (second.stdout + second.stderr).splitlines() if "data saved" in line]
    assert saved == [], "\n".join(saved)


CALLER = """
import sys
from mpi4py import MPI
from numba import njit
from pympi_gpu.device.jitcache import sources
from pympi_gpu.mpi import numba_calls
import callee

@njit(cache=True)
def caller(x):
    return callee.f(x) + 1

if sys.argv[1] == "keyed":
    caller = numba_calls.keyed_by_handles(caller, sources(callee))
print(caller(1))
"""


@pytest.mark.parametrize("keyed", [True, False])
def test_a_kernel_calling_another_modules_kernel_sees_it_change(tmp_path, keyed):
    """numba keys a cache entry by its own file only: a kernel keyed by ``sources`` of the module it calls is
    compiled again when that module changes (as ``rebuild_cpu.rebuild_brick`` is), where numba's own key
    loads the stale one."""
    import sys

    (tmp_path / "caller.py").write_text(CALLER)
    env = clean_env(NUMBA_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(tmp_path))
    argv = [sys.executable, str(tmp_path / "caller.py"), "keyed" if keyed else "numba"]
    outs = []
    for factor in (2, 3):
        (tmp_path / "callee.py").write_text(f"from numba import njit\n\n\n@njit(cache=True)\ndef f(x):\n"
                                            f"    return {factor} * x\n")
        proc = run(argv, env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        outs.append(proc.stdout.split())
    assert outs == ([["3"], ["4"]] if keyed else [["3"], ["3"]])


THREADED = """
import sys
import numpy as np
if sys.argv[2] == "guarded":
    from pympi_gpu.device.jitcache import guard_cache
    guard_cache()
from numba import njit, prange


@njit(parallel=True, cache=True)
def inner(x):
    s = 0.0
    for i in prange(x.shape[0]):
        s += x[i]
    return s


@njit(cache=True)
def outer(x):
    return inner(x) + 1.0


print(inner(np.arange(1000.0)) if sys.argv[1] == "inner" else outer(np.arange(1000.0)))
"""


def test_a_kernel_around_a_threaded_one_loads_where_no_pool_was_launched(tmp_path):
    """A kernel calling a ``parallel=True`` kernel, compiled in a process that loaded that callee from the
    cache, then loaded by a third process that has not launched numba's thread pool: a jump to a null
    pointer (numba issue 9938; the LJ step program around the threaded pair kernel, in the MPI test tier
    and in a script).  ``jitcache.guard_cache`` launches the pool before a kernel loads.  The same three
    processes without it show the fault is there to mend (numba 0.68: a segmentation fault)."""
    import sys

    (tmp_path / "threaded.py").write_text(THREADED)

    def three(how):
        env = clean_env(NUMBA_CACHE_DIR=str(tmp_path / how))
        return [run([sys.executable, str(tmp_path / "threaded.py"), which, how], env=env, cwd=tmp_path)
                for which in ("inner", "outer", "outer")]

    guarded = three("guarded")
    assert [(p.returncode, p.stdout.split()) for p in guarded] == \
        [(0, ["499500.0"]), (0, ["499501.0"]), (0, ["499501.0"])], [p.stderr[-2000:] for p in guarded]
    plain = three("plain")
    assert [p.returncode for p in plain[:2]] == [0, 0]
    assert plain[2].returncode in (0, -11)  # -11 where numba still has the fault
