"""Pure parts of pympi-scale: sizes, the results file, record parsing, the table."""

from __future__ import annotations

import json
import os
import re
import statistics

import pytest

from helpers.scale import record, run_entry
from pympi_gpu.scale.analysis import summarise
from pympi_gpu.scale.points import Point, make_points, parse_sizes
from pympi_gpu.scale.runner import REQUIRED_KEYS, parse_record, with_json
from pympi_gpu.scale.store import RUN_SCHEMA, ResultsStore, StudyLocked, StudyMismatch, StudyRefused


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


def test_strong_summary_numbers():
    pts = make_points(ranks=(1, 2, 4))
    times = {1: [10.0, 12.0, 11.0], 2: [6.0, 5.0, 5.5], 4: [4.0, 3.0, 3.5]}
    runs = [run_entry(p, i, times[p.ranks][i]) for p in pts for i in range(3)]
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
    runs = [run_entry(p, 0, w) for p, w in zip(pts, (1.0, 1.25, 2.0))]
    s = summarise(runs, pts, 1, "weak", ["pympi-pi", "1e8", "--per-rank"])
    assert s.kind == "weak" and s.baseline_ranks == 2
    assert [p.efficiency for p in s.points] == pytest.approx([1.0, 0.8, 0.5])
    assert [p.speedup for p in s.points] == pytest.approx([1.0, 1.6, 2.0])
    assert [p.ideal for p in s.points] == pytest.approx([1.0, 2.0, 4.0])


def test_summary_statuses_and_baseline_skips_failures():
    pts = make_points(ranks=(1, 2, 3, 4))
    runs = [run_entry(pts[0], 0, ok=False, error="exit status 3"),
            run_entry(pts[1], 0, 4.0), run_entry(pts[1], 1, ok=False, error="exit status 1"),
            run_entry(pts[2], 0, 2.0), run_entry(pts[2], 1, 2.0)]
    s = summarise(runs, pts, 2, "strong", ["c"])
    assert [p.status for p in s.points] == ["failed", "partial", "ok", "missing"]
    assert s.baseline_ranks == 2
    assert s.points[0].error == "exit status 3" and s.points[0].speedup is None
    assert s.points[2].speedup == pytest.approx(2.0) and s.points[2].efficiency == pytest.approx(2.0 / 1.5)
    assert not s.complete and len(s.failed) == 2


def test_later_success_supersedes_failure():
    p = Point(2)
    s = summarise([run_entry(p, 0, ok=False, error="x"), run_entry(p, 0, 3.0)], [p], 1, "strong", ["c"])
    assert s.points[0].status == "ok" and s.points[0].time == 3.0


def test_store_appends_and_resists_torn_lines(tmp_path):
    path = tmp_path / "s.jsonl"
    store = ResultsStore(path, ["pympi-pi", "1e6"], "strong")
    assert store.load() == []
    store.append(run_entry(Point(1), 0, 1.0))
    first = path.read_bytes()
    with open(path, "a") as fh:  # a write cut short by a crash
        fh.write('{"schema": "' + RUN_SCHEMA + '", "point": "n2", "rep')
    store.append(run_entry(Point(2), 0, 0.5))
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


