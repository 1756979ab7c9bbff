"""apptainer/pi.def built into a .sif and run the ways users run it on a cluster.

Apptainer is not in Debian 12: it runs from a debootstrapped Debian unstable
root with that release's ``apptainer`` package (containers.apptainer_root), as
an unprivileged user (user namespaces), as on a login or compute node.  The
.sif is bootstrapped from the Dockerfile.tacc (Intel MPI) image built on the TACC-style
stand-in base (``Bootstrap: docker-archive``), so the run script must load the
image's MPI through BASH_ENV exactly as on TACC's Intel MPI images.
"""

from __future__ import annotations

import json

import pytest

from helpers.commands import ROOT, clean_env, mpiexec_argv, need_root, need_tool, require_system, run, script

from . import containers as c

pytestmark = [pytest.mark.system, pytest.mark.timeout(3000)]

#: Ranks started by a launcher outside the image each get their own user
#: namespace (unprivileged Apptainer), where UCX's shared memory cannot open
#: its peer's /proc/PID/fd/N; named /dev/shm segments work (docs/containers.md, troubleshooting).
USERNS_UCX = {"UCX_POSIX_USE_PROC_LINK": "n"}


@pytest.fixture(scope="module")
def sif():
    """(ApptainerRoot, path of pi.sif inside it) built once per session (the prebuild's, or here).

    At the end of the module the impi image's archive (1.5 GB) and nbody.sif (0.5 GB) go: the
    CUDA image is built after this module, and CI's disk ran out there."""
    need_tool("podman", "buildah", "runc", "debootstrap", "unshare", "setpriv")
    need_root("debootstrap, podman's root storage and pivot_root need root")
    try:
        box, image = c.pi_sif()  # made in the background by CI's prebuild; %test runs as part of the build
    except c.ContainerError as exc:
        pytest.fail(f"building pi.sif failed: {exc}")
    yield box, image
    for name in ("pympi-impi.tar", "nbody.sif"):
        (box.work / name).unlink(missing_ok=True)


@pytest.fixture(scope="session")
def reference_hits():
    proc = run([script("pympi-pi"), "1e5", "--json"], timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["results"][0]["hits"]


def pi_doc(proc) -> dict:
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return json.loads(proc.stdout[proc.stdout.index("{"):])


def test_apptainer_run_pi(sif, reference_hits):
    """`apptainer run pi.sif pympi-pi 1e5`: the run script runs its arguments."""
    box, image = sif
    doc = pi_doc(run(box.argv("apptainer", "run", image, "pympi-pi", "1e5", "--json"), timeout=600))
    assert doc["ranks"] == 1
    assert doc["results"][0]["hits"] == reference_hits
    assert doc["provenance"]["container"] == "apptainer"
    assert "Intel(R) MPI Library" in doc["provenance"]["mpi_library"]  # the impi image's real Intel MPI


def test_run_script_loads_the_image_mpi(sif, reference_hits):
    """`run` reaches the image's mpiexec through BASH_ENV; `exec` does not (why TACC says run)."""
    box, image = sif
    doc = pi_doc(run(box.argv("apptainer", "run", image, "mpiexec", "-n", "2", "pympi-pi", "1e5",
                              "--json"), timeout=600))
    assert doc["ranks"] == 2
    assert doc["results"][0]["hits"] == reference_hits
    bare = run(box.argv("apptainer", "exec", image, "sh", "-c", "command -v mpiexec"), timeout=600)
    assert bare.returncode != 0, bare.stdout


def test_host_launcher_starts_ranks_inside_the_image(sif, reference_hits):
    """The `ibrun apptainer run pi.sif ...` model: the host's launcher, the image's MPI.

    This machine's mpiexec (MPICH from PyPI) starts two `apptainer run`s; the
    Intel MPI inside the image (an MPICH derivative) joins them into one world through the PMI.
    """
    box, image = sif
    argv = mpiexec_argv(2) + box.argv("apptainer", "run", image, "pympi-pi", "1e5", "--json",
                                      keep_env=True, env=USERNS_UCX)
    doc = pi_doc(run(argv, timeout=900, env=clean_env()))
    assert doc["ranks"] == 2
    assert doc["results"][0]["hits"] == reference_hits


def test_srun_starts_ranks_inside_the_image(sif, reference_hits, request):
    """`srun --mpi=pmi2 apptainer run pi.sif pympi-pi 1e5` in the test Slurm cluster."""
    try:
        slurm = request.getfixturevalue("slurm")
    except pytest.FixtureLookupError:
        msg = "no `slurm` fixture in this checkout (tests/system/conftest.py)"
        if require_system():
            pytest.fail(msg)
        pytest.skip(msg)
    box, image = sif
    proc = slurm.srun(box.argv("apptainer", "run", image, "pympi-pi", "1e5", "--json",
                               keep_env=True, env=USERNS_UCX), ntasks=2, mpi="pmi2", timeout=900)
    doc = pi_doc(proc)
    assert doc["ranks"] == 2
    assert doc["results"][0]["hits"] == reference_hits


def test_apptainer_test_section_runs_the_smoke_check(sif):
    box, image = sif
    proc = run(box.argv("apptainer", "test", image), timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert "ranks 2" in proc.stdout


def test_help_labels_and_no_arguments(sif):
    box, image = sif
    helptext = run(box.argv("apptainer", "run-help", image), timeout=300)
    assert "apptainer run pi.sif pympi-pi 1e7" in helptext.stdout
    labels = run(box.argv("apptainer", "inspect", "--labels", image), timeout=300)
    assert "org.opencontainers.image.title: pympi_gpu pi" in labels.stdout
    import pympi_gpu   # the docker image's OCI labels come through into the .sif
    assert f"org.opencontainers.image.version: {pympi_gpu.__version__}" in labels.stdout
    for key in ("revision", "source", "created", "licenses"):
        assert f"org.opencontainers.image.{key}: " in labels.stdout, labels.stdout
    usage = run(box.argv("apptainer", "run", image), timeout=600)
    assert usage.returncode == 0 and "Usage: pympi" in usage.stdout, usage.stderr[-2000:]


def test_nbody_definition_builds_on_a_cpu_image(sif):
    """nbody.def's own sections (run script, %test, labels) on the impi image: no CUDA here.  Its
    root is pi.sif's (``Bootstrap: localimage``), the impi image already unpacked and squashed once."""
    box, image = sif
    proc = run(box.argv("apptainer", "build", "--force", *c.APPTAINER_BUILD_FLAGS,
                        "--build-arg", "BOOTSTRAP=localimage",
                        "--build-arg", f"FROM={image}", "/work/nbody.sif",
                        "/work/nbody.def"), timeout=1800)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    labels = run(box.argv("apptainer", "inspect", "--labels", "/work/nbody.sif"), timeout=300)
    assert "pympi_gpu n-body" in labels.stdout
    doc = pi_doc(run(box.argv("apptainer", "run", "/work/nbody.sif", "pympi-pi", "1e5", "--json"),
                     timeout=600))
    assert doc["ranks"] == 1
