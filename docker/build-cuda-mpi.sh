#!/bin/bash
# Build a CUDA-aware Open MPI (over UCX) from packages this project can reach, then mpi4py on it.
#
#   docker/build-cuda-mpi.sh PREFIX CUDA_ROOT UCX_ROOT
#
# PREFIX     where Open MPI is installed (bin/mpicc, lib/libmpi.so, ...).
# CUDA_ROOT  a CUDA tree with include/cuda.h: /usr/local/cuda of an nvidia/cuda image, or the
#            nvidia/cuda_runtime folder of the `nvidia-cuda-runtime-cu12` wheel.  Open MPI 4.1 needs
#            only the header at build time; it dlopens the driver's libcuda.so.1 at run time.
# UCX_ROOT   a UCX built with CUDA, with include/ucp/api/ucp.h and lib/libucp.so: the libucx folder
#            of the `libucx-cu12` wheel (a CUDA build of UCX) or a site's own UCX.  "none" builds
#            without UCX: device buffers then go through ob1 and smcuda (CUDA IPC), one node only.
#
# The Open MPI source is the upstream tarball inside Debian's (or Ubuntu's) `openmpi` source
# package, fetched with `apt-get source` through a private apt state (no change to the system's
# apt configuration), since open-mpi.org and GitHub may not be reachable.  Environment:
#   OMPI_SRC     an Open MPI source folder or tarball to use instead (e.g. carried to an offline box)
#   OMPI_DISTRO  the suite whose source package to fetch [default: this system's, from os-release]
#   PYTHON       the Python whose environment receives mpi4py [default: python3; "none" skips it]
#   MPI4PY       what pip installs for mpi4py, built from source [default: mpi4py>=4.1]
#   PIP_ARGS     extra pip arguments, e.g. "--no-index --find-links /wheels" on an offline box
#   JOBS         make -j [default: nproc]
#   OMPI_CFLAGS  Open MPI's compiler flags [default: -O2 -g0]; CI's stand-in image takes -O0 -g0,
#                a shorter compile, for a build whose speed it does not measure
#   MPI4PY_CFLAGS  mpi4py's [default: -O2 -g0; CI's stand-in: -O0 -g0]
#   WORKDIR      scratch folder [default: a temporary one, removed at the end]
# It ends by checking that libmpi exports MPIX_Query_cuda_support and, through mpi4py, that it
# answers 1 and that 2 ranks exchange a message (host memory: no GPU is needed to build or check).
# Kept minimal for CI: no Fortran, no OpenSHMEM, no ROMIO (Open MPI's own OMPIO does MPI-IO),
# no man pages.
set -euo pipefail

if [ $# -ne 3 ]; then
    sed -n '2,28p' "$0" >&2
    exit 2
fi
PREFIX=$1
CUDA_ROOT=$2
UCX_ROOT=$3
PYTHON=${PYTHON:-python3}
MPI4PY=${MPI4PY:-mpi4py>=4.1}
PIP_ARGS=${PIP_ARGS:-}
JOBS=${JOBS:-$(nproc)}
OMPI_CFLAGS=${OMPI_CFLAGS:--O2 -g0}
MPI4PY_CFLAGS=${MPI4PY_CFLAGS:--O2 -g0}

die() { echo "build-cuda-mpi: $*" >&2; exit 1; }
[ -f "$CUDA_ROOT/include/cuda.h" ] || die "no include/cuda.h under CUDA_ROOT=$CUDA_ROOT"
if [ "$UCX_ROOT" != none ]; then
    [ -f "$UCX_ROOT/include/ucp/api/ucp.h" ] || die "no include/ucp/api/ucp.h under UCX_ROOT=$UCX_ROOT"
    ls "$UCX_ROOT"/lib/libucp.so* >/dev/null 2>&1 || die "no lib/libucp.so under UCX_ROOT=$UCX_ROOT"
    UCX_ROOT=$(cd "$UCX_ROOT" && pwd -P)
fi
CUDA_ROOT=$(cd "$CUDA_ROOT" && pwd -P)

if [ -n "${WORKDIR:-}" ]; then
    mkdir -p "$WORKDIR"
else
    WORKDIR=$(mktemp -d)
    trap 'rm -rf "$WORKDIR"' EXIT
fi
WORKDIR=$(cd "$WORKDIR" && pwd -P)

fetch_source() {
    # Prints the path of the Open MPI tarball from the distribution's source package.
    local codename id uri components apt
    # shellcheck disable=SC1091
    . /etc/os-release
    id=${ID:-debian}
    codename=${OMPI_DISTRO:-${VERSION_CODENAME:-bookworm}}
    case $id in
        ubuntu) uri=http://archive.ubuntu.com/ubuntu; components="main universe" ;;
        *) uri=http://deb.debian.org/debian; components=main ;;
    esac
    apt=$WORKDIR/apt
    mkdir -p "$apt/lists/partial" "$WORKDIR/src"
    echo "deb-src $uri $codename $components" >"$apt/sources.list"
    local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o "Dir::Etc::SourceParts=$apt/none"
                -o "Dir::State::Lists=$apt/lists" -o "Debug::NoLocking=1")
    apt-get "${opts[@]}" -qq update >&2
    (cd "$WORKDIR/src" && apt-get "${opts[@]}" -qq source --download-only openmpi >&2)
    local found=("$WORKDIR"/src/openmpi_*.orig.tar.*)
    [ -f "${found[0]}" ] || die "apt-get source openmpi gave no .orig tarball"
    echo "${found[0]}"
}

if [ -n "${OMPI_SRC:-}" ]; then
    src=$OMPI_SRC
