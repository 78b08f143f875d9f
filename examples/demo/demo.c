/*
 * s4d_demo: Sparse4Dv3 through the s4d C API, frame after frame.
 *
 * The program a deployment copies. It loads the plugin library, loads the
 * backbone and head engines built by s4dexec, and for every frame: binds the
 * camera inputs by name, runs the backbone, feeds its features and the
 * instance bank (bank_*) to the head, decodes the top-k boxes from the raw
 * head outputs, writes a JSON file and a bird's-eye-view PNG, and feeds the
 * head's bank_*_out back into bank_* for the next frame. With --compare it
 * checks every output and the decoded boxes against reference arrays (the
 * PyTorch golden sequence) and exits 1 when they disagree: the run with the
 * carried state within a drift bound, and the head once more on PyTorch's
 * own inputs of the frame within the strict bound (docs/demo.md says why).
 *
 * Only the public headers include/s4d/engine.h and npy.h are used.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <dlfcn.h>

#include "agree.h"
#include "bev.h"
#include "decode.h"
#include "s4d/engine.h"
#include "s4d/npy.h"

#define MAX_FRAMES 4096
#define MAX_TENSORS 64
#define PATH_LEN 4096

typedef struct options {
    const char *backbone, *head, *plugins, *frames, *out, *agreement;
    int compare, verbose, save_outputs, threads, topk, bev_size, mosaic_scale, no_mosaic;
    double rel_l2, drift_rel_l2, score_threshold, range, max_dt, track_threshold;
    int fp16, rel_l2_given, drift_given;
    double min_matched, match_metres; /* fp16: the box agreement asked of every frame */
    demo_box_tol tol, drift_tol;
} options;

typedef struct frame_entry {
    char dir[256];
    int scene_start;
} frame_entry;

/* One graph: its engine, a context, and per-input where the data comes from. */
typedef struct graph {
    const char *label;
    s4d_engine *engine;
    s4d_context *ctx;
    int num_inputs, num_outputs;
    s4d_tensor_info in[MAX_TENSORS], out[MAX_TENSORS];
    void *state[MAX_TENSORS];   /* head: bank_* buffers (NULL for per-frame inputs) */
    int state_out[MAX_TENSORS]; /* index of the bank_*_out output feeding state[i] */
    const void *bound[MAX_TENSORS]; /* what each input is bound to for this frame */
} graph;

static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("s4d_demo: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static const char *usage_text =
    "usage: s4d_demo --backbone=ENGINE --head=ENGINE --frames=DIR [options]\n"
    "\n"
    "Runs the Sparse4Dv3 engines over a frame sequence with the temporal state carried.\n"
    "DIR/frames.txt lists one frame per line: <subdirectory> <scene_start 0|1> [timestamp];\n"
    "each subdirectory holds the graph inputs as <name>.npy (images, projection, image_wh,\n"
    "timestamp, ego_pose) and, for --compare, the reference outputs under the same names.\n"
    "\n"
    "  --plugins=FILE          plugin library to load first (libs4d_plugins.so)\n"
    "  --out=DIR               write DIR/frame_NNN.json and DIR/frame_NNN.png (default: none)\n"
    "  --compare               check outputs and decoded boxes against DIR's reference\n"
    "  --verbose               with --compare, print every output's errors\n"
    "  --save-outputs          also write every engine output to DIR/frame_NNN/<name>.npy\n"
    "  --topk=N                boxes to decode and compare (default 100, at most the graph's)\n"
    "  --rel-l2=X              largest relative L2 error of an output on PyTorch's inputs\n"
    "                          (default 1e-4); boxes within 1e-3 m, 1e-3 rad, same class and id\n"
    "  --drift-rel-l2=X        largest relative L2 error of the run with the carried state\n"
    "                          (default 1e-2); its boxes within 5e-2 m / rad, same class and id\n"
    "  --fp16                  the engines are fp16 builds: print their precision report and\n"
    "                          hold them to the reduced-precision agreement: on every frame at\n"
    "                          least --min-matched of the reference's top-k boxes have an engine\n"
    "                          box of the same class and track id, centre within --match-metres,\n"
    "                          rank ignored; relative L2 is printed (a limit only when --rel-l2\n"
    "                          or --drift-rel-l2 is given)\n"
    "  --agreement=FILE        with --compare, write each frame's agreement as one JSON line\n"
    "                          (relative L2 per output, boxes matched; both checks)\n"
    "  --min-matched=X         fraction of boxes matched on every frame (default 0.99)\n"
    "  --match-metres=M        centre distance of a matched box (default 0.1)\n"
    "  --threads=N             CPU threads per context (default: all cores)\n"
    "  --score-threshold=X     boxes drawn and counted as detections (default 0.3)\n"
    "  --bev-size=N --range=M  picture size in pixels (800) and half-width in metres (60)\n"
    "  --mosaic-scale=N        enlarge each camera image N times in frame_NNN_cameras.png\n"
    "                          (default 0: about 1700 pixels wide); --no-mosaic: no such file\n"
    "  --max-dt=S              a larger gap between frames is a scene cut (default 2.0)\n"
    "  --track-threshold=X     confidence a new instance needs for a track id (default 0)\n"
    "Exit status: 0 on success and agreement, 1 when agreement fails, 2 on errors.\n";

static int parse_args(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    o->topk = 100;
    o->rel_l2 = 1e-4;
    o->score_threshold = 0.3;
    o->bev_size = 800;
    o->range = 60;
    o->max_dt = 2.0;
    o->tol = (demo_box_tol){.metres = 1e-3, .relative = 1e-4, .radians = 1e-3, .velocity = 1e-3,
                            .score = 1e-4, .tie = 1e-5};
    /* float32 rounding differences in the carried state (1e-7) alone reach 5e-3 over the
       120 tiny frames (docs/demo.md); an unfed or wrongly fed state is off by O(1). */
    o->drift_rel_l2 = 1e-2;
    o->min_matched = 0.99;
    o->match_metres = 0.1;
    o->drift_tol = (demo_box_tol){.metres = 5e-2, .relative = 1e-3, .radians = 5e-2,
                                  .velocity = 5e-2, .score = 1e-3, .tie = 1e-4};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = strchr(a, '=');
        v = v ? v + 1 : "";
#define IS(flag) (strncmp(a, flag "=", sizeof(flag)) == 0)
        char *end = NULL;
        errno = 0;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage_text, stdout);
            exit(0);
        } else if (IS("--backbone")) {
            o->backbone = v;
        } else if (IS("--head")) {
            o->head = v;
        } else if (IS("--plugins")) {
            o->plugins = v;
        } else if (IS("--frames")) {
            o->frames = v;
        } else if (IS("--out")) {
            o->out = v;
        } else if (IS("--agreement")) {
            o->agreement = v;
        } else if (strcmp(a, "--compare") == 0) {
            o->compare = 1;
        } else if (strcmp(a, "--verbose") == 0) {
            o->verbose = 1;
        } else if (strcmp(a, "--fp16") == 0) {
            o->fp16 = 1;
        } else if (strcmp(a, "--save-outputs") == 0) {
            o->save_outputs = 1;
        } else if (strcmp(a, "--no-mosaic") == 0) {
            o->no_mosaic = 1;
        } else if (IS("--topk") || IS("--threads") || IS("--bev-size") || IS("--mosaic-scale")) {
            long n = strtol(v, &end, 10);
            if (!*v || *end || errno || n < 0 || n > 100000 ||
                (IS("--mosaic-scale") && n > 16)) {
                fail("bad value in '%s'", a);
                return -1;
            }
            if (IS("--topk"))
                o->topk = (int)n;
            else if (IS("--threads"))
                o->threads = (int)n;
            else if (IS("--mosaic-scale"))
                o->mosaic_scale = (int)n;
            else
                o->bev_size = (int)n;
        } else if (IS("--rel-l2") || IS("--drift-rel-l2") || IS("--score-threshold") || IS("--range") ||
                   IS("--max-dt") || IS("--track-threshold") || IS("--min-matched") ||
                   IS("--match-metres")) {
            double x = strtod(v, &end);
            if (!*v || *end || errno || !isfinite(x) ||
                (IS("--min-matched") && !(x >= 0 && x <= 1)) ||
                (IS("--match-metres") && !(x > 0))) {
                fail("bad value in '%s'", a);
                return -1;
            }
            if (IS("--rel-l2"))
                o->rel_l2 = x, o->rel_l2_given = 1;
            else if (IS("--drift-rel-l2"))
                o->drift_rel_l2 = x, o->drift_given = 1;
            else if (IS("--min-matched"))
                o->min_matched = x;
            else if (IS("--match-metres"))
                o->match_metres = x;
            else if (IS("--score-threshold"))
                o->score_threshold = x;
            else if (IS("--range"))
                o->range = x;
            else if (IS("--max-dt"))
                o->max_dt = x;
            else
                o->track_threshold = x;
        } else {
            fail("unknown argument '%s' (see --help)", a);
            return -1;
        }
