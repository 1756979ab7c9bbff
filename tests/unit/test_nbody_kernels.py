"""n-body pure parts: kernels against a float64 direct sum, initial conditions,
transport choice, checkpoint files, the verification verdict.  No MPI."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from pympi_gpu.nbody.gravity import checkpoint as ckpt
from pympi_gpu.mpi.cuda_aware import choose_transport
from pympi_gpu.nbody.gravity.initial import generate
from pympi_gpu.nbody.gravity.kernels_cpu import NumbaKernels, NumpyKernels, direct_sum_fp64
from pympi_gpu.nbody.gravity.verify import check, error_bound, reference, sample_indices

KERNELS = [NumbaKernels(), NumpyKernels()]
DTYPES = {"fp32": np.float32, "fp64": np.float64}
# |a - a_ref| / sum_j |a_ij| allowed here: a few hundred bodies, generous factor
TOL = {"fp32": 2e-6, "fp64": 1e-13}


def _random_system(n, seed):
    rng = np.random.default_rng(seed)
    pos = rng.standard_normal((n, 3)) * rng.uniform(0.5, 2.0)
    mass = rng.uniform(0.1, 1.0, n)
    return pos, mass


def _columns(pos, mass, dt):
    """The kernels' inputs: x, y, z as contiguous arrays of ``dt``, and the masses."""
    return [np.ascontiguousarray(pos[:, k], dtype=dt) for k in range(3)], mass.astype(dt)


