/*
 * safetensors reader and writer. Reading maps each file read-only and builds
 * one table of tensors sorted by name; all validation happens at open, so a
 * hy_st that opened successfully only hands out in-bounds, well-sized views.
 * See safetensors_internal.h for the rules enforced.
 */
#include "safetensors_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct st_file {
    char *path;
    void *map;
    size_t size;
} st_file;

struct hy_st {
    st_file *files;
    size_t nfiles;
    hy_st_tensor *tensors;
    size_t ntensors, cap;
};

static const struct {
    const char *name;
    size_t size;
} k_dtypes[HY_DT_COUNT] = {
    [HY_DT_F32] = {"F32", 4},   [HY_DT_F16] = {"F16", 2}, [HY_DT_BF16] = {"BF16", 2},
    [HY_DT_F64] = {"F64", 8},   [HY_DT_I64] = {"I64", 8}, [HY_DT_I32] = {"I32", 4},
    [HY_DT_I16] = {"I16", 2},   [HY_DT_I8] = {"I8", 1},   [HY_DT_U8] = {"U8", 1},
    [HY_DT_BOOL] = {"BOOL", 1},
};

const char *hy_dtype_name(hy_dtype dt)
{
    return (unsigned)dt < HY_DT_COUNT ? k_dtypes[dt].name : "?";
}

size_t hy_dtype_size(hy_dtype dt)
{
    return (unsigned)dt < HY_DT_COUNT ? k_dtypes[dt].size : 0;
}

int hy_dtype_parse(const char *s, hy_dtype *out)
{
    for (int i = 0; i < HY_DT_COUNT; i++)
        if (strcmp(s, k_dtypes[i].name) == 0) {
            *out = (hy_dtype)i;
            return HY_OK;
        }
    return HY_EUNSUPPORTED;
}

void hy_st_close(hy_st *st)
{
    if (!st) return;
    for (size_t i = 0; i < st->ntensors; i++) free((char *)st->tensors[i].name);
    for (size_t i = 0; i < st->nfiles; i++) {
        if (st->files[i].map) munmap(st->files[i].map, st->files[i].size);
        free(st->files[i].path);
    }
    free(st->files);
    free(st->tensors);
    free(st);
}

size_t hy_st_count(const hy_st *st)
{
    return st->ntensors;
}

const hy_st_tensor *hy_st_at(const hy_st *st, size_t i)
{
    return i < st->ntensors ? &st->tensors[i] : NULL;
}

static int cmp_tensor(const void *a, const void *b)
{
    return strcmp(((const hy_st_tensor *)a)->name, ((const hy_st_tensor *)b)->name);
}

const hy_st_tensor *hy_st_find(const hy_st *st, const char *name)
{
    hy_st_tensor key = {.name = name};
    if (st->ntensors == 0) return NULL;
    return bsearch(&key, st->tensors, st->ntensors, sizeof key, cmp_tensor);
}

/* Largest integer a JSON number (a double) holds exactly: 2^53. */
#define JSON_EXACT_MAX 9007199254740992.0

/* Reads a JSON integer that must be a non-negative whole number <= 2^53; the
 * range is checked before the conversion, which is undefined beyond it. */
static int json_u64(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= JSON_EXACT_MAX) || d != floor(d)) return -1;
    *out = (uint64_t)d;
    return 0;
}

static int cmp_by_offset(const void *a, const void *b)
{
    const hy_st_tensor *x = a, *y = b;
    const char *px = x->data, *py = y->data;
    if (px != py) return px < py ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : (x->nbytes > y->nbytes);
}

/* Parses one tensor entry of the header; fills t (its data pointer relative
 * to `base`). */
