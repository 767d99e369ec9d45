/*
 * hypicctl's output and input helpers: protobuf-c messages as JSON (walking
 * the message descriptors, so every response prints the same way and a new
 * field shows up without code here), aligned tables, human sizes and ages,
 * and segments' token ids read from files.
 */
#include "ctl_internal.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- protobuf-c messages as JSON ---- */

static cJSON *json_hex(const ProtobufCBinaryData *b)
{
    char *s = malloc(2 * b->len + 1);
    if (!s) return cJSON_CreateNull();
    hy_hex(b->data, b->len, s);
    s[2 * b->len] = '\0';
    cJSON *o = cJSON_CreateString(s);
    free(s);
    return o;
}

/* One value of field f stored at p. */
static cJSON *json_value(const ProtobufCFieldDescriptor *f, const void *p)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        return cJSON_CreateNumber(*(const int32_t *)p);
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        return cJSON_CreateNumber(*(const uint32_t *)p);
    /* 64-bit integers as their exact decimal digits: a double (cJSON's
     * number) holds 53 bits, and times in unix ns need 61 */
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64: {
        char d[24];
        snprintf(d, sizeof d, "%lld", (long long)*(const int64_t *)p);
        return cJSON_CreateRaw(d);
    }
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64: {
        char d[24];
        snprintf(d, sizeof d, "%llu", (unsigned long long)*(const uint64_t *)p);
        return cJSON_CreateRaw(d);
    }
    case PROTOBUF_C_TYPE_FLOAT:
        return cJSON_CreateNumber(*(const float *)p);
    case PROTOBUF_C_TYPE_DOUBLE:
        return cJSON_CreateNumber(*(const double *)p);
    case PROTOBUF_C_TYPE_BOOL:
        return cJSON_CreateBool(*(const protobuf_c_boolean *)p);
    case PROTOBUF_C_TYPE_ENUM: {
        int v = *(const int *)p;
        const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value(f->descriptor, v);
        return ev ? cJSON_CreateString(ev->name) : cJSON_CreateNumber(v);
    }
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *)p;
        return cJSON_CreateString(s ? s : "");
    }
    case PROTOBUF_C_TYPE_BYTES:
        return json_hex(p);
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessage *m = *(const ProtobufCMessage *const *)p;
        return m ? ctl_json_msg(m) : cJSON_CreateNull();
    }
    }
    return cJSON_CreateNull();
}

/* Bytes of one element of a repeated field of type t. */
static size_t elem_size(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        return 4;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        return 8;
    case PROTOBUF_C_TYPE_FLOAT:
        return sizeof(float);
    case PROTOBUF_C_TYPE_DOUBLE:
        return sizeof(double);
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_ENUM:
        return sizeof(int);
    case PROTOBUF_C_TYPE_STRING:
        return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(ProtobufCMessage *);
    }
    return 0;
}

cJSON *ctl_json_msg(const ProtobufCMessage *m)
{
    cJSON *o = cJSON_CreateObject();
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const void *p = base + f->offset;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(base + f->quantifier_offset);
            const char *arr = *(char *const *)p;
            cJSON *a = cJSON_AddArrayToObject(o, f->name);
            for (size_t k = 0; k < n; k++)
                cJSON_AddItemToArray(a, json_value(f, arr + k * elem_size(f->type)));
            continue;
        }
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            if (*(const uint32_t *)(base + f->quantifier_offset) != f->id) continue;
        } else if (f->type == PROTOBUF_C_TYPE_MESSAGE && !*(const void *const *)p) {
            continue;
        }
        cJSON_AddItemToObject(o, f->name, json_value(f, p));
    }
    return o;
}

void ctl_json_print(cJSON *o)
{
    char *s = cJSON_PrintUnformatted(o);
    if (s) {
        fputs(s, stdout);
        fputc('\n', stdout);
        free(s);
    }
    cJSON_Delete(o);
    fflush(stdout);
}

