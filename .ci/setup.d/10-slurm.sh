#!/usr/bin/env bash
# System tier "slurm": a real Slurm (controller, node daemon, client), munge for
# its authentication, the PMI libraries srun's --mpi=pmi2/pmix plugins load (pmix
# is tested with the Open MPI wheel), and shellcheck for jobs/*.sbatch.  The
# daemons are started by the tests (tests/system/slurm.py), not here.  Idempotent.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
# libpmix-dev: Debian's mpi/pmix plugin opens pmix2/lib/libpmix.so, which only the -dev
# package installs (without it `srun --mpi=pmix` fails: "Cannot create context for mpi/pmix").
pkgs=(slurmctld slurmd slurm-client munge libpmix2 libpmix-dev libpmi2-0 shellcheck)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
for tool in slurmctld slurmd sbatch srun salloc squeue scontrol munged shellcheck; do
    command -v "$tool" >/dev/null || { echo "10-slurm.sh: $tool missing after install" >&2; exit 1; }
done
echo "10-slurm.sh: slurm $(dpkg-query -W -f='${Version}' slurm-client), munge $(munged --version 2>&1 | head -1), $(shellcheck --version | sed -n 2p)"
