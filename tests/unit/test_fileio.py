"""Atomic writes: a failure leaves the old file whole and no temporary behind; modes as the umask says."""

import os
import stat

import pytest

from pympi_gpu.run.fileio import atomic_open, atomic_write_bytes, reserve_new, umask


def test_atomic_write_replaces(tmp_path):
    target = tmp_path / "sub" / "out.json"
    target.parent.mkdir()
    atomic_write_bytes(target, b"one")
    atomic_write_bytes(target, b"two")
    assert target.read_bytes() == b"two"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.json"]


def test_a_missing_directory_is_never_made(tmp_path):
    """A run's directory removed under it (`rm -rf out`) is not made again by the next checkpoint."""
    target = tmp_path / "gone" / "c.npz"
    with pytest.raises(FileNotFoundError) as caught:
        atomic_write_bytes(target, b"state")
    assert caught.value.filename == str(target) and not target.parent.exists()


def test_failure_keeps_the_old_file(tmp_path):
    target = tmp_path / "ckpt.npz"
    target.write_bytes(b"old, whole")
    with pytest.raises(RuntimeError):
        with atomic_open(target) as fh:
            fh.write(b"half a ")
            raise RuntimeError("killed mid-write")
    assert target.read_bytes() == b"old, whole"
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.npz"]


@pytest.fixture
def umask_of():
    """Set this process's umask for the test; the old one comes back after it."""
    old = os.umask(0o022)

    def set_to(mask: int) -> None:
        os.umask(mask)
    yield set_to
    os.umask(old)


@pytest.mark.parametrize("mask, mode", [(0o077, 0o600), (0o022, 0o644), (0o002, 0o664), (0o027, 0o640)],
                         ids=["umask-077", "umask-022", "umask-002", "umask-027"])
def test_a_new_file_honours_the_umask(tmp_path, umask_of, mask, mode):
    """(was: every checkpoint and study report 0644, whatever the umask)"""
    umask_of(mask)
    assert umask() == mask
    target = tmp_path / "c.npz"
    atomic_write_bytes(target, b"state")
    assert stat.S_IMODE(target.stat().st_mode) == mode
    name = reserve_new(tmp_path / "stop.ckpt.npz")  # a name of its own, then replaced whole
    atomic_write_bytes(name, b"state")
    assert stat.S_IMODE(os.stat(name).st_mode) == mode


@pytest.mark.parametrize("kept", [0o600, 0o640, 0o444], ids=["0600", "0640", "0444"])
def test_a_replaced_file_keeps_its_mode(tmp_path, umask_of, kept):
    """A checkpoint the user made 0600 stays 0600 when a restart writes onto it (was: 0644)."""
    umask_of(0o022)
    target = tmp_path / "c.npz"
    target.write_bytes(b"old")
    target.chmod(kept)
    atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"new" and stat.S_IMODE(target.stat().st_mode) == kept
