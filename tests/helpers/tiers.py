"""The tiers of the suite as pytest orders and selects them: the container tiers last, the heavy variants
marked ``slow`` (left out of the quick tier, ``python -m pytest -m "not system and not slow"``).

``tests/conftest.py`` applies both as tests are collected; tests/cli/test_tiers.py checks the table.
"""

from __future__ import annotations

from pathlib import Path

#: The tiers that build container images run last.  In CI those images are made in the
#: background meanwhile (``.ci/run`` starts ``tests/system/containers.py prebuild``), and
#: these tests wait only for what is not made yet.
CONTAINER_TIERS = ("test_apptainer.py", "test_containers.py", "test_cuda_image.py")


def container_tier(item) -> int:
    """0 for every test but the container tiers' (in their order), 1, 2, 3 for theirs, in the prebuild's."""
    if item.path.parent.name == "system" and item.path.name in CONTAINER_TIERS:
        return 1 + CONTAINER_TIERS.index(item.path.name)
    return 0


# ---------------------------------------------------------------- two at a time

#: The tests two at a time (pytest-xdist, ``python -m pytest -n auto``; CI runs them one at a time): most are
#: a sequence of process starts, each keeping one core busy.  No more than two, whatever the
#: machine: a test's MPI jobs take two or three cores of their own.
WORKERS = 2


def workers() -> int:
    """How many pytest-xdist workers ``-n auto`` starts: ``PYMPI_TEST_WORKERS``, else :data:`WORKERS`, at
    most the CPUs this process may run on."""
    import os

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return int(os.environ.get("PYMPI_TEST_WORKERS") or min(WORKERS, cpus))


def worker_group(nodeid: str) -> str:
    """The group of tests (by node id) that run one after the other on one worker: a file's (its
    module-scoped fixtures made once, its order kept); the system tier's Slurm tests together (one local
    Slurm), and the container tiers' together (one podman, one Apptainer), each in the order collected,
    never two at once.  The groups are handed out in the order their first test is collected, so the
    container tiers' goes last (:func:`container_tier`), when the background prebuild has made most of
    their images: handed out early, a worker sat waiting for the images 10 minutes of a cold run."""
    path = nodeid.split("::", 1)[0]
    if not path.startswith("tests/system/"):
        return path
    return "tests/system containers" if path.rsplit("/", 1)[-1] in CONTAINER_TIERS else "tests/system"


#: Files whose tests time a job against a limit or load every core themselves: under ``-n auto`` each of their
#: tests runs while no other test does (:func:`alone`, the lock in tests/conftest.py), as in a run one at a
#: time.  Two workers each starting MPI jobs on 2 cores, with the image builds, took a job stopped by SIGTERM
#: past its 48 s and put the Slurm scaling model's prediction 54 % off.
ALONE = (
    "tests/cli/test_stop_signals.py",  # a stop's grace period, SIGTERM on a loaded machine
    "tests/cli/test_stop_launchers.py",  # the launchers' stops on a loaded machine
    "tests/cli/test_faults.py",  # a killed rank ends the job within END_WITHIN
    "tests/system/test_scale_slurm.py",  # a scaling model fitted on one node predicts two
    "tests/system/test_slurm_signals.py",  # Slurm's real time limits and warnings
    "tests/unit/test_jitcache_dirs.py",  # savers racing on a loaded machine
)


def alone(nodeid: str) -> bool:
    """Whether the test runs while no other test does (:data:`ALONE`)."""
    return nodeid.split("::", 1)[0] in ALONE


# ---------------------------------------------------------------- the quick tier

