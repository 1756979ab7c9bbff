"""A run that pympi-scale ends (--timeout) leaves nothing behind: no checkpoint of its own, no rank.

Before: the study ended a timed-out run with SIGTERM, which the ranks answer
as a stop request, so each timed-out n-body run wrote
``pympi-nbody-N.ckpt.npz`` into the working directory for a run no one
resumes.  Now the launcher and every process below it get SIGKILL at once.
A row of docs/faults.md.
"""

from __future__ import annotations

import json
import time

from helpers.commands import env, script, timed

SCALE = script("pympi-scale")
NBODY = script("pympi-nbody")


def _ranks_of(marker: str) -> list[int]:
    from pathlib import Path

    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker.encode() in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def test_a_timed_out_run_leaves_no_checkpoint_and_no_rank(tmp_path):
    bodies = "20011"  # a count no other test runs: how this test finds its own ranks
    p, took = timed([SCALE, "--ranks", "2", "--timeout", "5", "--out", "study", "--", NBODY, bodies,
                     "--steps", "1000000", "--threads", "1", "--backend", "numba"], cwd=tmp_path, env=env())
    assert p.returncode != 0 or "no successful point" in p.stderr + p.stdout, p.stdout + p.stderr
    runs = [json.loads(line) for line in (tmp_path / "study.jsonl").read_text().splitlines()]
    assert [r["error"] for r in runs] == ["timed out after 5 s"], runs
    assert sorted(f.name for f in tmp_path.iterdir()) == ["study.csv", "study.json", "study.jsonl"]
    time.sleep(0.5)
    assert _ranks_of(f"pympi-nbody\0{bodies}\0") == [], "ranks of the timed-out runs still run"
