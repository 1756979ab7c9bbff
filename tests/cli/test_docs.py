"""The documentation site builds without a warning, and its examples are the real CLI.

* ``sphinx-build -W -n`` of ``docs/`` (MyST Markdown): a broken link, a missing page or
  a page outside the toctree fails.
* Every ``console`` block is run: its ``$ `` lines as commands (``mpiexec -n N`` with this
  environment's MPI, no shell), the lines below each as its output, which must appear
  in order (time and throughput lines, and ``...``, excepted: they vary run to run).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest

from helpers.commands import clean_env, mpiexec_argv, script
from helpers.docs import DOCS, NAMES, console_examples

#: lines of shown output that differ from run to run
VOLATILE = re.compile(r"^\s*(time|throughput)\s|\.\.\.")
#: environment a console example needs to show what the page says it shows
EXAMPLE_ENV = {
    ("install.md", "pympi-pi 1e6"): {"MPI4PY_LIBMPI": "libmpi.so.12"},  # a core install: no MPI library
}


def test_the_site_builds_without_warnings(tmp_path):
    out = subprocess.run([sys.executable, "-m", "sphinx", "-W", "-n", "--keep-going", "-q", "-b", "html",
                          str(DOCS), str(tmp_path / "html")], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr + out.stdout
    index = (tmp_path / "html" / "index.html").read_text()
    for page in DOCS.glob("*.md"):  # every page built and linked from the front page
        assert (tmp_path / "html" / f"{page.stem}.html").exists(), page.name
        assert page.stem == "index" or f'href="{page.stem}.html"' in index, page.name


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
