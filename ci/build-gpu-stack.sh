#!/usr/bin/env bash
# Build a CUDA-aware MPI stack for the GPU checks, outside the clone.
#
# usage: ci/build-gpu-stack.sh OSU_SRC PREFIX [PACK.tar.xz]
#   OSU_SRC  an OSU Micro-Benchmarks 5.x/7.x source tree (a release tarball unpacked, or
#            the osu_benchmarks/ folder of an MVAPICH2 tree; configure is generated when missing)
#   PREFIX   where the stack goes (absolute; the same path on the GPU machine):
#              PREFIX/ucx      UCX with CUDA transports (PyPI libucx-cu13: cuda_copy, cuda_ipc),
#                              ucx_info and ucx_perftest with its CUDA module
#              PREFIX/cuda     CUDA runtime headers and libcudart (PyPI nvidia-cuda-runtime,
#                              nvidia-cuda-crt)
#              PREFIX/openmpi  Open MPI built --with-cuda over that UCX: from the release tree
#                              in FABREG_OMPI_SRC (4.1.x, with its configure script), else
#                              Debian 12's 4.1.4 source (`apt-get source openmpi`)
#              PREFIX/osu      OSU built --enable-cuda against that Open MPI
#              PREFIX/env.sh   the variables the suite reads (FABREG_OPENMPI_PREFIX,
#                              FABREG_OSU_PREFIX_OPENMPI, PATH, LD_LIBRARY_PATH)
#   PACK     optional: also write the stack, stripped, into this tarball, for a GPU machine
#            that cannot reach a package registry (unpack it at / there)
#
# Needs a package registry (pip, apt with deb-src), a C compiler and autotools. No GPU is
# needed to build: libcuda.so.1 (the driver's library) is only linked against. It is taken
# from FABREG_LIBCUDA_DIR, else the CUDA toolkit's stubs, else the driver found by ldconfig;
# on a host with none, `apt-get download libcuda1` (Debian non-free) and `dpkg -x` it into a
# folder named by FABREG_LIBCUDA_DIR. At run time the GPU machine's own driver is used.
# Idempotent: each part already built for the same inputs is kept.
set -euo pipefail

die() { echo "build-gpu-stack: error: $*" >&2; exit 2; }
say() { echo "build-gpu-stack: $*"; }

UCX_WHEEL=libucx-cu13==1.22.0
CUDART_WHEEL=nvidia-cuda-runtime==13.5.37
CRT_WHEEL=nvidia-cuda-crt==13.5.37  # crt/host_config.h, which cuda_runtime.h includes

