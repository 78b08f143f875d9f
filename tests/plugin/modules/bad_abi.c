/*
 * A library built against a future plugin ABI: it reports ABI 999 and, like a
 * careless library, registers anyway. The host must refuse it whole.
 */
#include "common.h"

static const s4d_plugin_creator k_creator = MODULE_CREATOR("future", "FromTheFuture");

S4D_TEST_EXPORT s4d_status s4d_plugin_library_init(const s4d_host_api *host, uint32_t *abi,
                                                   s4d_errbuf *err)
{
    *abi = 999;
    host->register_creator(host->host, &k_creator);
    return S4D_OK;
}
