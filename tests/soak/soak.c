/*
 * Soak test: one engine, one context, many frames in one process, with the
 * temporal state of the Sparse4D head carried from frame to frame.
 *
 * usage: soak MODEL PLUGIN_LIB FRAMES [PERIOD [noreset]]
 *   MODEL: an ONNX model (built here) or an engine file (.s4de, loaded).
 *   noreset: never restart the state, so later periods must differ from the
 *   first; a self-check that the state is carried and that the comparison
 *   sees it (the run is expected to fail).
 *
 * Frames repeat with PERIOD (default 10): frame f gets the inputs of frame
 * f % PERIOD, and the state restarts from the initial one at each multiple
 * of PERIOD (a new scene). So every output of frame f must equal,
 * bit for bit, that of frame f - PERIOD: the reference is the first period,
 * and any state that leaks between scenes, any buffer reused too early and
 * any nondeterminism shows up as a difference. Resident memory, sampled
 * after the first two periods and at the end, must stay flat (checked
 * except under AddressSanitizer, whose quarantine grows it by design; there
 * LeakSanitizer checks the frees instead).
 *
 * Inputs named X with an output named X_out are state; the initial state is
 * zeros, except *_track_id (-1: no track) and *_ego_pose (identity), as in
 * s4d.sparse4d.head.zeros_state. Other inputs are seeded random values
 * (timestamp: 0.5 s per frame; image_wh: 704 x 256; ego_pose: a drive along x).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "s4d/engine.h"
#include "s4d/plugin.h"

#if defined(__SANITIZE_ADDRESS__)
#define SOAK_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SOAK_ASAN 1
#endif
#endif
#ifndef SOAK_ASAN
#define SOAK_ASAN 0
#endif

/* RSS growth allowed between the sample after two periods and the end. */
#define RSS_SLACK_BYTES ((long)1 << 20)

typedef struct slot {
    s4d_tensor_info info;
    void *data;        /* what is bound */
    int state_output;  /* for a state input: index of its *_out output, else -1 */
} slot;

static int die(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "soak: ");
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
    return 1;
}

static long rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, resident = 0;
    if (!f)
        return -1;
    int n = fscanf(f, "%ld %ld", &pages, &resident);
    fclose(f);
    return n == 2 ? resident * sysconf(_SC_PAGESIZE) : -1;
}

