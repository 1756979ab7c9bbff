"""``pympi-info``: what am I running on? Run it under any launcher."""

from __future__ import annotations

import json

import click

from pympi_gpu.cli.common import mpi_command, mpi_world, world_rank_hint
from pympi_gpu.cli.options import CONTEXT_SETTINGS, version_option


def format_report(rep) -> str:
    """The human report of an :class:`~pympi_gpu.run.info.InfoReport`."""
    v = rep.versions
    lines = [f"pympi_gpu {rep.package}, Python {rep.python}",
             "  " + ", ".join(f"{name} {v[key] or 'not installed'}" for name, key in
                              (("mpi4py", "mpi4py"), ("NumPy", "numpy"), ("numba", "numba"),
                               ("numba-cuda", "numba-cuda"), ("CuPy", "cupy"))),
             f"MPI library     {rep.mpi_library} ({rep.mpi_vendor}, MPI {rep.mpi_standard})",
             f"ranks           {rep.ranks} on {len(rep.ranks_per_host)} host(s): "
             + ", ".join(f"{h} x {n}" for h, n in rep.ranks_per_host.items()),
             f"launcher        {rep.launcher}"
             + (f"; expects {rep.expected_ranks} rank(s) ({rep.expected_from})" if rep.expected_ranks else "")]
    if rep.launcher_env:
        lines.append("  variables     " + " ".join(f"{k}={val}" for k, val in rep.launcher_env.items()))
    else:
        lines.append("  variables     none of the known launcher or Slurm variables is set")
    aware = rep.cuda_aware
    verdict = {True: "yes", False: "no", None: "unknown"}[aware["supported"]]
    lines.append(f"CUDA-aware MPI  {verdict} (by {aware['method']}: {aware['detail']})")
    lines.append(f"container       {rep.container or 'none (bare metal or unknown)'}")
    lines.append(f"numba cache     {rep.numba_cache_dir} "
                 + ("(writable)" if rep.numba_cache_writable
                    else "(NOT writable: pympi commands fall back to a directory under $TMPDIR)"))
    lines.append("GPUs per rank")
    for r in rep.rank_info:
        head = f"  rank {r.rank:>3} on {r.host} (local {r.local_rank} of {r.local_size})"
        cvd = f", CUDA_VISIBLE_DEVICES={r.cuda_visible_devices}" if r.cuda_visible_devices is not None else ""
        if r.gpus:
            lines.append(f"{head}: sees {len(r.gpus)} [{', '.join(r.gpus)}]{cvd}; "
                         f"uses {r.gpu_used} ({r.gpus[r.gpu_used]})")
        else:
            lines.append(f"{head}: no GPU ({r.gpu_reason}){cvd}")
    for w in rep.warnings:
        lines.append(w if w.lower().startswith("warning") else f"warning: {w}")
    return "\n".join(lines)


@mpi_command
@click.command(context_settings=CONTEXT_SETTINGS)
@version_option()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--no-gpu", is_flag=True, help="Do not probe GPUs (numba.cuda is not imported).")
def info(as_json, no_gpu):
    """Report versions, MPI library, launcher, ranks per host, GPUs, CUDA-aware MPI and container.

    Run it the way the job runs: srun pympi-info, ibrun pympi-info,
    mpiexec -n 4 pympi-info, or inside the image.
    """
    from pympi_gpu.cli import settings
    from pympi_gpu.run.info import collect
    from pympi_gpu.run.records import to_dict

    comm = mpi_world(check=False)  # the report carries the mismatch warning itself
    rep = collect(comm, probe_gpus=not no_gpu, cuda_aware=settings.cuda_aware())
    if comm.Get_rank() != 0:
        return
    if rep.warnings and comm.Get_size() == 1 and world_rank_hint() != 0:
        # One of several singleton worlds (MPI/launcher mismatch): one report,
        # from the launcher's rank 0, is enough; the others only say who they are.
        click.echo(f"pympi-info: launcher rank {world_rank_hint()} is alone in its MPI world too "
                   "(see the warning of launcher rank 0)", err=True)
        return
    if as_json:
        click.echo(json.dumps(to_dict(rep, schema="pympi_gpu.info/1", app="info"), indent=2))
    else:
        click.echo(format_report(rep))
