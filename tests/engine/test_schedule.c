/*
 * The multi-stream schedule of a graph's layers (src/runtime/schedule.h) on
 * random layer sets: every pair of layers that touch common bytes, one of
 * them writing, must be ordered. Checked two ways: the library's own
 * verifier, and here by the transitive closure of the schedule's edges
 * (stream order and waits). A schedule with one wait removed must fail both.
 * Plus the shapes the schedule is for: independent chains go on their own
 * streams without waits, a serial chain stays on one stream, a diamond joins.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runtime/schedule.h"

static uint32_t rng = 88172645u;

static uint32_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

#define MAXR 6

typedef struct layer_set {
    int n;
    s4d_sched_layer *l;
    s4d_sched_range *r; /* MAXR per layer */
} layer_set;

static void set_free(layer_set *s)
{
    free(s->l);
    free(s->r);
}

static layer_set random_set(int n, int nbuf)
{
    layer_set s = {n, calloc((size_t)n + 1, sizeof(s4d_sched_layer)),
                   calloc((size_t)n * MAXR + 1, sizeof(s4d_sched_range))};
    for (int i = 0; i < n; i++) {
        s4d_sched_range *r = s.r + (size_t)i * MAXR;
        int nr = (int)(next() % 4), nw = 1 + (int)(next() % 2);
        for (int k = 0; k < nr + nw; k++) {
            /* Buffers at 64-byte slots, some overlapping partly. */
            uintptr_t lo = 4096 + 64 * (uintptr_t)(next() % (uint32_t)nbuf) + (next() % 2) * 32;
            r[k].lo = lo;
            r[k].hi = lo + 16 + next() % 96;
        }
        s.l[i].skip = next() % 10 == 0;
        s.l[i].num_reads = nr;
        s.l[i].reads = r;
        s.l[i].num_writes = nw;
        s.l[i].writes = r + nr;
    }
    return s;
}

static int meet(const s4d_sched_range *a, int na, const s4d_sched_range *b, int nb)
{
    for (int i = 0; i < na; i++)
        for (int j = 0; j < nb; j++)
            if (a[i].lo < b[j].hi && b[j].lo < a[i].hi)
                return 1;
    return 0;
}

static int conflict(const s4d_sched_layer *a, const s4d_sched_layer *b)
{
    return meet(a->writes, a->num_writes, b->reads, b->num_reads) ||
           meet(a->writes, a->num_writes, b->writes, b->num_writes) ||
           meet(a->reads, a->num_reads, b->writes, b->num_writes);
}

/* 1 when every conflicting pair is ordered by the closure of stream order and waits. */
static int closure_ok(const layer_set *s, const s4d_schedule *sc)
{
    int n = s->n;
    unsigned char *reach = calloc((size_t)n * (size_t)n + 1, 1); /* reach[j*n+i]: j before i */
    int last[S4D_SCHED_MAX_STREAMS];
    for (int t = 0; t < S4D_SCHED_MAX_STREAMS; t++)
        last[t] = -1;
    int ok = 1;
    for (int i = 0; i < n; i++) {
        int si = sc->stream[i];
        if (si < 0)
            continue;
        int pred[1 + S4D_SCHED_MAX_STREAMS], np = 0;
        if (last[si] >= 0)
            pred[np++] = last[si];
        for (int w = sc->wait_off[i]; w < sc->wait_off[i + 1]; w++)
            pred[np++] = sc->waits[w];
        for (int k = 0; k < np; k++) {
            int j = pred[k];
            reach[(size_t)j * n + i] = 1;
            for (int h = 0; h < j; h++)
                if (reach[(size_t)h * n + j])
                    reach[(size_t)h * n + i] = 1;
        }
        last[si] = i;
        for (int j = 0; j < i; j++)
            if (sc->stream[j] >= 0 && conflict(&s->l[j], &s->l[i]) && !reach[(size_t)j * n + i])
                ok = 0;
    }
    free(reach);
    return ok;
}

static void random_cases(void)
{
    int checked = 0, multi = 0, mutated = 0;
    for (int round = 0; round < 300; round++) {
        int n = 1 + (int)(next() % 120), nbuf = 4 + (int)(next() % 60);
        layer_set s = random_set(n, nbuf);
        int streams[] = {1, 2, 3, 4, 8};
        for (int q = 0; q < 5; q++) {
            s4d_schedule sc;
            char err[256];
            s4d_status st = s4d_schedule_make(s.l, n, streams[q], &sc, err, sizeof err);
            CHECK(st == S4D_OK, "make: %s", err);
            if (st != S4D_OK)
                continue;
            CHECK(sc.num_streams >= 1 && sc.num_streams <= streams[q], "%d streams of %d", sc.num_streams,
                  streams[q]);
            st = s4d_schedule_verify(s.l, n, &sc, err, sizeof err);
            CHECK(st == S4D_OK, "round %d, %d streams: verify: %s", round, streams[q], err);
            CHECK(closure_ok(&s, &sc), "round %d, %d streams: an unordered conflicting pair", round,
                  streams[q]);
            checked++;
            multi += sc.num_streams > 1;
            /* Every wait is needed: without it both checks must object. */
            int nw = sc.wait_off[n];
            if (nw > 0) {
                int w = (int)(next() % (uint32_t)nw), i = 0;
                while (sc.wait_off[i + 1] <= w)
                    i++;
                int keep = sc.waits[w];
                memmove(sc.waits + w, sc.waits + w + 1, sizeof(int) * (size_t)(nw - w - 1));
                for (int k = i + 1; k <= n; k++)
                    sc.wait_off[k]--;
                CHECK(s4d_schedule_verify(s.l, n, &sc, err, sizeof err) != S4D_OK,
                      "round %d: verify passed a schedule without layer %d's wait for %d", round, i, keep);
                CHECK(!closure_ok(&s, &sc), "round %d: wait of %d for %d was not needed", round, i, keep);
                mutated++;
            }
            s4d_schedule_free(&sc);
        }
        set_free(&s);
    }
    CHECK(multi > 100 && mutated > 100, "too few interesting schedules: %d multi-stream, %d mutated", multi,
          mutated);
    printf("random: %d schedules verified (%d on several streams), %d with a wait removed refused\n", checked,
           multi, mutated);
}

