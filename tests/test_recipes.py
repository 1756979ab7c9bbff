"""The container recipes as text: every image says what it is (OCI labels) and the
version it says is the package's.  Building and running them is tests/system/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import pympi_gpu

DOCKER = Path(__file__).resolve().parents[1] / "docker"
RECIPES = sorted(DOCKER.glob("Dockerfile.*"))
KEYS = ("title", "description", "version", "revision", "created", "source", "licenses")


def test_one_recipe_per_kind_of_base():
    assert [p.name for p in RECIPES] == ["Dockerfile.cuda", "Dockerfile.local", "Dockerfile.tacc"]


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_final_stage_carries_the_oci_labels(recipe):
    final = recipe.read_text().rsplit("\nFROM ", 1)[1]
    labels = dict(re.findall(r'org\.opencontainers\.image\.(\w+)="([^"]*)"', final))
    assert sorted(labels) == sorted(KEYS)
    assert labels["licenses"] == "BSD-3-Clause"
    defaults = dict(re.findall(r"^ARG (\w+)=(\S+)$", final, flags=re.M))
    assert defaults["PYMPI_VERSION"] == pympi_gpu.__version__
    # Labels come after every RUN: a new revision or date rebuilds no layer.
    assert final.rindex("\nRUN ") < final.index("ARG REVISION")


def test_tacc_recipe_documents_both_mpis():
    text = (DOCKER / "Dockerfile.tacc").read_text()
    assert "docker build -f docker/Dockerfile.tacc -t pympi-gpu:impi ." in text
    assert ("docker build -f docker/Dockerfile.tacc --build-arg BASE=tacc/tacc-ubuntu18-mvapich2.3-ib "
            "-t pympi-gpu:mvapich .") in text


MPI4PY_BUILDS = [p for p in [*RECIPES, DOCKER / "build-cuda-mpi.sh"] if "--no-binary mpi4py" in p.read_text()]


def test_the_recipes_that_compile_mpi4py():
    assert [p.name for p in MPI4PY_BUILDS] == ["Dockerfile.cuda", "Dockerfile.tacc", "build-cuda-mpi.sh"]


@pytest.mark.parametrize("recipe", MPI4PY_BUILDS, ids=lambda p: p.name)
def test_mpi4py_built_from_source_is_optimised(recipe):
    """With MPICC set, mpi4py compiles with CFLAGS alone, not Python's flags: each build sets -O2.

    Unoptimised, a one-double Allreduce or Sendrecv through mpi4py costs about 0.9 us more
    (1.4x, MPICH on 2 ranks): enough to skew the latency pympi-scale measures."""
    text = recipe.read_text()
    for at in [m.start() for m in re.finditer(r"--no-binary mpi4py", text)]:
        command = text[text.rindex("\n\n", 0, at) if "\n\n" in text[:at] else 0:at]
        flags = re.findall(r'CFLAGS="([^"]*)"', command)
        assert flags and re.search(r"-O[23]\b", flags[-1]), (recipe.name, flags)
