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
