"""One parser of MPI version texts (pympi_gpu.mpi.library), used alike by provenance, pympi-info,
the launcher and the CUDA-awareness check."""

from __future__ import annotations

import pytest

from pympi_gpu.mpi.cuda_aware import detect
from pympi_gpu.mpi.library import library_name, vendor_of_text

#: an MPICH built with Intel's oneAPI compilers: "Intel" appears, but it is MPICH
MPICH_ICX = ("MPICH Version:      4.1.2\nMPICH Release date: Wed Jun  7 15:22:45 CDT 2023\n"
             "MPICH ABI:          15:0:3\nMPICH Device:       ch4:ofi\n"
             "MPICH configure:    --prefix=/opt/apps/intel23/mpich CC=icx CXX=icpx FC=ifx\n"
             "MPICH CC:           icx -O2 (Intel(R) oneAPI DPC++/C++ Compiler 2023.2.0)\n")

TEXTS = [
    (MPICH_ICX, "mpich"),
    ("MPICH Version:      5.0.2\nMPICH Release date: x", "mpich"),
    ("Intel(R) MPI Library 2021.13 for Linux* OS\n", "intelmpi"),
    ("Intel(R) MPI Library for Linux* OS, Version 2019 Update 9 Build 20200923", "intelmpi"),
    ("MVAPICH2 Version      :\t2.3.7\nMVAPICH2 Release date :\tWed March 02 22:00:00 EST 2022\n"
     "MVAPICH2 Device        :\tch3:mrail\nMVAPICH2 C Compiler    :\ticc (ICC) 19.1.1", "mvapich"),
    ("Open MPI v5.0.6, package: Open MPI root@build Distribution, ident: 5.0.6, repo rev: v5.0.6", "openmpi"),
    ("mpiexec (OpenRTE) 4.1.4\n", "openmpi"),
    ("HYDRA build details:\n    Version: 4.2.0", "mpich"),
    ("Microsoft MPI 10.1", "msmpi"),
    ("something else", None),
]


@pytest.mark.parametrize("text, vendor", TEXTS)
def test_vendor_of_text(text, vendor):
    assert vendor_of_text(text) == vendor


def test_an_mpich_built_with_intel_compilers_is_judged_as_mpich():
    """The CUDA-awareness check reads the vendor from the same parser: MPICH's rules apply, not Intel MPI's."""
    got = detect({"MPIR_CVAR_ENABLE_GPU": "0"}, library_version=MPICH_ICX)
    assert got.supported is False and "MPIR_CVAR_ENABLE_GPU" in got.method


def test_library_name():
    assert library_name(MPICH_ICX) == "MPICH Version: 4.1.2"
    assert library_name("Open MPI v5.0.11, package: Open MPI\x00") == "Open MPI v5.0.11, package: Open MPI"
    assert library_name("") == ""
