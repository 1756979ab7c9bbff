"""Build and run the docker/ and apptainer/ recipes for real, with no registry.

No image registry is reachable in CI, so the bases are made here: a Debian
root from ``debootstrap``, imported into podman, and on top of it small
"TACC-style" bases (a system MPI with mpicc, like TACC's Intel MPI and MVAPICH2
images).  The recipes under docker/ are then built unchanged, only their ARGs
pointing at these bases.  Apptainer is not packaged in Debian 12: it runs from
a debootstrapped Debian unstable root, entered with ``pivot_root`` in a private
mount namespace (Apptainer refuses a plain chroot).

Everything here is plain functions of paths and tags, used by the session
fixtures of tests/system/test_containers.py and test_apptainer.py, and usable by
hand: ``python -m tests.system.containers bases`` makes the bases.

Each image is made under a file lock (:func:`building`), so that CI can make
them all in the background while the other tiers run (``prebuild --background``,
started by ``.ci/run``): a fixture then waits for the image it needs, and
podman's layer cache makes its own build of it instant.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("PYMPI_CONTAINER_CACHE", "/var/tmp/pympi-containers"))
DEBIAN_MIRROR = os.environ.get("PYMPI_DEBIAN_MIRROR", "http://deb.debian.org/debian")

DEBIAN_IMAGE = "localhost/pympi-ci/debian:bookworm"
PYTHON_BASE = "localhost/pympi-ci/debian-python:bookworm"
IMPI_BASE = "localhost/pympi-ci/impi:bookworm"
MVAPICH_BASE = "localhost/pympi-ci/mvapich-standin:bookworm"
CPYTHON_IMAGE = "localhost/pympi-ci/cpython:bookworm"

# apt inside the bases: the archive's Release files may be dated ahead of or
# behind this machine's clock (snapshot mirrors), as on the host.
APT_CONF = 'Acquire::Check-Valid-Until "false";\nAcquire::Check-Date "false";\n'

#: Where the Intel MPI base keeps its MPI (the oneAPI layout TACC's images use).
IMPI_PREFIX = "/opt/intel/oneapi/mpi"


def impi_base_containerfile(version: str) -> str:
    """The stand-in for tacc/tacc-ubuntu18-impi19.0.7-common, with a real Intel MPI.

    Intel MPI ``version`` from PyPI's ``impi-rt`` (runtime, Hydra, libfabric)
    and ``impi-devel`` (headers, ``mpicc``) wheels, unpacked (no pip, no
    Python) under ``/opt/intel/oneapi/mpi/<version>`` from the build context's
    ``wheels/``.  Like the TACC image it keeps the MPI off the default PATH and
    loads it through BASH_ENV, there Intel's mpivars.sh, here the oneAPI
    ``env/vars.sh`` written below, which the recipes must cope with.
    """
    root = f"{IMPI_PREFIX}/{version}"
    return f"""\
