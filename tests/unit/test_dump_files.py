"""A trajectory's torn last frame (a writer killed mid-frame) is cut off when a restart opens it, read back
by the format's own reader.  Trajectories of real runs: tests/cli/test_dump.py."""

from __future__ import annotations

import numpy as np

from helpers.outputs import frames
from pympi_gpu.nbody.dump import ExtxyzDump


def test_a_torn_last_frame_is_cut_off(tmp_path):
    path = tmp_path / "t.extxyz"
    ids, x, v = np.arange(1, 4), np.random.default_rng(1).random((3, 3)), np.zeros((3, 3))
    d = ExtxyzDump(path, 5.0)
    d.write(0, 0.0, ids, x, v)
    d.write(10, 0.05, ids, x, v)
    whole = path.stat().st_size
    with open(path, "ab") as fh:
        fh.write(b'3\nLattice="5.0 0.0 0.0 0.0 5.0 0.0 0.0 0.0 5.0" Properties=species:S:1 step=20\nX 1 0.1')
    again = ExtxyzDump(path, 5.0)   # what a restart opens
    assert again.after == 10 and path.stat().st_size == whole
    assert not again.write(10, 0.05, ids, x, v) and again.write(20, 0.1, ids, x, v)
    assert [f[0] for f in frames(path)] == [0, 10, 20]