#undef IS
    }
    if (!o->backbone || !o->head || !o->frames) {
        fail("--backbone, --head and --frames are required (see --help)");
        return -1;
    }
    if (o->topk < 1) {
        fail("--topk must be at least 1");
        return -1;
    }
    if (o->fp16) {
        /* float16 is not float32 rounding: output errors are reported, and
         * bound only when asked; the boxes carry the verdict */
        if (!o->rel_l2_given)
            o->rel_l2 = INFINITY;
        if (!o->drift_given)
            o->drift_rel_l2 = INFINITY;
    }
    return 0;
}

static int read_frames(const char *dir, frame_entry *frames, int *count)
{
    char path[PATH_LEN + 320];
    snprintf(path, sizeof path, "%s/frames.txt", dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        fail("cannot open '%s': %s", path, strerror(errno));
        return -1;
    }
    char line[1024];
    int n = 0, lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '#' || *p == '\n' || *p == '\0')
            continue;
        if (n == MAX_FRAMES) {
            fail("%s: more than %d frames", path, MAX_FRAMES);
            fclose(f);
            return -1;
        }
        int start = 0;
        if (sscanf(p, "%255s %d", frames[n].dir, &start) != 2 || (start != 0 && start != 1) ||
            strstr(frames[n].dir, "..") || strpbrk(frames[n].dir, "\"\\")) {
            fail("%s:%d: expected '<subdirectory> <0|1> [timestamp]'", path, lineno);
            fclose(f);
            return -1;
        }
        frames[n].scene_start = start;
        n++;
    }
    fclose(f);
    if (n == 0) {
        fail("%s lists no frames", path);
        return -1;
    }
    *count = n;
    return 0;
}

static int find_output(const graph *g, const char *name)
{
    for (int i = 0; i < g->num_outputs; i++)
        if (strcmp(g->out[i].name, name) == 0)
            return i;
    return -1;
}

static int find_input(const graph *g, const char *name)
{
    for (int i = 0; i < g->num_inputs; i++)
        if (strcmp(g->in[i].name, name) == 0)
            return i;
    return -1;
}

static int open_graph(graph *g, const char *label, const char *path, int threads)
{
    memset(g, 0, sizeof *g);
    g->label = label;
    s4d_errbuf err = {{0}};
    s4d_load_options lo;
    s4d_load_options_init(&lo);
    s4d_status st = s4d_engine_load_file(path, &lo, &g->engine, &err);
    if (st != S4D_OK) {
        fail("loading the %s engine '%s': %s (%s)", label, path, err.msg, s4d_status_string(st));
        return -1;
    }
    g->num_inputs = s4d_engine_num_inputs(g->engine);
    g->num_outputs = s4d_engine_num_outputs(g->engine);
    if (g->num_inputs > MAX_TENSORS || g->num_outputs > MAX_TENSORS) {
        fail("%s engine: %d inputs, %d outputs (this program takes %d)", label, g->num_inputs,
             g->num_outputs, MAX_TENSORS);
        return -1;
    }
    for (int i = 0; i < g->num_inputs; i++)
        s4d_engine_input_info(g->engine, i, &g->in[i]);
    for (int i = 0; i < g->num_outputs; i++)
        s4d_engine_output_info(g->engine, i, &g->out[i]);
    s4d_context_options co;
    s4d_context_options_init(&co);
    co.num_threads = threads;
    st = s4d_context_create(g->engine, &co, &g->ctx, &err);
    if (st != S4D_OK) {
        fail("%s engine: creating a context: %s", label, err.msg);
        return -1;
    }
    return 0;
}

static void close_graph(graph *g)
{
    for (int i = 0; i < MAX_TENSORS; i++)
        free(g->state[i]);
    s4d_context_destroy(g->ctx);
    s4d_engine_destroy(g->engine);
}

static int64_t numel(const s4d_tensor_info *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->rank; d++)
        n *= t->dims[d];
    return n;
}

/*
 * The instance bank's initial value, as the head defines "no history":
 * valid = 0 makes the graph ignore every other field; track ids -1 and an
 * identity ego pose keep the values meaningful for a reader.
 */
static void bank_initial(const s4d_tensor_info *t, void *data)
{
    memset(data, 0, t->bytes);
    if (strcmp(t->name, "bank_track_id") == 0 && t->dtype == S4D_DTYPE_INT64) {
        for (int64_t i = 0; i < numel(t); i++)
            ((int64_t *)data)[i] = -1;
    } else if (strcmp(t->name, "bank_ego_pose") == 0 && t->dtype == S4D_DTYPE_FLOAT32 &&
               numel(t) % 16 == 0) {
        for (int64_t m = 0; m < numel(t) / 16; m++)
            for (int k = 0; k < 4; k++)
                ((float *)data)[m * 16 + k * 5] = 1.0f;
    }
}

/* Every bank_X input must have a bank_X_out output of the same type and shape. */
static int setup_state(graph *g)
{
    for (int i = 0; i < g->num_inputs; i++) {
        const s4d_tensor_info *t = &g->in[i];
        if (strncmp(t->name, "bank_", 5) != 0)
            continue;
        char name[256];
        snprintf(name, sizeof name, "%s_out", t->name);
        int o = find_output(g, name);
        if (o < 0) {
            fail("head engine: state input '%s' has no output '%s'", t->name, name);
            return -1;
        }
        const s4d_tensor_info *u = &g->out[o];
        if (u->dtype != t->dtype || u->bytes != t->bytes) {
            fail("head engine: '%s' (%s, %zu bytes) cannot feed '%s' (%s, %zu bytes)", u->name,
                 s4d_dtype_name(u->dtype), u->bytes, t->name, s4d_dtype_name(t->dtype), t->bytes);
            return -1;
        }
        g->state[i] = malloc(t->bytes ? t->bytes : 1);
        if (!g->state[i]) {
            fail("out of memory for the state '%s'", t->name);
            return -1;
        }
        g->state_out[i] = o;
        bank_initial(t, g->state[i]);
    }
    return 0;
}

