/* Probe: a user of the store sees hy_tiers.h, never the tier manager's
 * internals. Links hy_model and hy_tiers; must not compile. */
#include "store_internal.h" /* FORBIDDEN */
int hy_probe(void)
{
    return 0;
}
