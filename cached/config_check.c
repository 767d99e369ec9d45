/*
 * What a start would fail on that the configuration's text does not show
 * (hy_cached_config_check_files): the files and directories it names, looked
 * at on this machine, from this working directory. config.c checks each value
 * and how the values fit together; this looks at the disk — every model's
 * directory with its config.json (parsed: the start parses it the same way)
 * and its weights, and the NVMe tier's directory (writable, or creatable, and
 * not held by another process). `hypic-cached --check-config` runs both, and
 * so does every start, before anything opens, so a missing model is reported
 * the same way by either, with the key that names it.
 *
 * Relative paths are resolved against the working directory, not against the
 * configuration file's directory (config_internal.h): a path means the same
 * in the file as on the command line beside it, and `make run`'s and the
 * committed examples' paths are relative to the repository root, where they
 * are run from. Since a daemon started elsewhere then finds nothing, the
 * message for a relative path that does not resolve says where it looked
 * and how to start it instead.
 */
#include "config_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* "FILE: key 'KEY': MESSAGE[ HINT]"; FILE is the configuration file, or what
 * stands for the defaults. Returns code. */
static int fail(const hy_cached_config *c, hy_err *err, int code, const char *key, const char *hint,
                const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static int fail(const hy_cached_config *c, hy_err *err, int code, const char *key, const char *hint,
                const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return hy_err_set(err, code, "%s: key '%s': %s%s", c->path[0] ? c->path : "(defaults)", key,
                      msg, hint ? hint : "");
}

/* The hint for a relative path that does not resolve: where it was looked
 * for and what to do (into out). */
static const char *relative_hint(const hy_cached_config *c, const char *path, char *out, size_t cap)
{
    if (path[0] == '/') return NULL;
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) snprintf(cwd, sizeof cwd, "(unknown)");
    if (c->path[0])
        snprintf(out, cap,
                 " (a relative path is resolved against the working directory, %s, not the "
                 "configuration file's: start hypic-cached from the directory the paths are "
                 "relative to — the repository root for deploy/*.yaml — or make them absolute)",
                 cwd);
    else
        snprintf(out, cap,
                 " (without --config the model is %s, relative to the working directory, %s: "
                 "start hypic-cached from the repository root, or pass --config FILE naming "
                 "the model's absolute path)",
                 path, cwd);
    return out;
}

/* models[i]: a directory holding config.json, which parses, and readable
 * weights (model.safetensors, or the index of a sharded checkpoint). */
static int check_model(const hy_cached_config *c, int i, hy_err *err)
{
    const hy_cfg_model *m = &c->models[i];
    char key[64], hint[PATH_MAX + 400], file[PATH_MAX + 40];
    snprintf(key, sizeof key, "models[%d].path", i);
    struct stat sb;
    if (stat(m->dir, &sb) != 0) {
        const int e = errno;
        bool preset = false;
        for (int p = 0; hy_presets[p]; p++) preset |= strcmp(hy_presets[p], m->name) == 0;
        const char *h = hint;
        if (preset)
            snprintf(hint, sizeof hint,
                     " (a start with --init-models generates it: '%s' is a built-in preset)",
                     m->name);
        else
            h = relative_hint(c, m->dir, hint, sizeof hint);
        return fail(c, err, e == ENOENT ? HY_ENOTFOUND : HY_EIO, key, h, "model '%s': %s: %s",
                    m->name, m->dir, strerror(e));
    }
    if (!S_ISDIR(sb.st_mode))
        return fail(c, err, HY_EINVAL, key, NULL, "model '%s': %s is not a directory", m->name,
                    m->dir);
    hy_model_config mc;
    hy_err me = {0};
    int rc = hy_config_load(m->dir, &mc, &me);
    if (rc) return fail(c, err, rc, key, NULL, "model '%s': %s", m->name, me.msg);
    snprintf(file, sizeof file, "%s/model.safetensors.index.json", m->dir);
    if (access(file, F_OK) != 0) snprintf(file, sizeof file, "%s/model.safetensors", m->dir);
    if (access(file, R_OK) != 0) {
        const int e = errno;
        if (e == ENOENT)
            return fail(c, err, HY_ENOTFOUND, key, NULL,
                        "model '%s': %s: no weights (neither model.safetensors nor "
                        "model.safetensors.index.json)",
                        m->name, m->dir);
        return fail(c, err, HY_EIO, key, NULL, "model '%s': %s: %s", m->name, file, strerror(e));
    }
    return HY_OK;
}

/* tiers.nvme.path: a writable directory, or one that can be made (its
 * nearest existing parent writable); not locked by another process (the
 * tier's LOCK, flock: one open at a time). */
static int check_nvme(const hy_cached_config *c, hy_err *err)
{
    static const char key[] = "tiers.nvme.path";
    const char *dir = c->nvme_dir;
    char at[PATH_MAX];
    snprintf(at, sizeof at, "%s", dir);
    struct stat sb;
    while (stat(at, &sb) != 0) { /* the nearest part of the path that exists */
        if (errno != ENOENT) return fail(c, err, HY_EIO, key, NULL, "%s: %s", at, strerror(errno));
        char *slash = strrchr(at, '/');
        if (!slash) {
            snprintf(at, sizeof at, ".");
        } else if (slash == at) {
            at[1] = '\0';
        } else {
            *slash = '\0';
        }
    }
    if (!S_ISDIR(sb.st_mode))
        return fail(c, err, HY_EINVAL, key, NULL, "%s: %s is not a directory", dir, at);
    if (access(at, W_OK | X_OK) != 0)
        return fail(c, err, HY_EIO, key, NULL, "%s: %s is not writable: %s", dir, at,
                    strerror(errno));
    char lock[PATH_MAX + 8];
    snprintf(lock, sizeof lock, "%s/LOCK", dir);
    const int fd = open(lock, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return HY_OK; /* a fresh directory */
    int rc = HY_OK;
    if (flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
        char holder[32] = "";
        const ssize_t got = pread(fd, holder, sizeof holder - 1, 0);
        holder[got > 0 ? got : 0] = '\0';
        holder[strcspn(holder, "\n")] = '\0';
        rc = fail(c, err, HY_EIO, key, NULL,
                  "%s is in use by process %s (another hypic-cached: one process per NVMe "
                  "directory): stop that one, or give this one its own directory "
                  "(--nvme-dir DIR; make run NVME_DIR=DIR)",
                  dir, holder[0] ? holder : "(unknown)");
    }
    close(fd); /* a shared lock taken here goes with it */
    return rc;
}

int hy_cached_config_check_files(const hy_cached_config *c, hy_err *err)
{
    for (int i = 0; i < c->nmodels; i++) {
        const int rc = check_model(c, i, err);
        if (rc) return rc;
    }
    return c->nvme_dir[0] ? check_nvme(c, err) : HY_OK;
}
