"""The world-size check's rules: a lone rank where the launcher promised more, the step's size over the
job's, no warning where the sizes agree or nothing says.  The warning as the commands print it:
tests/cli/test_worldcheck.py."""

from __future__ import annotations

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
