/* The cameras side by side with the boxes projected into each image. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bev.h"
#include "draw.h"

/* nuScenes viewer order: front-left, front, front-right / back-left, back, back-right */
static const int k_six[6] = {2, 0, 1, 4, 3, 5};
static const demo_rgb k_truth = {225, 225, 225};
static const double k_near = 0.1; /* metres: box edges are clipped at this depth */

static void project(const float *m, const double p[3], double out[3])
{
    for (int r = 0; r < 3; r++)
        out[r] = m[r * 4] * p[0] + m[r * 4 + 1] * p[1] + m[r * 4 + 2] * p[2] + m[r * 4 + 3];
}

/* One box into one tile (its top-left corner tx, ty), edges clipped at depth k_near. */
static void draw_box(demo_canvas *c, const float *proj, const demo_box *b, int tx, int ty,
                     int scale, demo_rgb col, int thick, int label)
{
    static const int edges[12][2] = {{0, 1}, {1, 3}, {3, 2}, {2, 0}, {4, 5}, {5, 7},
                                     {7, 6}, {6, 4}, {0, 4}, {1, 5}, {2, 6}, {3, 7}};
    double corners[8][3], hom[8][3];
    demo_box_corners(b, corners);
    int in_front = 0;
    for (int k = 0; k < 8; k++) {
        project(proj, corners[k], hom[k]);
        in_front += hom[k][2] > k_near;
    }
    if (!in_front)
        return;
    for (int e = 0; e < 12; e++) {
        double a[3], q[3];
        memcpy(a, hom[edges[e][0]], sizeof a);
        memcpy(q, hom[edges[e][1]], sizeof q);
        if (a[2] < k_near && q[2] < k_near)
            continue;
        /* (u z, v z, z) is linear along the edge: clip it there */
        if (a[2] < k_near || q[2] < k_near) {
            double *lo = a[2] < k_near ? a : q, *hi = a[2] < k_near ? q : a;
            double t = (k_near - lo[2]) / (hi[2] - lo[2]);
            for (int r = 0; r < 3; r++)
                lo[r] += t * (hi[r] - lo[r]);
        }
        demo_line(c, tx + a[0] / a[2] * scale, ty + a[1] / a[2] * scale, tx + q[0] / q[2] * scale,
                  ty + q[1] / q[2] * scale, col, thick);
    }
    /* the heading: a cross on the front face (local +y: corners 2, 3, 6, 7) */
    static const int cross[2][2] = {{2, 7}, {3, 6}};
    for (int d = 0; d < 2; d++) {
        const double *a = hom[cross[d][0]], *q = hom[cross[d][1]];
        if (a[2] > k_near && q[2] > k_near)
            demo_line(c, tx + a[0] / a[2] * scale, ty + a[1] / a[2] * scale,
                      tx + q[0] / q[2] * scale, ty + q[1] / q[2] * scale, col, 1);
    }
    if (label && b->track_id >= 0) {
        double top[3] = {b->x, b->y, b->z + 0.5 * b->h}, h[3];
        project(proj, top, h);
        if (h[2] > k_near)
            demo_number(c, tx + (int)lround(h[0] / h[2] * scale) - 4,
                        ty + (int)lround(h[1] / h[2] * scale) - 6 * (scale > 1 ? 2 : 1) - 2,
                        b->track_id, (demo_rgb){255, 255, 255}, scale > 1 ? 2 : 1);
    }
}

int mosaic_write_png(const char *path, const uint8_t *images, int num_cams, int height, int width,
                     const float *projection, const demo_box *boxes, int num_boxes,
                     const demo_box *gt, int num_gt, float score_threshold, int scale, char *err,
                     int err_size)
{
    if (num_cams < 1 || height < 1 || width < 1 || scale < 1 || scale > 16 ||
        (long long)width * scale * 3 > 16384 || (long long)height * scale * 2 * num_cams > 65536) {
        snprintf(err, err_size, "mosaic: bad size (%d cameras of %dx%d, scale %d)", num_cams,
                 height, width, scale);
        return -1;
    }
    int cols = num_cams >= 3 ? 3 : num_cams, rows = (num_cams + cols - 1) / cols;
    int tw = width * scale, th = height * scale, gap = 4;
    demo_canvas c;
    if (demo_canvas_init(&c, cols * tw + (cols - 1) * gap, rows * th + (rows - 1) * gap, 0) != 0) {
        snprintf(err, err_size, "mosaic: out of memory");
        return -1;
    }
    for (int slot = 0; slot < num_cams; slot++) {
        int cam = num_cams == 6 ? k_six[slot] : slot;
        int tx = (slot % cols) * (tw + gap), ty = (slot / cols) * (th + gap);
        const uint8_t *img = images + (size_t)cam * 3 * height * width;
        for (int y = 0; y < th; y++)
            for (int x = 0; x < tw; x++) {
                size_t src = (size_t)(y / scale) * width + (size_t)(x / scale);
                uint8_t *p = c.rgb + ((size_t)(ty + y) * c.w + tx + x) * 3;
                for (int ch = 0; ch < 3; ch++)
                    p[ch] = img[(size_t)ch * height * width + src];
            }
        demo_canvas_clip(&c, tx, ty, tx + tw, ty + th);
        const float *proj = projection + (size_t)cam * 16;
        for (int i = 0; gt && i < num_gt; i++)
            draw_box(&c, proj, &gt[i], tx, ty, scale, k_truth, 1, 0);
        for (int i = 0; i < num_boxes; i++) {
            const demo_box *b = &boxes[i];
            if (!(b->score >= score_threshold) || !isfinite(b->x) || !isfinite(b->y))
                continue;
            draw_box(&c, proj, b, tx, ty, scale, demo_class_colour[(b->cls >= 0 && b->cls < 10)
                                                                       ? b->cls : 0],
                     scale > 1 ? 2 : 1, 1);
        }
    }
    char perr[256] = "";
    int rc = demo_png_write(path, &c, perr, sizeof perr);
    if (rc != 0)
        snprintf(err, err_size, "mosaic: %s", perr);
    demo_canvas_free(&c);
    return rc;
}
