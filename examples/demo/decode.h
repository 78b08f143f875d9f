/*
 * Box decoding from the raw outputs of the Sparse4Dv3 head graph, in C.
 *
 * The rule is the model's decoder: take the top `candidates` instances by
 * sigmoid(max class logit), multiply each score by sigmoid(centerness), sort
 * by the product (descending), and keep the first `k`. Box = (x, y, z,
 * exp(log w, log l, log h), atan2(sin yaw, cos yaw), vx, vy) from the
 * refined anchor; class = argmax of the logits (first maximum).
 *
 * Track ids follow the head's instance bank: when the frame has history, the
 * first T instances are the cached ones and keep the cached ids; every other
 * instance whose confidence reaches the threshold takes the next unused id,
 * in instance order, counting from the bank's next_id.
 */
#ifndef S4D_DEMO_DECODE_H
#define S4D_DEMO_DECODE_H

#include <stdint.h>

#include "bev.h"

/* Anchor layout of the model (x, y, z, log w, log l, log h, sin, cos, vx, vy, vz). */
enum { DEMO_ANCHOR_DIM = 11, DEMO_QUALITY_DIM = 2 };

typedef struct demo_head_raw {
    int64_t num_instances;        /* A */
    int64_t num_classes;          /* classification is [A, num_classes] */
    const float *classification;  /* [A, num_classes] logits */
    const float *prediction;      /* [A, 11] refined anchors */
    const float *quality;         /* [A, 2] (centerness, yawness) logits */
} demo_head_raw;

typedef struct demo_track_in {
    int has_history;              /* the bank held a usable previous frame */
    int64_t num_cached;           /* T, the first T instances are the cached ones */
    const int64_t *cached_ids;    /* [T] ids of the cached instances, -1 = none */
    int64_t next_id;              /* first unused id */
    float threshold;              /* new instances with confidence >= this get an id */
} demo_track_in;

/*
 * Assigns a track id to every instance (ids [A], -1 = none). Returns 0, or
 * -1 with a message in err when the sizes disagree.
 */
int demo_track_ids(const demo_head_raw *raw, const demo_track_in *trk, int64_t *ids, char *err,
                   int err_size);

/*
 * Decodes the top k boxes into out[k] (ids may be NULL: track ids -1).
 * Requires 0 < k <= candidates <= A. Equal scores keep instance order.
 * Returns the number of boxes written, or -1 with a message in err.
 */
int demo_decode(const demo_head_raw *raw, const int64_t *ids, int64_t candidates, int64_t k,
                demo_box *out, char *err, int err_size);

#endif
