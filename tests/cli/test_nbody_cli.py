"""pympi-nbody refuses bad input: one message, exit status 2, no traceback, no hang."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from helpers.commands import clean_env, mpiexec_argv, refused, run, script
from pympi_gpu.nbody.gravity import checkpoint as ckpt

NBODY = script("pympi-nbody")


@pytest.mark.parametrize("args, match", [
    (["0"], "must be at least 1"),
    (["-5"], "'-5' is negative (must be at least 1)"),  # was: No such option '-5'.
    (["abc"], "is not a whole number"),
    (["nan"], "is not a whole number"),
    (["1.5"], "is not a whole number"),
    (["100", "--dt", "0"], "must be > 0"),
    (["100", "--dt", "-1e-3"], "must be > 0"),
    (["100", "--dt", "nan"], "not a finite number"),
    (["100", "--softening", "0"], "must be > 0"),
    (["100", "--softening", "1e-20"], "is below"),
    (["100", "--steps", "-1"], "is negative (must be at least 0)"),
    (["100", "--checkpoint", "c.npz", "--checkpoint-every", "0"], "must be at least 1"),
    (["100", "--precision", "fp16"], "'fp16' is not one of"),
    (["100", "--backend", "cuda"], "'cuda' is not one of"),
    (["100", "--exchange", "star"], "'star' is not one of"),
    (["100", "--init", "king"], "'king' is not one of"),
    (["100", "--transport", "pigeon"], "'pigeon' is not one of"),
    (["100", "--transport", "device", "--backend", "numba"], "needs the GPU backend"),
    (["100", "--checkpoint-every", "5"], "needs --checkpoint"),
    (["100", "--checkpoint", "/nonexistent-dir/c.npz"], "does not exist"),
    (["100", "--restart", "/nonexistent-file.npz"], "does not exist"),
])
def test_bad_input_single_rank(args, match):
    refused(run([NBODY, *args], timeout=60), match)


@pytest.fixture(scope="module")
def checkpoint_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("ck") / "c.npz"
    out = run([NBODY, "50", "--steps", "2", "--backend", "numpy", "--checkpoint", str(path)], timeout=120)
    assert out.returncode == 0, out.stderr
    return path


def _mpi(*args, ranks=2):
    return run(mpiexec_argv(ranks) + [NBODY, *map(str, args)], timeout=120, env=clean_env(OMP_NUM_THREADS="1"))


def test_gpu_backend_without_gpu():
    probe = run([sys.executable, "-c", "from pympi_gpu.device.gpu import gpu_usable; print(gpu_usable()[0])"],
                timeout=120)
    if probe.stdout.strip() == "True":
        pytest.skip("a GPU is usable here")
    refused(_mpi(100, "--backend", "gpu"), "--backend gpu: no usable GPU (")


def test_fewer_bodies_than_ranks():
    refused(_mpi(2, ranks=3), "must be at least the number of ranks (3)")


@pytest.mark.parametrize("kind, match", [
    ("garbage", "not an .npz archive"),
    ("truncated", "not a readable checkpoint"),
    ("bodies", "holds 50 bodies, but BODIES is 60"),
    ("precision", "was run with --precision fp32, not fp64"),
    ("dt", "was run with --dt 0.001, not 0.002"),
    ("beyond", "is at step 2, beyond --steps 1"),
])
def test_bad_restart_over_two_ranks(tmp_path, checkpoint_file, kind, match):
    path, bodies, extra = checkpoint_file, 50, ["--steps", "4"]
    if kind == "garbage":
        path = tmp_path / "g.npz"
        path.write_bytes(b"not a checkpoint at all" * 10)
    elif kind == "truncated":
        path = tmp_path / "t.npz"
        path.write_bytes(checkpoint_file.read_bytes()[:-300])
    elif kind == "bodies":
        bodies = 60
    elif kind == "precision":
        extra += ["--precision", "fp64"]
    elif kind == "dt":
        extra += ["--dt", "0.002"]
    elif kind == "beyond":
        extra = ["--steps", "1"]
    refused(_mpi(bodies, "--restart", path, "--backend", "numpy", *extra), match)


def test_restart_takes_settings_from_the_file(tmp_path):
    first = tmp_path / "a.npz"
    out = run([NBODY, "40", "--steps", "2", "--backend", "numpy", "--precision", "fp64", "--dt", "0.002",
               "--init", "uniform", "--seed", "9", "--checkpoint", str(first)], timeout=120)
    assert out.returncode == 0, out.stderr
    out = run([NBODY, "40", "--steps", "3", "--backend", "numpy", "--restart", str(first), "--json"], timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert (doc["precision"], doc["dt"], doc["init"], doc["seed"]) == ("fp64", 0.002, "uniform", 9)
    assert doc["first_step"] == 2 and doc["last_step"] == 3 and doc["steps"] == 1


def test_benchmark_skips_diagnostics_and_zero_steps_work(tmp_path):
    out = run([NBODY, "64", "--steps", "2", "--backend", "numpy", "--benchmark", "--json"], timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["initial"] is None and doc["energy_drift"] is None and doc["steps"] == 2
    out = run([NBODY, "64", "--steps", "0", "--backend", "numpy", "--verify"], timeout=120)
    assert out.returncode == 0, out.stderr
    assert "verify     PASSED" in out.stdout


def test_verify_failure_exits_nonzero():
    # a drift bound no leapfrog run can meet makes --verify fail, as any real violation would
    out = run([NBODY, "64", "--steps", "3", "--backend", "numpy", "--dt", "0.05", "--verify",
               "--energy-tolerance", "1e-300"], timeout=120)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "verify     FAILED" in out.stdout and "verification FAILED" in out.stderr
    assert "Traceback" not in out.stderr


def test_checkpoint_content_matches_run(checkpoint_file):
    meta, arrays = ckpt.read_file(checkpoint_file)
    assert meta["step"] == 2 and meta["bodies"] == 50 and meta["ranks"] == 1
    assert np.allclose(arrays["m"], 1 / 50) and "initial" in meta
