/*
 * hypic-bench quality: what PIC costs in answers, on the trained embedded
 * model (models/hypic-recall) and its held-out requests (heldout.txt, written
 * by tools/train: k documents, a question whose answer sits in one of them).
 *
 * Every document's entry is built on its own, from an empty state, as a warm
 * cache holds it — for each seam W in {0, 1, 2, 4, 8, 16, 32}, and for W = 8
 * with S stored in bf16 — and reused wherever the document appears. Each
 * request then runs in every mode on the same executor:
 *   full, prefix (one checkpoint cache over the run), pic (W = 8),
 *   noseam (pic with W = 0), naive (W = 8, no T);
 *   pic and naive at every W (the ablation), pic with bf16 S.
 * An answer is the three tokens read greedily after the question (the first
 * from the request's logits, two more by decoding on the composed state);
 * it is right when it equals the value asked for. Reported:
 *   - exact-match accuracy per mode with its 95 % Wilson interval;
 *   - the gaps to full in points (pic, naive, bf16) and the seam's gain
 *     (pic − noseam), each with a 95 % interval over the paired per-request
 *     differences;
 *   - KL(full ‖ mode) of the first answer token's distribution and top-1
 *     agreement with full;
 *   - accuracy by k, by the answer document's place (first / middle / last)
 *     and by whether the asked record lies inside the document's first W = 8
 *     tokens (the seam) or after;
 *   - PNGs (through gnuplot, when it is installed): accuracy vs W for pic and
 *     naive with full as reference, accuracy vs k per mode;
 *   - entry representations (--reprs, hy_bench_parse_repr): pic at W = 8 with
 *     every entry built in each setting — accuracy, the paired gap to exact
 *     pic, KL and top-1 against full, bytes per entry and per body token and
 *     how much smaller than exact fp32 entries — and PNGs of accuracy and of
 *     KL against bytes per entry, one point per setting.
 */
#include "bench.h"
#include "hy_common.h"
#include "hy_kernels.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef HY_MODELS_DIR
#define HY_MODELS_DIR "models"
#endif

enum { ANSWER = 3, MAX_K = 64, MAX_DOC = 4096, MAX_REPRS = 8 };
#define PROGRESS_S 3.0 /* seconds between progress lines, at least */
/* The representations compared when --reprs is not given. */
static const char k_default_reprs[] = "bf16,0.01,0.03,0.1,0.2";
/* The seams of the ablation. W = 1 and 2 have no entries: a seam narrower
 * than the conv window (K − 1 = 3) would leave body tokens whose conv reads
 * across the segment's start, which hy_entry_build refuses (docs/entry-format.md);
 * W = 3 is the narrowest seam there is. */
static const int k_ws[] = {0, 3, 4, 8, 16, 32};
enum { NW = sizeof k_ws / sizeof *k_ws, W8 = 3 };

/* The configurations each request runs in. */
enum {
    C_FULL = HY_MODE_FULL, /* C_FULL..C_NAIVE: the modes, in hy_mode's order */
    C_PREFIX = HY_MODE_PREFIX,
    C_PIC = HY_MODE_PIC,       /* W = 8 */
    C_NOSEAM = HY_MODE_NOSEAM, /* the mode: W = 0 entries */
    C_NAIVE = HY_MODE_NAIVE,   /* W = 8 */
    C_PIC_BF16,                /* W = 8, S in bf16 */
    C_PIC_W0,                  /* pic at W = k_ws[i]: C_PIC_W0 + i */
    C_NAIVE_W0 = C_PIC_W0 + NW,
    C_COUNT = C_NAIVE_W0 + NW,
    C_REPR0 = C_COUNT /* pic at W = 8 in representation i: C_REPR0 + i */
};

typedef struct request {
    int k, answer_doc, offset;
    char *doc[MAX_K]; /* each with its final newline */
    char question[64], answer[8];
} request;

typedef struct tally {
    int right, n;
    double kl;
    int top1;
} tally;

static void usage(void)
{
    fprintf(stderr,
            "usage: hypic-bench quality [--model DIR] [--heldout FILE] [--requests N] "
            "[--out DIR] [--reprs LIST]\n"
            "  LIST: comma-separated representations of the entries, each f32, bf16, "
            "a tolerance (0.01) or a tolerance/f32 (default %s)\n",
            k_default_reprs);
}

