/*
 * The safetensors reader against broken files. Every file is built byte by
 * byte (8-byte little-endian header length, JSON, data) in a fresh temporary
 * directory, and every refusal is checked for its status code and for a
 * message that names the file, the tensor and the problem. Also: the
 * widening of BF16/F16 to fp32 bit for bit, hy_st_write round trips, sharded
 * directories and their index, and that no truncation or byte mutation of a
 * valid file opens into out-of-bounds views.
 */
#include "safetensors_internal.h"
#include "test_util.h"

#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[64]; /* the temporary directory of this run */

/* --- building files ---------------------------------------------------- */

/* Writes len raw bytes to g_dir/name; path receives the full path. */
static void write_raw(const char *name, const void *bytes, size_t len, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL_FATAL(fwrite(bytes, 1, len, f), len);
    CU_ASSERT_EQUAL_FATAL(fclose(f), 0);
}

/* Writes a safetensors file whose header-length field says hlen, followed by
 * hlen_actual bytes of header and dlen bytes of data. */
static void write_st_len(const char *name, uint64_t hlen, const char *hdr, size_t hlen_actual,
                         const void *data, size_t dlen, char *path, size_t cap)
{
    size_t n = 8 + hlen_actual + dlen;
    unsigned char *buf = malloc(n ? n : 1);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(hlen >> (8 * i));
    memcpy(buf + 8, hdr, hlen_actual);
    if (dlen) memcpy(buf + 8 + hlen_actual, data, dlen);
    write_raw(name, buf, n, path, cap);
    free(buf);
}

/* The ordinary case: the header length is the JSON's length. */
static void write_st(const char *name, const char *json, const void *data, size_t dlen, char *path,
                     size_t cap)
{
    write_st_len(name, strlen(json), json, strlen(json), data, dlen, path, cap);
}

static const unsigned char k_zeros[64];

/* Opens path expecting failure with code; the message must name the path and
 * contain each non-NULL fragment. */
static void expect_open_fails(const char *path, int code, const char *frag1, const char *frag2)
{
    hy_st *st = (hy_st *)&st; /* any non-NULL value: a failed open must reset it */
    hy_err e = {0};
    int rc = hy_st_open_file(&st, path, &e);
    CU_ASSERT_EQUAL(rc, code);
    CU_ASSERT_EQUAL(e.code, code);
    CU_ASSERT_PTR_NULL(st);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, path));
    if (frag1) CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, frag1));
    if (frag2) CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, frag2));
    if (rc != code || !strstr(e.msg, path) || (frag1 && !strstr(e.msg, frag1)) ||
        (frag2 && !strstr(e.msg, frag2)))
        fprintf(stderr, "\n  %s: got %s '%s', wanted %s with '%s' '%s'\n", path, hy_strerror(rc),
                e.msg, hy_strerror(code), frag1 ? frag1 : "", frag2 ? frag2 : "");
    if (rc == HY_OK) hy_st_close(st);
}

/* Opens path expecting success. */
static hy_st *expect_open(const char *path)
{
    hy_st *st = NULL;
    hy_err e = {0};
    int rc = hy_st_open_file(&st, path, &e);
    if (rc) fprintf(stderr, "\n  %s: %s\n", path, e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, HY_OK);
    CU_ASSERT_PTR_NOT_NULL_FATAL(st);
    return st;
}

/* One-tensor header: {"NAME": {"dtype": DT, "shape": SHAPE, "data_offsets": OFFS}} */
#define ENTRY(name, dt, shape, offs)                                                               \
    "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":" offs "}"

/* --- the header-length field and the JSON ------------------------------- */

static void test_file_shorter_than_length_field(void)
{
    char p[256];
    for (size_t len = 0; len < 8; len++) {
        char name[32];
        snprintf(name, sizeof name, "short%zu.safetensors", len);
        write_raw(name, "\2\0\0\0\0\0\0", len, p, sizeof p);
        char want[64];
        snprintf(want, sizeof want, "%zu bytes is too short", len);
        expect_open_fails(p, HY_EFORMAT, want, "8-byte header length");
    }
}

static void test_header_longer_than_file(void)
{
    char p[256];
    const char *json = "{}";
    /* says 100 bytes, has 2 */
    write_st_len("trunc_hdr.safetensors", 100, json, 2, NULL, 0, p, sizeof p);
    expect_open_fails(p, HY_EFORMAT, "header length 100 runs past the end of the 10-byte file",
                      "truncated");
    /* one byte too many */
    write_st_len("trunc_hdr1.safetensors", 3, json, 2, NULL, 0, p, sizeof p);
    expect_open_fails(p, HY_EFORMAT, "header length 3 runs past", NULL);
    /* exactly at the limit is not a range error, still truncated */
    write_st_len("trunc_hdr2.safetensors", HY_ST_MAX_HEADER, json, 2, NULL, 0, p, sizeof p);
    expect_open_fails(p, HY_EFORMAT, "runs past the end", NULL);
}

static void test_header_over_limit(void)
{
    char p[256];
    write_st_len("huge_hdr.safetensors", (uint64_t)HY_ST_MAX_HEADER + 1, "{}", 2, NULL, 0, p,
                 sizeof p);
    expect_open_fails(p, HY_ERANGE, "header length 104857601 exceeds the limit of 104857600", NULL);
    /* a length that would overflow size - 8 arithmetic */
    write_st_len("huge_hdr2.safetensors", UINT64_MAX, "{}", 2, NULL, 0, p, sizeof p);
    expect_open_fails(p, HY_ERANGE, "18446744073709551615 exceeds the limit", NULL);
}

static void test_json_malformed(void)
{
    static const char *bad[] = {
        "{\"a\": ",                       /* cut */
        "{\"a\" {}}",                     /* missing colon */
        "{'a': {}}",                      /* single quotes */
        "{\"a\": {\"dtype\": \"F32\",}}", /* trailing comma */
        "",                               /* empty header */
        "   ",                            /* blanks only */
        "[]",                             /* not an object */
        "[{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}]",
        "\"F32\"",
        "42",
        "null",
        "{} x", /* trailing garbage */
        "{}{}", /* two objects */
        "{} \n}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char name[64], p[256];
        snprintf(name, sizeof name, "badjson%zu.safetensors", i);
        write_st(name, bad[i], NULL, 0, p, sizeof p);
        expect_open_fails(p, HY_EFORMAT, "not one well-formed JSON object", NULL);
    }
}

