#!/bin/sh
# Cross-compiles the CPU parts (common/, kernels/, model/, tiers/, rpc/, transport/, cluster/ and
# tools/hypic-model) for aarch64 Linux on a Debian 12 x86-64 machine, into
# build-aarch64/ (or $1), and checks that what it built is aarch64 code.
#
# First it installs whatever is missing, as tools/install-deps.sh does for the
# native build: Debian's cross compiler and, through multiarch (dpkg
# --add-architecture arm64), the target's own OpenBLAS (pthreads), cJSON,
# OpenSSL and xxHash next to the build machine's. Not the target's RocksDB:
# Debian's librocksdb-dev is not Multi-Arch: same, so installing it for arm64
# would remove the x86-64 one. Nor liburing or CUnit. Hence HY_LIBS_ONLY:
# hy_tiers is compiled (a static library needs only headers, and RocksDB's
# and liburing's in /usr/include are the same for every architecture) but
# nothing that links it (hypic-bench, the tests) is built.
set -eu
cd "$(dirname "$0")/.."
build=${1:-build-aarch64}
jobs=${JOBS:-$(nproc)}
pkgs="gcc-aarch64-linux-gnu libc6-dev-arm64-cross
      libopenblas-pthread-dev:arm64 libcjson-dev:arm64 libssl-dev:arm64 libxxhash-dev:arm64"

if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
t0=$(date +%s)
missing=""
for p in $pkgs; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
if [ -n "$missing" ]; then
    echo "installing missing Debian packages:$missing"
    if ! dpkg --print-foreign-architectures | grep -qx arm64; then
        $SUDO dpkg --add-architecture arm64
    fi
    $SUDO apt-get update -qq
    # shellcheck disable=SC2086 # a list of package names
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
fi
t1=$(date +%s)

mkdir -p "$build"
cmake -S . -B "$build" -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/aarch64-linux-gnu.cmake" \
    -DCMAKE_BUILD_TYPE=Release -DHY_MARCH=portable -DHY_WITH_CUDA=OFF -DHY_BUILD_TESTS=OFF \
    -DHY_LIBS_ONLY=ON >"$build/configure.log" 2>&1 || {
    cat "$build/configure.log"
    exit 1
}
cmake --build "$build" -j"$jobs"
t2=$(date +%s)

# Every object of every library, and the program, must be aarch64 code.
bad=0
exe="$build/tools/hypic-model"
machine=$(readelf -h "$exe" | sed -n 's/^ *Machine: *//p')
class=$(readelf -h "$exe" | sed -n 's/^ *Class: *//p')
if [ "$machine" != "AArch64" ] || [ "$class" != "ELF64" ]; then
    echo "cross-aarch64: $exe is not a 64-bit aarch64 ELF program: $class $machine"
    bad=1
fi
for lib in common/libhy_common.a kernels/libhy_kernels.a model/libhy_model.a tiers/libhy_tiers.a \
    rpc/libhy_rpc.a transport/libhy_transport.a cluster/libhy_cluster.a; do
    machines=$(readelf -h "$build/$lib" | sed -n 's/^ *Machine: *//p' | sort -u)
    if [ "$machines" != "AArch64" ]; then
        echo "cross-aarch64: $build/$lib holds objects for: $machines"
        bad=1
    fi
done
[ "$bad" -eq 0 ] || exit 1
echo "cross-aarch64: $exe: $class $machine"
echo "cross-aarch64: packages $((t1 - t0)) s, configure and build $((t2 - t1)) s"
