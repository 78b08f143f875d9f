/*
 * Plugin libraries loaded by path: the real libs4d_plugins.so and small
 * broken modules (wrong ABI, no entry point, failing init, key clash).
 * Usage: test_plugin_load <libs4d_plugins.so> <dir of the test modules>
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

#include "plugin_test.h"
#include "registry/registry.h"

static char g_dir[4096];

static const char *module(const char *name)
{
    static char path[4200];
    snprintf(path, sizeof(path), "%s/libs4d_test_%s.so", g_dir, name);
    return path;
}

static void test_load_real_library(const char *lib)
{
    s4d_plugin_registry *r = NULL;
    CHECK_STATUS(s4d_plugin_registry_create(&r), S4D_OK);
    CHECK_STATUS(s4d_plugin_registry_load_library(r, lib), S4D_OK);
    CHECK(s4d_plugin_registry_count(r) == 2);
    const s4d_plugin_creator *c = NULL;
    CHECK_STATUS(s4d_plugin_registry_find(r, "s4d", "DeformableAggregation", "1", &c), S4D_OK);
    CHECK(c && c->num_fields == 1 && strcmp(c->fields[0].name, "deterministic") == 0);
    CHECK_STATUS(s4d_plugin_registry_find(r, "custom", "DeformableAttentionAggrPlugin", "1", &c),
                 S4D_OK);
    CHECK(c && c->num_fields == 0);
    /* Loading the same library again is harmless. */
    CHECK_STATUS(s4d_plugin_registry_load_library(r, lib), S4D_OK);
    CHECK(s4d_plugin_registry_count(r) == 2);

    /* Two registries load the same library independently. */
    s4d_plugin_registry *r2 = NULL;
    CHECK_STATUS(s4d_plugin_registry_create(&r2), S4D_OK);
    CHECK_STATUS(s4d_plugin_registry_load_library(r2, lib), S4D_OK);
    CHECK(s4d_plugin_registry_count(r2) == 2);
    s4d_plugin_registry_destroy(r2);
    CHECK_STATUS(s4d_plugin_registry_find(r, "s4d", "DeformableAggregation", "1", &c), S4D_OK);

    /* A clashing library is refused whole, naming the key. */
    CHECK_STATUS(s4d_plugin_registry_load_library(r, module("clash")), S4D_ERR_PLUGIN);
    CHECK_MSG(s4d_plugin_registry_errmsg(r), "libs4d_test_clash.so", "namespace 's4d'",
              "name 'DeformableAggregation'", "already registered");
    CHECK(s4d_plugin_registry_count(r) == 2);
    CHECK_STATUS(s4d_plugin_registry_find(r, "clash", "Harmless", "1", &c), S4D_ERR_NOT_FOUND);

    /* The default registry takes libraries too. */
    CHECK_STATUS(s4d_plugin_registry_load_library(NULL, lib), S4D_OK);
    CHECK(s4d_registry_has_node(NULL, "s4d", "DeformableAggregation", NULL, 0) == 1);
    s4d_plugin_registry_destroy(r);
}

static void test_only_entry_point_exported(const char *lib)
{
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    CHECK(h != NULL);
    if (!h)
        return;
    CHECK(dlsym(h, "s4d_plugin_library_init") != NULL);
    CHECK(dlsym(h, "s4d_da_forward_cpu") == NULL);
    CHECK(dlsym(h, "s4d_status_string") == NULL);
    dlclose(h);
}

static void test_broken_libraries(void)
{
    s4d_plugin_registry *r = NULL;
    CHECK_STATUS(s4d_plugin_registry_create(&r), S4D_OK);

    CHECK_STATUS(s4d_plugin_registry_load_library(r, module("bad_abi")), S4D_ERR_VERSION);
    CHECK_MSG(s4d_plugin_registry_errmsg(r), "libs4d_test_bad_abi.so", "plugin ABI 999",
              "speaks ABI 1", "rebuild");
    CHECK(s4d_plugin_registry_count(r) == 0);

    CHECK_STATUS(s4d_plugin_registry_load_library(r, module("no_entry")), S4D_ERR_NOT_FOUND);
    CHECK_MSG(s4d_plugin_registry_errmsg(r), "libs4d_test_no_entry.so",
              "not an s4d plugin library", "s4d_plugin_library_init");

    CHECK_STATUS(s4d_plugin_registry_load_library(r, module("init_fails")), S4D_ERR_PLUGIN);
    CHECK_MSG(s4d_plugin_registry_errmsg(r), "libs4d_test_init_fails.so", "failed to initialise",
              "second creator's tables are missing");
    CHECK(s4d_plugin_registry_count(r) == 0); /* all or nothing */

    CHECK_STATUS(s4d_plugin_registry_load_library(r, module("does_not_exist")), S4D_ERR_IO);
    CHECK_MSG(s4d_plugin_registry_errmsg(r), "cannot load plugin library",
              "libs4d_test_does_not_exist.so");

    /* A file that is not a shared library at all. */
    char junk[4200];
    snprintf(junk, sizeof(junk), "%s/not_a_library.so", g_dir);
    FILE *f = fopen(junk, "wb");
    CHECK(f != NULL);
    if (f) {
        fputs("this is not an ELF file\n", f);
        fclose(f);
    }
    CHECK_STATUS(s4d_plugin_registry_load_library(r, junk), S4D_ERR_IO);
    CHECK_MSG(s4d_plugin_registry_errmsg(r), "not_a_library.so");
    remove(junk);

    CHECK_STATUS(s4d_plugin_registry_load_library(r, ""), S4D_ERR_INVALID_ARG);
    CHECK_STATUS(s4d_plugin_registry_load_library(r, NULL), S4D_ERR_INVALID_ARG);
    CHECK(s4d_plugin_registry_count(r) == 0);
    s4d_plugin_registry_destroy(r);
}

typedef struct loader {
    s4d_plugin_registry *r;
    const char *lib;
    int ok;
} loader;

static void *loader_main(void *arg)
{
    loader *l = arg;
    l->ok = 1;
    for (int k = 0; k < 20; k++) {
        const s4d_plugin_creator *c = NULL;
        l->ok &= s4d_plugin_registry_load_library(l->r, l->lib) == S4D_OK;
        l->ok &= s4d_plugin_registry_find(l->r, "custom", "DeformableAttentionAggrPlugin", "1", &c) ==
                     S4D_OK && c != NULL;
        l->ok &= s4d_plugin_registry_count(l->r) == 2;
    }
    return NULL;
}

/* Threads loading and looking up at once on one registry. */
static void test_concurrent_loads(const char *lib)
{
    s4d_plugin_registry *r = NULL;
    CHECK_STATUS(s4d_plugin_registry_create(&r), S4D_OK);
    loader l[4];
    pthread_t th[4];
    for (int t = 0; t < 4; t++) {
        l[t].r = r;
        l[t].lib = lib;
        l[t].ok = 0;
        CHECK(pthread_create(&th[t], NULL, loader_main, &l[t]) == 0);
    }
    for (int t = 0; t < 4; t++) {
        pthread_join(th[t], NULL);
        CHECK(l[t].ok);
    }
    CHECK(s4d_plugin_registry_count(r) == 2);
    s4d_plugin_registry_destroy(r);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s LIBS4D_PLUGINS_SO MODULE_DIR\n", argv[0]);
        return 2;
    }
    snprintf(g_dir, sizeof(g_dir), "%s", argv[2]);
    test_load_real_library(argv[1]);
    test_only_entry_point_exported(argv[1]);
    test_broken_libraries();
    test_concurrent_loads(argv[1]);
    TEST_DONE("test_plugin_load");
}
