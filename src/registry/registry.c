/*
 * The plugin registry: creators by key, plugin libraries, and the checks that
 * turn an ONNX node's attributes into a plugin's fields.
 *
 * Creators are never unregistered, so a creator pointer handed out stays
 * valid until the registry is destroyed; lookups may therefore release the
 * lock before calling into the creator.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "registry/registry.h"

typedef struct loaded_lib {
    void *handle;
    char *path;
} loaded_lib;

struct s4d_plugin_registry {
    pthread_mutex_t mu;
    const s4d_plugin_creator **creators;
    int32_t num_creators;
    int32_t cap_creators;
    loaded_lib *libs;
    int32_t num_libs;
    int32_t cap_libs;
    int is_default;
    char errmsg[1024];
};

/* Smallest struct sizes that hold every field this ABI version reads. */
#define END_OF(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))
#define CREATOR_MIN_SIZE END_OF(s4d_plugin_creator, deserialize)
#define PLUGIN_MIN_SIZE END_OF(s4d_plugin, destroy)
#define DECL_MIN_SIZE END_OF(s4d_plugin_field_decl, default_value)
#define FIELD_MIN_SIZE END_OF(s4d_plugin_field, data)

/* ABI versions this host speaks: every one up to its own (fields are only appended). */
static int abi_known(uint32_t v)
{
    return v >= S4D_PLUGIN_ABI_MIN_VERSION && v <= S4D_PLUGIN_ABI_VERSION;
}

static void fmt(char *buf, size_t size, const char *f, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static void fmt(char *buf, size_t size, const char *f, ...)
{
    if (!buf || size == 0)
        return;
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, size, f, ap);
    va_end(ap);
}

/* Appends to a NUL-terminated buffer, truncating silently. */
static void append(char *buf, size_t size, const char *f, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static void append(char *buf, size_t size, const char *f, ...)
{
    if (!buf || size == 0)
        return;
    size_t len = strnlen(buf, size);
    if (len + 1 >= size)
        return;
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf + len, size - len, f, ap);
    va_end(ap);
}

static const char *str_or_empty(const char *s) { return s ? s : ""; }

static const char *field_type_name(s4d_plugin_field_type t)
{
    switch (t) {
    case S4D_PLUGIN_FIELD_FLOAT: return "float";
    case S4D_PLUGIN_FIELD_INT: return "int";
    case S4D_PLUGIN_FIELD_STRING: return "string";
    case S4D_PLUGIN_FIELD_FLOATS: return "floats";
    case S4D_PLUGIN_FIELD_INTS: return "ints";
    }
    return "unknown";
}

static int field_type_valid(s4d_plugin_field_type t)
{
    switch (t) {
    case S4D_PLUGIN_FIELD_FLOAT:
    case S4D_PLUGIN_FIELD_INT:
    case S4D_PLUGIN_FIELD_STRING:
    case S4D_PLUGIN_FIELD_FLOATS:
    case S4D_PLUGIN_FIELD_INTS: return 1;
    }
    return 0;
}

static const char *attr_type_name(s4d_attr_type t)
{
    switch (t) {
    case S4D_ATTR_FLOAT: return "float";
    case S4D_ATTR_INT: return "int";
    case S4D_ATTR_STRING: return "string";
    case S4D_ATTR_TENSOR: return "tensor";
    case S4D_ATTR_FLOATS: return "floats";
    case S4D_ATTR_INTS: return "ints";
    case S4D_ATTR_STRINGS: return "strings";
    case S4D_ATTR_UNDEFINED: break;
    }
    return "undefined";
}

/* ---- registry objects ---------------------------------------------------- */

static s4d_plugin_registry *registry_new(void)
{
    s4d_plugin_registry *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    if (pthread_mutex_init(&r->mu, NULL) != 0) {
        free(r);
        return NULL;
    }
    return r;
}

s4d_status s4d_plugin_registry_create(s4d_plugin_registry **out)
{
    if (!out)
        return S4D_ERR_INVALID_ARG;
    *out = registry_new();
    return *out ? S4D_OK : S4D_ERR_NO_MEMORY;
}

