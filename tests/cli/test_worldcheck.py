"""The world-size check: a lone rank where the launcher promised more gets one clear warning."""

from __future__ import annotations

import json

from helpers.commands import clean_env, run, script


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
