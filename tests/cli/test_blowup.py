"""A run that blows up stops with one message and exit 3, and writes nothing broken over a good checkpoint.

The reproductions of issue 21, driven as a user drives them, at 1 and 3 ranks:
an LJ run far too hot, an LJ run that blows up after its first checkpoint, a
gravity run whose step overflows; then ``--on-blowup save`` and the stale
temporaries of a killed checkpoint writer.  Rows of docs/faults.md.  The checks'
building blocks: tests/unit/test_blowup_checks.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from helpers.commands import env, mpiexec_argv, one_message, run, script
from pympi_gpu.nbody.gravity import checkpoint as gravity_ckpt
from pympi_gpu.nbody.lj import checkpoint as lj_ckpt
from pympi_gpu.run.fileio import (STALE_AFTER, atomic_write_bytes, host_name, remove_stale_temporaries, stale_temporaries)

NBODY = script("pympi-nbody")


def nbody(ranks: int, *args: str, cwd=None):
    return run(mpiexec_argv(ranks) + [NBODY, *args, "--threads", "1", "-q"], timeout=300, env=env(), cwd=cwd)


def blew_up(proc, words: str) -> None:
    """Exit 3, one message naming the step and ``words``, no traceback, no rank's own error line."""
    one_message(proc, words, status=3)
    assert "blew up at step" in proc.stderr
    assert "error on rank" not in proc.stderr


# ---------------------------------------------------------------- the reproductions

@pytest.mark.parametrize("ranks", [1, 3])
def test_lj_too_hot_stops_with_exit_3_and_one_message(ranks):
    """`--temperature 100` used to end in ZeroDivisionError on rank 0."""
    proc = nbody(ranks, "4000", "--model", "lj", "--temperature", "100", "--steps", "200")
    blew_up(proc, "reduce --dt or --temperature")
    assert "between neighbour-list builds" in proc.stderr


@pytest.mark.parametrize("ranks", [1, 3])
def test_lj_blowup_keeps_the_previous_checkpoint_byte_identical(tmp_path, ranks):
    """`--temperature 1e3 --checkpoint good.npz` used to overwrite good.npz with NaN positions.  (Another
    run's checkpoint is replaced only with --overwrite: then by the new run's first good state, never a
    broken one.)"""
    good = tmp_path / "good.npz"
    first = nbody(ranks, "4000", "--model", "lj", "--steps", "20", "--checkpoint", str(good))
    assert first.returncode == 0, first.stderr
    before = good.read_bytes()
    proc = nbody(ranks, "4000", "--model", "lj", "--temperature", "1e3", "--steps", "60",
                 "--checkpoint", str(good), "--checkpoint-every", "20", "--overwrite")
    blew_up(proc, "reduce --dt or --temperature")
    assert good.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.npz"]  # no temporaries, no blow-up file


@pytest.mark.parametrize("ranks", [1, 3])
def test_lj_blowup_after_a_checkpoint_keeps_that_checkpoint_and_saves_the_broken_state(tmp_path, ranks):
    good = tmp_path / "good.npz"
    proc = nbody(ranks, "4000", "--model", "lj", "--temperature", "50", "--steps", "60",
                 "--checkpoint", str(good), "--checkpoint-every", "20", "--on-blowup", "save")
    blew_up(proc, "good.blowup.npz")
    step = int(proc.stderr.split("blew up at step ")[1].split(":")[0])
    assert 20 < step <= 40, proc.stderr
    meta, arrays = lj_ckpt.read_file(str(good))  # the last good state, restartable
    assert meta["step"] == 20 and all(np.isfinite(arrays[k]).all() for k in ("x", "v", "f"))
    with np.load(tmp_path / "good.blowup.npz") as broken:
        bmeta = json.loads(str(broken["meta"]))
        assert bmeta["step"] == step and "blowup" in bmeta
        assert broken["x"].shape == (4000, 3)


@pytest.mark.parametrize("ranks", [1, 3])
def test_gravity_overflow_stops_with_exit_3_and_keeps_the_checkpoint(tmp_path, ranks):
    good = tmp_path / "g.npz"
    first = nbody(ranks, "1000", "--steps", "5", "--checkpoint", str(good))
    assert first.returncode == 0, first.stderr
    before = good.read_bytes()
    proc = nbody(ranks, "1000", "--dt", "1e30", "--steps", "20", "--checkpoint", str(good),
                 "--checkpoint-every", "5", "--overwrite")
    blew_up(proc, "reduce --dt (now 1e+30)")
    assert "non-finite positions or velocities" in proc.stderr
    assert good.read_bytes() == before


def fast_atom(good: Path, out: Path, model: str) -> Path:
    """The checkpoint ``good`` with one velocity of 1e300: finite, but its square is not."""
    ckpt = gravity_ckpt if model == "gravity" else lj_ckpt
    meta, arrays = ckpt.read_file(str(good))
    v = arrays["vx"] if model == "gravity" else arrays["v"]
    v.flat[3] = 1e300
    gravity_ckpt.write_file(out, arrays, meta)
    return out


#: the size and options of each model's run with one atom far too fast
FAST = {"gravity": ("200", ["--precision", "fp64"]), "lj": ("2048", ["--model", "lj"])}


@pytest.fixture(scope="module")
def fast_atoms(tmp_path_factory):
    """Each model's checkpoint at step 10 with one velocity of 1e300."""
    d = tmp_path_factory.mktemp("fast")
    out = {}
    for model, (size, extra) in FAST.items():
        first = nbody(1, size, *extra, "--steps", "10", "--checkpoint", str(d / f"{model}.npz"))
        assert first.returncode == 0, first.stderr
        out[model] = fast_atom(d / f"{model}.npz", d / f"{model}-fast.npz", model)
    return out


