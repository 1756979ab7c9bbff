"""pympi under a real Slurm: job scripts, srun with PMI-2, pympi-launch, the ibrun path.

The cluster is the ``slurm`` fixture (tests/system/conftest.py): slurmctld and two
slurmd faking nodes n1 and n2 on this host.  Jobs run this environment's
``pympi-*`` and MPICH wheel (its bin is first on PATH in the jobs' environment).
"""

from __future__ import annotations

import json
import math
import re
import shlex
from pathlib import Path

import pytest

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "jobs"
STAND_IN_BIN = str(Path(__file__).resolve().parent / "bin")   # the stand-in ibrun


def pi_summaries(text: str) -> list[dict]:
    """The (estimate, standard error, ranks) of every human pympi-pi summary in text."""
    found = []
    for m in re.finditer(r"pi ~= (\S+)\s+\(Monte Carlo\)\n\s+error\s+(\S+)\s+standard error (\S+)"
                         r"(?s:.*?)\nranks (\d+), backend", text):
        found.append({"estimate": float(m.group(1)), "error": float(m.group(2)),
                      "stderr": float(m.group(3)), "ranks": int(m.group(4))})
    return found


def assert_good_pi(s: dict) -> None:
    assert abs(s["estimate"] - math.pi) < 5 * s["stderr"], s
    assert math.isclose(s["estimate"] - math.pi, s["error"], rel_tol=1e-3, abs_tol=1e-12), s


def one_json(stdout: str) -> dict:
    doc = json.loads(stdout)        # fails if the ranks printed more than one object
    assert doc["app"] == "pi"
    return doc


def test_the_cluster_has_two_idle_nodes(slurm):
    out = slurm.run(["sinfo", "-h", "-N", "-o", "%N %c %t"], timeout=20, check=True).stdout
    rows = sorted(line.split() for line in out.splitlines())
    assert [r[0] for r in rows] == ["n1", "n2"]
    assert all(int(r[1]) >= 2 for r in rows)


def test_sbatch_generic_srun_job(slurm):
    job_id, out = slurm.sbatch(JOBS / "generic-srun.sbatch", env={"SAMPLES": "2e6", "SEED": "7"}, timeout=240)
    assert f"job {job_id}: 2 tasks" in out
    assert "srun --mpi=pmi2" in out
    summaries = pi_summaries(out)
    assert len(summaries) == 1, out        # one summary: both ranks are one MPI job
    assert summaries[0]["ranks"] == 2
    assert_good_pi(summaries[0])
    assert "seed 7" in out


def test_sbatch_generic_srun_job_over_two_nodes(slurm):
    _, out = slurm.sbatch(JOBS / "generic-srun.sbatch", env={"SAMPLES": "1e6", "METHOD": "both"},
                          options=["--nodes=2", "--ntasks=3"], timeout=240)
    assert "3 tasks on n[1-2]" in out
    tr = re.search(r"pi ~= (\S+)\s+\(trapezoid rule\)", out)
    assert tr and abs(float(tr.group(1)) - math.pi) < 1e-9, out
    assert re.search(r"^ranks 3, ", out, re.M), out


def test_srun_pmi2_pympi_pi_json(slurm):
    proc = slurm.srun(["pympi-pi", "1e5", "--json"], ntasks=2, mpi="pmi2")
    assert proc.returncode == 0, proc.stderr
    doc = one_json(proc.stdout)
    assert doc["ranks"] == 2
    launcher = doc["provenance"]["launcher"]
    assert launcher["SLURM_MPI_TYPE"] == "pmi2" and launcher["PMI_SIZE"] == "2"
    assert "warning" not in proc.stderr


def test_srun_pmi2_across_the_two_fake_nodes(slurm):
    proc = slurm.srun(["pympi-pi", "1e5", "--json"], ntasks=2, nodes=2, mpi="pmi2")
    assert proc.returncode == 0, proc.stderr
    doc = one_json(proc.stdout)
    assert doc["ranks"] == 2
    assert doc["provenance"]["launcher"]["SLURM_JOB_NUM_NODES"] == "2"


def test_srun_without_pmi_warns_of_the_mismatch(slurm):
    # --mpi=none: MPICH gets no PMI, so each task is a world of its own
    proc = slurm.srun(["pympi-pi", "1e5"], ntasks=2, mpi="none")
    assert proc.returncode == 0, proc.stderr
    assert [s["ranks"] for s in pi_summaries(proc.stdout)] == [1, 1]
    assert proc.stderr.count("warning: MPI started a world of 1 rank") == 1, proc.stderr
    assert "SLURM_STEP_NUM_TASKS=2" in proc.stderr


