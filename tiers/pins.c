/*
 * User pins: entries a tenant asks to keep (a system prompt, a hot
 * document), until a time or until unpinned.
 *
 * A pin is the entry's meta.pinned_until_ns. While it holds (st_held) the
 * evictors pass the entry over in every tier (st_pinned_cb, the callback
 * that already keeps leased entries) and its TTL does not remove it;
 * invalidation still does. The bytes of entries whose pin is set count in
 * their tenant's quota.pinned and the store's pinned_bytes (quota_add keeps
 * them as entries come and go); hy_store_pin refuses a pin that would take
 * a tenant past its cap or the store past half its host tier, so that
 * eviction always has something to choose. Lapsed pins are cleared by the
 * sweep every pin call and hy_store_pinned_bytes run, over the ids of
 * pinned entries (pin_ids, a superset: ids of entries since removed or
 * unpinned drop out there), never over the whole store.
 *
 * With an NVMe tier the pins are kept in DIR/pins, rewritten whole (a
 * temporary file, fsync, rename) on every change: a line "hypic-pins 1",
 * then one line per pin, the key in hex and the time (decimal ns, or
 * "forever"). At open, each pin whose entry came back from NVMe is set
 * again; lines that do not parse are skipped with a warning — the file is
 * ours, but a file is never trusted.
 */
#include "store_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void st_pin_track(hy_store *s, obj *o)
{
    for (size_t i = 0; i < s->npin_ids; i++)
        if (s->pin_ids[i] == o->oid) return;
    if (s->npin_ids == s->cap_pin_ids) {
        const size_t nc = s->cap_pin_ids ? 2 * s->cap_pin_ids : 64;
        uint64_t *n = realloc(s->pin_ids, nc * sizeof *n);
        if (!n) return; /* untracked: its pin then lapses only when unpinned or removed */
        s->pin_ids = n, s->cap_pin_ids = nc;
    }
    s->pin_ids[s->npin_ids++] = o->oid;
}

/* Sets (until != 0) or clears o's pin, keeping the byte counts. */
static void set_pin(hy_store *s, obj *o, uint64_t until)
{
    quota *q = st_quota_of(s, o->meta.tenant, true);
    const bool was = o->meta.pinned_until_ns != 0, now = until != 0;
    if (was != now) {
        const int64_t sign = now ? 1 : -1;
        if (q) q->pinned += (uint64_t)(sign * (int64_t)o->meta.bytes);
        s->pinned_bytes += (uint64_t)(sign * (int64_t)o->meta.bytes);
        s->pinned_count += (uint64_t)sign;
    }
    o->meta.pinned_until_ns = until;
    if (now) st_pin_track(s, o);
}

/* Clears the pins that have lapsed and forgets ids no longer pinned; true
 * when a pin was cleared (the file is then rewritten by the caller). */
static bool sweep(hy_store *s, uint64_t now)
{
    bool cleared = false;
    size_t k = 0;
    for (size_t i = 0; i < s->npin_ids; i++) {
        obj *o = st_find_by_id(s, s->pin_ids[i]);
        if (!o || o->dead || !o->meta.pinned_until_ns) continue;
        if (!st_held(o, now)) {
            set_pin(s, o, 0);
            cleared = true;
            continue;
        }
        s->pin_ids[k++] = s->pin_ids[i];
    }
    s->npin_ids = k;
    return cleared;
}

/* Rewrites DIR/pins from the pinned entries (lock held). A failure is
 * logged: the pins hold in memory, and only a restart would lose them. */
