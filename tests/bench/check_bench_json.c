/*
 * check_bench_json: checks the result line of a hypic-bench run.
 *
 *   hypic-bench NAME ... | check_bench_json NAME KEY...
 *
 * Every benchmark prints a readable summary and, as its last line, one JSON
 * object. This reads all of stdin, takes the last non-empty line, and
 * requires that it is exactly one JSON object (nothing after it, so a line
 * cut short or followed by stray output fails), that its "bench" is NAME, and
 * that each KEY names a finite number. A KEY is a path of object members and
 * array indices joined by dots ("ttft_ms.pic", "results.0.hit_rate"); with
 * ">0" appended the number must also be positive. Exit status 0 when every
 * check holds; otherwise 1, with one line per failed check on stderr (and the
 * line it read), so a CI log says what broke; 2 on bad usage.
 */
#include <cjson/cJSON.h>

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* All of stdin as a NUL-terminated string, or NULL when out of memory. */
static char *read_all(FILE *f, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - 1 - n, f);
        if (n < cap - 1) break;
        char *p = realloc(buf, cap *= 2);
        if (!p) free(buf);
        buf = p;
    }
    if (buf) buf[n] = '\0';
    *len = n;
    return buf;
}

/* The last line holding something other than white space, terminated in
 * place; NULL when there is none. */
static char *last_line(char *buf, size_t len)
{
    char *end = buf + len;
    while (end > buf && isspace((unsigned char)end[-1])) end--;
    if (end == buf) return NULL;
    *end = '\0';
    char *start = end;
    while (start > buf && start[-1] != '\n') start--;
    return start;
}

/* The item at a dotted path below root, or NULL. */
static const cJSON *lookup(const cJSON *root, const char *path)
{
    char part[256];
    const cJSON *at = root;
    while (at && *path) {
        size_t n = strcspn(path, ".");
        if (n >= sizeof part) return NULL;
        memcpy(part, path, n);
        part[n] = '\0';
        path += n + (path[n] == '.');
        if (cJSON_IsArray(at)) {
            char *end;
            long i = strtol(part, &end, 10);
            at = *part && !*end && i >= 0 ? cJSON_GetArrayItem(at, (int)i) : NULL;
        } else {
            at = cJSON_GetObjectItemCaseSensitive(at, part);
        }
    }
    return at;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: check_bench_json NAME [KEY[>0]]... < OUTPUT\n");
        return 2;
    }
    const char *name = argv[1];
    size_t len;
    char *buf = read_all(stdin, &len);
    if (!buf) {
        fprintf(stderr, "check_bench_json %s: out of memory reading stdin\n", name);
        return 1;
    }
    char *line = last_line(buf, len);
    if (!line) {
        fprintf(stderr, "check_bench_json %s: no output at all\n", name);
        free(buf);
        return 1;
    }
    const char *parse_end = NULL;
    cJSON *root = cJSON_ParseWithOpts(line, &parse_end, 1);
    int bad = 0;
    if (!cJSON_IsObject(root)) {
        if (root)
            fprintf(stderr, "check_bench_json %s: the last line is JSON but not an object\n", name);
        else {
            /* Where parsing stopped, with some text either side. */
            const size_t n = strlen(line);
            const size_t at = parse_end ? (size_t)(parse_end - line) : 0;
            const size_t from = at > 60 ? at - 60 : 0;
            fprintf(stderr,
                    "check_bench_json %s: the last line is not one JSON object: parsing stops "
                    "at byte %zu of %zu, here: %s%.*s<HERE>%.40s\n",
                    name, at, n, from ? "..." : "", (int)(at - from), line + from, line + at);
        }
        bad = 1;
    } else {
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(root, "bench");
        if (!cJSON_IsString(b) || strcmp(b->valuestring, name) != 0) {
            fprintf(stderr, "check_bench_json %s: \"bench\" is %s, not \"%s\"\n", name,
                    cJSON_IsString(b) ? b->valuestring : "missing or not a string", name);
            bad = 1;
        }
        for (int i = 2; i < argc; i++) {
            char key[512];
            snprintf(key, sizeof key, "%s", argv[i]);
            const size_t kl = strlen(key);
            const int positive = kl > 2 && strcmp(key + kl - 2, ">0") == 0;
            if (positive) key[kl - 2] = '\0';
            const cJSON *v = lookup(root, key);
            const char *why = !v                                ? "is missing"
                              : !cJSON_IsNumber(v)              ? "is not a number"
                              : !isfinite(v->valuedouble)       ? "is not finite"
                              : positive && v->valuedouble <= 0 ? "is not positive"
                                                                : NULL;
            if (why) {
                fprintf(stderr, "check_bench_json %s: \"%s\" %s", name, key, why);
                if (v && cJSON_IsNumber(v)) fprintf(stderr, " (%g)", v->valuedouble);
                fprintf(stderr, "\n");
                bad = 1;
            }
        }
    }
    if (bad)
        fprintf(stderr, "  the line read (%zu bytes): %.300s%s\n", strlen(line), line,
                strlen(line) > 300 ? "..." : "");
    else
        printf("%s: %d values checked\n", name, argc - 2);
    cJSON_Delete(root);
    free(buf);
    return bad;
}
