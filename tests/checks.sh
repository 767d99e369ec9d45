# Sourced by the shell tests (test_hypicctl.sh, test_cached_cli.sh,
# test_install.sh): a temporary folder that is the working directory and goes
# at exit together with the daemons started into $pids, counted checks, and
# the closing line a test runner reads ("N passed, N failed").
#   . tests/checks.sh; checks_begin NAME   # $dir, cd'ed into
#   ok TEXT | bad TEXT | expect_rc WANT NAME PROGRAM [ARGS...] | finish

# checks_begin NAME: $dir made (/tmp/NAME.XXXXXX) and entered; the exit
# stops every pid in $pids (asked with SIGTERM, so that a daemon removes its
# socket files; killed after 10 s) and removes $dir.
checks_begin() {
    dir=$(mktemp -d "/tmp/$1.XXXXXX") || exit 1
    pids=
    pass=0 fail=0 failed=
    trap checks_end EXIT
    trap 'exit 1' INT TERM
    cd "$dir" || exit 1
}

checks_end() {
    for p in $pids; do
        kill "$p" 2>/dev/null
        i=0
        while kill -0 "$p" 2>/dev/null && [ $i -lt 100 ]; do
            sleep 0.1
            i=$((i + 1))
        done
        kill -9 "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    rm -rf "$dir"
}

ok() { echo "ok:   $1"; pass=$((pass + 1)); }
# (each failure is named again by finish: a runner that shows only the head
# and the tail of a long output still shows which check failed)
bad() {
    echo "FAIL: $1"
    fail=$((fail + 1))
    failed="$failed
  $1"
}

# expect_rc WANT NAME PROGRAM [ARGS...]: runs PROGRAM with ARGS, stdout in
# ./out, stderr in ./err; checks its exit code (shows both when it is not WANT).
expect_rc() {
    want=$1 name=$2
    shift 2
    "$@" >out 2>err
    rc=$?
    if [ "$rc" -eq "$want" ]; then
        ok "$name (exit $rc)"
    else
        bad "$name: exit $rc, want $want"
        sed 's/^/      out: /' out | head -20
        sed 's/^/      err: /' err | head -20
    fi
}

# daemon_start CACHED NAME CONFIG [ARGS...]: hypic-cached in the background
# with CONFIG, stopped at exit; $pid once it wrote NAME.ready (its addresses:
# grpc=…, http=…), 0 when it did not get ready in 30 s (its log in NAME.log).
daemon_start() {
    _bin=$1 _name=$2 _cfg=$3
    shift 3
    rm -f "$_name.ready"
    "$_bin" --config "$_cfg" --ready-file "$_name.ready" "$@" 2>"$_name.log" &
    pid=$!
    pids="$pids $pid"
    _i=0
    while [ $_i -lt 300 ] && kill -0 "$pid" 2>/dev/null; do
        [ -s "$_name.ready" ] && return 0
        sleep 0.1
        _i=$((_i + 1))
    done
    pid=0
}

# finish: the summary line and the exit status (0: every check passed).
finish() {
    [ "$fail" -eq 0 ] || echo "failed:$failed"
    echo "$pass passed, $fail failed"
    [ "$fail" -eq 0 ]
    exit
}