static int load_npy_for(const char *dir, const s4d_tensor_info *t, s4d_npy *a)
{
    char path[PATH_LEN + 320];
    s4d_errbuf err = {{0}};
    snprintf(path, sizeof path, "%s/%s.npy", dir, t->name);
    s4d_status st = s4d_npy_load(path, a, &err);
    if (st != S4D_OK) {
        fail("%s", err.msg[0] ? err.msg : path);
        return -1;
    }
    int same = a->dtype == t->dtype && a->rank == t->rank;
    for (int d = 0; same && d < t->rank; d++)
        same = a->dims[d] == t->dims[d];
    if (!same) {
        char want[128] = "", got[128] = "";
        for (int d = 0; d < t->rank; d++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? "x" : "",
                     (long long)t->dims[d]);
        for (int d = 0; d < a->rank; d++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? "x" : "",
                     (long long)a->dims[d]);
        fail("%s: %s [%s] where the engine's '%s' is %s [%s]", path, s4d_dtype_name(a->dtype),
             got, t->name, s4d_dtype_name(t->dtype), want);
        s4d_npy_free(a);
        return -1;
    }
    return 0;
}

/*
 * Binds a graph's inputs: the state buffers, `feed` (outputs of an earlier
 * graph, by name) and the rest from the frame's .npy files, kept in `held`.
 */
static int bind_inputs(graph *g, const graph *feed, int use_state, const char *frame_dir,
                       s4d_npy *held, int *num_held)
{
    for (int i = 0; i < g->num_inputs; i++) {
        const s4d_tensor_info *t = &g->in[i];
        const void *data = use_state ? g->state[i] : NULL;
        int o = feed ? find_output(feed, t->name) : -1;
        if (!data && o >= 0) {
            if (s4d_context_output(feed->ctx, t->name, &data, NULL) != S4D_OK) {
                fail("%s engine: output '%s': %s", feed->label, t->name,
                     s4d_context_errmsg(feed->ctx));
                return -1;
            }
        }
        if (!data) {
            if (load_npy_for(frame_dir, t, &held[*num_held]) != 0)
                return -1;
            data = held[(*num_held)++].data;
        }
        g->bound[i] = data;
        s4d_status st = s4d_context_bind(g->ctx, t->name, t->dtype, t->rank, t->dims, (void *)data);
        if (st != S4D_OK) {
            fail("%s engine: binding '%s': %s", g->label, t->name, s4d_context_errmsg(g->ctx));
            return -1;
        }
    }
    return 0;
}

static int run_graph(graph *g, double *ms)
{
    double t0 = now_ms();
    s4d_status st = s4d_context_run(g->ctx, NULL);
    *ms = now_ms() - t0;
    if (st != S4D_OK) {
        fail("%s engine: run failed: %s (%s)", g->label, s4d_context_errmsg(g->ctx),
             s4d_status_string(st));
        return -1;
    }
    return 0;
}

static const float *head_output(graph *g, const char *name, int64_t rank2_dim, int64_t *rows)
{
    int o = find_output(g, name);
    const void *data = NULL;
    if (o < 0 || g->out[o].dtype != S4D_DTYPE_FLOAT32 || g->out[o].rank != 3 ||
        g->out[o].dims[0] != 1 || (rank2_dim > 0 && g->out[o].dims[2] != rank2_dim) ||
        s4d_context_output(g->ctx, name, &data, NULL) != S4D_OK) {
        if (rank2_dim > 0)
            fail("head engine: no float32 output '%s' of shape [1, A, %lld]", name,
                 (long long)rank2_dim);
        else
            fail("head engine: no float32 output '%s' of shape [1, A, C]", name);
        return NULL;
    }
    *rows = g->out[o].dims[1];
    return data;
}

/* A scalar of a state buffer (element 0), as double; NAN when absent. */
static double state_scalar(const graph *g, const char *name)
{
    int i = find_input(g, name);
    if (i < 0 || !g->state[i])
        return NAN;
    switch (g->in[i].dtype) {
    case S4D_DTYPE_FLOAT32: return ((const float *)g->state[i])[0];
    case S4D_DTYPE_INT64: return (double)((const int64_t *)g->state[i])[0];
    default: return NAN;
    }
}

static int write_json(const char *path, int frame, const frame_entry *fe, double timestamp,
                      int history, const demo_box *boxes, int n)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fail("cannot write '%s': %s", path, strerror(errno));
        return -1;
    }
    /* read_frames() refused quotes and backslashes in directory names */
    fprintf(f, "{\n  \"frame\": %d,\n  \"source\": \"%s\",\n", frame, fe->dir);
    if (isfinite(timestamp))
        fprintf(f, "  \"timestamp\": %.6f,\n", timestamp);
    else
        fprintf(f, "  \"timestamp\": null,\n");
    fprintf(f, "  \"history\": %s,\n  \"boxes\": [", history ? "true" : "false");
    for (int i = 0; i < n; i++) {
        const demo_box *b = &boxes[i];
        fprintf(f,
                "%s\n    {\"x\": %.4f, \"y\": %.4f, \"z\": %.4f, \"w\": %.4f, \"l\": %.4f, "
                "\"h\": %.4f, \"yaw\": %.5f, \"vx\": %.4f, \"vy\": %.4f, \"score\": %.6f, "
                "\"class\": %d, \"track_id\": %lld}",
                i ? "," : "", b->x, b->y, b->z, b->w, b->l, b->h, b->yaw, b->vx, b->vy, b->score,
                b->cls, (long long)b->track_id);
    }
    fprintf(f, "\n  ]\n}\n");
    if (fclose(f) != 0) {
        fail("error writing '%s'", path);
        return -1;
    }
    return 0;
}

/* Worst output of a graph against the frame's reference arrays. */
typedef struct worst {
    double rel_l2, max_abs;
    char name[64];
    int failed;
    int64_t moved; /* rows matched to a different position by track id */
    int num;       /* every output's relative L2, for --agreement */
    char names[MAX_TENSORS][64];
    double values[MAX_TENSORS];
} worst;

/*
 * Row identities of the outputs whose rows are instances: the engine's and
 * the reference's track id of every row. Where PyTorch's scores tie, the
 * engine may order the same instances differently (TopK of equal values),
 * and a reordered instance bank carries that order into the next frame, so
 * rows are compared instance by instance, matched by track id.
 */
typedef struct row_ids {
    int64_t n;
    const int64_t *got, *want;
} row_ids;

enum { ROWS_INSTANCES, ROWS_BANK, ROWS_DETECTIONS, ROWS_KINDS };

static const row_ids *rows_for(const s4d_tensor_info *t, const row_ids rows[ROWS_KINDS])
{
    if (t->rank < 2 || t->dims[0] != 1)
        return NULL;
    int bank = strncmp(t->name, "bank_", 5) == 0;
    for (int k = 0; k < ROWS_KINDS; k++)
        if (rows[k].n == t->dims[1] && rows[k].got && rows[k].want && bank == (k == ROWS_BANK))
            return &rows[k];
    return NULL;
}

