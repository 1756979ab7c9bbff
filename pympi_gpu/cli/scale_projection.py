"""The projection side of ``pympi-scale``: its options, the floor probes, the model's record and table.

``--project-nodes`` fits :mod:`pympi_gpu.scale.projection`'s model to the
study.  For a ``pympi-nbody`` command the study first runs the floor probes
(:mod:`pympi_gpu.scale.probes`): the command at ``--floor-sizes`` atoms (or
bodies) per rank at its largest rank count, stored in PREFIX.jsonl beside
the study's runs, so that the model's per-step floor is measured where it
shows.  Other commands keep the model fitted over the rank counts, and the
projection says so.
"""

from __future__ import annotations

import os

import click

from pympi_gpu.cli.common import fail
from pympi_gpu.cli.options import escape

#: the commands whose size argument the floor probes may replace: pympi-<name> -> its click command
SIZED = {"pympi-nbody": "nbody"}


def options(nodes, tasks_per_node, study_tasks_per_node, latency, bandwidth, floor_sizes, no_floor) -> dict | None:
    """What --project-nodes asks for (node counts, ranks per node, network, floor probes); None without it."""
    if nodes is None:
        if tasks_per_node is not None:
            fail("--project-tasks-per-node goes with --project-nodes")
        if floor_sizes is not None or no_floor:
            fail("--floor-sizes and --no-floor go with --project-nodes")
        return None
    if floor_sizes is not None and no_floor:
        fail("give --floor-sizes or --no-floor, not both")
    from pympi_gpu.scale.probes import DEFAULT_SIZES
    from pympi_gpu.scale.projection import FRONTERA, Network

    same = latency == FRONTERA.latency and bandwidth == FRONTERA.bandwidth
    return dict(nodes=nodes, tasks_per_node=tasks_per_node or study_tasks_per_node,
                network=FRONTERA if same else Network(latency, bandwidth, "given on the command line"),
                floor_sizes=floor_sizes or DEFAULT_SIZES, floor_given=floor_sizes is not None, no_floor=no_floor)


def _size_index(command) -> int:
    """Where the size argument of a pympi-nbody command is; ValueError saying why there is none."""
    name, start = os.path.basename(command[0]), 1
    if name == "pympi" and len(command) > 1:
        name, start = f"pympi-{command[1]}", 2
    if name not in SIZED:
        why = ("a run of pympi-pi has no steps, so no per-step floor to probe" if name == "pympi-pi"
               else f"{name} is not {' or '.join(SIZED)}, whose size argument the probes know")
        raise ValueError(why)
    from pympi_gpu.cli import COMMANDS
    from pympi_gpu.cli.common import lazy
    from pympi_gpu.scale.probes import size_index

    takes = {}
    for param in lazy(COMMANDS[SIZED[name]])().params:
        if isinstance(param, click.Option):
            for opt in param.opts + param.secondary_opts:
                takes[opt] = not (param.is_flag or param.count)
    return size_index(command, start, takes.get)


def floor_probes(command, points, projection) -> tuple | str:
    """The floor probes to run, ``(point, command)`` each, or why there are none.

    A reason that only applies to probes asked for by name (--floor-sizes)
    refuses the study instead.
    """
    if projection is None:
        return ()
    if projection["no_floor"]:
        return "--no-floor"
    from pympi_gpu.scale.probes import plan_probes

    try:
        at = _size_index(command)
    except ValueError as exc:
        if projection["floor_given"]:
            fail(f"--floor-sizes: {exc}")
        return str(exc)
    return plan_probes(command, at, points, projection["floor_sizes"])


def project(summary, projection, probes) -> dict | str:
    """The projection's record (a dict), or a string saying why there is none.

    ``probes`` are the floor probes, ``(size argument, PointSummary)`` each;
    ``projection["why_no_floor"]`` says why none ran (None when they did).
    """
    import dataclasses

    from pympi_gpu.run.records import to_dict
    from pympi_gpu.scale.projection import fit, project as predict

    try:
        model = fit(summary, probes=[p for _, p in probes])
    except ValueError as exc:
        return str(exc)
    if projection.get("why_no_floor"):
        model = dataclasses.replace(model, floor_source=f"{model.floor_source}; no floor probes: "
                                                        f"{projection['why_no_floor']}")
    tpn = projection["tasks_per_node"] or max(model.fitted_on)
    rows = predict(model, projection["nodes"], tpn, projection["network"], summary.baseline_ranks)
    return {"label": "projection: a model fitted to the measured sizes, not a measurement",
            "tasks_per_node": tpn, "network": to_dict(projection["network"]), "model": to_dict(model),
            "floor_probes": [dict(ranks=p.ranks, nodes=p.nodes, tasks_per_node=p.tasks_per_node, size=size,
                                  status=p.status, time=p.time, error=p.error) for size, p in probes],
            "points": [to_dict(r) for r in rows]}


def _terms(model) -> str:
    """The fitted compute terms of a :class:`~pympi_gpu.scale.projection.Model`, in words."""
    if model.floor is None:
        return f"{model.serial:.3g} s serial + {model.parallel:.3g} s / P"
    share = "/ P" if model.kind == "strong" else "per rank"
    return (f"floor f {1e6 * model.floor:.3g} us + w {1e9 * model.per_unit:.3g} ns x {model.work:.4g} "
            f"{model.size_unit} {share}")


def render(doc):
    """The projection as a rich Table, labelled a model."""
    from rich.table import Table

    from pympi_gpu.scale.projection import Model

    net = doc["network"]
    model = Model.from_dict(doc["model"])
    floor = model.floor is not None
    (cm, km), (cb, kb) = model.messages, model.bytes
    table = Table(title=escape(f"PROJECTION (a model, not a measurement): {doc['tasks_per_node']} ranks per node, "
                               f"latency {net['latency']:.2g} s, bandwidth {net['bandwidth']:.3g} B/s"),
                  caption=escape(f"fitted on {', '.join(map(str, model.fitted_on))} rank(s): per {model.per} "
                                 f"{_terms(model)}; messages {cm:.3g} P^{km:.2f}, bytes {cb:.3g} P^{kb:.2f} per "
                                 f"rank; {net['source']}; compute: {model.floor_source}"))
    names = ["nodes", "ranks"] + ([f"{model.size_unit}/rank"] if floor else [])
    names += ["time [s]", "compute [s]"] + (["of it floor [s]"] if floor else [])
    for name in names + ["network [s]", "speedup", "efficiency"]:
        table.add_column(escape(name), justify="right")
    for r in doc["points"]:
        row = [str(r["nodes"]), str(r["ranks"])] + ([f"{r['per_rank']:.4g}"] if floor else [])
        row += [f"{r['time']:.4g}", f"{r['compute']:.4g}"] + ([f"{r['floor']:.4g}"] if floor else [])
        table.add_row(*row, f"{r['communication']:.4g}", f"{r['speedup']:.3g}", f"{100 * r['efficiency']:.1f}%")
    return table
