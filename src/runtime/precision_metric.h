/*
 * src/runtime/precision_metric.h - how the fp16 accuracy guard compares an
 * output with the float32 network (internal; docs/precision.md).
 *
 * An output whose row order comes from a TopK (scores sorted, rows gathered
 * by the TopK's indices) changes order when float16 flips a near tie, while
 * the same rows are produced. Such outputs are found from the plan's layer
 * graph and compared after pairing each candidate row with a reference row.
 */
#ifndef S4D_RUNTIME_PRECISION_METRIC_H
#define S4D_RUNTIME_PRECISION_METRIC_H

#include <stdint.h>

#include "engine/plan.h"

/*
 * For every graph output of p (in output order): the axis along which its rows
 * follow the selection of a TopK (its indices carried through Gather,
 * GatherElements, GatherND, reshape-like, elementwise and row-wise layers), or
 * -1; topk[o] is then the index of that TopK layer in p (or -1). A TopK's
 * values output is sorted and so keeps its order. Returns S4D_ERR_NO_MEMORY
 * only.
 */
s4d_status s4d_selection_axes(const s4d_plan *p, int *axis, int *topk);

/*
 * The relative L2 error of cand against ref (both float32 arrays of the given
 * shape) after matching rows: along `axis` the array is a list of rows (the
 * other dims after it flattened, each block of the dims before it matched on
 * its own); every reference row is paired with one candidate row, closest
 * pairs first (greedy over the squared L2 distances, ties to the pair of
 * nearer ranks), then ||cand' - ref|| / ||ref|| over the pairs. The pairing is
 * one-to-one, so a non-finite candidate value where the reference is finite
 * is always counted (an infinite error) and never hidden. Rows further apart
 * than a window of ranks (every row up to 1024 rows) are paired only when
 * nothing closer is left. perm (optional, dims[axis] ints) receives, for the
 * first block, the candidate row paired with each reference row.
 * Returns S4D_OK, S4D_ERR_INVALID_ARG (axis out of range) or S4D_ERR_NO_MEMORY.
 */
s4d_status s4d_matched_rel_l2(const float *cand, const float *ref, int rank, const int64_t *dims,
                              int axis, double *out, int *perm);

/*
 * How a TopK's selection in a candidate differs from the float32 reference's.
 * The TopK selects k of n along `axis` of its scores (dims: the scores' shape);
 * every slice across the other axes is compared as a set.
 */
typedef struct s4d_selection_diff {
    int64_t k;      /* rows selected per slice */
    int64_t other;  /* selected by the candidate, not by the reference (all slices) */
    double margin;  /* the reference's gap between its k-th and (k+1)-th scores: the
                       smallest over the slices whose selection differs (over all slices
                       when none does); INFINITY when k == n */
    double kth;     /* the reference's k-th score in that slice */
    double err;     /* the largest |candidate - reference| of the sorted values at the
                       last four ranks up to the k-th: how far float16 moved the scores
                       at the boundary (0 without values) */
} s4d_selection_diff;

/*
 * Compares the selection of a TopK: ref_scores is the reference's input (dims),
 * ref_idx / cand_idx the indices (dims with dims[axis] = k, widened to float),
 * ref_vals / cand_vals the sorted values (same shape; NULL: no err). largest:
 * the TopK's attribute. Returns S4D_OK, S4D_ERR_INVALID_ARG (axis or k out of
 * range) or S4D_ERR_NO_MEMORY.
 */
s4d_status s4d_selection_compare(const float *ref_scores, int rank, const int64_t *dims, int axis,
                                 int64_t k, int largest, const float *ref_idx,
                                 const float *cand_idx, const float *ref_vals,
                                 const float *cand_vals, s4d_selection_diff *out);

/* ||a - b|| / ||b||; a non-finite value in a where b is finite is an infinite error. */
double s4d_rel_l2(const float *a, const float *b, size_t n);

#endif /* S4D_RUNTIME_PRECISION_METRIC_H */
