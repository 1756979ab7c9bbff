"""The unit tier starts no process.

The rule: a unit test runs in this process and starts none: no command, no ``mpiexec``, no child
Python, no fork.  MPI in this process counts as none where it starts none: ``from mpi4py import
MPI`` initialises MPI as a singleton of one rank (MPICH's starts no process manager), so a test on
COMM_SELF, or on a COMM_WORLD of one rank, is a unit test.  A test that starts a process belongs in
tests/cli/ (or tests/gpu/, tests/mpi/, tests/system/: docs/testing.md).

The guard, for every module and test under this directory: from the module's import to the end of
each test's teardown, Python's ways of starting a process (``subprocess.Popen``, ``os.fork``,
``os.forkpty``, ``os.posix_spawn``, ``os.posix_spawnp``, ``os.system``, and the ``fork_exec`` that
multiprocessing's spawn calls) fail the test that called them, with a failure an ``except
Exception`` cannot swallow; and after each test this process has no child it did not have before
(one started below Python, by a C library).  A process started by another tier's code (a session fixture of
tests/system/ that a unit test's teardown happens to end, as under pytest-xdist) is theirs, not the test's.

This file imports nothing of the project: tests/cli/test_unit_tier.py runs a copy of it on tests
that start processes in each of these ways, and each must fail.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import _posixsubprocess
import pytest

HERE = Path(__file__).resolve().parent

WHY = "the unit tier starts no process (tests/unit/conftest.py): a test that starts one belongs in tests/cli/"

#: (owner, attribute, what it is called in the message): every way Python starts a process ends in one
#: of these (os.spawn*, pty.fork and multiprocessing's fork call os.fork; os.popen and asyncio Popen)
STARTS = [(subprocess.Popen, "__init__", "subprocess.Popen"), (os, "fork", "os.fork"), (os, "forkpty", "os.forkpty"),
          (os, "posix_spawn", "os.posix_spawn"), (os, "posix_spawnp", "os.posix_spawnp"), (os, "system", "os.system"),
          (_posixsubprocess, "fork_exec", "_posixsubprocess.fork_exec")]


#: the other tiers' folders: a fixture of theirs that a unit test's teardown finalises (under pytest-xdist the last
#: test of a worker's session, after which its session fixtures end: the local Slurm's ``scancel``) is theirs
OTHER_TIERS = tuple(HERE.parent / tier for tier in ("cli", "gpu", "mpi", "system"))


def _from_another_tier() -> bool:
    """Whether the process is started by code of another tier (a session fixture of theirs ending)."""
    frame = sys._getframe(1)
    while frame is not None:
        path = Path(frame.f_code.co_filename)
        if any(tier == path.parent or tier in path.parents for tier in OTHER_TIERS):
            return True
        frame = frame.f_back
    return False


def _refused(what: str, start):
    def refuse(*args, **kwargs):
        if _from_another_tier():
            return start(*args, **kwargs)
        if args and isinstance(args[0], subprocess.Popen):  # Popen.__init__(self, args, ...)
            args[0]._child_created = False  # what Popen.__del__ looks at: the refused object goes quietly
            args = args[1:]
        pytest.fail(f"{what}({', '.join(map(repr, args[:2]))}) was called: {WHY}", pytrace=True)
    return refuse


@contextlib.contextmanager
def no_process():
    """While inside: every way of :data:`STARTS` fails the test that calls it."""
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in STARTS if hasattr(owner, name)]
    for owner, name, what in STARTS:
        if hasattr(owner, name):
            setattr(owner, name, _refused(what, getattr(owner, name)))
    try:
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


def _mine(path) -> bool:
    return HERE == Path(path).resolve() or HERE in Path(path).resolve().parents


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    """A unit module is imported with the guard on: one that starts a process at import is a collection error."""
    if not (isinstance(collector, pytest.Module) and _mine(collector.path)):
        return (yield)
    with no_process():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Each unit test's setup, call and teardown (its fixtures, whatever their scope) with the guard on.

    Called for every test of the run (a hook of the whole session): only those under this directory are guarded.
    """
    if not _mine(item.path):
        return (yield)
    with no_process():
        return (yield)


def children() -> set[int]:
    """The pids of this process's children, zombies included (a child below Python shows here too)."""
    me = os.getpid()
    try:
        return {int(pid) for task in Path(f"/proc/{me}/task").iterdir()
                for pid in (task / "children").read_text().split()}
    except OSError:  # a kernel without /proc/PID/task/TID/children: every process's parent
        found = set()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == me:
                        found.add(int(entry.name))
        return found


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


@pytest.fixture(autouse=True)
def no_child_left():
    """After the test, no child this process did not have before it: a process started below Python."""
    before = children()
    yield
    new = sorted(children() - before)
    if new:
        pytest.fail(f"process(es) started during the test: {[(pid, _command_line(pid)) for pid in new]}: {WHY}",
                    pytrace=False)
