/*
 * The realistic workload of deformable aggregation: Sparse4Dv3's sizes and
 * sampling locations made by projecting anchor keypoints through a
 * nuScenes-like 6-camera rig (docs/ops/deformable_aggregation.md), and the
 * float32 argument structs that the bench and the op tests both build.
 */
#ifndef S4D_DA_WORKLOAD_H
#define S4D_DA_WORKLOAD_H

#include <stdint.h>

#include "s4d/deformable_aggregation.h"

typedef struct da_workload {
    s4d_da_sizes sizes;
    int32_t *spatial_shape;     /* [N, L, 2] */
    int32_t *scale_start_index; /* [N, L] */
    float *features;            /* [bs, F, C] */
    float *sampling_location;   /* [bs, A, P, N, 2] */
    float *weights;             /* [bs, A, P, N, L, G] */
    /* Statistics of the locations. */
    double inside_fraction;     /* share of (point, camera) pairs inside an image */
    double seen_by[4];          /* share of points seen by 0, 1, 2, >= 3 cameras */
    int64_t unique_rows;        /* feature rows read by the forward (all batch items) */
    int64_t valid_pairs;
} da_workload;

/* Whether a sampling location lies inside its image: what inside_fraction and seen_by count. */
static inline int da_location_inside(float x, float y)
{
    return x > 0.0f && x < 1.0f && y > 0.0f && y < 1.0f;
}

/* bs 1..n, 6 cameras, 4 levels (64x176 .. 8x22), C channels (Sparse4Dv3: 256), G 8, 13 points.
   0 on success. */
int da_workload_make(da_workload *w, int64_t batch, int64_t anchors, int64_t channels, uint64_t seed);
void da_workload_free(da_workload *w);

/* Float32 arguments of the forward and backward over the given arrays (borrowed); the rest is zero. */
s4d_da_forward_args da_forward_args_f32(const s4d_da_sizes *s, const int32_t *shape,
                                        const int32_t *start, const float *feat, const float *loc,
                                        const float *w, void *out);
s4d_da_backward_args da_backward_args_f32(const s4d_da_sizes *s, const int32_t *shape,
                                          const int32_t *start, const float *feat,
                                          const float *loc, const float *w, const void *gout,
                                          void *gfeat, float *gloc, void *gw);

#endif /* S4D_DA_WORKLOAD_H */
