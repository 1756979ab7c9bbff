"""pympi-launch as users run it: ``--dry-run`` (an image, ``--gpu``, an image it cannot check), the group
form ``pympi launch``, the exit status passed on, bad input; and the MPI library mpi4py really loads, as a
child Python reports it.  The plan's every branch: tests/unit/test_launch_plan.py."""

from __future__ import annotations

import shlex

import pytest

from helpers.commands import BIN, clean_env, run, script
from pympi_gpu.mpi.launch import loaded_mpi_library


def test_loaded_mpi_library_is_the_real_one():
    from mpi4py import MPI

    assert loaded_mpi_library() == MPI.Get_library_version().strip()


# -- the command line ------------------------------------------------------------------------

def venv_env(**extra):
    """The child environment with this venv's bin first on PATH (its mpiexec, its pympi-*)."""
    import os

    env = clean_env(**extra)
    env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", os.defpath)])
    return env


def launch(*args, env=None):
    return run([script("pympi-launch"), *args], timeout=120, env=venv_env(**(env or {})))


def test_dry_run_prints_the_command():
    out = launch("-n", "2", "--dry-run", "--", "pympi-pi", "1e5", "--seed", "3")
    assert out.returncode == 0, out.stderr
    argv = shlex.split(out.stdout)
    assert argv[-4:] == ["pympi-pi", "1e5", "--seed", "3"]
    assert argv[:3] == [argv[0], "-n", "2"] and argv[0].endswith(("mpiexec", "mpirun"))
    assert "mpich (the MPI library mpi4py loads: MPICH Version:" in out.stderr


def test_dry_run_srun_with_image_and_gpu():
    out = launch("-n", "4", "--image", "nbody.sif", "--gpu", "--dry-run", "--", "pympi-nbody", "1e6",
                 env={"SLURM_JOB_ID": "42"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "srun --ntasks=4 --kill-on-bad-exit=1 --mpi=pmi2 apptainer run --nv nbody.sif pympi-nbody 1e6"
    assert "# warning: no image file nbody.sif here" in out.stderr  # checked, and said


def test_dry_run_checks_the_image(tmp_path):
    sif = tmp_path / "pi.sif"
    sif.write_bytes(b"not really an image")
    out = launch("-n", "2", "--image", str(sif), "--dry-run", "--", "pympi-pi", "1e6")
    assert out.returncode == 0 and "warning" not in out.stderr, out.stderr
    remote = launch("-n", "2", "--image", "docker://ghcr.io/x/pi:1", "--dry-run", "--", "pympi-pi", "1e6")
    assert remote.returncode == 0 and "docker://ghcr.io/x/pi:1 not checked" in remote.stderr


def test_pympi_launch_group_form():
    out = run([script("pympi"), "launch", "-n", "2", "--launcher", "mpiexec", "--dry-run", "--",
               "pympi-pi", "1e5"], timeout=60, env=venv_env())
    assert out.returncode == 0, out.stderr
    assert shlex.split(out.stdout)[1:] == ["-n", "2", "pympi-pi", "1e5"]


def test_launch_runs_and_passes_the_exit_status():
    out = launch("-n", "2", "--", "pympi-pi", "1e5", "--json")
    assert out.returncode == 0, out.stderr
    import json

    assert json.loads(out.stdout)["ranks"] == 2
    bad = launch("-n", "2", "--", "pympi-pi", "0")
    assert bad.returncode == 2
    assert bad.stderr.count("Error:") == 1


@pytest.mark.parametrize("args, match", [
    (["-n", "0", "--", "pympi-pi", "1e5"], "-n"),
    (["-n", "2"], "Missing argument 'COMMAND"),
    (["-n", "2", "--launcher", "aprun", "--", "x"], "--launcher"),
    (["-n", "2", "--image", "/no/such.sif", "--", "x"], "no such image"),
    (["-n", "2", "--launcher", "ibrun", "--", "x"], "not on PATH"),
])
def test_bad_input_exits_2_with_one_message(args, match):
    out = launch(*args)
    assert out.returncode == 2
    assert match in out.stderr
    assert out.stderr.count("Error:") == 1
    assert "Traceback" not in out.stderr and out.stdout == ""
