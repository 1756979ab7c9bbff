"""Where the time goes in a scaling study: phases and traffic per size, the Karp-Flatt metric,
the superlinear warning, and the projection model (pure parts of pympi_gpu.scale)."""

from __future__ import annotations

import csv
import json
import math

import pytest

from pympi_gpu.scale import report
from pympi_gpu.scale.analysis import karp_flatt, summarise
from pympi_gpu.scale.points import make_points
from pympi_gpu.scale.projection import FRONTERA, Network, fit, project

STEPS = 100


def _spread(x, imbalance=1.0):
    return {"max": x * imbalance, "mean": x}


def _record(ranks, compute, comm=0.0, wait=0.0, io=0.0, msgs=0.0, nbytes=0.0, per="step"):
    wall = compute + comm + wait + io
    return {"schema": "x/1", "app": "nbody", "ranks": ranks, "wall_time": wall, "throughput": 1e6 / wall,
            "work_unit": "interactions", "steps": STEPS, "provenance": {"ranks": ranks},
            "phases": {"compute": _spread(compute), "communication": _spread(comm), "waiting": _spread(wait, 2.0),
                       "io": _spread(io)},
            "traffic": {"per": per, "bytes": _spread(nbytes), "messages": _spread(msgs)}}


def _runs(records_by_ranks, repeat=1):
    pts = make_points(ranks=tuple(sorted(records_by_ranks)))
    runs = [{"point": p.key, "ranks": p.ranks, "repeat": i, "ok": True, "elapsed": 1.0, "launcher": "mpiexec",
             "record": records_by_ranks[p.ranks][i]} for p in pts for i in range(repeat)]
    return pts, runs


def test_karp_flatt():
    assert karp_flatt(2.0, 2) == pytest.approx(0.0)                 # ideal: no serial part
    assert karp_flatt(1.0, 4) == pytest.approx(1.0)                 # no speedup: all serial
    # Amdahl with serial fraction f gives back f at every p
    for f in (0.05, 0.2):
        for p in (2, 4, 16):
            assert karp_flatt(1.0 / (f + (1 - f) / p), p) == pytest.approx(f)
    assert karp_flatt(1.5, 1) is None and karp_flatt(None, 2) is None


def test_phases_and_traffic_per_size_are_medians_over_repeats():
    recs = {1: [_record(1, 10.0), _record(1, 12.0), _record(1, 11.0)],
            2: [_record(2, 5.0, 0.5, 0.2, msgs=4, nbytes=800), _record(2, 6.0, 0.7, 0.4, msgs=4, nbytes=800),
                _record(2, 5.5, 0.6, 0.3, msgs=4, nbytes=800)]}
    pts, runs = _runs(recs, repeat=3)
    s = summarise(runs, pts, 3, "strong", ["pympi-nbody", "1e4"])
    two = s.points[1]
    assert two.phases == {"compute": 5.5, "communication": 0.6, "waiting": 0.3, "io": 0.0}
    assert two.phases_max["waiting"] == pytest.approx(0.6)
    assert (two.bytes_per_rank, two.messages_per_rank, two.traffic_per, two.steps) == (800, 4, "step", STEPS)
    assert two.serial_fraction == pytest.approx(karp_flatt(two.speedup, 2))
    assert s.points[0].serial_fraction is None


def test_csv_and_json_carry_the_phases(tmp_path):
    pts, runs = _runs({1: [_record(1, 10.0)], 2: [_record(2, 5.0, 0.5, 0.25, 0.1, msgs=6, nbytes=1e4)]})
    s = summarise(runs, pts, 1, "strong", ["pympi-nbody", "1e4"])
    rows = list(csv.DictReader(open(report.write_csv(s, tmp_path / "s.csv"))))
    assert float(rows[1]["compute_s"]) == 5.0 and float(rows[1]["waiting_s"]) == 0.25
    assert float(rows[1]["waiting_max_s"]) == 0.5 and float(rows[1]["io_s"]) == pytest.approx(0.1)
    assert float(rows[1]["bytes_per_rank"]) == 1e4 and rows[1]["traffic_per"] == "step"
    assert rows[0]["serial_fraction"] == "" and float(rows[1]["serial_fraction"]) > 0
    doc = json.loads(report.write_json(s, tmp_path / "s.json").read_text())
    assert doc["points"][1]["phases"]["communication"] == 0.5


