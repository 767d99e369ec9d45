#!/bin/sh
# Every hypic-bench benchmark run once with its smallest arguments, so that
# none of them can break unnoticed: each must exit 0 and end with one JSON
# object whose "bench" is its name and whose headline figures are finite
# numbers (positive where a zero would mean nothing was measured). The numbers
# themselves are not judged: this is a smoke run on a shared CI machine, not a
# measurement. Everything runs in one temporary directory, removed at the end
# whatever happens.
#
# Usage: bench_smoke.sh PATH/TO/hypic-bench PATH/TO/hypic-model PATH/TO/check_bench_json [PART]
# PART: "load" runs only the long daemon load benchmarks (reuse, million,
# scale, soak), "rest" all the others, none every one: ctest runs the two
# parts as two tests, side by side, each within its own time limit.
set -u
bench=$1 model_tool=$2 check=$3 part=${4:-}
case "$part" in
"" | load | rest) ;;
*)
    echo "bench_smoke.sh: PART must be load or rest, not '$part'" >&2
    exit 2
    ;;
esac
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hypic-bench-smoke.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM HUP
pass=0
fail=0

# run NAME KEY... -- ARGS...: hypic-bench ARGS, then its last line checked
# against NAME and the KEYs (see check_bench_json.c).
run() {
    name=$1
    shift
    case "$name" in
    reuse | million | scale | soak) in=load ;;
    *) in=rest ;;
    esac
    if [ -n "$part" ] && [ "$part" != "$in" ]; then
        return 0
    fi
    keys=""
    while [ "$1" != "--" ]; do
        keys="$keys $1"
        shift
    done
    shift
    out="$tmp/$name.out"
    start=$(date +%s)
    "$bench" "$@" >"$out" 2>"$tmp/$name.err"
    status=$?
    secs=$(($(date +%s) - start))
    # shellcheck disable=SC2086 # keys are single words by construction
    if [ "$status" -eq 0 ] && "$check" "$name" $keys <"$out" >/dev/null 2>"$tmp/check.err"; then
        pass=$((pass + 1))
        echo "  ok    hypic-bench $* (${secs} s)"
    else
        fail=$((fail + 1))
        if [ "$status" -ne 0 ]; then
            echo "  FAIL  hypic-bench $*: exit $status; stderr:"
            sed 's/^/        /' "$tmp/$name.err"
        else
            echo "  FAIL  hypic-bench $*: its JSON line:"
            sed 's/^/        /' "$tmp/check.err"
        fi
        echo "        last lines of stdout:"
        tail -n 5 "$out" | cut -c 1-300 | sed 's/^/        /'
    fi
}

# left_behind NAME: a FAIL for each temporary directory hypic-bench NAME left in $tmp
# (none when NAME did not run in this part)
left_behind() {
    for d in "$tmp"/hypic-bench-"$1"-*; do
        [ -e "$d" ] || continue
        fail=$((fail + 1))
        echo "  FAIL  hypic-bench $1 left $d behind"
    done
}

"$model_tool" init --preset tiny --seed 1 --out "$tmp/tiny" >/dev/null || exit 1

# --quick: prefills of 512 and 2048 tokens, chunked against recurrent at 512.
run executor sgemm_gflops\>0 prefill_tok_s_512\>0 prefill_tok_s_2048\>0 \
    recurrent_tok_s_512\>0 decode_tok_s\>0 chunked_over_recurrent_512\>0 \
    delta_rule_chunked_over_recurrent_512\>0 fraction_of_sgemm_limit_512\>0 \
    fraction_of_sgemm_limit_2048\>0 peak_rss_mb\>0 breakdown_prefill_ms\>0 \
    breakdown_ms.gemm\>0 breakdown_ms.delta_rule\>0 breakdown_ms.attention\>0 \
    breakdown_ms.conv\>0 breakdown_ms.norm_gate\>0 breakdown_ms.moe_routing breakdown_ms.other \
    breakdown_pct.gemm\>0 gemm_gflops\>0 gemm_fraction_of_sgemm\>0 \
    -- executor --model "$tmp/tiny" --quick

