"""The launcher and MPI-library tables (pympi_gpu.launchers) as the commands see them.

A made-up launcher (tests/data/fake_launcher.py) is added to the table, and ``pympi-launch
--dry-run``, ``pympi-scale``, ``pympi-info`` (the report, the world check, the rank hint) and the
GPU binding before MPI_Init all see it.  The plan and the order rules: tests/unit/test_launcher_table.py.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from helpers.commands import BIN, clean_env, run, script
from helpers.launcher_table import CMD, DATA, LOCAL, RANK, SIZE, URI, fake_launcher, with_fake_launcher


@pytest.fixture
def fake(monkeypatch):
    """The table with the made-up launcher in it, for this test."""
    return with_fake_launcher(monkeypatch)


def pympi(command: str, *args: str, env: dict[str, str], **kw):
    """Run pympi-COMMAND as its console script does, in a Python whose table has the made-up launcher."""
    code = (f"import sys; sys.path.insert(0, {str(DATA)!r}); import fake_launcher; fake_launcher.register(); "
            f"from pympi_gpu.cli import {command}_main; {command}_main()")
    return run([sys.executable, "-c", code, *args], env=env, **kw)


def with_stub_on_path(tmp_path, name: str, **extra) -> dict[str, str]:
    """A child environment with this venv's bin and a do-nothing ``name`` executable on PATH."""
    stub = tmp_path / name
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    return clean_env(PATH=os.pathsep.join([str(tmp_path), str(BIN), os.environ.get("PATH", os.defpath)]), **extra)


# -- one entry: every reader sees it -------------------------------------------------------


def test_pympi_launch_dry_run_with_it(fake, tmp_path):
    env = with_stub_on_path(tmp_path, "fakeflux", **{URI: "local:///tmp/fakeflux-1"})
    out = pympi("launch", "-n", "3", "--dry-run", "--", *CMD, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["fakeflux", "run", "-n", "3", *CMD]
    assert "# fakeflux: inside fakeflux instance local:///tmp/fakeflux-1" in out.stderr
    forced = pympi("launch", "-n", "2", "--launcher", "fakeflux", "--dry-run", "--", *CMD,
                   env=with_stub_on_path(tmp_path, "fakeflux"), timeout=120)
    assert forced.returncode == 0 and forced.stdout.split()[:4] == ["fakeflux", "run", "-n", "2"], forced.stderr


def test_pympi_scale_plans_with_it_and_will_not_run_under_it(fake, tmp_path):
    env = with_stub_on_path(tmp_path, "fakeflux")
    pi = [script("pympi-pi"), "1e6"]
    out = pympi("scale", "--ranks", "1,2", "--launcher", "fakeflux", "--dry-run", "--", *pi, env=env,
                timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = [line.split() for line in out.stdout.splitlines() if not line.startswith("#")]
    assert [words[:4] for words in lines] == [["fakeflux", "run", "-n", "1"], ["fakeflux", "run", "-n", "2"]]
    under = pympi("scale", "--ranks", "1", "--", *pi, env={**env, SIZE: "2", RANK: "0"}, timeout=120,
                  cwd=tmp_path)
    assert under.returncode == 2 and f"{SIZE}=2" in under.stderr and "one process" in under.stderr


def test_pympi_info_names_it_and_its_lone_ranks(fake):
    env = clean_env(**{SIZE: "2", RANK: "0", LOCAL: "0"})
    out = pympi("info", "--no-gpu", "--json", env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["launcher"] == fake_launcher.FAKE.title
    assert doc["launcher_env"][SIZE] == "2" and doc["launcher_env"][RANK] == "0"
    assert (doc["expected_ranks"], doc["expected_from"]) == (2, SIZE)
    assert len(doc["warnings"]) == 1 and f"{SIZE}=2" in doc["warnings"][0]  # the world check
    # its rank 1, alone in a world of its own too, says so in one line instead of a second report
    second = pympi("info", "--no-gpu", env={**env, RANK: "1"}, timeout=120)
    assert second.returncode == 0 and second.stdout == "" and "launcher rank 1 is alone" in second.stderr


def test_the_gpu_is_chosen_before_mpi_init_from_its_local_rank(fake):
    """Under the CUDA simulator: its local rank, not the batch step's SLURM_LOCALID=0, picks the device."""
    code = (f"import sys; sys.path.insert(0, {str(DATA)!r}); import fake_launcher; fake_launcher.register(); "
            "from pympi_gpu.device.gpu import select_before_init; "
            "b = select_before_init(allow_simulator=True); print(b.variable, b.local_rank)")
    env = clean_env(NUMBA_ENABLE_CUDASIM="1", SLURM_LOCALID="0", **{LOCAL: "3"})
    out = run([sys.executable, "-c", code], env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [LOCAL, "3"]


# -- the order rules, for every launcher the table holds -----------------------------------
