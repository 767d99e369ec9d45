/* Probe: the gRPC API does not reach the bulk transports (the daemon and the client join them).
 * Compiled with hy_rpc's own include directories; must not compile. */
#include "hy_transport.h" /* FORBIDDEN */
int hy_probe(void)
{
    return 0;
}
