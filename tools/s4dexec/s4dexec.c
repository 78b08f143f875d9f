/*
 * s4dexec: build, save, load and run s4d engines from the command line,
 * with the flags trtexec users know (docs/s4dexec.md).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "compare.h"
#include "s4d/engine.h"
#include "s4d/npy.h"
#include "s4d/plugin.h"

#define MAX_PLUGINS 32
#define MAX_LOADS 256

typedef struct input_file {
    char *name;
    char *path;
} input_file;

typedef struct options {
    const char *onnx;
    const char *plugins[MAX_PLUGINS];
    int num_plugins;
    const char *save_engine;
    const char *load_engine;
    int fp16;
    int iterations;
    int warmup;
    input_file loads[MAX_LOADS];
    int num_loads;
    const char *export_dir;
    const char *compare_dir;
    double rtol, atol;
    int dump_layers;
    int dump_profile;
    int verbose;
    const char *device;
    int device_given;
    int threads;
    unsigned long long seed;
    s4d_input_spec shapes[MAX_LOADS];
    double *shape_values[MAX_LOADS];
    int num_shapes;
    int allow_fallback;
    int use_graph;
    int graph_streams;
    int no_transfers;
    int tf32;
    int conv_layout; /* s4d_conv_layout; 0: AUTO */
    s4d_layer_precision precisions[MAX_LOADS];
    int num_precisions;
    int obey;
    const char *calib;
    double accuracy;
    s4d_output_tolerance tolerances[MAX_LOADS];
    int num_tolerances;
    s4d_output_metric metrics[MAX_LOADS];
    int num_metrics;
} options;

static const char *usage_text =
    "usage: s4dexec (--onnx=FILE | --loadEngine=FILE) [options]\n"
    "\n"
    "Builds an s4d engine from an ONNX model or loads a saved one, runs it and\n"
    "reports latency. Exit status 0 only on success.\n"
    "\n"
    "Model and engine:\n"
    "  --onnx=FILE            build the engine from this ONNX model\n"
    "  --plugins=FILE         load a plugin library (repeatable) before building or loading\n"
    "  --saveEngine=FILE      write the built engine to FILE\n"
    "  --loadEngine=FILE      load an engine file instead of building\n"
    "  --device=cpu|cuda      device to build for (default cpu; cuda fails clearly on a\n"
    "                         machine without a usable GPU or a build without CUDA)\n"
    "  --fp16                 float16 layers where their kernel runs them, casts at the\n"
    "                         borders (refused on the CPU backend; docs/precision.md)\n"
    "  --layerPrecisions=name:fp32|fp16[,name:...]\n"
    "                         pin layers (--dumpLayerInfo names) to a precision (--fp16)\n"
    "  --precisionConstraints=obey|prefer\n"
    "                         obey: a pin the layer's kernel cannot run fails the build;\n"
    "                         prefer (default): it stays float32 with a warning\n"
    "  --calib=DIR            the fp16 accuracy guard: calibration inputs DIR/<input>.npy\n"
    "                         or DIR/<set>/<input>.npy; layers that cause output errors\n"
    "                         above --accuracy are moved to float32\n"
    "  --accuracy=X[,name:X...]\n"
    "                         the guard's tolerance: relative L2 per output against the\n"
    "                         float32 network (default 1e-2); name:X for one output\n"
    "                         (name:inf: measured and reported, never acted on);\n"
    "                         name:X:ordered|matched|auto or name:matched: how the\n"
    "                         output is compared (auto, the default: rows matched\n"
    "                         where their order follows a TopK, else element-wise)\n"
    "  --shapes=name:AxBxC[,name:...]\n"
    "                         fix an input's symbolic dimensions at build; for an input\n"
    "                         whose shape the model fixes (a shape-carrying input such as a\n"
    "                         Reshape shape), the numbers are its VALUES and it becomes a\n"
    "                         constant of the engine (binding other values later fails)\n"
    "  --allowFallback        run nodes the device cannot run on the CPU (copy layers are\n"
    "                         inserted; --dumpLayerInfo shows each layer's device); without\n"
    "                         it such nodes fail the build, all listed in one message\n"
    "  --tf32 / --noTF32      CUDA float32 layers may use TF32 tensor cores (default\n"
    "                         --noTF32: strict float32, unlike trtexec; see docs/s4dexec.md)\n"
    "  --convLayout=auto|nchw|nhwc\n"
    "                         memory layout of 2-D convolutions (default auto: channels-last\n"
    "                         on CUDA with --tf32 or --fp16, where cuDNN's tensor cores want\n"
    "                         it; Transpose layers at the borders)\n"
    "\n"
    "Inputs and outputs (.npy files):\n"
    "  --loadInputs=name:file.npy[,name:file.npy...]\n"
    "                         input values; inputs not given get seeded random values\n"
    "                         (floats uniform in [-1, 1), integers in [0, 4), bools 0/1)\n"
    "  --seed=N               seed for generated inputs (default 1)\n"
    "  --exportOutput=DIR     write every output of the last run to DIR/<name>.npy\n"
    "                         (characters other than [A-Za-z0-9._-] in names become '_')\n"
    "  --compareOutputs=DIR   compare each output with DIR/<name>.npy; prints max-abs error,\n"
    "                         relative L2 error and cosine similarity; exits 1 if any\n"
    "                         element has |got - want| > atol + rtol * |want|\n"
    "  --rtol=X               relative tolerance for --compareOutputs (default 1e-3)\n"
    "  --atol=X               absolute tolerance for --compareOutputs (default 1e-5)\n"
    "\n"
    "Timing and reports:\n"
    "  --iterations=N         timed runs (default 10); latency min/median/p90/max/mean\n"
    "  --warmUp=N             untimed runs before timing (default 2)\n"
    "  --threads=N            CPU threads per context (default: all cores)\n"
    "  --useCudaGraph         capture the layers into a CUDA graph once and replay it\n"
    "  --graphStreams=N       streams the graph's independent branches spread over (1..8;\n"
    "                         default 4, or S4D_GRAPH_STREAMS; 1: one stream)\n"
    "  --noDataTransfers      time without host<->device copies: after the warm-up, inputs\n"
    "                         and outputs stay in the context's device buffers (CUDA)\n"
    "  --dumpLayerInfo        print each layer: op, device, dtypes, shapes, workspace,\n"
    "                         'view' where it shares its input's buffer and runs nothing,\n"
    "                         and the activation memory plan\n"
    "  --dumpProfile          print the mean time of each layer over the timed runs\n"
    "  --verbose              print build details and the registered plugin creators\n"
    "  --help                 this text\n";

