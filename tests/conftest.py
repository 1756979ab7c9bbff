"""Shared test fixtures: how to start MPI programs the way users do."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def require_system() -> bool:
    """In CI (PYMPI_REQUIRE_SYSTEM=1) a missing system tool fails instead of skipping."""
    return os.environ.get("PYMPI_REQUIRE_SYSTEM", "0") not in ("", "0")


def need_tool(*names: str) -> None:
    """Skip (developer machine) or fail (CI) when a system tool is missing."""
    missing = [n for n in names if shutil.which(n) is None]
    if missing:
        msg = f"system tool(s) not installed: {', '.join(missing)}"
        if require_system():
            pytest.fail(msg + " (PYMPI_REQUIRE_SYSTEM=1: .ci/setup.d must install them)")
        pytest.skip(msg)


def need_root(why: str) -> None:
    """Skip (developer machine) or fail (CI) when the tests are not run as root."""
    if os.geteuid() != 0:
        if require_system():
            pytest.fail(why)
        pytest.skip(why)


def mpiexec() -> str:
    """The mpiexec of this Python environment (the PyPI MPI), else the one on PATH."""
    for cand in (BIN / "mpiexec", shutil.which("mpiexec")):
        if cand and Path(cand).exists():
            return str(cand)
    pytest.skip("no mpiexec found")


def mpmd(*parts: list[str], ranks=(1, 1), launcher: list[str] | None = None) -> list[str]:
    """``mpiexec -n r0 A : -n r1 B ...``: an MPMD launch, each part with its count of ranks."""
    base = launcher or mpiexec_argv(1)[:-2]
    argv = list(base)
    for i, (n, part) in enumerate(zip(ranks, parts)):
        argv += ([":"] if i else []) + ["-n", str(n), *part]
    return argv


#: PYTHONPATH for a child whose ranks fake their GPU probe: ``env PYMPI_FAKE_GPU=yes|no`` per rank
#: (``tests/data/fake_gpu/sitecustomize.py``: a test double, not in the package)
FAKE_GPU_PATH = str(ROOT / "tests" / "data" / "fake_gpu")

#: on PYTHONPATH for every child of the test run: numba's CUDA simulator, where a child enables it, on a
#: schedule without a polled OS thread per CUDA thread (``tests/data/cudasim/sitecustomize.py``)
SIMULATOR_PATH = str(ROOT / "tests" / "data" / "cudasim")
if SIMULATOR_PATH not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [SIMULATOR_PATH, os.environ.get("PYTHONPATH")]))


def fake_gpus(argv: list[str], answers: str) -> list[str]:
    """An MPMD launch of ``argv`` whose rank k's GPU probe says ``answers.split(",")[k]`` (``yes``/``no``)."""
    said = answers.split(",")
    return mpmd(*([ "env", f"PYMPI_FAKE_GPU={a}", *argv] for a in said), ranks=(1,) * len(said))


def mpiexec_argv(n: int) -> list[str]:
    """argv prefix that starts ``n`` ranks with this environment's MPI."""
    exe = mpiexec()
    out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    argv = [exe, "-n", str(n)]
    if "Open MPI" in out or "OpenRTE" in out:
        argv[1:1] = ["--oversubscribe", "--allow-run-as-root"]
    return argv


def script(name: str) -> str:
    """Path of an installed console script of this environment."""
    path = BIN / name
    return str(path) if path.exists() else name


#: what a launcher (mpiexec, srun, PMI) sets for the ranks it starts: a child run must not inherit it,
#: or its own mpiexec would take itself for a rank of the outer job.  The user's own settings stay:
#: OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM), and OMPI_MCA_* parameters such as plm_rsh_agent, without which
#: Open MPI 4.1 as root on a machine without ssh (the GPU machine) starts nothing.
LAUNCHER_VARS = ("PMI_", "PMIX_", "SLURM_", "MPI_LOCAL", "HYDRA_", "MV2_", "PRTE_", "OMPI_COMM_WORLD_",
                 "OMPI_UNIVERSE_SIZE", "OMPI_FILE_LOCATION", "OMPI_APP_CTX_", "OMPI_FIRST_RANKS",
                 "OMPI_NUM_APP_CTX", "OMPI_ARGV", "OMPI_COMMAND", "OMPI_MCA_orte_", "OMPI_MCA_ess",
                 "OMPI_MCA_pmix", "OMPI_MCA_initial_wdir", "OMPI_MCA_shmem_RUNTIME_QUERY_hint")


