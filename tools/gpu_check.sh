#!/bin/sh
# The checks that need a CUDA device (everywhere else the CUDA code only has
# to build, and its tests skip saying why), for a machine that has one: builds with CUDA forced on and runs the hbm tier's tests (test_hbm)
# and the tier manager's with hbm as its top tier (test_tier_moves, whose
# real_hbm_* cases need the device), first in a Release build, then (unless
# HY_GPU_ASAN=0) under AddressSanitizer, with the ASan/LSan settings the CUDA
# driver needs (tests/CMakeLists.txt gives ctest the same). Builds only
# the targets it runs, in build-cuda and build-cuda-asan. Fails when either
# test skipped its device part: on a GPU machine it must run. Last (unless
# HY_GPU_BENCH=0), `hypic-bench tiers --quick` from the Release build: its
# hbm lines and the JSON's hbm_* fields are the tier's copies against
# cudaMemcpy (the link's limit).
#
# A GPU machine without the project's -dev packages (the lent H200 has CUDA
# but nothing of Debian's) runs an archive that tools/gpu_bundle.sh built
# elsewhere instead of building: HY_GPU_BUNDLE names it, and nothing is
# configured or compiled.
#
#   sh tools/gpu_check.sh            # about a minute on 16 cores
#   HY_GPU_ASAN=0 HY_GPU_BENCH=0 sh tools/gpu_check.sh
#   HY_GPU_BUNDLE=build-gpu/hypic-gpu.tar.xz sh tools/gpu_check.sh
set -eu
cd "$(dirname "$0")/.."
jobs=$(nproc)
command -v nvidia-smi >/dev/null && nvidia-smi -L || echo "gpu_check: no nvidia-smi"

if [ -n "${HY_GPU_BUNDLE:-}" ]; then
    bundle=$(mktemp -d)
    tar -xJf "$HY_GPU_BUNDLE" -C "$bundle"
    rel=$bundle/release
    asan=$bundle/asan
    bench=$bundle/release/hypic-bench
    logs=$bundle
    LD_LIBRARY_PATH=$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export LD_LIBRARY_PATH
    echo "gpu_check: prebuilt binaries from $HY_GPU_BUNDLE"
else
    cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DHY_WITH_CUDA=ON >/dev/null
    cmake --build build-cuda -j"$jobs" --target test_hbm test_arena test_tier_moves hypic-bench
    rel=build-cuda/tests
    asan=""
    bench=build-cuda/bench/hypic-bench
    logs=build-cuda
fi

# skipped LOG: whether the test said it could not reach a device
skipped() { grep -q "SKIPPED: " "$1"; }

"$rel/test_arena" >/dev/null || { echo "gpu_check: test_arena FAILED"; exit 1; }
for t in test_hbm test_tier_moves; do
    rc=0
    OMP_NUM_THREADS=2 "$rel/$t" >"$logs/$t.log" 2>&1 || rc=$?
    cat "$logs/$t.log"
    if skipped "$logs/$t.log"; then
        echo "gpu_check: $t SKIPPED its CUDA part: no usable CUDA device here"
        exit 2
    fi
    [ "$rc" -eq 0 ] || { echo "gpu_check: $t FAILED (exit $rc)"; exit 1; }
    echo "gpu_check: $t passed (Release)"
done

if [ "${HY_GPU_ASAN:-1}" != 0 ]; then
    if [ -z "${HY_GPU_BUNDLE:-}" ]; then
        cmake -S . -B build-cuda-asan -DCMAKE_BUILD_TYPE=Debug -DHY_SANITIZE=ON \
            -DHY_WITH_CUDA=ON >/dev/null
        cmake --build build-cuda-asan -j"$jobs" --target test_hbm test_tier_moves
    fi
    for t in test_hbm test_tier_moves; do
        rc=0
        if [ -n "$asan" ]; then
            [ -x "$asan/$t" ] || { echo "gpu_check: the bundle has no ASan $t (built with HY_GPU_ASAN=0?)"; exit 1; }
            # what ctest sets for these two tests in a sanitizer build
            OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive ASAN_OPTIONS=protect_shadow_gap=0 \
                LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp \
                "$asan/$t" >"$logs/$t.asan.log" 2>&1 || rc=$?
        else
            (cd build-cuda-asan && ctest -R "^$t\$" --output-on-failure -V) \
                >"$logs/$t.asan.log" 2>&1 || rc=$?
        fi
        tail -40 "$logs/$t.asan.log"
        [ "$rc" -eq 0 ] || { echo "gpu_check: $t FAILED under ASan"; exit 1; }
        if skipped "$logs/$t.asan.log"; then
            echo "gpu_check: $t SKIPPED its CUDA part under ASan"
            exit 2
        fi
        echo "gpu_check: $t passed (ASan)"
    done
fi

if [ "${HY_GPU_BENCH:-1}" != 0 ]; then
    "$bench" tiers --quick | tee "$logs/bench_tiers.log"
    grep -q '"hbm_available":true' "$logs/bench_tiers.log" ||
        { echo "gpu_check: hypic-bench tiers did not measure the hbm tier"; exit 1; }
fi
echo "gpu_check: all passed"
