#!/bin/sh
# Builds here, on a machine with the project's Debian packages and nvcc but no
# GPU, what tools/gpu_check.sh runs on a GPU machine, and packs it with the
# shared libraries it needs into one archive. For a GPU machine that has CUDA's
# driver but none of the project's -dev packages (and no way to install them):
# carry the archive there and run
#
#   HY_GPU_BUNDLE=build-gpu/hypic-gpu.tar.xz sh tools/gpu_check.sh
#
# which runs the same checks without configuring or building. The archive holds
# release/ (test_hbm, test_arena, test_tier_moves, test_cuda_gdn, test_cuda_ops,
# test_cuda_attn, test_exec_dev, test_state_delivery, hypic-cached, hypicctl,
# hypic-model, hypic-bench), asan/ (test_hbm, test_tier_moves and the three test_cuda_*
# under AddressSanitizer, unless HY_GPU_ASAN=0) and lib/ (every library they
# link but the C library's own parts, which the GPU machine has in a version at
# least as new, and CUDA's: libcuda comes from its driver, the runtime and
# cuBLAS — larger than what a device call may carry — from its toolkit).
#
#   sh tools/gpu_bundle.sh [OUT]      # default build-gpu/hypic-gpu.tar.xz
set -eu
cd "$(dirname "$0")/.."
out=${1:-build-gpu/hypic-gpu.tar.xz}
jobs=$(nproc)

cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DHY_WITH_CUDA=ON >/dev/null
cmake --build build-cuda -j"$jobs" --target test_hbm test_arena test_tier_moves hypic-bench \
    test_cuda_gdn test_cuda_ops test_cuda_attn test_exec_dev test_state_delivery hypic-cached hypicctl \
    hypic-model
bins="build-cuda/tests/test_hbm build-cuda/tests/test_arena build-cuda/tests/test_tier_moves
      build-cuda/bench/hypic-bench build-cuda/tests/test_cuda_gdn build-cuda/tests/test_cuda_ops
      build-cuda/tests/test_cuda_attn build-cuda/tests/test_exec_dev
      build-cuda/tests/test_state_delivery build-cuda/cached/hypic-cached build-cuda/client/hypicctl
      build-cuda/tools/hypic-model"
ldd build-cuda/tests/test_hbm | grep -q libcudart ||
    { echo "gpu_bundle: build-cuda/tests/test_hbm was built without CUDA"; exit 1; }
if [ "${HY_GPU_ASAN:-1}" != 0 ]; then
    cmake -S . -B build-cuda-asan -DCMAKE_BUILD_TYPE=Debug -DHY_SANITIZE=ON \
        -DHY_WITH_CUDA=ON >/dev/null
    cmake --build build-cuda-asan -j"$jobs" --target test_hbm test_tier_moves test_cuda_gdn \
        test_cuda_ops test_cuda_attn
    bins="$bins build-cuda-asan/tests/test_hbm build-cuda-asan/tests/test_tier_moves
          build-cuda-asan/tests/test_cuda_gdn build-cuda-asan/tests/test_cuda_ops
          build-cuda-asan/tests/test_cuda_attn"
fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/release" "$stage/asan" "$stage/lib"
for b in $bins; do
    case $b in build-cuda-asan/*) cp "$b" "$stage/asan/" ;; *) cp "$b" "$stage/release/" ;; esac
done
# Every resolved library but glibc's (libc, libm, libdl, libpthread, librt and
# the loader): those must be the GPU machine's own, matching its loader.
# shellcheck disable=SC2086
ldd $bins | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
    grep -v -E '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so' |
    grep -v -E '/(libcuda|libcudart|libcublas|libcublasLt|libnvJitLink|libnvrtc)\.so' |
    while read -r lib; do cp -L "$lib" "$stage/lib/"; done
if ldd $bins | grep "not found" | grep -q -v -E 'lib(cuda|cudart|cublas|cublasLt)\.so'; then
    echo "gpu_bundle: a library the binaries need is missing here:"
    ldd $bins | grep "not found"
    exit 1
fi
mkdir -p "$(dirname "$out")"
tar -cJf "$out" -C "$stage" release asan lib
echo "gpu_bundle: $out ($(du -h "$out" | cut -f1)); on the GPU machine:"
echo "  HY_GPU_BUNDLE=$out sh tools/gpu_check.sh"
