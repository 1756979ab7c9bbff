"""The launcher and MPI-library tables (pympi_gpu.launchers): one entry adds a launcher or an MPI.

A made-up launcher (tests/data/fake_launcher.py) is added to the table, and the launch plan, the
environment report, the world check, the rank hint and the GPU binding see it; then the order rules,
which hold for whatever the table holds.  The commands that see it: tests/cli/test_launcher_table_cli.py.
"""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from helpers.launcher_table import CMD, LOCAL, RANK, SIZE, URI, with_fake_launcher
from pympi_gpu import launchers


@pytest.fixture
def fake(monkeypatch):
    """The table with the made-up launcher in it, for this test."""
    return with_fake_launcher(monkeypatch)


def which_of(*present):
    """A ``shutil.which`` that finds exactly ``present``."""
    return lambda name: f"/usr/bin/{name}" if name in present else None


# -- one entry: every reader sees it -------------------------------------------------------

def test_the_plan_picks_it_where_auto_finds_it(fake):
    from pympi_gpu.mpi.launch import launcher_choices, plan

    inside = {URI: "local:///tmp/fakeflux-7"}
    p = plan(CMD, 4, environ=inside, which=which_of("fakeflux", "mpiexec"), mpi="mpich")
    assert p.launcher == "fakeflux" and p.argv == ("fakeflux", "run", "-n", "4", *CMD)
    assert "inside fakeflux instance local:///tmp/fakeflux-7" in p.reason
    placed = plan(CMD, 8, nodes=2, tasks_per_node=4, environ=inside, which=which_of("fakeflux"), mpi="mpich")
    assert placed.argv == ("fakeflux", "run", "-n", "8", "-N", "2", "--tasks-per-node=4", *CMD)
    # a Slurm allocation comes first in the table; outside an instance, mpiexec says it looked
    assert plan(CMD, 2, environ={**inside, "SLURM_JOB_ID": "3"}, which=which_of("fakeflux"),
                mpi="mpich").launcher == "srun"
    outside = plan(CMD, 2, environ={}, which=which_of("fakeflux", "mpiexec"), mpi="mpich")
    assert outside.launcher == "mpiexec" and "no fakeflux instance" in outside.reason
    assert "fakeflux" in launcher_choices()
    forced = plan(CMD, 2, launcher="fakeflux", environ={}, which=which_of("fakeflux"))
    assert forced.argv[:4] == ("fakeflux", "run", "-n", "2")


def test_the_environment_report_the_world_check_the_rank_hint_and_the_gpu_binding_see_it(fake, monkeypatch):
    from pympi_gpu.cli.common import world_rank_hint
    from pympi_gpu.device.gpu import local_rank_from_env
    from pympi_gpu.mpi.environment import expected_world_size, launcher_env
    from pympi_gpu.mpi.worldcheck import world_mismatch
    from pympi_gpu.run.info import guess_launcher

    # started by it inside a batch script, whose Slurm variables every child inherits
    env = {SIZE: "4", RANK: "2", LOCAL: "1", URI: "local:///x",
           "SLURM_JOB_ID": "9", "SLURM_NTASKS": "1", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
           "SLURM_STEP_ID": "batch"}
    assert guess_launcher(env) == fake.title
    assert {SIZE: "4", RANK: "2", LOCAL: "1", URI: "local:///x"}.items() <= launcher_env(env).items()
    assert expected_world_size(env) == (4, SIZE)
    assert f"{SIZE}=4" in world_mismatch(1, env)
    assert local_rank_from_env(env) == (1, LOCAL)
    monkeypatch.setattr(os, "environ", env)
    assert world_rank_hint() == 2


# -- the order rules, for every launcher the table holds -----------------------------------

def launchers_with(role: str):
    return [entry for entry in launchers.LAUNCHERS if getattr(entry, role) and not entry.scheduler]


@pytest.mark.parametrize("role, read", [
    ("local_rank", launchers.local_rank), ("world_rank", launchers.world_rank), ("world_size", launchers.world_size)])
