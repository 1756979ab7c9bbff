"""launch.plan: every branch, without a cluster (PATH and environment are stand-ins).

The command that carries it out: tests/cli/test_launch.py."""

from __future__ import annotations

import pytest

from pympi_gpu.mpi.launch import LaunchError, mpi_from_env, plan, probe_mpi
from pympi_gpu.mpi.library import vendor_of_text


def which_of(*present):
    """A ``shutil.which`` that finds exactly ``present``."""
    return lambda name: f"/usr/bin/{name}" if name in present else None


CMD = ["pympi-pi", "1e7", "--json"]


@pytest.fixture
def no_mpi_wheel(monkeypatch):
    """As if no MPI wheel were installed: mpi_from_env goes on to mpi4py's build and the modules."""
    from dataclasses import replace

    from pympi_gpu import launchers

    monkeypatch.setattr(launchers, "MPI_LIBRARIES", tuple(replace(lib, wheels=()) for lib in launchers.MPI_LIBRARIES))
    monkeypatch.setattr("mpi4py.get_config", lambda: {})
    return monkeypatch


def test_ibrun_wins_where_it_is_on_path():
    p = plan(CMD, 4, environ={"SLURM_JOB_ID": "7", "SLURM_NTASKS": "4"},
             which=which_of("ibrun", "srun", "mpiexec"))
    assert p.launcher == "ibrun"
    assert p.argv == ("ibrun", *CMD)
    assert "TACC" in p.reason


def test_ibrun_subset_of_the_allocation_uses_n_and_offset():
    p = plan(CMD, 2, environ={"SLURM_JOB_ID": "7", "SLURM_NTASKS": "56"}, which=which_of("ibrun"))
    assert p.argv == ("ibrun", "-n", "2", "-o", "0", *CMD)


def test_ibrun_leaves_placement_to_the_allocation():
    p = plan(CMD, 4, nodes=2, environ={"SLURM_NTASKS": "4"}, which=which_of("ibrun"))
    assert p.argv == ("ibrun", *CMD)
    assert "allocation" in p.reason


def test_ibrun_with_apptainer_image():
    p = plan(CMD, 4, image="pi.sif", environ={"SLURM_NTASKS": "4"}, which=which_of("ibrun", "apptainer"))
    assert p.argv == ("ibrun", "apptainer", "run", "pi.sif", *CMD)


@pytest.mark.parametrize("mpi, pmi", [("mpich", "pmi2"), ("intelmpi", "pmi2"), ("mvapich", "pmi2"),
                                      ("openmpi", "pmix")])
def test_srun_inside_an_allocation_with_the_pmi_of_the_mpi(mpi, pmi):
    p = plan(CMD, 2, environ={"SLURM_JOB_ID": "12"}, which=which_of("srun", "mpiexec"), mpi=mpi)
    assert p.launcher == "srun"
    assert p.argv == ("srun", "--ntasks=2", "--kill-on-bad-exit=1", f"--mpi={pmi}", *CMD)
    assert "SLURM_JOB_ID" in p.reason and mpi in p.reason


def test_srun_nodes_and_tasks_per_node():
    p = plan(CMD, 8, nodes=2, tasks_per_node=4, environ={"SLURM_JOB_ID": "1"},
             which=which_of("srun"), mpi="mpich")
    assert p.argv == ("srun", "--ntasks=8", "--nodes=2", "--ntasks-per-node=4", "--kill-on-bad-exit=1", "--mpi=pmi2", *CMD)


def test_srun_pmi_override_and_default():
    from pympi_gpu.cli.settings import told_pmi

    pmi = told_pmi({"PYMPI_PMI": "cray_shasta"})  # the command line's reading of the variable
    assert "--mpi=cray_shasta" in plan(CMD, 2, environ={"SLURM_JOB_ID": "1"}, which=which_of("srun"),
                                       mpi="mpich", pmi=pmi).argv
    p = plan(CMD, 2, environ={"SLURM_JOB_ID": "1"}, which=which_of("srun"), mpi="openmpi", pmi="pmi2")
    assert "--mpi=pmi2" in p.argv
    p = plan(CMD, 2, environ={"SLURM_JOB_ID": "1"}, which=which_of("srun"), mpi="openmpi", pmi="default")
    assert not any(a.startswith("--mpi") for a in p.argv)


