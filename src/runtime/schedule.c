/*
 * Spreading layers over streams (schedule.h).
 *
 * Each layer carries a clock: per stream, the last layer of that stream
 * known to have finished before the layer itself finishes. A layer goes on a
 * stream whose last layer it may follow anyway (its dependencies' clocks
 * cover it), preferring the stream that continues the latest such chain, then
 * an unused stream, and otherwise the stream idle longest; it then waits for
 * the latest conflicting layer of each other stream its clock does not yet
 * cover. Quadratic in the layers, done once per graph capture.
 */
#include "runtime/schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

static int ranges_meet(const s4d_sched_range *a, int na, const s4d_sched_range *b, int nb)
{
    for (int i = 0; i < na; i++) {
        if (a[i].lo >= a[i].hi)
            continue;
        for (int j = 0; j < nb; j++)
            if (b[j].lo < b[j].hi && a[i].lo < b[j].hi && b[j].lo < a[i].hi)
                return 1;
    }
    return 0;
}

/* Whether a (earlier) and b (later) touch common bytes with at least one of them writing. */
static int conflict(const s4d_sched_layer *a, const s4d_sched_layer *b)
{
    return ranges_meet(a->writes, a->num_writes, b->reads, b->num_reads) ||
           ranges_meet(a->writes, a->num_writes, b->writes, b->num_writes) ||
           ranges_meet(a->reads, a->num_reads, b->writes, b->num_writes);
}

void s4d_schedule_free(s4d_schedule *s)
{
    if (!s)
        return;
    free(s->stream);
    free(s->wait_off);
    free(s->waits);
    free(s->record);
    memset(s, 0, sizeof *s);
}

static void clock_join(int *dst, const int *src, int ns)
{
    for (int t = 0; t < ns; t++)
        if (src[t] > dst[t])
            dst[t] = src[t];
}

s4d_status s4d_schedule_make(const s4d_sched_layer *layers, int n, int num_streams,
                             s4d_schedule *out, char *err, size_t errsz)
{
    if (!out)
        return s4d_fmt_err(err, errsz, S4D_ERR_INVALID_ARG, "schedule: out is NULL");
    memset(out, 0, sizeof *out);
    if (n < 0 || (n > 0 && !layers) || num_streams < 1 || num_streams > S4D_SCHED_MAX_STREAMS)
        return s4d_fmt_err(err, errsz, S4D_ERR_INVALID_ARG,
                           "schedule: %d layers over %d streams (1 .. %d)", n, num_streams,
                           S4D_SCHED_MAX_STREAMS);
    const int ns = num_streams;
    out->num_layers = n;
    out->stream = malloc(((size_t)n + 1) * sizeof(int));
    out->wait_off = calloc((size_t)n + 1, sizeof(int));
    /* At most ns - 1 waits per layer. */
    out->waits = malloc(((size_t)n * (size_t)(ns - 1) + 1) * sizeof(int));
    out->record = calloc((size_t)n + 1, 1);
    int *clk = malloc(((size_t)n * (size_t)ns + 1) * sizeof(int));
    if (!out->stream || !out->wait_off || !out->waits || !out->record || !clk) {
        free(clk);
        s4d_schedule_free(out);
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "schedule: out of host memory");
    }
    for (int t = 0; t < S4D_SCHED_MAX_STREAMS; t++)
        out->tail[t] = -1;
    int nw = 0, used = 1;
    for (int i = 0; i < n; i++) {
        out->wait_off[i] = nw;
        int *ci = clk + (size_t)i * (size_t)ns;
        if (layers[i].skip) {
            out->stream[i] = -1;
            continue;
        }
        /* need[t]: the latest earlier layer on stream t that conflicts with layer i. */
        int need[S4D_SCHED_MAX_STREAMS];
        for (int t = 0; t < ns; t++)
            need[t] = -1;
        for (int j = i - 1; j >= 0; j--) {
            int sj = out->stream[j];
            if (sj < 0 || j <= need[sj])
                continue;
            if (conflict(&layers[j], &layers[i]))
                need[sj] = j;
        }
        /* What waiting for every dependency would tell about each stream. */
        int known[S4D_SCHED_MAX_STREAMS];
        for (int t = 0; t < ns; t++)
            known[t] = -1;
        for (int t = 0; t < ns; t++)
            if (need[t] >= 0)
                clock_join(known, clk + (size_t)need[t] * (size_t)ns, ns);
        int s = -1;
        for (int t = 0; t < ns; t++) /* a chain the layer may continue: the latest */
            if (out->tail[t] >= 0 && out->tail[t] <= known[t] && (s < 0 || out->tail[t] > out->tail[s]))
                s = t;
        for (int t = 0; s < 0 && t < ns; t++) /* else a stream not used yet */
            if (out->tail[t] < 0)
                s = t;
        if (s < 0) { /* else the one idle longest (every stream is in use here) */
            s = 0;
            for (int t = 1; t < ns; t++)
                if (out->tail[t] < out->tail[s])
                    s = t;
        }
        if (s + 1 > used)
            used = s + 1;
        int cur[S4D_SCHED_MAX_STREAMS];
        for (int t = 0; t < ns; t++)
            cur[t] = -1;
        if (out->tail[s] >= 0)
            memcpy(cur, clk + (size_t)out->tail[s] * (size_t)ns, sizeof(int) * (size_t)ns);
        /* Wait for the latest dependencies first: their clocks may cover the others. */
        for (;;) {
            int best = -1;
            for (int t = 0; t < ns; t++)
                if (t != s && need[t] > cur[t] && (best < 0 || need[t] > need[best]))
                    best = t;
            if (best < 0)
                break;
            int j = need[best];
            out->waits[nw++] = j;
            out->record[j] = 1;
            clock_join(cur, clk + (size_t)j * (size_t)ns, ns);
        }
        memcpy(ci, cur, sizeof(int) * (size_t)ns);
        ci[s] = i;
        out->stream[i] = s;
        out->tail[s] = i;
    }
    out->wait_off[n] = nw;
    out->num_streams = used;
    free(clk);
    return S4D_OK;
}

