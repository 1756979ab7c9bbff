"""pympi-scale's runner with real commands (pympi_gpu.scale.runner): a failed run reported, the rank count
checked, a study that skips what is done and goes past failures, the load before each run recorded.  The
pure parts: tests/unit/test_scale_units.py."""

from __future__ import annotations

import json

import pytest

from helpers.scale import record, run_entry
from pympi_gpu.scale.analysis import summarise
from pympi_gpu.scale.points import Point, make_points
from pympi_gpu.scale.runner import SimpleLaunch, run_once, run_study
from pympi_gpu.scale.store import ResultsStore


def _fake(tmp_path, body):
    """A stand-in command (a Python script) printing a record for PMI-less runs."""
    import sys

    exe = tmp_path / "fake.py"
    exe.write_text(body)
    return [sys.executable, str(exe)]


def test_run_once_reports_failures(tmp_path):
    argv = _fake(tmp_path, "import sys\nsys.stderr.write('line1\\nsomething broke\\n')\nsys.exit(3)\n")
    o = run_once(SimpleLaunch(tuple(argv), "direct"), Point(1), 0, timeout=60)
    assert not o.ok and o.returncode == 3 and o.error == "exit status 3: something broke"
    assert "line1" in o.stderr_tail
    argv = _fake(tmp_path, "import time\ntime.sleep(30)\n")
    o = run_once(SimpleLaunch(tuple(argv), "direct"), Point(1), 0, timeout=0.5)
    assert not o.ok and "timed out" in o.error and o.elapsed < 20
    o = run_once(SimpleLaunch(("/nonexistent/cmd",), "direct"), Point(1), 0)
    assert not o.ok and "cannot start" in o.error


def test_run_once_checks_the_rank_count(tmp_path):
    rec = json.dumps(record(1, 0.1))
    argv = _fake(tmp_path, f"print({rec!r})\n")
    o = run_once(SimpleLaunch(tuple(argv), "direct"), Point(2), 0, timeout=60)
    assert not o.ok and "ran on 1 rank(s), not 2" in o.error


def test_run_study_skips_done_and_moves_past_failures(tmp_path):
    # the fake command reads the rank count from its argv: fails at 2, works elsewhere
    body = ("import json, sys\nn = int(sys.argv[1])\n"
            "if n == 2: sys.exit('no luck at 2')\n"
            f"print(json.dumps(dict({record(1, 0.1)!r}, ranks=n, wall_time=1.0 / n)))\n")
    base = _fake(tmp_path, body)
    calls = []

    def planner(argv, point):
        calls.append((point.ranks, tuple(argv)))
        return SimpleLaunch((*base, str(point.ranks)), "direct")

    store = ResultsStore(tmp_path / "s.jsonl", ["fake"], "strong")
    store.append(run_entry(Point(1), 0, 5.0))  # pre-seeded: must not run again
    pts = make_points(ranks=(1, 2, 3))
    res = run_study(["fake"], pts, 2, planner, store)
    assert [c[0] for c in calls] == [1, 2, 3, 3]  # 2 failed once: its 2nd repeat is not tried
    assert all(c[1] == ("fake", "--json") for c in calls)
    assert res.skipped == 1
    assert [(o.point.ranks, o.repeat, o.ok) for o in res.outcomes] == [(1, 1, True), (2, 0, False),
                                                                      (3, 0, True), (3, 1, True)]
    s = summarise(res.runs, pts, 2, "strong", ["fake"])
    assert s.points[0].times == (5.0, 1.0)
    assert s.points[1].status == "failed" and "no luck at 2" in s.points[1].error
    calls.clear()
    run_study(["fake"], pts, 2, planner, store)  # resume: only the failed point again
    assert [c[0] for c in calls] == [2]


def test_the_load_before_each_run_is_recorded_and_summarised(tmp_path):
    import os

    rec = json.dumps(record(1, 0.1))
    o = run_once(SimpleLaunch(tuple(_fake(tmp_path, f"print({rec!r})\n")), "direct"), Point(1), 0, timeout=60)
    assert o.ok and o.to_run()["load"] == pytest.approx(o.load) and 0 <= o.load <= 10 * (os.cpu_count() or 1)
    pts = make_points(ranks=(1, 2))
    runs = [dict(run_entry(p, i, 1.0 / p.ranks), load=load) for p in pts for i, load in enumerate((0.5, 3.0, 1.0))]
    s = summarise(runs, pts, 3, "strong", ["pympi-pi", "1e6"])
    assert [p.load for p in s.points] == [1.0, 1.0] and s.load_range == (1.0, 1.0)
    old = [run_entry(p, i, 1.0) for p in pts for i in range(3)]  # studies from before the load was kept
    assert summarise(old, pts, 3, "strong", ["pympi-pi", "1e6"]).load_range is None
