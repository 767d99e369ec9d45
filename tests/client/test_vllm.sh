#!/bin/sh
# hypic.vllm end to end (client/python/e2e_vllm): vLLM's CPU build with HypicConnector,
# against hypic-cached serving the same two tiny hybrid checkpoints (Qwen3.5 and
# Qwen3-Next, made by tools/vllm/make_checkpoints.py). The venv is tools/vllm/venv.sh's
# (the first run downloads about 3.5 GB; later runs check the pins). One pytest a vLLM
# engine: each model's tests (prefix caching off), the layout guard (no engine), prefix
# caching on, the benchmark at
# its smallest, then docs/frontends.md's example with vLLM's OpenAI server.
#   test_vllm.sh HYPIC_CACHED [VENV_DIR]   (VENV_DIR default: client/python/.venv-vllm)
set -eu
if [ $# -lt 1 ]; then
    echo "usage: test_vllm.sh HYPIC_CACHED [VENV_DIR]" >&2
    exit 2
fi
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
HYPIC_CACHED=$(abs "$1")
export HYPIC_CACHED
repo=$(cd "$(dirname "$0")/../.." && pwd)
pkg=$repo/client/python
venv=${2:-$pkg/.venv-vllm}
sh "$repo/tools/vllm/venv.sh" "$venv"
venv=$(cd "$venv" && pwd)

work=$(mktemp -d /tmp/hypic-vllm.XXXXXX)
trap 'rm -rf "$work"' EXIT
trap 'exit 1' INT TERM
"$venv/bin/python" "$repo/tools/vllm/make_checkpoints.py" "$work/checkpoints" --seed 1
export HYPIC_VLLM_CHECKPOINTS="$work/checkpoints"
# vLLM on the CPU reserves this much for its KV cache by default otherwise: most of RAM
export VLLM_CPU_KVCACHE_SPACE=1

# From the e2e folder, so that `import hypic` is the installed package.
cd "$pkg/e2e_vllm"
rc=0
for m in qwen35 qwen3next; do
    echo "== $m"
    HYPIC_VLLM_MODEL=$m "$venv/bin/python" -m pytest -q -s -p no:cacheprovider --rootdir "$pkg" \
        test_connector.py || rc=1
done
echo "== the layout guard"
"$venv/bin/python" -m pytest -q -p no:cacheprovider --rootdir "$pkg" test_guard.py || rc=1
echo "== prefix caching on"
"$venv/bin/python" -m pytest -q -s -p no:cacheprovider --rootdir "$pkg" test_prefix_caching.py || rc=1
echo "== bench/vllm_bench.py, briefly"
"$venv/bin/python" -m pytest -q -s -p no:cacheprovider --rootdir "$pkg" test_bench.py || rc=1
echo "== docs/frontends.md's example: vLLM's OpenAI server"
"$venv/bin/python" -m pytest -q -s -p no:cacheprovider --rootdir "$pkg" test_docs_example.py || rc=1
exit $rc