static void test_nul_in_header(void)
{
    char p[256];
    write_st_len("nul.safetensors", 8, "{}\0     ", 8, NULL, 0, p, sizeof p);
    expect_open_fails(p, HY_EFORMAT, "NUL byte", NULL);
    const char h[] = "{\"a\0b\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}";
    write_st_len("nul2.safetensors", sizeof h - 1, h, sizeof h - 1, k_zeros, 4, p, sizeof p);
    expect_open_fails(p, HY_EFORMAT, "NUL byte", NULL);
}

/* --- one tensor entry ----------------------------------------------------- */

static void test_entry_not_object_or_missing_fields(void)
{
    char p[256];
    write_st("entry1.safetensors", "{\"w\": [1, 2]}", NULL, 0, p, sizeof p);
    expect_open_fails(p, HY_EFORMAT, "tensor 'w'", "not a JSON object");
    write_st("entry2.safetensors", "{\"w\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", k_zeros,
             4, p, sizeof p);
    expect_open_fails(p, HY_EFORMAT, "tensor 'w'", "'dtype'");
    write_st("entry3.safetensors",
             "{\"w\": {\"dtype\": 4, \"shape\": [1], \"data_offsets\": [0, 4]}}", k_zeros, 4, p,
             sizeof p);
    expect_open_fails(p, HY_EFORMAT, "tensor 'w'", "'dtype'");
    write_st("entry4.safetensors", "{\"w\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}",
             k_zeros, 4, p, sizeof p);
    expect_open_fails(p, HY_EFORMAT, "tensor 'w'", "non-array 'shape'");
    write_st("entry5.safetensors",
             "{\"w\": {\"dtype\": \"F32\", \"shape\": 1, \"data_offsets\": [0, 4]}}", k_zeros, 4, p,
             sizeof p);
    expect_open_fails(p, HY_EFORMAT, "tensor 'w'", "non-array 'shape'");
    write_st("entry6.safetensors", "{\"w\": {\"dtype\": \"F32\", \"shape\": [1]}}", k_zeros, 4, p,
             sizeof p);
    expect_open_fails(p, HY_EFORMAT, "tensor 'w'", "'data_offsets' must be [begin, end]");
    write_st("meta.safetensors", "{\"__metadata__\": [1]}", NULL, 0, p, sizeof p);
    expect_open_fails(p, HY_EFORMAT, "'__metadata__' is not an object", NULL);
}

static void test_unknown_dtype(void)
{
    static const char *dts[] = {"Q4", "F8_E4M3", "f32", "", "FLOAT"};
    for (size_t i = 0; i < sizeof dts / sizeof *dts; i++) {
        char json[256], name[64], p[256], want[64];
        snprintf(json, sizeof json,
                 "{\"weird.w\":{\"dtype\":\"%s\",\"shape\":[1],\"data_offsets\":[0,1]}}", dts[i]);
        snprintf(name, sizeof name, "dtype%zu.safetensors", i);
        write_st(name, json, k_zeros, 1, p, sizeof p);
        snprintf(want, sizeof want, "unsupported dtype '%s'", dts[i]);
        expect_open_fails(p, HY_EUNSUPPORTED, "tensor 'weird.w'", want);
    }
}