/* ---- tables ---- */

#define TABLE_MAX_COLS 16

struct ctl_table {
    int ncols;
    size_t nrows, cap;
    char **cells; /* nrows * ncols, row 0 the headers */
};

ctl_table *ctl_table_new(int ncols, const char *const *headers)
{
    assert(ncols > 0 && ncols <= TABLE_MAX_COLS);
    ctl_table *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->ncols = ncols;
    ctl_table_row(t, headers);
    return t;
}

void ctl_table_row(ctl_table *t, const char *const *cells)
{
    if (!t) return;
    if (t->nrows == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 16;
        char **c = realloc(t->cells, cap * (size_t)t->ncols * sizeof *c);
        if (!c) return; /* (out of memory: the row is dropped) */
        t->cells = c;
        t->cap = cap;
    }
    for (int i = 0; i < t->ncols; i++)
        t->cells[t->nrows * (size_t)t->ncols + (size_t)i] = strdup(cells[i] ? cells[i] : "");
    t->nrows++;
}

void ctl_table_print(ctl_table *t)
{
    if (!t) return;
    size_t w[TABLE_MAX_COLS] = {0};
    for (size_t r = 0; r < t->nrows; r++)
        for (int c = 0; c < t->ncols; c++) {
            const char *s = t->cells[r * (size_t)t->ncols + (size_t)c];
            size_t n = s ? strlen(s) : 0;
            if (n > w[c]) w[c] = n;
        }
    for (size_t r = 0; r < t->nrows; r++) {
        for (int c = 0; c < t->ncols; c++) {
            const char *s = t->cells[r * (size_t)t->ncols + (size_t)c];
            if (c == t->ncols - 1)
                printf("%s\n", s ? s : "");
            else
                printf("%-*s  ", (int)w[c], s ? s : "");
        }
    }
    fflush(stdout);
    ctl_table_free(t);
}

void ctl_table_free(ctl_table *t)
{
    if (!t) return;
    for (size_t i = 0; i < t->nrows * (size_t)t->ncols; i++) free(t->cells[i]);
    free(t->cells);
    free(t);
}

/* ---- formats ---- */

void ctl_bytes(uint64_t b, char *out, size_t cap)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024 && u < 4) v /= 1024, u++;
    if (u == 0)
        snprintf(out, cap, "%llu B", (unsigned long long)b);
    else
        snprintf(out, cap, "%.1f %s", v, units[u]);
}

/* s seconds as 42s, 17m, 5h or 3d. */
static void short_span(uint64_t s, char *out, size_t cap)
{
    if (s < 120)
        snprintf(out, cap, "%llus", (unsigned long long)s);
    else if (s < 7200)
        snprintf(out, cap, "%llum", (unsigned long long)(s / 60));
    else if (s < 172800)
        snprintf(out, cap, "%lluh", (unsigned long long)(s / 3600));
    else
        snprintf(out, cap, "%llud", (unsigned long long)(s / 86400));
}

static uint64_t wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void ctl_pin_text(uint64_t until_unix_ns, char *out, size_t cap)
{
    const uint64_t now = wall_ns();
    if (until_unix_ns == UINT64_MAX) {
        snprintf(out, cap, "pinned");
        return;
    }
    if (until_unix_ns <= now) { /* none, or lapsed */
        snprintf(out, cap, "-");
        return;
    }
    char left[16];
    short_span((until_unix_ns - now + 999999999ull) / 1000000000ull, left, sizeof left);
    snprintf(out, cap, "%s left", left);
}

void ctl_age(uint64_t unix_ns, char *out, size_t cap)
{
    if (!unix_ns) {
        snprintf(out, cap, "-");
        return;
    }
    const uint64_t now = wall_ns();
    short_span(now > unix_ns ? (now - unix_ns) / 1000000000ull : 0, out, cap);
}

