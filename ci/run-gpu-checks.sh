#!/usr/bin/env bash
# Run the GPU (CUDA buffer) checks on one GPU host, beside their host-buffer twins, and keep
# the tools' own outputs.
#
# usage: ci/run-gpu-checks.sh STACK OUT
#   STACK  the prefix of ci/build-gpu-stack.sh (its env.sh is sourced)
#   OUT    a folder for the results: raw tool outputs (raw.tar.gz), ReFrame's run report,
#          perflogs and job outputs (reframe.tar.gz), and the console (console.txt)
#
# What runs, with the local system (no scheduler) and the openmpi environment of the stack:
#   - the inventory the skip reasons read: nvidia-smi, ucx_info -v/-d, ompi_info's CUDA lines;
#   - OSU latency, bandwidth (D D, H D, D H) and allreduce on device buffers, launched directly
#     at UCX_LOG_LEVEL=info, so their lane lines show the CUDA transports;
#   - ucx_perftest on device memory (server and client on this host);
#   - through ReFrame: GpuOsuLatency/Bandwidth/Allreduce, the ucx_perftest checks on cuda and
#     host buffers over shm and tcp, and OsuLatency/Bandwidth/Allreduce on host buffers.
set -uo pipefail

die() { echo "run-gpu-checks: error: $*" >&2; exit 2; }
[ $# -eq 2 ] || die "usage: ci/run-gpu-checks.sh STACK OUT"
stack=$1 out=$2
[ -f "$stack/env.sh" ] || die "'$stack' holds no env.sh: build it with ci/build-gpu-stack.sh"
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
# shellcheck disable=SC1091
. "$stack/env.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
raw=$(mktemp -d)
osu=$FABREG_OSU_PREFIX_OPENMPI/libexec/osu-micro-benchmarks/mpi

capture() {  # capture NAME SECONDS CMD...: the command's stdout+stderr into raw/NAME
  local name=$1 limit=$2; shift 2
  echo "run-gpu-checks: $name: $*"
  { echo "\$ $*"; timeout "$limit" "$@" 2>&1; echo "[exit $?]"; } > "$raw/$name"
}

capture nvidia-smi-L.txt 30 nvidia-smi -L
capture nvidia-smi-query.txt 30 nvidia-smi --query-gpu=name,driver_version,memory.total,pci.bus_id --format=csv
capture ucx_info-v.txt 30 ucx_info -v
capture ucx_info-d.txt 60 ucx_info -d
capture ompi_info-cuda.txt 60 bash -c "ompi_info --parsable --all | grep -E 'cuda_support|mpi_ext'"

tls=UCX_TLS=sm,self,cuda_copy,cuda_ipc
run_osu() {  # run_osu NAME RANKS BENCH ARGS...
  local name=$1 ranks=$2; shift 2
  capture "$name" 120 mpirun -np "$ranks" --mca pml ucx -x "$tls" -x UCX_LOG_LEVEL=info \
    "$osu/$1" "${@:2}"
}
run_osu osu_latency-d-cuda-D-D.txt 2 pt2pt/osu_latency -d cuda D D
run_osu osu_bw-d-cuda-D-D.txt 2 pt2pt/osu_bw -d cuda D D
run_osu osu_bw-d-cuda-H-D.txt 2 pt2pt/osu_bw -d cuda H D
run_osu osu_bw-d-cuda-D-H.txt 2 pt2pt/osu_bw -d cuda D H
run_osu osu_bw-H-H.txt 2 pt2pt/osu_bw
run_osu osu_allreduce-d-cuda.txt 2 collective/osu_allreduce -d cuda
capture osu_bw-d-cuda-D-D-ob1-smcuda.txt 120 mpirun -np 2 --mca pml ob1 --mca btl smcuda,self \
  --mca btl_base_verbose 100 "$osu/pt2pt/osu_bw" -d cuda D D

perftest() {  # perftest NAME ARGS...: a server and a client on this host
  local name=$1; shift
  (UCX_TLS=${PERFTEST_TLS} timeout 60 ucx_perftest -p 13337 > "$raw/$name.server" 2>&1 &)
  sleep 2
  UCX_TLS=${PERFTEST_TLS} capture "$name" 60 ucx_perftest localhost -p 13337 "$@"
  sleep 1
}
PERFTEST_TLS=posix,self,cuda_copy,cuda_ipc perftest ucx_perftest-tag_bw-m-cuda.txt \
  -t tag_bw -m cuda -s 4194304 -n 200
PERFTEST_TLS=posix,self,cuda_copy,cuda_ipc perftest ucx_perftest-tag_lat-m-cuda.txt \
  -t tag_lat -m cuda -s 8 -n 10000
# device memory over tcp between two processes of one host: staged by cuda_copy, no cuda_ipc
UCX_LOG_LEVEL=info PERFTEST_TLS=tcp,cuda_copy,self perftest \
  ucx_perftest-tag_bw-m-cuda-tcp.txt -t tag_bw -m cuda -s 4194304 -n 100
tar -C "$raw" -czf "$out/raw.tar.gz" .

export FABREG_PERFLOG_DIR=$out/perflogs
cd "$root" || exit 2
echo "run-gpu-checks: ReFrame (console: $out/console.txt)"
timeout -s INT -k 30 330 reframe -C reframe-config.py -c checks/gpu_buffers.py -c checks/ucx_perftest.py \
  -c checks/osu.py --system local \
  -n 'GpuOsu' -n 'UcxPerftest.*(shm|tcp)' \
  -n '^Osu(Latency|Bandwidth|Allreduce)%transport=shm' \
  -r --prefix "$out/rfm" --report-file "$out/report.json" > "$out/console.txt" 2>&1
status=$?
# the stage folders are what ReFrame keeps of a failed case
tar -C "$out" -czf "$out/reframe.tar.gz" rfm/output rfm/stage perflogs 2>/dev/null
rm -rf "$out/rfm" "$out/perflogs" "$raw"
tail -n 40 "$out/console.txt"
echo "run-gpu-checks: reframe exit $status"
exit "$status"
