"""The tiers of the suite as pytest selects them: the quick one (``-m "not system and not slow"``)
keeps every test file's own tests, the ``slow`` table still names tests that exist, and the
system tier is all of tests/system/.  One ``--collect-only`` of the whole suite, in a subprocess,
with a small plugin that reports each collected test's markers."""

from __future__ import annotations

import json
import sys
from collections import defaultdict

from helpers.commands import ROOT, clean_env, run

REPORTER = r'''
import json, os

def pytest_collection_finish(session):
    from helpers import tiers  # tests/helpers/tiers.py: the SLOW table (tests/ is on sys.path by now)

    items = [{"file": str(item.path.relative_to(session.config.rootpath)),
              "slow": item.get_closest_marker("slow") is not None,
              "system": item.get_closest_marker("system") is not None,
              "name": getattr(item, "originalname", item.name),
              "params": {k: repr(v) for k, v in getattr(getattr(item, "callspec", None), "params", {}).items()}}
             for item in session.items]
    unmatched = []
    for key, rule in tiers.SLOW.items():
        cases = [None] if rule is None else (rule if isinstance(rule, list) else [rule])
        for case in cases:
            hits = [i for i in session.items if tiers.key(i) == key
                    and (case is None or all(getattr(getattr(i, "callspec", None), "params", {}).get(k)
                                             in (v if isinstance(v, tuple) else (v,)) for k, v in case.items()))]
            if not hits:
                unmatched.append(f"{key} {case}")
    with open(os.environ["TIERS_REPORT"], "w") as f:
        json.dump({"items": items, "unmatched": unmatched}, f)
'''


def _collected(tmp_path):
    (tmp_path / "tiers_reporter.py").write_text(REPORTER)
    report = tmp_path / "tiers.json"
    env = clean_env(TIERS_REPORT=str(report), PYTHONPATH=str(tmp_path))
    # -o addopts= : tests/mpi too (test_mpi_suite runs it under mpiexec, with the same SLOW table)
    out = run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
               "-p", "tiers_reporter", "tests"], cwd=ROOT, env=env, timeout=300)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    return json.loads(report.read_text())


def test_the_quick_tier_keeps_every_files_tests_and_the_slow_table_names_real_tests(tmp_path):
    """``-m "not system and not slow"`` leaves at least one test of every file outside tests/system,
    tests/mpi included (run through test_mpi_suite at 3 ranks, with and without the simulator); every entry of
    helpers/tiers.py's SLOW matches a collected test (a renamed test would silently slow the quick tier down);
    every test under tests/system carries ``system``."""
    got = _collected(tmp_path)
    assert got["unmatched"] == [], "SLOW entries that match no test"
    quick, files = defaultdict(list), set()
    for item in got["items"]:
        if item["file"].startswith("tests/system/"):
            assert item["system"], item
            continue
        files.add(item["file"])
        if not (item["slow"] or item["system"]):
            quick[item["file"]].append(item)
    assert files and files == set(quick), f"files left without a quick test: {sorted(files - set(quick))}"
    suite = {(i["name"], i["params"].get("ranks")) for i in quick["tests/cli/test_mpi_suite.py"]}
    assert {("test_mpi_suite", "3"), ("test_mpi_suite_under_the_cuda_simulator", "3")} <= suite


def test_two_workers_keep_a_file_together_and_the_system_tier_on_one():
    """`-n auto`: two workers, each file's tests on one of them (a run of three files with pytest-xdist,
    each test's worker recorded by PYMPI_TEST_CPU); every system test in one group."""
    import tempfile
    from pathlib import Path

    from helpers import tiers

    assert tiers.worker_group("tests/cli/test_a.py::test_x[1-2]") == "tests/cli/test_a.py"
    assert tiers.worker_group("tests/system/test_slurm.py::t") == tiers.worker_group("tests/system/x.py::u")
    containers = {tiers.worker_group(f"tests/system/{name}::t") for name in tiers.CONTAINER_TIERS}
    assert len(containers) == 1 and containers != {tiers.worker_group("tests/system/x.py::u")}
    with tempfile.TemporaryDirectory() as tmp:
        record = Path(tmp) / "ran.jsonl"
        out = run([sys.executable, "-m", "pytest", "-n", "auto", "-p", "no:cacheprovider", "-q",
                   "tests/unit/test_rng.py", "tests/unit/test_counts.py", "tests/unit/test_launch_plan.py"],
                  env=clean_env(PYMPI_TEST_WORKERS="2", PYMPI_TEST_CPU=str(record)), cwd=ROOT, timeout=600)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        lines = [json.loads(line) for line in record.read_text().splitlines()]
    workers = defaultdict(set)
    for line in lines:
        workers[line["test"].split("::")[0]].add(line["worker"])
    assert len(workers) == 3 and all(len(w) == 1 for w in workers.values()), dict(workers)
    assert set().union(*workers.values()) == {"gw0", "gw1"}


def test_a_test_that_times_a_job_runs_while_no_other_test_runs():
    """`-n auto`: the tests of :data:`tiers.ALONE` files run while the other worker runs none (their start
    and end, recorded by PYMPI_TEST_CPU, overlap no other test's), and every test still runs."""
    import tempfile
    from pathlib import Path

    from helpers import tiers

    alone, other = "tests/unit/test_jitcache_dirs.py", "tests/unit/test_lj_model.py"
    assert tiers.alone(f"{alone}::t[1]") and not tiers.alone(f"{other}::t")
    with tempfile.TemporaryDirectory() as tmp:
        record = Path(tmp) / "ran.jsonl"
        out = run([sys.executable, "-m", "pytest", "-n", "auto", "-p", "no:cacheprovider", "-q", alone, other],
                  env=clean_env(PYMPI_TEST_WORKERS="2", PYMPI_TEST_CPU=str(record)), cwd=ROOT, timeout=600)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        lines = [json.loads(line) for line in record.read_text().splitlines()]
    spans = defaultdict(list)
    for line in lines:
        spans[line["test"].split("::")[0]].append((line["start"], line["end"], line["worker"]))
    assert len(spans[alone]) >= 3 and len(spans[other]) >= 10, {k: len(v) for k, v in spans.items()}
    assert {w for *_, w in spans[alone]} != {w for *_, w in spans[other]}  # the two files on the two workers
    for a0, a1, _ in spans[alone]:
        overlapping = [(b0, b1) for b0, b1, _ in spans[other] if b0 < a1 and a0 < b1]
        assert overlapping == [], (a0, a1, overlapping)
