#!/usr/bin/env python3
"""bench/in.lj in OpenMM and gamdpy from pympi's own state: energies and atom-steps/s read alike (issue 59).

The fluid is LAMMPS's ``bench/in.lj`` as pympi makes it (:func:`initial_state`:
fcc at density 0.8442, velocities at T 1.44 from pympi's stream, every atom in id
order), ``lj/cut`` 2.5 unshifted, no tail correction, NVE, dt 0.005.  All three
codes start from that one state, so their energies can be compared as well as
their speed.

Units.  LJ reduced units are mapped onto OpenMM's with sigma = 1 nm, epsilon =
1 kJ/mol and m = 1 amu (g/mol).  Then tau = sigma sqrt(m / epsilon) = 1e-9 m *
sqrt(1e-3 kg/mol / 1e3 J/mol) = 1e-12 s = 1 ps exactly, a reduced velocity is
nm/ps, a reduced energy kJ/mol, and dt 0.005 tau is 0.005 ps: no factor enters
anywhere (temperature is never handed to OpenMM: the velocities are).  gamdpy
works in reduced units already (single precision).

Integrators.  pympi (and LAMMPS) integrate velocity Verlet; OpenMM's
``VerletIntegrator`` and gamdpy's ``NVE`` are leapfrog, whose velocities are
those of the half step before the positions.  Both are given
``v(-dt/2) = v(0) - dt/2 f(0) / m`` (``f(0)`` from their own force
evaluation), which makes the leapfrog trajectory the velocity-Verlet one; the
kinetic energy at a step is read on the step (OpenMM shifts its velocities
half a step itself; for gamdpy it is ``v(t - dt/2) + dt/2 f(t) / m`` from its
arrays).

Rates.  Every code's atom-steps/s is ``steps * atoms / wall`` of a timed loop
of ``steps`` steps in chunks of ``thermo`` steps with the energies read after
each chunk (pympi's ``--thermo``), after a warm-up that is not timed (the
compilation, the start's forces and ``warmup`` steps); pympi's own ``rate`` is
read the same way by its run loop.

    python benchmarks/peers_gpu.py energies --out FILE          # here: OpenMM Reference and CPU against
                                                                # pympi, 500 atoms, steps 0 and 100
    NUMBA_ENABLE_CUDASIM=1 python benchmarks/peers_gpu.py energies --gamdpy-steps 10   # and gamdpy, simulated
    python benchmarks/peers_gpu.py run openmm 32000 --platform CUDA --steps 1000   # one code, one size: JSON
    python benchmarks/peers_gpu.py run gamdpy 32000 --steps 1000

Neither OpenMM nor gamdpy is a dependency of the package: each is imported
where it is used, and a missing one is said in one line.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import datetime
import glob
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from pympi_gpu.nbody.lj.config import DEFAULT_SEED, LjConfig
from pympi_gpu.nbody.lj.lattice import cells_for, fcc_positions, velocities

ROOT = Path(__file__).resolve().parent.parent
#: the versions the race names (issue 59): OpenMM's CUDA 13 platform is the ``openmm-cuda-13`` wheel
OPENMM_VERSION, GAMDPY_VERSION = "8.6.1", "0.8.3"
#: the thermo columns compared between codes (OpenMM has no pressure without a barostat)
COLUMNS = ("e_pair", "ke", "etotal")
#: the offline check: atoms (5^3 cells x 4) and steps
CHECK_ATOMS, CHECK_STEPS = 500, 100
#: how gamdpy is run under numba's CUDA simulator (:func:`_simulator_python`, :func:`run_gamdpy`)
SIMULATOR_NOTE = ("numba.njit left as Python while gamdpy builds its kernels (its njit device functions cannot "
                  "type the simulator's arrays); pb a divisor of the atoms, tp 1, no grid sync (its list build "
                  "reads my_num_nbs, which a thread past the last atom never assigns)")
#: gamdpy's neighbour slots per atom: about 78 atoms lie within 2.8 sigma at density 0.8442
GAMDPY_MAX_NBS = 256

__all__ = ["State", "PeerRun", "initial_state", "openmm_system", "run_openmm", "run_gamdpy", "run_pympi",
           "differences", "cpu_model", "main"]


@dataclasses.dataclass(frozen=True)
class State:
    """pympi's initial state of ``config``: positions ``x`` in ``[0, box)^3`` and velocities ``v``, ``(atoms, 3)``
    float64, atom id = row + 1 (reduced units, unit masses)."""

    config: LjConfig
    x: np.ndarray
    v: np.ndarray

    @property
    def atoms(self) -> int:
        return self.config.atoms

    @property
    def box(self) -> float:
        """The cube's edge: ``cells`` fcc cells of edge ``(4 / density)^(1/3)``, as ``LjConfig.box`` makes it."""
        return self.config.cells * (4.0 / self.config.density) ** (1.0 / 3.0)


