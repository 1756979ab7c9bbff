"""The fixtures and hooks of every tier: ``mpirun``, ``device``, the tiers' order and ``slow`` marks.

What the tests share as code (starting commands, watching jobs, the SLOW table) is in
``tests/helpers/``, which every test imports from: pytest puts ``tests/`` on ``sys.path``
when it loads this file, whichever tier it collects.
"""

from __future__ import annotations

import os
import sys

import pytest

from helpers import tiers
from helpers.commands import ROOT, SIMULATOR_PATH, clean_env, mpiexec_argv, run

# Bytecode written: the suite starts a few thousand Pythons (every command, rank and launcher), and where
# none is written (PYTHONDONTWRITEBYTECODE=1, as some CI images set) each compiled the package's modules
# from source again, 0.15 CPU-s of an LJ run's 1.4 (AMD EPYC Zen 3, 2026-12-08).  Python's default, in
# this process and its children: ``__pycache__`` beside the sources.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

#: on PYTHONPATH for every child of the test run: numba's CUDA simulator, where a child enables it, on a
#: schedule without a polled OS thread per CUDA thread (``tests/data/cudasim/sitecustomize.py``)
if SIMULATOR_PATH not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [SIMULATOR_PATH, os.environ.get("PYTHONPATH")]))


@pytest.fixture
def mpirun():
    """``mpirun(n, *argv)`` runs argv over n ranks of this environment's MPI."""
    def _run(n: int, *argv: str, timeout: float = 300, **kw):
        return run(mpiexec_argv(n) + list(argv), timeout=timeout, **kw)
    return _run


def pytest_collection_modifyitems(items):
    """The others first, in their order; then the container tiers, in the prebuild's (helpers/tiers.py)."""
    items.sort(key=tiers.container_tier)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """``-n auto``: two workers, one where this process may run on one CPU;
    ``PYMPI_TEST_WORKERS`` sets the number (:func:`tiers.workers`)."""
    return tiers.workers()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under pytest-xdist, a file's tests one after the other on one worker, and the system tier's Slurm
    tests on one, its container tiers' on one (:func:`tiers.worker_group`); the groups handed out in the
    order collected (not xdist's default, the largest first: that sent the container tiers out first, to
    wait for their images)."""
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return tiers.worker_group(nodeid)

    return ByGroup(config, log)


@pytest.hookimpl(hookwrapper=True, tryfirst=True, specname="pytest_runtest_protocol")
def pytest_alone_or_together(item, nextitem):
    """Under pytest-xdist, a test of :data:`tiers.ALONE` runs while no other worker runs one: every test holds
    a shared lock for its setup, call and teardown, those tests an exclusive one.  Each takes its turn
    through a second lock first, so that a test waiting for the exclusive lock keeps the other worker from
    starting a new test meanwhile (it would wait for ever, the shared lock never free)."""
    workerinput = getattr(item.config, "workerinput", None)  # an xdist worker's own (never its children's)
    if workerinput is None:
        yield
        return
    import fcntl

    base = _lock_base(workerinput)
    with open(base + ".turn", "a") as turn, open(base + ".lock", "a") as lock:
        fcntl.flock(turn, fcntl.LOCK_EX)
        fcntl.flock(lock, fcntl.LOCK_EX if tiers.alone(item.nodeid) else fcntl.LOCK_SH)
        fcntl.flock(turn, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _lock_base(workerinput) -> str:
    import tempfile

    return os.path.join(tempfile.gettempdir(), f"pympi-tests-{workerinput['testrunuid']}")


def pytest_sessionfinish(session):
    """A worker done with its tests removes the locks (a worker still running makes them again if it needs
    them; none but it is left to share them)."""
    workerinput = getattr(session.config, "workerinput", None)
    if workerinput is not None:
        for end in (".turn", ".lock"):
            try:
                os.unlink(_lock_base(workerinput) + end)
            except FileNotFoundError:
                pass


def pytest_itemcollected(item):
    """Mark the SLOW table's cases (helpers/tiers.py) ``slow``, before -m selects (after collection)."""
    if tiers.slow_case(item):
        item.add_marker(pytest.mark.slow)


# -- one test body on each device --------------------------------------------------------------------------

#: the devices a ``device`` test runs on: numba on the CPU, the GPU kernels under numba's CUDA simulator, and
#: a real GPU where one is usable (marked ``gpu``: the GPU acceptance runs these bodies on its device)
DEVICES = ("numba", "cudasim", pytest.param("gpu", marks=pytest.mark.gpu))


@pytest.fixture(params=DEVICES)
def device(request):
    """The :class:`~pympi_gpu.device.device.Device` a test body runs on (HOOMD-blue's ``device`` fixture).

    ``numba``: the CPU.  ``cudasim``: the GPU paths (numba.cuda kernels, the
    device-resident arrays) under numba's CUDA simulator, which numba reads when
    numba.cuda is imported: that case runs in a child pytest with
    ``NUMBA_ENABLE_CUDASIM=1`` (:func:`pytest_pyfunc_call`), and here only there.
    ``gpu``: a real CUDA GPU, skipped with the reason where none is usable.
    """
    from pympi_gpu.device.device import Device

    if request.param == "numba":
        return Device()
    if request.param == "gpu":
        from pympi_gpu.device.gpu import gpu_usable

        ok, why = gpu_usable()
        if not ok:
            pytest.skip(f"no usable GPU: {why}")
        return Device(backend="gpu", backend_reason="the device fixture", transport="host")
    return Device(backend="gpu", backend_reason="the device fixture", transport="host", simulated=True)


def pytest_pyfunc_call(pyfuncitem):
    """The ``cudasim`` case of a ``device`` test, in a process without the simulator: run it in one that has."""
    params = getattr(getattr(pyfuncitem, "callspec", None), "params", {})
    if params.get("device") != "cudasim" or os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        return None
    out = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
               "--rootdir", str(ROOT), pyfuncitem.nodeid], timeout=900, cwd=ROOT,
              env=clean_env(NUMBA_ENABLE_CUDASIM="1"))
    if out.returncode != 0 or " passed" not in out.stdout:
        pytest.fail(f"under the CUDA simulator (a child pytest):\n{(out.stdout + out.stderr)[-4000:]}",
                    pytrace=False)
    return True


# -- where the suite's time goes --------------------------------------------------------------------------

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With ``PYMPI_TEST_CPU=FILE``, a JSON line a test: its wall time and the CPU time it cost, its own and its
    children's (every command, rank and launcher it waited for), so that CI's minutes can be put on tests
    (docs/testing.md; ``python -m tests.helpers.cputime FILE`` sums them)."""
    path = os.environ.get("PYMPI_TEST_CPU")
    if not path:
        yield
        return
    import json
    import resource
    import time

    def cpu() -> float:
        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime

    start, t0, c0 = time.time(), time.monotonic(), cpu()
    yield
    with open(path, "a") as fh:
        fh.write(json.dumps({"test": item.nodeid, "start": round(start, 6), "end": round(time.time(), 6),
                             "wall": round(time.monotonic() - t0, 3),
                             "cpu": round(cpu() - c0, 3), "worker": os.environ.get("PYTEST_XDIST_WORKER", "")})
                 + "\n")
