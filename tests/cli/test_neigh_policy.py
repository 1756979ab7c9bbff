"""The lists' policy, LAMMPS's ``neigh_modify every K check yes|no`` (``--neigh-every``, ``--neigh-check``):
when the lists are looked at and rebuilt, on 1-3 ranks, on the CPU and the simulated GPU, across restarts,
and refused where it cannot hold, driven through the command.  The threshold and the LAMMPS input:
tests/unit/test_neigh_policy.py."""

from __future__ import annotations

import json
import subprocess

import pytest

from helpers.commands import clean_env, mpiexec_argv, refused, run, script

NBODY = script("pympi-nbody")
ENV = clean_env(OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
SIM = clean_env(NUMBA_ENABLE_CUDASIM="1", OMP_NUM_THREADS="1")
UNCHECKED = ("--neigh-every", "10", "--neigh-check", "no")


def lj(ranks: int, *args, env=ENV, timeout: float = 300) -> subprocess.CompletedProcess:
    argv = ([] if ranks == 1 else mpiexec_argv(ranks)) + [NBODY, *map(str, args), "--model", "lj"]
    return run(argv, env=env, timeout=timeout)


def doc_of(ranks: int, *args, env=ENV) -> dict:
    out = lj(ranks, *args, "--json", env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def _same(a: dict, b: dict, rel: float) -> None:
    assert [t["step"] for t in a["thermo"]] == [t["step"] for t in b["thermo"]]
    for x, y in zip(a["thermo"], b["thermo"]):
        for f in ("temp", "e_pair", "etotal", "press"):
            assert x[f] == pytest.approx(y[f], rel=rel, abs=1e-12), f


@pytest.fixture(scope="module")
def default():
    return doc_of(1, 864, "--steps", 40, "--thermo", 10, "--threads", 1)


def test_the_default_is_every_step_checked(default):
    explicit = doc_of(1, 864, "--steps", 40, "--thermo", 10, "--threads", 1, "--neigh-every", 1, "--neigh-check", "yes")
    assert (default["neigh_every"], default["neigh_check"], default["dangerous_builds"]) == (1, True, 0)
    assert explicit["thermo"] == default["thermo"] and explicit["rebuilds"] == default["rebuilds"]


@pytest.fixture(scope="module")
def unchecked():
    return doc_of(1, 864, "--steps", 40, "--thermo", 10, "--threads", 1, *UNCHECKED)


@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_unchecked_rebuilds_every_k_steps_on_every_rank_count(default, unchecked, ranks):
    """every 10 check no: the start's build and one every 10 steps, nothing counted as dangerous; the ranks
    agree to round-off, and with the default policy as closely as the lists' pairs allow."""
    doc = unchecked if ranks == 1 else doc_of(ranks, 864, "--steps", 40, "--thermo", 10, *UNCHECKED)
    assert (doc["neigh_every"], doc["neigh_check"], doc["dangerous_builds"]) == (10, False, None)
    assert doc["rebuilds"] == 1 + 40 // 10
    _same(doc, unchecked, 1e-11)
    _same(doc, default, 1e-6)


def test_checked_every_k_counts_dangerous_builds():
    """every 10 check yes with a thin skin: the atoms outrun half of it between looks, and each such rebuild
    is counted and shown, as LAMMPS's "Dangerous builds"; with the default skin none are."""
    thin = lj(1, 864, "--steps", 40, "--thermo", 20, "--threads", 1, "--skin", "0.05", "--neigh-every", 10)
    assert thin.returncode == 0, thin.stderr
    assert "5 rebuilds (neigh_modify every 10 check yes: 4 dangerous)" in thin.stdout
    wide = doc_of(1, 864, "--steps", 40, "--thermo", 10, "--threads", 1, "--neigh-every", 5)
    assert wide["dangerous_builds"] == 0 and wide["rebuilds"] >= 2


def test_the_summary_names_an_unchecked_policy():
    out = lj(2, 864, "--steps", 20, "--thermo", 20, *UNCHECKED)
    assert out.returncode == 0, out.stderr
    assert "rebuilds (neigh_modify every 10 check no: not checked)" in out.stdout


@pytest.mark.parametrize("args, match", [
    (["--neigh-every", "0"], "0 is not in the range"),
    (["--neigh-every", "ten"], "'ten' is not a valid integer"),
    (["--neigh-check", "maybe"], "'maybe' is not one of"),
])
def test_bad_policy_refused(args, match):
    refused(lj(1, 500, "--steps", 2, *args, timeout=120), match)


def test_policy_refused_on_gravity_and_on_many_ranks():
    refused(run([NBODY, "500", "--neigh-every", "5"], env=ENV, timeout=60), "--neigh-every applies to --model lj only")
    refused(lj(3, 500, "--steps", 2, "--neigh-check", "sometimes", timeout=120), "'sometimes' is not one of")


def test_restart_keeps_the_policy_bit_for_bit(tmp_path):
    """A checkpoint records the policy: the restart continues with it (and the step count since the last
    build) bit for bit, and refuses another one."""
    ck, ck2 = tmp_path / "half.npz", tmp_path / "straight.npz"
    policy = ("--neigh-every", 7, "--neigh-check", "yes")
    straight = doc_of(2, 864, "--steps", 20, "--thermo", 10, "--checkpoint", ck2, "--checkpoint-every", 10, *policy)
    half = lj(2, 864, "--steps", 10, "--checkpoint", ck, *policy)
    assert half.returncode == 0, half.stderr
    resumed = doc_of(2, 864, "--steps", 20, "--thermo", 10, "--restart", ck)
    assert resumed["neigh_every"] == 7 and resumed["first_step"] == 10
    assert resumed["thermo"][-1] == straight["thermo"][-1]
    refused(lj(1, 864, "--steps", 30, "--restart", ck, "--neigh-every", 5), "was run with --neigh-every 7, not 5")
    refused(lj(1, 864, "--steps", 30, "--restart", ck, "--neigh-check", "no"), "was run with --neigh-check yes")


def test_simulated_gpu_follows_the_policy():
    """The device path under the CUDA simulator takes the same steps with the same policy as the CPU."""
    args = (256, "--steps", 12, "--thermo", 4, "--neigh-every", 5, "--neigh-check", "no")
    cpu = doc_of(1, *args, "--backend", "numba", "--threads", 1)
    gpu = doc_of(1, *args, "--backend", "gpu", env=SIM)
    assert gpu["backend"] == "gpu" and gpu["rebuilds"] == cpu["rebuilds"] == 1 + 12 // 5
    _same(gpu, cpu, 1e-11)
