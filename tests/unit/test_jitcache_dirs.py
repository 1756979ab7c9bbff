"""numba's cache must work when the package (and even $HOME) are read-only: where it goes, in one process.

Kernels loaded from it by the next process: tests/cli/test_jitcache.py."""

import os
from pathlib import Path

import pytest

from pympi_gpu.device import jitcache


@pytest.fixture
def env(monkeypatch, tmp_path):
    for var in ("NUMBA_CACHE_DIR", "PYMPI_NUMBA_CACHE_SEED"):
        monkeypatch.setenv(var, "")  # recorded, so configure()'s changes are undone after the test
        monkeypatch.delenv(var)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    return tmp_path


def test_writable_tree_is_left_alone(env, monkeypatch):
    monkeypatch.setattr(jitcache, "_writable", lambda p: True)
    monkeypatch.setattr(jitcache, "installed", lambda package=None: False)  # a checkout (or an editable install)
    jitcache.configure()
    assert "NUMBA_CACHE_DIR" not in os.environ


def test_an_installed_copy_caches_outside_its_directory(env, monkeypatch):
    """A copy pip installed caches in the user's cache directory, never beside itself: pip's uninstall would
    leave numba's files there, and the directory they keep would hide the next install (issue 60, item 20).
    A NUMBA_CACHE_DIR of the user's, and an image's seed, still win."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(env / "xdg"))
    monkeypatch.setattr(jitcache, "installed", lambda package=None: True)
    where = jitcache.configure()
    assert where == os.environ["NUMBA_CACHE_DIR"] == str(env / "xdg" / "pympi_gpu" / "numba")
    assert jitcache.cache_dir_writable() == (True, where)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(env / "mine"))
    assert jitcache.configure() == str(env / "mine") == os.environ["NUMBA_CACHE_DIR"]


def test_installed_means_in_a_site_packages_directory(tmp_path):
    import site
    import sysconfig

    assert jitcache.installed(Path(sysconfig.get_paths()["purelib"]) / "pympi_gpu")
    assert jitcache.installed(Path(site.getsitepackages()[0]) / "pympi_gpu")
    assert not jitcache.installed(tmp_path / "checkout" / "pympi_gpu")
    assert not jitcache.installed()  # the tests run from the checkout


def test_read_only_install_falls_back_to_tmp(env, monkeypatch):
    real = jitcache._writable
    # package dir and user cache read-only (as in an Apptainer image), $TMPDIR writable
    monkeypatch.setattr(jitcache, "_writable", lambda p: str(p).startswith(str(env / "tmp")) and real(p))
    where = jitcache.configure()
    assert where == os.environ["NUMBA_CACHE_DIR"]
    assert Path(where).parent == env / "tmp" and Path(where).is_dir()


def test_seeded_cache_is_copied_once(env, monkeypatch):
    seed = env / "seed" / "opt" / "pkg"
    seed.mkdir(parents=True)
    (seed / "kernel.nbi").write_text("index")
    (seed / "kernel.nbc").write_text("code")
    from pympi_gpu.cli.settings import numba_cache_seed

    monkeypatch.setenv("PYMPI_NUMBA_CACHE_SEED", str(env / "seed"))  # the image's setting: the command reads it
    where = Path(jitcache.configure(numba_cache_seed()))
    assert (where / "opt" / "pkg" / "kernel.nbi").read_text() == "index"
    assert (where / ".seeded").exists()
    # a second rank (or run) finds it seeded and copies nothing again
    (seed / "kernel.nbc").write_text("changed")
    assert Path(jitcache.configure(numba_cache_seed())) == where
    assert (where / "opt" / "pkg" / "kernel.nbc").read_text() == "code"


def test_cache_dir_writable_reports(env, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(env / "c"))
    assert jitcache.cache_dir_writable() == (True, str(env / "c"))


def test_too_late_once_numba_is_loaded():
    import numba  # noqa: F401  (loaded by the test process already)

    assert jitcache.tune_cpu(True, {}) == "too late (numba already imported)"


# -- kernels made around kernels: one compile, then the cache in every new process --------------------------


# ---------------------------------------------------------------- saves by several processes at once

def test_entries_saved_at_once_each_keep_their_own_file(tmp_path, monkeypatch):
    """Two savers of different entries of one kernel that read its index at the same moment (as ranks
    compiling for different CPU features do): numba's own save gives both the first free number, and the
    index left names one entry's file for the other's key (numba issues 4807, 10128: a segmentation fault
    in the next run that loads it).  Guarded, each entry loads as saved."""
    import threading

    from numba.core.caching import IndexDataCacheFile

    assert jitcache.guard_cache()
    together = threading.Barrier(2, timeout=2)
    load_index = IndexDataCacheFile._load_index

    def read_then_wait(self):  # both read the index, then go on together (unguarded: the race made certain)
        overloads = load_index(self)
        try:
            together.wait()
        except threading.BrokenBarrierError:  # the other waits for the lock: it cannot come
            pass
        return overloads

    monkeypatch.setattr(IndexDataCacheFile, "_load_index", read_then_wait)
    entries = {("sig-a", "znver4"): ("code", "A"), ("sig-b", "znver4 -prefer-256-bit"): ("code", "B")}
    savers = [threading.Thread(target=IndexDataCacheFile(str(tmp_path), "kernel-10.py311", "stamp").save,
                               args=entry) for entry in entries.items()]
    for t in savers:
        t.start()
    for t in savers:
        t.join()
    together.abort()
    reader = IndexDataCacheFile(str(tmp_path), "kernel-10.py311", "stamp")
    assert {key: reader.load(key) for key in entries} == entries
    assert sorted(p.name for p in tmp_path.glob("*.nbc")) == ["kernel-10.py311.1.nbc", "kernel-10.py311.2.nbc"]


def test_every_module_that_caches_kernels_mends_numbas_cache_first():
    """A module compiling with ``cache=True`` calls :func:`jitcache.guard_cache` (which numba's import
    alone does not): the guard must be on before its first load or save, in every process, CLI or not."""
    package = Path(jitcache.__file__).resolve().parent.parent
    caching = [p for p in package.rglob("*.py") if "cache=True" in p.read_text() and p.name != "jitcache.py"]
    assert len(caching) >= 9
    assert [str(p.relative_to(package)) for p in caching if "guard_cache()" not in p.read_text()] == []