static void test_bad_shape_entries(void)
{
    static const struct {
        const char *shape;
        const char *frag;
    } bad[] = {
        {"[-1]", "shape[0] is not a non-negative integer"},
        {"[2, -3]", "shape[1] is not a non-negative integer"},
        {"[1.5]", "shape[0] is not a non-negative integer"},
        {"[2, 0.5]", "shape[1] is not a non-negative integer"},
        {"[\"4\"]", "shape[0] is not a non-negative integer"},
        {"[null]", "shape[0] is not a non-negative integer"},
        {"[true]", "shape[0] is not a non-negative integer"},
        {"[[1]]", "shape[0] is not a non-negative integer"},
        {"[1e30]", "shape[0] is not a non-negative integer"},
        {"[1, 1, 1, 1, 1, 1, 1, 1, 1]", "9 dimensions exceed the limit of 8"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char json[256], name[64], p[256];
        snprintf(json, sizeof json,
                 "{\"s.w\":{\"dtype\":\"F32\",\"shape\":%s,\"data_offsets\":[0,4]}}", bad[i].shape);
        snprintf(name, sizeof name, "shape%zu.safetensors", i);
        write_st(name, json, k_zeros, 4, p, sizeof p);
        expect_open_fails(p, strstr(bad[i].frag, "limit") ? HY_ERANGE : HY_EFORMAT, "tensor 's.w'",
                          bad[i].frag);
    }
    char p[256];
    /* 2^62 x 4 elements overflow size_t */
    write_st(
        "overflow1.safetensors",
        "{\"o\":{\"dtype\":\"U8\",\"shape\":[1099511627776,1099511627776],\"data_offsets\":[0,0]}}",
        NULL, 0, p, sizeof p);
    expect_open_fails(p, HY_ERANGE, "tensor 'o'", "element count overflows");
    /* 2^62 elements fit but 2^62 x 4 bytes do not */
    write_st("overflow2.safetensors",
             "{\"o\":{\"dtype\":\"F32\",\"shape\":[2147483648,2147483648],\"data_offsets\":[0,0]}}",
             NULL, 0, p, sizeof p);
    expect_open_fails(p, HY_ERANGE, "tensor 'o'", "byte size overflows");
}

static void test_bad_data_offsets(void)
{
    static const struct {
        const char *offs;
        const char *frag;
    } bad[] = {
        {"[8, 4]", "data_offsets [8, 4]"}, /* end < begin */
        {"[0, 12]", "data_offsets [0, 12] outside the data buffer of 8 bytes"},
        {"[8, 12]", "data_offsets [8, 12] outside the data buffer of 8 bytes"},
        {"[0]", "'data_offsets' must be [begin, end] integers"},
        {"[0, 4, 8]", "'data_offsets' must be [begin, end] integers"},
        {"[-4, 0]", "'data_offsets' must be [begin, end] integers"},
        {"[0, 4.5]", "'data_offsets' must be [begin, end] integers"},
        {"[\"0\", 4]", "'data_offsets' must be [begin, end] integers"},
        {"{\"begin\": 0, \"end\": 4}", "'data_offsets' must be [begin, end] integers"},
        {"[0, 1e300]", "'data_offsets' must be [begin, end] integers"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char json[256], name[64], p[256];
        snprintf(json, sizeof json,
                 "{\"d.w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":%s}}", bad[i].offs);
        snprintf(name, sizeof name, "offs%zu.safetensors", i);
        write_st(name, json, k_zeros, 8, p, sizeof p);
        expect_open_fails(p, HY_EFORMAT, "tensor 'd.w'", bad[i].frag);
    }
}

static void test_byte_size_mismatch(void)
{
    char p[256];
    write_st("size1.safetensors", "{" ENTRY("m", "F32", "[3]", "[0, 8]") "}", k_zeros, 8, p,
             sizeof p);
    expect_open_fails(p, HY_EFORMAT, "tensor 'm'",
                      "8 bytes in data_offsets but dtype F32 x shape needs 12");
    write_st("size2.safetensors", "{" ENTRY("m", "BF16", "[2, 3]", "[0, 16]") "}", k_zeros, 16, p,
             sizeof p);
    expect_open_fails(p, HY_EFORMAT, "tensor 'm'",
                      "16 bytes in data_offsets but dtype BF16 x shape needs 12");
    /* a scalar (shape []) is one element */
    write_st("size3.safetensors", "{" ENTRY("m", "F64", "[]", "[0, 4]") "}", k_zeros, 4, p,
             sizeof p);
    expect_open_fails(p, HY_EFORMAT, "tensor 'm'", "needs 8");
    /* shape [0] holds no bytes */
    write_st("size4.safetensors", "{" ENTRY("m", "F32", "[0]", "[0, 4]") "}", k_zeros, 4, p,
             sizeof p);
    expect_open_fails(p, HY_EFORMAT, "tensor 'm'",
                      "4 bytes in data_offsets but dtype F32 x shape needs 0");
}

/* --- the data buffer as a whole ------------------------------------------- */

static void test_hole_between_tensors(void)
{
    char p[256];
    write_st("hole.safetensors",
             "{" ENTRY("a", "F32", "[1]", "[0, 4]") "," ENTRY("b", "F32", "[1]", "[8, 12]") "}",
             k_zeros, 12, p, sizeof p);
    expect_open_fails(p, HY_EFORMAT,
                      "tensor 'b' starts at data offset 8 but the previous tensor ends at 4",
                      "no holes");
    /* a hole before the first tensor */
    write_st("hole0.safetensors", "{" ENTRY("a", "F32", "[1]", "[4, 8]") "}", k_zeros, 8, p,
             sizeof p);
    expect_open_fails(p, HY_EFORMAT,
                      "tensor 'a' starts at data offset 4 but the previous tensor ends at 0", NULL);
}

static void test_overlapping_tensors(void)
{
    char p[256];
    write_st("overlap.safetensors",
             "{" ENTRY("a", "F32", "[2]", "[0, 8]") "," ENTRY("b", "F32", "[2]", "[4, 12]") "}",
             k_zeros, 12, p, sizeof p);
    expect_open_fails(p, HY_EFORMAT,
                      "tensor 'b' starts at data offset 4 but the previous tensor ends at 8",
                      "overlaps");
    /* two names for the very same bytes */
    write_st("alias.safetensors",
             "{" ENTRY("a", "F32", "[1]", "[0, 4]") "," ENTRY("b", "F32", "[1]", "[0, 4]") "}",
             k_zeros, 4, p, sizeof p);
    expect_open_fails(p, HY_EFORMAT, "starts at data offset 0 but the previous tensor ends at 4",
                      NULL);
}

static void test_trailing_bytes_after_last_tensor(void)
{
    char p[256];
    write_st("trail.safetensors", "{" ENTRY("a", "F32", "[1]", "[0, 4]") "}", k_zeros, 5, p,
             sizeof p);
    expect_open_fails(p, HY_EFORMAT, "tensors cover 4 bytes but the data buffer has 5",
                      "trailing bytes");
    /* an empty header with data after it */
    write_st("trail2.safetensors", "{}", k_zeros, 3, p, sizeof p);
    expect_open_fails(p, HY_EFORMAT, "tensors cover 0 bytes but the data buffer has 3", NULL);
}

static void test_file_cut_inside_data(void)
{
    char p[256];
    const char *json =
        "{" ENTRY("a", "F32", "[1]", "[0, 4]") "," ENTRY("b", "F32", "[2]", "[4, 12]") "}";
    write_st("cut.safetensors", json, k_zeros, 6, p, sizeof p);
    expect_open_fails(p, HY_EFORMAT,
                      "tensor 'b': data_offsets [4, 12] outside the data buffer of 6 bytes", NULL);
    write_st("cut2.safetensors", json, k_zeros, 4, p, sizeof p);
    expect_open_fails(p, HY_EFORMAT, "tensor 'b'", "outside the data buffer of 4 bytes");
    write_st("cut3.safetensors", json, NULL, 0, p, sizeof p);
    expect_open_fails(p, HY_EFORMAT, "outside the data buffer of 0 bytes", NULL);
}

static void test_duplicate_names_in_one_file(void)
{
    char p[256];
    write_st("dup.safetensors",
             "{" ENTRY("w", "F32", "[1]", "[0, 4]") "," ENTRY("w", "F32", "[1]", "[4, 8]") "}",
             k_zeros, 8, p, sizeof p);
    hy_st *st = (hy_st *)&st;
    hy_err e = {0};
    CU_ASSERT_EQUAL(hy_st_open_file(&st, p, &e), HY_EFORMAT);
    CU_ASSERT_PTR_NULL(st);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "tensor 'w' appears twice"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, p));
}

