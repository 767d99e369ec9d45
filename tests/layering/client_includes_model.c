/* Probe: libhypic-client and hypicctl link the rpc transport only, never the
 * model. Compiled with hypic_client's own include directories; must not
 * compile. */
#include "hy_model.h" /* FORBIDDEN */
int hy_probe(void)
{
    return 0;
}
