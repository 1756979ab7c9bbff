"""``pympi-nbody BODIES``: all-pairs gravitational n-body over MPI ranks."""

from __future__ import annotations

import contextlib
import json
import signal
import sys

import click

from pympi_gpu.cli.common import (CONTEXT_SETTINGS, Count, IntRange, PositiveFloat, configure_threads, fail,
                                  mpi_world, prove_device_transport, select_gpu_early,
                                  version_option)
from pympi_gpu.cli.nbody_lj import check_model_options, lj_options, run_lj

SCHEMA = "pympi_gpu.nbody/1"
MAX_BODIES = 2**31 - 1
MIN_SOFTENING = 1e-15
#: options a restart file fixes; giving a different value is an error
_FROM_FILE = ("dt", "softening", "precision", "seed", "init")


class _Count(Count):
    """A :class:`Count` that says "negative" for negative numbers."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and value.strip().startswith("-") and value.strip()[1:2].isdigit():
            self.fail(f"{value!r} is negative (must be at least {self.minimum})", param, ctx)
        return super().convert(value, param, ctx)


class _Bodies(_Count):
    """BODIES: above :data:`MAX_BODIES` the refusal says the memory it would have taken."""

    def convert(self, value, param, ctx):
        from pympi_gpu.counts import MAX_COUNT
        from pympi_gpu.nbody.memory import human_bytes, need_bytes

        n = _Count(minimum=self.minimum, maximum=MAX_COUNT).convert(value, param, ctx)
        if n > self.maximum:
            self.fail(f"{value!r} is out of range (at most {self.maximum:,} bodies; {n:.3g} bodies would "
                      f"need about {human_bytes(need_bytes(n, 'fp32'))} of memory in fp32)", param, ctx)
        return n


def format_run(run, threads: int) -> str:
    """The human summary of a :class:`~pympi_gpu.nbody.record.NbodyRun`."""
    lines = [f"n-body: {run.bodies:,} bodies, {run.ranks} rank(s), {run.precision}, {run.init} "
             f"(seed {run.seed}), dt {run.dt:g}, softening {run.softening:g}"]
    lines.append(f"  steps      {run.steps} (step {run.first_step} -> {run.last_step})"
                 + (f", restarted from {run.restarted_from}" if run.restarted_from else ""))
    lines.append(f"  backend    {run.backend} ({run.backend_reason}), threads/rank {threads}")
    lines.append(f"  exchange   {run.exchange}, transport {run.transport} ({run.transport_reason})")
    if run.steps:
        lines.append(f"  time       {run.wall_time:.4f} s, {run.time_per_step:.4e} s/step "
                     f"(median {run.median_step_time:.4e}), MPI wait {run.comm_time:.3e} s (max over ranks)")
        lines.append(f"  rate       {run.throughput:.4e} interactions/s, {run.gflops:.2f} GFLOP/s "
                     f"(20 flops/interaction)")
    if run.initial is not None and run.final is not None:
        lines.append(f"  energy     {run.initial.energy:.10g} (step {run.initial.step}) -> {run.final.energy:.10g}"
                     f", relative drift {run.energy_drift:.3e}")
        lines.append(f"  momentum   |P1 - P0| = {run.momentum_change:.3e}")
    lines += format_tail(run, "acceleration", "bodies")
    return "\n".join(lines)


def format_tail(run, quantity: str, items: str, bound: str = ".3e") -> list[str]:
    """The lines that end both models' summaries: stopped, checkpoint, verify.

    ``quantity`` is what verify compared (``acceleration``, ``force``), ``items``
    what it sampled (``bodies``, ``atoms``), ``bound`` the format of its bound.
    """
    lines = []
    if run.stopped_by:
        lines.append(f"  stopped    by {run.stopped_by} after step {run.last_step}")
    if run.checkpoint:
        lines.append(f"  checkpoint {run.checkpoint} (step {run.last_step}; resume with --restart)")
    v = run.verification
    if v is not None:
        lines.append(f"  verify     {'PASSED' if v.passed else 'FAILED'}: {quantity} error {v.max_error:.3e} "
                     f"(bound {v.error_bound:{bound}}, {v.sample} {items}, median relative "
                     f"{v.median_relative_error:.3e})"
                     + (f", energy drift {v.energy_drift:.3e} (bound {v.drift_bound:.1e})"
                        if v.energy_drift is not None else ""))
        for f in v.failures:
            lines.append(f"  FAILED     {f}")
    return lines


class _Stop:
    """SIGTERM (what Slurm sends before its time limit) asks for a clean stop."""

    def __init__(self):
        self.signal = None

    def __call__(self, signum, frame):
        self.signal = signum

    def __bool__(self):
        return self.signal is not None


def _progress(comm, enabled: bool, bar_ok: bool):
    """Rank 0's progress: a bar on a terminal (``bar_ok``), else plain lines every ~10 s."""
    if not enabled or comm.Get_rank() != 0:
        return None, None
    if not sys.stderr.isatty():
        from pympi_gpu.progress import LineProgress, interval_from_env

        return None, LineProgress(sys.stderr, "pympi-nbody", interval=interval_from_env())
    if not bar_ok:
        return None, None
    from rich.console import Console
    from rich.progress import Progress

    bar = Progress(transient=True, console=Console(stderr=True))
    task = bar.add_task("n-body steps", total=None)
    bar.start()

    def on_step(step, last):
        bar.update(task, completed=step, total=last)
    return bar, on_step


