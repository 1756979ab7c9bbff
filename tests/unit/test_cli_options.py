"""The command line's own pieces (pympi_gpu.cli.common), in one process: parameter types and their bounds,
a usage error's exit status 2, a command's exit status kept, square brackets kept through rich, and every
option of every command with help in plain text.  What every command shows when run:
tests/cli/test_cli_common.py."""

import sys

import click
import click.testing
import pytest

from pympi_gpu.cli import COMMANDS
from pympi_gpu.cli.common import lazy, run_command
from pympi_gpu.cli.options import Count, PositiveFloat, escape


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


# --- what every command shows: words kept, --version, help, variables named --------------------
BRACKETED = "error in [plot] extra: [proxy:0@vm] [host:123] [red]not red[/]"


def commands():
    return {name: lazy(target)() for name, target in COMMANDS.items()}


def test_escape_keeps_every_bracket_through_rich():
    from rich.console import Console

    console = Console(record=True, width=200)
    console.print(f"[red]FAILED[/] {escape(BRACKETED)}", highlight=False)
    console.print(escape(f"pip install 'pympi_gpu[plot]' {sys.executable}"))
    text = console.export_text()
    assert f"FAILED {BRACKETED}\n" in text
    assert "pip install 'pympi_gpu[plot]'" in text


def test_every_option_has_help_and_help_is_plain_text():
    missing = [f"{name} {'/'.join(param.opts)}" for name, command in commands().items()
               for param in command.params
               if isinstance(param, click.Option) and not param.hidden and not (param.help or "").strip()]
    assert missing == []
    runner = click.testing.CliRunner()
    for name, command in commands().items():
        text = runner.invoke(command, ["--help"], prog_name=f"pympi-{name}").output
        assert "--version" in text and "``" not in text and ":func:" not in text, name


@pytest.mark.parametrize("name", ["pi", "nbody"])
@pytest.mark.parametrize("typed", [["-1"], ["-1e6"], ["-5", "--steps", "2"]])
def test_a_negative_count_is_said_to_be_negative(name, typed, capsys):
    """``pympi-pi -1`` was refused as ``No such option '-1'``: a count typed negative is said to be one."""
    with pytest.raises(SystemExit) as info:
        run_command(lazy(COMMANDS[name])(), prog_name=f"pympi-{name}", args=typed)
    err = capsys.readouterr().err
    assert info.value.code == 2 and f"'{typed[0]}' is negative" in err and "No such option" not in err, err
    assert err.count("Error:") == 1


def test_no_mpi_library_said_in_one_line():
    """What mpi4py says when it finds no MPI library, six lines on a machine without one (every name in the
    venv's lib and on the library path), in one: where it looked (issue 60, item 23: install.md showed
    another message than such a machine gets)."""
    from pympi_gpu.cli.common import missing_detail

    names = ("libmpi.so", "libmpi.so.12", "libmpi.so.40")
    text = "\n".join(["cannot load MPI library"]
                     + [f"{d}{n}: cannot open shared object file: No such file or directory"
                        for d in ("/home/me/.venv/lib/", "") for n in names])
    assert missing_detail(text) == ("mpi4py looked for libmpi.so, libmpi.so.12 and libmpi.so.40 in /home/me/.venv/lib "
                                    "and on the library path, and found none")
    one = "cannot load MPI library\nlibmpi.so.12: cannot open shared object file: No such file or directory"
    assert missing_detail(one) == "mpi4py looked for libmpi.so.12 on the library path, and found none"
    other = "cannot load MPI library\n/opt/libmpi.so: undefined symbol: MPI_Get_version"
    assert missing_detail(other) == "cannot load MPI library /opt/libmpi.so: undefined symbol: MPI_Get_version"
