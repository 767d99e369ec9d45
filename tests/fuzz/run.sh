#!/bin/sh
# Runs the fuzz targets of a HY_FUZZ build (`make fuzz`) for a bounded time
# each, one after another, and fails if any of them finds a crash, a leak, a
# sanitizer report, a broken invariant or a timeout.
#   run.sh BUILD_DIR           fuzz every target for FUZZ_SECONDS (default 60)
#   run.sh --seeds BUILD_DIR   regenerate the committed seed corpora with the
#                              fuzz_*_seeds programs (after a format change)
# Each target starts from a copy of its committed corpus (corpus/<target>/)
# in BUILD_DIR/fuzz-run/<target>/, where its new inputs, its log and any
# crashing input (crash-*, leak-*, timeout-*, oom-*) are left; the committed
# corpus is never written to. FUZZ_TARGETS overrides the list of targets.
# Prints each target's final line (runs, coverage, corpus) and its
# statistics.
set -u
here=$(cd "$(dirname "$0")" && pwd)
targets=${FUZZ_TARGETS:-fuzz_request fuzz_entry fuzz_meta fuzz_service}

if [ "${1:-}" = "--seeds" ]; then
    build=${2:?usage: run.sh --seeds BUILD_DIR}
    for t in $targets; do
        [ "$t" = fuzz_service ] && continue # fuzz_request's seeds, copied below
        tmp=$(mktemp -d) || exit 1
        if ! OMP_NUM_THREADS=1 "$build/tests/fuzz/${t}_seeds" "$tmp/$t" >/dev/null; then
            echo "FAIL: ${t}_seeds"; rm -rf "$tmp"; exit 1
        fi
        rm -rf "$here/corpus/$t" && mkdir -p "$here/corpus" && mv "$tmp/$t" "$here/corpus/$t"
        rm -rf "$tmp"
        echo "$t: $(ls "$here/corpus/$t" | wc -l) seeds, $(du -sk "$here/corpus/$t" | cut -f1) KiB"
    done
    rm -rf "$here/corpus/fuzz_service" && cp -R "$here/corpus/fuzz_request" "$here/corpus/fuzz_service"
    exit 0
fi

build=${1:?usage: run.sh BUILD_DIR}
seconds=${FUZZ_SECONDS:-60}
fail=0
for t in $targets; do
    bin="$build/tests/fuzz/$t" dir="$build/fuzz-run/$t"
    if [ ! -x "$bin" ]; then
        echo "FAIL: $t: $bin not built"; fail=1; continue
    fi
    rm -rf "$dir" && mkdir -p "$dir" && cp -R "$here/corpus/$t" "$dir/corpus" || exit 1
    # The model's OpenMP loops are not what is fuzzed: one thread.
    OMP_NUM_THREADS=1 UBSAN_OPTIONS=print_stacktrace=1 "$bin" "$dir/corpus" \
        -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=30 -print_final_stats=1 \
        -artifact_prefix="$dir/" >"$dir/log" 2>&1
    rc=$?
    done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$dir/log" | tail -n 1)
    stats=$(grep '^stat::' "$dir/log" | sed 's/^stat:://; s/:[[:space:]]*/=/' | tr '\n' ' ')
    if [ "$rc" -eq 0 ]; then
        echo "ok:   $t ${seconds}s: $done_line"
        echo "      $stats"
    else
        echo "FAIL: $t (exit $rc); log $dir/log, input:"
        ls "$dir" | grep -E '^(crash|leak|timeout|oom|slow-unit)-' | sed "s|^|      $dir/|"
        # the report: from the sanitizer's or libFuzzer's first error line on
        sed -n '/^==[0-9]*==\|fuzz invariant failed\|runtime error\|^ALARM\|^MS: /,$p' "$dir/log" |
            head -n 60 | sed 's/^/      /'
        fail=1
    fi
done
exit $fail
