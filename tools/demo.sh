#!/bin/sh
# make demo: the service end to end on the embedded model (models/hypic-recall,
# trained by tools/train to answer "?KEY" with the value a document gives).
#   1. starts hypic-cached in the background (loopback ports it picks, its
#      files in a temporary directory) and stops it on exit, whatever happens;
#   2. takes held-out requests of the model (models/hypic-recall/heldout.txt:
#      documents and a question none of them was trained on) and warms every
#      document as its own segment;
#   3. sends each request's documents in an order of its own (a permutation
#      chosen by the request's number: never the warmed order, never another
#      request's), then its question, through `hypicctl prefill --max-new 3`
#      in every mode;
#   4. prints per request and mode the answer read greedily, whether it is
#      the right one, and the TTFT;
#   5. sends one more request, cold (its documents never warmed): the daemon's
#      two scatter workers (scatter.spawn) build its documents' entries while
#      the combiner composes them in order (docs/scheduler.md); then the
#      cache's statistics, the workers among them.
# Usage: tools/demo.sh BUILD_DIR [REQUESTS]
set -eu
build=${1:-build}
nreq=${2:-4}
ctl="$build/client/hypicctl"
daemon="$build/cached/hypic-cached"
root=$(pwd)
model="$root/models/hypic-recall"
work=$(mktemp -d /tmp/hypic-demo.XXXXXX)
pid=
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP PIPE

cat > "$work/hypic-cached.yaml" <<EOF
listen: 127.0.0.1:0
http_listen: 127.0.0.1:0
models: [{name: recall, path: $model}]
tiers: {host: {bytes: 256M}, nvme: {path: $work/nvme, bytes: 1G, extent_bytes: 64M}}
log: {requests: false}
# two local workers; these documents are short (about 50 tokens), so the
# threshold is lowered from its default (256) to send them to the workers
scatter: {spawn: 2, min_tokens: 16}
EOF
echo "== starting hypic-cached (log: $work/daemon.log)"
(cd "$work" && exec "$root/$daemon" --config hypic-cached.yaml --ready-file ready) \
    2> "$work/daemon.log" &
pid=$!
i=0
until [ -f "$work/ready" ]; do
    i=$((i + 1))
    if [ $i -gt 300 ] || ! kill -0 "$pid" 2>/dev/null; then
        echo "hypic-cached did not start; its log:" >&2
        cat "$work/daemon.log" >&2
        exit 1
    fi
    sleep 0.1
done
addr=$(sed -n 's/^grpc=//p' "$work/ready")
metrics=$(sed -n 's/^http=//p' "$work/ready")
echo "   serving on $addr, metrics on http://$metrics/metrics"

# The held-out requests with k = 4 documents: files req<i>/doc<j>.txt (each
# document with its final newline, as the model saw documents in training),
# the question and the answer.
awk -v n="$((nreq + 1))" -v dir="$work" '
    /^R / { want = ($2 == 4 && got < n); if (want) { got++; j = 0; system("mkdir -p " dir "/req" got) } next }
    !want { next }
    /^D / { j++; printf "%s\n", substr($0, 3) > (dir "/req" got "/doc" j ".txt"); next }
    /^Q / { printf "%s", substr($0, 3) > (dir "/req" got "/question"); next }
    /^A / { printf "%s", substr($0, 3) > (dir "/req" got "/answer"); next }
' "$model/heldout.txt"
echo "== warming the documents of $nreq held-out requests (4 each), with the 8-token seam and without"
warmed=$(for r in $(seq 1 "$nreq"); do ls "$work/req$r"/doc*.txt; done)
# shellcheck disable=SC2086
"$ctl" --addr "$addr" --model recall warm --tag demo $warmed
# shellcheck disable=SC2086
"$ctl" --addr "$addr" --model recall warm --tag demo --seam 0 $warmed >/dev/null

# the generated token ids (JSON "generated":[...]) as text: byte = id - 3
answer_of() {
    tr -d '\n ' < "$1" | sed -n 's/.*"generated":\[\([0-9,]*\)\].*/\1/p' |
        awk -F, '{ for (i = 1; i <= NF; i++) printf "%c", $i - 3 }'
}
field() { # the first numeric value of "$2" in JSON file $1
    tr -d '\n ' < "$1" | sed -n "s/.*\"$2\":\([0-9.eE+-]*\).*/\1/p"
}

