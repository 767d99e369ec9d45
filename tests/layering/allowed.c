/* Control: what a composition root (the daemon) may include compiles, so the
 * probes above fail for their forbidden include and nothing else. */
#include "hy_cluster.h"
#include "hy_common.h"
#include "hy_kernels.h"
#include "hy_model.h"
#include "hy_rpc.h"
#include "hy_tiers.h"
#include "hy_transport.h"
int hy_probe(void)
{
    return HY_KEY_BYTES;
}
