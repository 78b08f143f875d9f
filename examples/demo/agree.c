/* Output and detection agreement for the demo. */
#include "agree.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AGREE_PI 3.14159265358979323846

static int read_f64(s4d_dtype dtype, const void *p, int64_t i, double *v)
{
    switch (dtype) {
    case S4D_DTYPE_FLOAT32: *v = ((const float *)p)[i]; return 0;
    case S4D_DTYPE_FLOAT64: *v = ((const double *)p)[i]; return 0;
    case S4D_DTYPE_INT32: *v = ((const int32_t *)p)[i]; return 0;
    case S4D_DTYPE_INT64: *v = (double)((const int64_t *)p)[i]; return 0;
    case S4D_DTYPE_UINT8: *v = ((const uint8_t *)p)[i]; return 0;
    case S4D_DTYPE_INT8: *v = ((const int8_t *)p)[i]; return 0;
    case S4D_DTYPE_BOOL: *v = ((const uint8_t *)p)[i] != 0; return 0;
    case S4D_DTYPE_UNDEFINED:
    case S4D_DTYPE_UINT16:
    case S4D_DTYPE_INT16:
    case S4D_DTYPE_STRING:
    case S4D_DTYPE_FLOAT16:
    case S4D_DTYPE_UINT32:
    case S4D_DTYPE_UINT64:
    case S4D_DTYPE_BFLOAT16:
        return -1;
    }
    return -1;
}

int demo_diff_arrays(s4d_dtype dtype, const void *got, const void *want, int64_t count,
                     demo_diff *out, char *err, int err_size)
{
    memset(out, 0, sizeof *out);
    out->count = count;
    double num = 0, den = 0;
    for (int64_t i = 0; i < count; i++) {
        double g, w;
        if (read_f64(dtype, got, i, &g) != 0 || read_f64(dtype, want, i, &w) != 0) {
            snprintf(err, err_size, "cannot compare tensors of type %s", s4d_dtype_name(dtype));
            return -1;
        }
        if (!isfinite(g) && isfinite(w)) {
            out->nonfinite++;
            continue;
        }
        double d = fabs(g - w);
        if (!isfinite(w))
            d = (g == w || (isnan(g) && isnan(w))) ? 0 : INFINITY;
        num += d * d;
        den += w * w * isfinite(w);
        if (d > out->max_abs)
            out->max_abs = d;
    }
    out->rel_l2 = den > 0 ? sqrt(num / den) : sqrt(num);
    if (out->nonfinite)
        out->rel_l2 = INFINITY;
    return 0;
}

/* Like fmax, but a NaN wins, so that a NaN difference can never pass. */
static double worse(double a, double b)
{
    return (isnan(a) || a >= b) ? a : b;
}

int64_t demo_align_rows(const int64_t *got_ids, const int64_t *want_ids, int64_t n, int64_t *perm)
{
    unsigned char *used = calloc((size_t)(n > 0 ? n : 1), 1);
    if (!used)
        return -1;
    int64_t moved = 0;
    for (int64_t i = 0; i < n; i++) {
        perm[i] = -1;
        if (want_ids[i] < 0)
            continue;
        /* the same position first: the common case costs one comparison */
        int64_t j = (!used[i] && got_ids[i] == want_ids[i]) ? i : -1;
        for (int64_t k = 0; j < 0 && k < n; k++)
            if (!used[k] && got_ids[k] == want_ids[i])
                j = k;
        if (j >= 0) {
            perm[i] = j;
            used[j] = 1;
        }
    }
    int64_t next = 0;
    for (int64_t i = 0; i < n; i++) {
        if (perm[i] < 0) {
            while (used[next])
                next++;
            perm[i] = next;
            used[next] = 1;
        }
        moved += perm[i] != i;
    }
    free(used);
    return moved;
}

static double yaw_diff(double a, double b)
{
    double d = fmod(fabs(a - b), 2 * AGREE_PI);
    return d > AGREE_PI ? 2 * AGREE_PI - d : d;
}

