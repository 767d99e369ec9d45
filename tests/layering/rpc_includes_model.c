/* Probe: rpc/ is shared with the clients, which never link the model.
 * Compiled with hy_rpc's own include directories; must not compile. */
#include "hy_model.h" /* FORBIDDEN */
int hy_probe(void)
{
    return 0;
}
