/* Probe: tiers/ must not see the model (entries are opaque payloads to the
 * store). Compiled with hy_tiers' own include directories; must not compile. */
#include "hy_model.h" /* FORBIDDEN */
int hy_probe(void)
{
    return 0;
}
