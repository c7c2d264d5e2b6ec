#!/usr/bin/env bash
# Describe a Debian/Ubuntu host's MPIs, UCX, perftest and compilers to Spack.
#
#   ci/spack-debian-externals.sh OUTDIR [MVAPICH2_PREFIX...]
#
# MVAPICH2_PREFIX: an MVAPICH2 install (ci/build-mvapich2.sh, or a site's), described as an
# external whose `fabrics` variant is the device its `mpichversion` reports; give one per
# build (spack.yaml asks for `fabrics=mrail` and `fabrics=nemesis`).
#
# Writes, under OUTDIR (which spack/sites/local.yaml finds via FABREG_SPACK_LOCAL_DIR):
#   prefixes/openmpi, prefixes/mpich   one prefix per MPI, made of symlinks
#   externals.yaml                     Spack `packages:` externals for what is installed
#   mirror/                            an (empty) local file mirror for source tarballs
#
# Why by hand: Debian puts OpenMPI and MPICH under the same /usr, and Spack's MPI
# recipes derive `mpicc` from the prefix, so an external at /usr would compile
# MPICH builds with whatever `mpicc` the alternatives system points at. Each MPI gets
# its own prefix of links to its `*.openmpi` / `*.mpich` tools. `spack external find
# openmpi` also fails with Spack 1.x (the recipe still uses the pre-1.0 compiler API).
# Versions and variants are read from the installed tools, not assumed.
set -euo pipefail

die() { echo "spack-debian-externals: $*" >&2; exit 2; }

[[ $# -ge 1 ]] || die "usage: $0 OUTDIR [MVAPICH2_PREFIX...]"
out=$(mkdir -p "$1" && cd "$1" && pwd)
shift
mvapich2_prefixes=("$@")
multiarch=$(gcc -print-multiarch 2>/dev/null || true)
[[ -n "$multiarch" ]] || die "gcc -print-multiarch gave nothing: not a Debian-style host?"
libdir=/usr/lib/$multiarch

# link_tools PREFIX SUFFIX TOOL...: PREFIX/bin/TOOL -> /usr/bin/TOOL.SUFFIX (when installed)
link_tools() {
    local prefix=$1 suffix=$2 tool
    shift 2
    mkdir -p "$prefix/bin"
    for tool in "$@"; do
        if [[ -e /usr/bin/$tool.$suffix ]]; then
            ln -sfn "/usr/bin/$tool.$suffix" "$prefix/bin/$tool"
        fi
    done
}

externals=()

gcc_version=$(gcc -dumpfullversion)
externals+=("  gcc:
    externals:
    - spec: gcc@$gcc_version languages:='c,c++$(command -v gfortran >/dev/null && echo ,fortran)'
      prefix: /usr
      extra_attributes:
        compilers:
          c: /usr/bin/gcc
          cxx: /usr/bin/g++$(command -v gfortran >/dev/null && printf '\n          fortran: /usr/bin/gfortran')
    buildable: false")

make_version=$(make --version | sed -n '1s/^GNU Make \([0-9.]*\).*/\1/p')
[[ -n "$make_version" ]] && externals+=("  gmake:
    externals:
    - spec: gmake@$make_version
      prefix: /usr
    buildable: false")

if [[ -x /usr/bin/mpicc.openmpi ]]; then
    prefix=$out/prefixes/openmpi
    rm -rf "$prefix"
    link_tools "$prefix" openmpi mpicc mpicxx mpic++ mpiCC mpif77 mpif90 mpifort mpirun mpiexec
    for tool in ompi_info orted orterun; do
        [[ -e /usr/bin/$tool ]] && ln -sfn "/usr/bin/$tool" "$prefix/bin/$tool"
    done
    ln -sfn "$libdir/openmpi/include" "$prefix/include"
    ln -sfn "$libdir/openmpi/lib" "$prefix/lib"
    version=$(ompi_info --version | sed -n 's/^Open MPI v\([0-9.]*\).*/\1/p')
    fabrics=""
    ompi_info | grep -q "MCA pml: ucx" && fabrics=" fabrics=ucx"
    externals+=("  openmpi:
    externals:
    - spec: openmpi@$version$fabrics
      prefix: $prefix
    buildable: false")
fi

if [[ -x /usr/bin/mpicc.mpich ]]; then
    prefix=$out/prefixes/mpich
    rm -rf "$prefix"
    link_tools "$prefix" mpich mpicc mpicxx mpif77 mpif90 mpifort mpirun mpiexec
    # Hydra starts its proxy from the directory of mpiexec.
    for tool in hydra_pmi_proxy hydra_nameserver hydra_persist mpichversion; do
        [[ -e /usr/bin/$tool ]] && ln -sfn "/usr/bin/$tool" "$prefix/bin/$tool"
    done
    ln -sfn "$libdir/mpich/include" "$prefix/include"
    mkdir -p "$prefix/lib"
    for lib in "$libdir"/libmpich*.so* "$libdir"/libmpi.so.12*; do
        [[ -e "$lib" ]] && ln -sfn "$lib" "$prefix/lib/"
    done
    version=$(mpichversion | sed -n 's/^MPICH Version:[[:space:]]*\([0-9.]*\).*/\1/p')
    device=$(mpichversion | sed -n 's/^MPICH Device:[[:space:]]*\(.*\)$/\1/p')
    variants=""
    case "$device" in
        ch4:*) variants=" device=ch4 netmod=${device#ch4:}" ;;
        ch3:sock) variants=" device=ch3:sock" ;;
        ch3:nemesis) variants=" device=ch3 netmod=tcp" ;;
    esac
    externals+=("  mpich:
    externals:
    - spec: mpich@$version$variants
      prefix: $prefix
    buildable: false")
fi

# MVAPICH2 device -> the Spack recipe's `fabrics` value.
mvapich2_externals=""
for prefix in "${mvapich2_prefixes[@]}"; do
    [[ -x $prefix/bin/mpichversion ]] \
        || die "'$prefix' is not an MVAPICH2 install: it has no bin/mpichversion"
    info=$("$prefix/bin/mpichversion")
    version=$(sed -n 's/^MVAPICH2 Version:[[:space:]]*\([0-9.]*\).*/\1/p' <<<"$info")
    device=$(sed -n 's/^MVAPICH2 Device:[[:space:]]*\([^[:space:]]*\).*/\1/p' <<<"$info")
    [[ -n $version ]] || die "'$prefix' is not an MVAPICH2 install: its mpichversion names no MVAPICH2 version"
    case "$device" in
        ch3:mrail) fabrics=mrail ;;
        ch3:nemesis) fabrics=nemesis ;;
        ch3:sock) fabrics=sock ;;
        ch3:psm) fabrics=psm ;;
        *) die "MVAPICH2 in '$prefix' has device '$device', which Spack's fabrics variant does not name" ;;
    esac
    mvapich2_externals+="
    - spec: mvapich2@$version fabrics=$fabrics
      prefix: $(cd "$prefix" && pwd)"
