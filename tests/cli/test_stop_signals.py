"""Stop requests: every signal a scheduler, launcher or terminal sends ends a run with its checkpoint.

SIGTERM, SIGINT, SIGHUP, SIGUSR1 and SIGUSR2, each sent to the ranks as
Slurm's step daemon, ``scancel --signal`` or a launcher that passes it on
delivers it: every rank stops after the same step, the checkpoint is
written at the step the one line names, and the exit status is the
documented one (0 for a scheduler's request, 130 for Ctrl-C, 129 for a
closed terminal).  A stop that cannot be honoured (a rank stopped, so the
others wait for it in MPI for good) ends the job after the grace period
with one line naming ``MPI_Abort``.  What each launcher does with each
signal is in tests/cli/test_stop_launchers.py.  Rows of docs/faults.md.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from helpers.commands import env, mpiexec_argv, script
from helpers.jobs import alive, loaded, started, wait_busy, wait_for_path, wait_ranks
from helpers.stops import SMALL, quiet, stopped_line
from pympi_gpu.nbody.gravity import checkpoint as gravity_ckpt
from pympi_gpu.nbody.lj import checkpoint as lj_ckpt

NBODY = script("pympi-nbody")
PI = script("pympi-pi")


#: the exit status the docs give for each stop request
STATUS = {"SIGTERM": 0, "SIGUSR1": 0, "SIGUSR2": 0, "SIGINT": 130, "SIGHUP": 129}


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
        ranks = wait_ranks(job, 2)
        wait_busy(ranks[0], cpu=1.0)
        for pid in ranks:
            os.kill(pid, signal.SIGTERM)
        stdout, stderr, _ = job.finish(120)
    assert job.proc.returncode == 0, stdout + stderr
    assert "pi ~= 3.14" in stdout
    assert stderr.strip().splitlines() == ["pympi-pi: stopped by SIGTERM after the sampling, whose result is "
                                           "above (complete: nothing to save)"], stderr


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
        pids = wait_ranks(job, ranks)
        os.kill(pids[-1], signal.SIGSTOP)
        os.kill(job.proc.pid, signal.SIGTERM)  # mpiexec passes it on to every rank
        stdout, stderr, took = job.finish(grace + 45)
    time.sleep(0.5)
    assert [pid for pid in pids if alive(pid)] == [], "ranks left after the job ended"
    assert job.proc.returncode != 0
    ours = [line for line in stderr.splitlines() if line.startswith("pympi-nbody:")]
    assert len(ours) == 1, stderr
    assert ours[0].startswith("pympi-nbody: stop requested by SIGTERM ") and "ending the job with MPI_Abort" in ours[0]
    assert "Traceback" not in stderr
    assert not path.exists()  # nothing written from a state no rank agreed on
    print(f"{ranks} ranks: the job ended {took:.1f} s after SIGTERM (grace {grace} s)")


@pytest.mark.parametrize("ranks, when", [(2, "stepping"), (3, "stepping"), (2, "setting up")])
def test_sigterm_to_one_rank_of_a_loaded_machine_stops_the_job(tmp_path, ranks, when):
    """SIGTERM to one rank while another CPU-heavy job runs (busy loops on every core for the test).

    Stepping: a rank takes its quiet steps in compiled batches planned from one step's pace, which a
    loaded machine makes seconds to minutes long; a request that came during one was carried only after it,
    and the watchdog's grace grew with it (was: no stop, no checkpoint, no MPI_Abort in 150 s).  Now the
    batch carries it at its next step.  Setting up (the request before the first step): the watchdog counted
    its grace from the signal and took the set-up for a stuck rank (was: MPI_Abort, exit 1, no checkpoint).
    """
    path = tmp_path / "c.npz"
    atoms, grace = ("4000", "60") if when == "stepping" else ("32000", "1")
    argv = mpiexec_argv(ranks) + [NBODY, atoms, "--model", "lj", "--steps", "1000000", "--threads", "1",
                                  "--checkpoint", str(path), "-q"]
    with loaded(), started(argv, env=env(PYMPI_STOP_GRACE=grace)) as job:
        if when == "stepping":
            job.wait_for("Step")  # the thermo header: the steps have begun
        else:
            assert wait_for_path(tmp_path / "c.npz.lock", job.proc)  # claimed: the atoms and lists to make
        os.kill(wait_ranks(job, ranks)[-1], signal.SIGTERM)
        stdout, stderr, took = job.finish(90)
    assert job.proc.returncode == 0, stdout + stderr
    step = stopped_line(stderr, "SIGTERM", path)
    assert lj_ckpt.read_file(str(path))[0]["step"] == step > 0
    quiet(stdout + stderr)
    print(f"{ranks} ranks, {when}: stopped {took:.1f} s after SIGTERM to one rank, at step {step}")
