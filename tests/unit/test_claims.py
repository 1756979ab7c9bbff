"""Every file a run touches is its own (issue 53): the locks, the claim, names of its own, a closed output.

Unit tests of :mod:`pympi_gpu.run.locks`, :mod:`pympi_gpu.run.claims`,
:func:`pympi_gpu.run.fileio.reserve_new` and the stream guard of
:mod:`pympi_gpu.cli.signals`.  A lock held by a second process:
``tests/cli/test_claims_across_processes.py``; the commands themselves:
``tests/cli/test_outputs.py`` and ``test_claimed_outputs.py``.
"""

from __future__ import annotations

import io
import os
import signal
import time

import pytest

from pympi_gpu.cli.signals import CLOSED_OUTPUT, GuardedStream, exit_status, signal_name
from pympi_gpu.run.claims import Claim, file_key
from pympi_gpu.run.fileio import host_name, numbered, reserve_new
from pympi_gpu.run.locks import LockError, LockFile, NotALock, lock_in_place
from pympi_gpu.run.outputs import OutputRefused


# ---------------------------------------------------------------- LockFile (a file replaced whole)

def test_a_lock_file_is_made_held_and_removed(tmp_path):
    path = tmp_path / "c.npz.lock"
    lock = LockFile(path).acquire()
    assert path.read_text() == f"{os.getpid()} {host_name()}\n"
    lock.release()
    assert not path.exists()


def test_a_lock_file_a_killed_holder_left_is_taken_over(tmp_path):
    path = tmp_path / "c.npz.lock"
    path.write_text("999999 elsewhere\n")  # nobody holds its flock: the holder died
    with LockFile(path):
        assert path.read_text().startswith(f"{os.getpid()} ")
    assert not path.exists()


@pytest.mark.parametrize("content", [b"my notes about the run\n", b"12 34 56\n", b"x" * 600, b"\0\1\2"])
def test_a_users_file_at_the_lock_name_is_never_truncated_or_removed(tmp_path, content):
    path = tmp_path / "c.npz.lock"
    path.write_bytes(content)
    with pytest.raises(NotALock, match="is never overwritten or removed"):
        LockFile(path).acquire()
    assert path.read_bytes() == content


def test_a_directory_or_link_at_the_lock_name_is_refused(tmp_path):
    (tmp_path / "d.lock").mkdir()
    with pytest.raises(NotALock, match="not a regular file"):
        LockFile(tmp_path / "d.lock").acquire()
    target = tmp_path / "target"
    target.write_text("keep\n")
    (tmp_path / "l.lock").symlink_to(target)
    with pytest.raises(NotALock, match="symbolic link"):
        LockFile(tmp_path / "l.lock").acquire()
    assert target.read_text() == "keep\n"


def test_a_lock_file_that_cannot_be_made_says_why(tmp_path):
    with pytest.raises(LockError, match="cannot make the lock file"):
        LockFile(tmp_path / "missing" / "c.lock").acquire()


# ---------------------------------------------------------------- lock_in_place (a file appended to)

def test_a_file_locked_in_place_is_made_and_removed_only_if_the_lock_made_it(tmp_path):
    made = lock_in_place(tmp_path / "t.csv")
    assert made.created and (tmp_path / "t.csv").exists()
    made.release(remove=True)
    assert not (tmp_path / "t.csv").exists()
    (tmp_path / "u.csv").write_text("Step\n")
    kept = lock_in_place(tmp_path / "u.csv")
    assert not kept.created
    kept.release(remove=True)
    assert (tmp_path / "u.csv").read_text() == "Step\n"


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "t.csv"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    with pytest.raises(LockError, match="not a regular file"):
        lock_in_place(fifo)
    assert time.monotonic() - t0 < 5


def test_a_link_to_nothing_is_refused(tmp_path):
    (tmp_path / "t.csv").symlink_to(tmp_path / "nowhere" / "t.csv")
    with pytest.raises(LockError, match="symbolic link to nothing"):
        lock_in_place(tmp_path / "t.csv")


# ---------------------------------------------------------------- Claim

def test_two_outputs_naming_one_file_are_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OutputRefused, match="--checkpoint 'run.csv' and --thermo-file './run.csv' name one file"):
        Claim("t").distinct(("--checkpoint", "run.csv"), ("--dump", None), ("--thermo-file", "./run.csv"))
    (tmp_path / "real.csv").write_text("Step\n")
    (tmp_path / "link.csv").symlink_to(tmp_path / "real.csv")
    with pytest.raises(OutputRefused, match="name one file"):
        Claim("t").distinct(("--thermo-file", "real.csv"), ("--checkpoint", "link.csv"))
    Claim("t").distinct(("--checkpoint", "a.npz"), ("--thermo-file", "a.csv"))  # distinct: no error
    assert file_key("real.csv") == file_key("link.csv") != file_key("a.csv")


def test_a_claim_given_up_removes_what_it_made_and_keeps_the_rest(tmp_path):
    (tmp_path / "old.csv").write_text("Step\n0\n")
    claim = Claim("t")
    claim.in_place("--thermo-file", str(tmp_path / "old.csv"), "busy")
    claim.in_place("--dump", str(tmp_path / "new.extxyz"), "busy")
    claim.beside("--checkpoint", str(tmp_path / "c.npz"), "busy")
    assert (tmp_path / "c.npz.lock").exists() and (tmp_path / "new.extxyz").exists()
    claim.abandon()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.csv"]
    assert (tmp_path / "old.csv").read_text() == "Step\n0\n"


