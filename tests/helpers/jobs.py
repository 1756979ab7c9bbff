"""A job started as users start one, and watched through /proc: its processes, its ranks, their CPU
time, a rank killed, a stop request sent, a stream closed under it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from helpers.commands import env

#: a hang is a failure: a job with a dead rank must end within this many seconds
END_WITHIN = 20.0


# ---------------------------------------------------------------- processes of a job

def stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, session id) of a process, None if it is gone."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = data.rsplit(")", 1)[1].split()
    return int(fields[1]), int(fields[3])


def rank_of(pid: int) -> int | None:
    """The MPI rank a pympi process was started as (from its launcher's variables), None if it is none."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    if b"pympi" not in cmdline:
        return None
    for item in environ:
        key, _, value = item.partition(b"=")
        if key in (b"PMI_RANK", b"OMPI_COMM_WORLD_RANK") and value.isdigit():
            return int(value)
    return None


def session_procs(root: int) -> list[int]:
    """``root`` and its descendants (the MPI proxies may start sessions of their own)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = stat(int(entry))
            if st:
                parents[int(entry)] = st[0]
    found, frontier = [root], [root]
    while frontier:
        children = [pid for pid, ppid in parents.items() if ppid in frontier]
        found += children
        frontier = children
    return found


def wait_for_rank(sid: int, rank: int, timeout: float = 120) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in session_procs(sid):
            if rank_of(pid) == rank:
                return pid
        time.sleep(0.1)
    raise AssertionError(f"rank {rank} never started")


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return -1.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, whatever its session."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                st = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(st.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


@contextlib.contextmanager
def job(argv: list[str], **kw):
    """A job started in its own session; whatever is left of it is killed at the end."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=kw.pop("env", env()), **kw)
    try:
        yield proc
    finally:
        for pid in reversed(session_procs(proc.pid)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.communicate(timeout=60)


def wait_busy(pid: int, cpu: float = 1.0, timeout: float = 180) -> None:
    """Until ``pid`` has used ``cpu`` s of CPU after start-up (it is computing, not importing)."""
    deadline = time.monotonic() + timeout
    start = None
    while time.monotonic() < deadline:
        t = cpu_seconds(pid)
        assert t >= 0, "the rank ended before it was killed"
        start = t if start is None else start
        if t - start >= cpu:
            return
        time.sleep(0.2)
    raise AssertionError("the rank never got busy")


def wait_for_path(path: Path, proc: subprocess.Popen, timeout: float = 120) -> bool:
    """Until ``path`` exists (a lock the job takes once it has started), the job ends, or ``timeout``
    passes: whether it exists."""
    deadline = time.monotonic() + timeout
    while not path.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return path.exists()


# ---------------------------------------------------------------- a rank killed

def kill_last_rank(argv: list[str], ranks: int, **kw) -> tuple[int, float, list[int]]:
    """Start ``argv``, SIGKILL its last rank once it computes; wait for the job to end.

    Returns the job's exit status, the seconds from the kill to its end, and
    the ranks still alive after it ended (the test fails if it has not ended
    within ``END_WITHIN``).  Used under MPICH (tests/cli/test_faults.py) and the
    other MPIs (tests/cli/test_mpi_matrix.py).
    """
    with job(argv, **kw) as proc:
        victim = wait_for_rank(proc.pid, ranks - 1)
        wait_for_rank(proc.pid, 0)
        # Past start-up: rank 0 has used CPU time after the imports, so it is computing.
        time.sleep(1.0)
        wait_busy(victim, cpu=1.0)
        ranks_pids = [p for p in session_procs(proc.pid) if rank_of(p) is not None]
        assert len(ranks_pids) == ranks
        os.kill(victim, signal.SIGKILL)
        t0 = time.monotonic()
        try:
            proc.wait(timeout=END_WITHIN)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{argv[0]}: the job still runs {END_WITHIN:.0f} s after one rank was killed")
        ended = time.monotonic() - t0
        time.sleep(0.5)
        return proc.returncode, ended, [p for p in ranks_pids if alive(p)]


# ---------------------------------------------------------------- a loaded machine

@contextlib.contextmanager
def loaded(processes: int | None = None):
    """Busy-loop processes, one a core by default, for the block: a machine another CPU-heavy job holds."""
    import sys

    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes or
                                                                                   os.cpu_count() or 2)]
    try:
        yield hogs
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


# ---------------------------------------------------------------- a job read as it prints

