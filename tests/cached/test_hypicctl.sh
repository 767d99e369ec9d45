#!/bin/sh
# hypicctl against a real hypic-cached on loopback: every command, as a table
# and as --json (parsed with python3), with its exit code; --help listing
# every command (--list-commands) and each one's own help; usage errors (2)
# naming the option or argument at fault; a server that is not there (3); a
# failed call (1, "hypicctl: CODE: msg" on stderr). The daemon runs with TLS
# (the committed test certificate) and two
# tenants, so the TLS channel, bearer tokens and tenant isolation are
# exercised through the command line too. Every process it starts is stopped on exit.
#   test_hypicctl.sh HYPIC_CACHED HYPICCTL
set -u
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
cached=$(abs "$1") ctl=$(abs "$2")
fixtures=$(cd "$(dirname "$0")/../fixtures/tls" && pwd) || exit 1
. "$(dirname "$0")/../checks.sh"
checks_begin hypicctl-test

# run WANT_RC NAME ARGS...: runs hypicctl with ARGS, stdout in out, stderr in
# err; checks its exit code.
run() {
    want=$1 name=$2
    shift 2
    expect_rc "$want" "$name" "$ctl" "$@"
}

# check NAME PYTHON_EXPR: the expression over d = the JSON object in out.
check() {
    if python3 -c "import json,sys; d=json.load(open('out')); sys.exit(0 if ($2) else 1)" 2>pyerr; then
        ok "$1"
    else
        bad "$1: not ($2)"
        sed 's/^/      out: /' out | head -5
        sed 's/^/      py:  /' pyerr | head -5
    fi
}

# has NAME FILE TEXT: FILE contains TEXT.
has() {
    if grep -q -- "$3" "$2"; then ok "$1"; else
        bad "$1: no '$3' in $2"
        sed 's/^/      /' "$2" | head -20
    fi
}

# ---- without a daemon: usage errors and a server that is not there --------
run 0 "--help" --help
has "--help lists the commands" out "prefill"
cp out help.txt
run 0 "--list-commands" --list-commands
cp out commands.txt
has "--list-commands names build" commands.txt "^build$"
if [ "$(wc -l <commands.txt)" -ge 16 ]; then ok "--list-commands: $(wc -l <commands.txt) commands"; else
    bad "--list-commands: only $(wc -l <commands.txt) lines"; fi
while read -r c; do # --help's list is the command table: every command is in it
    has "--help lists $c" help.txt "^  $c\( \|$\)"
    "$ctl" "$c" --help >out 2>err && grep -q "^usage: hypicctl $c" out &&
        ok "$c --help" || bad "$c --help: no usage line"
done <commands.txt
run 0 "warm --help" warm --help
has "warm --help" out "usage: hypicctl warm"
run 2 "no command"
run 2 "unknown command" frobnicate
has "unknown command named" err "unknown command 'frobnicate'"
run 2 "unknown option" ls --colour
has "unknown option named" err "^hypicctl ls: unknown option --colour"
run 2 "missing value" ls --tier
has "missing value named" err "^hypicctl ls: --tier needs a value"
run 2 "missing value, last argument" prefill --segment x --query
has "missing value named (prefill)" err "^hypicctl prefill: --query needs a value"
run 2 "a flag given a value" inspect --verify=yes 0
has "the flag named" err "^hypicctl inspect: --verify takes no value"
run 2 "unknown global option" --colour status
has "unknown global option named" err "^hypicctl: unknown option --colour"
run 2 "a global option's bad value after the command" status --deadline-ms soon
has "the global option named" err "^hypicctl status: --deadline-ms: 'soon' is not an integer"
run 2 "an option of another command" status --desc
has "an option of another command named" err "^hypicctl status: unknown option --desc"
run 2 "pin takes no --all" pin --all
run 2 "unexpected argument" ls extra
has "the argument named" err "^hypicctl ls: unexpected argument 'extra'"
run 2 "two targets of unpin" unpin --tag a --all
run 2 "a value out of range" bench --random 4 --tokens 0
has "the range named" err "^hypicctl bench: --tokens: '0' is not an integer in \[1, "
run 2 "a bad mode" prefill --segment x --text q --mode quick
has "the modes listed" err "'quick' is not a mode (full, prefix, pic, noseam, naive)"
run 2 "bad tier" ls --tier floppy
run 2 "bad sort" ls --sort size
run 2 "bad key" inspect 1234
run 2 "bad number" ls --limit -3
run 2 "invalidate without target" invalidate
run 2 "invalidate with two targets" invalidate --tag a --tenant
run 2 "policy set without --admit" policy set host --evict lru
run 2 "prefill without query" prefill --segment x
run 2 "bench without segments" bench
run 3 "nothing listening" --addr 127.0.0.1:1 --deadline-ms 5000 status
has "UNAVAILABLE printed" err "^hypicctl: UNAVAILABLE: "

