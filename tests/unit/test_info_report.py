"""pympi-info's report, in one process: the launcher guessed from the environment a rank was started in.
The command under mpiexec: tests/cli/test_info_cli.py."""

from __future__ import annotations

from pympi_gpu.run.info import guess_launcher


def test_launcher_guess():
    assert guess_launcher({}).startswith("none")
    assert guess_launcher({"SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "PMI_SIZE": "2"}) == "srun"
    assert guess_launcher({"SLURM_STEP_ID": "batch", "SLURM_PROCID": "0"}).startswith("none")
    assert guess_launcher({"PMI_SIZE": "2", "PMI_RANK": "0"}).startswith("mpiexec")
    assert guess_launcher({"OMPI_COMM_WORLD_SIZE": "2"}).startswith("mpirun")