else
    command -v apt-get >/dev/null || die "no apt-get to fetch Debian's openmpi source: set OMPI_SRC"
    src=$(fetch_source)
fi
if [ -d "$src" ]; then
    tree=$(cd "$src" && pwd -P)
else
    mkdir -p "$WORKDIR/tree"
    tar -xf "$src" -C "$WORKDIR/tree" --strip-components=1
    tree=$WORKDIR/tree
fi
version=$(sed -n 's/^major=//p; s/^minor=//p; s/^release=//p' "$tree/VERSION" | paste -sd.)
echo "build-cuda-mpi: Open MPI $version from $src, CUDA headers $CUDA_ROOT, UCX $UCX_ROOT" >&2

# Configure sees UCX through a view of its headers and shared libraries only: the wheel's
# libtool .la files name the folders it was built in, which libtool then insists on; and the
# wheel has libucp.so.0 but not always the unversioned libucp.so the linker asks for.
ucx=(--without-ucx)
ldflags=""
if [ "$UCX_ROOT" != none ]; then
    view=$WORKDIR/ucx-view
    rm -rf "$view" && mkdir -p "$view/lib"
    ln -s "$UCX_ROOT/include" "$view/include"
    for so in "$UCX_ROOT"/lib/lib*.so*; do
        ln -s "$so" "$view/lib/$(basename "$so")"
    done
    for lib in ucp uct ucs ucm; do
        if [ ! -e "$view/lib/lib$lib.so" ] && [ -e "$view/lib/lib$lib.so.0" ]; then
            ln -s "lib$lib.so.0" "$view/lib/lib$lib.so"
        fi
    done
    ucx=(--with-ucx="$view")
    ldflags="-Wl,-rpath,$UCX_ROOT/lib"
fi

mkdir -p "$WORKDIR/build"
cd "$WORKDIR/build"
start=$SECONDS
"$tree/configure" --prefix="$PREFIX" \
    --with-cuda="$CUDA_ROOT" "${ucx[@]}" \
    --with-hwloc=internal --with-libevent=internal --with-pmix=internal \
    --disable-mpi-fortran --disable-oshmem --disable-io-romio \
    --enable-mca-no-build=btl-uct,btl-openib \
    --without-verbs --disable-dependency-tracking --enable-silent-rules \
    CFLAGS="$OMPI_CFLAGS" LDFLAGS="$ldflags" >configure.log 2>&1 \
    || { tail -n 40 configure.log >&2; die "configure failed (log: $WORKDIR/build/configure.log)"; }
grep -q "^#define OPAL_CUDA_SUPPORT 1" opal/include/opal_config.h || die "configure did not enable CUDA"
make -j"$JOBS" >make.log 2>&1 || { tail -n 40 make.log >&2; die "make failed"; }
make install >install.log 2>&1 || { tail -n 20 install.log >&2; die "make install failed"; }
rm -rf "$PREFIX/share/man" "$PREFIX/share/doc"
echo "build-cuda-mpi: Open MPI built and installed in $((SECONDS - start)) s" >&2

# (grep without -q: with pipefail, grep -q leaving early would fail the pipeline on SIGPIPE)
nm -D --defined-only "$PREFIX/lib/libmpi.so" | grep -w MPIX_Query_cuda_support >/dev/null \
    || die "libmpi.so does not export MPIX_Query_cuda_support"
"$PREFIX/bin/ompi_info" --parsable --all | grep "mpi_built_with_cuda_support:value:true" >/dev/null \
    || die "ompi_info: not built with CUDA support"
if [ "$UCX_ROOT" != none ]; then
    "$PREFIX/bin/ompi_info" | grep "MCA pml: ucx" >/dev/null || die "the UCX pml was not built"
fi

[ "$PYTHON" = none ] && exit 0
start=$SECONDS
# shellcheck disable=SC2086  # PIP_ARGS is a list of words
env MPICC="$PREFIX/bin/mpicc" CFLAGS="$MPI4PY_CFLAGS" "$PYTHON" -m pip install -q --no-cache-dir \
    --no-binary mpi4py $PIP_ARGS "$MPI4PY"
echo "build-cuda-mpi: mpi4py built in $((SECONDS - start)) s" >&2

run_as=()
[ "$(id -u)" = 0 ] && run_as=(--allow-run-as-root)
# (no cross-memory attach: container builds and runtimes often refuse process_vm_readv; no warning
# that this build machine has no CUDA driver, which is expected here; and an rsh agent that exists,
# since Open MPI 4.1's mpiexec refuses to start without one even on one node, and images have no ssh)
env OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_opal_warn_on_missing_libcuda=0 \
    OMPI_MCA_plm_rsh_agent="${OMPI_MCA_plm_rsh_agent:-$(command -v ssh || echo false)}" \
    "$PREFIX/bin/mpiexec" "${run_as[@]}" --oversubscribe -n 2 "$PYTHON" -c '
import ctypes, sys
from mpi4py import MPI
comm = MPI.COMM_WORLD
lib = [line.split()[-1] for line in open("/proc/self/maps") if "/libmpi.so" in line][0]
assert lib.startswith(sys.argv[1]), (lib, sys.argv[1])
query = ctypes.CDLL(lib).MPIX_Query_cuda_support
got = comm.sendrecv(comm.rank, dest=1 - comm.rank, source=1 - comm.rank)
assert got == 1 - comm.rank and query() == 1, (got, query())
if comm.rank == 0:
    print("build-cuda-mpi: 2 ranks of", MPI.Get_library_version().splitlines()[0].strip(),
          "exchanged a message; MPIX_Query_cuda_support() =", query())
' "$PREFIX"
