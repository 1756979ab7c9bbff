"""``pympi-nbody ATOMS --model lj``: the Lennard-Jones recipe (:mod:`pympi_gpu.cli.models`) and its summary."""

from __future__ import annotations

import dataclasses

import click
import numpy as np

from pympi_gpu.cli.common import fail, largest, refuse_together
from pympi_gpu.cli.models import Restart
from pympi_gpu.cli.options import IntRange, PositiveFloat, given, step_problem
from pympi_gpu.cli.simulation import format_tail, restart_values
from pympi_gpu.nbody.lj import pairs, thermostats
from pympi_gpu.nbody.lj import precision as precisions
from pympi_gpu.nbody.lj.box import Edges, finite, text, volume
from pympi_gpu.nbody.lj.config import DEFAULT_SEED, FileStart, LjConfig, half_lists

SCHEMA = "pympi_gpu.nbody.lj/1"
#: options a restart file fixes
_FROM_FILE = ("dt", "seed", "density", "temperature", "cutoff", "skin")


class PairCoeff(click.ParamType):
    """``NAME=VALUE``: one coefficient of the pair style (checked against the style once it is known)."""

    name = "name=value"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        import math

        name, eq, number = str(value).partition("=")
        try:
            if not number.isascii():  # float() reads any script's digits
                raise ValueError(number)
            x = float(number)
        except ValueError:
            x = math.nan
        if not eq or not name.strip() or not math.isfinite(x):
            self.fail(f"{value!r} is not NAME=VALUE with a finite number (e.g. d0=1.5)", param, ctx)
        return name.strip(), x


class InitPath(click.ParamType):
    """``PATH`` or ``PATH@FRAME``: the file an LJ run starts from (read, and judged, once MPI has started)."""

    name = "path"

    def convert(self, value, param, ctx):
        text = str(value)
        if not text.strip():
            self.fail("is empty: give the file to start from", param, ctx)
        return text


def lj_title(config, ranks: int, grid) -> str:
    """The summary's first line, from the run's :class:`~pympi_gpu.nbody.lj.config.LjConfig` (or record)."""
    init = _init_of(config)
    if init is None:
        system = f"({config.cells}^3 fcc cells, density {config.density:g}, box {text(config.box)})"
    else:
        system = f"from {init['spec']} ({init['kind']}, density {config.density:.6g}, box {text(config.box)})"
    velocities = ("velocities from the file" if init is not None and init["velocities"]
                  else f"T0 {config.temperature:g} (seed {config.seed})")
    bath = (f", thermostat {config.thermostat} at T {config.temperature:g} (tdamp {config.tdamp:g})"
            if config.thermostat != thermostats.DEFAULT else "")
    return (f"lj: {config.atoms:,} atoms {system}, {ranks} rank(s) as a {'x'.join(map(str, grid))} grid, "
            f"{velocities}, dt {config.dt:g}, pair {pairs.style(config.pair).describe(config.pair_coeffs)} "
            f"cut at {config.cutoff:g} + skin {config.skin:g}{bath}"
            + ("" if config.precision == precisions.DEFAULT else f", {config.precision} precision"))


def _init_of(config) -> dict | None:
    """The file a config (its ``start``) or a record (its ``init``) started from, or None: the lattice."""
    if hasattr(config, "start"):
        return None if config.start is None else config.start.meta()
    return config.init


