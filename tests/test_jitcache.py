"""numba's cache must work when the package (and even $HOME) are read-only."""

import os
from pathlib import Path

import pytest

from pympi_gpu.device import jitcache


@pytest.fixture
def env(monkeypatch, tmp_path):
    for var in ("NUMBA_CACHE_DIR", jitcache.SEED_ENV):
        monkeypatch.setenv(var, "")  # recorded, so configure()'s changes are undone after the test
        monkeypatch.delenv(var)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    return tmp_path


def test_writable_tree_is_left_alone(env, monkeypatch):
    monkeypatch.setattr(jitcache, "_writable", lambda p: True)
    jitcache.configure()
    assert "NUMBA_CACHE_DIR" not in os.environ


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
    monkeypatch.setenv(jitcache.SEED_ENV, str(env / "seed"))
    where = Path(jitcache.configure())
    assert (where / "opt" / "pkg" / "kernel.nbi").read_text() == "index"
    assert (where / ".seeded").exists()
    # a second rank (or run) finds it seeded and copies nothing again
    (seed / "kernel.nbc").write_text("changed")
    assert Path(jitcache.configure()) == where
    assert (where / "opt" / "pkg" / "kernel.nbc").read_text() == "code"


def test_cache_dir_writable_reports(env, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(env / "c"))
    assert jitcache.cache_dir_writable() == (True, str(env / "c"))


TUNE = ("from pympi_gpu.device import jitcache; import os; "
        "print(jitcache.tune_cpu()); print(os.environ.get('NUMBA_CPU_FEATURES', 'unset'))")


def _host_has_avx512() -> bool:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    return "+avx512f" in llvm.get_host_cpu_features().flatten().split(",")


def test_wide_vector_tuning_in_a_fresh_process():
    import sys

    from conftest import clean_env, run

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


def test_too_late_once_numba_is_loaded():
    import numba  # noqa: F401  (loaded by the test process already)

    assert jitcache.tune_cpu({}) == "too late (numba already imported)"