static int compare_outputs(graph *g, const char *dir, double limit, int verbose,
                           const row_ids rows[ROWS_KINDS], worst *w)
{
    for (int o = 0; o < g->num_outputs; o++) {
        const s4d_tensor_info *t = &g->out[o];
        s4d_npy want;
        if (load_npy_for(dir, t, &want) != 0)
            return -1;
        const void *got = NULL;
        demo_diff d;
        char err[256] = "";
        int rc = s4d_context_output(g->ctx, t->name, &got, NULL) == S4D_OK ? 0 : -1;
        const row_ids *r = rc == 0 && rows ? rows_for(t, rows) : NULL;
        void *aligned = NULL;
        int64_t moved = 0;
        if (r) {
            size_t row_bytes = t->bytes / (size_t)r->n;
            int64_t *perm = malloc((size_t)r->n * sizeof *perm);
            aligned = malloc(t->bytes);
            moved = perm && aligned ? demo_align_rows(r->got, r->want, r->n, perm) : -1;
            for (int64_t i = 0; moved >= 0 && i < r->n; i++)
                memcpy((char *)aligned + i * row_bytes, (const char *)got + perm[i] * row_bytes,
                       row_bytes);
            free(perm);
            if (moved < 0) {
                snprintf(err, sizeof err, "out of memory");
                rc = -1;
            }
            got = aligned;
        }
        if (rc == 0)
            rc = demo_diff_arrays(t->dtype, got, want.data, numel(t), &d, err, sizeof err);
        free(aligned);
        s4d_npy_free(&want);
        if (rc != 0) {
            fail("%s engine: comparing '%s': %s", g->label, t->name, err);
            return -1;
        }
        if (verbose)
            printf("        %-22s relative L2 %9.2e  max abs %9.2e%s\n", t->name, d.rel_l2,
                   d.max_abs, moved ? "  (rows matched by track id)" : "");
        if (moved > w->moved)
            w->moved = moved;
        if (w->num < MAX_TENSORS) {
            snprintf(w->names[w->num], sizeof w->names[0], "%s", t->name);
            w->values[w->num++] = d.rel_l2;
        }
        if (!(d.rel_l2 <= limit)) {
            if (!w->failed)
                fprintf(stderr, "s4d_demo: %s/%s: relative L2 %.3g > %.3g (max abs %.3g)\n", dir,
                        t->name, d.rel_l2, limit, d.max_abs);
            w->failed = 1;
        }
        if (!(d.rel_l2 <= w->rel_l2)) {
            w->rel_l2 = d.rel_l2;
            snprintf(w->name, sizeof w->name, "%s", t->name);
        }
        if (d.max_abs > w->max_abs)
            w->max_abs = d.max_abs;
    }
    return 0;
}

/* Loads DIR/<name>.npy expecting `count` elements of `dtype`. */
static int load_reference(const char *dir, const char *name, s4d_dtype dtype, int64_t count,
                          s4d_npy *a)
{
    char path[PATH_LEN + 320];
    s4d_errbuf err = {{0}};
    snprintf(path, sizeof path, "%s/%s.npy", dir, name);
    if (s4d_npy_load(path, a, &err) != S4D_OK) {
        fail("%s", err.msg);
        return -1;
    }
    if (a->dtype != dtype || a->bytes != (size_t)count * s4d_dtype_size(dtype)) {
        fail("%s: %s with %zu bytes, expected %lld elements of %s", path,
             s4d_dtype_name(a->dtype), a->bytes, (long long)count, s4d_dtype_name(dtype));
        s4d_npy_free(a);
        return -1;
    }
    return 0;
}

/*
 * The track id of every instance by the rule of decode.h, from the
 * reference's bank and the given logits (NULL: the reference's own).
 */
static int reference_instance_ids(const options *o, const char *dir, int64_t a, int64_t nc,
                                  int64_t t_cached, const float *logits, int64_t *ids)
{
    s4d_npy cls = {0}, tid = {0}, valid = {0}, next = {0}, bts = {0}, ts = {0};
    int rc = (logits ? 0 : load_reference(dir, "classification", S4D_DTYPE_FLOAT32, a * nc, &cls)) ||
             load_reference(dir, "bank_track_id", S4D_DTYPE_INT64, t_cached, &tid) ||
             load_reference(dir, "bank_valid", S4D_DTYPE_FLOAT32, 1, &valid) ||
             load_reference(dir, "bank_next_id", S4D_DTYPE_INT64, 1, &next) ||
             load_reference(dir, "bank_timestamp", S4D_DTYPE_FLOAT32, 1, &bts) ||
             load_reference(dir, "timestamp", S4D_DTYPE_FLOAT32, 1, &ts);
    if (rc == 0) {
        double dt = ((const float *)ts.data)[0] - ((const float *)bts.data)[0];
        int hist = ((const float *)valid.data)[0] > 0.5f && fabs(dt) <= o->max_dt;
        /* only the logits matter for track ids */
        const float *lg = logits ? logits : cls.data;
        demo_head_raw raw = {a, nc, lg, lg, lg};
        demo_track_in trk = {hist, t_cached, tid.data, ((const int64_t *)next.data)[0],
                             (float)o->track_threshold};
        char err[256];
        if (demo_track_ids(&raw, &trk, ids, err, sizeof err) != 0) {
            fail("%s: %s", dir, err);
            rc = -1;
        }
    }
    s4d_npy_free(&cls);
    s4d_npy_free(&tid);
    s4d_npy_free(&valid);
    s4d_npy_free(&next);
    s4d_npy_free(&bts);
    s4d_npy_free(&ts);
    return rc ? -1 : 0;
}

/* The reference detections of the frame (boxes, scores, labels, track_ids). */
static int load_reference_boxes(const char *dir, demo_box *want, int n)
{
    static const char *names[4] = {"boxes", "scores", "labels", "track_ids"};
    s4d_npy a[4];
    memset(a, 0, sizeof a);
    int rc = 0;
    for (int k = 0; k < 4 && rc == 0; k++) {
        char path[PATH_LEN + 320];
        s4d_errbuf err = {{0}};
        snprintf(path, sizeof path, "%s/%s.npy", dir, names[k]);
        if (s4d_npy_load(path, &a[k], &err) != S4D_OK) {
            fail("%s", err.msg);
            rc = -1;
        }
    }
    if (rc == 0 && !(a[0].dtype == S4D_DTYPE_FLOAT32 && a[0].rank == 3 && a[0].dims[1] >= n &&
                     a[0].dims[2] >= 9 && a[1].dtype == S4D_DTYPE_FLOAT32 &&
                     a[2].dtype == S4D_DTYPE_INT64 && a[3].dtype == S4D_DTYPE_INT64 &&
                     a[1].bytes / 4 >= (size_t)n && a[2].bytes / 8 >= (size_t)n &&
                     a[3].bytes / 8 >= (size_t)n)) {
        fail("%s: reference detections are not boxes [1,K,10] f32, scores [1,K] f32, labels and "
             "track_ids [1,K] int64 with K >= %d", dir, n);
        rc = -1;
    }
    for (int i = 0; rc == 0 && i < n; i++) {
        const float *b = (const float *)a[0].data + (int64_t)i * a[0].dims[2];
        want[i] = (demo_box){b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8],
                             ((const float *)a[1].data)[i], (int)((const int64_t *)a[2].data)[i],
                             ((const int64_t *)a[3].data)[i]};
    }
    for (int k = 0; k < 4; k++)
        s4d_npy_free(&a[k]);
    return rc;
}

static int ensure_dir(const char *path);