# order_of R FILE...: the files in the R-th request's order, the permutation
# numbered 7R mod n! (n files; numbered in the factorial number system).
# For R = 1 .. n!-1 with n! not a multiple of 7, these are distinct and
# none is the identity (the order the documents were warmed in): with four
# documents, 23 requests' orders. (An order drawn from awk's rand() seeded
# with R repeated: mawk gave 3 of 4 requests the same one.)
order_of() {
    r=$1
    shift
    printf '%s\n' "$@" | awk -v r="$r" '
        { f[NR - 1] = $0 }
        END {
            n = NR; fact = 1
            for (i = 2; i <= n; i++) fact *= i
            k = (7 * r) % fact
            for (i = n; i >= 1; i--) { # take the (k mod i)-th of the i left
                j = k % i; k = int(k / i)
                printf "%s ", f[j]
                for (m = j; m < i - 1; m++) f[m] = f[m + 1]
            }
        }'
}

right=0
total=0
orders=
for r in $(seq 1 "$nreq"); do
    d="$work/req$r"
    [ -f "$d/question" ] || break
    q=$(cat "$d/question")
    a=$(cat "$d/answer")
    # shellcheck disable=SC2046
    order=$(order_of "$r" $(ls "$d"/doc*.txt))
    names=$(for f in $order; do basename "$f" .txt; done | tr '\n' ' ')
    names=${names% }
    case "$orders" in
    *"|$names|"*)
        echo "demo: request $r would repeat an earlier request's order ($names)" >&2
        exit 1
        ;;
    esac
    orders="$orders|$names|"
    printf '\n== request %s: documents %s then "%s" (the answer: %s)\n' "$r" "$names" "$q" "$a"
    printf '   %-8s %-8s %-6s %10s %16s\n' mode answer right "TTFT ms" "tokens computed"
    for mode in full prefix pic noseam naive; do
        args=""
        for f in $order; do args="$args --segment $f"; done
        # shellcheck disable=SC2086
        "$ctl" --addr "$addr" --model recall --json prefill $args --text "$q" --mode "$mode" \
            --max-new 3 > "$d/$mode.json"
        got=$(answer_of "$d/$mode.json")
        ttft=$(field "$d/$mode.json" ttft_ms)
        computed=$(field "$d/$mode.json" tokens_computed)
        ok=no
        if [ "$got" = "$a" ]; then ok=yes; fi
        if [ "$mode" = pic ]; then
            total=$((total + 1))
            if [ "$ok" = yes ]; then right=$((right + 1)); fi
        fi
        printf '   %-8s %-8s %-6s %10.2f %16s\n' "$mode" "\"$got\"" "$ok" "$ttft" "$computed"
    done
done
cat <<EOF

pic answered $right of $total right. (full prefills every token; prefix reuses only a run of
leading documents seen before in that order, so shuffled orders defeat it, and with nothing
to reuse it is slower than full: it runs a pass per document to keep a checkpoint at each
boundary, and on a model this small a pass costs a few ms of thread wake-ups whatever its
length; pic recomputes a seam of up to 8 tokens per document and composes the rest from the cache; noseam and naive
are its ablations: naive adds cached states without their transition operators — on this
small model that changes no answer, for a reason docs/quality.md shows in its weights.)
EOF
cold="$work/req$((nreq + 1))"
if [ -f "$cold/question" ]; then
    printf '\n== a cold request: documents never seen, built on the scatter workers (the answer: %s)\n' \
        "$(cat "$cold/answer")"
    args=""
    for f in "$cold"/doc*.txt; do args="$args --segment $f"; done
    # shellcheck disable=SC2086
    "$ctl" --addr "$addr" --model recall prefill $args --text "$(cat "$cold/question")" \
        --mode pic --max-new 3
fi
echo
echo "== cache statistics"
"$ctl" --addr "$addr" status
echo
"$ctl" --addr "$addr" ls --limit 10
echo
echo "== stopping hypic-cached (SIGTERM: drain, flush, close)"
kill -TERM "$pid"
wait "$pid" || true
pid=
tail -n 2 "$work/daemon.log"
