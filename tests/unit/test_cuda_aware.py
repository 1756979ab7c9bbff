"""CUDA-aware MPI detection: the environment switches, and the real query on the PyPI MPICH."""

import pytest

from pympi_gpu.mpi.cuda_aware import detect, loaded_mpi_libraries

MPICH = "MPICH Version:      4.2.0\nMPICH Release date: ..."
OMPI = "Open MPI v5.0.3, package: Open MPI ..."
MV2 = "MVAPICH2 Version      :\t2.3.7"
IMPI = "Intel(R) MPI Library 2019 Update 7 for Linux* OS"


@pytest.mark.parametrize("value, expected", [("1", True), ("yes", True), ("0", False), ("off", False),
                                             ("", None), ("maybe", None)])
def test_forced(value, expected):
    from pympi_gpu.cli.settings import cuda_aware

    assert cuda_aware({"PYMPI_CUDA_AWARE": value}) is expected  # the command line reads it
    got = detect({}, library_version=MPICH, forced=cuda_aware({"PYMPI_CUDA_AWARE": value}))
    if expected is not None:
        assert got.supported is expected and got.method == "PYMPI_CUDA_AWARE"
    else:
        assert got.method != "PYMPI_CUDA_AWARE"


def test_mpich_switch_off():
    got = detect({"MPIR_CVAR_ENABLE_GPU": "0"}, library_version=MPICH)
    assert got.supported is False and got.method == "MPIR_CVAR_ENABLE_GPU"


def test_switches_without_query(monkeypatch):
    import pympi_gpu.mpi.cuda_aware as ca

    monkeypatch.setattr(ca, "_query_symbol", lambda: None)
    monkeypatch.setattr(ca, "_ompi_info", lambda: None)
    assert detect({"MV2_USE_CUDA": "1"}, library_version=MV2).supported is True
    assert detect({}, library_version=MV2).supported is False
    impi_new = "Intel(R) MPI Library 2021.12 for Linux* OS"
    assert detect({"I_MPI_OFFLOAD": "1"}, library_version=impi_new).supported is True
    assert detect({}, library_version=impi_new).method == "I_MPI_OFFLOAD"
    assert detect({"I_MPI_OFFLOAD": "1"}, library_version=IMPI).supported is False  # 2019: never
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


# ------------------------------------------------------------------ Intel MPI: version and switch

IMPI_2021_19 = "Intel(R) MPI Library 2021.19.0 for Linux* OS\n"  # as the impi-rt 2021.19 wheel says


@pytest.mark.parametrize("text, expected", [
    (IMPI_2021_19, (2021, 19)),
    ("Intel(R) MPI Library 2021.12 for Linux* OS", (2021, 12)),
    ("Intel(R) MPI Library 2021.11.1 for Linux* OS", (2021, 11)),
    (IMPI, (2019, 7)),
    ("Intel(R) MPI Library 2019 for Linux* OS", (2019, 0)),
    (MPICH, None),
])
def test_intel_mpi_version(text, expected):
    from pympi_gpu.mpi.cuda_aware import intel_mpi_version

    assert intel_mpi_version(text) == expected


@pytest.mark.parametrize("version, env, expected", [
    ("2019 Update 7", {"I_MPI_OFFLOAD": "1"}, False),          # TACC's impi 19: never
    ("2021.11", {"I_MPI_OFFLOAD": "1"}, False),                # 2021 before .12: Level Zero only
    ("2021.12", {}, False),                                    # new enough, switch not set
    ("2021.12", {"I_MPI_OFFLOAD": "0"}, False),
    ("2021.12", {"I_MPI_OFFLOAD": "1"}, True),
    ("2021.19.0", {"I_MPI_OFFLOAD": "2"}, True),               # 2021.9's "enabled" value
    ("2021.19.0", {"I_MPI_OFFLOAD": "1", "I_MPI_OFFLOAD_MODE": "level_zero"}, False),
    ("2021.19.0", {"I_MPI_OFFLOAD": "1", "I_MPI_OFFLOAD_MODE": "cuda"}, True),
])
def test_intel_mpi_needs_2021_12_and_offload(monkeypatch, version, env, expected):
    import pympi_gpu.mpi.cuda_aware as ca

    monkeypatch.setattr(ca, "_query_symbol", lambda: None)
    got = detect(env, library_version=f"Intel(R) MPI Library {version} for Linux* OS")
    assert got.supported is expected, got


