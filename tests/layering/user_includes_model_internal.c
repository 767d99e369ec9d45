/* Probe: a user of the model (the daemon, a tool) sees hy_model.h, never the
 * folder's private headers. Links hy_model and hy_tiers; must not compile. */
#include "model_internal.h" /* FORBIDDEN */
int hy_probe(void)
{
    return 0;
}
