"""Pure parts of pympi-scale: sizes, the results file, record parsing, the table."""

from __future__ import annotations

import json
import statistics

import pytest

from pympi_gpu.scale.analysis import summarise
from pympi_gpu.scale.points import Point, make_points, parse_sizes
from pympi_gpu.scale.runner import (REQUIRED_KEYS, SimpleLaunch, parse_record, run_once, run_study,
                                    with_json)
from pympi_gpu.scale.store import RUN_SCHEMA, ResultsStore, StudyLocked, StudyMismatch


@pytest.mark.parametrize("text, expected", [("1,2,4", (1, 2, 4)), (" 8, 1 ,2", (1, 2, 8)), ("3", (3,)),
                                            ("1_000", (1000,))])
def test_parse_sizes(text, expected):
    assert parse_sizes(text) == expected


@pytest.mark.parametrize("text, words", [("0,2", ">= 1"), ("a", "'a'"), ("", "empty"), (" , ", "empty"),
                                         ("1,,2", "empty item"), ("-1", ">= 1"), ("2,2", "twice"),
                                         ("1.5", "'1.5'")])
def test_parse_sizes_refuses(text, words):
    with pytest.raises(ValueError, match=words):
        parse_sizes(text)


def test_make_points():
    assert make_points(ranks=(1, 2)) == (Point(1), Point(2))
    pts = make_points(nodes=(1, 2, 4), tasks_per_node=3)
    assert [p.ranks for p in pts] == [3, 6, 12]
    assert [p.key for p in pts] == ["N1x3", "N2x3", "N4x3"]
    with pytest.raises(ValueError):
        make_points(nodes=(1,))
    with pytest.raises(ValueError):
        make_points(ranks=(1,), nodes=(1,), tasks_per_node=1)


def _record(ranks, wall, work=1e9):
    return {"schema": "x/1", "app": "pi", "ranks": ranks, "wall_time": wall, "throughput": work / wall,
            "work_unit": "samples", "provenance": {"ranks": ranks}}


def _run(point, repeat, wall=None, ok=True, error=None):
    return {"point": point.key, "ranks": point.ranks, "repeat": repeat, "ok": ok, "elapsed": 1.0,
            "launcher": "mpiexec", "record": _record(point.ranks, wall) if ok else None,
            "error": error, "returncode": None if ok else 3, "stderr_tail": "" if ok else "boom\n"}


def test_strong_summary_numbers():
    pts = make_points(ranks=(1, 2, 4))
    times = {1: [10.0, 12.0, 11.0], 2: [6.0, 5.0, 5.5], 4: [4.0, 3.0, 3.5]}
    runs = [_run(p, i, times[p.ranks][i]) for p in pts for i in range(3)]
    s = summarise(runs, pts, 3, "strong", ["pympi-pi", "1e9"])
    assert s.baseline_ranks == 1 and s.complete and s.work_unit == "samples" and s.app == "pi"
    for p in s.points:
        t = statistics.median(times[p.ranks])
        assert p.time == t and p.times == tuple(times[p.ranks])
        assert p.speedup == pytest.approx(11.0 / t)
        assert p.efficiency == pytest.approx(11.0 / t / p.ranks)
        assert p.throughput == pytest.approx(statistics.median(1e9 / x for x in times[p.ranks]))
    assert s.points[1].speedup == pytest.approx(2.0)


def test_weak_summary_is_time_based():
    pts = make_points(ranks=(2, 4, 8))
    runs = [_run(p, 0, w) for p, w in zip(pts, (1.0, 1.25, 2.0))]
    s = summarise(runs, pts, 1, "weak", ["pympi-pi", "1e8", "--per-rank"])
    assert s.kind == "weak" and s.baseline_ranks == 2
    assert [p.efficiency for p in s.points] == pytest.approx([1.0, 0.8, 0.5])
    assert [p.speedup for p in s.points] == pytest.approx([1.0, 1.6, 2.0])
    assert [p.ideal for p in s.points] == pytest.approx([1.0, 2.0, 4.0])


def test_summary_statuses_and_baseline_skips_failures():
    pts = make_points(ranks=(1, 2, 3, 4))
    runs = [_run(pts[0], 0, ok=False, error="exit status 3"),
            _run(pts[1], 0, 4.0), _run(pts[1], 1, ok=False, error="exit status 1"),
            _run(pts[2], 0, 2.0), _run(pts[2], 1, 2.0)]
    s = summarise(runs, pts, 2, "strong", ["c"])
    assert [p.status for p in s.points] == ["failed", "partial", "ok", "missing"]
    assert s.baseline_ranks == 2
    assert s.points[0].error == "exit status 3" and s.points[0].speedup is None
    assert s.points[2].speedup == pytest.approx(2.0) and s.points[2].efficiency == pytest.approx(2.0 / 1.5)
    assert not s.complete and len(s.failed) == 2