static void save(hy_store *s)
{
    if (!s->pins_path) return;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", s->pins_path);
    FILE *f = fopen(tmp, "w");
    bool ok = f != NULL;
    if (ok) fprintf(f, "hypic-pins 1\n");
    for (size_t i = 0; ok && i < s->npin_ids; i++) {
        const obj *o = st_find_by_id(s, s->pin_ids[i]);
        if (!o || o->dead || !o->meta.pinned_until_ns) continue;
        for (int b = 0; b < HY_KEY_BYTES; b++) fprintf(f, "%02x", o->meta.key.b[b]);
        if (o->meta.pinned_until_ns == HY_PIN_FOREVER)
            fprintf(f, " forever\n");
        else
            fprintf(f, " %llu\n", (unsigned long long)o->meta.pinned_until_ns);
    }
    if (f) ok = fflush(f) == 0 && fsync(fileno(f)) == 0 && ok;
    if (f && fclose(f) != 0) ok = false;
    if (ok && rename(tmp, s->pins_path) != 0) ok = false;
    if (!ok) {
        hy_log(HY_LOG_WARN, "store: cannot write %s (%s): pins hold until a restart",
               s->pins_path, strerror(errno));
        unlink(tmp);
    }
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* One line "KEYHEX TIME" into key and until; false when it is not one. */
static bool parse_line(const char *line, hy_key *key, uint64_t *until)
{
    for (int b = 0; b < HY_KEY_BYTES; b++) {
        const int hi = hexval(line[2 * b]), lo = hi < 0 ? -1 : hexval(line[2 * b + 1]);
        if (hi < 0 || lo < 0) return false;
        key->b[b] = (uint8_t)(hi << 4 | lo);
    }
    const char *t = line + 2 * HY_KEY_BYTES;
    if (*t++ != ' ') return false;
    if (strcmp(t, "forever") == 0) {
        *until = HY_PIN_FOREVER;
        return true;
    }
    if (*t < '0' || *t > '9') return false;
    errno = 0;
    char *end;
    const unsigned long long v = strtoull(t, &end, 10);
    if (errno || *end || v == 0 || v == HY_PIN_FOREVER) return false;
    *until = v;
    return true;
}

int st_pins_open(hy_store *s, const char *dir, hy_err *err)
{
    const size_t n = strlen(dir) + sizeof "/pins";
    if (!(s->pins_path = malloc(n))) return hy_err_set(err, HY_ENOMEM, "out of memory");
    snprintf(s->pins_path, n, "%s/pins", dir);
    FILE *f = fopen(s->pins_path, "r");
    if (!f) return HY_OK; /* none yet */
    char line[256];
    size_t lineno = 0, bad = 0, set = 0;
    const uint64_t now = hy_wall_ns();
    while (fgets(line, sizeof line, f)) {
        lineno++;
        const size_t len = strlen(line);
        const bool whole = len > 0 && line[len - 1] == '\n';
        if (whole) line[len - 1] = '\0';
        if (!whole && !feof(f)) { /* longer than any pin: skip the rest of it */
            int c;
            while ((c = fgetc(f)) != EOF && c != '\n') {}
            bad++;
            continue;
        }
        if (lineno == 1) {
            if (strcmp(line, "hypic-pins 1") != 0) {
                hy_log(HY_LOG_WARN, "store: %s: not a pins file of this version; no pins restored",
                       s->pins_path);
                break;
            }
            continue;
        }
        hy_key key;
        uint64_t until;
        if (!parse_line(line, &key, &until)) {
            bad++;
            continue;
        }
        obj *o = st_find_key(s, &key);
        if (!o || (until != HY_PIN_FOREVER && until <= now)) continue; /* gone, or lapsed */
        set_pin(s, o, until);
        set++;
    }
    fclose(f);
    if (bad)
        hy_log(HY_LOG_WARN, "store: %s: skipped %zu malformed line(s)", s->pins_path, bad);
    if (set) hy_log(HY_LOG_INFO, "store: %zu pin(s) restored from %s", set, s->pins_path);
    return HY_OK;
}

int hy_store_pin(hy_store *s, const hy_store_filter *f, uint64_t until_ns, uint64_t tenant_cap,
                 size_t *pinned, uint64_t *bytes, hy_err *err)
{
    if (!f || !f->tenant || !f->tenant[0])
        return hy_err_set(err, HY_EINVAL, "a pin names the tenant whose entries it pins");
    if (until_ns == 0) return hy_err_set(err, HY_EINVAL, "a pin's time is 0");
    pthread_mutex_lock(&s->mu);
    const uint64_t now = hy_wall_ns();
    bool changed = sweep(s, now);
    if (until_ns != HY_PIN_FOREVER && until_ns <= now) {
        pthread_mutex_unlock(&s->mu);
        return hy_err_set(err, HY_EINVAL, "a pin's time is already past");
    }
    /* what it would add: the matching entries not pinned yet */
    size_t n = 0;
    uint64_t all = 0, add = 0;
    obj *one = f->key ? st_find_key(s, f->key) : NULL; /* a key: its entry alone */
    for (size_t i = 0; i < (f->key ? 1 : s->nbuckets); i++)
        for (obj *o = f->key ? one : s->buckets[i]; o; o = f->key ? NULL : o->next) {
            if (!st_matches(&o->meta, f)) continue;
            n++, all += o->meta.bytes;
            if (!o->meta.pinned_until_ns) add += o->meta.bytes;
        }
    const quota *q = st_quota_of(s, f->tenant, false);
    const uint64_t mine = q ? q->pinned : 0, store_cap = s->cfg.host_bytes / 2;
    int rc = HY_OK;
    if (n == 0)
        rc = hy_err_set(err, HY_ENOTFOUND, "no entry of tenant '%s' matches the pin", f->tenant);
    else if (tenant_cap && mine + add > tenant_cap)
        rc = hy_err_set(err, HY_ERANGE,
                        "tenant '%s': %llu pinned bytes + %llu would pass its pin cap of %llu "
                        "(limits.pinned_bytes_per_tenant)",
                        f->tenant, (unsigned long long)mine, (unsigned long long)add,
                        (unsigned long long)tenant_cap);
    else if (s->pinned_bytes + add > store_cap)
        rc = hy_err_set(err, HY_ERANGE,
                        "%llu pinned bytes + %llu would pass half the host tier (%llu): eviction "
                        "needs the rest",
                        (unsigned long long)s->pinned_bytes, (unsigned long long)add,
                        (unsigned long long)store_cap);
    if (rc == HY_OK) {
        for (size_t i = 0; i < (f->key ? 1 : s->nbuckets); i++)
            for (obj *o = f->key ? one : s->buckets[i]; o; o = f->key ? NULL : o->next)
                if (st_matches(&o->meta, f)) set_pin(s, o, until_ns);
        changed = true;
    }
    if (changed) save(s);
    pthread_mutex_unlock(&s->mu);
    if (pinned) *pinned = rc ? 0 : n;
    if (bytes) *bytes = rc ? 0 : all;
    return rc;
}

int hy_store_unpin(hy_store *s, const hy_store_filter *f, size_t *unpinned, uint64_t *bytes,
                   hy_err *err)
{
    (void)err;
    pthread_mutex_lock(&s->mu);
    bool changed = sweep(s, hy_wall_ns());
    size_t n = 0;
    uint64_t b = 0;
    for (size_t i = 0; i < s->npin_ids; i++) {
        obj *o = st_find_by_id(s, s->pin_ids[i]);
        if (!o || o->dead || !o->meta.pinned_until_ns || !st_matches(&o->meta, f)) continue;
        n++, b += o->meta.bytes;
        set_pin(s, o, 0);
    }
    if (n) changed = true;
    if (changed) sweep(s, hy_wall_ns()), save(s);
    pthread_mutex_unlock(&s->mu);
    if (unpinned) *unpinned = n;
    if (bytes) *bytes = b;
    return HY_OK;
}

uint64_t hy_store_pinned_bytes(hy_store *s, const char *tenant, size_t *count)
{
    pthread_mutex_lock(&s->mu);
    if (sweep(s, hy_wall_ns())) save(s);
    uint64_t b = s->pinned_bytes;
    size_t c = s->pinned_count;
    if (tenant) {
        const quota *q = st_quota_of(s, tenant, false);
        b = q ? q->pinned : 0;
        c = 0;
        for (size_t i = 0; i < s->npin_ids; i++) {
            const obj *o = st_find_by_id(s, s->pin_ids[i]);
            c += o && !o->dead && o->meta.pinned_until_ns && strcmp(o->meta.tenant, tenant) == 0;
        }
    }
    pthread_mutex_unlock(&s->mu);
    if (count) *count = c;
    return b;
}
