"""Atomic writes: a failure leaves the old file whole and no temporary behind."""

import pytest

from pympi_gpu.run.fileio import atomic_open, atomic_write_bytes


def test_atomic_write_replaces(tmp_path):
    target = tmp_path / "sub" / "out.json"
    atomic_write_bytes(target, b"one")
    atomic_write_bytes(target, b"two")
    assert target.read_bytes() == b"two"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.json"]


def test_failure_keeps_the_old_file(tmp_path):
    target = tmp_path / "ckpt.npz"
    target.write_bytes(b"old, whole")
    with pytest.raises(RuntimeError):
        with atomic_open(target) as fh:
            fh.write(b"half a ")
            raise RuntimeError("killed mid-write")
    assert target.read_bytes() == b"old, whole"
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.npz"]
