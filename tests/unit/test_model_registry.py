"""The models of ``pympi-nbody`` are registered recipes (issue 51): ``--model`` and each model's own options
are built from the registry.  A third model run as users run it, and each model's options refused for
the others: tests/cli/test_models.py."""

from __future__ import annotations

from pympi_gpu.cli import models


def test_the_command_is_built_from_the_registry():
    from pympi_gpu.cli.nbody import nbody

    params = {p.name: p for p in nbody.params}
    assert sorted(params["model"].type.choices) == sorted(models.MODULES)
    for m in models.models().values():
        assert m.name in params["model"].help and m.summary in params["model"].help
        assert all(params[opt.name] is opt for opt in m.options)
        assert set(m.defaults) == {"dt", "seed", "energy_tolerance"}
        assert f"{m.defaults['dt']:g} {m.name}" in params["dt"].help
        assert f"{m.defaults['seed']} {m.name}" in params["seed"].help
    owners = models.owner_of()
    assert owners["density"] == "lj" and owners["softening"] == "gravity" and owners["benchmark"] == "gravity"
    assert "steps" not in owners and "checkpoint" not in owners  # the shared options are nobody's own
