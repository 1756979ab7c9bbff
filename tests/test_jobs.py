"""jobs/*.sbatch: clean under shellcheck, with #SBATCH lines and every parameter documented."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import need_tool, run

JOBS = Path(__file__).resolve().parent.parent / "jobs"
SCRIPTS = sorted(JOBS.glob("*.sbatch"))
#: NAME=${NAME:-default} or NAME=${NAME-default}: a parameter taken from the environment
PARAM = re.compile(r"^\s*([A-Z_][A-Z0-9_]*)=\$\{\1:?-", re.M)


def header(text: str) -> str:
    """The comment block at the top of a script (up to its first command)."""
    lines = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            break
        lines.append(line)
    return "\n".join(lines)


def test_the_job_scripts_exist():
    names = {p.name for p in SCRIPTS}
    assert {"frontera-clx-pi.sbatch", "frontera-rtx-nbody.sbatch", "generic-srun.sbatch"} <= names


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_header_documents_every_parameter(path):
    text = path.read_text()
    assert text.startswith("#!/bin/bash\n")
    head = header(text)
    assert re.search(r"^#SBATCH --?\w", head, re.M), "no #SBATCH lines in the header"
    params = PARAM.findall(text)
    assert params, "no parameters from the environment"
    for name in params:
        assert re.search(rf"^#.*\b{name}\b", head, re.M), f"{name} is not documented in the header"


@pytest.mark.system
def test_shellcheck_is_clean():
    need_tool("shellcheck")
    out = run(["shellcheck", *map(str, SCRIPTS)], timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.system
def test_shellcheck_would_catch_a_bad_script(tmp_path):
    need_tool("shellcheck")
    bad = tmp_path / "bad.sbatch"
    bad.write_text("#!/bin/bash\n#SBATCH -n 2\nSAMPLES=${SAMPLES:-1e8}\nsrun pympi-pi $SAMPLES\n")
    out = run(["shellcheck", str(bad)], timeout=60)
    assert out.returncode != 0 and "SC2086" in out.stdout