[ $# -ge 2 ] && [ $# -le 3 ] || die "usage: ci/build-gpu-stack.sh OSU_SRC PREFIX [PACK.tar.xz]"
osu_src=$1 prefix=$2 pack=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
case "$prefix" in /*) ;; *) die "PREFIX '$prefix' must be absolute (the GPU machine uses the same path)" ;; esac
[ -d "$osu_src" ] || die "OSU source tree '$osu_src' does not exist"
for tool in python3 cc make tar xz strip; do
  command -v "$tool" >/dev/null || die "'$tool' is missing"
done
jobs=$(nproc 2>/dev/null || echo 2)
dl="$prefix.downloads"
mkdir -p "$prefix" "$dl"

# --- libcuda.so.1 to link against -------------------------------------------------------
libcuda_dir=${FABREG_LIBCUDA_DIR:-}
if [ -z "$libcuda_dir" ]; then
  for d in /usr/local/cuda/lib64/stubs /usr/local/cuda/targets/x86_64-linux/lib/stubs; do
    [ -e "$d/libcuda.so" ] && libcuda_dir=$d && break
  done
fi
if [ -z "$libcuda_dir" ]; then
  found=$(ldconfig -p 2>/dev/null | sed -n 's/.*libcuda\.so\.1 .*=> \(.*\)/\1/p' | head -n1)
  [ -n "$found" ] && libcuda_dir=$(dirname "$found")
fi
[ -n "$libcuda_dir" ] || die "no libcuda.so.1 to link against: set FABREG_LIBCUDA_DIR (see the header of this script)"
libcuda=$(ls "$libcuda_dir"/libcuda.so "$libcuda_dir"/libcuda.so.1 2>/dev/null | head -n1)
[ -n "$libcuda" ] || die "FABREG_LIBCUDA_DIR '$libcuda_dir' holds no libcuda.so or libcuda.so.1"
link_dir="$prefix.link"
mkdir -p "$link_dir"
ln -sf "$libcuda" "$link_dir/libcuda.so"

# --- UCX with CUDA, and the CUDA runtime, from PyPI --------------------------------------
wheel() {  # wheel SPEC DEST: unpack a manylinux wheel into DEST
  local spec=$1 dest=$2 name=${1%%==*}
  if [ -f "$dest/.fabreg-wheel" ] && [ "$(cat "$dest/.fabreg-wheel")" = "$spec" ]; then return; fi
  say "downloading $spec"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    -d "$dl" "$spec" || die "pip could not download $spec"
  local file
  file=$(ls "$dl"/"${name//-/_}"-"${spec##*==}"-*.whl 2>/dev/null | head -n1)
  [ -n "$file" ] || die "no wheel of $spec in $dl"
  rm -rf "$dest" && mkdir -p "$dest"
  python3 -m zipfile -e "$file" "$dest" || die "could not unpack $file"
  echo "$spec" > "$dest/.fabreg-wheel"
}
wheel "$UCX_WHEEL" "$prefix/ucx.wheel"
ucx="$prefix/ucx"
rm -rf "$ucx" && mkdir -p "$ucx"
cp -a "$prefix/ucx.wheel/libucx/bin" "$prefix/ucx.wheel/libucx/include" "$ucx/"
mkdir -p "$ucx/lib/ucx"
cp -a "$prefix/ucx.wheel/libucx/lib/"*.so* "$ucx/lib/"
cp -a "$prefix/ucx.wheel/libucx/lib/ucx/"*.so* "$ucx/lib/ucx/"
cp -a "$prefix/ucx.wheel/"libucx_cu13.libs/* "$ucx/lib/"
chmod +x "$ucx/bin/"*

wheel "$CUDART_WHEEL" "$prefix/cudart.wheel"
wheel "$CRT_WHEEL" "$prefix/crt.wheel"
cuda="$prefix/cuda"
rm -rf "$cuda" && mkdir -p "$cuda"
cp -a "$prefix/cudart.wheel/nvidia/cu13/include" "$prefix/cudart.wheel/nvidia/cu13/lib" "$cuda/"
cp -a "$prefix/crt.wheel/nvidia/cu13/include/." "$cuda/include/"
ln -sf libcudart.so.13 "$cuda/lib/libcudart.so"

# --- Open MPI over that UCX, CUDA-aware ---------------------------------------------------
ompi="$prefix/openmpi"
src_dir=${FABREG_OMPI_SRC:-$dl/openmpi-4.1.4}
if [ -n "${FABREG_OMPI_SRC:-}" ] && [ ! -x "$src_dir/configure" ]; then
  die "FABREG_OMPI_SRC '$src_dir' is not an Open MPI release tree (no configure script)"
fi
ompi_want="openmpi src=$src_dir cuda=$cuda ucx=$ucx"
if [ -f "$ompi/.fabreg-build" ] && [ "$(cat "$ompi/.fabreg-build")" = "$ompi_want" ]; then
  say "$ompi already holds $ompi_want"
else
  if [ ! -x "$src_dir/configure" ]; then
    command -v apt-get >/dev/null || die "apt-get is needed for Open MPI's source (apt-get source openmpi)"
    say "downloading Open MPI's source (apt-get source openmpi; needs a deb-src line)"
    (cd "$dl" && apt-get source -qq --download-only openmpi=4.1.4-3) > "$dl/apt-source.log" 2>&1 \
      || die "apt-get source openmpi failed (add a deb-src line for Debian 12, or set FABREG_OMPI_SRC): see $dl/apt-source.log"
    tar -xf "$dl/openmpi_4.1.4.orig.tar.xz" -C "$dl" || die "could not unpack Open MPI's source"
  fi
  build="$prefix/openmpi.build"
  rm -rf "$build" && mkdir -p "$build"
  say "configuring Open MPI from $src_dir --with-cuda --with-ucx (log: $build/configure.log)"
  (cd "$build" && "$src_dir/configure" --prefix="$ompi" --with-cuda="$cuda" --with-ucx="$ucx" \
      --without-verbs --disable-mpi-fortran --disable-oshmem --enable-mca-no-build=btl-uct \
      --disable-man-pages LDFLAGS="-L$link_dir") > "$build/configure.log" 2>&1 \
    || die "configure failed: see $build/configure.log"
  say "compiling Open MPI with $jobs jobs (log: $build/make.log)"
  make -C "$build" -j "$jobs" > "$build/make.log" 2>&1 || die "make failed: see $build/make.log"
  make -C "$build" install > "$build/install.log" 2>&1 || die "make install failed: see $build/install.log"
  echo "$ompi_want" > "$ompi/.fabreg-build"
fi

# --- OSU with CUDA buffers ----------------------------------------------------------------
osu_tree="$prefix/osu.src"
if [ ! -x "$osu_src/configure" ] && [ ! -x "$osu_tree/configure" ]; then
  for tool in autoreconf automake libtoolize; do
    command -v "$tool" >/dev/null || die "'$osu_src' has no configure script and '$tool' is missing"
  done
  rm -rf "$osu_tree" && cp -a "$osu_src" "$osu_tree"
  say "generating OSU's configure in $osu_tree"
  (cd "$osu_tree" && autoreconf -fi) > "$prefix/osu.autoreconf.log" 2>&1 \
    || die "autoreconf failed: see $prefix/osu.autoreconf.log"
elif [ -x "$osu_src/configure" ]; then
  osu_tree=$osu_src
fi
FABREG_OPENMPI_PREFIX=$ompi FABREG_OSU_CUDA=$cuda FABREG_OSU_LDFLAGS="-L$link_dir" \
  "$here/build-osu.sh" "$osu_tree" openmpi "$prefix/osu"

cat > "$prefix/env.sh" <<EOF
# The CUDA-aware stack of ci/build-gpu-stack.sh: source it before reframe.
export FABREG_OPENMPI_PREFIX=$ompi
export FABREG_OSU_PREFIX_OPENMPI=$prefix/osu
export PATH=$ompi/bin:$ucx/bin:\$PATH
export LD_LIBRARY_PATH=$ompi/lib:$ucx/lib:$cuda/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
EOF
say "done; source $prefix/env.sh"

if [ -n "$pack" ]; then
  say "packing the stripped stack into $pack"
  staging="$prefix.pack"
  rm -rf "$staging" && mkdir -p "$staging$(dirname "$prefix")"
  mkdir -p "$staging$prefix"
  cp -a "$ucx" "$cuda" "$ompi" "$prefix/osu" "$prefix/env.sh" "$staging$prefix/"
  rm -rf "$staging$prefix/cuda/include" "$staging$prefix/openmpi/share/doc"
  find "$staging" -type f \( -name '*.so*' -o -perm -u+x \) -exec strip --strip-unneeded {} + 2>/dev/null || true
  find "$staging" \( -name '*.a' -o -name '*.la' \) -delete
  # The libraries of this host the stack links to (hwloc, libevent, ...) travel with it, in
  # PREFIX/lib.host (last in LD_LIBRARY_PATH); the C library and the GPU driver's do not.
  hostlibs="$staging$prefix/lib.host"
  mkdir -p "$hostlibs"
  # (ldd fails on scripts, and prints UCX's own libraries as not found or as the host's.)
  libs=$(find "$ucx" "$ompi" "$prefix/osu" -type f \( -name '*.so*' -o -perm -u+x \) -print0 \
    | xargs -0 ldd 2>/dev/null | sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p' | sort -u \
    | grep -vE "^$prefix/|/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libgcc_s|libstdc\+\+|libcuda|libnvidia-[a-z]*|libuc[mpst]|libucs_signal)\.so" \
    || true)
  for lib in $libs; do cp -L "$lib" "$hostlibs/"; done
  sed -i "s|^export LD_LIBRARY_PATH=.*|&:$prefix/lib.host|" "$staging$prefix/env.sh"
  tar -C "$staging" -cJf "$pack" "${prefix#/}"
  rm -rf "$staging"
  say "$(du -h "$pack" | cut -f1) in $pack; on the GPU machine: tar -C / -xJf $(basename "$pack")"
fi
