"""One-command GPU acceptance of pympi_gpu: every GPU path, on one GPU machine, offline.

    python benchmarks/gpu_acceptance.py prepare CARRY              # where PyPI and Debian answer
    python benchmarks/gpu_acceptance.py rehearse CARRY             # here, network cut: all but the GPU
    python benchmarks/gpu_acceptance.py run CARRY --part setup     # on the GPU machine, one call each,
    python benchmarks/gpu_acceptance.py run CARRY --part tests     # ... every part under 10 minutes
    python benchmarks/gpu_acceptance.py merge OUT                  # the parts' files into one
    python benchmarks/gpu_acceptance.py run CARRY --dry-run        # the plan, part by part, nothing run

``prepare`` fills CARRY (kept out of git) with what the GPU machine lacks and cannot download
(:func:`prepare`; about 60 MB, under the 64 MiB a device call carries): the wheels its Python
does not have (Cython >= 3 and setuptools to build mpi4py offline, click and rich for the
package, pytest and its plugins; OpenMM, its CUDA 13 platform and gamdpy without their
dependencies, for the race of issue 59: :data:`PEER_WHEELS`), the mpi4py sdist, the CUDA 12 runtime wheel (``cuda.h`` for
Open MPI 4.1), the Open MPI source of Debian's ``openmpi`` source package, the GL, GLUT, GLEW
and X11 packages cuda-samples' ``nbody`` links against (Debian 12's, unpacked with
``dpkg -x``), and a copy of cuda-samples' ``nbody`` from ``../shared/cuda-samples`` (never
committed).  The GPU image has Python 3.12 as a virtual environment holding numpy, numba,
numba-cuda, CuPy for CUDA 13 and nvcc (the device's KINDS.md): those are used as found.

``run`` executes the plan, one part per call (:data:`PARTS`): each part starts with the
``setup`` steps (a venv that sees the image's packages, the CUDA-aware Open MPI of
docker/build-cuda-mpi.sh with mpi4py on it, cuda-samples' ``nbody``), which a later call on
the same machine finds done and skips; then its own steps, each judged (passed, failed, or not
run with the reason).  A part stops starting steps when what is left of its time budget
(``--budget``, 540 s: a device call may run 600) is less than the next step's estimate, and
the results file (``gpu-acceptance-<device>-<part>.json``) is rewritten after every step, so a
call cut short still brings back what it measured.

``rehearse`` runs here everything of that plan that needs no GPU, as the GPU machine would,
from the carry folder alone with the network cut (``unshare -n``) and ssh hidden: the venv
made by an image-like Python, every carried wheel installed with ``--no-index``, the package
installed, mpi4py built from its sdist offline, ``mpiexec`` started as root through the
environments the tests and benchmarks give their child runs, cuda-samples' ``nbody`` built
and linked against the carried libraries only, the collection of the ``gpu``-marked tests, and the
race's offline part: the peers' wheels installed, OpenMM's Reference platform against pympi at 500
atoms, steps 0 and 100 (benchmarks/peers_gpu.py).
``--full`` also builds the CUDA-aware Open MPI 4.1 from the carried source (several minutes
on 2 cores) and starts its ``mpiexec`` as root without ssh; without it mpi4py is built on the
MPICH of this environment.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
THIS = Path(__file__).resolve()
SEED = 20240601
PI_SAMPLES = "4e9"
NBODY_VERIFY_BODIES = 16384
SAMPLES_BODIES = 1 << 20
#: issue 52: gravity raced against both builds of cuda-samples' nbody at each size, fp32 and fp64
RACE_SIZES = (1 << 16, 1 << 18, 1 << 20)
#: interactions a run of the race does (iterations = this / n**2): about 1.4 s fp32 on an H200
RACE_WORK = 1 << 41
#: runs of each program at each size: a warm-up run, then the median of these
RACE_WARMUP, RACE_RUNS = 1, 5
LJ_CHECK_ATOMS = 4000     # GPU vs numba thermo, 2 ranks
LJ_BENCH_ATOMS = 1000188  # issue 9: atom-steps/s at 1e6 atoms (an fcc lattice of 63^3 cells)
#: how far the GPU's thermo may drift from numba's after LJ_CHECK_STEPS (summation order only)
LJ_CHECK_STEPS, LJ_THERMO_RTOL = 50, 1e-8
#: the Python of the GPU image (KINDS.md): the carried wheels are pure Python, or built for it too
DEVICE_PYTHON = "3.12"
#: what the GPU image's Python lacks, carried as wheels (their dependencies come along)
CARRY_REQUIREMENTS = ("cython>=3.0", "setuptools>=64", "wheel", "click>=8.1", "rich>=13.0", "pytest>=7.4",
                      "pytest-mpi>=0.6", "pytest-timeout>=2.2")
#: issue 59: the race's peers, carried as wheels without their dependencies (the image holds numpy, numba,
#: h5py, matplotlib, pandas and CUDA 13's runtime, NVRTC, CUPTI and cuFFT wheels; not nvidia-cuda-nvcc, 45 MiB,
#: which OpenMM's CUDA platform does without: it compiles with NVRTC)
PEER_WHEELS = ("openmm==8.6.1", "openmm-cuda-13==8.6.1", "gamdpy==0.8.3")
#: OpenMM's wheels are built for glibc 2.34 and newer
PEER_PLATFORMS = ("manylinux_2_34_x86_64", "manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
#: the rehearsal's own OpenMM wheels, for this Python where it is not the GPU image's (14 MiB more would take
#: the carry over the 64 MiB a device call carries): kept outside the carry and the checkout, by ``prepare``
REHEARSAL_WHEELS = Path(os.environ.get("PYMPI_REHEARSAL_WHEELS", "/var/tmp/pympi-acceptance-rehearsal-wheels"))
#: issue 59, item 1: LJ at these sizes in pympi, OpenMM (CUDA platform) and gamdpy, one after the other
PEER_SIZES = (32000, 256000, LJ_BENCH_ATOMS)
#: steps of each code's timed loop in the race (thermo every 100, as pympi's --thermo 100)
PEER_STEPS = 1000
#: how far OpenMM (mixed precision) and gamdpy (single) may be from pympi's step-0 energies, relative
PEER_START_RTOL = 1e-5
#: the rehearsal's offline part of the race: OpenMM Reference against pympi at 500 atoms, steps 0 and 100
PEER_CHECK_ATOMS, PEER_REFERENCE_RTOL = 500, 1e-8
#: mpi4py, built from source against the CUDA-aware Open MPI
MPI4PY_SDIST = "mpi4py>=4.1"
#: ``--mpi wheel``: MPI from PyPI, nothing built (a short lease): mpi4py's binary wheel on the MPICH
#: wheel, host transport only (that MPICH is not CUDA-aware)
WHEEL_MPI = ("mpi4py>=4.1", "mpich>=4.1")
#: cuda.h for Open MPI 4.1's configure (it loads the driver at run time)
CUDA_HEADERS_WHEEL = "nvidia-cuda-runtime-cu12==12.9.*"
#: what compiling and linking cuda-samples' nbody needs (headers and libraries), from Debian 12:
#: GL, GLU, GLUT, GLEW and the X11 libraries GLUT and GLX pull in
GL_PACKAGES = ("freeglut3-dev", "libglut-dev", "libglut3.12", "libglew-dev", "libglew2.2", "libgl-dev", "libgl1",
               "libglx-dev", "libglx0", "libglvnd0", "libglvnd-dev", "libegl1", "libegl-dev", "libgles2",
               "libgles-dev", "libopengl0", "libopengl-dev", "libglu1-mesa", "libglu1-mesa-dev",
               "libx11-6", "libx11-dev", "libx11-xcb1", "libxcb1", "libxcb1-dev", "libxau6", "libxau-dev",
               "libxdmcp6", "libxdmcp-dev", "libbsd0", "libmd0", "x11proto-dev", "xtrans-dev", "libxext6",
               "libxext-dev", "libxi6", "libxi-dev", "libxxf86vm1", "libxxf86vm-dev", "libxfixes3",
               "libxfixes-dev", "libxrender1", "libxrandr2")
#: libraries of the base system a binary may take from outside the carry (C and C++ runtimes)
BASE_LIBS = ("linux-vdso.so.1", "libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "libdl.so.2",
             "librt.so.1", "libpthread.so.0", "ld-linux-x86-64.so.2")
#: the most a device call carries
CARRY_LIMIT = 64 << 20
#: nvcc's flags for cuda-samples' nbody (benchmarks/gpu_static.py compiles its kernels with the same):
#: NVIDIA's build (its Makefile/CMake pass no fast-math flag) ...
SAMPLES_NVCC_FLAGS = ("-O3", "-std=c++17")
#: ... and what its second build adds: pympi's gravity kernels are compiled with fast math, so the
#: race is run against both (issue 52)
SAMPLES_FAST_MATH_FLAGS = ("-use_fast_math",)

__all__ = ["Step", "plan", "PARTS", "RACE_SIZES", "PEER_SIZES", "peer_steps", "repeat", "parse_cuda_samples", "check_pi", "check_nbody", "check_lj", "summary",
           "mpi_env", "gpu_test_files", "prepare", "rehearse", "main"]


@dataclasses.dataclass
class Step:
    """One command of the acceptance run and what its output must show."""

    name: str
    argv: list[str]
    check: str = "rc"            # how the output is judged: see judge()
    timeout: float = 600
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    group: str = ""              # steps compared with each other (pi hits, transports, ...)
    part: str = "setup"          # the device call it belongs to (PARTS)
    est: float = 60.0            # expected seconds on the GPU machine (16 cores, an H100)
    once: bool = False           # done once per machine: a later call finds its mark and skips it
    status: str = "planned"      # planned | passed | failed | skipped | not run
    detail: str = ""
    seconds: float = 0.0
    figures: dict = dataclasses.field(default_factory=dict)

    def shell(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return (env + " " if env else "") + " ".join(shlex.quote(a) for a in self.argv)

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9]+", "-", self.name).strip("-").lower()


#: the device calls, in order, and what each holds besides the setup (the steps' ``part``)
PARTS = ("setup", "tests", "nbody", "lj", "bench", "race", "bench-lj", "profile", "peers", "peers-1m", "sprint")
#: the parts that run cuda-samples' nbody (the others skip its build and audit: nothing of GL is carried for them)
SAMPLES_PARTS = ("bench", "race", "sprint")
#: what Nsight Compute reads of each profiled kernel (part ``profile``): the issue's "achieved occupancy,
#: memory throughput, issue-slot use", the duration and the launch's registers
NCU_SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "ComputeWorkloadAnalysis")
NCU_FIGURES = ("Duration", "Memory Throughput", "DRAM Throughput", "Compute (SM) Throughput", "Achieved Occupancy",
               "Theoretical Occupancy", "Registers Per Thread", "Issue Slots Busy", "Executed Ipc Active")
#: the ``sprint`` part: the figures first, in this order, from steps of the other parts, for a lease
#: with room for one call (``--mpi wheel``, so nothing is built but cuda-samples' nbody)
SPRINT = ("pi gpu 1 rank(s)", "pi numba 1 rank(s)",
          "cuda-samples nbody fp32", "pympi-nbody fp32 1 rank 2^20",
          "cuda-samples nbody fp64", "pympi-nbody fp64 1 rank 2^20",
          f"lj full vs half lists {LJ_BENCH_ATOMS}",
          f"lj numba host 1 rank(s) {LJ_CHECK_ATOMS}", f"lj gpu host 1 rank(s) {LJ_CHECK_ATOMS}",
          "gpu-marked tests",
          f"lj numba host 2 rank(s) {LJ_CHECK_ATOMS}", f"lj gpu host 2 rank(s) {LJ_CHECK_ATOMS}",
          "pi numba 2 rank(s)", "pi gpu 2 rank(s)",
          "nbody verify 2r fp32 ring host", "nbody verify 2r fp64 allgather host")


#: a test marked ``gpu``: by its decorator, a module's ``pytestmark``, or the ``device`` fixture's ``gpu`` case
#: (tests/conftest.py: a test body that takes ``device`` runs on the real GPU too)
GPU_MARK = re.compile(r"^\s*@pytest\.mark\.gpu\b|^pytestmark\s*=.*\bpytest\.mark\.gpu\b"
                      r"|^def test_\w+\(device\b", re.M)


def gpu_test_files(root: Path = ROOT) -> list[Path]:
    """The test modules of the tiers (tests/unit, cli, gpu; not the system tier, nor tests/mpi, which runs
    under mpiexec) that hold ``gpu``-marked tests (the others need what is not carried: ase, gsd)."""
    return sorted(p for p in (root / "tests").glob("*/test_*.py")
                  if p.parent.name not in ("system", "mpi") and GPU_MARK.search(p.read_text()))


def ssh_agent() -> str:
    """What Open MPI 4.1's launcher is to call for remote daemons: ssh if there is one, else ``false``
    (it refuses to start even one node's ranks without an agent that exists; none is called)."""
    return shutil.which("ssh") or shutil.which("rsh") or "false"


def mpi_env(prefix: Path, venv: Path) -> dict[str, str]:
    """The environment of every step that starts MPI ranks on the GPU machine (root, no ssh)."""
    env = {"PATH": f"{venv / 'bin'}:{prefix / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}",
           "OMPI_MCA_opal_cuda_support": "true", "OMPI_MCA_plm_rsh_agent": ssh_agent(),
           # a VM or container may refuse cross-memory attach (process_vm_readv)
           "OMPI_MCA_btl_vader_single_copy_mechanism": "none", "PYTHONUNBUFFERED": "1"}
    if os.geteuid() == 0:  # the acceptance runs as root there; these pass through the tests' child runs
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def setup_steps(carry: Path, work: Path, python: str = "python3", arch: str = "native",
                mpi: str = "build") -> list[Step]:
    """The steps every part starts with (once per machine): venv, MPI and mpi4py, cuda-samples' nbody.

    ``mpi``: ``"build"`` (the CUDA-aware Open MPI from the carried source, mpi4py on it),
    ``"wheel"`` (mpi4py's and MPICH's wheels from the carry, nothing built: host transport only),
    or the path of an ``mpicc`` to build mpi4py against (the rehearsal's quick form).
    """
    venv, prefix = work / "venv", work / "mpi"
    py = str(venv / "bin" / "python")
    wheels = carry / "wheels"
    sdist = next(iter(sorted(wheels.glob("mpi4py-*.tar.gz"))), wheels / "mpi4py-MISSING.tar.gz")
    # --ignore-installed: the image's own mpi4py (seen through the .pth) must not satisfy it
    pip_offline = f"--no-index --find-links {wheels} --no-build-isolation --ignore-installed"
    steps = [Step("venv", [python, str(THIS), "_venv", str(carry), str(venv)], timeout=300, est=30, once=True)]
    if mpi == "build":
        ompi_src = sorted((carry / "openmpi").glob("openmpi_*.orig.tar.*"))
        # Open MPI 4.1 needs only cuda.h to build: the CUDA 12 runtime wheel's (carried, 3 MB), which
        # the machine's newer driver runs; CUDA_HOME=... uses the machine's own toolkit instead.
        cuda_root = os.environ.get("CUDA_HOME") or str(work / "cuda12" / "nvidia" / "cuda_runtime")
        steps.append(Step("cuda-aware Open MPI + mpi4py",
                          ["bash", str(ROOT / "docker" / "build-cuda-mpi.sh"), str(prefix), cuda_root, "none"],
                          env={"OMPI_SRC": str(ompi_src[0]) if ompi_src else str(carry / "openmpi" / "MISSING"),
                               "PYTHON": py, "MPI4PY": str(sdist), "PIP_ARGS": pip_offline,
                               "OMPI_MCA_plm_rsh_agent": ssh_agent(), "PIP_CONFIG_FILE": os.devnull,
                               "PIP_FIND_LINKS": "", "PIP_EXTRA_INDEX_URL": "", "PIP_CONSTRAINT": ""},
                          timeout=600, est=240, once=True))
    elif mpi == "wheel":
        steps.append(Step("mpi4py + MPICH wheels",
                          [py, "-m", "pip", "install", "--no-cache-dir", "--only-binary=:all:", "--no-deps",
                           *pip_offline.split(), *WHEEL_MPI],
                          env={"PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": "", "PIP_EXTRA_INDEX_URL": "",
                               "PIP_CONSTRAINT": ""}, timeout=300, est=20, once=True))
    else:
        steps.append(Step("mpi4py from its sdist, offline",
                          [py, "-m", "pip", "install", "--no-cache-dir", "--no-binary", "mpi4py",
                           *pip_offline.split(), str(sdist)],
                          env={"MPICC": mpi, "CFLAGS": "-O0 -g0", "PIP_CONFIG_FILE": os.devnull,
                               "PIP_FIND_LINKS": "", "PIP_EXTRA_INDEX_URL": "", "PIP_CONSTRAINT": ""},
                          timeout=600, est=120, once=True))
    samples, gl = carry / "cuda-samples", carry / "gl"
    steps.append(Step("build cuda-samples nbody",
                      ["bash", "-c", cuda_samples_build(samples, gl, work / "cuda-samples-nbody", arch)],
                      timeout=420, est=60, once=True))
    steps.append(Step("cuda-samples nbody: linked against the carry", [python, str(THIS), "_audit", str(carry),
                                                                     str(work / "cuda-samples-nbody"), arch],
                      timeout=300, est=10))
    return steps


def plan(carry: Path, prefix: Path, venv: Path, out_dir: Path, mpi: str = "build") -> list[Step]:
    """Every step of the run on the GPU machine, in order, each in its part (pure: nothing is run here).

    ``prefix`` and ``venv`` must be ``out_dir / "mpi"`` and ``out_dir / "venv"`` (the work folder's).
    ``mpi="wheel"``: MPICH's wheel in the venv instead of the built Open MPI; the steps that need a
    CUDA-aware MPI (``--transport device``) are left out.
    """
    work = out_dir
    steps = setup_steps(carry, work, mpi=mpi)
    py = str(venv / "bin" / "python")
    bindir = venv / "bin"
    if mpi == "wheel":
        prefix = venv
        mpiexec = [str(prefix / "bin" / "mpiexec")]  # MPICH's Hydra: no flags needed as root
    else:
        mpiexec = [str(prefix / "bin" / "mpiexec"), "--allow-run-as-root", "--oversubscribe"]
    env = mpi_env(prefix, venv)
    nbody = str(bindir / "pympi-nbody")
    pi = str(bindir / "pympi-pi")

    def add(part, *new):
        for s in new:
            s.part = part
            steps.append(s)

    add("tests", Step("gpu-marked tests", [py, "-m", "pytest", "-m", "gpu", "-q", "-rs", "-p", "no:cacheprovider",
                                           *map(str, gpu_test_files())],
                      env=env, check="pytest", timeout=420, est=60))
    for ranks in (1, 2):
        for backend in ("numba", "gpu"):
            add("tests", Step(f"pi {backend} {ranks} rank(s)",
                              mpiexec + ["-n", str(ranks), pi, PI_SAMPLES, "--backend", backend, "--seed",
                                         str(SEED), "--json"], env=env, check="pi", group=f"pi-{ranks}",
                              timeout=300, est=20))
    for ranks in (1, 2):
        part = "tests" if ranks == 1 else "nbody"
        for precision in ("fp32", "fp64"):
            for exchange in ("ring", "allgather"):
                for transport in ("host", "device"):
                    add(part, Step(
                        f"nbody verify {ranks}r {precision} {exchange} {transport}",
                        mpiexec + ["-n", str(ranks), nbody, str(NBODY_VERIFY_BODIES), "--steps", "3", "--backend",
                                   "gpu", "--precision", precision, "--exchange", exchange, "--transport",
                                   transport, "--verify", "--json"], env=env, check="nbody", timeout=240,
                        est=15 * ranks))
    for backend in ("gpu", "numba"):
        add("nbody", Step(f"final state {backend} fp64",
                            mpiexec + ["-n", "2", nbody, "4096", "--steps", "5", "--precision", "fp64", "--backend",
                                       backend, "--checkpoint", str(out_dir / f"acceptance-{backend}.npz")],
                            env=env, group="final-state", timeout=240, est=20))
    for transport in ("host", "device"):
        add("nbody", Step(f"transport {transport} 2 ranks 2^20",
                            mpiexec + ["-n", "2", nbody, str(SAMPLES_BODIES), "--steps", "5", "--backend", "gpu",
                                       "--transport", transport, "--benchmark", "--json"],
                            env=env, check="nbody", group="transport", timeout=300, est=40))
    for ranks, backend, transport in ((1, "numba", "host"), (1, "gpu", "host"),
                                      (2, "numba", "host"), (2, "gpu", "host"), (2, "gpu", "device")):
        add("lj", Step(f"lj {backend} {transport} {ranks} rank(s) {LJ_CHECK_ATOMS}",
                       mpiexec + ["-n", str(ranks), nbody, str(LJ_CHECK_ATOMS), "--model", "lj", "--steps",
                                  str(LJ_CHECK_STEPS), "--backend", backend, "--transport", transport, "--json"],
                       env=env, check="lj", group=f"lj-thermo-{ranks}", timeout=240, est=30))
    # a restart continues bit for bit with full lists (docs/gpu.md): 8 steps straight (no checkpoint: one
    # changes nothing since issue 60), against 4 + 4
    restart = [nbody, str(LJ_CHECK_ATOMS), "--model", "lj", "--backend", "gpu", "--thermo", "4", "--json"]
    for name, extra in (("straight", ["--steps", "8"]),
                        ("first half", ["--steps", "4", "--checkpoint", str(out_dir / "lj-restart.npz")]),
                        ("resumed", ["--steps", "8", "--restart", str(out_dir / "lj-restart.npz")])):
        add("lj", Step(f"lj restart {name}", mpiexec + ["-n", "2", *restart, *extra], env=env, check="lj",
                       group="lj-restart", timeout=240, est=25))
    for ranks, transport, policy in ((1, "host", ()), (1, "host", ("--neigh-every", "20", "--neigh-check", "no")),
                                     (2, "host", ()), (2, "device", ())):
        add("lj", Step(f"lj gpu {transport} {ranks} rank(s) {LJ_BENCH_ATOMS}"
                       + (" every 20 check no" if policy else ""),
                       mpiexec + ["-n", str(ranks), nbody, str(LJ_BENCH_ATOMS), "--model", "lj", "--steps", "200",
                                  "--backend", "gpu", "--transport", transport, *policy, "--json"],
                       env=env, check="lj", group="lj-rate", timeout=300, est=60))
    nbody_bin = work / "cuda-samples-nbody"
    gl_lib = carry / "gl" / "root" / "usr/lib/x86_64-linux-gnu"
    for precision in ("fp32", "fp64"):
        flag = ["-fp64"] if precision == "fp64" else []
        add("bench", Step(f"cuda-samples nbody {precision}",
                          ["env", f"LD_LIBRARY_PATH={gl_lib}", str(nbody_bin), "-benchmark",
                           f"-numbodies={SAMPLES_BODIES}", *flag],
                          check="cuda-samples", group=f"vs-{precision}", timeout=240, est=20))
        add("bench", Step(f"pympi-nbody {precision} 1 rank 2^20",
                          [nbody, str(SAMPLES_BODIES), "--steps", "10", "--backend", "gpu", "--precision",
                           precision, "--benchmark", "--json"], env=env, check="nbody", group=f"vs-{precision}",
                          timeout=300, est=40))
    fast_bin = work / "cuda-samples-nbody-fast-math"  # the race's second build, made by the race only
    add("race", Step("build cuda-samples nbody with -use_fast_math",
                     ["bash", "-c", cuda_samples_build(carry / "cuda-samples", carry / "gl", fast_bin, fast_math=True)],
                     timeout=420, est=60, once=True))
    for precision in ("fp32", "fp64"):
        flag = ["-fp64"] if precision == "fp64" else []
        for n in RACE_SIZES:
            iters, k = max(1, RACE_WORK // (n * n)), n.bit_length() - 1
            for build, binary in (("", nbody_bin), (" fast-math", fast_bin)):
                add("race", Step(f"race cuda-samples nbody{build} {precision} 2^{k}",
                                 [py, str(THIS), "_repeat", "cuda-samples", "--", "env", f"LD_LIBRARY_PATH={gl_lib}",
                                  str(binary), "-benchmark", f"-numbodies={n}", f"-i={iters}", *flag],
                                 check="race", group=f"race-{precision}-2^{k}", timeout=300,
                                 est=15 if precision == "fp32" else 25))
            add("race", Step(f"race pympi-nbody {precision} 2^{k}",
                             [py, str(THIS), "_repeat", "nbody", "--", nbody, str(n), "--steps", str(iters),
                              "--backend", "gpu", "--precision", precision, "--benchmark", "--json"],
                             env=env, check="race", group=f"race-{precision}-2^{k}", timeout=400,
                             est=35 if precision == "fp32" else 45))
    add("bench", Step("benchmarks/pi.py (GPU mode)", [py, str(ROOT / "benchmarks" / "pi.py"), "--quick", "--out",
                                                      str(out_dir / "pi-gpu.json")], env=env, timeout=300, est=120),
        Step("benchmarks/nbody.py --mode gpu", [py, str(ROOT / "benchmarks" / "nbody.py"), "--mode", "gpu", "--quick",
                                                "--cuda-samples", str(nbody_bin), "--out",
                                                str(out_dir / "nbody-gpu.json")],
             env={**env, "LD_LIBRARY_PATH": str(gl_lib)}, timeout=300, est=120))
    # Nsight Compute: each kernel's occupancy, throughputs and issue slots (--clock-control none: the clocks
    # as a run has them). pi's kernel after its warm-up launch; the LJ step's kernels after the ~20 launches
    # of the start and its warm-up (half lists at this size: forces_newton, kick, the reverse halo's add_rows)
    ncu = ["ncu", "--clock-control", "none", "--target-processes", "all", "--csv", "--page", "details",
           *[a for sec in NCU_SECTIONS for a in ("--section", sec)]]
    lj_run = [nbody, str(LJ_BENCH_ATOMS), "--model", "lj", "--steps", "12", "--backend", "gpu", "--json"]
    for name, kernels, skip, count, argv in (
            ("pi", "_mc_kernel", 1, 1, [pi, "1e11", "--backend", "gpu", "--method", "mc", "--json"]),
            ("lj step", "forces|integrate|kick|gather_rows|add_rows", 30, 14, lj_run),
            ("lj list build", "build_lists", 1, 1, lj_run)):
        log = out_dir / f"ncu-{name.replace(' ', '-')}.csv"
        select = ["-k", f"regex:{kernels}", "--launch-skip", str(skip), "--launch-count", str(count)]
        add("profile", Step(f"ncu {name}", mpiexec + ["-n", "1"] + ncu + select + ["--log-file", str(log), *argv],
                            env=env, check="ncu", timeout=300, est=40))
    add("bench-lj", Step(f"lj full vs half lists {LJ_BENCH_ATOMS}",
                         mpiexec + ["-n", "1", py, str(ROOT / "benchmarks" / "lj.py"), "--mode", "gpu-profile",
                                    "--gpu-atoms", str(LJ_BENCH_ATOMS), "--steps", "100",
                                    "--out", str(out_dir / "lj-lists.json")],
                         env=env, check="lj-lists", timeout=300, est=90))
    add("bench-lj", Step("benchmarks/lj.py --mode gpu", [py, str(ROOT / "benchmarks" / "lj.py"), "--mode", "gpu",
                                                         "--out", str(out_dir / "lj-gpu.json")],
                         env=env, timeout=540, est=420, check="lj-bench"))
    for part, sizes in (("peers", PEER_SIZES[:-1]), ("peers-1m", PEER_SIZES[-1:])):
        add(part, *peer_steps(carry, venv, env, sizes))
    if mpi == "wheel":
        steps = [s for s in steps if "device" not in s.argv]
    return steps


def peer_steps(carry: Path, venv: Path, env: dict[str, str], sizes=PEER_SIZES) -> list[Step]:
    """Issue 59, item 1: at each size pympi-nbody (GPU, one rank, ``--thermo 100``), OpenMM's CUDA platform
    and gamdpy on the same fluid from the same state (benchmarks/peers_gpu.py), each's atom-steps/s over
    a timed loop of :data:`PEER_STEPS` steps; first the peers' wheels from the carry (once per machine)."""
    py, nbody = str(venv / "bin" / "python"), str(venv / "bin" / "pympi-nbody")
    peers = str(ROOT / "benchmarks" / "peers_gpu.py")
    steps = [Step("openmm, openmm-cuda-13 and gamdpy from the carry",
                  [py, "-m", "pip", "install", "--no-cache-dir", "--no-index", "--find-links", str(carry / "wheels"),
                   "--no-deps", *PEER_WHEELS],
                  env={"PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": "", "PIP_EXTRA_INDEX_URL": "",
                       "PIP_CONSTRAINT": ""}, timeout=300, est=20, once=True)]
    for n in sizes:
        big = n > 500_000
        steps += [
            Step(f"peers pympi-nbody {n}", [nbody, str(n), "--model", "lj", "--backend", "gpu", "--thermo", "100",
                                            "--steps", str(PEER_STEPS), "--json"],
                 env=env, check="lj", group=f"peers-{n}", timeout=300, est=90 if big else 60),
            Step(f"peers openmm CUDA {n}", [py, peers, "run", "openmm", str(n), "--platform", "CUDA", "--steps",
                                            str(PEER_STEPS), "--thermo", "100", "--warmup", "0"],
                 env=env, check="peer", group=f"peers-{n}", timeout=300, est=90 if big else 45),
            Step(f"peers gamdpy {n}", [py, peers, "run", "gamdpy", str(n), "--steps", str(PEER_STEPS), "--thermo",
                                       "100", "--warmup", "0"],
                 env={**env, "NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS": "0"}, check="peer", group=f"peers-{n}",
                 timeout=300, est=120 if big else 60)]
    return steps


def part_steps(steps: list[Step], part: str) -> list[Step]:
    """The steps of one device call: the setup (skipped where done), then the part's own
    (``sprint``: those of :data:`SPRINT`, in its order)."""
    if part == "setup":  # all of it, cuda-samples' nbody too (a bundle saved from it serves every part)
        return [s for s in steps if s.part == "setup"]
    setup = [s for s in steps if s.part == "setup" and ("cuda-samples" not in s.name or part in SAMPLES_PARTS)]
    if part == "sprint":
        named = {s.name: s for s in steps}
        return setup + [named[n] for n in SPRINT if n in named]
    return setup + [s for s in steps if s.part == part]


def only_steps(steps: list[Step], only: str | None) -> tuple[list[Step], frozenset[str]]:
    """The setup and the steps whose name matches ``only`` (all where None), and the groups it cut short."""
    if not only:
        return steps, frozenset()
    mine = [s for s in steps if s.part == "setup" or re.search(only, s.name)]
    return mine, frozenset(s.group for s in steps if s.group and s not in mine)


def cuda_samples_build(samples: Path, gl: Path, dest: Path, arch: str = "native", fast_math: bool = False) -> str:
    """The shell line that builds cuda-samples' nbody with nvcc, GL and X11 from the carried packages.

    ``arch``: ``native`` on the GPU machine (nvcc asks the GPU); ``sm_90`` and so on where there is none.
    ``fast_math``: with :data:`SAMPLES_FAST_MATH_FLAGS` besides NVIDIA's flags (the race's second build).
    """
    flags = [*SAMPLES_NVCC_FLAGS, *(SAMPLES_FAST_MATH_FLAGS if fast_math else ())]
    src = samples_source(samples)
    root = gl / "root"
    lib = root / "usr/lib/x86_64-linux-gnu"
    return (f"set -e; mkdir -p {root}; for d in {gl}/*.deb; do dpkg -x \"$d\" {root}; done; "
            f"for so in {lib}/libGL.so {lib}/libGLU.so {lib}/libglut.so {lib}/libGLEW.so; do "
            f"[ -e \"$so\" ] || ln -sf \"$(ls \"$so\".* | head -n 1)\" \"$so\"; done; "
            f"{shlex.quote(find_nvcc() or 'nvcc')} {' '.join(flags)} -arch={arch} "
            f"-I{samples / 'Common'} -I{root / 'usr/include'} "
            f"-o {dest} {src}/*.cpp {src}/*.cu -L{lib} -Xlinker -rpath-link={lib} -lGL -lGLU -lglut -lGLEW "
            f"&& echo \"linked {dest}\"")


def samples_source(samples: Path) -> Path:
    """The folder of cuda-samples' nbody sources."""
    return samples / "Samples" / "5_Domain_Specific" / "nbody"


def find_nvcc() -> str | None:
    """nvcc: on PATH, else under CUDA_HOME, CUDA_PATH or /usr/local/cuda."""
    found = shutil.which("nvcc")
    if found:
        return found
    for r in filter(None, (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda")):
        if (Path(r) / "bin" / "nvcc").is_file():
            return str(Path(r) / "bin" / "nvcc")
    return None


# ------------------------------------------------------------------ judging outputs

def parse_cuda_samples(text: str) -> dict:
    """Figures of ``nbody -benchmark``: interactions/s and GFLOP/s (as cuda-samples counts them)."""
    inter = re.search(r"=\s*([0-9.]+)\s*billion interactions per second", text)
    flops = re.search(r"=\s*([0-9.]+)\s*(single|double)-precision GFLOP/s", text)
    if inter is None:
        raise ValueError("no 'billion interactions per second' line in the cuda-samples output")
    out = {"interactions_per_s": float(inter.group(1)) * 1e9}
    if flops:
        out["gflops"] = float(flops.group(1))
        out["precision"] = "fp64" if flops.group(2) == "double" else "fp32"
    return out


def parse_ncu(text: str) -> dict:
    """Nsight Compute's ``--csv --page details`` output as ``{"<launch id> <kernel>": {figure: "value unit"}}``,
    the figures of :data:`NCU_FIGURES` (its other lines, the program's own output among them, skipped)."""
    import csv

    rows = csv.reader(ln for ln in text.splitlines() if ln.startswith('"'))
    header = next(rows, None)
    if header is None or "Metric Name" not in header:
        return {}
    col = {name: k for k, name in enumerate(header)}
    out: dict = {}
    for row in rows:
        if len(row) <= col["Metric Value"] or row[col["Metric Name"]] not in NCU_FIGURES:  # (rules' columns empty)
            continue
        name = re.sub(r"[\[(].*", "", row[col["Kernel Name"]]).split("::")[-1]
        unit = row[col["Metric Unit"]]
        out.setdefault(f"{row[col['ID']]} {name}", {})[row[col["Metric Name"]]] = \
            (row[col["Metric Value"]] + (" " + unit if unit else "")).strip()
    return out


def check_pi(doc: dict) -> dict:
    (result,) = [r for r in doc["results"] if r.get("method", "mc") == "mc"]
    return {"hits": result["hits"], "n": result["n"], "ranks": doc["ranks"], "backend": doc.get("backend"),
            "samples_per_s": result.get("throughput")}


def check_nbody(doc: dict) -> tuple[bool, dict]:
    fig = {"transport": doc.get("transport"), "precision": doc.get("precision"), "ranks": doc.get("ranks"),
           "interactions_per_s": doc.get("throughput"), "median_step_s": doc.get("median_step_time")}
    v = doc.get("verification")
    ok = doc.get("backend") == "gpu" and (v is None or bool(v.get("passed")))
    if v is not None:
        fig["verify"] = {k: v.get(k) for k in ("passed", "max_error", "error_bound", "energy_drift")}
    return ok, fig


def check_lj(doc: dict) -> dict:
    """The figures of a ``pympi-nbody --model lj --json`` run: rate, communication, last thermo line."""
    return {"backend": doc["backend"], "transport": doc["transport"], "ranks": doc["ranks"], "atoms": doc["atoms"],
            "atom_steps_per_s": doc["rate"], "comm_per_step_s": doc["comm_per_step"],
            "median_step_s": doc["median_step_time"], "thermo": doc["thermo"][-1], "thermo_first": doc["thermo"][0],
            "host_copies_per_step": doc.get("host_copies_per_step"), "rebuilds": doc.get("rebuilds"),
            "launches_per_step": doc.get("launches_per_step"),
            "host_syncs_per_step": doc.get("host_syncs_per_step"),
            "neigh_modify": f"every {doc.get('neigh_every', 1)} check "
                            + ("yes" if doc.get("neigh_check", True) else "no")}


def judge(step: Step, rc: int, stdout: str, stderr: str) -> None:
    """Set ``status``, ``detail`` and ``figures`` of a step that ran."""
    tail = (stdout + stderr).strip()[-400:]
    try:
        if rc != 0:
            step.status, step.detail = "failed", f"exit {rc}: {tail}"
            return
        if step.check == "pi":
            step.figures = check_pi(json.loads(stdout))
        elif step.check == "nbody":
            ok, step.figures = check_nbody(json.loads(stdout))
            if not ok:
                step.status, step.detail = "failed", "not on the GPU, or --verify failed"
                return
        elif step.check == "lj":
            step.figures = check_lj(json.loads(stdout))
        elif step.check == "lj-bench":  # the benchmark's JSON: rate at 1e6 atoms, phase shares
            doc = json.loads(Path(step.argv[step.argv.index("--out") + 1]).read_text())
            if "gpu" not in doc:
                step.status, step.detail = "failed", "no GPU figures: " + "; ".join(doc.get("skipped", []))
                return
            step.figures = doc["gpu"]
        elif step.check == "lj-lists":  # lj.py --mode gpu-profile: full and half lists at 1e6 atoms
            doc = json.loads(Path(step.argv[step.argv.index("--out") + 1]).read_text())
            step.figures = {"atoms": doc["atoms"], "faster": doc["faster"],
                            **{f"{k}_atom_steps_per_s": v["rate"] for k, v in doc["lists"].items()},
                            **{f"{k}_step_s": v["step_s"] for k, v in doc["lists"].items()},
                            **{f"{k}_phase_shares": v["ranks"][0]["phase_shares"] for k, v in doc["lists"].items()},
                            **{f"{k}_host_copies": v["ranks"][0]["host_copies"] for k, v in doc["lists"].items()},
                            **{f"{k}_steps_one_by_one": v.get("steps_one_by_one") for k, v in doc["lists"].items()},
                            **{f"{k}_rebuild_us": v["ranks"][0].get("rebuild_us") for k, v in doc["lists"].items()}}
        elif step.check == "peer":  # peers_gpu.py run: one JSON line (PeerRun)
            doc = json.loads(stdout.strip().splitlines()[-1])
            step.figures = {k: doc[k] for k in ("code", "version", "platform", "precision", "atoms", "steps",
                                                "wall", "setup_s", "notes")}
            step.figures.update(atom_steps_per_s=doc["rate"], thermo_first=doc["thermo"][0],
                                thermo=doc["thermo"][-1])
        elif step.check == "cuda-samples":
            step.figures = parse_cuda_samples(stdout)
        elif step.check == "race":  # _repeat's summary: the median of the runs after the warm-up
            doc = json.loads(stdout.strip().splitlines()[-1])
            step.figures = {"kind": doc["kind"], "interactions_per_s": doc["median"], "runs": doc["runs"]}
        elif step.check == "ncu":
            step.figures = parse_ncu(Path(step.argv[step.argv.index("--log-file") + 1]).read_text())
            if not step.figures:
                step.status, step.detail = "failed", "Nsight Compute profiled no kernel: " + tail
                return
        elif step.check == "collect":  # pytest --collect-only -q: "1/13 tests collected (12 deselected)"
            m = re.search(r"(\d+)(?:/(\d+))? tests? collected", stdout)
            errors = re.search(r"\d+ errors?\b|ERROR ", stdout + stderr)
            if m is None or errors or int(m.group(1)) == 0:
                step.status, step.detail = "failed", "the collection was not clean: " + tail
                return
            step.figures = {"selected": int(m.group(1)), "collected": int(m.group(2) or m.group(1))}
        elif step.check == "pytest":
            m = re.search(r"(\d+) passed", stdout)
            skipped = re.search(r"(\d+) skipped", stdout)
            step.figures = {"passed": int(m.group(1)) if m else 0,
                            "skipped": int(skipped.group(1)) if skipped else 0}
            if step.figures["skipped"]:
                step.status, step.detail = "failed", "gpu-marked tests skipped: " + tail
                return
        step.status = "passed"
    except (ValueError, KeyError, json.JSONDecodeError) as exc:
        step.status, step.detail = "failed", f"{type(exc).__name__}: {exc}; output: {tail}"


def compare(steps: list[Step], out_dir: Path, incomplete: frozenset[str] = frozenset()) -> list[dict]:
    """The cross-step checks: same pi hits, GPU vs numba final state, ratios to cuda-samples.

    ``incomplete``: the groups some of whose steps an ``--only`` left out of this call (:func:`only_steps`):
    skipped, with the reason, since what they compare with did not run."""
    by_group: dict[str, list[Step]] = {}
    for s in steps:
        if s.group:
            by_group.setdefault(s.group, []).append(s)
    out = []
    for group, members in by_group.items():
        ran = [s for s in members if s.status == "passed"]
        if len(ran) < len(members):
            out.append({"check": group, "status": "skipped", "detail": "a step of the group did not pass"})
            continue
        if group in incomplete:
            out.append({"check": group, "status": "skipped",
                        "detail": "the steps it compares were not all run in this call: " + ", ".join(s.name for s in ran)})
            continue
        out += _check(group, ran, out_dir)
    return out


def _check(group: str, ran: list[Step], out_dir: Path) -> list[dict]:
    """The check of one group of steps that all passed (:func:`compare`)."""
    out: list[dict] = []
    if group.startswith("pi-"):
        hits = {s.figures["backend"] or s.name: s.figures["hits"] for s in ran}
        ok = len(set(hits.values())) == 1
        out.append({"check": f"pi hits GPU == CPU, {group[3:]} rank(s)", "status": "passed" if ok else "failed",
                    "detail": json.dumps(hits)})
    elif group == "final-state":
        out.append(final_state(out_dir))
    elif group.startswith("vs-"):
        ours = next(s for s in ran if s.check == "nbody").figures["interactions_per_s"]
        ref = next(s for s in ran if s.check == "cuda-samples").figures["interactions_per_s"]
        ratio = ours / ref
        target = 0.9 if group == "vs-fp32" else None
        out.append({"check": f"pympi-nbody / cuda-samples, {group[3:]}, 2^20 bodies",
                    "status": "passed" if target is None or ratio >= target else "failed",
                    "detail": f"{ratio:.3f} ({ours:.4e} vs {ref:.4e} interactions/s)"
                              + (f", target >= {target}" if target else ", reported"),
                    "ratio": ratio})
    elif group.startswith("race-"):
        ours = next(s for s in ran if s.figures["kind"] == "nbody").figures["interactions_per_s"]
        builds = {s.name.split(" nbody")[1].rsplit(" ", 2)[0].strip() or "NVIDIA's build":
                  s.figures["interactions_per_s"] for s in ran if s.figures["kind"] == "cuda-samples"}
        fastest = max(builds, key=builds.get)
        ratio = ours / builds[fastest]
        _, precision, size = group.split("-")
        out.append({"check": f"pympi-nbody / cuda-samples' faster build, {precision}, {size} bodies",
                    "status": "passed" if ratio >= 1.0 else "failed",
                    "detail": f"{ratio:.3f} against {fastest} ({ours:.4e} vs "
                              + ", ".join(f"{b} {v:.4e}" for b, v in builds.items())
                              + f" interactions/s, medians of {RACE_RUNS} after {RACE_WARMUP} warm-up), target >= 1.0",
                    "ratio": ratio, "against": fastest})
    elif group.startswith("lj-thermo"):
        ref = next(s for s in ran if s.figures["backend"] == "numba").figures["thermo"]
        worst = max(abs(s.figures["thermo"][k] - ref[k]) / max(abs(ref[k]), 1e-300)
                    for s in ran for k in ("temp", "e_pair", "ke", "etotal", "press"))
        transports = sorted({s.figures["transport"] for s in ran if s.figures["backend"] == "gpu"})
        out.append({"check": f"LJ GPU thermo vs numba, {group.rsplit('-', 1)[1]} rank(s), transport "
                             f"{' and '.join(transports)}, {LJ_CHECK_STEPS} steps",
                    "status": "passed" if worst <= LJ_THERMO_RTOL else "failed",
                    "detail": f"max relative difference {worst:.2e} (bound {LJ_THERMO_RTOL:g})"})
    elif group == "lj-restart":
        straight, _, resumed = (s.figures["thermo"] for s in ran)
        out.append({"check": "LJ GPU restart continues bit for bit (full lists, 2 ranks)",
                    "status": "passed" if straight == resumed else "failed",
                    "detail": f"last thermo straight {json.dumps(straight)}, resumed {json.dumps(resumed)}"})
    elif group == "lj-rate":
        rates = {f"{s.figures['ranks']}r {s.figures['transport']} {s.figures['neigh_modify']}":
                 (s.figures["atom_steps_per_s"], s.figures["comm_per_step_s"]) for s in ran}
        copies = {s.figures.get("host_copies_per_step") for s in ran}
        out.append({"check": f"LJ GPU atom-steps/s and comm s/step at {LJ_BENCH_ATOMS} atoms; no atom arrays "
                             f"to the host", "status": "passed" if copies == {0} else "failed",
                    "detail": json.dumps(rates) + f"; host_copies_per_step {sorted(copies, key=str)}"})
    elif group.startswith("peers-"):
        out.append(peer_check(group, ran))
    elif group == "transport":
        t = {s.figures["transport"]: s.figures["median_step_s"] for s in ran}
        out.append({"check": "device vs host transport, 2 ranks, 2^20 bodies, s/step", "status": "passed",
                    "detail": json.dumps(t)})
    return out


def peer_check(group: str, ran: list[Step]) -> dict:
    """The race at one size: each code's atom-steps/s, pympi's ratio to each peer, and that all started from
    one state (step-0 energies within :data:`PEER_START_RTOL`; the last rows' differences reported)."""
    ours = next(s for s in ran if s.check == "lj").figures
    rates = {"pympi": ours["atom_steps_per_s"]}
    start, last = {}, {}
    for s in ran:
        if s.check != "peer":
            continue
        f = s.figures
        rates[f["code"]] = f["atom_steps_per_s"]
        start[f["code"]] = max(abs(f["thermo_first"][k] - ours["thermo_first"][k]) / abs(ours["thermo_first"][k])
                               for k in ("e_pair", "ke"))
        if f["thermo"]["step"] == ours["thermo"]["step"]:
            last[f["code"]] = max(abs(f["thermo"][k] - ours["thermo"][k]) / abs(ours["thermo"][k])
                                  for k in ("e_pair", "ke", "etotal"))
    ok = bool(start) and max(start.values()) <= PEER_START_RTOL
    ratios = {f"pympi/{code}": rates["pympi"] / r for code, r in rates.items() if code != "pympi" and r > 0}
    return {"check": f"LJ race at {group.split('-', 1)[1]} atoms: pympi-nbody (GPU, 1 rank) beside OpenMM "
                     f"(CUDA) and gamdpy, atom-steps/s", "status": "passed" if ok else "failed",
            "detail": json.dumps({"atom_steps_per_s": rates, "ratios": ratios}) + "; step-0 energies vs pympi "
                      + ", ".join(f"{c} {d:.1e}" for c, d in start.items()) + f" (bound {PEER_START_RTOL:g}); "
                      + "last row vs pympi " + ", ".join(f"{c} {d:.1e}" for c, d in last.items()),
            "rates": rates, "ratios": ratios}


def final_state(out_dir: Path) -> dict:
    import numpy as np

    if str(ROOT) not in sys.path:  # the harness runs under the image's Python, which has not the package
        sys.path.insert(0, str(ROOT))
    from pympi_gpu.nbody.gravity import checkpoint as ckpt

    try:
        gpu = ckpt.read_file(out_dir / "acceptance-gpu.npz")[1]
        cpu = ckpt.read_file(out_dir / "acceptance-numba.npz")[1]
    except (OSError, ckpt.CheckpointError) as exc:
        return {"check": "GPU final state vs numba fp64", "status": "failed", "detail": str(exc)}
    worst = max(float(np.max(np.abs(gpu[f] - cpu[f]) / (np.abs(cpu[f]) + 1e-12))) for f in ckpt.FIELDS)
    return {"check": "GPU final state vs numba fp64", "status": "passed" if worst < 1e-9 else "failed",
            "detail": f"max relative difference {worst:.2e} (bound 1e-9)"}


def summary(steps: list[Step], checks: list[dict]) -> tuple[str, bool]:
    """The table people read, and whether everything passed."""
    lines = [f"{'status':<8} {'seconds':>8}  step"]
    for s in steps:
        lines.append(f"{s.status:<8} {s.seconds:>8.1f}  {s.name}" + (f"  -- {s.detail[:160]}" if s.detail else ""))
    lines.append("")
    for c in checks:
        lines.append(f"{c['status']:<8} {'':>8}  {c['check']}: {c.get('detail', '')}")
    ok = all(s.status == "passed" for s in steps) and all(c["status"] == "passed" for c in checks)
    lines.append(f"\nGPU acceptance: {'PASSED' if ok else 'NOT PASSED'}")
    return "\n".join(lines), ok


# ------------------------------------------------------------------ running

def device_name() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=60).stdout.strip()
        return out.splitlines()[0] if out else "no GPU"
    except (OSError, subprocess.SubprocessError):
        return "no GPU"


def versions() -> dict:
    """The CUDA driver and runtime, and the GPU libraries the run used (the venv's Python sees them)."""
    probe = ("import json, importlib.metadata as m\nout = {}\n"
             "for d in ('numpy', 'numba', 'numba-cuda', 'cupy-cuda13x', 'cupy-cuda12x', 'mpi4py', 'mpich'):\n"
             "    try: out[d] = m.version(d)\n    except m.PackageNotFoundError: pass\n"
             "try:\n    import cupy\n    rt = cupy.cuda.runtime\n"
             "    out['cuda_driver'] = rt.driverGetVersion(); out['cuda_runtime'] = rt.runtimeGetVersion()\n"
             "except Exception as exc: out['cuda'] = repr(exc)\n"
             "try:\n    from mpi4py import MPI\n    out['mpi'] = MPI.Get_library_version().splitlines()[0]\n"
             "except Exception as exc: out['mpi'] = repr(exc)\n"
             "print(json.dumps(out))")
    work = Path(os.environ.get("PYMPI_ACCEPTANCE_WORK", "/tmp/pympi-acceptance"))
    py = work / "venv" / "bin" / "python"
    try:
        done = subprocess.run([str(py) if py.exists() else sys.executable, "-c", probe], capture_output=True,
                              text=True, timeout=120)
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return {}


def _write_json(path: Path, doc: dict) -> None:
    """Write ``doc`` so that a reader (or a call cut short) sees the old file or the new, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, path)


def execute(steps: list[Step], work: Path, dest: Path, budget: float, meta: dict, log=print,
            incomplete: frozenset[str] = frozenset()) -> dict:
    """Run ``steps`` in order within ``budget`` seconds, judging each; ``dest`` rewritten after every step.

    A step marked ``once`` that passed leaves a mark in ``work/done``; a later call finds it and
    skips the step (the machine kept what it built).  A step whose estimate exceeds what is left
    of the budget is not started ("not run", with the reason).  Nothing stops the run: a failed
    step is recorded and the next one runs.
    """
    marks = work / "done"
    marks.mkdir(parents=True, exist_ok=True)
    t_all = time.monotonic()

    def document() -> dict:
        checks = compare(steps, work, incomplete)
        ok = all(s.status == "passed" for s in steps) and all(c["status"] == "passed" for c in checks)
        return {**meta, "seconds": round(time.monotonic() - t_all, 1), "passed": ok,
                "steps": [dataclasses.asdict(s) for s in steps], "checks": checks}

    for s in steps:
        if "versions" not in meta and s.part != "setup" and (work / "venv" / "bin" / "python").exists():
            meta["versions"] = versions()
        mark = marks / s.slug
        left = budget - (time.monotonic() - t_all)
        if s.once and mark.exists():
            s.status, s.detail = "passed", f"done earlier on this machine: {mark.read_text().strip()}"
        elif left < s.est:
            s.status = "not run"
            s.detail = (f"{left:.0f} s of this call's {budget:.0f} s were left and the step takes about "
                        f"{s.est:.0f} s: run it in a call of its own (--only)")
        else:
            t0 = time.monotonic()
            try:
                proc = subprocess.run(s.argv, capture_output=True, text=True, timeout=min(s.timeout, left),
                                      env=dict(os.environ, **s.env))
                judge(s, proc.returncode, proc.stdout, proc.stderr)
                # the tail of what it said, stdout last (a build's warnings go to stderr, its verdict to stdout)
                s.figures.setdefault("log_tail", proc.stderr[-1500:] + proc.stdout[-1500:])
            except subprocess.TimeoutExpired:
                s.status, s.detail = "failed", f"timed out after {min(s.timeout, left):.0f} s"
            except OSError as exc:
                s.status, s.detail = "failed", str(exc)
            s.seconds = round(time.monotonic() - t0, 1)
            if s.once and s.status == "passed":
                mark.write_text(f"{time.strftime('%Y-%m-%d %H:%M:%S')}, {s.seconds:.0f} s")
        log(f"{s.status:<8} {s.seconds:6.1f} s  {s.name}" + (f"  -- {s.detail[:300]}" if s.detail else ""))
        _write_json(dest, document())
    return document()


#: what a setup leaves that a later call on a fresh machine can take instead of building it again
BUNDLED = ("mpi", "cuda-samples-nbody", "bundle-mpi4py", "done/cuda-aware-open-mpi-mpi4py",
           "done/build-cuda-samples-nbody")


def save_bundle(work: Path, dest: Path) -> None:
    """The built Open MPI, mpi4py and nbody as one tarball (``--save-bundle``; 4.5 MiB).

    Open MPI and mpi4py hold the work folder's absolute path: the next call must use the same
    (``/tmp/pympi-acceptance``, or the same ``PYMPI_ACCEPTANCE_WORK``).
    """
    import tarfile

    site = subprocess.run([str(work / "venv" / "bin" / "python"), "-c",
                           "import sysconfig; print(sysconfig.get_paths()['platlib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    keep = work / "bundle-mpi4py"
    shutil.rmtree(keep, ignore_errors=True)
    keep.mkdir()
    for entry in Path(site).glob("mpi4py*"):
        shutil.copytree(entry, keep / entry.name, symlinks=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(dest, "w:gz") as tar:
        for rel in BUNDLED:
            if (work / rel).exists():
                tar.add(work / rel, arcname=rel)
    print(f"bundle: {dest} ({dest.stat().st_size / 2**20:.1f} MiB): carry it to the next call (--bundle)")


def restore_bundle(work: Path, bundle: Path) -> None:
    """Unpack a ``--save-bundle`` tarball into ``work`` (a fresh machine), so the setup skips its builds."""
    import tarfile

    if (work / "done" / "cuda-aware-open-mpi-mpi4py").exists():
        return  # this machine built it already
    work.mkdir(parents=True, exist_ok=True)
    with tarfile.open(bundle) as tar:
        tar.extractall(work)  # our own tarball, from the previous call
    print(f"bundle: {bundle} unpacked into {work}")


def run(carry: Path, out: Path, part: str, dry_run: bool, only: str | None, budget: float,
        bundle: Path | None = None, save: Path | None = None, mpi: str = "build") -> int:
    work = Path(os.environ.get("PYMPI_ACCEPTANCE_WORK", "/tmp/pympi-acceptance"))
    carry = carry.resolve()
    if bundle is not None and bundle.exists() and not dry_run:
        restore_bundle(work, bundle)
    steps = plan(carry, work / "mpi", work / "venv", work, mpi=mpi)
    parts = tuple(p for p in PARTS if p != "sprint") if part == "all" else (part,)
    device = device_name()
    if dry_run:
        for p in parts:
            mine = part_steps(steps, p)
            own = sum(s.est for s in mine if s.part != "setup")
            setup = sum(s.est for s in mine if s.part == "setup")
            print(f"## part {p}: about {setup:.0f} s, once per machine (or a bundle's)\n" if p == "setup" else
                  f"## part {p}: about {own:.0f} s after the setup\n")
            for s in mine if p == "setup" else [s for s in mine if s.part != "setup"]:
                print(f"# {s.name} (about {s.est:.0f} s)\n{s.shell()}\n")
        missing = [str(p) for p in (carry / "wheels", carry / "openmpi", carry / "cuda-samples", carry / "gl")
                   if not p.exists()]
        print(f"{len(steps)} steps in {len(PARTS)} parts; device: {device}; carry {carry}: "
              + (f"missing {', '.join(missing)}" if missing else "complete"))
        return 0
    ok = True
    slug = re.sub(r"[^A-Za-z0-9]+", "-", device.split(",")[0]).strip("-").lower() or "gpu"
    for p in parts:
        mine, incomplete = only_steps(part_steps(steps, p), only)
        meta = {"schema": "pympi_gpu.gpu_acceptance/2", "device": device, "host": platform.node(),
                "cpu": platform.processor(), "part": p, "budget_s": budget, "mpi": mpi}
        doc = execute(mine, work, out / f"gpu-acceptance-{slug}-{p}.json", budget, meta, incomplete=incomplete)
        text, _ = summary(mine, doc["checks"])
        print(text)
        print(f"wrote {out / f'gpu-acceptance-{slug}-{p}.json'}")
        ok = ok and doc["passed"]
    if save is not None and (work / "done" / "cuda-aware-open-mpi-mpi4py").exists():
        save_bundle(work, save)
    return 0 if ok else 1


def merge(out: Path) -> int:
    """The parts' result files in ``out`` combined into ``gpu-acceptance-<device>.json``."""
    docs = [json.loads(p.read_text()) for p in sorted(out.glob("gpu-acceptance-*-*.json"))]
    docs = [d for d in docs if d.get("schema") == "pympi_gpu.gpu_acceptance/2" and "part" in d]
    if not docs:
        print(f"no part files (gpu-acceptance-<device>-<part>.json) in {out}", file=sys.stderr)
        return 2
    docs.sort(key=lambda d: PARTS.index(d["part"]) if d["part"] in PARTS else len(PARTS))
    steps, checks, seen = [], [], set()
    for d in docs:
        for s in d["steps"]:
            if s["part"] == "setup" and (s["name"] in seen or d["part"] != "setup" and s["detail"].startswith("done")):
                continue
            seen.add(s["name"])
            steps.append(Step(**s))
        checks += d["checks"]
    missing = [p for p in PARTS if p not in {d["part"] for d in docs}]
    text, ok = summary(steps, checks)
    ok = ok and not missing
    print(text + (f"\nparts not run: {', '.join(missing)}" if missing else ""))
    device = docs[0]["device"]
    slug = re.sub(r"[^A-Za-z0-9]+", "-", device.split(",")[0]).strip("-").lower() or "gpu"
    _write_json(out / f"gpu-acceptance-{slug}.json",
                {"schema": "pympi_gpu.gpu_acceptance/2", "device": device, "parts": [d["part"] for d in docs],
                 "parts_missing": missing, "passed": ok, "steps": [dataclasses.asdict(s) for s in steps],
                 "checks": checks})
    return 0 if ok else 1


# ------------------------------------------------------------------ the carry folder

def _fetch(what: str, argv: list[str], **kw) -> None:
    t0 = time.monotonic()
    subprocess.run(argv, check=True, **kw)
    print(f"prepare: {what} in {time.monotonic() - t0:.0f} s", flush=True)


def _pip_download(dest: Path, *args: str) -> None:
    _fetch(f"pip download {' '.join(a for a in args if not a.startswith('-'))}",
           [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "-d", str(dest), *args])


def prepare(carry: Path, samples: Path | None = None, pythons: tuple[str, ...] | None = None) -> int:
    """Download what the offline GPU machine needs into CARRY (run where PyPI and Debian answer).

    Wheels for this Python and the GPU image's (:data:`DEVICE_PYTHON`); Debian 12's Open MPI
    source and GL/X11 packages; cuda-samples' nbody copied from ``samples``.  Writes
    ``CARRY/MANIFEST.json`` (every file, its size and sha256) and fails if the folder exceeds
    what a device call carries.
    """
    samples = samples or ROOT.parent / "shared" / "cuda-samples"
    carry = carry.resolve()  # apt-get reads its option paths from /etc/apt when relative
    wheels = carry / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    for pyv in dict.fromkeys(pythons or (here, DEVICE_PYTHON)):
        target = [] if pyv == here else ["--python-version", pyv, "--implementation", "cp", "--platform",
                                         "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64",
                                         "--platform", "manylinux_2_28_x86_64"]
        _pip_download(wheels, "--only-binary=:all:", *target, *CARRY_REQUIREMENTS)
        _pip_download(wheels, "--no-deps", "--only-binary=:all:", *target, *WHEEL_MPI)
    for pyv in dict.fromkeys((DEVICE_PYTHON, here)):  # the peers: the image's; this Python's for the rehearsal
        target = ["--python-version", pyv, "--implementation", "cp"] + [a for p in PEER_PLATFORMS
                                                                       for a in ("--platform", p)]
        dest = wheels if pyv == DEVICE_PYTHON else REHEARSAL_WHEELS
        dest.mkdir(parents=True, exist_ok=True)
        _pip_download(dest, "--no-deps", "--only-binary=:all:", *target, *PEER_WHEELS)
    _pip_download(wheels, "--no-deps", "--no-binary", ":all:", MPI4PY_SDIST)
    _pip_download(wheels, "--no-deps", "--only-binary=:all:", CUDA_HEADERS_WHEEL)
    apt = carry / ".apt"
    (apt / "lists" / "partial").mkdir(parents=True, exist_ok=True)
    (apt / "sources.list").write_text("deb-src http://deb.debian.org/debian bookworm main\n"
                                      "deb [arch=amd64] http://deb.debian.org/debian bookworm main\n")
    opts = ["-o", f"Dir::Etc::SourceList={apt / 'sources.list'}", "-o", f"Dir::Etc::SourceParts={apt / 'none'}",
            "-o", f"Dir::State::Lists={apt / 'lists'}", "-o", "APT::Architecture=amd64",
            "-o", "Debug::NoLocking=1"]
    try:
        _fetch("apt-get update (Debian 12's lists)", ["apt-get", *opts, "-qq", "update"])
        ompi = carry / "openmpi"
        if not list(ompi.glob("openmpi_*.orig.tar.*")):
            (ompi / "src").mkdir(parents=True, exist_ok=True)
            _fetch("the openmpi source package", ["apt-get", *opts, "-qq", "source", "--download-only", "openmpi"],
                   cwd=ompi / "src")
            for f in (ompi / "src").glob("openmpi_*.orig.tar.*"):  # the upstream tarball is all the build reads
                f.rename(ompi / f.name)
            shutil.rmtree(ompi / "src")
        gl = carry / "gl"
        gl.mkdir(exist_ok=True)
        _fetch(f"{len(GL_PACKAGES)} GL and X11 packages", ["apt-get", *opts, "-qq", "download", *GL_PACKAGES], cwd=gl)
    finally:
        shutil.rmtree(apt, ignore_errors=True)
    dest = carry / "cuda-samples"
    if (samples / "Common").is_dir():
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(samples / "Common", dest / "Common")
        shutil.copytree(samples_source(samples), samples_source(dest))
        for name in ("LICENSE", "ORIGIN.md"):
            if (samples / name).exists():
                shutil.copy2(samples / name, dest / name)
    else:
        print(f"prepare: no cuda-samples at {samples}: carry its nbody into {dest} by hand", file=sys.stderr)
    size = write_manifest(carry)
    print(f"prepared {carry}: {size / 2**20:.1f} MiB")
    if size > CARRY_LIMIT:
        print(f"prepare: {carry} is {size / 2**20:.1f} MiB, over the {CARRY_LIMIT >> 20} MiB a device call carries",
              file=sys.stderr)
        return 1
    return 0


def write_manifest(carry: Path) -> int:
    files = sorted(p for p in carry.rglob("*") if p.is_file() and p.name != "MANIFEST.json"
                   and "root" not in p.relative_to(carry).parts[:2])
    entries = [{"path": str(p.relative_to(carry)), "bytes": p.stat().st_size,
                "sha256": hashlib.sha256(p.read_bytes()).hexdigest()} for p in files]
    size = sum(e["bytes"] for e in entries)
    _write_json(carry / "MANIFEST.json", {"bytes": size, "files": entries})
    return size


def rehearsal_missing() -> list[str]:
    """What the rehearsal needs outside the carry and lacks: OpenMM's wheel for this Python, where it is not the
    image's (:data:`REHEARSAL_WHEELS`)."""
    here = f"{sys.version_info.major}{sys.version_info.minor}"
    if here == DEVICE_PYTHON.replace(".", "") or list(REHEARSAL_WHEELS.glob(f"openmm-*-cp{here}-*.whl")):
        return []
    return [f"OpenMM's wheel for Python {sys.version_info.major}.{sys.version_info.minor} in {REHEARSAL_WHEELS}"]


def carry_missing(carry: Path) -> list[str]:
    """What a complete carry folder has and this one lacks."""
    need = {"wheels/mpi4py sdist": "wheels/mpi4py-*.tar.gz", "wheels/CUDA runtime": "wheels/nvidia_cuda_runtime_cu12-*.whl",
            "openmpi source": "openmpi/openmpi_*.orig.tar.*", "GL packages": "gl/*.deb",
            "cuda-samples": "cuda-samples/Samples/5_Domain_Specific/nbody/bodysystemcuda.cu"}
    need.update({f"wheel {r}": f"wheels/{re.split('[<>=]', r)[0].replace('-', '_')}-*.whl"
                 for r in CARRY_REQUIREMENTS + PEER_WHEELS})
    return [what for what, pattern in need.items()
            if not [p for p in carry.glob(pattern)] and not [p for p in carry.glob(pattern.lower())]]


# ------------------------------------------------------------------ helpers run as steps

def outer_site_lines(dirs) -> str:
    """A ``.pth`` file's text that adds ``dirs`` behind a venv's own packages *and runs their .pth files*
    (``site.addsitedir``; a plain path line adds the folder only)."""
    return "".join(f"import site; site.addsitedir({str(d)!r})\n" for d in dirs)


def repeat(kind: str, argv: list[str], warmup: int = RACE_WARMUP, runs: int = RACE_RUNS, env=None) -> int:
    """Run ``argv`` ``warmup`` times unrecorded, then ``runs`` times; print the interactions/s of each and
    their median as one JSON line (``kind``: ``cuda-samples``, whose ``-benchmark`` line is read, or
    ``nbody``, a ``pympi-nbody --json`` document).  Non-zero if a run fails."""
    import statistics

    rates = []
    for i in range(warmup + runs):
        out = subprocess.run(argv, capture_output=True, text=True, env=env)
        if out.returncode != 0:
            print(f"run {i} exited {out.returncode}: {(out.stdout + out.stderr)[-600:]}", file=sys.stderr)
            return 1
        rate = (parse_cuda_samples(out.stdout)["interactions_per_s"] if kind == "cuda-samples"
                else float(json.loads(out.stdout)["throughput"]))
        if i >= warmup:
            rates.append(rate)
    print(json.dumps({"kind": kind, "runs": rates, "median": statistics.median(rates), "warmup": warmup}))
    return 0


def make_venv(carry: Path, venv: Path) -> int:
    """The acceptance's venv: this Python's packages visible, the carried wheels and the package installed.

    ``python -m venv --system-site-packages`` run by a Python that is itself a venv (the GPU
    image's is: /opt/torch/.venv) sees the base interpreter's packages, not that venv's, where
    numpy, numba, numba-cuda and CuPy are: a ``.pth`` line puts those behind the new venv's own,
    through ``site.addsitedir`` so that their own ``.pth`` files run too (numba-cuda's takes
    ``numba.cuda`` over from numba's built-in target: a plain path line would skip it, and the
    kernels would be typed by the built-in target, which fails on them).
    """
    outer_venv = sys.prefix != sys.base_prefix
    subprocess.run([sys.executable, "-m", "venv", str(venv)] + ([] if outer_venv else ["--system-site-packages"]),
                   check=True)
    vpy = str(venv / "bin" / "python")
    site = subprocess.run([vpy, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    if outer_venv:
        outer = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
        Path(site, "_pympi_outer_venv.pth").write_text(outer_site_lines(outer))
        print(f"venv: {sys.prefix} is a venv: its packages ({', '.join(outer)}) put behind {venv}'s own")
    pip = [vpy, "-m", "pip", "install", "--no-cache-dir", "--no-index", "--find-links", str(carry / "wheels")]
    installed: list[str] = []
    env = pip_env()
    for what in (list(CARRY_REQUIREMENTS), ["--no-build-isolation", "--no-deps", "-e", str(ROOT)]):
        out = subprocess.run(pip + what, capture_output=True, text=True, env=env)
        print(out.stdout + out.stderr, end="")
        if out.returncode:
            return out.returncode
        done = [ln for ln in out.stdout.splitlines() if ln.startswith("Successfully installed")]
        installed.append(done[-1].split(" ", 2)[-1] if done else "nothing (all present)")
    built = venv.parent / "bundle-mpi4py"  # mpi4py built by an earlier call on its Open MPI (a bundle)
    if built.is_dir():
        platlib = subprocess.run([vpy, "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        for entry in built.iterdir():
            shutil.copytree(entry, Path(platlib, entry.name), symlinks=True, dirs_exist_ok=True)
        print(f"venv: mpi4py from the bundle ({', '.join(e.name for e in built.iterdir())})")
    cuda = next(iter(sorted((carry / "wheels").glob("nvidia_cuda_runtime_cu12-*.whl"))), None)
    if cuda is not None:
        import zipfile

        zipfile.ZipFile(cuda).extractall(venv.parent / "cuda12")
    if outer_venv:  # the same numba.cuda in the new venv as in the outer one (numba-cuda's, where installed)
        probe = "import numba.cuda as c; print(getattr(c, 'implementation', '?'))"
        seen = [subprocess.run([exe, "-c", probe], capture_output=True, text=True).stdout.strip()
                for exe in (sys.executable, vpy)]
        print(f"venv: numba.cuda implementation: outer {seen[0]!r}, venv {seen[1]!r}")
        if seen[0] != seen[1]:
            return 1
    check = ("import importlib.metadata as m, click, numba, numpy, pytest, pytest_mpi, rich, Cython, setuptools; "
             "import pympi_gpu.cli; print('venv:', ', '.join(f'{d} {m.version(d)} ({m.distribution(d).locate_file(\"\")})' "
             "for d in ('numpy', 'numba', 'cython', 'setuptools', 'click', 'rich', 'pytest')))")
    subprocess.run([vpy, "-c", check], check=True)
    print(f"venv: installed offline from {carry / 'wheels'}: {installed[0]}; the package: {installed[1]}")
    return 0


def pip_env() -> dict[str, str]:
    """This environment for pip without this machine's pip settings (its find-links, indexes, constraints):
    what is installed offline must come from the carry folder alone."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


#: a system header of these folders means the GL/X11 the build used did not come from the carry
SYSTEM_GL_INCLUDES = ("/usr/include/GL/", "/usr/include/X11/", "/usr/include/KHR/", "/usr/include/EGL/",
                      "/usr/include/GLES")


def audit(carry: Path, binary: Path, arch: str) -> int:
    """cuda-samples' nbody linked and compiled against the carry: every library it loads comes from
    the carried GL root or is a C/C++ runtime (:data:`BASE_LIBS`); no GL or X11 header came from
    the system.  Prints what it found; non-zero if anything came from elsewhere."""
    root = carry / "gl" / "root"
    lib = root / "usr/lib/x86_64-linux-gnu"
    bad = []
    if not binary.is_file():
        print(f"audit: no binary {binary}")
        return 1
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True,
                         env=dict(os.environ, LD_LIBRARY_PATH=str(lib))).stdout
    carried, base = [], []
    for line in out.splitlines():
        m = re.match(r"\s*(\S+)(?:\s+=>\s+(\S+|not found))?", line)
        if not m:
            continue
        name, path = m.group(1), m.group(2) or m.group(1)
        if path == "not found":
            bad.append(f"{name}: not found")
        elif Path(path).resolve().is_relative_to(root.resolve()):
            carried.append(name)
        elif Path(name).name in BASE_LIBS or Path(path).name in BASE_LIBS:
            base.append(name)
        else:
            bad.append(f"{name} => {path} (neither carried nor a C/C++ runtime)")
    samples = carry / "cuda-samples"
    headers: set[str] = set()
    nvcc = find_nvcc() or "nvcc"
    for src in sorted(samples_source(samples).glob("*.c[pu]*")):
        target = [] if arch == "native" else [f"-arch={arch}"]  # the headers read do not depend on it
        dep = subprocess.run([nvcc, *SAMPLES_NVCC_FLAGS, *target, f"-I{samples / 'Common'}",
                              f"-I{root / 'usr/include'}", "-M", str(src)], capture_output=True, text=True)
        if dep.returncode != 0:
            bad.append(f"nvcc -M {src.name}: {dep.stderr.strip()[-300:]}")
        headers.update(w for w in dep.stdout.replace("\\\n", " ").split() if w.endswith((".h", ".hpp")))
    system_gl = sorted(h for h in headers if h.startswith(SYSTEM_GL_INCLUDES))
    bad += [f"header from the system, not the carry: {h}" for h in system_gl]
    from_carry = [h for h in headers if str(root) in h]
    print(f"audit: {binary.name} loads {len(carried)} libraries from the carry ({', '.join(sorted(carried))}) "
          f"and {len(base)} C/C++ runtimes; {len(from_carry)} GL/X11 headers from the carry, none from the system"
          if not bad else "audit: " + "; ".join(bad))
    return 1 if bad else 0


def mpi_as_root(mpiexec: str, venv: Path) -> int:
    """``mpiexec`` as root with no launcher flag, through the environments the tests (commands.clean_env)
    and the benchmarks (nbody.py, lj.py) give their child runs: the user's Open MPI settings
    (OMPI_ALLOW_RUN_AS_ROOT, OMPI_MCA_plm_rsh_agent) must reach it."""
    import importlib.util

    sys.path[:0] = [str(ROOT / "tests")]
    from helpers import commands  # noqa: E402  (the tests' own helpers)

    def load(name):
        spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod

    envs = {"tests (commands.clean_env)": commands.clean_env(),
            "benchmarks/nbody.py (child_env)": load("nbody").child_env(),
            "benchmarks/lj.py (_env)": load("lj")._env()}
    version = subprocess.run([mpiexec, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    failed = 0
    for what, env in envs.items():
        argv = [mpiexec, "-n", "2", str(venv / "bin" / "pympi-pi"), "1e5", "--backend", "numpy", "--json"]
        out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
        doc = json.loads(out.stdout) if out.returncode == 0 and out.stdout.strip() else {}
        ok = doc.get("ranks") == 2
        failed += not ok
        library = doc.get("provenance", {}).get("mpi_library") or (version[0] if version else mpiexec)
        print(f"{'ok' if ok else 'FAILED':<6} uid {os.geteuid()}, {what}: {mpiexec} -n 2 pympi-pi, no launcher flag: "
              + (f"2 ranks of {library}" if ok else f"exit {out.returncode}: {out.stderr.strip()[-600:]}"))
    return 1 if failed else 0


# ------------------------------------------------------------------ the rehearsal, here

#: the exit status of ``rehearse`` when this machine cannot rehearse (the reason is printed)
SKIPPED = 3
#: what the GPU image's Python holds that the acceptance uses without carrying it (numba-cuda and
#: CuPy too, which only running kernels needs): the rehearsal's stand-in holds these alone
IMAGE_PACKAGES = ("numpy", "numpy.libs", "numba", "llvmlite")


def rehearsal_blockers(full: bool = False) -> list[str]:
    """Why this machine cannot rehearse (empty if it can)."""
    why = []
    if find_nvcc() is None:
        why.append("no nvcc (a CUDA toolkit) on PATH, under CUDA_HOME or in /usr/local/cuda")
    for tool, what in (("unshare", "util-linux's unshare, to cut the network"), ("dpkg", "dpkg, to unpack the "
                       "carried GL packages"), ("ip", "iproute2's ip, for the loopback of the cut network"),
                       ("ldd", "ldd, to see what the nbody binary loads")):
        if shutil.which(tool) is None:
            why.append(f"no {what}")
    if os.geteuid() != 0:
        why.append("not root (unshare -n and hiding ssh need it; the GPU machine runs as root)")
    if not full and not (Path(sys.executable).parent / "mpicc").exists():
        why.append(f"no mpicc beside {sys.executable} (pip install -e .[mpich]) to build mpi4py on")
    return why


def image_python(dest: Path) -> str:
    """A stand-in for the GPU image's Python: a venv holding :data:`IMAGE_PACKAGES` only, linked from this one."""
    if not (dest / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(dest)], check=True)
    py = str(dest / "bin" / "python")
    site = Path(subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    here = Path(sysconfig.get_paths()["purelib"])
    dist = re.compile(r"^(numpy|numba|llvmlite)-\d[^/]*\.dist-info$")
    for entry in here.iterdir():
        if (entry.name in IMAGE_PACKAGES or dist.match(entry.name)) and not (site / entry.name).exists():
            (site / entry.name).symlink_to(entry)
    return py


def rehearsal_steps(carry: Path, work: Path, full: bool, arch: str) -> list[Step]:
    """The plan's setup, then the rehearsal's own checks (run inside the cut network)."""
    venv, prefix = work / "venv", work / "mpi"
    py = image_python(work / "image")
    bindir = Path(sys.executable).parent
    if full:
        mpi, mpiexec = "build", str(prefix / "bin" / "mpiexec")
    else:
        mpi, mpiexec = str(bindir / "mpicc"), str(bindir / "mpiexec")
    env = mpi_env(prefix, venv)
    if not full:  # mpi4py built on this environment's MPICH loads its libmpi from there
        env["LD_LIBRARY_PATH"] = str(bindir.parent / "lib")
    steps = setup_steps(carry, work, python=py, arch=arch, mpi=mpi)
    for s in steps:
        s.env = {**env, **s.env}
        s.timeout *= 4  # 2 busy cores here, not the GPU machine's 16 (Open MPI's build: some 15 minutes)
    vpy = str(venv / "bin" / "python")
    steps += [
        Step(f"mpiexec as root without ssh, through the tests' and benchmarks' environments ({Path(mpiexec).name} "
             f"of {'the built Open MPI' if full else 'MPICH'})", [vpy, str(THIS), "_mpi_root", mpiexec, str(venv)],
             env=env, part="rehearsal", est=60, timeout=300),
        Step("collection of the gpu-marked tests", [vpy, "-m", "pytest", "--collect-only", "-q", "-m", "gpu", "-p",
                                                    "no:cacheprovider", *map(str, gpu_test_files())],
             env=env, check="collect", part="rehearsal", est=30, timeout=300),
    ]
    # the race's offline part (issue 59): the peers' wheels install from the carry; OpenMM's Reference
    # platform (double precision) from pympi's state agrees with pympi at steps 0 and 100
    (wheels,) = peer_steps(carry, venv, env, sizes=())
    wheels.part = "rehearsal"
    wheels.argv[wheels.argv.index("--no-deps"):wheels.argv.index("--no-deps")] = ["--find-links", str(REHEARSAL_WHEELS)]
    image = [a for p in PEER_PLATFORMS for a in ("--platform", p)]
    steps += [Step("the peers' wheels resolve for the GPU image's Python from the carry",
                   [vpy, "-m", "pip", "install", "--dry-run", "--no-index", "--find-links", str(carry / "wheels"),
                    "--no-deps", "--only-binary=:all:", "--python-version", DEVICE_PYTHON, "--implementation", "cp",
                    *image, "--target", str(work / "peers-target"), *PEER_WHEELS],
                   env={**env, **wheels.env}, part="rehearsal", est=10, timeout=300),
              wheels, Step(f"OpenMM Reference against pympi, {PEER_CHECK_ATOMS} atoms, steps 0 and 100",
                           [vpy, str(ROOT / "benchmarks" / "peers_gpu.py"), "energies", "--max-reference",
                            str(PEER_REFERENCE_RTOL), "--out", str(work / "peers-energies.json")],
                           env=env, part="rehearsal", est=120, timeout=900)]
    return steps


def inside(carry: Path, work: Path, out: Path, full: bool, arch: str) -> int:
    """The rehearsal proper, in a network and mount namespace of its own (``unshare -n -m``)."""
    import socket

    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)  # MPI's own connections, on this machine
    hidden = []
    for name in ("ssh", "rsh"):  # the GPU machine has no ssh: Open MPI 4.1 must do without one
        path = shutil.which(name)
        if path:
            subprocess.run(["mount", "--bind", "/dev/null", path], check=True)
            hidden.append(path)
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
        print("rehearsal: the network answers inside the namespace: not a rehearsal", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"rehearsal: network cut (pypi.org: {exc}); hidden: {', '.join(hidden) or 'nothing'}; "
              f"ssh agent for Open MPI: {ssh_agent()}", flush=True)
    steps = rehearsal_steps(carry, work, full, arch)
    meta = {"schema": "pympi_gpu.gpu_acceptance/2", "device": "rehearsal (no GPU)", "host": platform.node(),
            "part": "rehearsal", "full": full, "arch": arch, "carry": str(carry),
            "carry_bytes": json.loads((carry / "MANIFEST.json").read_text())["bytes"]
            if (carry / "MANIFEST.json").exists() else None}
    doc = execute(steps, work, out, 7200.0, meta, log=lambda line: print(line, flush=True))
    for s in steps:  # what each step said last: the wheels pip installed, the link, the collection
        print(f"\n--- {s.name}: {s.status}\n{s.figures.get('log_tail', '').strip()[-1500:]}", flush=True)
    text, _ = summary(steps, doc["checks"])
    print(text, flush=True)
    return 0 if doc["passed"] else 1


def rehearse(carry: Path, work: Path, out: Path, full: bool, arch: str) -> int:
    """Everything of the plan that needs no GPU, here, offline, from the carry folder alone."""
    why = rehearsal_blockers(full)
    if why:
        print("rehearsal skipped: " + "; ".join(why))
        return SKIPPED
    missing = carry_missing(carry) + rehearsal_missing()
    if missing:
        print(f"rehearsal: {carry} lacks {', '.join(missing)} (run: gpu_acceptance.py prepare {carry})",
              file=sys.stderr)
        return 2
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    argv = ["unshare", "-n", "-m", "--", sys.executable, str(THIS), "_inside", str(carry.resolve()),
            str(work.resolve()), str(out.resolve()), "--arch", arch] + (["--full"] if full else [])
    rc = subprocess.run(argv).returncode
    print(f"rehearsal: {'PASSED' if rc == 0 else 'NOT PASSED'} in {time.monotonic() - t0:.0f} s; results {out}")
    return rc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="download the carried files (needs PyPI and Debian)")
    p.add_argument("carry", type=Path)
    p.add_argument("--samples", type=Path, default=None, help="cuda-samples folder [../shared/cuda-samples]")
    p.add_argument("--python", action="append", default=None, metavar="X.Y",
                   help=f"Python versions to fetch binary wheels for [this one and {DEVICE_PYTHON}]")
    h = sub.add_parser("rehearse", help="run here, network cut, every step that needs no GPU")
    h.add_argument("carry", type=Path)
    h.add_argument("--work", type=Path, default=Path("/tmp/pympi-rehearsal"))
    h.add_argument("--out", type=Path, default=None, help="results [WORK/rehearsal.json]")
    h.add_argument("--full", action="store_true", help="also build the CUDA-aware Open MPI (minutes)")
    h.add_argument("--arch", default="sm_90", help="what nvcc builds nbody for, there being no GPU [sm_90]")
    r = sub.add_parser("run", help="run the acceptance on this GPU machine, a part per call")
    r.add_argument("carry", type=Path)
    r.add_argument("--part", default="all", choices=("all",) + PARTS)
    r.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    r.add_argument("--budget", type=float, default=540.0, help="seconds this call may take [540]")
    r.add_argument("--dry-run", action="store_true", help="print the plan; run nothing")
    r.add_argument("--mpi", choices=("build", "wheel"), default="build",
                   help="build: the CUDA-aware Open MPI from the carry (minutes); wheel: MPICH's wheel, "
                        "host transport only [build]")
    r.add_argument("--only", default=None, metavar="REGEX", help="only the steps whose name matches (and the setup)")
    r.add_argument("--bundle", type=Path, default=None,
                   help="a setup bundle of an earlier call: unpacked first, so the setup skips its builds")
    r.add_argument("--save-bundle", type=Path, default=None, metavar="FILE",
                   help="after the run, write the setup's builds there (e.g. $OUT/setup.tar.gz)")
    m = sub.add_parser("merge", help="combine the parts' results files")
    m.add_argument("out", type=Path)
    q = sub.add_parser("_repeat")  # run as a step of the race
    q.add_argument("kind", choices=("cuda-samples", "nbody"))
    q.add_argument("command", nargs=argparse.REMAINDER)
    for name in ("_venv", "_audit", "_mpi_root", "_inside"):  # run as steps
        q = sub.add_parser(name)
        q.add_argument("args", nargs="*")
        q.add_argument("--full", action="store_true")
        q.add_argument("--arch", default="sm_90")
    args = ap.parse_args(argv)
    if args.cmd == "prepare":
        return prepare(args.carry, args.samples, tuple(args.python) if args.python else None)
    if args.cmd == "rehearse":
        return rehearse(args.carry, args.work, args.out or args.work / "rehearsal.json", args.full, args.arch)
    if args.cmd == "run":
        return run(args.carry, args.out, args.part, args.dry_run, args.only, args.budget, args.bundle,
                   args.save_bundle, args.mpi)
    if args.cmd == "merge":
        return merge(args.out)
    if args.cmd == "_repeat":
        return repeat(args.kind, args.command[1:] if args.command[:1] == ["--"] else args.command)
    a = args.args
    if args.cmd == "_venv":
        return make_venv(Path(a[0]), Path(a[1]))
    if args.cmd == "_audit":
        return audit(Path(a[0]), Path(a[1]), a[2])
    if args.cmd == "_mpi_root":
        return mpi_as_root(a[0], Path(a[1]))
    return inside(Path(a[0]), Path(a[1]), Path(a[2]), args.full, args.arch)


if __name__ == "__main__":
    raise SystemExit(main())
