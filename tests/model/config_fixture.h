/*
 * What the config and checkpoint-open tests share: the run's temporary
 * directory, a JSON text with keys patched in or dropped, stderr captured
 * around a call (for the loader's log lines), a count of matching log lines,
 * and which layers transformers makes MoE. Included by test_config.c and
 * test_checkpoint_open.c; each creates g_dir in its main() and runs its suite
 * with run_suite_and_remove_dir(), which removes it.
 */
#ifndef HY_TEST_CONFIG_FIXTURE_H
#define HY_TEST_CONFIG_FIXTURE_H

#include "hy_common.h"
#include "test_util.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static char g_dir[64]; /* the temporary directory of this run */

/* The JSON object text `base` with the keys of the JSON object `patch` set (a
 * null value sets null) and the key `drop` removed. Free with free(). */
static inline char *patched(const char *base, const char *patch, const char *drop)
{
    cJSON *root = cJSON_Parse(base);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    if (patch) {
        cJSON *p = cJSON_Parse(patch);
        CU_ASSERT_PTR_NOT_NULL_FATAL(p);
        for (cJSON *e = p->child; e; e = e->next) {
            cJSON *dup = cJSON_Duplicate(e, 1);
            if (cJSON_GetObjectItemCaseSensitive(root, e->string))
                cJSON_ReplaceItemInObjectCaseSensitive(root, e->string, dup);
            else
                cJSON_AddItemToObject(root, e->string, dup);
        }
        cJSON_Delete(p);
    }
    if (drop) cJSON_DeleteItemFromObjectCaseSensitive(root, drop);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    return text;
}

/* Calls fn(arg) with stderr redirected to a file and returns what it wrote
 * (free with hy_free); *rc gets fn's result. */
static inline char *capture_stderr(int (*fn)(void *), void *arg, int *rc)
{
    char path[128];
    snprintf(path, sizeof path, "%s/stderr.txt", g_dir);
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CU_ASSERT_FATAL(saved >= 0 && fd >= 0);
    CU_ASSERT_FATAL(dup2(fd, 2) == 2);
    close(fd);
    *rc = fn(arg);
    fflush(stderr);
    CU_ASSERT_FATAL(dup2(saved, 2) == 2);
    close(saved);
    char *text = NULL;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_read_file(path, 1u << 20, &text, NULL, &e), HY_OK);
    return text;
}

/* Lines of text containing frag. */
static inline int count_lines(const char *text, const char *frag)
{
    int n = 0;
    for (const char *l = text; *l;) {
        const char *end = strchr(l, '\n');
        size_t len = end ? (size_t)(end - l) : strlen(l);
        char line[1024];
        snprintf(line, sizeof line, "%.*s", (int)HY_MIN(len, sizeof line - 1), l);
        n += strstr(line, frag) != NULL;
        l += len + (end != NULL);
    }
    return n;
}

/* What transformers derives: layer i is MoE when the model has experts,
 * (i + 1) % step == 0, and i is not in mlp_only_layers. */
static inline void want_moe(int n_layers, int n_experts, int step, const int *only, int n_only,
                            bool *out)
{
    for (int i = 0; i < n_layers; i++) {
        bool listed = false;
        for (int j = 0; j < n_only; j++) listed |= only[j] == i;
        out[i] = n_experts > 0 && (i + 1) % step == 0 && !listed;
    }
}

/* Runs the cases as one suite (hy_test_main), then removes g_dir with all the
 * run left in it; returns the suite's exit status. */
static inline int run_suite_and_remove_dir(const char *suite, const hy_test_case *cases)
{
    int rc = hy_test_main(suite, cases);
    hy_test_rmtree(g_dir);
    return rc;
}

#endif
