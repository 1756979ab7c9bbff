"""A kernel that makes MPI calls is cached per MPI library.

Its code declares the loaded library's handle types (MPICH's ints, Open MPI's pointers), and one
source tree, so one numba cache, serves several MPIs: the MPI matrix's venvs share this checkout,
a cluster user swaps modules.  An entry compiled under Open MPI and loaded under MPICH passed
pointer-wide handles to MPICH and crashed the first step (a segmentation fault in the force phase,
seen after the matrix had run).  Each such kernel's cache key must change with the library.
"""

from __future__ import annotations

import pytest
from numba import types

from pympi_gpu.mpi import numba_calls
from pympi_gpu.nbody.lj.cpu import kernels as kc
from pympi_gpu.nbody.lj.cpu import rebuild as rebuild_cpu
from pympi_gpu.nbody.lj.cpu import steps as steps_cpu


def _mpi_kernels():
    from pympi_gpu.nbody.lj.config import LjConfig

    forces = kc.force_kernels(LjConfig(cells=3).pair_term)
    return {"run_ops": forces.run_ops, "rebuild_brick": rebuild_cpu.rebuild_brick,
            "run_steps": steps_cpu.kernel(forces)}


@pytest.mark.parametrize("name", ["run_ops", "rebuild_brick", "run_steps"])
def test_each_kernel_making_mpi_calls_is_cached_per_library(name, monkeypatch):
    kernel = _mpi_kernels()[name]
    codegen = kernel.targetctx.codegen()
    sig = (types.int64,)

    def key(width: int, version: str):
        monkeypatch.setattr(numba_calls, "handle_width", lambda: width)
        monkeypatch.setattr(numba_calls, "library_version", lambda: version)
        return kernel._cache._index_key(sig, codegen)

    mpich, openmpi = key(4, "MPICH Version: 4.3.0"), key(8, "Open MPI v5.0.8")
    assert mpich != openmpi
    assert key(4, "MPICH Version: 4.3.0") == mpich  # (and the same library, the same entry)
    assert key(4, "Intel(R) MPI Library 2021.16 for Linux* OS") != mpich


def test_the_library_key_names_the_loaded_library():
    from mpi4py import MPI

    width, first = numba_calls.library_key()[1:]
    assert width == MPI._sizeof(MPI.Comm) and first == MPI.Get_library_version().splitlines()[0].strip()
