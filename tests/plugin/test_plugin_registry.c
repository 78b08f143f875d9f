/*
 * The registry through its API, with creators defined here: registration,
 * duplicate keys, lookups and their messages, node attributes -> fields.
 */
#include <stdlib.h>

#include "plugin_test.h"
#include "registry/registry.h"

/* ---- a small test plugin: y = alpha * x + count ---------------------------- */

typedef struct scale_state {
    float alpha;
    int64_t count;
    char mode[32];
    int64_t num_axes;
    int64_t num_bias;
} scale_state;

static scale_state g_last; /* what the last create() received */
static int g_break;        /* 1: create returns a NULL callback; 2: wrong ABI; 3: fail */
static s4d_plugin *g_last_instance; /* the host cannot free an instance of another ABI */

static int32_t sc_num_outputs(const s4d_plugin *self) { return 1; }

static s4d_status sc_out(const s4d_plugin *self, const s4d_plugin_tensor_desc *in, int32_t nin,
                         s4d_plugin_tensor_desc *out, int32_t nout, s4d_errbuf *err)
{
    out[0] = in[0];
    return S4D_OK;
}

static s4d_status sc_supports(const s4d_plugin *self, const s4d_plugin_tensor_desc *in,
                              int32_t nin, const s4d_plugin_tensor_desc *out, int32_t nout,
                              s4d_errbuf *err)
{
    return S4D_OK;
}

static size_t sc_ws(const s4d_plugin *self, const s4d_plugin_tensor_desc *in, int32_t nin,
                    const s4d_plugin_tensor_desc *out, int32_t nout)
{
    return 0;
}

static size_t sc_ser_size(const s4d_plugin *self) { return sizeof(scale_state); }

static s4d_status sc_ser(const s4d_plugin *self, void *buf, size_t size, s4d_errbuf *err)
{
    memcpy(buf, self->state, sizeof(scale_state));
    return S4D_OK;
}

static s4d_status sc_enqueue(const s4d_plugin *self, const s4d_plugin_tensor *in, int32_t nin,
                             s4d_plugin_tensor *out, int32_t nout, const s4d_plugin_run_info *run,
                             s4d_errbuf *err)
{
    return S4D_OK;
}

static void sc_destroy(s4d_plugin *self)
{
    free(self->state);
    free(self);
}

static s4d_plugin *sc_new(const scale_state *st)
{
    s4d_plugin *p = calloc(1, sizeof(*p));
    scale_state *s = malloc(sizeof(*s));
    *s = *st;
    p->abi_version = S4D_PLUGIN_ABI_VERSION;
    p->struct_size = sizeof(*p);
    p->state = s;
    p->num_outputs = sc_num_outputs;
    p->get_output_descs = sc_out;
    p->supports = sc_supports;
    p->workspace_size = sc_ws;
    p->serialize_size = sc_ser_size;
    p->serialize = sc_ser;
    p->enqueue = sc_enqueue;
    p->destroy = sc_destroy;
    if (g_break == 1)
        p->enqueue = NULL;
    if (g_break == 2)
        p->abi_version = 7;
    g_last_instance = p;
    return p;
}

static s4d_status sc_create(const s4d_plugin_creator *self, const char *node,
                            const s4d_plugin_fields *fields, s4d_plugin **out, s4d_errbuf *err)
{
    if (g_break == 3) {
        snprintf(err->msg, sizeof(err->msg), "alpha must be positive");
        return S4D_ERR_INVALID_ARG;
    }
    scale_state s;
    memset(&s, 0, sizeof(s));
    for (int32_t i = 0; i < fields->count; i++) {
        const s4d_plugin_field *f = &fields->fields[i];
        if (!strcmp(f->name, "alpha"))
            s.alpha = *(const float *)f->data;
        else if (!strcmp(f->name, "count"))
            s.count = *(const int64_t *)f->data;
        else if (!strcmp(f->name, "mode"))
            snprintf(s.mode, sizeof(s.mode), "%s", (const char *)f->data);
        else if (!strcmp(f->name, "axes"))
            s.num_axes = f->count;
        else if (!strcmp(f->name, "bias"))
            s.num_bias = f->count;
    }
    g_last = s;
    *out = sc_new(&s);
    return S4D_OK;
}

