#!/bin/sh
# make run: hypic-cached in the foreground on the embedded model
# (deploy/hypic-cached.minimal.yaml: models/hypic-recall), on 127.0.0.1:PORT
# (gRPC) and :HTTP_PORT (/metrics, /healthz, /readyz), its NVMe tier in
# NVME_DIR. The hypicctl commands that send it one of the model's held-out
# requests (models/hypic-recall/examples) are printed once it is serving —
# it writes its ready file then — and not at all when it does not start (its
# own message says why). This shell becomes the daemon (exec): Ctrl-C reaches
# it directly, and it drains and stops.
# Usage: tools/run.sh BUILD_DIR PORT HTTP_PORT NVME_DIR   (from the repository root)
set -u
build=$1 port=$2 http_port=$3 nvme=$4
ex=models/hypic-recall/examples
tmp=$(mktemp -d /tmp/hypic-run.XXXXXX) || exit 1
ready="$tmp/ready"

# The printer waits beside the daemon, whose pid is this shell's ($$) once
# exec'd below; it gives up when the daemon is gone. Started from a subshell
# that ends at once, so that it is not the daemon's child (a zombie there
# until the daemon exits).
( (
    while [ ! -s "$ready" ]; do
        if ! kill -0 $$ 2>/dev/null; then
            rm -rf "$tmp"
            exit 0
        fi
        sleep 0.1
    done
    addr=$(sed -n 's/^grpc=//p' "$ready")
    metrics=$(sed -n 's/^http=//p' "$ready")
    rm -rf "$tmp"
    ctl="$build/client/hypicctl"
    [ "$addr" = 127.0.0.1:7878 ] || ctl="$ctl --addr $addr"
    q=$(cat "$ex/question.txt")
    cat <<EOF

hypic-cached is serving on $addr (metrics: http://$metrics/metrics); Ctrl-C stops it.
In another terminal:
  $ctl status
  $ctl warm --tag example $ex/doc*.txt
  $ctl prefill --segment $ex/doc3.txt --segment $ex/doc1.txt --segment $ex/doc4.txt --segment $ex/doc2.txt --text '$q' --mode pic --max-new 3
  $ctl prefill --segment $ex/doc1.txt --segment $ex/doc2.txt --text '$q' --return-state   # the state, into this process
  $ctl ls

EOF
) & )

exec "$build/cached/hypic-cached" --config deploy/hypic-cached.minimal.yaml \
    --listen "127.0.0.1:$port" --http-listen "127.0.0.1:$http_port" --nvme-dir "$nvme" \
    --ready-file "$ready"