static int parse_entry(const char *path, const cJSON *e, const char *base, uint64_t data_len,
                       hy_st_tensor *t, hy_err *err)
{
    const char *name = e->string;
    if (!cJSON_IsObject(e))
        return hy_err_set(err, HY_EFORMAT, "%s: tensor '%s': entry is not a JSON object", path,
                          name);
    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(jd))
        return hy_err_set(err, HY_EFORMAT, "%s: tensor '%s': missing or non-string 'dtype'", path,
                          name);
    if (hy_dtype_parse(jd->valuestring, &t->dtype) != HY_OK)
        return hy_err_set(err, HY_EUNSUPPORTED, "%s: tensor '%s': unsupported dtype '%s'", path,
                          name, jd->valuestring);
    if (!cJSON_IsArray(js))
        return hy_err_set(err, HY_EFORMAT, "%s: tensor '%s': missing or non-array 'shape'", path,
                          name);
    int nd = cJSON_GetArraySize(js);
    if (nd > HY_ST_MAX_DIMS)
        return hy_err_set(err, HY_ERANGE, "%s: tensor '%s': %d dimensions exceed the limit of %d",
                          path, name, nd, HY_ST_MAX_DIMS);
    t->ndim = nd;
    size_t numel = 1;
    for (int i = 0; i < nd; i++) {
        uint64_t d;
        if (json_u64(cJSON_GetArrayItem(js, i), &d) != 0)
            return hy_err_set(err, HY_EFORMAT,
                              "%s: tensor '%s': shape[%d] is not a non-negative integer", path,
                              name, i);
        t->shape[i] = (int64_t)d;
        if (hy_mul_size(numel, (size_t)d, &numel) != HY_OK)
            return hy_err_set(err, HY_ERANGE, "%s: tensor '%s': element count overflows", path,
                              name);
    }
    t->numel = (int64_t)numel;
    size_t nbytes;
    if (hy_mul_size(numel, hy_dtype_size(t->dtype), &nbytes) != HY_OK)
        return hy_err_set(err, HY_ERANGE, "%s: tensor '%s': byte size overflows", path, name);
    uint64_t b, en;
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2 ||
        json_u64(cJSON_GetArrayItem(jo, 0), &b) != 0 ||
        json_u64(cJSON_GetArrayItem(jo, 1), &en) != 0)
        return hy_err_set(err, HY_EFORMAT,
                          "%s: tensor '%s': 'data_offsets' must be [begin, end] integers", path,
                          name);
    if (en < b)
        return hy_err_set(err, HY_EFORMAT,
                          "%s: tensor '%s': data_offsets [%llu, %llu] end before they begin", path,
                          name, (unsigned long long)b, (unsigned long long)en);
    if (en > data_len)
        return hy_err_set(err, HY_EFORMAT,
                          "%s: tensor '%s': data_offsets [%llu, %llu] outside the data buffer "
                          "of %llu bytes",
                          path, name, (unsigned long long)b, (unsigned long long)en,
                          (unsigned long long)data_len);
    if (en - b != nbytes)
        return hy_err_set(err, HY_EFORMAT,
                          "%s: tensor '%s': %llu bytes in data_offsets but dtype %s x shape needs "
                          "%zu",
                          path, name, (unsigned long long)(en - b), hy_dtype_name(t->dtype),
                          nbytes);
    t->data = base + b;
    t->nbytes = nbytes;
    t->file = path;
    return HY_OK;
}

