#!/bin/sh
# The Python client (client/python) against a real hypic-cached: makes a venv once
# (Python >= 3.10, $PYTHON or python3; as tools/pyvenv.sh does), installs the package
# into it and the pinned client/python/requirements-test.txt, then runs its pytest
# suite, which starts and always kills its own daemons.
#
# The package is installed every run, so its stubs are generated from the
# rpc/hypic.proto of this tree. It is built from a temporary copy (the proto named by
# HYPIC_PROTO), so that the source tree gets no build/ folder and two build trees
# testing at once do not share one.
#   test_python.sh HYPIC_CACHED [VENV_DIR]   (VENV_DIR default: client/python/.venv)
set -eu
if [ $# -lt 1 ]; then
    echo "usage: test_python.sh HYPIC_CACHED [VENV_DIR]" >&2
    exit 2
fi
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
HYPIC_CACHED=$(abs "$1")
export HYPIC_CACHED
repo=$(cd "$(dirname "$0")/../.." && pwd)
pkg=$repo/client/python
venv=${2:-$pkg/.venv}

src=$(mktemp -d /tmp/hypic-python.XXXXXX)
trap 'rm -rf "$src"' EXIT
trap 'exit 1' INT TERM

. "$repo/tools/pyvenv.sh"
hy_pyvenv "$pkg" "$venv" "$pkg/requirements-test.txt" 10
venv=$(dirname "$(dirname "$VENV_PYTHON")")
pip="$VENV_PYTHON -m pip --quiet --disable-pip-version-check"
(cd "$pkg" && tar --exclude=./.venv --exclude=./build --exclude='./*.egg-info' \
    --exclude=__pycache__ -cf - .) | tar -C "$src" -xf -
HYPIC_PROTO=$repo/rpc/hypic.proto $pip install --no-build-isolation "$src"

# From the tests folder, so that `import hypic` is the installed package (with its
# generated stubs), never the source folder beside it. Unbuffered, and a test that runs
# 300 s prints every thread's stack: a hang shows where it is before ctest's limit.
cd "$pkg/tests"
PYTHONUNBUFFERED=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider -o faulthandler_timeout=300 \
    --rootdir "$pkg" .
