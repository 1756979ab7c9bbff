"""jobs/*.sbatch as files: every script named exists, each is documented and run somewhere, and its header
documents every parameter.  shellcheck and the scripts run: tests/cli/test_jobs.py and tests/system/."""

from __future__ import annotations

import re

import pytest

from helpers.commands import ROOT

JOBS = ROOT / "jobs"
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


def test_every_job_script_named_exists_and_each_is_documented_and_run():
    """The scripts the README, the docs, the recipes and the tests name exist; each script in jobs/
    is shown to users (README or docs/) and run by a test (named in tests/; this check names none)."""
    root = JOBS.parent
    texts = {p: p.read_text() for p in [root / "README.md", *(root / "docs").glob("*.md"), *SCRIPTS,
                                        *(root / "apptainer").glob("*"), *(root / "tests").rglob("*.py")]
             if p.is_file()}
    named = {m for text in texts.values() for m in re.findall(r"\bjobs/([\w.-]+\.sbatch)\b", text)}
    assert named, "nothing names a job script"
    assert named <= {p.name for p in SCRIPTS}, f"named but missing in jobs/: {sorted(named - {p.name for p in SCRIPTS})}"
    docs = [t for p, t in texts.items() if p.suffix == ".md"]
    tests = [t for p, t in texts.items() if p.suffix == ".py"]
    for script in SCRIPTS:
        assert any(script.name in t for t in docs), f"{script.name}: not in the README or docs/"
        assert any(script.name in t for t in tests), f"{script.name}: no test runs it"


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
