#!/bin/sh
# The checks that need a CUDA device (everywhere else the CUDA code only has
# to build, and its tests skip saying why), for a machine that has one:
#   1. the hbm tier: test_arena, test_hbm and test_tier_moves (whose real_hbm_*
#      cases need the device), in a Release build, then (unless HY_GPU_ASAN=0)
#      test_hbm and test_tier_moves under AddressSanitizer with the settings
#      the CUDA driver needs (tests/CMakeLists.txt gives ctest the same);
#   2. the CUDA kernels: test_cuda_gdn, test_cuda_ops, test_cuda_attn (each
#      kernel launched against the CPU kernel) — and under ASan;
#   3. the executor on the device: test_exec_dev (every GDN golden fixture,
#      the device executor against the CPU's: prefill, decode, entries built
#      and reused);
#   4. delivery into GPU memory: test_state_delivery's cuda_ipc session (the
#      daemon and the test, two processes);
#   5. hypic-cached with executor.device: cuda answering the recall prompts
#      in every mode as the CPU daemon does (test_cached_device.sh);
#   6. unless HY_GPU_ADAPTER=0: the torch adapter (hypic.frontend) composing
#      the daemon's entries into the recall model on the device, in the
#      machine's own Python with its PyTorch and transformers
#      (client/python/e2e/test_adapter.py, test_adapter_on_each_device: its
#      cpu and cuda cases); the client and pytest come from a wheelhouse
#      installed into a folder of their own, nothing of that Python changed;
#   7. unless HY_GPU_BENCH=0: `hypic-bench executor --device cuda` (prefill
#      and decode on the device against the CPU, the device's GEMM rates as
#      the limit), `hypic-bench pic --device cuda` (TTFT full / prefix / pic
#      with the passes on the device) and `hypic-bench tiers --quick` (the
#      hbm tier's copies against cudaMemcpy); the first two again on the
#      published shape of the smallest Qwen3.5 (random weights; HY_GPU_REAL=0
#      leaves them out), the executor's once more with bf16 products
#      (--weights bf16).
# A test that says it skipped its device part fails the check (exit 2): on a
# GPU machine it must run. Builds only the targets it runs, in build-cuda and
# build-cuda-asan.
#
# A GPU machine without the project's -dev packages (the lent machines have
# CUDA but nothing of Debian's) runs an archive that tools/gpu_bundle.sh built
# elsewhere instead of building: HY_GPU_BUNDLE names it, and nothing is
# configured or compiled. The archive carries no CUDA library: cuBLAS and
# the runtime are the machine's own (found under /usr/local/cuda*, the
# system's library folders or PyTorch's nvidia packages). Its py/ is step 6's
# wheelhouse; from source, step 6 makes one in build-cuda/py with
# `gpu_bundle.sh --py-only` for the Python it found (PyPI asked: a machine
# where the project builds reaches it).
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
    # the machine's CUDA libraries (cuBLAS is not in the bundle): the first
    # folder holding libcublas.so.13, and the runtime's beside it
    cudalib=""
    for d in /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 /usr/local/cuda/targets/*/lib \
        /usr/lib/x86_64-linux-gnu $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, s, "lib") for p in nvidia.__path__ for s in ("cublas", "cuda_runtime")))' 2>/dev/null); do
        [ -e "$d/libcublas.so.13" ] && cudalib=$cudalib${cudalib:+:}$d
        [ -e "$d/libcudart.so.13" ] && cudalib=$cudalib${cudalib:+:}$d
    done
    echo "gpu_check: CUDA libraries from ${cudalib:-(the default path of the loader)}"
    LD_LIBRARY_PATH=$bundle/lib${cudalib:+:$cudalib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export LD_LIBRARY_PATH
    cached=$bundle/release/hypic-cached
    ctl=$bundle/release/hypicctl
    model=$bundle/release/hypic-model
    echo "gpu_check: prebuilt binaries from $HY_GPU_BUNDLE"
else
    cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DHY_WITH_CUDA=ON >/dev/null
    cmake --build build-cuda -j"$jobs" --target test_hbm test_arena test_tier_moves hypic-bench \
        test_cuda_gdn test_cuda_ops test_cuda_attn test_exec_dev test_state_delivery \
        hypic-cached hypicctl hypic-model
    rel=build-cuda/tests
    cached=build-cuda/cached/hypic-cached
    ctl=build-cuda/client/hypicctl
    model=build-cuda/tools/hypic-model
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
        cmake --build build-cuda-asan -j"$jobs" --target test_hbm test_tier_moves \
            test_cuda_gdn test_cuda_ops test_cuda_attn
    fi
    for t in test_hbm test_tier_moves test_cuda_gdn test_cuda_ops test_cuda_attn; do
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
        if skipped "$logs/$t.asan.log" || grep -q "device tests skipped" "$logs/$t.asan.log"; then
            echo "gpu_check: $t SKIPPED its CUDA part under ASan"
            exit 2
        fi
        echo "gpu_check: $t passed (ASan)"
    done
fi

# device_test NAME SKIP_TEXT CMD...: runs CMD into NAME.log; fails on a
# non-zero exit, and when the log says SKIP_TEXT (its device part skipped)
device_test() {
    name=$1 skip=$2
    shift 2
    rc=0
    OMP_NUM_THREADS=4 "$@" >"$logs/$name.log" 2>&1 || rc=$?
    tail -25 "$logs/$name.log"
    if grep -q "$skip" "$logs/$name.log"; then
        echo "gpu_check: $name SKIPPED its CUDA part: $(grep "$skip" "$logs/$name.log" | head -1)"
        exit 2
    fi
    [ "$rc" -eq 0 ] || { echo "gpu_check: $name FAILED (exit $rc)"; exit 1; }
    echo "gpu_check: $name passed"
}
for t in test_cuda_gdn test_cuda_ops test_cuda_attn; do
    device_test "$t" "device tests skipped" "$rel/$t"
done
device_test test_exec_dev "CUDA cases skipped" "$rel/test_exec_dev"
HYPIC_CACHED=$cached
export HYPIC_CACHED
device_test test_state_delivery "cuda_ipc delivery skipped" "$rel/test_state_delivery"
device_test test_cached_device "cuda cases skipped" sh tests/cached/test_cached_device.sh \
    "$cached" "$ctl"

if [ "${HY_GPU_ADAPTER:-1}" != 0 ]; then
    # The Python a frontend here would use: the first that has torch,
    # transformers and numpy (the client needs no more of the machine's own).
    torchpy=""
    for p in python3 python /usr/bin/python3 /usr/local/bin/python3 /opt/conda/bin/python; do
        if command -v "$p" >/dev/null && "$p" -c 'import torch, transformers, numpy' 2>/dev/null; then
            torchpy=$(command -v "$p")
            break
        fi
    done
    [ -n "$torchpy" ] || { echo "gpu_check: no Python here imports torch, transformers and numpy" \
        "(HY_GPU_ADAPTER=0 leaves the adapter's test out)"; exit 1; }
    pyver=$("$torchpy" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    echo "gpu_check: the adapter in $torchpy: Python $pyver, $("$torchpy" -c \
        'import torch, transformers as t; print("torch", torch.__version__, "transformers", t.__version__)')"
    if [ -n "${HY_GPU_BUNDLE:-}" ]; then
        wheels=$bundle/py
        [ -d "$wheels" ] || { echo "gpu_check: the bundle has no py/ (built with HY_GPU_ADAPTER=0?)"; exit 1; }
    else
        wheels=$PWD/build-cuda/py
        HY_GPU_PYTHONS=$pyver sh tools/gpu_bundle.sh --py-only build-cuda/py
    fi
    if ! ls "$wheels"/grpcio-*-cp"$(echo "$pyver" | tr -d .)"-* >/dev/null 2>&1; then
        echo "gpu_check: $wheels has no wheels for Python $pyver; build the bundle with" \
            "HY_GPU_PYTHONS=\"$pyver\" sh tools/gpu_bundle.sh"
        exit 1
    fi
    # into a folder first on PYTHONPATH, so that the pinned versions are the
    # ones imported whatever that Python has; numpy stays the machine's own
    # (hypic's pins of it are not in the wheelhouse: --no-deps)
    pydir=$(mktemp -d)
    wheel_install() {
        "$torchpy" -m pip install --quiet --disable-pip-version-check --no-index \
            --find-links "$wheels" --target "$pydir" "$@"
    }
    { wheel_install grpcio protobuf xxhash pytest && wheel_install --no-deps hypic; } ||
        { echo "gpu_check: installing $wheels into $pydir with $torchpy's pip failed"; exit 1; }
    # from the e2e folder, so that `import hypic` is the installed package
    # (with its generated gRPC modules), not the source beside it; transformers_frontend.py
    # hides the GPU when CUDA_VISIBLE_DEVICES is unset (its reference path is
    # the CPU's), so it is set. -rfEsp lists each case's outcome at the end:
    # SKIPPED for a skip, which fails the check, PASSED for the cuda case.
    cached_abs=$(cd "$(dirname "$cached")" && pwd)/$(basename "$cached")
    adapter_test() (
        cd client/python/e2e
        PYTHONPATH=$pydir${PYTHONPATH:+:$PYTHONPATH} HYPIC_CACHED=$cached_abs \
            CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} \
            "$torchpy" -m pytest -q -s -rfEsp -p no:cacheprovider --rootdir .. test_adapter.py \
            -k test_adapter_on_each_device
    )
    device_test test_adapter "SKIPPED" adapter_test
    grep -q "^PASSED .*test_adapter_on_each_device\[cuda\]" "$logs/test_adapter.log" ||
        { echo "gpu_check: test_adapter ran no cuda case"; exit 1; }
    rm -rf "$pydir"
fi

if [ "${HY_GPU_BENCH:-1}" != 0 ]; then
    # the executor on the device against the CPU's, and the pic bench's TTFTs
    # with every mode's passes on the device (the `small` preset)
    "$bench" executor --quick --device cuda | tee "$logs/bench_executor.log"
    tail -1 "$logs/bench_executor.log" | grep -q '"device":"cuda' ||
        { echo "gpu_check: hypic-bench executor did not run on the device"; exit 1; }
    "$bench" pic --requests 10 --device cuda | tee "$logs/bench_pic.log"
    tail -1 "$logs/bench_pic.log" | grep -q '"device":"cuda' ||
        { echo "gpu_check: hypic-bench pic did not run on the device"; exit 1; }
    # the same two on the published shape of the smallest Qwen3.5 (random
    # weights, generated here: about a minute), unless HY_GPU_REAL=0
    if [ "${HY_GPU_REAL:-1}" != 0 ]; then
        real=$(mktemp -d)
        "$model" init --preset qwen35-0.8b-shape --seed 1 --out "$real/m" --dtype BF16
        "$bench" executor --quick --device cuda --model "$real/m" |
            tee "$logs/bench_executor_real.log"
        # and with its matrices in bf16 on the tensor cores (executor.weights: bf16)
        "$bench" executor --quick --device cuda --model "$real/m" --weights bf16 |
            tee "$logs/bench_executor_real_bf16.log"
        tail -1 "$logs/bench_executor_real_bf16.log" | grep -q 'bf16 products' ||
            { echo "gpu_check: hypic-bench executor --weights bf16 did not multiply in bf16"; exit 1; }
        "$bench" pic --requests 3 --repr 0.03 --device cuda --model "$real/m" |
            tee "$logs/bench_pic_real.log"
        rm -rf "$real"
    fi
    "$bench" tiers --quick | tee "$logs/bench_tiers.log"
    grep -q '"hbm_available":true' "$logs/bench_tiers.log" ||
        { echo "gpu_check: hypic-bench tiers did not measure the hbm tier"; exit 1; }
fi
echo "gpu_check: all passed"