void s4d_plugin_registry_destroy(s4d_plugin_registry *r)
{
    if (!r || r->is_default)
        return;
    for (int32_t i = r->num_libs - 1; i >= 0; i--) {
        dlclose(r->libs[i].handle);
        free(r->libs[i].path);
    }
    free(r->libs);
    free(r->creators);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static s4d_plugin_registry *g_default;
static pthread_once_t g_default_once = PTHREAD_ONCE_INIT;

static void make_default(void)
{
    g_default = registry_new();
    if (g_default)
        g_default->is_default = 1;
}

s4d_plugin_registry *s4d_plugin_registry_default(void)
{
    pthread_once(&g_default_once, make_default);
    return g_default;
}

static s4d_plugin_registry *resolve(s4d_plugin_registry *r)
{
    return r ? r : s4d_plugin_registry_default();
}

static void set_errmsg(s4d_plugin_registry *r, const char *msg)
{
    pthread_mutex_lock(&r->mu);
    snprintf(r->errmsg, sizeof(r->errmsg), "%s", msg);
    pthread_mutex_unlock(&r->mu);
}

const char *s4d_plugin_registry_errmsg(s4d_plugin_registry *r)
{
    r = resolve(r);
    return r ? r->errmsg : "out of memory";
}

/* ---- creator checks and key matching -------------------------------------- */

static int same_key(const s4d_plugin_creator *c, const char *ns, const char *name,
                    const char *version)
{
    return strcmp(str_or_empty(c->plugin_namespace), ns) == 0 && strcmp(c->name, name) == 0 &&
           strcmp(c->version, version) == 0;
}

/* Pointer identity, or the same callbacks and user data (the same creator copied). */
static int same_creator(const s4d_plugin_creator *a, const s4d_plugin_creator *b)
{
    return a == b || (a->create == b->create && a->deserialize == b->deserialize &&
                      a->user == b->user && a->num_fields == b->num_fields &&
                      a->fields == b->fields);
}

static s4d_status check_creator(const s4d_plugin_creator *c, char *err, size_t err_size)
{
    if (!c) {
        fmt(err, err_size, "plugin creator is NULL");
        return S4D_ERR_INVALID_ARG;
    }
    if (!abi_known(c->abi_version)) {
        fmt(err, err_size,
            "plugin creator was built for plugin ABI %u; this s4d speaks ABI %u to %u (rebuild "
            "the plugin against this s4d's plugin.h)",
            (unsigned)c->abi_version, (unsigned)S4D_PLUGIN_ABI_MIN_VERSION,
            (unsigned)S4D_PLUGIN_ABI_VERSION);
        return S4D_ERR_VERSION;
    }
    if (c->struct_size < CREATOR_MIN_SIZE) {
        fmt(err, err_size, "plugin creator struct_size %u is smaller than ABI %u needs (%zu)",
            (unsigned)c->struct_size, (unsigned)c->abi_version, (size_t)CREATOR_MIN_SIZE);
        return S4D_ERR_VERSION;
    }
    if (!c->name || !c->name[0] || !c->version || !c->version[0] || !c->plugin_namespace) {
        /* A NULL namespace would reach every consumer of the key; "" says "none". */
        fmt(err, err_size,
            "plugin creator '%s' has an empty name or version or a NULL namespace (use \"\")",
            str_or_empty(c->name));
        return S4D_ERR_INVALID_ARG;
    }
    const char *ns = str_or_empty(c->plugin_namespace);
    if (!c->create || !c->deserialize) {
        fmt(err, err_size, "plugin creator %s::%s v%s has a NULL create or deserialize", ns,
            c->name, c->version);
        return S4D_ERR_INVALID_ARG;
    }
    if (c->num_fields < 0 || (c->num_fields > 0 && !c->fields)) {
        fmt(err, err_size, "plugin creator %s::%s v%s declares %d fields but no array", ns,
            c->name, c->version, (int)c->num_fields);
        return S4D_ERR_INVALID_ARG;
    }
    for (int32_t i = 0; i < c->num_fields; i++) {
        const s4d_plugin_field_decl *d = &c->fields[i];
        if (!abi_known(d->abi_version) || d->struct_size < DECL_MIN_SIZE) {
            fmt(err, err_size,
                "plugin creator %s::%s v%s: field %d has abi_version %u / struct_size %u "
                "(expected %u to %u / >= %zu)",
                ns, c->name, c->version, (int)i, (unsigned)d->abi_version,
                (unsigned)d->struct_size, (unsigned)S4D_PLUGIN_ABI_MIN_VERSION,
                (unsigned)S4D_PLUGIN_ABI_VERSION, (size_t)DECL_MIN_SIZE);
            return S4D_ERR_VERSION;
        }
        if (!d->name || !d->name[0] || strcmp(d->name, S4D_PLUGIN_ATTR_VERSION) == 0 ||
            strcmp(d->name, S4D_PLUGIN_ATTR_NAMESPACE) == 0) {
            fmt(err, err_size,
                "plugin creator %s::%s v%s: field %d has an empty or reserved name '%s'", ns,
                c->name, c->version, (int)i, str_or_empty(d->name));
            return S4D_ERR_INVALID_ARG;
        }
        if (!field_type_valid(d->type)) {
            fmt(err, err_size, "plugin creator %s::%s v%s: field '%s' has unknown type %d", ns,
                c->name, c->version, d->name, (int)d->type);
            return S4D_ERR_INVALID_ARG;
        }
        for (int32_t j = 0; j < i; j++) {
            if (strcmp(c->fields[j].name, d->name) == 0) {
                fmt(err, err_size, "plugin creator %s::%s v%s declares field '%s' twice", ns,
                    c->name, c->version, d->name);
                return S4D_ERR_INVALID_ARG;
            }
        }
        if (!d->required) {
            const s4d_plugin_field *v = &d->default_value;
            int scalar = d->type == S4D_PLUGIN_FIELD_FLOAT || d->type == S4D_PLUGIN_FIELD_INT;
            int bad = v->count < 0 || (scalar && v->count != 1) || (v->count > 0 && !v->data) ||
                      (d->type == S4D_PLUGIN_FIELD_STRING && !v->data);
            if (bad) {
                fmt(err, err_size,
                    "plugin creator %s::%s v%s: optional field '%s' has no valid default "
                    "(count %lld)",
                    ns, c->name, c->version, d->name, (long long)v->count);
                return S4D_ERR_INVALID_ARG;
            }
        }
    }
    return S4D_OK;
}

static const s4d_plugin_creator *find_locked(const s4d_plugin_registry *r, const char *ns,
                                             const char *name, const char *version)
{
    for (int32_t i = 0; i < r->num_creators; i++)
        if (same_key(r->creators[i], ns, name, version))
            return r->creators[i];
    return NULL;
}

static s4d_status push_creator(s4d_plugin_registry *r, const s4d_plugin_creator *c)
{
    if (r->num_creators == r->cap_creators) {
        int32_t cap = r->cap_creators ? r->cap_creators * 2 : 8;
        const s4d_plugin_creator **p = realloc(r->creators, (size_t)cap * sizeof(*p));
        if (!p)
            return S4D_ERR_NO_MEMORY;
        r->creators = p;
        r->cap_creators = cap;
    }
    r->creators[r->num_creators++] = c;
    return S4D_OK;
}

/*
 * Checks c against the registry and the creators staged so far; *dup is set
 * when c is already there (then nothing needs adding). Caller holds the lock.
 */
static s4d_status check_clash(const s4d_plugin_registry *r, const s4d_plugin_creator *const *staged,
                              int32_t num_staged, const s4d_plugin_creator *c, int *dup,
                              char *err, size_t err_size)
{
    const char *ns = str_or_empty(c->plugin_namespace);
    const s4d_plugin_creator *old = find_locked(r, ns, c->name, c->version);
    for (int32_t i = 0; !old && i < num_staged; i++)
        if (same_key(staged[i], ns, c->name, c->version))
            old = staged[i];
    *dup = 0;
    if (!old)
        return S4D_OK;
    if (same_creator(old, c)) {
        *dup = 1;
        return S4D_OK;
    }
    fmt(err, err_size,
        "plugin key (namespace '%s', name '%s', version '%s') is already registered by another "
        "creator; bump the version or change the namespace of one of them",
        ns, c->name, c->version);
    return S4D_ERR_PLUGIN;
}

s4d_status s4d_plugin_registry_register(s4d_plugin_registry *registry,
                                        const s4d_plugin_creator *creator)
{
    s4d_plugin_registry *r = resolve(registry);
    if (!r)
        return S4D_ERR_NO_MEMORY;
    char err[512] = "";
    s4d_status st = check_creator(creator, err, sizeof(err));
    if (st == S4D_OK) {
        pthread_mutex_lock(&r->mu);
        int dup = 0;
        st = check_clash(r, NULL, 0, creator, &dup, err, sizeof(err));
        if (st == S4D_OK && !dup) {
            st = push_creator(r, creator);
            if (st != S4D_OK)
                fmt(err, sizeof(err), "out of memory registering a plugin creator");
        }
        pthread_mutex_unlock(&r->mu);
    }
    if (st != S4D_OK)
        set_errmsg(r, err);
    return st;
}

int32_t s4d_plugin_registry_count(s4d_plugin_registry *registry)
{
    s4d_plugin_registry *r = resolve(registry);
    if (!r)
        return 0;
    pthread_mutex_lock(&r->mu);
    int32_t n = r->num_creators;
    pthread_mutex_unlock(&r->mu);
    return n;
}

const s4d_plugin_creator *s4d_plugin_registry_get(s4d_plugin_registry *registry, int32_t index)
{
    s4d_plugin_registry *r = resolve(registry);
    if (!r)
        return NULL;
    pthread_mutex_lock(&r->mu);
    const s4d_plugin_creator *c =
        (index >= 0 && index < r->num_creators) ? r->creators[index] : NULL;
    pthread_mutex_unlock(&r->mu);
    return c;
}

static void describe_locked(const s4d_plugin_registry *r, char *buf, size_t size)
{
    if (!buf || size == 0)
        return;
    buf[0] = '\0';
    if (r->num_creators == 0) {
        append(buf, size, "none");
        return;
    }
    for (int32_t i = 0; i < r->num_creators; i++) {
        const s4d_plugin_creator *c = r->creators[i];
        append(buf, size, "%s%s::%s v%s", i ? ", " : "", str_or_empty(c->plugin_namespace),
               c->name, c->version);
    }
}

void s4d_registry_describe(s4d_plugin_registry *registry, char *buf, size_t size)
{
    s4d_plugin_registry *r = resolve(registry);
    if (!r) {
        fmt(buf, size, "none");
        return;
    }
    pthread_mutex_lock(&r->mu);
    describe_locked(r, buf, size);
    pthread_mutex_unlock(&r->mu);
}

/* The "not found" message: the key, what nearly matched, and every creator. */
static void miss_message(const s4d_plugin_registry *r, const char *node_name, const char *ns,
                         const char *name, const char *version, char *err, size_t err_size)
{
    fmt(err, err_size, "%s%s%sno plugin creator for namespace '%s', name '%s', version '%s'",
        node_name ? "node '" : "", node_name ? node_name : "", node_name ? "': " : "", ns, name,
        version);
    for (int32_t i = 0; i < r->num_creators; i++) {
        const s4d_plugin_creator *c = r->creators[i];
        const char *cns = str_or_empty(c->plugin_namespace);
        int ns_eq = strcmp(cns, ns) == 0, name_eq = strcmp(c->name, name) == 0;
        if (ns_eq && name_eq)
            append(err, err_size, "; version differs: %s::%s is registered with version '%s'",
                   cns, c->name, c->version);
        else if (name_eq && strcmp(c->version, version) == 0)
            append(err, err_size,
                   "; namespace differs: '%s' is registered in namespace '%s' (set attribute "
                   "plugin_namespace or the node's domain)",
                   c->name, cns);
        else if (!name_eq && strcasecmp(c->name, name) == 0)
            append(err, err_size, "; name differs only in case: '%s'", c->name);
    }
    append(err, err_size, "; registered creators (%d): ", (int)r->num_creators);
    size_t len = err ? strnlen(err, err_size) : 0;
    if (err && len + 1 < err_size)
        describe_locked(r, err + len, err_size - len);
    if (r->num_creators == 0)
        append(err, err_size, " (load a plugin library, e.g. --plugins=libs4d_plugins.so)");
}

s4d_status s4d_plugin_registry_find(s4d_plugin_registry *registry, const char *plugin_namespace,
                                    const char *name, const char *version,
                                    const s4d_plugin_creator **out)
{
    s4d_plugin_registry *r = resolve(registry);
    if (!r)
        return S4D_ERR_NO_MEMORY;
    s4d_plugin_key key = {.plugin_namespace = str_or_empty(plugin_namespace),
                          .name = name,
                          .version = version};
    char err[1024] = "";
    if (!out || !name || !version) {
        set_errmsg(r, "s4d_plugin_registry_find: out, name and version must not be NULL");
        return S4D_ERR_INVALID_ARG;
    }
    s4d_status st = s4d_registry_lookup(r, &key, NULL, out, err, sizeof(err));
    if (st != S4D_OK)
        set_errmsg(r, err);
    return st;
}

s4d_status s4d_registry_lookup(s4d_plugin_registry *registry, const s4d_plugin_key *key,
                               const char *node_name, const s4d_plugin_creator **out, char *err,
                               size_t err_size)
{
    s4d_plugin_registry *r = resolve(registry);
    if (!r) {
        fmt(err, err_size, "out of memory creating the plugin registry");
        return S4D_ERR_NO_MEMORY;
    }
    if (!key || !key->name || !key->version || !out) {
        fmt(err, err_size, "plugin lookup: key, name, version and out must not be NULL");
        return S4D_ERR_INVALID_ARG;
    }
    const char *ns = str_or_empty(key->plugin_namespace);
    pthread_mutex_lock(&r->mu);
    *out = find_locked(r, ns, key->name, key->version);
    if (!*out)
        miss_message(r, node_name, ns, key->name, key->version, err, err_size);
    pthread_mutex_unlock(&r->mu);
    return *out ? S4D_OK : S4D_ERR_NOT_FOUND;
}

/* ---- plugin libraries ------------------------------------------------------ */

typedef struct staging {
    s4d_plugin_registry *r;
    const s4d_plugin_creator **items;
    int32_t count;
    int32_t cap;
    s4d_status status; /* first failure inside register_creator */
    char err[512];
} staging;

static s4d_status stage_creator(void *host, const s4d_plugin_creator *c)
{
    staging *s = host;
    if (!s)
        return S4D_ERR_INVALID_ARG;
    char err[512] = "";
    s4d_status st = check_creator(c, err, sizeof(err));
    int dup = 0;
    if (st == S4D_OK)
        st = check_clash(s->r, s->items, s->count, c, &dup, err, sizeof(err));
    if (st == S4D_OK && !dup) {
        if (s->count == s->cap) {
            int32_t cap = s->cap ? s->cap * 2 : 8;
            const s4d_plugin_creator **p = realloc(s->items, (size_t)cap * sizeof(*p));
            if (!p) {
                st = S4D_ERR_NO_MEMORY;
                fmt(err, sizeof(err), "out of memory registering a plugin creator");
            } else {
                s->items = p;
                s->cap = cap;
            }
        }
        if (st == S4D_OK)
            s->items[s->count++] = c;
    }
    if (st != S4D_OK && s->status == S4D_OK) {
        s->status = st;
        snprintf(s->err, sizeof(s->err), "%s", err);
    }
    return st;
}

static void host_log(void *host, int32_t level, const char *message)
{
    (void)host;
    if (level <= 1 && message)
        fprintf(stderr, "s4d plugin %s: %s\n", level == 0 ? "error" : "warning", message);
}

s4d_status s4d_plugin_registry_load_library(s4d_plugin_registry *registry, const char *path)
{
    s4d_plugin_registry *r = resolve(registry);
    if (!r)
        return S4D_ERR_NO_MEMORY;
    char err[1024] = "";
    if (!path || !path[0]) {
        set_errmsg(r, "plugin library path is NULL or empty");
        return S4D_ERR_INVALID_ARG;
    }
    dlerror(); /* clear a stale error so the one we print is ours */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        fmt(err, sizeof(err), "cannot load plugin library '%s': %s", path,
            why ? why : "unknown dlopen error");
        set_errmsg(r, err);
        return S4D_ERR_IO;
    }
    pthread_mutex_lock(&r->mu);
    for (int32_t i = 0; i < r->num_libs; i++) {
        if (r->libs[i].handle == h) {
            pthread_mutex_unlock(&r->mu);
            dlclose(h); /* drop the reference this call took */
            return S4D_OK;
        }
    }
    dlerror();
    s4d_plugin_library_init_fn init = NULL;
    void *sym = dlsym(h, S4D_PLUGIN_LIBRARY_INIT_SYMBOL);
    /* POSIX leaves function-pointer casts from void * to the platform; this is the blessed way. */
    memcpy(&init, &sym, sizeof(init));
    s4d_status st = S4D_OK;
    staging s = {.r = r, .status = S4D_OK};
    if (!init) {
        fmt(err, sizeof(err), "'%s' is not an s4d plugin library: it exports no %s()", path,
            S4D_PLUGIN_LIBRARY_INIT_SYMBOL);
        st = S4D_ERR_NOT_FOUND;
    } else {
        s4d_host_api api = {.abi_version = S4D_PLUGIN_ABI_VERSION,
                            .struct_size = (uint32_t)sizeof(s4d_host_api),
                            .host = &s,
                            .register_creator = stage_creator,
                            .log = host_log};
        uint32_t lib_abi = 0;
        s4d_errbuf lib_err;
        lib_err.msg[0] = '\0';
        /* Lock held: stage_creator reads the registry and must see it unchanged. */
        s4d_status init_st = init(&api, &lib_abi, &lib_err);
        lib_err.msg[sizeof(lib_err.msg) - 1] = '\0';
        if (!abi_known(lib_abi)) {
            fmt(err, sizeof(err),
                "plugin library '%s' was built for plugin ABI %u; this s4d speaks ABI %u to %u "
                "(rebuild it against this s4d's plugin.h)",
                path, (unsigned)lib_abi, (unsigned)S4D_PLUGIN_ABI_MIN_VERSION,
                (unsigned)S4D_PLUGIN_ABI_VERSION);
            st = S4D_ERR_VERSION;
        } else if (init_st != S4D_OK) {
            fmt(err, sizeof(err), "plugin library '%s' failed to initialise (%s): %s", path,
                s4d_status_string(init_st), lib_err.msg[0] ? lib_err.msg : s.err);
            st = init_st == S4D_ERR_VERSION ? S4D_ERR_VERSION : S4D_ERR_PLUGIN;
        } else if (s.status != S4D_OK) {
            fmt(err, sizeof(err), "plugin library '%s': %s", path, s.err);
            st = s.status;
        }
    }
    if (st == S4D_OK && r->num_libs == r->cap_libs) {
        int32_t cap = r->cap_libs ? r->cap_libs * 2 : 4;
        loaded_lib *p = realloc(r->libs, (size_t)cap * sizeof(*p));
        if (p) {
            r->libs = p;
            r->cap_libs = cap;
        } else {
            st = S4D_ERR_NO_MEMORY;
        }
    }
    char *path_copy = NULL;
    if (st == S4D_OK) {
        path_copy = strdup(path);
        if (!path_copy)
            st = S4D_ERR_NO_MEMORY;
    }
    if (st == S4D_OK && r->cap_creators - r->num_creators < s.count) {
        int32_t cap = r->num_creators + s.count + 8;
        const s4d_plugin_creator **p = realloc(r->creators, (size_t)cap * sizeof(*p));
        if (p) {
            r->creators = p;
            r->cap_creators = cap;
        } else {
            st = S4D_ERR_NO_MEMORY;
        }
    }
    if (st == S4D_ERR_NO_MEMORY && !err[0])
        fmt(err, sizeof(err), "out of memory loading plugin library '%s'", path);
    if (st == S4D_OK) {
        /* All or nothing: every allocation is done, so these cannot fail. */
        for (int32_t i = 0; i < s.count; i++)
            r->creators[r->num_creators++] = s.items[i];
        r->libs[r->num_libs].handle = h;
        r->libs[r->num_libs].path = path_copy;
        r->num_libs++;
    } else {
        free(path_copy);
        snprintf(r->errmsg, sizeof(r->errmsg), "%s", err);
    }
    pthread_mutex_unlock(&r->mu);
    free(s.items);
    if (st != S4D_OK)
        dlclose(h);
    return st;
}