# ---- the daemon: TLS, two tenants ------------------------------------------
cat >hypic-cached.yaml <<EOF
listen: 127.0.0.1:0
http_listen: 127.0.0.1:0
models: [{name: tiny, path: var/models/tiny}, {name: tiny-olmo, path: var/models/tiny-olmo},
         {name: tiny-minimax, path: var/models/tiny-minimax}, {name: tiny-kimi, path: var/models/tiny-kimi},
         {name: tiny-nemotron, path: var/models/tiny-nemotron}, {name: tiny-ling, path: var/models/tiny-ling}]
tiers: {host: {bytes: 64M}}
executor: {threads: 2}
tls: {cert: $fixtures/server.pem, key: $fixtures/server.key}
tenants:
  list:
    - {name: alice, token: alice-secret-token-1, admin: true}
    - {name: bob, token: bob-secret-token-22}
log: {requests: false}
EOF
"$cached" --config hypic-cached.yaml --init-models --ready-file ready 2>daemon.log &
pid=$!
pids=$pid
addr=
i=0
while [ $i -lt 600 ]; do # 60 s: the model is generated first
    if ! kill -0 "$pid" 2>/dev/null; then break; fi
    addr=$(sed -n 's/^grpc=//p' ready 2>/dev/null)
    [ -n "$addr" ] && break
    sleep 0.1
    i=$((i + 1))
done
if [ -z "$addr" ]; then
    echo "FAIL: hypic-cached did not get ready; its log:"
    cat daemon.log
    exit 1
fi
echo "hypic-cached serving on $addr (TLS)"

# ---- a second daemon on the same address: the error says how to move it -----
cat > second.yaml <<EOF
listen: 127.0.0.1:0
http_listen: 127.0.0.1:0
models: [{name: tiny, path: var/models/tiny}]
tiers: {host: {bytes: 16M}}
EOF
"$cached" --config second.yaml --listen "$addr" >second.out 2>second.err
rc=$?
if [ $rc -eq 1 ]; then ok "a second daemon on $addr exits 1"; else bad "a second daemon on $addr: exit $rc"; fi
has "it names the address" second.err "cannot listen on $addr"
has "it names the flag to move it" second.err "another address: --listen HOST:PORT"
# and it is all the user sees: none of gRPC core's own log lines ("E1207 ...
# chttp2_server.cc:1045] ... No address added ...") before it
if grep -q -e 'chttp2_server' -e '^[EWID][0-9]\{4\} ' second.err; then
    bad "gRPC core's log lines on a port in use"
    sed 's/^/      /' second.err | head -5
else
    ok "no gRPC core log lines on a port in use"
fi
# ---- a daemon keeping its weights in q8 (status says so), pins capped at 1 byte,
# every request that reuses entries compared with a full pass (the quality watch) --
cat > q8.yaml <<EOF
listen: 127.0.0.1:0
http_listen: 127.0.0.1:0
models: [{name: tiny, path: var/models/tiny}]
tiers: {host: {bytes: 16M}}
executor: {threads: 2, weights: q8}
limits: {pinned_bytes_per_tenant: 1}
pic: {shadow_rate: 1, shadow_kl_warn: 0.5}
EOF
"$cached" --config q8.yaml --ready-file q8.ready 2>q8.log &
q8pid=$!
pids="$pids $q8pid"
q8addr=
i=0
while [ $i -lt 300 ] && kill -0 "$q8pid" 2>/dev/null; do
    q8addr=$(sed -n 's/^grpc=//p' q8.ready 2>/dev/null)
    [ -n "$q8addr" ] && break
    sleep 0.1
    i=$((i + 1))
