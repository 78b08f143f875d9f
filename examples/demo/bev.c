/* Bird's-eye-view PNG of the decoded boxes: a small raster canvas, encoded by libpng. */
#include "bev.h"

#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BEV_PI 3.14159265358979323846

typedef struct canvas {
    int w, h;
    uint8_t *rgb;
} canvas;

typedef struct rgb {
    uint8_t r, g, b;
} rgb;

/* Ten class colours, readable on a dark background. */
static const rgb k_class_colour[10] = {
    {255, 158, 0},  {255, 99, 71},  {233, 150, 70}, {255, 69, 0},   {255, 140, 0},
    {112, 128, 144}, {220, 20, 60}, {255, 61, 99},  {0, 0, 230},    {47, 79, 79},
};

/* 3x5 digit glyphs, one row per byte, bit 2 = left column. */
static const uint8_t k_digits[10][5] = {
    {7, 5, 5, 5, 7}, {2, 6, 2, 2, 7}, {7, 1, 7, 4, 7}, {7, 1, 7, 1, 7}, {5, 5, 7, 1, 1},
    {7, 4, 7, 1, 7}, {7, 4, 7, 5, 7}, {7, 1, 1, 1, 1}, {7, 5, 7, 5, 7}, {7, 5, 7, 1, 7},
};

static void put(canvas *c, int x, int y, rgb col)
{
    if (x < 0 || y < 0 || x >= c->w || y >= c->h)
        return;
    uint8_t *p = c->rgb + ((size_t)y * c->w + x) * 3;
    p[0] = col.r;
    p[1] = col.g;
    p[2] = col.b;
}

static void line(canvas *c, double x0, double y0, double x1, double y1, rgb col)
{
    double dx = x1 - x0, dy = y1 - y0;
    int steps = (int)ceil(fmax(fabs(dx), fabs(dy)));
    if (steps < 1)
        steps = 1;
    if (steps > 4 * (c->w + c->h))
        steps = 4 * (c->w + c->h); /* guards against absurd coordinates */
    for (int i = 0; i <= steps; i++) {
        double t = (double)i / steps;
        put(c, (int)lround(x0 + t * dx), (int)lround(y0 + t * dy), col);
    }
}

static void circle(canvas *c, double cx, double cy, double r, rgb col)
{
    int n = (int)(2 * BEV_PI * r) + 8;
    for (int i = 0; i < n; i++) {
        double a = 2 * BEV_PI * i / n;
        put(c, (int)lround(cx + r * cos(a)), (int)lround(cy + r * sin(a)), col);
    }
}

static void number(canvas *c, int x, int y, int64_t v, rgb col)
{
    char s[24];
    snprintf(s, sizeof s, "%lld", (long long)v);
    for (int k = 0; s[k]; k++) {
        if (s[k] < '0' || s[k] > '9')
            continue;
        const uint8_t *g = k_digits[s[k] - '0'];
        for (int r = 0; r < 5; r++)
            for (int b = 0; b < 3; b++)
                if (g[r] & (4 >> b))
                    put(c, x + k * 4 + b, y + r, col);
    }
}

int bev_write_png(const char *path, const demo_box *boxes, int num_boxes, float score_threshold,
                  int size, float range, char *err, int err_size)
{
    if (size < 16 || size > 8192 || !(range > 0)) {
        snprintf(err, err_size, "bev: bad picture size %d or range %g", size, range);
        return -1;
    }
    canvas c = {size, size, calloc((size_t)size * size, 3)};
    if (!c.rgb) {
        snprintf(err, err_size, "bev: out of memory for a %dx%d picture", size, size);
        return -1;
    }
    memset(c.rgb, 24, (size_t)size * size * 3);
    double ppm = size / (2.0 * range); /* pixels per metre */
    double ox = size / 2.0, oy = size / 2.0;
    /* ego x (forward) points up, ego y (left) points left */
#define PX(ex, ey) (ox - (ey) * ppm)
#define PY(ex, ey) (oy - (ex) * ppm)
    rgb ring = {70, 70, 70}, ego = {240, 240, 240}, text = {230, 230, 230};
    for (int r = 10; r <= (int)range; r += 10)
        circle(&c, ox, oy, r * ppm, ring);
    /* ego car: 4.1 m x 1.8 m, nose marked */
    double el = 2.05, ew = 0.9;
    line(&c, PX(el, ew), PY(el, ew), PX(el, -ew), PY(el, -ew), ego);
    line(&c, PX(el, -ew), PY(el, -ew), PX(-el, -ew), PY(-el, -ew), ego);
    line(&c, PX(-el, -ew), PY(-el, -ew), PX(-el, ew), PY(-el, ew), ego);
    line(&c, PX(-el, ew), PY(-el, ew), PX(el, ew), PY(el, ew), ego);
    line(&c, PX(0, 0), PY(0, 0), PX(el + 1, 0), PY(el + 1, 0), ego);

    for (int i = 0; i < num_boxes; i++) {
        const demo_box *b = &boxes[i];
        if (!(b->score >= score_threshold) || !isfinite(b->x) || !isfinite(b->y))
            continue;
        rgb col = k_class_colour[(b->cls >= 0 && b->cls < 10) ? b->cls : 0];
        double cy = cos(b->yaw), sy = sin(b->yaw);
        double hl = 0.5 * b->l, hw = 0.5 * b->w;
        double cx4[4] = {hl, hl, -hl, -hl}, cy4[4] = {hw, -hw, -hw, hw};
        double gx[4], gy[4];
        for (int k = 0; k < 4; k++) {
            double ex = b->x + cy * cx4[k] - sy * cy4[k];
            double ey = b->y + sy * cx4[k] + cy * cy4[k];
            gx[k] = PX(ex, ey);
            gy[k] = PY(ex, ey);
        }
        for (int k = 0; k < 4; k++)
            line(&c, gx[k], gy[k], gx[(k + 1) % 4], gy[(k + 1) % 4], col);
        /* heading: centre to the middle of the front edge */
        line(&c, PX(b->x, b->y), PY(b->x, b->y), 0.5 * (gx[0] + gx[1]), 0.5 * (gy[0] + gy[1]), col);
        if (b->track_id >= 0)
            number(&c, (int)PX(b->x, b->y) + 4, (int)PY(b->x, b->y) - 8, b->track_id, text);
    }
#undef PX
#undef PY

    FILE *f = fopen(path, "wb");
    if (!f) {
        snprintf(err, err_size, "bev: cannot open '%s' for writing", path);
        free(c.rgb);
        return -1;
    }
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!png || !info || setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        fclose(f);
        free(c.rgb);
        snprintf(err, err_size, "bev: libpng failed writing '%s'", path);
        return -1;
    }
    png_init_io(png, f);
    png_set_IHDR(png, info, size, size, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < size; y++)
        png_write_row(png, c.rgb + (size_t)y * size * 3);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    int rc = fclose(f);
    free(c.rgb);
    if (rc != 0) {
        snprintf(err, err_size, "bev: error closing '%s'", path);
        return -1;
    }
    return 0;
}
