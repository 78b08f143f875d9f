/*
 * src/ops/movement.h - typed parameters of the data-movement and resampling
 * ops (internal): Transpose, Concat, Split, Slice, Gather, GatherElements,
 * GatherND, ScatterND, ScatterElements, Shape, ConstantOfShape, Range,
 * Resize, GridSample.
 *
 * Each schema's infer() fills its struct when ctx->params is non-NULL (the
 * engine keeps it per layer); run() and every backend kernel read it from
 * there, so attributes and constant inputs are parsed once, at build. Ops
 * whose output shape says everything (Reshape, Flatten, Squeeze, Unsqueeze,
 * Identity, Expand, Tile, Size) have no params.
 */
#ifndef S4D_OPS_MOVEMENT_H
#define S4D_OPS_MOVEMENT_H

#include <stdint.h>

#include "ops/op.h"

/*
 * Transpose: the permutation, and the copy it amounts to once size-1 dims are
 * dropped and output neighbours that are input neighbours too are merged:
 * output dims odims[0..crank) (row-major, contiguous) read the input at
 * element strides ist. crank >= 1; crank == 1 with ist[0] == 1 is a plain copy.
 */
typedef struct s4d_transpose_params {
    int rank;
    int perm[S4D_MAX_RANK];
    int crank;
    int64_t odims[S4D_MAX_RANK];
    int64_t ist[S4D_MAX_RANK];
} s4d_transpose_params;

/* Concat and Split: the axis, normalised. Split's part sizes are its outputs' dims[axis]. */
typedef struct s4d_axis_params {
    int axis;
} s4d_axis_params;

/*
 * Slice, resolved: output dim d has count[d] elements, read from input index
 * start[d] + i * step[d] (step may be negative; start is clamped in range
 * whenever count[d] > 0).
 */
typedef struct s4d_slice_params {
    int rank;
    int64_t start[S4D_MAX_RANK], step[S4D_MAX_RANK], count[S4D_MAX_RANK];
} s4d_slice_params;

/* Gather and GatherElements: the axis, normalised. GatherND: batch_dims. */
typedef struct s4d_gather_params {
    int axis;
    int batch_dims;
} s4d_gather_params;

typedef enum s4d_scatter_reduction {
    S4D_SCATTER_NONE = 0,
    S4D_SCATTER_ADD,
    S4D_SCATTER_MUL,
    S4D_SCATTER_MAX,
    S4D_SCATTER_MIN
} s4d_scatter_reduction;

/* ScatterND and ScatterElements (axis normalised; ScatterND ignores it). */
typedef struct s4d_scatter_params {
    s4d_scatter_reduction reduction;
    int axis;
} s4d_scatter_params;

/* Shape: the dims [begin, end) of the input it returns. */
typedef struct s4d_shape_params {
    int begin, end;
} s4d_shape_params;

/* ConstantOfShape: the fill value's bytes in the output dtype (zeros when no value). */
typedef struct s4d_constant_of_shape_params {
    s4d_dtype dtype;
    unsigned char value[8];
} s4d_constant_of_shape_params;

/* Range: start and delta, exact for the integer dtypes, as doubles for the float ones. */
typedef struct s4d_range_params {
    s4d_dtype dtype;
    int64_t istart, idelta;
    double fstart, fdelta;
} s4d_range_params;

typedef enum s4d_resize_coord {
    S4D_RESIZE_HALF_PIXEL,
    S4D_RESIZE_PYTORCH_HALF_PIXEL,
    S4D_RESIZE_ALIGN_CORNERS,
    S4D_RESIZE_ASYMMETRIC,
    S4D_RESIZE_TF_HALF_PIXEL_FOR_NEAREST,
    S4D_RESIZE_HALF_PIXEL_SYMMETRIC
} s4d_resize_coord;

typedef enum s4d_resize_nearest {
    S4D_RESIZE_ROUND_PREFER_FLOOR,
    S4D_RESIZE_ROUND_PREFER_CEIL,
    S4D_RESIZE_FLOOR,
    S4D_RESIZE_CEIL
} s4d_resize_nearest;

typedef struct s4d_resize_params {
    int rank, linear;
    s4d_resize_coord coord;
    s4d_resize_nearest near;
    int64_t in[S4D_MAX_RANK], out[S4D_MAX_RANK];
    double scale[S4D_MAX_RANK];
    /*
     * The resized length align_corners divides by: the output length when
     * sizes are given, in * scale (not rounded) when scales are, as in
     * ONNX's reference and its test data.
     */
    double span[S4D_MAX_RANK];
} s4d_resize_params;

/* Whether axis a of a Resize needs resampling (its mapping is not the identity). */
int s4d_resize_axis_active(const s4d_resize_params *p, int a);

/*
 * The source taps of every output index o < p->out[a] along axis a: rows
 * i0[o] and i1[o] blended by w[o] (linear), or i0[o] == i1[o] and w[o] == 0
 * (nearest). The one definition the host reference and device kernels share.
 */
void s4d_resize_taps(const s4d_resize_params *p, int a, int64_t *i0, int64_t *i1, float *w);

typedef enum s4d_grid_sample_pad {
    S4D_GRID_SAMPLE_ZEROS,
    S4D_GRID_SAMPLE_BORDER,
    S4D_GRID_SAMPLE_REFLECTION
} s4d_grid_sample_pad;

/* GridSample on X [n, c, h, w] with grid [n, ho, wo, 2]. */
typedef struct s4d_grid_sample_params {
    int linear, align;
    s4d_grid_sample_pad pad;
    int64_t n, c, h, w, ho, wo;
} s4d_grid_sample_params;

#endif /* S4D_OPS_MOVEMENT_H */
