"""``pympi-launch -n N [--nodes M] [--image SIF] [--gpu] [--dry-run] -- COMMAND...``

Parses, asks :func:`pympi_gpu.mpi.launch.plan` for the command line, prints it
(``--dry-run``) or runs it, passing every stop request on to the launcher as
the one signal all launchers forward to the ranks (:mod:`pympi_gpu.cli.relay`);
the exit status is the launcher's.  No MPI starts in this process.
"""

from __future__ import annotations

import os
import shlex
import sys

import click

from pympi_gpu.cli.options import CONTEXT_SETTINGS, IntRange, version_option
from pympi_gpu.mpi.launch import LaunchError, launcher_choices, mpi_choices, needs_mpi, plan, probe_mpi


@click.command(context_settings={**CONTEXT_SETTINGS, "ignore_unknown_options": True,
                                 "allow_interspersed_args": False})
@version_option()
@click.option("-n", "--ntasks", type=IntRange(min=1), required=True,
              help="Number of MPI ranks.")
@click.option("-N", "--nodes", type=IntRange(min=1), default=None,
              help="Spread the ranks over this many nodes (srun; ibrun takes the allocation's).")
@click.option("--tasks-per-node", type=IntRange(min=1), default=None, help="Ranks per node.")
@click.option("--image", metavar="SIF", default=None,
              help="Run COMMAND inside this Apptainer image: apptainer run [--nv] SIF COMMAND.")
@click.option("--gpu", is_flag=True, help="Give the image the host's NVIDIA GPUs (apptainer --nv).")
@click.option("--launcher", type=click.Choice(launcher_choices()), default="auto", show_default=True,
              help="Launcher; auto: ibrun if on PATH, srun inside Slurm, else mpiexec/mpirun.")
@click.option("--mpi", "mpi", type=click.Choice(mpi_choices()), default=None,
              help="The MPI COMMAND uses [default: the library mpi4py loads, else MPI wheel, mpi4py config, "
                   "mpiexec --version].")
@click.option("--pmi", default=None, metavar="PLUGIN",
              help="srun --mpi plugin (pmi2, pmix, ...; 'default' for the cluster's) [default: from --mpi].")
@click.option("--dry-run", is_flag=True, help="Print the command line (and why) instead of running it.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def launch(ntasks, nodes, tasks_per_node, image, gpu, launcher, mpi, pmi, dry_run, command):
    """Start COMMAND on N MPI ranks with the launcher this system wants.

    Put COMMAND after --, for example:

        pympi-launch -n 4 --image nbody.sif --gpu -- pympi-nbody 1e6

    In a Slurm allocation the ranks start with srun and the PMI plugin of the
    MPI in use (pmi2 for MPICH, MVAPICH and Intel MPI, pmix for Open MPI).
    """
    image_note = None
    if image is not None and "://" in image:
        image_note = f"image {image} not checked: it is fetched by apptainer when the job starts"
    elif image is not None and not os.path.isfile(image):
        if not dry_run:
            raise click.BadParameter(f"no such image file: {image}", param_hint="--image")
        image_note = f"warning: no image file {image} here; the job would fail unless it exists where it runs"
    from pympi_gpu.cli import settings

    pmi = pmi or settings.told_pmi()
    try:
        how = "--mpi"
        if mpi is None and needs_mpi(launcher):
            mpi, how = probe_mpi(told=settings.told_mpi())
        chosen = plan(list(command), ntasks, nodes=nodes, tasks_per_node=tasks_per_node, image=image,
                      gpu=gpu, launcher=launcher, mpi=mpi, pmi=pmi, mpi_how=how)
    except LaunchError as exc:
        raise click.UsageError(str(exc)) from None
    if dry_run:
        click.echo(shlex.join(chosen.argv))
        click.echo(f"# {chosen.launcher}: {chosen.reason}", err=True)
        if image_note:
            click.echo(f"# {image_note}", err=True)
        return
    from pympi_gpu.cli.relay import run

    try:
        status = run(chosen.argv)
    except OSError as exc:
        click.echo(f"pympi-launch: cannot run {chosen.argv[0]}: {exc.strerror}", err=True)
        sys.exit(127)
    sys.exit(status)
