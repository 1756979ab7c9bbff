"""The ``pympi`` command group and the ``pympi-*`` console scripts.

The command line only parses, binds ``MPI.COMM_WORLD``, chooses the backend
and prints; the library computes and returns records.  Subcommands are
imported lazily so that ``pympi --help`` starts no MPI and no GPU library.

``common`` is what every command shares (parameter types, errors, MPI
start-up), ``counts`` how people type counts, ``simulation`` the harness of
the two n-body models' commands (``nbody_gravity``, ``nbody_lj``, chosen by
``nbody``).  May import any layer; nothing imports it.
"""

from __future__ import annotations

import click

from pympi_gpu.cli.common import run_command
from pympi_gpu.cli.options import CONTEXT_SETTINGS, version_option

__all__ = ["cli", "main", "pi_main", "nbody_main", "launch_main", "scale_main", "info_main", "plot_main"]

#: subcommand name -> "module:attribute" of its click command
COMMANDS = {
    "pi": "pympi_gpu.cli.pi:pi",
    "nbody": "pympi_gpu.cli.nbody:nbody",
    "launch": "pympi_gpu.cli.launch:launch",
    "scale": "pympi_gpu.cli.scale:scale",
    "info": "pympi_gpu.cli.info:info",
    "plot": "pympi_gpu.cli.plot:plot",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        target = COMMANDS.get(name)
        if target is None:
            return None
        import importlib

        module, attr = target.split(":")
        return getattr(importlib.import_module(module), attr)


@click.group(cls=LazyGroup, context_settings=CONTEXT_SETTINGS)
@version_option()
def cli():
    """MPI + GPU applications: pi, n-body, launching, scaling studies, plots.

    Every option can also come from the environment: PYMPI_<COMMAND>_<OPTION>
    (for example PYMPI_PI_SEED=7), which suits job scripts.
    """


def main() -> None:
    _guard_outputs()
    run_command(cli, prog_name="pympi", auto_envvar_prefix="PYMPI")


def _standalone(name: str):
    def entry() -> None:
        from pympi_gpu.cli.common import lazy

        _guard_outputs()
        run_command(lazy(COMMANDS[name])(), prog_name=f"pympi-{name}",
                    auto_envvar_prefix=f"PYMPI_{name.upper()}")
    entry.__name__ = f"{name}_main"
    return entry


def _guard_outputs() -> None:
    """Before anything else: a closed stdout or stderr is a closed output for every command, never an
    exception (a closed one a run's stop request; a result that could not be printed: exit status 141
    and one line), and one closed when the command started is given /dev/null before a file can take
    its number (:func:`pympi_gpu.cli.signals.guard_outputs`)."""
    from pympi_gpu.cli.signals import guard_outputs

    guard_outputs()


pi_main = _standalone("pi")
nbody_main = _standalone("nbody")
launch_main = _standalone("launch")
scale_main = _standalone("scale")
info_main = _standalone("info")
plot_main = _standalone("plot")
