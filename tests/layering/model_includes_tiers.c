/* Probe: model/ must not see the store (the model knows nothing of tiers).
 * Compiled with hy_model's own include directories; must not compile. */
#include "hy_tiers.h" /* FORBIDDEN */
int hy_probe(void)
{
    return HY_KEY_BYTES;
}