static int save_outputs(graph *g, const char *out, int fi)
{
    char path[PATH_LEN + 320];
    snprintf(path, sizeof path, "%s/frame_%03d", out, fi);
    if (ensure_dir(path) != 0)
        return -1;
    for (int o = 0; o < g->num_outputs; o++) {
        const s4d_tensor_info *t = &g->out[o];
        const void *data = NULL;
        s4d_errbuf err = {{0}};
        snprintf(path, sizeof path, "%s/frame_%03d/%s.npy", out, fi, t->name);
        if (s4d_context_output(g->ctx, t->name, &data, NULL) != S4D_OK ||
            s4d_npy_save(path, t->dtype, t->rank, t->dims, data, &err) != S4D_OK) {
            fail("writing '%s': %s", path, err.msg[0] ? err.msg : s4d_context_errmsg(g->ctx));
            return -1;
        }
    }
    return 0;
}

typedef struct totals {
    int frames, failed;
    double backbone_ms, head_ms, decode_ms, worst_rel_l2, worst_drift;
    double min_matched, min_drift_matched; /* fp16: the worst frame's fraction of boxes matched */
    double min_mapped;                     /* the same with the carried state, ids mapped */
    demo_id_map ids;                       /* engine track id -> PyTorch's, over the run */
    FILE *agreement;                       /* --agreement: one JSON line per frame */
} totals;

/* JSON has no NaN or Infinity: those become null. */
static void json_number(FILE *f, double x)
{
    if (isfinite(x))
        fprintf(f, "%.6e", x);
    else
        fputs("null", f);
}

static void json_check(FILE *f, const char *label, const worst *w, const demo_box_report *rep,
                       int n)
{
    fprintf(f, "\"%s\": {\"rel_l2\": ", label);
    json_number(f, w->rel_l2);
    fprintf(f, ", \"worst_output\": \"%s\", \"boxes\": %d, \"matched\": %d, ", w->name, n,
            n - rep->mismatched);
    if (rep->matched_mapped >= 0)
        fprintf(f, "\"matched_ids_mapped\": %d, ", rep->matched_mapped);
    fputs("\"outputs\": {", f);
    for (int i = 0; i < w->num; i++) {
        fprintf(f, "%s\"%s\": ", i ? ", " : "", w->names[i]);
        json_number(f, w->values[i]);
    }
    fputs("}}", f);
}

/* Decodes the head's current outputs: track ids by `trk`, then the top k. */
static int decode_head(graph *hd, const demo_track_in *trk, const int64_t *ids_given,
                       int num_candidates, int k, int64_t *ids, demo_box *boxes,
                       demo_head_raw *raw)
{
    int64_t a = 0, a2 = 0, a3 = 0;
    memset(raw, 0, sizeof *raw);
    raw->classification = head_output(hd, "classification", 0, &a);
    raw->prediction = head_output(hd, "prediction", DEMO_ANCHOR_DIM, &a2);
    raw->quality = head_output(hd, "quality", DEMO_QUALITY_DIM, &a3);
    if (!raw->classification || !raw->prediction || !raw->quality || a != a2 || a != a3) {
        fail("head engine: classification, prediction and quality disagree on the instance count");
        return -1;
    }
    raw->num_instances = a;
    raw->num_classes = hd->out[find_output(hd, "classification")].dims[2];
    char err[256] = "";
    if (ids_given)
        memcpy(ids, ids_given, (size_t)a * sizeof *ids);
    int n = (ids_given || demo_track_ids(raw, trk, ids, err, sizeof err) == 0)
                ? demo_decode(raw, ids, num_candidates, k, boxes, err, sizeof err)
                : -1;
    if (n < 0)
        fail("%s", err);
    return n;
}

/*
 * The head's current outputs and decoded boxes against the frame's
 * reference, rows matched by track id; `ids` are the engine's instance ids.
 */
static int check_head(const options *o, graph *hd, const char *dir, const demo_head_raw *raw,
                      const int64_t *ids, int64_t t_cached, const demo_box *boxes, demo_box *want,
                      int n, int n_ext, double limit, const demo_box_tol *tol, worst *w,
                      demo_box_report *rep, demo_id_map *ids_map)
{
    int64_t a = raw->num_instances;
    int64_t *ref_ids = malloc((size_t)a * sizeof *ref_ids);
    s4d_npy ref_bank = {0}, ref_det = {0};
    const void *got_bank = NULL, *got_det = NULL;
    int bo = find_output(hd, "bank_track_id_out"), doi = find_output(hd, "track_ids");
    int64_t nk = doi >= 0 ? numel(&hd->out[doi]) : 0;
    if (!ref_ids || bo < 0 || doi < 0) {
        free(ref_ids);
        fail(ref_ids ? "head engine: no outputs 'bank_track_id_out' and 'track_ids'"
                     : "out of memory");
        return -1;
    }
    int ok =
        reference_instance_ids(o, dir, a, raw->num_classes, t_cached, NULL, ref_ids) == 0 &&
        load_reference(dir, "bank_track_id_out", S4D_DTYPE_INT64, t_cached, &ref_bank) == 0 &&
        load_reference(dir, "track_ids", S4D_DTYPE_INT64, nk, &ref_det) == 0 &&
        s4d_context_output(hd->ctx, "bank_track_id_out", &got_bank, NULL) == S4D_OK &&
        s4d_context_output(hd->ctx, "track_ids", &got_det, NULL) == S4D_OK;
    row_ids rows[ROWS_KINDS] = {{a, ids, ref_ids},
                                {t_cached, got_bank, ref_bank.data},
                                {nk, got_det, ref_det.data}};
    if (ok)
        ok = compare_outputs(hd, dir, limit, o->verbose, rows, w) == 0 &&
             load_reference_boxes(dir, want, n_ext) == 0;
    free(ref_ids);
    s4d_npy_free(&ref_bank);
    s4d_npy_free(&ref_det);
    if (!ok)
        return -1;
    demo_compare_boxes(boxes, want, n, n_ext, tol, rep);
    rep->matched_mapped = -1;
    if (ids_map) {
        rep->matched_mapped = demo_match_boxes_mapped(boxes, n, want, n, o->match_metres, ids_map);
        if (rep->matched_mapped < 0) {
            fail("out of memory matching track ids");
            return -1;
        }
    }
    if (o->fp16) {
        int m = demo_match_boxes(boxes, n, want, n, o->match_metres, rep->first_problem,
                                 (int)sizeof rep->first_problem);
        rep->mismatched = n - m;
    }
    return 0;
}

/* fp16: a frame agrees when this fraction of its boxes is matched. */
static int enough_matched(const options *o, const demo_box_report *rep)
{
    return rep->compared > 0 &&
           (double)(rep->compared - rep->mismatched) >= o->min_matched * rep->compared - 1e-9;
}

/*
 * The frame's ground truth, when the frame directory has one: gt_boxes.npy,
 * float32 [M, 11] (x, y, z, w, l, h, yaw, vx, vy, class, track id). *gt is
 * NULL and *n 0 without the file; -1 on a malformed file.
 */
