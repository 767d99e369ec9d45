#!/bin/sh
# The docs' lists held against the code, so that the next drift fails here
# rather than in a newcomer's hands. One PART per run (each its own ctest):
#   presets   hypic-model presets  vs every list marked <!-- presets --> … <!-- /presets -->
#             in README.md and docs/operations.md
#   config    hypic-cached --print-config-keys (its table k_opts, cached/config.c)
#             vs deploy/hypic-cached.yaml (every key, at its default) and the key table of
#             docs/operations.md (| key | default | …): keys and defaults
#   hypicctl  hypicctl's command table (hypicctl --list-commands, else the commands[]
#             rows of client/hypicctl.c, each checked with `hypicctl NAME --help`)
#             vs `hypicctl --help`'s "Commands:" and the command table of docs/operations.md
#   metrics   the metric families hypic-cached can export (the "hypic_…" names in cached/,
#             and a scrape of /metrics from a daemon started here on loopback)
#             vs the metric table of docs/operations.md
#   python    client/python/pyproject.toml's pins vs client/python/README.md's Install section
# Each problem is one line: which doc, which name, missing (the code has it, the doc does
# not) or extra (the doc has it, the code does not), or which default differs.
#   check_docs.sh PART SOURCE_DIR [PROGRAM]
#   (PROGRAM: hypic-model for presets, hypic-cached for config and metrics, hypicctl for
#   hypicctl)
set -u
export LC_ALL=C # one collation for sort and comm
part=$1 src=$2 prog=${3:-}
tmp=$(mktemp -d /tmp/hypic-docs.XXXXXX) || exit 1
pid=
cleanup() {
    if [ -n "$pid" ]; then
        kill -9 "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
: > "$tmp/problems"

problem() {
    echo "FAIL  $*"
    echo "$*" >> "$tmp/problems"
}

# compare DOC WHAT CODE_LABEL CODE_FILE DOC_FILE: the names (one a line) of
# CODE_FILE against those of DOC_FILE, both ways.
compare() {
    sort -u "$4" > "$tmp/code.sorted"
    sort -u "$5" > "$tmp/doc.sorted"
    if [ ! -s "$tmp/doc.sorted" ]; then
        problem "$1: no $2 found (the check reads them from it: see tests/docs/check_docs.sh)"
        return
    fi
    comm -23 "$tmp/code.sorted" "$tmp/doc.sorted" > "$tmp/missing"
    comm -13 "$tmp/code.sorted" "$tmp/doc.sorted" > "$tmp/extra"
    while read -r n; do problem "$1: $2 '$n' missing ($3 has it)"; done < "$tmp/missing"
    while read -r n; do problem "$1: $2 '$n' extra ($3 does not have it)"; done < "$tmp/extra"
    n=$(wc -l < "$tmp/doc.sorted")
    if [ ! -s "$tmp/missing" ] && [ ! -s "$tmp/extra" ]; then
        echo "ok    $1: the same $n $2 names as $3"
    fi
}

# table_rows FILE HEADER_PREFIX: the backticked texts of the first cell of each row of the
# markdown table whose header line starts with HEADER_PREFIX ("| key | default |"), one
# row a line: "TEXTS<TAB>SECOND CELL".
table_rows() {
    awk -v head="$2" '
        index($0, head) == 1 { on = 1; skip = 1; next }
        on && skip { skip = 0; next }           # the |---| line
        on && !/^\|/ { on = 0 }
        on {
            row = $0; gsub(/\\\|/, "/", row)     # an escaped | inside a cell
            n = split(row, cell, "|")
            first = cell[2]; names = ""
            while (match(first, /`[^`]+`/)) {
                names = names (names == "" ? "" : " ") substr(first, RSTART + 1, RLENGTH - 2)
                first = substr(first, RSTART + RLENGTH)
            }
            second = cell[3]; gsub(/^ +| +$/, "", second)
            print names "\t" second
        }' "$1"
}

# ---------------------------------------------------------------------------
check_presets() {
    "$prog" presets > "$tmp/presets" || { problem "hypic-model presets failed"; return; }
    for doc in README.md docs/operations.md; do
        # each marked list apart: "INDEX NAME" per backticked name
        awk '{ s = s $0 "\n" } END {
                k = 0
                while ((i = index(s, "<!-- presets -->")) > 0) {
                    s = substr(s, i + 16); j = index(s, "<!-- /presets -->")
                    if (!j) { print "unclosed"; exit }
                    r = substr(s, 1, j - 1); s = substr(s, j); k++
                    while (match(r, /`[^`]+`/)) {
                        print k, substr(r, RSTART + 1, RLENGTH - 2); r = substr(r, RSTART + RLENGTH)
                    }
                }
                if (!k) print "none"
            }' "$src/$doc" > "$tmp/lists"
        if grep -qx "none" "$tmp/lists"; then
            problem "$doc: no preset list marked <!-- presets --> ... <!-- /presets -->"
            continue
        fi
        if grep -qx "unclosed" "$tmp/lists"; then
            problem "$doc: a <!-- presets --> list without its <!-- /presets -->"
            continue
        fi
        for k in $(cut -d' ' -f1 "$tmp/lists" | sort -u); do
            awk -v k="$k" '$1 == k { print $2 }' "$tmp/lists" > "$tmp/list"
            compare "$doc (preset list $k)" preset "hypic-model presets" "$tmp/presets" "$tmp/list"
        done
    done
}

