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
        own = [opt for opt in m.options if len(models.owners_of()[opt.name]) == 1]
        assert all(params[opt.name] is opt for opt in own)
        assert set(m.defaults) == {"dt", "seed", "energy_tolerance"}
        assert f"{m.defaults['dt']:g} {m.name}" in params["dt"].help
        assert f"{m.defaults['seed']} {m.name}" in params["seed"].help
    owners = models.owner_of()
    assert owners["density"] == "lj" and owners["softening"] == "gravity" and owners["benchmark"] == "gravity"
    assert "steps" not in owners and "checkpoint" not in owners  # the shared options are nobody's own


def test_an_option_two_models_declare_is_one_read_by_each():
    """``--init``: gravity's initial conditions and LJ's file (issue 58) are one option of the command, each
    model's value read by its own type, each model's default where none is given."""
    import click
    import pytest

    from pympi_gpu.cli.nbody import Job, nbody

    assert models.owners_of()["init"] == ("gravity", "lj")
    init = {p.name: p for p in nbody.params}["init"]
    assert isinstance(init.type, models.PerModel) and init.default is None
    assert "gravity:" in init.help and "lj:" in init.help and "[default: plummer]" in init.help

    def parse(*argv):
        return nbody.make_context("pympi-nbody", list(argv)).params

    assert parse("9", "--init", "uniform")["init"] == "uniform"
    assert parse("--init", "run.gsd@-1", "--model", "lj")["init"] == "run.gsd@-1"  # --model read first
    with pytest.raises(click.BadParameter, match="'run.gsd' is not one of 'plummer', 'uniform'"):
        parse("9", "--init", "run.gsd")
    assert Job.of(parse("9")).model_options["init"] == "plummer"
    assert Job.of(parse("9", "--model", "lj")).model_options["init"] is None
