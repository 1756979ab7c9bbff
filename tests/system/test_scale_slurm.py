"""Scaling studies over the two Slurm nodes of tests/system (fixture ``slurm``): every pympi command's
phases and traffic reach the study, and the projection model, fitted on one node, is checked
against the two-node run it predicts."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from helpers.commands import script

pytestmark = pytest.mark.system

COMMANDS = {
    "pi": ["pympi-pi", "2e7", "--method", "both"],
    "gravity": ["pympi-nbody", "4000", "--steps", "10"],
    "lj": ["pympi-nbody", "4000", "--model", "lj", "--steps", "60"],
}

PINGPONG = textwrap.dedent("""
    import json, time
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    peer = 1 - comm.rank
    out = {}
    for size, reps in ((8, 2000), (1 << 22, 20)):
        buf = np.zeros(size, np.uint8)
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(reps):
            if comm.rank == 0:
                comm.Send(buf, peer); comm.Recv(buf, peer)
            else:
                comm.Recv(buf, peer); comm.Send(buf, peer)
        out[size] = (time.perf_counter() - t0) / (2 * reps)
    if comm.rank == 0:
        print(json.dumps({"latency": out[8], "bandwidth": (1 << 22) / (out[1 << 22] - out[8])}))
""")


#: srun's PMI-2 server refusing a KVS value of MPICH 5.0's start-up, now and then when the two ranks are on
#: two nodes (seen once in a cold CI run; that rank aborts in MPI_Init, srun --kill-on-bad-exit ends the other)
PMI2_START_FAILED = "mpi/pmi2: value not properly terminated"


def _study(slurm, tmp_path, name, sizes, nodes, *extra):
    out = tmp_path / name
    argv = [script("pympi-scale"), *sizes, "--out", str(out), "--timeout", "200", "--threads", "1", *extra,
            "--", *COMMANDS[name]]
    for tries_left in (1, 0):
        p = slurm.salloc(argv, ntasks=2, nodes=nodes, timeout=600)
        if p.returncode == 0 or not (tries_left and PMI2_START_FAILED in p.stdout + p.stderr):
            break
        print(f"\n{name}: a run failed in MPI_Init ({PMI2_START_FAILED}); the study made again")
        argv = [*argv[:1], "--fresh", *argv[1:]]
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(out.with_suffix(".json").read_text())


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_two_node_study_has_phases_and_traffic(slurm, tmp_path, name):
    doc = _study(slurm, tmp_path, name, ["--nodes", "1,2", "--tasks-per-node", "1"], 2)
    assert doc["complete"] and [(p["nodes"], p["ranks"], p["launcher"]) for p in doc["points"]] == [
        (1, 1, "srun"), (2, 2, "srun")]
    per = "run" if name == "pi" else "step"
    for p in doc["points"]:
        assert set(p["phases"]) == {"compute", "communication", "waiting", "io"}
        assert p["phases"]["compute"] > 0 and p["traffic_per"] == per
    two = doc["points"][1]
    assert two["messages_per_rank"] > 0 and two["bytes_per_rank"] > 0
    assert two["serial_fraction"] is not None


def test_the_model_fitted_on_one_node_predicts_two(slurm, tmp_path):
    """Fit on 1 and 2 ranks of one node, project to 2 nodes x 1 rank with the fake cluster's own network
    (a ping-pong between its nodes), compare with the measured 2-node study.  The network terms are what
    this checks: the compute is fitted over the rank counts (--no-floor), whose fit passes through the
    measured 2-rank point; the floor probes are tests/cli/test_scale_floor_cli.py's."""
    p = slurm.srun([sys.executable, "-c", PINGPONG], ntasks=2, nodes=2, timeout=180)
    assert p.returncode == 0, p.stderr
    net = json.loads(p.stdout)
    assert net["latency"] > 0 and net["bandwidth"] > 0
    for attempt in range(2):  # timings on a shared 2-core host (CI's image builds beside): a second look
        where = tmp_path / f"try{attempt}"
        (where / "n2").mkdir(parents=True)
        one = _study(slurm, where, "gravity", ["--ranks", "1,2", "--repeat", "3"], 1,
                     "--project-nodes", "2", "--project-tasks-per-node", "1", "--no-floor",
                     "--latency", repr(net["latency"]), "--bandwidth", repr(net["bandwidth"]))
        two = _study(slurm, where / "n2", "gravity", ["--nodes", "1,2", "--tasks-per-node", "1", "--repeat", "3"], 2)
        predicted = one["projection"]["points"][0]
        assert predicted["nodes"] == 2 and predicted["ranks"] == 2
        measured = two["points"][1]["time"]
        error = abs(predicted["time"] - measured) / measured
        print(f"\nmodel fitted on 1,2 ranks of one node: 2 nodes x 1 rank predicted {predicted['time']:.4f} s, "
              f"measured {measured:.4f} s, error {100 * error:.1f}% (latency {net['latency']:.2e} s, "
              f"bandwidth {net['bandwidth']:.3e} B/s)")
        if error < 0.5:
            break
    assert error < 0.5  # a lower bound by construction, on a shared 2-core host: within 50%