class Started:
    """A job in its own session whose stdout is read as it comes; ``wait_for(text)`` until a line holds it."""

    def __init__(self, argv: list[str], **kw):
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True, env=kw.pop("env", env()), **kw)
        self.lines: list[str] = []
        self._seen = threading.Condition()
        self._err: list[str] = []
        self._readers = [threading.Thread(target=self._read, args=(self.proc.stdout, self.lines), daemon=True),
                         threading.Thread(target=self._read, args=(self.proc.stderr, self._err), daemon=True)]
        for t in self._readers:
            t.start()

    def _read(self, stream, into: list[str]) -> None:
        for line in stream:
            with self._seen:
                into.append(line)
                self._seen.notify_all()

    def wait_for(self, text: str, timeout: float = 180) -> None:
        """Until a line of stdout holds ``text`` (the job fails the test if it ends first)."""
        deadline = time.monotonic() + timeout
        with self._seen:
            while not any(text in line for line in self.lines):
                if self.proc.poll() is not None and not self._readers[0].is_alive():
                    pytest.fail(f"the job ended before printing {text!r}:\n{''.join(self.lines + self._err)}")
                if not self._seen.wait(timeout=min(1.0, max(0.0, deadline - time.monotonic()))):
                    if time.monotonic() > deadline:
                        pytest.fail(f"no line with {text!r} within {timeout:.0f} s")

    def ranks(self) -> list[int]:
        return [pid for pid in session_procs(self.proc.pid) if rank_of(pid) is not None]

    def finish(self, within: float) -> tuple[str, str, float]:
        """Wait for the end: (stdout, stderr, seconds); fails the test if it is not over in ``within`` s."""
        t0 = time.monotonic()
        try:
            self.proc.wait(timeout=within)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the job did not end within {within:.0f} s of the signal")
        for t in self._readers:
            t.join(timeout=30)
        return "".join(self.lines), "".join(self._err), time.monotonic() - t0

    def kill(self) -> None:
        for pid in reversed(session_procs(self.proc.pid)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(timeout=60)


@contextlib.contextmanager
def started(argv: list[str], **kw):
    job = Started(argv, **kw)
    try:
        yield job
    finally:
        job.kill()


def wait_ranks(job: Started, n: int) -> list[int]:
    """The pids of ranks 0 to ``n - 1`` of a started job, in rank order, once each has started."""
    for rank in range(n):
        wait_for_rank(job.proc.pid, rank)
    return sorted(job.ranks(), key=rank_of)


# ---------------------------------------------------------------- signals and closed streams

def sigterm_after_first_checkpoint(argv: list[str], path, env: dict[str, str]) -> None:
    """Run ``argv`` (2 ranks) until its first periodic checkpoint at ``path``, then SIGTERM every rank.

    As Slurm does before its time limit.  The job must end cleanly, saying it
    was stopped by SIGTERM.  Used by the gravity and the LJ model's tests.
    """
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 120
        while not path.exists():  # the first periodic checkpoint: the ranks are stepping
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no periodic checkpoint within 120 s"
            time.sleep(0.2)
        ranks = [p for p in descendants(proc.pid) if _is_nbody(p)]
        assert len(ranks) == 2, ranks
        for pid in ranks:  # as Slurm does: every task gets the signal
            os.kill(pid, signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
    assert "stopped    by SIGTERM" in stdout and "Traceback" not in stderr


def _is_nbody(pid: int) -> bool:
    try:
        return "pympi-nbody" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def closed_after(argv, cwd, run_env=None, stream="stdout", lines=3):
    """Start ``argv``, read ``lines`` lines of its ``stream`` and close it (``| head -3``); (status, the other
    stream's text)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                            env=run_env or env(), start_new_session=True)
    closing, other = (proc.stdout, proc.stderr) if stream == "stdout" else (proc.stderr, proc.stdout)
    try:
        for _ in range(lines):
            assert closing.readline(), other.read()
        closing.close()
        text = other.read()
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, text


def hung_up_after(argv, cwd, text: str, leader: bool = True, run_env=None) -> tuple[int, float, str]:
    """Start ``argv`` on a terminal of its own (stdout and stderr on a new pty), read it until ``text``
    shows, then close the terminal (its master side: as a dropped ssh session or a killed ``script`` does);
    (exit status, seconds from the hang-up to the end, what the terminal showed).

    ``leader``: the command leads the session the pty controls, so the kernel sends it SIGHUP at the
    hang-up; else the pty is no controlling terminal and only the writes fail (EIO), as for a process
    in the background of a shell the hang-up ended.
    """
    import fcntl
    import termios

    master, slave = os.openpty()

    def take_terminal():
        if leader:
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    try:
        proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=run_env or env(),
                                start_new_session=True, preexec_fn=take_terminal)
    finally:
        os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + 180
        while text.encode() not in seen:
            assert time.monotonic() < deadline and proc.poll() is None, seen.decode(errors="replace")
            try:
                seen += os.read(master, 65536)
            except OSError:  # EIO: every slave closed (the job ended)
                break
        os.close(master)  # the hang-up
        t0 = time.monotonic()
        proc.wait(timeout=120)
        return proc.returncode, time.monotonic() - t0, seen.decode(errors="replace")
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
