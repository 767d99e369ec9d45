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
 *     naive with full as reference, accuracy vs k per mode.
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

enum { ANSWER = 3, MAX_K = 64, MAX_DOC = 4096 };
/* The seams of the ablation. W = 1 and 2 have no entries: a seam narrower
 * than the conv window (K − 1 = 3) would leave body tokens whose conv reads
 * across the segment's start, which hy_entry_build refuses (DESIGN.md 1.2);
 * W = 3 is the narrowest seam there is. */
static const int k_ws[] = {0, 3, 4, 8, 16, 32};
enum { NW = sizeof k_ws / sizeof *k_ws, W8 = 3 };

/* The configurations each request runs in. */
enum {
    C_FULL,
    C_PREFIX,
    C_PIC,      /* W = 8 */
    C_NOSEAM,   /* the mode: W = 0 entries */
    C_NAIVE,    /* W = 8 */
    C_PIC_BF16, /* W = 8, S in bf16 */
    C_PIC_W0,   /* pic at W = k_ws[i]: C_PIC_W0 + i */
    C_NAIVE_W0 = C_PIC_W0 + NW,
    C_COUNT = C_NAIVE_W0 + NW
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
    fprintf(stderr, "usage: hypic-bench quality [--model DIR] [--heldout FILE] [--requests N] "
                    "[--out DIR]\n");
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
    const hy_request rq = {.segs = seg,
                           .nsegs = (size_t)k,
                           .query = q,
                           .nq = nq,
                           .mode = mode,
                           .W = W,
                           .dtype = HY_ENTRY_F32,
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

static const char *config_name(int c, char *buf, size_t cap)
{
    static const char *fixed[] = {"full", "prefix", "pic", "noseam", "naive", "pic_bf16"};
    if (c < C_PIC_W0) return fixed[c];
    if (c < C_NAIVE_W0)
        snprintf(buf, cap, "pic_w%d", k_ws[c - C_PIC_W0]);
    else
        snprintf(buf, cap, "naive_w%d", k_ws[c - C_NAIVE_W0]);
    return buf;
}

int hy_bench_quality(int argc, char **argv)
{
    const char *model = HY_MODELS_DIR "/hypic-recall", *held = NULL, *outdir = "hypic-bench-quality";
    long limit = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--model") == 0 && i + 1 < argc)
            model = argv[++i];
        else if (strcmp(argv[i], "--heldout") == 0 && i + 1 < argc)
            held = argv[++i];
        else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc)
            outdir = argv[++i];
        else if (strcmp(argv[i], "--requests") == 0 && i + 1 < argc && (limit = strtol(argv[++i], NULL, 10)) > 0)
            ;
        else {
            usage();
            return 2;
        }
    }
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
    unsigned char *ok[C_COUNT];
    tally t[C_COUNT] = {0};
    for (int c = 0; c < C_COUNT; c++) ok[c] = calloc((size_t)n, 1);
    /* breakdowns of the five modes: by k (2,4,8,16, other), by place, by seam */
    enum { NK = 5, NPLACE = 3, NSEAM = 2 };
    tally byk[C_PIC_BF16][NK] = {{{0}}}, byplace[C_PIC_BF16][NPLACE] = {{{0}}},
          byseam[C_PIC_BF16][NSEAM] = {{{0}}};
    int64_t tokens = 0, entries = 0;
    assert(k_ws[W8] == HY_SEAM_DEFAULT);
    const double t_start = hy_now_s();
    for (int i = 0; i < n && !rc; i++) {
        request *r = &rq[i];
        int32_t *tok[MAX_K] = {0};
        size_t len[MAX_K];
        hy_entry *ent[MAX_K][NW + 1] = {{0}}; /* [NW]: bf16 at W = 8 */
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
                                    w < NW ? HY_ENTRY_F32 : HY_ENTRY_BF16, NULL, &ent[d][w], &e);
                entries += !rc;
            }
        }
        int32_t q[64];
        const size_t nq = hy_tokenize_bytes(r->question, q, 64, V);
        int32_t want[ANSWER];
        hy_tokenize_bytes(r->answer, want, ANSWER, V);
        hy_segment seg[MAX_K];
        for (int c = 0; c < C_COUNT && !rc; c++) {
            hy_mode mode = HY_MODE_PIC;
            int w = W8;
            switch (c) {
            case C_FULL: mode = HY_MODE_FULL; break;
            case C_PREFIX: mode = HY_MODE_PREFIX; break;
            case C_PIC: break;
            case C_NOSEAM: mode = HY_MODE_NOSEAM, w = 0; break;
            case C_NAIVE: mode = HY_MODE_NAIVE; break;
            case C_PIC_BF16: w = NW; break;
            default:
                if (c < C_NAIVE_W0) {
                    w = c - C_PIC_W0;
                } else {
                    mode = HY_MODE_NAIVE;
                    w = c - C_NAIVE_W0;
                }
            }
            for (int d = 0; d < r->k; d++)
                seg[d] = (hy_segment){tok[d], len[d],
                                      mode == HY_MODE_FULL || mode == HY_MODE_PREFIX ? NULL
                                                                                      : ent[d][w]};
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
                const int place =
                    r->answer_doc == 0 ? 0 : (r->answer_doc == r->k - 1 ? 2 : 1);
                /* the record is "KEYVAL;": inside the seam when its value is */
                const int seam = r->offset + 6 <= HY_SEAM_DEFAULT ? 0 : 1;
                byk[c][kk].right += right, byk[c][kk].n++;
                byplace[c][place].right += right, byplace[c][place].n++;
                byseam[c][seam].right += right, byseam[c][seam].n++;
            }
        }
        for (int d = 0; d < r->k; d++) {
            free(tok[d]);
            for (int w = 0; w <= NW; w++) hy_entry_free(ent[d][w]);
        }
        if ((i + 1) % 50 == 0 || i + 1 == n) {
            printf("  %d/%d requests, %.0f s; so far full %.1f%%, pic %.1f%%, noseam %.1f%%, "
                   "naive %.1f%%\n",
                   i + 1, n, hy_now_s() - t_start, 100.0 * t[C_FULL].right / t[C_FULL].n,
                   100.0 * t[C_PIC].right / t[C_PIC].n, 100.0 * t[C_NOSEAM].right / t[C_NOSEAM].n,
                   100.0 * t[C_NAIVE].right / t[C_NAIVE].n);
            fflush(stdout);
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
        static const char *kn[] = {"2", "4", "8", "16", "other"}, *pn[] = {"first", "middle", "last"},
                          *sn[] = {"in seam", "after"};
        static const char *mn[] = {"full", "prefix", "pic", "noseam", "naive"};
        printf("\n%-8s", "by");
        for (int m = 0; m < C_PIC_BF16; m++) printf(" %8s", mn[m]);
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
                row = x < NK ? &byk[m][x] : x < NK + NPLACE ? &byplace[m][x - NK] : &byseam[m][x - NK - NPLACE];
                printf(" %7.1f%%", row->n ? 100.0 * row->right / row->n : 0.0);
            }
            printf("   (%d)\n", x < NK ? byk[0][x].n : x < NK + NPLACE ? byplace[0][x - NK].n : byseam[0][x - NK - NPLACE].n);
        }

        /* plots */
        char path[4200];
        snprintf(path, sizeof path, "%s/accuracy_vs_w.dat", outdir);
        FILE *f = fopen(path, "w");
        if (f) {
            fprintf(f, "# W pic naive full\n");
            for (int w = 0; w < NW; w++)
                fprintf(f, "%d %.3f %.3f %.3f\n", k_ws[w],
                        100.0 * t[C_PIC_W0 + w].right / n, 100.0 * t[C_NAIVE_W0 + w].right / n,
                        100.0 * t[C_FULL].right / n);
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
        hy_bench_gnuplot(outdir, "accuracy_vs_w.gp",
               "set terminal pngcairo size 720,420\nset output 'accuracy_vs_w.png'\n"
               "set title 'hypic-recall: exact match vs seam W'\nset xlabel 'W (tokens)'\n"
               "set ylabel 'exact match (%)'\nset yrange [0:100]\nset logscale x 2\n"
               "set xrange [0.5:40]\nset key bottom right\n"
               "plot 'accuracy_vs_w.dat' u ($1==0?0.7:$1):2 w lp t 'pic (W=0: noseam)', "
               "'' u ($1==0?0.7:$1):3 w lp t 'naive', '' u ($1==0?0.7:$1):4 w l dt 2 t 'full'\n");
        hy_bench_gnuplot(outdir, "accuracy_vs_k.gp",
               "set terminal pngcairo size 720,420\nset output 'accuracy_vs_k.png'\n"
               "set title 'hypic-recall: exact match vs documents per request'\n"
               "set xlabel 'k (documents)'\nset ylabel 'exact match (%)'\nset yrange [0:100]\n"
               "set logscale x 2\nset key bottom left\n"
               "plot for [c=2:6] 'accuracy_vs_k.dat' u 1:c w lp t columnhead(c)\n");
        printf("\nplots and their data in %s/ (accuracy_vs_w.png, accuracy_vs_k.png)\n", outdir);
        printf("%lld entries built over %lld document tokens; %.0f s\n", (long long)entries,
               (long long)tokens, hy_now_s() - t_start);

        printf("{\"bench\":\"quality\",\"model\":\"%s\",\"questions\":%d,\"accuracy\":{", model, n);
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
    for (int c = 0; c < C_COUNT; c++) free(ok[c]);
    for (int i = 0; i < total; i++)
        for (int j = 0; j < rq[i].k; j++) free(rq[i].doc[j]);
    free(rq), free(lf), free(lm), free(ld);
    hy_prefix_cache_free(pc);
    hy_bench_close(&bm);
    return rc ? 1 : 0;
}
