"""``pympi-nbody --model lj --precision mixed`` as users run it: agreement with double, ``--verify`` against
double, the record and checkpoint that say it, restarts in the same and the other precision, refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers.commands import clean_env, mpiexec_argv, refused, run, script

NBODY = script("pympi-nbody")
ENV = clean_env(OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")


def lj(ranks: int, *args, timeout: float = 300):
    argv = ([] if ranks == 1 else mpiexec_argv(ranks)) + [NBODY, *map(str, args), "--model", "lj"]
    out = run(argv, env=ENV, timeout=timeout)
    assert out.returncode == 0, out.stderr
    return out


def test_mixed_precision_is_double_to_single_precision_and_verified_against_double():
    """4,000 atoms of bench/in.lj, 100 steps: the thermo within 1e-5 of the double run's, ``--verify``'s forces
    (a direct sum in double) within the mixed bound, and the record says the precision."""
    double = json.loads(lj(1, 4000, "--steps", 100, "--thermo", 50, "--json").stdout)
    mixed = json.loads(lj(1, 4000, "--steps", 100, "--thermo", 50, "--json", "--verify",
                          "--precision", "mixed").stdout)
    assert (double["precision"], mixed["precision"]) == ("fp64", "mixed") and mixed["written_in"] is None
    assert [t["step"] for t in mixed["thermo"]] == [0, 50, 100]
    for a, b in zip(mixed["thermo"], double["thermo"]):
        for f in ("temp", "e_pair", "etotal", "press"):
            assert a[f] == pytest.approx(b[f], rel=1e-5, abs=1e-5), f
    assert mixed["thermo"][-1]["e_pair"] != double["thermo"][-1]["e_pair"]  # computed apart
    # the lists are built in double in both: the same rebuilds, the same pairs
    assert (mixed["rebuilds"], mixed["neighbors_per_atom"]) == (double["rebuilds"], double["neighbors_per_atom"])
    check = mixed["verification"]
    assert check["passed"] and check["error_bound"] == 1e-5 and 1e-9 < check["max_error"] < 1e-5


def test_a_restart_continues_its_precision_and_may_change_it(tmp_path):
    """Over 2 ranks: a mixed run in two halves is the straight run bit for bit (the checkpoint says mixed, and
    a restart that names no precision keeps it); the same checkpoint continued in double is allowed, and the
    summary says so."""
    ck = tmp_path / "m.npz"
    straight = json.loads(lj(2, 2048, "--steps", 40, "--precision", "mixed", "--json", "-q").stdout)
    lj(2, 2048, "--steps", 20, "--precision", "mixed", "--checkpoint", ck, "-q")
    with np.load(ck) as data:
        assert json.loads(str(data["meta"]))["precision"] == "mixed"
    resumed = json.loads(lj(2, 2048, "--steps", 40, "--restart", ck, "--json", "-q").stdout)
    assert (resumed["precision"], resumed["written_in"]) == ("mixed", "mixed")
    assert resumed["thermo"][-1] == straight["thermo"][-1]
    text = lj(2, 2048, "--steps", 30, "--restart", ck, "--precision", "fp64").stdout
    assert f"restarted from {ck} (written in mixed, continued in fp64)" in text
    assert "mixed precision" not in text.splitlines()[0]
    text = lj(1, 2048, "--steps", 30, "--restart", ck).stdout
    assert text.splitlines()[0].endswith(", mixed precision") and "continued in" not in text


def test_a_precision_of_another_model_is_refused():
    refused(run([NBODY, "500", "--model", "lj", "--precision", "fp32"], env=ENV, timeout=60),
            "'fp32' is not one of 'fp64', 'mixed'")
    refused(run([NBODY, "500", "--precision", "mixed"], env=ENV, timeout=60), "'mixed' is not one of 'fp32', 'fp64'")
