"""Stop requests under Slurm: srun, ibrun (the stand-in, srun underneath) and the job script's warning.

srun passes SIGUSR1 and SIGUSR2 on to every task and answers SIGTERM and
SIGHUP by killing them ("forcing job termination"), a first Ctrl-C with a
status report only (src/srun/signals.c); at the time limit Slurm sends SIGTERM
to every process of the job at once.  So the job scripts ask for a warning
signal to the batch shell (``#SBATCH --signal=B:USR1@120``) and pass it on,
and ``pympi-launch`` relays every stop request as SIGUSR1.  Measured here on
ranks that only note what they get, then shown on runs that write their
checkpoint.  Rows of docs/faults.md.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.jobs import session_procs

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "jobs"
STAND_IN_BIN = str(Path(__file__).resolve().parent / "bin")   # the stand-in ibrun
PROBE = str(ROOT / "tests" / "data" / "signal_probe.py")
SMALL = ["3000", "--steps", "1000000", "--threads", "1", "--backend", "numba"]


@contextlib.contextmanager
def running(slurm, argv, cwd, started, path_prepend=()):
    """A Slurm client started in a session of its own, yielded once ``started(proc)`` says its ranks run
    (False: it ended first, and the test fails with its output); whatever is left of it is killed at
    the end."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                            env=slurm.env(path_prepend=path_prepend), start_new_session=True)
    try:
        if not started(proc):
            pytest.fail(f"the ranks did not start: {_end(proc)[1]}")
        yield proc
    finally:
        _end(proc)


def _end(proc) -> tuple[str, str]:
    """Kill what is left of the client's session; its output (what was not read yet)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    return proc.communicate(timeout=60)


def printed(text: str, timeout: float = 180):
    """``started`` for :func:`running`: the client printed a line holding ``text``."""
    def started(proc) -> bool:
        deadline = time.monotonic() + timeout
        for line in proc.stdout:
            if text in line:
                return True
            assert time.monotonic() < deadline, f"no {text!r} within {timeout:.0f} s"
        return False
    return started


def _descendant(root: int, name: str, timeout: float = 60) -> int:
    """The pid of the first process below ``root`` whose command line holds ``name``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in session_procs(root):
            with contextlib.suppress(OSError):
                if name.encode() in Path(f"/proc/{pid}/cmdline").read_bytes() and pid != root:
                    return pid
        time.sleep(0.1)
    raise AssertionError(f"no {name} below {root}")


def checkpoint_step(path: Path) -> int:
    sys.path.insert(0, str(ROOT))
    from pympi_gpu.nbody.gravity import checkpoint as ckpt

    return ckpt.read_file(str(path))[0]["step"]


def stopped(stderr: str, name: str, path) -> int:
    ours = [line for line in stderr.splitlines()  # its own lines, less the progress reports
            if line.startswith("pympi-nbody:") and not line.startswith("pympi-nbody: step ")]
    assert len(ours) == 1 and ours[0].startswith(f"pympi-nbody: stopped by {name} after step "), stderr
    assert f"checkpoint {path} written" in ours[0], stderr
    return int(ours[0].split("after step ")[1].split(";")[0])


# ---------------------------------------------------------------- what srun does with each signal

@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1", "SIGUSR2"])
def test_what_srun_does_with_each_signal(slurm, tmp_path, name):
    argv = ["srun", "--ntasks=2", "--kill-on-bad-exit=1", "--mpi=pmi2", sys.executable, PROBE, str(tmp_path)]

    def ready(proc) -> bool:
        deadline = time.monotonic() + 120
        while not all((tmp_path / f"rank-{r}.ready").exists() for r in (0, 1)):
            if proc.poll() is not None:
                return False
            assert time.monotonic() < deadline, "the ranks did not start within 120 s"
            time.sleep(0.05)
        return True

    with running(slurm, argv, tmp_path, ready) as proc:
        os.kill(proc.pid, signal.Signals[name])
        if name == "SIGINT":  # the first only reports: a second within a second sends Ctrl-C on
            time.sleep(3)
            assert proc.poll() is None, "srun ended on one Ctrl-C"
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        got = [(tmp_path / f"rank-{r}.log").read_text().split() for r in (0, 1)]
    names = [[w for w in log if w.startswith("SIG") or w == "exit"] for log in got]
    if name in ("SIGUSR1", "SIGUSR2"):
        assert names == [[name, "exit"]] * 2, got
    else:  # killed (SIGKILL) or, for one Ctrl-C, left alone: in neither case does the stop request arrive
        assert all(name not in n for n in names), got
    print(f"srun, {name}: ranks got {names}")


# ---------------------------------------------------------------- runs that stop well

