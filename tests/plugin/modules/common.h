/* A do-nothing creator the test modules register; never instantiated. */
#ifndef S4D_TESTS_PLUGIN_MODULES_COMMON_H
#define S4D_TESTS_PLUGIN_MODULES_COMMON_H

#include <stdio.h>

#include "s4d/plugin.h"

#define S4D_TEST_EXPORT __attribute__((visibility("default")))

__attribute__((unused)) static s4d_status mod_create(const s4d_plugin_creator *self, const char *node,
                             const s4d_plugin_fields *fields, s4d_plugin **out, s4d_errbuf *err)
{
    snprintf(err->msg, sizeof(err->msg), "test module creators build nothing");
    return S4D_ERR_UNSUPPORTED;
}

__attribute__((unused)) static s4d_status mod_deserialize(const s4d_plugin_creator *self, const void *data, size_t size,
                                  s4d_plugin **out, s4d_errbuf *err)
{
    snprintf(err->msg, sizeof(err->msg), "test module creators build nothing");
    return S4D_ERR_UNSUPPORTED;
}

#define MODULE_CREATOR(ns, nm)                                                                \
    {.abi_version = S4D_PLUGIN_ABI_VERSION, .struct_size = sizeof(s4d_plugin_creator),        \
     .plugin_namespace = ns, .name = nm, .version = "1", .create = mod_create,                \
     .deserialize = mod_deserialize}

#endif
