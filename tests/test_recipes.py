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
