#!/usr/bin/env bash
# Install the system packages fabreg needs, only those that are missing.
# usage: ci/install-deps.sh run|test
#   run:  MPIs, UCX tools, build tools (what `make run` needs)
#   test: the above plus Slurm/munge, Prometheus (server and promtool), Chromium (the report's
#         rendering test), perftest, iproute2 (what `make test` needs)
# As root on Debian/Ubuntu it uses apt-get; otherwise (e.g. a cluster login node) it only
# reports what is missing, since a site provides MPIs through modules or Spack.
set -euo pipefail

profile=${1:-run}

# command -> Debian package
declare -A need=(
  [cc]=build-essential [make]=build-essential
  [mpicc.openmpi]=libopenmpi-dev [mpirun.openmpi]=openmpi-bin
  [mpicc.mpich]=libmpich-dev [mpiexec.mpich]=mpich
  [ucx_info]=ucx-utils [ucx_perftest]=ucx-utils
  [hwloc-ls]=hwloc
)
if [ "$profile" = test ]; then
  need+=(
    [slurmctld]=slurmctld [slurmd]=slurmd [sinfo]=slurm-client [munged]=munge
    [promtool]=prometheus [prometheus]=prometheus
    [chromium]=chromium [ib_write_bw]=perftest [ip]=iproute2 [tc]=iproute2
    [nsenter]=util-linux [iperf3]=iperf3 [ethtool]=ethtool
  )
fi

missing_pkgs=()
missing_cmds=()
for cmd in "${!need[@]}"; do
  if ! command -v "$cmd" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$cmd" ]; then
    missing_cmds+=("$cmd")
    missing_pkgs+=("${need[$cmd]}")
  fi
done
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  missing_cmds+=("python3 -m venv")
  missing_pkgs+=(python3-venv)
fi

if [ ${#missing_pkgs[@]} -eq 0 ]; then
  echo "fabreg: system packages present"
  exit 0
fi

mapfile -t pkgs < <(printf '%s\n' "${missing_pkgs[@]}" | sort -u)
echo "fabreg: missing: ${missing_cmds[*]}"
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "fabreg: installing Debian packages: ${pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${pkgs[@]}" python3-venv
else
  echo "fabreg: not installing (needs root and apt-get). Provide them another way:" >&2
  echo "  Debian/Ubuntu packages: ${pkgs[*]}" >&2
  echo "  on a cluster: load your site's MPI modules or build them with Spack (docs/spack.md);" >&2
  echo "  checks for an MPI that is absent are skipped with the reason." >&2
  for cmd in cc make; do
    if ! command -v "$cmd" >/dev/null 2>&1; then
      echo "fabreg: error: '$cmd' is required to build the probes" >&2
      exit 1
    fi
  done
fi
