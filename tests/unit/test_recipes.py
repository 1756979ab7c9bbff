"""The container recipes as text: every recipe is built by the system tier and documented with
build lines that fit it; every image says what it is (OCI labels) and the version it says is
the package's; mpi4py compiled from source is optimised.  Building and running them is
tests/system/."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from helpers.commands import ROOT
import pympi_gpu
from system import containers

DOCKER = ROOT / "docker"
RECIPES = sorted(DOCKER.glob("Dockerfile.*"))
KEYS = ("title", "description", "version", "revision", "created", "source", "licenses")


def built_by_the_system_tier() -> dict[str, int]:
    """How many images tests/system/containers.py builds from each recipe."""
    made: dict[str, int] = {}
    for recipe, *_ in containers.IMAGES.values():
        made[recipe] = made.get(recipe, 0) + 1
    source = Path(containers.__file__).read_text()
    for recipe in re.findall(r'build_recipe\("([^"]+)"', source):  # built outside the table (the CUDA image)
        made.setdefault(recipe, 1)
    return made


def build_lines():
    """``(where, argv)`` of every ``docker build``/``podman build`` line in the recipes' headers and the docs."""
    found = []
    for path in [*RECIPES, *sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]:
        text = path.read_text()
        if path in RECIPES:  # the header's comment lines, without their "#"
            text = "\n".join(line[1:] for line in text.splitlines() if line.startswith("#"))
        for n, line in enumerate(text.replace("\\\n", " ").splitlines()):
            words = shlex.split(line, comments=True) if re.search(r"\b(docker|podman) build\b", line) else []
            if words[:1] in (["docker"], ["podman"]) and words[1:2] == ["build"]:
                found.append((f"{path.name}:{n + 1}", words))
    return found


def declared_args(recipe: Path) -> set[str]:
    return set(re.findall(r"^ARG (\w+)", recipe.read_text(), flags=re.M))


def test_every_recipe_is_built_by_the_system_tier_and_documented():
    """No recipe goes unbuilt by tests/system, or without a line in docs/containers.md and a build line."""
    made = built_by_the_system_tier()
    table = (ROOT / "docs" / "containers.md").read_text()
    documented = {Path(argv[argv.index("-f") + 1]).name for _, argv in build_lines() if "-f" in argv}
    assert RECIPES
    for recipe in RECIPES:
        assert recipe.name in made, f"{recipe.name}: no system test builds it"
        assert f"docker/{recipe.name}" in table, f"{recipe.name}: not in docs/containers.md"
        assert recipe.name in documented, f"{recipe.name}: no documented build line"
    assert set(made) <= {r.name for r in RECIPES}, "the system tier builds a recipe that is not in docker/"


def test_documented_build_lines_fit_their_recipe():
    """Each documented build line names an existing recipe, a tag, the context, and only ARGs it declares;
    a recipe built in several variants by the system tier documents a line for each."""
    lines = build_lines()
    assert lines
    variants: dict[str, set] = {}
    for where, argv in lines:
        assert "-f" in argv and "-t" in argv, f"{where}: {shlex.join(argv)}"
        recipe = ROOT / argv[argv.index("-f") + 1]
        assert recipe.exists(), f"{where}: no recipe {recipe.name}"
        assert argv[-1] == ".", f"{where}: the build context is the repository root"
        args = {argv[i + 1].split("=", 1)[0]: argv[i + 1].split("=", 1)[1]
                for i, w in enumerate(argv) if w == "--build-arg"}
        unknown = set(args) - declared_args(recipe)
        assert not unknown, f"{where}: --build-arg {sorted(unknown)} not declared by {recipe.name}"
        if recipe.parent == DOCKER and where.startswith(recipe.name):  # the recipe's own header
            variants.setdefault(recipe.name, set()).add(tuple(sorted(args.items())))
    for recipe, count in built_by_the_system_tier().items():
        assert len(variants.get(recipe, ())) >= count, f"{recipe}: {count} variants built, fewer documented"


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


def source_builds():
    """``(file, command)`` of every pip install in docker/ that compiles against an MPI's mpicc.

    Found by what makes it a source build (``MPICC=`` in its environment, or ``--no-binary``),
    in every file of docker/, shell scripts included; continuation lines joined, one command
    per ``&&``, ``;``, ``then`` or ``else``."""
    found = []
    for path in sorted(p for p in DOCKER.iterdir() if p.is_file()):
        text = path.read_text().replace("\\\n", " ")
        for line in text.splitlines():
            for command in re.split(r"&&|;|\|\||\bthen\b|\belse\b", line):
                if re.search(r"\bpip\d*(\s|$)", command) and " install" in command \
                        and ("MPICC=" in command or "--no-binary" in command):
                    found.append((path.name, command.strip()))
    return found


def test_mpi4py_built_from_source_is_optimised():
    """With MPICC set, mpi4py compiles with CFLAGS alone, not Python's flags: each build sets -O2
    unless told otherwise (``MPI4PY_CFLAGS``, whose default, an ARG's or the script's, is read here).

    Unoptimised, a one-double Allreduce or Sendrecv through mpi4py costs about 0.9 us more
    (1.4x, MPICH on 2 ranks): enough to skew the latency pympi-scale measures.  Every source
    build in docker/ is checked, however it is spelt, and each compiles mpi4py with its MPI's mpicc."""
    builds = source_builds()
    assert builds, "no recipe compiles mpi4py: the TACC and CUDA recipes must"
    assert {name for name, _ in builds} >= {p.name for p in [*RECIPES, DOCKER / "build-cuda-mpi.sh"]
                                            if "--no-binary mpi4py" in p.read_text()}
    for name, command in builds:
        assert "MPICC=" in command and "--no-binary" in command and "mpi4py" in command.lower(), (name, command)
        flags = re.findall(r'CFLAGS="([^"]*)"', command)
        assert flags, (name, command)
        variable = re.fullmatch(r"\$\{?(\w+)\}?", flags[-1])
        if variable:  # its default: `ARG NAME="..."` in a recipe, `NAME=${NAME:-...}` in a script
            text = (DOCKER / name).read_text()
            default = re.findall(rf'^ARG {variable[1]}="([^"]*)"|^{variable[1]}=\$\{{{variable[1]}:-([^}}]*)\}}',
                                 text, re.M)
            assert len(default) == 1, (name, variable[1], default)
            flags = ["".join(default[0])]
        assert re.search(r"-O[23]\b", flags[-1]), (name, command, flags[-1])
