#!/usr/bin/env bash
# Build the pinned venv (once) and regenerate the golden fixtures.
#   tools/golden/make_golden.sh [OUT_DIR] [extra make_golden.py args...]
# OUT_DIR defaults to tests/fixtures/golden. Deterministic; safe to rerun.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
OUT="${1:-$ROOT/tests/fixtures/golden}"
shift || true
. "$ROOT/tools/pyvenv.sh"
hy_pyvenv "$HERE"
exec "$VENV_PYTHON" "$HERE/make_golden.py" --out "$OUT" "$@"
