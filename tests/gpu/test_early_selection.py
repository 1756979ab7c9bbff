"""The GPU chosen before MPI_Init (``pympi_gpu.device.gpu.select_before_init``), in a fresh process: on a
machine without a usable GPU none is chosen, and numba.cuda is never imported."""


# ------------------------------------------------------------------ the GPU before MPI_Init


def test_no_early_selection_without_a_usable_gpu():
    """On this CPU machine nothing is selected (and numba.cuda is never imported)."""
    import subprocess
    import sys

    code = ("import sys; from pympi_gpu.device.gpu import select_before_init; "
            "print(select_before_init({'MPI_LOCALRANKID': '0'}), 'numba.cuda' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in __import__("os").environ.items() if k != "NUMBA_ENABLE_CUDASIM"})
    assert out.returncode == 0, out.stderr
    from pympi_gpu.device.gpu import gpu_usable

    if not gpu_usable()[0]:
        assert out.stdout.split()[0] == "None"