#: The heavy variants of tests whose lighter variants stay in the quick tier
#: (``python -m pytest -m "not system and not slow"``: docs/testing.md).  Each entry is
#: ``"tier/file::test"``, the file's path under tests/: ``None`` marks every case of the test
#: ``slow``, a dict only the cases whose parameters take those values (a tuple: any of them),
#: a list of dicts the cases any of them matches.  What stays quick still runs every
#: module's own tests: MPI at 3 ranks (the odd split), one transport or exchange where
#: the others take the same path, 1 rank where the many-rank case adds only time.  CI runs
#: everything.  tests/cli/test_tiers.py checks that each entry still names a test.
SLOW = {
    # the tier under the other MPIs, and again at 2 ranks (3 stays quick)
    "cli/test_mpi_matrix.py::test_mpi_suite_under": None,
    "cli/test_mpi_matrix.py::test_sigkill_of_one_rank_ends_the_job_under": None,
    "cli/test_mpi_suite.py::test_mpi_suite": {"ranks": 2},
    # a stop under load and an output removed under a run (issue 60): 3 ranks stay, and MPICH
    "cli/test_stop_signals.py::test_sigterm_to_one_rank_of_a_loaded_machine_stops_the_job": {"ranks": 2,
                                                                                             "when": "stepping"},
    "cli/test_stop_launchers.py::test_under_open_mpi_pympi_launch_stops_a_loaded_run_still_setting_up": None,
    "cli/test_claimed_outputs.py::test_an_output_removed_during_the_run_stops_it_with_the_state_saved":
        {"ranks": 2, "what": "directory"},
    "cli/test_mpi_suite.py::test_mpi_suite_under_the_cuda_simulator": {"ranks": 2},
    # inside tests/mpi (test_mpi_suite passes -m "not slow" on when the outer run leaves slow out):
    # the LJ restart and drift runs, and the 6^3 repeats of the 5^3 checks
    "mpi/test_lj_mpi.py::test_restart_continues_bit_for_bit": None,  # test_lj_cli's restart stays
    "mpi/test_lj_mpi.py::test_gpu_restart_continues_bit_for_bit": None,  # test_lj_gpu's restart is slow too
    "mpi/test_lj_mpi.py::test_atoms_cross_several_bricks": None,  # test_halo_mpi's migrations stay
    "mpi/test_lj_mpi.py::test_ranks_agree_with_one_brick": {"cells": 6},
    "mpi/test_lj_mpi.py::test_reverse_forces_equal_one_brick": {"cells": 6},
    # LAMMPS from its own data file: at 3 ranks it stays
    "cli/test_lj_init_cli.py::test_nve_from_a_data_file_lammps_wrote_agrees_with_lammps": {"ranks": 1},
    # faults: each kind stays once
    "cli/test_faults.py::test_bad_input_one_message_exit_2": {"ranks": 2},
    "cli/test_faults.py::test_sigkill_of_one_rank_ends_the_job": {"ranks": 3},
    "cli/test_faults.py::test_bad_checkpoint_is_refused_with_one_message": {"ranks": 3},
    "cli/test_faults.py::test_full_filesystem_fails_cleanly_and_keeps_the_previous_checkpoint": {"ranks": 2},
    "cli/test_faults.py::test_read_only_checkpoint_directory_is_refused_and_keeps_the_checkpoint": {"ranks": 2},
    "cli/test_faults.py::test_sigterm_to_mpiexec_leaves_a_loadable_checkpoint": None,  # test_nbody_mpi's stays
    "cli/test_faults.py::test_scale_killed_resumes_and_survives_a_torn_last_line": None,  # test_scale_cli's stays
    # the GPU paths under the simulator (Python threads for GPU threads: the slowest tests)
    # (test_lj_gpu keeps the 1- and 2-rank runs against the CPU; tests/mpi/test_halo_device_mpi.py
    # checks the device halo row for row and what it copies to the host)
    "gpu/test_lj_gpu.py::test_hot_device_resident_matches_cpu": None,
    "gpu/test_lj_gpu.py::test_half_lists_with_newton_on_the_device": None,
    "gpu/test_lj_gpu.py::test_steps_copy_no_atom_array_to_host": None,
    "gpu/test_lj_gpu.py::test_device_rebuild_is_the_cpu_full_list_path_bit_for_bit": None,
    "gpu/test_lj_gpu.py::test_gpu_restart_bit_for_bit": None,
    # the thermostats on the device: Nose-Hoover's restart and its steps made again stay (the state)
    "gpu/test_thermostats_gpu.py::test_a_restart_on_the_device_continues_bit_for_bit": {"bath": "langevin"},
    "gpu/test_thermostats_gpu.py::test_steps_made_again_put_the_thermostat_back": {"bath": "langevin"},
    "gpu/test_gpu_launches.py::test_a_thermostat_adds_what_the_page_says": {"ranks": 2},
    "gpu/test_gpu_launches.py::test_each_event_costs_what_the_page_says": {"transport": "device"},
    "gpu/test_gpu_launches.py::test_the_record_sums_the_pages_events": {"ranks": 2},
    "gpu/test_nbody_gpu.py::test_gpu_backend_under_simulator_two_ranks": [{"exchange": "ring", "transport": "device"},
                                                                       {"exchange": "allgather", "transport": "host"}],
    "gpu/test_nbody_gpu.py::test_early_binding_and_round_trip_under_mpiexec": {"ranks": 3},
    "gpu/test_nbody_gpu.py::test_device_transport_refused_on_an_mpi_that_is_not_cuda_aware": {"ranks": 3},
    "gpu/test_pi_cuda_sim.py::test_pympi_pi_selects_its_gpu_before_mpi_init": None,  # test_lj_gpu's 2 ranks check it
    "gpu/test_pi_cuda_sim.py::test_cuda_kernels_match_cpu_in_simulator": {"per_thread": 7},
    "cli/test_cli_pi.py::test_gpu_backend_in_simulator_matches_cpu": None,
    "gpu/test_gpu_acceptance.py::test_lj_thermo_compared_across_backends": None,
    # models through the command line: the many-rank repeats
    "cli/test_lj_cli.py::test_ranks_agree_through_the_cli": {"ranks": (2, 8)},
    "cli/test_lj_cli.py::test_restart_continues_bit_for_bit": {"ranks": 2},
    # a venv and two pip installs (the first command's test stays)
    "cli/test_readme_first_command.py::test_the_two_commands_one_after_the_other": None,
    "cli/test_lj_cli.py::test_pympi_scale_drives_the_lj_model": None,
    "cli/test_nbody_mpi.py::test_decompositions_agree": [{"ranks": 2, "exchange": "allgather"},
                                                      {"ranks": 3, "exchange": "ring"}],
    "cli/test_interrupt.py::test_ctrl_c_stops_after_the_step_and_writes_the_checkpoint": {"model": "lj"},
    "cli/test_interrupt.py::test_second_ctrl_c_ends_at_once_and_keeps_the_checkpoint": None,  # pi's second Ctrl-C stays
    # blow-ups: the LJ one after a checkpoint and gravity's beside the default name stay
    "cli/test_blowup.py::test_lj_too_hot_stops_with_exit_3_and_one_message": None,
    "cli/test_blowup.py::test_lj_blowup_keeps_the_previous_checkpoint_byte_identical": None,
    "cli/test_blowup.py::test_lj_blowup_after_a_checkpoint_keeps_that_checkpoint_and_saves_the_broken_state":
        {"ranks": 3},
    "cli/test_blowup.py::test_gravity_overflow_stops_with_exit_3_and_keeps_the_checkpoint": None,
    "cli/test_blowup.py::test_start_of_a_run_removes_what_a_killed_writer_left_and_says_so_once": {"model": "gravity"},
    "cli/test_dump.py::test_lj_last_frame_is_the_checkpointed_state": {"ranks": 2},
    "cli/test_dump.py::test_gravity_last_frame_is_the_checkpointed_state": {"suffix": ".gsd"},
    "cli/test_dump.py::test_a_restart_appends_without_repeating_a_frame": {"suffix": ".gsd"},
    "cli/test_progress.py::test_nbody_auto_agrees_on_every_rank": {"ranks": 2},
    "cli/test_thermo.py::test_lj_log_holds_the_records_rows": {"ranks": 2},
    "cli/test_thermo.py::test_gravity_gets_thermo_rows_every_k_steps": {"ranks": 2},
    "cli/test_phases.py::test_gravity_ring_traffic_is_what_the_ring_sends": {"ranks": 2},
    "cli/test_phases.py::test_lj_halo_traffic_and_phases": {"ranks": 2},
    # commands under mpiexec at both sizes: 3 ranks stays
    "cli/test_cli_pi.py::test_phases_and_traffic_in_the_record": {"ranks": 2},
    "cli/test_cli_common.py::test_bad_variable_under_mpiexec_one_message": {"n": 2},
    "cli/test_cli_common.py::test_trapezoid_counts_intervals": {"n": 2},
    "cli/test_info_cli.py::test_info_json_under_mpiexec": {"n": 2},
    "cli/test_info_cli.py::test_info_plain_under_mpiexec": {"n": 2},
    "cli/test_scale_cli.py::test_strong_study_1_2_3_ranks": None,  # the weak, failed-point and resume studies stay
}


#: the directory the SLOW table's file names are relative to
TESTS = Path(__file__).resolve().parents[1]


def key(item) -> str:
    """The SLOW table's name of a collected test: ``"tier/file::test"``, the file's path under tests/."""
    path = Path(item.path).resolve()
    where = path.relative_to(TESTS).as_posix() if TESTS in path.parents else path.name
    return f"{where}::{getattr(item, 'originalname', item.name)}"


def slow_case(item) -> bool:
    """Whether the SLOW table marks this collected test ``slow``."""
    rule = SLOW.get(key(item), False)
    if rule is False:
        return False
    if rule is None:
        return True
    params = getattr(getattr(item, "callspec", None), "params", {})
    return any(all(params.get(k) in (v if isinstance(v, tuple) else (v,)) for k, v in case.items())
               for case in (rule if isinstance(rule, list) else [rule]))
