"""The device step's kernel launches and host waits, counted under the simulator with every declaration
audited (tests/helpers/device_audit.py), against the numbers docs/gpu.md gives ("Per step, as counted"): the
tables are read from the page, so the page and the code cannot drift apart.  Per event through the
library (a step without a rebuild, one with, a thermo row, a check) at 1 and 2 ranks, both transports,
full and half lists; and the LJ record's ``launches_per_step`` and ``host_syncs_per_step`` of a run
through the command line, which sum the events over its steps."""

from __future__ import annotations

import json
import re
import sys

import pytest

from helpers.commands import ROOT, clean_env, mpiexec_argv, run, script

SIM = clean_env(NUMBA_ENABLE_CUDASIM="1", OMP_NUM_THREADS="1")
PAGE = ROOT / "docs" / "gpu.md"
SECTION = "### Per step, as counted"


def _section() -> list[str]:
    lines = PAGE.read_text().splitlines()
    start = lines.index(SECTION) + 1
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("#"))
    return lines[start:end]


def _tables() -> dict[str, list[list[str]]]:
    """The section's tables by the first column's header: rows of cells, header and rule left out."""
    tables, rows = {}, []
    for line in [*_section(), ""]:
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif rows:
            tables[rows[0][0]] = rows[2:]
            rows = []
    return tables


def _per_step() -> dict[str, tuple[int, int, int]]:
    """``{bricks: (launches, syncs, uploads with --transport host)}`` of a step without a rebuild."""
    return {r[0]: tuple(int(c) for c in r[1:4]) for r in _tables()["bricks"]}


def _phases() -> dict[str, dict[str, tuple[int, int]]]:
    """``{bricks: {phase: (launches, syncs)}}``, the phase table's two brick layouts (1×1×1: queued)."""
    rows = _tables()["phase"]
    return {b: {r[0]: (int(r[1 + 2 * k]), int(r[2 + 2 * k])) for r in rows}
            for k, b in enumerate(("1×1×1", "2×1×1"))}


def _queued() -> tuple[int, int]:
    """A queued step's launches and syncs on one brick (with a rebuild or without): its phases summed."""
    phases = _phases()["1×1×1"].values()
    return sum(p[0] for p in phases), sum(p[1] for p in phases)


def _events() -> dict[str, tuple[int, int]]:
    """``{event: (launches, syncs)}``: ``thermo``, ``check``, ``wait`` (for the queued steps), ``rebuild
    2×1×1``."""
    out = {}
    for label, launches, syncs in _tables()["event"]:
        key = ("thermo" if label.startswith("a thermo row") else "check" if label.startswith("a check")
               else "wait" if label.startswith("a wait for the queued steps")
               else "rebuild " + re.search(r"rebuild, (\S+×\S+×\d)", label).group(1))
        out[key] = (int(launches), int(syncs))
    return out


def _rebuild_uploads() -> dict[str, int]:
    """The uploads of a rebuild step at 2×1×1, by transport (the rebuild row's label)."""
    m = re.search(r"uploads: (\d+) over the host, (\d+) over the device transport", "\n".join(_section()))
    return {"host": int(m.group(1)), "device": int(m.group(2))}


def _rebuild_syncs() -> dict[str, int]:
    """The host syncs of a rebuild step at 2×1×1, by transport: the table's (the host transport's), and the
    device transport's from the row's label (its messages need no copy to the host)."""
    m = re.search(r"host syncs: (\d+) over the device transport", "\n".join(_section()))
    return {"host": _events()["rebuild 2×1×1"][1], "device": int(m.group(1))}


def _thermostats() -> dict[str, dict[str, tuple[int, int, int]]]:
    """``{thermostat: {bricks: (launches, syncs, uploads)}}`` a thermostat adds to a step (full lists)."""
    return {r[0]: {"1×1×1": (int(r[1]), int(r[2]), 0), "2×1×1": (int(r[3]), int(r[4]), int(r[5]))}
            for r in _tables()["thermostat"]}


