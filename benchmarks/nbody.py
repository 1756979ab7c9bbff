#!/usr/bin/env python3
"""Benchmark of pympi-nbody (not a test): prints a table and writes JSON.

CPU (always):
  * force kernel throughput per core (numba, one thread) in fp32 and fp64,
    beside the NumPy reference measured in the same run;
  * the same kernels on every core of this process;
  * strong scaling of the whole program: ``mpiexec -n 1`` vs ``-n 2`` at
    65,536 bodies with the ring exchange (one numba thread per rank).
GPU (when a CUDA GPU is usable; skipped with the reason otherwise):
  * ``pympi-nbody 1048576 --backend gpu --precision fp32 --benchmark`` on one
    rank, beside NVIDIA cuda-samples ``nbody -benchmark -numbodies=1048576``
    when its binary is given (``--cuda-samples PATH``) or found on PATH.

Figures are medians of ``--repeats`` runs; interactions are N^2 per step and
GFLOP/s count 20 flops per interaction (as cuda-samples does).

    python benchmarks/nbody.py                      # CPU + GPU if any
    python benchmarks/nbody.py --quick              # smaller sizes, fewer repeats
    python benchmarks/nbody.py --mode gpu --cuda-samples ~/cuda-samples/bin/nbody
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
FLOPS = 20


def _exe(name: str) -> str:
    path = BIN / name
    return str(path) if path.exists() else (shutil.which(name) or name)


def _mpiexec(n: int) -> list[str]:
    exe = _exe("mpiexec")
    out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    argv = [exe, "-n", str(n)]
    if "Open MPI" in out or "OpenRTE" in out:
        argv[1:1] = ["--oversubscribe", "--allow-run-as-root"]
    return argv


def _median_rate(fn, interactions: int, repeats: int) -> tuple[float, list[float], float]:
    """Median wall-clock rate, the wall times, and the median rate per CPU-second.

    The rate per CPU-second (process CPU time, all threads) is what one core
    delivers while it runs, and stays meaningful on a shared, busy machine
    where wall-clock rates also measure the other tenants.
    """
    times, cpu = [], []
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return interactions / statistics.median(times), times, interactions / statistics.median(cpu)


def cpu_kernels(n: int, n_numpy: int, repeats: int) -> list[dict]:
    """In-process kernel rates: numba 1 thread, numba all threads, NumPy."""
    from pympi_gpu.device import jitcache

    simd_note = jitcache.tune_cpu()
    jitcache.configure()
    import numba
    import numpy as np

    from pympi_gpu.nbody.gravity.initial import generate
    from pympi_gpu.nbody.gravity.kernels_cpu import NumbaKernels, NumpyKernels

    rows = []
    for precision, dtype in (("fp32", np.float32), ("fp64", np.float64)):
        for label, kernels, size, threads in (("numba", NumbaKernels(), n, 1),
                                              ("numba", NumbaKernels(), n, numba.config.NUMBA_NUM_THREADS),
                                              ("numpy", NumpyKernels(), n_numpy, 1)):
            pos, _, mass = generate("plummer", 1, size, 0, size)
            p = [np.ascontiguousarray(a, dtype=dtype) for a in pos]
            m = mass.astype(dtype)
            acc = [np.zeros(size, dtype) for _ in range(3)]
            kernels.warmup(dtype)
            numba.set_num_threads(threads)
            rate, times, per_cpu_s = _median_rate(lambda: kernels.accel(*p, *p, m, 1e-4, *acc), size * size,
                                                  repeats)
            rows.append({"what": f"kernel {label}", "precision": precision, "bodies": size, "threads": threads,
                         "interactions_per_s": rate, "per_core": rate / threads,
                         "per_cpu_second": per_cpu_s,
                         "gflops": rate * FLOPS / 1e9, "times_s": times,
                         "simd": simd_note if label == "numba" else "NumPy"})
    return rows


#: what a launcher (mpiexec, srun, PMI) sets for the ranks it starts: a child run must not inherit it,
#: or its own mpiexec would take itself for a rank of the outer job.  The user's own settings stay:
#: OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM), and OMPI_MCA_* parameters such as plm_rsh_agent, without which
#: Open MPI 4.1 as root on a machine without ssh (the GPU machine) starts nothing.
LAUNCHER_VARS = ("PMI_", "PMIX_", "SLURM_", "MPI_LOCAL", "HYDRA_", "MV2_", "PRTE_", "OMPI_COMM_WORLD_",
                 "OMPI_UNIVERSE_SIZE", "OMPI_FILE_LOCATION", "OMPI_APP_CTX_", "OMPI_FIRST_RANKS",
                 "OMPI_NUM_APP_CTX", "OMPI_ARGV", "OMPI_COMMAND", "OMPI_MCA_orte_", "OMPI_MCA_ess",
                 "OMPI_MCA_pmix", "OMPI_MCA_initial_wdir", "OMPI_MCA_shmem_RUNTIME_QUERY_hint")


def child_env() -> dict[str, str]:
    """This environment for a child run, less the launcher's variables (:data:`LAUNCHER_VARS`)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_VARS)}


