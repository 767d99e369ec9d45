#!/bin/sh
# hypic-model as a user runs it: init, info and run succeed on generated
# checkpoints; bad arguments and broken inputs exit non-zero with a message
# that says what is wrong. Usage: test_hypic_model.sh PATH/TO/hypic-model
set -u
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0

# expect NAME WANT_STATUS WANT_TEXT -- command...
expect() {
    name=$1 want=$2 text=$3
    shift 4
    out=$("$@" 2>&1)
    got=$?
    if [ "$got" -eq "$want" ] && printf '%s' "$out" | grep -q -- "$text"; then
        pass=$((pass + 1))
        echo "  ok    $name"
    else
        fail=$((fail + 1))
        echo "  FAIL  $name: exit $got (want $want), output:"
        printf '%s\n' "$out" | sed 's/^/        /'
    fi
}

expect "init tiny" 0 "wrote preset 'tiny'" -- "$bin" init --preset tiny --seed 7 --out "$tmp/a/b"
expect "init tiny-moe bf16" 0 "BF16" -- "$bin" init --preset tiny-moe --seed 7 --out "$tmp/moe" --dtype BF16
expect "info" 0 "parameters   184168" -- "$bin" info "$tmp/a/b"
expect "info moe" 0 "8 experts, top-2" -- "$bin" info "$tmp/moe"
expect "run text" 0 "prefilled 5 tokens" -- "$bin" run "$tmp/a/b" --text hello --top 3
printf '1 2 3\n4 5\n' > "$tmp/tok.txt"
expect "run tokens recurrent" 0 "recurrent delta rule" -- "$bin" run "$tmp/moe" --tokens "$tmp/tok.txt" --recurrent
expect "no arguments" 2 "usage" -- "$bin"
expect "presets: the first" 0 "^tiny$" -- "$bin" presets
expect "presets: the last family's" 0 "^small-ling$" -- "$bin" presets
expect "presets takes no argument" 2 "usage" -- "$bin" presets tiny
expect "unknown preset" 1 "unknown preset 'big'" -- "$bin" init --preset big --seed 1 --out "$tmp/x"
expect "bad seed" 2 "not a non-negative integer" -- "$bin" init --preset tiny --seed -4 --out "$tmp/x"
expect "missing dir" 1 "config.json" -- "$bin" info "$tmp/nope"
expect "init tiny-olmo" 0 "wrote preset 'tiny-olmo'" -- "$bin" init --preset tiny-olmo --seed 7 --out "$tmp/olmo"
expect "info olmo" 0 "OlmoHybridForCausalLM" -- "$bin" info "$tmp/olmo"
# T 4x16x16 + S 4x16x32 + tail 3x192 floats per linear layer (3), K+V 2x2x16 per token (1 layer)
expect "entry-size of a checkpoint folder" 0 "43.1 KiB constant (S bf16: 31.1 KiB) + 256.0 B per body token" -- "$bin" entry-size "$tmp/olmo"
printf '{"model_type": "olmo_hybrid"}' > "$tmp/olmo7b.json"
expect "entry-size of a config.json alone" 0 "24 linear, 8 attention" -- "$bin" entry-size "$tmp/olmo7b.json" --tokens 1024
expect "entry-size: too short to cache" 1 "too short to cache" -- "$bin" entry-size "$tmp/olmo" --tokens 3
expect "entry-size: bad --tokens" 2 "an integer in" -- "$bin" entry-size "$tmp/olmo" --tokens x
printf '1 2 x\n' > "$tmp/bad.txt"
expect "bad token file" 1 "token 2 is not a non-negative integer" -- "$bin" run "$tmp/a/b" --tokens "$tmp/bad.txt"
printf '1 999999\n' > "$tmp/big.txt"
expect "token outside vocab" 1 "outside the vocabulary" -- "$bin" run "$tmp/a/b" --tokens "$tmp/big.txt"
head -c 1000 "$tmp/a/b/model.safetensors" > "$tmp/trunc.st" && mv "$tmp/trunc.st" "$tmp/a/b/model.safetensors"
expect "truncated checkpoint" 1 "model.safetensors" -- "$bin" info "$tmp/a/b"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