def format_lj(run, threads: int, shown: bool = False) -> str:
    """The human summary of a :class:`~pympi_gpu.nbody.lj.record.LjRun`.

    ``shown``: the title line and the thermo rows were printed as the run went (left out here).
    """
    from pympi_gpu.nbody.lj.thermo import columns

    thermo = columns(thermostats.style(run.thermostat).couples)
    lines = [] if shown else [lj_title(run, run.ranks, run.grid)]
    lines.append(f"  steps      {run.steps} (step {run.first_step} -> {run.last_step})"
                 + (f", restarted from {run.restarted_from}" if run.restarted_from else "")
                 + (f" (written in {run.written_in}, continued in {run.precision})"
                    if run.restarted_from and run.written_in not in (None, run.precision) else ""))
    lines.append(f"  backend    {run.backend} ({run.backend_reason}), threads/rank {threads}, "
                 f"{'half lists, Newton across bricks' if run.newton else 'full lists'}, transport {run.transport} "
                 f"({run.transport_reason})" + (f", MPI calls from {run.step_mpi}" if run.step_mpi else ""))
    lines.append(f"  atoms      {min(run.atoms_per_rank):,}..{max(run.atoms_per_rank):,} per rank, "
                 f"{run.ghosts_per_rank:,.0f} ghosts per rank, {run.neighbors_per_atom:.2f} neighbours per atom "
                 f"(cutoff + skin), {run.rebuilds} rebuilds" + _policy(run))
    if run.steps:
        lines.append(f"  time       {run.wall_time:.4f} s, {run.time_per_step:.4e} s/step "
                     f"(median {run.median_step_time:.4e}), halo/migration {run.comm_per_step:.3e} s/step "
                     f"not hidden (max over ranks), CPU {100 * run.cpu_time / run.wall_time:.0f}% of wall")
        lines.append(f"  rate       {run.rate:.4e} atom-steps/s")
    if not shown:
        lines.append("  thermo   " + thermo.HEADER)
        lines += ["           " + thermo.format_row(t) for t in run.thermo]
    if run.energy_drift is not None:
        what = "Econserve" if len(thermo.KEYWORDS) > 6 else "TotEng"
        lines.append(f"  energy     relative drift of {what} {run.energy_drift:.3e}; momentum |P1 - P0| = "
                     f"{run.momentum_change:.3e}")
    lines += format_tail(run, "force", "atoms", bound=".1e")
    return "\n".join(lines)


def _policy(run) -> str:
    """The lists' policy in the summary's atoms line, where it is not the default (every step, checked)."""
    if (run.neigh_every, run.neigh_check) == (1, True):
        return ""
    danger = ("not checked" if run.dangerous_builds is None else f"{run.dangerous_builds} dangerous")
    return f" (neigh_modify every {run.neigh_every} check {'yes' if run.neigh_check else 'no'}: {danger})"


def _config(args) -> LjConfig:
    """The system the command line asks for (a restart may replace it); refusals before MPI starts."""
    from pympi_gpu.nbody.lj.lattice import cells_for

    own = args.model_options
    if args.backend == "numpy":
        fail("--model lj runs on --backend numba or gpu (auto picks one)")
    init = own.get("init")
    if init is None and args.bodies < 4:
        fail(f"ATOMS ({args.bodies}) is too few for the fcc lattice: one cell holds 4 atoms")
    dt = LjConfig.dt if args.dt is None else args.dt
    config = LjConfig(cells=0 if init else cells_for(args.bodies), density=own["density"],
                      temperature=own["temperature"], cutoff=own["cutoff"], skin=own["skin"], dt=dt,
                      seed=LjConfig.seed if args.seed is None else args.seed, pair=own["pair"],
                      pair_coeffs=tuple(own["pair_coeff"]), neigh_every=own["neigh_every"],
                      neigh_check=own["neigh_check"] == "yes", start=FileStart(init) if init else None,
                      thermostat=own["thermostat"], precision=own["precision"],
                      tdamp=thermostats.default_tdamp(dt) if own["tdamp"] is None else own["tdamp"])
    if not args.restart:  # a restart's coefficients and thermostat are its checkpoint's (_restart_pair, ...)
        _check_thermostat(config, own["tdamp"] is not None, args.verify)
        try:
            config.coefficients
        except ValueError as exc:
            fail(f"--pair-coeff: {exc}")
    if init is None and (why := _too_large(config)):  # (a file's box is known once it is read: _file_start)
        fail(why)
    return config


def _check_thermostat(config: LjConfig, tdamp_given: bool, verify: bool) -> None:
    """Refuse what the thermostat cannot do: a damping time without one, a target of 0 for a Nose-Hoover
    chain (whose masses it scales: LAMMPS refuses it too), ``--verify`` of a Langevin run (its forces are
    not the pair forces, its energy and momentum are not conserved)."""
    bath = thermostats.style(config.thermostat)
    if tdamp_given and not (bath.scales or bath.forces):
        others = ", ".join(n for n in thermostats.styles() if n != thermostats.DEFAULT)
        fail(f"--tdamp applies to a thermostat (--thermostat {others})")
    if bath.positive and not config.temperature > 0:
        fail(f"--thermostat {config.thermostat} holds --temperature, which must be > 0 (not {config.temperature:g})")
    if verify and bath.forces:
        fail(f"--verify checks the pair forces and the conservation of energy and momentum, which the "
             f"{config.thermostat} thermostat's forces change: run it without --verify")


