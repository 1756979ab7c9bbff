"""The world-size check: a lone rank where the launcher promised more gets one clear warning."""

from __future__ import annotations

import json

from helpers.commands import clean_env, run, script
from pympi_gpu.mpi.worldcheck import world_mismatch


def test_lone_rank_in_a_slurm_step_of_two():
    text = world_mismatch(1, {"SLURM_NTASKS": "2"}, library="MPICH Version:      5.0.2\n")
    assert text is not None
    assert "SLURM_NTASKS=2" in text and "world of 1 rank" in text
    assert "(MPICH Version: 5.0.2)" in text
    assert "--mpi=pmi2" in text and "--mpi=pmix" in text


def test_step_size_wins_over_job_size():
    # inside salloc -n 4, a plain process is a step of 1: no warning
    assert world_mismatch(1, {"SLURM_NTASKS": "4", "SLURM_STEP_NUM_TASKS": "1"}) is None
    assert "PMI_SIZE=3" in world_mismatch(1, {"PMI_SIZE": "3", "SLURM_NTASKS": "1"})


def test_no_warning_when_sizes_agree_or_nothing_says():
    assert world_mismatch(2, {"SLURM_NTASKS": "2"}) is None
    assert world_mismatch(1, {}) is None
    assert world_mismatch(1, {"SLURM_NTASKS": "1"}) is None
    assert world_mismatch(4, {"OMPI_COMM_WORLD_SIZE": "4"}) is None


def test_pympi_pi_alone_under_slurm_variables_warns_once():
    out = run([script("pympi-pi"), "1e5", "--json"], timeout=120, env=clean_env(SLURM_NTASKS="2"))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["ranks"] == 1   # the run itself goes on
    assert out.stderr.count("warning: MPI started a world of 1 rank") == 1
    assert "SLURM_NTASKS=2" in out.stderr


def test_only_the_launchers_rank_0_prints_it():
    out = run([script("pympi-pi"), "1e5"], timeout=120, env=clean_env(SLURM_NTASKS="2", SLURM_PROCID="1"))
    assert out.returncode == 0, out.stderr
    assert "warning" not in out.stderr


def test_no_warning_under_a_matching_launcher(mpirun):
    out = mpirun(2, script("pympi-pi"), "1e5", "--json", env=clean_env(SLURM_NTASKS="2"))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["ranks"] == 2
    assert "warning" not in out.stderr
    plain = run([script("pympi-pi"), "1e5"], timeout=120)
    assert "warning" not in plain.stderr
