"""The per-step floor of a projection: the probes' plan and the fit of ``f + w n`` to known points.

pympi-scale running, storing and resuming real probes: tests/cli/test_scale_floor_cli.py."""

from __future__ import annotations

import dataclasses
import json

import pytest

from pympi_gpu.scale.analysis import summarise
from pympi_gpu.scale.points import Point, make_points
from pympi_gpu.scale.probes import DEFAULT_SIZES, plan_probes, size_index
from pympi_gpu.scale.projection import FRONTERA, Model, fit, fit_floor, project

STEPS = 100
F, W = 30e-6, 0.2e-6     # a floor of 30 us a step, 0.2 us an atom-step


def _lj_record(ranks, atoms, f=F, w=W, imbalance=1.0):
    """An LJ record whose mean rank spends ``f + w * atoms / ranks`` seconds a step computing."""
    compute = STEPS * (f + w * atoms / ranks) * (imbalance if ranks > 1 else 1.0)
    comm = 1e-3 if ranks > 1 else 0.0
    wall = compute + comm
    spread = {"max": 0.0, "mean": 0.0}
    return {"schema": "pympi_gpu.nbody.lj/1", "app": "nbody", "ranks": ranks, "wall_time": wall,
            "throughput": atoms * STEPS / wall, "work_unit": "atom-steps", "steps": STEPS,
            "phases": {"compute": {"max": compute, "mean": compute}, "communication": {"max": comm, "mean": comm},
                       "waiting": spread, "io": spread},
            "traffic": {"per": "step", "bytes": {"max": 3e4, "mean": 3e4} if ranks > 1 else spread,
                        "messages": {"max": 6.0, "mean": 6.0} if ranks > 1 else spread}}