def _too_large(config: LjConfig) -> str | None:
    """Why the time step, the box or the neighbour search of ``config`` cannot be held in floating point (None:
    they can)."""
    import math

    if why := step_problem(config.dt, np.float64, "fp64"):
        return why
    if not finite(config.box):  # 4 / density overflows: the box would be infinite
        return f"--density {config.density:g} is too small: the fcc cell edge (4 / density)^(1/3) overflows"
    try:  # the neighbour lists are sized from this count
        neighbours = config.cutneigh ** 3 * config.density
    except OverflowError:
        neighbours = math.inf
    if not math.isfinite(neighbours):
        return f"--cutoff {config.cutoff:g} + --skin {config.skin:g} is too large: the neighbour count overflows"
    return None


def _check_memory(cart, config: LjConfig, backend: str, reading: float = 0.0) -> None:
    """Refuse a run that does not fit some rank's node (decided together, before anything is allocated);
    ``reading``: the bytes a rank holds besides its atoms while a file is read."""
    from pympi_gpu.device.gpu import local_rank
    from pympi_gpu.nbody.lj.memory import too_large

    dims = tuple(cart.Get_topo()[0])
    refuse_together(cart, too_large(config, dims, local_rank(cart)[1], gpu=backend == "gpu", reading=reading))


def _check(cart, config: LjConfig, args) -> None:
    """The memory check, before anything is allocated: of the lattice, or of the run a checkpoint continues
    where its atoms come from a file (a file's own start is priced once its header is read, ``_file_start``)."""
    if config.start is None:
        _check_memory(cart, config, args.backend)
    elif args.restart:
        recorded = _recorded_size(cart, args.restart)
        if recorded is not None:
            atoms, box = recorded
            sized = dataclasses.replace(config, density=atoms / volume(box),
                                        start=FileStart(config.start.spec, atoms=atoms, box=box))
            _check_memory(cart, sized, args.backend)


def _recorded_size(cart, path: str) -> tuple[int, Edges] | None:
    """``(atoms, box)`` a checkpoint of a file's run records, read by rank 0 (None: none such, or unreadable:
    the restart says why); collective."""
    found = None
    if cart.Get_rank() == 0:
        from pympi_gpu.nbody.checkpoint import NpzRows
        from pympi_gpu.nbody.lj import checkpoint as ckpt

        try:
            with NpzRows(path) as f:
                meta = f.meta
            atoms, box = meta.get("atoms"), ckpt.recorded_box(meta.get("box"))
            if "init" in meta and isinstance(atoms, int) and atoms > 0 and box is not None:
                found = (atoms, box)
        except Exception:  # noqa: BLE001 (the restart reads it again, and refuses it in one message)
            found = None
    return cart.bcast(found, root=0)


def _check_device_memory(cart, config: LjConfig, device) -> None:
    """Refuse a run whose device buffers do not fit some rank's GPU, with the ranks that share it (decided
    together, before any is made).  Under the simulator the device's memory is the host's."""
    from pympi_gpu.nbody.lj.memory import gpu_too_large
    from pympi_gpu.nbody.memory import available_bytes

    if device.simulated:
        free = available_bytes()
    else:
        from pympi_gpu.device.gpu import free_bytes

        free = free_bytes()
    b = device.binding
    sharing = len(range(b["device"], b["local_size"], b["visible"])) if b else 1
    refuse_together(cart, gpu_too_large(config, tuple(cart.Get_topo()[0]), sharing, free))


