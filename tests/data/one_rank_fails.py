"""A pympi-style command whose rank 1 fails while rank 0 waits in a collective.

run_command must end the whole job (MPI_Abort) instead of leaving rank 0 hanging.
"""

import click

from pympi_gpu.cli.common import mpi_world, run_command


@click.command()
def failing():
    comm = mpi_world()
    if comm.Get_rank() == 1:
        raise RuntimeError("disk quota exceeded while writing results")
    comm.Barrier()  # never completes: rank 1 is gone
    click.echo("unreachable")


if __name__ == "__main__":
    run_command(failing, prog_name="one-rank-fails")
