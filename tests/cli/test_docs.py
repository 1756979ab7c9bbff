"""The documentation site builds without a warning, and its examples are the real CLI.

* ``sphinx-build -W -n`` of ``docs/`` (MyST Markdown): a broken link, a missing page or
  a page outside the toctree fails.
* Every ``console`` block is run, its ``$ `` lines in order in a directory of its own (a file one
  command writes, the next finds): each a pympi command (``mpiexec -n N`` with this environment's
  MPI, no shell) or ``cat FILE`` (a file the block made), and the lines below it its output, which
  must appear in order: ``...`` in a line stands for any text (a line of only ``...``, and time
  and throughput lines, are skipped: they vary run to run), and a number with a decimal point
  need only agree to 9 significant digits (the last bits of a float sum are the CPU's).
* Every other block that shows output (``text``, ``yaml``, unlabelled) is either checked another
  way, here, or named in :data:`NOT_RUN` with the reason: a new one must be one of the two.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.commands import ROOT, clean_env, mpiexec_argv, script
from helpers.docs import DOCS, NAMES, PAGES, blocks, console_blocks

#: lines of shown output that differ from run to run
VOLATILE = re.compile(r"^\s*(time|throughput)\s|^\s*\.\.\.\s*$")
#: a float as the commands print it (a decimal point or an exponent)
FLOAT = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?\d+[eE][-+]?\d+")
#: environment a console example needs to show what the page says it shows ({cwd}: its directory)
EXAMPLE_ENV = {
    # a machine with no MPI library: mpi4py looks in the venv's lib and on the library path, finds none
    ("install.md", "pympi-pi 1e6"): {"MPI4PY_LIBMPI": "{cwd}/.venv/lib:"},
}
#: directories a console example needs in its directory
EXAMPLE_DIRS = {("install.md", "pympi-pi 1e6"): (".venv/lib",)}
#: blocks that show output and are not run, by page and their first line's start, with the reason
NOT_RUN = {
    ("launching.md", "pympi-launch -n N [--nodes M]"): "a synopsis of the options, not output (--help is its "
                                                      "reference; test_docs_pages parses every command line)",
    ("nbody.md", "Error: cannot write dump 't.extxyz': No space left"): "needs a full disk: "
        "tests/cli/test_claimed_outputs.py fills a tmpfs; test_the_full_disk_message_is_the_programs checks "
        "the words",
}
def test_the_site_builds_without_warnings(tmp_path):
    out = subprocess.run([sys.executable, "-m", "sphinx", "-W", "-n", "--keep-going", "-q", "-b", "html",
                          str(DOCS), str(tmp_path / "html")], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr + out.stdout
    index = (tmp_path / "html" / "index.html").read_text()
    for page in DOCS.glob("*.md"):  # every page built and linked from the front page
        assert (tmp_path / "html" / f"{page.stem}.html").exists(), page.name
        assert page.stem == "index" or f'href="{page.stem}.html"' in index, page.name


def _matches(shown: str, printed: str) -> bool:
    """A shown line against a printed one: ``...`` any text, floats to 9 significant digits."""
    pattern = "(.*)".join(re.escape(part) for part in shown.split("..."))
    if re.fullmatch(pattern, printed):
        return True
    a, b = FLOAT.split(shown), FLOAT.split(printed)
    if "..." in shown or a != b:
        return False
    return all(float(x) == pytest.approx(float(y), rel=1e-9, abs=1e-300)
               for x, y in zip(FLOAT.findall(shown), FLOAT.findall(printed)))


def _run_example(command: str, page: str, cwd: Path) -> subprocess.CompletedProcess | str:
    """The command's output (stdout and stderr together), run in ``cwd`` as the page shows it."""
    words = shlex.split(command)
    for name in EXAMPLE_DIRS.get((page, command), ()):
        (cwd / name).mkdir(parents=True, exist_ok=True)
    env = clean_env(**{k: v.format(cwd=cwd) for k, v in EXAMPLE_ENV.get((page, command), {}).items()})
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    if words[0] == "cat":  # a file an earlier command of the block wrote
        return "".join((cwd / name).read_text() for name in words[1:])
    prefix = []
    if words[0] == "mpiexec":
        assert words[1] == "-n", command
        prefix, words = mpiexec_argv(int(words[2])), words[3:]
    assert words[0] in NAMES, f"a console example runs a pympi command or cat: {command}"
    return subprocess.run(prefix + [script(words[0]), *words[1:]], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, env=env, timeout=300, cwd=cwd)


@pytest.mark.parametrize("block, page, examples", console_blocks(), ids=lambda x: x if isinstance(x, str) and
                         ".md:" in x else "")
def test_console_examples_show_what_the_commands_print(block, page, examples, tmp_path):
    for where, command, shown, status in examples:
        out = _run_example(command, page, tmp_path)
        text = out if isinstance(out, str) else out.stdout
        printed = [line.rstrip() for line in text.splitlines()]
        for line in shown:
            if not line or VOLATILE.search(line):
                continue
            at = next((k for k, got in enumerate(printed) if _matches(line, got)), None)
            assert at is not None, f"{where}: `{command}` did not print\n{line}\n--- it printed:\n{text}"
            printed = printed[at + 1:]
        if status is not None:
            assert out.returncode == status, f"{where}: exit status {out.returncode}, shown {status}\n{text}"