static s4d_status sc_deserialize(const s4d_plugin_creator *self, const void *data, size_t size,
                                 s4d_plugin **out, s4d_errbuf *err)
{
    if (size != sizeof(scale_state)) {
        snprintf(err->msg, sizeof(err->msg), "bad payload size %zu", size);
        return S4D_ERR_PARSE;
    }
    *out = sc_new(data);
    return S4D_OK;
}

static const int64_t k_count = 3;
static const char k_mode[] = "fast";

#define DECL(n, t, req)                                                                    \
    .abi_version = S4D_PLUGIN_ABI_VERSION, .struct_size = sizeof(s4d_plugin_field_decl), \
    .name = n, .type = t, .required = req

static const s4d_plugin_field_decl k_fields[] = {
    {DECL("alpha", S4D_PLUGIN_FIELD_FLOAT, 1)},
    {DECL("count", S4D_PLUGIN_FIELD_INT, 0), .default_value = {.count = 1, .data = &k_count}},
    {DECL("mode", S4D_PLUGIN_FIELD_STRING, 0), .default_value = {.count = 4, .data = k_mode}},
    {DECL("axes", S4D_PLUGIN_FIELD_INTS, 0), .default_value = {.count = 0, .data = NULL}},
    {DECL("bias", S4D_PLUGIN_FIELD_FLOATS, 0), .default_value = {.count = 0, .data = NULL}},
};

#define CREATOR(ns, nm, ver)                                                                \
    {.abi_version = S4D_PLUGIN_ABI_VERSION, .struct_size = sizeof(s4d_plugin_creator),      \
     .plugin_namespace = ns, .name = nm, .version = ver, .num_fields = 5, .fields = k_fields, \
     .create = sc_create, .deserialize = sc_deserialize}

static const s4d_plugin_creator k_scale = CREATOR("test", "Scale", "1");
static const s4d_plugin_creator k_scale_v2 = CREATOR("test", "Scale", "2");
static const s4d_plugin_creator k_other_ns = CREATOR("other", "Shift", "1");

static s4d_status other_create(const s4d_plugin_creator *self, const char *node,
                               const s4d_plugin_fields *fields, s4d_plugin **out, s4d_errbuf *err)
{
    return sc_create(self, node, fields, out, err);
}

/* ---- attribute helpers ---------------------------------------------------------- */

static s4d_attr attr_f(const char *name, float v)
{
    s4d_attr a = {.name = (char *)name, .type = S4D_ATTR_FLOAT, .f = v};
    return a;
}
static s4d_attr attr_i(const char *name, int64_t v)
{
    s4d_attr a = {.name = (char *)name, .type = S4D_ATTR_INT, .i = v};
    return a;
}
static s4d_attr attr_s(const char *name, const char *v)
{
    s4d_attr a = {.name = (char *)name, .type = S4D_ATTR_STRING, .s = (char *)v, .s_len = strlen(v)};
    return a;
}

/* ---- tests --------------------------------------------------------------------------- */

