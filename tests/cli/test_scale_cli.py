"""pympi-scale driven as users drive it, with the real mpiexec at 1, 2 and 3 ranks."""

from __future__ import annotations

import csv
import json
import os
import signal
import statistics
import struct
import subprocess
import time
from pathlib import Path

import pytest

from helpers.commands import run, script
from helpers.scale import SCALE, env, read_jsonl

PI = [script("pympi-pi"), "2e6", "--threads", "1"]


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk (and proof that it is a PNG)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    return struct.unpack(">II", data[16:24])


def test_strong_study_1_2_3_ranks(tmp_path):
    out = tmp_path / "study"
    p = run([SCALE, "--ranks", "1,2,3", "--repeat", "2", "--out", str(out), "--timeout", "240", "--", *PI],
            env=env(), timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Traceback" not in p.stderr
    assert "strong scaling" in p.stdout and "speedup" in p.stdout and "efficiency" in p.stdout

    runs = read_jsonl(out.with_suffix(".jsonl"))
    assert len(runs) == 6 and all(r["ok"] for r in runs)
    by_ranks: dict[int, list[dict]] = {}
    for r in runs:
        assert r["argv"][-len(PI) - 1:] == [*PI, "--json"]
        assert r["record"]["ranks"] == r["ranks"] and r["record"]["app"] == "pi"
        assert r["record"]["samples"] == 2_000_000
        by_ranks.setdefault(r["ranks"], []).append(r["record"])
    assert sorted(by_ranks) == [1, 2, 3]

    doc = json.loads(out.with_suffix(".json").read_text())
    assert doc["schema"] == "pympi_gpu.scale/1" and doc["kind"] == "strong" and doc["complete"]
    assert doc["command"] == PI and doc["work_unit"] == "samples" and doc["baseline_ranks"] == 1
    assert doc["provenance"]["mpi_vendor"]
    t1 = statistics.median(rec["wall_time"] for rec in by_ranks[1])
    for pt in doc["points"]:
        recs = by_ranks[pt["ranks"]]
        t = statistics.median(rec["wall_time"] for rec in recs)
        assert pt["status"] == "ok" and pt["repeats"] == 2
        assert pt["time"] == pytest.approx(t, rel=1e-12)
        assert pt["speedup"] == pytest.approx(t1 / t, rel=1e-12)
        assert pt["efficiency"] == pytest.approx(t1 / t / pt["ranks"], rel=1e-12)
        assert pt["throughput"] == pytest.approx(statistics.median(rec["throughput"] for rec in recs), rel=1e-12)
        assert pt["launcher"] in ("mpiexec", "mpirun")

    with open(out.with_suffix(".csv"), newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["ranks"]) for r in rows] == [1, 2, 3]
    for row, pt in zip(rows, doc["points"]):
        assert row["status"] == "ok" and row["work_unit"] == "samples"
        for col in ("time", "speedup", "efficiency", "throughput"):
            assert float(row[col]) == pytest.approx(pt[col], rel=1e-8)

    w, h = png_size(out.with_suffix(".png"))
    assert 600 <= w <= 3000 and 300 <= h <= 2000, (w, h)
    assert out.with_suffix(".png").stat().st_size > 10_000


def test_subcommand_of_pympi(tmp_path):
    p = run([script("pympi"), "scale", "--help"], env=env(), timeout=60)
    assert p.returncode == 0 and "--ranks" in p.stdout and "--weak" in p.stdout


