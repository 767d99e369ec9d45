#!/bin/sh
# The llama.cpp anchor: stock llama.cpp and our executor on the same checkpoint,
# the same prompts and the same threads, in one run (docs/executor.md, "The llama.cpp
# anchor").
#
# From a fresh clone (needs cmake, a C/C++ compiler, Python >= 3.10 and PyPI):
#   make build
#   sh tools/anchor/llamacpp.sh --quick     # 2 rounds, prefill 512 and 2048, decode 64
#   sh tools/anchor/llamacpp.sh             # 5 rounds, prefill 512, 2048, 8192, decode 256
# Options: --bin DIR (our build, default build/), --work DIR (default build-anchor/),
# --rounds N, --threads N (default nproc), --seed N (the checkpoint's, default 1),
# --jobs N (llama.cpp's build, default nproc).
#
# What it does, everything under the work directory (build-* is gitignored):
#   1. a venv (tools/anchor/requirements.txt), the llama-cpp-python sdist pinned below
#      (version and sha256) from PyPI, unpacked; its vendored llama.cpp built with CMake,
#      CPU only, -DGGML_NATIVE=ON, Release (llama-bench, llama-quantize, libllama) and
#      tools/anchor/llama_logits.c against that libllama; the commit it ships printed;
#   2. `hypic-model init --preset small-moe` in F32 and in BF16 (the same weights
#      rounded, as llama.cpp's BF16 file holds them): stock llama.cpp's qwen3next wants
#      MoE on every layer, which small's dense MLP is not;
#   3. GGUF files in F32 and BF16 (tools/anchor/hf_to_gguf.py, with the sdist's gguf
#      package) and Q8_0 (llama-quantize from the F32 one);
#   4. agreement: three prompts through both, the last position's logits compared
#      (compare_logits.py); F32 against our F32 must have identical top-10 and a max
#      |logit difference| <= 0.01 over our top 1000, or the run stops; BF16 and Q8_0
#      against our F32, BF16 against our BF16 checkpoint, and Q8_0 and F32 against our
#      q8 (--weights q8 on the F32 checkpoint) are reported;
#   5. timings: per round llama-bench on each format (-r 1) and `hypic-bench executor
#      --model` on the F32 and the BF16 checkpoint (--weights bf16: kept in bf16, bf16
#      arithmetic where the CPU has it) and on the F32 one quantised (--weights q8:
#      8-bit weights, a scale per 32, as Q8_0 holds them), alternating which side
#      goes first; medians, a table, each side's best format against the other's, and a
#      last line of JSON (summarize.py). Raw outputs stay in WORK/results/DATE/.
# Not part of CI: nothing here is built by CMake or run by ctest.
set -eu

LLAMA_CPP_PYTHON=0.3.36 # vendors ggml-org/llama.cpp@0c1e57098 (2026-10-01), which has qwen3next
SDIST_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
PRESET=small-moe
TOLERANCE=0.01

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE="$ROOT/tools/anchor"
BIN="$ROOT/build"
WORK="$ROOT/build-anchor"
ROUNDS=5
THREADS=$(nproc)
JOBS=$(nproc)
SEED=1
QUICK=0
ROUNDS_SET=0

die() {
    echo "llamacpp.sh: $*" >&2
    exit 1
}
usage() {
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}
posint() { case "$2" in '' | *[!0-9]* | 0) die "$1 needs a positive integer, not '$2'" ;; esac }

while [ $# -gt 0 ]; do
    case "$1" in
    --bin) [ $# -ge 2 ] || usage; BIN=$2; shift 2 ;;
    --work) [ $# -ge 2 ] || usage; WORK=$2; shift 2 ;;
    --rounds) [ $# -ge 2 ] || usage; posint "$1" "$2"; ROUNDS=$2; ROUNDS_SET=1; shift 2 ;;
    --threads) [ $# -ge 2 ] || usage; posint "$1" "$2"; THREADS=$2; shift 2 ;;
    --jobs) [ $# -ge 2 ] || usage; posint "$1" "$2"; JOBS=$2; shift 2 ;;
    --seed) [ $# -ge 2 ] || usage; posint "$1" "$2"; SEED=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    -h | --help) usage ;;
    *) echo "llamacpp.sh: unknown option '$1'" >&2; usage ;;
    esac
