"""The n-body GPU backend: kernels and both transports under numba's CUDA simulator
(in subprocesses, since NUMBA_ENABLE_CUDASIM must be set before numba.cuda is
imported), and the device transport on a real GPU where one is lent."""

from __future__ import annotations

import json
import sys
import textwrap

import numpy as np
import pytest

from helpers.commands import ROOT, clean_env, mpiexec_argv, run, script
from pympi_gpu.nbody.gravity import checkpoint as ckpt

NBODY = script("pympi-nbody")
SIM = {"NUMBA_ENABLE_CUDASIM": "1", "OMP_NUM_THREADS": "1"}

KERNEL_CHECK = textwrap.dedent("""
    import json
    import numpy as np
    from pympi_gpu.device.gpu import simulator
    from pympi_gpu.nbody.gravity.kernels_cuda import CudaBackend
    from pympi_gpu.nbody.gravity.verify import reference

    rng = np.random.default_rng(4)
    n, eps = 70, 0.05          # 70 bodies: two full tiles of 32 and a padded one
    pos = rng.standard_normal((n, 3))
    mass = rng.uniform(0.1, 1.0, n)
    out = {}
    for precision, dt in (("fp32", np.float32), ("fp64", np.float64)):
        b = CudaBackend(precision, simulator(), block=32)
        p = [b.from_host(pos[:, k]) for k in range(3)]
        m = b.from_host(mass)
        acc = [b.zeros(n) for _ in range(3)]
        b.accel(*p, *p, m, eps * eps, *acc)
        b.accel(*p, *(a[:20] for a in p), m[:20], eps * eps, *acc)   # accumulates: 20 sources twice
        got = np.stack([b.to_host(a) for a in acc], 1)
        ref, scale = reference(pos.astype(dt), mass.astype(dt), eps, np.arange(n))
        phi = b.zeros(n, np.float64)
        b.potential(*p, *p, m, eps * eps, phi)
        x = pos.astype(dt).astype(np.float64)
        d = x[:, None, :] - x[None, :, :]
        r2 = (d * d).sum(-1)
        mm = mass.astype(dt).astype(np.float64)
        phiref = -(mm[None, :] / np.sqrt(r2 + eps * eps) * (1 - np.eye(n))).sum(1)
        w = mm[None, :20] / (r2[:, :20] + eps * eps) ** 1.5
        extra = np.einsum("ij,ijk->ik", w, -d[:, :20, :])
        y = b.from_host(np.arange(n, dtype=dt))
        b.axpy(y, 0.5, b.from_host(np.full(n, 4.0)))
        out[precision] = {
            "dtype": str(got.dtype),
            "acc_err": float((np.linalg.norm(got - ref - extra, axis=1) / scale).max()),
            "phi_err": float(np.max(np.abs(b.to_host(phi) - phiref) / np.abs(phiref))),
            "axpy_ok": bool(np.array_equal(b.to_host(y), np.arange(n) + 2.0)),
        }
    print(json.dumps(out))
""")


def test_cuda_kernels_under_simulator():
    out = run([sys.executable, "-c", KERNEL_CHECK], timeout=300, env=clean_env(**SIM))
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["fp32"]["dtype"] == "float32" and res["fp64"]["dtype"] == "float64"
    assert res["fp32"]["acc_err"] < 2e-6 and res["fp64"]["acc_err"] < 1e-13, res
    assert res["fp32"]["phi_err"] < 1e-5 and res["fp64"]["phi_err"] < 1e-13, res
    assert res["fp32"]["axpy_ok"] and res["fp64"]["axpy_ok"]


@pytest.fixture(scope="module")
def numba_fp64(tmp_path_factory):
    path = tmp_path_factory.mktemp("gpu") / "numba.npz"
    out = run([NBODY, "101", "--steps", "2", "--precision", "fp64", "--backend", "numba", "--checkpoint",
               str(path)], timeout=120, env=clean_env(OMP_NUM_THREADS="1"))
    assert out.returncode == 0, out.stderr
    return ckpt.read_file(path)[1]


@pytest.mark.parametrize("exchange, transport", [("ring", "host"), ("ring", "device"), ("allgather", "host"),
                                                 ("allgather", "device")])
