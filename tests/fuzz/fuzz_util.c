/*
 * The fuzz targets' model and the seed generators' file output (fuzz_util.h).
 */
#include "fuzz_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The preset, seed and dtype of the committed entry seeds: changing any of
 * them changes the fingerprint, and the seeds must be regenerated
 * (fuzz_entry_seeds). */
#define FUZZ_PRESET "tiny"
#define FUZZ_SEED   1
#define FUZZ_DTYPE  "F32"

int fuzz_tiny_open(hy_model **out)
{
    const char *tmp = getenv("TMPDIR");
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/hy-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "fuzz: mkdtemp %s: %s\n", dir, strerror(errno));
        return 1;
    }
    hy_err err = {0};
    int rc = hy_model_init(FUZZ_PRESET, FUZZ_SEED, dir, FUZZ_DTYPE, &err);
    if (!rc) rc = hy_model_open(out, dir, &err);
    if (rc) fprintf(stderr, "fuzz: the %s model in %s: %s\n", FUZZ_PRESET, dir, err.msg);
    /* hy_model_init writes exactly these two files */
    snprintf(path, sizeof path, "%s/config.json", dir);
    remove(path);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    remove(path);
    if (rmdir(dir)) fprintf(stderr, "fuzz: rmdir %s: %s\n", dir, strerror(errno));
    return rc != 0;
}

int fuzz_write_seed(const char *dir, const char *name, const void *buf, size_t len)
{
    char path[4200];
    if (mkdir(dir, 0755) && errno != EEXIST) {
        fprintf(stderr, "fuzz: mkdir %s: %s\n", dir, strerror(errno));
        return 1;
    }
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    int bad = !f || fwrite(buf, 1, len, f) != len;
    if (f && fclose(f)) bad = 1;
    if (bad) fprintf(stderr, "fuzz: writing %s: %s\n", path, strerror(errno));
    return bad;
}
