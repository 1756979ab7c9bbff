"""The README: its first command works as it says, CI runs its test command, links lead somewhere."""

import re
import shlex

from helpers.commands import ROOT, mpiexec_argv, run, script
from pympi_gpu.rng import count_hits_numpy, seed_key

README = (ROOT / "README.md").read_text()


def _commands():
    """The command lines of the README's first ``bash`` block (its "Two commands")."""
    block = README.split("```bash", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def test_ci_runs_the_readme_test_command():
    """The command the README gives for the tests is a line of .ci/run, as written."""
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    tests = [c for c in _commands() if "pytest" in c]
    assert tests, "the README gives no command that runs the tests"
    for command in tests:
        assert command in ci, f"CI does not run the README's {command!r}"


def test_the_first_command_runs_pi_as_it_says():
    """What the first command runs after installing (``mpiexec -n 2 pympi-pi 1e7``) works here.

    Its segments after ``pip install`` are run with this environment's commands and MPI
    (the install itself is this environment's); the estimate printed is the serial
    count of the same random stream (NumPy's counter), over the ranks the command asks for.
    """
    first = _commands()[0]
    segments = [shlex.split(part) for part in first.split("&&")]
    installed = next(i for i, words in enumerate(segments) if words[:2] == ["pip", "install"])
    after = segments[installed + 1:]
    assert after, "the first command installs and then runs nothing"
    for words in after:
        ranks = 1
        if words[0] == "mpiexec":
            assert words[1] == "-n", words
            ranks, words = int(words[2]), words[3:]
        out = run(mpiexec_argv(ranks) + [script(words[0]), *words[1:]], timeout=300)
        assert out.returncode == 0, out.stderr
        if words[0] == "pympi-pi":
            hits, n = (int(x.replace(",", "")) for x in re.search(r"hits\s+([\d,]+) of ([\d,]+)", out.stdout).groups())
            seed = int(re.search(r"\bseed (\d+)", out.stdout).group(1))
            assert f"ranks {ranks}," in out.stdout
            assert n == int(float(words[1])) and hits == count_hits_numpy(seed_key(seed), 0, n), out.stdout


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