static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("s4dexec: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

static const char *flag_value(const char *arg, const char *flag)
{
    size_t n = strlen(flag);
    if (strncmp(arg, flag, n) != 0)
        return NULL;
    if (arg[n] == '=')
        return arg + n + 1;
    return NULL;
}

static int parse_int(const char *s, const char *flag, int min, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < min || v > 100000000)
        return fail("%s expects an integer >= %d, got '%s'", flag, min, s);
    *out = (int)v;
    return 0;
}

static int parse_double(const char *s, const char *flag, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    /* isfinite: an infinite tolerance would pass any output, NaN would fail every one. */
    if (errno || *end || end == s || !(v >= 0) || !isfinite(v))
        return fail("%s expects a finite non-negative number, got '%s'", flag, s);
    *out = v;
    return 0;
}

/* Entries are split by hand, not with strtok, so that empty entries (",,") are refused. */
static int parse_loads(options *o, const char *spec)
{
    if (!spec[0])
        return fail("--loadInputs expects name:file.npy entries, got nothing");
    const char *p = spec;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        const char *colon = NULL;
        for (size_t i = 0; i < len; i++)
            if (p[i] == ':')
                colon = p + i;
        if (!colon || colon == p || colon + 1 == p + len)
            return fail("--loadInputs expects name:file.npy entries, got '%.*s'%s", (int)len, p,
                        len ? "" : " (an empty entry)");
        if (o->num_loads == MAX_LOADS)
            return fail("--loadInputs: more than %d entries", MAX_LOADS);
        input_file *f = &o->loads[o->num_loads];
        f->name = strndup(p, (size_t)(colon - p));
        f->path = strndup(colon + 1, len - (size_t)(colon - p) - 1);
        if (!f->name || !f->path) {
            free(f->name);
            free(f->path);
            f->name = f->path = NULL;
            return fail("out of memory");
        }
        o->num_loads++;
        for (int k = 0; k + 1 < o->num_loads; k++)
            if (strcmp(o->loads[k].name, f->name) == 0)
                return fail("--loadInputs: input '%s' is given twice ('%s' and '%s')", f->name,
                            o->loads[k].path, f->path);
        if (!comma)
            return 0;
        p = comma + 1;
    }
}

static void free_options(options *o)
{
    for (int i = 0; i < o->num_loads; i++) {
        free(o->loads[i].name);
        free(o->loads[i].path);
    }
    o->num_loads = 0;
    for (int i = 0; i < o->num_shapes; i++) {
        free((char *)o->shapes[i].name);
        free(o->shape_values[i]);
    }
    o->num_shapes = 0;
    for (int i = 0; i < o->num_precisions; i++)
        free((char *)o->precisions[i].layer);
    o->num_precisions = 0;
    for (int i = 0; i < o->num_tolerances; i++)
        free((char *)o->tolerances[i].output);
    o->num_tolerances = 0;
    for (int i = 0; i < o->num_metrics; i++)
        free((char *)o->metrics[i].output);
    o->num_metrics = 0;
}

/* The next comma-separated item of *p (malloc'd), or NULL at the end. */
static char *next_item(const char **p)
{
    const char *s = *p;
    if (!*s)
        return NULL;
    const char *e = strchr(s, ',');
    size_t n = e ? (size_t)(e - s) : strlen(s);
    char *item = malloc(n + 1);
    if (!item)
        return NULL;
    memcpy(item, s, n);
    item[n] = 0;
    *p = e ? e + 1 : s + n;
    return item;
}

/* --layerPrecisions=name:fp32,name2:fp16 (a name may hold ':'; the last one splits). */
static int parse_precisions(options *o, const char *v)
{
    if (!*v)
        return fail("--layerPrecisions: no layers given");
    char *item;
    while ((item = next_item(&v))) {
        char *colon = strrchr(item, ':');
        if (!colon || colon == item) {
            int r = fail("--layerPrecisions: '%s' is not name:fp32 or name:fp16", item);
            free(item);
            return r;
        }
        *colon = 0;
        const char *prec = colon + 1;
        s4d_dtype dt;
        if (strcmp(prec, "fp32") == 0 || strcmp(prec, "float32") == 0)
            dt = S4D_DTYPE_FLOAT32;
        else if (strcmp(prec, "fp16") == 0 || strcmp(prec, "float16") == 0)
            dt = S4D_DTYPE_FLOAT16;
        else {
            int r = fail("--layerPrecisions: layer '%s': precision '%s' is not fp32 or fp16", item,
                         prec);
            free(item);
            return r;
        }
        if (o->num_precisions == MAX_LOADS) {
            free(item);
            return fail("--layerPrecisions: more than %d layers", MAX_LOADS);
        }
        o->precisions[o->num_precisions].layer = item;
        o->precisions[o->num_precisions].dtype = dt;
        o->num_precisions++;
    }
    return 0;
}

