"""The documentation read, nothing run: every page is in the toctree, the extraction of command lines
finds every kind of block, and every ``pympi*`` command line in a ``bash``/``console``/``sh`` (or
unlabelled) block of the docs and the README parses with the command's own click parser: options
exist, values convert (a wrong option is caught).  The site built and its ``console`` blocks run:
tests/cli/test_docs.py."""

from __future__ import annotations

import os
import shlex

import click
import pytest

from helpers.docs import DOCS, NAMES, PAGES, blocks, console_examples, logical_lines
from pympi_gpu.cli import COMMANDS
from pympi_gpu.cli.common import lazy

SHELL_BLOCKS = {"", "bash", "console", "sh", "shell"}


def command_lines(pages=PAGES):
    """``(where, argv)`` of every pympi command line in the shell blocks of the pages."""
    found = []
    for page in pages:
        for info, line0, body in blocks(page):
            if info not in SHELL_BLOCKS:
                continue
            for i, line in enumerate(logical_lines(body)):
                if info == "console" and not line.startswith("$ "):
                    continue  # output
                line = line.removeprefix("$ ")
                try:
                    words = shlex.split(line, comments=True)
                except ValueError:
                    continue
                segment: list[str] = []
                for w in words + ["&&"]:
                    if w in ("&&", "||", ";", "|"):
                        start = next((k for k, t in enumerate(segment) if t in NAMES), None)
                        if start is not None:
                            found.append((f"{page.name}:{line0 + i}", segment[start:]))
                        segment = []
                    else:
                        segment.append(w)
    return found


def check_parses(argv: list[str], where: str) -> None:
    """Parse argv with the command's own click parser; recurse into COMMAND of launch/scale."""
    name, args = argv[0], argv[1:]
    if name == "pympi":
        assert args and args[0] in COMMANDS, f"{where}: pympi needs a subcommand: {argv}"
        name, args = f"pympi-{args[0]}", args[1:]
    if any(a in ("-h", "--help", "--version") for a in args):
        return
    command = lazy(COMMANDS[name.removeprefix("pympi-")])()
    try:
        with command.make_context(name, list(args)) as ctx:
            inner = list(ctx.params.get("command") or ())
    except click.ClickException as exc:
        pytest.fail(f"{where}: {shlex.join(argv)}: {exc.format_message()}")
    if inner and os.path.basename(inner[0]) in NAMES:
        check_parses([os.path.basename(inner[0]), *inner[1:]], where)


def test_every_page_is_in_the_toctree():
    index = (DOCS / "index.md").read_text()
    toctree = index.split("```{toctree}", 1)[1].split("```", 1)[0].split()
    for page in DOCS.glob("*.md"):
        assert page.stem == "index" or page.stem in toctree, page.name


def test_the_extraction_finds_every_kind_of_command_line(tmp_path):
    """What the parse test reads: commands in bash, console ($ lines) and unlabelled blocks, joined
    continuations, chains, launcher and environment prefixes; not output, not text blocks."""
    page = tmp_path / "page.md"
    page.write_text("""
```bash
python3 -m venv .venv && mpiexec -n 2 pympi-pi 1e7   # a chain
pympi-nbody 64 \\
    --steps 5
```

```console
$ PYMPI_PI_SEED=7 pympi-pi 1e5
pympi-pi 1e9 is output here, not a command
$ echo $?
0
```

```
srun -n 2 pympi-launch -n 2 -- pympi-pi 1e5
```

```text
pympi-scale --ranks 1,2 -- pympi-pi 1e6
```
""")
    assert [argv for _, argv in command_lines([page])] == [
        ["pympi-pi", "1e7"], ["pympi-nbody", "64", "--steps", "5"], ["pympi-pi", "1e5"],
        ["pympi-launch", "-n", "2", "--", "pympi-pi", "1e5"]]
    assert [(cmd, shown, status) for _, _, cmd, shown, status in console_examples([page])] == [
        ("PYMPI_PI_SEED=7 pympi-pi 1e5", ("pympi-pi 1e9 is output here, not a command",), 0)]


def test_command_lines_in_the_docs_parse():
    """Every pympi command line the pages show parses with the command's own parser; each command is shown."""
    found = command_lines()
    seen = {argv[0] for _, argv in found}
    assert {f"pympi-{name}" for name in COMMANDS} <= seen, "a command the docs never show"
    refused = {ex[0] for ex in console_examples() if any(line.startswith("Error:") for line in ex[3])}
    assert refused  # examples of bad input: run and checked below, not parsed here
    for where, argv in found:
        if where not in refused:
            check_parses(argv, where)


def test_a_wrong_option_is_caught():
    with pytest.raises(pytest.fail.Exception, match="No such option"):
        check_parses(["pympi-nbody", "64", "--precison", "fp64"], "here")
    with pytest.raises(pytest.fail.Exception, match="--repeat"):
        check_parses(["pympi-scale", "--ranks", "1,2", "--repeat", "0", "--", "pympi-pi", "1e6"], "here")
    with pytest.raises(pytest.fail.Exception, match="--methd"):
        check_parses(["pympi-launch", "-n", "2", "--", "pympi-pi", "1e6", "--methd", "mc"], "here")


def test_every_intel_xeon_is_named():
    """"Intel Xeon" named two machines (issue 60, item 23): each mention says which, by generation (Rocket Lake,
    family 6 model 167; Emerald Rapids, model 207) or that it was not recorded, within a line of it; the CI
    runs' times (the lead's figures: "last run", "its time") aside."""
    import re

    for page in PAGES:
        text = page.read_text()
        for m in re.finditer(r"Intel\s+Xeon", text):
            line = text[text.rfind("\n", 0, m.start()) + 1:text.find("\n", m.end())]
            if "last run" in line or "its time" in line:
                continue
            near = " ".join(text[m.end():m.end() + 120].split())
            assert re.match(r"\W*(of the Rocket Lake|Emerald Rapids|with AVX-512, its model not recorded)", near), \
                f"{page.name}: which Intel Xeon? {line.strip()}"
