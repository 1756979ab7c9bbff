"""pympi-info and a pympi-scale job under the real Slurm of tests/system (fixture ``slurm``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.commands import script

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[2]


def test_info_under_srun_two_nodes(slurm):
    p = slurm.srun([script("pympi-info"), "--json"], ntasks=2, nodes=2, timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(p.stdout)  # one report: rank 0 of one world of 2
    assert doc["ranks"] == 2 and sum(doc["ranks_per_host"].values()) == 2
    assert doc["launcher"] == "srun" and doc["warnings"] == []
    env = doc["launcher_env"]
    assert env["SLURM_JOB_ID"].isdigit() and env.get("SLURM_STEP_NUM_TASKS", env.get("SLURM_NTASKS")) == "2"
    assert [r["rank"] for r in doc["rank_info"]] == [0, 1]


def test_info_plain_under_srun(slurm):
    p = slurm.srun([script("pympi-info")], ntasks=3, timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("pympi_gpu ") == 1 and "ranks           3 on" in p.stdout
    assert "launcher        srun" in p.stdout and "SLURM_JOB_ID=" in p.stdout


def test_info_warns_when_srun_gives_no_pmi(slurm):
    # --mpi=none: the MPI inside cannot reach Slurm's PMI, so each task is a world of one
    p = slurm.srun([script("pympi-info")], ntasks=2, mpi="none", timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("pympi_gpu ") == 1  # one report (launcher rank 0), not two
    assert "world of 1 rank" in p.stdout and "=2" in p.stdout
    assert "launcher rank 1 is alone" in p.stderr


def test_strong_scaling_job(slurm, tmp_path):
    """jobs/strong-scaling.sbatch at 1 and 2 fake nodes, one rank each, through srun."""
    out = tmp_path / "study"
    job_id, text = slurm.sbatch(
        ROOT / "jobs" / "strong-scaling.sbatch", "pympi-pi", "1e6", "--threads", "1",
        options=["--nodes=2", "--ntasks-per-node=1", "--partition=debug", "--time=00:10:00"],
        env={"NODES": "1,2", "TASKS_PER_NODE": "1", "REPEAT": "1", "OUT": str(out), "TIMEOUT": "120"},
        timeout=300, cwd=tmp_path)
    assert f"job {job_id}: 2 nodes" in text
    doc = json.loads(out.with_suffix(".json").read_text())
    assert doc["complete"] and doc["kind"] == "strong" and doc["command"] == ["pympi-pi", "1e6", "--threads", "1"]
    assert [(p["nodes"], p["ranks"], p["status"], p["launcher"]) for p in doc["points"]] == [
        (1, 1, "ok", "srun"), (2, 2, "ok", "srun")]
    runs = [json.loads(line) for line in out.with_suffix(".jsonl").read_text().splitlines()]
    assert all("--nodes=%d" % r["nodes"] in r["argv"] for r in runs)
    assert all(r["record"]["provenance"]["launcher"].get("SLURM_JOB_ID") == str(job_id) for r in runs)