# ---------------------------------------------------------------- a claimed file lost during the run

def _claimed(d):
    claim = Claim("pympi-nbody")
    claim.beside("--checkpoint", str(d / "c.npz"), "busy")
    claim.in_place("--thermo-file", str(d / "t.csv"), "busy")
    return claim


def test_a_claimed_file_removed_moved_or_replaced_is_lost(tmp_path):
    claim = _claimed(tmp_path)
    assert claim.lost() == (None, [])
    os.rename(tmp_path / "t.csv", tmp_path / "t.old.csv")
    assert claim.lost() == (f"--thermo-file {str(tmp_path / 't.csv')!r} was moved away during the run",
                            ["--thermo-file"])
    (tmp_path / "t.csv").write_text("a user's file\n")
    assert "was replaced by another file during the run" in claim.lost()[0]
    os.unlink(tmp_path / "t.csv")
    os.unlink(tmp_path / "t.old.csv")  # no link left: the rows would go where no one reads them
    assert claim.lost()[0] == f"--thermo-file {str(tmp_path / 't.csv')!r} was removed during the run"
    claim.release()


def test_a_claimed_directory_removed_is_said_once_for_every_file_in_it(tmp_path):
    d = tmp_path / "out"
    d.mkdir()
    claim = _claimed(d)
    for p in d.iterdir():
        p.unlink()
    d.rmdir()
    why, options = claim.lost()
    assert options == ["--checkpoint", "--thermo-file"]
    assert why == (f"--checkpoint {str(d / 'c.npz')!r} (its lock file) and --thermo-file {str(d / 't.csv')!r} "
                   f"were removed during the run with their directory {str(d)!r}, which a run never makes again")
    claim.release()
    assert not d.exists()


# ---------------------------------------------------------------- names of its own

def test_numbered_names_keep_their_suffix():
    suffixes = (".ckpt.npz", ".blowup.npz", ".npz")
    assert numbered("d/pympi-nbody-lj-500.ckpt.npz", 0, suffixes) == "d/pympi-nbody-lj-500.ckpt.npz"
    assert numbered("d/pympi-nbody-lj-500.ckpt.npz", 2, suffixes) == "d/pympi-nbody-lj-500-2.ckpt.npz"
    assert numbered("c.blowup.npz", 1, suffixes) == "c-1.blowup.npz"
    assert numbered("state", 3, suffixes) == "state-3"


def test_reserve_new_never_takes_a_file_that_is_there(tmp_path):
    first = tmp_path / "run.ckpt.npz"
    first.write_bytes(b"an earlier run's state")
    (tmp_path / "run-1.ckpt.npz").symlink_to(tmp_path / "nowhere")  # a dangling link is taken too
    name = reserve_new(first, (".ckpt.npz",))
    assert name == str(tmp_path / "run-2.ckpt.npz") and os.path.getsize(name) == 0
    assert reserve_new(first, (".ckpt.npz",)) == str(tmp_path / "run-3.ckpt.npz")
    assert first.read_bytes() == b"an earlier run's state"


# ---------------------------------------------------------------- a closed output

def test_a_closed_pipe_is_one_stop_request_and_what_follows_goes_nowhere():
    read, write = os.pipe()
    stream = os.fdopen(write, "w", buffering=1)
    closed = []
    guarded = GuardedStream(stream, "stdout", lambda *why: closed.append(why))
    guarded.write("a row\n")
    assert os.read(read, 100) == b"a row\n"
    os.close(read)  # the reader left (head -3)
    for _ in range(3):
        guarded.write("another row\n")
        guarded.flush()
    assert closed == [("stdout", CLOSED_OUTPUT)] and guarded.lost and not guarded.isatty()
    assert os.path.samefile(f"/proc/self/fd/{write}", os.devnull)  # later writes, at exit too, go nowhere
    stream.close()


def test_a_terminal_that_hung_up_is_sighup_through_every_way_to_it():
    """A pty whose master closed (a dropped ssh session) fails writes with EIO: the request is SIGHUP, not
    SIGPIPE, also where the write comes through the stream's binary buffer, as click's echo makes it while
    rich's progress bar holds sys.stdout (was: OSError raised from the thermo row, the run lost)."""
    master, slave = os.openpty()
    stream = os.fdopen(slave, "w", buffering=1)
    closed = []
    guarded = GuardedStream(stream, "stderr", lambda *why: closed.append(why))
    text = io.TextIOWrapper(guarded.buffer, line_buffering=True)  # what click.echo writes through
    text.write("a row\n")
    assert os.read(master, 100) == b"a row\r\n"  # (the terminal's newline)
    os.close(master)  # the hang-up
    text.write("another row\n")
    guarded.write("and a progress line\n")
    assert closed == [("stderr", signal.SIGHUP)] and guarded.lost
    assert os.path.samefile(f"/proc/self/fd/{slave}", os.devnull)
    assert exit_status(signal.SIGHUP) == 129
    text.detach()
    stream.close()


def test_a_closed_output_stops_like_sigpipe():
    assert exit_status(CLOSED_OUTPUT) == 128 + signal.SIGPIPE
    assert signal_name(CLOSED_OUTPUT) == "SIGPIPE (its output closed)"
