/* Probe: a transport moves bytes and knows nothing of the API's messages.
 * Compiled with hy_transport's own include directories; must not compile. */
#include "hy_rpc.h" /* FORBIDDEN */
int hy_probe(void)
{
    return 0;
}
