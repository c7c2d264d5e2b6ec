#!/usr/bin/env bash
# Build the OSU Micro-Benchmarks from a source tree against one MPI, outside the clone.
#
# usage: ci/build-osu.sh SRC MPI PREFIX
#   SRC     an OSU Micro-Benchmarks source tree (5.x or 7.x, with its configure script): an
#           unpacked release tarball, or the osu_benchmarks/ folder of an MVAPICH2 tree
#   MPI     openmpi | mpich | mvapich2: the wrappers are taken from FABREG_<MPI>_PREFIX/bin
#           when that is set, else Debian's names on PATH (mpicc.openmpi, mpicc.mpich)
#   PREFIX  where it is installed; point the suite at it with FABREG_OSU_PREFIX_<MPI>=PREFIX
#
# FABREG_OSU_CUDA=DIR builds OSU's device buffers (--enable-cuda=basic) against the CUDA
# headers and libcudart under DIR (include/, lib/); FABREG_OSU_LDFLAGS adds linker flags
# (where libcuda.so is). ci/build-gpu-stack.sh sets both. "basic" needs no nvcc: OSU's own
# CUDA kernels serve only the non-blocking collectives' compute and managed memory, which
# the suite's checks do not run.
#
# One build directory per MPI (PREFIX.build): a source tree configured twice for two MPIs
# installs binaries linked against the wrong one (docs/osu.md). Idempotent: a PREFIX that
# already holds this build (same tree, same MPI wrapper) is kept.
set -euo pipefail

die() { echo "build-osu: error: $*" >&2; exit 2; }

[ $# -eq 3 ] || die "usage: ci/build-osu.sh SRC openmpi|mpich|mvapich2 PREFIX"
src=$1 mpi=$2 prefix=$3
[ -d "$src" ] || die "source tree '$src' does not exist"
src=$(cd "$src" && pwd)
[ -f "$src/configure.ac" ] && [ -x "$src/configure" ] \
  || die "'$src' is not an OSU Micro-Benchmarks tree with a configure script"
version=$(sed -n 's/^AC_INIT(\[OSU-Micro-Benchmarks\], *\[\([^]]*\)\].*/\1/p' "$src/configure.ac")
[ -n "$version" ] || die "'$src' is not an OSU Micro-Benchmarks tree (AC_INIT names another project)"
case "$version" in
  5.*|7.*) ;;
  *) die "OSU Micro-Benchmarks $version in '$src': the suite reads 5.x and 7.x" ;;
esac

case "$mpi" in
  openmpi) var=FABREG_OPENMPI_PREFIX debian=mpicc.openmpi ;;
  mpich) var=FABREG_MPICH_PREFIX debian=mpicc.mpich ;;
  mvapich2) var=FABREG_MVAPICH2_PREFIX debian=mpicc.mvapich2 ;;
  *) die "MPI '$mpi': use openmpi, mpich or mvapich2" ;;
esac
if [ -n "${!var:-}" ]; then cc="${!var}/bin/mpicc"; else cc=$(command -v "$debian" || true); fi
[ -n "$cc" ] && [ -x "$cc" ] || die "no mpicc for $mpi: set $var to its install prefix"

mkdir -p "$(dirname "$prefix")"
prefix=$(cd "$(dirname "$prefix")" && pwd)/$(basename "$prefix")
stamp="$prefix/.fabreg-build"
cuda_flags=()
if [ -n "${FABREG_OSU_CUDA:-}" ]; then
  [ -f "$FABREG_OSU_CUDA/include/cuda_runtime.h" ] \
    || die "FABREG_OSU_CUDA '$FABREG_OSU_CUDA' has no include/cuda_runtime.h"
  cuda_flags=(--enable-cuda=basic "--with-cuda-include=$FABREG_OSU_CUDA/include"
              "--with-cuda-libpath=$FABREG_OSU_CUDA/lib")
fi
want="osu $version mpi=$mpi cc=$cc src=$src cuda=${FABREG_OSU_CUDA:-no}"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "build-osu: $prefix already holds $want"
  exit 0
fi
build="$prefix.build"
rm -rf "$build"
mkdir -p "$build"
echo "build-osu: OSU Micro-Benchmarks $version with $cc into $prefix"
(cd "$build" && "$src/configure" CC="$cc" CXX="$cc" --prefix="$prefix" "${cuda_flags[@]}" \
    LDFLAGS="${FABREG_OSU_LDFLAGS:-}") \
  > "$build/configure.log" 2>&1 || die "configure failed: see $build/configure.log"
make -C "$build" -j "$(nproc 2>/dev/null || echo 2)" > "$build/make.log" 2>&1 \
  || die "make failed: see $build/make.log"
make -C "$build" install > "$build/install.log" 2>&1 || die "make install failed: see $build/install.log"
echo "$want" > "$stamp"
echo "build-osu: done; export FABREG_OSU_PREFIX_${mpi^^}=$prefix"
