"""The unit tier's guard (tests/unit/conftest.py) fails a test that starts a process, in every way there is.

A copy of that conftest, byte for byte, guards a directory of tests written here, one per way of
starting a process (and one that starts none); pytest runs them in a child and its JUnit report says
what became of each.  Nothing of the project is imported by the tests written here.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET

from helpers.commands import ROOT, clean_env, run

GUARD = ROOT / "tests" / "unit" / "conftest.py"

STARTS = r'''
import ctypes, multiprocessing, os, pty, subprocess


def test_nothing_started():
    assert sum(range(4)) == 6


def test_subprocess_run():
    subprocess.run(["true"])


def test_popen_behind_an_except_exception():
    try:
        subprocess.Popen(["true"]).wait()
    except Exception:
        pass


def test_os_system():
    os.system("true")


def test_os_popen():
    os.popen("true").read()


def test_fork():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


def test_spawnv():
    os.spawnv(os.P_WAIT, "/bin/true", ["true"])


def test_posix_spawn():
    os.waitpid(os.posix_spawn("/bin/true", ["true"], dict(os.environ)), 0)


def test_pty_fork():
    pid, fd = pty.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


def test_multiprocessing_spawn():
    p = multiprocessing.get_context("spawn").Process(target=print)
    p.start()
    p.join()


def test_multiprocessing_fork():
    p = multiprocessing.get_context("fork").Process(target=print)
    p.start()
    p.join()


def test_fork_below_python():
    libc = ctypes.PyDLL(None)  # the GIL held through the call: the child has it to reach _exit
    pid = libc.fork()
    if pid == 0:
        libc._exit(0)
    assert pid > 0
'''

AT_IMPORT = '''
import subprocess

subprocess.run(["true"])


def test_never_collected():
    pass
'''


def _outcomes(report) -> dict[str, tuple[str, str]]:
    """``{test or module: (passed|failed|error, message)}`` from a JUnit XML report."""
    out = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        name = case.get("name") or case.get("classname")
        kind = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "passed")
        said = next((c.get("message", "") + (c.text or "") for c in case if c.tag in ("failure", "error")), "")
        out.setdefault(name, (kind, said))  # a failed test's teardown error comes second
    return out


def test_every_way_of_starting_a_process_fails_the_unit_test_that_tried(tmp_path):
    unit = tmp_path / "unit"
    unit.mkdir()
    (unit / "__init__.py").write_text("")
    (unit / "conftest.py").write_bytes(GUARD.read_bytes())
    (unit / "test_starts.py").write_text(STARTS)
    (unit / "test_starts_at_import.py").write_text(AT_IMPORT)
    report = tmp_path / "report.xml"
    out = run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--rootdir", str(tmp_path),
               "--continue-on-collection-errors", f"--junitxml={report}", "unit"],
              cwd=tmp_path, env=clean_env(), timeout=300)
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    got = _outcomes(report)
    assert got.pop("test_nothing_started") == ("passed", ""), text
    named = {"test_subprocess_run": "subprocess.Popen", "test_popen_behind_an_except_exception": "subprocess.Popen",
             "test_os_system": "os.system", "test_os_popen": "subprocess.Popen", "test_fork": "os.fork",
             "test_spawnv": "os.fork", "test_posix_spawn": "os.posix_spawn", "test_pty_fork": "os.forkpty",
             "test_multiprocessing_spawn": "_posixsubprocess.fork_exec", "test_multiprocessing_fork": "os.fork"}
    for test, way in named.items():
        kind, said = got.pop(test)
        assert kind == "failure" and f"{way}(" in said and "the unit tier starts no process" in said, (test, kind, said)
    kind, said = got.pop("test_fork_below_python")  # not seen by Python: seen as a child the test left
    assert kind == "error" and "process(es) started during the test" in said, (kind, said)
    (module, (kind, said)), = got.items()  # and the module that starts one as it is imported
    assert "test_starts_at_import" in module and kind == "error", (module, kind, said)
    assert "subprocess.Popen" in said and "the unit tier starts no process" in said, said
    assert "test_never_collected" not in text
