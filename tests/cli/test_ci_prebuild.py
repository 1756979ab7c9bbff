"""CI's background prebuild of the container images: its locks, its order, the tiers that wait.

``.ci/run`` starts ``tests/system/containers.py prebuild --background`` before the tests; each
image is made under a file lock that the prebuild takes for all of them at its start, so a
container test arriving early waits for its image instead of building it a second time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from helpers.commands import ROOT
from helpers.tiers import CONTAINER_TIERS

from system import containers as c

#: A prebuild of two fake images: "slow" takes a while, "broken" fails.
FAKE_PREBUILD = """
import sys, time
sys.path[:0] = [{tests!r}, {root!r}]
from system import containers as c
c.PREBUILD = ("slow", "broken")
def make(name):
    if name == "broken":
        raise c.ContainerError("no base image")
    time.sleep(3)
c._make = make
sys.exit(c.prebuild())
"""


@pytest.fixture
def locks(tmp_path, monkeypatch):
    monkeypatch.setenv("PYMPI_CONTAINER_CACHE", str(tmp_path))
    monkeypatch.setattr(c, "LOCKS", tmp_path / "locks")
    monkeypatch.setattr(c, "PREBUILD_PID", tmp_path / "locks" / "prebuild.pid")
    return tmp_path / "locks"


def test_a_held_build_lock_makes_the_next_asker_wait_then_lets_go(locks):
    holder = subprocess.Popen([sys.executable, "-c", f"""
import sys, time
sys.path[:0] = [{str(ROOT / 'tests')!r}, {str(ROOT)!r}]
from system import containers as c
c.LOCKS = __import__('pathlib').Path({str(locks)!r})
with c.building("impi"):
    print("held", flush=True)
    time.sleep(2)
"""], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(c.ContainerError, match="impi: still being built in the background"):
        with c.building("impi", wait=0.5):
            pass
    t0 = time.monotonic()
    with c.building("impi", wait=30):  # waits for the holder, then holds it
        waited = time.monotonic() - t0
    assert holder.wait(timeout=30) == 0
    assert 0.5 < waited < 10


def test_the_prebuild_holds_every_lock_from_its_start_and_survives_a_failure(locks):
    proc = subprocess.Popen([sys.executable, "-c", FAKE_PREBUILD.format(tests=str(ROOT / "tests"),
                                                                         root=str(ROOT))],
                            env=os.environ,  # the fixture's PYMPI_CONTAINER_CACHE
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 30
    while not (locks / "prebuild.pid").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
        time.sleep(0.05)
    # "broken" comes after "slow", yet it is already held: nobody else may start it
    with pytest.raises(c.ContainerError):
        with c.building("broken", wait=0):
            pass
    with c.building("broken", wait=30):  # let go once its build failed
        pass
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 1, out  # one failure
    assert "prebuild slow: made" in out and "prebuild broken: FAILED" in out and "no base image" in out


#: Two chains: "slow" then "after" in one, "quick" in the other, each noting when it ends.
FAKE_CHAINS = """
import sys, time
sys.path[:0] = [{tests!r}, {root!r}]
from system import containers as c
c.PREBUILD = (("slow", "after"), ("quick",))
def make(name):
    time.sleep({{"slow": 3, "after": 0, "quick": 0.2}}[name])
    print("done", name, round(time.monotonic(), 3), flush=True)