done
[[ -n $mvapich2_externals ]] && externals+=("  mvapich2:
    externals:$mvapich2_externals
    buildable: false")

if command -v ucx_info >/dev/null; then
    version=$(ucx_info -v | sed -n 's/^# Version \([0-9.]*\).*/\1/p')
    build=$(ucx_info -b)
    variants=""
    [[ -e $libdir/ucx/libuct_ib.so.0 ]] && variants+=" +verbs"
    [[ -e $libdir/ucx/libuct_rdmacm.so.0 ]] && variants+=" +rdmacm"
    [[ -e $libdir/ucx/libuct_cma.so.0 ]] && variants+=" +cma"
    for tl in rc ud dc; do
        grep -q "HAVE_TL_${tl^^} *1" <<<"$build" && variants+=" +$tl"
    done
    externals+=("  ucx:
    externals:
    - spec: ucx@$version$variants
      prefix: /usr
    buildable: false")
fi

if [[ -x /usr/bin/ib_write_bw ]]; then
    # Debian's version is "4.5+0.17-1": upstream 4.5-0.17.
    version=$(dpkg-query -W -f='${Version}' perftest 2>/dev/null | sed 's/-[^-]*$//; s/+/-/')
    externals+=("  perftest:
    externals:
    - spec: perftest@${version:-4.5}
      prefix: /usr
    buildable: false")
fi

{
    echo "# Written by ci/spack-debian-externals.sh on $(hostname) at $(date -u +%FT%TZ); regenerate, do not edit."
    echo "packages:"
    printf '%s\n' "${externals[@]}"
} >"$out/externals.yaml"
mkdir -p "$out/mirror"
echo "wrote $out/externals.yaml (${#externals[@]} packages); export FABREG_SPACK_LOCAL_DIR=$out"