static int parse_tol(const char *s, const char *what, double *out)
{
    char *end;
    double d = strtod(s, &end);
    if (!*s || *end || !(d > 0))
        return fail("--accuracy: %s: '%s' is not a relative L2 tolerance > 0 (or inf)", what, s);
    *out = d;
    return 0;
}

static int metric_of(const char *s, s4d_accuracy_metric *m)
{
    if (strcmp(s, "ordered") == 0)
        *m = S4D_METRIC_ORDERED;
    else if (strcmp(s, "matched") == 0)
        *m = S4D_METRIC_MATCHED;
    else if (strcmp(s, "auto") == 0)
        *m = S4D_METRIC_AUTO;
    else
        return 0;
    return 1;
}

static int is_number(const char *s)
{
    char *end;
    strtod(s, &end);
    return *s && !*end;
}

/* --accuracy=1e-2 or --accuracy=name:tol[:metric],name:metric,... (a bare number sets
   the default; the metric is ordered, matched or auto). */
static int parse_accuracy(options *o, const char *v)
{
    if (!*v)
        return fail("--accuracy: no tolerance given");
    char *item;
    while ((item = next_item(&v))) {
        char *colon = strrchr(item, ':');
        int r;
        s4d_accuracy_metric metric;
        if (!colon && metric_of(item, &metric)) {
            r = fail("--accuracy: '%s' needs an output name (name:%s)", item, item);
            free(item);
            return r;
        }
        if (colon && metric_of(colon + 1, &metric)) {
            *colon = 0;
            if (!*item) {
                free(item);
                return fail("--accuracy: an item has no output name before ':'");
            }
            if (o->num_metrics == MAX_LOADS) {
                free(item);
                return fail("--accuracy: more than %d outputs", MAX_LOADS);
            }
            /* name:tol:metric, or name:metric (the name may hold ':'). */
            colon = strrchr(item, ':');
            if (colon && !is_number(colon + 1))
                colon = NULL;
            char *name = strndup(item, colon ? (size_t)(colon - item) : strlen(item));
            if (!name) {
                free(item);
                return fail("out of memory");
            }
            o->metrics[o->num_metrics].output = name;
            o->metrics[o->num_metrics].metric = metric;
            o->num_metrics++;
            if (!colon) {
                free(item);
                continue;
            }
        }
        if (!colon) {
            r = parse_tol(item, "default", &o->accuracy);
            free(item);
            if (r)
                return r;
            continue;
        }
        *colon = 0;
        double t = 0;
        if (!*item || (r = parse_tol(colon + 1, *item ? item : "(no name)", &t)) != 0) {
            r = *item ? 1 : fail("--accuracy: an item has no output name before ':'");
            free(item);
            return r;
        }
        if (o->num_tolerances == MAX_LOADS) {
            free(item);
            return fail("--accuracy: more than %d outputs", MAX_LOADS);
        }
        o->tolerances[o->num_tolerances].output = item;
        o->tolerances[o->num_tolerances].rel_l2 = t;
        o->num_tolerances++;
    }
    return 0;
}

/* --shapes=name:AxBxC,name2:D: the numbers may be fractional (values of a scales input). */
static int parse_shapes(options *o, const char *v)
{
    const char *p = v;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *colon = NULL;
        for (size_t i = 0; i < len; i++)
            if (p[i] == ':')
                colon = p + i;
        if (!colon || colon == p)
            return fail("--shapes: '%.*s' is not name:AxBxC", (int)len, p);
        if (o->num_shapes == MAX_LOADS)
            return fail("--shapes: more than %d inputs", MAX_LOADS);
        s4d_input_spec *sp = &o->shapes[o->num_shapes];
        memset(sp, 0, sizeof *sp);
        char *name = malloc((size_t)(colon - p) + 1);
        double *vals = malloc(sizeof(double) * (len + 1));
        if (!name || !vals) {
            free(name);
            free(vals);
            return fail("out of memory");
        }
        memcpy(name, p, (size_t)(colon - p));
        name[colon - p] = 0;
        for (int k = 0; k < o->num_shapes; k++) {
            if (strcmp(o->shapes[k].name, name) == 0) {
                free(name);
                free(vals);
                return fail("--shapes names input '%s' twice", o->shapes[k].name);
            }
        }
        sp->name = name;
        o->shape_values[o->num_shapes] = vals;
        o->num_shapes++;
        const char *q = colon + 1, *stop = p + len;
        int n = 0;
        while (q < stop) {
            char *e;
            double d = strtod(q, &e);
            if (e == q || e > stop || (e < stop && *e != 'x') || d != d)
                return fail("--shapes %s: '%.*s' is not a list of numbers joined by 'x'", name,
                            (int)(stop - colon - 1), colon + 1);
            vals[n] = d;
            if (n < S4D_MAX_DIMS)
                sp->dims[n] = d >= 0 && d < 9.2e18 && d == (double)(int64_t)d ? (int64_t)d : -1;
            n++;
            q = e < stop ? e + 1 : e;
        }
        if (n == 0)
            return fail("--shapes %s: no dimensions given", name);
        sp->rank = n;
        sp->values = vals;
        sp->kind = S4D_INPUT_SPEC_AUTO;
        p = end ? end + 1 : p + len;
    }
    return 0;
}

