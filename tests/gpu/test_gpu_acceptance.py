"""benchmarks/gpu_acceptance.py: the logic that needs no GPU (plan, judging, comparisons,
summary), fed with real outputs of the CPU paths and of the CUDA simulator."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import sys
from pathlib import Path

import pytest

from helpers.commands import ROOT, clean_env, mpiexec_argv, require_system, run, script

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
            "lj gpu device 2 rank(s) 4000", "lj gpu host 1 rank(s) 4000", "lj numba host 1 rank(s) 4000",
            "lj gpu device 2 rank(s) 1000188", "lj gpu host 1 rank(s) 1000188", "lj full vs half lists 1000188",
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


def test_race_against_both_cuda_samples_builds(tmp_path, capsys):
    """Issue 52: gravity is raced at 2^16, 2^18 and 2^20 bodies, fp32 and fp64, against cuda-samples' nbody as
    NVIDIA builds it and with -use_fast_math; each program a warm-up run, then the median of five; pympi must
    reach the faster build."""
    steps = acc.plan(tmp_path / "carry", tmp_path / "mpi", tmp_path / "venv", tmp_path)
    build, *race = [s for s in steps if s.part == "race"]
    assert len(race) == 2 * len(acc.RACE_SIZES) * 3 == 18
    assert {s.group for s in race} == {f"race-{p}-2^{k}" for p in ("fp32", "fp64") for k in (16, 18, 20)}
    assert sum(1 for s in race if "cuda-samples-nbody-fast-math" in " ".join(s.argv)) == 6
    assert build.once and " -use_fast_math " in build.argv[-1] and "cuda-samples-nbody-fast-math" in build.argv[-1]
    (nvidia,) = [s for s in steps if s.name == "build cuda-samples nbody"]
    assert "fast_math" not in nvidia.argv[-1] and " -O3 -std=c++17 -arch=" in nvidia.argv[-1]
    # the runner: a warm-up run left out, the median of the next five
    counter = tmp_path / "n"
    counter.write_text("0")
    fake = ("import pathlib, sys; p = pathlib.Path(sys.argv[1]); n = int(p.read_text()) + 1; p.write_text(str(n)); "
            "print(f'= {n}.0 billion interactions per second')")
    assert acc.repeat("cuda-samples", [sys.executable, "-c", fake, str(counter)]) == 0
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert doc["runs"] == [2e9, 3e9, 4e9, 5e9, 6e9] and doc["median"] == 4e9
    assert acc.repeat("nbody", [sys.executable, "-c", "import sys; sys.exit(3)"]) == 1

    def cell(ours, nvidia, fast):
        out = []
        for name, kind, rate in (("race pympi-nbody fp32 2^18", "nbody", ours),
                                 ("race cuda-samples nbody fp32 2^18", "cuda-samples", nvidia),
                                 ("race cuda-samples nbody fast-math fp32 2^18", "cuda-samples", fast)):
            st = acc.Step(name, ["x"], check="race", group="race-fp32-2^18")
            acc.judge(st, 0, json.dumps({"kind": kind, "runs": [rate] * 5, "median": rate, "warmup": 1}), "")
            out.append(st)
        return out

    (good,) = acc.compare(cell(1.10e12, 0.95e12, 1.05e12), tmp_path)
    assert good["status"] == "passed" and good["against"] == "fast-math", good
    assert good["ratio"] == pytest.approx(1.10 / 1.05)
    (bad,) = acc.compare(cell(1.10e12, 0.95e12, 1.20e12), tmp_path)
    assert bad["status"] == "failed" and "2^18" in bad["check"], bad


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


def test_peers_race_judged_and_compared(tmp_path):
    """Issue 59: the race's steps in the plan at its three sizes; pympi's and the peers' outputs judged,
    their rates and ratios reported, a peer that did not start from pympi's state caught."""
    steps = acc.plan(tmp_path / "carry", tmp_path / "mpi", tmp_path / "venv", tmp_path)
    for part, sizes in (("peers", (32000, 256000)), ("peers-1m", (1000188,))):
        names = [s.name for s in acc.part_steps(steps, part) if s.part != "setup"]
        assert names == ["openmm, openmm-cuda-13 and gamdpy from the carry"] + [
            f"peers {code} {n}" for n in sizes for code in ("pympi-nbody", "openmm CUDA", "gamdpy")]
    ours = {"backend": "gpu", "transport": "host", "ranks": 1, "atoms": 32000, "rate": 4.0e8, "comm_per_step": 0.0,
            "median_step_time": 8e-5, "thermo": [{"step": 0, "temp": 1.44, "e_pair": -6.77, "ke": 2.15, "etotal": -4.62,
                                                 "press": -5.0}, {"step": 1000, "temp": 0.7, "e_pair": -5.70,
                                                                  "ke": 1.08, "etotal": -4.62, "press": 0.6}]}

    def peer(code, rate, e0=-6.77):
        rows = [{"step": 0, "e_pair": e0, "ke": 2.15, "etotal": e0 + 2.15, "temp": 1.44},
                {"step": 1000, "e_pair": -5.70, "ke": 1.08, "etotal": -4.62, "temp": 0.7}]
        return json.dumps({"code": code, "version": "x", "platform": "CUDA", "precision": "mixed", "atoms": 32000,
                           "steps": 1000, "thermo": rows, "wall": 1.0, "rate": rate, "setup_s": 5.0, "warmup": 0,
                           "notes": ""})

    def race(e0=-6.77):
        return [_step("peers pympi-nbody 32000", "lj", "peers-32000", json.dumps(ours)),
                _step("peers openmm CUDA 32000", "peer", "peers-32000", peer("openmm", 2.0e8, e0)),
                _step("peers gamdpy 32000", "peer", "peers-32000", peer("gamdpy", 1.0e8))]

    good = race()
    assert all(s.status == "passed" for s in good), [s.detail for s in good]
    (check,) = acc.compare(good, tmp_path)
    assert check["status"] == "passed", check
    assert check["ratios"] == {"pympi/openmm": pytest.approx(2.0), "pympi/gamdpy": pytest.approx(4.0)}
    (off,) = acc.compare(race(e0=-6.77 * (1 + 1e-4)), tmp_path)   # not pympi's start
    assert off["status"] == "failed", off