static void test_missing_and_non_regular_files(void)
{
    char p[256];
    snprintf(p, sizeof p, "%s/no-such.safetensors", g_dir);
    expect_open_fails(p, HY_ENOTFOUND, "cannot open", NULL);
    expect_open_fails(g_dir, HY_EIO, "not a regular file", NULL);
}

/* --- valid files ------------------------------------------------------------ */

static void test_zero_element_tensors_are_valid(void)
{
    char p[256];
    float one = 1.0f, two[2] = {2.0f, 3.0f};
    unsigned char data[12];
    memcpy(data, &one, 4);
    memcpy(data + 4, two, 8);
    write_st(
        "zero.safetensors",
        "{" ENTRY("e0", "F32", "[0]", "[0, 0]") "," ENTRY("a", "F32", "[1]", "[0, 4]") "," ENTRY(
            "e1", "BF16", "[3, 0, 2]", "[4, 4]") "," ENTRY("b", "F32", "[2]",
                                                           "[4, 12]") "," ENTRY("e2", "I64", "[0]",
                                                                                "[12, 12]") "}",
        data, 12, p, sizeof p);
    hy_st *st = expect_open(p);
    CU_ASSERT_EQUAL(hy_st_count(st), 5);
    const hy_st_tensor *e0 = hy_st_find(st, "e0"), *e1 = hy_st_find(st, "e1"),
                       *b = hy_st_find(st, "b");
    CU_ASSERT_PTR_NOT_NULL_FATAL(e0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_EQUAL(e0->numel, 0);
    CU_ASSERT_EQUAL(e0->nbytes, 0);
    CU_ASSERT_EQUAL(e0->ndim, 1);
    CU_ASSERT_EQUAL(e0->shape[0], 0);
    CU_ASSERT_EQUAL(e1->ndim, 3);
    CU_ASSERT_EQUAL(e1->shape[0], 3);
    CU_ASSERT_EQUAL(e1->shape[1], 0);
    CU_ASSERT_EQUAL(e1->shape[2], 2);
    CU_ASSERT_EQUAL(e1->numel, 0);
    CU_ASSERT_EQUAL(e1->dtype, HY_DT_BF16);
    float out[2] = {0};
    hy_err e = {0};
    CU_ASSERT_EQUAL(hy_st_read_f32(e0, out, &e), HY_OK);
    CU_ASSERT_EQUAL(hy_st_read_f32(b, out, &e), HY_OK);
    CU_ASSERT(out[0] == 2.0f && out[1] == 3.0f);
    hy_st_close(st);

    /* a file whose only tensor is empty: the data buffer is empty too */
    write_st("zero_only.safetensors", "{" ENTRY("e", "F32", "[0, 7]", "[0, 0]") "}", NULL, 0, p,
             sizeof p);
    st = expect_open(p);
    CU_ASSERT_EQUAL(hy_st_count(st), 1);
    hy_st_close(st);
    /* no tensors at all */
    write_st("empty.safetensors", "{}", NULL, 0, p, sizeof p);
    st = expect_open(p);
    CU_ASSERT_EQUAL(hy_st_count(st), 0);
    CU_ASSERT_PTR_NULL(hy_st_find(st, "a"));
    CU_ASSERT_PTR_NULL(hy_st_at(st, 0));
    hy_st_close(st);
}

static void test_metadata_and_space_padding(void)
{
    char hdr[256], p[256];
    const char *json = "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"x\"}," ENTRY(
        "z.last", "F32", "[2]", "[4, 12]") "," ENTRY("a.first", "I32", "[]", "[0, 4]") "}";
    size_t jl = strlen(json), padded = (jl + 7) / 8 * 8 + 8;
    memcpy(hdr, json, jl);
    memset(hdr + jl, ' ', padded - jl);
    int32_t i7 = -7;
    float f2[2] = {0.5f, -0.25f};
    unsigned char data[12];
    memcpy(data, &i7, 4);
    memcpy(data + 4, f2, 8);
    write_st_len("meta_ok.safetensors", padded, hdr, padded, data, sizeof data, p, sizeof p);
    hy_st *st = expect_open(p);
    CU_ASSERT_EQUAL(hy_st_count(st), 2);
    CU_ASSERT_PTR_NULL(hy_st_find(st, "__metadata__"));
    /* name order, not file order */
    CU_ASSERT_STRING_EQUAL(hy_st_at(st, 0)->name, "a.first");
    CU_ASSERT_STRING_EQUAL(hy_st_at(st, 1)->name, "z.last");
    const hy_st_tensor *a = hy_st_find(st, "a.first"), *z = hy_st_find(st, "z.last");
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(z);
    CU_ASSERT_EQUAL(a->ndim, 0);
    CU_ASSERT_EQUAL(a->numel, 1);
    CU_ASSERT_EQUAL(a->dtype, HY_DT_I32);
    CU_ASSERT_EQUAL(memcmp(a->data, &i7, 4), 0);
    CU_ASSERT_EQUAL(z->nbytes, 8);
    CU_ASSERT_EQUAL(memcmp(z->data, f2, 8), 0);
    CU_ASSERT_STRING_EQUAL(z->file, p);
    hy_st_close(st);
}

/* --- widening ------------------------------------------------------------- */

static hy_st *one_tensor_file(const char *name, const char *dtype, const void *data, size_t n,
                              size_t esz, char *p, size_t cap)
{
    char json[256];
    snprintf(json, sizeof json,
             "{\"t\":{\"dtype\":\"%s\",\"shape\":[%zu],\"data_offsets\":[0,%zu]}}", dtype, n,
             n * esz);
    write_st(name, json, data, n * esz, p, cap);
    return expect_open(p);
}

/* Bitwise equality, so that -0.0 and +0.0 differ and NaN equals NaN. */
static int same_bits(float a, float b)
{
    return memcmp(&a, &b, sizeof a) == 0 || (isnan(a) && isnan(b));
}

static void check_widened(const hy_st *st, const float *want, size_t n)
{
    const hy_st_tensor *t = hy_st_find(st, "t");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    float got[16];
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_st_read_f32(t, got, &e), HY_OK);
    for (size_t i = 0; i < n; i++) {
        if (!same_bits(got[i], want[i]))
            fprintf(stderr, "\n  %s element %zu: got %a want %a\n", hy_dtype_name(t->dtype), i,
                    (double)got[i], (double)want[i]);
        CU_ASSERT(same_bits(got[i], want[i]));
    }
}

