/*
 * The worked example of docs/plugins.md (plugins/example/scale_plugin.c)
 * loaded and driven the way the builder and runtime drive a plugin.
 * Usage: test_plugin_example <libs4d_example_scale.so>
 */
#include <math.h>
#include <stdlib.h>

#include "plugin_test.h"
#include "registry/registry.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s LIBS4D_EXAMPLE_SCALE_SO\n", argv[0]);
        return 2;
    }
    s4d_plugin_registry *r = NULL;
    CHECK_STATUS(s4d_plugin_registry_create(&r), S4D_OK);
    CHECK_STATUS(s4d_plugin_registry_load_library(r, argv[1]), S4D_OK);
    char err[1024];
    s4d_plugin *p = NULL;

    s4d_attr none[1];
    CHECK_STATUS(s4d_registry_create_plugin(r, "scale0", "example", "Scale", none, 0, &p, NULL, err,
                                            sizeof(err)),
                 S4D_ERR_INVALID_ARG);
    CHECK_MSG(err, "node 'scale0'", "missing required attribute 'alpha' (float)");

    s4d_attr attrs[] = {{.name = "alpha", .type = S4D_ATTR_FLOAT, .f = -1.5f}};
    CHECK_STATUS(s4d_registry_create_plugin(r, "scale1", "example", "Scale", attrs, 1, &p, NULL, err,
                                            sizeof(err)),
                 S4D_OK);
    if (!p) {
        fprintf(stderr, "%s\n", err);
        s4d_plugin_registry_destroy(r);
        return 1;
    }
    s4d_plugin_tensor_desc in = {.abi_version = S4D_PLUGIN_ABI_VERSION, .struct_size = sizeof(in),
                                 .dtype = S4D_DTYPE_FLOAT32, .device = S4D_DEVICE_CPU, .rank = 2,
                                 .dims = {3, 5}};
    s4d_plugin_tensor_desc out = {.abi_version = S4D_PLUGIN_ABI_VERSION,
                                  .struct_size = sizeof(out), .device = S4D_DEVICE_CPU};
    s4d_errbuf perr;
    CHECK_STATUS(p->get_output_descs(p, &in, 1, &out, 1, &perr), S4D_OK);
    CHECK(out.rank == 2 && out.dims[0] == 3 && out.dims[1] == 5 && out.dtype == S4D_DTYPE_FLOAT32);
    CHECK_STATUS(p->supports(p, &in, 1, &out, 1, &perr), S4D_OK);

    float x[15], y[15], y2[15];
    for (int i = 0; i < 15; i++)
        x[i] = 0.37f * (float)(i - 7) + 0.011f * (float)(i * i);
    s4d_plugin_tensor ti = {.abi_version = S4D_PLUGIN_ABI_VERSION, .struct_size = sizeof(ti),
                            .desc = in, .data = x};
    s4d_plugin_tensor to = {.abi_version = S4D_PLUGIN_ABI_VERSION, .struct_size = sizeof(to),
                            .desc = out, .data = y};
    s4d_plugin_run_info run = {.abi_version = S4D_PLUGIN_ABI_VERSION, .struct_size = sizeof(run),
                               .device = S4D_DEVICE_CPU};
    CHECK_STATUS(p->enqueue(p, &ti, 1, &to, 1, &run, &perr), S4D_OK);
    for (int i = 0; i < 15; i++)
        CHECK(fabs((double)y[i] - (-1.5 * (double)x[i] + 0.0)) < 1e-6);

    unsigned char buf[32];
    size_t n = p->serialize_size(p);
    CHECK(n <= sizeof(buf));
    CHECK_STATUS(p->serialize(p, buf, n, &perr), S4D_OK);
    s4d_plugin *q = NULL;
    CHECK_STATUS(s4d_registry_deserialize(r, "scale1", "example", "Scale", "1", buf, n, &q, NULL, err,
                                          sizeof(err)),
                 S4D_OK);
    if (q) {
        to.data = y2;
        CHECK_STATUS(q->enqueue(q, &ti, 1, &to, 1, &run, &perr), S4D_OK);
        CHECK(memcmp(y, y2, sizeof(y)) == 0);
        q->destroy(q);
    }
    p->destroy(p);
    s4d_plugin_registry_destroy(r);
    TEST_DONE("test_plugin_example");
}