def test_gpu_backend_under_simulator_two_ranks(tmp_path, numba_fp64, exchange, transport):
    """Both transports and exchanges on simulated GPUs agree with the numba backend."""
    path = tmp_path / "gpu.npz"
    # Simulated device arrays are host memory, which any MPI reads: the documented
    # override lets the device transport run on the (not CUDA-aware) PyPI MPICH.
    override = {"PYMPI_CUDA_AWARE": "1"} if transport == "device" else {}
    out = run(mpiexec_argv(2) + [NBODY, "101", "--steps", "2", "--precision", "fp64", "--backend", "gpu",
                                 "--exchange", exchange, "--transport", transport, "--checkpoint", str(path),
                                 "--json"], timeout=300, env=clean_env(**SIM, **override))
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert (doc["backend"], doc["exchange"], doc["transport"]) == ("gpu", exchange, transport)
    assert doc["transport_reason"].startswith("requested")
    # hydra exports MPI_LOCALRANKID: the (simulated) GPU was chosen before MPI_Init
    assert "selected before MPI_Init, from MPI_LOCALRANKID=0" in doc["provenance"]["extra_versions"]["gpu"]
    got = ckpt.read_file(path)[1]
    for f in ckpt.FIELDS:
        np.testing.assert_allclose(got[f], numba_fp64[f], rtol=1e-11, atol=1e-13, err_msg=f)


def test_auto_transport_stages_when_mpi_is_not_cuda_aware():
    out = run(mpiexec_argv(2) + [NBODY, "64", "--steps", "1", "--backend", "gpu", "--json"], timeout=300,
              env=clean_env(PYMPI_CUDA_AWARE="0", **SIM))
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["transport"] == "host" and "not CUDA-aware" in doc["transport_reason"]
    assert doc["awareness"]["supported"] is False


REFUSAL = "--transport device: this MPI library is not CUDA-aware"


@pytest.mark.parametrize("ranks", [2, 3])
def test_device_transport_refused_on_an_mpi_that_is_not_cuda_aware(ranks):
    """The PyPI MPICH says MPIX_Query_cuda_support() = 0: one message, exit 2, every rank ends."""
    out = run(mpiexec_argv(ranks) + [NBODY, "64", "--steps", "1", "--backend", "gpu", "--transport", "device"],
              timeout=300, env=clean_env(**SIM))
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.count(REFUSAL) == 1, out.stderr
    assert "(MPIX_Query_cuda_support: rank 0: libmpi.so" in out.stderr and "PYMPI_CUDA_AWARE=1" in out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""


def test_one_rank_saying_yes_is_not_enough():
    """3 ranks, only rank 0 told its MPI is CUDA-aware: all refuse together (no rank goes
    on alone into a collective the others never reach), naming a rank that said no."""
    if "Open MPI" in run(mpiexec_argv(1)[:1] + ["--version"], timeout=60).stdout:
        pytest.skip("MPMD per-rank environment written for MPICH's hydra here")
    argv = [NBODY, "64", "--steps", "1", "--backend", "gpu", "--transport", "device"]
    exe = mpiexec_argv(1)[0]
    out = run([exe, "-n", "1", "-env", "PYMPI_CUDA_AWARE", "1", *argv, ":", "-n", "2", *argv],
              timeout=300, env=clean_env(**SIM))
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.count(REFUSAL) == 1 and "(MPIX_Query_cuda_support: rank 1: libmpi" in out.stderr, out.stderr


ROUND_TRIP = textwrap.dedent("""
    import json, sys
    from pympi_gpu.device.gpu import select_before_init
    early = select_before_init(allow_simulator=True)       # before MPI_Init
    before = "mpi4py.MPI" in sys.modules
    from mpi4py import MPI
    from pympi_gpu.mpi.cuda_aware import round_trip
    from pympi_gpu.device.gpu import bind_device, simulator
    from pympi_gpu.nbody.gravity.kernels_cuda import CudaBackend

    comm = MPI.COMM_WORLD
    binding = bind_device(comm, early)
    late = bind_device(comm, select_before_init({}, allow_simulator=True))   # no launcher variable
    results = {}
    for precision in ("fp32", "fp64"):
        b = CudaBackend(precision, simulator())
        results[precision] = round_trip(comm, b)

    class Lost(CudaBackend):
        # hands MPI a host copy of the receive buffer: the data never reach the device array
        def mpi_buffer(self, a):
            return a.copy_to_host()
    results["lost"] = round_trip(comm, Lost("fp32", simulator()))
    doc = comm.gather({"mpi_before": before, "early": early and early.variable,
                       "selected": binding["selected"], "late": late["selected"], **results}, root=0)
    if comm.rank == 0:
        print(json.dumps(doc))
""")