def _thermostat_events() -> tuple[int, int]:
    """What ``nvt`` adds to reading its state (syncs) and to a wait for the queued steps (launches)."""
    m = re.search(r"reads the\s+chain's state \((\d+) sync\), and a wait for the queued steps keeps it \((\d+) launch\)",
                  "\n".join(_section()))
    return int(m.group(1)), int(m.group(2))


def _half() -> tuple[int, int]:
    """Half lists' launches and syncs a step on one rank."""
    m = re.search(r"(\d+) launches\s+and (\d+) sync\s+a step on one rank", "\n".join(_section()))
    return int(m.group(1)), int(m.group(2))


def test_the_page_states_its_counts_once_and_consistently():
    # the per-brick table follows the formula the page gives; the phases add up to it
    for bricks, (launches, syncs, uploads) in _per_step().items():
        travels = [int(d) > 1 for d in bricks.split("×")]
        r = sum(travels)
        g = sum(1 for i, t in enumerate(travels) if not t and (i == 0 or travels[i - 1]))  # runs of self-images
        assert (launches, syncs, uploads) == (1 + r + g + max(r, 1) + 1, r, r), bricks  # a wait a travelling stage
    phases = _phases()["2×1×1"]
    assert sum(p[0] for p in phases.values()) == _per_step()["2×1×1"][0]
    assert sum(p[1] for p in phases.values()) == _per_step()["2×1×1"][1]
    assert _queued() == (11, 0)  # one brick: no wait a step
    assert set(_events()) == {"thermo", "check", "wait", "rebuild 2×1×1"}
    # the page's bound for --thermo 100 on one brick: a row, a wait for it and one for a batch per 100 steps
    launches, syncs = _queued()
    per_100 = [100 * launches + 2 * _events()["wait"][0] + _events()["thermo"][0],
               100 * syncs + 2 * _events()["wait"][1] + _events()["thermo"][1]]
    assert per_100[0] / 100 <= 15 and per_100[1] / 100 <= 0.05  # issue 50's goal
    assert "11.18\nlaunches and 0.03 waits a step" in "\n".join(_section())
    assert per_100 == [1118, 3]


COUNT = r"""
import json, sys
sys.path.insert(0, sys.argv[3])
from helpers import device_audit
device_audit.install()  # every CuPy declaration checked against what its block does
from mpi4py import MPI
from pympi_gpu.device.device import Device
from pympi_gpu.nbody.lj.domain import brick_of, make_cart
from pympi_gpu.nbody.lj.system import LjConfig, LjSystem, initial_arrays

config = LjConfig(cells=4, newton=sys.argv[2] == "half", thermostat=sys.argv[4])
cart = make_cart(MPI.COMM_WORLD)
brick = brick_of(config.box, cart.Get_topo()[0], cart.Get_coords(cart.Get_rank()))
atoms = LjSystem(cart, config, *initial_arrays(config, brick),
                 device=Device(backend="gpu", transport=sys.argv[1], simulated=True)).atoms
atoms.start()

def counted(do):
    before = atoms.calls()
    do()
    after = atoms.calls()
    phases = {p: [c - b for c, b in zip(after[p], before.get(p, [0, 0, 0]))] for p in after}
    return {"total": [sum(c[k] for c in phases.values()) for k in range(3)],
            "phases": {p: c for p, c in phases.items() if any(c)}}

rows = {"steady": [counted(lambda e=e: atoms.step(eflag=e)) for e in (False, True, False)],
        "rebuild": counted(lambda: atoms.step(force_rebuild=True)),
        "after": counted(atoms.step),
        "wait": counted(atoms.settle),
        "thermo": counted(atoms.local_sums),
        "state": counted(atoms.bath_state),
        "check": counted(atoms.finite),
        "rebuilds": atoms.rebuilds, "grid": list(cart.Get_topo()[0])}
atoms.dev.op_seconds = {}  # a rebuild again, profiled op by op (benchmarks/lj.py --mode gpu-profile)
rows["profiled"] = counted(lambda: atoms.step(force_rebuild=True))
rows["places"] = atoms.dev.op_seconds
ranks = cart.gather(rows, root=0)
print(json.dumps(ranks) if ranks is not None else "", end="")
cart.Free()
"""


