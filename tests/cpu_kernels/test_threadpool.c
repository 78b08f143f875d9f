/*
 * The thread pool behind s4d_parallel_for (src/util/threadpool.c), whose
 * threads watch for work a while before they sleep: every index of every job
 * is visited exactly once, jobs follow each other back to back (the watching
 * path) and after pauses longer than the watch (the sleeping path), with
 * watching off (S4D_POOL_SPIN_US=0), with one to four threads, with two
 * threads submitting to one pool at once (the loser runs inline), and a
 * nested call runs inline. Chunk bounds are the same whatever the timing.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../engine/check.h"
#include "util/threadpool.h"

typedef struct job {
    int64_t n;
    atomic_int *hits;
    atomic_llong chunks_seen; /* sum over chunks of (begin * 31 + end): the bounds, whoever ran them */
    s4d_threadpool *pool;     /* for the nested call */
} job;

static void visit(void *arg, int64_t b, int64_t e)
{
    job *j = arg;
    for (int64_t i = b; i < e; i++)
        atomic_fetch_add(&j->hits[i], 1);
    atomic_fetch_add(&j->chunks_seen, b * 31 + e);
}

typedef struct part {
    job *j;
    int64_t off;
} part;

static void visit_part(void *arg, int64_t b, int64_t e)
{
    part *q = arg;
    visit(q->j, q->off + b, q->off + e);
}

static void nested(void *arg, int64_t b, int64_t e)
{
    part q = {arg, b};
    /* From inside a chunk: must run inline, not wait for the busy pool. */
    s4d_parallel_for(q.j->pool, e - b, 1, visit_part, &q);
}

static void sleep_us(long us)
{
    struct timespec t = {0, us * 1000};
    nanosleep(&t, NULL);
}

/* One job over n; returns its chunk signature, checks every index was hit once. */
static long long run_job(s4d_threadpool *pool, int64_t n, int64_t grain)
{
    job j;
    memset(&j, 0, sizeof j);
    j.n = n;
    j.hits = calloc((size_t)n + 1, sizeof(atomic_int));
    s4d_parallel_for(pool, n, grain, visit, &j);
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += atomic_load(&j.hits[i]) != 1;
    CHECK(bad == 0, "n %lld grain %lld: %d indices not visited exactly once", (long long)n, (long long)grain, bad);
    free(j.hits);
    return atomic_load(&j.chunks_seen);
}

static void sequences(int threads, const char *spin)
{
    setenv("S4D_POOL_SPIN_US", spin, 1);
    s4d_threadpool *pool = NULL;
    CHECK(s4d_threadpool_create(threads, &pool) == S4D_OK, "create %d", threads);
    if (!pool)
        return;
    CHECK(s4d_threadpool_size(pool) == threads, "size %d", s4d_threadpool_size(pool));
    unsigned r = 12345u + (unsigned)threads;
    for (int k = 0; k < 1000; k++) {
        r = r * 1103515245u + 12345u;
        int64_t n = 1 + (int64_t)(r >> 8) % 5000, grain = 1 + (int64_t)(r >> 4) % 300;
        long long a = run_job(pool, n, grain);
        /* The same job through no pool: the same chunk bounds. */
        job j;
        memset(&j, 0, sizeof j);
        j.hits = calloc((size_t)n + 1, sizeof(atomic_int));
        int64_t chunks = (n + grain - 1) / grain;
        if (chunks > threads)
            chunks = threads;
        for (int64_t c = 0; c < chunks; c++) {
            int64_t q = n / chunks, rem = n % chunks, b = c * q + (c < rem ? c : rem);
            visit(&j, b, b + q + (c < rem ? 1 : 0));
        }
        CHECK(a == atomic_load(&j.chunks_seen), "n %lld grain %lld: chunk bounds differ from the inline split",
              (long long)n, (long long)grain);
        free(j.hits);
        if (k % 250 == 249)
            sleep_us(2000); /* past the watch: the workers sleep, the next job wakes them */
    }
    /* Nested: a chunk that calls s4d_parallel_for on the same pool. */
    job j;
    memset(&j, 0, sizeof j);
    j.hits = calloc(1001, sizeof(atomic_int));
    j.pool = pool;
    s4d_parallel_for(pool, 1000, 10, nested, &j);
    int bad = 0;
    for (int i = 0; i < 1000; i++)
        bad += atomic_load(&j.hits[i]) != 1;
    CHECK(bad == 0, "nested: %d indices not visited once", bad);
    free(j.hits);
    s4d_threadpool_destroy(pool);
}

typedef struct submitter {
    s4d_threadpool *pool;
    int jobs;
} submitter;

static void *submit_main(void *arg)
{
    submitter *s = arg;
    for (int k = 0; k < s->jobs; k++)
        run_job(s->pool, 100 + k % 900, 7);
    return NULL;
}

static void two_submitters(void)
{
    setenv("S4D_POOL_SPIN_US", "50", 1);
    s4d_threadpool *pool = NULL;
    CHECK(s4d_threadpool_create(3, &pool) == S4D_OK, "create");
    if (!pool)
        return;
    submitter s = {pool, 2000};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, submit_main, &s) == 0, "thread");
    submit_main(&s);
    pthread_join(t, NULL);
    s4d_threadpool_destroy(pool);
}

int main(void)
{
    for (int threads = 1; threads <= 4; threads++) {
        sequences(threads, "50");
        sequences(threads, "0");
    }
    sequences(2, "5000"); /* watching longer than the pauses between jobs */
    two_submitters();
    s4d_threadpool_destroy(NULL);
    run_job(NULL, 77, 5); /* no pool: inline */
    if (g_failures) {
        fprintf(stderr, "%d failures\n", g_failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