@pytest.mark.parametrize("ranks", [2, 3])
def test_early_binding_and_round_trip_under_mpiexec(ranks):
    out = run(mpiexec_argv(ranks) + [sys.executable, "-c", ROUND_TRIP], timeout=300, env=clean_env(**SIM))
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(doc) == ranks
    for r, d in enumerate(doc):
        assert d["mpi_before"] is False and d["early"] == "MPI_LOCALRANKID"
        assert d["selected"].startswith(f"before MPI_Init, from MPI_LOCALRANKID={r}")
        assert d["late"].startswith("after MPI_Init, from the node's shared-memory communicator")
        assert d["fp32"] == d["fp64"] == [True, f"device-buffer round trip over {ranks} rank(s) correct"]
        assert d["lost"][0] is False and "wrong data" in d["lost"][1]


def _real_gpu() -> str | None:
    """Why the real-GPU test cannot run here, or None if it can."""
    probe = run([sys.executable, "-c", "from pympi_gpu.device.gpu import gpu_usable; print(gpu_usable())"],
                timeout=120, env=clean_env())
    if "True" not in probe.stdout:
        return f"no usable CUDA GPU here ({probe.stdout.strip() or probe.stderr.strip()[-200:]})"
    probe = run(mpiexec_argv(1) + [sys.executable, "-c",
                                   "from mpi4py import MPI; from pympi_gpu.mpi.cuda_aware import detect; "
                                   "print(detect())"], timeout=120, env=clean_env())
    if "supported=True" not in probe.stdout:
        return f"the MPI library is not CUDA-aware: {probe.stdout.strip()}"
    return None


@pytest.mark.gpu
def test_device_transport_on_real_gpu(tmp_path):
    why = _real_gpu()
    if why:
        pytest.skip(why)
    paths = {t: tmp_path / f"{t}.npz" for t in ("device", "host")}
    for transport, path in paths.items():
        out = run(mpiexec_argv(2) + [NBODY, "8192", "--steps", "3", "--backend", "gpu", "--precision", "fp64",
                                     "--transport", transport, "--checkpoint", str(path), "--verify"],
                  timeout=300, env=clean_env())
        assert out.returncode == 0, out.stderr
        assert f"transport {transport}" in out.stdout and "verify     PASSED" in out.stdout
    a, b = (ckpt.read_file(p)[1] for p in paths.values())
    for f in ckpt.FIELDS:
        assert np.array_equal(a[f], b[f]), f  # the transport moves bytes; the physics is identical


PTX_CHECK = textwrap.dedent("""
    import json, types
    import numpy as np
    import numba.cuda.dispatcher as dispatcher
    from numba import cuda, float32, float64, void
    # compile for sm_80 without a GPU: device functions ask the current device for its capability
    dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=(8, 0))
    from pympi_gpu.nbody.gravity.kernels_cuda import make_kernels
    out = {}
    for name, dt, nbt in (("fp32", np.float32, float32), ("fp64", np.float64, float64)):
        accel = make_kernels(dt, 256)[0]
        a = nbt[::1]
        ptx, _ = cuda.compile_ptx(accel.py_func, void(a, a, a, a, a, a, a, nbt, a, a, a), cc=(8, 0),
                                  fastmath=True)
        out[name] = {k: ptx.count(k) for k in ("max.ftz.f32", "max.f64", "ld.shared.v4.f32", "ld.shared.v2.f64", "ld.shared.f",
                                               "rsqrt.approx.ftz.f32", ".f64", "call.uni")}
    print(json.dumps(out))
""")


def test_cuda_kernels_compile_to_ptx():
    """With numba-cuda and NVVM (the [gpu] extra), the tiled kernel compiles for sm_80
    without a GPU, with the codegen that matters: fp32 only, hardware rsqrt, one vector
    load from shared memory per body, no calls in the loop."""
    try:
        import numba_cuda  # noqa: F401
    except ImportError:
        pytest.skip("numba-cuda is not installed (pip install .[gpu])")
    out = run([sys.executable, "-c", PTX_CHECK], timeout=300, env=clean_env())
    if out.returncode != 0 and ("NVVM" in out.stderr or "libnvvm" in out.stderr):
        pytest.skip(f"no NVVM to compile with: {out.stderr.strip()[-300:]}")
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout.strip().splitlines()[-1])
    fp32, fp64 = res["fp32"], res["fp64"]
    assert fp32["ld.shared.v4.f32"] == 8 and fp32["ld.shared.f"] == 0, fp32  # 8 bodies per unrolled pass
    assert fp32["rsqrt.approx.ftz.f32"] == 8 and fp32[".f64"] == 0 and fp32["call.uni"] == 0, fp32
    assert fp64["ld.shared.v2.f64"] == 16 and fp64["call.uni"] == 0, fp64
    # the r**2 clamp (kernels_cpu.R2_MIN) survives fastmath, out of the loop: eps2 is clamped once
    # per thread (kernels_cuda._clamps), in fp32 as in fp64
    assert fp32["max.ftz.f32"] == 1 and fp64["max.f64"] == 1, res


