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

from pympi_gpu.device import gpu
from pympi_gpu.nbody.lj.config import GPU_HALF_LISTS_FROM, half_lists


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
def test_the_small_grid_warning_is_silenced_in_both_spellings(text):
    from numba.core.errors import NumbaPerformanceWarning

    from pympi_gpu.device.buffers import SMALL_GRID_WARNING, quiet_small_grids

    assert re.match(SMALL_GRID_WARNING, text)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        quiet_small_grids()
        warnings.warn(NumbaPerformanceWarning(text))
        warnings.warn(NumbaPerformanceWarning("\x1b[1mHost array used in CUDA kernel\x1b[0m"))
    assert [str(w.message) for w in seen] == ["\x1b[1mHost array used in CUDA kernel\x1b[0m"]


@pytest.mark.parametrize("gpu_run, atoms, ranks, threads, expected", [
    (False, 500, 2, 1, True),                      # CPU, a thread per rank: half lists
    (False, 4_000_000, 1, 4, False),               # CPU threads write only their own atoms
    (True, 32_000, 1, 16, False),                  # GPU, small: full lists (1.44x on the H200)
    (True, 1_000_188, 1, 16, True),                # GPU, large: half lists (1.90x)
    (True, 1_000_188, 8, 16, False),               # the same system strong-scaled to 125k a rank
    (True, GPU_HALF_LISTS_FROM * 3, 3, 1, True),   # the threshold itself, an odd rank count
])
def test_list_kind_by_backend_and_atoms_per_rank(gpu_run, atoms, ranks, threads, expected):
    assert half_lists(gpu_run, atoms, ranks, threads) is expected


def test_the_threshold_lies_between_the_measured_sizes():
    # the H200's figures it stands on (benchmarks/results/gpu-acceptance-nvidia-h200.json)
    import json
    from pathlib import Path

    doc = json.loads((Path(__file__).resolve().parent.parent / "benchmarks" / "results"
                      / "gpu-acceptance-nvidia-h200.json").read_text())
    lists = doc["lists"]
    small, large = lists["32000"], lists["1000188"]
    assert small["full"] > small["half"] and large["half"] > large["full"]
    assert 32_000 < GPU_HALF_LISTS_FROM < 1_000_188
    assert np.isfinite([small["full"], large["half"]]).all()