def test_later_success_supersedes_failure():
    p = Point(2)
    s = summarise([_run(p, 0, ok=False, error="x"), _run(p, 0, 3.0)], [p], 1, "strong", ["c"])
    assert s.points[0].status == "ok" and s.points[0].time == 3.0


def test_store_appends_and_resists_torn_lines(tmp_path):
    path = tmp_path / "s.jsonl"
    store = ResultsStore(path, ["pympi-pi", "1e6"], "strong")
    assert store.load() == []
    store.append(_run(Point(1), 0, 1.0))
    first = path.read_bytes()
    with open(path, "a") as fh:  # a write cut short by a crash
        fh.write('{"schema": "' + RUN_SCHEMA + '", "point": "n2", "rep')
    store.append(_run(Point(2), 0, 0.5))
    assert path.read_bytes().startswith(first)
    runs = store.load()
    assert [r["point"] for r in runs] == ["n1", "n2"] and store.torn_lines == 1
    assert all(json.loads(line) for line in path.read_text().splitlines()[:1])
    with pytest.raises(StudyMismatch, match="another --out"):
        ResultsStore(path, ["pympi-pi", "1e7"], "strong").load()
    with pytest.raises(StudyMismatch):
        ResultsStore(path, ["pympi-pi", "1e6"], "weak").load()
    moved = store.set_aside()
    assert moved.name == "s.jsonl.1.bak" and not path.exists() and moved.exists()


def test_parse_record():
    rec = _record(2, 1.5)
    assert parse_record(json.dumps(rec, indent=2)) == rec
    assert parse_record("banner line\n" + json.dumps(rec, indent=2) + "\n") == rec
    with pytest.raises(ValueError, match="empty"):
        parse_record("")
    with pytest.raises(ValueError, match="no JSON object"):
        parse_record("pi ~= 3.14\n")
    with pytest.raises(ValueError, match="lacks"):
        parse_record(json.dumps({k: 1 for k in REQUIRED_KEYS if k != "throughput"}))


def test_with_json():
    assert with_json(["pympi-pi", "1e6"]) == ["pympi-pi", "1e6", "--json"]
    assert with_json(["pympi-pi", "--json", "1e6"]) == ["pympi-pi", "--json", "1e6"]


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
    rec = json.dumps(_record(1, 0.1))
    argv = _fake(tmp_path, f"print({rec!r})\n")
    o = run_once(SimpleLaunch(tuple(argv), "direct"), Point(2), 0, timeout=60)
    assert not o.ok and "ran on 1 rank(s), not 2" in o.error


def test_run_study_skips_done_and_moves_past_failures(tmp_path):
    # the fake command reads the rank count from its argv: fails at 2, works elsewhere
    body = ("import json, sys\nn = int(sys.argv[1])\n"
            "if n == 2: sys.exit('no luck at 2')\n"
            f"print(json.dumps(dict({_record(1, 0.1)!r}, ranks=n, wall_time=1.0 / n)))\n")
    base = _fake(tmp_path, body)
    calls = []

    def planner(argv, point):
        calls.append((point.ranks, tuple(argv)))
        return SimpleLaunch((*base, str(point.ranks)), "direct")

    store = ResultsStore(tmp_path / "s.jsonl", ["fake"], "strong")
    store.append(_run(Point(1), 0, 5.0))  # pre-seeded: must not run again
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


def test_a_held_lock_refuses_but_a_filesystem_without_flock_runs_unguarded(tmp_path, monkeypatch):
    import errno
    import fcntl

    store = ResultsStore(tmp_path / "s.jsonl", ["pympi-pi", "1e6"], "strong")

    def held(fd, op):
        raise BlockingIOError(errno.EWOULDBLOCK, "Resource temporarily unavailable")

    monkeypatch.setattr(fcntl, "flock", held)
    with pytest.raises(StudyLocked, match="in use by another pympi-scale study"):
        with store.lock():
            pass

    def unsupported(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", unsupported)
    with store.lock():
        assert "No locks available" in store.unlocked_reason and "does not support flock" in store.unlocked_reason


def test_the_load_before_each_run_is_recorded_and_summarised(tmp_path):
    import os

    rec = json.dumps(_record(1, 0.1))
    o = run_once(SimpleLaunch(tuple(_fake(tmp_path, f"print({rec!r})\n")), "direct"), Point(1), 0, timeout=60)
    assert o.ok and o.to_run()["load"] == pytest.approx(o.load) and 0 <= o.load <= 10 * (os.cpu_count() or 1)
    pts = make_points(ranks=(1, 2))
    runs = [dict(_run(p, i, 1.0 / p.ranks), load=load) for p in pts for i, load in enumerate((0.5, 3.0, 1.0))]
    s = summarise(runs, pts, 3, "strong", ["pympi-pi", "1e6"])
    assert [p.load for p in s.points] == [1.0, 1.0] and s.load_range == (1.0, 1.0)
    old = [_run(p, i, 1.0) for p in pts for i in range(3)]  # studies from before the load was kept
    assert summarise(old, pts, 3, "strong", ["pympi-pi", "1e6"]).load_range is None