# ------------------------------------------------------------------ issue 27: parts, results as they go, env

def test_parts_fit_a_device_call(tmp_path):
    """Every step belongs to a part; each part's own steps, and the setup, fit one 10-minute call."""
    steps = acc.plan(tmp_path / "carry", tmp_path / "mpi", tmp_path / "venv", tmp_path)
    assert {s.part for s in steps} == set(acc.PARTS) - {"sprint"}   # the sprint takes steps of the others
    for part in set(acc.PARTS) - {"sprint"}:
        own = sum(s.est for s in steps if s.part == part)
        assert 0 < own <= 540, (part, own)
    setup = [s.name for s in steps if s.part == "setup"]
    assert setup == ["venv", "cuda-aware Open MPI + mpi4py", "build cuda-samples nbody",
                     "cuda-samples nbody: linked against the carry"]
    # only the parts that run cuda-samples' nbody build it (the others carry no GL)
    for part in acc.PARTS:
        mine = [s.name for s in acc.part_steps(steps, part) if s.part == "setup"]
        assert mine == (setup if part in ("setup", "bench", "race", "sprint") else setup[:2]), (part, mine)
    # the gpu-marked tests run only the modules that hold some (the others import what is not carried)
    (tests,) = [s for s in steps if s.name == "gpu-marked tests"]
    files = [a for a in tests.argv if a.endswith(".py")]
    assert str(ROOT / "tests" / "gpu" / "test_nbody_gpu.py") in files
    assert all(acc.GPU_MARK.search(open(f).read()) for f in files), files
    assert str(ROOT / "tests" / "cli" / "test_dump.py") not in files and str(Path(__file__)) not in files


def test_mpi_env_for_root_without_ssh(monkeypatch, tmp_path):
    monkeypatch.setattr(acc.shutil, "which", lambda name: None)  # the GPU machine: no ssh, no rsh
    env = acc.mpi_env(tmp_path / "mpi", tmp_path / "venv")
    assert env["OMPI_MCA_plm_rsh_agent"] == "false"
    if acc.os.geteuid() == 0:
        assert env["OMPI_ALLOW_RUN_AS_ROOT"] == env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] == "1"