/* ---- nodes -> plugins ------------------------------------------------------- */

static const s4d_attr *find_attr(const s4d_attr *attrs, int num_attrs, const char *name)
{
    for (int i = 0; i < num_attrs; i++)
        if (attrs[i].name && strcmp(attrs[i].name, name) == 0)
            return &attrs[i];
    return NULL;
}

s4d_status s4d_registry_node_key(const char *node_name, const char *domain, const char *op_type,
                                 const s4d_attr *attrs, int num_attrs, s4d_plugin_key *key,
                                 char *err, size_t err_size)
{
    if (!key || !op_type || !op_type[0] || num_attrs < 0 || (num_attrs > 0 && !attrs)) {
        fmt(err, err_size, "node '%s': plugin key needs an op_type and valid attributes",
            str_or_empty(node_name));
        return S4D_ERR_INVALID_ARG;
    }
    memset(key, 0, sizeof(*key));
    key->name = op_type;
    key->plugin_namespace = str_or_empty(domain);
    key->version = "1";
    const s4d_attr *v = find_attr(attrs, num_attrs, S4D_PLUGIN_ATTR_VERSION);
    if (v) {
        if (v->type == S4D_ATTR_STRING && v->s) {
            key->version = v->s;
        } else if (v->type == S4D_ATTR_INT) {
            /* Some exporters write the version as an integer; "1" and 1 mean the same. */
            snprintf(key->version_buf, sizeof(key->version_buf), "%lld", (long long)v->i);
            key->version = key->version_buf;
        } else {
            fmt(err, err_size, "node '%s' (%s): attribute '%s' must be a string, got %s",
                str_or_empty(node_name), op_type, S4D_PLUGIN_ATTR_VERSION,
                attr_type_name(v->type));
            return S4D_ERR_INVALID_ARG;
        }
    }
    const s4d_attr *n = find_attr(attrs, num_attrs, S4D_PLUGIN_ATTR_NAMESPACE);
    if (n) {
        if (n->type != S4D_ATTR_STRING || !n->s) {
            fmt(err, err_size, "node '%s' (%s): attribute '%s' must be a string, got %s",
                str_or_empty(node_name), op_type, S4D_PLUGIN_ATTR_NAMESPACE,
                attr_type_name(n->type));
            return S4D_ERR_INVALID_ARG;
        }
        key->plugin_namespace = n->s;
    }
    return S4D_OK;
}

