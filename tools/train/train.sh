#!/usr/bin/env bash
# Build the pinned venv (once) and train the embedded model.
#   tools/train/train.sh [train.py args...]     (defaults: --out models/hypic-recall)
# Seeded; ~1 h on 2 cores. Not part of CI.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VENV="$HERE/.venv"
PYTHON="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "need Python >= 3.10")'
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$HERE/requirements.txt"
cd "$ROOT"
exec "$VENV/bin/python" "$HERE/train.py" "$@"