def test_results_written_as_the_steps_go(tmp_path):
    """A call cut short still leaves the results of the steps it ran; a step done once is not redone;
    a step longer than what is left of the budget is not started."""
    out = tmp_path / "part.json"
    steps = [acc.Step("built once", [sys.executable, "-c", "print('built')"], once=True, est=1),
             acc.Step("quick", [sys.executable, "-c", "import json; print(json.dumps({'ok': 1}))"], est=1),
             acc.Step("too long", ["false"], est=10_000)]
    seen = []
    doc = acc.execute(steps, tmp_path / "work", out, 600, {"part": "x"},
                      log=lambda line: seen.append(json.loads(out.read_text()) if out.exists() else None))
    assert [s["status"] for s in doc["steps"]] == ["passed", "passed", "not run"]
    assert "run it in a call of its own" in doc["steps"][2]["detail"]
    assert seen[0] is None or seen[0]["steps"][0]["status"] == "planned"
    assert json.loads(out.read_text())["steps"][1]["status"] == "passed"   # rewritten after every step
    again = acc.execute([acc.Step("built once", ["false"], once=True, est=1)], tmp_path / "work",
                        tmp_path / "again.json", 600, {})
    assert again["steps"][0]["status"] == "passed" and again["steps"][0]["detail"].startswith("done earlier")


def test_merge_parts(tmp_path):
    def part(name, status):
        s = acc.Step(f"{name} step", ["true"], part=name, status=status)
        setup = acc.Step("venv", ["true"], status="passed", detail="done earlier on this machine: x")
        return {"schema": "pympi_gpu.gpu_acceptance/2", "device": "NVIDIA H100 80GB HBM3, 580.1", "part": name,
                "steps": [acc.dataclasses.asdict(setup), acc.dataclasses.asdict(s)], "checks": []}
    for name in acc.PARTS:
        (tmp_path / f"gpu-acceptance-nvidia-h100-80gb-hbm3-{name}.json").write_text(
            json.dumps(part(name, "failed" if name == "lj" else "passed")))
    assert acc.merge(tmp_path) == 1                     # the lj part failed
    assert acc.merge(tmp_path) == 1                     # the merged file itself is not taken for a part
    doc = json.loads((tmp_path / "gpu-acceptance-nvidia-h100-80gb-hbm3.json").read_text())
    assert doc["parts"] == list(acc.PARTS) and not doc["parts_missing"]
    assert [s["name"] for s in doc["steps"]].count("venv") == 1


def _load(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_child_environments_keep_the_users_mpi_settings(monkeypatch):
    """The tests' helpers, benchmarks/nbody.py and benchmarks/lj.py drop what a launcher sets for its ranks,
    and keep what the user set for Open MPI: as root on a machine without ssh, nothing starts without it."""
    from helpers import commands

    kept = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMPI_MCA_plm_rsh_agent": "false",
            "OMPI_MCA_opal_cuda_support": "true"}
    dropped = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_MCA_orte_hnp_uri": "x",
               "OMPI_MCA_ess": "pmi", "PMIX_RANK": "1", "PMI_RANK": "1", "SLURM_PROCID": "0",
               "MPI_LOCALRANKID": "0", "HYDRA_CONTROL_FD": "5"}
    for k, v in {**kept, **dropped}.items():
        monkeypatch.setenv(k, v)
    for name, env in (("commands.clean_env", commands.clean_env()), ("nbody.child_env", _load("nbody").child_env()),
                      ("lj._env", _load("lj")._env())):
        assert {k: env.get(k) for k in kept} == kept, name
        assert not set(dropped) & set(env), (name, set(dropped) & set(env))
    assert commands.LAUNCHER_VARS == _load("nbody").LAUNCHER_VARS == _load("lj").LAUNCHER_VARS


def test_nbody_benchmark_without_the_cuda_samples_binary(tmp_path):
    nb = _load("nbody")
    with pytest.raises(RuntimeError, match="cannot run cuda-samples nbody"):
        nb.cuda_samples(str(tmp_path / "no-such-nbody"), 1024, False, 1)


# ------------------------------------------------------------------ the rehearsal, offline

#: the carry folder made once per machine (its inputs in the name), so a rerun downloads nothing
CARRY_CACHE = Path(os.environ.get("PYMPI_ACCEPTANCE_CARRY", "/var/tmp/pympi-acceptance-carry"))


