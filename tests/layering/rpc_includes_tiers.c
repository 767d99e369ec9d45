/* Probe: rpc/ knows nothing of the store either (the daemon joins them).
 * Compiled with hy_rpc's own include directories; must not compile. */
#include "hy_tiers.h" /* FORBIDDEN */
int hy_probe(void)
{
    return 0;
}
