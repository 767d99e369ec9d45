/* Probe: a transport knows nothing of members.
 * Compiled with hy_transport's own include directories; must not compile. */
#include "hy_cluster.h" /* FORBIDDEN */
int hy_probe(void)
{
    return 0;
}
