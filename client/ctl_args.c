/*
 * hypicctl's command lines (ctl_internal.h): one table of options per
 * command, read by one parser, and the global options, which are a table of
 * the same kind and may come before or after the command. An option is
 * "--name VALUE" or "--name=VALUE" (a flag takes none); an unknown option,
 * a missing value and an argument no one takes are usage errors (exit 2)
 * that name it. "--" ends the options. Here too: the readers of the values
 * options take (numbers and ranges, durations, tiers, keys, modes, dtypes).
 */
#include "ctl_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- values ---- */

int ctl_u64(const ctl *x, const char *name, const char *v, uint64_t min, uint64_t max,
            uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long u = strtoull(v, &end, 10);
    if (!v[0] || *end || errno || v[0] == '-' || u < min || u > max)
        return ctl_usage(x, "%s: '%s' is not an integer in [%llu, %llu]", name, v,
                         (unsigned long long)min, (unsigned long long)max);
    *out = u;
    return CTL_OK;
}

int ctl_double(const ctl *x, const char *name, const char *v, double min, double max, double *out)
{
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (!v[0] || *end || errno || !(d >= min && d <= max))
        return ctl_usage(x, "%s: '%s' is not a number in [%g, %g]", name, v, min, max);
    *out = d;
    return CTL_OK;
}

int ctl_duration_ms(const ctl *x, const char *name, const char *v, uint64_t max_ms, uint64_t *out)
{
    static const struct {
        const char *unit;
        double ms;
    } units[] = {{"ms", 1}, {"s", 1e3}, {"m", 60e3}, {"h", 3600e3}, {"d", 86400e3}, {"", 1e3}};
    char *end;
    errno = 0;
    const double d = strtod(v, &end);
    for (size_t i = 0; v[0] && end != v && !errno && i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(end, units[i].unit) != 0) continue;
        const double ms = d * units[i].ms;
        if (!(ms >= 1 && ms <= (double)max_ms)) break;
        *out = (uint64_t)ms;
        return CTL_OK;
    }
    return ctl_usage(x,
                     "%s: '%s' is not a duration from 1 ms to %llu s (a number with ms, s, m, h "
                     "or d; seconds without one)",
                     name, v, (unsigned long long)(max_ms / 1000));
}

int ctl_tier(const ctl *x, const char *name, const char *v, bool any_ok, Hypic__V1__Tier *out)
{
    static const struct {
        const char *name;
        Hypic__V1__Tier tier;
    } tiers[] = {{"hbm", HYPIC__V1__TIER__TIER_HBM},
                 {"host", HYPIC__V1__TIER__TIER_HOST},
                 {"nvme", HYPIC__V1__TIER__TIER_NVME}};
    for (size_t i = 0; i < sizeof tiers / sizeof tiers[0]; i++) {
        if (strcmp(v, tiers[i].name) == 0) {
            *out = tiers[i].tier;
            return CTL_OK;
        }
    }
    if (any_ok && strcmp(v, "any") == 0) {
        *out = HYPIC__V1__TIER__TIER_NONE;
        return CTL_OK;
    }
    return ctl_usage(x, "%s: '%s' is not a tier (hbm, host, nvme%s)", name, v,
                     any_ok ? ", any" : "");
}