def _run_json(argv: list[str], timeout: float = 1200) -> dict:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=child_env())
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({out.returncode}): {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout)


def cpu_scaling(n: int, steps: int, repeats: int, precision: str = "fp32") -> list[dict]:
    """Whole-program strong scaling, 1 and 2 ranks, one numba thread per rank."""
    rows = []
    base = None
    for ranks in (1, 2):
        docs = [_run_json(_mpiexec(ranks) + [_exe("pympi-nbody"), str(n), "--steps", str(steps), "--benchmark",
                                             "--backend", "numba", "--threads", "1", "--exchange", "ring",
                                             "--precision", precision, "--json"])
                for _ in range(repeats)]
        rate = statistics.median(d["throughput"] for d in docs)
        base = base or rate
        rows.append({"what": "pympi-nbody ring", "precision": precision, "bodies": n, "ranks": ranks,
                     "threads": 1, "steps": steps, "interactions_per_s": rate, "gflops": rate * FLOPS / 1e9,
                     "speedup": rate / base, "median_step_s": statistics.median(d["median_step_time"] for d in docs),
                     "comm_wait_s": statistics.median(d["comm_time"] for d in docs),
                     "runs": [d["throughput"] for d in docs]})
    return rows


def gpu_usable() -> tuple[bool, str]:
    out = subprocess.run([sys.executable, "-c", "from pympi_gpu.device.gpu import gpu_usable; import json; "
                          "print(json.dumps(gpu_usable()))"], capture_output=True, text=True, timeout=300)
    try:
        ok, why = json.loads(out.stdout.strip().splitlines()[-1])
        return bool(ok), why
    except Exception:
        return False, out.stderr.strip()[-300:] or "probe failed"


def _device_name() -> str:
    out = subprocess.run([sys.executable, "-c", "from numba import cuda; d = cuda.get_current_device(); "
                          "n = d.name; print(n.decode() if isinstance(n, bytes) else n)"],
                         capture_output=True, text=True, timeout=300)
    return out.stdout.strip() or "unknown GPU"


def cuda_samples(binary: str, n: int, fp64: bool, repeats: int) -> dict:
    """``nbody -benchmark`` figures; RuntimeError (with the reason) if the binary is missing or fails."""
    rates = []
    for _ in range(repeats):
        argv = [binary, "-benchmark", f"-numbodies={n}"] + (["-fp64"] if fp64 else [])
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=1200)
        except OSError as exc:  # no such file, not executable
            raise RuntimeError(f"cannot run cuda-samples nbody {binary!r}: {exc}") from exc
        m = re.search(r"=\s*([0-9.]+)\s*billion interactions per second", out.stdout)
        if not m:
            raise RuntimeError(f"cannot read cuda-samples output: {out.stdout[-500:]} {out.stderr[-500:]}")
        rates.append(float(m.group(1)) * 1e9)
    return {"what": "cuda-samples nbody -benchmark", "precision": "fp64" if fp64 else "fp32", "bodies": n,
            "ranks": 1, "interactions_per_s": statistics.median(rates), "runs": rates,
            "gflops": statistics.median(rates) * FLOPS / 1e9, "binary": binary}