static int load_truth(const char *dir, demo_box **gt, int *n)
{
    char path[PATH_LEN + 320];
    struct stat sb;
    *gt = NULL;
    *n = 0;
    snprintf(path, sizeof path, "%s/gt_boxes.npy", dir);
    if (stat(path, &sb) != 0)
        return 0;
    s4d_npy a;
    s4d_errbuf err = {{0}};
    if (s4d_npy_load(path, &a, &err) != S4D_OK) {
        fail("%s", err.msg);
        return -1;
    }
    if (a.dtype != S4D_DTYPE_FLOAT32 || a.rank != 2 || a.dims[1] != 11 || a.dims[0] > 100000) {
        fail("%s: expected float32 [M, 11] ground-truth boxes", path);
        s4d_npy_free(&a);
        return -1;
    }
    int m = (int)a.dims[0];
    *gt = calloc(m ? (size_t)m : 1, sizeof **gt);
    if (!*gt) {
        s4d_npy_free(&a);
        fail("out of memory");
        return -1;
    }
    for (int i = 0; i < m; i++) {
        const float *r = (const float *)a.data + (size_t)i * 11;
        (*gt)[i] = (demo_box){r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], 1.0f,
                              (int)r[9], (int64_t)r[10]};
    }
    *n = m;
    s4d_npy_free(&a);
    return 0;
}

/*
 * The pictures of a frame: the bird's-eye view, and the cameras with the
 * boxes projected when the frame directory holds raw_images.npy (uint8
 * [N, 3, H, W], the images before normalisation) and the projection input.
 */
static int write_pictures(const options *o, graph *hd, const char *dir, int fi,
                          const demo_box *boxes, int n, const demo_box *gt, int n_gt)
{
    char path[PATH_LEN + 320], perr[256] = "";
    snprintf(path, sizeof path, "%s/frame_%03d.png", o->out, fi);
    if (bev_write_png(path, boxes, n, gt, n_gt, (float)o->score_threshold, o->bev_size,
                      (float)o->range, perr, sizeof perr) != 0) {
        fail("%s", perr);
        return -1;
    }
    if (o->no_mosaic)
        return 0;
    char raw_path[PATH_LEN + 320];
    struct stat sb;
    snprintf(raw_path, sizeof raw_path, "%s/raw_images.npy", dir);
    int pi = find_input(hd, "projection");
    if (stat(raw_path, &sb) != 0 || pi < 0)
        return 0;
    const s4d_tensor_info *pt = &hd->in[pi];
    s4d_npy raw;
    s4d_errbuf err = {{0}};
    if (s4d_npy_load(raw_path, &raw, &err) != S4D_OK) {
        fail("%s", err.msg);
        return -1;
    }
    int rc = -1;
    if (raw.dtype != S4D_DTYPE_UINT8 || raw.rank != 4 || raw.dims[1] != 3 ||
        pt->dtype != S4D_DTYPE_FLOAT32 || pt->rank != 4 || pt->dims[1] != raw.dims[0]) {
        fail("%s: expected uint8 [N, 3, H, W] for the head's %lld cameras", raw_path,
             pt->rank == 4 ? (long long)pt->dims[1] : -1LL);
    } else {
        int cams = (int)raw.dims[0], h = (int)raw.dims[2], w = (int)raw.dims[3];
        int scale = o->mosaic_scale;
        if (scale == 0)
            scale = w > 0 && 1700 / (3 * w) > 1 ? 1700 / (3 * w) + 1 : 1;
        if (scale > 16)
            scale = 16;
        snprintf(path, sizeof path, "%s/frame_%03d_cameras.png", o->out, fi);
        rc = mosaic_write_png(path, raw.data, cams, h, w, hd->bound[pi], boxes, n, gt, n_gt,
                              (float)o->score_threshold, scale, perr, sizeof perr);
        if (rc != 0)
            fail("%s", perr);
    }
    s4d_npy_free(&raw);
    return rc;
}

