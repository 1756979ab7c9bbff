"""``pympi-nbody BODIES``: the n-body command, its shared options and the choice of model.

The command parses and refuses bad input, then runs its model's recipe
(:func:`pympi_gpu.cli.models.run`): ``--model`` takes the names of the
registry (:data:`pympi_gpu.cli.models.MODULES`), each model adds its own
options (refused for every other model), and its defaults of ``--dt``,
``--seed`` and ``--energy-tolerance`` stand in their help.  The models share
the harness in :mod:`pympi_gpu.cli.simulation`; none imports another.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import click

from pympi_gpu.cli import models
from pympi_gpu.cli.common import fail, mpi_command, world_rank_hint
from pympi_gpu.cli.options import CONTEXT_SETTINGS, Command, Count, IntRange, PositiveFloat, given, version_option
from pympi_gpu.device.device import AUTO, CHOICES
from pympi_gpu.mpi.cuda_aware import TRANSPORTS
from pympi_gpu.nbody.loop import RunOptions

MAX_BODIES = 2**31 - 1
#: the model of a run that names none
DEFAULT_MODEL = "gravity"


class _Bodies(Count):
    """BODIES: above :data:`MAX_BODIES` the refusal says the memory it would have taken."""

    def convert(self, value, param, ctx):
        from pympi_gpu.cli.counts import MAX_COUNT
        from pympi_gpu.nbody.gravity.memory import human_bytes, need_bytes

        n = Count(minimum=self.minimum, maximum=MAX_COUNT).convert(value, param, ctx)
        if n > self.maximum:
            self.fail(f"{value!r} is out of range (at most {self.maximum:,} bodies; {n:.3g} bodies would "
                      f"need about {human_bytes(need_bytes(n, 'fp32'))} of memory in fp32)", param, ctx)
        return n


def check_model_options(ctx, model: str) -> None:
    """Refuse the options of another model than ``model`` (exit 2): each model's own, from the registry."""
    for name, owners in models.owners_of().items():
        if model not in owners and given(ctx, name):
            fail(f"--{name.replace('_', '-')} applies to --model {' and '.join(owners)} only")


def _model_options(f):
    """Add ``--model`` (the registry's names) and every model's own options to a click command.  ``--model`` is
    parsed first (eager): an option two models declare is read by the chosen one's type."""
    f.__click_params__ = getattr(f, "__click_params__", []) + list(reversed(models.options()))
    return click.option("--model", type=click.Choice(sorted(models.models())), default=DEFAULT_MODEL,
                        show_default=True, is_eager=True,
                        help="; ".join(f"{m.name}: {m.summary}" for m in models.models().values()) + ".")(f)


@mpi_command
@click.command(cls=Command, context_settings=CONTEXT_SETTINGS)
@version_option()
@click.argument("bodies", type=_Bodies(maximum=MAX_BODIES), required=False)
@click.option("--steps", type=Count(minimum=0, maximum=10**12), default=10, show_default=True,
              help="Leapfrog steps; with --restart, the step to reach.")
@click.option("--dt", type=PositiveFloat(), default=None,
              help=f"Time step (model units)  {models.default_help('dt', lambda v: f'{v:g}')}")
@click.option("--backend", type=click.Choice(CHOICES), default=AUTO,
              show_default=True, help="Kernels: the GPU if every rank has one, else numba (auto).")
@click.option("--transport", type=click.Choice(TRANSPORTS), default="auto", show_default=True,
              help="GPU only: device buffers straight to MPI (CUDA-aware) or staged through host memory.")
@click.option("--seed", type=IntRange(0, 2**64 - 1), default=None,
              help="Seed of the initial conditions (same seed, same bodies at any rank count)  "
                   f"{models.default_help('seed')}")
@click.option("--verify", is_flag=True, help="Check sampled accelerations and the energy drift; exit 1 on failure.")
@click.option("--energy-tolerance", type=PositiveFloat(), default=None,
              help="Relative energy drift that --verify accepts  "
                   f"{models.default_help('energy_tolerance', lambda v: f'{v:g}')}")
@click.option("--checkpoint", "checkpoint", type=str, default=None, metavar="PATH",
              help="Write the state here at the end (and every K steps, on SIGTERM); a checkpoint already "
                   "there is continued only by --restart of its run, replaced only with --overwrite.  "
                   "Without it a stop writes pympi-nbody-N.ckpt.npz (or -1, -2...: never an existing file).")
@click.option("--checkpoint-every", type=Count(minimum=1, maximum=10**12), default=None, metavar="K",
              help="Also write a checkpoint every K steps.")
@click.option("--restart", type=str, default=None, metavar="PATH", help="Continue from this checkpoint.")
@click.option("--on-blowup", type=click.Choice(["stop", "save"]), default="stop", show_default=True,
              help="A run whose state blows up (NaN, overflow, atoms flung too far) stops with exit 3, its "
                   "checkpoint untouched; save also writes the broken state to NAME.blowup.npz beside it.")
@click.option("--thermo", type=IntRange(0, None), default=0, show_default=True, metavar="K",
              help="A thermo row every K steps (0: first and last), printed as it is computed: lj as LAMMPS "
                   "prints it; gravity: energies, virial ratio -2K/U, momentum.")
@click.option("--thermo-file", type=str, default=None, metavar="PATH",
              help="Also append the thermo rows to PATH, flushed per row: .csv, or .yaml (LAMMPS's "
                   "thermo_style yaml); a restart continues the file.")
@click.option("--dump", type=str, default=None, metavar="PATH",
              help="Write a trajectory: .extxyz (OVITO, ASE) or .gsd (HOOMD-blue; the dump extra), a frame at "
                   "the first step and every --dump-every steps; a restart appends.")
