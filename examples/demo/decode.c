/* Top-k box decoding and track-id assignment from the raw head outputs. */
#include "decode.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct ranked {
    float score;
    int64_t index;
} ranked;

/* Float math on purpose: the graph computes these scores in float32. */
static float sigmoidf(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

static int64_t argmax_row(const float *row, int64_t n, float *max_out)
{
    int64_t best = 0;
    for (int64_t j = 1; j < n; j++)
        if (row[j] > row[best])
            best = j;
    *max_out = row[best];
    return best;
}

/* Descending by score; equal scores keep the lower instance first so that
 * the order is reproducible (the tie itself is reported by the comparison). */
static int by_score_desc(const void *pa, const void *pb)
{
    const ranked *a = pa, *b = pb;
    if (a->score > b->score)
        return -1;
    if (a->score < b->score)
        return 1;
    return (a->index > b->index) - (a->index < b->index);
}

static int check_raw(const demo_head_raw *raw, char *err, int err_size)
{
    if (!raw || !raw->classification || !raw->prediction || !raw->quality) {
        snprintf(err, err_size, "decode: missing head output");
        return -1;
    }
    if (raw->num_instances <= 0 || raw->num_classes <= 0) {
        snprintf(err, err_size, "decode: %lld instances of %lld classes",
                 (long long)raw->num_instances, (long long)raw->num_classes);
        return -1;
    }
    return 0;
}

int demo_track_ids(const demo_head_raw *raw, const demo_track_in *trk, int64_t *ids, char *err,
                   int err_size)
{
    if (check_raw(raw, err, err_size) != 0)
        return -1;
    int64_t a = raw->num_instances;
    if (!trk || !ids || trk->num_cached < 0 || trk->num_cached > a ||
        (trk->num_cached > 0 && !trk->cached_ids)) {
        snprintf(err, err_size, "decode: bad track input (%lld cached of %lld instances)",
                 trk ? (long long)trk->num_cached : -1LL, (long long)a);
        return -1;
    }
    int64_t next = trk->next_id;
    for (int64_t i = 0; i < a; i++) {
        ids[i] = (trk->has_history && i < trk->num_cached) ? trk->cached_ids[i] : -1;
        float m;
        argmax_row(raw->classification + i * raw->num_classes, raw->num_classes, &m);
        if (ids[i] < 0 && sigmoidf(m) >= trk->threshold)
            ids[i] = next++;
    }
    return 0;
}

int demo_decode(const demo_head_raw *raw, const int64_t *ids, int64_t candidates, int64_t k,
                demo_box *out, char *err, int err_size)
{
    if (check_raw(raw, err, err_size) != 0)
        return -1;
    int64_t a = raw->num_instances;
    if (!out || k <= 0 || candidates < k || candidates > a) {
        snprintf(err, err_size, "decode: need 0 < k (%lld) <= candidates (%lld) <= instances (%lld)",
                 (long long)k, (long long)candidates, (long long)a);
        return -1;
    }
    ranked *r = malloc((size_t)a * sizeof *r);
    int64_t *cls = malloc((size_t)a * sizeof *cls);
    if (!r || !cls) {
        free(r);
        free(cls);
        snprintf(err, err_size, "decode: out of memory for %lld instances", (long long)a);
        return -1;
    }
    for (int64_t i = 0; i < a; i++) {
        float m;
        cls[i] = argmax_row(raw->classification + i * raw->num_classes, raw->num_classes, &m);
        r[i].score = sigmoidf(m);
        r[i].index = i;
    }
    qsort(r, (size_t)a, sizeof *r, by_score_desc);
    for (int64_t j = 0; j < candidates; j++)
        r[j].score *= sigmoidf(raw->quality[r[j].index * DEMO_QUALITY_DIM]);
    qsort(r, (size_t)candidates, sizeof *r, by_score_desc);
    for (int64_t j = 0; j < k; j++) {
        int64_t i = r[j].index;
        const float *p = raw->prediction + i * DEMO_ANCHOR_DIM;
        demo_box *b = &out[j];
        b->x = p[0];
        b->y = p[1];
        b->z = p[2];
        b->w = expf(p[3]);
        b->l = expf(p[4]);
        b->h = expf(p[5]);
        b->yaw = atan2f(p[6], p[7]);
        b->vx = p[8];
        b->vy = p[9];
        b->score = r[j].score;
        b->cls = (int)cls[i];
        b->track_id = ids ? ids[i] : -1;
    }
    free(r);
    free(cls);
    return (int)k;
}
