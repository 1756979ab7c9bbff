"""What the first run on a real GPU (an H200 image: numba 0.68.0, numba-cuda 0.30.4, NumPy 2.5.2) taught.

Three faults stopped every GPU path there and passed under the simulator: numba's built-in CUDA
target typing the kernels (numba-cuda's ``.pth`` redirect skipped), numba-cuda reading the
``np.row_stack`` NumPy 2.5 removed, and the low-occupancy warning, which the package means to
silence, printed once per grid size.  Each is checked here without a GPU; the GPU run itself is
``benchmarks/gpu_acceptance.py`` (benchmarks/results/gpu-acceptance-nvidia-h200.json).
"""

from __future__ import annotations

import re
import subprocess
import sys
import types
import warnings

import numpy as np
import pytest

from helpers.commands import ROOT
from pympi_gpu.device import gpu
from pympi_gpu.nbody.lj.config import half_lists


def test_numbas_builtin_cuda_target_is_refused_with_the_cure(monkeypatch):
    import numba

    fake = types.SimpleNamespace(implementation="Built-in", is_available=lambda: True, gpus=[object()])
    monkeypatch.setattr(gpu, "simulator", lambda: False)
    monkeypatch.setattr(gpu, "_driver_present", lambda: True)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setitem(sys.modules, "numba.cuda", fake)
    monkeypatch.setattr(numba, "cuda", fake, raising=False)
    ok, why = gpu.gpu_usable()
    assert not ok and "built-in CUDA target" in why and "pip install numba-cuda" in why
    monkeypatch.setattr(fake, "implementation", "NVIDIA")  # numba-cuda's: usable
    assert gpu.gpu_usable() == (True, "1 CUDA device(s) visible")


def test_row_stack_given_back_where_numpy_removed_it():
    # a process of its own: the alias is set at import, and this one has imported the module already
    code = ("import numpy as np\n"
            "had = hasattr(np, 'row_stack')\n"
            "if had: del np.row_stack\n"
            "import pympi_gpu.device.buffers\n"
            "assert np.row_stack is np.vstack or had\n"
            "print(np.row_stack((np.zeros(2), np.ones(2))).tolist())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[[0.0, 0.0], [1.0, 1.0]]"


@pytest.mark.parametrize("text", [
    "Grid size 1 will likely result in GPU under-utilization due to low occupancy.",
    # numba-cuda's own words, as the H200 printed them: a terminal's bold first
    "\x1b[1mGrid size 7 will likely result in GPU under-utilization due to low occupancy.\x1b[0m",
])
# (with colorama installed, as on the GPU image, numba's own highlighting adds a second bold around the
# message when the warning is made: the filter sees "ESC[1mESC[1mGrid size ...")
def test_the_small_grid_warning_is_silenced_in_both_spellings(text):
    from numba.core.errors import NumbaPerformanceWarning

    from pympi_gpu.device.buffers import SMALL_GRID_WARNING, quiet_small_grids

    assert re.match(SMALL_GRID_WARNING, text)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        quiet_small_grids()
        warnings.warn(NumbaPerformanceWarning(text))
        warnings.warn(NumbaPerformanceWarning("\x1b[1mHost array used in CUDA kernel\x1b[0m"))
    assert [re.sub(r"\x1b\[\d+m", "", str(w.message)) for w in seen] == ["Host array used in CUDA kernel"]


@pytest.mark.parametrize("gpu_run, threads, expected", [
    (False, 1, True),    # CPU, a thread per rank: half lists
    (False, 4, False),   # CPU threads write only their own atoms
    (True, 1, False),    # GPU: full lists, at every size (below)
    (True, 16, False),
])
def test_list_kind_by_backend(gpu_run, threads, expected):
    assert half_lists(gpu_run, threads) is expected


def test_full_lists_measured_faster_on_the_gpu():
    """The GPU's default stands on the H100's figures at 1,000,188 atoms (benchmarks/lj.py --mode gpu-profile,
    every kernel compiled before the clock) and the H200's at 32,000: full lists faster at both."""
    import json

    results = ROOT / "benchmarks" / "results"
    large = json.loads((results / "gpu-h100" / "lj-lists-1000188.json").read_text())
    assert large["atoms"] == 1_000_188 and large["faster"] == "full"
    assert large["lists"]["full"]["rate"] > large["lists"]["half"]["rate"] > 0
    small = json.loads((results / "gpu-acceptance-nvidia-h200.json").read_text())["lists"]["32000"]
    assert small["full"] > small["half"] > 0
