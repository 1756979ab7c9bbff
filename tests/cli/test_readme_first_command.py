"""The README's first command works as it says: what it runs after installing (``mpiexec -n 2 pympi-pi
1e7``) runs here and prints the serial hit count of its stream."""

import re
import shlex

from helpers.commands import mpiexec_argv, run, script
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
