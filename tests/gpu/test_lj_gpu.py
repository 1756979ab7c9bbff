"""The LJ model's GPU path under numba's CUDA simulator (subprocesses: NUMBA_ENABLE_CUDASIM must be
set before numba.cuda is imported): the device-resident step (lists, migration and halos on the
device, in NumPy as the simulator's array namespace), both transports, restarts; agreement with
the numba CPU path to round-off; no atom array copied to the host by a step."""

from __future__ import annotations

import json
import sys

import pytest

from helpers.commands import clean_env, mpiexec_argv, run, script

NBODY = script("pympi-nbody")
SIM = clean_env(NUMBA_ENABLE_CUDASIM="1", OMP_NUM_THREADS="1")
ARGS = ["256", "--model", "lj", "--steps", "12", "--thermo", "4", "--json"]


def _doc(argv, env=SIM):
    out = run(argv, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def cpu():
    return _doc([NBODY, *ARGS, "--backend", "numba", "--threads", "1"], env=clean_env(OMP_NUM_THREADS="1"))


def _agree(doc, ref):
    assert [t["step"] for t in doc["thermo"]] == [0, 4, 8, 12]
    for a, b in zip(doc["thermo"], ref["thermo"]):
        for f in ("temp", "e_pair", "etotal", "press"):
            assert a[f] == pytest.approx(b[f], rel=1e-11, abs=1e-12), f


def test_gpu_one_rank_matches_cpu(cpu):
    doc = _doc([NBODY, *ARGS, "--backend", "gpu"])
    assert doc["backend"] == "gpu" and doc["newton"] is False
    assert doc["rebuilds"] >= 1  # a rebuild on the way, on the device
    assert doc["host_copies_per_step"] == 0
    _agree(doc, cpu)


@pytest.mark.parametrize("transport", ["host", "device"])
def test_gpu_two_ranks_both_transports(cpu, transport):
    # the simulator's MPI is not CUDA-aware: say it is, as the gravity model's tests do
    env = clean_env(PYMPI_CUDA_AWARE="1", **SIM) if transport == "device" else SIM
    doc = _doc(mpiexec_argv(2) + [NBODY, *ARGS, "--backend", "gpu", "--transport", transport], env=env)
    assert doc["transport"] == transport and doc["grid"] == [2, 1, 1]
    # hydra exports MPI_LOCALRANKID: the (simulated) GPU was chosen before MPI_Init, as for gravity
    assert "selected before MPI_Init, from MPI_LOCALRANKID=0" in doc["provenance"]["extra_versions"]["gpu"]
    _agree(doc, cpu)


def test_gpu_mixed_precision_is_the_cpus_bit_for_bit():
    """``--precision mixed`` on the device: the CPU's single-precision pair term and order of operations, so
    the CPU's full lists (several threads) give the same thermo bit for bit; and within 1e-5 of double's."""
    mixed = ["--precision", "mixed"]
    gpu = _doc([NBODY, *ARGS, "--backend", "gpu", *mixed])
    cpu = _doc([NBODY, *ARGS, "--backend", "numba", "--threads", "2", *mixed], env=clean_env())
    assert (gpu["precision"], gpu["newton"], cpu["newton"]) == ("mixed", False, False)
    assert gpu["thermo"] == cpu["thermo"] and gpu["rebuilds"] == cpu["rebuilds"] >= 1
    double = _doc([NBODY, *ARGS, "--backend", "numba", "--threads", "2"], env=clean_env())
    assert gpu["thermo"][-1]["e_pair"] == pytest.approx(double["thermo"][-1]["e_pair"], rel=1e-5)
    assert gpu["thermo"][-1]["e_pair"] != double["thermo"][-1]["e_pair"]


def test_device_transport_refused_without_cuda_aware_mpi():
    out = run(mpiexec_argv(2) + [NBODY, *ARGS, "--backend", "gpu", "--transport", "device"],
              env=clean_env(PYMPI_CUDA_AWARE="0", **SIM), timeout=300)
    assert out.returncode == 2, out.stderr
    assert "--transport device: this MPI library is not CUDA-aware" in out.stderr and "Traceback" not in out.stderr


HELD = r"""
import sys
import numpy as np
from mpi4py import MPI
from pympi_gpu.device.device import Device
from pympi_gpu.nbody.lj.domain import brick_of, make_cart
from pympi_gpu.nbody.lj.memory import gpu_need
from pympi_gpu.nbody.lj.system import LjConfig, LjSystem, initial_arrays

config = LjConfig(cells=5, newton=False)
cart = make_cart(MPI.COMM_WORLD)
brick = brick_of(config.box, cart.Get_topo()[0], cart.Get_coords(cart.Get_rank()))
atoms = LjSystem(cart, config, *initial_arrays(config, brick),
                 device=Device(backend="gpu", transport="host", simulated=True)).atoms
atoms.start()
held = {}


def walk(value, depth=0):  # every device array the atoms and their rebuild hold, each memory block once
    if isinstance(value, np.ndarray):
        base = value
        while isinstance(base.base, np.ndarray):
            base = base.base
        held[id(base)] = base.nbytes
    elif isinstance(value, (tuple, list)) and depth < 3:
        for v in value:
            walk(v, depth + 1)


for owner in (atoms, atoms.build):
    for value in vars(owner).values():
        walk(value)
print(sum(held.values()), gpu_need(config, tuple(cart.Get_topo()[0])))
cart.Free()
"""


def test_the_gpu_memory_estimate_is_what_the_buffers_hold():
    out = run([sys.executable, "-c", HELD], env=SIM, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    held, estimate = (float(w) for w in out.stdout.split())
    assert held == pytest.approx(estimate, rel=0.05)


def test_a_run_too_large_for_the_gpu_is_refused_before_anything_is_made():
    # the simulator's device memory is the host's: twice as many atoms as the estimate lets fit (their host
    # copy, 56 bytes an atom, fits the host check), refused at once on every rank with one message
    from pympi_gpu.nbody.lj.config import LjConfig
    from pympi_gpu.nbody.lj.lattice import cells_for
    from pympi_gpu.nbody.lj.memory import gpu_need
    from pympi_gpu.nbody.memory import available_bytes

    free = available_bytes()
    per_atom = gpu_need(LjConfig(cells=cells_for(10**6)), (1, 1, 1)) / LjConfig(cells=cells_for(10**6)).atoms
    atoms = int(2 * free / per_atom)
    for argv in ([NBODY], mpiexec_argv(2) + [NBODY]):
        out = run(argv + [str(atoms), "--model", "lj", "--backend", "gpu", "--steps", "1"], env=SIM, timeout=300)
        assert out.returncode == 2, out.stderr[-2000:]
        assert "of GPU memory on this GPU" in out.stderr and "free; use fewer atoms or more GPUs" in out.stderr
        assert out.stderr.count("Error:") == 1 and "Traceback" not in out.stderr


def test_gpu_restart_bit_for_bit(tmp_path):
    """A run on the device, and the same run in two halves with a checkpoint between two rebuilds: the same
    thermo bit for bit (issue 60, item 21: the checkpoint made the next step rebuild, so only a straight run
    that also wrote one was continued).  Hot, with a thin skin: rebuilds on both sides of the checkpoint."""
    b = tmp_path / "b.npz"
    base = [NBODY, "256", "--model", "lj", "--backend", "gpu", "--json", "--temperature", "3", "--skin", "0.1"]
    straight = _doc(base + ["--steps", "12"])
    half = _doc(base + ["--steps", "6", "--checkpoint", str(b)])
    resumed = _doc(base + ["--steps", "12", "--restart", str(b)])
    assert resumed["first_step"] == 6 and straight["rebuilds"] >= 3
    assert resumed["thermo"][-1] == straight["thermo"][-1] and resumed["thermo"][0] == half["thermo"][-1]


# A hot system (T 3.0): atoms cross bricks and the periodic boundary.  The smallest lattices that split
# over the ranks: 4^3 cells over 1 and 2, 5^3 over 3 (unevenly: 200/150/150 atoms; a thin skin keeps the
# bricks, 2.8 sigma, wider than the halo).  50 steps and a thin skin: 11 rebuilds at 256 atoms and at 500
# over 3 ranks, which under the simulator are what the test costs (a rebuild is about a hundred launches,
# each a Python thread per atom: 2 minutes a case for 100 steps on 2 cores).  Thermo every 25 steps.
HOT = ["--model", "lj", "--steps", "50", "--thermo", "25", "--skin", "0.2", "--temperature", "3.0", "--json"]
SPLIT = {2: [128, 128], 3: [200, 150, 150]}  # the atoms per rank of the initial lattice


@pytest.mark.parametrize("ranks,atoms", [(1, 256), (3, 500)])  # 2 ranks: test_gpu_two_ranks_both_transports
def test_hot_device_resident_matches_cpu(ranks, atoms):
    ref = _doc([NBODY, str(atoms), *HOT, "--backend", "numba", "--threads", "1"],
               env=clean_env(OMP_NUM_THREADS="1"))
    doc = _doc(mpiexec_argv(ranks) + [NBODY, str(atoms), *HOT, "--backend", "gpu", "--transport", "host", "-q"])
    assert doc["backend"] == "gpu" and doc["ranks"] == ranks
    assert doc["host_copies_per_step"] == 0  # nothing but sums and messages left the device
    assert doc["rebuilds"] >= 10 and doc["rebuilds"] == ref["rebuilds"]
    if ranks > 1:  # atoms migrated between bricks
        assert list(doc["atoms_per_rank"]) != SPLIT[ranks]
    assert [t["step"] for t in doc["thermo"]] == [0, 25, 50]
    for a, b in zip(doc["thermo"], ref["thermo"]):
        for f in ("temp", "e_pair", "ke", "etotal", "press"):
            assert a[f] == pytest.approx(b[f], rel=1e-10), (a["step"], f)


COUNTER = r"""
import json, sys
import numpy as np
from mpi4py import MPI
from pympi_gpu.nbody.lj.domain import brick_of, make_cart
from pympi_gpu.device.device import Device
from pympi_gpu.nbody.lj.system import LjConfig, LjSystem, initial_arrays

config = LjConfig(cells=4, temperature=3.0, newton=False)
cart = make_cart(MPI.COMM_WORLD)
brick = brick_of(config.box, cart.Get_topo()[0], cart.Get_coords(cart.Get_rank()))
x, v, ids = initial_arrays(config, brick)
system = LjSystem(cart, config, x, v, ids,
                  device=Device(backend="gpu", transport=sys.argv[1], simulated=True)).atoms
system.start()
before = dict(system.dev.copies)
for k in range(40):
    system.step(force_rebuild=k % 5 == 0)
system.local_sums()
during = {k: system.dev.copies[k] - before[k] for k in before}
owned = system.owned()
start = dict(zip(ids.tolist(), x))
# an atom folded back into the box crossed the periodic boundary; one not owned at the start crossed bricks
folded = sum(bool(np.any(np.abs(p - start[i]) > config.box[0] / 2)) for i, p in zip(owned["id"].tolist(), owned["x"])
             if i in start)
arrived = sum(i not in start for i in owned["id"].tolist())
out = {"during": during, "after_owned": system.dev.copies["atoms"] - before["atoms"],
       "rebuilds": system.rebuilds, "folded": folded, "arrived": arrived}
ranks = cart.gather(out, root=0)
print(json.dumps(ranks) if ranks is not None else "", end="")
cart.Free()
"""


@pytest.mark.parametrize("transport", ["host", "device"])
def test_steps_copy_no_atom_array_to_host(transport):
    # every device-to-host copy goes through DeviceArrays.to_host, which counts it by kind: 40 steps
    # (8 forced rebuilds and those the hot system needs) copy none of kind "atoms"; owned() copies 4
    env = clean_env(PYMPI_CUDA_AWARE="1", **SIM) if transport == "device" else SIM
    out = run(mpiexec_argv(2) + [sys.executable, "-c", COUNTER, transport], env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    ranks = json.loads(out.stdout)
    for r in ranks:
        assert r["during"]["atoms"] == 0, r
        assert r["during"]["sums"] > 0  # the displacement maxima, counts and thermo sums did come
        assert (r["during"]["message"] > 0) == (transport == "host"), r  # staged only over the host
        assert r["after_owned"] == 4  # x, v, f, id: the counter sees the copies it should
        assert r["rebuilds"] >= 9
    assert sum(r["folded"] for r in ranks) > 0 and sum(r["arrived"] for r in ranks) > 0


SAME = r"""
import json, sys
import numpy as np
from mpi4py import MPI
from pympi_gpu.nbody.lj.domain import brick_of, make_cart
from pympi_gpu.device.device import Device
from pympi_gpu.nbody.lj.system import LjConfig, LjSystem, initial_arrays

config = LjConfig(cells=4, temperature=3.0, newton=False)
cart = make_cart(MPI.COMM_WORLD)
brick = brick_of(config.box, cart.Get_topo()[0], cart.Get_coords(cart.Get_rank()))
init = initial_arrays(config, brick)
gpu = LjSystem(cart, config, *init, device=Device(backend="gpu", transport="host", simulated=True)).atoms
cpu = LjSystem(cart, config, *init).atoms
gpu.start()
cpu.start()
worst = {}
def same(tag):
    n = cpu.nlocal
    assert gpu.nlocal == n and np.array_equal(gpu.ids, cpu.ids), tag
    for name, a, b in (("pos", gpu.pos, cpu.pos), ("v", gpu.v, cpu.v[:n]), ("f", gpu.f, cpu.f[:n])):
        worst[name] = max(worst.get(name, 0.0), float(np.max(np.abs(a - b), initial=0.0)))
    for k in (0, 2):
        assert np.array_equal(gpu.lists[k], cpu.lists[k]), tag
        cnt = cpu.lists[k]
        for i in range(n):
            assert np.array_equal(gpu.lists[k + 1][i, :cnt[i]], cpu.lists[k + 1][i, :cnt[i]]), (tag, i)
same("start")
for k in range(30):
    force = k % 7 == 0
    gpu.step(force_rebuild=force)
    cpu.step(force_rebuild=force)
    if gpu.rebuilds != cpu.rebuilds:
        raise SystemExit("rebuilds differ")
    if force or k == 29:
        same(k)
ranks = cart.gather({"worst": worst, "rebuilds": gpu.rebuilds, "cupy": "cupy" in sys.modules}, root=0)
print(json.dumps(ranks) if ranks is not None else "", end="")
cart.Free()
"""


def test_device_rebuild_is_the_cpu_full_list_path_bit_for_bit():
    # Under the simulator the array namespace is NumPy and the kernels run as Python: the same
    # IEEE operations in the same order as the numba CPU path with full lists (newton off). So the
    # device's migration, sort, ghosts, cells and lists must give the CPU's rows exactly: owned and
    # ghost positions, velocities and forces equal bit for bit, the lists row for row, at every
    # (forced and needed) rebuild of a hot system at 2 ranks; and CuPy was never imported.
    out = run(mpiexec_argv(2) + [sys.executable, "-c", SAME], env=SIM, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    for r in json.loads(out.stdout):
        assert r["worst"] == {"pos": 0.0, "v": 0.0, "f": 0.0}, r
        assert r["rebuilds"] >= 5 and r["cupy"] is False


HALF = r"""
import json, sys
import numpy as np
from mpi4py import MPI
from pympi_gpu.nbody.lj.domain import brick_of, make_cart
from pympi_gpu.device.device import Device
from pympi_gpu.nbody.lj.system import LjConfig, LjSystem, initial_arrays

config = LjConfig(cells=int(sys.argv[2]), temperature=3.0, newton=True)
cart = make_cart(MPI.COMM_WORLD)
brick = brick_of(config.box, cart.Get_topo()[0], cart.Get_coords(cart.Get_rank()))
init = initial_arrays(config, brick)
gpu = LjSystem(cart, config, *init, device=Device(backend="gpu", transport=sys.argv[1], simulated=True)).atoms
cpu = LjSystem(cart, config, *init).atoms
gpu.start()
cpu.start()
worst = {}
def same(tag):
    n = cpu.nlocal
    assert gpu.nlocal == n and np.array_equal(gpu.ids, cpu.ids), tag
    assert np.array_equal(gpu.gid, cpu.gid), tag
    for name, a, b in (("pos", gpu.pos, cpu.pos), ("v", gpu.v, cpu.v[:n]), ("f", gpu.f[:n], cpu.f[:n])):
        worst[name] = max(worst.get(name, 0.0), float(np.max(np.abs(a - b), initial=0.0)))
    for k in (0, 2):
        assert np.array_equal(gpu.lists[k], cpu.lists[k]), tag
        cnt = cpu.lists[k]
        for i in range(n):
            assert np.array_equal(gpu.lists[k + 1][i, :cnt[i]], cpu.lists[k + 1][i, :cnt[i]]), (tag, i)
same("start")
for k in range(30):
    force = k % 7 == 0
    gpu.step(force_rebuild=force, eflag=True)
    cpu.step(force_rebuild=force, eflag=True)
    if gpu.rebuilds != cpu.rebuilds:
        raise SystemExit("rebuilds differ")
    if force or k == 29:
        same(k)
sums = [gpu.local_sums().tolist(), cpu.local_sums().tolist()]
ranks = cart.gather({"worst": worst, "rebuilds": gpu.rebuilds, "pairs": [gpu.pairs, cpu.pairs], "sums": sums,
                     "copies": gpu.dev.copies}, root=0)
print(json.dumps(ranks) if ranks is not None else "", end="")
cart.Free()
"""


@pytest.mark.parametrize("ranks,cells,transport", [(2, 4, "host"), (3, 6, "device")])
def test_half_lists_with_newton_on_the_device(ranks, cells, transport):
    # The other kind of lists (config.newton): each pair once, reactions by atomic adds, the ghosts'
    # forces sent home by the device's reverse halo. Against the CPU's half lists: the same lists row
    # for row and ghost ids, each pair once; the atomics' order leaves the forces equal to round-off.
    env = clean_env(PYMPI_CUDA_AWARE="1", **SIM) if transport == "device" else SIM
    out = run(mpiexec_argv(ranks) + [sys.executable, "-c", HALF, transport, str(cells)], env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    for r in json.loads(out.stdout):
        assert max(r["worst"].values()) <= 1e-12, r
        assert r["pairs"][0] == r["pairs"][1] and r["rebuilds"] >= 5
        assert r["sums"][0] == pytest.approx(r["sums"][1], rel=1e-12, abs=1e-12)
        assert r["copies"]["atoms"] == 0 and (r["copies"]["message"] > 0) == (transport == "host")


# ------------------------------------------------------------------ the warm-up before the clock

WARM = r"""
import json, sys
import numpy as np
from mpi4py import MPI
from pympi_gpu.device.device import Device
from pympi_gpu.nbody.lj.gpu import kernels as kg
from pympi_gpu.nbody.lj.domain import brick_of, make_cart
from pympi_gpu.nbody.lj.system import LjConfig, LjSystem, initial_arrays

simulated, newton = sys.argv[1] == "sim", sys.argv[2] == "half"
config = LjConfig(cells=4, temperature=3.0, newton=newton)
cart = make_cart(MPI.COMM_WORLD)
brick = brick_of(config.box, cart.Get_topo()[0], cart.Get_coords(cart.Get_rank()))
atoms = LjSystem(cart, config, *initial_arrays(config, brick),
                 device=Device(backend="gpu", transport="host", simulated=simulated)).atoms
atoms.start()  # warms on a GPU
host = lambda a: atoms.dev.to_host(a, "atoms")
out = {}
if simulated:  # the warm-up changes no row (the ghosts refreshed from the owners they were copied from)
    before = [host(a).copy() for a in (atoms.pos, atoms.v, atoms.f)]
    atoms._warm()
    out["same"] = all(np.array_equal(a, host(b)) for a, b in zip(before, (atoms.pos, atoms.v, atoms.f)))
else:  # on a GPU: the steps, a rebuild among them, compile nothing the start did not
    kernels = {"integrate": kg.integrate, "kick": kg.kick, "gather_rows": kg.gather_rows, "add_rows": kg.add_rows,
               "chain_rows": kg.chain_rows, "build_lists": kg.build_lists,
               **{k: getattr(atoms._kernels, k) for k in atoms._kernels._fields}}
    seen = {k: len(d.overloads) for k, d in kernels.items()}
    for k in range(4):
        atoms.step(force_rebuild=k == 2, eflag=k == 3)
    atoms.local_sums()
    out["compiled_in_steps"] = {k: len(d.overloads) - seen[k] for k, d in kernels.items()
                                if len(d.overloads) != seen[k]}
ranks = cart.gather(out, root=0)
print(json.dumps(ranks) if ranks is not None else "", end="")
cart.Free()
from pympi_gpu.cli.common import no_terminal_reset_at_exit
no_terminal_reset_at_exit()  # as the commands do: numba's colorama would end stdout in ESC[0m under Open MPI
"""


@pytest.mark.parametrize("lists", ["full", "half"])
def test_the_warmup_changes_no_row(lists):
    """What :meth:`DeviceAtoms._warm` launches before the clock (the step's kernels over no atom, the halo's
    forward pass, half lists' zero reverse pass) leaves positions, ghosts, velocities and forces bit for bit."""
    out = run(mpiexec_argv(2) + [sys.executable, "-c", WARM, "sim", lists], env=SIM, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout) == [{"same": True}] * 2


@pytest.mark.gpu
@pytest.mark.parametrize("lists", ["full", "half"])
def test_the_warmup_compiles_what_a_step_launches(lists):
    """On a GPU, numba.cuda compiles a kernel at its first launch: after :meth:`DeviceAtoms.start` (which warms)
    four steps, a rebuild and thermo among them, compile no kernel (none is paid for in the timed steps)."""
    from pympi_gpu.device.gpu import gpu_usable

    ok, why = gpu_usable()
    if not ok:
        pytest.skip(why)
    out = run(mpiexec_argv(2) + [sys.executable, "-c", WARM, "gpu", lists], env=clean_env(), timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout) == [{"compiled_in_steps": {}}] * 2


NARROW = r"""
import json, sys
import numpy as np
from mpi4py import MPI
from pympi_gpu.device.device import Device
from pympi_gpu.nbody.lj.domain import brick_of, make_cart
from pympi_gpu.nbody.lj.system import LjConfig, LjSystem, initial_arrays

config = LjConfig(cells=4, temperature=3.0, newton=sys.argv[1] == "half")
cart = make_cart(MPI.COMM_WORLD)
brick = brick_of(config.box, cart.Get_topo()[0], cart.Get_coords(cart.Get_rank()))
init = initial_arrays(config, brick)
gpu = LjSystem(cart, config, *init, device=Device(backend="gpu", transport="host", simulated=True)).atoms
cpu = LjSystem(cart, config, *init).atoms
gpu.cap = [3, 2]  # far too narrow: every row overflows, the build is retried wider
gpu.start()
cpu.start()
n = cpu.nlocal
rows = all(np.array_equal(gpu.lists[k + 1][i, :cpu.lists[k][i]], cpu.lists[k + 1][i, :cpu.lists[k][i]])
           for k in (0, 2) for i in range(n))
counts = all(np.array_equal(gpu.lists[k], cpu.lists[k]) for k in (0, 2))
skin = int(sum(np.sum(np.sum((cpu.pos[cpu.lists[k + 1][i, :cpu.lists[k][i]]] - cpu.pos[i]) ** 2, axis=1)
                      >= config.cutoff ** 2) for k in (0, 2) for i in range(n)))
print(json.dumps({"rows": rows, "counts": counts, "cap": gpu.cap, "skin_entries": skin}))
"""


@pytest.mark.parametrize("lists", ["full", "half"])
def test_overflowing_rows_are_built_again_wider_as_the_cpu_lists_them(lists):
    """The one-pass list kernel writes a row's skin neighbours from its end: with rows too narrow for every
    atom the counts still come out right, the build is retried wider, and the rows are the CPU's, the pairs
    within the cutoff first, then the skin's, each in the order found."""
    out = run([sys.executable, "-c", NARROW, lists], env=SIM, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json.loads(out.stdout)
    assert doc["rows"] and doc["counts"] and doc["cap"][0] > 3 and doc["cap"][1] > 2, doc
    assert doc["skin_entries"] > 0, doc  # rows that hold both kinds, the order under test