FROM {DEBIAN_IMAGE}
COPY wheels/ /tmp/impi-wheels/
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
      build-essential curl ca-certificates unzip \\
 && rm -rf /var/lib/apt/lists/* \\
 && mkdir -p {root}/env /tmp/impi-x /scratch /work /home1 \\
 && for w in /tmp/impi-wheels/impi_rt-*.whl /tmp/impi-wheels/impi_devel-*.whl; do \\
      unzip -q -o "$w" '*.data/data/*' -d /tmp/impi-x; done \\
 && cp -a /tmp/impi-x/*.data/data/. {root}/ \\
 && rm -rf /tmp/impi-x /tmp/impi-wheels {root}/etc/conda {root}/bin/IMB-* \\
 && ln -s {version} {IMPI_PREFIX}/latest \\
 && printf '%s\\n' \\
      'export I_MPI_ROOT={root}' \\
      'export PATH=$I_MPI_ROOT/bin:$PATH' \\
      'export LD_LIBRARY_PATH=$I_MPI_ROOT/lib${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}' \\
      'export FI_PROVIDER_PATH=$I_MPI_ROOT/lib' \\
      'export PYMPI_CI_MPIVARS=1' > {root}/env/vars.sh \\
 && bash -c '. {root}/env/vars.sh && mpicc -v && mpiexec --version | head -1' \\
 && ! command -v mpicc
ENV BASH_ENV={root}/env/vars.sh
"""


def impi_wheels(dest: Path, timeout: float = 900) -> str:
    """Download Intel MPI's ``impi-devel`` wheel and its ``impi-rt`` into ``dest``; return the version.

    pip resolves the pair (impi-devel pins its impi-rt); from pip's cache after
    the first time.  Only the two Intel MPI wheels are kept.
    """
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("*.whl"):
        old.unlink()
    sh([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "-d", str(dest),
        "impi-devel"], timeout=timeout)
    for whl in dest.glob("*.whl"):
        if not whl.name.startswith(("impi_rt-", "impi_devel-")):
            whl.unlink()
    versions = {w.name.split("-")[1] for w in dest.glob("*.whl")}
    if len(versions) != 1 or len(list(dest.glob("*.whl"))) != 2:
        raise ContainerError(f"expected one impi_rt and one impi_devel wheel of one version in {dest}, "
                             f"got {sorted(w.name for w in dest.glob('*.whl'))}")
    return versions.pop()


#: The stand-in for tacc/tacc-ubuntu18-mvapich2.3-ib.  Debian has no MVAPICH2
#: package, so another system MPI takes its place: Open MPI, whose different
#: ABI and launcher show the recipe assumes nothing MPICH-specific.  Its
#: settings for running in a container belong to the base, as on a real site.
MVAPICH_STANDIN = f"""\
FROM {DEBIAN_IMAGE}
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
      build-essential curl ca-certificates openmpi-bin libopenmpi-dev \\
 && rm -rf /var/lib/apt/lists/* && mkdir -p /scratch /work /home1
ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \\
    OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none \\
    OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1
"""

#: The stand-in for python:3.13-slim-bookworm (Dockerfile.local's default base).
PYTHON_STANDIN = f"""\
FROM {DEBIAN_IMAGE}
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv \\
 && rm -rf /var/lib/apt/lists/*
"""


class ContainerError(RuntimeError):
    """A build or run failed; the message ends with the tail of its output."""


def log(msg: str) -> None:
    print(f"[containers {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sh(argv: list[str], timeout: float, **kw) -> subprocess.CompletedProcess:
    """Run argv, output captured; raise ContainerError with its tail on failure.

    It runs in a session of its own, which is killed whole at the timeout: a build's or a
    container's processes would otherwise live on (and hold the pipes open) after it."""
    t0 = time.monotonic()
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True, **kw) as child:
        try:
            out, err = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            out, err = child.communicate(timeout=120)
            raise ContainerError(f"{argv[:6]} timed out after {timeout:.0f} s:\n"
                                 f"{(out + err)[-6000:]}") from None
    proc = subprocess.CompletedProcess(argv, child.returncode, out, err)
    log(f"{' '.join(map(str, argv[:8]))}{' ...' if len(argv) > 8 else ''}: "
        f"rc {proc.returncode} in {time.monotonic() - t0:.0f} s")
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-6000:]
        raise ContainerError(f"{argv[:6]} failed (rc {proc.returncode}):\n{tail}")
    return proc


# ---------------------------------------------------------------- build locks

LOCKS = CACHE / "locks"


def _lock(name: str, wait: float):
    """The open lock file of ``name``, locked (closing it lets go); waits up to ``wait`` s."""
    LOCKS.mkdir(parents=True, exist_ok=True)
    fh = open(LOCKS / f"{name}.lock", "a")
    t0 = time.monotonic()
    waited = False
    while True:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() - t0 >= wait:
                fh.close()
                raise ContainerError(f"{name}: still being built in the background after {wait:.0f} s; "
                                     f"see {PREBUILD_LOG}") from None
            if not waited:
                log(f"{name}: waiting for its background build ({PREBUILD_LOG})")
                waited = True
            time.sleep(1)
    if waited:
        log(f"{name}: waited {time.monotonic() - t0:.0f} s for its background build")
    return fh


@contextlib.contextmanager
def building(name: str, wait: float = 3600):
    """Hold the build lock of ``name`` (an image or root made here) while it is made.

    A background ``prebuild`` holds every lock from its start and lets each go
    when its image is made; whoever asks for one meanwhile waits here, then finds
    it done.  A lock lets go when its holder dies, so a killed prebuild only means
    the build is done again here.
    """
    with _lock(name, wait):
        yield


def ulimits() -> list[str]:
    """``--ulimit`` flags this machine allows.

    podman otherwise asks runc for limits above the hard ones (nofile 1M,
    nproc 4M) and container start fails with "error setting rlimits".
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    nofile = min(hard, 20000) if hard != resource.RLIM_INFINITY else 20000
    return ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", "nproc=16384:16384"]


def podman(*args: str) -> list[str]:
    return ["podman", "--runtime", "runc", *args]


def image_exists(tag: str) -> bool:
    return subprocess.run(podman("image", "exists", tag)).returncode == 0


def image_size(tag: str) -> int:
    """Size in bytes of an image as podman reports it (all its layers)."""
    out = sh(podman("image", "inspect", "--format", "{{.Size}}", tag), timeout=60).stdout
    return int(out.strip())


# ---------------------------------------------------------------- pip inside builds

def pip_build_secrets(workdir: Path) -> list[str]:
    """``--secret`` flags giving pip in a build this machine's index and CA bundle.

    The host's pip configuration (files and PIP_* variables) may name a mirror
    or a certificate bundle that PyPI traffic here needs.  Only the settings
    that make sense inside a container are kept; local paths (find-links
    directories, file:// indexes) are dropped.  The CA bundle and the
    configuration are mounted as build secrets for the pip step only: they
    never end up in an image.
    """
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"],  # minutes on a loaded machine
                         capture_output=True, text=True, timeout=600).stdout
    settings: dict[str, str] = {}
    for line in out.splitlines():
        key, _, value = line.partition("=")
        name = key.split(".", 1)[-1]
        settings[name] = value.strip().strip("'\"")
    keep: dict[str, str] = {}
    for name in ("index-url", "extra-index-url", "trusted-host", "proxy", "timeout",
                 "default-timeout", "retries"):
        value = settings.get(name)
        if not value:
            continue
        if name.endswith("index-url"):
            value = " ".join(u for u in value.split() if u.startswith(("http://", "https://")))
            if not value:
                continue
        keep[name] = value
    proxy = os.environ.get("https_proxy") or os.environ.get("HTTPS_PROXY")
    if proxy and "proxy" not in keep:
        keep["proxy"] = proxy
    ca = None
    for cand in (settings.get("cert"), os.environ.get("PIP_CERT"), os.environ.get("SSL_CERT_FILE"),
                 os.environ.get("REQUESTS_CA_BUNDLE"), "/etc/ssl/certs/ca-certificates.crt"):
        if cand and Path(cand).is_file():
            ca = Path(cand)
            break
    if ca is not None:
        keep["cert"] = "/run/secrets/ca.pem"
    workdir.mkdir(parents=True, exist_ok=True)
    conf = workdir / "pip.conf"
    # written whole under another name, then renamed: a build starting beside this one reads it whole
    part = workdir / f"pip.conf.{os.getpid()}.{threading.get_ident()}"
    part.write_text("[global]\n" + "".join(f"{k} = {v}\n" for k, v in keep.items()))
    os.replace(part, conf)
    flags = ["--secret", f"id=pip.conf,src={conf}"]
    if ca is not None:
        flags += ["--secret", f"id=ca.pem,src={ca}"]
    return flags


# ---------------------------------------------------------------- bases

def debootstrap(suite: str, target: Path, timeout: float = 900) -> Path:
    """A minimal Debian root of ``suite`` at ``target`` (kept if already complete)."""
    done = target / ".pympi-complete"
    if done.exists():
        return target
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    sh(["debootstrap", "--variant=minbase", suite, str(target), DEBIAN_MIRROR], timeout=timeout)
    (target / "etc/apt/apt.conf.d/99pympi-ci").write_text(APT_CONF)
    done.touch()
    return target


#: the prebuild's chains share the Debian base: one of them makes it, the other waits
_DEBIAN_MADE = threading.Lock()


def import_debian(timeout: float = 900) -> str:
    """The Debian 12 base image, from a debootstrapped root (made once, whichever chain asks first)."""
    with _DEBIAN_MADE:
        return _import_debian(timeout)


def _import_debian(timeout: float) -> str:
    if image_exists(DEBIAN_IMAGE):
        return DEBIAN_IMAGE
    root = debootstrap("bookworm", CACHE / "rootfs-bookworm")
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for p in (root / junk).glob("*"):
            if p.is_file():
                p.unlink()
    tar = subprocess.Popen(["tar", "-C", str(root), "--exclude=./.pympi-complete", "-c", "."],
                           stdout=subprocess.PIPE)
    try:
        sh(podman("import", "--change", 'CMD ["/bin/bash"]', "-", DEBIAN_IMAGE),
           timeout=timeout, stdin=tar.stdout)
    finally:
        tar.stdout.close()
        tar.wait(timeout=60)
    return DEBIAN_IMAGE


def build_base(tag: str, containerfile, timeout: float = 1200) -> str:
    """A stand-in base image from Containerfile text (on top of the Debian image).

    ``containerfile`` is the text, or a function of the build context directory
    that puts the files the build needs there and returns the text.

    Always built: podman's layer cache makes an unchanged one instant, and a
    changed Containerfile is never hidden behind an old tag.
    """
    import_debian()
    ctx = CACHE / "ctx" / tag.rsplit("/", 1)[-1].replace(":", "-")
    ctx.mkdir(parents=True, exist_ok=True)
    if callable(containerfile):  # it needs files in its context first (the Intel MPI wheels)
        containerfile = containerfile(ctx)
    (ctx / "Containerfile").write_text(containerfile)
    sh(podman("build", "--format", "docker", "--isolation", "chroot", "--network", "host",
              *ulimits(), "-t", tag, str(ctx)), timeout=timeout)
    return tag


# ---------------------------------------------------------------- CPython source

@dataclass(frozen=True)
class PythonSource:
    version: str
    url: str
    sha256: str

    def build_args(self) -> list[str]:
        return ["--build-arg", f"PYTHON_VERSION={self.version}",
                "--build-arg", f"PYTHON_URL={self.url}",
                "--build-arg", f"PYTHON_SHA256={self.sha256}"]


def debian_cpython_source(package: str = "python3.13", suite: str = "trixie") -> PythonSource:
    """Where Debian keeps the upstream CPython tarball (python.org is unreachable here).

    Debian's ``.orig.tar.xz`` of a CPython package is the release tarball
    itself (it ships upstream's signature beside it), so the recipe's source
    build is the one users run, only fetched from another address.  Asked of
    apt (a private deb-src list), so it follows point releases.
    """
    state = CACHE / "apt-src"
    (state / "lists" / "partial").mkdir(parents=True, exist_ok=True)
    (state / "sources.list").write_text(
        "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
        f"{DEBIAN_MIRROR} {suite} main\n")
    opts = ["-o", f"Dir::Etc::SourceList={state / 'sources.list'}", "-o", "Dir::Etc::SourceParts=/dev/null",
            "-o", f"Dir::State::Lists={state / 'lists'}", "-o", "Acquire::Check-Valid-Until=false",
            "-o", "Acquire::Check-Date=false"]
    sh(["apt-get", *opts, "update", "-qq"], timeout=300)
    out = sh(["apt-get", *opts, "source", "--print-uris", package], timeout=120).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[1].endswith(".orig.tar.xz"):
            version = parts[1].split("_", 1)[1].removesuffix(".orig.tar.xz")
            return PythonSource(version, parts[0].strip("'"), parts[3].removeprefix("SHA256:"))
    raise ContainerError(f"no orig tarball of {package} in Debian {suite}:\n{out}")


# ---------------------------------------------------------------- recipes

def oci_label_args() -> list[str]:
    """The build line docs/containers.md gives: this checkout's revision, its origin, the time now, as
    build arguments and as ``--label`` (podman's layer cache, buildah 1.28, keeps the LABEL layer of an
    earlier build whose arguments differed: its labels too)."""
    def git(*argv: str) -> str:
        proc = subprocess.run(["git", "-C", str(ROOT), *argv], capture_output=True, text=True)
        return proc.stdout.strip() if proc.returncode == 0 else ""
    values = {"REVISION": git("rev-parse", "HEAD") or "unknown",
              "CREATED": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "SOURCE": git("remote", "get-url", "origin") or ROOT.as_uri()}
    return [arg for key, value in values.items()
            for arg in ("--build-arg", f"{key}={value}", "--label", f"org.opencontainers.image.{key.lower()}={value}")]


def image_labels(tag: str) -> dict[str, str]:
    out = sh(podman("image", "inspect", "--format", "{{json .Labels}}", tag), timeout=60).stdout
    return json.loads(out) or {}


def build_recipe(recipe: str, tag: str, build_args: list[str], timeout: float = 2400,
                 target: str | None = None) -> float:
    """Build docker/<recipe> from the repository root as users do; return seconds."""
    argv = podman("build", "--format", "docker", "--isolation", "chroot", "--network", "host",
                  *ulimits(), *pip_build_secrets(CACHE / "secrets"), *build_args, *oci_label_args(),
                  "-f", str(ROOT / "docker" / recipe), "-t", tag)
    if target:
        argv += ["--target", target]
    t0 = time.monotonic()
    sh(argv + [str(ROOT)], timeout=timeout)
    return time.monotonic() - t0


def run_argv(tag: str, *command: str, env: dict[str, str] | None = None,
             read_only: bool = True, entrypoint: str | None = None) -> list[str]:
    """``podman run`` of an image with no network, as a job on a node would."""
    argv = podman("run", "--rm", "--network", "none", *ulimits())
    if read_only:
        argv += ["--read-only"]
    if entrypoint is not None:
        argv += [f"--entrypoint={entrypoint}"]
    for k, v in (env or {}).items():
        argv += ["-e", f"{k}={v}"]
    return argv + [tag, *command]


#: mpi4py unoptimised in the stand-in images (the recipes' MPI4PY_CFLAGS, -O2 -g0 unless set): its
#: one large C file compiles in 35 CPU-seconds, not 140, three times a CI run; no test here times an
#: MPI call inside an image.
STANDIN_MPI4PY = ("--build-arg", "MPI4PY_CFLAGS=-O0 -g0")


@dataclass(frozen=True)
class Built:
    """An image built from a docker/ recipe here."""

    which: str
    recipe: str
    tag: str
    base: str
    seconds: float
    size: int


IMAGES = {
    # which: (recipe, tag, stand-in base tag, its Containerfile)
    "local": ("Dockerfile.local", "localhost/pympi-gpu:local", PYTHON_BASE, PYTHON_STANDIN),
    "impi": ("Dockerfile.tacc", "localhost/pympi-gpu:impi", IMPI_BASE,
             lambda ctx: impi_base_containerfile(impi_wheels(ctx / "wheels"))),
    "mvapich": ("Dockerfile.tacc", "localhost/pympi-gpu:mvapich-standin", MVAPICH_BASE,
                MVAPICH_STANDIN),
}


@functools.cache
def ensure_image(which: str) -> Built:
    """Build one recipe on its locally made base, once per process."""
    with building(which):
        return _make_image(which)


def _make_image(which: str) -> Built:
    recipe, tag, base, containerfile = IMAGES[which]
    t0 = time.monotonic()
    build_base(base, containerfile)
    args = ["--build-arg", f"BASE={base}"]
    if which != "local":
        # One CPython build for both TACC-style recipes: same build base, same layers.
        args += ["--build-arg", f"PYTHON_BUILD_BASE={DEBIAN_IMAGE}", *debian_cpython_source().build_args(),
                 *STANDIN_MPI4PY]
    build_recipe(recipe, tag, args)
    built = Built(which, recipe, tag, base, time.monotonic() - t0, image_size(tag))
    log(f"{recipe}: {tag} {built.size / 1e6:.0f} MB, {built.seconds:.0f} s with its base")
    return built


def report_sizes(images: list[Built], dest: Path | None = None) -> dict:
    """Sizes of the images and of their bases, also written as JSON to ``dest``."""
    doc = {b.tag: {"recipe": b.recipe, "bytes": b.size, "base": b.base,
                   "base_bytes": image_size(b.base), "build_seconds": round(b.seconds, 1)}
           for b in images}
    dest = dest or CACHE / "image-sizes.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(doc, indent=2))
    log(f"image sizes: {json.dumps(doc)}")
    return doc


def save_archive(tag: str, dest: Path, timeout: float = 600) -> Path:
    """The image as a docker-archive tarball (what ``Bootstrap: docker-archive`` reads)."""
    if dest.exists():
        dest.unlink()
    sh(podman("save", "--format", "docker-archive", "-o", str(dest), tag), timeout=timeout)
    return dest


# ---------------------------------------------------------------- apptainer

INROOT = """\
#!/bin/sh
# inroot ROOT WORKDIR CMD...: run CMD in ROOT, WORKDIR at /work, in a private
# mount namespace (started by unshare -m).  pivot_root, not chroot: Apptainer
# aborts inside a chroot ("weak chrooted environment").
set -e
R=$1; W=$2; shift 2
mount --make-rprivate /
mount --bind "$R" "$R"
mount -t proc proc "$R/proc"
mount --rbind /sys "$R/sys"
mount --rbind /dev "$R/dev"
mkdir -p "$R/work" "$R/.oldroot"
mount --bind "$W" "$R/work"
mount -t tmpfs tmpfs "$R/tmp"
cd "$R"
pivot_root . .oldroot
umount -l /.oldroot
cd /work
exec "$@"
"""

APPTAINER_USER_UID = 1001

#: mksquashfs at gzip level 1: the default level takes minutes on two cores for
#: a 600 MB image; every kernel and squashfs tool reads gzip.
#: --disable-cache: the image comes from a docker-archive file already here; Apptainer's cache of
#: its layers would hold another 1.3 GB for nothing (CI's disk ran out in the last image build)
APPTAINER_BUILD_FLAGS = ("--disable-cache", "--mksquashfs-args", "-comp gzip -Xcompression-level 1")


@dataclass(frozen=True)
class ApptainerRoot:
    """Debian unstable with its ``apptainer`` package, entered with :data:`INROOT`.

    ``unsquash``: the user cannot open ``/dev/fuse``, so Apptainer is told to unpack each .sif into a
    temporary sandbox (``APPTAINER_UNSQUASH``; about 10 s a run for the impi image) instead of
    mounting it with squashfuse, as unprivileged Apptainer does on a cluster node (0.3 s).
    """

    root: Path
    work: Path
    unsquash: bool = False

    def argv(self, *command: str, as_user: bool = True, env: dict[str, str] | None = None,
             keep_env: bool = False) -> list[str]:
        """argv running ``command`` inside the root, in ``work`` (mounted at /work).

        ``as_user`` runs it as an unprivileged user (user namespaces, as on a
        cluster); root in this sandbox lacks CAP_SYS_RESOURCE, which Apptainer
        asks for as root.  ``keep_env`` passes the caller's environment through
        (a launcher's PMI variables), else it starts from an empty one.
        """
        inner = ["env"] if keep_env else ["env", "-i"]
        inner += ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                  "APPTAINER_TMPDIR=/work/tmp", "TMPDIR=/tmp"]
        if as_user:
            inner += ["HOME=/home/tester", "USER=tester"]
        if self.unsquash:
            inner += ["APPTAINER_UNSQUASH=1"]
        inner += [f"{k}={v}" for k, v in (env or {}).items()]
        inner += list(command)
        if as_user:
            inner = ["setpriv", f"--reuid={APPTAINER_USER_UID}", f"--regid={APPTAINER_USER_UID}",
                     "--init-groups", *inner]
        return ["unshare", "-m", str(self.root.parent / "inroot"), str(self.root), str(self.work), *inner]


def apptainer_root(work: Path) -> ApptainerRoot:
    """Debootstrap Debian unstable with apptainer once; ``work`` becomes /work inside."""
    with building("apptainer-root"):
        root = _make_apptainer_root()
    inroot = root.parent / "inroot"
    inroot.write_text(INROOT)
    inroot.chmod(0o755)
    work.mkdir(parents=True, exist_ok=True)
    (work / "tmp").mkdir(exist_ok=True)
    for p in (work, work / "tmp"):
        p.chmod(0o1777)
    return ApptainerRoot(root, work, unsquash=not fuse_for_users())


def fuse_for_users() -> bool:
    """Can an unprivileged user open ``/dev/fuse`` (mode 0666, as on a cluster node)?  CI's
    setup (.ci/setup.d/20-containers.sh) makes it so where a sandbox left it root's only."""
    try:
        return (os.stat("/dev/fuse").st_mode & 0o006) == 0o006
    except OSError:
        return False


#: The Apptainer root's packages: squashfuse mounts a .sif for an unprivileged user (where
#: /dev/fuse is open to users), as on a cluster node without setuid Apptainer.
APPTAINER_PACKAGES = ("apptainer", "squashfs-tools", "squashfuse", "ca-certificates", "util-linux")


def _make_apptainer_root() -> Path:
    root = CACHE / "rootfs-sid"
    ready, packages = root / ".pympi-apptainer", " ".join(APPTAINER_PACKAGES)
    if not ready.exists() or ready.read_text() != packages:
        debootstrap("sid", root)
        shutil.copy("/etc/hosts", root / "etc/hosts")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        sh(["chroot", str(root), "apt-get", "update", "-qq"], timeout=600, env=env)
        sh(["chroot", str(root), "apt-get", "install", "-y", "-qq", "--no-install-recommends",
            *APPTAINER_PACKAGES], timeout=900, env=env)
        conf = root / "etc/apptainer/apptainer.conf"
        text = conf.read_text()
        # Root here has no CAP_SYS_RESOURCE; Apptainer would ask for the full set.
        conf.write_text(text.replace("root default capabilities = full", "root default capabilities = no"))
        sh(["chroot", str(root), "sh", "-c",
            f"getent passwd tester || useradd -m -u {APPTAINER_USER_UID} tester"], timeout=60)
        ready.write_text(packages)
    return root


def pi_sif() -> tuple[ApptainerRoot, str]:
    """``apptainer/pi.def`` built into ``pi.sif`` on the impi image, in the Apptainer root's work
    folder: ``(root, path inside it)``.  Made once per image and definition (the background
    prebuild makes it while the other tiers run); its ``%test`` runs as part of the build."""
    with building("pi-sif"):
        return _make_pi_sif()


def _make_pi_sif() -> tuple[ApptainerRoot, str]:
    image = ensure_image("impi")
    box = apptainer_root(CACHE / "apptainer-work")
    for name in ("pi.def", "nbody.def"):
        shutil.copy(ROOT / "apptainer" / name, box.work / name)
    # the image's layers, not its id: a build with a new CREATED label (each test session's) has another id
    layers = sh(podman("image", "inspect", "--format", "{{.RootFS.Layers}}", image.tag), timeout=60).stdout.strip()
    made_from = f"{layers} {hashlib.sha256((box.work / 'pi.def').read_bytes()).hexdigest()}\n"
    ready = box.work / "pi.sif.from"
    if not (box.work / "pi.sif").exists() or not ready.exists() or ready.read_text() != made_from:
        ready.unlink(missing_ok=True)
        save_archive(image.tag, box.work / "pympi-impi.tar")
        sh(box.argv("apptainer", "build", "--force", *APPTAINER_BUILD_FLAGS,
                    "--build-arg", "BOOTSTRAP=docker-archive",
                    "--build-arg", "FROM=/work/pympi-impi.tar", "/work/pi.sif", "/work/pi.def"), timeout=1800)
        ready.write_text(made_from)
    return box, "/work/pi.sif"


# ---------------------------------------------------------------- CUDA base (Dockerfile.cuda)

#: The CUDA of the stand-in base: wheels of this major.minor make /usr/local/cuda, and
#: Dockerfile.cuda is built with a CUDA_VERSION of the same major.minor, so the wheels
#: it pins to the base's CUDA resolve to these versions.
CUDA_STANDIN_VERSION = os.environ.get("PYMPI_CUDA_STANDIN", "12.8.1")
CUDA_BASE = f"localhost/pympi-ci/cuda-standin:{CUDA_STANDIN_VERSION}-bookworm"
CUDA_IMAGE = "localhost/pympi-gpu:cuda-standin"

#: The stand-in for nvidia/cuda:*-devel and -runtime: Debian 12 with /usr/local/cuda laid out as
#: NVIDIA's images lay it out (include/cuda.h, lib64/libcudart.so, bin/ptxas, nvvm/), made from
#: NVIDIA's PyPI wheels (their registry is not reachable here).  No driver: that comes from the
#: host (--gpus / --nv) on a GPU machine, as with the real images.
CUDA_STANDIN = f"""\
FROM {DEBIAN_IMAGE}
COPY wheels /tmp/wheels
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends unzip \\
 && mkdir /tmp/w && for w in /tmp/wheels/*.whl; do unzip -q -o "$w" -d /tmp/w; done \\
 && c=/usr/local/cuda-{CUDA_STANDIN_VERSION.rsplit('.', 1)[0]} && mkdir -p $c/bin $c/lib64 $c/nvvm \\
 && cp -a /tmp/w/nvidia/cuda_runtime/include $c/ && cp -a /tmp/w/nvidia/cuda_nvcc/include/. $c/include/ \\
 && cp -a /tmp/w/nvidia/cuda_runtime/lib/. $c/lib64/ && ln -s libcudart.so.12 $c/lib64/libcudart.so \\
 && cp -a /tmp/w/nvidia/cuda_nvcc/bin/. $c/bin/ && cp -a /tmp/w/nvidia/cuda_nvcc/nvvm/. $c/nvvm/ \\
 && ln -s $c /usr/local/cuda && echo /usr/local/cuda/lib64 > /etc/ld.so.conf.d/cuda.conf && ldconfig \\
 && test -f /usr/local/cuda/include/cuda.h \\
 && apt-get purge -y unzip && rm -rf /tmp/w /tmp/wheels /var/lib/apt/lists/*
ENV CUDA_VERSION={CUDA_STANDIN_VERSION} PATH=/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility
"""


def cuda_wheels(dest: Path, version: str = CUDA_STANDIN_VERSION) -> list[Path]:
    """NVIDIA's CUDA runtime and compiler wheels of ``version``'s major.minor, downloaded by
    this machine's pip (with its index settings) into ``dest``."""
    mm = version.rsplit(".", 1)[0]
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("*.whl"):
        old.unlink()
    sh([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(dest),
        f"nvidia-cuda-runtime-cu12=={mm}.*", f"nvidia-cuda-nvcc-cu12=={mm}.*"], timeout=900)
    return sorted(dest.glob("*.whl"))


def build_cuda_base(timeout: float = 1800) -> str:
    """The CUDA stand-in base (:data:`CUDA_STANDIN`), its wheels put in the build context.

    Always built, as :func:`build_base`: the same wheels give the same context, which
    podman's layer cache makes instant."""
    import_debian()
    ctx = CACHE / "ctx" / "cuda-standin"
    cuda_wheels(ctx / "wheels")
    (ctx / "Containerfile").write_text(CUDA_STANDIN)
    sh(podman("build", "--format", "docker", "--isolation", "chroot", "--network", "host",
              *ulimits(), "-t", CUDA_BASE, str(ctx)), timeout=timeout)
    return CUDA_BASE


@functools.cache
def ensure_cuda_image(mpi: str = "openmpi") -> Built:
    """docker/Dockerfile.cuda built on the CUDA stand-in base, once per process."""
    with building(f"cuda-{mpi}"):
        return _make_cuda_image(mpi)


def _make_cuda_image(mpi: str) -> Built:
    t0 = time.monotonic()
    base = build_cuda_base()
    tag = CUDA_IMAGE if mpi == "openmpi" else f"{CUDA_IMAGE}-{mpi}"
    build_recipe("Dockerfile.cuda", tag, ["--build-arg", f"BUILD_BASE={base}", "--build-arg", f"BASE={base}",
                                          "--build-arg", f"CUDA_VERSION={CUDA_STANDIN_VERSION}",
                                          "--build-arg", f"MPI={mpi}",
                                          # Open MPI unoptimised: a shorter compile of the longest step of the
                                          # longest prebuild; no test here measures its speed
                                          "--build-arg", "OMPI_CFLAGS=-O0 -g0", *STANDIN_MPI4PY], timeout=3600)
    built = Built("cuda", "Dockerfile.cuda", tag, base, time.monotonic() - t0, image_size(tag))
    log(f"Dockerfile.cuda (MPI={mpi}): {tag} {built.size / 1e6:.0f} MB, {built.seconds:.0f} s with its base")
    return built


# ---------------------------------------------------------------- background prebuild

#: What ``prebuild`` makes: two chains, each in the order the last tests ask for its images, made side by side
#: (a chain's steps wait on the network and the disk as much as on the CPU, which the other chain then takes):
#: test_apptainer's (impi, the Apptainer root, pi.sif) and test_containers' MVAPICH2 stand-in; the CUDA image
#: (the longest build: Open MPI from source and NVIDIA's wheels), then test_containers' local image.
PREBUILD = (("impi", "apptainer-root", "pi-sif", "mvapich"), ("cuda-openmpi", "local"))
PREBUILD_LOG = CACHE / "prebuild.log"
PREBUILD_PID = LOCKS / "prebuild.pid"


def _make(name: str) -> None:
    if name == "apptainer-root":
        _make_apptainer_root()
    elif name == "pi-sif":
        _make_pi_sif()
    elif name.startswith("cuda-"):
        _make_cuda_image(name.removeprefix("cuda-"))
    else:
        _make_image(name)


def _chains() -> tuple[tuple[str, ...], ...]:
    """:data:`PREBUILD` as chains (a flat tuple of names is one chain)."""
    if all(isinstance(name, str) for name in PREBUILD):
        return (tuple(PREBUILD),)
    return tuple(tuple(chain) for chain in PREBUILD)


def prebuild() -> int:
    """Make every :data:`PREBUILD` image, holding all their locks from the start.

    The chains run side by side, each image after the one before it in its chain.  Each lock lets go as
    its image is made, or fails: a failure is logged and the chain goes on; the test that needs the
    failed one builds it again and reports why.  Returns the number of failures.
    """
    import threading

    held = {}
    for name in (n for chain in _chains() for n in chain):  # all at once: no test may start one meanwhile
        try:
            held[name] = _lock(name, wait=0)
        except ContainerError:
            log(f"{name}: already being built by another process; not prebuilt")
    PREBUILD_PID.write_text(f"{os.getpid()}\n")
    failures = []

    def run(chain):
        for name in chain:
            lock = held.get(name)
            if lock is None:
                continue
            t0 = time.monotonic()
            try:
                _make(name)
                log(f"prebuild {name}: made in {time.monotonic() - t0:.0f} s")
            except Exception as exc:  # noqa: BLE001  (the test that needs it says why)
                failures.append(name)
                log(f"prebuild {name}: FAILED after {time.monotonic() - t0:.0f} s: {exc}")
            finally:
                lock.close()  # (a killed prebuild's locks are let go by the kernel)

    workers = [threading.Thread(target=run, args=(chain,), name=f"prebuild-{k}") for k, chain in enumerate(_chains())]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return len(failures)


def _lowest_priority() -> None:
    """In the child: a session of its own (to be stopped as one) at nice 19, and its
    scheduling group at nice 19 too.

    With the kernel's autogroup scheduling (on by default) each session is a scheduling
    group, and groups share the CPU by their own nice value, not their processes': so do
    the MPI ranks, which mpiexec starts in sessions of their own.  A nice 19 process in a
    nice 0 group would take half the machine from them."""
    os.setsid()
    os.nice(19)
    try:
        Path("/proc/self/autogroup").write_text("19")
    except OSError:  # no autogroup scheduling: the process's nice value is what counts
        pass


def prebuild_background(timeout: float = 120) -> int:
    """Start :func:`prebuild` in the background at the lowest CPU priority; return once
    it holds its locks (so that no test can start one of its builds first)."""
    LOCKS.mkdir(parents=True, exist_ok=True)
    PREBUILD_PID.unlink(missing_ok=True)
    with open(PREBUILD_LOG, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tests.system.containers", "prebuild"],
                                cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                preexec_fn=_lowest_priority)
    t0 = time.monotonic()
    while not PREBUILD_PID.exists():
        if proc.poll() is not None or time.monotonic() - t0 > timeout:
            print(f"prebuild did not start; {PREBUILD_LOG}:\n{PREBUILD_LOG.read_text()[-2000:]}", file=sys.stderr)
            return 1
        time.sleep(0.2)
    chains = " | ".join(", ".join(chain) for chain in _chains())
    print(f"prebuild: pid {proc.pid} making {chains} (side by side) at nice 19; log {PREBUILD_LOG}")
    return 0


def prebuild_stop() -> int:
    """End a background prebuild still running (its builds included) and show its log's end."""
    try:
        pid = int(PREBUILD_PID.read_text())
        os.killpg(pid, signal.SIGTERM)
        print(f"prebuild: stopped pid {pid}, still running")
    except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
        pass
    PREBUILD_PID.unlink(missing_ok=True)
    if PREBUILD_LOG.exists():
        made = [line for line in PREBUILD_LOG.read_text().splitlines() if "prebuild " in line]
        print("\n".join(made))
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["prebuild"]:
        if argv[1:2] == ["--background"]:
            return prebuild_background()
        if argv[1:2] == ["--stop"]:
            return prebuild_stop()
        return 1 if prebuild() else 0
    if argv[:1] == ["bases"]:
        for which in ("local", "impi", "mvapich"):
            _, _, tag, text = IMAGES[which]
            build_base(tag, text)
        return 0
    if argv[:1] == ["cuda"]:
        print(ensure_cuda_image(*(argv[1:2] or ["openmpi"])))
        return 0
    if argv[:1] == ["python-source"]:
        print(debian_cpython_source())
        return 0
    print("usage: python -m tests.system.containers bases|cuda [openmpi|mpich]|python-source|"
          "prebuild [--background|--stop]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