const char *ctl_tier_name(int tier)
{
    switch (tier) {
    case HYPIC__V1__TIER__TIER_HBM:
        return "hbm";
    case HYPIC__V1__TIER__TIER_HOST:
        return "host";
    case HYPIC__V1__TIER__TIER_NVME:
        return "nvme";
    default:
        return "-";
    }
}

void ctl_hex(const ProtobufCBinaryData *b, char *out, size_t cap)
{
    if (!b->len || cap < 2) {
        snprintf(out, cap, "-");
        return;
    }
    size_t n = HY_MIN(b->len, (cap - 1) / 2);
    hy_hex(b->data, n, out);
    out[2 * n] = '\0';
}

void ctl_enum(const ProtobufCEnumDescriptor *d, int v, const char *prefix, char *out, size_t cap)
{
    const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value(d, v);
    if (!ev) {
        snprintf(out, cap, "?%d", v);
        return;
    }
    const char *name = ev->name;
    size_t p = strlen(prefix);
    if (strncmp(name, prefix, p) == 0) name += p;
    size_t i = 0;
    for (; name[i] && i + 1 < cap; i++) out[i] = (char)tolower((unsigned char)name[i]);
    if (cap) out[i] = '\0';
}

void ctl_token_text(uint32_t id, char *out, size_t cap)
{
    if (id < 3 || id > 258) {
        snprintf(out, cap, "<%u>", id);
        return;
    }
    unsigned b = id - 3;
    if (b == '\n')
        snprintf(out, cap, "\\n");
    else if (b == '\t')
        snprintf(out, cap, "\\t");
    else if (b == '\\')
        snprintf(out, cap, "\\\\");
    else if (b < 0x20 || b >= 0x7f) /* (a byte of a UTF-8 sequence alone is not text) */
        snprintf(out, cap, "\\x%02x", b);
    else
        snprintf(out, cap, "%c", (char)b);
}

/* ---- token ids ---- */

#define CTL_FILE_MAX ((size_t)256 << 20)

int ctl_ids_from_text(const char *text, ctl_ids *out, hy_err *err)
{
    size_t n = strlen(text);
    out->n = 0;
    out->ids = malloc((n ? n : 1) * sizeof *out->ids);
    int32_t *tmp = malloc((n ? n : 1) * sizeof *tmp);
    if (!out->ids || !tmp) {
        free(tmp);
        ctl_ids_free(out);
        return hy_err_set(err, HY_ENOMEM, "out of memory for %zu tokens", n);
    }
    /* A vocabulary this large folds nothing: every byte b is token b + 3. */
    size_t k = hy_tokenize_bytes(text, tmp, n, 1 << 30);
    for (size_t i = 0; i < k; i++) out->ids[i] = (uint32_t)tmp[i];
    out->n = k;
    free(tmp);
    return HY_OK;
}

static int parse_ids(const char *path, const char *s, ctl_ids *out, hy_err *err)
{
    size_t cap = 1024;
    out->n = 0;
    out->ids = malloc(cap * sizeof *out->ids);
    if (!out->ids) return hy_err_set(err, HY_ENOMEM, "out of memory");
    for (const char *p = s;;) {
        while (isspace((unsigned char)*p)) p++;
        if (!*p) break;
        char *end;
        errno = 0;
        unsigned long long v = strtoull(p, &end, 10);
        if (end == p || errno || v > UINT32_MAX || *p == '-' ||
            (*end && !isspace((unsigned char)*end))) {
            int len = 0;
            while (p[len] && !isspace((unsigned char)p[len]) && len < 20) len++;
            ctl_ids_free(out);
            return hy_err_set(err, HY_EFORMAT, "%s: '%.*s' (token %zu) is not a token id", path,
                              len, p, out->n);
        }
        if (out->n == cap) {
            uint32_t *ids = realloc(out->ids, 2 * cap * sizeof *ids);
            if (!ids) {
                ctl_ids_free(out);
                return hy_err_set(err, HY_ENOMEM, "out of memory");
            }
            out->ids = ids;
            cap *= 2;
        }
        out->ids[out->n++] = (uint32_t)v;
        p = end;
    }
    return HY_OK;
}