@pytest.mark.parametrize("model, backend, ranks", [("gravity", "numpy", 1), ("gravity", "numba", 3),
                                                   ("lj", "numba", 3)])
def test_a_velocity_of_1e300_from_a_checkpoint_is_one_message(fast_atoms, model, backend, ranks):
    """(was: exit 3 after NumPy's RuntimeWarning lines, once per rank; under --backend numpy the gravity
    run went on to its end with an infinite energy, exit 0).  The simulator's paths: tests/gpu."""
    size, extra = FAST[model]
    proc = nbody(ranks, size, *extra, "--backend", backend, "--steps", "20", "--restart", str(fast_atoms[model]))
    blew_up(proc, "the run blew up at step 10: non-finite thermo")
    assert proc.stderr.strip().splitlines() == [line for line in proc.stderr.splitlines() if "blew up" in line], \
        proc.stderr  # that one line, nothing more


def test_gravity_on_blowup_save_writes_beside_the_default_name(tmp_path):
    proc = nbody(3, "999", "--dt", "1e30", "--steps", "5", "--on-blowup", "save", cwd=tmp_path)
    blew_up(proc, "pympi-nbody-999.blowup.npz")
    saved = tmp_path / "pympi-nbody-999.blowup.npz"
    with np.load(saved) as broken:
        assert json.loads(str(broken["meta"]))["step"] == 1 and broken["x"].shape == (999,)
        assert not all(np.isfinite(broken[k]).all() for k in ("x", "y", "z", "vx", "vy", "vz"))
    with pytest.raises(gravity_ckpt.CheckpointError):  # for inspection, not for --restart
        gravity_ckpt.read_file(str(saved))


def test_a_healthy_run_is_untouched_by_the_checks(tmp_path):
    proc = nbody(3, "4000", "--model", "lj", "--steps", "50", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["last_step"] == 50


# ---------------------------------------------------------------- stale temporaries

def dead_pid() -> int:
    """The pid of a process of this host that has ended."""
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def temporary(target: Path, tag: str, *, host: str | None = None, pid: int | None = None, age: float = 0) -> Path:
    """A temporary a writer of ``target`` left: named with its owner (none: an older writer's name), ``age`` s old."""
    owner = "" if pid is None else f"{host or host_name()}.{pid}."
    path = target.parent / f".{target.name}.{owner}{tag}.tmp"
    path.write_bytes(b"half a checkpoint")
    if age:
        t = time.time() - age
        os.utime(path, (t, t))
    return path


@pytest.mark.parametrize("model", ["gravity", "lj"])
def test_start_of_a_run_removes_what_a_killed_writer_left_and_says_so_once(tmp_path, model):
    good = tmp_path / "good.npz"
    old = STALE_AFTER + 60
    left = [temporary(good, "k2j4_x0a", pid=dead_pid()),                       # this host, its writer gone
            temporary(good, "zzzzzzzz", host="node7", pid=1, age=old),          # another host's, long untouched
            temporary(good, "a1b2c3d4", age=old)]                               # an older writer's name, long untouched
    live = [temporary(good, "livelive", pid=os.getpid()),                     # this host, its writer runs
            temporary(good, "node7new", host="node7", pid=1),                   # another host's, written just now
            temporary(good, "fresh123")]
    other = tmp_path / ".other.npz.abcdefgh.tmp"
    other.write_bytes(b"not ours")
    os.utime(other, (time.time() - old,) * 2)
    proc = nbody(3, "4000", "--model", model, "--steps", "2", "--checkpoint", str(good))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("removed 3 temporary file(s)") == 1, proc.stderr
    assert not any(p.exists() for p in left) and other.exists() and good.exists()
    assert all(p.exists() for p in live)  # a file a live writer may still be writing is never removed


def test_the_next_checkpoint_write_removes_stale_temporaries(tmp_path):
    target = tmp_path / "c.npz"
    stale = temporary(target, "q1w2e3r4", pid=dead_pid())
    running = temporary(target, "r1u2n3n4", pid=os.getpid())
    gravity_ckpt.write_file(str(target), {"x": np.zeros(3)}, {"step": 1})
    assert not stale.exists() and running.exists() and target.exists()


def test_stale_temporaries_match_only_the_writer_names(tmp_path):
    target = tmp_path / "run.npz"
    old = time.time() - STALE_AFTER - 1
    ours = [temporary(target, "abcd_123", pid=dead_pid()), temporary(target, "abcd_124", age=STALE_AFTER + 1),
            temporary(target, "abcd_125", host="far.away-host", pid=12, age=STALE_AFTER + 1)]
    for name in (".run.npz.short.tmp", "run.npz.abcdefgh.tmp", ".run.npzz.abcdefgh.tmp",
                 ".run.npz.abcdefgh.tmp.bak", f".run.npz.{host_name()}.x1.abcdefgh.tmp"):
        (tmp_path / name).write_bytes(b"")
        os.utime(tmp_path / name, (old, old))
    assert stale_temporaries(target) == sorted(ours)
    assert remove_stale_temporaries(target) == sorted(ours) and not any(p.exists() for p in ours)
    atomic_write_bytes(target, b"data")  # the writer's own temporary is gone after the rename
    assert stale_temporaries(target) == []