static void test_register_and_find(void)
{
    s4d_plugin_registry *r = NULL;
    CHECK_STATUS(s4d_plugin_registry_create(&r), S4D_OK);
    CHECK(s4d_plugin_registry_count(r) == 0);
    CHECK_STATUS(s4d_plugin_registry_register(r, &k_scale), S4D_OK);
    CHECK_STATUS(s4d_plugin_registry_register(r, &k_scale), S4D_OK); /* same creator again */
    CHECK(s4d_plugin_registry_count(r) == 1);
    CHECK_STATUS(s4d_plugin_registry_register(r, &k_scale_v2), S4D_OK); /* other version */
    CHECK(s4d_plugin_registry_count(r) == 2);
    CHECK(s4d_plugin_registry_get(r, 0) == &k_scale);
    CHECK(s4d_plugin_registry_get(r, 2) == NULL);
    CHECK(s4d_plugin_registry_get(r, -1) == NULL);

    const s4d_plugin_creator *c = NULL;
    CHECK_STATUS(s4d_plugin_registry_find(r, "test", "Scale", "2", &c), S4D_OK);
    CHECK(c == &k_scale_v2);

    /* A different creator under a taken key. */
    s4d_plugin_creator impostor = k_scale;
    impostor.create = other_create;
    CHECK_STATUS(s4d_plugin_registry_register(r, &impostor), S4D_ERR_PLUGIN);
    CHECK_MSG(s4d_plugin_registry_errmsg(r), "namespace 'test'", "name 'Scale'", "version '1'",
              "already registered");
    CHECK(s4d_plugin_registry_count(r) == 2);

    /* A copy of the same creator (same callbacks and fields) is the same creator. */
    s4d_plugin_creator copy = k_scale;
    CHECK_STATUS(s4d_plugin_registry_register(r, &copy), S4D_OK);
    CHECK(s4d_plugin_registry_count(r) == 2);

    /* Bad creators. */
    s4d_plugin_creator bad = k_other_ns;
    bad.abi_version = 99;
    CHECK_STATUS(s4d_plugin_registry_register(r, &bad), S4D_ERR_VERSION);
    CHECK_MSG(s4d_plugin_registry_errmsg(r), "ABI 99", "ABI 1");
    bad = k_other_ns;
    bad.struct_size = 8;
    CHECK_STATUS(s4d_plugin_registry_register(r, &bad), S4D_ERR_VERSION);
    bad = k_other_ns;
    bad.name = "";
    CHECK_STATUS(s4d_plugin_registry_register(r, &bad), S4D_ERR_INVALID_ARG);
    bad = k_other_ns;
    bad.plugin_namespace = NULL;
    CHECK_STATUS(s4d_plugin_registry_register(r, &bad), S4D_ERR_INVALID_ARG);
    CHECK_MSG(s4d_plugin_registry_errmsg(r), "NULL namespace");
    bad = k_other_ns;
    bad.plugin_namespace = ""; /* an empty namespace is fine */
    bad.name = "NoNamespace";
    CHECK_STATUS(s4d_plugin_registry_register(r, &bad), S4D_OK);
    CHECK_STATUS(s4d_plugin_registry_find(r, NULL, "NoNamespace", "1", &c), S4D_OK);
    bad = k_other_ns;
    bad.deserialize = NULL;
    CHECK_STATUS(s4d_plugin_registry_register(r, &bad), S4D_ERR_INVALID_ARG);
    CHECK_MSG(s4d_plugin_registry_errmsg(r), "other::Shift v1");
    s4d_plugin_field_decl reserved[1] = {{DECL("plugin_version", S4D_PLUGIN_FIELD_STRING, 1)}};
    bad = k_other_ns;
    bad.num_fields = 1;
    bad.fields = reserved;
    CHECK_STATUS(s4d_plugin_registry_register(r, &bad), S4D_ERR_INVALID_ARG);
    CHECK_MSG(s4d_plugin_registry_errmsg(r), "reserved name 'plugin_version'");
    s4d_plugin_field_decl twice[2] = {{DECL("a", S4D_PLUGIN_FIELD_INT, 1)},
                                      {DECL("a", S4D_PLUGIN_FIELD_INT, 1)}};
    bad.num_fields = 2;
    bad.fields = twice;
    CHECK_STATUS(s4d_plugin_registry_register(r, &bad), S4D_ERR_INVALID_ARG);
    CHECK_MSG(s4d_plugin_registry_errmsg(r), "field 'a' twice");
    s4d_plugin_field_decl no_default[1] = {{DECL("k", S4D_PLUGIN_FIELD_INT, 0)}};
    bad.num_fields = 1;
    bad.fields = no_default;
    CHECK_STATUS(s4d_plugin_registry_register(r, &bad), S4D_ERR_INVALID_ARG);
    CHECK_MSG(s4d_plugin_registry_errmsg(r), "optional field 'k' has no valid default");
    CHECK_STATUS(s4d_plugin_registry_register(r, NULL), S4D_ERR_INVALID_ARG);
    CHECK(s4d_plugin_registry_count(r) == 3);
    CHECK_STATUS(s4d_plugin_registry_create(NULL), S4D_ERR_INVALID_ARG);
    CHECK_STATUS(s4d_plugin_registry_find(r, "test", NULL, "1", &c), S4D_ERR_INVALID_ARG);

    s4d_plugin_registry_destroy(r);
    s4d_plugin_registry_destroy(NULL);
}

