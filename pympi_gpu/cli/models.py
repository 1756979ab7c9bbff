"""The models ``pympi-nbody`` runs: each a recipe in a module of its own, one registry line here, one run.

A model's command module (``nbody_gravity``, ``nbody_lj``) defines ``MODEL``,
an object with the recipe :class:`Model` describes: its name and ``--model``
summary, its own options (click ``Option`` objects; every other model
refuses them), its defaults of the shared ones (``--dt``, ``--seed``,
``--energy-tolerance``), and the steps of a run, which :func:`run` takes in
one order for every model:

1. ``config(args)``: the system the command line asks for, refused before MPI starts;
2. MPI, the stop signals, ``communicator(world)`` (the LJ model's Cartesian grid);
3. ``check(comm, config, args)``: what the ranks must agree on before anything is
   allocated (memory, sizes); ``restart(ctx, comm, args, config)``: the
   checkpoint's :class:`Restart`, its record judged; ``fits(comm, config, args)``:
   what the restarted system must meet (the LJ bricks);
4. the device (:func:`~pympi_gpu.cli.devices.choose_device`, the round trip in
   ``dtype(config)``), the threads, ``on_device(comm, config, device, threads)``;
5. the outputs claimed (the run's ``config.identity()``, ``thermo(config)``: its thermo columns, ``box(config)``),
   ``system(comm, config, device, restart, args)``, the loop with the command's
   writers, ``verify(...)`` where asked, and the record printed by ``human`` or
   ``document``.

Adding a model is its command module (and its package under ``nbody/``) and
one line in :data:`MODULES`: ``--model``, its options' help and the refusal of
another model's options all derive from here.  Two models may declare an
option of one name (``--init``: gravity's initial conditions, LJ's file): the
command has one such option, whose value each model reads with its own type
and default (:class:`PerModel`; ``--model`` is parsed first for it).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import click

__all__ = ["MODULES", "Model", "Restart", "PerModel", "models", "model", "options", "owner_of", "owners_of",
           "own_default", "default_help", "run"]

#: the model commands, by the name ``--model`` takes: a new model is one line here
MODULES = {
    "gravity": "pympi_gpu.cli.nbody_gravity",
    "lj": "pympi_gpu.cli.nbody_lj",
}


@dataclasses.dataclass(frozen=True)
class Restart:
    """What ``--restart`` gave: the restarted ``config``, the checkpoint's ``meta``, this rank's ``local``
    arrays and the step-0 thermo row it records (``initial``, or None).  A start from a file (LJ's ``--init``)
    is handed on the same way: its config, the atoms, ``meta`` at step 0, no initial row."""

    config: Any
    meta: dict
    local: dict
    initial: Any = None


class Model(Protocol):
    """A model's recipe (see the module docstring); ``args`` is the parsed :class:`~pympi_gpu.cli.nbody.Job`."""

    name: str
    summary: str
    #: its own options (click ``Option`` objects): every other model refuses them
    options: Sequence[click.Option]
    #: its defaults of the shared options left unset: ``dt``, ``seed``, ``energy_tolerance``
    defaults: Mapping[str, Any]

    def config(self, args) -> Any: ...                                    # before MPI
    def communicator(self, world, config, args) -> Any: ...               # the model's comm; collective
    def check(self, comm, config, args) -> None: ...                      # collective
    def restart(self, ctx, comm, args, config) -> Restart | None: ...     # collective (a file's start too)
    def fits(self, comm, config, args) -> None: ...                       # collective
    def dtype(self, config) -> Any: ...                                   # the device buffers'
    def on_device(self, comm, config, device, threads: int) -> Any: ...   # collective; the config run
    def system(self, comm, config, device, restart: Restart | None, args) -> Any: ...
    def box(self, config): ...  # the periodic box's edges (three, or a cube's one); None: open space
    def sized_by(self, args) -> str | None: ...                           # what gives BODIES if not given
    def stop_name(self, config) -> str: ...                               # pympi-nbody-N
    def title(self, config, comm) -> str: ...
    def provenance(self, note: str) -> dict[str, str]: ...
    def thermo_rows(self, args) -> bool: ...                              # thermo rows at all?
    def verify(self, comm, system, config, run, args) -> Any: ...         # collective
    def human(self, run, threads: int, shown: bool) -> str: ...
    def document(self, run, threads: int, device) -> dict: ...
    def thermo(self, config) -> Any: ...                                  # the run's thermo columns


@functools.cache
def models() -> dict[str, Model]:
    """Every registered model by name (their command modules imported)."""
    found = {name: importlib.import_module(module).MODEL for name, module in MODULES.items()}
    for name, m in found.items():
        if m.name != name:
            raise RuntimeError(f"{MODULES[name]} registers the model {m.name!r} as {name!r}")
    return found


def model(name: str) -> Model:
    return models()[name]


@functools.cache
def options() -> list[click.Option]:
    """Every model's own options, in registry order (the command's ``--help`` lists them); an option several
    models declare is one (:class:`PerModel`)."""
    declared: dict[str, list[tuple[str, click.Option]]] = {}
    for m in models().values():
        for opt in m.options:
            declared.setdefault(opt.name, []).append((m.name, opt))
    return [found[0][1] if len(found) == 1 else _shared(found) for found in declared.values()]


class PerModel(click.ParamType):
    """The type of an option several models declare: each model's own type reads the value (``--model`` is
    parsed before it, eagerly)."""

    def __init__(self, types: dict[str, click.ParamType]):
        self.types = types
        self.name = "|".join(dict.fromkeys(t.name for t in types.values()))

    def convert(self, value, param, ctx):
        name = (ctx.params.get("model") if ctx is not None else None) or next(iter(self.types))
        kind = self.types.get(name)
        return value if kind is None else kind.convert(value, param, ctx)


def _shared(found: list[tuple[str, click.Option]]) -> click.Option:
    """The one option of a name several models declare: each model's help and default said, no default of its
    own (:func:`own_default` gives each model's)."""
    first = found[0][1]
    helps = []
    for _name, opt in found:
        default = f" [default: {opt.default}]" if opt.default is not None and opt.show_default else ""
        helps.append(f"{(opt.help or '').rstrip('.')}{default}.")
    metavar = "|".join(dict.fromkeys(part for _, opt in found for part in (
        opt.metavar or ("|".join(opt.type.choices) if isinstance(opt.type, click.Choice)
                        else opt.type.name.upper())).split("|")))
    return click.Option(first.opts, type=PerModel({name: opt.type for name, opt in found}), default=None,
                        metavar=metavar, help=" ".join(helps))


def owner_of() -> dict[str, str]:
    """The model each model-own option belongs to, by the option's name (the first, where several declare it)."""
    return {name: owners[0] for name, owners in owners_of().items()}


@functools.cache
def owners_of() -> dict[str, tuple[str, ...]]:
    """The models that declare each model-own option, by the option's name."""
    out: dict[str, tuple[str, ...]] = {}
    for m in models().values():
        for opt in m.options:
            out[opt.name] = out.get(opt.name, ()) + (m.name,)
    return out


def own_default(model_name: str, name: str):
    """Model ``model_name``'s default of its option ``name`` (what its value is where none was given)."""
    for opt in model(model_name).options:
        if opt.name == name:
            return opt.default
    raise KeyError(name)


def default_help(name: str, fmt=str) -> str:
    """``[default: 0.001 gravity, 0.005 lj]``: each model's default of a shared option, for its help."""
    return "[default: " + ", ".join(f"{fmt(m.defaults[name])} {m.name}" for m in models().values()) + "]"


def run(ctx, args, simd_note: str) -> None:
    """Run ``args.model``'s recipe from the parsed command line to the printed record (see the module
    docstring); collective over the world."""
    from pympi_gpu.cli.common import configure_threads, mpi_world, select_gpu_early
    from pympi_gpu.cli.devices import choose_device
    from pympi_gpu.cli.signals import Stop
    from pympi_gpu.cli.simulation import TWICE, arithmetic_unsaid, claim_outputs, report

    m = model(args.model)
    config = m.config(args)
    early = select_gpu_early(args.backend)
    world = mpi_world()
    stop = Stop("pympi-nbody", TWICE, steps=True).install()
    comm = m.communicator(world, config, args)
    system = None
    try:
        m.check(comm, config, args)
        restart = m.restart(ctx, comm, args, config)
        config = restart.config if restart else config
        m.fits(comm, config, args)
        device = choose_device(comm, args.backend, early, transport=args.transport, dtype=m.dtype(config))
        threads = configure_threads(comm, args.threads)
        config = m.on_device(comm, config, device, threads)
        outputs = claim_outputs(comm, args, config.identity(), thermo_module=m.thermo(config), box=m.box(config),
                                through=restart.meta["step"] if restart else None)
        with arithmetic_unsaid():  # a state that overflows is a blow-up: one message, not NumPy's too
            system = m.system(comm, config, device, restart, args)
            record, shown = _simulate(comm, m, config, system, device, outputs, args, stop, threads, simd_note)
    finally:
        if system is not None:
            system.close()
        if comm is not world:
            comm.Free()
    report(world, record, as_json=args.as_json, human=lambda: m.human(record, threads, shown),
           document=lambda: m.document(record, threads, device))


def _simulate(comm, m: Model, config, system, device, outputs, args, stop, threads: int, note: str):
    """The system run through the loop with the command's writers, verified where asked: ``(record,
    shown)``, ``shown`` saying the title and rows are on stdout already."""
    from pympi_gpu.cli.simulation import execute
    from pympi_gpu.run.provenance import collect

    provenance = collect(comm, extra={**device.provenance(), "threads_per_rank": str(threads), **m.provenance(note)})
    options = args.run_options(name=m.stop_name(config), thermo=m.thermo_rows(args))
    record, shown = execute(comm, system, options, device=device, provenance=provenance, stop=stop,
                            thermo_module=m.thermo(config), title=m.title(config, comm), args=args, box=m.box(config),
                            outputs=outputs)
    if args.verify:
        record = m.verify(comm, system, config, record, args)
    return record, shown