def test_pympi_launch_in_an_allocation_chooses_srun(slurm):
    dry = slurm.salloc(["pympi-launch", "-n", "2", "--dry-run", "--", "pympi-pi", "1e5", "--json"], ntasks=2)
    assert dry.returncode == 0, dry.stderr
    assert shlex.split(dry.stdout.strip()) == ["srun", "--ntasks=2", "--kill-on-bad-exit=1", "--mpi=pmi2", "pympi-pi", "1e5", "--json"]
    assert "SLURM_JOB_ID" in dry.stderr and "mpich" in dry.stderr
    proc = slurm.salloc(["pympi-launch", "-n", "2", "--", "pympi-pi", "1e5", "--json"], ntasks=2)
    assert proc.returncode == 0, proc.stderr
    doc = one_json(proc.stdout)
    assert doc["ranks"] == 2
    assert doc["provenance"]["launcher"]["SLURM_MPI_TYPE"] == "pmi2"


def test_pympi_launch_in_a_batch_job(slurm, tmp_path):
    job = tmp_path / "launch.sbatch"
    job.write_text("#!/bin/bash\n#SBATCH --ntasks=3\nset -euo pipefail\n"
                   "pympi-launch -n 3 -- pympi-pi 1e6 --seed 11\n")
    _, out = slurm.sbatch(job, timeout=240)
    (s,) = pi_summaries(out)
    assert s["ranks"] == 3
    assert_good_pi(s)


def test_pympi_launch_passes_the_exit_status(slurm):
    proc = slurm.salloc(["pympi-launch", "-n", "2", "--", "pympi-pi", "-5"], ntasks=2)
    assert proc.returncode != 0
    assert proc.stderr.count("Error:") == 1, proc.stderr


def test_stand_in_ibrun_runs_under_srun(slurm):
    proc = slurm.salloc(["ibrun", "pympi-pi", "1e5", "--json"], ntasks=2, path_prepend=[STAND_IN_BIN])
    assert proc.returncode == 0, proc.stderr
    assert "ibrun (stand-in): srun --ntasks=2" in proc.stderr
    assert one_json(proc.stdout)["ranks"] == 2


def test_pympi_launch_chooses_ibrun_where_it_is_on_path(slurm):
    args = ["pympi-launch", "-n", "2", "--", "pympi-pi", "1e5", "--json"]
    dry = slurm.salloc([*args[:3], "--dry-run", *args[3:]], ntasks=2, path_prepend=[STAND_IN_BIN])
    assert dry.returncode == 0, dry.stderr
    assert shlex.split(dry.stdout.strip()) == ["ibrun", "pympi-pi", "1e5", "--json"]
    proc = slurm.salloc(args, ntasks=2, path_prepend=[STAND_IN_BIN])
    assert proc.returncode == 0, proc.stderr
    assert "ibrun (stand-in)" in proc.stderr
    assert one_json(proc.stdout)["ranks"] == 2
    # a subset of the allocation: ibrun -n 2 -o 0
    sub = slurm.salloc(args, ntasks=3, path_prepend=[STAND_IN_BIN])
    assert sub.returncode == 0, sub.stderr
    assert "ibrun (stand-in): srun --ntasks=2" in sub.stderr
    assert one_json(sub.stdout)["ranks"] == 2


def test_frontera_clx_job_script_with_the_stand_in_ibrun(slurm):
    # the Frontera script as users get it; here on the test partition, without the image
    # (SIF empty) since Apptainer is another tier's business
    _, out = slurm.sbatch(JOBS / "frontera-clx-pi.sbatch", env={"SAMPLES": "1e6", "SIF": ""},
                          options=["--partition=debug", "--nodes=1", "--ntasks-per-node=2"],
                          path_prepend=[STAND_IN_BIN], timeout=240)
    assert "ibrun (stand-in): srun --ntasks=2" in out
    (s,) = pi_summaries(out)
    assert s["ranks"] == 2
    assert_good_pi(s)


def test_waits_are_bounded_and_pending_jobs_cancelled(slurm, tmp_path):
    from system.slurm import SlurmError

    job = tmp_path / "later.sbatch"
    job.write_text("#!/bin/bash\n#SBATCH --ntasks=1\necho never\n")
    with pytest.raises(SlurmError, match="ended TIMEOUT"):
        slurm.sbatch(job, options=["--begin=now+1hour"], timeout=3)
    assert slurm.run(["squeue", "-h"], timeout=20).stdout.strip() == ""   # cancelled, not left pending
    # more tasks than the two fake nodes have CPUs: refused, not pending forever
    proc = slurm.srun(["true"], ntasks=64, timeout=8)
    assert proc.returncode != 0
    assert "allocate" in proc.stderr.lower() or "not available" in proc.stderr.lower(), proc.stderr
