#!/bin/sh
# The C client as a user gets it: the build installed into a temporary prefix
# (cmake --install), docs/api.md's example program taken from the doc itself
# and built with the doc's own cc lines through pkg-config, against the shared
# library and against the static archive, then run against hypic-cached
# started as `make run` starts it (deploy/hypic-cached.minimal.yaml: the model
# recall, host and NVMe tiers) but on free loopback ports and a temporary NVMe
# directory. Also: the installed header compiles on its own, the .so leaves
# none of our symbols undefined and exports only the public API, the static
# program does not need the .so. The daemon is always stopped, the temporary
# directory always removed.
#   test_install.sh CMAKE SOURCE_DIR BUILD_DIR HYPIC_CACHED
set -u
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
cmake=$1 src=$(cd "$2" && pwd) build=$(cd "$3" && pwd) cached=$(abs "$4")
doc=$src/docs/api.md
. "$(dirname "$0")/../checks.sh"
checks_begin hypic-install-test

# show FILE: its first lines, indented, after a failure.
show() { sed 's/^/      /' "$1" | head -40; }
# ---- install ----------------------------------------------------------------
prefix=$dir/prefix
if "$cmake" --install "$build" --prefix "$prefix" >install.log 2>&1; then
    ok "cmake --install into a temporary prefix"
else
    bad "cmake --install failed"
    show install.log
    finish
fi
for f in lib/libhypic-client.so lib/libhypic-client.a include/hypic/hypic_client.h \
    include/hypic/hypic.pb-c.h lib/pkgconfig/hypic-client.pc lib/pkgconfig/hypic-client-static.pc; do
    if [ -e "$prefix/$f" ]; then ok "installed $f"; else bad "no $f in the prefix"; fi
done
# the usual names: the link name -> the soname -> the file with the whole version
so=$prefix/lib/libhypic-client.so
soname=$(readelf -d "$so" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
real=$(readlink -f "$so" 2>/dev/null)
case "$soname:$(basename "$real")" in
libhypic-client.so.[0-9]*:libhypic-client.so.[0-9]*.[0-9]*.[0-9]*)
    if [ -L "$so" ] && [ -L "$prefix/lib/$soname" ] && [ -f "$real" ]; then
        ok "versioned: $(basename "$so") -> $soname -> $(basename "$real")"
    else
        bad "versioned names: $so, $soname, $real are not link, link, file"
    fi
    ;;
*) bad "versioned names: soname '$soname', file '$real'" ;;
esac

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig" LD_LIBRARY_PATH="$prefix/lib"

# ---- the shared library's symbols ------------------------------------------
# Our own code is all inside: nothing of ours (hy_, hyc_, the messages of
# hypic.proto and etcd.proto) is left for another library to define.
nm -D --undefined-only "$so" >undefined.txt 2>&1
if grep -E ' (hy_|hyc_|hypic__|etcdserverpb__|mvccpb__|authpb__)' undefined.txt >ours.txt; then
    bad "the .so leaves our symbols undefined"
    show ours.txt
else
    ok "the .so defines every symbol of ours it uses"
fi
if ldd -r "$so" >ldd.txt 2>&1 && ! grep -q 'undefined symbol' ldd.txt; then
    ok "ldd -r: every symbol resolves"
else
    bad "ldd -r: undefined symbols"
    show ldd.txt
fi
nm -D --defined-only "$so" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | sed 's/@.*//' >exported.txt
for sym in hyc_open hyc_prefill hyc_free hypic__v1__prefill_request__descriptor \
    hypic__v1__prefill_response__free_unpacked; do
    if grep -qx "$sym" exported.txt; then ok "exports $sym"; else bad "does not export $sym"; fi
done
if grep -Ev '^(hyc_|hypic__v1__)' exported.txt >others.txt; then
    bad "exports more than the public API"
    show others.txt
else
    ok "exports hyc_ and hypic__v1__ only ($(wc -l <exported.txt) symbols)"
fi

# ---- the header on its own --------------------------------------------------
printf '#include <hypic_client.h>\n' >header.c
if cc -std=c17 -Wall -Wextra -Werror -pedantic $(pkg-config --cflags hypic-client) \
    -c header.c -o header.o >header.log 2>&1; then
    ok "hypic_client.h compiles alone (-std=c17 -Wall -Wextra -Werror -pedantic)"
else
    bad "hypic_client.h does not compile alone"
    show header.log