static void set_layer(s4d_sched_layer *l, s4d_sched_range *r, uintptr_t in_lo, uintptr_t out_lo)
{
    r[0].lo = in_lo;
    r[0].hi = in_lo + 64;
    r[1].lo = out_lo;
    r[1].hi = out_lo + 64;
    l->num_reads = 1;
    l->reads = &r[0];
    l->num_writes = 1;
    l->writes = &r[1];
}

static void shaped_cases(void)
{
    enum { N = 8 };
    s4d_sched_layer l[N];
    s4d_sched_range r[N][2];
    s4d_schedule sc;
    char err[256];
    /* Two chains interleaved: A reads 0 writes 1, 1 -> 2, ...; B the same at 1000. */
    memset(l, 0, sizeof l);
    for (int i = 0; i < N; i++) {
        uintptr_t base = i % 2 ? 100000 : 1000;
        set_layer(&l[i], r[i], base + 64 * (uintptr_t)(i / 2), base + 64 * (uintptr_t)(i / 2 + 1));
    }
    CHECK(s4d_schedule_make(l, N, 4, &sc, err, sizeof err) == S4D_OK, "%s", err);
    CHECK(sc.num_streams == 2 && sc.wait_off[N] == 0, "two chains: %d streams, %d waits", sc.num_streams,
          sc.wait_off[N]);
    for (int i = 2; i < N; i++)
        CHECK(sc.stream[i] == sc.stream[i - 2] && sc.stream[i] != sc.stream[i - 1], "two chains: layer %d", i);
    s4d_schedule_free(&sc);
    /* One chain: one stream, no waits. */
    for (int i = 0; i < N; i++)
        set_layer(&l[i], r[i], 1000 + 64 * (uintptr_t)i, 1000 + 64 * (uintptr_t)(i + 1));
    CHECK(s4d_schedule_make(l, N, 4, &sc, err, sizeof err) == S4D_OK, "%s", err);
    CHECK(sc.num_streams == 1 && sc.wait_off[N] == 0, "chain: %d streams, %d waits", sc.num_streams,
          sc.wait_off[N]);
    s4d_schedule_free(&sc);
    /* Diamond: 0 writes X; 1 and 2 read X, write Y and Z; 3 reads Y and Z. */
    s4d_sched_range d[4][3] = {{{0, 64}, {0, 0}, {0, 0}},
                               {{0, 64}, {64, 128}, {0, 0}},
                               {{0, 64}, {128, 192}, {0, 0}},
                               {{64, 128}, {128, 192}, {192, 256}}};
    s4d_sched_layer dl[4] = {{0, 0, 1, NULL, d[0]}, {0, 1, 1, d[1], d[1] + 1}, {0, 1, 1, d[2], d[2] + 1},
                             {0, 2, 1, d[3], d[3] + 2}};
    CHECK(s4d_schedule_make(dl, 4, 4, &sc, err, sizeof err) == S4D_OK, "%s", err);
    CHECK(sc.num_streams == 2 && sc.stream[1] != sc.stream[2] && sc.wait_off[4] - sc.wait_off[3] == 1 &&
              sc.wait_off[3] == 1,
          "diamond: %d streams, waits %d/%d", sc.num_streams, sc.wait_off[3], sc.wait_off[4]);
    CHECK(s4d_schedule_verify(dl, 4, &sc, err, sizeof err) == S4D_OK, "diamond: %s", err);
    s4d_schedule_free(&sc);
    /* With one stream everything stays in order on it. */
    CHECK(s4d_schedule_make(dl, 4, 1, &sc, err, sizeof err) == S4D_OK && sc.num_streams == 1 &&
              sc.wait_off[4] == 0,
          "diamond on one stream");
    s4d_schedule_free(&sc);
    /* Bad arguments. */
    CHECK(s4d_schedule_make(dl, 4, 0, &sc, err, sizeof err) == S4D_ERR_INVALID_ARG, "0 streams");
    CHECK(s4d_schedule_make(dl, 4, S4D_SCHED_MAX_STREAMS + 1, &sc, err, sizeof err) == S4D_ERR_INVALID_ARG &&
              strstr(err, "streams"),
          "too many streams: %s", err);
    CHECK(s4d_schedule_make(NULL, 4, 2, &sc, err, sizeof err) == S4D_ERR_INVALID_ARG, "NULL layers");
    s4d_schedule_free(NULL);
    printf("shaped: chains, diamond, arguments checked\n");
}

int main(void)
{
    random_cases();
    shaped_cases();
    if (g_failures) {
        fprintf(stderr, "%d failures\n", g_failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
