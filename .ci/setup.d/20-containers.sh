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
