/*
 * A small RGB raster canvas for the demo's pictures: lines clipped to a
 * rectangle, digits, box corners in the model's convention, PNG output
 * through libpng.
 */
#ifndef S4D_DEMO_DRAW_H
#define S4D_DEMO_DRAW_H

#include <stdint.h>

#include "bev.h"

typedef struct demo_rgb {
    uint8_t r, g, b;
} demo_rgb;

typedef struct demo_canvas {
    int w, h;
    uint8_t *rgb;            /* w * h * 3 bytes, rows top to bottom */
    int clip[4];             /* x0, y0, x1, y1 (exclusive): drawing stays inside */
} demo_canvas;

/* Ten class colours (nuScenes class order), readable on dark and grey backgrounds. */
extern const demo_rgb demo_class_colour[10];

/* Allocates a w x h canvas filled with grey level `fill`; -1 when out of memory. */
int demo_canvas_init(demo_canvas *c, int w, int h, uint8_t fill);
void demo_canvas_free(demo_canvas *c);
void demo_canvas_clip(demo_canvas *c, int x0, int y0, int x1, int y1);

void demo_put(demo_canvas *c, int x, int y, demo_rgb col);
/* A line `thick` pixels wide (1 or more), clipped to the clip rectangle first. */
void demo_line(demo_canvas *c, double x0, double y0, double x1, double y1, demo_rgb col,
               int thick);
void demo_circle(demo_canvas *c, double cx, double cy, double r, demo_rgb col);
/* A non-negative integer in a 3x5 digit font, each font pixel scale x scale. */
void demo_number(demo_canvas *c, int x, int y, int64_t v, demo_rgb col, int scale);

/*
 * The 8 corners of a box in the lidar frame, in the model's convention: the
 * box's local x axis (at angle yaw) spans w, its local y axis l, z spans h.
 * Corner k has local signs (x: bit 0, y: bit 1, z: bit 2; set = +).
 * The heading (where the length points) is local +y.
 */
void demo_box_corners(const demo_box *b, double corners[8][3]);

/* Writes the canvas as an 8-bit RGB PNG; -1 with a message in err on failure. */
int demo_png_write(const char *path, const demo_canvas *c, char *err, int err_size);

#endif