/* Reads the held-out file (tools/train/task.py: R/D/Q/A lines). Returns the
 * number of requests, or -1 after printing what is wrong and where. */
static int read_heldout(const char *path, request **out)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "hypic-bench quality: %s: %s\n", path, strerror(errno));
        return -1;
    }
    static char line[MAX_DOC + 8];
    request *rq = NULL;
    int n = 0, cap = 0, lineno = 0, bad = 0;
    while (!bad && fgets(line, sizeof line, f)) {
        lineno++;
        line[strcspn(line, "\n")] = 0;
        if (line[0] == 0) continue;
        if (line[0] != 'R') {
            bad = 1;
            break;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 256;
            request *g = realloc(rq, (size_t)cap * sizeof *rq);
            if (!g) {
                bad = 1;
                break;
            }
            rq = g;
        }
        request *r = &rq[n];
        memset(r, 0, sizeof *r);
        if (sscanf(line, "R %d %d %d", &r->k, &r->answer_doc, &r->offset) != 3 || r->k < 1 ||
            r->k > MAX_K || r->answer_doc < 0 || r->answer_doc >= r->k) {
            bad = 1;
            break;
        }
        n++;
        for (int j = 0; j < r->k + 2 && !bad; j++) {
            lineno++;
            if (!fgets(line, sizeof line, f)) {
                bad = 1;
                break;
            }
            line[strcspn(line, "\n")] = 0;
            const char want = j < r->k ? 'D' : (j == r->k ? 'Q' : 'A');
            if (line[0] != want || line[1] != ' ') {
                bad = 1;
                break;
            }
            if (j < r->k) {
                const size_t len = strlen(line + 2);
                if (!(r->doc[j] = malloc(len + 2))) {
                    bad = 1;
                    break;
                }
                memcpy(r->doc[j], line + 2, len);
                memcpy(r->doc[j] + len, "\n", 2);
            } else {
                char *dst = j == r->k ? r->question : r->answer;
                const size_t cap2 = j == r->k ? sizeof r->question : sizeof r->answer;
                if (strlen(line + 2) >= cap2 || (j > r->k && strlen(line + 2) != ANSWER)) {
                    bad = 1;
                    break;
                }
                memcpy(dst, line + 2, strlen(line + 2) + 1);
            }
        }
    }
    fclose(f);
    if (bad) {
        fprintf(stderr,
                "hypic-bench quality: %s:%d: not a held-out request line (R k doc offset, then "
                "k D lines, a Q line and an A line of %d characters)\n",
                path, lineno, ANSWER);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < rq[i].k; j++) free(rq[i].doc[j]);
        free(rq);
        return -1;
    }
    *out = rq;
    return n;
}

/* 95 % Wilson interval of p = x / n. */
static void wilson(int x, int n, double *lo, double *hi)
{
    if (n == 0) {
        *lo = *hi = 0;
        return;
    }
    const double z = 1.959964, p = (double)x / n, d = 1 + z * z / n;
    const double c = (p + z * z / (2.0 * n)) / d;
    const double h = z * sqrt(p * (1 - p) / n + z * z / (4.0 * n * n)) / d;
    *lo = c - h, *hi = c + h;
}

/* Mean and 95 % half-width of paired differences a[i] − b[i] (each 0 or 1),
 * in points. */
static void paired_gap(const unsigned char *a, const unsigned char *b, int n, double *mean,
                       double *half)
{
    double s = 0, s2 = 0;
    for (int i = 0; i < n; i++) {
        const double d = (double)a[i] - (double)b[i];
        s += d, s2 += d * d;
    }
    const double m = s / n, var = n > 1 ? (s2 - n * m * m) / (n - 1) : 0;
    *mean = 100 * m;
    *half = 100 * 1.959964 * sqrt(var > 0 ? var / n : 0);
}

/* Runs one request in one configuration: its answer's three tokens and the
 * first one's logits. */