static void test_missing_plugin_message(void)
{
    s4d_plugin_registry *r = NULL;
    CHECK_STATUS(s4d_plugin_registry_create(&r), S4D_OK);
    const s4d_plugin_creator *c = NULL;
    CHECK_STATUS(s4d_plugin_registry_find(r, "test", "Scale", "1", &c), S4D_ERR_NOT_FOUND);
    CHECK(c == NULL);
    CHECK_MSG(s4d_plugin_registry_errmsg(r), "namespace 'test'", "name 'Scale'", "version '1'",
              "registered creators (0): none", "--plugins");

    CHECK_STATUS(s4d_plugin_registry_register(r, &k_scale), S4D_OK);
    CHECK_STATUS(s4d_plugin_registry_register(r, &k_other_ns), S4D_OK);
    CHECK_STATUS(s4d_plugin_registry_find(r, "test", "Nope", "1", &c), S4D_ERR_NOT_FOUND);
    CHECK_MSG(s4d_plugin_registry_errmsg(r), "name 'Nope'", "registered creators (2)",
              "test::Scale v1", "other::Shift v1");

    /* Near misses say which key part differs. */
    char err[1024];
    s4d_plugin_key key = {.plugin_namespace = "test", .name = "Scale", .version = "7"};
    CHECK_STATUS(s4d_registry_lookup(r, &key, "n1", &c, err, sizeof(err)), S4D_ERR_NOT_FOUND);
    CHECK_MSG(err, "node 'n1'", "version '7'", "version differs", "registered with version '1'");
    key.plugin_namespace = "";
    key.version = "1";
    CHECK_STATUS(s4d_registry_lookup(r, &key, "n2", &c, err, sizeof(err)), S4D_ERR_NOT_FOUND);
    CHECK_MSG(err, "namespace differs", "namespace 'test'");
    key.plugin_namespace = "test";
    key.name = "scale";
    CHECK_STATUS(s4d_registry_lookup(r, &key, NULL, &c, err, sizeof(err)), S4D_ERR_NOT_FOUND);
    CHECK_MSG(err, "differs only in case");

    char list[256];
    s4d_registry_describe(r, list, sizeof(list));
    CHECK(strcmp(list, "test::Scale v1, other::Shift v1") == 0);
    /* A tiny buffer truncates, never overflows. */
    char tiny[8];
    CHECK_STATUS(s4d_registry_lookup(r, &key, NULL, &c, tiny, sizeof(tiny)), S4D_ERR_NOT_FOUND);
    CHECK(strlen(tiny) == 7);
    s4d_plugin_registry_destroy(r);
}

