"""Trajectories read back by independent readers: ``ase.io.read`` (extended XYZ) and ``gsd.hoomd`` (GSD).

Each run also writes a checkpoint at its end; the last frame must hold the
same bodies (ids, positions folded into the box, velocities) as the
checkpoint, at 2 and 3 ranks.  A restart continues the file without
repeating a frame; a torn last frame is cut off.
"""

from __future__ import annotations

import numpy as np
import pytest

from helpers.commands import env, mpiexec_argv, one_message, run, script
from helpers.outputs import frames
from pympi_gpu.nbody.gravity import checkpoint as gravity_ckpt
from pympi_gpu.nbody.lj import checkpoint as lj_ckpt
from pympi_gpu.nbody.lj.system import LjConfig

NBODY = script("pympi-nbody")


def nbody(ranks, *args):
    out = run(mpiexec_argv(ranks) + [NBODY, *map(str, args), "--threads", "1", "-q"], timeout=300, env=env())
    assert out.returncode == 0, out.stderr
    return out


@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("suffix", [".extxyz", ".gsd"])
def test_lj_last_frame_is_the_checkpointed_state(tmp_path, ranks, suffix):
    path, ck = tmp_path / f"t{suffix}", tmp_path / "c.npz"
    nbody(ranks, 2048, "--model", "lj", "--steps", 30, "--dump", path, "--dump-every", 10, "--checkpoint", ck)
    got = frames(path)
    assert [f[0] for f in got] == [0, 10, 20, 30]
    meta, arrays = lj_ckpt.read_file(str(ck))
    step, ids, x, v, edge = got[-1]
    box = LjConfig(cells=meta["cells"], density=meta["density"]).box[0]  # a cube
    assert edge == pytest.approx(box, rel=1e-6) and np.array_equal(ids, np.arange(1, 2049))
    folded = np.mod(arrays["x"], edge)
    tol = 0 if suffix == ".extxyz" else 2e-6 * edge   # GSD keeps float32
    assert np.abs(x - folded).max() <= tol and np.abs(v - arrays["v"]).max() <= (0 if tol == 0 else 1e-6)
    assert (x >= 0).all() and (x <= edge).all()


@pytest.mark.parametrize("suffix", [".extxyz", ".gsd"])
def test_gravity_last_frame_is_the_checkpointed_state(tmp_path, suffix):
    path, ck = tmp_path / f"g{suffix}", tmp_path / "c.npz"
    nbody(3, 1000, "--steps", 20, "--dump", path, "--dump-every", 10, "--checkpoint", ck)
    got = frames(path)
    assert [f[0] for f in got] == [0, 10, 20]
    _, arrays = gravity_ckpt.read_file(str(ck))
    step, ids, x, v, edge = got[-1]
    assert edge is None and np.array_equal(ids, np.arange(1, 1001))
    assert np.array_equal(x.astype(np.float32), np.column_stack([arrays[k] for k in "xyz"]))
    assert np.array_equal(v.astype(np.float32), np.column_stack([arrays[k] for k in ("vx", "vy", "vz")]))


@pytest.mark.parametrize("suffix", [".extxyz", ".gsd"])
def test_a_restart_appends_without_repeating_a_frame(tmp_path, suffix):
    path, ck = tmp_path / f"t{suffix}", tmp_path / "c.npz"
    nbody(2, 2048, "--model", "lj", "--steps", 20, "--dump", path, "--dump-every", 10, "--checkpoint", ck)
    nbody(2, 2048, "--model", "lj", "--steps", 40, "--dump", path, "--dump-every", 10, "--restart", ck)
    assert [f[0] for f in frames(path)] == [0, 10, 20, 30, 40]


def test_bad_dump_options_are_refused_before_the_run(tmp_path):
    def refused(*args, words):
        out = run(mpiexec_argv(2) + [NBODY, "500", *map(str, args)], timeout=120, env=env())
        one_message(out, words)
    refused("--dump", tmp_path / "t.pdb", words="the suffix must be one of")
    refused("--dump-every", 5, words="--dump-every needs --dump PATH")
    refused("--dump", tmp_path / "no" / "t.gsd", words="does not exist")
