"""The README: the commands CI runs, a five-minute read, links that lead somewhere."""

import re

from conftest import ROOT

README = (ROOT / "README.md").read_text()


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    blocks = README.split("```bash", 1)[1].split("```", 1)[0]
    commands = [line for line in blocks.splitlines() if line and not line.startswith("#")]
    assert len(commands) == 2
    install_run, test = commands
    assert "pip install" in install_run and "mpiexec -n 2 pympi-pi" in install_run
    assert "python -m pytest" in test
    assert test in ci.splitlines()


def test_each_command_says_how_long_it_takes():
    comments = [line for line in README.split("```bash", 1)[1].split("```", 1)[0].splitlines()
                if line.startswith("#")]
    assert re.search(r"\d+ s\b", comments[0])  # the first command's time, in its comment
    assert re.search(r"about \d+ minutes", README)  # and the tests'


def test_a_five_minute_read():
    words = len(re.findall(r"\w+", README))
    assert words < 1100, f"{words} words: move the details into docs/"  # ~220 words a minute
    assert len(README.splitlines()) < 120


def test_links_lead_to_files_and_every_docs_page_is_linked():
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    assert targets
    for target in targets:
        if "://" not in target:
            assert (ROOT / target).exists(), target
    linked = {t for t in targets if t.startswith("docs/")}
    mine = {"install", "pi", "nbody", "launching", "containers", "scaling", "benchmarks", "errors",
            "testing", "library"}
    assert {f"docs/{page}.md" for page in mine} <= linked