@dataclasses.dataclass(frozen=True)
class PeerRun:
    """One code's run: its thermo rows (per atom, reduced units), how it was timed and on what.

    ``rate`` is atom-steps/s over the timed loop (``steps`` steps; ``wall`` seconds), ``setup_s`` the seconds
    before it (building, compiling, the start's forces, the warm-up steps)."""

    code: str
    version: str
    platform: str
    precision: str
    atoms: int
    steps: int
    thermo: tuple
    wall: float
    rate: float
    setup_s: float
    warmup: int
    notes: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def initial_state(atoms: int, seed: int = DEFAULT_SEED, **params) -> State:
    """pympi's in.lj state of the fcc lattice nearest ``atoms`` (``4 cells^3``), as ``write_data`` writes it."""
    config = LjConfig(cells=cells_for(atoms), seed=seed, **params)
    return State(config, fcc_positions(config.cells, config.density),
                 velocities(config.atoms, config.temperature, config.seed))


def _row(step: int, e_pair: float, ke: float, atoms: int) -> dict:
    """A thermo row per atom, as pympi's JSON has it (``temp`` with 3N - 3 degrees of freedom)."""
    e_pair, ke = e_pair / atoms, ke / atoms
    return {"step": step, "e_pair": e_pair, "ke": ke, "etotal": e_pair + ke,
            "temp": 2.0 * ke * atoms / max(3 * atoms - 3, 1)}


def _chunks(steps: int, thermo: int):
    done = 0
    while done < steps:
        n = min(thermo, steps - done)
        done += n
        yield n, done


# ------------------------------------------------------------------ OpenMM

def preload_cuda_libraries() -> list[str]:
    """Load the CUDA 13 libraries ``openmm-cuda-13``'s plugin needs (``libnvrtc.so.13``, ``libcufft.so.12``) from
    wherever a ``nvidia/cu13/lib`` folder is on ``sys.path``, before OpenMM loads its plugins.

    The plugin looks for them beside its own install (RUNPATH ``$ORIGIN/../../../nvidia/cu13/lib``); on the GPU
    machine OpenMM is installed in the acceptance's venv while the NVIDIA wheels are the image's, in another
    site-packages: loaded first, by soname, they are found there.  Returns the paths loaded."""
    toolkit = [os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "lib64")]
    loaded = []
    for name in ("libnvrtc.so.13", "libcufft.so.12"):
        for folder in sys.path + toolkit:  # the wheels' layouts (cu13/lib; cuda_nvrtc/lib, cufft/lib), a toolkit
            hits = sorted(glob.glob(os.path.join(folder, "nvidia", "*", "lib", name))) + sorted(
                glob.glob(os.path.join(folder, name)))
            if hits:
                ctypes.CDLL(hits[0], mode=ctypes.RTLD_GLOBAL)
                loaded.append(hits[0])
                break
    return loaded


def _openmm():
    try:
        import openmm
    except ImportError as exc:
        raise SystemExit(f"OpenMM is not installed ({exc}): pip install openmm=={OPENMM_VERSION}") from None
    return openmm


