"""A pympi-style command whose rank 0 gets an error from MPI itself (as when a peer dies mid-message).

The line must not blame rank 0 as the failing rank ("error on rank 0"): it says
that MPI failed there, usually because another rank died first.
"""

import click
from mpi4py import MPI

from pympi_gpu.cli.common import mpi_command, mpi_world, run_command


@mpi_command
@click.command()
def lost():
    comm = mpi_world()
    if comm.Get_rank() == 0:
        raise MPI.Exception(MPI.ERR_OTHER)  # what a receive from a killed rank raises
    comm.Barrier()  # never completes: rank 0 is gone
    click.echo("unreachable")


if __name__ == "__main__":
    run_command(lost, prog_name="peer-lost")
