"""Thermo as it happens: rows printed when computed, a CSV or YAML log flushed per row, both models.

The log is read back with independent readers (the csv module, PyYAML) and
compared with the run's JSON record; a run killed mid-way keeps every row it
printed; a restart continues the log without repeating a step.
"""

from __future__ import annotations

import csv
import json
import os
import signal

import pytest
import yaml

from helpers.commands import env, mpiexec_argv, one_message, run, script
from helpers.jobs import job
from pympi_gpu.run.thermolog import format_of, last_step

NBODY = script("pympi-nbody")
LJ_KEYS = ["Step", "Temp", "E_pair", "KinEng", "TotEng", "Press"]
GRAVITY_KEYS = ["Step", "KinEng", "PotEng", "TotEng", "Virial", "Px", "Py", "Pz"]


def nbody(ranks, *args, timeout=300):
    return run(mpiexec_argv(ranks) + [NBODY, *map(str, args), "--threads", "1", "-q"], timeout=timeout, env=env())


def read_log(path):
    if format_of(path) == "csv":
        with open(path, newline="") as fh:
            rows = [r for r in csv.reader(fh) if not r[0].startswith("#")]  # the line naming the run
        return rows[0], [[float(v) for v in r] for r in rows[1:]]
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    keys = docs[0]["keywords"]
    assert all(d["keywords"] == keys for d in docs)
    return keys, [row for d in docs for row in d["data"]]


@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("suffix", [".csv", ".yaml"])
def test_lj_log_holds_the_records_rows(tmp_path, ranks, suffix):
    path = tmp_path / f"thermo{suffix}"
    out = nbody(ranks, 2048, "--model", "lj", "--steps", 30, "--thermo", 10, "--thermo-file", path, "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    keys, rows = read_log(path)
    assert keys == LJ_KEYS
    assert [r[0] for r in rows] == [0, 10, 20, 30]
    for r, t in zip(rows, doc["thermo"]):
        assert r[1:] == [t["temp"], t["e_pair"], t["ke"], t["etotal"], t["press"]]  # every digit kept


@pytest.mark.parametrize("ranks", [2, 3])
def test_gravity_gets_thermo_rows_every_k_steps(tmp_path, ranks):
    path = tmp_path / "g.csv"
    out = nbody(ranks, 1500, "--steps", 20, "--thermo", 5, "--thermo-file", path, "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    keys, rows = read_log(path)
    assert keys == GRAVITY_KEYS
    assert [r[0] for r in rows] == [t["step"] for t in doc["thermo"]] == [0, 5, 10, 15, 20]
    first, last = doc["thermo"][0], doc["thermo"][-1]
    assert first == doc["initial"] and last == doc["final"]
    for r, t in zip(rows, doc["thermo"]):
        assert r[1:4] == [t["kinetic"], t["potential"], t["energy"]]
        assert r[4] == pytest.approx(-2 * t["kinetic"] / t["potential"])   # the virial ratio
        assert r[5:] == t["momentum"]
    assert 0.9 < rows[0][4] < 1.1   # a Plummer sphere starts in virial equilibrium


@pytest.mark.parametrize("model", ["gravity", "lj"])
def test_a_restart_continues_the_log_without_repeating_a_step(tmp_path, model):
    size, extra = (1500, []) if model == "gravity" else (2048, ["--model", "lj"])
    log, ck = tmp_path / "t.yaml", tmp_path / "c.npz"
    first = nbody(2, size, *extra, "--steps", 20, "--thermo", 10, "--thermo-file", log, "--checkpoint", ck)
    assert first.returncode == 0, first.stderr
    again = nbody(2, size, *extra, "--steps", 40, "--thermo", 10, "--thermo-file", log, "--restart", ck)
    assert again.returncode == 0, again.stderr
    _, rows = read_log(log)
    assert [r[0] for r in rows] == [0, 10, 20, 30, 40]
    assert last_step(log) == 40


def test_rows_are_printed_as_they_are_computed_and_a_killed_job_keeps_them(tmp_path):
    log = tmp_path / "live.csv"
    argv = mpiexec_argv(2) + [NBODY, "4000", "--model", "lj", "--steps", "1000000", "--thermo", "20",
                              "--thermo-file", str(log), "--threads", "1", "-q"]
    seen = []
    with job(argv) as proc:
        for line in proc.stdout:
            parts = line.split()
            if parts and parts[0].isdigit():
                seen.append(int(parts[0]))
                if len(seen) == 3:
                    break
        else:
            pytest.fail(f"the run ended after the rows of steps {seen}: {proc.communicate(timeout=60)}")
        assert proc.poll() is None  # the rows came while the run went on
        os.killpg(proc.pid, signal.SIGKILL)  # no chance to close anything
    assert seen == [0, 20, 40]
    _, rows = read_log(log)
    assert [int(r[0]) for r in rows][:3] == seen


def test_bad_thermo_file_is_refused_before_the_run(tmp_path):
    one_message(nbody(2, 500, "--thermo-file", tmp_path / "t.txt"), "the suffix must be one of")
    one_message(nbody(2, 500, "--model", "lj", "--thermo-file", tmp_path / "no" / "t.csv"), "does not exist")


def test_json_stdout_stays_one_object_with_thermo(tmp_path):
    out = nbody(2, 2048, "--model", "lj", "--steps", 10, "--thermo", 5, "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["last_step"] == 10, out.stdout


def test_no_thermo_with_benchmark():
    out = nbody(2, 1000, "--steps", 3, "--benchmark", "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["thermo"] == []
