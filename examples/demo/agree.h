/*
 * Agreement checks of the demo: engine outputs against reference arrays, and
 * decoded boxes against the reference detections.
 */
#ifndef S4D_DEMO_AGREE_H
#define S4D_DEMO_AGREE_H

#include <stddef.h>
#include <stdint.h>

#include "bev.h"
#include "s4d/types.h"

typedef struct demo_diff {
    double rel_l2;   /* ||got - want|| / ||want|| (absolute norm when want is all zero) */
    double max_abs;  /* largest |got - want| */
    int64_t count;   /* elements compared */
    int nonfinite;   /* got holds NaN/Inf where want does not */
} demo_diff;

/*
 * Compares two arrays of the same dtype and element count, in float64.
 * Returns 0, or -1 with a message in err for a dtype it cannot read.
 */
int demo_diff_arrays(s4d_dtype dtype, const void *got, const void *want, int64_t count,
                     demo_diff *out, char *err, int err_size);

/*
 * Matches rows by instance (track) id: perm[i] is the row of `got` that
 * holds the instance of reference row i. Rows whose id is negative or has
 * no partner take the unused rows in order, so perm is a permutation.
 * Returns the number of rows that moved, or -1 when out of memory.
 */
int64_t demo_align_rows(const int64_t *got_ids, const int64_t *want_ids, int64_t n, int64_t *perm);

typedef struct demo_box_tol {
    double metres;     /* centre and size */
    double relative;   /* sizes: or this fraction of the reference size, if larger */
    double radians;    /* yaw, compared modulo 2 pi */
    double velocity;   /* m/s */
    double score;      /* |score difference| */
    double tie;        /* reference scores closer than this are a tie */
} demo_box_tol;

typedef struct demo_box_report {
    int compared;        /* boxes compared */
    int mismatched;      /* boxes without an agreeing partner */
    int matched_mapped;  /* carried state: boxes matched with ids through the sequence's
                            map (demo_match_boxes_mapped); -1 when not counted */
    int tie_groups;      /* groups of tied reference scores, compared as sets */
    int tied_boxes;      /* boxes in those groups */
    double max_metres;   /* worst centre/size difference over matched boxes */
    double max_radians;  /* worst yaw difference */
    double max_score;    /* worst score difference */
    char first_problem[256]; /* "" when all agree */
} demo_box_report;

/*
 * Compares the first n boxes of want with got, both sorted by descending
 * score and holding n_ext >= n boxes. Boxes must agree position by position
 * in class and track id and within the tolerances; where reference scores
 * tie (consecutive scores within tol->tie), the tied run is compared as a
 * set, and a run that crosses rank n finds partners up to rank n_ext.
 * Returns 0 when every box agrees, 1 otherwise (details in rep).
 */
int demo_compare_boxes(const demo_box *got, const demo_box *want, int n, int n_ext,
                       const demo_box_tol *tol, demo_box_report *rep);

/*
 * The reduced-precision agreement (fp16 engines against float32 PyTorch):
 * how many of the n_want reference boxes have a partner among the n_got
 * engine boxes with the same class and the same track id whose centre lies
 * within `metres` (3-D distance), rank ignored, each engine box used once.
 * Ranks are ignored because float16 moves scores and so the order of
 * near-equal boxes; a box that leaves the top n on one side has no partner.
 * The first reference box without a partner is described in problem (may
 * be NULL). Returns the count of matched reference boxes.
 */
int demo_match_boxes(const demo_box *got, int n_got, const demo_box *want, int n_want,
                     double metres, char *problem, int problem_size);

/*
 * Track ids are labels: a run that gives fresh ids in another order (near-
 * equal scores in another order) tracks the same objects under other numbers,
 * and every later id of the sequence then differs by the same shift. The id
 * map pairs the engine's ids with the reference's, one to one, over a whole
 * sequence (ids are unique over it: the head keeps counting across scenes).
 */
typedef struct demo_id_map {
    int64_t *got, *want; /* got[i] is paired with want[i] */
    int n, cap;
} demo_id_map;

void demo_id_map_free(demo_id_map *map);

/*
 * demo_match_boxes with the track ids compared through the map: an engine
 * box's id agrees with a reference box's when the map pairs them, or when
 * neither is paired yet - the pair is then added (negative ids, untracked
 * boxes, agree only with themselves and are never paired). Reference boxes
 * are taken in rank order, each with the nearest agreeing engine box within
 * `metres`. Returns the count of matched reference boxes, -1 out of memory.
 */
int demo_match_boxes_mapped(const demo_box *got, int n_got, const demo_box *want, int n_want,
                            double metres, demo_id_map *map);

#endif