int s4d_registry_has_node(s4d_plugin_registry *registry, const char *domain, const char *op_type,
                          const s4d_attr *attrs, int num_attrs)
{
    s4d_plugin_registry *r = resolve(registry);
    s4d_plugin_key key;
    if (!r || s4d_registry_node_key(NULL, domain, op_type, attrs, num_attrs, &key, NULL, 0) != S4D_OK)
        return 0;
    pthread_mutex_lock(&r->mu);
    int found = find_locked(r, key.plugin_namespace, key.name, key.version) != NULL;
    pthread_mutex_unlock(&r->mu);
    return found;
}

/* Field declared type <-> ONNX attribute type: the enums share values on purpose. */
static int attr_matches(const s4d_attr *a, s4d_plugin_field_type t)
{
    return (int)a->type == (int)t;
}

static void field_from_attr(const s4d_attr *a, s4d_plugin_field *f)
{
    switch (a->type) {
    case S4D_ATTR_FLOAT: f->count = 1; f->data = &a->f; break;
    case S4D_ATTR_INT: f->count = 1; f->data = &a->i; break;
    case S4D_ATTR_STRING:
        f->count = (int64_t)a->s_len;
        f->data = a->s ? a->s : "";
        break;
    case S4D_ATTR_FLOATS: f->count = (int64_t)a->count; f->data = a->floats; break;
    case S4D_ATTR_INTS: f->count = (int64_t)a->count; f->data = a->ints; break;
    case S4D_ATTR_TENSOR:
    case S4D_ATTR_STRINGS:
    case S4D_ATTR_UNDEFINED: f->count = 0; f->data = NULL; break;
    }
}

