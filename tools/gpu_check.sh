#!/bin/sh
# The checks that need a CUDA device (everywhere else the CUDA code only has
# to build, and its tests skip saying why), for a machine that has one: builds with CUDA forced on and runs the hbm tier's tests (test_hbm)
# and the tier manager's with hbm as its top tier (test_store_tiers3, whose
# real_hbm_* cases need the device), first in a Release build, then (unless
# HY_GPU_ASAN=0) under AddressSanitizer through ctest, which supplies the
# ASan/LSan settings the CUDA driver needs (tests/CMakeLists.txt). Builds only
# the targets it runs, in build-cuda and build-cuda-asan. Fails when either
# test skipped its device part: on a GPU machine it must run. Last (unless
# HY_GPU_BENCH=0), `hypic-bench tiers --quick` from the Release build: its
# hbm lines and the JSON's hbm_* fields are the tier's copies against
# cudaMemcpy (the link's limit).
#
#   sh tools/gpu_check.sh            # about a minute on 16 cores
#   HY_GPU_ASAN=0 HY_GPU_BENCH=0 sh tools/gpu_check.sh
set -eu
cd "$(dirname "$0")/.."
jobs=$(nproc)
command -v nvidia-smi >/dev/null && nvidia-smi -L || echo "gpu_check: no nvidia-smi"

cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DHY_WITH_CUDA=ON >/dev/null
cmake --build build-cuda -j"$jobs" --target test_hbm test_arena test_store_tiers3 hypic-bench
build-cuda/tests/test_arena >/dev/null || { echo "gpu_check: test_arena FAILED"; exit 1; }
for t in test_hbm test_store_tiers3; do
    rc=0
    build-cuda/tests/$t >build-cuda/$t.log 2>&1 || rc=$?
    cat build-cuda/$t.log
    if grep -q "SKIPPED: " build-cuda/$t.log; then
        echo "gpu_check: $t SKIPPED its CUDA part: no usable CUDA device here"
        exit 2
    fi
    [ "$rc" -eq 0 ] || { echo "gpu_check: $t FAILED (exit $rc)"; exit 1; }
    echo "gpu_check: $t passed (Release)"
done

if [ "${HY_GPU_ASAN:-1}" != 0 ]; then
    cmake -S . -B build-cuda-asan -DCMAKE_BUILD_TYPE=Debug -DHY_SANITIZE=ON \
        -DHY_WITH_CUDA=ON >/dev/null
    cmake --build build-cuda-asan -j"$jobs" --target test_hbm test_store_tiers3
    for t in test_hbm test_store_tiers3; do
        rc=0
        (cd build-cuda-asan && ctest -R "^$t\$" --output-on-failure -V) \
            >build-cuda-asan/$t.log 2>&1 || rc=$?
        tail -40 build-cuda-asan/$t.log
        [ "$rc" -eq 0 ] || { echo "gpu_check: $t FAILED under ASan"; exit 1; }
        if grep -q "SKIPPED: " build-cuda-asan/$t.log; then
            echo "gpu_check: $t SKIPPED its CUDA part under ASan"
            exit 2
        fi
        echo "gpu_check: $t passed (ASan)"
    done
fi

if [ "${HY_GPU_BENCH:-1}" != 0 ]; then
    build-cuda/bench/hypic-bench tiers --quick | tee build-cuda/bench_tiers.log
    grep -q '"hbm_available":true' build-cuda/bench_tiers.log ||
        { echo "gpu_check: hypic-bench tiers did not measure the hbm tier"; exit 1; }
fi
