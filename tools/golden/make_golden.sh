#!/usr/bin/env bash
# Build the pinned venv (once) and regenerate the golden fixtures.
#   tools/golden/make_golden.sh [OUT_DIR] [extra make_golden.py args...]
# OUT_DIR defaults to tests/fixtures/golden. Deterministic; safe to rerun.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
OUT="${1:-$ROOT/tests/fixtures/golden}"
shift || true
VENV="$HERE/.venv"
PYTHON="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "need Python >= 3.10")'
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$HERE/requirements.txt"
exec "$VENV/bin/python" "$HERE/make_golden.py" --out "$OUT" "$@"