@pytest.mark.parametrize("kernels", KERNELS, ids=lambda k: k.name)
@pytest.mark.parametrize("precision", ["fp32", "fp64"])
def test_accel_matches_float64_direct_sum(kernels, precision):
    dt = DTYPES[precision]
    n, eps = 301, 0.05
    pos, mass = _random_system(n, 11)
    p, m = _columns(pos, mass, dt)
    acc = [np.zeros(n, dt) for _ in range(3)]
    kernels.accel(*p, *p, m, eps * eps, *acc)
    got = np.stack(acc, axis=1).astype(np.float64)
    ref, scale = reference(pos.astype(dt), m, eps, np.arange(n))
    assert np.abs(ref).min() > 0  # a real test: nothing vanishes
    err = np.linalg.norm(got - ref, axis=1) / scale
    assert err.max() < TOL[precision], err.max()
    # the independent reference of the kernels module agrees too
    ref2 = direct_sum_fp64(pos.astype(dt), m, eps, np.arange(0, n, 7))
    np.testing.assert_allclose(ref2, ref[::7], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("kernels", KERNELS, ids=lambda k: k.name)
@pytest.mark.parametrize("precision", ["fp32", "fp64"])
def test_accel_accumulates_over_source_blocks(kernels, precision):
    """Two source blocks, one after the other, give the sum over all sources."""
    dt = DTYPES[precision]
    n, eps = 157, 0.1
    pos, mass = _random_system(n, 5)
    p, m = _columns(pos, mass, dt)
    targets = [a[40:90] for a in p]
    acc = [np.zeros(50, dt) for _ in range(3)]
    for lo, hi in ((0, 61), (61, n)):
        kernels.accel(*targets, *(a[lo:hi] for a in p), m[lo:hi], eps * eps, *acc)
    ref, scale = reference(pos.astype(dt), m, eps, np.arange(40, 90))
    err = np.linalg.norm(np.stack(acc, 1) - ref, axis=1) / scale
    assert err.max() < TOL[precision]


@pytest.mark.parametrize("kernels", KERNELS, ids=lambda k: k.name)
@pytest.mark.parametrize("precision", ["fp32", "fp64"])
def test_potential_matches_float64(kernels, precision):
    dt = DTYPES[precision]
    n, eps = 120, 0.05
    pos, mass = _random_system(n, 9)
    p, m = _columns(pos, mass, dt)
    phi = np.zeros(n)
    kernels.potential(*p, *p, m, eps * eps, phi)
    x = pos.astype(dt).astype(np.float64)
    d = x[:, None, :] - x[None, :, :]
    r2 = (d * d).sum(-1)
    ref = -(m.astype(np.float64)[None, :] / np.sqrt(r2 + eps * eps) * (1 - np.eye(n))).sum(1)
    np.testing.assert_allclose(phi, ref, rtol=1e-6 if precision == "fp32" else 1e-13)


@pytest.mark.parametrize("kernels", KERNELS, ids=lambda k: k.name)
def test_axpy(kernels):
    y = np.arange(5, dtype=np.float32)
    kernels.axpy(y, 0.5, np.full(5, 2.0, dtype=np.float32))
    np.testing.assert_array_equal(y, np.arange(5) + 1.0)
    assert y.dtype == np.float32


@pytest.mark.parametrize("init", ["plummer", "uniform"])
def test_body_depends_only_on_seed_and_index(init):
    n = 1000
    pos, vel, mass = generate(init, 7, n, 0, n)
    for start, count in ((0, 333), (333, 334), (667, 333), (999, 1)):
        p, v, m = generate(init, 7, n, start, count)
        np.testing.assert_array_equal(p, pos[:, start:start + count])
        np.testing.assert_array_equal(v, vel[:, start:start + count])
    np.testing.assert_array_equal(mass, np.full(n, 1 / n))
    other, _, _ = generate(init, 8, n, 0, n)
    assert not np.allclose(other, pos)


def test_plummer_is_in_virial_equilibrium_in_henon_units():
    n = 4000
    pos, vel, mass = generate("plummer", 3, n, 0, n)
    kin = 0.5 * np.sum(mass * (vel ** 2).sum(0))
    phi = np.zeros(n)
    p = [np.ascontiguousarray(a) for a in pos]
    NumbaKernels().potential(*p, *p, mass, 1e-8, phi)
    pot = 0.5 * np.sum(mass * phi)
    assert abs(kin + pot - (-0.25)) < 0.02           # E = -1/4 in Hénon units
    assert abs(-2 * kin / pot - 1.0) < 0.06           # virial ratio 2T/|W| = 1
    rhalf = np.median(np.sqrt((pos ** 2).sum(0)))
    assert 0.70 < rhalf < 0.82                        # 0.769 for the full sphere


def test_uniform_ball_is_cold_and_inside_radius_one():
    pos, vel, _ = generate("uniform", 1, 2000, 0, 2000)
    r = np.sqrt((pos ** 2).sum(0))
    assert r.max() <= 1.0 and np.all(vel == 0)
    assert abs(np.mean(r ** 3) - 0.5) < 0.05          # uniform in volume: r^3 ~ U(0, 1)


def test_generate_rejects_bad_blocks():
    with pytest.raises(ValueError, match="unknown initial"):
        generate("king", 1, 10, 0, 10)
    with pytest.raises(ValueError, match="not inside"):
        generate("plummer", 1, 10, 5, 6)


class _Aware:
    def __init__(self, supported):
        self.supported, self.method, self.detail = supported, "test", "stub verdict"


def test_transport_choice():
    assert choose_transport("auto", False)[0] == "host"
    with pytest.raises(ValueError, match="needs the GPU backend"):
        choose_transport("device", False)
    assert choose_transport("auto", True, _Aware(True))[0] == "device"
    for verdict in (False, None):
        t, why = choose_transport("auto", True, _Aware(verdict))
        assert t == "host" and "staged" in why
    assert choose_transport("host", True, _Aware(True)) == ("host", "requested: staged through pinned host buffers")
    with pytest.raises(ValueError, match="not CUDA-aware .*stub verdict"):  # refused, never a segfault
        choose_transport("device", True, _Aware(False))
    with pytest.raises(ValueError):
        choose_transport("pigeon", True)


def _meta(**kw):
    meta = {"format": ckpt.FORMAT, "bodies": 4, "step": 3, "time": 0.003, "seed": 1, "init": "plummer",
            "precision": "fp32", "dt": 1e-3, "softening": 0.01, "ranks": 2}
    meta.update(kw)
    return meta


def _arrays(n=4, dtype=np.float32):
    return {f: np.arange(n, dtype=dtype) + k for k, f in enumerate(ckpt.FIELDS)}


def test_checkpoint_round_trip(tmp_path):
    path = tmp_path / "c.npz"
    ckpt.write_file(path, _arrays(), _meta())
    meta, arrays = ckpt.read_file(path)
    assert meta["step"] == 3 and meta["precision"] == "fp32"
    for f, a in _arrays().items():
        np.testing.assert_array_equal(arrays[f], a)
    assert [p.name for p in tmp_path.iterdir()] == ["c.npz"]  # no temporary left behind


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "c.npz"
    ckpt.write_file(path, _arrays(), _meta())
    before = path.read_bytes()

    def crash(fh, **kw):
        fh.write(b"PK\x03\x04 half a file")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(np, "savez", crash)
    with pytest.raises(OSError):
        ckpt.write_file(path, _arrays(), _meta(step=4))
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["c.npz"]


@pytest.mark.parametrize("case, match", [
    ("missing", "does not exist"),
    ("garbage", "not an .npz archive"),
    ("truncated", "not a readable checkpoint"),
    ("no-meta", "no 'meta' record"),
    ("wrong-format", "format"),
    ("wrong-shape", "shape"),
    ("wrong-dtype", "expected float32"),
    ("nan", "non-finite"),
    ("missing-array", "lacks the array"),
    ("bad-dt", "dt and softening"),
])
def test_checkpoint_validation(tmp_path, case, match):
    path = tmp_path / "c.npz"
    arrays, meta = _arrays(), _meta()
    if case == "garbage":
        path.write_bytes(os.urandom(300))
    elif case == "truncated":
        ckpt.write_file(path, _arrays(1000), _meta(bodies=1000))
        path.write_bytes(path.read_bytes()[:-700])
    elif case == "no-meta":
        np.savez(path, **arrays)
    elif case != "missing":
        if case == "wrong-format":
            meta["format"] = "something/else"
        elif case == "wrong-shape":
            arrays["vy"] = arrays["vy"][:3]
        elif case == "wrong-dtype":
            arrays["m"] = arrays["m"].astype(np.float64)
        elif case == "nan":
            arrays["ax"][2] = np.nan
        elif case == "missing-array":
            del arrays["az"]
        elif case == "bad-dt":
            meta["dt"] = -1.0
        with open(path, "wb") as fh:
            np.savez(fh, meta=np.array(json.dumps(meta)), **arrays)
    with pytest.raises(ckpt.CheckpointError, match=match):
        ckpt.read_file(path)


def test_check_writable(tmp_path):
    assert ckpt.check_writable(str(tmp_path / "c.npz")) is None
    assert "does not exist" in ckpt.check_writable(str(tmp_path / "nope" / "c.npz"))
    assert "directory" in ckpt.check_writable(str(tmp_path))


def test_verification_verdict():
    n, eps = 200, 0.05
    pos, mass = _random_system(n, 2)
    idx = sample_indices(n, 50)
    assert idx[0] == 0 and idx[-1] == n - 1 and len(idx) == 50
    ref, scale = reference(pos, mass, eps, idx)
    acc32 = ref.astype(np.float32).astype(np.float64)
    good = check(acc32, ref, scale, "fp32", n, drift=1e-6)
    assert good.passed and good.failures == () and good.max_error < good.error_bound
    bad = acc32.copy()
    bad[7] *= 1.001  # a 1e-3 error in one body: far above fp32 rounding
    verdict = check(bad, ref, scale, "fp32", n, drift=1e-6)
    assert not verdict.passed and "sample body #7" in verdict.failures[0]
    drifted = check(acc32, ref, scale, "fp32", n, drift=5e-3, drift_bound=1e-3)
    assert not drifted.passed and "energy drift" in drifted.failures[0]
    # fp32 rounding is far outside the fp64 bound
    assert not check(acc32, ref, scale, "fp64", n, drift=None).passed
    assert error_bound("fp32", 10**6) > error_bound("fp32", 100) > error_bound("fp64", 100)