done
run 0 "status of a q8 daemon" --addr "$q8addr" status
has "q8: the weight format" out "^models    tiny (q8 weights, "
python3 -c "print('a document to pin, longer than the seam. ' * 6)" > pincap.txt
run 0 "q8: warm a document" --addr "$q8addr" --model tiny warm --tag capped pincap.txt
run 1 "pin past the tenant's pin cap" --addr "$q8addr" pin --tag capped
has "pin cap: RESOURCE_EXHAUSTED naming the limit" err "^hypicctl: RESOURCE_EXHAUSTED: .*limits.pinned_bytes_per_tenant"
run 0 "nothing was pinned" --addr "$q8addr" --model tiny ls --json
check "no pin after a refused one" 'd["total"] == 1 and int(d["entries"][0].get("pinned_until_unix_ns", 0)) == 0'
# the quality watch: pic composes (KL small, the same first token), naive adds
# states without T (far off on this model: past the 0.5 warning, logged); a
# request in mode full has nothing to compare
python3 -c "print('a second document for the quality watch to compose. ' * 6)" > watch.txt
run 0 "q8: warm a second document" --addr "$q8addr" --model tiny warm watch.txt
for m in pic naive full; do
    run 0 "q8: prefill $m" --addr "$q8addr" --model tiny prefill --segment watch.txt \
        --segment pincap.txt --text "which one?" --mode $m --reuse fetch --max-new 2
done
i=0
while [ $i -lt 100 ]; do # the comparisons run when the executor is idle
    "$ctl" --addr "$q8addr" status --json >out 2>err
    python3 -c "import json; d=json.load(open('out')); sys_ok=len([r for r in d['stats'].get('shadow', []) if r['compared']]) >= 2; raise SystemExit(0 if sys_ok else 1)" 2>/dev/null && break
    sleep 0.1
    i=$((i + 1))
done
check "shadow: pic compared, close to full" 'any(r["mode"] == "MODE_PIC" and int(r["compared"]) == 1 and r["kl_mean"] < 0.01 and r["top1_agreement"] == 1 and int(r.get("over_threshold", 0)) == 0 for r in d["stats"]["shadow"])'
check "shadow: naive compared, past the warning" 'any(r["mode"] == "MODE_NAIVE" and int(r["compared"]) == 1 and r["kl_max"] > 0.5 and int(r["over_threshold"]) == 1 for r in d["stats"]["shadow"])'
check "shadow: nothing in mode full" 'not any(r["mode"] == "MODE_FULL" for r in d["stats"]["shadow"])'
has "shadow: the naive comparison logged" q8.log "shadow: model 'tiny', mode naive, .*past pic.shadow_kl_warn 0.5"
run 0 "status shows the watch" --addr "$q8addr" status
has "shadow: a pic row in status" out "^tiny  *pic  *1  "
q8http=$(sed -n 's/^http=//p' q8.ready)
python3 -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('http://$q8http/metrics').read().decode())" >metrics.txt
has "shadow: /metrics" metrics.txt '^hypic_shadow_compared_total{model="tiny",mode="naive"} 1$'
kill -INT "$q8pid" 2>/dev/null
wait "$q8pid" 2>/dev/null

HYPIC_ADDR=$addr HYPIC_TOKEN=alice-secret-token-1 HYPIC_MODEL=tiny
export HYPIC_ADDR HYPIC_TOKEN HYPIC_MODEL
tls="--tls-ca $fixtures/ca.pem"

