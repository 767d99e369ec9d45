/*
 * What every hypic-bench benchmark shares: the model under test (a directory
 * given with --model, or the `small` preset generated into a temporary
 * directory that is removed afterwards) with its executor and state.
 */
#include "bench.h"
#include "hy_common.h"

#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

int hy_bench_open(hy_bench_model *b, const char *model)
{
    return hy_bench_open_with(b, model, HY_WEIGHTS_AUTO);
}

int hy_bench_open_with(hy_bench_model *b, const char *model, hy_weights w)
{
    hy_err e = {0};
    memset(b, 0, sizeof *b);
    if (!model) {
        snprintf(b->tmp, sizeof b->tmp, "/tmp/hypic-bench-XXXXXX");
        if (!mkdtemp(b->tmp)) {
            perror("hypic-bench: mkdtemp");
            return 1;
        }
        printf("generating the 'small' preset in %s ...\n", b->tmp);
        fflush(stdout);
        if (hy_model_init("small", 1, b->tmp, "F32", &e)) {
            fprintf(stderr, "hypic-bench: %s\n", e.msg);
            hy_bench_close(b);
            return 1;
        }
        model = b->tmp;
    }
    if (hy_model_open_with(&b->m, model, w, &e) || hy_exec_new(b->m, 0, &b->ex, &e) ||
        hy_state_new(b->m, &b->st, &e)) {
        fprintf(stderr, "hypic-bench: %s\n", e.msg);
        hy_bench_close(b);
        return 1;
    }
    b->c = hy_model_cfg(b->m);
    printf("model %s: %.1f M parameters, hidden %d, %d layers, weight matrices in %s%s\n", model,
           (double)hy_config_param_count(b->c) / 1e6, b->c->hidden, b->c->n_layers,
           hy_model_weights_name(b->m), hy_model_bf16_math(b->m) ? " (bf16 arithmetic)" : "");
    return 0;
}

int hy_bench_cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double hy_bench_median(double *v, size_t n)
{
    if (!n) return 0;
    qsort(v, n, sizeof *v, hy_bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void hy_bench_rmtree(const char *dir)
{
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int hy_bench_mkdtemp(const char *name, char *out, size_t cap)
{
    const char *tmpdir = getenv("TMPDIR") && getenv("TMPDIR")[0] ? getenv("TMPDIR") : "/tmp";
    snprintf(out, cap, "%.120s/hypic-bench-%s-XXXXXX", tmpdir, name);
    if (mkdtemp(out)) return 0;
    fprintf(stderr, "hypic-bench %s: cannot make a directory like %s: %s\n", name, out,
            strerror(errno));
    return 1;
}

void hy_bench_close(hy_bench_model *b)
{
    hy_state_free(b->st);
    hy_exec_free(b->ex);
    hy_model_close(b->m);
    if (b->tmp[0]) hy_bench_rmtree(b->tmp);
    memset(b, 0, sizeof *b);
}

void hy_bench_gnuplot(const char *dir, const char *script_name, const char *script)
{
    char path[4200], cmd[8600];
    snprintf(path, sizeof path, "%s/%s", dir, script_name);
    FILE *f = fopen(path, "w");
    if (!f) {
        printf("  could not write %s: %s\n", path, strerror(errno));
        return;
    }
    fputs(script, f);
    fclose(f);
    if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
        printf("  (gnuplot not installed: %s left unrendered)\n", path);
        return;
    }
    snprintf(cmd, sizeof cmd, "cd '%s' && gnuplot '%s' 2>&1", dir, script_name);
    const int rc = system(cmd);
    if (rc != 0)
        printf("  gnuplot failed on %s (status %d)\n", path, rc);
    else
        printf("  plot: %s (from %s)\n", dir, script_name);
}

int hy_bench_parse_repr(const char *s, hy_entry_repr *out, char *why, size_t cap)
{
    if (strcmp(s, "f32") == 0 || strcmp(s, "bf16") == 0) {
        const hy_entry_dtype d = s[0] == 'b' ? HY_ENTRY_BF16 : HY_ENTRY_F32;
        *out = (hy_entry_repr){d, d, d, 0.0f};
        return HY_OK;
    }
    char *end = NULL;
    const double tol = strtod(s, &end);
    hy_entry_dtype d = HY_ENTRY_BF16;
    if (end != s && strcmp(end, "/f32") == 0)
        d = HY_ENTRY_F32;
    else if (end == s || (*end && strcmp(end, "/bf16") != 0))
        end = NULL;
    if (!end || !(tol > 0 && tol <= 1)) {
        snprintf(why, cap,
                 "'%.40s' is not a representation (f32, bf16, or a tolerance in (0, 1] with an "
                 "optional /f32 or /bf16)",
                 s);
        return HY_EINVAL;
    }
    *out = (hy_entry_repr){d, d, d, (float)tol};
    return HY_OK;
}

/* Bytes per second of the best of reps parallel sums over a buffer four
 * times the size of any cache here (every thread reads its share). */
double hy_bench_stream_read_bytes_s(int reps)
{
    const size_t n = (size_t)64 << 20; /* 256 MiB of floats */
    float *a = hy_alloc(n * sizeof *a);
    if (!a) return 0;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = (float)(i & 7);
    double best = 1e30, sink = 0;
    for (int r = 0; r < reps; r++) {
        float s = 0; /* vector lanes of partial sums: a read limited by memory, not adds */
        double t0 = hy_now_s();
#pragma omp parallel for simd schedule(static) reduction(+ : s)
        for (size_t i = 0; i < n; i++) s += a[i];
        best = fmin(best, hy_now_s() - t0);
        sink += s;
    }
    hy_free(a);
    return sink >= 0 ? (double)n * sizeof(float) / best : 0;
}

long hy_bench_proc_status_kb(int pid, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long v = -1;
    const size_t fl = strlen(field);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, field, fl) && line[fl] == ':') {
            v = atol(line + fl + 1);
            break;
        }
    fclose(f);
    return v;
}
