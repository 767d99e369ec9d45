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
# under AddressSanitizer, unless HY_GPU_ASAN=0), lib/ (every library they
# link but the C library's own parts, which the GPU machine has in a version at
# least as new, and CUDA's: libcuda comes from its driver, the runtime and
# cuBLAS — larger than what a device call may carry — from its toolkit) and
# py/ (unless HY_GPU_ADAPTER=0: the wheels that the torch adapter's CUDA test
# needs in the GPU machine's own Python, which has PyTorch and transformers but
# none of the client's dependencies and no network; see py_wheelhouse below).
#
#   sh tools/gpu_bundle.sh [OUT]             # default build-gpu/hypic-gpu.tar.xz
#   sh tools/gpu_bundle.sh --py-only DIR     # only py/'s wheels, into DIR (~20 s)
# OUT and DIR are taken from the repository's root.
set -eu
cd "$(dirname "$0")/.."

# The wheelhouse's pins: the client's dependencies as client/python/pyproject.toml
# pins them, but numpy (the machine's own serves, which its PyTorch and
# transformers use), pytest as requirements-test.txt does, and what grpcio and
# pytest need, pinned here.
PY_PINS="grpcio==1.85.1 protobuf==7.36.2 xxhash==4.1.0 typing-extensions==4.16.0
         pytest==9.2.0 pluggy==1.7.0 iniconfig==2.3.1 packaging==26.4 pygments==2.21.0"
PY_PINS_310="exceptiongroup==1.3.2 tomli==2.5.0"        # pytest's, on 3.10 only
# The CPythons whose wheels py/ carries. The lent machines run Ubuntu 24.04 with
# PyTorch in the system Python, so 3.12 is expected (no run has shown it yet);
# each further version costs about 5.7 MB of the archive (grpcio's wheel,
# mostly), against a cap of 64 MiB for all that a device call carries.
# gpu_check.sh says which version to name when the machine's differs.
HY_GPU_PYTHONS=${HY_GPU_PYTHONS:-3.12}

# py_wheelhouse DIR WORK: DIR emptied and filled with the wheels for the
# adapter's step of gpu_check.sh: the hypic package (its gRPC modules generated
# from rpc/ by the pinned grpcio-tools of requirements-test.txt, in a venv made
# for it in WORK, a scratch folder that the caller removes) and the pins above
# from PyPI, each asked for as manylinux x86_64 and each version of
# HY_GPU_PYTHONS, never as the Python running this (tomli has compiled wheels
# too); a pure wheel is downloaded once. Each wheel is then stored again without
# compression (its files and RECORD unchanged): xz packs the contents of a
# stored zip well and a deflated one not at all, and grpcio's 7.4 MB wheel
# takes 5.4 MB of the archive so.
py_wheelhouse() {
    dir=$1 work=$2
    rm -rf "$dir"
    mkdir -p "$dir" "$work"
    # shellcheck source=tools/pyvenv.sh
    . tools/pyvenv.sh
    hy_pyvenv client/python "$work/venv" client/python/requirements-test.txt
    pip="$VENV_PYTHON -m pip --quiet --disable-pip-version-check"
    # built from a copy: a build writes build/ and an egg-info beside setup.py
    mkdir "$work/src"
    (cd client/python && tar --exclude=__pycache__ -cf - setup.py pyproject.toml README.md hypic) |
        tar -C "$work/src" -xf -
    HYPIC_PROTO=$PWD/rpc/hypic.proto $pip wheel --no-deps --no-build-isolation -w "$dir" "$work/src"
    for v in $HY_GPU_PYTHONS; do
        pins=$PY_PINS
        if [ "$v" = 3.10 ]; then pins="$pins $PY_PINS_310"; fi
        # shellcheck disable=SC2086
        $pip download --no-deps --only-binary=:all: --platform manylinux_2_17_x86_64 \
            --platform manylinux2014_x86_64 --python-version "$v" --implementation cp \
            -d "$dir" $pins
    done
    "$VENV_PYTHON" - "$dir"/*.whl <<'EOF'
import os, sys, zipfile
for path in sys.argv[1:]:
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(path + ".tmp", "w") as dst:
        for info in src.infolist():
            data = src.read(info)  # before compress_type changes: read() follows it
            info.compress_type = zipfile.ZIP_STORED
            dst.writestr(info, data)
    os.replace(path + ".tmp", path)
EOF
    echo "gpu_bundle: $dir: $(find "$dir" -name '*.whl' | wc -l) wheels, $(du -sh "$dir" | cut -f1) (CPython $HY_GPU_PYTHONS)"
}

if [ "${1:-}" = --py-only ]; then
    [ $# -eq 2 ] || { echo "usage: gpu_bundle.sh --py-only DIR" >&2; exit 2; }
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    py_wheelhouse "$2" "$work"
    exit 0
fi
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
parts="release asan lib"
if [ "${HY_GPU_ADAPTER:-1}" != 0 ]; then
    py_wheelhouse "$stage/py" "$stage/py-work"
    parts="$parts py"
fi
mkdir -p "$(dirname "$out")"
# shellcheck disable=SC2086
tar -cJf "$out" -C "$stage" $parts
echo "gpu_bundle: $out ($(du -h "$out" | cut -f1)); on the GPU machine:"
echo "  HY_GPU_BUNDLE=$out sh tools/gpu_check.sh"
