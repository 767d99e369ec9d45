/* Probe: the gRPC API does not reach placement and membership, which are built on it.
 * Compiled with hy_rpc's own include directories; must not compile. */
#include "hy_cluster.h" /* FORBIDDEN */
int hy_probe(void)
{
    return 0;
}