def _carry() -> Path:
    key = hashlib.sha256(json.dumps([acc.CARRY_REQUIREMENTS, acc.PEER_WHEELS, acc.GL_PACKAGES, acc.MPI4PY_SDIST,
                                     acc.CUDA_HEADERS_WHEEL, acc.DEVICE_PYTHON]).encode()).hexdigest()[:12]
    carry = CARRY_CACHE / key
    if not acc.carry_missing(carry) and not acc.rehearsal_missing():
        return carry
    out = run([sys.executable, str(ROOT / "benchmarks" / "gpu_acceptance.py"), "prepare", str(carry)], timeout=900)
    if out.returncode != 0:
        msg = f"prepare could not fill the carry folder (PyPI and Debian must answer): {out.stderr[-1500:]}"
        if require_system():
            pytest.fail(msg)
        pytest.skip(msg)
    samples = ROOT.parent / "shared" / "cuda-samples"
    if acc.carry_missing(carry) == ["cuda-samples"] and not (samples / "Common").is_dir():
        # cuda-samples' source is never in the repository (its licence): a checkout without ../shared/ beside it
        # has none to carry, and the rehearsal builds its nbody
        pytest.skip(f"no cuda-samples at {samples} to carry (a checkout without ../shared/cuda-samples beside it)")
    return carry


#: the lines of the rehearsal's log that CI's output shows (the step table and what each step proved)
REHEARSAL_LINES = re.compile(r"^(rehearsal: |venv: installed offline|linked |audit: |ok |FAILED |\d+/\d+ tests? collected|"
                             r"(passed|failed|not run) +\d)")


def test_rehearsal_offline(tmp_path, capsys):
    """Everything of the GPU plan that needs no GPU, from the carry folder alone, network cut: the wheels
    installed offline, the package, mpi4py from its sdist, mpiexec as root without ssh, cuda-samples'
    nbody built and linked against the carried libraries, the gpu-marked tests collected cleanly."""
    why = acc.rehearsal_blockers()
    if why:
        pytest.skip("the rehearsal cannot run here: " + "; ".join(why))
    carry = _carry()
    out = run([sys.executable, str(ROOT / "benchmarks" / "gpu_acceptance.py"), "rehearse", str(carry),
               "--work", str(tmp_path / "work"), "--out", str(tmp_path / "rehearsal.json")], timeout=1500)
    log = out.stdout + out.stderr
    with capsys.disabled():  # in CI's output even when the test passes
        print("\n" + "\n".join(line[:300] for line in log.splitlines() if REHEARSAL_LINES.match(line)))
    assert out.returncode == 0, log[-4000:]
    doc = json.loads((tmp_path / "rehearsal.json").read_text())
    assert doc["passed"] and all(s["status"] == "passed" for s in doc["steps"]), doc["steps"]
    assert "network cut" in log and "ssh agent for Open MPI: false" in log
    assert re.search(r"venv: installed offline from \S+: .*cython-3.*rich-", log), log[-3000:]
    assert re.search(r"^linked \S+/cuda-samples-nbody$", log, re.M), log[-3000:]  # cuda-samples' nbody
    assert "none from the system" in log                                 # ... against the carried GL only
    assert log.count("no launcher flag: 2 ranks of") == 3                # tests', nbody.py's, lj.py's env
    # the gpu-marked tests: the device-transport one, and the device fixture's real-GPU case of each test_devices body
    m = re.search(r"(\d+)/\d+ tests? collected \(\d+ deselected\)", log)
    assert m and int(m.group(1)) >= 1 + 4, log[-3000:]


def test_sprint_with_mpi_from_wheels(tmp_path):
    """The one-call form a short lease allows (``--mpi wheel --part sprint``): nothing is built but
    cuda-samples' nbody, MPICH's wheel runs the ranks, the steps that need a CUDA-aware MPI are left
    out, and every step SPRINT names exists (a renamed step would silently drop out of it)."""
    work = tmp_path
    steps = acc.plan(tmp_path / "carry", work / "mpi", work / "venv", work, mpi="wheel")
    names = [s.name for s in steps]
    assert set(acc.SPRINT) <= set(names), set(acc.SPRINT) - set(names)
    assert not [s.name for s in steps if "device" in s.argv]                     # no --transport device
    sprint = acc.part_steps(steps, "sprint")
    setup = [s.name for s in sprint if s.part == "setup"]
    assert setup == ["venv", "mpi4py + MPICH wheels", "build cuda-samples nbody",
                     "cuda-samples nbody: linked against the carry"]
    assert [s.name for s in sprint if s.part != "setup"] == list(acc.SPRINT)       # the figures first
    wheels = next(s for s in sprint if s.name == "mpi4py + MPICH wheels")
    assert "--no-index" in wheels.argv and "--only-binary=:all:" in wheels.argv
    for s in sprint:
        if s.argv and s.argv[0].endswith("mpiexec"):
            assert s.argv[0] == str(work / "venv" / "bin" / "mpiexec") and "--oversubscribe" not in s.argv
    assert sum(s.est for s in sprint) <= 540 + 120   # the budget skips what is left; the figures come first