static void list_decls(const s4d_plugin_creator *c, char *buf, size_t size)
{
    if (c->num_fields == 0) {
        append(buf, size, "none");
        return;
    }
    for (int32_t i = 0; i < c->num_fields; i++)
        append(buf, size, "%s%s (%s, %s)", i ? ", " : "", c->fields[i].name,
               field_type_name(c->fields[i].type),
               c->fields[i].required ? "required" : "optional");
}

/* Checks a plugin instance a creator returned against this ABI. */
static s4d_status check_instance(s4d_plugin *p, const char *what, char *err, size_t err_size)
{
    if (!p) {
        fmt(err, err_size, "%s returned success but no instance", what);
        return S4D_ERR_PLUGIN;
    }
    if (!abi_known(p->abi_version) || p->struct_size < PLUGIN_MIN_SIZE) {
        /* Its destroy() cannot be trusted at another ABI, so the instance leaks. */
        fmt(err, err_size,
            "%s returned an instance of plugin ABI %u (struct_size %u); this s4d speaks ABI %u "
            "to %u (struct_size >= %zu)",
            what, (unsigned)p->abi_version, (unsigned)p->struct_size,
            (unsigned)S4D_PLUGIN_ABI_MIN_VERSION, (unsigned)S4D_PLUGIN_ABI_VERSION,
            (size_t)PLUGIN_MIN_SIZE);
        return S4D_ERR_VERSION;
    }
    if (!p->num_outputs || !p->get_output_descs || !p->supports || !p->workspace_size ||
        !p->serialize_size || !p->serialize || !p->enqueue || !p->destroy) {
        fmt(err, err_size, "%s returned an instance with a NULL callback", what);
        if (p->destroy)
            p->destroy(p);
        return S4D_ERR_PLUGIN;
    }
    int32_t n = p->num_outputs(p);
    if (n < 1) {
        fmt(err, err_size, "%s returned an instance with %d outputs (need >= 1)", what, (int)n);
        p->destroy(p);
        return S4D_ERR_PLUGIN;
    }
    return S4D_OK;
}