static void test_node_to_plugin(void)
{
    s4d_plugin_registry *r = NULL;
    CHECK_STATUS(s4d_plugin_registry_create(&r), S4D_OK);
    CHECK_STATUS(s4d_plugin_registry_register(r, &k_scale), S4D_OK);
    CHECK_STATUS(s4d_plugin_registry_register(r, &k_scale_v2), S4D_OK);
    char err[1024];
    s4d_plugin *p = NULL;
    const s4d_plugin_creator *c = NULL;

    /* Defaults fill the optional fields; the domain is the namespace. */
    s4d_attr a1[] = {attr_f("alpha", 2.5f)};
    CHECK_STATUS(s4d_registry_create_plugin(r, "n", "test", "Scale", a1, 1, &p, &c, err, sizeof(err)),
                 S4D_OK);
    CHECK(c == &k_scale);
    CHECK(g_last.alpha == 2.5f && g_last.count == 3 && strcmp(g_last.mode, "fast") == 0);
    CHECK(g_last.num_axes == 0 && g_last.num_bias == 0);
    if (p)
        p->destroy(p);
    CHECK(s4d_registry_has_node(r, "test", "Scale", a1, 1) == 1);
    CHECK(s4d_registry_has_node(r, "", "Scale", a1, 1) == 0);

    /* plugin_version (string or int) and plugin_namespace select the key. */
    int64_t axes[3] = {0, 1, 2};
    float bias[2] = {1.f, 2.f};
    s4d_attr a2[] = {attr_s("plugin_version", "2"), attr_s("plugin_namespace", "test"),
                     attr_f("alpha", 1.f), attr_i("count", 9), attr_s("mode", "slow"),
                     {.name = "axes", .type = S4D_ATTR_INTS, .ints = axes, .count = 3},
                     {.name = "bias", .type = S4D_ATTR_FLOATS, .floats = bias, .count = 2}};
    CHECK_STATUS(s4d_registry_create_plugin(r, "n", "ignored.domain", "Scale", a2, 7, &p, &c, err,
                                            sizeof(err)),
                 S4D_OK);
    CHECK(c == &k_scale_v2);
    CHECK(g_last.count == 9 && strcmp(g_last.mode, "slow") == 0 && g_last.num_axes == 3 &&
          g_last.num_bias == 2);
    if (p)
        p->destroy(p);
    a2[0] = attr_i("plugin_version", 2);
    CHECK_STATUS(s4d_registry_create_plugin(r, "n", "x", "Scale", a2, 7, &p, &c, err, sizeof(err)),
                 S4D_OK);
    CHECK(c == &k_scale_v2);
    if (p)
        p->destroy(p);

    /* Wrong plugin_version. */
    a2[0] = attr_s("plugin_version", "3");
    CHECK_STATUS(s4d_registry_create_plugin(r, "node7", "x", "Scale", a2, 7, &p, &c, err, sizeof(err)),
                 S4D_ERR_NOT_FOUND);
    CHECK(p == NULL);
    CHECK_MSG(err, "node 'node7'", "namespace 'test'", "name 'Scale'", "version '3'",
              "version differs", "test::Scale v1, test::Scale v2");
    a2[0] = attr_f("plugin_version", 1.f);
    CHECK_STATUS(s4d_registry_create_plugin(r, "node7", "x", "Scale", a2, 7, &p, &c, err, sizeof(err)),
                 S4D_ERR_INVALID_ARG);
    CHECK_MSG(err, "node7", "'plugin_version' must be a string, got float");

    /* Unknown attribute. */
    s4d_attr a3[] = {attr_f("alpha", 1.f), attr_i("gamma", 1)};
    CHECK_STATUS(s4d_registry_create_plugin(r, "node8", "test", "Scale", a3, 2, &p, &c, err, sizeof(err)),
                 S4D_ERR_INVALID_ARG);
    CHECK_MSG(err, "node 'node8'", "test::Scale v1", "unknown attribute 'gamma'",
              "alpha (float, required)", "count (int, optional)");

    /* Missing required attribute. */
    s4d_attr a4[] = {attr_i("count", 1)};
    CHECK_STATUS(s4d_registry_create_plugin(r, "node9", "test", "Scale", a4, 1, &p, &c, err, sizeof(err)),
                 S4D_ERR_INVALID_ARG);
    CHECK_MSG(err, "node 'node9'", "missing required attribute 'alpha' (float)");
    CHECK_STATUS(s4d_registry_create_plugin(r, "node9", "test", "Scale", NULL, 0, &p, &c, err, sizeof(err)),
                 S4D_ERR_INVALID_ARG);

    /* Type mismatch: no silent int -> float conversion. */
    s4d_attr a5[] = {attr_i("alpha", 2)};
    CHECK_STATUS(s4d_registry_create_plugin(r, "node10", "test", "Scale", a5, 1, &p, &c, err, sizeof(err)),
                 S4D_ERR_INVALID_ARG);
    CHECK_MSG(err, "node 'node10'", "attribute 'alpha' is int, the plugin declares float");
    s4d_attr a6[] = {attr_f("alpha", 1.f), {.name = "axes", .type = S4D_ATTR_STRINGS}};
    CHECK_STATUS(s4d_registry_create_plugin(r, "node11", "test", "Scale", a6, 2, &p, &c, err, sizeof(err)),
                 S4D_ERR_INVALID_ARG);
    CHECK_MSG(err, "attribute 'axes' is strings, the plugin declares ints");

    /* The same attribute twice. */
    s4d_attr a7[] = {attr_f("alpha", 1.f), attr_f("alpha", 2.f)};
    CHECK_STATUS(s4d_registry_create_plugin(r, "node12", "test", "Scale", a7, 2, &p, &c, err, sizeof(err)),
                 S4D_ERR_INVALID_ARG);
    CHECK_MSG(err, "'alpha' given twice");

    /* create() failures pass the plugin's status and message through. */
    g_break = 3;
    CHECK_STATUS(s4d_registry_create_plugin(r, "node13", "test", "Scale", a1, 1, &p, &c, err, sizeof(err)),
                 S4D_ERR_INVALID_ARG);
    CHECK_MSG(err, "node 'node13'", "alpha must be positive");
    /* Broken instances are refused (and freed where that is safe). */
    g_break = 1;
    CHECK_STATUS(s4d_registry_create_plugin(r, "node14", "test", "Scale", a1, 1, &p, &c, err, sizeof(err)),
                 S4D_ERR_PLUGIN);
    CHECK_MSG(err, "NULL callback");
    g_break = 2;
    CHECK_STATUS(s4d_registry_create_plugin(r, "node15", "test", "Scale", a1, 1, &p, &c, err, sizeof(err)),
                 S4D_ERR_VERSION);
    CHECK_MSG(err, "ABI 7");
    sc_destroy(g_last_instance);
    g_break = 0;
    CHECK(p == NULL);

    s4d_plugin_registry_destroy(r);
}

