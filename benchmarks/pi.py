"""Benchmark of pympi-pi: kernels per core against baselines measured in the same run.

    python benchmarks/pi.py                 # table on the terminal, JSON in benchmarks/results/
    python benchmarks/pi.py --quick         # smaller sizes (smoke test)

    python benchmarks/pi.py --out results/x.json   # default: results/pi-<vector ISA>.json

Reports, each a median of repeats (the machine is shared and noisy; compare ratios):
  * per-core throughput (numba limited to 1 thread) of the Monte Carlo and trapezoid kernels,
    beside the Monte Carlo kernel of the SplitMix64 stream before issue 52 (``baselines/pi_splitmix.py``),
    the trapezoid kernel of float chunk sums before issue 60 (``baselines/pi_trapezoid_float.py``),
    the kernels before issue 10 (``baselines/pi_kernels_v1.py``), a pure-Python loop (the algorithm of the
    TACC tutorial's pi-mpi.py) and NumPy;
    each row gives the wall-clock rate and the rate per CPU-second of this process (on a busy
    machine the second is the steadier figure of what one core does);
  * the trapezoid error at 1e8 intervals;
  * end-to-end wall time of ``mpiexec -n 2 pympi-pi 1e7`` (warm numba cache) as a user runs it
    (``--backend auto``), and with ``--backend numba``, against the pure-Python MPI program on
    the same total, the runs interleaved;
  * 2-rank strong-scaling efficiency of Monte Carlo at 2e9 samples (``--backend numba``,
    one thread per rank);
  * on a usable GPU only: Monte Carlo samples/s of the GPU kernel.

The CPU rows always time the CPU kernels named in them, never whatever ``auto`` would pick.
The JSON records the CPU model, LLVM's name for the CPU numba compiled for and that target's
vector ISA (``NUMBA_CPU_NAME=haswell`` with AVX2's features times AVX2 code on an AVX-512 host),
and the load average.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(HERE / "baselines"))
from pi_pure_python import inside as pure_python_mc  # noqa: E402  (the tutorial's loop)


def compiled_for(cpu: dict) -> dict:
    """``cpu`` (jitcache.host_cpu) with LLVM's CPU and vector ISA of the target numba compiles for.

    They are the host's unless NUMBA_CPU_NAME/NUMBA_CPU_FEATURES name another (AVX2 code timed on
    an AVX-512 machine); the model stays the host's.
    """
    name, feats = os.environ.get("NUMBA_CPU_NAME"), os.environ.get("NUMBA_CPU_FEATURES")
    if not name or name == "host" or feats is None:
        return cpu
    on = {f[1:] for f in feats.split(",") if f.startswith("+")}
    isa = next((label for flag, label in (("avx512f", "avx512"), ("avx2", "avx2"), ("avx", "avx"),
                                          ("sse4.2", "sse4.2")) if flag in on), "unknown")
    return {**cpu, "llvm_cpu": name, "vector_isa": isa, "host_llvm_cpu": cpu["llvm_cpu"],
            "host_vector_isa": cpu["vector_isa"]}


def median_time(fn, repeat: int) -> tuple[float, float]:
    """Median wall-clock seconds and median CPU seconds of this process for ``fn()``."""
    times, cpu = [], []
    for _ in range(repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(times), statistics.median(cpu)


def numpy_naive_mc(n: int, batch: int = 1 << 22) -> int:
    rng = np.random.default_rng(1)
    hits = 0
    for lo in range(0, n, batch):
        xy = rng.random((2, min(batch, n - lo)))
        hits += int(np.count_nonzero(xy[0] * xy[0] + xy[1] * xy[1] < 1.0))
    return hits


def pure_python_trapezoid(n: int) -> float:
    h = 1.0 / n
    s = 3.0
    for i in range(1, n):
        x = i * h
        s += 4.0 / (1.0 + x * x)
    return s * h


def numpy_trapezoid(n: int, batch: int = 1 << 22) -> float:
    h = 1.0 / n
    s = 3.0
    for lo in range(1, n, batch):
        x = np.arange(lo, min(lo + batch, n), dtype=np.float64) * h
        s += float(np.sum(4.0 / (1.0 + x * x)))
    return s * h


def mpiexec() -> list[str]:
    exe = str(BIN / "mpiexec") if (BIN / "mpiexec").exists() else shutil.which("mpiexec")
    return [exe]


def walls(commands: dict[str, list[str]], repeat: int) -> dict[str, float]:
    """Median wall time of each command, the commands interleaved so that load hits all alike."""
    times: dict[str, list[float]] = {k: [] for k in commands}
    for _ in range(repeat):
        for name, argv in commands.items():
            t0 = time.perf_counter()
            subprocess.run(argv, check=True, capture_output=True, timeout=900)
            times[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def json_run(argv: list[str]) -> dict:
    out = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=1800).stdout
    return json.loads(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None, help="JSON file [results/pi-<vector ISA>.json]")
    args = ap.parse_args()
    q = args.quick
    rep = 2 if q else args.repeat
    load_before = os.getloadavg()

    from pympi_gpu.device import jitcache

    simd = jitcache.tune_cpu()
    jitcache.configure()  # as the command line does: cache and CPU tuning, before numba loads
    cpu = compiled_for(jitcache.host_cpu())
    import numba

    from pympi_gpu.pi import grid
    from pympi_gpu.pi.kernels_cpu import NumbaKernels, _mc_count, count_scalar, _mc_count_vector
    from pympi_gpu.pi.kernels_numpy import NumpyKernels
    from pympi_gpu.rng import seed_key

    numba.set_num_threads(1)
    nk, npk = NumbaKernels(), NumpyKernels()
    nk.warmup()
    key = seed_key(1)
    rows = []

    def row(kind, impl, n, times, note=""):
        seconds, cpu_seconds = times
        rows.append({"kernel": kind, "implementation": impl, "n": n, "seconds": seconds,
                     "per_core_per_s": n / seconds, "cpu_seconds": cpu_seconds,
                     "per_cpu_second": n / cpu_seconds if cpu_seconds > 0 else None, "note": note})

    import pi_kernels_v1 as v1  # the kernels before issue 10: the SplitMix64 stream
    import pi_splitmix  # the Monte Carlo kernel before issue 52: the same stream, faster
    import pi_trapezoid_float  # the trapezoid kernel before issue 60: float chunk sums

    from pympi_gpu.pi import mc_simd

    n_mc = 10**7 if q else 4 * 10**8
    assert int(v1.mc_count(key, np.int64(0), np.int64(10**5))) == int(pi_splitmix.mc_count(key, np.int64(0),
                                                                                           np.int64(10**5)))
    assert int(_mc_count_vector(key, np.int64(3), np.int64(10**5))) == npk.mc_hits(key, 3, 10**5)
    # Both forms of the kernel, the one pympi uses (kernels_cpu._mc_count) first.
    forms = {f"explicit vector code, {mc_simd.LANES} x {mc_simd.CHAINS} lanes": _mc_count_vector,
             "the definition, one sample at a time": count_scalar}
    used = next(name for name, form in forms.items() if form is _mc_count)
    row("monte carlo", "pympi numba (1 thread)", n_mc, median_time(lambda: nk.mc_hits(key, 0, n_mc), rep),
        note=used)
    other = next(name for name in forms if name != used)
    n_other = n_mc // 10
    row("monte carlo", f"{other} (1 thread)", n_other,
        median_time(lambda: forms[other](key, np.int64(0), np.int64(n_other)), rep), note="not used here")
    row("monte carlo", "SplitMix64 stream before issue 52 (1 thread)", n_mc,
        median_time(lambda: pi_splitmix.mc_count(key, np.int64(0), np.int64(n_mc)), rep),
        note="other hit counts")
    row("monte carlo", "previous numba kernel (1 thread)", n_mc,
        median_time(lambda: v1.mc_count(key, np.int64(0), np.int64(n_mc)), rep), note="before issue 10")
    n = 10**6 if q else 2 * 10**7
    row("monte carlo", "pympi NumPy (--backend numpy)", n, median_time(lambda: npk.mc_hits(key, 0, n), rep))
    row("monte carlo", "NumPy default_rng", n, median_time(lambda: numpy_naive_mc(n), rep))
    n = 10**5 if q else 2 * 10**6
    row("monte carlo", "pure Python loop", n, median_time(lambda: pure_python_mc(n), rep))

    n_tr = 10**7 if q else 10**9
    row("trapezoid", "pympi numba (1 thread)", n_tr,
        median_time(lambda: nk.trapezoid_chunks(n_tr, 0, grid.n_chunks(n_tr)), rep))
    csize = grid.chunk_size(n_tr)
    row("trapezoid", "float chunk sums before issue 60 (1 thread)", n_tr,
        median_time(lambda: pi_trapezoid_float.trapezoid_chunks(n_tr, 0, grid.n_chunks(n_tr), csize), rep),
        note="fastmath; its last bits the vector width's")
    row("trapezoid", "previous numba kernel (1 thread)", n_tr,
        median_time(lambda: v1.trapezoid_chunks(n_tr, 0, grid.n_chunks(n_tr), csize), rep))
    n = 10**6 if q else 5 * 10**7
    row("trapezoid", "pympi NumPy (--backend numpy)", n,
        median_time(lambda: npk.trapezoid_chunks(n, 0, grid.n_chunks(n)), rep))
    row("trapezoid", "NumPy vectorised", n, median_time(lambda: numpy_trapezoid(n), rep))
    n = 10**5 if q else 2 * 10**6
    row("trapezoid", "pure Python loop", n, median_time(lambda: pure_python_trapezoid(n), rep))

    n_err = 10**8
    est = grid.estimate(n_err, sum(nk.trapezoid_chunks(n_err, 0, grid.n_chunks(n_err)).tolist()))
    accuracy = {"intervals": n_err, "estimate": est, "error": est - math.pi,
                "ulps": (est - math.pi) / math.ulp(math.pi)}

    def rate(kind, impl):
        return next(r["per_core_per_s"] for r in rows if r["kernel"] == kind and r["implementation"] == impl)

    ratios = {
        "mc_numba_over_splitmix": rate("monte carlo", "pympi numba (1 thread)") / rate("monte carlo", "SplitMix64 stream before issue 52 (1 thread)"),
        "mc_numba_over_previous": rate("monte carlo", "pympi numba (1 thread)") / rate("monte carlo", "previous numba kernel (1 thread)"),
        "mc_used_over_other_form": rate("monte carlo", "pympi numba (1 thread)") / rate("monte carlo", f"{other} (1 thread)"),
        "trap_numba_over_previous": rate("trapezoid", "pympi numba (1 thread)") / rate("trapezoid", "previous numba kernel (1 thread)"),
        "trap_numba_over_float_sums": rate("trapezoid", "pympi numba (1 thread)") / rate("trapezoid", "float chunk sums before issue 60 (1 thread)"),
        "mc_numpy_over_pure_python": rate("monte carlo", "pympi NumPy (--backend numpy)") / rate("monte carlo", "pure Python loop"),
        "mc_numba_over_pure_python": rate("monte carlo", "pympi numba (1 thread)") / rate("monte carlo", "pure Python loop"),
        "mc_numba_over_numpy": rate("monte carlo", "pympi numba (1 thread)") / rate("monte carlo", "NumPy default_rng"),
        "trap_numba_over_numpy": rate("trapezoid", "pympi numba (1 thread)") / rate("trapezoid", "NumPy vectorised"),
        "trap_numba_over_pure_python": rate("trapezoid", "pympi numba (1 thread)") / rate("trapezoid", "pure Python loop"),
    }

    # End to end, warm cache: the first runs below fill numba's cache.
    e2e_n = "1e6" if q else "1e7"
    pympi = mpiexec() + ["-n", "2", str(BIN / "pympi-pi"), e2e_n]
    commands = {"pympi_pi_s": pympi, "pympi_pi_numba_s": pympi + ["--backend", "numba"],
                "pure_python_s": mpiexec() + ["-n", "2", sys.executable,
                                              str(HERE / "baselines" / "pi_pure_python.py"), e2e_n]}
    chosen = json_run(pympi + ["--json"])
    json_run(commands["pympi_pi_numba_s"] + ["--json"])
    end_to_end = {"samples": float(e2e_n), **walls(commands, rep),
                  "auto_backend": chosen["backend"], "auto_reason": chosen.get("backend_reason")}
    end_to_end["ratio"] = end_to_end["pympi_pi_s"] / end_to_end["pure_python_s"]
    end_to_end["ratio_numba"] = end_to_end["pympi_pi_numba_s"] / end_to_end["pure_python_s"]

    # Strong scaling 1 -> 2 ranks, one thread per rank, Monte Carlo only.
    s_n = "1e8" if q else "2e9"
    t = {}
    for ranks in (1, 2):
        docs = [json_run(mpiexec() + ["-n", str(ranks), str(BIN / "pympi-pi"), s_n, "--json", "--threads", "1",
                                      "--backend", "numba"])
                for _ in range(max(1, rep // 2 + 1))]
        t[ranks] = statistics.median(d["results"][0]["wall_time"] for d in docs)
    scaling = {"samples": float(s_n), "t1_s": t[1], "t2_s": t[2], "speedup": t[1] / t[2],
               "efficiency": t[1] / (2 * t[2])}

    gpu = None
    from pympi_gpu.device.gpu import gpu_usable

    ok, why = gpu_usable()
    if ok:
        from numba import cuda

        from pympi_gpu.pi.kernels_cuda import CudaKernels

        ck = CudaKernels()
        ck.warmup()
        n_gpu = 10**10 if q else 10**12
        secs = median_time(lambda: ck.mc_hits(key, 0, n_gpu), 3)[0]
        name = cuda.get_current_device().name  # bytes in older numba-cuda, str in current
        gpu = {"device": name.decode() if isinstance(name, bytes) else str(name), "samples": n_gpu,
               "seconds": secs, "samples_per_s": n_gpu / secs}
    else:
        gpu = {"skipped": why}

    result = {
        "benchmark": "pi", "quick": q, "repeat": rep,
        "machine": {"node": platform.node(), "cpu": cpu["model"], "llvm_cpu": cpu["llvm_cpu"],
                    "vector_isa": cpu["vector_isa"], "simd_tuning": simd, "cores": os.cpu_count(),
                    "load_average_before": load_before, "load_average_after": os.getloadavg(),
                    "python": platform.python_version(), "numba": numba.__version__, "numpy": np.__version__},
        "kernels": rows, "ratios": ratios, "trapezoid_accuracy": accuracy,
        "end_to_end": end_to_end, "strong_scaling_2_ranks": scaling, "gpu": gpu,
    }
    out = args.out or HERE / "results" / f"pi-{cpu['vector_isa']}{'-quick' if q else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    _print(result)
    print(f"\nJSON written to {out}")


def _print(res: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console()
    tab = Table(title="pi kernels, per core (median)")
    for col in ("kernel", "implementation", "n", "seconds", "items/s per core", "items per CPU-s"):
        tab.add_column(col, justify="left" if col in ("kernel", "implementation") else "right")
    for r in res["kernels"]:
        impl = r["implementation"] + (f" ({r['note']})" if r["note"] else "")
        tab.add_row(r["kernel"], impl, f"{r['n']:.3g}", f"{r['seconds']:.4f}",
                    f"{r['per_core_per_s']:.3e}", f"{r['per_cpu_second']:.3e}" if r["per_cpu_second"] else "-")
    m = res["machine"]
    con.print(f"{m['cpu']} ({m['llvm_cpu']}, {m['vector_isa']}), {m['cores']} cores, load average "
              f"{m['load_average_before'][0]:.2f} before, {m['load_average_after'][0]:.2f} after")
    con.print(tab)
    for k, v in res["ratios"].items():
        con.print(f"{k:32s} {v:10.1f}x")
    a = res["trapezoid_accuracy"]
    con.print(f"trapezoid at {a['intervals']:.0e} intervals: error {a['error']:+.3e} ({a['ulps']:+.2f} ulp of pi)")
    e = res["end_to_end"]
    con.print(f"mpiexec -n 2 pympi-pi {e['samples']:.0e}: {e['pympi_pi_s']:.3f} s (auto: {e['auto_backend']}), "
              f"--backend numba {e['pympi_pi_numba_s']:.3f} s, pure Python {e['pure_python_s']:.3f} s "
              f"-> {e['ratio']:.3f}x (numba {e['ratio_numba']:.3f}x)")
    s = res["strong_scaling_2_ranks"]
    con.print(f"strong scaling at {s['samples']:.0e}: 1 rank {s['t1_s']:.3f} s, 2 ranks {s['t2_s']:.3f} s, "
              f"speedup {s['speedup']:.2f}, efficiency {100 * s['efficiency']:.1f}%")
    con.print(f"GPU: {res['gpu']}", markup=False)  # a driver message may hold [brackets]


if __name__ == "__main__":
    main()