def _restart(ctx, cart, args, config: LjConfig):
    """The :class:`~pympi_gpu.cli.models.Restart` of ``--restart`` (each rank's atoms), or None; refusals
    on every rank.

    Every parameter the checkpoint records is judged by the command line's
    rules (:func:`~pympi_gpu.cli.simulation.recorded_values`); one given on the
    command line must be the recorded one, and one that does not apply to the
    recorded run (another pair style's coefficient) is refused.
    """
    from pympi_gpu.cli.simulation import recorded_row, unusable
    from pympi_gpu.nbody.lj import checkpoint as ckpt
    from pympi_gpu.nbody.lj.record import Thermo

    if not args.restart:
        return None
    path = args.restart
    try:
        meta, local = ckpt.load(cart, path, ckpt.box_of, tuple(cart.Get_topo()[0]))
    except ckpt.CheckpointError as exc:
        fail(f"--restart: {exc}")
    config = _restart_start(path, meta, config, args.bodies)
    fixed = restart_values(ctx, path, meta, {name: getattr(config, name) for name in _FROM_FILE})
    fixed.update(_restart_pair(ctx, path, meta, config))
    fixed.update(_restart_policy(ctx, path, meta, config))
    fixed.update(_restart_thermostat(ctx, path, meta, config))
    fixed["precision"] = _restart_precision(ctx, path, meta, config)
    restarted = dataclasses.replace(config, **fixed)
    if why := _too_large(restarted):
        unusable(path, why)
    initial = recorded_row(path, meta, Thermo)
    if meta["step"] > args.steps:
        fail(f"--restart: {path!r} is at step {meta['step']}, beyond --steps {args.steps}")
    _check_thermostat(restarted, False, args.verify)
    return Restart(restarted, meta, local, initial)


def _restart_precision(ctx, path: str, meta: dict, config: LjConfig) -> str:
    """The precision a restart runs in: ``--precision`` where given (another than the checkpoint's is allowed,
    and the summary says so), else the checkpoint's (one written before precisions: fp64)."""
    from pympi_gpu.cli.simulation import unusable

    written = written_precision(meta)
    if written not in precisions.PRECISIONS:
        unusable(path, f"its precision {written!r} is none of {', '.join(precisions.PRECISIONS)}")
    return config.precision if given(ctx, "precision") else written


def written_precision(meta: dict) -> str:
    """The precision a checkpoint's run was in (one written before precisions: fp64)."""
    return meta.get("precision", precisions.DEFAULT)


def _restart_thermostat(ctx, path: str, meta: dict, config: LjConfig) -> dict:
    """The thermostat a checkpoint fixes, with its damping time and state (one written before thermostats,
    or of an NVE run: none); given on the command line they must be the recorded ones (a restart continues
    its run bit for bit)."""
    import math

    from pympi_gpu.cli.simulation import recorded_values, unusable

    name = recorded_values(ctx, path, {"thermostat": meta.get("thermostat", thermostats.DEFAULT)},
                           ["thermostat"])["thermostat"]
    if given(ctx, "thermostat") and config.thermostat != name:
        fail(f"--restart: {path!r} was run with --thermostat {name}, not {config.thermostat}")
    bath = thermostats.style(name)
    if not (bath.scales or bath.forces):
        if given(ctx, "tdamp"):
            fail(f"--restart: {path!r} was run without a thermostat: --tdamp does not apply to it")
        return {"thermostat": name, "tdamp": config.tdamp}
    tdamp = recorded_values(ctx, path, meta, ["tdamp"])["tdamp"]
    if given(ctx, "tdamp") and config.tdamp != tdamp:
        fail(f"--restart: {path!r} was run with --tdamp {tdamp!r}, not {config.tdamp!r}")
    state = meta.get("thermostat_state", [])
    if bath.state_size and not (isinstance(state, list) and len(state) == bath.state_size and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in state)):
        unusable(path, f"its {name} thermostat's state is not {bath.state_size} finite numbers")
    return {"thermostat": name, "tdamp": tdamp}


def _restart_start(path: str, meta: dict, config: LjConfig, bodies: int | None) -> LjConfig:
    """The config of the run a checkpoint continues, as far as its start decides it: the lattice of ATOMS, or
    the file it was started from (``--init`` given again must name it; ATOMS given must be its count)."""
    from pympi_gpu.nbody.lj import checkpoint as ckpt

    init = meta.get("init")
    if init is None:
        if config.start is not None:
            fail(f"--restart: {path!r} was started from the fcc lattice, not --init {config.start.spec}")
        if meta["atoms"] != config.atoms:
            fail(f"--restart: {path!r} holds {meta['atoms']} atoms, but ATOMS is {bodies}")
        return config
    if config.start is not None and config.start.spec != init["spec"]:
        fail(f"--restart: {path!r} was started from --init {init['spec']}, not {config.start.spec}")
    if bodies is not None and bodies != meta["atoms"]:
        fail(f"--restart: {path!r} holds {meta['atoms']:,} atoms (started from --init {init['spec']}), but ATOMS "
             f"is {bodies:,}")
    start = FileStart(init["spec"], kind=init["kind"], atoms=meta["atoms"], box=ckpt.recorded_box(meta["box"]),
                      velocities=init["velocities"])
    return dataclasses.replace(config, cells=0, start=start)


