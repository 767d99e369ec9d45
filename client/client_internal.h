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
#define read_tls    hyci_read_tls

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
/* The PEM texts of the TLS files that are given (NULL: none) into pem[0]
 * (the CA), pem[1] (a client certificate) and pem[2] (its key; read when
 * cert_file is), each freed with hy_free; who prefixes the file's name in a
 * message ("" or "etcd "). Each must hold a PEM block: gRPC takes any text
 * and fails each call later with a message that does not name the file.
 * Non-zero (INVALID_ARGUMENT in st, naming the file; pem all NULL) when one
 * cannot be read or holds none. */
int read_tls(const char *who, const char *ca_file, const char *cert_file, const char *key_file,
             char *pem[3], hyc_status *st);
/* The host part of "host:port" ("[v6]:port" gives v6). */
void hyci_target_host(const char *target, char *host, size_t cap);

#endif
