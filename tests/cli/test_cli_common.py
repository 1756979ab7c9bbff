"""The shared command-line rules of pympi_gpu.cli.common, and what every command shows."""

import json
import sys
from importlib import metadata

import pytest

from helpers.commands import clean_env, run, script
from pympi_gpu.cli import COMMANDS
from pympi_gpu.cli.common import MPI_MISSING


# --- what every command shows: words kept, --version, help, variables named --------------------
BRACKETED = "error in [plot] extra: [proxy:0@vm] [host:123] [red]not red[/]"
SCRIPTS = ["pympi", *(f"pympi-{name}" for name in COMMANDS)]


def test_scale_messages_keep_square_brackets(tmp_path):
    """A failed point's error and stderr tail, and the plot hint, print as the program wrote them."""
    (tmp_path / "bad.py").write_text(f"import sys\nsys.stderr.write({BRACKETED!r} + '\\n')\nsys.exit(3)\n")
    (tmp_path / "ok.py").write_text(
        "import json\nprint(json.dumps({'schema': 'x/1', 'app': 'fake', 'ranks': 1, 'wall_time': 0.5,"
        " 'throughput': 2.0, 'work_unit': 'samples'}))\n")
    shadow = tmp_path / "shadow" / "matplotlib"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('hidden [by the test]')\n")
    scale = script("pympi-scale")
    env = clean_env(PYTHONPATH=str(tmp_path / "shadow"))

    bad = run([scale, "--ranks", "1", "--out", "bad", "--", sys.executable, "bad.py", "[proxy:0@vm]"],
              cwd=tmp_path, env=env, timeout=120)
    assert bad.returncode == 1, bad.stderr
    assert f"1 rank run 1/1: FAILED exit status 3: {BRACKETED}" in bad.stderr
    assert f"1 ranks failed: exit status 3: {BRACKETED}" in bad.stdout
    assert f"  {BRACKETED}" in bad.stdout
    assert "bad.py [proxy:0@vm]" in bad.stdout  # the table's title

    ok = run([scale, "--ranks", "1", "--out", "ok[1]", "--", sys.executable, "ok.py"],
             cwd=tmp_path, env=env, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "plot skipped: matplotlib is not installed (hidden [by the test]); " \
           "pip install 'pympi_gpu[plot]'" in ok.stderr
    assert "wrote ok[1].jsonl" in ok.stderr


@pytest.mark.parametrize("argv", [["pympi-pi", "1e3"], ["pympi-nbody", "64"], ["pympi-info"]])
def test_no_mpi_library_says_what_to_do(argv):
    """A core install without an MPI library: one message with the ways out, no traceback."""
    p = run([script(argv[0]), *argv[1:]], timeout=120,
            env=clean_env(MPI4PY_LIBMPI="/nonexistent/libmpi.so.12"))
    assert p.returncode == 1, p.stderr
    assert p.stderr.count("Error:") == 1 and "Traceback" not in p.stderr and p.stdout == ""
    assert "no MPI library: mpi4py looked for libmpi.so.12 in /nonexistent, and found none" in p.stderr
    for way in ("pip install 'pympi_gpu[mpich]'", "pip install --no-binary mpi4py", "MPI4PY_LIBMPI="):
        assert way in p.stderr and way in MPI_MISSING


@pytest.mark.parametrize("name", SCRIPTS)
def test_version_on_every_command(name):
    p = run([script(name), "--version"], timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"pympi_gpu {metadata.version('pympi_gpu')}"


@pytest.mark.parametrize("argv, env, names", [
    (["pympi-pi", "1e3"], {"PYMPI_PI_METHOD": "xyz"}, ["environment variable PYMPI_PI_METHOD", "--method"]),
    (["pympi-pi", "1e3"], {"PYMPI_PI_SEED": "-1"}, ["environment variable PYMPI_PI_SEED", "--seed"]),
    (["pympi-nbody", "64"], {"PYMPI_NBODY_PRECISION": "fp16"}, ["environment variable PYMPI_NBODY_PRECISION"]),
    (["pympi", "pi", "1e3"], {"PYMPI_PI_METHOD": "xyz"}, ["environment variable PYMPI_PI_METHOD"]),
    (["pympi-pi", "1e3", "--method", "xyz"], {}, ["'--method'"]),
    (["pympi-scale", "--ranks", "0,2", "--", "pympi-pi", "1e3"], {}, ["'--ranks'", "ranks must be >= 1"]),
    (["pympi-scale", "--", "pympi-pi", "1e3"], {"PYMPI_SCALE_RANKS": "0,2"},
     ["environment variable PYMPI_SCALE_RANKS", "'--ranks'"]),
])
def test_a_bad_value_is_named_where_it_came_from(argv, env, names):
    p = run([script(argv[0]), *argv[1:]], timeout=120, env=clean_env(**env))
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("Error:") == 1 and "Traceback" not in p.stderr
    for name in names:
        assert name in p.stderr
    if not env:
        assert "environment variable" not in p.stderr


@pytest.mark.parametrize("n", [2, 3])
def test_bad_variable_under_mpiexec_one_message(mpirun, n):
    p = mpirun(n, script("pympi-pi"), "1e3", timeout=120, env=clean_env(PYMPI_PI_METHOD="xyz"))
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("Error:") == 1 and "PYMPI_PI_METHOD" in p.stderr


@pytest.mark.parametrize("n", [2, 3])
def test_trapezoid_counts_intervals(mpirun, n):
    pi = script("pympi-pi")
    p = mpirun(n, pi, "1e7", "--method", "trapezoid", "--json", "--verbose", timeout=300)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["work_unit"] == "intervals"
    shares = doc["results"][0]["shares"]
    assert [s["start"] for s in shares] == [0] + [s["start"] + s["count"] for s in shares[:-1]]
    assert sum(s["count"] for s in shares) == 10**7 and len(shares) == n
    text = mpirun(n, pi, "1e7", "--method", "both", "--verbose", timeout=300)
    assert text.returncode == 0, text.stderr
    trapezoid = text.stdout.split("(trapezoid rule)")[1]
    assert f"of {n} on" in trapezoid and ", 10,000,000) " in trapezoid and "9,999,999" not in trapezoid


def test_mpi_library_is_named_alike_by_pi_and_info():
    from pympi_gpu.mpi.library import library_name as mpi_library_name

    assert mpi_library_name("MPICH Version:      5.0.2\nMPICH Release date: x") == "MPICH Version: 5.0.2"
    assert mpi_library_name("  Open MPI v5.0.6, package: Open MPI\tbuild\n") == \
        "Open MPI v5.0.6, package: Open MPI build"
    assert mpi_library_name("") == ""
    assert mpi_library_name("Open MPI v5.0.11, package: Open MPI\x00") == "Open MPI v5.0.11, package: Open MPI"
    pi = run([script("pympi-pi"), "1e4", "--json"], timeout=120)
    info = run([script("pympi-info"), "--json", "--no-gpu"], timeout=120)
    assert pi.returncode == 0 and info.returncode == 0, pi.stderr + info.stderr
    library = json.loads(pi.stdout)["provenance"]["mpi_library"]
    assert library == json.loads(info.stdout)["mpi_library"] and "  " not in library and library


# ------------------------------------------------------------------ stdout a terminal (Open MPI's ranks)

#: numba highlights a message (as a performance warning's text is), which with colorama installed calls
#: colorama.init(): an exit handler that writes ESC[0m to a terminal stdout; then JSON on stdout
TERMINAL = r"""
import sys
from numba.core.errors import termcolor
termcolor().highlight("numba highlighted a message")
assert "colorama.initialise" in sys.modules
if sys.argv[1] == "command":
    sys.argv[1:] = ["1e4", "--json", "--backend", "numba", "--threads", "1"]
    from pympi_gpu.cli import pi_main
    pi_main()
else:  # the same document printed by a plain script
    print('{"plain": true}')
"""


def _on_a_terminal(*args) -> tuple[int, str]:
    """Run the TERMINAL script with stdout on a pseudo-terminal, as Open MPI's mpiexec gives its ranks."""
    import os
    import pty
    import subprocess

    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", TERMINAL, *args], stdout=slave, stderr=subprocess.PIPE,
                            env=clean_env(OMP_NUM_THREADS="1"))
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 1 << 16)
        except OSError:  # EIO: the other end closed
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    proc.wait(timeout=300)
    return proc.returncode, b"".join(chunks).decode()


def test_json_on_a_terminal_ends_with_the_document():
    """A command's ``--json`` on a terminal stdout is the document and nothing after it, even where numba
    initialised colorama (whose exit handler a plain script shows writing its reset after the document)."""
    pytest.importorskip("colorama")  # a test dependency: the GPU image has it, and so numba uses it
    rc, out = _on_a_terminal("plain")
    assert rc == 0 and out.rstrip().endswith("\x1b[0m"), repr(out[-40:])  # the fault, reproduced
    rc, out = _on_a_terminal("command")
    assert rc == 0, out[-2000:]
    assert "\x1b[" not in out, repr(out[-40:])
    assert json.loads(out)["results"][0]["hits"] > 0