def _file_start(ctx, cart, args, config: LjConfig) -> Restart:
    """The atoms of ``--init`` on every rank (:mod:`~pympi_gpu.nbody.lj.start`): the header read by rank 0 and
    agreed, the run that follows from it checked (ATOMS, the pair coefficients the file records, the bricks,
    the memory with the reading's), then the atoms read a round at a time, each rank keeping its brick's, and
    their velocities drawn where the file has none.  Every refusal on every rank (exit 2)."""
    from pympi_gpu.nbody.lj import start
    from pympi_gpu.nbody.lj.system import drawn_velocities

    spec = config.start.spec
    if given(ctx, "density"):
        fail(f"--density sets the fcc lattice's density: --init {spec} brings its own (its atoms in its box)")
    try:
        header = start.read_header(cart, spec)
    except start.InitError as exc:
        fail(str(exc))
    if args.bodies is not None and args.bodies != header.atoms:
        fail(f"ATOMS is {args.bodies:,}, but --init {header.name} holds {header.atoms:,} atoms: leave ATOMS out "
             "with --init (the file gives it)")
    config = dataclasses.replace(config, cells=0, density=header.atoms / volume(header.box),
                                 start=FileStart(spec, header.kind, header.atoms, header.box, header.velocities))
    _check_pair(header, config)
    _check_grid(cart, config, config.atoms)
    _check_memory(cart, config, args.backend, start.read_bytes(header, cart.Get_size()))
    try:
        local = start.load(cart, spec, header)
    except start.InitError as exc:
        fail(str(exc))
    if local["v"] is None:
        local["v"] = drawn_velocities(config.atoms, config.temperature, config.seed, local["id"], cart)
    local["f"] = None
    return Restart(config, {"step": 0}, local, None)


def _check_pair(header, config: LjConfig) -> None:
    """Refuse a file whose ``Pair Coeffs`` (LAMMPS's ``write_data`` writes them) are not the run's: another
    style, or other coefficients or cutoff than ``--pair-coeff`` and ``--cutoff`` (to the 6 digits LAMMPS
    writes them with)."""
    if header.pair is None:
        return
    named, words = header.pair
    style = named or config.pair
    if style != config.pair:
        known = style in pairs.styles()
        fail(f"--init {header.name}: its Pair Coeffs are pair_style {style}'s, the run's --pair is {config.pair}"
             + (f": give --pair {style}" if known else f": this engine runs {', '.join(sorted(pairs.styles()))}"))
    names = [c.name for c in config.style.coeffs]
    try:
        values = [float(w) for w in words]
    except ValueError:
        fail(f"--init {header.name}: its Pair Coeffs ({style}) {' '.join(words)!r} are not numbers")
    if len(values) not in (len(names), len(names) + 1):
        fail(f"--init {header.name}: its Pair Coeffs ({style}) hold {len(values)} values, not {style}'s "
             f"{', '.join(names)} [cutoff]")
    run = [config.coefficients[n] for n in names] + ([config.cutoff] if len(values) > len(names) else [])
    labels = names + ["cutoff"]
    differ = [(labels[i], v, r) for i, (v, r) in enumerate(zip(values, run)) if abs(v - r) > 5e-6 * abs(r)]
    if differ:
        said = ", ".join(f"{n} {v:g}" for n, v, _ in differ)
        ours = ", ".join(f"{n} {r:g}" for n, _, r in differ)
        give = " ".join(f"--cutoff {v:g}" if n == "cutoff" else f"--pair-coeff {n}={v:g}" for n, v, _ in differ)
        fail(f"--init {header.name}: its Pair Coeffs ({style}) say {said}, the run's are {ours}: give {give} (or "
             "write the file with write_data ... nocoeff)")


