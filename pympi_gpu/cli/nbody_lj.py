"""``pympi-nbody ATOMS --model lj``: the Lennard-Jones run and its summary."""

from __future__ import annotations

import contextlib
import json

import click
import numpy as np

from pympi_gpu.cli.common import configure_threads, fail, given, mpi_world, select_gpu_early
from pympi_gpu.cli.signals import Stop
from pympi_gpu.cli.simulation import (TWICE, ThermoOutput, choose_devices, clear_stale_temporaries,
                                      exit_if_stopped, exit_if_unverified, format_tail, open_trajectory, progress,
                                      simulating)

SCHEMA = "pympi_gpu.nbody.lj/1"
#: options a restart file fixes
_FROM_FILE = ("dt", "seed", "density", "temperature", "cutoff", "skin")
LJ_DT = 0.005
LJ_SEED = 87287
#: --verify's default energy bound for LJ: the unshifted cutoff makes the energy jump as pairs cross
#: it (LAMMPS's own bench/in.lj drifts 1.9e-3 in its 100 steps), so 1e-3 would fail correct runs
LJ_ENERGY_TOLERANCE = 1e-2


def lj_title(config, ranks: int, grid) -> str:
    """The summary's first line, from the run's :class:`~pympi_gpu.nbody.lj.driver.LjConfig` (or record)."""
    return (f"lj: {config.atoms:,} atoms ({config.cells}^3 fcc cells, density {config.density:g}, box "
            f"{config.box:.6g}), {ranks} rank(s) as a {'x'.join(map(str, grid))} grid, T0 {config.temperature:g} "
            f"(seed {config.seed}), dt {config.dt:g}, cutoff {config.cutoff:g} + skin {config.skin:g}")


def format_lj(run, threads: int, shown: bool = False) -> str:
    """The human summary of a :class:`~pympi_gpu.nbody.lj.record.LjRun`.

    ``shown``: the title line and the thermo rows were printed as the run went (left out here).
    """
    from pympi_gpu.nbody.lj.thermo import HEADER, format_row

    lines = [] if shown else [lj_title(run, run.ranks, run.grid)]
    lines.append(f"  steps      {run.steps} (step {run.first_step} -> {run.last_step})"
                 + (f", restarted from {run.restarted_from}" if run.restarted_from else ""))
    lines.append(f"  backend    {run.backend} ({run.backend_reason}), threads/rank {threads}, "
                 f"{'half lists, Newton across bricks' if run.newton else 'full lists'}, transport {run.transport} "
                 f"({run.transport_reason})")
    lines.append(f"  atoms      {min(run.atoms_per_rank):,}..{max(run.atoms_per_rank):,} per rank, "
                 f"{run.ghosts_per_rank:,.0f} ghosts per rank, {run.neighbors_per_atom:.2f} neighbours per atom "
                 f"(cutoff + skin), {run.rebuilds} rebuilds")
    if run.steps:
        lines.append(f"  time       {run.wall_time:.4f} s, {run.time_per_step:.4e} s/step "
                     f"(median {run.median_step_time:.4e}), halo/migration {run.comm_per_step:.3e} s/step "
                     f"not hidden (max over ranks), CPU {100 * run.cpu_time / run.wall_time:.0f}% of wall")
        lines.append(f"  rate       {run.rate:.4e} atom-steps/s")
    if not shown:
        lines.append("  thermo   " + HEADER)
        lines += ["           " + format_row(t) for t in run.thermo]
    if run.energy_drift is not None:
        lines.append(f"  energy     relative drift of TotEng {run.energy_drift:.3e}; momentum |P1 - P0| = "
                     f"{run.momentum_change:.3e}")
    lines += format_tail(run, "force", "atoms", bound=".1e")
    return "\n".join(lines)


