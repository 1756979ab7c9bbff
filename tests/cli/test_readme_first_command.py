"""The README's two commands: what the first runs after installing (``mpiexec -n 2 pympi-pi 1e7``) runs here and
prints the serial hit count of its stream; and the two, one after the other in one ``.venv``, install and run
(slow: a venv and pip's installs)."""

import re
import shlex
import shutil
import subprocess
from pathlib import Path

from helpers.commands import ROOT, clean_env, mpiexec_argv, run, script
from helpers.docs import readme_commands
from pympi_gpu.rng import count_hits_numpy, seed_key


def test_the_first_command_runs_pi_as_it_says():
    """What the first command runs after installing (``mpiexec -n 2 pympi-pi 1e7``) works here.

    Its segments after ``pip install`` are run with this environment's commands and MPI
    (the install itself is this environment's); the estimate printed is the serial
    count of the same random stream (NumPy's counter), over the ranks the command asks for.
    """
    first = readme_commands()[0]
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


def _checkout_copy(dest: Path) -> Path:
    """The checkout's files (tracked, and new ones git does not ignore) copied to ``dest``, as a clone has them."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def test_the_two_commands_one_after_the_other(tmp_path):
    """README's first command, then a command that compiles numba's kernels, then README's second command
    (its install: the tests it then runs are this suite) in the same ``.venv``: every command still runs,
    from the checkout.  Was: numba's cache, written beside the installed copy in site-packages, outlived
    pip's uninstall and made ``pympi_gpu`` a namespace package there that hid the editable install
    (``ModuleNotFoundError: pympi_gpu.nbody.loop``; issue 60, item 20).  A slow test: two venvs' worth of pip
    installs (from pip's cache in CI) and a cold numba compile."""
    first, second = readme_commands()[:2]
    install = second.split("&& python -m pytest")[0].strip()
    assert install != second, second
    src = _checkout_copy(tmp_path / "src")
    env = {k: v for k, v in clean_env(XDG_CACHE_HOME=str(tmp_path / "cache"), PIP_DISABLE_PIP_VERSION_CHECK="1",
                                      PIP_NO_INPUT="1").items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "NUMBA_CACHE_DIR", "PYMPI_NUMBA_CACHE_SEED")}

    def bash(line: str, timeout: float = 900) -> subprocess.CompletedProcess:
        out = run(["bash", "-c", line], cwd=src, env=env, timeout=timeout)
        assert out.returncode == 0, f"{line}\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}"
        return out

    bash(first)
    site = Path(bash(". .venv/bin/activate && python -I -c 'import pympi_gpu, os; print(os.path.dirname("
                     "pympi_gpu.__file__))'").stdout.strip())
    assert site.parent.name == "site-packages", site  # the first command installs a copy
    bash(". .venv/bin/activate && pympi-nbody 1000 --steps 2 -q")  # numba compiles, and caches its kernels
    assert not [p for p in site.rglob("*") if p.suffix in (".nbi", ".nbc")], "numba's cache beside the copy"
    bash(install)
    out = bash(". .venv/bin/activate && pympi-pi 1e3 && pympi-nbody --version && python -I -c 'import pympi_gpu, "
               "pympi_gpu.nbody.loop; print(pympi_gpu.__file__)'")
    assert Path(out.stdout.strip().splitlines()[-1]).resolve() == (src / "pympi_gpu" / "__init__.py").resolve()
    assert not site.exists(), "the copy pip installed is gone whole"