static void test_read_bf16_exact(void)
{
    static const uint16_t h[] = {0x3F80, 0xC000, 0x3FC0, 0x7F80, 0xFF80, 0x8000,
                                 0x0000, 0x0001, 0x807F, 0x7F7F, 0x4049, 0x7FC0};
    const float want[] = {1.0f, -2.0f,     1.5f,        INFINITY,    -INFINITY, -0.0f,
                          0.0f, 0x1p-133f, -0x7Fp-133f, 0x1.FEp127f, 0x1.92p1f, NAN};
    char p[256];
    hy_st *st = one_tensor_file("bf16.safetensors", "BF16", h, 12, 2, p, sizeof p);
    check_widened(st, want, 12);
    hy_st_close(st);
}

static void test_read_f16_exact(void)
{
    static const uint16_t h[] = {0x3C00, 0xC000, 0x0001, 0x03FF, 0x0400, 0x7BFF, 0x7C00,
                                 0xFC00, 0x8000, 0x8001, 0x3555, 0x7E00, 0x0200};
    const float want[] = {1.0f,      -2.0f, 0x1p-24f,  0x3FFp-24f,  0x1p-14f, 65504.0f, INFINITY,
                          -INFINITY, -0.0f, -0x1p-24f, 0x1.554p-2f, NAN,      0x1p-15f};
    char p[256];
    hy_st *st = one_tensor_file("f16.safetensors", "F16", h, 13, 2, p, sizeof p);
    check_widened(st, want, 13);
    hy_st_close(st);
}

static void test_read_f32_and_f64(void)
{
    const float f[] = {1.0f, -0.0f, 0x1p-149f, INFINITY};
    char p[256];
    hy_st *st = one_tensor_file("f32.safetensors", "F32", f, 4, 4, p, sizeof p);
    check_widened(st, f, 4);
    hy_st_close(st);
    const double d[] = {1.5, -0.0, 1e300, 0.1};
    const float want[] = {1.5f, -0.0f, INFINITY, 0.1f};
    st = one_tensor_file("f64.safetensors", "F64", d, 4, 8, p, sizeof p);
    check_widened(st, want, 4);
    hy_st_close(st);
}

static void test_read_refuses_integers(void)
{
    static const struct {
        const char *dt;
        size_t esz;
    } ints[] = {{"I32", 4}, {"I64", 8}, {"I16", 2}, {"I8", 1}, {"U8", 1}, {"BOOL", 1}};
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
        char name[64], p[256], want[128];
        snprintf(name, sizeof name, "int%zu.safetensors", i);
        hy_st *st = one_tensor_file(name, ints[i].dt, k_zeros, 2, ints[i].esz, p, sizeof p);
        float out[2] = {42.0f, 42.0f};
        hy_err e = {0};
        CU_ASSERT_EQUAL(hy_st_read_f32(hy_st_find(st, "t"), out, &e), HY_EUNSUPPORTED);
        CU_ASSERT_EQUAL(e.code, HY_EUNSUPPORTED);
        snprintf(want, sizeof want, "tensor 't' has dtype %s", ints[i].dt);
        CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, want));
        CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, p));
        CU_ASSERT(out[0] == 42.0f && out[1] == 42.0f); /* nothing written */
        hy_st_close(st);
    }
}

/* --- writing ------------------------------------------------------------- */

static void test_write_round_trip(void)
{
    float a[6] = {1, 2, 3, 4, 5, -6.5f};
    uint16_t b[5] = {0x3F80, 0x0001, 0x8000, 0x7F80, 0x1234};
    int32_t c[4] = {-1, 0, 1, INT32_MAX};
    uint8_t d[3] = {0, 255, 7};
    const hy_st_wtensor ts[] = {
        {.name = "layer.a", .dtype = HY_DT_F32, .ndim = 2, .shape = {2, 3}, .data = a},
        {.name = "b", .dtype = HY_DT_BF16, .ndim = 1, .shape = {5}, .data = b},
        {.name = "empty", .dtype = HY_DT_F16, .ndim = 2, .shape = {0, 4}, .data = NULL},
        {.name = "c.ints", .dtype = HY_DT_I32, .ndim = 3, .shape = {1, 2, 2}, .data = c},
        {.name = "scalar.u8", .dtype = HY_DT_U8, .ndim = 0, .shape = {0}, .data = d},
        {.name = "d", .dtype = HY_DT_U8, .ndim = 1, .shape = {3}, .data = d},
    };
    const size_t n = sizeof ts / sizeof *ts;
    char p[256];
    snprintf(p, sizeof p, "%s/roundtrip.safetensors", g_dir);
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_st_write(p, ts, n, &e), HY_OK);

    /* header padded to a multiple of 8, as the format recommends */
    FILE *f = fopen(p, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    unsigned char len8[8];
    CU_ASSERT_EQUAL_FATAL(fread(len8, 1, 8, f), 8);
    fclose(f);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | len8[i];
    CU_ASSERT_EQUAL(hlen % 8, 0);
    /* and no temporary file left behind */
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", p, (int)getpid());
    CU_ASSERT_NOT_EQUAL(access(tmp, F_OK), 0);

    hy_st *st = expect_open(p);
    CU_ASSERT_EQUAL_FATAL(hy_st_count(st), n);
    for (size_t i = 0; i < n; i++) {
        const hy_st_tensor *t = hy_st_find(st, ts[i].name);
        CU_ASSERT_PTR_NOT_NULL_FATAL(t);
        CU_ASSERT_STRING_EQUAL(t->name, ts[i].name);
        CU_ASSERT_EQUAL(t->dtype, ts[i].dtype);
        CU_ASSERT_EQUAL_FATAL(t->ndim, ts[i].ndim);
        int64_t numel = 1;
        for (int d2 = 0; d2 < t->ndim; d2++) {
            CU_ASSERT_EQUAL(t->shape[d2], ts[i].shape[d2]);
            numel *= ts[i].shape[d2];
        }
        CU_ASSERT_EQUAL(t->numel, numel);
        CU_ASSERT_EQUAL_FATAL(t->nbytes, (size_t)numel * hy_dtype_size(ts[i].dtype));
        if (t->nbytes) CU_ASSERT_EQUAL(memcmp(t->data, ts[i].data, t->nbytes), 0);
    }
    hy_st_close(st);

    /* overwriting replaces the file atomically */
    CU_ASSERT_EQUAL_FATAL(hy_st_write(p, ts + 1, 1, &e), HY_OK);
    st = expect_open(p);
    CU_ASSERT_EQUAL(hy_st_count(st), 1);
    CU_ASSERT_PTR_NOT_NULL(hy_st_find(st, "b"));
    hy_st_close(st);

    /* an unwritable destination is an I/O error naming it */
    char bad[300];
    snprintf(bad, sizeof bad, "%s/no-such-dir/x.safetensors", g_dir);
    e = (hy_err){0};
    CU_ASSERT_EQUAL(hy_st_write(bad, ts, n, &e), HY_EIO);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, bad));
}