def run_lj(ctx, *, bodies, steps, dt, seed, backend, transport, verify, energy_tolerance, checkpoint,
           checkpoint_every, restart, on_blowup, threads, as_json, density, temperature, cutoff, skin, thermo,
           thermo_file=None, dump=None, dump_every=0, quiet=False) -> None:
    """The ``--model lj`` run (parameters as ``pympi-nbody``'s)."""
    from pympi_gpu.nbody.blowup import blowup_path
    from pympi_gpu.nbody.lj import checkpoint as ckpt
    from pympi_gpu.nbody.lj.domain import brick_of, grid_problem, make_cart
    from pympi_gpu.nbody.lj.lattice import cells_for

    dt = LJ_DT if dt is None else dt
    seed = LJ_SEED if seed is None else seed
    if not given(ctx, "energy_tolerance"):
        energy_tolerance = LJ_ENERGY_TOLERANCE
    if bodies < 4:
        fail(f"ATOMS ({bodies}) is too few for the fcc lattice: one cell holds 4 atoms")
    cells = cells_for(bodies)
    if checkpoint_every is not None and not checkpoint:
        fail("--checkpoint-every needs --checkpoint PATH")
    if checkpoint and (why := ckpt.check_writable(checkpoint)):
        fail(why)
    if backend == "numpy":
        fail("--model lj runs on --backend numba or gpu (auto picks one)")
    early = select_gpu_early(backend)
    comm = mpi_world()
    stop = Stop("pympi-nbody", TWICE).install()
    cart = make_cart(comm)
    try:
        dims = tuple(cart.Get_topo()[0])
        from pympi_gpu.nbody.lj.driver import LjConfig, LjSystem, initial_arrays, simulate

        meta = local = None
        if restart:
            def box_of(m):
                return LjConfig(cells=m["cells"], steps=0, density=m["density"]).box
            try:
                meta, local = ckpt.load(cart, restart, box_of, dims)
            except ckpt.CheckpointError as exc:
                fail(f"--restart: {exc}")
            if meta["atoms"] != 4 * cells ** 3:
                fail(f"--restart: {restart!r} holds {meta['atoms']} atoms, but ATOMS is {bodies}")
            values = {"dt": dt, "seed": seed, "density": density, "temperature": temperature, "cutoff": cutoff,
                      "skin": skin}
            for name in _FROM_FILE:
                if given(ctx, name) and values[name] != meta[name]:
                    fail(f"--restart: {restart!r} was run with --{name} {meta[name]}, not {values[name]}")
            dt, seed, density, temperature, cutoff, skin = (meta[k] for k in _FROM_FILE)
            if meta["step"] > steps:
                fail(f"--restart: {restart!r} is at step {meta['step']}, beyond --steps {steps}")
        box = LjConfig(cells=cells, steps=0, density=density).box
        if why := grid_problem(box, dims, cutoff + skin):
            fail(f"{bodies:,} atoms: {why}")
        devices = choose_devices(comm, backend, transport, early, np.float64)
        if devices.gpu:  # the device-resident path holds its arrays in CuPy (NumPy under the simulator)
            import importlib.util

            from pympi_gpu.device.gpu import simulator

            if comm.allreduce(0 if simulator() or importlib.util.find_spec("cupy") else 1):
                fail("--model lj on the GPU needs CuPy, on every rank (the gpu extra: pip install "
                     "'pympi_gpu[gpu]'); or run it with --backend numba")
        nthreads = configure_threads(comm, threads)
        from pympi_gpu.nbody.lj import kernels_cpu

        kernels_cpu.warmup()
        config = LjConfig(cells=cells, steps=steps, density=density, temperature=temperature, cutoff=cutoff,
                          skin=skin, dt=dt, seed=seed, thermo_every=thermo, dump=dump, dump_every=dump_every,
                          newton=nthreads == 1 and not devices.gpu,
                          checkpoint=checkpoint, checkpoint_every=checkpoint_every,
                          stop_checkpoint=f"pympi-nbody-lj-{config_atoms(cells)}.ckpt.npz",
                          blowup_save=(blowup_path(checkpoint, f"pympi-nbody-lj-{config_atoms(cells)}.blowup.npz")
                                       if on_blowup == "save" else None))
        brick = brick_of(config.box, dims, cart.Get_coords(cart.Get_rank()))
        if devices.gpu:
            from functools import partial

            from pympi_gpu.nbody.lj.gpu_system import GpuLjSystem

            make = partial(GpuLjSystem, transport=devices.transport)
        else:
            make = LjSystem
        if restart:
            system = make(cart, config, local["x"], local["v"], local["id"], local["f"])
            initial = meta.get("initial")
            from pympi_gpu.nbody.lj.record import Thermo

            initial = Thermo(**{**initial, "momentum": tuple(initial["momentum"])}) if initial else None
            step = meta["step"]
        else:
            system = make(cart, config, *initial_arrays(config, brick))
            initial, step = None, 0
        from pympi_gpu.run.provenance import collect

        provenance = collect(comm, extra={**devices.provenance(), "threads_per_rank": str(nthreads),
                                          "model": "lj"})
        clear_stale_temporaries(comm, [config.checkpoint, config.stop_checkpoint])
        from pympi_gpu.nbody.lj import thermo as lj_thermo

        rows = ThermoOutput(comm, lj_thermo, echo=not as_json, path=thermo_file,
                            title=lj_title(config, comm.Get_size(), dims))
        rows.start()
        bar, on_step = progress(comm, not quiet, not as_json and steps - step >= 20)
        with simulating(bar, stop), contextlib.closing(rows), open_trajectory(comm, dump, config.box) as frames:
            run = simulate(cart, config, system, step, initial=initial, backend=devices.backend,
                           backend_reason=devices.backend_reason, transport=devices.transport,
                           transport_reason=devices.transport_reason,
                           on_step=on_step, stop_requested=stop.requested, restarted_from=restart,
                           provenance=provenance, on_thermo=rows, dump=frames)
        if verify:
            from dataclasses import replace

            from pympi_gpu.nbody.lj.verify import verify as run_verify

            result = run_verify(cart, system.owned(), config.box, config.cutoff, run.energy_drift,
                                run.momentum_change, energy_tolerance)
            run = replace(run, verification=result)
    finally:
        cart.Free()
    if comm.Get_rank() == 0:
        if as_json:
            from pympi_gpu.run.records import to_dict

            doc = to_dict(run, schema=SCHEMA, app="nbody", model="lj", work_unit="atom-steps")
            doc["threads_per_rank"] = nthreads
            doc["throughput"] = run.rate  # the key pympi-scale reads, in work_unit per second
            click.echo(json.dumps(doc, indent=2))
        else:
            click.echo(format_lj(run, nthreads, shown=rows.shown))
    exit_if_unverified(comm, run.verification)
    exit_if_stopped(comm, run)


def config_atoms(cells: int) -> int:
    return 4 * cells ** 3