def test_lj_lists_judged_from_a_real_profile(tmp_path):
    """The full-vs-half step reads what ``benchmarks/lj.py --mode gpu-profile`` wrote (here from the
    simulated GPU, 108 atoms, one step each)."""
    out = tmp_path / "lists.json"
    argv = [sys.executable, str(ROOT / "benchmarks" / "lj.py"), "--mode", "gpu-profile", "--gpu-atoms", "108",
            "--steps", "1", "--out", str(out)]
    done = run(argv, env=clean_env(NUMBA_ENABLE_CUDASIM="1"), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    step = acc.Step(f"lj full vs half lists {acc.LJ_BENCH_ATOMS}", argv, check="lj-lists")
    acc.judge(step, 0, done.stdout, done.stderr)
    assert step.status == "passed", step.detail
    f = step.figures
    assert f["atoms"] == 108 and f["faster"] in ("full", "half")
    assert f["full_atom_steps_per_s"] > 0 and f["half_atom_steps_per_s"] > 0
    assert set(f["half_phase_shares"]) == {"forces", "list build", "halo", "integrate", "thermo", "other"}
    assert f["full_host_copies"] == f["half_host_copies"] == 0
    # three rebuilds forced after the passes, op by op: the places of the rebuild's blocks and kernels
    for lists in ("full", "half"):
        ops = json.loads(out.read_text())["lists"][lists]["ranks"][0]["rebuild_ops"]
        places = ops["by_place_us"]
        assert ops["rebuilds"] == 3 and ops["rebuild_us"] > 0
        assert {"kernel build_lists", "kernel bin_owned", "kernel order_cells", "kernel write_images",
                "the rest"} <= set(places)  # the counting sort, the ghosts in one pass (one rank: no migration)
        assert any(k.startswith("gpu.halo.borders:") for k in places)
        assert any(k.startswith("gpu.rebuild.sort:") for k in places)
        assert not any(k.startswith(("kernel forces", "kernel integrate")) for k in places)  # the step's own
        assert abs(sum(places.values()) - ops["rebuild_us"]) <= 1e-6 * ops["rebuild_us"] + 1.0


def test_outer_venv_pth_files_run_in_the_acceptance_venv(tmp_path):
    """The GPU image's Python is a venv whose numba-cuda takes ``numba.cuda`` over through a .pth
    file: the acceptance venv must run that file too, or numba's built-in CUDA target types the
    kernels (what the first H200 run hit)."""
    import subprocess
    import venv

    outer = tmp_path / "outer-site"
    outer.mkdir()
    (outer / "zz_redirect.pth").write_text("import os; os.environ['PYMPI_OUTER_PTH_RAN'] = 'yes'\n")
    (outer / "outer_module.py").write_text("WHERE = 'outer'\n")
    venv.create(tmp_path / "v", with_pip=False)
    site = subprocess.run([str(tmp_path / "v" / "bin" / "python"), "-c",
                           "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "_pympi_outer_venv.pth").write_text(acc.outer_site_lines([outer]))
    out = subprocess.run([str(tmp_path / "v" / "bin" / "python"), "-c",
                          "import os, sys, outer_module; print(os.environ.get('PYMPI_OUTER_PTH_RAN'), "
                          "outer_module.WHERE, sys.path.index(%r) < sys.path.index(%r))" % (site, str(outer))],
                         capture_output=True, text=True, timeout=60, env=clean_env())
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["yes", "outer", "True"]   # run, importable, behind the venv's own


#: Nsight Compute's ``--csv --page details`` (2025.3, one kernel, two sections; shortened), the program's own
#: output and ncu's ``==PROF==`` lines among them
NCU_CSV = """==PROF== Connected to process 4242 (/tmp/pympi-acceptance/venv/bin/python3.12)
==PROF== Profiling "forces_newton": 0%....50%....100% - 9 passes
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"3","4242","python3.12","127.0.0.1","cudapy::pympi_gpu::nbody::lj::kernels_cuda::_make_forces_newton::$3clocals$3e::forces_newton[abi:v1,cw51cXTLSUwv1sCUt9Uw1VEw0NRRQPKzLTg4gaGKFsG2oMQGEYakJSQB1PQBk0Bynm21OiwU1a0UoLGhDpQE8oxrNQE_3d](Array<double, 1, C, mutable, aligned>, long long)","1","7","(128, 1, 1)","(7814, 1, 1)","0","9.0","GPU Speed Of Light Throughput","Duration","us","612.35"
"3","4242","python3.12","127.0.0.1","cudapy::pympi_gpu::nbody::lj::kernels_cuda::_make_forces_newton::$3clocals$3e::forces_newton[abi:v1,cw51cXTLSUwv1sCUt9Uw1VEw0NRRQPKzLTg4gaGKFsG2oMQGEYakJSQB1PQBk0Bynm21OiwU1a0UoLGhDpQE8oxrNQE_3d](Array<double, 1, C, mutable, aligned>, long long)","1","7","(128, 1, 1)","(7814, 1, 1)","0","9.0","GPU Speed Of Light Throughput","DRAM Frequency","Ghz","2.62"
"3","4242","python3.12","127.0.0.1","cudapy::pympi_gpu::nbody::lj::kernels_cuda::_make_forces_newton::$3clocals$3e::forces_newton[abi:v1,cw51cXTLSUwv1sCUt9Uw1VEw0NRRQPKzLTg4gaGKFsG2oMQGEYakJSQB1PQBk0Bynm21OiwU1a0UoLGhDpQE8oxrNQE_3d](Array<double, 1, C, mutable, aligned>, long long)","1","7","(128, 1, 1)","(7814, 1, 1)","0","9.0","Occupancy","Achieved Occupancy","%","61.07"
{"schema": "pympi_gpu.nbody.lj/1", "rate": 1.0}
==PROF== Disconnected from process 4242
"""


def test_ncu_figures_parsed(tmp_path):
    """The profile part keeps, per kernel launch, the figures the issue asks a profile for, by the kernel's
    own name; a log with no kernel in it fails the step."""
    assert acc.parse_ncu(NCU_CSV) == {"3 forces_newton": {"Duration": "612.35 us", "Achieved Occupancy": "61.07 %"}}
    steps = acc.plan(tmp_path / "carry", tmp_path / "mpi", tmp_path / "venv", tmp_path)
    profile = [s for s in steps if s.part == "profile"]
    assert [s.name for s in profile] == ["ncu pi", "ncu lj step", "ncu lj list build"]
    for s in profile:
        log = Path(s.argv[s.argv.index("--log-file") + 1])
        log.write_text(NCU_CSV)
        acc.judge(s, 0, "", "")
        assert s.status == "passed" and s.figures["3 forces_newton"]["Duration"] == "612.35 us"
        log.write_text("==PROF== No kernels were profiled.\n")
        acc.judge(s, 0, "", "")
        assert s.status == "failed" and "profiled no kernel" in s.detail


def test_a_check_whose_reference_was_left_out_is_skipped(tmp_path):
    """``--only`` may run a group's GPU step without the numba run it is compared with (the H100 call that
    reran only the device transport): the check is skipped with the reason, and nothing raises."""
    steps = acc.plan(tmp_path / "carry", tmp_path / "mpi", tmp_path / "venv", tmp_path)
    mine, incomplete = acc.only_steps(acc.part_steps(steps, "lj"), rf"gpu device 2 rank\(s\) {acc.LJ_CHECK_ATOMS}")
    (gpu,) = [s for s in mine if s.part != "setup"]
    assert gpu.name == f"lj gpu device 2 rank(s) {acc.LJ_CHECK_ATOMS}" and gpu.group in incomplete
    gpu.status, gpu.figures = "passed", {"backend": "gpu", "transport": "device", "thermo": {"temp": 1.0}}
    (check,) = acc.compare([gpu], tmp_path, incomplete)
    assert check["status"] == "skipped" and "not all run in this call" in check["detail"], check
    assert acc.only_steps(steps, None) == (steps, frozenset())


FINAL_STATE = r"""
import sys
from pathlib import Path
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]  # no installed package
try:
    import pympi_gpu
    raise SystemExit("the package is importable: the test proves nothing")
except ImportError:
    pass
sys.path.insert(0, sys.argv[1])
import gpu_acceptance as acc
print(acc.final_state(Path(sys.argv[2]))["status"])
"""


def test_final_state_check_runs_where_the_package_is_not_installed(tmp_path):
    """The harness runs under the GPU image's own Python, where the package is installed only in the venv it
    makes: the final-state check still reads the checkpoints (here: none, so it fails, without a traceback)."""
    out = run([sys.executable, "-c", FINAL_STATE, str(ROOT / "benchmarks"), str(tmp_path)], cwd=tmp_path,
              timeout=120, env=clean_env())
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "failed"