@contextlib.contextmanager
def _simulating(bar, previous):
    """Around a run: a checkpoint error becomes one message; the bar and SIGTERM handler are put back."""
    from pympi_gpu.nbody.checkpoint import CheckpointError

    try:
        yield
    except CheckpointError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        if bar is not None:
            bar.stop()
        signal.signal(signal.SIGTERM, previous)


def _exit_if_unverified(comm, verification) -> None:
    """Exit with status 1 (rank 0 says why) where ``--verify`` ran and failed."""
    if verification is not None and not verification.passed:
        if comm.Get_rank() == 0:
            click.echo("pympi-nbody: verification FAILED: " + "; ".join(verification.failures), err=True)
        sys.exit(1)  # every rank holds the same verdict; click's Exit would be swallowed here


@click.command(context_settings=CONTEXT_SETTINGS)
@version_option()
@click.argument("bodies", type=_Bodies(maximum=MAX_BODIES))
@click.option("--steps", type=_Count(minimum=0, maximum=10**12), default=10, show_default=True,
              help="Leapfrog steps; with --restart, the step to reach.")
@click.option("--dt", type=PositiveFloat(), default=None,
              help="Time step (model units)  [default: 1e-3 gravity, 0.005 lj]")
@click.option("--softening", type=PositiveFloat(), default=0.01, show_default=True,
              help="Softening length eps (> 0): forces ~ 1/(r^2 + eps^2).")
@click.option("--precision", type=click.Choice(["fp32", "fp64"]), default="fp32", show_default=True,
              help="Floating-point precision of positions, velocities and forces.")
@click.option("--backend", type=click.Choice(["auto", "gpu", "numba", "numpy"]), default="auto",
              show_default=True, help="Kernels: the GPU if every rank has one, else numba (auto).")
@click.option("--exchange", type=click.Choice(["ring", "allgather"]), default="ring", show_default=True,
              help="How bodies travel between ranks.")
@click.option("--transport", type=click.Choice(["auto", "device", "host"]), default="auto", show_default=True,
              help="GPU only: device buffers straight to MPI (CUDA-aware) or staged through host memory.")
@click.option("--seed", type=IntRange(0, 2**64 - 1), default=None,
              help="Seed of the initial conditions (same seed, same bodies at any rank count)  "
                   "[default: 20240601 gravity, 87287 lj]")
@click.option("--init", type=click.Choice(["plummer", "uniform"]), default="plummer", show_default=True,
              help="Initial conditions: Plummer sphere or cold uniform ball.")
@click.option("--verify", is_flag=True, help="Check sampled accelerations and the energy drift; exit 1 on failure.")
@click.option("--energy-tolerance", type=PositiveFloat(), default=1e-3, show_default=True,
              help="Relative energy drift that --verify accepts.")