int ctl_mode(const ctl *x, const char *name, const char *v, Hypic__V1__Mode *out)
{
    /* the names are hypic.proto's Mode values' without MODE_, in lower case */
    const ProtobufCEnumDescriptor *d = &hypic__v1__mode__descriptor;
    char names[160] = "";
    size_t used = 0;
    for (unsigned i = 0; i < d->n_values; i++) {
        const int m = d->values[i].value;
        if (m == HYPIC__V1__MODE__MODE_UNSPECIFIED) continue;
        char n[32];
        ctl_enum(d, m, "MODE_", n, sizeof n);
        if (strcmp(v, n) == 0) {
            *out = (Hypic__V1__Mode)m;
            return CTL_OK;
        }
        used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", used ? ", " : "", n);
    }
    return ctl_usage(x, "%s: '%s' is not a mode (%s)", name, v, names);
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int ctl_key(const ctl *x, const char *v, uint8_t out[32])
{
    bool ok = strlen(v) == 64;
    for (int i = 0; ok && i < 32; i++) {
        int hi = hex_digit(v[2 * i]), lo = hex_digit(v[2 * i + 1]);
        ok = hi >= 0 && lo >= 0;
        if (ok) out[i] = (uint8_t)(hi << 4 | lo);
    }
    return ok ? CTL_OK : ctl_usage(x, "KEY: '%s' is not 64 hex digits", v);
}

/* ---- options' readers for the tables (ctl_opt_fn) ---- */

static void *field_of(const ctl_opt *o, void *args)
{
    return (char *)args + o->off;
}

int ctl_opt_tier_any(ctl *x, const ctl_opt *o, void *args, const char *v)
{
    return ctl_tier(x, o->name, v, true, field_of(o, args));
}

int ctl_opt_mode(ctl *x, const ctl_opt *o, void *args, const char *v)
{
    return ctl_mode(x, o->name, v, field_of(o, args));
}

int ctl_opt_dtype(ctl *x, const ctl_opt *o, void *args, const char *v)
{
    Hypic__V1__StateDtype *out = field_of(o, args);
    if (strcmp(v, "f32") == 0)
        *out = HYPIC__V1__STATE_DTYPE__STATE_DTYPE_F32;
    else if (strcmp(v, "bf16") == 0)
        *out = HYPIC__V1__STATE_DTYPE__STATE_DTYPE_BF16;
    else
        return ctl_usage(x, "%s: '%s' is not f32 or bf16", o->name, v);
    return CTL_OK;
}

int ctl_opt_seam(ctl *x, const ctl_opt *o, void *args, const char *v)
{
    ctl_seam *s = field_of(o, args);
    uint64_t w = 0;
    if (ctl_u64(x, o->name, v, 0, UINT32_MAX, &w)) return CTL_USAGE;
    s->set = true;
    s->w = (uint32_t)w;
    return CTL_OK;
}

/* ---- the global options ---- */

static int opt_token(ctl *x, const ctl_opt *o, void *args, const char *v)
{
    (void)o, (void)args;
    x->token = v[0] ? v : NULL; /* "": none */
    return CTL_OK;
}

static int opt_deadline(ctl *x, const ctl_opt *o, void *args, const char *v)
{
    (void)args;
    uint64_t ms = 0;
    if (ctl_u64(x, o->name, v, 0, INT64_MAX / 2, &ms)) return CTL_USAGE;
    x->deadline_ms = (int64_t)ms;
    return CTL_OK;
}

static const ctl_opt k_globals[] = {
    CTL_STR("--addr", ctl, addr),         CTL_CALL("--token", ctl, token, opt_token),
    CTL_STR("--tls-ca", ctl, tls_ca),     CTL_STR("--tls-server-name", ctl, tls_name),
    CTL_STR("--tls-cert", ctl, tls_cert), CTL_STR("--tls-key", ctl, tls_key),
    CTL_STR("--model", ctl, model),       CTL_CALL("--deadline-ms", ctl, deadline_ms, opt_deadline),
    CTL_FLAG("--json", ctl, json),
};

/* ---- the parser ---- */

/* Appends v to the list of option o (l at most o->max long). */
static int list_add(ctl *x, const ctl_opt *o, ctl_list *l, char *v)
{
    const uint64_t most = o->max && o->max < CTL_LIST_MAX ? o->max : CTL_LIST_MAX;
    if (l->n >= most) return ctl_usage(x, "more than %llu %s", (unsigned long long)most, o->name);
    l->v[l->n++] = v;
    return CTL_OK;
}

/* Whether argv[*i] is option o ("--name", "--name=VALUE", or its alias):
 * 0 when it is not; 1 when it was taken with its value (*i then past the
 * value when it was the next argument), *into the list positional arguments
 * now extend; CTL_USAGE (negated) after a message. */
static int take(ctl *x, const ctl_opt *o, void *args, int argc, char **argv, int *i,
                const ctl_opt **into)
{
    const char *a = argv[*i], *name = NULL;
    const char *const spellings[2] = {o->name, o->alias};
    size_t n = 0;
    for (int k = 0; k < 2 && !name; k++) {
        if (!spellings[k]) continue;
        n = strlen(spellings[k]);
        if (strncmp(a, spellings[k], n) == 0 && (a[n] == '\0' || a[n] == '=')) name = spellings[k];
    }
    if (!name) return 0;
    const bool valued = o->kind != CTL_OPT_FLAG && o->kind != CTL_OPT_CALL_FLAG;
    const char *v = NULL;
    if (a[n] == '=') {
        if (!valued) return -ctl_usage(x, "%s takes no value", name);
        v = a + n + 1;
    } else if (valued) {
        if (*i + 1 >= argc) return -ctl_usage(x, "%s needs a value", name);
        v = argv[++*i];
    }
    void *field = field_of(o, args);
    int rc = CTL_OK;
    switch (o->kind) {
    case CTL_OPT_FLAG:
        *(bool *)field = true;
        break;
    case CTL_OPT_STR:
        *(const char **)field = v;
        break;
    case CTL_OPT_U64:
        rc = ctl_u64(x, o->name, v, o->min, o->max, field);
        break;
    case CTL_OPT_DOUBLE:
        rc = ctl_double(x, o->name, v, o->lo, o->hi, field);
        break;
    case CTL_OPT_LIST:
        rc = list_add(x, o, field, (char *)v);
        if (into && o->gathers) *into = o;
        break;
    case CTL_OPT_CALL:
    case CTL_OPT_CALL_FLAG:
        rc = o->fn(x, o, args, v);
        break;
    }
    if (o->ends_list && into) *into = NULL;
    return rc ? -CTL_USAGE : 1;
}

int ctl_global_option(ctl *x, int argc, char **argv, int *i)
{
    for (size_t k = 0; k < sizeof k_globals / sizeof k_globals[0]; k++) {
        const int r = take(x, &k_globals[k], x, argc, argv, i, NULL);
        if (r) return r < 0 ? CTL_USAGE : CTL_OK;
    }
    return ctl_usage(x, "unknown option %s", argv[*i]);
}

int ctl_parse(ctl *x, int argc, char **argv, const ctl_cmdline *cl, void *args)
{
    const ctl_opt *into = NULL; /* the list positional arguments extend */
    int npos = 0;
    bool options = true;
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        if (options && strcmp(a, "--") == 0) {
            options = false;
            continue;
        }
        if (options && a[0] == '-' && a[1]) {
            int r = 0;
            for (size_t k = 0; k < cl->nopts && !r; k++)
                r = take(x, &cl->opts[k], args, argc, argv, &i, &into);
            if (r < 0) return CTL_USAGE;
            if (!r && ctl_global_option(x, argc, argv, &i)) return CTL_USAGE;
            continue;
        }
        if (!into && npos < cl->npos) {
            *(const char **)((char *)args + cl->pos[npos++]) = a;
            continue;
        }
        const ctl_opt *list = into ? into : cl->rest;
        if (!list)
            return ctl_usage(x, "unexpected argument '%s'%s%s", a, cl->hint ? " " : "",
                             cl->hint ? cl->hint : "");
        if (list_add(x, list, field_of(list, args), a)) return CTL_USAGE;
    }
    return CTL_OK;
}
