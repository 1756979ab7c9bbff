"""What the tests of pympi-scale share: the command, its environment, its results file."""

from __future__ import annotations

import json
import os
from pathlib import Path

from helpers.commands import BIN, clean_env, script

SCALE = script("pympi-scale")


def env(**extra):
    # mpiexec and the pympi-* scripts of this environment, as in an activated venv
    return clean_env(PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', os.defpath)}", **extra)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def record(ranks, wall, work=1e9):
    return {"schema": "x/1", "app": "pi", "ranks": ranks, "wall_time": wall, "throughput": work / wall,
            "work_unit": "samples", "provenance": {"ranks": ranks}}


def run_entry(point, repeat, wall=None, ok=True, error=None):
    return {"point": point.key, "ranks": point.ranks, "repeat": repeat, "ok": ok, "elapsed": 1.0,
            "launcher": "mpiexec", "record": record(point.ranks, wall) if ok else None,
            "error": error, "returncode": None if ok else 3, "stderr_tail": "" if ok else "boom\n"}
