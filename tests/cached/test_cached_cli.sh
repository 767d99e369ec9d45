#!/bin/sh
# hypic-cached's own command line where a newcomer meets it: --check-config
# looks at what a start would fail on (a model directory that is not there,
# one without config.json or weights, an NVMe directory another daemon holds),
# naming the file and the key; a start outside the repository says where it
# looked for the default model and what to do; a second daemon on the first
# one's NVMe directory says how to give it its own (--nvme-dir, which moves
# it). Every daemon started here is killed on exit.
#   test_cached_cli.sh HYPIC_CACHED
set -u
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
cached=$(abs "$1")
model=$(cd "$(dirname "$0")/../../models/hypic-recall" && pwd) || exit 1
. "$(dirname "$0")/../checks.sh"
checks_begin hypic-cli-test

# run WANT_RC NAME ARGS...: hypic-cached with ARGS, stdout in out, stderr in err.
run() {
    want=$1 name=$2
    shift 2
    expect_rc "$want" "$name" "$cached" "$@"
}

# has NAME FILE TEXT: FILE contains TEXT (fixed string).
has() {
    if grep -qF -- "$3" "$2"; then ok "$1"; else
        bad "$1: no '$3' in $2"
        sed 's/^/      /' "$2" | head -10
    fi
}

# start NAME CONFIG [ARGS...]: a daemon in the background (daemon_start).
start() { daemon_start "$cached" "$@"; }

common="listen: 127.0.0.1:0
http_listen: 127.0.0.1:0
log: {requests: false}"

# ---- --check-config: the model directory and its files ---------------------
printf '%s\nmodels: [{name: recall, path: %s}]\ntiers: {host: {bytes: 16M}}\n' "$common" \
    "$model" > good.yaml
run 0 "check-config: the committed model" --check-config good.yaml
has "it says valid" out "good.yaml: valid"

printf '%s\nmodels: [{name: recall, path: models/hypic-recall}]\n' "$common" > missing.yaml
run 1 "check-config: a model directory that does not exist" --check-config missing.yaml
has "it names the file and the key" err "missing.yaml: key 'models[0].path'"
has "it names the directory" err "models/hypic-recall: No such file or directory"
has "it says relative paths follow the working directory" err "resolved against the working directory, $dir"
run 1 "a start on it fails the same way" --config missing.yaml
has "the start names the key" err "missing.yaml: key 'models[0].path'"

mkdir -p noconfig nowights
cp "$model/config.json" nowights/
printf '%s\nmodels: [{name: a, path: %s/noconfig}]\n' "$common" "$dir" > noconfig.yaml
run 1 "check-config: a model directory without config.json" --check-config noconfig.yaml
has "it names config.json" err "noconfig/config.json"
has "and the key" err "key 'models[0].path'"
printf '%s\nmodels: [{name: a, path: %s}, {name: b, path: %s/nowights}]\n' "$common" "$model" \
    "$dir" > noweights.yaml
run 1 "check-config: a model directory without weights" --check-config noweights.yaml
has "it names the weights and the key" err "key 'models[1].path': model 'b'"
has "it names model.safetensors" err "model.safetensors"

printf '%s\nmodels: [{name: tiny, path: var/models/tiny}]\n' "$common" > preset.yaml
run 1 "check-config: a preset's model not generated yet" --check-config preset.yaml
has "it says --init-models generates it" err "--init-models generates it"

# ---- outside the repository, without --config ------------------------------
run 1 "a start without --config outside the repository" --listen 127.0.0.1:0 --http-listen ''
has "it names the default model's path" err "models/hypic-recall"
has "it says where it looked" err "relative to the working directory, $dir"
has "it says what to do" err "start hypic-cached from the repository root, or pass --config"

# ---- the NVMe directory: one daemon at a time, --nvme-dir moves it ---------
printf '%s\nmodels: [{name: recall, path: %s}]\ntiers: {host: {bytes: 16M}, nvme: {path: var/nvme, bytes: 64M, extent_bytes: 16M}}\n' \
    "$common" "$model" > nvme.yaml
start first nvme.yaml
if [ "$pid" -eq 0 ]; then
    bad "the first daemon did not start"
    cat first.log
else
    ok "the first daemon holds var/nvme"
    first=$pid
    run 1 "check-config: var/nvme held by the first daemon" --check-config nvme.yaml
    has "it names the key and the holder" err "key 'tiers.nvme.path': var/nvme is in use by process $first"
    run 1 "a second daemon on var/nvme" --config nvme.yaml
    has "it says how to give it its own" err "(--nvme-dir DIR; make run NVME_DIR=DIR)"
    start second nvme.yaml --nvme-dir var/nvme2
    if [ "$pid" -ne 0 ] && [ -f var/nvme2/LOCK ]; then
        ok "--nvme-dir var/nvme2: the second daemon serves beside the first"
        kill -TERM "$pid"
        wait "$pid"
        rc=$?
        [ $rc -eq 0 ] && ok "the second stops cleanly" || bad "the second exited $rc on SIGTERM"
    else
        bad "--nvme-dir var/nvme2: the second daemon did not start"
        sed 's/^/      /' second.log | tail -5
    fi
    kill -TERM "$first"
    wait "$first"
fi
run 2 "--nvme-dir without its value" --nvme-dir

finish