/* Worst differences of one pair (m, r, s); returns whether they are within tol. */
static int pair_agrees(const demo_box *g, const demo_box *w, const demo_box_tol *tol, double *m,
                       double *r, double *s)
{
    double dm = 0;
    int within = 1;
    const float gv[6] = {g->x, g->y, g->z, g->w, g->l, g->h};
    const float wv[6] = {w->x, w->y, w->z, w->w, w->l, w->h};
    for (int k = 0; k < 6; k++) {
        double d = fabs((double)gv[k] - wv[k]);
        dm = worse(dm, d);
        /* sizes are exp(predicted log size): their float32 error is relative
         * to the size, so a size may also differ by tol->relative of itself */
        double lim = k < 3 ? tol->metres : fmax(tol->metres, tol->relative * fabs((double)wv[k]));
        within = within && d <= lim;
    }
    double dv = worse(fabs((double)g->vx - w->vx), fabs((double)g->vy - w->vy));
    double dr = yaw_diff(g->yaw, w->yaw);
    double ds = fabs((double)g->score - w->score);
    *m = dm;
    *r = dr;
    *s = ds;
    /* written so that a NaN anywhere fails */
    return g->cls == w->cls && g->track_id == w->track_id && within &&
           dr <= tol->radians && dv <= tol->velocity && ds <= tol->score;
}

static void note(demo_box_report *rep, const char *what, int pos, const demo_box *g,
                 const demo_box *w)
{
    if (rep->first_problem[0])
        return;
    double dr = yaw_diff(g->yaw, w->yaw);
    double dv = worse(fabs((double)g->vx - w->vx), fabs((double)g->vy - w->vy));
    static const char *dim_name[6] = {"x", "y", "z", "w", "l", "h"};
    double dm = 0;
    int worst_dim = 0;
    const float gv[6] = {g->x, g->y, g->z, g->w, g->l, g->h};
    const float wv[6] = {w->x, w->y, w->z, w->w, w->l, w->h};
    for (int k = 0; k < 6; k++) {
        double d = fabs((double)gv[k] - wv[k]);
        if (!(d <= dm)) {
            dm = d;
            worst_dim = k;
        }
    }
    snprintf(rep->first_problem, sizeof rep->first_problem,
             "%s at rank %d: got class %d track %lld, want class %d track %lld; "
             "differences: %.2e m (%s = %.3f m), %.2e rad, %.2e m/s, score %.2e", what, pos,
             g->cls, (long long)g->track_id, w->cls, (long long)w->track_id, dm,
             dim_name[worst_dim], wv[worst_dim], dr, dv, fabs((double)g->score - w->score));
}

int demo_compare_boxes(const demo_box *got, const demo_box *want, int n, int n_ext,
                       const demo_box_tol *tol, demo_box_report *rep)
{
    memset(rep, 0, sizeof *rep);
    rep->compared = n;
    if (n_ext < n)
        n_ext = n;
    int i = 0;
    while (i < n) {
        int e = i + 1;
        while (e < n_ext && fabs((double)want[e - 1].score - want[e].score) <= tol->tie)
            e++;
        if (e - i == 1) {
            double m, r, s;
            if (!pair_agrees(&got[i], &want[i], tol, &m, &r, &s)) {
                rep->mismatched++;
                note(rep, "box differs", i, &got[i], &want[i]);
            }
            rep->max_metres = worse(rep->max_metres, m);
            rep->max_radians = worse(rep->max_radians, r);
            rep->max_score = worse(rep->max_score, s);
            i = e;
            continue;
        }
        /* a tie: which of the tied boxes comes first is arbitrary, so match
         * each reference box with any unused engine box of the same run */
        rep->tie_groups++;
        int last = e < n ? e : n; /* reference boxes to match; partners may lie beyond n */
        rep->tied_boxes += last - i;
        unsigned char used[64];
        unsigned char *u = (e - i) <= (int)sizeof used ? used : calloc((size_t)(e - i), 1);
        if (!u) {
            rep->mismatched += e - i;
            note(rep, "out of memory comparing a tie", i, &got[i], &want[i]);
            i = e;
            continue;
        }
        memset(u, 0, (size_t)(e - i));
        for (int wi = i; wi < last; wi++) {
            int found = -1;
            double bm = 0, br = 0, bs = 0;
            for (int gi = i; gi < e && found < 0; gi++) {
                double m, r, s;
                if (!u[gi - i] && pair_agrees(&got[gi], &want[wi], tol, &m, &r, &s)) {
                    found = gi;
                    bm = m;
                    br = r;
                    bs = s;
                }
            }
            if (found < 0) {
                rep->mismatched++;
                note(rep, "tied box without a partner", wi, &got[wi], &want[wi]);
                continue;
            }
            u[found - i] = 1;
            rep->max_metres = worse(rep->max_metres, bm);
            rep->max_radians = worse(rep->max_radians, br);
            rep->max_score = worse(rep->max_score, bs);
        }
        if (u != used)
            free(u);
        i = e;
    }
    return rep->mismatched ? 1 : 0;
}

