/*
 * safetensors: the checkpoint container of Hugging Face models, read by memory
 * mapping and validated strictly before a byte is trusted.
 *
 * File layout (huggingface/safetensors README): an 8-byte little-endian header
 * length N, then N bytes of a JSON object (padded with spaces), then the data
 * buffer. Each JSON key other than "__metadata__" names a tensor:
 *   {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]}
 * with offsets relative to the data buffer. We require what the format
 * requires: the header fits in the file and is at most HY_ST_MAX_HEADER bytes,
 * the JSON is one well-formed object, names are unique, every tensor's byte
 * size equals dtype size x shape product, and the offsets tile the data buffer
 * exactly (sorted, contiguous, no holes, ending at the end of the file).
 *
 * A model directory holds either model.safetensors or shards listed in
 * model.safetensors.index.json ({"weight_map": {tensor: file}}); a hy_st opens
 * either form and presents one flat, name-sorted table of tensors.
 */
#ifndef HY_SAFETENSORS_H
#define HY_SAFETENSORS_H

#include "hy_common.h"

#define HY_ST_MAX_HEADER (100u << 20) /* bytes of JSON header, as the reference library */
#define HY_ST_MAX_DIMS   8
#define HY_ST_MAX_FILES  4096

typedef enum hy_dtype {
    HY_DT_F32 = 0,
    HY_DT_F16,
    HY_DT_BF16,
    HY_DT_F64,
    HY_DT_I64,
    HY_DT_I32,
    HY_DT_I16,
    HY_DT_I8,
    HY_DT_U8,
    HY_DT_BOOL,
    HY_DT_COUNT
} hy_dtype;

const char *hy_dtype_name(hy_dtype dt);
size_t hy_dtype_size(hy_dtype dt);
/* Parses "F32", "BF16", ...; returns 0 or HY_EUNSUPPORTED. */
int hy_dtype_parse(const char *s, hy_dtype *out);

typedef struct hy_st_tensor {
    const char *name;
    const char *file; /* path of the file holding it */
    hy_dtype dtype;
    int ndim;
    int64_t shape[HY_ST_MAX_DIMS];
    int64_t numel;
    const void *data; /* inside the file's read-only mapping */
    size_t nbytes;
} hy_st_tensor;

typedef struct hy_st hy_st;

/* Opens one .safetensors file. */
int hy_st_open_file(hy_st **out, const char *path, hy_err *err);
/* Opens a model directory: model.safetensors, or the shards named by
 * model.safetensors.index.json (which wins when both exist). */
int hy_st_open_dir(hy_st **out, const char *dir, hy_err *err);
void hy_st_close(hy_st *st);

size_t hy_st_count(const hy_st *st);
const hy_st_tensor *hy_st_at(const hy_st *st, size_t i); /* name order */
const hy_st_tensor *hy_st_find(const hy_st *st, const char *name);

/* Feeds each file's name (without directory), header bytes and size into h,
 * in name order, then 3 × 256-byte samples (start, middle, end) of every
 * tensor: what tells one checkpoint from another without reading all of it.
 * HY_ENOMEM (h then holds a partial digest: discard it) or 0. */
int hy_st_fingerprint(const hy_st *st, hy_sha256_ctx *h);

/* Copies a floating-point tensor into dst (t->numel floats), widening F16/BF16
 * and narrowing F64. Integer tensors are refused with HY_EUNSUPPORTED. */
int hy_st_read_f32(const hy_st_tensor *t, float *dst, hy_err *err);

/* One tensor to write. data holds numel elements of dtype, row-major. */
typedef struct hy_st_wtensor {
    const char *name;
    hy_dtype dtype;
    int ndim;
    int64_t shape[HY_ST_MAX_DIMS];
    const void *data;
} hy_st_wtensor;

/* Writes a .safetensors file atomically (temporary file, fsync, rename),
 * tensors laid out in the order given, header padded to 8 bytes. */
int hy_st_write(const char *path, const hy_st_wtensor *ts, size_t n, hy_err *err);

#endif