/* --- sharded directories ---------------------------------------------------- */

/* Makes g_dir/name; path receives it. */
static void make_subdir(const char *name, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", g_dir, name);
    CU_ASSERT_EQUAL_FATAL(mkdir(path, 0755), 0);
}

static void write_text(const char *dir, const char *file, const char *text)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    FILE *f = fopen(p, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs(text, f);
    CU_ASSERT_EQUAL_FATAL(fclose(f), 0);
}

static const float k_va[3] = {1, 2, 3}, k_vb[2] = {4, 5}, k_vc[1] = {6};

/* Two shards: s1 holds a and c, s2 holds b (and extra when given). */
static void write_shards(const char *dir, const char *extra_in_s2)
{
    char p[512];
    hy_err e = {0};
    const hy_st_wtensor s1[] = {
        {.name = "a", .dtype = HY_DT_F32, .ndim = 1, .shape = {3}, .data = k_va},
        {.name = "c", .dtype = HY_DT_F32, .ndim = 1, .shape = {1}, .data = k_vc},
    };
    const hy_st_wtensor s2[] = {
        {.name = "b", .dtype = HY_DT_F32, .ndim = 2, .shape = {1, 2}, .data = k_vb},
        {.name = extra_in_s2, .dtype = HY_DT_F32, .ndim = 1, .shape = {1}, .data = k_vc},
    };
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", dir);
    CU_ASSERT_EQUAL_FATAL(hy_st_write(p, s1, 2, &e), HY_OK);
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
    CU_ASSERT_EQUAL_FATAL(hy_st_write(p, s2, extra_in_s2 ? 2 : 1, &e), HY_OK);
}

#define SHARD1 "model-00001-of-00002.safetensors"
#define SHARD2 "model-00002-of-00002.safetensors"
#define INDEX  "model.safetensors.index.json"

static void expect_dir_fails(const char *dir, int code, const char *frag1, const char *frag2)
{
    hy_st *st = (hy_st *)&st;
    hy_err e = {0};
    int rc = hy_st_open_dir(&st, dir, &e);
    CU_ASSERT_EQUAL(rc, code);
    CU_ASSERT_EQUAL(e.code, code);
    CU_ASSERT_PTR_NULL(st);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, dir));
    if (frag1) CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, frag1));
    if (frag2) CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, frag2));
    if (rc != code || (frag1 && !strstr(e.msg, frag1)) || (frag2 && !strstr(e.msg, frag2)))
        fprintf(stderr, "\n  %s: got %s '%s', wanted %s with '%s' '%s'\n", dir, hy_strerror(rc),
                e.msg, hy_strerror(code), frag1 ? frag1 : "", frag2 ? frag2 : "");
    if (rc == HY_OK) hy_st_close(st);
}

