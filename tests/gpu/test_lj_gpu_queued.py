"""The steps a GPU's one brick queues without waiting (issue 50): the device decides the rebuilds, and what it
decided alone fails loudly.  Under numba's CUDA simulator (subprocesses: NUMBA_ENABLE_CUDASIM must be set
before numba.cuda is imported).

Each of the rebuild's buffers that can overflow on one rank (a cell's bucket, the ghost rows, a list row) is
made exactly as large as the first lists need, so that a later rebuild, decided on the device between two
waits, finds it short: the wait after it must grow it and make the steps again from the last wait's state,
and the run must end where a run with room to spare ends, bit for bit.  A step at which an atom moves too far
must end the run at that step with the host's message, as the CPU's run does."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from helpers.commands import clean_env, run, script

SIM = clean_env(NUMBA_ENABLE_CUDASIM="1", OMP_NUM_THREADS="1")
NBODY = script("pympi-nbody")

OVERFLOW = r"""
import json, sys
import numpy as np
from mpi4py import MPI
from pympi_gpu.device.device import Device
from pympi_gpu.nbody.lj.domain import brick_of, make_cart
from pympi_gpu.nbody.lj.gpu import rebuild_kernels as rk
from pympi_gpu.nbody.lj.system import LjConfig, LjSystem, initial_arrays

# hot, with a thin skin: a rebuild every few steps, and rows, cells and ghosts that change from one to the next
config = LjConfig(cells=4, temperature=3.0, skin=0.2, newton=False)  # full lists: the command's on a GPU
cart = make_cart(MPI.COMM_WORLD)
brick = brick_of(config.box, cart.Get_topo()[0], cart.Get_coords(cart.Get_rank()))
STEPS = [9, 1, 7]  # three waits: after a batch of steps, after a single step, after another batch


#: the lattice as made (its rows' lengths and cells' counts grow as it melts), and for the ghost rows moved by
#: 0.19 sigma: a plane of atoms just beyond the halo's reach from the brick's faces, which the first steps'
#: motion brings into it (the ghosts grow from 1116 to 1242 at the first rebuild; the lattice's only shrink)
SHIFT = {"cell": 0.0, "lists": 0.0, "rows": 0.19}


def system(shift):
    x, v, ids = initial_arrays(config, brick)
    return LjSystem(cart, config, x + shift, v, ids, device=Device(backend="gpu", transport="host", simulated=True))


def tight(s, which, meta):
    # the buffer made exactly as large as the start's lists need (a later rebuild needing more finds it short);
    # a cell's bucket, whose most rows a hot lattice seldom passes in a few steps, half that after the start
    # (the buckets serve only a rebuild, and the books forget the start's need)
    atoms, build = s.atoms, s.atoms.build
    cap, n = build.capacity, atoms.nlocal
    if which == "cell":
        cap.cell = int(meta[rk.M_CELL_MOST]) // 2
        build._make_cells()
        build.meta[rk.M_CELL_MOST] = 0
        atoms._kept.meta[rk.M_CELL_MOST] = 0
    elif which == "rows":
        cap.rows = int(meta[rk.M_ROWS_MOST])
        build._make_rows()
        atoms._make_atoms(keep=n, rows=n)
        atoms._bind()
    else:
        atoms.cap = [int(meta[rk.M_OWN_MOST]), int(meta[rk.M_GH_MOST])]
    return [cap.cell, cap.rows, *cap.widths]


def drive(s, tighten=None):
    s.prepare()
    if tighten:
        tighten()
    for most in STEPS:
        s.advance_quiet(most, 0)
    s.settle()
    out = s.atoms.owned()
    order = np.argsort(out["id"])
    return {"x": out["x"][order].tolist(), "v": out["v"][order].tolist(), "f": out["f"][order].tolist(),
            "step": s.timestep, "rebuilds": s.atoms.rebuilds, "built_at": s.built_at, "redone": s.atoms.redone,
            "pairs": s.atoms.pairs, "ghosts": s.atoms.n_all - s.atoms.nlocal, "calls": s.atoms.calls()}


report, first, wide = {}, {}, {}
for shift in sorted(set(SHIFT.values())):
    probe = system(shift)
    probe.prepare()
    first[shift] = probe.atoms.build.read()  # what the start's lists needed
    report["queued"] = probe.atoms.queued
    wide[shift] = drive(system(shift))
report["wide"] = wide[0.0]
for which in sys.argv[1:]:
    shift = SHIFT[which]
    s, made = system(shift), []
    if which == "cell":
        result = drive(s, lambda: made.extend(tight(s, which, first[shift])))
    else:
        made = tight(s, which, first[shift])
        result = drive(s)
    report[which] = dict(result, made=made, wide=wide[shift], grown=[s.atoms.build.capacity.cell, s.atoms.build.capacity.rows,
                                                     *s.atoms.build.capacity.widths])
print(json.dumps(report))
cart.Free()
"""


@pytest.fixture(scope="module")
def overflows():
    out = run([sys.executable, "-c", OVERFLOW, "cell", "rows", "lists"], env=SIM, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def test_one_brick_queues_its_steps(overflows):
    wide = overflows["wide"]
    assert overflows["queued"] and wide["step"] == 17 and wide["redone"] == 0
    assert wide["rebuilds"] >= 4  # the start's and at least three the device decided between two waits
    assert wide["built_at"] > 0


@pytest.mark.parametrize("which,index", [("cell", [0]), ("rows", [1]), ("lists", [2, 3])])
def test_a_short_buffer_is_grown_and_the_steps_made_again_bit_for_bit(overflows, which, index):
    tight = overflows[which]
    wide = tight["wide"]  # the same start with room to spare
    assert tight["redone"] > 0, tight  # a rebuild on the device found it short, the wait saw it
    assert any(tight["grown"][k] > tight["made"][k] for k in index), tight
    for key in ("step", "rebuilds", "built_at", "pairs", "ghosts"):
        assert tight[key] == wide[key], key
    for key in ("x", "v", "f"):
        assert np.array_equal(np.array(tight[key]), np.array(wide[key])), key


def test_an_atom_that_moves_too_far_ends_the_run_at_the_cpus_step(tmp_path):
    # T 100 at 256 atoms: the CPU's run blows up at a step of the first ten; the device decided alone, and the
    # wait after must find the step, make the steps again to it and stop there with the host's message
    args = ["256", "--model", "lj", "--temperature", "100", "--steps", "20", "--thermo", "20", "-q"]
    cpu = run([NBODY, *args, "--backend", "numba", "--threads", "1"], env=clean_env(OMP_NUM_THREADS="1"),
              timeout=300)
    assert cpu.returncode == 3, cpu.stderr
    step = int(cpu.stderr.split("blew up at step ")[1].split(":")[0])
    gpu = run([NBODY, *args, "--backend", "gpu", "--on-blowup", "save", "--checkpoint", str(tmp_path / "c.npz")],
              env=SIM, timeout=900)
    assert gpu.returncode == 3, gpu.stderr
    assert f"blew up at step {step}: an atom moved" in gpu.stderr and "between neighbour-list builds" in gpu.stderr
    assert "Traceback" not in gpu.stderr
    broken = tmp_path / "c.blowup.npz"
    assert broken.exists(), sorted(p.name for p in tmp_path.iterdir())
    with np.load(broken) as b:
        assert json.loads(str(b["meta"]))["step"] == step