def test_aligned_tile_is_the_path_taken_with_numba_cuda():
    """setup.cfg's gpu extra asks numba-cuda>=0.11, the first whose cuda.shared.array takes
    ``alignment``; without it the kernel falls back to scalar shared-memory loads (~17% slower).
    Where numba-cuda is installed, the aligned (vector-load) kernel must be the one built."""
    try:
        import numba_cuda  # noqa: F401
    except ImportError:
        pytest.skip("numba-cuda is not installed (pip install .[gpu])")
    from importlib.metadata import version

    from packaging.version import Version

    out = run([sys.executable, "-c", "from pympi_gpu.nbody.gravity.kernels_cuda import _aligned_shared; "
               "print(_aligned_shared(False))"], timeout=120, env=clean_env())
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(Version(version("numba-cuda")) >= Version("0.11")), out.stdout


def test_gpu_extra_floor_has_the_alignment():
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    reqs = [r.strip() for r in cfg["options.extras_require"]["gpu"].split("\n") if r.strip()]
    (numba_cuda,) = [r for r in reqs if r.startswith("numba-cuda")]
    assert numba_cuda.endswith(">=0.11"), numba_cuda


MIN_SOFTENING_CHECK = textwrap.dedent("""
    import json, sys
    import numpy as np
    from pympi_gpu.cli.nbody_gravity import MIN_SOFTENING
    from pympi_gpu.nbody.gravity.kernels_cpu import NumbaKernels, NumpyKernels
    from pympi_gpu.nbody.gravity.kernels_cuda import CudaBackend
    from pympi_gpu.nbody.gravity.verify import reference

    rng = np.random.default_rng(7)
    n, eps = 40, MIN_SOFTENING                  # the self term: 1/r = 1e15, cubed > fp32's max
    pos = rng.standard_normal((n, 3)).astype(np.float32)
    mass = np.full(n, 1.0 / n, np.float32)
    ref, scale = reference(pos, mass, eps, np.arange(n))
    out = {}
    b = CudaBackend("fp32", True, block=32)
    p = [b.from_host(pos[:, k]) for k in range(3)]
    acc = [b.zeros(n) for _ in range(3)]
    b.accel(*p, *p, b.from_host(mass), eps * eps, *acc)
    got = {"gpu": np.stack([b.to_host(a) for a in acc], 1)}
    for name, k in (("numba", NumbaKernels()), ("numpy", NumpyKernels())):
        acc = [np.zeros(n, np.float32) for _ in range(3)]
        k.accel(*(pos[:, i] for i in range(3)), *(pos[:, i] for i in range(3)), mass, eps * eps, *acc)
        got[name] = np.stack(acc, 1)
    for name, a in got.items():
        out[name] = {"finite": bool(np.isfinite(a).all()),
                     "err": float((np.linalg.norm(a - ref, axis=1) / scale).max())}
    print(json.dumps(out))
""")


def test_fp32_self_term_is_finite_at_the_smallest_softening():
    """At --softening 1e-15 the fp32 self term's 1/r**3 overflowed to inf and inf * 0 gave NaN,
    in the CUDA kernel (here under the simulator) and the CPU ones alike."""
    out = run([sys.executable, "-c", MIN_SOFTENING_CHECK], timeout=300, env=clean_env(**SIM))
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout.strip().splitlines()[-1])
    for name, r in res.items():
        assert r["finite"] and r["err"] < 1e-5, (name, res)
    cli = run(mpiexec_argv(2) + [NBODY, "64", "--steps", "2", "--softening", "1e-15", "--backend", "gpu",
                                 "--json"], timeout=300, env=clean_env(**SIM))
    assert cli.returncode == 0, cli.stderr
    doc = json.loads(cli.stdout)
    assert np.isfinite(doc["final"]["energy"]) and abs(doc["energy_drift"]) < 1e-3, doc["final"]