def gpu_rows(n: int, steps: int, repeats: int, samples_bin: str | None, skipped: list[str]) -> list[dict]:
    rows = []
    for precision in ("fp32",):
        docs = [_run_json([_exe("pympi-nbody"), str(n), "--steps", str(steps), "--benchmark", "--backend", "gpu",
                           "--precision", precision, "--json"]) for _ in range(repeats)]
        rate = statistics.median(d["throughput"] for d in docs)
        rows.append({"what": "pympi-nbody gpu", "precision": precision, "bodies": n, "ranks": 1, "steps": steps,
                     "interactions_per_s": rate, "gflops": rate * FLOPS / 1e9,
                     "median_step_s": statistics.median(d["median_step_time"] for d in docs),
                     "runs": [d["throughput"] for d in docs]})
        if samples_bin:
            try:
                ref = cuda_samples(samples_bin, n, precision == "fp64", repeats)
            except RuntimeError as exc:  # the GPU rows stand without the yardstick
                skipped.append(f"cuda-samples nbody: {exc}")
                continue
            rows.append(ref)
            rows[-2]["vs_cuda_samples"] = rate / ref["interactions_per_s"]
    return rows


def table(rows: list[dict]) -> str:
    head = f"{'what':<20} {'prec':<5} {'bodies':>9} {'ranks':>5} {'thr':>4} {'interactions/s':>15} " \
           f"{'per core':>11} {'per CPU-s':>11} {'GFLOP/s':>9} {'note':<}"
    lines = [head, "-" * len(head)]
    for r in rows:
        note = ""
        if "speedup" in r:
            note = f"speedup {r['speedup']:.2f}x"
        if "vs_cuda_samples" in r:
            note = f"{100 * r['vs_cuda_samples']:.1f}% of cuda-samples"
        per_core = f"{r['per_core']:.3e}" if "per_core" in r else ""
        per_cpu = f"{r['per_cpu_second']:.3e}" if "per_cpu_second" in r else ""
        lines.append(f"{r['what']:<20} {r['precision']:<5} {r['bodies']:>9,} {r.get('ranks', 1):>5} "
                     f"{r.get('threads', ''):>4} {r['interactions_per_s']:>15.4e} {per_core:>11} {per_cpu:>11} "
                     f"{r['gflops']:>9.1f} {note}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["all", "cpu", "gpu"], default="all")
    ap.add_argument("--quick", action="store_true", help="smaller problems, 3 repeats")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--bodies", type=int, default=65536, help="bodies of the CPU scaling runs")
    ap.add_argument("--gpu-bodies", type=int, default=1 << 20)
    ap.add_argument("--cuda-samples", default=None, help="path of cuda-samples' nbody binary")
    ap.add_argument("--out", default=None,
                    help="JSON output [benchmarks/results/nbody-cpu-<vector ISA>.json with --mode cpu, "
                         "else nbody-<host>.json]")
    args = ap.parse_args()
    repeats = args.repeats or (3 if args.quick else 5)
    from pympi_gpu.device.jitcache import host_cpu

    cpu = host_cpu()  # model, LLVM's name, vector ISA: kernel speeds differ most by ISA
    result = {"schema": "pympi_gpu.bench.nbody/1", "host": socket.gethostname(),
              "cpu": cpu["model"], "llvm_cpu": cpu["llvm_cpu"], "vector_isa": cpu["vector_isa"],
              "cores": os.cpu_count(),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "load_average": os.getloadavg(), "repeats": repeats, "rows": [], "skipped": []}
    rows = result["rows"]
    if args.mode in ("all", "cpu"):
        rows += cpu_kernels(8192 if args.quick else 16384, 2048 if args.quick else 4096, repeats)
        rows += cpu_scaling(args.bodies // (4 if args.quick else 1), 2 if args.quick else 3, repeats)
    if args.mode in ("all", "gpu"):
        ok, why = gpu_usable()
        if ok:
            result["device"] = _device_name()
            samples = args.cuda_samples or shutil.which("nbody")
            if not samples:
                result["skipped"].append("cuda-samples nbody: no binary (--cuda-samples PATH)")
            rows += gpu_rows(args.gpu_bodies, 10, repeats, samples, result["skipped"])
        else:
            result["skipped"].append(f"GPU: {why}")
    result["load_average_after"] = os.getloadavg()
    print(f"{cpu['model']} ({cpu['llvm_cpu']}, {cpu['vector_isa']}), load average "
          f"{result['load_average'][0]:.2f} before, {result['load_average_after'][0]:.2f} after")
    print(table(rows))
    for s in result["skipped"]:
        print(f"skipped: {s}")
    name = f"nbody-cpu-{cpu['vector_isa']}.json" if args.mode == "cpu" else f"nbody-{socket.gethostname()}.json"
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"JSON: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
