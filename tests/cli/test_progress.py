"""Progress of long runs: plain lines from rank 0 when stderr is not a terminal.

Also: ``pympi-nbody --backend auto`` agrees on one backend over all ranks.
"""

from __future__ import annotations

import json

import pytest

from helpers.commands import FAKE_GPU_PATH, clean_env, fake_gpus, mpiexec_argv, run, script
from pympi_gpu.cli.settings import PROGRESS_INTERVAL as INTERVAL_ENV

NBODY = script("pympi-nbody")


def _nbody(ranks, *args, **env):
    argv = mpiexec_argv(ranks) + [NBODY, *map(str, args)]
    return run(argv, env=clean_env(**env), timeout=300)


@pytest.mark.parametrize("ranks", [2, 3])
def test_rank0_prints_progress_lines_under_mpiexec(ranks):
    out = _nbody(ranks, 3000, "--steps", 20, "--backend", "numpy", "--json", **{INTERVAL_ENV: "0.001"})
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)  # stdout holds the JSON alone
    assert doc["steps"] == 20
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("pympi-nbody: step ")]
    assert lines, out.stderr
    assert all("steps/s" in ln for ln in lines)
    assert any("left" in ln for ln in lines)
    # one writer (rank 0): every step appears at most once
    steps = [ln.split()[2] for ln in lines]
    assert len(steps) == len(set(steps)), lines


def test_quiet_turns_progress_off():
    out = _nbody(2, 3000, "--steps", 5, "--backend", "numpy", "--quiet", **{INTERVAL_ENV: "0.001"})
    assert out.returncode == 0, out.stderr
    assert "pympi-nbody: step" not in out.stderr
    assert "n-body: 3,000 bodies" in out.stdout


@pytest.mark.parametrize("ranks, probe, bad_rank", [(2, "yes,no", 1), (3, "no,yes,yes", 0)])
def test_nbody_auto_agrees_on_every_rank(ranks, probe, bad_rank):
    # an MPMD launch, each rank's GPU probe faked (tests/data/fake_gpu)
    out = run(fake_gpus([NBODY, "300", "--steps", "2", "--json"], probe), env=clean_env(PYTHONPATH=FAKE_GPU_PATH),
              timeout=300)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["backend"] == "numba"
    assert doc["backend_reason"].startswith(f"auto: no GPU on rank {bad_rank} of {ranks}")