static void test_deserialize(void)
{
    s4d_plugin_registry *r = NULL;
    CHECK_STATUS(s4d_plugin_registry_create(&r), S4D_OK);
    CHECK_STATUS(s4d_plugin_registry_register(r, &k_scale), S4D_OK);
    char err[1024];
    s4d_plugin *p = NULL, *q = NULL;
    s4d_attr a[] = {attr_f("alpha", 4.f), attr_i("count", 11)};
    CHECK_STATUS(s4d_registry_create_plugin(r, "n", "test", "Scale", a, 2, &p, NULL, err, sizeof(err)),
                 S4D_OK);
    if (!p) {
        s4d_plugin_registry_destroy(r);
        return;
    }
    size_t n = p->serialize_size(p);
    unsigned char buf[sizeof(scale_state)];
    CHECK(n == sizeof(buf));
    CHECK_STATUS(p->serialize(p, buf, n, NULL), S4D_OK);
    const s4d_plugin_creator *c = NULL;
    CHECK_STATUS(s4d_registry_deserialize(r, "n", "test", "Scale", "1", buf, n, &q, &c, err, sizeof(err)),
                 S4D_OK);
    CHECK(c == &k_scale);
    if (q) {
        const scale_state *s = q->state;
        CHECK(s->alpha == 4.f && s->count == 11);
        q->destroy(q);
    }
    CHECK_STATUS(s4d_registry_deserialize(r, "n", "test", "Scale", "1", buf, n - 1, &q, &c, err, sizeof(err)),
                 S4D_ERR_PLUGIN);
    CHECK_MSG(err, "node 'n'", "test::Scale v1", "bad payload size");
    CHECK_STATUS(s4d_registry_deserialize(r, "n", "test", "Scale", "9", buf, n, &q, &c, err, sizeof(err)),
                 S4D_ERR_NOT_FOUND);
    CHECK_MSG(err, "version '9'");
    p->destroy(p);
    s4d_plugin_registry_destroy(r);
}

static void test_default_registry(void)
{
    s4d_plugin_registry *d = s4d_plugin_registry_default();
    CHECK(d != NULL);
    CHECK(d == s4d_plugin_registry_default());
    CHECK_STATUS(s4d_plugin_registry_register(NULL, &k_scale), S4D_OK); /* NULL: the default */
    const s4d_plugin_creator *c = NULL;
    CHECK_STATUS(s4d_plugin_registry_find(d, "test", "Scale", "1", &c), S4D_OK);
    s4d_plugin_registry_destroy(d); /* ignored */
    CHECK(s4d_plugin_registry_count(NULL) == 1);
}

static void test_tensor_desc(void)
{
    s4d_tensor t = {.dtype = S4D_DTYPE_FLOAT16, .rank = 3, .dims = {2, 3, 4}};
    s4d_plugin_tensor_desc d;
    CHECK_STATUS(s4d_registry_tensor_desc(&t, S4D_DEVICE_CUDA, &d), S4D_OK);
    CHECK(d.abi_version == S4D_PLUGIN_ABI_VERSION && d.struct_size == sizeof(d));
    CHECK(d.dtype == S4D_DTYPE_FLOAT16 && d.device == S4D_DEVICE_CUDA && d.rank == 3);
    CHECK(d.dims[0] == 2 && d.dims[1] == 3 && d.dims[2] == 4 && d.dims[3] == 0);
    t.rank = -1; /* a missing optional input */
    CHECK_STATUS(s4d_registry_tensor_desc(&t, S4D_DEVICE_CPU, &d), S4D_ERR_INVALID_ARG);
    CHECK_STATUS(s4d_registry_tensor_desc(NULL, S4D_DEVICE_CPU, &d), S4D_ERR_INVALID_ARG);
}

int main(void)
{
    test_tensor_desc();
    test_register_and_find();
    test_missing_plugin_message();
    test_node_to_plugin();
    test_deserialize();
    test_default_registry();
    TEST_DONE("test_plugin_registry");
}
