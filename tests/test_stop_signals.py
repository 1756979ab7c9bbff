"""Stop requests: every signal a scheduler, launcher or terminal sends ends a run with its checkpoint.

SIGTERM, SIGINT, SIGHUP, SIGUSR1 and SIGUSR2, each sent to the ranks as
Slurm's step daemon, ``scancel --signal`` or a launcher that passes it on
delivers it: every rank stops after the same step, the checkpoint is
written at the step the one line names, and the exit status is the
documented one (0 for a scheduler's request, 130 for Ctrl-C, 129 for a
closed terminal).  A stop that cannot be honoured (a rank stopped, so the
others wait for it in MPI for good) ends the job after the grace period
with one line naming ``MPI_Abort``.  What each launcher does with each
signal is in tests/test_stop_launchers.py.  Rows of docs/faults.md.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time

import pytest

from conftest import mpiexec_argv, script
from pympi_gpu.nbody.gravity import checkpoint as gravity_ckpt
from test_faults import _alive, _rank_of, env, session_procs, wait_for_rank

NBODY = script("pympi-nbody")
PI = script("pympi-pi")
NOISE = ("Traceback", "pending", "BAD TERMINATION", "error on rank", "KeyboardInterrupt", "assert")

#: a gravity run with many short steps: started in a few seconds, stopped after its next step
SMALL = ["3000", "--steps", "1000000", "--threads", "1", "--backend", "numba"]

#: the exit status the docs give for each stop request
STATUS = {"SIGTERM": 0, "SIGUSR1": 0, "SIGUSR2": 0, "SIGINT": 130, "SIGHUP": 129}


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
        return [pid for pid in session_procs(self.proc.pid) if _rank_of(pid) is not None]

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


def quiet(text: str) -> None:
    assert not any(word in text for word in NOISE), text


def stopped_line(stderr: str, name: str, path) -> int:
    """The one line a stop prints; returns the step it names."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"pympi-nbody: stopped by {name} after step "), stderr
    assert f"checkpoint {path} written (resume with --restart {path})" in lines[0], stderr
    return int(lines[0].split("after step ")[1].split(";")[0])


@pytest.mark.parametrize("name", sorted(STATUS))
def test_each_stop_signal_to_the_ranks_writes_the_checkpoint(tmp_path, name):
    """As Slurm's step daemon and ``scancel --signal`` deliver them: to every rank."""
    path = tmp_path / "c.npz"
    with started(mpiexec_argv(2) + [NBODY, *SMALL, "--checkpoint", str(path), "-q"]) as job:
        job.wait_for("Step")  # the thermo header: the loop has begun
        for pid in job.ranks():
            os.kill(pid, signal.Signals[name])
        stdout, stderr, _ = job.finish(60)
    assert job.proc.returncode == STATUS[name], stdout + stderr
    step = stopped_line(stderr, name, path)
    assert gravity_ckpt.read_file(str(path))[0]["step"] == step > 0
    assert f"stopped    by {name} after step {step}" in stdout
    quiet(stdout + stderr)


def test_pi_exit_status_follows_the_signal():
    """pympi-pi: SIGTERM after the sampling exits 0 as pympi-nbody does (was 143), the estimate printed."""
    with started(mpiexec_argv(2) + [PI, "2e10", "--threads", "1", "--backend", "numba"]) as job:
        ranks = _wait_ranks(job, 2)
        _busy(ranks[0], 1.0)
        for pid in ranks:
            os.kill(pid, signal.SIGTERM)
        stdout, stderr, _ = job.finish(120)
    assert job.proc.returncode == 0, stdout + stderr
    assert "pi ~= 3.14" in stdout
    assert stderr.strip().splitlines() == ["pympi-pi: stopped by SIGTERM after the sampling, whose result is "
                                           "above (complete: nothing to save)"], stderr


def _wait_ranks(job: Started, n: int) -> list[int]:
    for rank in range(n):
        wait_for_rank(job.proc.pid, rank)
    return sorted(job.ranks(), key=_rank_of)


def _busy(pid: int, cpu: float) -> None:
    from test_faults import wait_busy

    wait_busy(pid, cpu=cpu)


@pytest.mark.parametrize("ranks", [2, 3])
def test_a_stop_never_honoured_ends_the_job_after_the_grace_period(tmp_path, ranks):
    """The last rank is stopped (SIGSTOP: it never reaches the step's end); the others wait for it in MPI.

    Before: the stop request waited for a step boundary that never came, for good.
    """
    path = tmp_path / "c.npz"
    grace = 3
    argv = mpiexec_argv(ranks) + [NBODY, *SMALL, "--checkpoint", str(path), "-q"]
    with started(argv, env=env(PYMPI_STOP_GRACE=str(grace))) as job:
        job.wait_for("Step")
        pids = _wait_ranks(job, ranks)
        os.kill(pids[-1], signal.SIGSTOP)
        os.kill(job.proc.pid, signal.SIGTERM)  # mpiexec passes it on to every rank
        stdout, stderr, took = job.finish(grace + 45)
    time.sleep(0.5)
    assert [pid for pid in pids if _alive(pid)] == [], "ranks left after the job ended"
    assert job.proc.returncode != 0
    ours = [line for line in stderr.splitlines() if line.startswith("pympi-nbody:")]
    assert len(ours) == 1, stderr
    assert ours[0].startswith("pympi-nbody: stop requested by SIGTERM ") and "ending the job with MPI_Abort" in ours[0]
    assert "Traceback" not in stderr
    assert not path.exists()  # nothing written from a state no rank agreed on
    print(f"{ranks} ranks: the job ended {took:.1f} s after SIGTERM (grace {grace} s)")


def test_stop_unit_rules():
    """The exit statuses, and the grace period: read from the environment, stretched by a slow step."""
    from pympi_gpu.cli.signals import Stop, exit_status, grace_from_env

    assert [exit_status(s) for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)] == [0, 0, 0]
    assert exit_status(signal.SIGINT) == 130 and exit_status(signal.SIGHUP) == 129
    os.environ["PYMPI_STOP_GRACE"] = "7.5"
    try:
        assert grace_from_env() == 7.5
        os.environ["PYMPI_STOP_GRACE"] = "soon"
        assert grace_from_env() == 60.0
    finally:
        del os.environ["PYMPI_STOP_GRACE"]
    stop = Stop("t", grace=0.01)
    for _ in range(3):
        stop.requested()
        time.sleep(0.02)
    assert stop.slowest >= 0.02  # the time between two polls: a step
    stop.arrived(signal.SIGUSR1)
    # not installed (it took no signals): no watchdog, which would end this very process
    assert stop.requested() == signal.SIGUSR1 and stop._timer is None