static void test_sharded_dir_resolves(void)
{
    char dir[256], p[512];
    make_subdir("sharded_ok", dir, sizeof dir);
    write_shards(dir, NULL);
    write_text(dir, INDEX,
               "{\"metadata\": {\"total_size\": 24}, \"weight_map\": {\"a\": \"" SHARD1
               "\", \"b\": \"" SHARD2 "\", \"c\": \"" SHARD1 "\"}}");
    /* the index wins over a model.safetensors in the same directory */
    const hy_st_wtensor decoy = {
        .name = "decoy", .dtype = HY_DT_F32, .ndim = 1, .shape = {1}, .data = k_vc};
    hy_err e = {0};
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    CU_ASSERT_EQUAL_FATAL(hy_st_write(p, &decoy, 1, &e), HY_OK);

    hy_st *st = NULL;
    int rc = hy_st_open_dir(&st, dir, &e);
    if (rc) fprintf(stderr, "\n  %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, HY_OK);
    CU_ASSERT_EQUAL(hy_st_count(st), 3);
    CU_ASSERT_PTR_NULL(hy_st_find(st, "decoy"));
    static const struct {
        const char *name, *shard;
        const float *v;
        size_t n;
    } want[] = {{"a", SHARD1, k_va, 3}, {"b", SHARD2, k_vb, 2}, {"c", SHARD1, k_vc, 1}};
    for (size_t i = 0; i < 3; i++) {
        const hy_st_tensor *t = hy_st_find(st, want[i].name);
        CU_ASSERT_PTR_NOT_NULL_FATAL(t);
        CU_ASSERT_PTR_NOT_NULL(strstr(t->file, want[i].shard));
        CU_ASSERT_EQUAL_FATAL((size_t)t->numel, want[i].n);
        float out[3];
        CU_ASSERT_EQUAL(hy_st_read_f32(t, out, &e), HY_OK);
        CU_ASSERT_EQUAL(memcmp(out, want[i].v, want[i].n * sizeof(float)), 0);
    }
    CU_ASSERT_EQUAL(hy_st_find(st, "b")->ndim, 2);
    hy_st_close(st);

    /* without the index, the single file is used */
    snprintf(p, sizeof p, "%s/" INDEX, dir);
    CU_ASSERT_EQUAL_FATAL(unlink(p), 0);
    CU_ASSERT_EQUAL_FATAL(hy_st_open_dir(&st, dir, &e), HY_OK);
    CU_ASSERT_EQUAL(hy_st_count(st), 1);
    CU_ASSERT_PTR_NOT_NULL(hy_st_find(st, "decoy"));
    hy_st_close(st);
}

static void test_index_names_missing_shard(void)
{
    char dir[256];
    make_subdir("sharded_missing", dir, sizeof dir);
    write_shards(dir, NULL);
    write_text(dir, INDEX,
               "{\"weight_map\": {\"a\": \"" SHARD1 "\", \"b\": \"" SHARD2
               "\", \"c\": \"model-00003-of-00003.safetensors\"}}");
    expect_dir_fails(dir, HY_ENOTFOUND, "/model-00003-of-00003.safetensors", "cannot open");
}

static void test_index_maps_tensor_to_wrong_shard(void)
{
    char dir[256];
    make_subdir("sharded_wrong", dir, sizeof dir);
    write_shards(dir, NULL);
    write_text(dir, INDEX,
               "{\"weight_map\": {\"a\": \"" SHARD2 "\", \"b\": \"" SHARD2 "\", \"c\": \"" SHARD1
               "\"}}");
    expect_dir_fails(dir, HY_EFORMAT, "tensor 'a' is listed in '" SHARD2 "' but found in", SHARD1);
}

static void test_index_lists_absent_tensor(void)
{
    char dir[256];
    make_subdir("sharded_absent", dir, sizeof dir);
    write_shards(dir, NULL);
    write_text(dir, INDEX,
               "{\"weight_map\": {\"a\": \"" SHARD1 "\", \"b\": \"" SHARD2 "\", \"c\": \"" SHARD1
               "\", \"ghost\": \"" SHARD2 "\"}}");
    expect_dir_fails(dir, HY_ENOTFOUND, "tensor 'ghost' is listed in '" SHARD2 "' but absent",
                     INDEX);
}

static void test_index_refuses_paths(void)
{
    static const char *bad[] = {"../x", "/etc/passwd", "sub/" SHARD1, "..", ".", "", "a/../b"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char name[64], dir[256], idx[512], want[128];
        snprintf(name, sizeof name, "sharded_path%zu", i);
        make_subdir(name, dir, sizeof dir);
        write_shards(dir, NULL);
        snprintf(idx, sizeof idx,
                 "{\"weight_map\": {\"a\": \"" SHARD1 "\", \"b\": \"%s\", \"c\": \"" SHARD1 "\"}}",
                 bad[i]);
        write_text(dir, INDEX, idx);
        snprintf(want, sizeof want, "weight_map['b'] = '%s' is not a plain file name", bad[i]);
        expect_dir_fails(dir, HY_EFORMAT, want, INDEX);
    }
}

static void test_same_tensor_in_two_shards(void)
{
    char dir[256];
    make_subdir("sharded_dup", dir, sizeof dir);
    write_shards(dir, "a"); /* a in both shards */
    write_text(dir, INDEX,
               "{\"weight_map\": {\"a\": \"" SHARD1 "\", \"b\": \"" SHARD2 "\", \"c\": \"" SHARD1
               "\"}}");
    /* both files are named */
    expect_dir_fails(dir, HY_EFORMAT, "tensor 'a' appears twice", SHARD1);
    expect_dir_fails(dir, HY_EFORMAT, "tensor 'a' appears twice", SHARD2);
}

static void test_bad_index_files(void)
{
    static const char *bad[] = {
        "not json", "[]", "{}", "{\"weight_map\": [\"a\"]}", "{\"weight_map\": \"" SHARD1 "\"}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char name[64], dir[256];
        snprintf(name, sizeof name, "sharded_badidx%zu", i);
        make_subdir(name, dir, sizeof dir);
        write_shards(dir, NULL);
        write_text(dir, INDEX, bad[i]);
        expect_dir_fails(dir, HY_EFORMAT, INDEX, "'weight_map' object");
    }
    char dir[256];
    make_subdir("sharded_badval", dir, sizeof dir);
    write_shards(dir, NULL);
    write_text(dir, INDEX, "{\"weight_map\": {\"a\": 1}}");
    expect_dir_fails(dir, HY_EFORMAT, "weight_map['a'] is not a file name", NULL);
    /* a broken shard is reported with its own path */
    char p[512];
    make_subdir("sharded_badshard", dir, sizeof dir);
    write_shards(dir, NULL);
    snprintf(p, sizeof p, "%s/" SHARD2, dir);
    FILE *f = fopen(p, "r+b");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(ftruncate(fileno(f), 20), 0);
    fclose(f);
    write_text(dir, INDEX,
               "{\"weight_map\": {\"a\": \"" SHARD1 "\", \"b\": \"" SHARD2 "\", \"c\": \"" SHARD1
               "\"}}");
    expect_dir_fails(dir, HY_EFORMAT, "/" SHARD2 ": header length", "truncated");
}

static void test_empty_dir_not_found(void)
{
    char dir[256];
    make_subdir("empty_dir", dir, sizeof dir);
    write_text(dir, "config.json", "{}");
    expect_dir_fails(dir, HY_ENOTFOUND,
                     "neither model.safetensors nor model.safetensors.index.json", NULL);
    char missing[300];
    snprintf(missing, sizeof missing, "%s/does-not-exist", g_dir);
    expect_dir_fails(missing, HY_ENOTFOUND, NULL, NULL);
}

/* --- robustness: truncations and byte mutations of a valid file ------------ */

/* A successful open must only hand out views inside the file's data. */
static void check_views_in_bounds(const hy_st *st, size_t file_size)
{
    for (size_t i = 0; i < hy_st_count(st); i++) {
        const hy_st_tensor *t = hy_st_at(st, i);
        size_t want = (size_t)t->numel * hy_dtype_size(t->dtype);
        CU_ASSERT_EQUAL(t->nbytes, want);
        CU_ASSERT(t->nbytes <= file_size);
        CU_ASSERT(t->numel >= 0);
        for (int d = 0; d < t->ndim; d++) CU_ASSERT(t->shape[d] >= 0);
        /* touch every byte so ASan sees any stray view */
        volatile unsigned char sum = 0;
        for (size_t b = 0; b < t->nbytes; b++) sum ^= ((const unsigned char *)t->data)[b];
        (void)sum;
    }
}

/* Writes a valid two-tensor file (F32 [2,2] and BF16 [3]) named `name` and
 * reads its bytes into buf; returns the length. */
static size_t sample_bytes(const char *name, unsigned char *buf, size_t cap)
{
    float a[4] = {1, 2, 3, 4};
    uint16_t b[3] = {1, 2, 3};
    const hy_st_wtensor ts[] = {
        {.name = "a", .dtype = HY_DT_F32, .ndim = 2, .shape = {2, 2}, .data = a},
        {.name = "b", .dtype = HY_DT_BF16, .ndim = 1, .shape = {3}, .data = b},
    };
    char src[256];
    snprintf(src, sizeof src, "%s/%s", g_dir, name);
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_st_write(src, ts, 2, &e), HY_OK);
    FILE *f = fopen(src, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

static void test_every_truncation_fails(void)
{
    unsigned char buf[1024];
    size_t n = sample_bytes("full.safetensors", buf, sizeof buf);
    hy_err e = {0};
    CU_ASSERT_FATAL(n > 8 && n < sizeof buf);
    for (size_t len = 0; len < n; len++) {
        char p[256];
        write_raw("cut_any.safetensors", buf, len, p, sizeof p);
        hy_st *st = NULL;
        e = (hy_err){0};
        int rc = hy_st_open_file(&st, p, &e);
        CU_ASSERT(rc == HY_EFORMAT);
        CU_ASSERT_PTR_NULL(st);
        CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, p));
        if (rc == HY_OK) hy_st_close(st);
    }
}

