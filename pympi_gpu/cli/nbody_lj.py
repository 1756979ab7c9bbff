"""``pympi-nbody ATOMS --model lj``: the Lennard-Jones recipe (:mod:`pympi_gpu.cli.models`) and its summary."""

from __future__ import annotations

import dataclasses

import click
import numpy as np

from pympi_gpu.cli.common import fail, largest, refuse_together
from pympi_gpu.cli.models import Restart
from pympi_gpu.cli.options import IntRange, PositiveFloat, given
from pympi_gpu.cli.simulation import format_tail, restart_values
from pympi_gpu.nbody.lj import pairs
from pympi_gpu.nbody.lj.config import DEFAULT_SEED, LjConfig, half_lists

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


def lj_title(config, ranks: int, grid) -> str:
    """The summary's first line, from the run's :class:`~pympi_gpu.nbody.lj.config.LjConfig` (or record)."""
    return (f"lj: {config.atoms:,} atoms ({config.cells}^3 fcc cells, density {config.density:g}, box "
            f"{config.box:.6g}), {ranks} rank(s) as a {'x'.join(map(str, grid))} grid, T0 {config.temperature:g} "
            f"(seed {config.seed}), dt {config.dt:g}, pair {pairs.style(config.pair).describe(config.pair_coeffs)} "
            f"cut at {config.cutoff:g} + skin {config.skin:g}")


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
        lines.append("  thermo   " + HEADER)
        lines += ["           " + format_row(t) for t in run.thermo]
    if run.energy_drift is not None:
        lines.append(f"  energy     relative drift of TotEng {run.energy_drift:.3e}; momentum |P1 - P0| = "
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
    if args.bodies < 4:
        fail(f"ATOMS ({args.bodies}) is too few for the fcc lattice: one cell holds 4 atoms")
    config = LjConfig(cells=cells_for(args.bodies), density=own["density"], temperature=own["temperature"],
                      cutoff=own["cutoff"], skin=own["skin"], dt=LjConfig.dt if args.dt is None else args.dt,
                      seed=LjConfig.seed if args.seed is None else args.seed, pair=own["pair"],
                      pair_coeffs=tuple(own["pair_coeff"]), neigh_every=own["neigh_every"],
                      neigh_check=own["neigh_check"] == "yes")
    if not args.restart:  # a restart's coefficients are judged against its checkpoint's style (_restart_pair)
        try:
            config.coefficients
        except ValueError as exc:
            fail(f"--pair-coeff: {exc}")
    if why := _too_large(config):
        fail(why)
    return config


def _too_large(config: LjConfig) -> str | None:
    """Why the box or the neighbour search of ``config`` cannot be held in floating point (None: they can)."""
    import math

    if not math.isfinite(config.box):  # 4 / density overflows: the box would be infinite
        return f"--density {config.density:g} is too small: the fcc cell edge (4 / density)^(1/3) overflows"
    try:  # the neighbour lists are sized from this count
        neighbours = config.cutneigh ** 3 * config.density
    except OverflowError:
        neighbours = math.inf
    if not math.isfinite(neighbours):
        return f"--cutoff {config.cutoff:g} + --skin {config.skin:g} is too large: the neighbour count overflows"
    return None


def _check_memory(cart, config: LjConfig, backend: str) -> None:
    """Refuse a run that does not fit some rank's node (decided together, before anything is allocated)."""
    from pympi_gpu.device.gpu import local_rank
    from pympi_gpu.nbody.lj.memory import too_large

    dims = tuple(cart.Get_topo()[0])
    refuse_together(cart, too_large(config, dims, local_rank(cart)[1], gpu=backend == "gpu"))


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
        meta, local = ckpt.load(cart, path, lambda m: LjConfig(cells=m["cells"], density=m["density"]).box,
                                tuple(cart.Get_topo()[0]))
    except ckpt.CheckpointError as exc:
        fail(f"--restart: {exc}")
    if meta["atoms"] != config.atoms:
        fail(f"--restart: {path!r} holds {meta['atoms']} atoms, but ATOMS is {args.bodies}")
    fixed = restart_values(ctx, path, meta, {name: getattr(config, name) for name in _FROM_FILE})
    fixed.update(_restart_pair(ctx, path, meta, config))
    fixed.update(_restart_policy(ctx, path, meta, config))
    restarted = dataclasses.replace(config, **fixed)
    if why := _too_large(restarted):
        unusable(path, why)
    initial = recorded_row(path, meta, Thermo)
    if meta["step"] > args.steps:
        fail(f"--restart: {path!r} is at step {meta['step']}, beyond --steps {args.steps}")
    return Restart(restarted, meta, local, initial)


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


def _check_grid(cart, config: LjConfig, bodies: int) -> None:
    from pympi_gpu.nbody.lj.domain import grid_problem

    if why := grid_problem(config.box, tuple(cart.Get_topo()[0]), config.cutneigh):
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
    from pympi_gpu.nbody.lj.system import LjSystem, initial_arrays

    if not device.gpu:
        from pympi_gpu.nbody.lj.cpu import steps as steps_cpu

        steps_cpu.warm(config.pair_term, device.compiled_mpi)
    if restart is None:
        brick = brick_of(config.box, tuple(cart.Get_topo()[0]), cart.Get_coords(cart.Get_rank()))
        return LjSystem(cart, config, *initial_arrays(config, brick, cart), device=device)
    local = restart.local
    return LjSystem(cart, config, local["x"], local["v"], local["id"], local["f"], device=device,
                    timestep=restart.meta["step"], initial=restart.initial, reference=local.get("x0"),
                    built_at=restart.meta.get("built_at"))


def _verify(cart, system, config: LjConfig, run, args):
    from pympi_gpu.nbody.lj.verify import DRIFT_BOUND, verify

    tolerance = DRIFT_BOUND if args.energy_tolerance is None else args.energy_tolerance
    result = verify(cart, system.atoms.owned(), config.box, config.cutoff, run.energy_drift, run.momentum_change,
                    tolerance, config.pair_term)
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
                     show_default=True, help="lj: initial temperature (zero total momentum)."),
        click.Option(["--cutoff"], type=PositiveFloat(), default=LjConfig.cutoff, show_default=True,
                     help="lj: pair cutoff (sigma)."),
        click.Option(["--skin"], type=PositiveFloat(allow_zero=True), default=LjConfig.skin, show_default=True,
                     help="lj: Verlet-list skin (sigma); lists are rebuilt when an atom moves skin/2."),
        click.Option(["--pair"], type=click.Choice(sorted(pairs.styles())), default=LjConfig.pair, show_default=True,
                     help="lj: the pair style, as LAMMPS names it: "
                          + "; ".join(f"{s.name}: {s.summary}" for s in pairs.styles().values()) + "."),
        click.Option(["--neigh-every"], type=IntRange(1, 10**6), default=LjConfig.neigh_every, show_default=True,
                     metavar="K", help="lj: look at the Verlet lists every K steps after the last build, as "
                                       "LAMMPS's neigh_modify every K (1: every step)."),
        click.Option(["--neigh-check"], type=click.Choice(["yes", "no"]), default="yes", show_default=True,
                     help="lj: where the lists are looked at, rebuild them if an atom moved half the skin "
                          "(yes), or always (no), as LAMMPS's neigh_modify check; LAMMPS's bench/in.lj runs "
                          "every 20 check no.  A K the atoms outrun misses pairs, as in LAMMPS: the record's "
                          "dangerous_builds counts the rebuilds a check found late (none unchecked); an atom "
                          "that outruns its ghosts ends the run."),
        click.Option(["--pair-coeff", "pair_coeff"], type=PairCoeff(), multiple=True, metavar="NAME=VALUE",
                     help="lj: a coefficient of the pair style (repeat for more): "
                          + "; ".join(f"{s.name}: " + ", ".join(f"{c.name} ({c.help}, default {c.default:g})"
                                                                 for c in s.coeffs)
                                      for s in pairs.styles().values()) + "."),
    )

    @property
    def thermo(self):
        from pympi_gpu.nbody.lj import thermo

        return thermo

    def config(self, args) -> LjConfig:
        return _config(args)

    def communicator(self, world):
        from pympi_gpu.nbody.lj.domain import make_cart

        return make_cart(world)

    def check(self, cart, config: LjConfig, args) -> None:
        _check_memory(cart, config, args.backend)

    def restart(self, ctx, cart, args, config: LjConfig) -> Restart | None:
        return _restart(ctx, cart, args, config)

    def fits(self, cart, config: LjConfig, args) -> None:
        _check_grid(cart, config, args.bodies)

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

    def box(self, config: LjConfig) -> float:
        return config.box

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