done
if [ "$QUICK" = 1 ]; then
    [ "$ROUNDS_SET" = 1 ] || ROUNDS=2
    LENGTHS=512,2048
    TG=64
    QUICK_FLAG=--quick
else
    LENGTHS=512,2048,8192
    TG=256 # what hypic-bench executor decodes (64 with --quick)
    QUICK_FLAG=
fi
START=$(date +%s)

HYPIC_MODEL="$BIN/tools/hypic-model"
HYPIC_BENCH="$BIN/bench/hypic-bench"
for b in "$HYPIC_MODEL" "$HYPIC_BENCH"; do
    [ -x "$b" ] || die "$b not found: run 'make build' first (or pass --bin DIR, our build directory)"
done
for t in cmake cc c++ tar sha256sum; do
    command -v "$t" >/dev/null 2>&1 || die "'$t' not found (the anchor builds llama.cpp from source)"
done
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)

# 1. venv, sdist, llama.cpp -------------------------------------------------------
echo "== venv and llama-cpp-python $LLAMA_CPP_PYTHON (sdist) in $WORK"
. "$ROOT/tools/pyvenv.sh"
hy_pyvenv "$HERE" "$WORK/venv" "$HERE/requirements.txt" 10
PY=$VENV_PYTHON
SDIST="$WORK/dl/llama_cpp_python-$LLAMA_CPP_PYTHON.tar.gz"
if [ ! -f "$SDIST" ]; then
    "$PY" -m pip download --quiet --disable-pip-version-check --no-binary :all: --no-deps \
        -d "$WORK/dl" "llama-cpp-python==$LLAMA_CPP_PYTHON" ||
        die "cannot download llama-cpp-python==$LLAMA_CPP_PYTHON from PyPI"
fi
echo "$SDIST_SHA256  $SDIST" | sha256sum -c --status ||
    die "$SDIST: sha256 is not the pinned $SDIST_SHA256 (delete it to download again)"
SRC="$WORK/src/llama_cpp_python-$LLAMA_CPP_PYTHON"
VENDOR="$SRC/vendor/llama.cpp"
if [ ! -f "$VENDOR/src/models/qwen3next.cpp" ]; then
    rm -rf "$SRC"
    mkdir -p "$WORK/src"
    tar -xzf "$SDIST" -C "$WORK/src"
fi
[ -f "$VENDOR/src/models/qwen3next.cpp" ] || die "$VENDOR has no qwen3next model"
if [ ! -f "$WORK/venv/gguf-from-$LLAMA_CPP_PYTHON" ]; then
    "$PY" -m pip install --quiet --disable-pip-version-check --no-deps "$VENDOR/gguf-py"
    touch "$WORK/venv/gguf-from-$LLAMA_CPP_PYTHON"
fi

# The commit the sdist vendors: its git metadata (a shallow submodule checkout;
# git's commit count, llama.cpp's "build number", is 1 there and means nothing).
if command -v git >/dev/null 2>&1 && COMMIT=$(git -C "$VENDOR" rev-parse HEAD 2>/dev/null); then
    COMMIT_DATE=$(git -C "$VENDOR" log -1 --format=%cI 2>/dev/null || echo unknown)
else
    COMMIT=$(cat "$SRC/.git/modules/vendor/llama.cpp/HEAD" 2>/dev/null || echo unknown)
    COMMIT_DATE=unknown
fi
GGML_VERSION=$(sed -n 's/^set(GGML_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\))/\2/p' \
    "$VENDOR/ggml/CMakeLists.txt" | paste -sd.)
CHANGELOG_COMMIT=$(sed -n "/^## \[$LLAMA_CPP_PYTHON\]/,/^## /s/.*ggml-org\/llama.cpp@\([0-9a-f]*\).*/\1/p" \
    "$SRC/CHANGELOG.md" | head -n 1)
echo "llama.cpp commit $COMMIT ($COMMIT_DATE), ggml $GGML_VERSION; the sdist's CHANGELOG says ${CHANGELOG_COMMIT:-?}"