/* A failing plugin's status, unless it is not a real failure status. */
static s4d_status plugin_failure(s4d_status st)
{
    switch (st) {
    case S4D_ERR_INVALID_ARG:
    case S4D_ERR_SHAPE:
    case S4D_ERR_DTYPE:
    case S4D_ERR_NO_MEMORY:
    case S4D_ERR_UNSUPPORTED:
    case S4D_ERR_CUDA:
    case S4D_ERR_PARSE:
    case S4D_ERR_VERSION:
    case S4D_ERR_NO_DEVICE:
    case S4D_ERR_PLUGIN: return st;
    case S4D_OK:
    case S4D_ERR_IO:
    case S4D_ERR_NOT_FOUND:
    case S4D_ERR_CHECKSUM:
    case S4D_ERR_INTERNAL: break;
    }
    return S4D_ERR_PLUGIN;
}

s4d_status s4d_registry_create_plugin(s4d_plugin_registry *registry, const char *node_name,
                                      const char *domain, const char *op_type,
                                      const s4d_attr *attrs, int num_attrs, s4d_plugin **out,
                                      const s4d_plugin_creator **creator_out, char *err,
                                      size_t err_size)
{
    if (!out) {
        fmt(err, err_size, "s4d_registry_create_plugin: out is NULL");
        return S4D_ERR_INVALID_ARG;
    }
    *out = NULL;
    if (creator_out)
        *creator_out = NULL;
    const char *node = str_or_empty(node_name);
    s4d_plugin_key key;
    s4d_status st = s4d_registry_node_key(node, domain, op_type, attrs, num_attrs, &key, err,
                                          err_size);
    if (st != S4D_OK)
        return st;
    const s4d_plugin_creator *c = NULL;
    st = s4d_registry_lookup(registry, &key, node, &c, err, err_size);
    if (st != S4D_OK)
        return st;
    const char *ns = key.plugin_namespace;

    /* Every non-key attribute must be declared, with the declared type. */
    for (int i = 0; i < num_attrs; i++) {
        const s4d_attr *a = &attrs[i];
        const char *an = str_or_empty(a->name);
        if (strcmp(an, S4D_PLUGIN_ATTR_VERSION) == 0 || strcmp(an, S4D_PLUGIN_ATTR_NAMESPACE) == 0)
            continue;
        const s4d_plugin_field_decl *d = NULL;
        for (int32_t j = 0; j < c->num_fields && !d; j++)
            if (strcmp(c->fields[j].name, an) == 0)
                d = &c->fields[j];
        if (!d) {
            fmt(err, err_size,
                "node '%s' (plugin %s::%s v%s): unknown attribute '%s'; declared fields: ", node,
                ns, c->name, c->version, an);
            list_decls(c, err, err_size);
            return S4D_ERR_INVALID_ARG;
        }
        if (!attr_matches(a, d->type)) {
            fmt(err, err_size,
                "node '%s' (plugin %s::%s v%s): attribute '%s' is %s, the plugin declares %s",
                node, ns, c->name, c->version, an, attr_type_name(a->type),
                field_type_name(d->type));
            return S4D_ERR_INVALID_ARG;
        }
        if (find_attr(attrs, i, an)) {
            fmt(err, err_size, "node '%s' (plugin %s::%s v%s): attribute '%s' given twice", node,
                ns, c->name, c->version, an);
            return S4D_ERR_INVALID_ARG;
        }
    }

    s4d_plugin_field *fields = NULL;
    if (c->num_fields > 0) {
        fields = calloc((size_t)c->num_fields, sizeof(*fields));
        if (!fields) {
            fmt(err, err_size, "node '%s': out of memory", node);
            return S4D_ERR_NO_MEMORY;
        }
    }
    for (int32_t j = 0; j < c->num_fields; j++) {
        const s4d_plugin_field_decl *d = &c->fields[j];
        s4d_plugin_field *f = &fields[j];
        f->abi_version = S4D_PLUGIN_ABI_VERSION;
        f->struct_size = (uint32_t)sizeof(*f);
        f->name = d->name;
        f->type = d->type;
        const s4d_attr *a = find_attr(attrs, num_attrs, d->name);
        if (a) {
            field_from_attr(a, f);
        } else if (d->required) {
            fmt(err, err_size,
                "node '%s' (plugin %s::%s v%s): missing required attribute '%s' (%s)", node, ns,
                c->name, c->version, d->name, field_type_name(d->type));
            free(fields);
            return S4D_ERR_INVALID_ARG;
        } else {
            f->count = d->default_value.count;
            f->data = d->default_value.data;
        }
    }
    s4d_plugin_fields pf = {.abi_version = S4D_PLUGIN_ABI_VERSION,
                            .struct_size = (uint32_t)sizeof(pf),
                            .count = c->num_fields,
                            .fields = fields};
    s4d_errbuf perr;
    perr.msg[0] = '\0';
    s4d_plugin *p = NULL;
    st = c->create(c, node, &pf, &p, &perr);
    free(fields);
    perr.msg[sizeof(perr.msg) - 1] = '\0';
    if (st != S4D_OK) {
        fmt(err, err_size, "node '%s' (plugin %s::%s v%s): %s", node, ns, c->name, c->version,
            perr.msg[0] ? perr.msg : s4d_status_string(st));
        return plugin_failure(st);
    }
    char what[256];
    fmt(what, sizeof(what), "node '%s': plugin %s::%s v%s create()", node, ns, c->name,
        c->version);
    st = check_instance(p, what, err, err_size);
    if (st != S4D_OK)
        return st;
    *out = p;
    if (creator_out)
        *creator_out = c;
    return S4D_OK;
}