run pic requests\>0 ttft_ms.full\>0 ttft_ms.prefix\>0 ttft_ms.pic\>0 ttft_ms.noseam\>0 \
    ttft_ms.naive\>0 pic_over_prefix_speedup\>0 pic_over_full_speedup\>0 build_overhead_pct \
    kl_vs_full.prefix kl_vs_full.pic kl_vs_full.noseam kl_vs_full.naive \
    top1_agree_vs_full.pic top1_agree_vs_full.naive tokens_prefilled.full\>0 \
    tokens_prefilled.pic\>0 entry_bytes_per_token\>0 compose_us_per_hit\>0 \
    ttft_ms.pic_store_host\>0 ttft_ms.pic_store_nvme\>0 ttft_ms.pic_in_memory\>0 \
    fetch_ms.host\>0 fetch_ms.nvme\>0 entry_bytes_per_request\>0 prefix_checkpoint_bytes\>0 \
    prefix_budget_bytes\>0 prefix_reused_requests\>0 build_overhead_requests\>0 \
    build_overhead_pct_p50 build_overhead_pct_min build_overhead_pct_max \
    ttft_ms.plain_computed\>0 pic_over_plain_computed\>0 compose_in_pass_us_per_hit\>0 \
    compose_limit_us_per_hit\>0 token_bound\>0 flop_bound\>0 xxh3_gbps\>0 \
    -- pic --model "$tmp/tiny" --requests 1 --dir "$tmp"
# the trained model's first held-out requests; the plots' data (and PNGs when
# gnuplot is installed) under --out
run quality questions\>0 accuracy.full accuracy.prefix accuracy.pic accuracy.noseam \
    accuracy.naive accuracy.pic_bf16 accuracy.pic_w32 accuracy.naive_w0 kl_vs_full.pic \
    top1_agree_vs_full.naive pic_gap_points seam_gain_points naive_gap_points bf16_gap_points \
    pic_gap_ci95 -- quality --requests 4 --out "$tmp/quality"
if [ "$part" != load ] &&
    { [ ! -s "$tmp/quality/accuracy_vs_w.dat" ] || [ ! -s "$tmp/quality/accuracy_vs_k.dat" ]; }; then
    fail=$((fail + 1))
    echo "  FAIL  hypic-bench quality wrote no plot data under --out"
fi
# a real hypic-cached on tiny, one short open-loop rate per mode
run rag slo_ms\>0 qps_at_slo.full qps_at_slo.prefix qps_at_slo.pic qps_ratio hit_rate \
    ttft_p50_ms.pic.4\>0 ttft_p99_ms.prefix.4\>0 errors -- rag --quick --out "$tmp/rag"
# pic puts its NVMe tier in a directory of its own under --dir and must remove it.
left_behind pic

# The generated trace, written out with --dump and replayed with --trace, so
# both the generator and the trace reader run.
policy_keys="requests>0 lookups>0 unique_segments>0 unique_bytes>0 results.0.hit_rate
    results.0.byte_hit_rate results.0.flops_saved best_flops_saved_at_10pct.flops_saved"
# shellcheck disable=SC2086
run policies $policy_keys -- policies --zipf --requests 200 --docs 50 --dump "$tmp/trace.txt"
# shellcheck disable=SC2086
run policies $policy_keys -- policies --trace "$tmp/trace.txt"

tier_keys="catalog_lookups_per_s>0 store_acquire_release_per_s>0 nvme_small_puts_per_s>0"
for s in 1m 16m 64m; do
    tier_keys="$tier_keys host_get_over_memcpy_$s>0 host_put_over_memcpy_$s>0
        nvme_read_over_raw_$s>0 nvme_write_over_raw_$s>0"
done
# shellcheck disable=SC2086
run tiers $tier_keys -- tiers --dir "$tmp" --smoke
# tiers works in a directory of its own under --dir and must remove it.
left_behind tiers