int demo_match_boxes(const demo_box *got, int n_got, const demo_box *want, int n_want,
                     double metres, char *problem, int problem_size)
{
    if (problem && problem_size > 0)
        problem[0] = '\0';
    if (n_got <= 0 || n_want <= 0)
        return 0;
    unsigned char *used = calloc((size_t)n_got, 1);
    if (!used) {
        if (problem && problem_size > 0)
            snprintf(problem, (size_t)problem_size, "out of memory matching boxes");
        return 0;
    }
    int matched = 0;
    for (int wi = 0; wi < n_want; wi++) {
        const demo_box *w = &want[wi];
        int best = -1;
        double best_d = 0, near_d = INFINITY;
        for (int gi = 0; gi < n_got; gi++) {
            const demo_box *g = &got[gi];
            if (used[gi] || g->cls != w->cls || g->track_id != w->track_id)
                continue;
            double dx = (double)g->x - w->x, dy = (double)g->y - w->y, dz = (double)g->z - w->z;
            double d = sqrt(dx * dx + dy * dy + dz * dz);
            if (d < near_d)
                near_d = d;
            /* written so that a NaN centre never matches */
            if (d <= metres && (best < 0 || d < best_d)) {
                best = gi;
                best_d = d;
            }
        }
        if (best >= 0) {
            used[best] = 1;
            matched++;
        } else if (problem && problem_size > 0 && !problem[0]) {
            if (isfinite(near_d))
                snprintf(problem, (size_t)problem_size,
                         "reference box at rank %d (class %d, track %lld): the engine's box of "
                         "that class and track is %.3f m away (limit %.3g m)", wi, w->cls,
                         (long long)w->track_id, near_d, metres);
            else
                snprintf(problem, (size_t)problem_size,
                         "reference box at rank %d (class %d, track %lld): no engine box of "
                         "that class and track in the top %d", wi, w->cls,
                         (long long)w->track_id, n_got);
        }
    }
    free(used);
    return matched;
}

void demo_id_map_free(demo_id_map *map)
{
    free(map->got);
    free(map->want);
    memset(map, 0, sizeof *map);
}

/* The index of id in ids[0..n), or -1. */
static int find_id(const int64_t *ids, int n, int64_t id)
{
    for (int i = 0; i < n; i++)
        if (ids[i] == id)
            return i;
    return -1;
}

static int ids_agree(const demo_id_map *map, int64_t got, int64_t want)
{
    if (got < 0 || want < 0)
        return got == want;
    int i = find_id(map->got, map->n, got);
    if (i >= 0)
        return map->want[i] == want;
    return find_id(map->want, map->n, want) < 0;
}

static int pair_ids(demo_id_map *map, int64_t got, int64_t want)
{
    if (got < 0 || want < 0 || find_id(map->got, map->n, got) >= 0)
        return 0;
    if (map->n == map->cap) {
        int cap = map->cap ? 2 * map->cap : 256;
        int64_t *g = realloc(map->got, (size_t)cap * sizeof *g);
        if (!g)
            return -1;
        map->got = g;
        int64_t *w = realloc(map->want, (size_t)cap * sizeof *w);
        if (!w)
            return -1;
        map->want = w;
        map->cap = cap;
    }
    map->got[map->n] = got;
    map->want[map->n] = want;
    map->n++;
    return 0;
}

int demo_match_boxes_mapped(const demo_box *got, int n_got, const demo_box *want, int n_want,
                            double metres, demo_id_map *map)
{
    if (n_got <= 0 || n_want <= 0)
        return 0;
    unsigned char *used = calloc((size_t)n_got, 1);
    if (!used)
        return -1;
    int matched = 0;
    for (int wi = 0; wi < n_want; wi++) {
        const demo_box *w = &want[wi];
        int best = -1;
        double best_d = 0;
        for (int gi = 0; gi < n_got; gi++) {
            const demo_box *g = &got[gi];
            if (used[gi] || g->cls != w->cls || !ids_agree(map, g->track_id, w->track_id))
                continue;
            double dx = (double)g->x - w->x, dy = (double)g->y - w->y, dz = (double)g->z - w->z;
            double d = sqrt(dx * dx + dy * dy + dz * dz);
            if (d <= metres && (best < 0 || d < best_d)) { /* a NaN centre never matches */
                best = gi;
                best_d = d;
            }
        }
        if (best < 0)
            continue;
        if (pair_ids(map, got[best].track_id, w->track_id) != 0) {
            free(used);
            return -1;
        }
        used[best] = 1;
        matched++;
    }
    free(used);
    return matched;
}