def test_srun_unknown_mpi_leaves_the_cluster_default(no_mpi_wheel):
    p = plan(CMD, 2, environ={"SLURM_JOB_ID": "1"}, which=which_of("srun"))
    assert p.argv == ("srun", "--ntasks=2", "--kill-on-bad-exit=1", *CMD)
    assert "MpiDefault" in p.reason


def test_mpi_detected_from_the_environment():
    from pympi_gpu.cli.settings import told_mpi

    told = told_mpi({"PYMPI_MPI": "OpenMPI "})  # the command line reads the variable
    assert mpi_from_env({}, told) == ("openmpi", "PYMPI_MPI")
    with pytest.raises(LaunchError, match="PYMPI_MPI"):
        mpi_from_env({}, told_mpi({"PYMPI_MPI": "lam"}))
    mpi, how = probe_mpi({}, told=told)
    p = plan(CMD, 2, environ={"SLURM_JOB_ID": "1"}, which=which_of("srun"), mpi=mpi, mpi_how=how)
    assert "--mpi=pmix" in p.argv


@pytest.mark.parametrize("mpicc, vendor", [
    ("/opt/apps/intel23/mpich/4.1.2/bin/mpicc", "mpich"),  # built with Intel's compilers, still MPICH
    ("/opt/apps/intel19/impi/19.0.9/intel64/bin/mpicc", "intelmpi"),
    ("/opt/intel/oneapi/mpi/2021.13/bin/mpicc", "intelmpi"),
    ("/opt/apps/intel19/mvapich2/2.3.7/bin/mpicc", "mvapich"),
    ("/usr/lib/x86_64-linux-gnu/openmpi/bin/mpicc", "openmpi"),
])
def test_mpi_from_the_mpicc_mpi4py_was_built_with(no_mpi_wheel, mpicc, vendor):
    no_mpi_wheel.setattr("mpi4py.get_config", lambda: {"mpicc": mpicc})
    assert mpi_from_env({}) == (vendor, "mpi4py.get_config()")


def test_mpi_from_the_module_variables(no_mpi_wheel):
    assert mpi_from_env({"MPICH_HOME": "/opt/mpich"}) == ("mpich", "$MPICH_HOME")
    # a derivative's module may set its base's variable too: the derivative's own wins
    assert mpi_from_env({"MPICH_HOME": "/opt/x", "I_MPI_ROOT": "/opt/intel/impi"}) == ("intelmpi", "$I_MPI_ROOT")
    assert mpi_from_env({"MPICH_HOME": "/opt/x", "MV2_HOME": "/opt/mv2"}) == ("mvapich", "$MV2_HOME")
    assert mpi_from_env({})[0] is None  # nothing tells


def test_mpi_wheel_of_this_environment_is_found():
    # the test environment installs the mpich extra
    assert mpi_from_env({}) == ("mpich", "the installed mpich wheel")


def test_the_library_mpi4py_loads_wins_over_the_installed_wheels():
    # the mpich wheel is installed here; a venv that also has impi-rt loads Intel MPI
    intel = "Intel(R) MPI Library 2021.14 for Linux* OS\n\nCopyright 2003-2024 Intel Corporation."
    vendor, how = probe_mpi({}, library=lambda: intel)
    assert vendor == "intelmpi" and "Intel(R) MPI Library 2021.14 for Linux* OS" in how
    assert probe_mpi({}, library=lambda: intel, told="openmpi") == ("openmpi", "PYMPI_MPI")
    assert probe_mpi({}, library=lambda: None) == ("mpich", "the installed mpich wheel")


@pytest.mark.parametrize("text, vendor", [
    ("mpiexec (OpenRTE) 4.1.4\n", "openmpi"), ("mpirun (Open MPI) 5.0.3", "openmpi"),
    ("HYDRA build details:\n    Version: 4.2.0", "mpich"),
    ("Intel(R) MPI Library for Linux* OS, Version 2019 Update 9", "intelmpi"),
    ("MVAPICH2 Version: 2.3.7", "mvapich"), ("something else", None)])
def test_vendor_of_version_text(text, vendor):
    assert vendor_of_text(text) == vendor


