"""``pympi-nbody --model lj`` driven as a user drives it: ranks agree, restarts, SIGTERM, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers.commands import clean_env, mpiexec_argv, refused, run, script
from helpers.jobs import sigterm_after_first_checkpoint

NBODY = script("pympi-nbody")
ENV = clean_env(OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")


def lj(ranks: int, *args, timeout: float = 300):
    argv = ([] if ranks == 1 else mpiexec_argv(ranks)) + [NBODY, *map(str, args), "--model", "lj"]
    return run(argv, env=ENV, timeout=timeout)


@pytest.mark.parametrize("args, match", [
    (["3"], "too few for the fcc lattice"),
    (["500", "--density", "0"], "must be > 0"),
    (["500", "--density", "-0.8"], "must be > 0"),
    (["500", "--cutoff", "0"], "must be > 0"),
    (["500", "--cutoff", "nan"], "not a finite number"),
    (["500", "--skin", "-0.1"], "must be >= 0"),
    (["500", "--thermo", "-1"], "-1 is not in the range"),
    (["500", "--softening", "0.1"], "--softening applies to --model gravity only"),
    (["500", "--backend", "numpy"], "runs on --backend numba or gpu"),
    (["500", "--checkpoint-every", "5"], "needs --checkpoint"),
    (["500", "--restart", "/nonexistent-file.npz"], "does not exist"),
    (["4"], "thinner than the cutoff + skin"),
    (["500", "--density", "0.1"], None),  # fine: a dilute gas in a big box
])
def test_bad_input_single_rank(args, match):
    out = lj(1, *args, "--steps", "2")
    if match is None:
        assert out.returncode == 0, out.stderr
    else:
        refused(out, match)


def test_unknown_model_and_lj_option_on_gravity():
    refused(run([NBODY, "500", "--model", "yukawa"], env=ENV, timeout=60), "'yukawa' is not one of")
    refused(run([NBODY, "500", "--cutoff", "3"], env=ENV, timeout=60), "--cutoff applies to --model lj only")


@pytest.mark.parametrize("ranks, args, match", [
    (3, ["256"], "3x1x1 rank grid makes bricks 2.239 sigma thick along x, thinner than the cutoff + skin (2.8)"),
    (2, ["500", "--density", "0"], "must be > 0"),
    (3, ["2", "--steps", "1"], "too few"),
])
def test_bad_input_many_ranks_no_hang(ranks, args, match):
    refused(lj(ranks, *args, timeout=120), match)


@pytest.fixture(scope="module")
def reference():
    out = lj(1, 864, "--steps", 40, "--thermo", 20, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("ranks", [2, 3, 8])
def test_ranks_agree_through_the_cli(reference, ranks):
    """864 atoms (6^3 cells): 3 ranks make uneven bricks, 8 run oversubscribed."""
    out = lj(ranks, 864, "--steps", 40, "--thermo", 20, "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["schema"] == "pympi_gpu.nbody.lj/1" and doc["ranks"] == ranks and sum(doc["atoms_per_rank"]) == 864
    assert len(doc["grid"]) == 3 and np.prod(doc["grid"]) == ranks
    for a, b in zip(doc["thermo"], reference["thermo"]):
        assert a["step"] == b["step"]
        for f in ("temp", "e_pair", "ke", "etotal", "press"):
            assert a[f] == pytest.approx(b[f], rel=1e-11, abs=1e-12), (ranks, f)
    assert doc["momentum_change"] < 1e-10
    assert doc["comm_per_step"] > 0 and doc["rate"] > 0


def test_summary_and_verify():
    out = lj(2, 2048, "--steps", 30, "--thermo", 10, "--verify")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert text.startswith("lj: 2,048 atoms (8^3 fcc cells") and "2x1x1 grid" in text
    assert "verify     PASSED" in text and "atom-steps/s" in text and "halo/migration" in text
    assert "Step         Temp       E_pair" in text
    lines = [ln.split() for ln in text.splitlines() if ln.strip().split()[:1] == ["0"]]
    assert lines[0][1:] == ["1.44", "-6.7733681", "2.1589453", "-4.6144227", "-5.0202628"]


def test_failed_verification_exits_1_on_every_rank():
    """An energy bound no run can meet: the verdict FAILED, exit 1, said once on stderr, no rank left."""
    out = lj(2, 500, "--steps", 20, "--verify", "--energy-tolerance", "1e-15", timeout=120)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "verify     FAILED" in out.stdout and "Traceback" not in out.stderr
    assert out.stderr.count("verification FAILED: energy drift") == 1, out.stderr


@pytest.mark.parametrize("ranks", [2, 3])
def test_restart_continues_bit_for_bit(tmp_path, ranks):
    """A run, and the same run in two halves with a checkpoint between them: the same state bit for bit (issue
    60, item 21: at 2 ranks step 40's E_pair was -5.7166473816872205 straight, ...7222 restarted; a checkpoint
    made the next step rebuild).  The checkpoint falls between two rebuilds (its positions are not those of
    the last rebuild), and the restart's first row is the row the first half printed last."""
    ck = tmp_path / "a.npz"
    straight = lj(ranks, 4000, "--steps", 40, "--json", "-q")
    assert straight.returncode == 0, straight.stderr
    half = lj(ranks, 4000, "--steps", 20, "--checkpoint", ck, "--json", "-q")
    assert half.returncode == 0, half.stderr
    with np.load(ck) as data:
        assert not np.array_equal(data["x"], data["x0"]) and json.loads(str(data["meta"]))["built_at"] < 20
    resumed = lj(ranks, 4000, "--steps", 40, "--restart", ck, "--json", "-q")
    assert resumed.returncode == 0, resumed.stderr
    a, h, b = (json.loads(out.stdout) for out in (straight, half, resumed))
    assert b["first_step"] == 20 and b["restarted_from"] == str(ck)
    assert a["thermo"][-1] == b["thermo"][-1] and h["thermo"][-1] == b["thermo"][0]
    assert a["energy_drift"] == b["energy_drift"]
    if ranks == 2:
        # the restart fixes the physics: a different --dt is refused, a gravity file too
        refused(lj(1, 4000, "--steps", 30, "--restart", ck, "--dt", "0.001"), "was run with --dt 0.005")
        grav = tmp_path / "g.npz"
        assert run([NBODY, "50", "--steps", "1", "--backend", "numpy", "--checkpoint", grav], env=ENV).returncode == 0
        refused(lj(1, 864, "--restart", grav), "expected 'pympi_gpu.nbody.lj.checkpoint/1'")


def test_sigterm_writes_checkpoint_and_resumes(tmp_path):
    path = tmp_path / "ck.npz"
    argv = mpiexec_argv(2) + [NBODY, "864", "--model", "lj", "--steps", "10000000", "--checkpoint", str(path),
                              "--checkpoint-every", "5"]
    sigterm_after_first_checkpoint(argv, path, env=ENV)
    with np.load(path) as data:
        step = json.loads(str(data["meta"]))["step"]
    assert 5 <= step < 10_000_000
    resumed = lj(3, 864, "--steps", step + 3, "--restart", path, "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["last_step"] == step + 3


def test_pympi_scale_drives_the_lj_model(tmp_path):
    out = run([script("pympi-scale"), "--ranks", "1,2", "--out", str(tmp_path / "lj"), "--",
               NBODY, "864", "--model", "lj", "--steps", "10", "--threads", "1"], env=ENV, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    runs = [json.loads(line) for line in (tmp_path / "lj.jsonl").read_text().splitlines()]
    assert sorted(r["ranks"] for r in runs) == [1, 2]