@pytest.mark.parametrize("ranks,transport,lists", [(1, "host", "full"), (2, "host", "full"), (2, "device", "full"),
                                                   (1, "host", "half")])
def test_each_event_costs_what_the_page_says(ranks, transport, lists):
    env = clean_env(PYMPI_CUDA_AWARE="1", **SIM) if transport == "device" else SIM
    argv = [sys.executable, "-c", COUNT, transport, lists, str(ROOT / "tests"), "nve"]
    out = run((mpiexec_argv(ranks) if ranks > 1 else []) + argv, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    docs = json.loads(out.stdout)
    bricks = "×".join(map(str, docs[0]["grid"]))
    assert bricks == ("1×1×1" if ranks == 1 else "2×1×1")
    for doc in docs:
        assert doc["rebuilds"] == 2  # the start's and the forced one: no other on the way
        steps = [*doc["steady"], doc["after"]]
        if lists == "half":  # not queued: the host decides their rebuilds
            assert all(s["total"][:2] == list(_half()) for s in steps), steps
            assert doc["wait"]["total"] == [0, 0, 0]
            continue
        events = _events()
        if ranks == 1:  # queued: every step the same, a rebuild or not, and the waits the settle's
            for s in [*steps, doc["rebuild"]]:
                assert s["total"] == [*_queued(), 0], s
                assert {p: tuple(c[:2]) for p, c in s["phases"].items()} == _phases()[bricks], s
            assert doc["wait"]["total"] == [*events["wait"], 0]
            assert doc["thermo"]["total"] == [*events["thermo"], 0]
            assert doc["check"]["total"] == [*events["check"], 0]
            assert doc["profiled"]["total"] == doc["rebuild"]["total"]
            assert {"kernel build_lists", "kernel integrate", "kernel bin_owned", "kernel order_cells",
                    "kernel write_images", "kernel order_ghost_cells", "kernel gather_images"} <= set(doc["places"])
            continue
        assert doc["wait"]["total"] == [0, 0, 0]  # nothing queued over several ranks
        launches, syncs, uploads = _per_step()[bricks]
        want = [launches, syncs, uploads if transport == "host" else 0]
        for s in steps:
            assert s["total"] == want, s
            assert {p: tuple(c[:2]) for p, c in s["phases"].items()} == \
                {p: c for p, c in _phases()[bricks].items() if any(c)}, s
        launches, syncs = events[f"rebuild {bricks}"]
        syncs = _rebuild_syncs()[transport]
        uploads = _rebuild_uploads()[transport]  # over the host one more where atoms migrated to the rank
        assert doc["rebuild"]["total"][2] in ((uploads, uploads + 1) if transport == "host" else (uploads,))
        assert doc["rebuild"]["total"][:2] == [launches, syncs], doc["rebuild"]
        assert doc["thermo"]["total"] == [*events["thermo"], 0]
        assert doc["check"]["total"] == [*events["check"], 0]
        # DeviceArrays.op_seconds times every CuPy block by its place and every kernel by its name, and the
        # waits it adds around them are not counted: the profiled rebuild counts the launches and waits the plain
        # one did (and on one rank its uploads: over two, a later rebuild's uploads may differ from the first's)
        assert doc["profiled"]["total"][:2] == doc["rebuild"]["total"][:2], doc["profiled"]
        places = doc["places"]
        assert {"kernel build_lists", "kernel integrate", "kernel bin_owned", "kernel order_cells",
                "kernel write_images", "kernel order_ghost_cells"} <= set(places)
        assert any(re.fullmatch(r"gpu\.halo\.borders:\d+", k) for k in places)  # the ghosts' scan
        assert any(re.fullmatch(r"gpu\.rebuild\.sort:\d+", k) for k in places)  # the cells' scan
        assert all(v >= 0.0 for v in places.values())


@pytest.mark.parametrize("ranks,bath", [(1, "nvt"), (2, "nvt"), (1, "langevin")])
def test_a_thermostat_adds_what_the_page_says(ranks, bath):
    """A thermostat's launches, waits and uploads on top of a step's (the page's thermostat table), all in the
    integrate phase, with a rebuild or without; on one brick still no wait between two outputs."""
    argv = [sys.executable, "-c", COUNT, "host", "full", str(ROOT / "tests"), bath]
    out = run((mpiexec_argv(ranks) if ranks > 1 else []) + argv, env=SIM, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    docs = json.loads(out.stdout)
    bricks = "×".join(map(str, docs[0]["grid"]))
    more = _thermostats()[bath][bricks]
    state_syncs, kept = _thermostat_events() if bath == "nvt" else (0, 0)
    for doc in docs:
        steps = [*doc["steady"], doc["after"], doc["rebuild"]] if ranks == 1 else [*doc["steady"], doc["after"]]
        nve = [*_queued(), 0] if ranks == 1 else list(_per_step()[bricks])
        for s in steps:
            assert s["total"] == [a + b for a, b in zip(nve, more)], s
            phases = _phases()[bricks]
            assert tuple(s["phases"]["integrate"][:2]) == (phases["integrate"][0] + more[0],
                                                           phases["integrate"][1] + more[1]), s
        assert doc["state"]["total"][:2] == [0, state_syncs]
        if ranks == 1:
            assert doc["wait"]["total"] == [_events()["wait"][0] + kept, _events()["wait"][1], 0]


@pytest.mark.parametrize("ranks", [1, 2])
def test_the_record_sums_the_pages_events(ranks):
    # A hot run through the command line: the record's counts per step are the page's events summed over
    # the run (the start's lists, the first row excluded: rebuilds - 1 in the steps), the most of any rank
    argv = [script("pympi-nbody"), "256", "--model", "lj", "--backend", "gpu", "--steps", "20",
            "--temperature", "3.0", "--thermo", "10", "--json"]
    out = run((mpiexec_argv(ranks) if ranks > 1 else []) + argv, env=SIM, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json.loads(out.stdout)
    bricks = "×".join(map(str, doc["grid"]))
    steps, rebuilt, rows = doc["steps"], doc["rebuilds"] - 1, len(doc["thermo"])
    assert rebuilt >= 1 and rows == 3
    events = _events()
    if ranks == 1:  # queued: the waits for the queued steps are the syncs but the rows' and the last check's
        launches, syncs = (round(doc[f] * steps) for f in ("launches_per_step", "host_syncs_per_step"))
        waits = syncs - rows * events["thermo"][1] - events["check"][1]
        assert rows - 1 <= waits <= 2 * (rows - 1)  # one at each row after the first, one after each batch
        assert launches == steps * _queued()[0] + waits * events["wait"][0] + rows * events["thermo"][0] + \
            events["check"][0]
        for phase, (want, _) in _phases()[bricks].items():  # every step's, rebuild or not
            assert doc["device_calls_per_step"][phase]["launches"] == want, phase
        return
    for k, field in enumerate(("launches_per_step", "host_syncs_per_step")):
        steady, rebuild = _per_step()[bricks][k], events[f"rebuild {bricks}"][k]
        total = steps * steady + rebuilt * (rebuild - steady) + rows * events["thermo"][k] + events["check"][k]
        assert doc[field] * steps == pytest.approx(total), field
    for phase in ("integrate", "forces"):  # a rebuild adds none of theirs
        got = doc["device_calls_per_step"][phase]
        assert (got["launches"], got["syncs"]) == _phases()[bricks][phase], phase
