"""Defects of the GPU paths that the simulator's results do not show (issue 27), each held by a test:
pinned host buffers that grow for the whole run, sorts of CuPy's at every rebuild (issue 50), a device
counter allocated at every step, numba.cuda's low-occupancy warnings, the fp64 clamp inside the
gravity loop, the ``gpu`` extras of CUDA 12 and 13.  The kernels' instruction counts are in
tests/gpu/test_gpu_static.py."""

from __future__ import annotations

import configparser
import json
import sys
import textwrap

import numpy as np
import pytest

from helpers.commands import ROOT, clean_env, mpiexec_argv, run, script

SIM = clean_env(NUMBA_ENABLE_CUDASIM="1", OMP_NUM_THREADS="1")


# ------------------------------------------------------------------ pinned buffers: grown, never one per rebuild

class _Cart:
    def Get_rank(self):
        return 0

    def Shift(self, d, disp):
        return (1, 1)  # another rank on both sides: every stage is staged through host memory


class _Dev:
    xp = np

    def __init__(self):
        self.allocated = []

    def pinned(self, shape, dtype=np.float64):
        self.allocated.append(shape)
        return np.empty(shape, dtype)

    def ops(self, launches, syncs=0):
        import contextlib

        return contextlib.nullcontext()

    def view(self, a):
        return a


