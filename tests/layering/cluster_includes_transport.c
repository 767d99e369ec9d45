/* Probe: placement and membership do not move entries (the daemon does).
 * Compiled with hy_cluster's own include directories; must not compile. */
#include "hy_transport.h" /* FORBIDDEN */
int hy_probe(void)
{
    return 0;
}
