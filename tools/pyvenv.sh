# Sourced by the Python tools' wrappers (tools/golden, tools/train) and the Python
# client's test scripts (tests/client): makes a venv once ($PYTHON or python3, at least
# Python 3.MINOR), installs a pinned requirements file into it, and sets VENV_PYTHON to
# its interpreter (an absolute path: callers change folders after).
#   . tools/pyvenv.sh; hy_pyvenv DIR [VENV [REQUIREMENTS [MINOR]]]
# Defaults: VENV DIR/.venv, REQUIREMENTS DIR/requirements.txt, MINOR 10.
hy_pyvenv() {
    venv="${2:-$1/.venv}"
    reqs="${3:-$1/requirements.txt}"
    minor="${4:-10}"
    python="${PYTHON:-python3}"
    if [ ! -x "$venv/bin/python" ]; then
        "$python" -c "import sys; sys.exit(0 if sys.version_info >= (3, $minor) else 'need Python >= 3.$minor')"
        "$python" -m venv "$venv"
    fi
    venv=$(cd "$venv" && pwd)
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$reqs"
    VENV_PYTHON="$venv/bin/python"
}
