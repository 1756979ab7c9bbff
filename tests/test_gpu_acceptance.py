"""benchmarks/gpu_acceptance.py: the logic that needs no GPU (plan, judging, comparisons,
summary), fed with real outputs of the CPU paths and of the CUDA simulator."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from conftest import ROOT, clean_env, mpiexec_argv, run, script

spec = importlib.util.spec_from_file_location("gpu_acceptance", ROOT / "benchmarks" / "gpu_acceptance.py")
acc = importlib.util.module_from_spec(spec)
sys.modules["gpu_acceptance"] = acc       # dataclasses look their module up there
spec.loader.exec_module(acc)

#: the tail of cuda-samples' `nbody -benchmark` output, in its own words
SAMPLES_OUT = """> Compute 9.0 CUDA device: [NVIDIA H100 80GB HBM3]
number of bodies = 1048576
1048576 bodies, total time for 10 iterations: 1234.567 ms
= 8906.123 billion interactions per second
= 178122.456 single-precision GFLOP/s at 20 flops per interaction
"""


def test_parse_cuda_samples():
    got = acc.parse_cuda_samples(SAMPLES_OUT)
    assert got == {"interactions_per_s": 8906.123e9, "gflops": 178122.456, "precision": "fp32"}
    fp64 = acc.parse_cuda_samples(SAMPLES_OUT.replace("single-precision", "double-precision"))
    assert fp64["precision"] == "fp64"
    with pytest.raises(ValueError, match="billion interactions"):
        acc.parse_cuda_samples("CUDA error: no device")


def test_plan_covers_the_issue_matrix(tmp_path):
    steps = acc.plan(tmp_path / "carry", tmp_path / "mpi", tmp_path / "venv", tmp_path)
    names = [s.name for s in steps]
    verify = [n for n in names if n.startswith("nbody verify")]
    assert len(verify) == 16 and len(set(verify)) == 16          # ranks x precision x exchange x transport
    for part in ("1r", "2r", "fp32", "fp64", "ring", "allgather", "host", "device"):
        assert any(part in n.split() for n in verify), part
    assert {"pi gpu 1 rank(s)", "pi numba 2 rank(s)", "gpu-marked tests", "cuda-aware Open MPI + mpi4py",
            "build cuda-samples nbody", "cuda-samples nbody fp64", "benchmarks/nbody.py --mode gpu",
            "benchmarks/pi.py (GPU mode)", "final state gpu fp64", "transport device 2 ranks 2^20",
            "lj gpu device 2 ranks 4000", "lj gpu device 2 rank(s) 1000188", "lj gpu host 1 rank(s) 1000188",
            "benchmarks/lj.py --mode gpu"} <= set(names)
    mpi = next(s for s in steps if s.name == "cuda-aware Open MPI + mpi4py")
    assert mpi.argv[-1] == "none" and "--no-index" in mpi.env["PIP_ARGS"]   # offline, one node


def test_dry_run_prints_the_plan_and_what_is_missing(tmp_path):
    out = run([sys.executable, str(ROOT / "benchmarks" / "gpu_acceptance.py"), "run", str(tmp_path / "carry"),
               "--dry-run"], timeout=120)
    assert out.returncode == 0, out.stderr
    assert "# nbody verify 2r fp32 allgather device" in out.stdout
    assert "build-cuda-mpi.sh" in out.stdout and "missing" in out.stdout.splitlines()[-1]


@pytest.fixture(scope="module")
def pi_docs():
    docs = {}
    for backend in ("numba", "numpy"):
        out = run(mpiexec_argv(2) + [script("pympi-pi"), "1e6", "--backend", backend, "--seed", "7", "--json"],
                  timeout=300)
        assert out.returncode == 0, out.stderr
        docs[backend] = out.stdout
    return docs


def _step(name, check, group, stdout, rc=0):
    s = acc.Step(name, ["true"], check=check, group=group)
    acc.judge(s, rc, stdout, "")
    return s


def test_pi_hits_compared_across_backends(pi_docs, tmp_path):
    steps = [_step(f"pi {b}", "pi", "pi-2", text) for b, text in pi_docs.items()]
    assert all(s.status == "passed" for s in steps)
    (check,) = acc.compare(steps, tmp_path)
    assert check["status"] == "passed", check
    doc = json.loads(pi_docs["numpy"])
    doc["results"][0]["hits"] += 1                       # one hit off: the comparison must see it
    steps[1] = _step("pi numpy", "pi", "pi-2", json.dumps(doc))
    assert acc.compare(steps, tmp_path)[0]["status"] == "failed"


def test_nbody_steps_judged_from_real_runs(tmp_path):
    sim = clean_env(NUMBA_ENABLE_CUDASIM="1", OMP_NUM_THREADS="1")
    gpu = run([script("pympi-nbody"), "64", "--steps", "1", "--backend", "gpu", "--verify", "--json"],
              timeout=300, env=sim)
    cpu = run([script("pympi-nbody"), "64", "--steps", "1", "--backend", "numba", "--verify", "--json"],
              timeout=300)
    assert gpu.returncode == 0 and cpu.returncode == 0, gpu.stderr + cpu.stderr
    ok = _step("gpu", "nbody", "", gpu.stdout)
    assert ok.status == "passed" and ok.figures["verify"]["passed"] is True
    assert _step("cpu", "nbody", "", cpu.stdout).status == "failed"           # not on the GPU
    assert _step("crash", "nbody", "", "", rc=139).status == "failed"


def test_final_state_check_on_real_checkpoints(tmp_path):
    for backend, env in (("gpu", clean_env(NUMBA_ENABLE_CUDASIM="1", OMP_NUM_THREADS="1")),
                         ("numba", clean_env(OMP_NUM_THREADS="1"))):
        out = run(mpiexec_argv(2) + [script("pympi-nbody"), "64", "--steps", "2", "--precision", "fp64",
                                     "--backend", backend, "--checkpoint",
                                     str(tmp_path / f"acceptance-{backend}.npz")], timeout=300, env=env)
        assert out.returncode == 0, out.stderr
    got = acc.final_state(tmp_path)
    assert got["status"] == "passed", got


def test_ratio_to_cuda_samples_and_summary(tmp_path):
    def pair(rate):
        ours = acc.Step("ours", ["x"], check="nbody", group="vs-fp32", status="passed",
                        figures={"interactions_per_s": rate})
        ref = acc.Step("ref", ["x"], check="cuda-samples", group="vs-fp32", status="passed",
                       figures={"interactions_per_s": 1e12})
        return [ours, ref]

    (good,) = acc.compare(pair(0.95e12), tmp_path)
    (bad,) = acc.compare(pair(0.5e12), tmp_path)
    assert good["status"] == "passed" and good["ratio"] == pytest.approx(0.95)
    assert bad["status"] == "failed"
    text, ok = acc.summary(pair(0.95e12), [good])
    assert ok and text.endswith("GPU acceptance: PASSED")
    skipped = acc.Step("tests", ["x"], check="pytest")
    acc.judge(skipped, 0, "3 passed, 1 skipped in 2.0s", "")
    assert skipped.status == "failed"                    # a gpu test that skipped on a GPU is a failure
    text, ok = acc.summary([skipped], [bad])
    assert not ok and "NOT PASSED" in text


def test_lj_thermo_compared_across_backends(tmp_path):
    """LJ steps judged from real runs (simulated GPU, numba), then a thermo value off is caught."""
    args = ["256", "--model", "lj", "--steps", "8", "--json"]
    sim = clean_env(NUMBA_ENABLE_CUDASIM="1", OMP_NUM_THREADS="1", PYMPI_CUDA_AWARE="1")
    outs = {("numba", "host"): run(mpiexec_argv(2) + [script("pympi-nbody"), *args, "--backend", "numba"],
                                   timeout=300)}
    for transport in ("host", "device"):
        outs["gpu", transport] = run(mpiexec_argv(2) + [script("pympi-nbody"), *args, "--backend", "gpu",
                                                        "--transport", transport], timeout=600, env=sim)
    for key, out in outs.items():
        assert out.returncode == 0, (key, out.stderr)
    steps = [_step(f"lj {b} {t}", "lj", "lj-thermo", out.stdout) for (b, t), out in outs.items()]
    assert all(s.status == "passed" for s in steps), [s.detail for s in steps]
    assert steps[2].figures["transport"] == "device" and steps[2].figures["atom_steps_per_s"] > 0
    (check,) = acc.compare(steps, tmp_path)
    assert check["status"] == "passed", check
    doc = json.loads(outs["gpu", "device"].stdout)
    doc["thermo"][-1]["press"] *= 1 + 1e-6                # beyond summation order: must be caught
    steps[2] = _step("lj gpu device", "lj", "lj-thermo", json.dumps(doc))
    assert acc.compare(steps, tmp_path)[0]["status"] == "failed"