LLAMA="$WORK/llama"
echo "== building llama.cpp (CPU, GGML_NATIVE, Release) in $LLAMA"
if [ ! -f "$LLAMA/CMakeCache.txt" ]; then
    cmake -S "$VENDOR" -B "$LLAMA" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF >"$WORK/llama-configure.log" 2>&1 ||
        die "llama.cpp's cmake configure failed: see $WORK/llama-configure.log"
fi
cmake --build "$LLAMA" -j"$JOBS" --target llama-bench llama-quantize >"$WORK/llama-build.log" 2>&1 ||
    die "llama.cpp's build failed: see $WORK/llama-build.log"
LOGITS="$WORK/llama-logits"
cc -O2 -Wall -Wextra -I"$VENDOR/include" -I"$VENDOR/ggml/include" "$HERE/llama_logits.c" \
    -o "$LOGITS" -L"$LLAMA/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$LLAMA/bin" ||
    die "cannot build tools/anchor/llama_logits.c against $LLAMA/bin/libllama"

# 2-3. the checkpoint and its GGUF files -------------------------------------------
MODEL="$WORK/models/$PRESET-s$SEED"
GG="$WORK/gguf"
echo "== checkpoint $PRESET (seed $SEED, F32) and GGUF F32, BF16, Q8_0"
"$HYPIC_MODEL" init --preset "$PRESET" --seed "$SEED" --out "$MODEL" --dtype F32 >/dev/null
# the same weights rounded to bf16, as llama.cpp's BF16 file holds them: our bf16 format
"$HYPIC_MODEL" init --preset "$PRESET" --seed "$SEED" --out "$MODEL-bf16" --dtype BF16 >/dev/null
mkdir -p "$GG"
for fmt in F32 BF16; do
    "$PY" "$HERE/hf_to_gguf.py" "$MODEL" "$GG/$PRESET-s$SEED-$fmt.gguf" --type "$fmt"
done
"$LLAMA/bin/llama-quantize" "$GG/$PRESET-s$SEED-F32.gguf" "$GG/$PRESET-s$SEED-Q8_0.gguf" Q8_0 \
    "$THREADS" >"$WORK/quantize.log" 2>&1 || die "llama-quantize failed: see $WORK/quantize.log"

# 4. agreement --------------------------------------------------------------------
OUT="$WORK/results/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$OUT"
echo "== agreement: the last position's logits after three prompts (raw outputs in $OUT)"
"$PY" - "$MODEL/config.json" "$OUT" <<'EOF'
import json, random, sys
vocab = json.load(open(sys.argv[1]))["vocab_size"]
text = "The quick brown fox jumps over the lazy dog, and the cache remembers it. "
prompts = {"text": [b + 3 for b in text.encode()]}
rng = random.Random(7)
prompts["random100"] = [rng.randrange(3, vocab) for _ in range(100)]
prompts["random700"] = [rng.randrange(3, vocab) for _ in range(700)]  # > one 512-token ubatch
for name, toks in prompts.items():
    with open(f"{sys.argv[2]}/prompt-{name}.txt", "w") as f:
        f.write(" ".join(map(str, toks)) + "\n")
EOF
for p in text random100 random700; do
    OMP_NUM_THREADS=$THREADS "$HYPIC_MODEL" run "$MODEL" --tokens "$OUT/prompt-$p.txt" --top 1000 \
        >"$OUT/logits-ours-$p.txt"
    OMP_NUM_THREADS=$THREADS "$HYPIC_MODEL" run "$MODEL-bf16" --tokens "$OUT/prompt-$p.txt" \
        --weights bf16 --top 1000 >"$OUT/logits-ours-bf16-$p.txt"
    OMP_NUM_THREADS=$THREADS "$HYPIC_MODEL" run "$MODEL" --tokens "$OUT/prompt-$p.txt" \
        --weights q8 --top 1000 >"$OUT/logits-ours-q8-$p.txt"
    for fmt in F32 BF16 Q8_0; do
        "$LOGITS" "$GG/$PRESET-s$SEED-$fmt.gguf" "$OUT/prompt-$p.txt" "$THREADS" \
            >"$OUT/logits-llama-$fmt-$p.txt"
        "$PY" "$HERE/compare_logits.py" "$OUT/logits-llama-$fmt-$p.txt" "$OUT/logits-ours-$p.txt" \
            >"$OUT/agreement-$fmt-$p.json"
    done
    # llama.cpp's BF16 file against our BF16 checkpoint: the same bf16 weights
    "$PY" "$HERE/compare_logits.py" "$OUT/logits-llama-BF16-$p.txt" "$OUT/logits-ours-bf16-$p.txt" \
        >"$OUT/agreement-BF16-hypicBF16-$p.json"
    # both 8-bit forms, and ours against llama.cpp's F32 (what quantising costs)
    "$PY" "$HERE/compare_logits.py" "$OUT/logits-llama-Q8_0-$p.txt" "$OUT/logits-ours-q8-$p.txt" \
        >"$OUT/agreement-Q8_0-hypicQ8-$p.json"
    "$PY" "$HERE/compare_logits.py" "$OUT/logits-llama-F32-$p.txt" "$OUT/logits-ours-q8-$p.txt" \
        >"$OUT/agreement-hypicQ8-F32-$p.json"