def test_intel_mpi_query_answers_once_switched_on(monkeypatch):
    """With the switch on, the library's own MPIX answer (for this run) decides."""
    import pympi_gpu.mpi.cuda_aware as ca

    monkeypatch.setattr(ca, "_query_symbol", lambda: ca.CudaAwareness(False, "MPIX_Query_cuda_support",
                                                                      "libmpi.so.12 returned 0"))
    got = detect({"I_MPI_OFFLOAD": "1"}, library_version=IMPI_2021_19)
    assert got.supported is False and "returned 0" in got.detail and "2021.19" in got.detail
    # and below 2021.12 the query is not even asked
    monkeypatch.setattr(ca, "_query_symbol", lambda: pytest.fail("asked MPIX on Intel MPI 2019"))
    assert detect({"I_MPI_OFFLOAD": "1"}, library_version=IMPI).supported is False


# ------------------------------------------------------------------ one verdict for all ranks

class _Ranks:
    """Stands for a communicator in a pure test of the combining rule only (the
    collective itself runs under mpiexec in tests/gpu/test_nbody_gpu.py)."""

    def __init__(self, verdicts):
        self.verdicts = verdicts

    def allgather(self, mine):
        return [(v.supported, v.method, v.detail) for v in self.verdicts]


def _v(supported, detail="d"):
    from pympi_gpu.mpi.cuda_aware import CudaAwareness

    return CudaAwareness(supported, "m", detail)


@pytest.mark.parametrize("verdicts, expected, rank", [
    ([True, True, True], True, None),
    ([True, False, None], False, 1),       # a no anywhere wins
    ([True, None, True], None, 1),         # then an unknown
    ([None, True, False], False, 2),
])
def test_agree(verdicts, expected, rank):
    from pympi_gpu.mpi.cuda_aware import agree

    got = agree(_Ranks([_v(s, f"on {i}") for i, s in enumerate(verdicts)]), _v(verdicts[0], "on 0"))
    assert got.supported is expected
    if rank is not None:
        assert got.detail == f"rank {rank}: on {rank}"


# ------------------------------------------------------------------ which transport

@pytest.mark.parametrize("supported", [False, None])
def test_device_transport_refused_without_a_yes(supported):
    from pympi_gpu.mpi.cuda_aware import choose_transport

    with pytest.raises(ValueError, match="--transport device: .*PYMPI_CUDA_AWARE=1") as err:
        choose_transport("device", True, _v(supported, "libmpi.so.12 returned 0"))
    assert ("is not CUDA-aware" in str(err.value)) is (supported is False)
    with pytest.raises(ValueError, match="--transport device"):
        choose_transport("device", True, None)


def test_device_transport_with_a_yes_and_auto_rules():
    from pympi_gpu.mpi.cuda_aware import CudaAwareness
    from pympi_gpu.mpi.cuda_aware import choose_transport

    yes = CudaAwareness(True, "MPIX_Query_cuda_support", "libmpi.so.40 returned 1")
    assert choose_transport("device", True, yes)[0] == "device"
    assert choose_transport("auto", True, yes)[0] == "device"
    assert choose_transport("auto", True, _v(None))[0] == "host"
    assert choose_transport("auto", True, _v(False))[0] == "host"
    assert choose_transport("host", True, yes)[0] == "host"
    forced = detect({}, library_version=MPICH, forced=True)
    assert forced.forced and choose_transport("device", True, forced)[0] == "device"


# ------------------------------------------------------------------ the GPU before MPI_Init

@pytest.mark.parametrize("env, expected", [
    ({}, None),
    ({"SLURM_LOCALID": "3"}, (3, "SLURM_LOCALID")),
    # a batch script's mpirun: every child inherits the batch step's SLURM_LOCALID=0
    ({"SLURM_LOCALID": "0", "OMPI_COMM_WORLD_LOCAL_RANK": "2"}, (2, "OMPI_COMM_WORLD_LOCAL_RANK")),
    ({"SLURM_LOCALID": "0", "MPI_LOCALRANKID": "5"}, (5, "MPI_LOCALRANKID")),        # hydra, ibrun
    ({"SLURM_LOCALID": "0", "MV2_COMM_WORLD_LOCAL_RANK": "1"}, (1, "MV2_COMM_WORLD_LOCAL_RANK")),
    ({"PMI_LOCAL_RANK": "4", "SLURM_LOCALID": "0"}, (4, "PMI_LOCAL_RANK")),
    ({"PALS_LOCAL_RANKID": "7", "PMI_LOCAL_RANK": "1"}, (7, "PALS_LOCAL_RANKID")),
    ({"OMPI_COMM_WORLD_LOCAL_RANK": "1", "MPI_LOCALRANKID": "0"}, (1, "OMPI_COMM_WORLD_LOCAL_RANK")),
    ({"OMPI_COMM_WORLD_LOCAL_RANK": "", "MPI_LOCALRANKID": "x", "SLURM_LOCALID": " 2 "}, (2, "SLURM_LOCALID")),
])
def test_local_rank_precedence(env, expected):
    from pympi_gpu.device.gpu import local_rank_from_env

    assert local_rank_from_env(env) == expected
