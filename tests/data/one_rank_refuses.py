"""A pympi-style command whose last rank refuses alone (fail) while the others wait in a collective.

fail() is to be called on every rank; where one rank refuses alone after all,
run_command must end the job (one line, exit status 2) instead of leaving the
others waiting for good.
"""

import click

from pympi_gpu.cli.common import fail, mpi_command, mpi_world, run_command


@mpi_command
@click.command()
def refusing():
    comm = mpi_world()
    if comm.Get_rank() == comm.Get_size() - 1:
        fail("the scratch directory is full on this node")
    comm.Barrier()  # never completes: the last rank refused
    click.echo("unreachable")


if __name__ == "__main__":
    run_command(refusing, prog_name="one-rank-refuses")
