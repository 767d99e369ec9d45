/*
 * What the rpc tests share: a test server on a loopback port it picks, with
 * the handlers a test sets by method name (the rest answer UNIMPLEMENTED),
 * and one client channel to it.
 */
#ifndef HY_TEST_RPC_FIXTURE_H
#define HY_TEST_RPC_FIXTURE_H

#include "hy_rpc.h"

#include <stdio.h>
#include <string.h>

static hy_rpc_server *g_srv;
static hy_rpc_client *g_cl;
static char g_target[64];
static hy_rpc_handler g_handlers[16];

static inline const hy_rpc_method *method(const char *name)
{
    for (size_t i = 0; i < hy_rpc_method_count; i++)
        if (strcmp(hy_rpc_methods[i].name, name) == 0) return &hy_rpc_methods[i];
    return NULL;
}

static inline void set_handler(const char *name, hy_rpc_handler h)
{
    g_handlers[method(name) - hy_rpc_methods] = h;
}

/* Starts the server with `workers` threads and opens the client; 0, or 1
 * after printing why (as prog). */
static inline int rpc_fixture_start(const char *prog, int workers)
{
    hy_rpc_server_config cfg = {
        .address = "127.0.0.1:0", .workers = workers, .max_message = 64 << 10};
    hy_err e = {0};
    if (hy_rpc_server_start(&cfg, g_handlers, NULL, &g_srv, &e)) {
        fprintf(stderr, "%s: %s\n", prog, e.msg);
        return 1;
    }
    snprintf(g_target, sizeof g_target, "127.0.0.1:%d", hy_rpc_server_port(g_srv));
    if (hy_rpc_client_open(g_target, 1 << 20, &g_cl, &e)) {
        fprintf(stderr, "%s: %s\n", prog, e.msg);
        hy_rpc_server_stop(g_srv);
        return 1;
    }
    return 0;
}

static inline void rpc_fixture_stop(void)
{
    hy_rpc_client_close(g_cl);
    hy_rpc_server_stop(g_srv);
}

#endif