static int parse_args(int argc, char **argv, options *o, int *help)
{
    memset(o, 0, sizeof *o);
    o->iterations = 10;
    o->warmup = 2;
    o->rtol = 1e-3;
    o->atol = 1e-5;
    o->device = "cpu";
    o->seed = 1;
    *help = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            *help = 1;
            return 0;
        } else if ((v = flag_value(a, "--onnx"))) {
            o->onnx = v;
        } else if ((v = flag_value(a, "--plugins"))) {
            if (o->num_plugins == MAX_PLUGINS)
                return fail("--plugins given more than %d times", MAX_PLUGINS);
            o->plugins[o->num_plugins++] = v;
        } else if ((v = flag_value(a, "--saveEngine"))) {
            o->save_engine = v;
        } else if ((v = flag_value(a, "--loadEngine"))) {
            o->load_engine = v;
        } else if (strcmp(a, "--fp16") == 0) {
            o->fp16 = 1;
        } else if ((v = flag_value(a, "--iterations"))) {
            if (parse_int(v, "--iterations", 1, &o->iterations))
                return 1;
        } else if ((v = flag_value(a, "--warmUp"))) {
            if (parse_int(v, "--warmUp", 0, &o->warmup))
                return 1;
        } else if ((v = flag_value(a, "--threads"))) {
            if (parse_int(v, "--threads", 0, &o->threads))
                return 1;
        } else if ((v = flag_value(a, "--seed"))) {
            int s;
            if (parse_int(v, "--seed", 0, &s))
                return 1;
            o->seed = (unsigned long long)s;
        } else if ((v = flag_value(a, "--loadInputs"))) {
            if (parse_loads(o, v))
                return 1;
        } else if ((v = flag_value(a, "--exportOutput"))) {
            o->export_dir = v;
        } else if ((v = flag_value(a, "--compareOutputs"))) {
            o->compare_dir = v;
        } else if ((v = flag_value(a, "--rtol"))) {
            if (parse_double(v, "--rtol", &o->rtol))
                return 1;
        } else if ((v = flag_value(a, "--atol"))) {
            if (parse_double(v, "--atol", &o->atol))
                return 1;
        } else if (strcmp(a, "--dumpLayerInfo") == 0) {
            o->dump_layers = 1;
        } else if (strcmp(a, "--dumpProfile") == 0) {
            o->dump_profile = 1;
        } else if (strcmp(a, "--verbose") == 0) {
            o->verbose = 1;
        } else if ((v = flag_value(a, "--device"))) {
            o->device = v;
            o->device_given = 1;
        } else if ((v = flag_value(a, "--shapes"))) {
            if (parse_shapes(o, v))
                return 1;
        } else if (strcmp(a, "--allowFallback") == 0) {
            o->allow_fallback = 1;
        } else if (strcmp(a, "--noDataTransfers") == 0) {
            o->no_transfers = 1;
        } else if (strcmp(a, "--useCudaGraph") == 0) {
            o->use_graph = 1;
        } else if ((v = flag_value(a, "--graphStreams"))) {
            if (parse_int(v, "--graphStreams", 1, &o->graph_streams))
                return 1;
            if (o->graph_streams > 8)
                return fail("--graphStreams expects 1 .. 8, got %d", o->graph_streams);
        } else if (strcmp(a, "--tf32") == 0) {
            o->tf32 = 1;
        } else if (strcmp(a, "--noTF32") == 0) {
            o->tf32 = 0;
        } else if ((v = flag_value(a, "--convLayout"))) {
            if (strcmp(v, "auto") == 0)
                o->conv_layout = S4D_CONV_LAYOUT_AUTO;
            else if (strcmp(v, "nchw") == 0)
                o->conv_layout = S4D_CONV_LAYOUT_NCHW;
            else if (strcmp(v, "nhwc") == 0)
                o->conv_layout = S4D_CONV_LAYOUT_NHWC;
            else
                return fail("--convLayout expects auto, nchw or nhwc, got '%s'", v);
        } else if ((v = flag_value(a, "--layerPrecisions"))) {
            if (parse_precisions(o, v))
                return 1;
        } else if ((v = flag_value(a, "--precisionConstraints"))) {
            if (strcmp(v, "obey") == 0)
                o->obey = 1;
            else if (strcmp(v, "prefer") == 0 || strcmp(v, "none") == 0)
                o->obey = 0;
            else
                return fail("--precisionConstraints=%s: give obey or prefer", v);
        } else if ((v = flag_value(a, "--calib"))) {
            if (!*v)
                return fail("--calib: no directory given");
            o->calib = v;
        } else if ((v = flag_value(a, "--accuracy"))) {
            if (parse_accuracy(o, v))
                return 1;
        } else {
            return fail("unknown argument '%s' (see --help)", a);
        }
    }
    if (!o->onnx && !o->load_engine)
        return fail("give --onnx=FILE or --loadEngine=FILE (see --help)");
    if (o->onnx && o->load_engine)
        return fail("give either --onnx or --loadEngine, not both");
    if (strcmp(o->device, "cpu") != 0 && strcmp(o->device, "cuda") != 0)
        return fail("--device expects cpu or cuda, got '%s'", o->device);
    return 0;
}