def openmm_system(state: State, force: str = "nonbonded"):
    """The OpenMM ``System`` of ``state``: unit masses, LJ sigma 1 epsilon 1 cut at ``state.config.cutoff`` with
    periodic images, no switching, no long-range correction (``lj/cut``); ``force``: ``nonbonded``
    (``NonbondedForce``, charges 0) or ``custom`` (``CustomNonbondedForce`` of the plain 12-6 formula)."""
    mm = _openmm()
    system = mm.System()
    box = state.box
    system.setDefaultPeriodicBoxVectors(mm.Vec3(box, 0, 0), mm.Vec3(0, box, 0), mm.Vec3(0, 0, box))
    for _ in range(state.atoms):
        system.addParticle(1.0)
    cut = state.config.cutoff
    if force == "nonbonded":
        f = mm.NonbondedForce()
        f.setNonbondedMethod(mm.NonbondedForce.CutoffPeriodic)
        f.setUseDispersionCorrection(False)
        f.setUseSwitchingFunction(False)
        for _ in range(state.atoms):
            f.addParticle(0.0, 1.0, 1.0)
    elif force == "custom":
        f = mm.CustomNonbondedForce("4*((1/r)^12-(1/r)^6)")
        f.setNonbondedMethod(mm.CustomNonbondedForce.CutoffPeriodic)
        f.setUseLongRangeCorrection(False)
        f.setUseSwitchingFunction(False)
        for _ in range(state.atoms):
            f.addParticle([])
    else:
        raise ValueError(f"force is nonbonded or custom, not {force!r}")
    f.setCutoffDistance(cut)
    system.addForce(f)
    return system


def run_openmm(state: State, steps: int, platform_name: str = "Reference", thermo: int = 100, warmup: int = 0,
               force: str = "nonbonded", properties: dict | None = None) -> PeerRun:
    """``steps`` steps of ``state`` in OpenMM on ``platform_name``, timed as the module says.

    ``warmup`` steps are run after the start and not timed (the rows then hold step 0, step ``warmup``
    and the timed loop's from there: comparable with pympi's at step 0, and later where ``warmup`` is 0)."""
    t0 = time.perf_counter()
    loaded = preload_cuda_libraries() if platform_name in ("CUDA", "OpenCL") else []
    mm = _openmm()
    try:
        platform = mm.Platform.getPlatformByName(platform_name)
    except Exception as exc:  # say why its plugin did not load (a library not found, a driver too old)
        raise RuntimeError(f"OpenMM has no {platform_name} platform ({exc}); plugins that failed to load: "
                           f"{list(mm.Platform.getPluginLoadFailures())}; CUDA libraries loaded first: "
                           f"{loaded}") from None
    props = dict(properties or {})
    if platform_name == "CPU":
        props.setdefault("Threads", str(os.cpu_count()))
    if platform_name in ("CUDA", "OpenCL"):
        props.setdefault("Precision", "mixed")
    integrator = mm.VerletIntegrator(state.config.dt)
    context = mm.Context(openmm_system(state, force), integrator, platform, props)
    context.setPositions(state.x)
    # leapfrog: the velocities of the half step before, from the start's forces (module docstring)
    f0 = context.getState(getForces=True).getForces(asNumpy=True)._value
    context.setVelocities(state.v - 0.5 * state.config.dt * f0)

    def energies(step):
        s = context.getState(getEnergy=True)
        return _row(step, s.getPotentialEnergy()._value, s.getKineticEnergy()._value, state.atoms)

    rows = [energies(0)]
    if warmup:
        integrator.step(warmup)
        rows.append(energies(warmup))
    used = {k: platform.getPropertyValue(context, k) for k in platform.getPropertyNames()}
    setup = time.perf_counter() - t0
    t1 = time.perf_counter()
    for n, done in _chunks(steps, thermo):
        integrator.step(n)
        rows.append(energies(warmup + done))  # a host copy of the energies: the queue is drained
    wall = time.perf_counter() - t1
    precision = used.get("Precision", "double" if platform_name == "Reference" else "")
    return PeerRun("openmm", mm.__version__, f"{platform_name} ({force})", precision or "mixed", state.atoms, steps,
                   tuple(rows), wall, steps * state.atoms / wall if wall > 0 else 0.0, setup, warmup,
                   json.dumps({k: v for k, v in used.items() if k in ("Precision", "Threads", "DeviceName",
                                                                        "DeviceIndex", "UseCpuPme")}))


# ------------------------------------------------------------------ gamdpy

def lj_cut(dist, params):  # pragma: no cover (compiled by gamdpy into its kernels)
    """``lj/cut``: LJ 12-6 of sigma 1, epsilon 1 cut at ``params[-1]``, unshifted (gamdpy's own cut-offs shift).
    Returns u, -u'/r and u'' as gamdpy's pair functions do."""
    import numba

    cut = params[-1]
    if dist > cut:
        return numba.float32(0.0), numba.float32(0.0), numba.float32(0.0)
    inv = numba.float32(1.0) / dist
    inv6 = inv ** 6
    u = numba.float32(4.0) * (inv6 * inv6 - inv6)
    s = (numba.float32(48.0) * inv6 * inv6 - numba.float32(24.0) * inv6) * inv * inv
    umm = (numba.float32(624.0) * inv6 * inv6 - numba.float32(168.0) * inv6) * inv * inv
    return u, s, umm


