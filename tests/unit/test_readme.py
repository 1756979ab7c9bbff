"""The README: CI runs its test command, each command says how long it takes, its links lead to files
and every docs page is reached from it.  Its first command run: tests/cli/test_readme_first_command.py."""

import re

from helpers.commands import ROOT
from helpers.docs import README, readme_commands


def test_ci_runs_the_readme_test_command():
    """The command the README gives for the tests is a line of .ci/run, as written."""
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    tests = [c for c in readme_commands() if "pytest" in c]
    assert tests, "the README gives no command that runs the tests"
    for command in tests:
        assert command in ci, f"CI does not run the README's {command!r}"


def test_each_command_says_how_long_it_takes():
    comments = [line for line in README.split("```bash", 1)[1].split("```", 1)[0].splitlines()
                if line.startswith("#")]
    assert re.search(r"\d+ s\b", comments[0])  # the first command's time, in its comment
    assert re.search(r"about \d+ minutes", README)  # and the tests'


def _links(path):
    """Local targets of the Markdown links of a page, relative to the repository root."""
    text = path.read_text()
    found = []
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" not in target:
            found.append((path.parent / target).resolve().relative_to(ROOT))
    if path.name == "index.md" and "```{toctree}" in text:  # the docs site's own table of contents
        toctree = text.split("```{toctree}", 1)[1].split("```", 1)[0].split()
        found += [(path.parent / f"{name}.md").resolve().relative_to(ROOT)
                  for name in toctree if not name.startswith(":")]
    return found


def test_links_lead_to_files_and_every_docs_page_is_reachable():
    """Every local link of the README exists, and every page of docs/ is reached from it by links."""
    targets = _links(ROOT / "README.md")
    assert targets
    for target in targets:
        assert (ROOT / target).exists(), target
    seen, todo = set(), [t for t in targets if t.suffix == ".md"]
    while todo:
        page = todo.pop()
        if page in seen or not (ROOT / page).exists():
            continue
        seen.add(page)
        todo += [t for t in _links(ROOT / page) if t.suffix == ".md"]
    pages = {p.relative_to(ROOT) for p in (ROOT / "docs").glob("*.md")}
    assert pages <= seen, f"not reachable from the README: {sorted(map(str, pages - seen))}"