def _restart_pair(ctx, path: str, meta: dict, config: LjConfig) -> dict:
    """The pair style and coefficients a checkpoint fixes (one written before styles: lj/cut's defaults).

    ``--pair`` and ``--pair-coeff`` given must be the recorded ones; a
    coefficient the recorded style does not have is refused, not dropped.
    """
    from pympi_gpu.cli.simulation import recorded_values, unusable

    pair = recorded_values(ctx, path, {"pair": meta.get("pair", "lj/cut")}, ["pair"])["pair"]
    coeffs = meta.get("pair_coeffs") or {}
    numbers = isinstance(coeffs, dict) and all(
        isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) for k, v in coeffs.items())
    style = pairs.style(pair)
    try:
        if not numbers:
            raise ValueError(f"not a record of {style.name}'s coefficients by name: {coeffs!r}")
        recorded = style.values(coeffs)
    except ValueError as exc:
        unusable(path, f"its pair coefficients: {exc}")
    if given(ctx, "pair") and config.pair != pair:
        fail(f"--restart: {path!r} was run with --pair {pair}, not {config.pair}")
    if given(ctx, "pair_coeff"):
        asked = dict(config.pair_coeffs)
        foreign = sorted(set(asked) - set(recorded))
        if foreign:
            fail(f"--restart: {path!r} was run with --pair {pair}, whose coefficients are "
                 f"{', '.join(recorded)}: --pair-coeff {', '.join(foreign)} does not apply to it")
        different = {k: v for k, v in asked.items() if v != recorded[k]}
        if different:
            fail(f"--restart: {path!r} was run with the {pair} coefficients "
                 f"{', '.join(f'{k}={recorded[k]:g}' for k in different)}, not "
                 f"{', '.join(f'{k}={v:g}' for k, v in different.items())}")
    return {"pair": pair, "pair_coeffs": tuple(recorded.items())}


def _restart_policy(ctx, path: str, meta: dict, config: LjConfig) -> dict:
    """The lists' policy a checkpoint fixes (one written before policies: every step, checked); given on the
    command line, it must be the recorded one (a restart continues its run bit for bit)."""
    recorded = {"neigh_every": meta.get("neigh_every", 1), "neigh_check": meta.get("neigh_check", "yes")}
    asked = {"neigh_every": config.neigh_every, "neigh_check": "yes" if config.neigh_check else "no"}
    values = restart_values(ctx, path, recorded, asked)
    return {"neigh_every": values["neigh_every"], "neigh_check": values["neigh_check"] == "yes"}


def _box_to_split(world, config: LjConfig, args):
    """The box the rank grid is shaped for (:func:`~pympi_gpu.nbody.lj.domain.grid_dims`): the checkpoint's run's
    (:func:`_recorded_size`: a file's box; a lattice's is a cube), the ``--init`` file's (its header,
    :func:`~pympi_gpu.nbody.lj.start.read_header`), or the lattice's; None where the file cannot be read (the
    restart or the reading refuses it after, in its own words); collective over world."""
    from pympi_gpu.nbody.lj import start

    if args.restart:
        recorded = _recorded_size(world, args.restart)
        return recorded[1] if recorded is not None else config.box
    if config.start is not None:
        try:
            return start.read_header(world, config.start.spec).box
        except start.InitError:
            return None
    return config.box


def _check_grid(cart, config: LjConfig, bodies: int) -> None:
    from pympi_gpu.nbody.lj.domain import grid_problem

    if config.start is not None:
        if why := grid_problem(config.box, tuple(cart.Get_topo()[0]), config.cutneigh, "use fewer ranks"):
            fail(f"--init {config.start.spec}: {why}")
    elif why := grid_problem(config.box, tuple(cart.Get_topo()[0]), config.cutneigh):
        fail(f"{bodies:,} atoms: {why}")


def _need_cupy(comm) -> None:
    import importlib.util

    from pympi_gpu.device.gpu import simulator

    if comm.allreduce(0 if simulator() or importlib.util.find_spec("cupy") else 1):
        fail("--model lj on the GPU needs CuPy, on every rank (the gpu extra: pip install "
             "'pympi_gpu[gpu]'); or run it with --backend numba")


