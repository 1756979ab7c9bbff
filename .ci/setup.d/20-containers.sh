#!/usr/bin/env bash
# Container tier (tests/system/test_containers.py, test_apptainer.py): podman and
# buildah to build the docker/ recipes, debootstrap to make their base images
# locally (no image registry is reachable in CI), squashfs-tools for .sif files.
# Apptainer itself is not in Debian 12: the tests debootstrap a Debian unstable
# root with its `apptainer` package (tests/system/containers.py, cached per run).
set -euo pipefail
need=(podman buildah runc debootstrap squashfs-tools uidmap fuse-overlayfs ca-certificates
      curl xz-utils)
missing=()
for pkg in "${need[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
podman --version
buildah --version
debootstrap --version
# /dev/fuse open to users (0666, Debian's own setting; a sandboxed CI host may leave it root's):
# the unprivileged Apptainer user then mounts each .sif with squashfuse, as on a cluster node,
# instead of unpacking the whole image for every run (0.3 s, not 10 s; containers.fuse_for_users).
if [ -c /dev/fuse ] && [ "$(stat -c %a /dev/fuse)" != 666 ]; then
    chmod 0666 /dev/fuse || echo "::: /dev/fuse stays $(stat -c %a /dev/fuse): Apptainer tests unpack each image"
fi