s4d_status s4d_registry_deserialize(s4d_plugin_registry *registry, const char *node_name,
                                    const char *plugin_namespace, const char *name,
                                    const char *version, const void *data, size_t size,
                                    s4d_plugin **out, const s4d_plugin_creator **creator_out,
                                    char *err, size_t err_size)
{
    if (!out || !name || !version || (size > 0 && !data)) {
        fmt(err, err_size, "s4d_registry_deserialize: NULL argument");
        return S4D_ERR_INVALID_ARG;
    }
    *out = NULL;
    if (creator_out)
        *creator_out = NULL;
    s4d_plugin_key key = {.plugin_namespace = str_or_empty(plugin_namespace),
                          .name = name,
                          .version = version};
    const s4d_plugin_creator *c = NULL;
    s4d_status st = s4d_registry_lookup(registry, &key, node_name, &c, err, err_size);
    if (st != S4D_OK)
        return st;
    const char *node = str_or_empty(node_name);
    s4d_errbuf perr;
    perr.msg[0] = '\0';
    s4d_plugin *p = NULL;
    st = c->deserialize(c, data, size, &p, &perr);
    perr.msg[sizeof(perr.msg) - 1] = '\0';
    if (st != S4D_OK) {
        fmt(err, err_size, "node '%s' (plugin %s::%s v%s): cannot deserialize its %zu-byte payload: %s",
            node, key.plugin_namespace, name, version, size,
            perr.msg[0] ? perr.msg : s4d_status_string(st));
        return S4D_ERR_PLUGIN;
    }
    char what[256];
    fmt(what, sizeof(what), "node '%s': plugin %s::%s v%s deserialize()", node,
        key.plugin_namespace, name, version);
    st = check_instance(p, what, err, err_size);
    if (st != S4D_OK)
        return st;
    *out = p;
    if (creator_out)
        *creator_out = c;
    return S4D_OK;
}

s4d_status s4d_registry_tensor_desc(const s4d_tensor *t, s4d_device device,
                                    s4d_plugin_tensor_desc *out)
{
    if (!t || !out || t->rank < 0 || t->rank > S4D_PLUGIN_MAX_RANK)
        return S4D_ERR_INVALID_ARG;
    memset(out, 0, sizeof(*out));
    out->abi_version = S4D_PLUGIN_ABI_VERSION;
    out->struct_size = (uint32_t)sizeof(*out);
    out->dtype = t->dtype;
    out->device = device;
    out->rank = t->rank;
    for (int i = 0; i < t->rank; i++)
        out->dims[i] = t->dims[i];
    out->format = S4D_FORMAT_LINEAR;
    int64_t stride = 1;
    for (int i = t->rank - 1; i >= 0; i--) {
        out->strides[i] = stride;
        stride *= t->dims[i] > 0 ? t->dims[i] : 1;
    }
    return S4D_OK;
}