def _system(cart, config: LjConfig, device, restart):
    """This brick's :class:`~pympi_gpu.nbody.lj.system.LjSystem` on ``device`` (on a GPU: device-resident)."""
    from pympi_gpu.nbody.lj.domain import brick_of
    from pympi_gpu.nbody.lj.system import LjSystem, initial_arrays, kernels_call_mpi

    if not device.gpu:
        from pympi_gpu.nbody.lj.cpu import steps as steps_cpu

        steps_cpu.warm(config.pair_term, device.compiled_mpi, kernels_call_mpi(cart, device))
    if restart is None:
        brick = brick_of(config.box, tuple(cart.Get_topo()[0]), cart.Get_coords(cart.Get_rank()))
        return LjSystem(cart, config, *initial_arrays(config, brick, cart), device=device)
    local = restart.local
    state = restart.meta.get("thermostat_state") if config.thermostatted else None
    written = written_precision(restart.meta) if "format" in restart.meta else None  # (None: a file's start)
    return LjSystem(cart, config, local["x"], local["v"], local["id"], local["f"], device=device,
                    timestep=restart.meta["step"], initial=restart.initial,
                    bath_state=None if state is None else [float(x) for x in state], reference=local.get("x0"),
                    built_at=restart.meta.get("built_at"), written_in=written)


def _verify(cart, system, config: LjConfig, run, args):
    from pympi_gpu.nbody.lj.verify import DRIFT_BOUND, verify

    tolerance = DRIFT_BOUND if args.energy_tolerance is None else args.energy_tolerance
    bounds = precisions.precision(config.precision)
    result = verify(cart, system.atoms.owned(), config.box, config.cutoff, run.energy_drift, run.momentum_change,
                    tolerance, config.reference_term, bounds.force_bound, bounds.momentum_bound)
    return dataclasses.replace(run, verification=result)


def _document(run, nthreads: int) -> dict:
    from pympi_gpu.run.records import to_dict

    doc = to_dict(run, schema=SCHEMA, app="nbody", model="lj", work_unit="atom-steps")
    doc["threads_per_rank"] = nthreads
    doc["throughput"] = run.rate  # the key pympi-scale reads, in work_unit per second
    return doc


