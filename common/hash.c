/*
 * Hashes, from well-kept libraries: SHA-256 through OpenSSL's EVP interface
 * (keys and model fingerprints are a security boundary, so a cryptographic
 * hash) and XXH3-64 from libxxhash (section checksums: fast, not secret);
 * and the one certificate check the configuration makes.
 */
#include "hy_common.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <stdio.h>
/* Inlined from the header so XXH3 is compiled for this build's instruction set
 * (HY_MARCH in CMakeLists.txt): on an AVX2 build, Debian's shared libxxhash ran
 * at ~19 GB/s, the inlined one ~50. */
#define XXH_INLINE_ALL
#include <xxhash.h>

struct hy_sha256_ctx {
    EVP_MD_CTX *ctx;
};

int hy_sha256_begin(hy_sha256_ctx **out)
{
    *out = NULL;
    hy_sha256_ctx *h = hy_calloc(sizeof *h);
    if (!h) return HY_ENOMEM;
    h->ctx = EVP_MD_CTX_new();
    if (!h->ctx || EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(h->ctx);
        hy_free(h);
        return HY_ENOMEM;
    }
    *out = h;
    return HY_OK;
}

void hy_sha256_add(hy_sha256_ctx *h, const void *data, size_t n)
{
    if (n) EVP_DigestUpdate(h->ctx, data, n);
}

void hy_sha256_end(hy_sha256_ctx *h, uint8_t digest[32])
{
    unsigned int len = 32;
    EVP_DigestFinal_ex(h->ctx, digest, &len);
    EVP_MD_CTX_free(h->ctx);
    hy_free(h);
}

int hy_sha256(const void *data, size_t n, uint8_t digest[32])
{
    hy_sha256_ctx *h;
    int rc = hy_sha256_begin(&h);
    if (rc) return rc;
    hy_sha256_add(h, data, n);
    hy_sha256_end(h, digest);
    return HY_OK;
}

int hy_hmac_sha256(const void *key, size_t klen, const void *msg, size_t n, uint8_t mac[32])
{
    unsigned int len = 32;
    return HMAC(EVP_sha256(), key, (int)klen, msg, n, mac, &len) ? HY_OK : HY_ENOMEM;
}

uint64_t hy_xxh3(const void *data, size_t n)
{
    return XXH3_64bits(data, n);
}

uint64_t hy_xxh3_seeded(const void *data, size_t n, uint64_t seed)
{
    return XXH3_64bits_withSeed(data, n, seed);
}

void hy_hex(const uint8_t *bytes, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    out[2 * n] = '\0';
}

bool hy_cert_client_ok(const char *path, char *why, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(why, cap, "cannot be read");
        return false;
    }
    X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    if (!x) {
        snprintf(why, cap, "holds no PEM certificate");
        return false;
    }
    const bool ok = X509_check_purpose(x, X509_PURPOSE_SSL_CLIENT, 0) == 1;
    X509_free(x);
    if (!ok) snprintf(why, cap, "may not authenticate a TLS client");
    return ok;
}
