"""A trajectory's torn last frame (a writer killed mid-frame) is cut off when a restart opens it, read back
by the format's own reader.  Trajectories of real runs: tests/cli/test_dump.py."""

from __future__ import annotations

import re

import numpy as np
import pytest

from helpers.outputs import frames, refused_past_checkpoint
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


def _trajectory(path, steps=(0, 5, 10, 15)) -> bytes:
    """A trajectory of 3 atoms at ``steps``, as a run writes it (its identity in every frame)."""
    from pympi_gpu.nbody.dump import open_dump
    from pympi_gpu.run.outputs import RunIdentity

    ids, x = np.arange(1, 4), np.random.default_rng(1).random((3, 3))
    d = open_dump(path, 5.0, RunIdentity.of("lj", 3, 5.0, 1))
    for step in steps:
        d.write(step, 0.005 * step, ids, x + step, x)
    d.close()
    return path.read_bytes()


@pytest.mark.parametrize("damage, line, words", [
    ("an atom line deleted", 10, "'3' (1 word(s)) where an atom line of the frame of line 6 (8 words) should be"),
    ("an atom line doubled", 11, "where the atom count of a frame (3 atoms) should be"),
    ("step=ten", 7, "the frame header's step=ten is not a whole number"),
    ("no step", 7, "the frame header's step=(none) is not a whole number"),
    ("steps backwards", 12, "a frame at step 3 follows the frame at step 5"),
])
def test_an_extxyz_damaged_in_a_middle_frame_is_refused_untouched(tmp_path, damage, line, words):
    """(was: the restart cut the file at the first frame that did not parse: the frames after it gone, exit 0,
    no word; ``step=ten`` ended in ``ValueError`` on rank 0, exit 1)"""
    from pympi_gpu.run.outputs import APPEND, OutputRefused

    path = tmp_path / "t.extxyz"
    lines = _trajectory(path).decode().split("\n")  # frames of 5 lines: count, header, 3 atoms
    if damage == "an atom line deleted":
        del lines[7]
    elif damage == "an atom line doubled":
        lines.insert(7, lines[7])
    elif damage in ("step=ten", "no step"):
        lines[6] = lines[6].replace("step=5", "step=ten" if damage == "step=ten" else "")
    else:
        lines[11] = lines[11].replace("step=10", "step=3")
    path.write_bytes("\n".join(lines).encode())
    before = path.read_bytes()
    with pytest.raises(OutputRefused, match=rf"is damaged at line {line}: (.* )?{re.escape(words)}"):
        ExtxyzDump(path, 5.0, mode=APPEND)
    assert path.read_bytes() == before


@pytest.mark.parametrize("suffix", [".extxyz", ".gsd"])
def test_a_trajectory_holding_a_step_past_the_checkpoint_is_refused_untouched(tmp_path, suffix):
    from pympi_gpu.nbody.dump import open_dump
    from pympi_gpu.run.outputs import APPEND, OutputRefused

    path = tmp_path / f"t{suffix}"
    before = _trajectory(path, steps=(0, 5, 10, 999))
    with pytest.raises(OutputRefused, match="holds frames up to step 999, beyond step 10 of the checkpoint"):
        open_dump(path, 5.0, mode=APPEND, through=10)
    assert path.read_bytes() == before
    writer = open_dump(path, 5.0, mode=APPEND, through=999)
    assert writer.after == 999
    writer.close()


#: GSD's index entry (format version 2)
ENTRY = np.dtype([("frame", "<u8"), ("N", "<u8"), ("location", "<i8"), ("M", "<u4"), ("id", "<u2"), ("type", "u1"),
                  ("flags", "u1")])


@pytest.mark.parametrize("damage, where", [("erased", "index entry"), ("past the end", "index entry"),
                                           ("steps backwards", "frame 2")])
def test_a_gsd_damaged_in_a_middle_frame_is_refused_untouched(tmp_path, damage, where):
    """A GSD file finds its frames by a binary search of its index: an entry lost in the middle hid the
    frames after it (or not, by where the search fell), and an append wrote over their entries."""
    import struct

    from pympi_gpu.nbody.dump import open_dump
    from pympi_gpu.run.outputs import APPEND, OutputRefused

    path = tmp_path / "t.gsd"
    data = bytearray(_trajectory(path))
    at, allocated = struct.unpack_from("<QQ", data, 8)
    index = np.frombuffer(data, ENTRY, count=allocated, offset=at).copy()
    first = int(np.flatnonzero(index["frame"] == 1)[0])  # frame 1's first entry
    if damage == "erased":
        index[first] = np.zeros(1, ENTRY)[0]
    elif damage == "past the end":
        index[first]["location"] = len(data) + 10
    else:  # frame 2's step (its one uint64 chunk, configuration/step) made 1, after frame 1's 5
        step2 = int(np.flatnonzero((index["frame"] == 2) & (index["type"] == 4) & (index["N"] == 1))[0])
        struct.pack_into("<Q", data, int(index[step2]["location"]), 1)
    data[at:at + allocated * ENTRY.itemsize] = index.tobytes()
    path.write_bytes(bytes(data))
    before = path.read_bytes()
    with pytest.raises(OutputRefused, match=f"is damaged at {where}"):
        open_dump(path, 5.0, mode=APPEND)
    assert path.read_bytes() == before


@pytest.mark.parametrize("suffix", [".extxyz", ".gsd"])
def test_the_frames_a_killed_run_wrote_after_its_checkpoint_are_cut_and_written_again(tmp_path, suffix):
    """A run killed (SIGKILL, a lost node) after its checkpoint at step 10 left frames at 15 and 20: the
    restart writes them again, bit for bit, so they are cut with a note, not refused (the file's own
    inode kept: it is the file claimed); frames off the run's cadence, past the restart's --steps or
    with a gap are another's, and refused untouched."""
    from pympi_gpu.nbody.dump import open_dump
    from pympi_gpu.run.outputs import APPEND, Cadence, OutputRefused

    path = tmp_path / f"t{suffix}"
    for steps, cadence in refused_past_checkpoint():
        path.unlink(missing_ok=True)
        before = _trajectory(path, steps=steps)
        with pytest.raises(OutputRefused, match=f"holds frames up to step {steps[-1]}, beyond step 10"):
            open_dump(path, 5.0, mode=APPEND, through=cadence)
        assert path.read_bytes() == before
    path.unlink()
    _trajectory(path, steps=(0, 5, 10, 15, 20))
    inode = path.stat().st_ino
    writer = open_dump(path, 5.0, mode=APPEND, through=Cadence(10, 5, 100))
    assert writer.after == 10 and "its 2 frames after step 10 (to step 20) cut" in writer.note
    ids, x = np.arange(1, 4), np.random.default_rng(1).random((3, 3))
    for step in (15, 20, 25):
        assert writer.write(step, 0.005 * step, ids, x + step, x)
    writer.close()
    assert path.stat().st_ino == inode
    got = frames(path)
    assert [f[0] for f in got] == [0, 5, 10, 15, 20, 25]
    assert np.allclose(got[-1][2], x + 25, atol=1e-6)
