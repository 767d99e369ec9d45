/*
 * Status codes and error messages. Messages are formatted into the caller's
 * hy_err so that no error path allocates.
 */
#include "hy_common.h"

#include <stdio.h>
#include <string.h>

int hy_err_set(hy_err *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

void hy_err_prefix(hy_err *err, const char *fmt, ...)
{
    if (!err) return;
    char head[256], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    size_t h = strlen(head);
    if (h > sizeof err->msg - 3) h = sizeof err->msg - 3;
    memcpy(err->msg, head, h);
    memcpy(err->msg + h, ": ", 2);
    size_t rest = sizeof err->msg - h - 3;
    size_t ol = strnlen(old, rest);
    memcpy(err->msg + h + 2, old, ol);
    err->msg[h + 2 + ol] = '\0';
}

const char *hy_strerror(int code)
{
    switch (code) {
    case HY_OK:
        return "OK";
    case HY_EINVAL:
        return "EINVAL";
    case HY_ENOMEM:
        return "ENOMEM";
    case HY_EIO:
        return "EIO";
    case HY_EFORMAT:
        return "EFORMAT";
    case HY_ENOTFOUND:
        return "ENOTFOUND";
    case HY_EUNSUPPORTED:
        return "EUNSUPPORTED";
    case HY_ERANGE:
        return "ERANGE";
    case HY_EAGAIN:
        return "EAGAIN";
    case HY_ECANCELED:
        return "ECANCELED";
    default:
        return "EUNKNOWN";
    }
}