# ---- channel and authentication --------------------------------------------
run 3 "plaintext to a TLS server" --deadline-ms 5000 status
run 3 "TLS trusting another CA" --tls-ca "$fixtures/other-ca.pem" --deadline-ms 5000 status
run 2 "a --tls-ca file without a certificate" --tls-ca "$fixtures/server.key" status
has "the file is named" err "server.key: no PEM certificate"
HYPIC_TOKEN= "$ctl" $tls status >out 2>err
rc=$?
if [ $rc -eq 1 ] && grep -q "^hypicctl: UNAUTHENTICATED: " err; then ok "no token: UNAUTHENTICATED"; else
    bad "no token: exit $rc"; cat err; fi
run 1 "an empty --token is none" $tls --token "" status
has "empty token: UNAUTHENTICATED" err "^hypicctl: UNAUTHENTICATED: "
run 1 "wrong token" $tls --token nope status
has "wrong token: UNAUTHENTICATED" err "^hypicctl: UNAUTHENTICATED: "

# ---- status ----------------------------------------------------------------
run 0 "status" $tls status
has "status says serving" out "serving"
has "status has the host tier" out "^host "
has "status: each model's weight format" out "^models    tiny (f32 weights, "
run 0 "status --json" $tls status --json
check "status --json" 'd["health"]["status"] == "STATUS_SERVING" and "tiny" in d["health"]["models"] and d["health"]["model_weights"] == ["f32"] * 6 and min(d["health"]["model_weight_bytes"]) > 0 and any(t["tier"] == "TIER_HOST" and t["present"] for t in d["stats"]["tiers"])'
run 0 "global options after the command" status $tls --json
check "status --json after the command" 'd["health"]["status"] == "STATUS_SERVING"'

# ---- warm ------------------------------------------------------------------
python3 - <<'EOF'
import random
random.seed(7)
words = "the cache keeps the state of each segment so that a later request reuses it anywhere".split()
for d in range(3):
    open(f"doc{d}.txt", "w").write(" ".join(random.choice(words) for _ in range(40 + 15 * d)))
open("short.txt", "w").write("ab")
open("new.txt", "w").write("a segment nobody warmed, " * 4)
open("q.txt", "w").write("\nQ: what is kept?")
open("ids.txt", "w").write(" ".join(str(3 + (i * 7) % 256) for i in range(50)) + "\n")
open("badids.txt", "w").write("12 x7 9\n")
EOF
run 0 "warm (lines)" $tls warm --tag-by-file --tag set1 doc0.txt doc1.txt doc2.txt short.txt
has "warm: a line per segment" out "built"
has "warm: the short one" out "uncacheable"
has "warm: summary" out "4 segments: 3 built, 0 cached, 1 uncacheable"
run 0 "warm --json again" $tls warm --json --tag-by-file --tag set1 doc0.txt doc1.txt doc2.txt
check "warm --json: all cached" 'd["cached"] == 3 and d["built"] == 0 and len(d["segments"]) == 3 and d["segments"][1]["file"] == "doc1.txt"'
run 0 "warm --ids" $tls warm --ids --json ids.txt
check "warm --ids built" 'd["built"] == 1'
# capacity: entries a GiB holds per tier, and the entries built by representation
run 0 "status after warm" $tls status
has "status: entries per GiB and what the capacity holds" out "PER GiB *HOLDS"
has "status: the default representation's row" out "^tol 0.03, S bf16, T bf16, K/V bf16 *4 "
run 0 "status --json after warm" $tls status --json
check "status --json: capacity and representations" '(h := [t for t in d["stats"]["tiers"] if t["tier"] == "TIER_HOST"][0]) and (r := d["stats"]["reprs"][0]) and h["entries_per_gib"] > 0 and int(h["capacity_entries"]) > 0 and int(r["entries"]) == 4 and abs(r["repr"]["tolerance"] - 0.03) < 1e-6 and any(f["form"] == "zero" for f in r["t_heads"]) and not d["stats"].get("shadow")'
run 1 "warm: a file of bad ids" $tls warm --ids badids.txt
has "warm: bad ids named" err "badids.txt: 'x7'"
run 1 "warm: a missing file" $tls warm nosuch.txt

