#!/usr/bin/env bash
# Build the pinned venv (once) and train the embedded model.
#   tools/train/train.sh [train.py args...]     (defaults: --out models/hypic-recall)
# Seeded; ~1 h on 2 cores. Not part of CI.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
. "$ROOT/tools/pyvenv.sh"
hy_pyvenv "$HERE"
cd "$ROOT"
exec "$VENV_PYTHON" "$HERE/train.py" "$@"