# --quick: 0.5 s per phase, 2 segments per request; hypic-cached (the path
# built into hypic-bench) runs as its child and must stop cleanly. Its model
# and the daemon's files go under $TMPDIR, and must be removed.
TMPDIR=$tmp
export TMPDIR
run service lookup_qps_1\>0 lookup_qps_16\>0 lookup_p50_us\>0 prefill_p50_ms\>0 \
    prefill_p99_ms\>0 rpc_overhead_p50_ms\>0 service_minus_inproc_p50_ms \
    inproc_lookup_p50_us\>0 inproc_prefill_p50_ms\>0 \
    lookup_cpu_us_per_call.client\>0 lookup_cpu_bound_qps\>0 \
    -- service --quick
left_behind service

# reuse: small on two members, each a host tier of 8 MiB and NVMe written through; three requests
# under each policy; the daemons' files under $TMPDIR, removed
run reuse ttft_p50_ms.fetch\>0 ttft_p50_ms.recompute\>0 ttft_p50_ms.auto\>0 \
    auto_over_fetch_p50\>0 auto_fetched.nvme_long auto_fetched.remote_long -- reuse --quick
left_behind reuse

# million: 10^3 and 10^4 tiny entries through a daemon (host 8 MiB, NVMe written through), every
# figure at each, the hand-over to a joining member through etcd (make deps installs it); the
# daemons' files under $TMPDIR, removed
run million handover_share\>0 handover_entries_per_s\>0 rss_bytes_per_entry\>0 lookup_p50_us.n1000\>0 lookup_p50_us.n10000\>0 \
    lookup_p99_us.n10000\>0 list_page_ms_first\>0 list_page_ms_last\>0 list_total_s.n10000\>0 \
    evictions_per_s\>0 sync_writes_per_s\>0 open_s_clean\>0 open_s_kill\>0 max_entries\>0 \
    -- million --quick
left_behind million

# scale: small, k = 2, 4, 8 documents of 128..256 tokens, every mode once; the
# daemon's files under $TMPDIR, removed
run scale ttft_ms.full.2\>0 ttft_ms.pic.2\>0 ttft_ms.naive.2\>0 limit_ms.full.2\>0 \
    peak_rss_mb.pic.2\>0 fetched_mb.pic.2\>0 tokens_computed.full.2\>0 slope.full \
    pic_speedup_at_kmax\>0 -- scale --quick --out "$tmp/scale"
left_behind scale

# soak: about a minute of the rag trace against a daemon evicting host to NVMe, 16 clients;
# judges only errors and that it ran; the daemons' files under $TMPDIR, removed
run soak requests\>0 requests_after_warmup\>0 rss_growth fd_growth session_growth \
    hit_rate.host predicted_hit_rate.host series.rps.0\>0 -- soak --quick
left_behind soak

# transfer: one timed pass; the ratios exist (it exits non-zero when the
# delivered bytes differ from the source)
run transfer shm_over_memcpy_64m\>0 tcp_over_raw_socket_64m\>0 -- transfer --reps 1
# a daemon with 1, then 2 spawned scatter workers, on tiny and its smallest request
run scatter cold_ttft_s.m1\>0 cold_ttft_s.m2\>0 efficiency_m2\>0 lpt_over_rr_makespan\>0 \
    sim_speedup.m8\>0 sim_speedup.m16\>0 sim_error_m2 cost_model.per_token_s\>0 \
    -- scatter --model "$tmp/tiny" --tokens 2048

# etcd and four members on tiny: QPS on 1-3 members, a join, a SIGKILL, a SIGTERM
run cluster lookup_qps.n1\>0 prefill_qps.n3\>0 keys_moved_on_join\>0 ideal_moved_on_join\>0 \
    keys_moved_on_join_random\>0 failed_requests_on_kill view_convergence_ms\>0 \
    -- cluster --model "$tmp/tiny" --quick
left_behind cluster

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
