"""``pympi-nbody BODIES`` (the gravity model): the run and its summary."""

from __future__ import annotations

import contextlib
import json

import click

from pympi_gpu.cli.common import configure_threads, fail, given, mpi_world, select_gpu_early
from pympi_gpu.cli.signals import Stop
from pympi_gpu.cli.simulation import (TWICE, ThermoOutput, choose_devices, clear_stale_temporaries,
                                      exit_if_stopped, exit_if_unverified, format_tail, open_trajectory, progress,
                                      simulating)

SCHEMA = "pympi_gpu.nbody/1"
MIN_SOFTENING = 1e-15
#: options a restart file fixes; giving a different value is an error
_FROM_FILE = ("dt", "softening", "precision", "seed", "init")


def gravity_title(config, ranks: int) -> str:
    """The summary's first line, from the run's :class:`~pympi_gpu.nbody.gravity.driver.NbodyConfig` (or record)."""
    return (f"n-body: {config.bodies:,} bodies, {ranks} rank(s), {config.precision}, {config.init} "
            f"(seed {config.seed}), dt {config.dt:g}, softening {config.softening:g}")


def format_run(run, threads: int, shown: bool = False) -> str:
    """The human summary of a :class:`~pympi_gpu.nbody.gravity.record.NbodyRun`.

    ``shown``: the title line and the thermo rows were printed as the run went (left out here).
    """
    from pympi_gpu.nbody.gravity.thermo import HEADER, format_row

    lines = [] if shown else [gravity_title(run, run.ranks)]
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
    if run.thermo and not shown:
        lines.append("  thermo   " + HEADER)
        lines += ["           " + format_row(t) for t in run.thermo]
    lines += format_tail(run, "acceleration", "bodies")
    return "\n".join(lines)


def run_gravity(ctx, *, bodies, steps, dt, softening, precision, backend, exchange, transport, seed, init,
                verify, energy_tolerance, benchmark, checkpoint, checkpoint_every, restart, on_blowup, threads, as_json,
                quiet, simd_note, thermo=0, thermo_file=None, dump=None, dump_every=0) -> None:
    """The gravity run (parameters as ``pympi-nbody``'s)."""
    dt = 1e-3 if dt is None else dt
    seed = 20240601 if seed is None else seed
    from pympi_gpu.nbody.blowup import blowup_path
    from pympi_gpu.nbody.gravity import checkpoint as ckpt
    from pympi_gpu.nbody.gravity.backends import make_backend
    from pympi_gpu.nbody.gravity.driver import NbodyConfig, initial_state, local_arrays, simulate, state_from_arrays
    from pympi_gpu.nbody.gravity.exchange import make_exchange
    from pympi_gpu.nbody.gravity.precision import PRECISIONS

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
    stop = Stop("pympi-nbody", TWICE).install()
    if bodies < size:
        fail(f"BODIES ({bodies}) must be at least the number of ranks ({size})")
    from pympi_gpu.device.gpu import local_rank
    from pympi_gpu.nbody.gravity.memory import too_large

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
        values = {"dt": dt, "softening": softening, "precision": precision, "seed": seed, "init": init}
        for name in _FROM_FILE:
            if given(ctx, name) and values[name] != meta[name]:
                fail(f"--restart: {restart!r} was run with --{name} {meta[name]}, not {values[name]}")
        dt, softening, precision, seed, init = (meta[k] for k in ("dt", "softening", "precision", "seed", "init"))
        if meta["step"] > steps:
            fail(f"--restart: {restart!r} is at step {meta['step']}, beyond --steps {steps}")

    devices = choose_devices(comm, backend, transport, early, PRECISIONS[precision])
    be = make_backend(devices.backend, precision)
    nthreads = configure_threads(comm, threads)
    be.warmup()

    config = NbodyConfig(bodies=bodies, steps=steps, dt=dt, softening=softening, precision=precision,
                         init=init, seed=seed, diagnostics=(not benchmark) or verify, thermo_every=thermo,
                         dump=dump, dump_every=dump_every,
                         checkpoint=checkpoint, checkpoint_every=checkpoint_every,
                         stop_checkpoint=f"pympi-nbody-{bodies}.ckpt.npz",
                         blowup_save=(blowup_path(checkpoint, f"pympi-nbody-{bodies}.blowup.npz")
                                      if on_blowup == "save" else None))
    ex = make_exchange(comm, be, bodies, exchange, devices.transport)
    state = state_from_arrays(be, local, meta) if restart else initial_state(comm, be, config)

    from pympi_gpu.run.provenance import collect

    provenance = collect(comm, extra={**devices.provenance(), "threads_per_rank": str(nthreads),
                                      "simd": simd_note})
    clear_stale_temporaries(comm, [config.checkpoint, config.stop_checkpoint])
    bar, on_step = progress(comm, not quiet, not as_json and steps - (meta["step"] if meta else 0) >= 20)
    from pympi_gpu.nbody.gravity import thermo as gravity_thermo

    rows = ThermoOutput(comm, gravity_thermo, echo=not as_json and config.diagnostics, path=thermo_file,
                        title=gravity_title(config, size))
    rows.start()
    with simulating(bar, stop), contextlib.closing(rows), open_trajectory(comm, dump, None) as frames:
        run, state = simulate(comm, config, be, ex, state, backend_reason=devices.backend_reason,
                              transport_reason=devices.transport_reason, on_step=on_step, stop_requested=stop.requested,
                              restarted_from=restart, provenance=provenance, on_thermo=rows, dump=frames)

    if verify:
        from dataclasses import replace

        from pympi_gpu.nbody.gravity.verify import verify as run_verify

        result = run_verify(comm, local_arrays(be, state), bodies, softening, precision, run.energy_drift,
                            energy_tolerance)
        run = replace(run, verification=result)
    if comm.Get_rank() == 0:
        if as_json:
            from pympi_gpu.run.records import to_dict

            doc = to_dict(run, schema=SCHEMA, app="nbody", work_unit="interactions")
            doc["threads_per_rank"] = nthreads
            aware = devices.awareness
            doc["awareness"] = None if aware is None else {"supported": aware.supported, "method": aware.method,
                                                          "detail": aware.detail}
            click.echo(json.dumps(doc, indent=2))
        else:
            click.echo(format_run(run, nthreads, shown=rows.shown))
    exit_if_unverified(comm, run.verification)
    exit_if_stopped(comm, run)
