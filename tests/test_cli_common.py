"""The shared command-line rules of pympi_gpu.cli.common."""
import click.testing

import click
import pytest

from pympi_gpu.cli.common import Count, PositiveFloat, run_command


@click.command()
@click.option("--code", type=int, default=0)
@click.pass_context
def exits(ctx, code):
    ctx.exit(code)


@pytest.mark.parametrize("code", [0, 1, 3])
def test_run_command_keeps_the_exit_status(code):
    with pytest.raises(SystemExit) as info:
        run_command(exits, prog_name="t", args=["--code", str(code)])
        raise SystemExit(0)
    assert info.value.code == code


def test_usage_error_exits_2(capsys):
    with pytest.raises(SystemExit) as info:
        run_command(exits, prog_name="t", args=["--code", "x"])
    assert info.value.code == 2
    assert capsys.readouterr().err.count("Error:") == 1


@pytest.mark.parametrize("text, ok", [("1", True), ("0.5", True), ("0", False), ("-1", False),
                                      ("nan", False), ("inf", False), ("x", False)])
def test_positive_float(text, ok):
    @click.command()
    @click.argument("x", type=PositiveFloat())
    def cmd(x):
        click.echo(repr(x))

    result = click.testing.CliRunner().invoke(cmd, [text])
    assert (result.exit_code == 0) is ok, result.output


def test_count_param_bounds():
    @click.command()
    @click.argument("n", type=Count(minimum=2, maximum=10))
    def cmd(n):
        click.echo(n)

    runner = click.testing.CliRunner()
    assert runner.invoke(cmd, ["1e1"]).output.strip() == "10"
    bad = runner.invoke(cmd, ["11"])
    assert bad.exit_code == 2 and "out of range" in bad.output
