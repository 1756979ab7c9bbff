"""The thermostats on the GPU engine (nbody/lj/gpu/bath.py), under numba's CUDA simulator (subprocesses:
NUMBA_ENABLE_CUDASIM must be set before numba.cuda is imported).

Nose-Hoover and Langevin on the device against the CPU engine: one rank, whose steps the device decides and the
host queues without a wait (the chain's state stays in device memory), and two, whose sum over the ranks goes
through the host; a restart on the device continuing bit for bit; and steps queued again after a wait found a
buffer short, which must put the thermostat's state back with the atoms' and end where a run with room ends,
bit for bit."""

from __future__ import annotations

import json
import sys

import pytest

from helpers.commands import clean_env, mpiexec_argv, run, script

SIM = clean_env(NUMBA_ENABLE_CUDASIM="1", OMP_NUM_THREADS="1")
KEYS = ("temp", "e_pair", "ke", "etotal", "press")


def nbody(ranks: int, *args, **kw):
    return run(mpiexec_argv(ranks) + [script("pympi-nbody"), *map(str, args)], env=SIM, timeout=900, **kw)


def doc_of(out) -> dict:
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def options(bath: str, *more) -> tuple:
    # hot: the lists are rebuilt on the way, atoms cross between the two bricks
    return (256, "--model", "lj", "--thermostat", bath, "--temperature", 1.8, "--tdamp", 0.1, "--threads", 1, "-q",
            "--json", *more)


@pytest.mark.parametrize("bath", ["nvt", "langevin"])
def test_the_device_thermostats_match_the_cpus(bath):
    """10 steps on the simulated device at 1 and 2 ranks, against the CPU's: the thermo to 1e-10 (the GPU-vs-CPU
    tests' tolerance), the chain's econserve included; no atom array copied to the host."""
    args = options(bath, "--steps", 10, "--thermo", 5)
    cpu = doc_of(nbody(1, *args, "--backend", "numba"))
    for ranks in (1, 2):
        gpu = doc_of(nbody(ranks, *args, "--backend", "gpu"))
        assert gpu["backend"] == "gpu" and gpu["thermostat"] == bath and gpu["host_copies_per_step"] == 0
        assert gpu["rebuilds"] >= 2
        for a, b in zip(gpu["thermo"], cpu["thermo"], strict=True):
            for k in (*KEYS, *(("econserve",) if bath == "nvt" else ())):
                assert a[k] == pytest.approx(b[k], rel=1e-10, abs=1e-12), (ranks, a["step"], k)


@pytest.mark.parametrize("bath", ["nvt", "langevin"])
def test_a_restart_on_the_device_continues_bit_for_bit(tmp_path, bath):
    """One rank (the queued steps): 10 steps with a checkpoint at 5, or 5 and 5 more restarted from it: the
    same thermo and the same atoms, bit for bit."""
    import numpy as np

    ck, whole, end = tmp_path / "c.npz", tmp_path / "all.npz", tmp_path / "end.npz"
    args = options(bath, "--backend", "gpu", "--thermo", 5)
    through = doc_of(nbody(1, *args, "--steps", 10, "--checkpoint", whole, "--checkpoint-every", 5))
    doc_of(nbody(1, *args, "--steps", 5, "--checkpoint", ck))
    resumed = doc_of(nbody(1, 256, "--model", "lj", "--backend", "gpu", "--threads", 1, "-q", "--json", "--thermo", 5,
                           "--steps", 10, "--restart", ck, "--checkpoint", end))
    assert resumed["thermo"][-1] == through["thermo"][-1]
    a, b = np.load(whole), np.load(end)
    for k in ("x", "v", "f", "id"):
        assert np.array_equal(a[k], b[k]), k


AGAIN = r"""
import json, sys
import numpy as np
from mpi4py import MPI
from pympi_gpu.device.device import Device
from pympi_gpu.nbody.lj.domain import brick_of, make_cart
from pympi_gpu.nbody.lj.gpu import rebuild_kernels as rk
from pympi_gpu.nbody.lj.system import LjConfig, LjSystem, initial_arrays

config = LjConfig(cells=4, temperature=3.0, skin=0.2, newton=False, thermostat=sys.argv[1], tdamp=0.1)
cart = make_cart(MPI.COMM_WORLD)
brick = brick_of(config.box, cart.Get_topo()[0], cart.Get_coords(cart.Get_rank()))


def system():
    x, v, ids = initial_arrays(config, brick)
    return LjSystem(cart, config, x, v, ids, device=Device(backend="gpu", transport="host", simulated=True))


probe = system()
probe.prepare()
first = probe.atoms.build.read()  # what the start's lists need


def drive(tight):
    s = system()
    if tight:  # the lists' rows exactly as long as the start's need: a rebuild between two waits finds them short
        s.atoms.cap = [int(first[rk.M_OWN_MOST]), int(first[rk.M_GH_MOST])]
    s.prepare()
    for most in (9, 1, 7):
        s.advance_quiet(most, 0)
    s.settle()
    out = s.atoms.owned()
    order = np.argsort(out["id"])
    return {"v": out["v"][order].tolist(), "state": s.atoms.bath_state().tolist(), "redone": s.atoms.redone,
            "step": s.timestep}


print(json.dumps({"wide": drive(False), "tight": drive(True)}))
cart.Free()
"""


@pytest.mark.parametrize("bath", ["nvt", "langevin"])
def test_steps_made_again_put_the_thermostat_back(bath):
    """One rank, rows made short: the wait that finds them so grows them and makes the queued steps again from the
    last wait's state, the thermostat's with it: the velocities and the thermostat's state end as a run with
    room to spare ends them, bit for bit."""
    out = run([sys.executable, "-c", AGAIN, bath], env=SIM, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json.loads(out.stdout)
    assert doc["tight"]["redone"] > 0 and doc["wide"]["redone"] == 0 and doc["tight"]["step"] == 17
    assert doc["tight"]["v"] == doc["wide"]["v"] and doc["tight"]["state"] == doc["wide"]["state"]