def test_pinned_buffers_grow_only():
    from pympi_gpu.nbody.lj.domain import Brick
    from pympi_gpu.nbody.lj.gpu.halo import DeviceHalo

    dev = _Dev()
    brick = Brick(dims=(2, 2, 2), coords=(0, 0, 0), box=20.0, lo=(0.0, 0.0, 0.0), hi=(10.0, 10.0, 10.0))
    halo = DeviceHalo(_Cart(), brick, 2.8, dev, "host")
    rng = np.random.default_rng(1)
    views = []
    for rebuild in range(50):  # the rows near each face change from one rebuild to the next
        counts = rng.integers(900, 1100, size=6)
        halo.plan = [(d // 2, np.zeros(int(c), np.int64), np.zeros(3), 1, 1, 0, int(c) + 3)
                     for d, c in enumerate(counts)]
        halo.packed = {d: (np.zeros(int(a + b), np.int64), np.zeros((int(a + b), 3)))
                       for d, (a, b) in enumerate(counts.reshape(3, 2))}
        halo._stage(0)
        assert [seg.d for seg in halo.segments] == [0, 1, 2]  # every stage travels: one segment each
        for seg, (c_low, c_high) in zip(halo.segments, counts.reshape(3, 2)):
            send, recv = seg.host  # a stage's two messages in one buffer each way
            assert send.shape == (c_low + c_high, 3) and recv.shape == (c_low + c_high + 6, 3)
            assert send.flags.c_contiguous and recv.flags.c_contiguous
        views.append(halo.segments[0].host[0])
    # 6 buffers the first time (send and receive, 3 stages), each with a quarter to spare: sizes
    # that vary by 10% never make another (before: a new pinned array per message at every one of the 50)
    assert len(dev.allocated) == halo.pinned_allocations == 6
    assert views[0].base is views[-1].base  # the same page-locked memory, rebuild after rebuild
    halo.plan = [(d // 2, np.zeros(5000, np.int64), np.zeros(3), 1, 1, 0, 5000) for d in range(6)]
    halo.packed = {d: (np.zeros(10000, np.int64), np.zeros((10000, 3))) for d in range(3)}
    halo._stage(0)  # more rows than ever: grown once more
    assert halo.pinned_allocations == 12


# ------------------------------------------------------------------ one rebuild: the sorts it needs, pinned memory

REBUILDS = r"""
import json, sys
import numpy as np
from mpi4py import MPI
from pympi_gpu.nbody.lj.domain import brick_of, make_cart
from pympi_gpu.device.device import Device
from pympi_gpu.nbody.lj.system import LjConfig, LjSystem, initial_arrays

class Counting:  # the array namespace, counting its sorts and compactions
    def __init__(self, xp):
        self.xp, self.sorts = xp, 0
    def argsort(self, *a, **k):
        self.sorts += 1
        return self.xp.argsort(*a, **k)
    sort = lexsort = nonzero = argsort
    def __getattr__(self, name):
        return getattr(self.xp, name)

config = LjConfig(cells=4, temperature=3.0, newton=False)
cart = make_cart(MPI.COMM_WORLD)
brick = brick_of(config.box, cart.Get_topo()[0], cart.Get_coords(cart.Get_rank()))
x, v, ids = initial_arrays(config, brick)
system = LjSystem(cart, config, x, v, ids, device=Device(backend="gpu", transport="host", simulated=True)).atoms
system.start()
xp = system.dev.xp = Counting(system.dev.xp)
first, pinned = system.rebuilds, system.halo.pinned_allocations
for k in range(12):
    system.step(force_rebuild=True)
out = {"rebuilds": system.rebuilds - first, "sorts": xp.sorts, "pinned_first": pinned,
       "pinned_after": system.halo.pinned_allocations}
ranks = cart.gather(out, root=0)
print(json.dumps(ranks) if ranks is not None else "", end="")
cart.Free()
"""


def test_rebuild_sorts_by_counting_and_reuses_pinned_memory():
    """A rebuild sorts the owned atoms by (cell, id) and the ghosts into cells by counting (issue 50: a
    kernel, a scan, a kernel), with no sort of CuPy's (before: two 64-bit argsorts a rebuild, a third
    thrown away) and no compaction by ``nonzero``; and 12 rebuilds over the host transport reuse the
    pinned buffers of the first."""
    out = run(mpiexec_argv(2) + [sys.executable, "-c", REBUILDS], env=SIM, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    for r in json.loads(out.stdout):
        assert r["rebuilds"] == 12 and r["sorts"] == 0, r
        assert r["pinned_first"] > 0 and r["pinned_after"] - r["pinned_first"] <= 4, r


# ------------------------------------------------------------------ the gravity backend's finiteness counter

COUNTER = r"""
import numpy as np
from numba import cuda
from pympi_gpu.device import buffers
from pympi_gpu.nbody.gravity.kernels_cuda import CudaBackend

made = []
for name in ("device_array", "to_device"):
    real = getattr(buffers.cuda, name)
    setattr(buffers.cuda, name, lambda *a, _real=real, **k: made.append(1) or _real(*a, **k))
b = CudaBackend("fp64", True, block=32)
a = b.from_host(np.arange(40.0))
before = len(made)
results = []
for step in range(5):
    results.append(b.finite([a, a]))
bad = b.from_host(np.array([1.0, np.inf, 2.0]))
results.append(b.finite([a, bad]))
results.append(b.finite([a]))
print(len(made) - before - 1, results)
"""


def test_finite_check_allocates_its_counter_once():
    out = run([sys.executable, "-c", COUNTER], env=SIM, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    allocations, results = out.stdout.split(" ", 1)
    assert int(allocations) == 1, out.stdout  # the counter, once (the other is the test's own array)
    assert results.strip() == "[True, True, True, True, True, False, True]"  # zeroed again before each check


# ------------------------------------------------------------------ numba.cuda's low-occupancy warning

OCCUPANCY = r"""
import warnings
from numba import cuda
from numba.cuda.cudadrv.error import CudaSupportError

@cuda.jit
def k(a):
    pass

try:
    with warnings.catch_warnings(record=True) as before:
        warnings.simplefilter("always")
        k[1, 32]
except CudaSupportError as exc:
    print("SKIP", exc)
    raise SystemExit(0)
from pympi_gpu.nbody.lj.gpu import kernels as kg  # installs the filter
with warnings.catch_warnings(record=True) as after:
    kg.force_kernels(lambda r2: (r2, r2)).forces[1, kg.BLOCK]
    k[3, 32]
    warnings.warn(RuntimeWarning("another warning still shows"))
print(len([w for w in before if "Grid size" in str(w.message)]), [str(w.message) for w in after])
"""


def test_low_occupancy_warnings_filtered():
    """numba.cuda warns at every launch of fewer than 128 blocks (no GPU needed to see it); the package's
    small launches are small by design, so that warning, and only that one, is filtered."""
    out = run([sys.executable, "-c", OCCUPANCY], env=clean_env(), timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    if out.stdout.startswith("SKIP"):
        pytest.skip(f"numba.cuda cannot configure a launch here: {out.stdout.strip()}")
    count, after = out.stdout.split(" ", 1)
    assert int(count) == 1, out.stdout  # numba does warn, here
    assert after.strip() == "['another warning still shows']", out.stdout


# ------------------------------------------------------------------ an overflowing state: one message

@pytest.mark.parametrize("model", ["gravity", "lj"])
def test_an_overflowing_state_is_one_message_under_the_simulator(tmp_path, model):
    """A velocity of 1e300 from a checkpoint: exit 3 and the blow-up's one line, without NumPy's
    RuntimeWarning lines before it (the simulator runs the kernels' arithmetic in NumPy).  The CPU's
    paths: tests/cli/test_blowup.py."""
    from pympi_gpu.nbody.checkpoint import write_file
    from pympi_gpu.nbody.gravity import checkpoint as gravity
    from pympi_gpu.nbody.lj import checkpoint as lj

    nbody = script("pympi-nbody")
    size, extra = ("128", ["--precision", "fp64"]) if model == "gravity" else ("256", ["--model", "lj"])
    good, fast = tmp_path / "good.npz", tmp_path / "fast.npz"
    first = run([nbody, size, *extra, "--backend", "numba", "--threads", "1", "--steps", "4", "--checkpoint",
                 str(good), "-q"], env=clean_env(OMP_NUM_THREADS="1"), timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    meta, arrays = (gravity if model == "gravity" else lj).read_file(str(good))
    (arrays["vx"] if model == "gravity" else arrays["v"]).flat[3] = 1e300
    write_file(fast, arrays, meta)
    out = run([nbody, size, *extra, "--backend", "gpu", "--steps", "8", "--restart", str(fast), "-q"], env=SIM,
              timeout=600)
    assert out.returncode == 3, out.stderr[-3000:]
    assert out.stderr.strip().splitlines() == [
        line for line in out.stderr.splitlines() if line.startswith("Error: the run blew up at step 4")], out.stderr


# ------------------------------------------------------------------ fp64 gravity: the clamp out of the loop

PTX = textwrap.dedent("""
    import json, types
    import numpy as np
    import numba.cuda.dispatcher as dispatcher
    from numba import cuda, float64, void
    dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=(9, 0))
    from pympi_gpu.nbody.gravity.kernels_cuda import make_kernels
    accel = make_kernels(np.float64, 256)[0]
    a = float64[::1]
    ptx, _ = cuda.compile_ptx(accel.py_func, void(a, a, a, a, a, a, a, float64, a, a, a), cc=(9, 0), fastmath=True)
    print(json.dumps({k: ptx.count(k) for k in ("max.f64", "rsqrt.approx.ftz.f64", "call.uni", "__nv_rsqrt")}))
""")


def _ptx_counts(script: str) -> dict:
    """The JSON line ``script`` prints after compiling kernels to PTX with numba-cuda (no GPU asked for); the
    test skips where numba-cuda is not installed or cannot compile here."""
    try:
        import numba_cuda  # noqa: F401
    except ImportError:
        pytest.skip("numba-cuda is not installed (pip install -e .[gpu-cu13])")
    out = run([sys.executable, "-c", script], env=clean_env(), timeout=300)
    if out.returncode != 0 and ("nvrtc" in out.stderr.lower() or "nvvm" in out.stderr.lower()):
        pytest.skip(f"numba-cuda cannot compile here: {out.stderr.strip()[-300:]}")
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_fp64_gravity_clamp_and_rsqrt_out_of_the_loop():
    got = _ptx_counts(PTX)
    # eps2 clamped once per thread; 8 interactions per pass, each one approximation and one step
    assert got == {"max.f64": 1, "rsqrt.approx.ftz.f64": 8, "call.uni": 0, "__nv_rsqrt": 0}, got


LJ_PTX = textwrap.dedent("""
    import json, types
    import numba.cuda.dispatcher as dispatcher
    from numba import cuda
    dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=(9, 0))
    from pympi_gpu.nbody.lj.config import LjConfig
    from pympi_gpu.nbody.lj.gpu import kernels as kg
    got = {}
    for precision in ("fp64", "mixed"):
        k = kg.force_kernels(LjConfig(cells=1, precision=precision).pair_term)
        for name in ("forces", "forces_newton", "forces_kick"):
            sig = kg.FORCES_KICK_SIGNATURE if name == "forces_kick" else kg.FORCES_SIGNATURE
            ptx, _ = cuda.compile_ptx(getattr(k, name).py_func, sig, cc=(9, 0))
            got[precision + " " + name] = {op: ptx.count(op) for op in ("mul.f32", "mul.f64", "cvt.rn.f32.f64")}
    print(json.dumps(got))
""")


def test_lj_mixed_precision_kernels_compute_in_single_precision():
    """On a GPU target (PTX for sm_90): the mixed kernels' pair arithmetic is single precision (the distances
    rounded to it once each), the double kernels' double, the same three kernels of one code."""
    got = _ptx_counts(LJ_PTX)
    for name in ("forces", "forces_newton", "forces_kick"):
        double, mixed = got["fp64 " + name], got["mixed " + name]
        assert double["mul.f32"] == double["cvt.rn.f32.f64"] == 0 and double["mul.f64"] >= 6, (name, double)
        assert mixed["cvt.rn.f32.f64"] == 4 and mixed["mul.f32"] >= 5 and mixed["mul.f64"] <= 1, (name, mixed)


def test_fp64_gravity_unchanged_where_the_clamp_moved():
    """Under the simulator: the kernel with eps2 clamped once gives what the per-pair clamp gave, at the
    smallest softening and at an ordinary one (the self term included)."""
    script = textwrap.dedent("""
        import numpy as np
        from pympi_gpu.nbody.gravity.kernels_cuda import CudaBackend
        from pympi_gpu.nbody.gravity.kernels_cpu import NumpyKernels
        rng = np.random.default_rng(3)
        n = 40
        pos = rng.standard_normal((n, 3))
        m = rng.uniform(0.5, 1.0, n)
        worst = 0.0
        for eps in (1e-15, 0.05):
            b = CudaBackend("fp64", True, block=32)
            p = [b.from_host(pos[:, k]) for k in range(3)]
            acc = [b.zeros(n) for _ in range(3)]
            b.accel(*p, *p, b.from_host(m), eps * eps, *acc)
            got = np.stack([b.to_host(x) for x in acc], axis=1)
            ref = [np.zeros(n) for _ in range(3)]
            NumpyKernels().accel(*pos.T, *pos.T, m, eps * eps, *ref)
            ref = np.stack(ref, axis=1)
            assert np.all(np.isfinite(got))
            worst = max(worst, float(np.max(np.abs(got - ref) / np.abs(ref).max())))
        print(worst)
    """)
    out = run([sys.executable, "-c", script], env=SIM, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert float(out.stdout) < 1e-13, out.stdout


# ------------------------------------------------------------------ the gpu extras

def test_gpu_extras_one_cuda_each():
    """``gpu-cu12`` and ``gpu-cu13`` each ask for CuPy and numba-cuda of one CUDA major, never both;
    ``gpu`` stays the CUDA 12 set it always was."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    extras = cfg["options.extras_require"]

    def reqs(name):
        return [r.strip() for r in extras[name].split("\n") if r.strip()]

    assert reqs("gpu") == reqs("gpu-cu12")
    for major in ("12", "13"):
        got = reqs(f"gpu-cu{major}")
        assert any(r.startswith(f"cupy-cuda{major}x") for r in got), got
        assert any(r.startswith(f"numba-cuda[cu{major}]") for r in got), got
        other = "13" if major == "12" else "12"
        assert not any(f"cuda{other}" in r or f"cu{other}" in r for r in got), got