# ---- ls --------------------------------------------------------------------
run 0 "ls" $tls ls
has "ls: the rows" out "4 of 4 entries"
has "ls: the tags" out "set1,doc0.txt"
run 0 "ls --json" $tls ls --json
check "ls --json" 'd["total"] == 4 and len(d["entries"]) == 4 and all(len(e["key"]) == 64 for e in d["entries"])'
cp out ls.json
run 0 "ls --sort bytes --desc" $tls ls --json --sort bytes --desc
check "ls sorted by bytes, descending" 'all(int(a["bytes"]) >= int(b["bytes"]) for a, b in zip(d["entries"], d["entries"][1:]))'
run 0 "ls pages" $tls ls --json --limit 3 --page-size 1
check "ls follows pages to --limit" 'd["shown"] == 3 and len(d["entries"]) == 3 and len(set(e["key"] for e in d["entries"])) == 3'
run 0 "ls --tag" $tls ls --json --tag doc1.txt
check "ls --tag" 'd["total"] == 1 and "doc1.txt" in d["entries"][0]["tags"]'
run 0 "ls --tier host" $tls ls --json --tier host
check "ls --tier host" 'd["total"] == 4'
key=$(python3 -c "import json; d=json.load(open('ls.json')); print([e['key'] for e in d['entries'] if 'doc0.txt' in e['tags']][0])")

# ---- lookup ----------------------------------------------------------------
run 0 "lookup" $tls lookup --segment doc0.txt doc1.txt new.txt
has "lookup: leading hits" out "leading hits: 2 segments"
run 0 "lookup --json" $tls lookup --json --segment doc0.txt new.txt --lease-ms 100
check "lookup --json" 'd["leading_hits"] == 1 and d["segments"][0]["hit"] and not d["segments"][1]["hit"] and d["segments"][0]["key"] == "'"$key"'"'
run 0 "lookup --key" $tls lookup --json --key "$key"
check "lookup by key" 'd["segments"][0]["hit"]'

# ---- inspect ---------------------------------------------------------------
run 0 "inspect --verify" $tls inspect "$key" --verify
has "inspect: sections verified" out "sections ok"
run 0 "inspect --json" $tls inspect "$key" --verify --json
check "inspect --json" 'd["verified"] and d["meta"]["key"] == "'"$key"'" and len(d["sections"]) > 0 and all(s["checksum_ok"] for s in d["sections"])'

# ---- prefill ---------------------------------------------------------------
run 0 "prefill" $tls prefill --segment doc0.txt doc1.txt --query q.txt --top-k 3 --max-new 4
has "prefill: top tokens" out "RANK"
has "prefill: timings" out "^total "
has "prefill: outcome per segment" out "hit"
for mode in full prefix pic noseam naive; do
    run 0 "prefill --mode $mode" $tls prefill --json --segment doc0.txt doc1.txt doc2.txt --text "Q?" --mode $mode --top-k 4
    check "prefill --mode $mode --json" 'len(d["top"]) == 4 and len(d["segments"]) == 3 and d["tokens_computed"] > 0 and d["timings"]["total_ms"] > 0'
done
run 0 "prefill pic: cached segments hit" $tls prefill --json --segment doc2.txt doc0.txt --text "Q?"
check "prefill pic hits" 'all(s["kind"] == "KIND_HIT" for s in d["segments"])'

# ---- the state and entries through transport sessions (docs/transports.md) ----
run 0 "prefill --return-state (shm)" $tls prefill --json --segment doc2.txt doc0.txt --text "Q?" --return-state --state-out state.bin
check "the state's layout" 'd["state"]["transport"] == "TRANSPORT_SHM" and len(d["state"]["tensors"]) > 0 and int(d["state"]["position"]) > 0'
python3 -c "import json,os,sys; d=json.load(open('out')); sys.exit(0 if os.path.getsize('state.bin') == int(d['state']['bytes']) else 1)" && ok "--state-out wrote the state's bytes" || bad "--state-out: size differs from state.bytes"
run 0 "prefill --transport tcp" $tls prefill --segment doc2.txt doc0.txt --text "Q?" --transport tcp
has "prefill --transport tcp: where the state went" out "delivered over tcp"
run 1 "prefill --transport udp" $tls prefill --segment doc2.txt --text "Q?" --transport udp
has "prefill --transport udp: the status" err "^hypicctl: INVALID_ARGUMENT: client: transport 'udp'"

