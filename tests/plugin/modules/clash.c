/*
 * Registers a harmless creator and then another under the key of the real
 * deformable aggregation plugin: loading it next to libs4d_plugins.so must
 * fail on the clash and keep neither.
 */
#include "common.h"

static const s4d_plugin_creator k_creators[] = {MODULE_CREATOR("clash", "Harmless"),
                                                MODULE_CREATOR("s4d", "DeformableAggregation")};

S4D_TEST_EXPORT s4d_status s4d_plugin_library_init(const s4d_host_api *host, uint32_t *abi,
                                                   s4d_errbuf *err)
{
    *abi = S4D_PLUGIN_ABI_VERSION;
    for (int i = 0; i < 2; i++) {
        s4d_status st = host->register_creator(host->host, &k_creators[i]);
        if (st != S4D_OK)
            return st;
    }
    return S4D_OK;
}
