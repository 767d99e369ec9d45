# Sourced by the Python tools' wrappers (tools/golden, tools/train): makes
# DIR/.venv once (Python >= 3.10, $PYTHON or python3), installs the pinned
# DIR/requirements.txt into it, and sets VENV_PYTHON to its interpreter.
#   . tools/pyvenv.sh; hy_pyvenv DIR
hy_pyvenv() {
    venv="$1/.venv"
    python="${PYTHON:-python3}"
    if [ ! -x "$venv/bin/python" ]; then
        "$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "need Python >= 3.10")'
        "$python" -m venv "$venv"
    fi
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$1/requirements.txt"
    VENV_PYTHON="$venv/bin/python"
}