fi

# ---- the doc's example, built as the doc says ------------------------------
# ex.c: the ```c block after the marker "<!-- example: ex.c"; the build: the
# cc lines of the ```sh block after "<!-- example: build".
block() {
    awk -v m="<!-- example: $1" -v fence="$2" '
        index($0, m) == 1 { f = 1; n++; next }
        f == 1 && $0 == fence { f = 2; next }
        f == 2 && $0 == "```" { f = 0; next }
        f == 2 { print }
        END { if (n != 1) { print "marker found " n " times" > "/dev/stderr"; exit 1 } }' "$doc"
}
if block ex.c '```c' >ex.c 2>block.log && [ -s ex.c ]; then
    ok "the example from docs/api.md ($(wc -l <ex.c) lines)"
else
    bad "no example in docs/api.md (marker '<!-- example: ex.c', a \`\`\`c block)"
    show block.log
    finish
fi
block build '```sh' 2>block.log | grep '^cc ' >build.sh
if [ "$(grep -c -- '-o ex$' build.sh)" -eq 1 ] && [ "$(grep -c -- '-o ex-static$' build.sh)" -eq 1 ]; then
    ok "the doc's build: $(wc -l <build.sh) cc lines"
else
    bad "the doc's build block has no 'cc ... -o ex' and 'cc ... -o ex-static' lines"
    show build.sh
    show block.log
    finish
fi
while read -r line; do
    if eval "$line" >cc.log 2>&1; then
        ok "$line"
    else
        bad "$line"
        show cc.log
    fi
done <build.sh
[ -x ex ] && [ -x ex-static ] || finish
if readelf -d ex | grep -q 'NEEDED.*libhypic-client\.so'; then
    ok "ex links libhypic-client.so"
else
    bad "ex does not link libhypic-client.so"
fi
if readelf -d ex-static | grep -q 'NEEDED.*libhypic-client'; then
    bad "ex-static needs libhypic-client.so: the archive was not linked"
else
    ok "ex-static needs no libhypic-client.so"
fi

# ---- against hypic-cached as `make run` starts it ----------------------------
conf=$src/deploy/hypic-cached.minimal.yaml
sed -e 's|^listen: .*|listen: 127.0.0.1:0|' -e "s|path: models/|path: $src/models/|" \
    -e "s|path: var/nvme|path: $dir/nvme|" "$conf" >hypic-cached.yaml
if grep -q "path: $src/models/" hypic-cached.yaml && grep -q "path: $dir/nvme" hypic-cached.yaml \
    && grep -q '^listen: 127.0.0.1:0' hypic-cached.yaml; then
    ok "make run's configuration on free ports, NVMe in $dir/nvme"
else
    bad "$conf no longer has the lines this test rewrites (listen, models/, var/nvme)"
    show hypic-cached.yaml
    finish
fi
"$cached" --config hypic-cached.yaml --http-listen 127.0.0.1:0 --ready-file ready 2>daemon.log &
pid=$!
pids=$pid
addr=
i=0
while [ $i -lt 600 ]; do
    if ! kill -0 "$pid" 2>/dev/null; then break; fi
    addr=$(sed -n 's/^grpc=//p' ready 2>/dev/null)
    [ -n "$addr" ] && break
    sleep 0.1
    i=$((i + 1))
done
if [ -z "$addr" ]; then
    bad "hypic-cached did not get ready"
    show daemon.log
    finish
fi
echo "hypic-cached serving on $addr"

# run NAME PROGRAM ROUND1 ROUND2: the program's two lines begin with these.
run() {
    if ./"$2" "$addr" >"$2.out" 2>"$2.err"; then
        if [ "$(sed -n 1p "$2.out" | cut -d, -f1-2)" = "$3" ] \
            && [ "$(sed -n 2p "$2.out" | cut -d, -f1-2)" = "$4" ]; then
            ok "$1: $(tr '\n' '|' <"$2.out")"
        else
            bad "$1: want '$3' then '$4'"
            show "$2.out"
        fi
    else
        bad "$1 failed"
        show "$2.err"
    fi
}
run "shared, first" ex "round 1: KYW = 002, segments: miss miss" \
    "round 2: KYW = 002, segments: hit hit"
# the entries are stored now: hits from the first round on
run "static, second" ex-static "round 1: KYW = 002, segments: hit hit" \
    "round 2: KYW = 002, segments: hit hit"

finish
