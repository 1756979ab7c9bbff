"""pympi-scale running, storing and resuming real floor probes of a tiny LJ study, and refusing floor sizes
that are bad or mean nothing.  The probes' plan and the fit: tests/unit/test_scale_floor.py."""

from __future__ import annotations

import json

import pytest

from helpers.commands import run, script
from helpers.scale import SCALE, env, read_jsonl


# --- the command line ---------------------------------------------------------------------------------

def test_a_study_runs_stores_and_resumes_its_floor_probes(tmp_path):
    out = tmp_path / "lj"
    argv = [SCALE, "--ranks", "1,2", "--project-nodes", "1,4", "--project-tasks-per-node", "56", "--out", str(out),
            "--timeout", "240", "--", script("pympi-nbody"), "2000", "--model", "lj", "--steps", "20",
            "--threads", "1"]
    p = run(argv, env=env(), timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "floor probe" in p.stderr and "of it floor" in p.stdout and "floor f" in p.stdout
    runs = read_jsonl(out.with_suffix(".jsonl"))
    probes = [r for r in runs if r["floor_probe"]]
    assert [(r["ranks"], r["size"], r["point"]) for r in probes] == [(2, 500, "n2:size500"), (2, 4000, "n2:size4000")]
    assert all(r["ok"] for r in runs) and not any(r["floor_probe"] for r in runs if r["size"] is None)
    assert [r["record"]["atoms"] for r in probes] == [500, 4000]   # the size argument was replaced
    assert probes[0]["argv"][-8:] == ["500", "--model", "lj", "--steps", "20", "--threads", "1", "--json"]
    doc = json.loads(out.with_suffix(".json").read_text())
    assert [pt["ranks"] for pt in doc["points"]] == [1, 2]   # the probes are not sizes of the study
    proj = doc["projection"]
    model = proj["model"]
    # the values are timings of a shared machine (>= 0 by construction); the points they came from are not
    assert model["floor"] >= 0 and model["per_unit"] > 0 and model["work"] == pytest.approx(2048)
    assert "2 floor probe(s)" in model["floor_source"]
    assert sorted(round(n) for _, n, _ in model["floor_fitted_on"]) == [250, 1024, 2000, 2048]
    assert [(r["size"], r["status"]) for r in proj["floor_probes"]] == [(500, "ok"), (4000, "ok")]
    assert [r["per_rank"] for r in proj["points"]] == pytest.approx([2048 / 56, 2048 / 224])
    assert all(r["floor"] == pytest.approx(model["floor"] * model["units"]) for r in proj["points"])

    kept = out.with_suffix(".jsonl").read_bytes()
    again = run([SCALE, "--json", *argv[1:]], env=env(), timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "4 run(s) already done, 0 to go" in again.stderr
    assert out.with_suffix(".jsonl").read_bytes() == kept   # nothing ran again
    assert json.loads(again.stdout)["projection"]["model"] == model


@pytest.mark.parametrize("args, words", [
    (["--floor-sizes", "0"], ">= 1"),
    (["--floor-sizes", "x"], "not a whole number"),
    (["--floor-sizes", "250", "--no-floor"], "not both"),
])
def test_bad_floor_sizes_exit_2_one_message(tmp_path, args, words):
    p = run([SCALE, "--ranks", "1,2", "--project-nodes", "4", *args, "--", "pympi-nbody", "2000", "--model", "lj"],
            env=env(), timeout=60, cwd=tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    assert words in p.stderr and p.stderr.count("Error") == 1 and "Traceback" not in p.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, words", [
    (["--floor-sizes", "250", "--", "pympi-nbody", "2000"], "go with --project-nodes"),
    (["--project-nodes", "4", "--floor-sizes", "250", "--", "pympi-pi", "1e6"], "pympi-pi has no steps"),
])
def test_floor_sizes_where_they_mean_nothing(tmp_path, args, words):
    p = run([SCALE, "--ranks", "1,2", *args], env=env(), timeout=60, cwd=tmp_path)
    assert p.returncode == 2 and words in p.stderr and "Traceback" not in p.stderr, p.stderr