static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t next_rand(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

static int ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

static size_t numel(const s4d_tensor_info *t)
{
    size_t n = 1;
    for (int d = 0; d < t->rank; d++)
        n *= (size_t)t->dims[d];
    return n;
}

/* The initial state: zeros, no track ids, identity pose. */
static void initial_state(slot *s)
{
    memset(s->data, 0, s->info.bytes);
    size_t n = numel(&s->info);
    if (ends_with(s->info.name, "_track_id") && s->info.dtype == S4D_DTYPE_INT64)
        for (size_t i = 0; i < n; i++)
            ((int64_t *)s->data)[i] = -1;
    if (ends_with(s->info.name, "ego_pose") && s->info.dtype == S4D_DTYPE_FLOAT32 && n % 16 == 0)
        for (size_t i = 0; i < n; i += 16)
            for (int d = 0; d < 4; d++)
                ((float *)s->data)[i + 5 * d] = 1.0f;
}

static void frame_input(slot *s, int frame)
{
    const char *name = s->info.name;
    size_t n = numel(&s->info);
    uint64_t st = 0x9E3779B97F4A7C15ull * (uint64_t)(frame + 1) + fnv1a(0xcbf29ce484222325ull, name, strlen(name));
    if (s->info.dtype == S4D_DTYPE_FLOAT32) {
        float *v = s->data;
        if (strcmp(name, "timestamp") == 0) {
            for (size_t i = 0; i < n; i++)
                v[i] = 0.5f * (float)frame;
            return;
        }
        if (strcmp(name, "ego_pose") == 0) {
            initial_state(s);
            for (size_t i = 0; i + 15 < n; i += 16)
                v[i + 3] = 2.0f * (float)frame; /* x translation */
            return;
        }
        if (strcmp(name, "image_wh") == 0) {
            for (size_t i = 0; i < n; i++)
                v[i] = i % 2 ? 256.0f : 704.0f;
            return;
        }
        for (size_t i = 0; i < n; i++)
            v[i] = (float)((double)(next_rand(&st) >> 11) / 9007199254740992.0 * 2 - 1);
        return;
    }
    unsigned char *b = s->data;
    for (size_t i = 0; i < s->info.bytes; i++)
        b[i] = (unsigned char)(next_rand(&st) & 3);
}

int main(int argc, char **argv)
{
    if (argc < 4 || argc > 6 || (argc == 6 && strcmp(argv[5], "noreset") != 0)) {
        fprintf(stderr, "usage: soak MODEL PLUGIN_LIB FRAMES [PERIOD [noreset]]\n");
        return 2;
    }
    const char *model = argv[1];
    int frames = atoi(argv[3]), period = argc >= 5 ? atoi(argv[4]) : 10;
    int reset = argc < 6;
    if (frames < 3 * period || period < 1)
        return die("FRAMES must be at least 3 periods (%s frames, period %s)", argv[3],
                   argc == 5 ? argv[4] : "10");
    s4d_errbuf err = {{0}};
    if (s4d_plugins_load(NULL, argv[2], &err) != S4D_OK)
        return die("%s: %s", argv[2], err.msg);
    s4d_engine *e = NULL;
    s4d_status st = ends_with(model, ".onnx") ? s4d_engine_build_onnx_file(model, NULL, &e, &err)
                                              : s4d_engine_load_file(model, NULL, &e, &err);
    if (st != S4D_OK)
        return die("%s: %s", model, err.msg);
    s4d_context_options co;
    s4d_context_options_init(&co);
    co.num_threads = 2;
    s4d_context *ctx = NULL;
    if (s4d_context_create(e, &co, &ctx, &err) != S4D_OK)
        return die("context: %s%s", err.msg, "");

    int nin = s4d_engine_num_inputs(e), nout = s4d_engine_num_outputs(e), nstate = 0;
    slot *in = calloc((size_t)nin, sizeof *in);
    uint64_t *ref = calloc((size_t)period, sizeof *ref);
    if (!in || !ref)
        return die("out of memory%s%s", "", "");
    for (int i = 0; i < nin; i++) {
        s4d_engine_input_info(e, i, &in[i].info);
        in[i].data = calloc(1, in[i].info.bytes + 1);
        in[i].state_output = -1;
        char want[512];
        snprintf(want, sizeof want, "%s_out", in[i].info.name);
        for (int k = 0; k < nout; k++) {
            s4d_tensor_info o;
            s4d_engine_output_info(e, k, &o);
            if (strcmp(o.name, want) == 0 && o.bytes == in[i].info.bytes)
                in[i].state_output = k;
        }
        nstate += in[i].state_output >= 0;
    }
    if (nstate == 0)
        return die("%s has no state inputs (X with an output X_out)%s", model, "");
    printf("soak: %s, %d inputs (%d state), %d outputs, %d frames, period %d%s\n", model, nin,
           nstate, nout, frames, period, reset ? "" : ", state never restarted");

    long rss_warm = 0, rss_max = 0;
    int mismatches = 0;
    double t0 = 0;
    for (int f = 0; f < frames; f++) {
        int k = f % period;
        for (int i = 0; i < nin; i++) {
            if (in[i].state_output < 0)
                frame_input(&in[i], k);
            else if (k == 0 && (reset || f == 0))
                initial_state(&in[i]);
            s4d_tensor_info *t = &in[i].info;
            if (s4d_context_bind(ctx, t->name, t->dtype, t->rank, t->dims, in[i].data) != S4D_OK)
                return die("bind %s: %s", t->name, s4d_context_errmsg(ctx));
        }
        if (s4d_context_run(ctx, NULL) != S4D_OK)
            return die("run: %s%s", s4d_context_errmsg(ctx), "");
        uint64_t h = 0xcbf29ce484222325ull;
        for (int o = 0; o < nout; o++) {
            s4d_tensor_info info;
            const void *data = NULL;
            s4d_engine_output_info(e, o, &info);
            if (s4d_context_output(ctx, info.name, &data, NULL) != S4D_OK || !data)
                return die("output %s: %s", info.name, s4d_context_errmsg(ctx));
            h = fnv1a(h, data, info.bytes);
        }
        for (int i = 0; i < nin; i++) {
            if (in[i].state_output < 0)
                continue;
            s4d_tensor_info info;
            const void *data = NULL;
            s4d_engine_output_info(e, in[i].state_output, &info);
            s4d_context_output(ctx, info.name, &data, NULL);
            memcpy(in[i].data, data, info.bytes);
        }
        if (f < period) {
            ref[k] = h;
        } else if (h != ref[k]) {
            if (mismatches++ < 5)
                fprintf(stderr, "soak: frame %d differs from frame %d (%016llx vs %016llx)\n", f,
                        k, (unsigned long long)h, (unsigned long long)ref[k]);
        }
        long rss = rss_bytes();
        if (f == 2 * period - 1) {
            rss_warm = rss;
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            t0 = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
        }
        if (f >= 2 * period && rss > rss_max)
            rss_max = rss;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double secs = (double)ts.tv_sec + ts.tv_nsec * 1e-9 - t0;
    int distinct = 0;
    for (int k = 0; k < period; k++) {
        int seen = 0;
        for (int j = 0; j < k; j++)
            seen |= ref[j] == ref[k];
        distinct += !seen;
    }
    long rss_end = rss_bytes();
    printf("soak: %d frames, %.2f ms per frame after warm-up; %d of %d frames differ from their "
           "reference; %d distinct outputs per period\n",
           frames, 1e3 * secs / (frames - 2 * period), mismatches, frames - period, distinct);
    printf("soak: RSS %.1f MiB after %d frames, max %.1f MiB after, %.1f MiB at the end%s\n",
           rss_warm / 1048576.0, 2 * period, rss_max / 1048576.0, rss_end / 1048576.0,
           SOAK_ASAN ? " (not checked under AddressSanitizer)" : "");
    int fail = mismatches != 0;
    /* The state must matter: frames of one period that all gave the same outputs would not
       test the carry at all. */
    if (distinct < period / 2 + 1) {
        fprintf(stderr, "soak: only %d distinct outputs in a period of %d\n", distinct, period);
        fail = 1;
    }
    if (!SOAK_ASAN && rss_max - rss_warm > RSS_SLACK_BYTES) {
        fprintf(stderr, "soak: resident memory grew by %ld bytes after warm-up (slack %ld)\n",
                rss_max - rss_warm, RSS_SLACK_BYTES);
        fail = 1;
    }
    for (int i = 0; i < nin; i++)
        free(in[i].data);
    free(in);
    free(ref);
    s4d_context_destroy(ctx);
    s4d_engine_destroy(e);
    printf("soak: %s\n", fail ? "FAILED" : "passed");
    return fail;
}