/* Maps one file and appends its tensors to st. */
static int load_file(hy_st *st, const char *path, hy_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return hy_err_set(err, errno == ENOENT ? HY_ENOTFOUND : HY_EIO, "%s: cannot open: %s", path,
                          strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return hy_err_set(err, HY_EIO, "%s: not a regular file", path);
    }
    size_t size = (size_t)sb.st_size;
    if (size < 8) {
        close(fd);
        return hy_err_set(err, HY_EFORMAT,
                          "%s: %zu bytes is too short for the 8-byte header length", path, size);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return hy_err_set(err, HY_EIO, "%s: mmap: %s", path, strerror(errno));

    st_file *nf = realloc(st->files, (st->nfiles + 1) * sizeof *nf);
    if (!nf) {
        munmap(map, size);
        return hy_err_set(err, HY_ENOMEM, "%s: out of memory", path);
    }
    st->files = nf;
    st_file *f = &st->files[st->nfiles++];
    f->map = map;
    f->size = size;
    f->path = strdup(path);
    if (!f->path) return hy_err_set(err, HY_ENOMEM, "%s: out of memory", path);

    const unsigned char *p = map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | p[i];
    if (hlen > HY_ST_MAX_HEADER)
        return hy_err_set(err, HY_ERANGE, "%s: header length %llu exceeds the limit of %u bytes",
                          path, (unsigned long long)hlen, HY_ST_MAX_HEADER);
    if (hlen > size - 8)
        return hy_err_set(err, HY_EFORMAT,
                          "%s: header length %llu runs past the end of the %zu-byte file "
                          "(truncated?)",
                          path, (unsigned long long)hlen, size);
    char *json = malloc(hlen + 1);
    if (!json) return hy_err_set(err, HY_ENOMEM, "%s: out of memory", path);
    memcpy(json, p + 8, hlen);
    json[hlen] = '\0';
    if (strlen(json) != hlen) {
        free(json);
        return hy_err_set(err, HY_EFORMAT, "%s: header contains a NUL byte", path);
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(json, &end, 1);
    if (!root || !cJSON_IsObject(root)) {
        long at = end ? (long)(end - json) : -1;
        cJSON_Delete(root);
        free(json);
        return hy_err_set(err, HY_EFORMAT,
                          "%s: header is not one well-formed JSON object (error near byte %ld)",
                          path, at);
    }
    free(json);

    const char *base = (const char *)p + 8 + hlen;
    uint64_t data_len = size - 8 - hlen;
    size_t first = st->ntensors;
    int rc = HY_OK;
    for (const cJSON *e = root->child; e; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) {
            if (!cJSON_IsObject(e)) {
                rc = hy_err_set(err, HY_EFORMAT, "%s: '__metadata__' is not an object", path);
                break;
            }
            continue;
        }
        if (st->ntensors == st->cap) {
            size_t nc = st->cap ? st->cap * 2 : 64;
            hy_st_tensor *nt = realloc(st->tensors, nc * sizeof *nt);
            if (!nt) {
                rc = hy_err_set(err, HY_ENOMEM, "%s: out of memory", path);
                break;
            }
            st->tensors = nt;
            st->cap = nc;
        }
        hy_st_tensor *t = &st->tensors[st->ntensors];
        memset(t, 0, sizeof *t);
        rc = parse_entry(f->path, e, base, data_len, t, err);
        if (rc != HY_OK) break;
        t->name = strdup(e->string);
        if (!t->name) {
            rc = hy_err_set(err, HY_ENOMEM, "%s: out of memory", path);
            break;
        }
        st->ntensors++;
    }
    cJSON_Delete(root);
    if (rc != HY_OK) return rc;

    /* The offsets of this file's tensors must tile [0, data_len) exactly. */
    size_t n = st->ntensors - first;
    hy_st_tensor *mine = st->tensors + first;
    if (n > 1) qsort(mine, n, sizeof *mine, cmp_by_offset);
    uint64_t at = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t b = (uint64_t)((const char *)mine[i].data - base);
        if (b != at)
            return hy_err_set(err, HY_EFORMAT,
                              "%s: tensor '%s' starts at data offset %llu but the previous "
                              "tensor ends at %llu (offsets must be contiguous, no holes or "
                              "overlaps)",
                              path, mine[i].name, (unsigned long long)b, (unsigned long long)at);
        at = b + mine[i].nbytes;
    }
    if (at != data_len)
        return hy_err_set(err, HY_EFORMAT,
                          "%s: tensors cover %llu bytes but the data buffer has %llu (truncated "
                          "or trailing bytes)",
                          path, (unsigned long long)at, (unsigned long long)data_len);
    return HY_OK;
}

/* Sorts the table and refuses duplicate names (across shards too). */
static int finish(hy_st *st, hy_err *err)
{
    if (st->ntensors > 1) qsort(st->tensors, st->ntensors, sizeof *st->tensors, cmp_tensor);
    for (size_t i = 1; i < st->ntensors; i++)
        if (strcmp(st->tensors[i - 1].name, st->tensors[i].name) == 0)
            return hy_err_set(err, HY_EFORMAT, "tensor '%s' appears twice (%s and %s)",
                              st->tensors[i].name, st->tensors[i - 1].file, st->tensors[i].file);
    return HY_OK;
}

int hy_st_open_file(hy_st **out, const char *path, hy_err *err)
{
    *out = NULL;
    hy_st *st = calloc(1, sizeof *st);
    if (!st) return hy_err_set(err, HY_ENOMEM, "out of memory");
    int rc = load_file(st, path, err);
    if (rc == HY_OK) rc = finish(st, err);
    if (rc != HY_OK) {
        hy_st_close(st);
        return rc;
    }
    *out = st;
    return HY_OK;
}

/* Opens the shards named by an index file's weight_map and checks that each
 * mapped tensor lives in the file the index says. */
