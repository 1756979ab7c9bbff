"""A lock or a claim another process holds (pympi_gpu.run.locks, run.claims): a second process stands for a
second run, and it is refused, the holder named (found in /proc/locks).  The same rules in one process:
tests/unit/test_claims.py; the commands: tests/cli/test_claimed_outputs.py and test_outputs.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pympi_gpu.run.claims import Claim
from pympi_gpu.run.fileio import host_name
from pympi_gpu.run.locks import Locked, LockFile, flock_holder, lock_in_place
from pympi_gpu.run.outputs import OutputRefused

#: a second process that holds ``flock`` on a file until its stdin closes: another run
HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
if len(sys.argv) > 2:
    os.pwrite(fd, sys.argv[2].encode(), 0)
print("held", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def holder():
    """``holder(path, text=None)``: another process holds ``path``'s lock (and wrote ``text`` in it)."""
    procs = []

    def hold(path, text=None):
        p = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), *([text] if text else [])],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "held"
        procs.append(p)
        return p
    yield hold
    for p in procs:
        p.stdin.close()
        p.wait(timeout=30)


# ---------------------------------------------------------------- LockFile (a file replaced whole)


def test_a_second_process_is_refused_naming_the_holder(tmp_path, holder):
    path = tmp_path / "c.npz.lock"
    holder(path, f"4242 {host_name()}\n")
    with pytest.raises(Locked) as caught:
        LockFile(path).acquire()
    assert caught.value.holder == ("4242", host_name())
    assert path.read_text() == f"4242 {host_name()}\n"  # the holder's, untouched


# ---------------------------------------------------------------- lock_in_place (a file appended to)


def test_a_file_another_process_holds_is_refused_naming_it(tmp_path, holder):
    path = tmp_path / "t.csv"
    proc = holder(path)
    with pytest.raises(Locked) as caught:
        lock_in_place(path)
    assert caught.value.holder == (str(proc.pid), host_name())  # from /proc/locks
    assert path.exists()  # never removed by the refused one


def test_the_holder_of_an_flock_is_found_in_proc_locks(tmp_path, holder):
    path = tmp_path / "x"
    proc = holder(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert flock_holder(fd) == (str(proc.pid), host_name())
    finally:
        os.close(fd)


# ---------------------------------------------------------------- Claim


def test_a_claim_held_by_another_run_is_refused_with_its_words(tmp_path, holder):
    proc = holder(tmp_path / "t.csv")
    with pytest.raises(OutputRefused, match=rf"--thermo-file '.*t.csv' is being written by another run "
                                            rf"\(pid {proc.pid} on "):
        Claim("t").in_place("--thermo-file", str(tmp_path / "t.csv"), "being written by another run")