done
"$PY" - "$OUT" "$TOLERANCE" <<'EOF'
import glob, json, sys
bad = []
for path in sorted(glob.glob(f"{sys.argv[1]}/agreement-F32-*.json")):
    a = json.load(open(path))
    print(f"  F32 {path.rsplit('-', 1)[1][:-5]:10} top-10 identical {a['top10_identical']}, "
          f"max |logit diff| {a['max_abs_logit_diff']:.6f}")
    if not a["top10_identical"] or a["max_abs_logit_diff"] > float(sys.argv[2]):
        bad.append(path)
if bad:
    sys.exit(f"llamacpp.sh: llama.cpp's F32 logits disagree with ours: {', '.join(bad)}")
EOF

# 5. timings ----------------------------------------------------------------------
echo "== timings: $ROUNDS rounds, $THREADS threads, prefill $LENGTHS, decode $TG"
r=1
while [ "$r" -le "$ROUNDS" ]; do
    # odd rounds llama.cpp first, even rounds ours first
    for side in llama ours; do
        if [ $((r % 2)) = 0 ]; then side=$([ "$side" = llama ] && echo ours || echo llama); fi
        if [ "$side" = llama ]; then
            for fmt in F32 BF16 Q8_0; do
                OMP_NUM_THREADS=$THREADS "$LLAMA/bin/llama-bench" -m "$GG/$PRESET-s$SEED-$fmt.gguf" \
                    -t "$THREADS" -p "$LENGTHS" -n "$TG" -r 1 -o jsonl \
                    >"$OUT/llama-$fmt-r$r.jsonl" 2>"$OUT/llama-$fmt-r$r.err" ||
                    die "llama-bench failed: see $OUT/llama-$fmt-r$r.err"
                echo "  round $r: llama.cpp $fmt done"
            done
        else
            for fmt in f32 bf16 q8; do
                tag=$([ "$fmt" = f32 ] && echo "" || echo "-$fmt")
                dir=$([ "$fmt" = bf16 ] && echo "$MODEL-bf16" || echo "$MODEL")
                OMP_NUM_THREADS=$THREADS "$HYPIC_BENCH" executor --model "$dir" --weights "$fmt" \
                    $QUICK_FLAG \
                    >"$OUT/ours$tag-r$r.log" 2>"$OUT/ours$tag-r$r.err" ||
                    die "hypic-bench executor failed: see $OUT/ours$tag-r$r.err"
                echo "  round $r: hypic $fmt done"
            done
        fi
    done
    r=$((r + 1))
done

CPU=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)
"$PY" "$HERE/summarize.py" "$OUT" lengths="$LENGTHS" tg="$TG" \
    llama_cpp_commit="$COMMIT" llama_cpp_commit_date="$COMMIT_DATE" ggml_version="$GGML_VERSION" \
    llama_cpp_python="$LLAMA_CPP_PYTHON" threads="$THREADS" cpu="${CPU:-unknown}" \
    rounds="$ROUNDS" quick="$([ "$QUICK" = 1 ] && echo true || echo false)" \
    model="$PRESET seed $SEED, F32 and BF16 checkpoints, q8 from the F32" seconds="$(($(date +%s) - START))" >"$OUT/summary.txt" ||
    die "summarize.py failed on $OUT"
cat "$OUT/summary.txt"