static int answer(hy_bench_model *bm, const hy_segment *seg, int k, const int32_t *q, size_t nq,
                  hy_mode mode, int W, hy_prefix_cache *pc, float *logits, float *tmp,
                  int32_t got[ANSWER], hy_err *e)
{
    /* every segment has its entry: nothing is built inline */
    const hy_request rq = {.segs = seg,
                           .nsegs = (size_t)k,
                           .query = q,
                           .nq = nq,
                           .mode = mode,
                           .W = W,
                           .repr = hy_entry_exact(HY_ENTRY_F32),
                           .prefix = pc};
    hy_result res = {0};
    int rc = hy_combine(bm->ex, bm->st, &rq, logits, &res, e);
    const int V = bm->c->vocab;
    if (!rc) got[0] = hy_argmax(logits, V);
    for (int j = 1; j < ANSWER && !rc; j++) {
        rc = hy_exec_decode(bm->ex, bm->st, got[j - 1], tmp, e);
        if (!rc) got[j] = hy_argmax(tmp, V);
    }
    return rc;
}

static const char *g_repr_name[MAX_REPRS];

static const char *config_name(int c, char *buf, size_t cap)
{
    if (c < C_PIC_BF16) return hy_mode_name((hy_mode)c); /* C_FULL..C_NAIVE: the modes */
    if (c == C_PIC_BF16) return "pic_bf16";
    if (c >= C_REPR0) {
        snprintf(buf, cap, "pic_%s", g_repr_name[c - C_REPR0]);
        return buf;
    }
    if (c < C_NAIVE_W0)
        snprintf(buf, cap, "pic_w%d", k_ws[c - C_PIC_W0]);
    else
        snprintf(buf, cap, "naive_w%d", k_ws[c - C_NAIVE_W0]);
    return buf;
}

