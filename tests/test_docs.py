"""The documentation site builds without a warning, and its examples are the real CLI.

* ``sphinx-build -W -n`` of ``docs/`` (MyST Markdown): a broken link, a missing page or
  a page outside the toctree fails.
* Every ``pympi*`` command line in a ``bash``/``console``/``sh`` (or unlabelled) block of
  the docs and the README parses with the command's own click parser: options exist,
  values convert.  ``text`` blocks are output or synopses and are not read.
* Every ``console`` block is run: its ``$ `` lines as commands (``mpiexec -n N`` with this
  environment's MPI, no shell), the lines below each as its output, which must appear
  in order (time and throughput lines, and ``...``, excepted: they vary run to run).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest

from helpers.commands import ROOT, clean_env, mpiexec_argv, script
from pympi_gpu.cli import COMMANDS
from pympi_gpu.cli.common import lazy

DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md")) + [ROOT / "README.md"]
NAMES = {"pympi", *(f"pympi-{name}" for name in COMMANDS)}
SHELL_BLOCKS = {"", "bash", "console", "sh", "shell"}
#: lines of shown output that differ from run to run
VOLATILE = re.compile(r"^\s*(time|throughput)\s|\.\.\.")
#: environment a console example needs to show what the page says it shows
EXAMPLE_ENV = {
    ("install.md", "pympi-pi 1e6"): {"MPI4PY_LIBMPI": "libmpi.so.12"},  # a core install: no MPI library
}


def blocks(path: Path):
    """``(info, first line number, body)`` of every fenced block of a Markdown page."""
    text = path.read_text()
    for m in re.finditer(r"^```([^\s`]*)[^\n]*\n(.*?)^```", text, re.S | re.M):
        yield m.group(1), text.count("\n", 0, m.start()) + 2, m.group(2)


def logical_lines(body: str):
    """Lines with ``\\`` continuations joined."""
    return body.replace("\\\n", " ").splitlines()


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


def console_examples(pages=PAGES):
    """``(where, page, command, shown output lines, exit status or None)`` of the console blocks.

    A ``$ echo $?`` line after a command gives that command's exit status.
    """
    examples = []
    for page in pages:
        for info, line0, body in blocks(page):
            if info != "console":
                continue
            lines = logical_lines(body)
            i = 0
            while i < len(lines):
                line = lines[i]
                i += 1
                if not line.startswith("$ "):
                    continue
                where, command, shown, status = f"{page.name}:{line0 + i - 1}", line[2:].strip(), [], None
                while i < len(lines) and not lines[i].startswith("$ "):
                    shown.append(lines[i].rstrip())
                    i += 1
                if i + 1 < len(lines) and lines[i] == "$ echo $?":
                    status, i = int(lines[i + 1]), i + 2
                examples.append((where, page.name, command, tuple(shown), status))
    return examples


def test_the_site_builds_without_warnings(tmp_path):
    out = subprocess.run([sys.executable, "-m", "sphinx", "-W", "-n", "--keep-going", "-q", "-b", "html",
                          str(DOCS), str(tmp_path / "html")], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr + out.stdout
    index = (tmp_path / "html" / "index.html").read_text()
    for page in DOCS.glob("*.md"):  # every page built and linked from the front page
        assert (tmp_path / "html" / f"{page.stem}.html").exists(), page.name
        assert page.stem == "index" or f'href="{page.stem}.html"' in index, page.name


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


@pytest.mark.parametrize("where, page, command, shown, status", console_examples(),
                         ids=lambda x: x if isinstance(x, str) and ".md:" in x else "")
def test_console_examples_show_what_the_command_prints(where, page, command, shown, status):
    words = shlex.split(command)
    env = clean_env(**EXAMPLE_ENV.get((page, command), {}))
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    prefix = []
    if words[0] == "mpiexec":
        assert words[1] == "-n", where
        prefix, words = mpiexec_argv(int(words[2])), words[3:]
    assert words[0] in NAMES, f"{where}: a console example runs a pympi command: {command}"
    out = subprocess.run(prefix + [script(words[0]), *words[1:]], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, env=env, timeout=300)
    printed = [line.rstrip() for line in out.stdout.splitlines()]
    for line in shown:
        if not line or VOLATILE.search(line):
            continue
        assert line in printed, f"{where}: `{command}` did not print\n{line}\n--- it printed:\n{out.stdout}"
        printed = printed[printed.index(line) + 1:]
    if status is not None:
        assert out.returncode == status, f"{where}: exit status {out.returncode}, shown {status}\n{out.stdout}"
