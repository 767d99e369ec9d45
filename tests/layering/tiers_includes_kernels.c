/* Probe: tiers/ uses common only, not the math. Compiled with hy_tiers' own
 * include directories; must not compile. */
#include "hy_kernels.h" /* FORBIDDEN */
int hy_probe(void)
{
    return 0;
}