# ---- build (a scatter worker's RPC; the daemon serves it too), then put ------
printf 'a segment built elsewhere and stored here, long enough for a body' > built.txt
run 0 "build" $tls build built.txt --out built.bin --tag built --json
check "build: meta and bytes" 'd["bytes"] > 0 and d["meta"]["tokens"] > 0 and d["meta"]["tags"] == ["built"]'
run 0 "put of a built entry" $tls put built.bin --json
check "put of a built entry: stored" 'd["placed"] == "TIER_HOST"'
run 0 "lookup of the built segment" $tls lookup --segment built.txt --json
check "lookup of the built segment: a hit" 'd["segments"][0]["hit"]'
run 2 "build without --out" $tls build built.txt

# ---- get, evict, put -------------------------------------------------------
run 0 "get" $tls get "$key" --out e.bin
[ -s e.bin ] && ok "get wrote the bytes" || bad "get wrote no bytes"
run 0 "get --transport shm" $tls get "$key" --out e3.bin --transport shm
cmp -s e.bin e3.bin && ok "get through shm: the same bytes" || bad "get through shm: bytes differ"
run 0 "get --transport tcp" $tls get "$key" --out e4.bin --transport tcp
cmp -s e.bin e4.bin && ok "get through tcp: the same bytes" || bad "get through tcp: bytes differ"
run 0 "get --transport cuda_ipc,tcp" $tls get "$key" --out e6.bin --transport cuda_ipc,tcp
cmp -s e.bin e6.bin && ok "get through cuda_ipc (or, without a GPU, tcp): the same bytes" ||
    bad "get --transport cuda_ipc,tcp: bytes differ"