static void test_byte_mutations_never_escape(void)
{
    unsigned char buf[1024];
    size_t n = sample_bytes("mut_src.safetensors", buf, sizeof buf);
    hy_err e = {0};
    static const unsigned char vals[] = {0x00, 0x01, '0', '9', '-', '"',  '{', '}',
                                         '[',  ']',  ',', ' ', 'e', 0x7F, 0xFF};
    int opened = 0, refused = 0;
    for (size_t pos = 0; pos < n; pos++)
        for (size_t v = 0; v < sizeof vals; v++) {
            if (buf[pos] == vals[v]) continue;
            unsigned char m[1024];
            memcpy(m, buf, n);
            m[pos] = vals[v];
            char p[256];
            write_raw("mut.safetensors", m, n, p, sizeof p);
            hy_st *st = NULL;
            e = (hy_err){0};
            int rc = hy_st_open_file(&st, p, &e);
            if (rc == HY_OK) {
                opened++;
                check_views_in_bounds(st, n);
                hy_st_close(st);
            } else {
                refused++;
                CU_ASSERT(rc == HY_EFORMAT || rc == HY_ERANGE || rc == HY_EUNSUPPORTED);
                CU_ASSERT_PTR_NULL(st);
                CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, p));
            }
        }
    printf("\n    %zu-byte file, mutations: %d opened (data bytes), %d refused", n, opened,
           refused);
    CU_ASSERT(refused > 0);
    CU_ASSERT(opened > 0);
}

/* --- the suite ------------------------------------------------------------- */

int main(void)
{
    if (hy_test_mkdtemp("hy_test_st_", g_dir, sizeof g_dir)) return 1;
    static const hy_test_case cases[] = {
        {"file shorter than the length field", test_file_shorter_than_length_field},
        {"header longer than the file", test_header_longer_than_file},
        {"header over the 100 MiB limit", test_header_over_limit},
        {"JSON malformed, not an object, trailing garbage", test_json_malformed},
        {"NUL byte inside the header", test_nul_in_header},
        {"entry not an object, fields missing", test_entry_not_object_or_missing_fields},
        {"unknown dtype", test_unknown_dtype},
        {"shape entries negative, fractional, non-numeric", test_bad_shape_entries},
        {"data_offsets reversed, past the buffer, malformed", test_bad_data_offsets},
        {"byte size != dtype size x shape", test_byte_size_mismatch},
        {"hole between tensors", test_hole_between_tensors},
        {"overlapping tensors", test_overlapping_tensors},
        {"trailing bytes after the last tensor", test_trailing_bytes_after_last_tensor},
        {"file cut inside the data", test_file_cut_inside_data},
        {"duplicate names in one file", test_duplicate_names_in_one_file},
        {"missing and non-regular files", test_missing_and_non_regular_files},
        {"zero-element tensors are valid", test_zero_element_tensors_are_valid},
        {"__metadata__ and space padding", test_metadata_and_space_padding},
        {"BF16 widened exactly", test_read_bf16_exact},
        {"F16 widened exactly (subnormals, inf, -0)", test_read_f16_exact},
        {"F32 copied, F64 narrowed", test_read_f32_and_f64},
        {"integer dtypes refused by read_f32", test_read_refuses_integers},
        {"write then open round trip", test_write_round_trip},
        {"sharded directory resolves", test_sharded_dir_resolves},
        {"index names a missing shard", test_index_names_missing_shard},
        {"index maps a tensor to the wrong shard", test_index_maps_tensor_to_wrong_shard},
        {"index lists an absent tensor", test_index_lists_absent_tensor},
        {"index weight_map paths refused", test_index_refuses_paths},
        {"same tensor in two shards", test_same_tensor_in_two_shards},
        {"malformed index files", test_bad_index_files},
        {"neither file nor index", test_empty_dir_not_found},
        {"every truncation of a valid file fails", test_every_truncation_fails},
        {"byte mutations never give out-of-bounds views", test_byte_mutations_never_escape},
        {NULL, NULL},
    };
    int rc = hy_test_main("safetensors", cases);
    hy_test_rmtree(g_dir);
    return rc;
}