static void file_name_of(const char *tensor, char *buf, size_t size)
{
    size_t j = 0;
    for (size_t i = 0; tensor[i] && j + 5 < size; i++) {
        char c = tensor[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '-';
        buf[j++] = ok ? c : '_';
    }
    if (j == 0)
        buf[j++] = '_';
    memcpy(buf + j, ".npy", 5);
}

static const char *shape_str(int rank, const int64_t *dims, char *buf, size_t size)
{
    size_t used = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < rank && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%lld", i ? "," : "", (long long)dims[i]);
    if (used < size)
        snprintf(buf + used, size - used, "]");
    return buf;
}

/* xorshift64*: reproducible inputs without depending on the C library's rand(). */
static uint64_t next_rand(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

static void fill_random(s4d_dtype dt, void *data, int64_t n, uint64_t *state)
{
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = next_rand(state);
        double u = (double)(r >> 11) / 9007199254740992.0;
        switch (dt) {
        case S4D_DTYPE_FLOAT32: ((float *)data)[i] = (float)(2 * u - 1); break;
        case S4D_DTYPE_FLOAT64: ((double *)data)[i] = 2 * u - 1; break;
        case S4D_DTYPE_INT64: ((int64_t *)data)[i] = (int64_t)(r % 4); break;
        case S4D_DTYPE_INT32: ((int32_t *)data)[i] = (int32_t)(r % 4); break;
        case S4D_DTYPE_INT16: ((int16_t *)data)[i] = (int16_t)(r % 4); break;
        case S4D_DTYPE_INT8: ((int8_t *)data)[i] = (int8_t)(r % 4); break;
        case S4D_DTYPE_UINT8: ((uint8_t *)data)[i] = (uint8_t)(r % 4); break;
        case S4D_DTYPE_UINT16: ((uint16_t *)data)[i] = (uint16_t)(r % 4); break;
        case S4D_DTYPE_UINT32: ((uint32_t *)data)[i] = (uint32_t)(r % 4); break;
        case S4D_DTYPE_UINT64: ((uint64_t *)data)[i] = r % 4; break;
        case S4D_DTYPE_BOOL: ((uint8_t *)data)[i] = (uint8_t)(r & 1); break;
        case S4D_DTYPE_FLOAT16:
        case S4D_DTYPE_BFLOAT16: ((uint16_t *)data)[i] = 0x3800; break; /* 0.5: no converter needed */
        case S4D_DTYPE_STRING:
        case S4D_DTYPE_UNDEFINED: break;
        }
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static const char *device_name(s4d_device d)
{
    switch (d) {
    case S4D_DEVICE_CPU: return "cpu";
    case S4D_DEVICE_CUDA: return "cuda";
    }
    return "?";
}

static void dump_layers(const s4d_engine *e)
{
    int n = s4d_engine_num_layers(e);
    s4d_engine_target_info tg;
    memset(&tg, 0, sizeof tg);
    tg.struct_size = sizeof tg;
    if (s4d_engine_target(e, &tg) == S4D_OK)
        printf("[engine] device %s (%s%s%s%s%s), built by s4d %s\n", device_name(tg.device),
               tg.device_name, tg.arch[0] ? ", " : "", tg.arch, tg.libraries[0] ? ", " : "",
               tg.libraries, tg.library_version);
    int views = 0, in_place = 0;
    for (int i = 0; i < n; i++) {
        s4d_layer_details ld;
        memset(&ld, 0, sizeof ld);
        ld.struct_size = sizeof ld;
        if (s4d_engine_layer_details(e, i, &ld) == S4D_OK) {
            views += ld.is_view;
            in_place += ld.in_place;
        }
    }
    printf("[layers] %d layers, %d views (no kernel), %d Concats in place (no kernel)\n", n,
           views, in_place);
    for (int i = 0; i < n; i++) {
        s4d_layer_info li;
        if (s4d_engine_layer_info(e, i, &li) != S4D_OK)
            continue;
        s4d_layer_details ld;
        memset(&ld, 0, sizeof ld);
        ld.struct_size = sizeof ld;
        s4d_engine_layer_details(e, i, &ld);
        printf("  %3d %-28s %-32s %-4s %-7s", i, li.name, li.op, device_name(li.device),
               s4d_dtype_name(ld.precision));
        char buf[128];
        printf(" in:");
        for (int k = 0; k < li.num_inputs; k++) {
            s4d_tensor_info ti;
            s4d_engine_layer_tensor(e, i, 0, k, &ti);
            if (ti.rank < 0)
                printf(" (none)");
            else
                printf(" %s%s", s4d_dtype_name(ti.dtype), shape_str(ti.rank, ti.dims, buf, sizeof buf));
        }
        printf(" out:");
        for (int k = 0; k < li.num_outputs; k++) {
            s4d_tensor_info ti;
            s4d_engine_layer_tensor(e, i, 1, k, &ti);
            printf(" %s%s", s4d_dtype_name(ti.dtype), shape_str(ti.rank, ti.dims, buf, sizeof buf));
        }
        if (li.workspace_bytes)
            printf(" workspace=%zu", li.workspace_bytes);
        /* Last but for "view" and "in place", which scripts look for at the end. */
        if (ld.kernel_info && ld.kernel_info[0])
            printf(" plan: %s", ld.kernel_info);
        if (ld.is_view)
            printf(" view");
        if (ld.in_place)
            printf(" in place");
        printf("\n");
    }
    printf("[memory] activations: %zu bytes planned (peak), %zu bytes without reuse; weights: "
           "%zu bytes\n",
           s4d_engine_activation_bytes(e), s4d_engine_activation_bytes_unplanned(e),
           s4d_engine_weight_bytes(e));
}

static void print_creators(void)
{
    s4d_plugin_registry *r = s4d_plugin_registry_default();
    int32_t n = r ? s4d_plugin_registry_count(r) : 0;
    printf("[plugins] %d registered creator%s\n", (int)n, n == 1 ? "" : "s");
    for (int32_t i = 0; i < n; i++) {
        const s4d_plugin_creator *c = s4d_plugin_registry_get(r, i);
        if (c)
            printf("  namespace '%s' name '%s' version '%s'\n", c->plugin_namespace, c->name,
                   c->version);
    }
}

typedef struct run_state {
    s4d_npy *arrays;   /* per input: loaded or generated */
    int num_inputs;
} run_state;

static int prepare_inputs(const options *o, const s4d_engine *e, s4d_context *ctx, run_state *rs)
{
    int n = s4d_engine_num_inputs(e);
    rs->num_inputs = n;
    rs->arrays = calloc((size_t)n + 1, sizeof(s4d_npy));
    if (!rs->arrays)
        return fail("out of memory");
    for (int k = 0; k < o->num_loads; k++) {
        int found = 0;
        for (int i = 0; i < n && !found; i++) {
            s4d_tensor_info ti;
            s4d_engine_input_info(e, i, &ti);
            found = strcmp(ti.name, o->loads[k].name) == 0;
        }
        if (!found)
            return fail("--loadInputs: the engine has no input named '%s'", o->loads[k].name);
    }
    uint64_t state = o->seed * 0x9E3779B97F4A7C15ull + 1;
    for (int i = 0; i < n; i++) {
        s4d_tensor_info ti;
        s4d_engine_input_info(e, i, &ti);
        const char *path = NULL;
        for (int k = 0; k < o->num_loads; k++)
            if (strcmp(o->loads[k].name, ti.name) == 0)
                path = o->loads[k].path;
        s4d_npy *a = &rs->arrays[i];
        if (path) {
            s4d_errbuf err = {{0}};
            if (s4d_npy_load(path, a, &err) != S4D_OK)
                return fail("input '%s': %s", ti.name, err.msg);
            if (o->verbose)
                printf("[inputs] %s <- %s\n", ti.name, path);
        } else {
            a->dtype = ti.dtype;
            a->rank = ti.rank;
            memcpy(a->dims, ti.dims, sizeof(int64_t) * (size_t)ti.rank);
            a->bytes = ti.bytes;
            a->data = calloc(1, ti.bytes ? ti.bytes : 1);
            if (!a->data)
                return fail("out of memory for input '%s'", ti.name);
            int64_t cnt = 1;
            for (int d = 0; d < ti.rank; d++)
                cnt *= ti.dims[d];
            fill_random(ti.dtype, a->data, cnt, &state);
            if (o->verbose)
                printf("[inputs] %s <- random (seed %llu)\n", ti.name, o->seed);
        }
        if (s4d_context_bind(ctx, ti.name, a->dtype, a->rank, a->dims, a->data) != S4D_OK)
            return fail("input '%s'%s%s: %s", ti.name, path ? " from " : "", path ? path : "",
                        s4d_context_errmsg(ctx));
    }
    return 0;
}

static void free_inputs(run_state *rs)
{
    if (!rs->arrays)
        return;
    for (int i = 0; i < rs->num_inputs; i++) {
        /* Loaded arrays come aligned from s4d_npy; generated ones from calloc. */
        free(rs->arrays[i].data);
    }
    free(rs->arrays);
}

static int export_outputs(const options *o, const s4d_engine *e, s4d_context *ctx)
{
    if (mkdir(o->export_dir, 0777) != 0 && errno != EEXIST)
        return fail("--exportOutput: cannot create directory '%s': %s", o->export_dir,
                    strerror(errno));
    for (int i = 0; i < s4d_engine_num_outputs(e); i++) {
        s4d_tensor_info ti;
        s4d_engine_output_info(e, i, &ti);
        const void *data;
        s4d_context_output(ctx, ti.name, &data, NULL);
        char fname[512], path[4096];
        file_name_of(ti.name, fname, sizeof fname);
        snprintf(path, sizeof path, "%s/%s", o->export_dir, fname);
        s4d_errbuf err = {{0}};
        if (s4d_npy_save(path, ti.dtype, ti.rank, ti.dims, data, &err) != S4D_OK)
            return fail("--exportOutput: output '%s': %s", ti.name, err.msg);
        printf("[outputs] %s -> %s\n", ti.name, path);
    }
    return 0;
}

static int compare_outputs(const options *o, const s4d_engine *e, s4d_context *ctx)
{
    int failures = 0;
    printf("[compare] rtol=%g atol=%g (pass: |got - want| <= atol + rtol*|want| everywhere)\n",
           o->rtol, o->atol);
    for (int i = 0; i < s4d_engine_num_outputs(e); i++) {
        s4d_tensor_info ti;
        s4d_engine_output_info(e, i, &ti);
        const void *data;
        s4d_context_output(ctx, ti.name, &data, NULL);
        char fname[512], path[4096], a[128], b[128];
        file_name_of(ti.name, fname, sizeof fname);
        snprintf(path, sizeof path, "%s/%s", o->compare_dir, fname);
        s4d_npy ref;
        s4d_errbuf err = {{0}};
        if (s4d_npy_load(path, &ref, &err) != S4D_OK)
            return fail("--compareOutputs: output '%s': %s", ti.name, err.msg);
        int same_shape = ref.rank == ti.rank;
        for (int d = 0; same_shape && d < ti.rank; d++)
            same_shape = ref.dims[d] == ti.dims[d];
        if (ref.dtype != ti.dtype || !same_shape) {
            fail("--compareOutputs: output '%s': engine gives %s%s, %s holds %s%s", ti.name,
                 s4d_dtype_name(ti.dtype), shape_str(ti.rank, ti.dims, a, sizeof a), path,
                 s4d_dtype_name(ref.dtype), shape_str(ref.rank, ref.dims, b, sizeof b));
            s4d_npy_free(&ref);
            failures++;
            continue;
        }
        int64_t n = 1;
        for (int d = 0; d < ti.rank; d++)
            n *= ti.dims[d];
        cmp_result r;
        if (compare_arrays(ti.dtype, data, ref.data, n, o->rtol, o->atol, &r) != 0) {
            s4d_npy_free(&ref);
            return fail("--compareOutputs: output '%s': cannot compare dtype %s", ti.name,
                        s4d_dtype_name(ti.dtype));
        }
        printf("[compare] %-24s max_abs=%.3e rel_l2=%.3e cosine=%.6f %s\n", ti.name, r.max_abs,
               r.rel_l2, r.cosine, r.bad ? "FAIL" : "ok");
        if (r.bad) {
            double g = elem_to_double(ti.dtype, data, r.first_bad);
            double w = elem_to_double(ti.dtype, ref.data, r.first_bad);
            fail("output '%s': %lld of %lld elements outside tolerance (first at flat index "
                 "%lld: got %.9g, want %.9g)",
                 ti.name, (long long)r.bad, (long long)n, (long long)r.first_bad, g, w);
            failures++;
        }
        s4d_npy_free(&ref);
    }
    return failures ? 1 : 0;
}

/* Binds every input and output to the context's own device buffer (no copies per run). */
static int bind_device_buffers(const s4d_engine *e, s4d_context *ctx)
{
    for (int k = 0; k < 2; k++) {
        int n = k ? s4d_engine_num_outputs(e) : s4d_engine_num_inputs(e);
        for (int i = 0; i < n; i++) {
            s4d_tensor_info ti;
            if (k)
                s4d_engine_output_info(e, i, &ti);
            else
                s4d_engine_input_info(e, i, &ti);
            void *d = NULL;
            if (s4d_context_device_buffer(ctx, ti.name, &d) != S4D_OK ||
                s4d_context_bind_memory(ctx, ti.name, ti.dtype, ti.rank, ti.dims, d,
                                        S4D_MEMORY_DEVICE) != S4D_OK)
                return fail("--noDataTransfers: %s", s4d_context_errmsg(ctx));
        }
    }
    return 0;
}

static int run_all(const options *o, s4d_engine *e)
{
    s4d_context_options co;
    s4d_context_options_init(&co);
    co.num_threads = o->threads;
    co.profile = o->dump_profile;
    co.use_graph = o->use_graph;
    co.graph_streams = o->graph_streams;
    s4d_context *ctx = NULL;
    s4d_errbuf err = {{0}};
    if (s4d_context_create(e, &co, &ctx, &err) != S4D_OK)
        return fail("cannot create a context: %s", err.msg);
    run_state rs;
    memset(&rs, 0, sizeof rs);
    int rc = prepare_inputs(o, e, ctx, &rs);
    int nl = s4d_engine_num_layers(e);
    double *lat = calloc((size_t)o->iterations, sizeof(double));
    double *layer_sum = calloc((size_t)nl + 1, sizeof(double));
    if (!rc && (!lat || !layer_sum))
        rc = fail("out of memory");
    for (int i = 0; !rc && i < o->warmup; i++)
        if (s4d_context_run(ctx, NULL) != S4D_OK)
            rc = fail("%s", s4d_context_errmsg(ctx));
    /* The warm-up left the inputs in the context's device buffers: bind those. */
    int device_bound = 0;
    if (!rc && o->no_transfers && s4d_engine_device(e) != S4D_DEVICE_CPU) {
        if (o->warmup < 1 && s4d_context_run(ctx, NULL) != S4D_OK)
            rc = fail("%s", s4d_context_errmsg(ctx));
        rc = rc ? rc : bind_device_buffers(e, ctx);
        device_bound = !rc;
    }
    for (int i = 0; !rc && i < o->iterations; i++) {
        double t0 = now_ms();
        if (s4d_context_run(ctx, NULL) != S4D_OK) {
            rc = fail("%s", s4d_context_errmsg(ctx));
            break;
        }
        lat[i] = now_ms() - t0;
        for (int l = 0; o->dump_profile && l < nl; l++) {
            double ms = 0;
            s4d_context_layer_time(ctx, l, &ms);
            layer_sum[l] += ms;
        }
    }
    if (!rc) {
        double mean = 0;
        for (int i = 0; i < o->iterations; i++)
            mean += lat[i];
        mean /= o->iterations;
        qsort(lat, (size_t)o->iterations, sizeof(double), cmp_double);
        int n = o->iterations;
        int p90 = (int)ceil(0.9 * n) - 1;
        printf("[latency] %d iterations (after %d warm-up): min %.3f ms, median %.3f ms, p90 "
               "%.3f ms, max %.3f ms, mean %.3f ms\n",
               n, o->warmup, lat[0], n % 2 ? lat[n / 2] : 0.5 * (lat[n / 2 - 1] + lat[n / 2]),
               lat[p90 < 0 ? 0 : p90], lat[n - 1], mean);
    }
    if (!rc && o->dump_profile) {
        double total = 0;
        for (int l = 0; l < nl; l++)
            total += layer_sum[l];
        printf("[profile] mean time per layer over %d iterations\n", o->iterations);
        for (int l = 0; l < nl; l++) {
            s4d_layer_info li;
            s4d_engine_layer_info(e, l, &li);
            double ms = layer_sum[l] / o->iterations;
            printf("  %3d %-28s %-32s %9.4f ms %5.1f%%\n", l, li.name, li.op, ms,
                   total > 0 ? 100 * layer_sum[l] / total : 0);
        }
        printf("  total %.4f ms\n", total / o->iterations);
    }
    /* Outputs back to host buffers for exporting and comparing: one more run. */
    if (!rc && device_bound && (o->export_dir || o->compare_dir)) {
        for (int i = 0; !rc && i < s4d_engine_num_outputs(e); i++) {
            s4d_tensor_info ti;
            s4d_engine_output_info(e, i, &ti);
            if (s4d_context_bind_memory(ctx, ti.name, ti.dtype, ti.rank, ti.dims, NULL,
                                        S4D_MEMORY_HOST) != S4D_OK)
                rc = fail("%s", s4d_context_errmsg(ctx));
        }
        if (!rc && s4d_context_run(ctx, NULL) != S4D_OK)
            rc = fail("%s", s4d_context_errmsg(ctx));
    }
    if (!rc && o->export_dir)
        rc = export_outputs(o, e, ctx);
    if (!rc && o->compare_dir)
        rc = compare_outputs(o, e, ctx);
    free(lat);
    free(layer_sum);
    free_inputs(&rs);
    s4d_context_destroy(ctx);
    return rc;
}

/* Builds or loads the engine, saves it, runs it; every failure returns 1 after one message. */
static int run_main(const options *o)
{
    s4d_errbuf err = {{0}};
    for (int i = 0; i < o->num_plugins; i++) {
        if (s4d_plugins_load(NULL, o->plugins[i], &err) != S4D_OK)
            return fail("--plugins=%s: %s", o->plugins[i], err.msg);
        if (o->verbose)
            printf("[plugins] loaded %s\n", o->plugins[i]);
    }
    if (o->verbose)
        print_creators();
    s4d_engine *e = NULL;
    if (o->onnx) {
        s4d_build_options bo;
        s4d_build_options_init(&bo);
        bo.device = strcmp(o->device, "cuda") == 0 ? S4D_DEVICE_CUDA : S4D_DEVICE_CPU;
        bo.fp16 = o->fp16;
        bo.input_specs = o->shapes;
        bo.num_input_specs = o->num_shapes;
        bo.allow_fallback = o->allow_fallback;
        bo.tf32 = o->tf32;
        bo.conv_layout = (s4d_conv_layout)o->conv_layout;
        bo.layer_precisions = o->precisions;
        bo.num_layer_precisions = o->num_precisions;
        bo.obey_precisions = o->obey;
        bo.calib_dir = o->calib;
        bo.accuracy = o->accuracy;
        bo.output_tolerances = o->tolerances;
        bo.num_output_tolerances = o->num_tolerances;
        bo.output_metrics = o->metrics;
        bo.num_output_metrics = o->num_metrics;
        if (o->verbose)
            setenv("S4D_BUILD_LOG", "1", 1); /* the fp16 guard's progress on stderr */
        double t0 = now_ms();
        if (s4d_engine_build_onnx_file(o->onnx, &bo, &e, &err) != S4D_OK)
            return fail("%s", err.msg);
        printf("[build] %s: %d layers in %.1f ms\n", o->onnx, s4d_engine_num_layers(e),
               now_ms() - t0);
    } else {
        if (o->fp16 || o->num_shapes || o->allow_fallback || o->tf32 || o->num_precisions ||
            o->obey || o->calib || o->accuracy > 0 || o->num_tolerances ||
            o->num_metrics || o->conv_layout)
            return fail("--fp16, --shapes, --allowFallback, --tf32, --convLayout, --layerPrecisions, "
                        "--precisionConstraints, --calib and --accuracy apply when building "
                        "(--onnx); a loaded engine keeps what it was built with");
        if (s4d_engine_load_file(o->load_engine, NULL, &e, &err) != S4D_OK)
            return fail("%s", err.msg);
        if (o->device_given && strcmp(device_name(s4d_engine_device(e)), o->device) != 0) {
            int r = fail("--device=%s, but %s was built for %s", o->device, o->load_engine,
                         device_name(s4d_engine_device(e)));
            s4d_engine_destroy(e);
            return r;
        }
        printf("[load] %s: %d layers\n", o->load_engine, s4d_engine_num_layers(e));
    }
    const char *report = s4d_engine_precision_report(e);
    for (const char *q = report; q && *q;) {
        const char *nl = strchr(q, '\n');
        int n = nl ? (int)(nl - q) : (int)strlen(q);
        printf("[precision] %.*s\n", n, q);
        q += n + (nl ? 1 : 0);
    }
    int rc = 0;
    if (o->save_engine) {
        if (s4d_engine_save(e, o->save_engine) != S4D_OK)
            rc = fail("--saveEngine=%s: %s", o->save_engine, s4d_engine_errmsg(e));
        else
            printf("[save] %s\n", o->save_engine);
    }
    if (!rc && (o->dump_layers || o->verbose))
        dump_layers(e);
    if (!rc)
        rc = run_all(o, e);
    s4d_engine_destroy(e);
    return rc;
}

int main(int argc, char **argv)
{
    options o;
    int help;
    int rc = parse_args(argc, argv, &o, &help);
    if (!rc && help)
        fputs(usage_text, stdout);
    else if (!rc)
        rc = run_main(&o);
    free_options(&o);
    if (!rc && !help)
        printf("[done] PASSED\n");
    return rc;
}
