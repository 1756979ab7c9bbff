"""The CPU kernels compiled for another x86-64 than this one, in a fresh process that names numba's
target (``NUMBA_CPU_NAME``) and has a numba cache of its own: they compile there, take the narrower
vectors, and count what they count here."""

from helpers.commands import ROOT, clean_env, run
from pympi_gpu.rng import count_hits_numpy, seed_key

#: the LJ model's serial tests, run again for the other CPU
LJ_MODEL = ROOT / "tests" / "unit" / "test_lj_model.py"


def test_mc_narrow_layout_counts_the_same():
    """The AVX2 layout of mc_simd (4 x 4 lanes, numba compiling for Haswell) counts as NumPy does."""
    import json
    import subprocess
    import sys
    import tempfile

    code = ("import json, numpy as np; from pympi_gpu.pi import mc_simd, kernels_cpu as k; "
            "from pympi_gpu.rng import seed_key; key = seed_key(21); "
            "print(json.dumps([mc_simd.LANES, mc_simd.CHAINS] + [int(k._mc_count_vector(key, np.int64(s), "
            "np.int64(n))) for s, n in ((0, 40000), (777, 123457))]))")
    feats = ("+64bit,+avx,+avx2,+bmi,+bmi2,+cmov,+cx16,+f16c,+fma,+lzcnt,+movbe,+popcnt,+sse,+sse2,+sse3,"
             "+sse4.1,+sse4.2,+ssse3,+xsave,-avx512f,-avx512bw,-avx512cd,-avx512dq,-avx512vl")
    with tempfile.TemporaryDirectory() as cache:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                             env=clean_env(NUMBA_CPU_NAME="haswell", NUMBA_CPU_FEATURES=feats,
                                           NUMBA_CACHE_DIR=cache))
    assert out.returncode == 0, out.stderr
    lanes, chains, *hits = json.loads(out.stdout.splitlines()[-1])
    assert (lanes, chains) == (4, 4)
    key = seed_key(21)
    assert hits == [count_hits_numpy(key, 0, 40000), count_hits_numpy(key, 777, 123457)]


def test_serial_lists_without_avx512_compress(tmp_path):
    """Where numba compiles for a CPU named without features (``NUMBA_CPU_NAME=generic``: an image
    built for any x86-64) the scan takes four candidates at a time (SSE2's vectors), and the module,
    its 16- and 8-lane code included, still compiles there: the rows are still the parallel build's,
    row for row (tests/unit/test_lj_model.py's, run again in a process compiling for that CPU, with a
    cache of its own)."""
    import sys

    env = clean_env(NUMBA_CPU_NAME="generic", NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    env.pop("NUMBA_CPU_FEATURES", None)
    probe = run([sys.executable, "-c", "from pympi_gpu.nbody.lj.cpu import lists as m; print(m.SIMD)"],
                env=env, cwd=ROOT)
    assert probe.stdout.split() == ["4"], probe.stderr
    out = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"{LJ_MODEL}::"
               "test_serial_lists_equal_the_parallel_build_row_for_row", f"{LJ_MODEL}::"
               "test_serial_lists_decide_a_hair_from_either_radius_in_double"], env=env, cwd=ROOT, timeout=600)
    assert out.returncode == 0 and "42 passed" in out.stdout, out.stdout[-3000:] + out.stderr[-3000:]