c._make = make
sys.exit(c.prebuild())
"""


def test_the_prebuild_makes_its_chains_side_by_side(locks):
    """The second chain's image is made while the first chain's first one is still being made; a chain's
    images one after the other."""
    proc = subprocess.run([sys.executable, "-c", FAKE_CHAINS.format(tests=str(ROOT / "tests"), root=str(ROOT))],
                          env=os.environ, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ended = {line.split()[1]: float(line.split()[2]) for line in proc.stdout.splitlines() if line.startswith("done")}
    assert set(ended) == {"slow", "after", "quick"}
    assert ended["quick"] < ended["slow"] - 1.5  # not after it
    assert ended["after"] >= ended["slow"]


def test_the_container_tiers_run_last():
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "tests/system/test_cuda_image.py", "tests/system/test_slurm.py", "tests/unit/test_rng.py",
                           "tests/system/test_apptainer.py"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    files = [line.split("::")[0] for line in proc.stdout.splitlines() if "::" in line]
    assert files, proc.stdout + proc.stderr
    order = list(dict.fromkeys(files))
    containers = [f for f in order if f.rsplit("/", 1)[-1] in CONTAINER_TIERS]
    assert containers == ["tests/system/test_apptainer.py", "tests/system/test_cuda_image.py"]
    assert order[-2:] == containers, order


#: Stands for python3 in a copy of .ci/run: logs each call; ``-m venv DIR`` makes a venv whose
#: pip and python log too (python -m pytest exits with $FAKE_PYTEST_RC); the prebuild's start
#: exits with $FAKE_PREBUILD_RC.
FAKE_PYTHON3 = r"""#!/bin/bash
echo "python3 $*" >> "$CI_LOG"
if [ "$1" = -m ] && [ "$2" = venv ]; then
    mkdir -p "$3/bin"
    printf 'export PATH="%s:$PATH"\n' "$(cd "$3/bin" && pwd)" > "$3/bin/activate"
    printf '#!/bin/bash\necho "pip $*" >> "$CI_LOG"\n' > "$3/bin/pip"
    printf '#!/bin/bash\necho "python $*" >> "$CI_LOG"\n[ "$2" = pytest ] && exit "${FAKE_PYTEST_RC:-0}"\nexit 0\n' \
        > "$3/bin/python"
    chmod +x "$3/bin/pip" "$3/bin/python"
fi
if [ "$*" = "-m tests.system.containers prebuild --background" ]; then exit "${FAKE_PREBUILD_RC:-0}"; fi
exit 0
"""


def _ci_run(tmp_path, **env):
    """Run a copy of .ci/run with two fake setup scripts and a fake python3: (exit status, what ran, in order)."""
    repo = tmp_path / "repo"
    (repo / ".ci" / "setup.d").mkdir(parents=True)
    (repo / ".ci" / "run").write_text((ROOT / ".ci" / "run").read_text())
    for name in ("10-first", "20-second"):
        (repo / ".ci" / "setup.d" / f"{name}.sh").write_text(
            f'echo "setup {name}" >> "$CI_LOG"\n[ "${{FAKE_SETUP_FAIL:-}}" != {name} ]\n')
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "python3").write_text(FAKE_PYTHON3)
    (stub / "python3").chmod(0o755)
    log = tmp_path / "ci.log"
    log.write_text("")
    proc = subprocess.run(["bash", str(repo / ".ci" / "run")], capture_output=True, text=True, timeout=60,
                          env={"PATH": f"{stub}:/usr/bin:/bin", "CI_LOG": str(log), "HOME": str(tmp_path), **env})
    return proc.returncode, log.read_text().splitlines()


START = "python3 -m tests.system.containers prebuild --background"
STOP = "python3 -m tests.system.containers prebuild --stop"
TESTS = "python -m pytest"


def test_ci_starts_the_prebuild_before_the_tests_and_stops_it_at_exit(tmp_path):
    """.ci/run, run with stand-ins: setup scripts, then the prebuild, then the README's test command, then
    the prebuild stopped; stopped also when the tests fail; the tests run even if the prebuild did not start;
    a failing setup script stops everything before anything starts."""
    status, ran = _ci_run(tmp_path / "ok")
    assert status == 0, ran
    assert ran == ["setup 10-first", "setup 20-second", START, "python3 -m venv .venv",
                   'pip install -q -e .[test,mpich,plot]', TESTS, STOP]

    status, ran = _ci_run(tmp_path / "red", FAKE_PYTEST_RC="1")
    assert status == 1 and ran[-2:] == [TESTS, STOP], ran

    status, ran = _ci_run(tmp_path / "noprebuild", FAKE_PREBUILD_RC="1")
    assert status == 0 and ran[-3:] == ['pip install -q -e .[test,mpich,plot]', TESTS, STOP], ran

    status, ran = _ci_run(tmp_path / "nosetup", FAKE_SETUP_FAIL="10-first")
    assert status != 0 and ran == ["setup 10-first"], ran