def test_a_shown_line_matches_as_the_rules_say():
    assert _matches("numba cache     .../pympi_gpu/numba (writable)", "numba cache     /home/a/.cache/pympi_gpu/numba "
                    "(writable)")
    assert _matches("  - [0, 1.4399999999999997, -6.773368053252917, ]", "  - [0, 1.44, -6.7733680532529, ]")
    assert not _matches("  - [0, 1.44, -6.7733680, ]", "  - [0, 1.44, -6.7734, ]")
    assert not _matches("  - [0, 1.44, ]", "  - [1, 1.44, ]")  # integers exactly
    assert not _matches("ranks 2, backend numpy", "ranks 2, backend numba")


def _output_blocks():
    """``(page, first line, body)`` of the blocks that show output: text, yaml, json and unlabelled ones."""
    for page in PAGES:
        for info, line0, body in blocks(page):
            if info in ("text", "yaml", "json", ""):
                yield page.name, line0, body


def test_every_output_example_is_run_or_says_why_not():
    checked = {("scaling.md", "strong scaling: pympi-pi 4e9"), ("scaling.md", "weak scaling: pympi-pi 2e9"),
               ("scaling.md", "strong scaling: pympi-nbody 256000"), ("scaling.md", "code             nodes ranks")}
    seen = set()
    for page, line0, body in _output_blocks():
        first = body.strip().splitlines()[0].strip()
        key = next((k for k in (*NOT_RUN, *checked) if k[0] == page and first.startswith(k[1])), None)
        assert key is not None, (f"{page}:{line0}: output shown in a {first!r} block: make it a console block "
                                 "(run by the docs tests), check it here, or name it in NOT_RUN with the reason")
        seen.add(key)
    assert seen == set(NOT_RUN) | checked, "an entry names no block any more"


def _table_rows(body: str) -> dict[int, list[str]]:
    """A study's first table as pympi-scale prints it: its cells by rank count."""
    rows = {}
    for line in body.splitlines():
        if line.strip().startswith("└"):  # the table's end: the phases' table and a projection follow
            break
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if len(cells) > 3 and cells[0].isdigit():
            rows.setdefault(int(cells[0]), cells)
    return rows


@pytest.mark.parametrize("title, csv", [("strong scaling: pympi-pi 4e9", "scale-pi-strong.csv"),
                                        ("weak scaling: pympi-pi 2e9", "scale-pi-weak.csv"),
                                        ("strong scaling: pympi-nbody 256000", "scale-lj-strong.csv")])
def test_the_worked_studies_tables_are_their_csv_files(title, csv):
    """scaling.md's studies are measurements of a date (not run here): each table's times and speedups are
    its CSV file's, beside the page."""
    import csv as csvlib

    (body,) = [b for p, _, b in _output_blocks() if p == "scaling.md" and b.strip().startswith(title)]
    rows = _table_rows(body)
    with open(DOCS / csv) as fh:
        for rec in csvlib.DictReader(fh):
            cells = rows[int(rec["ranks"])]
            assert cells[3] == f"{float(rec['time']):.4f}", (csv, rec["ranks"])
            assert cells[5] == f"{float(rec['speedup']):.2f}", (csv, rec["ranks"])
    assert set(rows) == {1, 2}


def test_the_projection_table_is_its_results_file():
    """scaling.md's projection (a model of a date, not run here) is benchmarks/results/projection-lj-emr-f32.txt."""
    (body,) = [b for p, _, b in _output_blocks() if p == "scaling.md" and b.startswith("code             nodes")]
    text = (ROOT / "benchmarks" / "results" / "projection-lj-emr-f32.txt").read_text()
    assert all(line in text for line in body.splitlines()), "the table is not the results file's"


def test_the_full_disk_message_is_the_programs():
    """nbody.md's full-disk message (not run: it needs a full disk): the dump's error as the program words it,
    with the saved state's tail (nbody/loop.py's), for a frame at step 30 and the checkpoint c.npz."""
    import errno
    import os

    import numpy as np
    from mpi4py import MPI

    from pympi_gpu.nbody.dump import DumpError, write_frame

    class Full:
        def write(self, *frame):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    (body,) = [b for p, _, b in _output_blocks() if p == "nbody.md" and b.startswith("Error: cannot write dump")]
    with pytest.raises(DumpError) as failed:
        write_frame(MPI.COMM_SELF, Full(), 30, 0.15, {"id": np.arange(1), "x": np.zeros((1, 3)),
                                                      "v": np.zeros((1, 3))}, "t.extxyz")
    saved = "; the state at step 30 is saved in c.npz (resume with --restart c.npz)"
    assert body.strip() == f"Error: {failed.value}{saved}"
    loop = (ROOT / "pympi_gpu" / "nbody" / "loop.py").read_text()
    assert '; the state at step {step} is saved in {path} (resume with --restart {path})' in loop


def test_the_lammps_input_shown_is_the_one_pympi_writes():
    """docs/lj.md's LAMMPS lines for "the same run" are input_script's, word for word (its comments aside)."""
    from pympi_gpu.nbody.lj.config import LjConfig
    from pympi_gpu.nbody.lj.lammps import input_script

    shown = [body for info, _, body in blocks(DOCS / "lj.md") if info == "lammps"]
    assert len(shown) == 1
    lines = [line.split("#")[0].strip() for line in shown[0].splitlines()]
    written = input_script(LjConfig(cells=10), "system.data", 1000, 100).splitlines()
    assert [line for line in lines if line] == [line for line in written if line]