int ctl_ids_from_file(const char *path, bool ids, ctl_ids *out, hy_err *err)
{
    char *text;
    size_t len;
    out->ids = NULL;
    out->n = 0;
    int rc = hy_read_file(path, CTL_FILE_MAX, &text, &len, err);
    if (rc) return rc;
    if (!ids && strlen(text) != len) {
        hy_free(text);
        return hy_err_set(err, HY_EFORMAT, "%s: a NUL byte in a text file (use --ids for ids)",
                          path);
    }
    rc = ids ? parse_ids(path, text, out, err) : ctl_ids_from_text(text, out, err);
    hy_free(text);
    if (!rc && out->n == 0) {
        ctl_ids_free(out);
        return hy_err_set(err, HY_EINVAL, "%s: no tokens", path);
    }
    return rc;
}

void ctl_ids_free(ctl_ids *t)
{
    free(t->ids);
    t->ids = NULL;
    t->n = 0;
}

/* ---- segments ---- */

int ctl_segments_new(ctl_segments *s, size_t n, hy_err *err)
{
    memset(s, 0, sizeof *s);
    s->segs = calloc(n ? n : 1, sizeof *s->segs);
    s->seg = calloc(n ? n : 1, sizeof *s->seg);
    s->tok = calloc(n ? n : 1, sizeof *s->tok);
    s->ids = calloc(n ? n : 1, sizeof *s->ids);
    if (!s->segs || !s->seg || !s->tok || !s->ids) {
        ctl_segments_free(s);
        return hy_err_set(err, HY_ENOMEM, "out of memory for %zu segments", n);
    }
    for (size_t i = 0; i < n; i++) {
        hypic__v1__segment__init(&s->seg[i]);
        s->segs[i] = &s->seg[i];
    }
    s->n = n;
    return HY_OK;
}

/* Points segment i at its ids. */
static void segment_bind(ctl_segments *s, size_t i)
{
    hypic__v1__tokens__init(&s->tok[i]);
    s->tok[i].ids = s->ids[i].ids;
    s->tok[i].n_ids = s->ids[i].n;
    s->seg[i].ref_case = HYPIC__V1__SEGMENT__REF_TOKENS;
    s->seg[i].tokens = &s->tok[i];
}

int ctl_segments_from_files(ctl_segments *s, char *const *files, size_t n, bool ids, hy_err *err)
{
    int rc = ctl_segments_new(s, n, err);
    if (rc) return rc;
    for (size_t i = 0; i < n; i++) {
        if ((rc = ctl_ids_from_file(files[i], ids, &s->ids[i], err))) {
            ctl_segments_free(s);
            return rc;
        }
        segment_bind(s, i);
    }
    return HY_OK;
}

int ctl_segments_random(ctl_segments *s, size_t n, size_t len, uint64_t seed, hy_err *err)
{
    int rc = ctl_segments_new(s, n, err);
    if (rc) return rc;
    hy_rng r;
    hy_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) {
        s->ids[i].ids = malloc(len * sizeof *s->ids[i].ids);
        if (!s->ids[i].ids) {
            ctl_segments_free(s);
            return hy_err_set(err, HY_ENOMEM, "out of memory for %zu tokens", len);
        }
        s->ids[i].n = len;
        for (size_t k = 0; k < len; k++) s->ids[i].ids[k] = 3 + (uint32_t)(hy_rng_next(&r) % 256);
        segment_bind(s, i);
    }
    return HY_OK;
}

void ctl_segments_free(ctl_segments *s)
{
    if (s->ids)
        for (size_t i = 0; i < s->n; i++) ctl_ids_free(&s->ids[i]);
    free(s->segs);
    free(s->seg);
    free(s->tok);
    free(s->ids);
    memset(s, 0, sizeof *s);
}