def test_sigusr1_to_srun_writes_the_checkpoint(slurm, tmp_path):
    path = tmp_path / "c.npz"
    argv = ["srun", "--ntasks=2", "--kill-on-bad-exit=1", "--mpi=pmi2", "pympi-nbody", *SMALL, "--checkpoint", str(path), "-q"]
    with running(slurm, argv, tmp_path, printed("Step")) as proc:
        os.kill(proc.pid, signal.SIGUSR1)
        _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert checkpoint_step(path) == stopped(stderr, "SIGUSR1", path) > 0


@pytest.mark.parametrize("name, status", [("SIGTERM", 0), ("SIGINT", 130), ("SIGHUP", 129)])
@pytest.mark.parametrize("launcher", ["srun", "ibrun"])
def test_pympi_launch_relays_under_slurm(slurm, tmp_path, launcher, name, status):
    """srun kills the tasks on SIGTERM and SIGHUP and only reports on one Ctrl-C: relayed as SIGUSR1 they stop
    after their step.  ibrun here is the stand-in (it execs srun), which pympi-launch picks where it is on PATH."""
    path = tmp_path / "c.npz"
    argv = ["salloc", "--ntasks=2", "--immediate=60", "pympi-launch", "-n", "2", "--", "pympi-nbody", *SMALL,
            "--checkpoint", str(path), "-q"]
    bins = [STAND_IN_BIN] if launcher == "ibrun" else []
    with running(slurm, argv, tmp_path, printed("Step"), path_prepend=bins) as proc:
        os.kill(_descendant(proc.pid, "pympi-launch"), signal.Signals[name])
        _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == status, stderr
    if launcher == "ibrun":
        assert "ibrun (stand-in): srun" in stderr
    assert checkpoint_step(path) == stopped(stderr, "SIGUSR1 from pympi-launch", path) > 0


# ---------------------------------------------------------------- the job script and Slurm's warning

def _submit(slurm, tmp_path, *options, env=None) -> tuple[int, Path]:
    """A job of nbody-checkpoint.sbatch and its own output file (a job submitted again writes another: the
    last one's thermo rows would say that this one's run had started)."""
    proc = slurm.run(["sbatch", "--parsable", f"--output={tmp_path / 'job-%j.out'}", "--ntasks=2", *options,
                      str(JOBS / "nbody-checkpoint.sbatch")], timeout=30, check=True, cwd=tmp_path,
                     env={"BODIES": "3000", "STEPS": "100000000", "EVERY": "100000000", **(env or {})})
    job = int(proc.stdout.strip().split(";")[0])
    return job, tmp_path / f"job-{job}.out"


def _submit_running(slurm, tmp_path, timeout: float = 180) -> tuple[int, Path]:
    """A job of nbody-checkpoint.sbatch whose run has printed its first thermo row."""
    job, out = _submit(slurm, tmp_path)
    deadline = time.monotonic() + timeout
    while not (out.exists() and "Step" in out.read_text(errors="replace")):
        assert time.monotonic() < deadline, f"no 'Step' in {out} within {timeout:.0f} s"
        assert slurm.job_state(job) in ("PENDING", "RUNNING", "CONFIGURING"), \
            f"job {job} ended before its run started:\n{out.read_text(errors='replace') if out.exists() else ''}"
        time.sleep(0.2)
    return job, out


def test_job_script_passes_slurms_warning_on_and_resumes(slurm, tmp_path):
    """``scancel --batch --signal=USR1`` is what ``#SBATCH --signal=B:USR1@120`` does 120 s before the limit."""
    job, out = _submit_running(slurm, tmp_path)
    slurm.run(["scancel", "--batch", "--signal=USR1", str(job)], timeout=30, check=True)
    assert slurm.wait(job, 180) == "COMPLETED", out.read_text()
    text = out.read_text()
    path = "pympi-nbody-ckpt.npz"
    step = stopped(text, "SIGUSR1 from pympi-launch", path)
    assert checkpoint_step(tmp_path / path) == step > 0
    # submitted again, it goes on from there
    job, out = _submit_running(slurm, tmp_path)
    slurm.run(["scancel", "--batch", "--signal=USR1", str(job)], timeout=30, check=True)
    assert slurm.wait(job, 180) == "COMPLETED", out.read_text()
    assert f"restarted from {path}" in out.read_text()
    assert checkpoint_step(tmp_path / path) > step


def test_job_script_with_a_real_time_limit_warning(slurm, tmp_path):
    """The real thing: a 2-minute job warned 60 s before its limit.  slurmctld looks every 30 s and sends
    the warning up to that much early, so it comes 30 to 60 s in, well after start-up."""
    job, out = _submit(slurm, tmp_path, "--time=2", "--signal=B:USR1@60")
    assert slurm.wait(job, 200) == "COMPLETED", out.read_text()
    text = out.read_text()
    assert "SIGUSR1 (the time limit is near): passed on to the ranks" in text, text
    assert checkpoint_step(tmp_path / "pympi-nbody-ckpt.npz") == stopped(text, "SIGUSR1 from pympi-launch",
                                                                         "pympi-nbody-ckpt.npz") > 0