def _summaries(atoms=32000, probe_atoms=(500, 4000), **kw):
    """The study (atoms on 1 and 2 ranks) and its floor probes (2 ranks), summarised as pympi-scale does."""
    points = make_points(ranks=(1, 2))
    probes = [p for p, _ in plan_probes(["pympi-nbody", str(atoms)], 1, points, [a // 2 for a in probe_atoms])]
    runs = [{"point": p.key, "ranks": p.ranks, "repeat": 0, "ok": True, "elapsed": 1.0, "launcher": "mpiexec",
             "record": _lj_record(p.ranks, p.size or atoms, **kw)} for p in (*points, *probes)]
    command = ["pympi-nbody", str(atoms)]
    return (summarise(runs, points, 1, "strong", command),
            summarise(runs, probes, 1, "strong", command).points)


# --- the probes' plan ---------------------------------------------------------------------------------

def _takes(option):
    return {"--steps": True, "--model": True, "--threads": True, "--json": False, "-q": False}.get(option)


@pytest.mark.parametrize("argv, at", [
    (["pympi-nbody", "32000", "--model", "lj"], 1),
    (["pympi-nbody", "--model", "lj", "--steps", "20", "32000"], 5),
    (["pympi-nbody", "--model=lj", "-q", "--json", "1e6"], 4),
    (["pympi", "nbody", "--steps", "5", "--", "4000"], 5),
])
def test_size_index_skips_options_and_their_values(argv, at):
    start = 2 if argv[0] == "pympi" else 1
    assert size_index(argv, start, _takes) == at


@pytest.mark.parametrize("argv, words", [(["pympi-nbody", "--model", "lj"], "no size argument"),
                                         (["pympi-nbody", "--modle", "lj", "32000"], "no option '--modle'")])
def test_size_index_refuses(argv, words):
    with pytest.raises(ValueError, match=words):
        size_index(argv, 1, _takes)


def test_probes_run_at_the_largest_point_with_the_size_replaced():
    cmd = ["pympi-nbody", "32000", "--steps", "32000", "--threads", "1"]
    plans = plan_probes(cmd, 1, make_points(ranks=(1, 2, 4)), DEFAULT_SIZES)
    assert [(p.ranks, p.size) for p, _ in plans] == [(4, 1000), (4, 8000)]
    assert [c for _, c in plans] == [["pympi-nbody", "1000", "--steps", "32000", "--threads", "1"],
                                     ["pympi-nbody", "8000", "--steps", "32000", "--threads", "1"]]
    assert cmd[1] == "32000"  # the study's command is left as it was
    assert [p.key for p, _ in plans] == ["n4:size1000", "n4:size8000"]
    assert "floor probe" in plans[0][0].label()
    node, = plan_probes(cmd, 1, make_points(nodes=(1, 2), tasks_per_node=3), (10,))
    assert node[0] == Point(6, 2, 3, size=60) and node[0].key == "N2x3:size60"


# --- the fit ------------------------------------------------------------------------------------------

def test_fit_floor_recovers_a_known_floor_and_slope():
    points = [(n, F + W * n) for n in (36, 250, 2000, 16000, 32000)]
    f, w = fit_floor(points)
    assert f == pytest.approx(F, rel=1e-9) and w == pytest.approx(W, rel=1e-9)
    # 3% noise, alternating: the small sizes still pin the floor (relative residuals)
    noisy = [(n, y * (1.03 if i % 2 else 0.97)) for i, (n, y) in enumerate(points)]
    f, w = fit_floor(noisy)
    assert f == pytest.approx(F, rel=0.1) and w == pytest.approx(W, rel=0.05)


def test_fit_floor_is_never_negative_and_needs_two_sizes():
    # cheaper per atom at small sizes (a cache effect): the best line would cross below 0
    f, w = fit_floor([(250, 250 * 0.30e-6), (2000, 2000 * 0.36e-6), (16000, 16000 * 0.39e-6)])
    assert f == 0.0 and 0.30e-6 < w < 0.39e-6
    with pytest.raises(ValueError, match="two sizes"):
        fit_floor([(500, 1e-4), (500, 1.1e-4)])


def test_probes_give_the_model_its_floor():
    study, probes = _summaries()
    model = fit(study, probes=probes)
    assert model.floor == pytest.approx(F, rel=1e-9) and model.per_unit == pytest.approx(W, rel=1e-9)
    assert model.work == pytest.approx(32000) and model.size_unit == "atoms"
    assert model.serial == model.floor and model.parallel == pytest.approx(W * 32000)
    assert sorted((r, round(n)) for r, n, _ in model.floor_fitted_on) == [(1, 32000), (2, 250), (2, 2000),
                                                                         (2, 16000)]
    assert "2 floor probe(s) at 2 ranks" in model.floor_source
    assert model.messages == (6.0, 0.0)  # the traffic from the study's points: the probes send less
    assert Model.from_dict(json.loads(json.dumps(_as_dict(model)))) == model


def _as_dict(model):
    from pympi_gpu.run.records import to_dict

    return to_dict(model)


def test_the_floor_decides_the_small_sizes_per_rank():
    study, probes = _summaries()
    rows = project(fit(study, probes=probes), (1, 4, 16), 56, FRONTERA, baseline_ranks=1)
    assert [round(r.per_rank) for r in rows] == [571, 143, 36]
    for r in rows:
        assert r.compute == pytest.approx(STEPS * (F + W * 32000 / r.ranks))
        assert r.floor == pytest.approx(STEPS * F)
    assert rows[-1].floor / rows[-1].compute > 0.8       # 36 atoms a rank: the floor is the step
    assert rows[0].floor / rows[0].compute < 0.25        # 571: the atoms still are
    assert rows[-1].efficiency < rows[0].efficiency / 4


def test_imbalance_hides_the_floor_from_the_rank_counts_but_not_from_the_probes():
    # 2 ranks 4% slower than their share, as on a shared node: a + b / P over 1 and 2 ranks reads that as the
    # floor (or, faster, as none); the probes measure it
    study, probes = _summaries(imbalance=1.0)
    slow = _summaries(imbalance=1.04)
    blind = fit(slow[0])
    assert blind.floor is None and blind.serial > 5 * F
    assert fit(study, probes=probes).floor == pytest.approx(F, rel=1e-6)
    assert fit(slow[0], probes=slow[1]).floor < 3 * F


def test_without_usable_probes_the_model_says_why():
    study, probes = _summaries()
    failed = [dataclasses.replace(probes[0], phases=None)]  # a probe that measured nothing
    model = fit(study, probes=failed)
    assert model.floor is None and "gave 0 of 1" in model.floor_source