static int run_frame(const options *o, graph *bb, graph *hd, int fi, const frame_entry *fe,
                     int num_candidates, demo_box *boxes, demo_box *want, int64_t *ids,
                     totals *tot)
{
    char dir[PATH_LEN];
    snprintf(dir, sizeof dir, "%s/%s", o->frames, fe->dir);
    /* room for the inputs of three bindings of at most MAX_TENSORS inputs
     * each: the backbone, the head, the head on the reference inputs */
    s4d_npy held[3 * MAX_TENSORS];
    int num_held = 0, rc = -1;
    memset(held, 0, sizeof held);
    double t_bb = 0, t_hd = 0, t_dec = 0;
    int64_t *cached = NULL, *ids_strict = NULL;
    demo_box *gt = NULL;
    int n_gt = 0;

    if (bind_inputs(bb, NULL, 0, dir, held, &num_held) != 0 || run_graph(bb, &t_bb) != 0 ||
        bind_inputs(hd, bb, 1, dir, held, &num_held) != 0)
        goto done;

    /* Scene cut: the frame list says so, or the gap is beyond the history
     * limit. valid = 0 is the graph's own "no history"; next_id is kept so
     * that track ids stay unique over the whole run. */
    int ts_in = find_input(hd, "timestamp"), vi = find_input(hd, "bank_valid");
    double ts = NAN, prev_ts = state_scalar(hd, "bank_timestamp");
    if (ts_in >= 0 && hd->in[ts_in].dtype == S4D_DTYPE_FLOAT32)
        ts = ((const float *)hd->bound[ts_in])[0];
    int hist = state_scalar(hd, "bank_valid") > 0.5;
    if (hist && (fe->scene_start || !(fabs(ts - prev_ts) <= o->max_dt))) {
        printf("  frame %d: scene cut (%s): the instance bank starts afresh\n", fi,
               fe->scene_start ? "frame list" : "time gap");
        if (vi >= 0)
            memset(hd->state[vi], 0, hd->in[vi].bytes);
        hist = 0;
    }
    /* the track-id rule needs the bank as it was before this frame */
    int ti = find_input(hd, "bank_track_id");
    int64_t t_cached = ti >= 0 ? numel(&hd->in[ti]) : 0;
    cached = malloc((size_t)(t_cached ? t_cached : 1) * sizeof *cached);
    if (!cached) {
        fail("out of memory");
        goto done;
    }
    if (ti >= 0)
        memcpy(cached, hd->state[ti], (size_t)t_cached * sizeof *cached);
    demo_track_in trk = {hist, t_cached, cached, (int64_t)state_scalar(hd, "bank_next_id"),
                         (float)o->track_threshold};

    if (run_graph(hd, &t_hd) != 0)
        goto done;
    double t0 = now_ms();
    int n = o->topk < num_candidates ? o->topk : num_candidates;
    /* a few boxes past the top n, for scores that tie across rank n */
    int n_ext = n + 16 < num_candidates ? n + 16 : num_candidates;
    demo_head_raw raw;
    int got = decode_head(hd, &trk, NULL, num_candidates, n_ext, ids, boxes, &raw);
    t_dec = now_ms() - t0;
    if (got != n_ext)
        goto done;
    int detections = 0;
    for (int i = 0; i < n; i++)
        detections += boxes[i].score >= o->score_threshold;
    if (load_truth(dir, &gt, &n_gt) != 0)
        goto done;

    if (o->out && o->save_outputs && (save_outputs(bb, o->out, fi) != 0 ||
                                      save_outputs(hd, o->out, fi) != 0))
        goto done;
    if (o->out) {
        char path[PATH_LEN + 320];
        snprintf(path, sizeof path, "%s/frame_%03d.json", o->out, fi);
        if (write_json(path, fi, fe, ts, hist, boxes, n) != 0 ||
            write_pictures(o, hd, dir, fi, boxes, n, gt, n_gt) != 0)
            goto done;
    }

    /*
     * Agreement, twice. The carried run (this program's own state) may drift
     * from PyTorch's sequence: float32 rounding in the state is amplified by
     * the model from frame to frame (PyTorch fed the engine's state drifts
     * the same way), so it is held to the looser drift bound. The strict
     * check runs the head again on PyTorch's own inputs of this frame
     * (features and bank), so both sides compute the same function.
     */
    worst drift = {0, 0, "", 0, 0}, w = {0, 0, "", 0, 0};
    demo_box_report drep, rep;
    memset(&drep, 0, sizeof drep);
    memset(&rep, 0, sizeof rep);
    if (o->compare) {
        worst bbw = {0, 0, "", 0, 0};
        if (o->verbose)
            printf("      frame %d, carried state:\n", fi);
        if (compare_outputs(bb, dir, o->rel_l2, o->verbose, NULL, &bbw) != 0 ||
            check_head(o, hd, dir, &raw, ids, t_cached, boxes, want, n, n_ext, o->drift_rel_l2,
                       &o->drift_tol, &drift, &drep, &tot->ids) != 0)
            goto done;
        w = bbw; /* the backbone sees the same images on both sides: strict */
    }

    /* the temporal state: this frame's bank_*_out is the next frame's bank_* */
    for (int i = 0; i < hd->num_inputs; i++) {
        if (!hd->state[i])
            continue;
        const void *src = NULL;
        if (s4d_context_output(hd->ctx, hd->out[hd->state_out[i]].name, &src, NULL) != S4D_OK) {
            fail("head engine: %s", s4d_context_errmsg(hd->ctx));
            goto done;
        }
        memcpy(hd->state[i], src, hd->in[i].bytes);
    }

    if (o->compare) {
        double t_strict;
        ids_strict = malloc((size_t)raw.num_instances * sizeof *ids_strict);
        if (!ids_strict) {
            fail("out of memory");
            goto done;
        }
        if (o->verbose)
            printf("      frame %d, PyTorch's state:\n", fi);
        if (bind_inputs(hd, NULL, 0, dir, held, &num_held) != 0 || run_graph(hd, &t_strict) != 0)
            goto done;
        int64_t a = raw.num_instances;
        const float *logits = head_output(hd, "classification", 0, &a);
        if (!logits || reference_instance_ids(o, dir, a, raw.num_classes, t_cached, logits,
                                              ids_strict) != 0 ||
            decode_head(hd, NULL, ids_strict, num_candidates, n_ext, ids_strict, boxes, &raw) !=
                n_ext ||
            check_head(o, hd, dir, &raw, ids_strict, t_cached, boxes, want, n, n_ext, o->rel_l2,
                       &o->tol, &w, &rep, NULL) != 0)
            goto done;
        if (o->fp16) {
            if (!enough_matched(o, &rep) || !enough_matched(o, &drep))
                fprintf(stderr, "s4d_demo: frame %d: boxes matched %d/%d on PyTorch's inputs, "
                        "%d/%d with the carried state (at least %.0f%% asked)%s%s\n", fi,
                        n - rep.mismatched, n, n - drep.mismatched, n, 100 * o->min_matched,
                        (drep.first_problem[0] || rep.first_problem[0]) ? "; first: " : "",
                        drep.first_problem[0] ? drep.first_problem : rep.first_problem);
        } else if (w.failed || rep.mismatched)
            fprintf(stderr, "s4d_demo: frame %d: %d of %d boxes disagree with PyTorch%s%s\n", fi,
                    rep.mismatched, n, rep.first_problem[0] ? "; first: " : "",
                    rep.first_problem);
        if (!o->fp16 && (drift.failed || drep.mismatched))
            fprintf(stderr, "s4d_demo: frame %d: the carried state drifted beyond the bound: "
                    "%d of %d boxes%s%s\n", fi, drep.mismatched, n,
                    drep.first_problem[0] ? "; first: " : "", drep.first_problem);
        if (w.moved || drift.moved)
            printf("  frame %d: up to %lld instance rows in another order than PyTorch's "
                   "(equal scores), compared by track id\n", fi,
                   (long long)(w.moved > drift.moved ? w.moved : drift.moved));
    }

    int agree = !w.failed && !rep.mismatched && !drift.failed && !drep.mismatched;
    if (o->fp16)
        agree = !w.failed && !drift.failed && enough_matched(o, &rep) && enough_matched(o, &drep);
    char agreement[200];
    if (o->compare && o->fp16)
        snprintf(agreement, sizeof agreement, "%-5s %9.2e %-19s %6.1f%% %4d/%-4d  %9.2e %6.1f%% "
                 "%4d/%-4d", agree ? "ok" : "FAIL", w.rel_l2, w.name,
                 100.0 * (n - rep.mismatched) / n, n - rep.mismatched, n, drift.rel_l2,
                 100.0 * (n - drep.mismatched) / n, n - drep.mismatched, n);
    else if (o->compare)
        snprintf(agreement, sizeof agreement, "%-5s %9.2e %-19s %8.1e %4d/%-4d %3d  %9.2e %8.1e",
                 agree ? "ok" : "FAIL", w.rel_l2, w.name, rep.max_metres, n - rep.mismatched, n,
                 rep.tied_boxes, drift.rel_l2, drep.max_metres);
    else
        snprintf(agreement, sizeof agreement, "(not compared)");
    char truth[16] = "-";
    if (gt)
        snprintf(truth, sizeof truth, "%d", n_gt);
    printf("%5d %5s %4d %5d %4s %11.1f %8.1f %9.2f  %s\n", fi, hist ? "yes" : "no", n, detections,
           truth, t_bb, t_hd, t_dec, agreement);
    fflush(stdout);
    tot->frames++;
    tot->failed += !agree;
    tot->backbone_ms += t_bb;
    tot->head_ms += t_hd;
    tot->decode_ms += t_dec;
    if (!(w.rel_l2 <= tot->worst_rel_l2))
        tot->worst_rel_l2 = w.rel_l2;
    if (!(drift.rel_l2 <= tot->worst_drift))
        tot->worst_drift = drift.rel_l2;
    if (o->compare && tot->agreement) {
        fprintf(tot->agreement, "{\"frame\": %d, \"history\": %s, \"agree\": %s, ", fi,
                hist ? "true" : "false", agree ? "true" : "false");
        json_check(tot->agreement, "inputs", &w, &rep, n);
        fputs(", ", tot->agreement);
        json_check(tot->agreement, "carried", &drift, &drep, n);
        fputs("}\n", tot->agreement);
        fflush(tot->agreement);
    }
    if (o->compare && n > 0) {
        double fm = (double)(n - rep.mismatched) / n, fd = (double)(n - drep.mismatched) / n;
        if (tot->frames == 1 || fm < tot->min_matched)
            tot->min_matched = fm;
        if (tot->frames == 1 || fd < tot->min_drift_matched)
            tot->min_drift_matched = fd;
        double fmap = (double)drep.matched_mapped / n;
        if (tot->frames == 1 || fmap < tot->min_mapped)
            tot->min_mapped = fmap;
    }
    rc = 0;
done:
    free(cached);
    free(ids_strict);
    free(gt);
    for (int i = 0; i < num_held; i++)
        s4d_npy_free(&held[i]);
    return rc;
}

/*
 * The precision report of an fp16 engine (the accuracy guard's choice).
 * s4d_engine_precision_report() is new in libs4d 0.3; it is looked up at run
 * time so that this program still runs against an older library, which
 * builds float32 engines only and has no report to give.
 */
