#!/usr/bin/env bash
# Build MVAPICH2 2.3.x from a source tree into PREFIX, outside the clone.
#
# usage: ci/build-mvapich2.sh SRC PREFIX [nemesis|mrail]
#   SRC     an MVAPICH2 2.3.x source tree: a release tarball unpacked, or a git checkout
#           (then autotools regenerate configure: autoconf, automake, libtool, bison, flex)
#   PREFIX  where it is installed; point the suite at it with FABREG_MVAPICH2_PREFIX=PREFIX
#   device  nemesis (default): ch3:nemesis, shared memory and TCP, runs on any host;
#           mrail: ch3:mrail --with-rdma=gen2, what InfiniBand sites run (needs libibverbs;
#           on a host without an HCA its ranks start and stop with MVAPICH2's own reason)
#
# Idempotent: a PREFIX that already holds this build (same tree, same device) is kept.
# The build directory is PREFIX.build; nothing is written into the clone or into SRC
# beyond what autogen.sh generates there for a git checkout.
set -euo pipefail

die() { echo "build-mvapich2: error: $*" >&2; exit 2; }

[ $# -ge 2 ] && [ $# -le 3 ] || die "usage: ci/build-mvapich2.sh SRC PREFIX [nemesis|mrail]"
src=$1
prefix=$2
device=${3:-nemesis}

[ -d "$src" ] || die "source tree '$src' does not exist"
src=$(cd "$src" && pwd)
version_file="$src/maint/version.m4"
[ -f "$version_file" ] || die "'$src' is not an MVAPICH2 source tree (no maint/version.m4)"
version=$(sed -n 's/^m4_define(\[MVAPICH2_VERSION_m4\],\[\([^]]*\)\].*/\1/p' "$version_file")
[ -n "$version" ] || die "'$src' is an MPICH tree, not MVAPICH2 (no MVAPICH2_VERSION_m4 in maint/version.m4)"
case "$version" in
  2.3*) ;;
  *) die "MVAPICH2 $version in '$src': this script builds 2.3.x" ;;
esac

case "$device" in
  nemesis) device_flags=(--with-device=ch3:nemesis) ;;
  mrail) device_flags=(--with-device=ch3:mrail --with-rdma=gen2) ;;
  *) die "device '$device': use nemesis or mrail" ;;
esac

mkdir -p "$(dirname "$prefix")"
prefix=$(cd "$(dirname "$prefix")" && pwd)/$(basename "$prefix")
stamp="$prefix/.fabreg-build"
want="mvapich2 $version device=$device src=$src"
if [ -x "$prefix/bin/mpicc" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "build-mvapich2: $prefix already holds $want"
  exit 0
fi

jobs=$(nproc 2>/dev/null || echo 2)
if [ ! -x "$src/configure" ]; then
  for tool in autoconf automake libtoolize bison flex; do
    command -v "$tool" >/dev/null || die "'$src' has no configure script and '$tool' is missing (apt-get install autoconf automake libtool bison flex)"
  done
  echo "build-mvapich2: generating configure in $src (autogen.sh, several minutes)"
  (cd "$src" && ./autogen.sh) > "$prefix.autogen.log" 2>&1 \
    || die "autogen.sh failed: see $prefix.autogen.log"
fi

# MVAPICH2 2.3.7's nemesis TCP netmod does not compile (tcp_init.c uses an undeclared
# 'mpierrno' for 'mpi_errno'): correct that one token in the tree, saying so.
tcp_init="$src/src/mpid/ch3/channels/nemesis/netmod/tcp/tcp_init.c"
if [ "$device" = nemesis ] && grep -q 'mpierrno != 0' "$tcp_init" 2>/dev/null; then
  echo "build-mvapich2: correcting MVAPICH2's typo 'mpierrno' in $tcp_init"
  sed -i 's/mpierrno != 0/mpi_errno != 0/' "$tcp_init"
fi
# ... and its debug print passes a struct where inet_ntop takes a pointer (an error since GCC 12).
tcp_getip="$src/src/mpid/ch3/channels/nemesis/netmod/tcp/tcp_getip.c"
if [ "$device" = nemesis ] && grep -q 'inet_ntop(AF_INET, addr, ip' "$tcp_getip" 2>/dev/null; then
  echo "build-mvapich2: correcting MVAPICH2's inet_ntop call in $tcp_getip"
  sed -i 's/inet_ntop(AF_INET, addr, ip, sizeof(ip))/inet_ntop(AF_INET, \&addr, (char *) ip, sizeof(ip))/' "$tcp_getip"
fi

# --disable-omb: the OSU copy inside the tree links with the C++ compiler, which
# --disable-cxx leaves unset (the mrail build stops there); ci/build-osu.sh builds OSU apart.
build="$prefix.build"
rm -rf "$build"
mkdir -p "$build"
echo "build-mvapich2: configuring MVAPICH2 $version ($device) into $prefix"
(cd "$build" && "$src/configure" --prefix="$prefix" "${device_flags[@]}" \
    --disable-fortran --disable-cxx --disable-mcast --disable-omb --enable-fast=O2 \
    --with-pm=hydra) > "$build/configure.log" 2>&1 \
  || die "configure failed: see $build/configure.log"
echo "build-mvapich2: compiling with $jobs jobs (log: $build/make.log)"
make -C "$build" -j "$jobs" > "$build/make.log" 2>&1 || die "make failed: see $build/make.log"
make -C "$build" install > "$build/install.log" 2>&1 || die "make install failed: see $build/install.log"
echo "$want" > "$stamp"
echo "build-mvapich2: done; export FABREG_MVAPICH2_PREFIX=$prefix"
