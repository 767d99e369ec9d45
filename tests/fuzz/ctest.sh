#!/bin/sh
# The fuzz targets inside `make test`: builds them with clang (the same tree
# `make fuzz` uses, so CI builds it once) and runs each for FUZZ_SECONDS
# (default 10) from its committed corpus — a bounded fuzz that also replays
# every seed, the regression inputs among them. `make fuzz` runs them longer.
#   ctest.sh SOURCE_DIR FUZZ_BUILD_DIR
set -u
src=${1:?usage: ctest.sh SOURCE_DIR FUZZ_BUILD_DIR}
build=${2:?usage: ctest.sh SOURCE_DIR FUZZ_BUILD_DIR}
if ! command -v clang >/dev/null 2>&1; then
    echo "SKIPPED: no clang (libFuzzer); deploy/debian-packages.txt lists it"
    exit 0
fi
mkdir -p "$build" || exit 1
CC=clang cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Debug -DHY_FUZZ=ON -DHY_WITH_CUDA=OFF \
    >"$build/ctest-configure.log" 2>&1 || { cat "$build/ctest-configure.log"; exit 1; }
cmake --build "$build" -j2 --target fuzz_all >"$build/ctest-build.log" 2>&1 ||
    { tail -n 40 "$build/ctest-build.log"; exit 1; }
FUZZ_SECONDS=${FUZZ_SECONDS:-10} sh "$src/tests/fuzz/run.sh" "$build"
