"""docker/Dockerfile.cuda built for real, once, on a CUDA base made here, and run as users run it.

No registry is reachable in CI, so nvidia/cuda is stood in for by Debian 12 with
/usr/local/cuda made from NVIDIA's PyPI wheels (containers.CUDA_STANDIN); the
recipe is the file users build, only BUILD_BASE/BASE/CUDA_VERSION point at it.
The build itself runs docker/build-cuda-mpi.sh (a CUDA-aware Open MPI over the
libucx-cu12 UCX, from Debian's openmpi source package), builds mpi4py on it, and
smoke-tests the CPU path and the CUDA kernels under numba's simulator.

There is no GPU here: the checks are what can be proven without one: the MPI
answers MPIX_Query_cuda_support() = 1 at run time, 2 ranks run the n-body on
the CPU and on simulated GPUs (whose device arrays are host memory, so the
device transport's detection, agreement and round trip run for real), the
user is not root, and the image holds no build toolchain.
"""

from __future__ import annotations

import json

import pytest

from helpers.commands import need_container_tools, run, script

from . import containers as c

pytestmark = [pytest.mark.system, pytest.mark.timeout(5400)]

#: the seed tutorial's n-body images (Apptainer .sif, squashfs-compressed): naive and multi-stage
SEED_SIF_BYTES = {"naive": 4.2e9, "efficient": 147e6}


@pytest.fixture(scope="module")
def cuda_image() -> c.Built:
    need_container_tools()
    try:
        return c.ensure_cuda_image("openmpi")
    except c.ContainerError as exc:
        pytest.fail(f"building Dockerfile.cuda failed: {exc}")


def in_image(image: c.Built, *argv: str, env: dict[str, str] | None = None, timeout: float = 600):
    return run(c.run_argv(image.tag, *argv, env=env), timeout=timeout)


PROBE = """
import ctypes, json, os
from mpi4py import MPI
from pympi_gpu.mpi.cuda_aware import detect, loaded_mpi_libraries
lib = loaded_mpi_libraries()[0]
v = detect()
print(json.dumps({"lib": lib, "query": ctypes.CDLL(lib).MPIX_Query_cuda_support(),
                  "supported": v.supported, "method": v.method, "version": MPI.Get_library_version(),
                  "family": open("/opt/pympi/mpi-family").read().strip(), "uid": os.getuid(),
                  "user": __import__("pwd").getpwuid(os.getuid()).pw_name}))
"""


def test_the_mpi_is_built_cuda_aware(cuda_image):
    out = in_image(cuda_image, "mpiexec", "-n", "1", "python3", "-c", PROBE)
    assert out.returncode == 0, out.stdout + out.stderr
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert doc["lib"].startswith("/opt/mpi/lib/libmpi.so") and doc["query"] == 1, doc
    assert (doc["supported"], doc["method"]) == (True, "MPIX_Query_cuda_support")
    assert doc["version"].startswith("Open MPI v4.1") and doc["family"] == "openmpi"
    assert doc["uid"] == 1000 and doc["user"] == "pympi"
    info = in_image(cuda_image, "ompi_info", "--parsable", "--all")
    assert "mpi_built_with_cuda_support:value:true" in info.stdout
    assert "mca:pml:ucx:" in info.stdout and "mca:btl:smcuda:" in info.stdout
    ucx = in_image(cuda_image, "sh", "-c", "ls /opt/ucx/lib/ucx/")
    assert "libuct_cuda.so" in ucx.stdout, ucx.stdout


def test_image_carries_the_oci_labels(cuda_image):
    import pympi_gpu

    labels = c.image_labels(cuda_image.tag)
    assert labels["org.opencontainers.image.version"] == pympi_gpu.__version__
    assert labels["org.opencontainers.image.licenses"] == "BSD-3-Clause"
    for key in ("revision", "source", "created"):
        assert labels[f"org.opencontainers.image.{key}"] not in ("", "unknown"), labels


def test_no_toolchain_in_the_final_image(cuda_image):
    out = in_image(cuda_image, "sh", "-c", "command -v gcc cc mpicc.openmpi; ls /opt/pympi/bin/pip")
    assert "gcc" not in out.stdout and "/opt/pympi/bin/pip" in out.stdout


def test_nbody_cpu_two_ranks_matches_this_checkout(cuda_image):
    argv = ["pympi-nbody", "256", "--steps", "3", "--precision", "fp64", "--backend", "numba", "--json"]
    out = in_image(cuda_image, "mpiexec", "-n", "2", *argv, "--verify")
    assert out.returncode == 0, out.stdout + out.stderr
    doc = json.loads(out.stdout)
    assert doc["ranks"] == 2 and doc["verification"]["passed"]
    here = run([script(argv[0]), *argv[1:]], timeout=300)
    assert here.returncode == 0, here.stderr
    ref = json.loads(here.stdout)
    assert doc["initial"]["energy"] == ref["initial"]["energy"]          # same initial conditions
    assert doc["final"]["energy"] == pytest.approx(ref["final"]["energy"], rel=1e-12)


@pytest.mark.parametrize("transport", ["host", "auto"])
def test_nbody_simulated_gpus_two_ranks(cuda_image, transport):
    """--transport auto picks the device path here: the image's MPI answers yes, and the
    round trip of (simulated) device buffers through it comes back right."""
    out = in_image(cuda_image, "mpiexec", "-n", "2", "pympi-nbody", "96", "--steps", "2", "--backend", "gpu",
                   "--transport", transport, "--verify", "--json", env={"NUMBA_ENABLE_CUDASIM": "1"})
    assert out.returncode == 0, out.stdout + out.stderr
    doc = json.loads(out.stdout)
    assert doc["backend"] == "gpu" and doc["verification"]["passed"]
    if transport == "auto":
        assert doc["transport"] == "device", doc["transport_reason"]
        assert "MPIX_Query_cuda_support" in doc["transport_reason"]
        assert "device-buffer round trip over 2 rank(s) correct" in doc["transport_reason"]
    else:
        assert doc["transport"] == "host"


def test_report_size(cuda_image):
    """The size beside the seed tutorial's n-body images (theirs are .sif files, squashfs-
    compressed; podman's figure is the uncompressed layers), written to the container cache."""
    doc = c.report_sizes([cuda_image], c.CACHE / "cuda-image-size.json")
    entry = doc[cuda_image.tag]
    entry["seed_sif_bytes"] = SEED_SIF_BYTES
    (c.CACHE / "cuda-image-size.json").write_text(json.dumps(doc, indent=2))
    assert entry["bytes"] > entry["base_bytes"]