def clean_env(**extra: str) -> dict[str, str]:
    """The environment for child runs: launcher variables of an outer job removed (:data:`LAUNCHER_VARS`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_VARS)}
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(extra)
    return env


def refused(out: subprocess.CompletedProcess, match: str) -> None:
    """Bad input refused as the rules say: exit 2, ``match`` said, one ``Error:`` line (rank 0's), no traceback."""
    text = out.stderr + out.stdout
    assert out.returncode == 2, text
    assert match in text, text
    assert "Traceback" not in text
    assert sum(line.startswith("Error:") for line in text.splitlines()) == 1, text  # once, by rank 0


def run(argv: list[str], timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    """Run a command as a user would, with a hard timeout (a hang is a failure)."""
    kw.setdefault("env", clean_env())
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)


@pytest.fixture
def mpirun():
    """``mpirun(n, *argv)`` runs argv over n ranks of this environment's MPI."""
    def _run(n: int, *argv: str, timeout: float = 300, **kw):
        return run(mpiexec_argv(n) + list(argv), timeout=timeout, **kw)
    return _run


#: The tiers that build container images run last.  In CI those images are made in the
#: background meanwhile (``.ci/run`` starts ``tests/system/containers.py prebuild``), and
#: these tests wait only for what is not made yet.
CONTAINER_TIERS = ("test_apptainer.py", "test_containers.py", "test_cuda_image.py")


def pytest_collection_modifyitems(items):
    def tier(item) -> int:  # the others first, in their order; then these, in the prebuild's
        if item.path.parent.name == "system" and item.path.name in CONTAINER_TIERS:
            return 1 + CONTAINER_TIERS.index(item.path.name)
        return 0
    items.sort(key=tier)


# ---------------------------------------------------------------- the quick tier

#: The heavy variants of tests whose lighter variants stay in the quick tier
#: (``python -m pytest -m "not system and not slow"``: docs/testing.md).  Each entry is
#: ``"file::test"``: ``None`` marks every case of the test ``slow``, a dict only the cases
#: whose parameters take those values (a tuple: any of them), a list of dicts the cases any
#: of them matches.  What stays quick still runs
#: every module's own tests: MPI at 3 ranks (the odd split), one transport or exchange where
#: the others take the same path, 1 rank where the many-rank case adds only time.  CI runs
#: everything.  tests/test_tiers.py checks that each entry still names a test.
SLOW = {
    # the tier under the other MPIs, and again at 2 ranks (3 stays quick)
    "test_mpi_matrix.py::test_mpi_suite_under": None,
    "test_mpi_matrix.py::test_sigkill_of_one_rank_ends_the_job_under": None,
    "test_mpi_suite.py::test_mpi_suite": {"ranks": 2},
    "test_mpi_suite.py::test_mpi_suite_under_the_cuda_simulator": {"ranks": 2},
    # inside tests/mpi (test_mpi_suite passes -m "not slow" on when the outer run leaves slow out):
    # the LJ restart and drift runs, and the 6^3 repeats of the 5^3 checks
    "test_lj_mpi.py::test_restart_continues_bit_for_bit": None,  # test_lj_cli's restart stays
    "test_lj_mpi.py::test_atoms_cross_several_bricks": None,  # test_halo_mpi's migrations stay
    "test_lj_mpi.py::test_ranks_agree_with_one_brick": {"cells": 6},
    "test_lj_mpi.py::test_reverse_forces_equal_one_brick": {"cells": 6},
    # faults: each kind stays once
    "test_faults.py::test_bad_input_one_message_exit_2": {"ranks": 2},
    "test_faults.py::test_sigkill_of_one_rank_ends_the_job": {"ranks": 3},
    "test_faults.py::test_bad_checkpoint_is_refused_with_one_message": {"ranks": 3},
    "test_faults.py::test_full_filesystem_fails_cleanly_and_keeps_the_previous_checkpoint": {"ranks": 2},
    "test_faults.py::test_read_only_checkpoint_directory_is_refused_and_keeps_the_checkpoint": {"ranks": 2},
    "test_faults.py::test_sigterm_to_mpiexec_leaves_a_loadable_checkpoint": None,  # test_nbody_mpi's stays
    "test_faults.py::test_scale_killed_resumes_and_survives_a_torn_last_line": None,  # test_scale_cli's stays
    # the GPU paths under the simulator (Python threads for GPU threads: the slowest tests)
    # (test_lj_gpu keeps the 1- and 2-rank runs against the CPU; tests/mpi/test_halo_device_mpi.py
    # checks the device halo row for row and what it copies to the host)
    "test_lj_gpu.py::test_hot_device_resident_matches_cpu": None,
    "test_lj_gpu.py::test_half_lists_with_newton_on_the_device": None,
    "test_lj_gpu.py::test_steps_copy_no_atom_array_to_host": None,
    "test_lj_gpu.py::test_device_rebuild_is_the_cpu_full_list_path_bit_for_bit": None,
    "test_lj_gpu.py::test_gpu_restart_bit_for_bit": None,
    "test_gpu_launches.py::test_each_event_costs_what_the_page_says": {"transport": "device"},
    "test_gpu_launches.py::test_the_record_sums_the_pages_events": {"ranks": 2},
    "test_nbody_gpu.py::test_gpu_backend_under_simulator_two_ranks": [{"exchange": "ring", "transport": "device"},
                                                                       {"exchange": "allgather", "transport": "host"}],
    "test_nbody_gpu.py::test_early_binding_and_round_trip_under_mpiexec": {"ranks": 3},
    "test_nbody_gpu.py::test_device_transport_refused_on_an_mpi_that_is_not_cuda_aware": {"ranks": 3},
    "test_pi_cuda_sim.py::test_pympi_pi_selects_its_gpu_before_mpi_init": None,  # test_lj_gpu's 2 ranks check it
    "test_pi_cuda_sim.py::test_cuda_kernels_match_cpu_in_simulator": {"per_thread": 7},
    "test_cli_pi.py::test_gpu_backend_in_simulator_matches_cpu": None,
    "test_gpu_acceptance.py::test_lj_thermo_compared_across_backends": None,
    # models through the command line: the many-rank repeats
    "test_lj_cli.py::test_ranks_agree_through_the_cli": {"ranks": (2, 8)},
    "test_lj_cli.py::test_pympi_scale_drives_the_lj_model": None,
    "test_nbody_mpi.py::test_decompositions_agree": [{"ranks": 2, "exchange": "allgather"},
                                                      {"ranks": 3, "exchange": "ring"}],
    "test_interrupt.py::test_ctrl_c_stops_after_the_step_and_writes_the_checkpoint": {"model": "lj"},
    "test_interrupt.py::test_second_ctrl_c_ends_at_once_and_keeps_the_checkpoint": None,  # pi's second Ctrl-C stays
    # blow-ups: the LJ one after a checkpoint and gravity's beside the default name stay
    "test_blowup.py::test_lj_too_hot_stops_with_exit_3_and_one_message": None,
    "test_blowup.py::test_lj_blowup_keeps_the_previous_checkpoint_byte_identical": None,
    "test_blowup.py::test_lj_blowup_after_a_checkpoint_keeps_that_checkpoint_and_saves_the_broken_state":
        {"ranks": 3},
    "test_blowup.py::test_gravity_overflow_stops_with_exit_3_and_keeps_the_checkpoint": None,
    "test_blowup.py::test_start_of_a_run_removes_what_a_killed_writer_left_and_says_so_once": {"model": "gravity"},
    "test_dump.py::test_lj_last_frame_is_the_checkpointed_state": {"ranks": 2},
    "test_dump.py::test_gravity_last_frame_is_the_checkpointed_state": {"suffix": ".gsd"},
    "test_dump.py::test_a_restart_appends_without_repeating_a_frame": {"suffix": ".gsd"},
    "test_progress.py::test_nbody_auto_agrees_on_every_rank": {"ranks": 2},
    "test_thermo.py::test_lj_log_holds_the_records_rows": {"ranks": 2},
    "test_thermo.py::test_gravity_gets_thermo_rows_every_k_steps": {"ranks": 2},
    "test_phases.py::test_gravity_ring_traffic_is_what_the_ring_sends": {"ranks": 2},
    "test_phases.py::test_lj_halo_traffic_and_phases": {"ranks": 2},
    # commands under mpiexec at both sizes: 3 ranks stays
    "test_cli_pi.py::test_phases_and_traffic_in_the_record": {"ranks": 2},
    "test_cli_common.py::test_bad_variable_under_mpiexec_one_message": {"n": 2},
    "test_cli_common.py::test_trapezoid_counts_intervals": {"n": 2},
    "test_info_cli.py::test_info_json_under_mpiexec": {"n": 2},
    "test_info_cli.py::test_info_plain_under_mpiexec": {"n": 2},
    "test_scale_cli.py::test_strong_study_1_2_3_ranks": None,  # the weak, failed-point and resume studies stay
}


def slow_case(item) -> bool:
    """Whether the SLOW table marks this collected test ``slow``."""
    rule = SLOW.get(f"{item.path.name}::{getattr(item, 'originalname', item.name)}", False)
    if rule is False:
        return False
    if rule is None:
        return True
    params = getattr(getattr(item, "callspec", None), "params", {})
    return any(all(params.get(k) in (v if isinstance(v, tuple) else (v,)) for k, v in case.items())
               for case in (rule if isinstance(rule, list) else [rule]))


def pytest_itemcollected(item):
    """Mark the SLOW table's cases (before -m selects, which happens after collection)."""
    if slow_case(item):
        item.add_marker(pytest.mark.slow)


# -- one test body on each device --------------------------------------------------------------------------

#: the devices a ``device`` test runs on: numba on the CPU, the GPU kernels under numba's CUDA simulator, and
#: a real GPU where one is usable (marked ``gpu``: the GPU acceptance runs these bodies on its device)
DEVICES = ("numba", "cudasim", pytest.param("gpu", marks=pytest.mark.gpu))


@pytest.fixture(params=DEVICES)
def device(request):
    """The :class:`~pympi_gpu.device.device.Device` a test body runs on (HOOMD-blue's ``device`` fixture).

    ``numba``: the CPU.  ``cudasim``: the GPU paths (numba.cuda kernels, the
    device-resident arrays) under numba's CUDA simulator, which numba reads when
    numba.cuda is imported: that case runs in a child pytest with
    ``NUMBA_ENABLE_CUDASIM=1`` (:func:`pytest_pyfunc_call`), and here only there.
    ``gpu``: a real CUDA GPU, skipped with the reason where none is usable.
    """
    from pympi_gpu.device.device import Device

    if request.param == "numba":
        return Device()
    if request.param == "gpu":
        from pympi_gpu.device.gpu import gpu_usable

        ok, why = gpu_usable()
        if not ok:
            pytest.skip(f"no usable GPU: {why}")
        return Device(backend="gpu", backend_reason="the device fixture", transport="host")
    return Device(backend="gpu", backend_reason="the device fixture", transport="host", simulated=True)


def pytest_pyfunc_call(pyfuncitem):
    """The ``cudasim`` case of a ``device`` test, in a process without the simulator: run it in one that has."""
    params = getattr(getattr(pyfuncitem, "callspec", None), "params", {})
    if params.get("device") != "cudasim" or os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        return None
    out = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
               "--rootdir", str(ROOT), pyfuncitem.nodeid], timeout=900, cwd=ROOT,
              env=clean_env(NUMBA_ENABLE_CUDASIM="1"))
    if out.returncode != 0 or " passed" not in out.stdout:
        pytest.fail(f"under the CUDA simulator (a child pytest):\n{(out.stdout + out.stderr)[-4000:]}",
                    pytrace=False)
    return True
