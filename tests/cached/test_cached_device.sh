#!/bin/sh
# hypic-cached with executor.device set: the held-out recall prompts of the
# embedded model (tests/fixtures/recall/answers.txt: its documents as
# segments, its last line the query) answered in every mode — full, prefix,
# pic, noseam, naive, the cached segments fetched — by a daemon whose passes
# run on the device executor, against a daemon on the CPU: the same greedy
# tokens in every mode, and in mode full transformers' own answer. Entries
# the device daemon builds (Warm, and the misses of the first requests) are
# its captures; the hits it reuses are composed by its kernels.
#
# Everywhere: executor.device emulated (the device executor with the CUDA
# kernels' bodies on the CPU). With a GPU: executor.device cuda as well,
# then cuda:0 beside an hbm tier on the same device, whose hits are composed
# where they lie (its /metrics count hits from hbm); without one, that
# daemon must refuse to start saying why, and the cuda half is reported
# skipped. Every daemon is stopped on exit.
#   test_cached_device.sh HYPIC_CACHED HYPICCTL
set -u
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
cached=$(abs "$1")
ctl=$(abs "$2")
here=$(cd "$(dirname "$0")" && pwd)
model=$(cd "$here/../../models/hypic-recall" && pwd) || exit 1
answers=$here/../fixtures/recall/answers.txt
. "$here/../checks.sh"
checks_begin hypic-device-test

config() { # config DEVICE [TIERS]: a daemon of the recall model on DEVICE
    printf 'listen: 127.0.0.1:0\nhttp_listen: 127.0.0.1:0\nlog: {requests: false}\n'
    printf 'models: [{name: recall, path: %s}]\ntiers: {host: {bytes: 64M}%s}\n' "$model" "${2:-}"
    printf 'executor: {threads: 2, device: %s}\n' "$1"
}
addr_of() { sed -n 's/^grpc=//p' "$1.ready"; }
# metric NAME SERIES: a sample of the daemon NAME's /metrics (0 when absent)
metric() {
    python3 -c "import sys, urllib.request as u
for l in u.urlopen('http://' + sys.argv[1] + '/metrics').read().decode().splitlines():
    if l.startswith(sys.argv[2] + ' '): print(int(float(l.split()[-1]))); break
else: print(0)" "$(sed -n 's/^http=//p' "$1.ready")" "$2"
}

# The prompts: prompt i's documents in p$i.d*.txt, its query in p$i.q, the
# expected tokens in p$i.want.
python3 - "$answers" <<'EOF' || exit 1
import sys
n = 0
for line in open(sys.argv[1]):
    if line.startswith("P "):
        parts = line[2:].rstrip("\n").split("|")
        for j, d in enumerate(parts[:-1]):
            open(f"p{n}.d{j}.txt", "w").write(d + "\n")
        open(f"p{n}.q", "w").write(parts[-1])
    elif line.startswith("G "):
        open(f"p{n}.want", "w").write(line[2:].strip() + "\n")
        n += 1
open("count", "w").write(str(n))
EOF
count=$(cat count)

# answers ADDR TAG: for every prompt and mode, the greedy tokens into TAG.MODE.i
answers() {
    for m in full prefix pic noseam naive; do
        i=0
        while [ $i -lt "$count" ]; do
            # shellcheck disable=SC2046
            "$ctl" --addr "$1" --model recall prefill --json --mode $m --reuse fetch --max-new 3 \
                --segment $(ls p$i.d*.txt | sort -t d -k 2 -n) --text "$(cat p$i.q)" \
                >out 2>err || { bad "$2: prefill $m of prompt $i: $(cat err)"; }
            python3 -c "import json; print(' '.join(str(t) for t in json.load(open('out'))['generated']))" \
                >"$2.$m.$i" 2>/dev/null || echo "-" >"$2.$m.$i"
            i=$((i + 1))
        done
    done
}

# compare TAG: TAG's answers against the CPU daemon's, mode by mode, and
# full's against transformers'
compare() {
    for m in full prefix pic noseam naive; do
        same=0 i=0
        while [ $i -lt "$count" ]; do
            cmp -s "cpu.$m.$i" "$1.$m.$i" && same=$((same + 1))
            i=$((i + 1))
        done
        if [ $same -eq "$count" ]; then ok "$1: mode $m, $count prompts answered as on the CPU"
        else bad "$1: mode $m: $same of $count prompts answered as on the CPU"; fi
    done
    right=0 i=0
    while [ $i -lt "$count" ]; do
        cmp -s "p$i.want" "$1.full.$i" && right=$((right + 1))
        i=$((i + 1))
    done
    [ $right -eq "$count" ] && ok "$1: mode full gives transformers' answers ($count of $count)" ||
        bad "$1: mode full gives transformers' answers for $right of $count prompts"
}

config cpu >cpu.yaml
daemon_start "$cached" cpu cpu.yaml
[ "$pid" != 0 ] || { bad "the CPU daemon did not start: $(tail -3 cpu.log)"; finish; }
answers "$(addr_of cpu)" cpu

config emulated >emu.yaml
daemon_start "$cached" emu emu.yaml
if [ "$pid" = 0 ]; then
    bad "the emulated-device daemon did not start: $(tail -3 emu.log)"
else
    grep -q "forward passes on emulated device" emu.log && ok "emulated: the log says where passes run" ||
        bad "emulated: no 'forward passes on' line in its log"
    answers "$(addr_of emu)" emu
    compare emu
fi

config cuda >cuda.yaml
daemon_start "$cached" cuda cuda.yaml
if [ "$pid" = 0 ]; then
    # no GPU here (or a build without the kernels): a clear refusal, no start
    if grep -q "executor.device cuda, model 'recall': .*\(no CUDA device\|no CUDA kernels\)" cuda.log; then
        ok "cuda without a device: the start refused, saying why"
        echo "test_cached_device: cuda cases skipped: $(grep -o 'no CUDA [^:]*: .*' cuda.log | head -1)"
    else
        bad "cuda: the daemon did not start, and not for want of a device: $(tail -3 cuda.log)"
    fi
else
    answers "$(addr_of cuda)" cuda
    compare cuda
    # with the hbm tier on the same device: every entry goes up (admit
    # always), and the hits are composed where they lie, never copied down
    config cuda:0 ', hbm: {bytes: 256M, device: 0, admit: always}' >hbm.yaml
    daemon_start "$cached" hbm hbm.yaml
    if [ "$pid" = 0 ]; then
        bad "cuda with an hbm tier: the daemon did not start: $(tail -3 hbm.log)"
    else
        grep -q "entries in the hbm tier composed where they lie" hbm.log &&
            ok "hbm: the log says its entries are composed where they lie" ||
            bad "hbm: no 'composed where they lie' line in its log: $(grep -i hbm hbm.log | tail -2)"
        answers "$(addr_of hbm)" hbm
        compare hbm
        # a device lease counts as an hbm hit, a host lease as a host hit
        # (every entry has both copies here): hits from hbm only when the
        # fetches took the device's copy
        hits=$(metric hbm 'hypic_hits_total{tier="hbm"}')
        [ "$hits" -gt 0 ] && ok "hbm: $hits hits leased on the device and composed there" ||
            bad "hbm: no hit served from the hbm tier (fetched from the host instead?)"
    fi
fi
finish