@contextlib.contextmanager
def _script_name():
    """gamdpy's Simulation reads ``sys.argv[0]`` as its script (to store it): a ``-c`` or an interactive run
    has none it can open."""
    saved = sys.argv[0]
    if not os.path.isfile(saved):
        sys.argv[0] = __file__
    try:
        yield
    finally:
        sys.argv[0] = saved


@contextlib.contextmanager
def _simulator_python():
    """``numba.njit`` made the identity while gamdpy builds its kernels, under numba's CUDA simulator.

    gamdpy compiles its device functions (the box's distances, the pair function, the list's checks) with
    ``numba.njit`` and calls them from its ``cuda.jit`` kernels; the simulator runs the kernels as Python
    and hands them its own array objects, which an ``njit`` function cannot type (the first launch,
    ``nblist_check``, stops there: "Cannot determine Numba type of FakeWithinKernelCUDAArray").  Left as
    Python, they run under the simulator with the kernels."""
    import numba

    saved = numba.njit
    numba.njit = lambda f=None, **kw: f if f is not None else (lambda g: g)
    try:
        yield
    finally:
        numba.njit = saved


def run_gamdpy(state: State, steps: int, thermo: int = 100, warmup: int = 0, skin: float | None = None,
               compute_plan: dict | None = None) -> PeerRun:
    """``steps`` steps of ``state`` in gamdpy (float32), timed as the module says.

    The compute plan is gamdpy's default for the size, its skin ``skin`` where given (in.lj's 0.3 by
    default; ``None`` keeps gamdpy's own 0.5 or 1.0); ``compute_plan`` overrides its keys."""
    t0 = time.perf_counter()
    try:
        import gamdpy as gp
    except ImportError as exc:
        raise SystemExit(f"gamdpy is not installed ({exc}): pip install gamdpy=={GAMDPY_VERSION}") from None
    from numba import cuda

    n, box, dt = state.atoms, state.box, state.config.dt
    conf = gp.Configuration(D=3, N=n)
    # gamdpy's box runs from -L/2 to L/2: the lattice moved by -L/2 (a translation: the same energies)
    conf["r"] = (state.x - 0.5 * box).astype(np.float32)
    conf["v"] = state.v.astype(np.float32)
    conf["m"] = np.float32(1.0)
    conf.simbox = gp.Orthorhombic(3, [box, box, box])
    plan = gp.get_default_compute_plan(conf)
    plan["skin"] = np.float32(state.config.skin if skin is None else skin)
    simulated = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
    if simulated:  # every simulated thread a real atom: gamdpy's list build reads a name only those assign
        plan.update(pb=max(d for d in range(1, 129) if n % d == 0), tp=1, gridsync=False)
    plan.update(compute_plan or {})
    pair = gp.PairPotential(lj_cut, params=[1.0, 1.0, state.config.cutoff], max_num_nbs=GAMDPY_MAX_NBS)
    with _script_name(), (_simulator_python() if simulated else contextlib.nullcontext()):
        sim = gp.Simulation(conf, [pair], gp.integrators.NVE(dt=dt), [], num_timeblocks=1,
                            steps_per_timeblock=max(thermo, 1), storage="memory", compute_plan=plan, timing=False)
    # the start's forces (zero steps: the interactions only), then v(-dt/2) (module docstring)
    conf.copy_to_device()
    sim.integrate_self(0.0, 0)
    f0 = conf.d_vectors.copy_to_host()[conf.vectors.indices["f"]].astype(np.float64)
    conf.d_vectors = cuda.to_device(_with_column(conf, conf.d_vectors.copy_to_host(), "v",
                                                 state.v - 0.5 * dt * f0))
    at = [0]  # steps done: the time handed to the kernel (NVE does not read it)

    def advance(k):
        sim.integrate_self(np.float32(at[0] * dt), k)
        at[0] += k

    vi, fi, ui = conf.vectors.indices["v"], conf.vectors.indices["f"], conf.sid["U"]
    xp = _device_arrays(simulated)

    def energies(step):
        cuda.synchronize()
        if xp is not None:  # summed where they are, as pympi's thermo is (no atom arrays to the host)
            vec, sc = xp.asarray(conf.d_vectors), xp.asarray(conf.d_scalars)
        else:
            vec, sc = conf.d_vectors.copy_to_host(), conf.d_scalars.copy_to_host()
        # on the step: v(t - dt/2) and the forces of the positions (the kernel's last evaluation)
        v = vec[vi].astype(np.float64) + 0.5 * dt * vec[fi].astype(np.float64)
        u = float(sc[:, ui].astype(np.float64).sum())
        return _row(step, u, 0.5 * float((v * v).sum()), n)

    rows = [energies(0)]
    if warmup:
        advance(warmup)
        rows.append(energies(warmup))
    cuda.synchronize()
    setup = time.perf_counter() - t0
    t1 = time.perf_counter()
    for k, done in _chunks(steps, thermo):
        advance(k)
        rows.append(energies(warmup + done))
    wall = time.perf_counter() - t1
    return PeerRun("gamdpy", gp.__version__, "numba CUDA simulator" if simulated else "CUDA", "single", n, steps,
                   tuple(rows), wall, steps * n / wall if wall > 0 else 0.0, setup, warmup,
                   json.dumps({"compute_plan": {k: (v.item() if hasattr(v, "item") else v) for k, v in plan.items()},
                               "max_num_nbs": GAMDPY_MAX_NBS, "sums": "host" if xp is None else "cupy",
                               **({"simulator": SIMULATOR_NOTE} if simulated else {})}))


