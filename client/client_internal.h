/*
 * Private to libhypic-client: the connection, and the call machinery that
 * client.c (the RPCs) and session.c (transport sessions) share. The short
 * names are macros over hyci_-prefixed symbols, so nothing collides in a
 * program that links the library.
 */
#ifndef HYPIC_CLIENT_INTERNAL_H
#define HYPIC_CLIENT_INTERNAL_H

#include "hy_rpc.h"
#include "hypic_client.h"

struct hyc {
    hy_rpc_client *rpc;
    char *token; /* NULL: none */
    int64_t deadline_ms;
    size_t max_message;
    char host[256]; /* the target's host, for the TCP transport's data port */
};

#define status_set  hyci_status_set
#define status_ok   hyci_status_ok
#define method      hyci_method
#define call_status hyci_call_status
#define unary       hyci_unary
#define read_pem    hyci_read_pem

/* st->code = code, st->msg formatted; returns code. */
int status_set(hyc_status *st, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int status_ok(hyc_status *st);
/* The method named name (hypic.proto's spelling; a miss aborts: a broken build). */
const hy_rpc_method *method(const char *name);
/* The status of a call the transport made: the server's when it completed
 * (rc 0), INTERNAL "client: ..." otherwise. */
int call_status(int rc, const hy_rpc_status *rs, const hy_err *e, hyc_status *st);
/* One unary call of the method named name; *out the decoded response. */
int unary(hyc *c, const char *name, const ProtobufCMessage *rq, void **out, hyc_status *st);
/* The PEM text of `what`'s file into *out (free with hy_free), which must
 * hold marker: gRPC takes any text and fails each call later with a message
 * that does not name the file ("empty address list"). Non-zero
 * (INVALID_ARGUMENT in st, naming the file) when it cannot be read or holds
 * no such block. */
int read_pem(const char *what, const char *file, const char *noun, const char *marker, char **out,
             hyc_status *st);
/* The host part of "host:port" ("[v6]:port" gives v6). */
void hyci_target_host(const char *target, char *host, size_t cap);

#endif