def test_weak_study_labels(tmp_path):
    out = tmp_path / "weak"
    cmd = [script("pympi-pi"), "1e6", "--per-rank", "--threads", "1"]
    p = run([SCALE, "--ranks", "1,2", "--weak", "--out", str(out), "--", *cmd], env=env(), timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "weak scaling" in p.stdout and "scaled speedup" in p.stdout
    doc = json.loads(out.with_suffix(".json").read_text())
    assert doc["kind"] == "weak"
    t = {pt["ranks"]: pt["time"] for pt in doc["points"]}
    two = doc["points"][1]
    assert two["efficiency"] == pytest.approx(t[1] / t[2], rel=1e-12)  # time-based
    assert two["speedup"] == pytest.approx(2 * t[1] / t[2], rel=1e-12)
    runs = read_jsonl(out.with_suffix(".jsonl"))
    for r in runs:  # the work grew with the ranks
        assert r["record"]["per_rank"] is True
        assert r["record"]["results"][0]["n"] == 1_000_000 * r["ranks"]
    assert all(r["kind"] == "weak" for r in runs)
    # a strong study of the same command refuses the weak study's results file
    p = run([SCALE, "--ranks", "1,2", "--out", str(out), "--", *cmd], env=env(), timeout=120)
    assert p.returncode == 2 and "weak study" in p.stderr and p.stderr.count("Error") == 1


def test_failed_point_is_reported_and_the_study_goes_on(tmp_path):
    # a pympi-pi that breaks at 2 ranks only (every rank of the run exits 3)
    wrapper = tmp_path / "bin" / "flaky-pi"
    wrapper.parent.mkdir()
    wrapper.write_text('#!/bin/sh\nif [ "${PMI_SIZE:-${OMPI_COMM_WORLD_SIZE:-1}}" = 2 ]; then\n'
                       '  echo "flaky-pi: cannot run on 2 ranks" >&2; exit 3\nfi\n'
                       f'exec {script("pympi-pi")} "$@"\n')
    wrapper.chmod(0o755)
    out = tmp_path / "flaky"
    e = env()
    e["PATH"] = f"{wrapper.parent}{os.pathsep}{e['PATH']}"
    p = run([SCALE, "--ranks", "1,2,3", "--out", str(out), "--", "flaky-pi", "1e6", "--threads", "1"],
            env=e, timeout=300)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "2 ranks failed" in p.stdout and "cannot run on 2 ranks" in p.stdout
    doc = json.loads(out.with_suffix(".json").read_text())
    status = {pt["ranks"]: pt for pt in doc["points"]}
    assert status[1]["status"] == "ok" and status[3]["status"] == "ok"  # the study went on
    assert status[2]["status"] == "failed" and status[2]["returncode"] != 0
    assert "cannot run on 2 ranks" in status[2]["error"] + status[2]["stderr_tail"]
    assert status[3]["speedup"] == pytest.approx(status[1]["time"] / status[3]["time"])
    with open(out.with_suffix(".csv"), newline="") as fh:
        rows = {int(r["ranks"]): r for r in csv.DictReader(fh)}
    assert rows[2]["status"] == "failed" and rows[2]["time"] == "" and "exit status" in rows[2]["error"]


def test_interrupted_study_resumes(tmp_path):
    out = tmp_path / "resume"
    jsonl = out.with_suffix(".jsonl")
    argv = [SCALE, "--ranks", "1,2", "--repeat", "2", "--out", str(out), "--", *PI]
    proc = subprocess.Popen(argv, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and (not jsonl.exists() or len(read_jsonl(jsonl)) < 2):
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)  # what Slurm sends at a job's time limit
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stdout + stderr
    assert "interrupted" in stderr and "resume" in stderr
    kept = jsonl.read_bytes()
    first = read_jsonl(jsonl)
    assert 2 <= len(first) < 4 and all(r["ok"] for r in first)
    doc = json.loads(out.with_suffix(".json").read_text())
    assert doc["complete"] is False

    p = run(argv, env=env(), timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"{len(first)} run(s) already done" in p.stderr
    assert jsonl.read_bytes().startswith(kept)  # appended to, never rewritten
    runs = read_jsonl(jsonl)
    keys = [(r["ranks"], r["repeat"]) for r in runs]
    assert sorted(keys) == [(n, i) for n in (1, 2) for i in range(2)]  # nothing ran twice
    assert json.loads(out.with_suffix(".json").read_text())["complete"] is True


def test_preseeded_points_are_not_rerun(tmp_path):
    """A finished run in the results file is used as it is, not run again."""
    out = tmp_path / "seeded"
    cmd = [*PI]
    seeded = {"schema": "pympi_gpu.scale.run/1", "command": cmd, "kind": "strong", "point": "n1", "ranks": 1,
              "nodes": None, "tasks_per_node": None, "repeat": 0, "ok": True, "argv": [], "launcher": "mpiexec",
              "returncode": 0, "elapsed": 9.0, "error": None, "stderr_tail": "",
              "record": {"schema": "pympi_gpu.pi/1", "app": "pi", "ranks": 1, "wall_time": 123.0,
                         "throughput": 2e6 / 123.0, "work_unit": "samples"}}
    out.with_suffix(".jsonl").write_text(json.dumps(seeded) + "\n")
    p = run([SCALE, "--ranks", "1,2", "--out", str(out), "--json", "--", *cmd], env=env(), timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(p.stdout)
    assert doc["points"][0]["time"] == 123.0  # the seeded run, not a new one
    assert doc["points"][1]["speedup"] == pytest.approx(123.0 / doc["points"][1]["time"])
    assert [r["ranks"] for r in read_jsonl(out.with_suffix(".jsonl"))] == [1, 2]
    # --fresh sets the old results aside and runs everything
    p = run([SCALE, "--ranks", "1", "--out", str(out), "--fresh", "--json", "--", *cmd], env=env(), timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert json.loads(p.stdout)["points"][0]["time"] < 123.0
    assert len(read_jsonl(out.with_name("seeded.jsonl.1.bak"))) == 2


def test_without_matplotlib_writes_json_and_csv(tmp_path):
    out = tmp_path / "noplot"
    block = tmp_path / "block" / "matplotlib"
    block.mkdir(parents=True)
    (block / "__init__.py").write_text("raise ImportError('matplotlib blocked for this test')\n")
    p = run([SCALE, "--ranks", "1", "--out", str(out), "--", *PI],
            env=env(PYTHONPATH=str(block.parent)), timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "plot skipped" in p.stderr and "matplotlib" in p.stderr
    assert out.with_suffix(".json").exists() and out.with_suffix(".csv").exists()
    assert not out.with_suffix(".png").exists()


@pytest.mark.parametrize("args, words", [
    (["--ranks", "0,2", "--", "pympi-pi", "1e6"], ">= 1"),
    (["--ranks", "a", "--", "pympi-pi", "1e6"], "not a whole number"),
    (["--ranks", "", "--", "pympi-pi", "1e6"], "empty"),
    (["--ranks", "1,2", "--repeat", "0", "--", "pympi-pi", "1e6"], "repeat"),
    (["--ranks", "1,2"], "no command"),
    (["--", "pympi-pi", "1e6"], "--ranks"),
    (["--nodes", "1,2", "--", "pympi-pi", "1e6"], "--tasks-per-node"),
    (["--ranks", "1", "--nodes", "1", "--tasks-per-node", "2", "--", "pympi-pi", "1e6"], "not both"),
    (["--ranks", "1,2", "--", "no-such-command-xyz"], "not found"),
])
def test_bad_input_exit_2_one_message(tmp_path, args, words):
    p = run([SCALE, *args], env=env(), timeout=60, cwd=tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    assert words in p.stderr and p.stderr.count("Error") == 1 and "Traceback" not in p.stderr
    assert list(tmp_path.iterdir()) == []  # nothing ran, nothing written


def test_refuses_to_run_under_a_launcher(tmp_path):
    p = run([SCALE, "--ranks", "1", "--", *PI], env=env(PMI_SIZE="2", PMI_RANK="0"), timeout=60, cwd=tmp_path)
    assert p.returncode == 2 and "one process" in p.stderr


def test_options_from_the_environment(tmp_path):
    """PYMPI_SCALE_<OPTION> works as in job scripts; a study with nothing left runs nothing."""
    out = tmp_path / "envstudy"
    seeded = {"schema": "pympi_gpu.scale.run/1", "command": PI, "kind": "weak", "point": "n2", "ranks": 2,
              "repeat": 0, "ok": True, "argv": [], "launcher": "mpiexec", "elapsed": 1.0,
              "record": {"schema": "s", "app": "pi", "ranks": 2, "wall_time": 7.0, "throughput": 1.0,
                         "work_unit": "samples"}}
    out.with_suffix(".jsonl").write_text(json.dumps(seeded) + "\n")
    p = run([SCALE, "--", *PI], env=env(PYMPI_SCALE_RANKS="2", PYMPI_SCALE_WEAK="1",
                                        PYMPI_SCALE_OUT=str(out), PYMPI_SCALE_AS_JSON="1"), timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(p.stdout)
    assert doc["kind"] == "weak" and [pt["time"] for pt in doc["points"]] == [7.0]
    assert len(read_jsonl(out.with_suffix(".jsonl"))) == 1


def test_dry_run_shows_each_launch_and_runs_nothing(tmp_path):
    p = run([SCALE, "--ranks", "1,3", "--launcher", "mpiexec", "--dry-run", "--", "pympi-pi", "1e9"],
            env=env(), cwd=tmp_path, timeout=60)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("# 1 rank, 1 thread(s) per rank, 1 cores per node (of ")
    assert lines[2].startswith("# 3 ranks, 1 thread(s) per rank, 3 cores per node (of ")
    assert ": mpiexec (" in lines[0]
    # one thread per rank at every size unless the command says otherwise
    assert lines[1].split()[:3] == ["mpiexec", "-n", "1"] and lines[1].endswith("pympi-pi 1e9 --threads 1 --json")
    assert lines[3].split()[:3] == ["mpiexec", "-n", "3"]
    p = run([SCALE, "--nodes", "1,2", "--tasks-per-node", "3", "--launcher", "mpiexec", "--dry-run", "--",
             "pympi-pi", "1e9"], env=env(), cwd=tmp_path, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "# 2 nodes x 3, 1 thread(s) per rank, 3 cores per node" in p.stdout and "mpiexec -n 6 " in p.stdout
    assert list(tmp_path.iterdir()) == []


def test_threads_fixed_recorded_and_oversubscription_flagged(tmp_path):
    # A node of 2 cores (Slurm's word): 1 and 2 ranks fit, 3 ranks x 1 thread do not.
    out = tmp_path / "st"
    p = run([SCALE, "--ranks", "1,3", "--out", str(out), "--", script("pympi-pi"), "1e5"],
            env=env(SLURM_CPUS_ON_NODE="2"), timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "warning: 3 ranks: 3 rank(s) x 1 thread(s) = 3 cores per node, but a node has 2" in p.stderr
    assert "1 rank:" not in p.stderr.split("warning")[-1]
    doc = json.loads(out.with_suffix(".json").read_text())
    assert doc["threads_per_rank"] == 1 and doc["cores_per_node"] == 2
    rows = {pt["ranks"]: pt for pt in doc["points"]}
    assert rows[1]["threads_per_rank"] == 1 and rows[1]["cores"] == 1 and not rows[1]["oversubscribed"]
    assert rows[3]["cores"] == 3 and rows[3]["oversubscribed"]
    runs = read_jsonl(out.with_suffix(".jsonl"))
    assert all(r["argv"][-3:] == ["--threads", "1", "--json"] for r in runs)
    with open(out.with_suffix(".csv")) as f:
        table = list(csv.DictReader(f))
    assert [(r["ranks"], r["threads_per_rank"], r["cores"], r["oversubscribed"]) for r in table] == [
        ("1", "1", "1", "False"), ("3", "1", "3", "True")]


def test_users_threads_are_kept_and_mixed_backends_are_flagged(tmp_path):
    # 6e7 samples: numba on 1 rank, but small enough per rank for NumPy on 2 (auto picks by work)
    out = tmp_path / "mix"
    p = run([SCALE, "--ranks", "1,2", "--out", str(out), "--", script("pympi-pi"), "6e7", "--threads", "2"],
            env=env(SLURM_CPUS_ON_NODE="8"), timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(out.with_suffix(".json").read_text())
    assert doc["threads_per_rank"] == 2
    # what each point really ran: NumPy has no thread pool
    assert [(pt["threads_per_rank"], pt["cores"]) for pt in doc["points"]] == [(2, 2), (1, 2)]
    assert [pt["backend"] for pt in doc["points"]] == ["numba", "numpy"]
    assert "points ran on different backends (numba, numpy)" in p.stdout
    assert all(r["argv"].count("--threads") == 1 for r in read_jsonl(out.with_suffix(".jsonl")))


def test_where_the_time_goes_and_a_labelled_projection(tmp_path):
    """pympi-pi's phases and traffic reach the table, CSV and JSON per size; --project-nodes predicts."""
    out = tmp_path / "study"
    p = run([SCALE, "--ranks", "1,2", "--out", str(out), "--timeout", "240", "--project-nodes", "1,16,64",
             "--project-tasks-per-node", "56", "--", *PI, "--method", "both"], env=env(), timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "where the time goes" in p.stdout and "Karp-Flatt" in p.stdout
    assert "PROJECTION (a model, not a measurement)" in p.stdout and "HDR-100" in p.stdout
    doc = json.loads(out.with_suffix(".json").read_text())
    for pt in doc["points"]:
        assert set(pt["phases"]) == {"compute", "communication", "waiting", "io"}
        assert pt["phases"]["compute"] > 0 and pt["traffic_per"] == "run"
        assert pt["messages_per_rank"] >= 2  # the allreduce and the gather of the two methods
    assert doc["points"][1]["serial_fraction"] is not None
    proj = doc["projection"]
    assert proj["label"].startswith("projection: a model") and proj["tasks_per_node"] == 56
    assert [r["ranks"] for r in proj["points"]] == [56, 896, 3584]
    assert proj["network"]["bandwidth"] == 12.5e9
    # pympi-pi keeps a + b / P over the rank counts, and says why
    assert proj["model"]["floor"] is None and proj["floor_probes"] == []
    assert "no floor probes: a run of pympi-pi has no steps" in proj["model"]["floor_source"]
    assert not any(r["floor_probe"] for r in read_jsonl(out.with_suffix(".jsonl")))
    effs = [r["efficiency"] for r in proj["points"]]
    assert all(0 < e <= 1.0 + 1e-9 for e in effs) and effs == sorted(effs, reverse=True)
    assert png_size(out.with_suffix(".png"))[0] == 1500  # with the where-the-time-goes panel


def test_projection_needs_phases(tmp_path):
    (tmp_path / "ok.py").write_text(
        "import json\nprint(json.dumps({'schema': 'x/1', 'app': 'fake', 'ranks': 1, 'wall_time': 0.5,"
        " 'throughput': 2.0, 'work_unit': 'samples'}))\n")
    import sys

    p = run([SCALE, "--ranks", "1", "--out", "s", "--project-nodes", "4", "--", sys.executable, "ok.py"],
            env=env(), cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "no projection" in p.stdout and "phases" in p.stdout


def test_a_closed_stdout_is_named_and_a_damaged_results_line_is_refused_by_its_number(tmp_path):
    """(issue 60, items 15 and 14) ``pympi-scale ... > /dev/full`` said ``cannot write a file of --out`` (it was
    stdout), exit 1; a results line without its ``wall_time``, or with ``"repeat": "0"``, ended in KeyError or
    TypeError, exit 1, no report."""
    out = tmp_path / "s"
    study = [SCALE, "--ranks", "1", "--out", str(out), "--timeout", "240", "--", *PI]
    with open("/dev/full", "w") as full:
        p = subprocess.run(study, stdout=full, stderr=subprocess.PIPE, text=True, env=env(), timeout=600)
    assert p.returncode == 141, p.stderr
    said = [line for line in p.stderr.splitlines() if line.startswith(("pympi-scale:", "Error"))]
    assert said == ["pympi-scale: cannot write to stdout (No space left on device): what the command had to print "
                    "there is lost"], p.stderr
    assert read_jsonl(out.with_suffix(".jsonl"))[0]["ok"] and json.loads(out.with_suffix(".json").read_text())
    # the same study again, its reader gone before the table comes (nothing left to run)
    proc = subprocess.Popen(study, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=600) == 141 and "cannot write to stdout (its reader left)" in err, err
    jsonl = out.with_suffix(".jsonl")
    good = jsonl.read_text()
    for damage, words in ((lambda r: r["record"].pop("wall_time"), "its record's 'wall_time' '(none)' is not a "
                                                                   "number of seconds"),
                          (lambda r: r.update(repeat="0"), "its 'repeat' '0' is not a whole number >= 0")):
        line = json.loads(good)
        damage(line)
        jsonl.write_text(json.dumps(line) + "\n")
        before = {f.name: f.read_bytes() for f in tmp_path.iterdir()}
        p = run(study, env=env(), timeout=120)
        assert p.returncode == 2 and p.stderr.count("Error") == 1 and "Traceback" not in p.stderr, p.stderr
        assert f"line 1 is a run of a pympi-scale study, but {words}" in p.stderr, p.stderr
        assert {f.name: f.read_bytes() for f in tmp_path.iterdir()} == before  # nothing written
