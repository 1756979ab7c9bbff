"""Where the time goes (pympi_gpu.run.phases) in the n-body records: measured at 2 and 3 ranks,
traffic checked against what the exchanges must send."""

from __future__ import annotations

import json

import pytest

from helpers.commands import ROOT, script

NBODY = script("pympi-nbody")


def _check_phases(doc):
    ph = doc["phases"]
    assert set(ph) == {"compute", "communication", "waiting", "io"}
    for name, s in ph.items():
        assert 0 <= s["mean"] <= s["max"] + 1e-12, name
    # compute is what the steps spent outside MPI and I/O: the phases add up to the wall time (and the
    # I/O of the last checkpoint, written after the timed steps)
    inside = sum(ph[k]["max"] for k in ("compute", "communication", "waiting", "io"))
    assert ph["compute"]["max"] > 0 and inside >= 0.9 * doc["wall_time"], (ph, doc["wall_time"])
    return ph, doc["traffic"]


@pytest.mark.parametrize("ranks", [2, 3])
def test_gravity_ring_traffic_is_what_the_ring_sends(mpirun, ranks):
    n = 3001  # uneven blocks at 3 ranks: 1001, 1000, 1000
    out = mpirun(ranks, NBODY, str(n), "--steps", "5", "--precision", "fp32", "--threads", "1", "--json", "-q")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    ph, tr = _check_phases(doc)
    counts = [n // ranks + (1 if r < n % ranks else 0) for r in range(ranks)]
    # each step rank r passes on every block but its right neighbour's (4 fp32 values a body),
    # and the step's agreement: two int32 (the stop signal, a non-finite state); the last step's
    # thermo row (the energies) passes the blocks round the ring once more, without the agreement
    ring = [16 * (n - counts[(r + 1) % ranks]) for r in range(ranks)]
    sent = [(5 * (b + 8) + b) / 5 for b in ring]
    assert tr["per"] == "step"
    assert tr["bytes"]["max"] == pytest.approx(max(sent)) and tr["bytes"]["mean"] == pytest.approx(sum(sent) / ranks)
    # P - 1 blocks and the flag a step, P - 1 blocks for the energies
    assert tr["messages"]["max"] == tr["messages"]["mean"] == pytest.approx((5 * ranks + ranks - 1) / 5)
    assert ph["io"]["max"] == 0


def test_gravity_checkpoints_are_io(mpirun, tmp_path):
    out = mpirun(2, NBODY, "2000", "--steps", "6", "--checkpoint", str(tmp_path / "c.npz"), "--checkpoint-every",
                 "2", "--threads", "1", "--json", "-q")
    assert out.returncode == 0, out.stderr
    ph, _ = _check_phases(json.loads(out.stdout))
    assert ph["io"]["max"] > 0


@pytest.mark.parametrize("ranks", [2, 3])
def test_lj_halo_traffic_and_phases(mpirun, ranks):
    out = mpirun(ranks, NBODY, "4000", "--model", "lj", "--steps", "40", "--threads", "1", "--json", "-q")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    ph, tr = _check_phases(doc)
    assert tr["per"] == "step"
    # the timed steps' rebuilds (the slowest rank's seconds) over their count: the record's rebuilds less
    # the start's build, which is not timed
    assert doc["rebuilds"] > 1 and doc["rebuild_time"] > 0
    assert doc["time_per_rebuild"] == pytest.approx(doc["rebuild_time"] / (doc["rebuilds"] - 1))
    # per step at least: the rebuild check and the stop flag (one reduction), the forward halo along the
    # split dimension and the ghosts' forces back (one message each at 2 ranks, whose one neighbour is on
    # both sides; two at 3) with most of a face of ghosts
    assert tr["messages"]["mean"] >= (3 if ranks == 2 else 5)
    box = doc["box"][0]  # a cube
    face = 0.8442 * box ** 2 * (doc["cutoff"] + doc["skin"])  # atoms within the halo of one face
    assert tr["bytes"]["mean"] > 0.5 * 2 * face * 24
    assert ph["communication"]["max"] > 0 and ph["waiting"]["max"] > 0


def test_lj_trace_says_which_rank_waits_for_which(mpirun, tmp_path):
    """``benchmarks/lj.py --mode trace`` at 3 ranks (an odd split): the ranks' stamps compared step by step."""
    import sys

    out = tmp_path / "trace.json"
    done = mpirun(3, sys.executable, str(ROOT / "benchmarks" / "lj.py"), "--mode", "trace", "--steps", "60",
                  "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 5 and "3 rank(s)" in done.stdout  # the title, the header, a line a rank
    doc = json.loads(out.read_text())
    assert doc["atoms"] == 500 and doc["steps"] == 60 and [r["rank"] for r in doc["ranks"]] == [0, 1, 2]
    for r in doc["ranks"]:
        assert r["step_us"] > 0 and r["between_steps_us"] > 0
        assert r["late_at_reduction_us"] >= 0
        # no rank leaves the reduction before the last one reached it; what it waited is the rest
        assert 0 <= r["reduction_after_the_last_us"] <= r["reduction_us"]
        assert r["posts_us_per_step"] > 0 and r["waits_us_per_step"] > 0  # the bricks' halo is other ranks
    # at every step some rank arrived last: the shares add up to every step (ties only add)
    assert sum(r["last_at_reduction"] for r in doc["ranks"]) >= 1.0 - 1e-9