s4d_status s4d_schedule_verify(const s4d_sched_layer *layers, int n, const s4d_schedule *s,
                               char *err, size_t errsz)
{
    if (!s || s->num_layers != n || s->num_streams < 1 || s->num_streams > S4D_SCHED_MAX_STREAMS)
        return s4d_fmt_err(err, errsz, S4D_ERR_INTERNAL, "schedule: does not fit %d layers", n);
    const int ns = s->num_streams;
    int *clk = malloc(((size_t)n * (size_t)ns + 1) * sizeof(int));
    if (!clk)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "schedule: out of host memory");
    int last[S4D_SCHED_MAX_STREAMS];
    for (int t = 0; t < ns; t++)
        last[t] = -1;
    s4d_status st = S4D_OK;
    for (int i = 0; i < n && st == S4D_OK; i++) {
        int *ci = clk + (size_t)i * (size_t)ns;
        int si = s->stream[i];
        if (layers[i].skip) {
            if (si != -1)
                st = s4d_fmt_err(err, errsz, S4D_ERR_INTERNAL, "schedule: skipped layer %d has a stream", i);
            continue;
        }
        if (si < 0 || si >= ns) {
            st = s4d_fmt_err(err, errsz, S4D_ERR_INTERNAL, "schedule: layer %d has stream %d", i, si);
            break;
        }
        for (int t = 0; t < ns; t++)
            ci[t] = last[si] >= 0 ? clk[(size_t)last[si] * (size_t)ns + (size_t)t] : -1;
        for (int w = s->wait_off[i]; w < s->wait_off[i + 1]; w++) {
            int j = s->waits[w];
            if (j < 0 || j >= i || s->stream[j] < 0 || !s->record[j]) {
                st = s4d_fmt_err(err, errsz, S4D_ERR_INTERNAL,
                                 "schedule: layer %d waits for layer %d, which cannot be waited for", i, j);
                break;
            }
            clock_join(ci, clk + (size_t)j * (size_t)ns, ns);
        }
        ci[si] = i;
        last[si] = i;
        for (int j = 0; j < i && st == S4D_OK; j++) {
            if (layers[j].skip || !conflict(&layers[j], &layers[i]))
                continue;
            if (ci[s->stream[j]] < j)
                st = s4d_fmt_err(err, errsz, S4D_ERR_INTERNAL,
                                 "schedule: layers %d (stream %d) and %d (stream %d) touch the same "
                                 "bytes but are not ordered",
                                 j, s->stream[j], i, si);
        }
    }
    for (int t = 0; t < ns && st == S4D_OK; t++)
        if (s->tail[t] != last[t])
            st = s4d_fmt_err(err, errsz, S4D_ERR_INTERNAL, "schedule: stream %d ends at layer %d, not %d", t,
                             s->tail[t], last[t]);
    free(clk);
    return st;
}
