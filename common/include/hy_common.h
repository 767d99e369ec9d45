/*
 * common: what every module of HYPIC shares and nothing else. Status codes and
 * error messages, logging, clocks, aligned allocation and the half-precision
 * conversions used when checkpoint tensors are widened to fp32.
 *
 * Error convention, in every module: a function returns 0 or a negative HY_E* code,
 * and fills an optional hy_err with a message that names the file, the field
 * and the limit involved. Bad input never aborts; assert() is for broken
 * invariants only.
 */
#ifndef HY_COMMON_H
#define HY_COMMON_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* (C linkage for the CUDA sources of kernels/cuda, which nvcc compiles as C++) */
#ifdef __cplusplus
extern "C" {
#endif

enum {
    HY_OK = 0,
    HY_EINVAL = -1,       /* a bad argument or a malformed input */
    HY_ENOMEM = -2,       /* an allocation failed */
    HY_EIO = -3,          /* the operating system refused a read, write, open or map */
    HY_EFORMAT = -4,      /* a file's bytes do not follow its format */
    HY_ENOTFOUND = -5,    /* a named thing (file, tensor, key) is absent */
    HY_EUNSUPPORTED = -6, /* valid input this build does not handle */
    HY_ERANGE = -7,       /* a value outside its documented limits */
    HY_EAGAIN = -8,       /* not ready yet: ask again later */
    HY_ECANCELED = -9,    /* the work was cancelled (its caller went away) */
};

/* An error report: the code and a human sentence. Zero-initialise before use. */
typedef struct hy_err {
    int code;
    char msg[512];
} hy_err;

/* Fills err (when not NULL) and returns code, so callers can write
 * `return hy_err_set(err, HY_EINVAL, "...", ...)`. */
int hy_err_set(hy_err *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Prefixes err->msg with "context: " (e.g. a file name); no-op when err is
 * NULL. Callers return their own status code. */
void hy_err_prefix(hy_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A short name of a status code, e.g. "EFORMAT". */
const char *hy_strerror(int code);

/* --- logging: to stderr, one line each, with a level tag ---------------- */
enum { HY_LOG_DEBUG = 0, HY_LOG_INFO = 1, HY_LOG_WARN = 2, HY_LOG_ERROR = 3 };
void hy_log_set_level(int level);
/* What each line starts with (default "hypic"; at most 63 bytes), e.g. a
 * scatter worker's "hypic-worker 127.0.0.1:7900", whose lines share the
 * daemon's stderr. Set it before any thread logs. */
void hy_log_set_name(const char *name);
void hy_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* --- clocks ---------------------------------------------------------------- */
/* Monotonic time in nanoseconds and seconds. */
uint64_t hy_now_ns(void);
double hy_now_s(void);
/* Peak resident set size of this process, in bytes (0 when unknown). */
size_t hy_peak_rss_bytes(void);

/* --- memory ---------------------------------------------------------------- */
/* 64-byte aligned allocation; sizes round up. hy_free(NULL) is a no-op. */
void *hy_alloc(size_t bytes);
void *hy_calloc(size_t bytes);
void hy_free(void *p);
/* Checked size arithmetic: 0 on success, HY_ERANGE when a*b overflows. */
int hy_mul_size(size_t a, size_t b, size_t *out);

/* --- number formats -------------------------------------------------------- */
float hy_bf16_to_f32(uint16_t h);
float hy_f16_to_f32(uint16_t h);
uint16_t hy_f32_to_bf16(float f); /* round to nearest even; NaN stays NaN */

/* --- files ----------------------------------------------------------------- */
/* Reads a whole file into a NUL-terminated heap buffer (free with hy_free).
 * Refuses files larger than max_bytes. */
int hy_read_file(const char *path, size_t max_bytes, char **out, size_t *len, hy_err *err);

/* --- the embedded models' tokenizer -------------------------------------- */
/* Byte-level: each UTF-8 byte b of text is token b + 3 (ids 0..2 are
 * reserved), folded into [3, vocab) for a vocabulary under 259. Writes at most
 * cap ids; returns how many. In common because clients tokenise text for the
 * embedded models without linking them. */
size_t hy_tokenize_bytes(const char *text, int32_t *out, size_t cap, int vocab);
/* The index of the largest of x[0..n) (the first on ties; n >= 1): the
 * greedy next token of a row of logits. */
int hy_argmax(const float *x, int n);

/* --- hashing (common/hash.c) --------------------------------------------- */
/* SHA-256 (OpenSSL), incrementally or in one call. begin fails only on ENOMEM;
 * end frees the context. */
typedef struct hy_sha256_ctx hy_sha256_ctx;
int hy_sha256_begin(hy_sha256_ctx **out);
void hy_sha256_add(hy_sha256_ctx *h, const void *data, size_t n);
void hy_sha256_end(hy_sha256_ctx *h, uint8_t digest[32]);
int hy_sha256(const void *data, size_t n, uint8_t digest[32]);
/* HMAC-SHA-256 of msg under key (OpenSSL): credentials derived from a
 * secret. */
int hy_hmac_sha256(const void *key, size_t klen, const void *msg, size_t n, uint8_t mac[32]);
/* Whether the first certificate of the PEM file at path may authenticate a
 * TLS client (OpenSSL's SSL client purpose: an extendedKeyUsage, if it has
 * one, that lists clientAuth); when not, why[0..cap) says why. */
bool hy_cert_client_ok(const char *path, char *why, size_t cap);
/* XXH3-64 (libxxhash): section checksums. */
uint64_t hy_xxh3(const void *data, size_t n);
/* XXH3-64 under a seed: a hash table's bucket index for keys a client can
 * steer (a secret seed per table, so that nobody outside can aim entries at
 * one bucket). */
uint64_t hy_xxh3_seeded(const void *data, size_t n, uint64_t seed);
/* Lower-case hex of n bytes into out (2n + 1 chars). */
void hy_hex(const uint8_t *bytes, size_t n, char *out);

/* --- deterministic random numbers (xoshiro256**) ---------------------------- */
typedef struct hy_rng {
    uint64_t s[4];
} hy_rng;
void hy_rng_seed(hy_rng *r, uint64_t seed);
uint64_t hy_rng_next(hy_rng *r);
double hy_rng_uniform(hy_rng *r); /* [0, 1) */
double hy_rng_normal(hy_rng *r);  /* standard normal */

#define HY_MIN(a, b) ((a) < (b) ? (a) : (b))
#define HY_MAX(a, b) ((a) > (b) ? (a) : (b))

#ifdef __cplusplus
}
#endif

#endif