# ---------------------------------------------------------------------------
# deploy/hypic-cached.yaml as "KEY<TAB>VALUE<TAB>active|commented" lines, list items'
# fields as "models[].name". A commented-out key is a comment holding `key:` alone or
# `key: value` with one word for the value (`# threads: 8`); prose comments are skipped.
flatten_yaml() {
    awk '
        function strip(v) {
            sub(/[ \t]+#.*$/, "", v); sub(/^[ \t]+/, "", v); sub(/[ \t]+$/, "", v)
            if (v ~ /^".*"$/ && v != "\"\"") v = substr(v, 2, length(v) - 2)
            if (v == "'"''"'") v = "\"\""
            return v
        }
        {
            line = $0; state = "active"
            if (match(line, /^ *# /)) {
                ind0 = RLENGTH - 2; rest = substr(line, RLENGTH + 1)
                match(rest, /^ */); ind = ind0 + RLENGTH; rest = substr(rest, RLENGTH + 1)
                state = "commented"
                # a key alone, or a key and a one-word value (then a comment, or nothing)
                if (rest !~ /^(- )?[a-z_]+:( *$| +[^ #]+ *$| +[^ #]+ +#.*$)/) next
            } else if (line ~ /^ *(#.*)?$/) {
                next
            } else {
                match(line, /^ */); ind = RLENGTH; rest = substr(line, RLENGTH + 1)
            }
            item = 0
            if (rest ~ /^- /) { item = 1; rest = substr(rest, 3) }
            if (!match(rest, /^[a-z_]+:/)) next
            key = substr(rest, 1, RLENGTH - 1); val = strip(substr(rest, RLENGTH + 1))
            while (depth > 0 && stack_ind[depth] >= ind) depth--
            parent = depth ? stack_path[depth] : ""
            if (item) {                         # "- key: v": the first field of an item
                parent = parent "[]"
                depth++; stack_ind[depth] = ind; stack_path[depth] = parent
                ind += 2
            }
            path = parent == "" ? key : parent "." key
            if (val == "") {                    # a section, or a list whose items follow
                depth++; stack_ind[depth] = ind; stack_path[depth] = path
            }
            print path "\t" val "\t" state
        }' "$1"
}

check_config() {
    "$prog" --print-config-keys > "$tmp/keys" || { problem "hypic-cached --print-config-keys failed"; return; }
    cut -f1 "$tmp/keys" > "$tmp/key_names"

    yaml=deploy/hypic-cached.yaml
    flatten_yaml "$src/$yaml" > "$tmp/yaml"
    # its names, less the sections (a name some key lies under: "tiers.host")
    awk -F'\t' 'NR == FNR { n = split($1, p, "."); s = p[1]
                            for (i = 2; i <= n; i++) { section[s] = 1; s = s "." p[i] }
                            next }
                 !($1 in section) { print $1 }' "$tmp/keys" "$tmp/yaml" > "$tmp/yaml_names"
    compare "$yaml" "key" "hypic-cached --print-config-keys" "$tmp/key_names" "$tmp/yaml_names"
    # a key with a default is set to it; a key without one (-) is commented out or a list
    awk -F'\t' -v doc="$yaml" 'NR == FNR { def[$1] = $2; next }
        ($1 in def) && $3 == "active" && def[$1] != "-" && def[$1] != $2 {
            printf "%s: key %s is %s, its default is %s\n", doc, $1, $2, def[$1] }
        ($1 in def) && $3 == "commented" && def[$1] != "-" && $1 !~ /\[\]/ { hidden[$1] = 1 }
        $3 == "active" { active[$1] = 1 }
        END { for (k in hidden) if (!(k in active))
                  printf "%s: key %s is only commented out; its default is %s\n", doc, k, def[k] }' \
        "$tmp/keys" "$tmp/yaml" > "$tmp/wrong"
    while read -r l; do problem "$l"; done < "$tmp/wrong"
    [ -s "$tmp/wrong" ] || echo "ok    $yaml: every key given there is at its default"

    doc=docs/operations.md
    table_rows "$src/$doc" "| key | default |" > "$tmp/rows"
    cut -f1 "$tmp/rows" | tr ' ' '\n' | grep -v '^$' > "$tmp/doc_names"
    compare "$doc (configuration table)" "key" "hypic-cached --print-config-keys" \
        "$tmp/key_names" "$tmp/doc_names"
    # a default cell that is one `value` is compared; prose ("the online CPUs") is not
    awk -F'\t' -v doc="$doc" 'NR == FNR { def[$1] = $2; next }
        $2 ~ /^`[^`]*`$/ {
            v = substr($2, 2, length($2) - 2); n = split($1, k, " ")
            for (i = 1; i <= n; i++) # (- : the code has no default to compare)
                if ((k[i] in def) && def[k[i]] != "-" && def[k[i]] != v)
                    printf "%s: key %s has the default %s in the table, %s in the code\n",
                           doc, k[i], v, def[k[i]]
        }' "$tmp/keys" "$tmp/rows" > "$tmp/wrong"
    while read -r l; do problem "$l"; done < "$tmp/wrong"
    [ -s "$tmp/wrong" ] || echo "ok    $doc: every default the table gives as a value is the code's"
    # its example of an unknown key at the top: the sections the daemon lists there, in order
    want=$(cut -f1 "$tmp/keys" | sed 's/[.[].*//' | awk '!seen[$0]++' | paste -sd, - |
        sed 's/,/, /g')
    got=$(sed -n "s/.*unknown key '[a-z_]*' (allowed here: \(.*\))$/\1/p" "$src/$doc" | head -1)
    if [ "$got" != "$want" ]; then
        problem "$doc: its unknown-key example allows '$got'; the daemon says '$want'"
    else
        echo "ok    $doc: its unknown-key example lists the daemon's sections"
    fi
}

# ---------------------------------------------------------------------------
check_hypicctl() {
    if "$prog" --list-commands > "$tmp/cmds" 2>/dev/null && [ -s "$tmp/cmds" ]; then
        label="hypicctl --list-commands"
    else # the table's rows: {"name", ctl_fn,
        sed -n 's/^ *{"\([a-z-]*\)", *ctl_[a-z_]*,.*/\1/p' "$src/client/hypicctl.c" > "$tmp/cmds"
        label="hypicctl's command table (client/hypicctl.c)"
        [ -s "$tmp/cmds" ] || { problem "no command found in client/hypicctl.c"; return; }
    fi
    while read -r c; do # each a real command of this binary
        if ! "$prog" "$c" --help 2>/dev/null | grep -q "^usage: hypicctl $c"; then
            problem "$label: '$c' is not a command of $prog ('$c --help' prints no usage)"
        fi
    done < "$tmp/cmds"
    "$prog" --help > "$tmp/help" || problem "hypicctl --help failed"
    awk '/^Commands:/ { on = 1; next } on && /^$/ { on = 0 } on { print $1 }' "$tmp/help" \
        > "$tmp/help_names"
    compare "hypicctl --help (Commands:)" command "$label" "$tmp/cmds" "$tmp/help_names"
    table_rows "$src/docs/operations.md" "| command | RPC |" | cut -f1 | cut -d' ' -f1 \
        > "$tmp/doc_names"
    compare "docs/operations.md (hypicctl's command table)" command "$label" "$tmp/cmds" \
        "$tmp/doc_names"
}

# ---------------------------------------------------------------------------
check_metrics() {
    grep -ho '"hypic_[a-z0-9_]*"' "$src"/cached/*.c | tr -d '"' | sort -u > "$tmp/names"
    # the exposition of a daemon started here: nothing in it that the sources do not name
    cat > "$tmp/cfg.yaml" <<EOF
listen: 127.0.0.1:0
http_listen: 127.0.0.1:0
models: [{name: recall, path: $src/models/hypic-recall}]
tiers: {host: {bytes: 64M}}
log: {level: warn}
EOF
    "$prog" --config "$tmp/cfg.yaml" --ready-file "$tmp/ready" 2> "$tmp/daemon.log" &
    pid=$!
    i=0
    while [ ! -s "$tmp/ready" ] && [ $i -lt 300 ] && kill -0 "$pid" 2>/dev/null; do
        sleep 0.1
        i=$((i + 1))
    done
    http=$(sed -n 's/^http=//p' "$tmp/ready" 2>/dev/null)
    if [ -z "$http" ]; then
        problem "hypic-cached did not start (its log below)"
        sed 's/^/      /' "$tmp/daemon.log"
    elif python3 -c "import sys, urllib.request
sys.stdout.write(urllib.request.urlopen('http://$http/metrics', timeout=10).read().decode())" \
        > "$tmp/metrics"; then
        sed -n 's/^# TYPE \([a-z0-9_]*\) .*/\1/p' "$tmp/metrics" | sort -u > "$tmp/scraped"
        comm -13 "$tmp/names" "$tmp/scraped" > "$tmp/unnamed"
        while read -r n; do
            problem "/metrics exports '$n', which no \"hypic_...\" string in cached/ names"
        done < "$tmp/unnamed"
        [ -s "$tmp/scraped" ] || problem "/metrics of the daemon started here has no family"
        echo "ok    /metrics: its $(wc -l < "$tmp/scraped") families are among the sources' $(wc -l < "$tmp/names")"
    else
        problem "GET http://$http/metrics failed"
    fi
    kill -TERM "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    pid=
    table_rows "$src/docs/operations.md" "| metric | type |" | cut -f1 | tr ' ' '\n' |
        grep -v '^$' > "$tmp/doc_names"
    compare "docs/operations.md (metric table)" metric "hypic-cached (cached/*.c)" \
        "$tmp/names" "$tmp/doc_names"
}

# ---------------------------------------------------------------------------
check_python() {
    # pins of [build-system] requires, [project] dependencies and optional-dependencies
    awk '/^\[/ { on = ($0 == "[build-system]" || $0 == "[project]" ||
                      $0 == "[project.optional-dependencies]") }
         on { while (match($0, /"[A-Za-z0-9_.-]+==[^";]+/)) {
                  print substr($0, RSTART + 1, RLENGTH - 1); $0 = substr($0, RSTART + RLENGTH) } }' \
        "$src/client/python/pyproject.toml" > "$tmp/pins"
    # the README's Install section: its `name==version`s
    awk '/^## / { on = ($0 == "## Install") } on' "$src/client/python/README.md" |
        grep -o '`[A-Za-z0-9_.-]*==[^`]*`' | tr -d '`' > "$tmp/doc_pins"
    compare "client/python/README.md (Install)" requirement "client/python/pyproject.toml" \
        "$tmp/pins" "$tmp/doc_pins"
}

case $part in
presets) check_presets ;;
config) check_config ;;
hypicctl) check_hypicctl ;;
metrics) check_metrics ;;
python) check_python ;;
*)
    echo "usage: check_docs.sh presets|config|hypicctl|metrics|python SOURCE_DIR [PROGRAM]" >&2
    exit 2
    ;;
esac
n=$(wc -l < "$tmp/problems")
if [ "$n" -gt 0 ]; then
    echo "$n problem(s): make the docs say what the code does (or the code what they say)"
    exit 1
fi
echo "docs agree with the code ($part)"
