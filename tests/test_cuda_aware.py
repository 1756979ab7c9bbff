"""CUDA-aware MPI detection: the environment switches, and the real query on the PyPI MPICH."""

import pytest

from pympi_gpu.cuda_aware import detect, loaded_mpi_libraries

MPICH = "MPICH Version:      4.2.0\nMPICH Release date: ..."
OMPI = "Open MPI v5.0.3, package: Open MPI ..."
MV2 = "MVAPICH2 Version      :\t2.3.7"
IMPI = "Intel(R) MPI Library 2019 Update 7 for Linux* OS"


@pytest.mark.parametrize("value, expected", [("1", True), ("yes", True), ("0", False), ("off", False)])
def test_forced(value, expected):
    got = detect({"PYMPI_CUDA_AWARE": value}, library_version=MPICH)
    assert got.supported is expected and got.method == "PYMPI_CUDA_AWARE"


def test_mpich_switch_off():
    got = detect({"MPIR_CVAR_ENABLE_GPU": "0"}, library_version=MPICH)
    assert got.supported is False and got.method == "MPIR_CVAR_ENABLE_GPU"


def test_switches_without_query(monkeypatch):
    import pympi_gpu.cuda_aware as ca

    monkeypatch.setattr(ca, "_query_symbol", lambda: None)
    monkeypatch.setattr(ca, "_ompi_info", lambda: None)
    assert detect({"MV2_USE_CUDA": "1"}, library_version=MV2).supported is True
    assert detect({}, library_version=MV2).supported is False
    assert detect({"I_MPI_OFFLOAD": "1"}, library_version=IMPI).supported is True
    assert detect({}, library_version=IMPI).method == "I_MPI_OFFLOAD"
    unknown = detect({}, library_version=OMPI)
    assert unknown.supported is None and unknown.method == "none"


def test_real_query_on_loaded_mpi():
    """The PyPI MPICH exports MPIX_Query_cuda_support and is built without CUDA."""
    from mpi4py import MPI

    assert MPI.Is_initialized()
    assert loaded_mpi_libraries(), "libmpi should be mapped after MPI init"
    got = detect({})
    if "MPICH" in MPI.Get_library_version():
        assert got.method == "MPIX_Query_cuda_support"
        assert got.supported is False
