"""Intel MPI (the ``impi-rt`` wheel) under the test Slurm with ``srun --mpi=pmi2``.

As on a cluster, Intel MPI is told to use Slurm's PMI-2 client library
(``I_MPI_PMI_LIBRARY`` = libpmi2.so from Debian's libpmi2-0, installed by
.ci/setup.d/10-slurm.sh) instead of its own Hydra, and srun starts the ranks.
The venv is the Intel MPI one of tests/cli/test_mpi_matrix.py: only the wheel, with
this environment's mpi4py and pympi_gpu behind it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.commands import require_system
from helpers.mpis import MPIS, make_venv

pytestmark = pytest.mark.system

#: where Debian's libpmi2-0 puts Slurm's PMI-2 client
PMI2_CANDIDATES = ("/usr/lib/x86_64-linux-gnu/libpmi2.so.0", "/usr/lib/x86_64-linux-gnu/libpmi2.so",
                   "/usr/lib64/libpmi2.so", "/usr/lib/libpmi2.so")
WORLD = ("from pympi_gpu.cli.common import mpi_world\n"
         "from mpi4py import MPI\n"
         "comm = mpi_world()\n"
         "print('size', comm.Get_size(), MPI.Get_library_version().splitlines()[0], flush=True)\n")


@pytest.fixture(scope="module")
def impi():
    return make_venv(MPIS["impi"])


@pytest.fixture(scope="module")
def libpmi2():
    for cand in PMI2_CANDIDATES:
        if Path(cand).exists():
            return cand

    msg = "Slurm's libpmi2 is not installed (Debian: libpmi2-0)"
    if require_system():
        pytest.fail(msg)
    pytest.skip(msg)


def _env(impi, libpmi2, **extra):
    env = {"I_MPI_PMI_LIBRARY": libpmi2, "I_MPI_PMI": "pmi2", "OMP_NUM_THREADS": "1", **extra}
    return {"env": env, "path_prepend": [str(impi.prefix / "bin")]}


def sizes(stdout: str) -> list[tuple[int, str]]:
    return [(int(line.split()[1]), line.split(" ", 2)[2]) for line in stdout.splitlines() if line.startswith("size ")]


@pytest.mark.parametrize("ntasks, nodes, with_library", [(2, None, True), (3, None, True), (2, 2, True),
                                                          (2, 2, False)])
def test_intel_mpi_under_srun_pmi2(slurm, impi, libpmi2, tmp_path, ntasks, nodes, with_library):
    """With Slurm's libpmi2 (as cluster guides say), and without: Intel MPI 2021 also speaks
    srun's PMI wire protocol itself, which is what a container without libpmi2 relies on."""
    world = tmp_path / "world.py"
    world.write_text(WORLD)
    env = _env(impi, libpmi2)
    if not with_library:
        del env["env"]["I_MPI_PMI_LIBRARY"], env["env"]["I_MPI_PMI"]
    proc = slurm.srun([impi.python, str(world)], ntasks=ntasks, nodes=nodes, mpi="pmi2", **env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = sizes(proc.stdout)
    assert [s for s, _ in got] == [ntasks] * ntasks, proc.stdout + proc.stderr
    assert all(lib.startswith("Intel(R) MPI Library") for _, lib in got), proc.stdout
    assert "warning" not in proc.stderr


def test_pympi_pi_on_intel_mpi_under_srun_pmi2(slurm, impi, libpmi2):
    proc = slurm.srun([impi.python, "-m", "pympi_gpu", "pi", "1e5", "--threads", "1", "--json"], ntasks=2,
                      nodes=2, mpi="pmi2", **_env(impi, libpmi2))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["ranks"] == 2
    assert "Intel(R) MPI Library" in json.dumps(doc["provenance"])
    assert abs(doc["results"][0]["error"]) < 0.05


def test_intel_mpi_under_srun_without_a_pmi_is_alone_and_warned(slurm, impi, libpmi2, tmp_path):
    """``srun --mpi=none``: no PMI for Intel MPI to talk to; every rank alone, and the world check says so."""
    world = tmp_path / "world.py"
    world.write_text(WORLD)
    env = _env(impi, libpmi2)
    del env["env"]["I_MPI_PMI_LIBRARY"], env["env"]["I_MPI_PMI"]
    proc = slurm.srun([impi.python, str(world)], ntasks=2, mpi="none", **env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [s for s, _ in sizes(proc.stdout)] == [1, 1], proc.stdout + proc.stderr
    assert proc.stderr.count("warning: MPI started a world of 1 rank") == 1, proc.stderr
