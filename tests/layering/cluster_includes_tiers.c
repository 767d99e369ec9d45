/* Probe: placement and membership know nothing of the store.
 * Compiled with hy_cluster's own include directories; must not compile. */
#include "hy_tiers.h" /* FORBIDDEN */
int hy_probe(void)
{
    return 0;
}