@click.option("--benchmark", is_flag=True, help="Time the steps only: skip energy diagnostics (unless --verify).")
@click.option("--checkpoint", "checkpoint", type=str, default=None, metavar="PATH",
              help="Write the state here at the end (and every K steps, on SIGTERM).")
@click.option("--checkpoint-every", type=_Count(minimum=1, maximum=10**12), default=None, metavar="K",
              help="Also write a checkpoint every K steps.")
@click.option("--restart", type=str, default=None, metavar="PATH", help="Continue from this checkpoint.")
@click.option("--threads", type=IntRange(1, 4096), default=None,
              help="numba threads per rank [default: this node's CPUs / its ranks].")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (its schema: docs/nbody.md; "
              "--model lj: docs/lj.md).")
@click.option("-q", "--quiet", is_flag=True,
              help="No progress on stderr (else rank 0 shows a bar on a terminal, or a line every "
                   "~10 s, PYMPI_PROGRESS_INTERVAL, when stderr is a file or pipe).")
@lj_options
@click.pass_context
def nbody(ctx, bodies, steps, dt, softening, precision, backend, exchange, transport, seed, init, verify,
          energy_tolerance, benchmark, checkpoint, checkpoint_every, restart, threads, as_json, quiet, model,
          **lj):
    """All-pairs gravitational n-body over MPI ranks: BODIES bodies, leapfrog KDK.

    BODIES is a whole number such as 65536, 1e6 or 2_000_000.

    Bodies are spread over the MPI ranks in contiguous blocks; each rank uses
    one GPU (--backend gpu) or its share of the node's cores (numba).

    With --model lj: Lennard-Jones atoms (LAMMPS bench/in.lj) on an fcc lattice
    of k^3 cells, 4 k^3 atoms (BODIES is rounded to the nearest such number),
    over a 3-D domain decomposition with halo exchange.
    """
    from pympi_gpu import jitcache

    simd_note = jitcache.tune_cpu()  # before configure(), which would find it done
    jitcache.configure()
    if model == "lj":
        return run_lj(ctx, bodies=bodies, steps=steps, dt=dt, seed=seed, backend=backend, transport=transport,
                      verify=verify, energy_tolerance=energy_tolerance, checkpoint=checkpoint,
                      checkpoint_every=checkpoint_every, restart=restart, threads=threads, as_json=as_json,
                      quiet=quiet, **lj)
    check_model_options(ctx, model)
    dt = 1e-3 if dt is None else dt
    seed = 20240601 if seed is None else seed
    from pympi_gpu.nbody import checkpoint as ckpt
    from pympi_gpu.nbody.backends import make_backend
    from pympi_gpu.nbody.driver import NbodyConfig, initial_state, local_arrays, simulate, state_from_arrays
    from pympi_gpu.nbody.exchange import choose_transport, make_exchange

    if softening < MIN_SOFTENING:
        fail(f"--softening {softening:g} is below {MIN_SOFTENING:g}")
    if checkpoint_every is not None and not checkpoint:
        fail("--checkpoint-every needs --checkpoint PATH")
    if checkpoint and (why := ckpt.check_writable(checkpoint)):
        fail(why)
    early = select_gpu_early(backend)
    comm = mpi_world()
    size = comm.Get_size()
    # From here on SIGTERM only asks for a stop at the end of the current step.
    stop = _Stop()
    previous = signal.signal(signal.SIGTERM, stop)
    if bodies < size:
        fail(f"BODIES ({bodies}) must be at least the number of ranks ({size})")
    from pympi_gpu.gpu import local_rank
    from pympi_gpu.nbody.memory import too_large

    # Decided together before anything is allocated: one rank short of memory stops them all.
    verdicts = comm.allgather(too_large(bodies, precision, size, local_rank(comm)[1]))
    if any(verdicts):
        fail(next(v for v in verdicts if v))

    meta = local = None
    if restart:
        try:
            meta, local = ckpt.load(comm, restart)
        except ckpt.CheckpointError as exc:
            fail(f"--restart: {exc}")
        if meta["bodies"] != bodies:
            fail(f"--restart: {restart!r} holds {meta['bodies']} bodies, but BODIES is {bodies}")
        given = {name: ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE
                 or ctx.get_parameter_source(name) == click.core.ParameterSource.ENVIRONMENT
                 for name in _FROM_FILE}
        values = {"dt": dt, "softening": softening, "precision": precision, "seed": seed, "init": init}
        for name in _FROM_FILE:
            if given[name] and values[name] != meta[name]:
                fail(f"--restart: {restart!r} was run with --{name} {meta[name]}, not {values[name]}")
        dt, softening, precision, seed, init = (meta[k] for k in ("dt", "softening", "precision", "seed", "init"))
        if meta["step"] > steps:
            fail(f"--restart: {restart!r} is at step {meta['step']}, beyond --steps {steps}")

    if backend == "auto":  # one answer for every rank: GPU only if all have one
        from pympi_gpu.backend_choice import gpu_everywhere

        has_gpu, why = gpu_everywhere(comm)
        backend_name, backend_why = ("gpu" if has_gpu else "numba"), f"auto: {why}"
    else:
        backend_name, backend_why = backend, "requested"
    device_backend = backend_name == "gpu"
    if backend == "gpu":
        from pympi_gpu.gpu import gpu_usable, simulator

        usable, why = gpu_usable()
        # Decided together, so that a rank on a node without a GPU leaves none waiting.
        verdicts = comm.allgather((usable or simulator(), why))
        bad = [(r, w) for r, (ok, w) in enumerate(verdicts) if not ok]
        if bad:
            r, w = bad[0]
            fail(f"--backend gpu: no usable GPU on rank {r} ({w}); use --backend numba or auto")
    awareness = None
    binding = {}
    if device_backend:
        from pympi_gpu.gpu import bind_device, describe

        binding = bind_device(comm, early)
        if transport == "auto" or transport == "device":
            from pympi_gpu.cuda_aware import agree, detect

            awareness = agree(comm, detect())  # one verdict, so that no rank refuses alone
    try:
        transport_name, transport_why = choose_transport(transport, device_backend, awareness)
    except ValueError as exc:
        fail(str(exc))
    be = make_backend(backend_name, precision)
    if transport_name == "device" and not awareness.forced:
        transport_why = prove_device_transport(comm, be, transport, transport_why)
    nthreads = configure_threads(comm, threads)
    be.warmup()

    config = NbodyConfig(bodies=bodies, steps=steps, dt=dt, softening=softening, precision=precision,
                         init=init, seed=seed, diagnostics=(not benchmark) or verify,
                         checkpoint=checkpoint, checkpoint_every=checkpoint_every,
                         stop_checkpoint=f"pympi-nbody-{bodies}.ckpt.npz")
    ex = make_exchange(comm, be, bodies, exchange, transport_name)
    state = state_from_arrays(be, local, meta) if restart else initial_state(comm, be, config)

    from pympi_gpu.provenance import collect

    provenance = collect(comm, extra={"backend_reason": backend_why, "threads_per_rank": str(nthreads),
                                      "simd": simd_note,
                                      **({"gpu": describe(binding)} if binding else {})})
    bar, on_step = _progress(comm, not quiet, not as_json and steps - (meta["step"] if meta else 0) >= 20)
    with _simulating(bar, previous):
        run, state = simulate(comm, config, be, ex, state, backend_reason=backend_why,
                              transport_reason=transport_why, on_step=on_step, stop_requested=stop.__bool__,
                              restarted_from=restart, provenance=provenance)

    if verify:
        from dataclasses import replace

        from pympi_gpu.nbody.verify import verify as run_verify

        result = run_verify(comm, local_arrays(be, state), bodies, softening, precision, run.energy_drift,
                            energy_tolerance)
        run = replace(run, verification=result)
    if comm.Get_rank() == 0:
        if as_json:
            from pympi_gpu.records import to_dict

            doc = to_dict(run, schema=SCHEMA, app="nbody", work_unit="interactions")
            doc["threads_per_rank"] = nthreads
            doc["awareness"] = None if awareness is None else {"supported": awareness.supported,
                                                              "method": awareness.method,
                                                              "detail": awareness.detail}
            click.echo(json.dumps(doc, indent=2))
        else:
            click.echo(format_run(run, nthreads))
    _exit_if_unverified(comm, run.verification)
