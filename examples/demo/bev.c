/* Bird's-eye-view PNG of the decoded and ground-truth boxes. */
#include "bev.h"

#include <math.h>
#include <stdio.h>

#include "draw.h"

static const demo_rgb k_truth = {200, 200, 200};

static void draw_box(demo_canvas *c, const demo_box *b, double ox, double oy, double ppm,
                     demo_rgb col, int thick, int label)
{
    /* ego x (forward) points up, ego y (left) points left */
#define PX(ex, ey) (ox - (ey) * ppm)
#define PY(ex, ey) (oy - (ex) * ppm)
    double corners[8][3];
    demo_box_corners(b, corners);
    /* the bottom face, corners 0, 1, 3, 2 in order around it */
    static const int ring[4] = {0, 1, 3, 2};
    for (int k = 0; k < 4; k++) {
        const double *p = corners[ring[k]], *q = corners[ring[(k + 1) % 4]];
        demo_line(c, PX(p[0], p[1]), PY(p[0], p[1]), PX(q[0], q[1]), PY(q[0], q[1]), col, thick);
    }
    /* heading: centre to the middle of the front edge (local +y: corners 2, 3) */
    double fx = 0.5 * (corners[2][0] + corners[3][0]), fy = 0.5 * (corners[2][1] + corners[3][1]);
    demo_line(c, PX(b->x, b->y), PY(b->x, b->y), PX(fx, fy), PY(fx, fy), col, thick);
    if (label && b->track_id >= 0)
        demo_number(c, (int)PX(b->x, b->y) + 5, (int)PY(b->x, b->y) - 9, b->track_id,
                    (demo_rgb){235, 235, 235}, 1);
#undef PX
#undef PY
}

int bev_write_png(const char *path, const demo_box *boxes, int num_boxes, const demo_box *gt,
                  int num_gt, float score_threshold, int size, float range, char *err,
                  int err_size)
{
    if (size < 16 || size > 8192 || !(range > 0)) {
        snprintf(err, err_size, "bev: bad picture size %d or range %g", size, range);
        return -1;
    }
    demo_canvas c;
    if (demo_canvas_init(&c, size, size, 24) != 0) {
        snprintf(err, err_size, "bev: out of memory for a %dx%d picture", size, size);
        return -1;
    }
    double ppm = size / (2.0 * range); /* pixels per metre */
    double ox = size / 2.0, oy = size / 2.0;
    demo_rgb ring = {70, 70, 70}, ego = {240, 240, 240};
    for (int r = 10; r <= (int)range; r += 10)
        demo_circle(&c, ox, oy, r * ppm, ring);
    /* the ego car, 1.8 m x 4.1 m, facing forward (up) */
    demo_box me = {0, 0, 0, 1.8f, 4.1f, 1.5f, (float)(-3.14159265358979323846 / 2), 0, 0, 1, 0,
                   -1};
    draw_box(&c, &me, ox, oy, ppm, ego, 1, 0);
    for (int i = 0; gt && i < num_gt; i++)
        if (isfinite(gt[i].x) && isfinite(gt[i].y))
            draw_box(&c, &gt[i], ox, oy, ppm, k_truth, 1, 0);
    for (int i = 0; i < num_boxes; i++) {
        const demo_box *b = &boxes[i];
        if (!(b->score >= score_threshold) || !isfinite(b->x) || !isfinite(b->y))
            continue;
        demo_rgb col = demo_class_colour[(b->cls >= 0 && b->cls < 10) ? b->cls : 0];
        draw_box(&c, b, ox, oy, ppm, col, 2, 1);
    }
    char perr[256] = "";
    int rc = demo_png_write(path, &c, perr, sizeof perr);
    if (rc != 0)
        snprintf(err, err_size, "bev: %s", perr);
    demo_canvas_free(&c);
    return rc;
}
