"""The models of ``pympi-nbody`` are registered recipes (issue 51): ``--model``, each model's own options and
their refusal for the others derive from the registry, and a third model is a module and a registry line
(tests/data/toy_model.py, run here as a user runs the command)."""

from __future__ import annotations

import json
import sys

import pytest

from helpers.commands import ROOT, clean_env, mpiexec_argv, run


#: pympi-nbody with the toy model registered first, as its own module and one line of MODULES
WITH_TOY = ("import sys; sys.path.insert(0, {data!r}); from pympi_gpu.cli import models; "
            "models.MODULES['toy'] = 'toy_model'; from pympi_gpu.cli import nbody_main; "
            "sys.argv[0] = 'pympi-nbody'; nbody_main()")


def _toy(*args, ranks=2):
    code = WITH_TOY.format(data=str(ROOT / "tests" / "data"))
    return run(mpiexec_argv(ranks) + [sys.executable, "-c", code, *map(str, args)], timeout=300,
               env=clean_env(OMP_NUM_THREADS="1"))


@pytest.mark.parametrize("ranks", [2, 3])
def test_a_third_model_is_a_module_and_a_registry_line(ranks):
    p = _toy(300, "--model", "toy", "--toy-softening", "0.1", "--steps", "4", "--thermo", "2", "--json",
             "--threads", "1", "-q", ranks=ranks)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["softening"] == 0.1 and doc["init"] == "uniform" and doc["seed"] == 7 and doc["dt"] == 2e-3
    assert [row["step"] for row in doc["thermo"]] == [0, 2, 4] and doc["ranks"] == ranks
    help_text = _toy("--help", ranks=1).stdout
    assert "--toy-softening" in help_text and "toy: a test's model" in help_text


@pytest.mark.parametrize("args, words", [
    (["--model", "gravity", "--toy-softening", "1"], "--toy-softening applies to --model toy only"),
    (["--model", "toy", "--density", "1"], "--density applies to --model lj only"),
    (["--model", "toy", "--softening", "1"], "--softening applies to --model gravity only"),
])
def test_each_models_options_are_refused_for_the_others(args, words):
    p = _toy(300, *args, "--steps", "1", "-q")
    assert p.returncode == 2 and words in p.stderr and "Traceback" not in p.stderr, p.stderr