class Lj:
    """Lennard-Jones atoms over a 3-D domain decomposition (the recipe :class:`~pympi_gpu.cli.models.Model`
    describes)."""

    name = "lj"
    summary = "Lennard-Jones 12-6 with cutoff over a 3-D domain decomposition (LAMMPS bench/in.lj)"
    defaults = {"dt": LjConfig.dt, "seed": DEFAULT_SEED, "energy_tolerance": 1e-2}
    options = (
        click.Option(["--density"], type=PositiveFloat(), default=LjConfig.density, show_default=True,
                     help="lj: reduced number density of the fcc lattice."),
        click.Option(["--temperature"], type=PositiveFloat(allow_zero=True), default=LjConfig.temperature,
                     show_default=True, help="lj: initial temperature (zero total momentum), and the "
                                             "thermostat's target."),
        click.Option(["--thermostat"], type=click.Choice(list(thermostats.styles())), default=thermostats.DEFAULT,
                     show_default=True, help="lj: hold the temperature: "
                     + "; ".join(f"{s.name}: {s.summary}" for s in thermostats.styles().values()) + "."),
        click.Option(["--tdamp"], type=PositiveFloat(), default=None, metavar="T",
                     help=f"lj: the thermostat's damping time (LJ time units), LAMMPS's Tdamp of fix nvt and "
                          f"damp of fix langevin [default: {thermostats.TDAMP_STEPS} steps, "
                          f"{thermostats.default_tdamp(LjConfig.dt):g} at the default --dt]."),
        click.Option(["--cutoff"], type=PositiveFloat(), default=LjConfig.cutoff, show_default=True,
                     help="lj: pair cutoff (sigma)."),
        click.Option(["--skin"], type=PositiveFloat(allow_zero=True), default=LjConfig.skin, show_default=True,
                     help="lj: Verlet-list skin (sigma); lists are rebuilt when an atom moves skin/2."),
        click.Option(["--pair"], type=click.Choice(sorted(pairs.styles())), default=LjConfig.pair, show_default=True,
                     help="lj: the pair style, as LAMMPS names it: "
                          + "; ".join(f"{s.name}: {s.summary}" for s in pairs.styles().values()) + "."),
        click.Option(["--precision"], type=click.Choice(list(precisions.PRECISIONS)), default=precisions.DEFAULT,
                     show_default=True, help="lj: the precision of the pair forces: "
                     + "; ".join(f"{p.name}: {p.summary}" for p in precisions.PRECISIONS.values())
                     + " (a restart keeps its checkpoint's unless given)."),
        click.Option(["--neigh-every"], type=IntRange(1, 10**6), default=LjConfig.neigh_every, show_default=True,
                     metavar="K", help="lj: look at the Verlet lists every K steps after the last build, as "
                                       "LAMMPS's neigh_modify every K (1: every step)."),
        click.Option(["--neigh-check"], type=click.Choice(["yes", "no"]), default="yes", show_default=True,
                     help="lj: where the lists are looked at, rebuild them if an atom moved half the skin "
                          "(yes), or always (no), as LAMMPS's neigh_modify check; LAMMPS's bench/in.lj runs "
                          "every 20 check no.  A K the atoms outrun misses pairs, as in LAMMPS: the record's "
                          "dangerous_builds counts the rebuilds a check found late (none unchecked); an atom "
                          "that outruns its ghosts ends the run."),
        click.Option(["--init"], type=InitPath(), default=None, metavar="PATH[@FRAME]",
                     help="lj: start from this file instead of the fcc lattice: a LAMMPS data file (atom_style "
                          "atomic, as write_data writes it), an extended XYZ (.extxyz, as ASE and --dump write it) "
                          "or a GSD frame (.gsd, HOOMD-blue's and --dump's; PATH@FRAME for another frame than the "
                          "last); one atom type of mass 1 in an orthogonal periodic box, velocities from the file, else "
                          "drawn at --temperature and --seed; BODIES may be left out."),
        click.Option(["--pair-coeff", "pair_coeff"], type=PairCoeff(), multiple=True, metavar="NAME=VALUE",
                     help="lj: a coefficient of the pair style (repeat for more): "
                          + "; ".join(f"{s.name}: " + ", ".join(f"{c.name} ({c.help}, default {c.default:g})"
                                                                 for c in s.coeffs)
                                      for s in pairs.styles().values()) + "."),
    )

    def thermo(self, config: LjConfig):
        """The run's thermo columns (``Econserve`` too where its thermostat has an energy of its own)."""
        from pympi_gpu.nbody.lj.thermo import columns

        return columns(thermostats.style(config.thermostat).couples)

    def config(self, args) -> LjConfig:
        return _config(args)

    def communicator(self, world, config: LjConfig, args):
        from pympi_gpu.nbody.lj.domain import make_cart

        return make_cart(world, _box_to_split(world, config, args), config.cutneigh)

    def check(self, cart, config: LjConfig, args) -> None:
        _check(cart, config, args)

    def restart(self, ctx, cart, args, config: LjConfig) -> Restart | None:
        if config.start is not None and not args.restart:
            return _file_start(ctx, cart, args, config)
        return _restart(ctx, cart, args, config)

    def fits(self, cart, config: LjConfig, args) -> None:
        _check_grid(cart, config, config.atoms)

    def dtype(self, config: LjConfig):
        return np.float64

    def on_device(self, cart, config: LjConfig, device, threads: int) -> LjConfig:
        """CuPy on every rank where the atoms live on the GPU; one list kind for all ranks (each rank's
        thread count is its node's: numba caps it at the cpuset)."""
        if device.gpu:  # the device-resident path holds its arrays in CuPy (NumPy under the simulator)
            _need_cupy(cart)
        config = dataclasses.replace(config, newton=half_lists(device.gpu, largest(cart, threads)))
        if device.gpu:  # (priced with the lists the run makes)
            _check_device_memory(cart, config, device)
        return config

    def system(self, cart, config: LjConfig, device, restart: Restart | None, args):
        return _system(cart, config, device, restart)

    def box(self, config: LjConfig) -> Edges:
        return config.box

    def sized_by(self, args) -> str | None:
        return "--init" if args.model_options.get("init") else None

    def stop_name(self, config: LjConfig) -> str:
        return f"pympi-nbody-lj-{config.atoms}"

    def title(self, config: LjConfig, cart) -> str:
        return lj_title(config, cart.Get_size(), tuple(cart.Get_topo()[0]))

    def provenance(self, note: str) -> dict[str, str]:
        return {"model": "lj"}

    def thermo_rows(self, args) -> bool:
        return True

    def verify(self, cart, system, config: LjConfig, run, args):
        return _verify(cart, system, config, run, args)

    def human(self, run, threads: int, shown: bool) -> str:
        return format_lj(run, threads, shown=shown)

    def document(self, run, threads: int, device) -> dict:
        return _document(run, threads)


#: this module's model, as the registry (:data:`pympi_gpu.cli.models.MODULES`) finds it
MODEL = Lj()
