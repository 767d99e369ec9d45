/*
 * fuzz_entry_seeds DIR: writes fuzz_entry's seed corpus: real entries of the
 * fuzz targets' model (fuzz_tiny_open), built with hy_entry_build from the
 * empty state on random tokens, for both storage dtypes of S, seam widths 0
 * and 8, and two lengths; each prefixed with fuzz_entry's repair byte (all
 * repairs on). Short segments keep every seed a few tens of KB. Each is
 * checked to decode before it is written. The committed corpus
 * (tests/fuzz/corpus/fuzz_entry) is this program's output; rerun it after a
 * change to the entry format or to the model fuzz_tiny_open generates.
 */
#include "fuzz_util.h"
#include "hy_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_entry_seeds DIR\n");
        return 2;
    }
    hy_model *m;
    if (fuzz_tiny_open(&m)) return 1;
    hy_exec *ex = NULL;
    hy_state *st = NULL;
    hy_err err = {0};
    if (hy_exec_new(m, 0, &ex, &err) || hy_state_new(m, &st, &err)) {
        fprintf(stderr, "fuzz_entry_seeds: %s\n", err.msg);
        return 1;
    }
    const int vocab = hy_model_cfg(m)->vocab;
    hy_rng rng;
    hy_rng_seed(&rng, 7);
    const size_t lengths[] = {12, 20};
    const int widths[] = {0, 8};
    int failed = 0;
    for (int dt = HY_ENTRY_F32; dt <= HY_ENTRY_BF16; dt++)
        for (int wi = 0; wi < 2; wi++)
            for (int li = 0; li < 2; li++) {
                int32_t tokens[32];
                const size_t n = lengths[li];
                for (size_t i = 0; i < n; i++) tokens[i] = (int32_t)(hy_rng_next(&rng) % vocab);
                hy_state_reset(st);
                hy_entry *e = NULL, *back = NULL;
                void *buf = NULL;
                size_t len = 0;
                int rc = hy_entry_build(ex, st, tokens, n, widths[wi],
                                        hy_entry_exact((hy_entry_dtype)dt), NULL, &e, &err);
                if (!rc) rc = hy_entry_serialize(e, &buf, &len, &err);
                if (!rc) rc = hy_entry_deserialize(m, buf, len, &back, &err);
                char name[64];
                snprintf(name, sizeof name, "%s-W%d-n%zu", dt == HY_ENTRY_BF16 ? "bf16" : "f32",
                         widths[wi], n);
                if (rc) {
                    fprintf(stderr, "fuzz_entry_seeds: %s: %s\n", name, err.msg);
                    failed = 1;
                } else {
                    unsigned char *seed = malloc(len + 1);
                    if (!seed) return 1;
                    seed[0] = 0x1f; /* fuzz_entry: every repair */
                    memcpy(seed + 1, buf, len);
                    failed |= fuzz_write_seed(argv[1], name, seed, len + 1);
                    printf("%s: %zu bytes\n", name, len + 1);
                    free(seed);
                }
                hy_entry_free(back);
                hy_entry_free(e);
                free(buf);
            }
    hy_state_free(st);
    hy_exec_free(ex);
    hy_model_close(m);
    return failed;
}