static int open_index(hy_st *st, const char *dir, const char *index_path, hy_err *err)
{
    char *text = NULL;
    int rc = hy_read_file(index_path, 64u << 20, &text, NULL, err);
    if (rc != HY_OK) return rc;
    cJSON *root = cJSON_ParseWithOpts(text, NULL, 1); /* no trailing garbage */
    hy_free(text);
    const cJSON *wm = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    if (!root || !cJSON_IsObject(root) || !cJSON_IsObject(wm)) {
        cJSON_Delete(root);
        return hy_err_set(err, HY_EFORMAT, "%s: not a JSON object with a 'weight_map' object",
                          index_path);
    }
    /* Distinct shard names, in first-seen order. */
    const char **shards = NULL;
    size_t nshards = 0;
    for (const cJSON *e = wm->child; e && rc == HY_OK; e = e->next) {
        if (!cJSON_IsString(e)) {
            rc = hy_err_set(err, HY_EFORMAT, "%s: weight_map['%s'] is not a file name", index_path,
                            e->string);
            break;
        }
        const char *fn = e->valuestring;
        if (!*fn || strchr(fn, '/') || strcmp(fn, "..") == 0 || strcmp(fn, ".") == 0) {
            rc = hy_err_set(err, HY_EFORMAT,
                            "%s: weight_map['%s'] = '%s' is not a plain file name in the "
                            "model directory",
                            index_path, e->string, fn);
            break;
        }
        size_t i = 0;
        while (i < nshards && strcmp(shards[i], fn) != 0) i++;
        if (i < nshards) continue;
        if (nshards == HY_ST_MAX_FILES) {
            rc = hy_err_set(err, HY_ERANGE, "%s: more than %d shard files", index_path,
                            HY_ST_MAX_FILES);
            break;
        }
        const char **ns = realloc(shards, (nshards + 1) * sizeof *ns);
        if (!ns) {
            rc = hy_err_set(err, HY_ENOMEM, "out of memory");
            break;
        }
        shards = ns;
        shards[nshards++] = fn;
    }
    for (size_t i = 0; i < nshards && rc == HY_OK; i++) {
        char path[PATH_MAX];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, shards[i]) >= sizeof path)
            rc = hy_err_set(err, HY_ERANGE, "%s/%s: path too long", dir, shards[i]);
        else
            rc = load_file(st, path, err);
    }
    if (rc == HY_OK) rc = finish(st, err);
    for (const cJSON *e = wm->child; e && rc == HY_OK; e = e->next) {
        const hy_st_tensor *t = hy_st_find(st, e->string);
        const char *slash = t ? strrchr(t->file, '/') : NULL;
        const char *base = slash ? slash + 1 : (t ? t->file : NULL);
        if (!t)
            rc = hy_err_set(err, HY_ENOTFOUND, "%s: tensor '%s' is listed in '%s' but absent",
                            index_path, e->string, e->valuestring);
        else if (strcmp(base, e->valuestring) != 0)
            rc = hy_err_set(err, HY_EFORMAT, "%s: tensor '%s' is listed in '%s' but found in %s",
                            index_path, e->string, e->valuestring, t->file);
    }
    free(shards);
    cJSON_Delete(root);
    return rc;
}

int hy_st_open_dir(hy_st **out, const char *dir, hy_err *err)
{
    *out = NULL;
    char path[PATH_MAX];
    hy_st *st = calloc(1, sizeof *st);
    if (!st) return hy_err_set(err, HY_ENOMEM, "out of memory");
    int rc;
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (access(path, F_OK) == 0) {
        rc = open_index(st, dir, path, err);
    } else {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        if (access(path, F_OK) != 0)
            rc = hy_err_set(err, HY_ENOTFOUND,
                            "%s: neither model.safetensors nor model.safetensors.index.json "
                            "exists",
                            dir);
        else
            rc = load_file(st, path, err);
        if (rc == HY_OK) rc = finish(st, err);
    }
    if (rc != HY_OK) {
        hy_st_close(st);
        return rc;
    }
    *out = st;
    return HY_OK;
}

static int cmp_file(const void *a, const void *b)
{
    return strcmp(((const st_file *)a)->path, ((const st_file *)b)->path);
}

