#!/bin/sh
# The transformers frontend (client/python/examples/transformers_frontend.py) end to end:
# makes a venv once (Python >= 3.11, $PYTHON or python3), installs the pinned reference
# stack client/python/requirements-e2e.txt (torch, transformers, safetensors, numpy as
# tools/golden pins them; pytest) and the package, then runs client/python/e2e under
# pytest, which starts its own hypic-cached (serving `recall` and one generated preset per
# hybrid family: `tiny`, `tiny-olmo`, `tiny-minimax`, `tiny-kimi`, `tiny-nemotron`, `tiny-ling`)
# and always
# kills it. Decodes 32 tokens from the daemon's delivered state with transformers' forward and
# checks them against transformers' own prefill-and-decode; composes the same requests inside
# transformers' model from the daemon's entries (hypic.frontend: e2e/test_adapter.py) and
# checks its cache against the daemon's pic state; runs the adapter's benchmark briefly
# (bench/adapter_bench.py, its JSON printed) and docs/frontends.md's example as written.
#
# The first run downloads torch and its CUDA wheels from PyPI (about 3 GB; ~3 min here);
# later runs with the same venv only check the pins (seconds). The tests take ~30 s.
#   test_frontend.sh HYPIC_CACHED [VENV_DIR]   (VENV_DIR default: client/python/.venv-e2e)
set -eu
if [ $# -lt 1 ]; then
    echo "usage: test_frontend.sh HYPIC_CACHED [VENV_DIR]" >&2
    exit 2
fi
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
HYPIC_CACHED=$(abs "$1")
export HYPIC_CACHED
repo=$(cd "$(dirname "$0")/../.." && pwd)
pkg=$repo/client/python
venv=${2:-$pkg/.venv-e2e}

src=$(mktemp -d /tmp/hypic-frontend.XXXXXX)
trap 'rm -rf "$src"' EXIT
trap 'exit 1' INT TERM

start=$(date +%s)
# numpy 2.4.6, as tools/golden pins it, needs Python 3.11
. "$repo/tools/pyvenv.sh"
hy_pyvenv "$pkg" "$venv" "$pkg/requirements-e2e.txt" 11
venv=$(dirname "$(dirname "$VENV_PYTHON")")
pip="$VENV_PYTHON -m pip --quiet --disable-pip-version-check"
(cd "$pkg" && tar --exclude=./.venv --exclude=./.venv-e2e --exclude=./build --exclude='./*.egg-info' \
    --exclude=__pycache__ -cf - .) | tar -C "$src" -xf -
HYPIC_PROTO=$repo/rpc/hypic.proto $pip install "$src"
echo "test_frontend.sh: venv ready in $(($(date +%s) - start)) s ($venv)"

# From the e2e folder, so that `import hypic` is the installed package (with its
# generated stubs), never the source folder beside it.
cd "$pkg/e2e"
"$venv/bin/python" -m pytest -q -s -p no:cacheprovider --rootdir "$pkg" .
