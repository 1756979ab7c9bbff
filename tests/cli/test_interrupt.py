"""Ctrl-C at 3 ranks, as a terminal sends it: a request to stop, and a second one that ends at once.

The first SIGINT goes to the job's whole process group (mpiexec and the
ranks, as the terminal's foreground group gets it): every rank stops after
the current step, the checkpoint is written, one line says where and what,
exit 130.  The second, half a second later, goes to the ranks while a long
step runs: the job ends at once with one line, no traceback, no MPI noise,
and the checkpoint on disk as it was.  Rows of docs/faults.md.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from helpers.commands import env, mpiexec_argv, run, script
from helpers.jobs import job, rank_of, session_procs, wait_busy, wait_for_rank
from pympi_gpu.nbody.gravity import checkpoint as gravity_ckpt
from pympi_gpu.nbody.lj import checkpoint as lj_ckpt

PI = script("pympi-pi")
NBODY = script("pympi-nbody")
RANKS = 3
NOISE = ("Traceback", "pending", "BAD TERMINATION", "error on rank", "KeyboardInterrupt", "assert")

#: (argv after the launcher, the checkpoint reader) per model: long enough to be interrupted
RUNS = {
    "gravity": (["2000", "--steps", "1000000"], gravity_ckpt.read_file),
    "lj": (["4000", "--model", "lj", "--steps", "1000000"], lj_ckpt.read_file),
}
#: runs whose steps (and, for LJ, whose checkpoint write) outlast the half second between two Ctrl-Cs
#: on Zen 2 and Zen 4 alike (LJ at 4,000,000 atoms: 0.5 s a step at 3 ranks on 2 Zen 4 cores, and
#: a 320 MB checkpoint after the first Ctrl-C); many steps, so that no job ends before it is interrupted
LONG_STEPS = {
    "gravity": ["120000", "--steps", "1000000"],
    "lj": ["4000000", "--model", "lj", "--steps", "1000000"],
}


def finished(proc, within: float) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=within)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the job did not end within {within:.0f} s of Ctrl-C")


def interrupt_twice(proc) -> None:
    """Ctrl-C twice, half a second apart, to every rank (as the terminal and the launcher deliver it)."""
    ranks = [pid for pid in session_procs(proc.pid) if rank_of(pid) is not None]
    for _ in range(2):
        for pid in ranks:
            os.kill(pid, signal.SIGINT)
        time.sleep(0.5)


def quiet(text: str) -> None:
    assert not any(word in text for word in NOISE), text


@pytest.mark.parametrize("model", ["gravity", "lj"])
def test_ctrl_c_stops_after_the_step_and_writes_the_checkpoint(tmp_path, model):
    args, read = RUNS[model]
    path = tmp_path / "c.npz"
    argv = mpiexec_argv(RANKS) + [NBODY, *args, "--threads", "1", "--checkpoint", str(path), "-q"]
    with job(argv) as proc:
        wait_busy(wait_for_rank(proc.pid, 0), cpu=2.0)
        os.killpg(proc.pid, signal.SIGINT)  # the terminal's Ctrl-C: the whole foreground group
        stdout, stderr = finished(proc, 60)
    assert proc.returncode == 130, stdout + stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pympi-nbody: stopped by SIGINT after step "), stderr
    assert f"checkpoint {path} written (resume with --restart {path})" in lines[0]
    quiet(stdout + stderr)
    step = int(lines[0].split("after step ")[1].split(";")[0])
    meta, _ = read(str(path))
    assert meta["step"] == step > 0
    assert f"stopped    by SIGINT after step {step}" in stdout


def test_ctrl_c_on_pi_reports_the_finished_estimate():
    # sampling that outlasts start-up and one CPU-second on a fast core (2.8e9 samples/s on Zen 4)
    argv = mpiexec_argv(RANKS) + [PI, "1.5e10", "--threads", "1", "--backend", "numba"]
    with job(argv) as proc:
        wait_busy(wait_for_rank(proc.pid, 0), cpu=1.0)
        os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr = finished(proc, 120)
    assert proc.returncode == 130, stdout + stderr
    assert "pi ~= 3.14" in stdout and "hits" in stdout, stdout
    lines = stderr.strip().splitlines()
    assert lines == ["pympi-pi: stopped by SIGINT after the sampling, whose result is above "
                     "(complete: nothing to save)"], stderr
    quiet(stdout + stderr)


@pytest.mark.parametrize("model", ["gravity", "lj"])
def test_second_ctrl_c_ends_at_once_and_keeps_the_checkpoint(tmp_path, model):
    path = tmp_path / "c.npz"
    good = run(mpiexec_argv(RANKS) + [NBODY, *RUNS[model][0][:-1], "2", "--threads", "1", "--checkpoint", str(path),
                                      "-q"], timeout=300, env=env())
    assert good.returncode == 0, good.stderr
    before = path.read_bytes()
    argv = mpiexec_argv(RANKS) + [NBODY, *LONG_STEPS[model], "--threads", "1", "--checkpoint", str(path), "-q",
                                  "--overwrite"]  # another run's checkpoint: replaced only when asked
    with job(argv) as proc:
        wait_busy(wait_for_rank(proc.pid, 0), cpu=4.0)
        interrupt_twice(proc)
        t0 = time.monotonic()
        stdout, stderr = finished(proc, 30)
    assert time.monotonic() - t0 < 15
    assert proc.returncode == 130, stdout + stderr
    assert stderr.strip().splitlines() == ["pympi-nbody: interrupted twice: stopped at once, nothing more written "
                                           "(checkpoints on disk are as they were)"], stderr
    quiet(stdout + stderr)
    assert path.read_bytes() == before


def test_second_ctrl_c_on_pi_ends_at_once():
    argv = mpiexec_argv(RANKS) + [PI, "1e12", "--threads", "1", "--backend", "numba"]
    with job(argv) as proc:
        wait_busy(wait_for_rank(proc.pid, 0), cpu=1.0)
        interrupt_twice(proc)
        stdout, stderr = finished(proc, 30)
    assert proc.returncode == 130, stdout + stderr
    assert stderr.strip().splitlines() == ["pympi-pi: interrupted twice: stopped at once, no result"], stderr
    quiet(stdout + stderr)