@click.option("--dump-every", type=Count(minimum=1, maximum=10**12), default=None, metavar="K",
              help="Steps between trajectory frames  [default: 100]")
@click.option("--overwrite", is_flag=True,
              help="Replace a --checkpoint, --dump or --thermo-file that holds another run's output (else "
                   "refused, unless --restart continues the run that wrote it); never a file of another kind.")
@click.option("--threads", type=IntRange(1, 4096), default=None,
              help="numba threads per rank [default: this node's CPUs / its ranks].")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (its schema: docs/nbody.md; "
              "--model lj: docs/lj.md).")
@click.option("-q", "--quiet", is_flag=True,
              help="No progress on stderr (else rank 0 shows a bar on a terminal, or a line every "
                   "~10 s, PYMPI_PROGRESS_INTERVAL, when stderr is a file or pipe).")
@_model_options
@click.pass_context
def nbody(ctx, **params):
    """N-body simulations over MPI ranks: BODIES bodies (or atoms), leapfrog / velocity Verlet.

    BODIES is a whole number such as 65536, 1e6 or 2_000_000.

    --model gravity (the default): all-pairs softened gravity; bodies are
    spread over the ranks in contiguous blocks and travel round a ring.

    --model lj: Lennard-Jones atoms (LAMMPS bench/in.lj) on an fcc lattice of
    k^3 cells, 4 k^3 atoms (BODIES is rounded to the nearest such number),
    over a 3-D domain decomposition with ghost-atom halo exchange; or the
    atoms of a file (--init PATH: a LAMMPS data file, .extxyz or .gsd), whose
    count BODIES may leave out.

    Each rank uses one GPU (--backend gpu) or its share of the node's cores (numba).
    """
    from pympi_gpu.cli import settings
    from pympi_gpu.device import jitcache

    args = Job.of(params)
    simd_note = jitcache.tune_cpu(settings.wide_vectors())  # before configure(), which would find it done
    jitcache.configure(settings.numba_cache_seed(), settings.wide_vectors())
    check_model_options(ctx, args.model)
    if args.bodies is None and not models.model(args.model).sized_by(args):
        fail("Missing argument 'BODIES': how many bodies (or atoms), e.g. 65536 or 1e6")
    if world_rank_hint() == 0:  # rank 0 writes every output: its node's verdict counts (agreed in mpi_world)
        check_outputs(args)
    models.run(ctx, args, simd_note)


@dataclasses.dataclass(frozen=True)
class Job:
    """What ``pympi-nbody`` was asked, parsed (``None``: the model's default); ``model_options`` holds the
    values of the model's own options (its recipe's), by name."""

    bodies: int | None
    steps: int
    dt: float | None
    backend: str
    transport: str
    seed: int | None
    verify: bool
    energy_tolerance: float | None
    checkpoint: str | None
    checkpoint_every: int | None
    restart: str | None
    on_blowup: str
    thermo: int
    thermo_file: str | None
    dump: str | None
    dump_every: int | None
    overwrite: bool
    threads: int | None
    as_json: bool
    quiet: bool
    model: str
    model_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, params: dict) -> Job:
        """The job of the command's parameters: the shared ones, and the chosen model's own (an option several
        models declare, not given: the chosen model's default)."""
        owners, model = models.owners_of(), params["model"]
        shared = {k: v for k, v in params.items() if k not in owners}
        own = {k: v if v is not None or len(owners[k]) == 1 else models.own_default(model, k)
               for k, v in params.items() if model in owners.get(k, ())}
        return cls(**shared, model_options=own)

    def run_options(self, *, name: str, thermo: bool = True) -> RunOptions:
        """The loop's options; ``name`` (``pympi-nbody-N``) names the files a stop and a blow-up write."""
        from pympi_gpu.nbody.blowup import blowup_path

        return RunOptions(steps=self.steps, thermo=thermo, thermo_every=self.thermo, dump=self.dump,
                          dump_every=(self.dump_every or 100) if self.dump else 0, checkpoint=self.checkpoint,
                          checkpoint_every=self.checkpoint_every, stop_checkpoint=f"{name}.ckpt.npz",
                          blowup_save=(blowup_path(self.checkpoint, f"{name}.blowup.npz")
                                       if self.on_blowup == "save" else None),
                          restarted_from=self.restart)


def check_outputs(args: Job) -> None:
    """Refuse output options that cannot work (exit 2); called by rank 0, which writes them all.

    Called before MPI starts (nothing is set up yet); the refusal is not
    final there: :func:`~pympi_gpu.cli.common.run_command` hands it to the
    start-up agreement, so every rank refuses with rank 0, and a directory
    that exists on rank 0's node only is no reason to refuse.
    """
    import os

    from pympi_gpu.cli.simulation import check_thermo_file
    from pympi_gpu.nbody.checkpoint import check_writable

    check_thermo_file(args.thermo_file)
    if args.dump_every is not None and not args.dump:
        fail("--dump-every needs --dump PATH")
    if args.checkpoint_every is not None and not args.checkpoint:
        fail("--checkpoint-every needs --checkpoint PATH")
    if args.checkpoint and (why := check_writable(args.checkpoint)):
        fail(why)
    if args.dump:
        from pympi_gpu.nbody.dump import format_of

        try:
            format_of(args.dump)
        except ValueError as exc:
            fail(f"--dump: {exc}")
        if not os.path.isdir(os.path.dirname(args.dump) or "."):
            fail(f"--dump: the directory of {args.dump!r} does not exist")