def test_plot_has_a_where_the_time_goes_panel(tmp_path):
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread

    pts, runs = _runs({1: [_record(1, 10.0)], 2: [_record(2, 5.0, 1.0, 2.0)]})
    s = summarise(runs, pts, 1, "strong", ["pympi-nbody", "1e4"])
    png, why = report.write_plot(s, tmp_path / "s.png")
    img = imread(png)
    assert img.shape[1] == 1500, "three panels"
    third = img[:, 1000:, :3]
    # the stacked bars: the compute (C2, green) and waiting (C4, purple) colours are both drawn
    green = ((third[..., 1] > 0.5) & (third[..., 0] < 0.3) & (third[..., 2] < 0.3)).sum()
    purple = ((third[..., 0] > 0.45) & (third[..., 2] > 0.6) & (third[..., 1] < 0.5)).sum()
    assert green > 1000 and purple > 100


@pytest.mark.parametrize("repeats, superlinear", [
    ([10.0, 10.1, 9.9], ([4.0, 4.1, 4.05], True)),     # 123% even at the worst pairing
    ([10.0, 10.1, 9.9], ([4.0, 5.2, 4.5], False)),     # 4.5 s median: 111%, but 9.9/5.2 = 95% at worst
])
def test_superlinear_only_beyond_the_spread(repeats, superlinear):
    times, expect = superlinear
    recs = {1: [_record(1, t) for t in repeats], 2: [_record(2, t) for t in times]}
    pts, runs = _runs(recs, repeat=3)
    s = summarise(runs, pts, 3, "strong", ["x"])
    assert s.points[1].efficiency > 1.0
    assert s.points[1].superlinear is expect and s.points[0].superlinear is False
    assert bool(s.superlinear) is expect


def test_projection_recovers_a_known_model():
    # T(P) per step = 0.01 + 2 / P compute, 6 messages and 1e5 * P**-0.5 bytes per rank
    def t(p):
        return 0.01 + 2.0 / p

    recs = {p: [_record(p, STEPS * t(p), msgs=6 if p > 1 else 0, nbytes=1e5 * p ** -0.5 if p > 1 else 0)]
            for p in (1, 2, 4, 8)}
    pts, runs = _runs(recs)
    s = summarise(runs, pts, 1, "strong", ["x"])
    model = fit(s)
    assert model.serial == pytest.approx(0.01) and model.parallel == pytest.approx(2.0)
    assert model.messages == pytest.approx((6.0, 0.0)) and model.bytes[1] == pytest.approx(-0.5)
    net = Network(latency=2e-6, bandwidth=1e10)
    rows = project(model, (1, 16, 64), 56, net, baseline_ranks=1)
    for row in rows:
        p = row.ranks
        want = STEPS * (t(p) + 6 * 2e-6 + 1e5 * p ** -0.5 / 1e10)
        assert row.time == pytest.approx(want)
        assert row.speedup == pytest.approx(STEPS * (t(1)) / want)   # the model's own 1-rank time
        assert row.efficiency == pytest.approx(row.speedup / p)
    assert rows[0].efficiency > rows[-1].efficiency  # the serial part and the latency catch up


def test_fit_on_two_sizes_and_weak_studies():
    recs = {1: [_record(1, 10.0)], 2: [_record(2, 6.0, msgs=4, nbytes=1000)]}
    pts, runs = _runs(recs)
    model = fit(summarise(runs, pts, 1, "strong", ["x"]))
    assert model.serial * STEPS == pytest.approx(2.0) and model.parallel * STEPS == pytest.approx(8.0)
    assert model.messages == (4.0, 0.0) and model.bytes == (1000.0, 0.0)   # held at the one size that sent
    weak = {1: [_record(1, 10.0)], 2: [_record(2, 10.4, msgs=4, nbytes=1000)], 4: [_record(4, 10.2, msgs=4,
                                                                                            nbytes=1000)]}
    pts, runs = _runs(weak)
    wmodel = fit(summarise(runs, pts, 1, "weak", ["x"]))
    assert wmodel.serial == 0 and wmodel.parallel * STEPS == pytest.approx(10.2)
    row, = project(wmodel, (4,), 8, FRONTERA, baseline_ranks=1)
    assert row.efficiency == pytest.approx(wmodel.time(1, FRONTERA) / row.time)


def test_fit_refuses_records_without_phases():
    recs = {1: [_record(1, 1.0)]}
    del recs[1][0]["phases"]
    pts, runs = _runs(recs)
    with pytest.raises(ValueError, match="phases"):
        fit(summarise(runs, pts, 1, "strong", ["x"]))


def test_frontera_defaults_are_hdr100():
    assert FRONTERA.bandwidth == 100e9 / 8 and math.isclose(FRONTERA.latency, 1e-6)
    assert "HDR-100" in FRONTERA.source
