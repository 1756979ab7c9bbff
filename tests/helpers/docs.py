"""The documentation as the tests read it: its pages, their fenced blocks, the command lines and console
examples in them, and the README's first commands."""

from __future__ import annotations

import re
from pathlib import Path

from helpers.commands import ROOT
from pympi_gpu.cli import COMMANDS

DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md")) + [ROOT / "README.md"]
NAMES = {"pympi", *(f"pympi-{name}" for name in COMMANDS)}


def blocks(path: Path):
    """``(info, first line number, body)`` of every fenced block of a Markdown page."""
    text = path.read_text()
    for m in re.finditer(r"^```([^\s`]*)[^\n]*\n(.*?)^```", text, re.S | re.M):
        yield m.group(1), text.count("\n", 0, m.start()) + 2, m.group(2)


def logical_lines(body: str):
    """Lines with ``\\`` continuations joined."""
    return body.replace("\\\n", " ").splitlines()


def console_blocks(pages=PAGES):
    """``(where, page, examples)`` of every ``console`` block: its commands in order, each
    ``(where, command, shown output lines, exit status or None)``.

    A ``$ echo $?`` line after a command gives that command's exit status.
    """
    found = []
    for page in pages:
        for info, line0, body in blocks(page):
            if info != "console":
                continue
            lines = logical_lines(body)
            examples, i = [], 0
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
                examples.append((where, command, tuple(shown), status))
            found.append((f"{page.name}:{line0}", page.name, tuple(examples)))
    return found


def console_examples(pages=PAGES):
    """``(where, page, command, shown output lines, exit status or None)`` of the console blocks' commands."""
    return [(where, page, command, shown, status)
            for _, page, examples in console_blocks(pages) for where, command, shown, status in examples]


README = (ROOT / "README.md").read_text()


def readme_commands():
    """The command lines of the README's first ``bash`` block (its "Two commands")."""
    block = README.split("```bash", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line and not line.startswith("#")]