def test_mpiexec_without_slurm():
    p = plan(CMD, 3, environ={}, which=which_of("mpiexec", "mpirun"), mpi="mpich", as_root=True)
    assert p.launcher == "mpiexec"
    assert p.argv == ("mpiexec", "-n", "3", *CMD)
    p = plan(CMD, 4, tasks_per_node=2, environ={}, which=which_of("mpiexec"), mpi="mpich")
    assert p.argv == ("mpiexec", "-n", "4", "-ppn", "2", *CMD)


def test_mpiexec_flags_open_mpi_needs():
    p = plan(CMD, 3, environ={}, which=which_of("mpiexec"), mpi="openmpi", as_root=True)
    assert p.argv == ("mpiexec", "-n", "3", "--oversubscribe", "--allow-run-as-root", *CMD)
    p = plan(CMD, 3, environ={}, which=which_of("mpiexec"), mpi="openmpi", as_root=False)
    assert p.argv == ("mpiexec", "-n", "3", "--oversubscribe", *CMD)
    p = plan(CMD, 4, tasks_per_node=2, environ={}, which=which_of("mpiexec"), mpi="openmpi", as_root=False)
    assert p.argv[-len(CMD) - 2:-len(CMD)] == ("--map-by", "ppr:2:node")


def test_mpirun_when_there_is_no_mpiexec():
    p = plan(CMD, 2, environ={}, which=which_of("mpirun"), mpi="mpich")
    assert p.launcher == "mpirun" and p.argv[:3] == ("mpirun", "-n", "2")


def test_launcher_forced():
    p = plan(CMD, 2, launcher="mpiexec", environ={"SLURM_JOB_ID": "3"}, which=which_of("ibrun", "srun", "mpiexec"),
             mpi="mpich")
    assert p.launcher == "mpiexec" and p.reason.startswith("asked for")
    p = plan(CMD, 2, launcher="srun", environ={}, which=which_of("srun"), mpi="mpich")
    assert p.argv[0] == "srun"


def test_apptainer_wrap_with_nv_under_srun():
    p = plan(CMD, 4, image="/scratch/nbody.sif", gpu=True, environ={"SLURM_JOB_ID": "9"},
             which=which_of("srun", "apptainer"), mpi="mpich")
    assert p.argv == ("srun", "--ntasks=4", "--kill-on-bad-exit=1", "--mpi=pmi2", "apptainer", "run", "--nv", "/scratch/nbody.sif", *CMD)
    p = plan(CMD, 2, image="pi.sif", environ={}, which=which_of("mpiexec", "singularity"), mpi="mpich")
    assert p.argv == ("mpiexec", "-n", "2", "singularity", "run", "pi.sif", *CMD)


def test_argv_is_a_list_never_a_shell_string():
    cmd = ["pympi-pi", "1e5; rm -rf /", "$(id)"]
    p = plan(cmd, 2, environ={}, which=which_of("mpiexec"), mpi="mpich")
    assert p.argv[-3:] == tuple(cmd)


@pytest.mark.parametrize("kwargs, match", [
    (dict(command=[], ntasks=2), "no command"),
    (dict(command=CMD, ntasks=0), "tasks"),
    (dict(command=CMD, ntasks=-3), "tasks"),
    (dict(command=CMD, ntasks=2.5), "tasks"),
    (dict(command=CMD, ntasks=2, nodes=0), "nodes"),
    (dict(command=CMD, ntasks=2, nodes=3), "nodes"),
    (dict(command=CMD, ntasks=2, launcher="aprun"), "unknown launcher"),
    (dict(command=CMD, ntasks=2, mpi="lam"), "unknown MPI"),
    (dict(command=CMD, ntasks=2, launcher="srun"), "not on PATH"),
])
def test_bad_requests(kwargs, match):
    with pytest.raises(LaunchError, match=match):
        plan(environ={}, which=which_of("mpiexec"), **kwargs)


def test_no_launcher_at_all():
    with pytest.raises(LaunchError, match="no launcher found"):
        plan(CMD, 2, environ={}, which=which_of())


# -- the command line ------------------------------------------------------------------------


def test_gpu_without_image_is_said_to_change_nothing():
    p = plan(CMD, 2, gpu=True, environ={}, which=which_of("mpiexec"), mpi="mpich")
    assert p.argv == ("mpiexec", "-n", "2", *CMD)
    assert "--gpu without an image" in p.reason
