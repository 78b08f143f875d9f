/* Registers one creator, then fails: the host must keep none of it. */
#include "common.h"

static const s4d_plugin_creator k_creator = MODULE_CREATOR("failing", "Half");

S4D_TEST_EXPORT s4d_status s4d_plugin_library_init(const s4d_host_api *host, uint32_t *abi,
                                                   s4d_errbuf *err)
{
    *abi = S4D_PLUGIN_ABI_VERSION;
    s4d_status st = host->register_creator(host->host, &k_creator);
    if (st != S4D_OK)
        return st;
    snprintf(err->msg, sizeof(err->msg), "the second creator's tables are missing");
    return S4D_ERR_PLUGIN;
}