@pytest.mark.parametrize("change, words", [
    ({"record": {"wall_time": None}}, "its record's 'wall_time' None is not a number of seconds"),
    ({"record": {}}, "its record's 'wall_time' '(none)' is not a number of seconds"),
    ({"repeat": "0"}, "its 'repeat' '0' is not a whole number >= 0"),
    ({"repeat": -1}, "its 'repeat' -1 is not a whole number >= 0"),
    ({"ok": "yes"}, "its 'ok' 'yes' is not true or false"),
    ({"elapsed": float("nan")}, "its 'elapsed' nan is not a number of seconds"),
    ({"record": None}, "it succeeded but holds no record"),
])
def test_a_damaged_line_of_the_study_is_refused_by_its_number(tmp_path, change, words):
    """(was: KeyError or TypeError in the report, exit 1, no report)"""
    from pympi_gpu.scale.store import StudyRefused

    path = tmp_path / "s.jsonl"
    store = ResultsStore(path, ["pympi-pi", "1e6"], "strong")
    store.append(run_entry(Point(1), 0, 1.0))
    bad = run_entry(Point(2), 0, 0.5)
    for key, value in change.items():
        if key == "record" and isinstance(value, dict):
            bad["record"] = {k: v for k, v in bad["record"].items() if k != "wall_time"} | value
        else:
            bad[key] = value
    with open(path, "a") as fh:  # a line changed by hand (NaN too: JSON's readers take it)
        fh.write(json.dumps({"schema": RUN_SCHEMA, "command": ["pympi-pi", "1e6"], "kind": "strong", **bad}) + "\n")
    with pytest.raises(StudyRefused, match=rf"line 2 is a run of a pympi-scale study, but {re.escape(words)}"):
        store.load()


def test_parse_record():
    rec = record(2, 1.5)
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


def test_two_names_of_one_results_file_are_one_study(tmp_path):
    """The lock is on the results file itself: a hard or symbolic link to it is the same study's file
    (was: locked by name, both ran); a link to nothing is refused, its target never made."""
    (tmp_path / "a.jsonl").touch()
    (tmp_path / "b.jsonl").hardlink_to(tmp_path / "a.jsonl")
    (tmp_path / "c.jsonl").symlink_to("a.jsonl")
    (tmp_path / "d.jsonl").symlink_to("nowhere.jsonl")
    store = lambda name: ResultsStore(tmp_path / name, ["pympi-pi", "1e6"], "strong")  # noqa: E731
    with store("a.jsonl").lock():
        for other in ("b.jsonl", "c.jsonl"):
            with pytest.raises(StudyLocked, match=f"{other} is in use by another pympi-scale study"):
                with store(other).lock():
                    pass
    with store("c.jsonl").lock():  # the first let go: the next takes it, under any of its names
        pass
    with pytest.raises(StudyRefused, match="is a symbolic link to nothing"):
        with store("d.jsonl").lock():
            pass
    assert not (tmp_path / "nowhere.jsonl").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl", "b.jsonl", "c.jsonl", "d.jsonl"]


def test_a_results_file_the_lock_made_is_removed_if_no_run_was_written(tmp_path):
    store = ResultsStore(tmp_path / "s.jsonl", ["pympi-pi", "1e6"], "strong")
    with store.lock():
        assert (tmp_path / "s.jsonl").read_bytes() == b""
    assert list(tmp_path.iterdir()) == []
    with store.lock():
        store.append(run_entry(Point(1), 0, 1.0))
    assert [p.name for p in tmp_path.iterdir()] == ["s.jsonl"] and len(store.load()) == 1


def test_planner_names_the_mpi_library_mpi4py_loads(monkeypatch, tmp_path):
    """As pympi-launch: the study's launches use the MPI mpi4py loads (probed once), not the wheel."""
    from pympi_gpu.mpi import launch
    from pympi_gpu.cli.scale import _planner
    from pympi_gpu.scale.points import Point

    calls = []

    def probe(told=None):
        calls.append(told)
        return "intelmpi", "the MPI library mpi4py loads: Intel(R) MPI Library 2021.19"

    monkeypatch.setattr(launch, "probe_mpi", probe)
    monkeypatch.delenv("PYMPI_MPI", raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "1")
    srun = tmp_path / "srun"  # only planned, never run: where Slurm is not installed, a stand-in on PATH
    srun.write_text("#!/bin/sh\nexit 1\n")
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', os.defpath)}")
    monkeypatch.delenv("PYMPI_LAUNCHER", raising=False)
    planner = _planner("srun", None, False)
    first = planner(["pympi-pi", "1e6"], Point(ranks=2))
    planner(["pympi-pi", "1e6"], Point(ranks=3))
    assert calls == [None]  # probed once, and told no MPI (PYMPI_MPI unset)
    assert "--mpi=pmi2" in first.argv, first.argv
    assert "Intel(R) MPI" in first.reason, first.reason
