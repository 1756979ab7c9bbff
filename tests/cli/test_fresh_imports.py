"""What importing a module loads, seen from a fresh interpreter (this one has loaded everything already)."""


# ------------------------------------------------------------------ the Monte Carlo stream of pi


def test_importing_rng_loads_no_numba():
    code = "import sys; import pympi_gpu.rng; assert 'numba' not in sys.modules"
    import subprocess
    import sys

    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# ------------------------------------------------------------------ the test run's children

def test_a_child_of_the_test_run_has_numba_without_scipys_blas_and_scipy_all_the_same():
    """tests/data/cudasim/numba_blas_probe.py: numba's BLAS probe finds no scipy (as in an install without the
    test extra, 0.3 s of CPU saved a process), every other import of scipy does; PYMPI_TEST_SCIPY_BLAS=1 undoes
    it."""
    import subprocess
    import sys

    code = ("import numba.np.arraymath as a, scipy.linalg, scipy.stats; "
            "print(a._HAVE_BLAS, scipy.linalg.cython_blas is not None)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.split() == ["False", "True"], out.stderr
    import os

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYMPI_TEST_SCIPY_BLAS": "1"})
    assert out.stdout.split() == ["True", "True"], out.stderr