int hy_st_fingerprint(const hy_st *st, hy_sha256_ctx *h)
{
    st_file *files = malloc(st->nfiles * sizeof *files + 1);
    if (!files) return HY_ENOMEM;
    memcpy(files, st->files, st->nfiles * sizeof *files);
    qsort(files, st->nfiles, sizeof *files, cmp_file);
    for (size_t i = 0; i < st->nfiles; i++) {
        const char *slash = strrchr(files[i].path, '/');
        const char *base = slash ? slash + 1 : files[i].path;
        const unsigned char *p = files[i].map;
        uint64_t hlen = 0, size = files[i].size;
        for (int b = 7; b >= 0; b--) hlen = (hlen << 8) | p[b];
        hy_sha256_add(h, base, strlen(base) + 1);
        hy_sha256_add(h, &size, sizeof size);
        hy_sha256_add(h, p, (size_t)(8 + hlen)); /* validated at open: inside the file */
    }
    free(files);
    /* Samples of every tensor's bytes (start, middle, end): two checkpoints of
     * one architecture have identical headers, and a fine-tune changes nearly
     * every weight, so a few hundred bytes per tensor tell them apart without
     * reading gigabytes. */
    for (size_t i = 0; i < st->ntensors; i++) {
        const hy_st_tensor *t = &st->tensors[i];
        const unsigned char *d = t->data;
        const size_t k = t->nbytes < 256 ? t->nbytes : 256;
        hy_sha256_add(h, t->name, strlen(t->name) + 1);
        hy_sha256_add(h, d, k);
        hy_sha256_add(h, d + (t->nbytes - k) / 2, k);
        hy_sha256_add(h, d + (t->nbytes - k), k);
    }
    return HY_OK;
}

int hy_st_read_f32(const hy_st_tensor *t, float *dst, hy_err *err)
{
    size_t n = (size_t)t->numel;
    const unsigned char *src = t->data;
    switch (t->dtype) {
    case HY_DT_F32:
        memcpy(dst, src, n * 4);
        break;
    case HY_DT_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            dst[i] = hy_bf16_to_f32(h);
        }
        break;
    case HY_DT_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            dst[i] = hy_f16_to_f32(h);
        }
        break;
    case HY_DT_F64:
        for (size_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, src + 8 * i, 8);
            dst[i] = (float)d;
        }
        break;
    default:
        return hy_err_set(err, HY_EUNSUPPORTED,
                          "%s: tensor '%s' has dtype %s, expected a floating-point type", t->file,
                          t->name, hy_dtype_name(t->dtype));
    }
    return HY_OK;
}

static int write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int hy_st_write(const char *path, const hy_st_wtensor *ts, size_t n, hy_err *err)
{
    cJSON *root = cJSON_CreateObject();
    if (!root) return hy_err_set(err, HY_ENOMEM, "out of memory");
    cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        size_t numel = 1;
        for (int d = 0; d < ts[i].ndim; d++) numel *= (size_t)ts[i].shape[d];
        size_t nb = numel * hy_dtype_size(ts[i].dtype);
        cJSON *e = cJSON_AddObjectToObject(root, ts[i].name);
        cJSON_AddStringToObject(e, "dtype", hy_dtype_name(ts[i].dtype));
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < ts[i].ndim; d++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)ts[i].shape[d]));
        cJSON *of = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)(off + nb)));
        off += nb;
    }
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!json) return hy_err_set(err, HY_ENOMEM, "out of memory");
    size_t jl = strlen(json), padded = (jl + 7) & ~(size_t)7;

    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        free(json);
        return hy_err_set(err, HY_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    int bad = write_all(fd, len8, 8) || write_all(fd, json, jl);
    for (size_t i = jl; i < padded && !bad; i++) bad = write_all(fd, " ", 1);
    free(json);
    for (size_t i = 0; i < n && !bad; i++) {
        size_t numel = 1;
        for (int d = 0; d < ts[i].ndim; d++) numel *= (size_t)ts[i].shape[d];
        bad = write_all(fd, ts[i].data, numel * hy_dtype_size(ts[i].dtype));
    }
    if (!bad) bad = fsync(fd);
    int e = errno;
    close(fd);
    if (bad || rename(tmp, path) != 0) {
        if (!bad) e = errno;
        unlink(tmp);
        return hy_err_set(err, HY_EIO, "%s: write failed: %s", path, strerror(e));
    }
    return HY_OK;
}