def _device_arrays(simulated: bool):
    """CuPy, to sum gamdpy's device arrays in place through ``__cuda_array_interface__`` (on a GPU where it is
    installed: the GPU image has it); else None, and the arrays are copied to the host."""
    if simulated:
        return None
    try:
        import cupy
    except ImportError:
        return None
    return cupy


def _with_column(conf, array: np.ndarray, name: str, values: np.ndarray) -> np.ndarray:
    array[conf.vectors.indices[name]] = values.astype(array.dtype)
    return array


# ------------------------------------------------------------------ pympi and the comparison

def run_pympi(atoms: int, steps: int, thermo: int = 100, backend: str = "numba", extra=(), timeout: float = 900,
              env: dict | None = None) -> dict:
    """``pympi-nbody ATOMS --model lj --steps STEPS --thermo THERMO --json`` (one rank): its JSON document."""
    exe = Path(sys.executable).with_name("pympi-nbody")
    argv = [str(exe), str(atoms), "--model", "lj", "--steps", str(steps), "--thermo", str(thermo),
            "--backend", backend, "--json", *extra]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {out.returncode}: {out.stderr.strip()[-800:]}")
    return json.loads(out.stdout)


def differences(ours: list[dict], theirs: list[dict] | tuple) -> dict:
    """``{step: {column: relative difference}}`` of the steps both have (``|theirs - ours| / |ours|``)."""
    by_step = {r["step"]: r for r in theirs}
    return {str(r["step"]): {k: abs(by_step[r["step"]][k] - r[k]) / max(abs(r[k]), 1e-300) for k in COLUMNS}
            for r in ours if r["step"] in by_step}


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` says."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def energies(atoms: int = CHECK_ATOMS, steps: int = CHECK_STEPS, gamdpy_steps: int | None = None, log=print) -> dict:
    """The offline check: pympi (numba, one thread) against OpenMM Reference and CPU (both forces) at step 0 and
    ``steps``, and gamdpy (in the simulator where ``NUMBA_ENABLE_CUDASIM=1``, else on a GPU if one answers) at
    step 0 and ``gamdpy_steps`` (a divisor of ``steps``; ``None``: no gamdpy; its simulated steps are slow)."""
    if gamdpy_steps is not None and (gamdpy_steps < 1 or steps % gamdpy_steps):
        raise ValueError(f"gamdpy's steps ({gamdpy_steps}) must divide {steps}")
    doc = run_pympi(atoms, steps, thermo=gamdpy_steps or steps, extra=("--threads", "1"))
    ours = doc["thermo"]
    out = {"schema": "pympi_gpu.peers/1", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
        timespec="seconds"), "cpu": cpu_model(), "cores": os.cpu_count(), "host": platform.node(),
           "atoms": atoms, "steps": steps, "fluid": {k: doc[k] for k in ("density", "temperature", "cutoff", "skin",
                                                                          "dt", "seed", "pair", "box")},
           "pympi": {"backend": doc["backend"], "thermo": ours, "rate": doc["rate"],
                     "version": doc.get("provenance", {}).get("package"),
                     "numba": doc.get("provenance", {}).get("numba")},
           "peers": []}
    state = initial_state(atoms)
    runs = [("openmm", dict(platform_name="Reference", force="nonbonded")),
            ("openmm", dict(platform_name="Reference", force="custom")),
            ("openmm", dict(platform_name="CPU", force="nonbonded", properties={"Threads": "1"})),
            ("openmm", dict(platform_name="CPU", force="custom", properties={"Threads": "1"}))]
    if gamdpy_steps:
        runs.append(("gamdpy", {}))
    for code, kw in runs:
        try:
            run = (run_openmm(state, steps, thermo=steps, **kw) if code == "openmm"
                   else run_gamdpy(state, gamdpy_steps, thermo=gamdpy_steps))
        except Exception as exc:  # noqa: BLE001 (a peer that fails is recorded, with where and why)
            entry = {"code": code, "platform": f"{kw.get('platform_name', 'CUDA')} ({kw.get('force', '')})",
                     "failed": f"{type(exc).__name__}: {exc}"}
            log(f"{code} {kw}: FAILED {entry['failed'][:400]}")
        else:
            entry = {**run.to_dict(), "differences": differences(ours, run.thermo)}
            worst = {s: max(d.values()) for s, d in entry["differences"].items()}
            log(f"{code} {run.platform} {run.precision}: max relative difference to pympi "
                + ", ".join(f"step {s} {w:.2e}" for s, w in worst.items())
                + f"; {run.rate:.3e} atom-steps/s ({run.steps} steps, setup {run.setup_s:.1f} s)")
        out["peers"].append(entry)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("energies", help="OpenMM (Reference, CPU) and gamdpy against pympi at step 0 and STEPS")
    e.add_argument("--atoms", type=int, default=CHECK_ATOMS)
    e.add_argument("--steps", type=int, default=CHECK_STEPS)
    e.add_argument("--gamdpy-steps", type=int, default=None, metavar="K",
                   help="also gamdpy, K steps (a divisor of STEPS; slow in the simulator) [none: OpenMM only]")
    e.add_argument("--out", type=Path, default=None, help="write the JSON there")
    e.add_argument("--max-reference", type=float, default=None, metavar="RTOL",
                   help="exit 1 unless OpenMM Reference agrees with pympi within RTOL at every compared step")
    r = sub.add_parser("run", help="one code at one size, timed: one JSON document on stdout")
    r.add_argument("code", choices=("openmm", "gamdpy"))
    r.add_argument("atoms", type=int)
    r.add_argument("--steps", type=int, default=1000)
    r.add_argument("--thermo", type=int, default=100)
    r.add_argument("--warmup", type=int, default=0, help="untimed steps after the start [0]")
    r.add_argument("--platform", default="CUDA", help="OpenMM's platform [CUDA]")
    r.add_argument("--force", choices=("nonbonded", "custom"), default="nonbonded")
    r.add_argument("--skin", type=float, default=None, help="gamdpy's skin [in.lj's 0.3]")
    args = ap.parse_args(argv)
    if args.cmd == "energies":
        doc = energies(args.atoms, args.steps, args.gamdpy_steps, log=lambda s: print(s, file=sys.stderr))
        text = json.dumps(doc, indent=2) + "\n"
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(text)
        print(text, end="")
        if args.max_reference is not None:
            ref = [p for p in doc["peers"] if str(p.get("platform", "")).startswith("Reference")]
            worst = max((max(d.values()) for p in ref for d in p["differences"].values()), default=float("inf"))
            return 0 if ref and all("failed" not in p for p in ref) and worst <= args.max_reference else 1
        return 0
    state = initial_state(args.atoms)
    if args.code == "openmm":
        run = run_openmm(state, args.steps, args.platform, args.thermo, args.warmup, args.force)
    else:
        run = run_gamdpy(state, args.steps, args.thermo, args.warmup, args.skin)
    print(json.dumps(run.to_dict()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