typedef const char *(*precision_report_fn)(const s4d_engine *);

static int print_precision_reports(const graph *bb, const graph *hd)
{
    precision_report_fn report = NULL;
    void *self = dlopen(NULL, RTLD_LAZY);
    void *sym = self ? dlsym(self, "s4d_engine_precision_report") : NULL;
    memcpy(&report, &sym, sizeof report); /* POSIX: a data pointer to a function pointer */
    if (!report) {
        fail("--fp16: this libs4d has no precision report (s4d_engine_precision_report): it "
             "builds float32 engines only");
        if (self)
            dlclose(self);
        return -1;
    }
    const graph *g[2] = {bb, hd};
    for (int i = 0; i < 2; i++) {
        const char *text = report(g[i]->engine);
        if (!text) {
            fail("--fp16: the %s engine is a float32 engine (no precision report); build it "
                 "with s4dexec --fp16", g[i]->label);
            dlclose(self);
            return -1;
        }
        printf("precision report of the %s engine:\n%s%s", g[i]->label, text,
               text[0] && text[strlen(text) - 1] == '\n' ? "" : "\n");
    }
    if (self)
        dlclose(self);
    return 0;
}

static int ensure_dir(const char *path)
{
    if (mkdir(path, 0777) == 0 || errno == EEXIST)
        return 0;
    fail("cannot create '%s': %s", path, strerror(errno));
    return -1;
}

int main(int argc, char **argv)
{
    options o;
    if (parse_args(argc, argv, &o) != 0)
        return 2;
    static frame_entry frames[MAX_FRAMES];
    int num_frames = 0;
    if (read_frames(o.frames, frames, &num_frames) != 0)
        return 2;
    if (o.out && ensure_dir(o.out) != 0)
        return 2;
    if (o.plugins) {
        s4d_errbuf err = {{0}};
        s4d_status st = s4d_plugins_load(NULL, o.plugins, &err);
        if (st != S4D_OK) {
            fail("loading plugins '%s': %s (%s)", o.plugins, err.msg, s4d_status_string(st));
            return 2;
        }
    }
    static graph bb, hd;
    int status = 2;
    demo_box *boxes = NULL, *want = NULL;
    int64_t *ids = NULL;
    totals tot = {0};
    if (open_graph(&bb, "backbone", o.backbone, o.threads) != 0 ||
        open_graph(&hd, "head", o.head, o.threads) != 0 || setup_state(&hd) != 0)
        goto out;
    int bo = find_output(&hd, "boxes");
    int co = find_output(&hd, "classification");
    if (co < 0 || hd.out[co].rank != 3) {
        fail("head engine: no output 'classification' [1, A, classes]");
        goto out;
    }
    /* the decoder's candidate count is the graph's own (its boxes output) */
    int num_candidates = bo >= 0 && hd.out[bo].rank == 3 ? (int)hd.out[bo].dims[1]
                                                          : (int)hd.out[co].dims[1];
    int64_t a = hd.out[co].dims[1];
    if (num_candidates < 1 || num_candidates > a) {
        fail("head engine: %d decoder candidates ('boxes') for %lld instances", num_candidates,
             (long long)a);
        goto out;
    }
    boxes = calloc((size_t)num_candidates, sizeof *boxes);
    want = calloc((size_t)num_candidates, sizeof *want);
    ids = calloc((size_t)a, sizeof *ids);
    if (!boxes || !want || !ids) {
        fail("out of memory");
        goto out;
    }
    if (o.topk > num_candidates)
        printf("note: the head's decoder keeps %d candidates: decoding the top %d, not %d\n",
               num_candidates, num_candidates, o.topk);
    printf("engines: backbone %s, head %s (%lld instances, device %s), %d frames\n", o.backbone,
           o.head, (long long)a, s4d_engine_device(hd.engine) == S4D_DEVICE_CUDA ? "cuda" : "cpu",
           num_frames);
    if (o.fp16 && print_precision_reports(&bb, &hd) != 0)
        goto out;
    if (o.compare && o.fp16) {
        printf("agreement of the fp16 engines with float32 PyTorch: output relative L2, and the\n"
               "top-%d boxes matched (same class and track id, centre within %.3g m), at least "
               "%.0f%% on every frame\n", o.topk < num_candidates ? o.topk : num_candidates,
               o.match_metres, 100 * o.min_matched);
        printf("%60s%-55s%s\n", "", "| on PyTorch's inputs:", "| carried state:");
        printf("%5s %5s %4s %5s %4s %11s %8s %9s  %-5s %9s %-19s %17s  %9s %17s\n", "frame",
               "hist", "topk", ">=thr", "gt", "backbone ms", "head ms", "decode ms", "agree",
               "rel L2", "(worst output)", "boxes matched", "rel L2", "boxes matched");
    } else {
        if (o.compare)
            printf("%63s%-47s %s\n", "", "| on PyTorch's inputs:", "| carried state:");
        printf("%5s %5s %4s %5s %4s %11s %8s %9s  %-5s %9s %-19s %8s %9s %3s  %9s %8s\n",
               "frame", "hist", "topk", ">=thr", "gt", "backbone ms", "head ms", "decode ms",
               "agree", "rel L2", "(worst output)", "box err", "match", "tie", "rel L2",
               "box err");
    }
    if (o.agreement && !(tot.agreement = fopen(o.agreement, "w"))) {
        fail("cannot write '%s': %s", o.agreement, strerror(errno));
        goto out;
    }
    for (int fi = 0; fi < num_frames; fi++)
        if (run_frame(&o, &bb, &hd, fi, &frames[fi], num_candidates, boxes, want, ids, &tot) != 0)
            goto out;
    printf("%d frames: backbone %.1f ms, head %.1f ms, decode %.2f ms per frame (mean)\n",
           tot.frames, tot.backbone_ms / tot.frames, tot.head_ms / tot.frames,
           tot.decode_ms / tot.frames);
    if (o.compare && o.fp16) {
        printf("agreement of the fp16 engines with float32 PyTorch: %s (%d of %d frames with at "
               "least %.0f%% of the boxes matched; worst frame %.1f%% on PyTorch's inputs, %.1f%% "
               "with the carried state, %.1f%% with its track ids mapped to PyTorch's; worst "
               "relative L2 %.2e, carried state %.2e)\n",
               tot.failed ? "FAILED" : "ok", tot.frames - tot.failed, tot.frames,
               100 * o.min_matched, 100 * tot.min_matched, 100 * tot.min_drift_matched,
               100 * tot.min_mapped, tot.worst_rel_l2, tot.worst_drift);
        status = tot.failed ? 1 : 0;
    } else if (o.compare) {
        printf("agreement with the reference: %s (%d of %d frames agree; worst relative L2 %.2e, "
               "limit %.0e; carried state %.2e, limit %.0e)\n", tot.failed ? "FAILED" : "ok",
               tot.frames - tot.failed, tot.frames, tot.worst_rel_l2, o.rel_l2, tot.worst_drift,
               o.drift_rel_l2);
        status = tot.failed ? 1 : 0;
    } else {
        status = 0;
    }
    if (tot.agreement && fclose(tot.agreement) != 0) {
        fail("writing '%s' failed", o.agreement);
        status = 2;
    }
    tot.agreement = NULL;
out:
    demo_id_map_free(&tot.ids);
    free(boxes);
    free(want);
    free(ids);
    close_graph(&hd);
    close_graph(&bb);
    return status;
}
