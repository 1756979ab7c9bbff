"""What importing a module loads, seen from a fresh interpreter (this one has loaded everything already)."""


# ------------------------------------------------------------------ the Monte Carlo stream of pi


def test_importing_rng_loads_no_numba():
    code = "import sys; import pympi_gpu.rng; assert 'numba' not in sys.modules"
    import subprocess
    import sys

    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