run 0 "get -o, --transport=VALUE" $tls get "$key" -o e5.bin --transport=tcp
cmp -s e.bin e5.bin && ok "get -o: the same bytes" || bad "get -o: bytes differ"
run 0 "evict" $tls evict "$key" --json
check "evict removed it" 'int(d["removed"]) == 1'
run 1 "inspect after evict" $tls inspect "$key"
has "inspect after evict: NOT_FOUND" err "^hypicctl: NOT_FOUND: "
run 0 "put" $tls put e.bin --json
check "put placed it" 'd["key"] == "'"$key"'" and d["placed"] == "TIER_HOST"'
run 0 "get after put" $tls get "$key" --out e2.bin
cmp -s e.bin e2.bin && ok "put then get: byte-identical" || bad "put then get: bytes differ"
python3 - <<'EOF'
b = bytearray(open("e.bin", "rb").read())
b[len(b) // 2] ^= 0x40
open("corrupt.bin", "wb").write(bytes(b))
EOF
cp e.bin.meta.json corrupt.bin.meta.json
run 1 "put of corrupted bytes" $tls put corrupt.bin
has "put of corrupted bytes: the status" err "^hypicctl: [A-Z_]*: "
run 0 "inspect --verify after a refused put" $tls inspect "$key" --verify --json
check "the stored entry is intact" 'd["verified"] and all(s["checksum_ok"] for s in d["sections"])'

# ---- watch -----------------------------------------------------------------
"$ctl" $tls watch --json --count 1 >watch.out 2>watch.err &
wpid=$!
pids="$pids $wpid"
sleep 1
"$ctl" $tls warm new.txt >/dev/null 2>&1
i=0
while kill -0 $wpid 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
if kill -0 $wpid 2>/dev/null; then kill $wpid; bad "watch did not end after --count 1"; fi
wait $wpid
wrc=$?
cp watch.out out
[ $wrc -eq 0 ] && ok "watch --count 1 (exit 0)" || bad "watch: exit $wrc"
check "watch: a stored event" 'd["kind"] == "KIND_STORED" and d["meta"]["tokens"] > 0'

# ---- policy ----------------------------------------------------------------
run 0 "policy get" $tls policy get host
has "policy get: the table" out "^host "
run 0 "policy set" $tls policy set host --evict lru --admit min-tokens --min-tokens 8 --json
check "policy set answers the new policy" 'd["evict"] == "lru" and d["admit"] == "min-tokens" and d["min_tokens"] == 8'
run 0 "policy get --json" $tls policy get host --json
check "policy get sees it" 'd["evict"] == "lru" and d["min_tokens"] == 8'
run 1 "policy set: unknown policy" $tls policy set host --evict bogus --admit always
has "policy: INVALID_ARGUMENT" err "^hypicctl: INVALID_ARGUMENT: "
run 1 "policy set by a tenant that is not admin" $tls --token bob-secret-token-22 policy set host --evict lru --admit always
run 0 "policy back" $tls policy set host --evict gdsf --admit always

# ---- tenant isolation through the command line ------------------------------
run 0 "bob's ls" $tls --token bob-secret-token-22 ls --json
check "bob sees none of alice's entries" 'd["total"] == 0'
run 1 "bob inspects alice's key" $tls --token bob-secret-token-22 inspect "$key"
run 0 "bob evicts alice's key" $tls --token bob-secret-token-22 evict "$key" --json
check "bob removed nothing" 'int(d["removed"]) == 0'
run 0 "alice still has it" $tls inspect "$key" --json

# ---- bench -----------------------------------------------------------------
run 0 "bench closed loop" $tls bench --random 4 --tokens 32 --clients 2 --duration 1 --json
check "bench closed --json" 'd["loop"] == "closed" and d["ok"] > 0 and d["errors"] == {} and d["p50_ms"] <= d["p90_ms"] <= d["p99_ms"] <= d["max_ms"] and d["qps"] > 0'
# 8 senders, not the default 64: 64 TLS handshakes at once under ASan on a loaded
# 2-core machine once failed a connection (the open loop itself is what is checked)
run 0 "bench open loop" $tls bench --random 4 --tokens 32 --rate 50 --clients 8 --duration 1 --json --no-warm
check "bench open --json" 'd["loop"] == "open" and 45 <= d["requests"] <= 51'
run 0 "bench prefill (table)" $tls bench --method prefill --segment doc0.txt doc1.txt --clients 2 --duration 1
has "bench prints p99" out "p99"

# ---- a deadline ------------------------------------------------------------
run 1 "a call past its deadline" $tls --deadline-ms 1 prefill --segment doc0.txt doc1.txt doc2.txt new.txt --text "?" --mode full
has "deadline: DEADLINE_EXCEEDED" err "^hypicctl: DEADLINE_EXCEEDED: "

# ---- pin, unpin --------------------------------------------------------------
run 0 "pin --tag" $tls pin --tag set1
has "pin: what and the cap" out "^pinned 3 (.*), until unpinned; your pins here: .* of 16.0 MiB"
run 0 "ls shows pins" $tls ls
has "ls: the PIN column" out "PIN"
has "ls: pinned rows" out " pinned "
run 0 "pin KEY --ttl" $tls pin "$key" --ttl 10m --json
check "a soft pin: 1 entry, lapsing in 10 minutes" 'int(d["pinned"]) == 1 and 590e9 < int(d["until_unix_ns"]) - __import__("time").time_ns() <= 600e9'
run 0 "inspect shows the pin" $tls inspect "$key"
has "inspect: pinned until" out "^pinned       until .* left)"
run 0 "ls --json: pin times" $tls ls --json
check "three pinned, one of them soft" 'sum(1 for e in d["entries"] if int(e.get("pinned_until_unix_ns", 0)) > 0) == 3 and sum(1 for e in d["entries"] if int(e.get("pinned_until_unix_ns", 0)) == 2**64 - 1) == 2'
run 2 "pin without a target" $tls pin
has "pin: which target" err "exactly one of KEY, --tag T"
run 2 "pin: a bad --ttl" $tls pin --tag set1 --ttl 5x
has "pin: the bad duration named" err "--ttl: '5x' is not a duration"
run 2 "pin --all is unpin's" $tls pin --all
run 1 "pin: no entry with the tag" $tls pin --tag nosuch
has "pin: NOT_FOUND" err "^hypicctl: NOT_FOUND: "
run 1 "bob cannot pin alice's entry" $tls --token bob-secret-token-22 pin "$key"
has "bob: NOT_FOUND" err "^hypicctl: NOT_FOUND: "
run 0 "unpin KEY" $tls unpin "$key"
has "unpin KEY" out "^unpinned 1 "
run 0 "unpin --all" $tls unpin --all --json
check "unpin --all lifts the other two" 'int(d["unpinned"]) == 2'

# ---- invalidate ------------------------------------------------------------
run 0 "invalidate --tag" $tls invalidate --tag set1 --json
check "invalidate --tag removed the 3 tagged" 'int(d["removed"]) == 3'
run 0 "invalidate --model" $tls invalidate --model tiny
has "invalidate --model" out "removed"
run 0 "invalidate --tenant" $tls invalidate --tenant --json
check "invalidate --tenant" 'int(d["removed"]) >= 0'
run 0 "ls after invalidating everything" $tls ls --json
check "nothing left" 'd["total"] == 0'

# ---- every other family the daemon serves, through the same commands ---------
# (short.txt, 2 tokens, is too short for an entry where the model has a conv; MiniMax's
# lightning layers have none, so it caches like the others)
for model in tiny-olmo tiny-minimax tiny-kimi tiny-nemotron tiny-ling; do
    m="$tls --model $model"
    if [ "$model" = tiny-minimax ]; then built=3 short=0; else built=2 short=1; fi
    # tiny-nemotron: 6 blocks, two of them an MLP alone with no state (3 Mamba2 + 1 attention)
    if [ "$model" = tiny-nemotron ]; then layers=6; else layers=4; fi
    run 0 "$model: warm" $m warm --json --tag "fam-$model" doc0.txt doc1.txt short.txt
    check "$model: warm built $built" 'd["built"] == '$built' and d["uncacheable"] == '"$short"
    run 0 "$model: lookup" $m lookup --json --segment doc0.txt doc1.txt new.txt
    check "$model: lookup hits" 'd["leading_hits"] == 2 and not d["segments"][2]["hit"]'
    fkey=$(python3 -c "import json; print(json.load(open('out'))['segments'][0]['key'])")
    run 0 "$model: inspect --verify" $m inspect "$fkey" --verify --json
    check "$model: its entry" 'd["verified"] and d["meta"]["model"] == "'"$model"'"'
    run 0 "$model: prefill pic" $m prefill --json --segment doc1.txt doc0.txt --text "Q?" --top-k 3
    check "$model: prefill pic hits" 'all(s["kind"] == "KIND_HIT" for s in d["segments"]) and len(d["top"]) == 3'
    run 0 "$model: prefill full --return-state" $m prefill --json --segment doc1.txt doc0.txt --text "Q?" --mode full --return-state --state-out "state-$model.bin"
    check "$model: the state" 'd["state"]["transport"] == "TRANSPORT_SHM" and len(d["state"]["tensors"]) == 8 and d["state"]["layers"] == '$layers
    run 0 "$model: get" $m get "$fkey" --out "e-$model.bin"
    run 0 "$model: put" $m put "e-$model.bin" --json
    check "$model: put placed it" 'd["placed"] == "TIER_HOST"'
    run 0 "$model: build" $m build built.txt --out "b-$model.bin" --json
    check "$model: build" 'd["bytes"] > 0 and d["meta"]["model"] == "'"$model"'"'
    run 0 "$model: invalidate --model" $m invalidate --model "$model" --json
    check "$model: invalidate removed its entries" 'int(d["removed"]) == '"$built"
done

if ! kill -0 "$pid" 2>/dev/null; then
    bad "hypic-cached died during the test; its log:"
    cat daemon.log
fi
finish