int hy_bench_quality(int argc, char **argv)
{
    const char *model = HY_MODELS_DIR "/hypic-recall", *held = NULL,
               *outdir = "hypic-bench-quality";
    long limit = 0;
    char reprs_arg[256];
    snprintf(reprs_arg, sizeof reprs_arg, "%s", k_default_reprs);
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--model") == 0 && i + 1 < argc)
            model = argv[++i];
        else if (strcmp(argv[i], "--reprs") == 0 && i + 1 < argc)
            snprintf(reprs_arg, sizeof reprs_arg, "%s", argv[++i]);
        else if (strcmp(argv[i], "--heldout") == 0 && i + 1 < argc)
            held = argv[++i];
        else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc)
            outdir = argv[++i];
        else if (strcmp(argv[i], "--requests") == 0 && i + 1 < argc &&
                 (limit = strtol(argv[++i], NULL, 10)) > 0)
            ;
        else {
            usage();
            return 2;
        }
    }
    hy_entry_repr reprs[MAX_REPRS];
    int NR = 0;
    for (char *sv = NULL, *tk = strtok_r(reprs_arg, ",", &sv); tk; tk = strtok_r(NULL, ",", &sv)) {
        char why[160];
        if (NR == MAX_REPRS || hy_bench_parse_repr(tk, &reprs[NR], why, sizeof why)) {
            fprintf(stderr, "hypic-bench quality: --reprs: %s\n",
                    NR == MAX_REPRS ? "at most 8 representations" : why);
            return 2;
        }
        g_repr_name[NR++] = tk;
    }
    const int NC = C_REPR0 + NR;
    char heldbuf[4200];
    if (!held) {
        snprintf(heldbuf, sizeof heldbuf, "%s/heldout.txt", model);
        held = heldbuf;
    }
    request *rq;
    const int total = read_heldout(held, &rq);
    if (total < 0) return 1;
    const int n = limit > 0 && limit < total ? (int)limit : total;
    if (mkdir(outdir, 0755) && errno != EEXIST) {
        fprintf(stderr, "hypic-bench quality: --out %s: %s\n", outdir, strerror(errno));
        return 1;
    }
    hy_bench_model bm;
    if (hy_bench_open(&bm, model)) return 1;
    const int V = bm.c->vocab;
    printf("%d held-out requests from %s; every document's entry built on its own for W in "
           "{0,3,4,8,16,32} (and bf16 S at W = 8; W = 1, 2: no entries, a seam must cover the "
           "conv window of 3)\n",
           n, held);
    fflush(stdout);

    hy_err e = {0};
    hy_prefix_cache *pc = NULL;
    int rc = hy_prefix_cache_new((size_t)256 << 20, &pc, &e);
    float *lf = malloc((size_t)V * 4), *lm = malloc((size_t)V * 4), *ld = malloc((size_t)V * 4);
    unsigned char *ok[C_REPR0 + MAX_REPRS];
    tally t[C_REPR0 + MAX_REPRS] = {0};
    for (int c = 0; c < NC; c++) ok[c] = calloc((size_t)n, 1);
    /* bytes of the entries at W = 8: exact fp32, then each representation */
    double bytes_exact = 0, bytes_r[MAX_REPRS] = {0}, body_tokens = 0;
    long docs = 0;
    /* breakdowns of the five modes: by k (2,4,8,16, other), by place, by seam */
    enum { NK = 5, NPLACE = 3, NSEAM = 2 };
    tally byk[C_PIC_BF16][NK] = {{{0}}}, byplace[C_PIC_BF16][NPLACE] = {{{0}}},
          byseam[C_PIC_BF16][NSEAM] = {{{0}}};
    int64_t tokens = 0, entries = 0;
    assert(k_ws[W8] == HY_SEAM_DEFAULT);
    const double t_start = hy_now_s();
    double t_said = t_start;
    for (int i = 0; i < n && !rc; i++) {
        request *r = &rq[i];
        int32_t *tok[MAX_K] = {0};
        size_t len[MAX_K];
        /* [NW]: bf16 at W = 8; [NW + 1 + i]: representation i at W = 8 */
        hy_entry *ent[MAX_K][NW + 1 + MAX_REPRS] = {{0}};
        for (int d = 0; d < r->k && !rc; d++) {
            const size_t cap = strlen(r->doc[d]);
            if (!(tok[d] = malloc(cap * sizeof(int32_t)))) {
                rc = hy_err_set(&e, HY_ENOMEM, "out of memory");
                break;
            }
            len[d] = hy_tokenize_bytes(r->doc[d], tok[d], cap, V);
            tokens += (int64_t)len[d];
            for (int w = 0; w <= NW && !rc; w++) {
                hy_state_reset(bm.st);
                rc = hy_entry_build(bm.ex, bm.st, tok[d], len[d], w < NW ? k_ws[w] : 8,
                                    hy_entry_exact(w < NW ? HY_ENTRY_F32 : HY_ENTRY_BF16), NULL,
                                    &ent[d][w], &e);
                entries += !rc;
            }
            for (int x = 0; x < NR && !rc; x++) {
                hy_state_reset(bm.st);
                rc = hy_entry_build(bm.ex, bm.st, tok[d], len[d], HY_SEAM_DEFAULT, reprs[x], NULL,
                                    &ent[d][NW + 1 + x], &e);
                entries += !rc;
                if (!rc) bytes_r[x] += (double)hy_entry_serialized_bytes(ent[d][NW + 1 + x]);
            }
            if (!rc) {
                bytes_exact += (double)hy_entry_serialized_bytes(ent[d][W8]);
                docs++;
                body_tokens += hy_entry_body_tokens(ent[d][W8]);
            }
        }
        int32_t q[64];
        const size_t nq = hy_tokenize_bytes(r->question, q, 64, V);
        int32_t want[ANSWER];
        hy_tokenize_bytes(r->answer, want, ANSWER, V);
        hy_segment seg[MAX_K];
        for (int c = 0; c < NC && !rc; c++) {
            hy_mode mode = HY_MODE_PIC;
            int w = W8;
            switch (c < C_REPR0 ? c : -1) {
            case -1: /* representation c − C_REPR0 at W = 8 */
                w = NW + 1 + (c - C_REPR0);
                break;
            case C_FULL:
                mode = HY_MODE_FULL;
                break;
            case C_PREFIX:
                mode = HY_MODE_PREFIX;
                break;
            case C_PIC:
                break;
            case C_NOSEAM:
                mode = HY_MODE_NOSEAM, w = 0;
                break;
            case C_NAIVE:
                mode = HY_MODE_NAIVE;
                break;
            case C_PIC_BF16:
                w = NW;
                break;
            default:
                if (c < C_NAIVE_W0) {
                    w = c - C_PIC_W0;
                } else {
                    mode = HY_MODE_NAIVE;
                    w = c - C_NAIVE_W0;
                }
            }
            for (int d = 0; d < r->k; d++)
                seg[d] =
                    (hy_segment){tok[d], len[d],
                                 mode == HY_MODE_FULL || mode == HY_MODE_PREFIX ? NULL : ent[d][w]};
            int32_t got[ANSWER];
            float *lg = c == C_FULL ? lf : lm;
            hy_state_reset(bm.st);
            rc = answer(&bm, seg, r->k, q, nq, mode, w < NW ? k_ws[w] : HY_SEAM_DEFAULT, pc, lg, ld,
                        got, &e);
            if (rc) break;
            const bool right = memcmp(got, want, sizeof got) == 0;
            ok[c][i] = right;
            t[c].right += right, t[c].n++;
            if (c != C_FULL) {
                t[c].kl += hy_kl_logits(lf, lm, V);
                t[c].top1 += hy_argmax(lf, V) == hy_argmax(lm, V);
            } else {
                t[c].top1++;
            }
            if (c < C_PIC_BF16) {
                const int kk = r->k == 2 ? 0 : r->k == 4 ? 1 : r->k == 8 ? 2 : r->k == 16 ? 3 : 4;
                const int place = r->answer_doc == 0 ? 0 : (r->answer_doc == r->k - 1 ? 2 : 1);
                /* the record is "KEYVAL;": inside the seam when its value is */
                const int seam = r->offset + 6 <= HY_SEAM_DEFAULT ? 0 : 1;
                byk[c][kk].right += right, byk[c][kk].n++;
                byplace[c][place].right += right, byplace[c][place].n++;
                byseam[c][seam].right += right, byseam[c][seam].n++;
            }
        }
        for (int d = 0; d < r->k; d++) {
            free(tok[d]);
            for (int w = 0; w <= NW + NR; w++) hy_entry_free(ent[d][w]);
        }
        /* progress on stderr: after the first request, the last, and any
         * other once PROGRESS_S have passed since the line before (a request
         * takes seconds: every document's entry is built a dozen ways, the
         * request run in two dozen configurations) */
        const double now = hy_now_s();
        if (!rc && (i == 0 || i + 1 == n || now - t_said >= PROGRESS_S)) {
            const double el = now - t_start, left = el / (i + 1) * (n - i - 1);
            fprintf(stderr,
                    "hypic-bench quality: %d/%d requests, %.0f s, about %.0f s left; so far "
                    "full %.1f%%, pic %.1f%%, noseam %.1f%%, naive %.1f%%\n",
                    i + 1, n, el, left, 100.0 * t[C_FULL].right / t[C_FULL].n,
                    100.0 * t[C_PIC].right / t[C_PIC].n, 100.0 * t[C_NOSEAM].right / t[C_NOSEAM].n,
                    100.0 * t[C_NAIVE].right / t[C_NAIVE].n);
            t_said = now;
        }
    }
    if (rc) {
        fprintf(stderr, "hypic-bench quality: %s\n", e.msg);
    } else {
        char nb[32];
        printf("\n%-10s %9s %17s %12s %8s\n", "mode", "accuracy", "95% interval", "KL vs full",
               "top-1");
        for (int c = 0; c < C_COUNT; c++) {
            double lo, hi;
            wilson(t[c].right, t[c].n, &lo, &hi);
            printf("%-10s %8.1f%% %7.1f..%5.1f%% %12.3e %7.1f%%\n", config_name(c, nb, sizeof nb),
                   100.0 * t[c].right / t[c].n, 100 * lo, 100 * hi, t[c].kl / t[c].n,
                   100.0 * t[c].top1 / t[c].n);
        }
        double pg, ph, sg, sh, ng, nh, bg, bh;
        paired_gap(ok[C_FULL], ok[C_PIC], n, &pg, &ph);
        paired_gap(ok[C_PIC], ok[C_NOSEAM], n, &sg, &sh);
        paired_gap(ok[C_FULL], ok[C_NAIVE], n, &ng, &nh);
        paired_gap(ok[C_PIC], ok[C_PIC_BF16], n, &bg, &bh);
        printf("\nfull - pic   %+6.2f points (95%% interval +-%.2f)   target: within 1 point\n", pg,
               ph);
        printf("pic - noseam %+6.2f points (+-%.2f)   the seam's gain\n", sg, sh);
        printf("full - naive %+6.2f points (+-%.2f)   target: >= 30 points\n", ng, nh);
        printf("pic - bf16   %+6.2f points (+-%.2f)   S stored in bf16\n", bg, bh);

        /* the representations, against exact fp32 entries at the same W */
        double rgap[MAX_REPRS], rhalf[MAX_REPRS];
        const double per_entry = bytes_exact / (docs ? docs : 1);
        printf("\nentry representations at W = 8 (exact fp32 entries: %.0f bytes each, %.1f per "
               "body token)\n%-14s %9s %15s %12s %8s %12s %10s %8s\n",
               per_entry, bytes_exact / body_tokens, "setting", "accuracy", "pic - it",
               "KL vs full", "top-1", "bytes/entry", "per token", "smaller");
        for (int x = 0; x < NR; x++) {
            const int c = C_REPR0 + x;
            paired_gap(ok[C_PIC], ok[c], n, &rgap[x], &rhalf[x]);
            printf("%-14s %8.1f%% %+7.2f +-%5.2f %12.3e %7.1f%% %12.0f %10.1f %7.2fx\n",
                   g_repr_name[x], 100.0 * t[c].right / t[c].n, rgap[x], rhalf[x], t[c].kl / t[c].n,
                   100.0 * t[c].top1 / t[c].n, bytes_r[x] * per_entry / bytes_exact,
                   bytes_r[x] / body_tokens, bytes_exact / bytes_r[x]);
        }
        static const char *kn[] = {"2", "4", "8", "16", "other"},
                          *pn[] = {"first", "middle", "last"}, *sn[] = {"in seam", "after"};
        printf("\n%-8s", "by");
        for (int m = 0; m < C_PIC_BF16; m++) printf(" %8s", hy_mode_name((hy_mode)m));
        printf("\n");
        for (int x = 0; x < NK + NPLACE + NSEAM; x++) {
            const tally *row = NULL;
            char lab[32];
            if (x < NK) {
                if (!byk[0][x].n) continue;
                snprintf(lab, sizeof lab, "k=%s", kn[x]);
            } else if (x < NK + NPLACE) {
                snprintf(lab, sizeof lab, "%s", pn[x - NK]);
            } else {
                snprintf(lab, sizeof lab, "%s", sn[x - NK - NPLACE]);
            }
            printf("%-8s", lab);
            for (int m = 0; m < C_PIC_BF16; m++) {
                row = x < NK            ? &byk[m][x]
                      : x < NK + NPLACE ? &byplace[m][x - NK]
                                        : &byseam[m][x - NK - NPLACE];
                printf(" %7.1f%%", row->n ? 100.0 * row->right / row->n : 0.0);
            }
            printf("   (%d)\n", x < NK            ? byk[0][x].n
                                : x < NK + NPLACE ? byplace[0][x - NK].n
                                                  : byseam[0][x - NK - NPLACE].n);
        }

        /* plots */
        char path[4200];
        snprintf(path, sizeof path, "%s/accuracy_vs_w.dat", outdir);
        FILE *f = fopen(path, "w");
        if (f) {
            fprintf(f, "# W pic naive full\n");
            for (int w = 0; w < NW; w++)
                fprintf(f, "%d %.3f %.3f %.3f\n", k_ws[w], 100.0 * t[C_PIC_W0 + w].right / n,
                        100.0 * t[C_NAIVE_W0 + w].right / n, 100.0 * t[C_FULL].right / n);
            fclose(f);
        }
        snprintf(path, sizeof path, "%s/accuracy_vs_k.dat", outdir);
        if ((f = fopen(path, "w"))) {
            fprintf(f, "# k full prefix pic noseam naive\n");
            for (int x = 0; x < NK - 1; x++) {
                if (!byk[0][x].n) continue;
                fprintf(f, "%s", kn[x]);
                for (int m = 0; m < C_PIC_BF16; m++)
                    fprintf(f, " %.3f", 100.0 * byk[m][x].right / byk[m][x].n);
                fprintf(f, "\n");
            }
            fclose(f);
        }
        /* Every axis range is set, none autoscaled: a small run's values are
         * often all equal (100 % everywhere), which gnuplot answers with an
         * "empty range" warning. Accuracy spans -5..105 so that lines at 0
         * or 100 % stay off the frame; the keys sit below the plots. */
        char script[2048], model_name[128];
        const char *slash = strrchr(model, '/');
        snprintf(model_name, sizeof model_name, "%s", slash && slash[1] ? slash + 1 : model);
        /* W on a categorical axis, one place per seam measured: W = 0
         * (noseam) gets a labelled place, which a log axis has not */
        snprintf(script, sizeof script,
                 "set terminal pngcairo size 720,440\nset output 'accuracy_vs_w.png'\n"
                 "set title '%s: exact match vs seam W'\n"
                 "set xlabel 'W (tokens of seam recomputed per document)'\n"
                 "set ylabel 'exact match (%%)'\nset yrange [-5:105]\nset ytics 0,20,100\n"
                 "set xrange [-0.5:%d.5]\nset key below horizontal samplen 2\nset grid ytics\n"
                 "plot 'accuracy_vs_w.dat' u 0:2:xtic($1 == 0 ? '0 (noseam)' : "
                 "sprintf('%%d', $1)) w lp pt 7 t 'pic', '' u 0:3 w lp pt 5 t 'naive', "
                 "'' u 0:4 w l dt 2 lw 2 t 'full'\n",
                 model_name, NW - 1);
        hy_bench_gnuplot(outdir, "accuracy_vs_w.gp", script);
        snprintf(script, sizeof script,
                 "set terminal pngcairo size 720,440\nset output 'accuracy_vs_k.png'\n"
                 "set title '%s: exact match vs documents per request'\n"
                 "set xlabel 'k (documents)'\nset ylabel 'exact match (%%)'\n"
                 "set yrange [-5:105]\nset ytics 0,20,100\nset logscale x 2\n"
                 "set xrange [1.4:23]\nset xtics (2, 4, 8, 16)\n"
                 "set key below horizontal samplen 2\nset grid ytics\n"
                 "plot for [c=2:6] 'accuracy_vs_k.dat' u 1:c w lp "
                 "t word('full prefix pic noseam naive', c - 1)\n",
                 model_name);
        hy_bench_gnuplot(outdir, "accuracy_vs_k.gp", script);
        /* bytes and KL on log axes, their ranges from the points (a factor
         * of 1.5 and 3 around them) */
        double bmin = per_entry, bmax = per_entry, kmin = 0, kmax = 0;
        for (int x = -1; x < NR; x++) {
            const double b = x < 0 ? per_entry : bytes_r[x] * per_entry / bytes_exact;
            const double kl = (x < 0 ? t[C_PIC].kl : t[C_REPR0 + x].kl) / n;
            bmin = b < bmin ? b : bmin, bmax = b > bmax ? b : bmax;
            if (kl > 0 && (kmin == 0 || kl < kmin)) kmin = kl;
            if (kl > kmax) kmax = kl;
        }
        if (kmax <= 0) kmin = 1e-12, kmax = 1e-9; /* all exact: an empty panel, no warning */
        snprintf(path, sizeof path, "%s/repr_vs_bytes.dat", outdir);
        if ((f = fopen(path, "w"))) {
            fprintf(f, "# setting bytes_per_entry accuracy kl_vs_full (first: exact fp32)\n");
            fprintf(f, "f32 %.1f %.3f %.4e\n", per_entry, 100.0 * t[C_PIC].right / n,
                    t[C_PIC].kl / n);
            for (int x = 0; x < NR; x++)
                fprintf(f, "%s %.1f %.3f %.4e\n", g_repr_name[x],
                        bytes_r[x] * per_entry / bytes_exact, 100.0 * t[C_REPR0 + x].right / n,
                        t[C_REPR0 + x].kl / n);
            fclose(f);
        }
        snprintf(script, sizeof script,
                 "set terminal pngcairo size 960,420\nset output 'repr_vs_bytes.png'\n"
                 "set multiplot layout 1,2 title '%s: pic at W = 8, entry representations'\n"
                 "set xlabel 'bytes per entry'\nset logscale x\nset xrange [%g:%g]\n"
                 "set format x '%%.0s%%cB'\n"
                 "set ylabel 'exact match (%%)'\nset yrange [-5:105]\nset ytics 0,20,100\n"
                 "set key off\n"
                 "plot 'repr_vs_bytes.dat' u 2:3 w p pt 7, '' u 2:3:1 w labels rotate by 45 left "
                 "offset 0.5,0.5\n"
                 "set ylabel 'KL(full || pic)'\nset logscale y\nset yrange [%g:%g]\n"
                 "set ytics auto\n"
                 "plot 'repr_vs_bytes.dat' u 2:4 w p pt 7, '' u 2:4:1 w labels rotate by 45 left "
                 "offset 0.5,0.5\n"
                 "unset multiplot\n",
                 model_name, bmin / 1.5, bmax * 1.5, kmin / 3, kmax * 3);
        hy_bench_gnuplot(outdir, "repr_vs_bytes.gp", script);
        printf("\nplots and their data in %s/ (accuracy_vs_w.png, accuracy_vs_k.png, "
               "repr_vs_bytes.png)\n",
               outdir);
        printf("%lld entries built over %lld document tokens; %.0f s\n", (long long)entries,
               (long long)tokens, hy_now_s() - t_start);

        printf("{\"bench\":\"quality\",\"model\":\"%s\",\"questions\":%d,\"reprs\":[", model, n);
        for (int x = 0; x < NR; x++)
            printf("%s{\"setting\":\"%s\",\"tol\":%g,\"accuracy\":%.4f,\"gap_vs_pic_points\":%.2f,"
                   "\"gap_ci95\":%.2f,\"kl_vs_full\":%.3e,\"top1_agree_vs_full\":%.4f,"
                   "\"bytes_per_entry\":%.0f,\"bytes_per_body_token\":%.1f,\"smaller_x\":%.3f}",
                   x ? "," : "", g_repr_name[x], (double)reprs[x].tol,
                   (double)t[C_REPR0 + x].right / n, rgap[x], rhalf[x], t[C_REPR0 + x].kl / n,
                   (double)t[C_REPR0 + x].top1 / n, bytes_r[x] * per_entry / bytes_exact,
                   bytes_r[x] / body_tokens, bytes_exact / bytes_r[x]);
        printf(
            "],\"exact_bytes_per_entry\":%.0f,\"exact_bytes_per_body_token\":%.1f,\"accuracy\":{",
            per_entry, bytes_exact / body_tokens);
        for (int c = 0; c < C_COUNT; c++)
            printf("%s\"%s\":%.4f", c ? "," : "", config_name(c, nb, sizeof nb),
                   (double)t[c].right / n);
        printf("},\"kl_vs_full\":{");
        for (int c = 1; c < C_PIC_BF16; c++)
            printf("%s\"%s\":%.3e", c > 1 ? "," : "", config_name(c, nb, sizeof nb), t[c].kl / n);
        printf("},\"top1_agree_vs_full\":{");
        for (int c = 1; c < C_PIC_BF16; c++)
            printf("%s\"%s\":%.4f", c > 1 ? "," : "", config_name(c, nb, sizeof nb),
                   (double)t[c].top1 / n);
        printf("},\"pic_gap_points\":%.2f,\"pic_gap_ci95\":%.2f,\"seam_gain_points\":%.2f,"
               "\"seam_gain_ci95\":%.2f,\"naive_gap_points\":%.2f,\"naive_gap_ci95\":%.2f,"
               "\"bf16_gap_points\":%.2f,\"bf16_gap_ci95\":%.2f}\n",
               pg, ph, sg, sh, ng, nh, bg, bh);
    }
    for (int c = 0; c < NC; c++) free(ok[c]);
    for (int i = 0; i < total; i++)
        for (int j = 0; j < rq[i].k; j++) free(rq[i].doc[j]);
    free(rq), free(lf), free(lm), free(ld);
    hy_prefix_cache_free(pc);
    hy_bench_close(&bm);
    return rc ? 1 : 0;
}