def test_each_launchers_word_wins_over_the_schedulers(role, read):
    """A batch script's mpirun children inherit its SLURM_* (rank 0, local 0, 1 task): their own launcher's count."""
    scheduler = {var: "0" if role != "world_size" else "1" for s in launchers.LAUNCHERS if s.scheduler
                 for var in (*getattr(s, role), *s.job_size)}
    assert scheduler, "the table has a scheduler"
    for entry in launchers_with(role):
        var = getattr(entry, role)[0]
        assert read({**scheduler, var: "5"}) == (5, var), entry.name


def test_a_steps_size_wins_over_the_jobs():
    """Inside an allocation of 4 tasks, a plain process is a step of 1."""
    for entry in (e for e in launchers.LAUNCHERS if e.job_size and e.world_size):
        env = {entry.job_size[0]: "4", entry.world_size[0]: "1"}
        assert launchers.world_size(env) == (1, entry.world_size[0]), entry.name


def test_a_batch_script_is_not_started_by_its_scheduler():
    for entry in (e for e in launchers.LAUNCHERS if e.step):
        marked = {mark: "0" for mark in entry.marks}
        assert entry.started({**marked, entry.step: "0"})
        for not_a_step in entry.not_a_step:
            assert not entry.started({**marked, entry.step: not_a_step}), (entry.name, not_a_step)


def test_every_launcher_variable_is_reported():
    for entry in launchers.LAUNCHERS:
        assert set(entry.variables) <= set(launchers.reported()), entry.name


def test_an_mpi_derived_from_another_is_told_apart_wherever_it_stands_in_the_table(monkeypatch):
    """Cray MPICH, added last, says "MPICH" too; it is recognised as itself, and launched with its own plugin."""
    from pympi_gpu.mpi.launch import mpi_choices, plan
    from pympi_gpu.mpi.library import vendor_of_text
    from pympi_gpu.mpi.worldcheck import pmi_advice

    cray = launchers.MpiLibrary("craympich", "Cray MPICH", phrases=("cray mpich",), based_on="mpich",
                                homes=("CRAY_MPICH_DIR",), pmi="cray_shasta")
    monkeypatch.setattr(launchers, "MPI_LIBRARIES", (*launchers.MPI_LIBRARIES, cray))
    assert vendor_of_text("MPI VERSION    : CRAY MPICH version 8.1.28.29 (ANL base 3.4a2)") == "craympich"
    assert vendor_of_text("MPICH Version: 4.1.2") == "mpich"
    assert "craympich" in mpi_choices()
    p = plan(CMD, 2, environ={"SLURM_JOB_ID": "1"}, which=which_of("srun"), mpi="craympich")
    assert "--mpi=cray_shasta" in p.argv
    assert "srun --mpi=cray_shasta for Cray MPICH" in pmi_advice()


def test_every_derived_mpi_is_recognised_before_the_one_it_derives_from():
    for lib in (entry for entry in launchers.MPI_LIBRARIES if entry.based_on):
        base = launchers.mpi_library(lib.based_on)
        text = f"{lib.phrases[0]} version 1 ({base.phrases[0]} derived)"
        from pympi_gpu.mpi.library import vendor_of_text

        assert vendor_of_text(text) == lib.name
        order = [entry.name for entry in launchers.recognition_order()]
        assert order.index(lib.name) < order.index(base.name)


def test_a_library_without_a_pmi_plugin_is_recognised_but_not_launched(monkeypatch):
    from pympi_gpu.mpi.launch import LaunchError, mpi_choices, plan

    quiet = replace(launchers.mpi_library("openmpi"), name="quietmpi", phrases=("quiet mpi",), pmi=None)
    monkeypatch.setattr(launchers, "MPI_LIBRARIES", (*launchers.MPI_LIBRARIES, quiet))
    assert "quietmpi" not in mpi_choices()
    with pytest.raises(LaunchError, match="unknown MPI"):
        plan(CMD, 2, environ={}, which=which_of("mpiexec"), mpi="quietmpi")
