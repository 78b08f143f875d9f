/* Raster drawing and PNG output for the demo's pictures (see draw.h). */
#include "draw.h"

#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const demo_rgb demo_class_colour[10] = {
    {255, 80, 80},   {255, 200, 40}, {233, 150, 70}, {70, 150, 255}, {255, 140, 0},
    {112, 128, 144}, {220, 20, 60},  {60, 230, 90},  {230, 90, 255}, {47, 79, 79},
};

/* 3x5 digit glyphs, one row per byte, bit 2 = left column. */
static const uint8_t k_digits[10][5] = {
    {7, 5, 5, 5, 7}, {2, 6, 2, 2, 7}, {7, 1, 7, 4, 7}, {7, 1, 7, 1, 7}, {5, 5, 7, 1, 1},
    {7, 4, 7, 1, 7}, {7, 4, 7, 5, 7}, {7, 1, 1, 1, 1}, {7, 5, 7, 5, 7}, {7, 5, 7, 1, 7},
};

int demo_canvas_init(demo_canvas *c, int w, int h, uint8_t fill)
{
    memset(c, 0, sizeof *c);
    if (w < 1 || h < 1)
        return -1;
    c->rgb = malloc((size_t)w * h * 3);
    if (!c->rgb)
        return -1;
    memset(c->rgb, fill, (size_t)w * h * 3);
    c->w = w;
    c->h = h;
    demo_canvas_clip(c, 0, 0, w, h);
    return 0;
}

void demo_canvas_free(demo_canvas *c)
{
    if (!c)
        return;
    free(c->rgb);
    memset(c, 0, sizeof *c);
}

void demo_canvas_clip(demo_canvas *c, int x0, int y0, int x1, int y1)
{
    c->clip[0] = x0 < 0 ? 0 : x0;
    c->clip[1] = y0 < 0 ? 0 : y0;
    c->clip[2] = x1 > c->w ? c->w : x1;
    c->clip[3] = y1 > c->h ? c->h : y1;
}

void demo_put(demo_canvas *c, int x, int y, demo_rgb col)
{
    if (x < c->clip[0] || y < c->clip[1] || x >= c->clip[2] || y >= c->clip[3])
        return;
    uint8_t *p = c->rgb + ((size_t)y * c->w + x) * 3;
    p[0] = col.r;
    p[1] = col.g;
    p[2] = col.b;
}

/* Liang-Barsky: clips the segment to [x0, x1] x [y0, y1]; 0 when nothing is left. */
static int clip_segment(double *ax, double *ay, double *bx, double *by, double x0, double y0,
                        double x1, double y1)
{
    double t0 = 0, t1 = 1, dx = *bx - *ax, dy = *by - *ay;
    double p[4] = {-dx, dx, -dy, dy};
    double q[4] = {*ax - x0, x1 - *ax, *ay - y0, y1 - *ay};
    for (int i = 0; i < 4; i++) {
        if (p[i] == 0) {
            if (q[i] < 0)
                return 0;
            continue;
        }
        double r = q[i] / p[i];
        if (p[i] < 0) {
            if (r > t1)
                return 0;
            if (r > t0)
                t0 = r;
        } else {
            if (r < t0)
                return 0;
            if (r < t1)
                t1 = r;
        }
    }
    double sx = *ax, sy = *ay;
    *ax = sx + t0 * dx;
    *ay = sy + t0 * dy;
    *bx = sx + t1 * dx;
    *by = sy + t1 * dy;
    return 1;
}

void demo_line(demo_canvas *c, double x0, double y0, double x1, double y1, demo_rgb col,
               int thick)
{
    if (!isfinite(x0) || !isfinite(y0) || !isfinite(x1) || !isfinite(y1))
        return;
    if (thick < 1)
        thick = 1;
    double m = thick; /* a margin so thick lines reach the clip edge */
    if (!clip_segment(&x0, &y0, &x1, &y1, c->clip[0] - m, c->clip[1] - m, c->clip[2] + m,
                      c->clip[3] + m))
        return;
    double dx = x1 - x0, dy = y1 - y0;
    int steps = (int)ceil(fmax(fabs(dx), fabs(dy)));
    if (steps < 1)
        steps = 1;
    int lo = -(thick - 1) / 2, hi = thick / 2;
    for (int i = 0; i <= steps; i++) {
        double t = (double)i / steps;
        int x = (int)lround(x0 + t * dx), y = (int)lround(y0 + t * dy);
        for (int oy = lo; oy <= hi; oy++)
            for (int ox = lo; ox <= hi; ox++)
                demo_put(c, x + ox, y + oy, col);
    }
}

void demo_circle(demo_canvas *c, double cx, double cy, double r, demo_rgb col)
{
    int n = (int)(2 * 3.14159265358979323846 * r) + 8;
    for (int i = 0; i < n; i++) {
        double a = 2 * 3.14159265358979323846 * i / n;
        demo_put(c, (int)lround(cx + r * cos(a)), (int)lround(cy + r * sin(a)), col);
    }
}

void demo_number(demo_canvas *c, int x, int y, int64_t v, demo_rgb col, int scale)
{
    char s[24];
    if (scale < 1)
        scale = 1;
    snprintf(s, sizeof s, "%lld", (long long)v);
    for (int k = 0; s[k]; k++) {
        if (s[k] < '0' || s[k] > '9')
            continue;
        const uint8_t *g = k_digits[s[k] - '0'];
        for (int r = 0; r < 5; r++)
            for (int b = 0; b < 3; b++)
                if (g[r] & (4 >> b))
                    for (int sy = 0; sy < scale; sy++)
                        for (int sx = 0; sx < scale; sx++)
                            demo_put(c, x + (k * 4 + b) * scale + sx, y + r * scale + sy, col);
    }
}

void demo_box_corners(const demo_box *b, double corners[8][3])
{
    double cy = cos(b->yaw), sy = sin(b->yaw);
    for (int k = 0; k < 8; k++) {
        double ox = (k & 1 ? 0.5 : -0.5) * b->w;
        double oy = (k & 2 ? 0.5 : -0.5) * b->l;
        double oz = (k & 4 ? 0.5 : -0.5) * b->h;
        corners[k][0] = b->x + cy * ox - sy * oy;
        corners[k][1] = b->y + sy * ox + cy * oy;
        corners[k][2] = b->z + oz;
    }
}

int demo_png_write(const char *path, const demo_canvas *c, char *err, int err_size)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        snprintf(err, err_size, "cannot open '%s' for writing", path);
        return -1;
    }
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!png || !info || setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        fclose(f);
        snprintf(err, err_size, "libpng failed writing '%s'", path);
        return -1;
    }
    png_init_io(png, f);
    png_set_IHDR(png, info, c->w, c->h, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < c->h; y++)
        png_write_row(png, c->rgb + (size_t)y * c->w * 3);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    if (fclose(f) != 0) {
        snprintf(err, err_size, "error closing '%s'", path);
        return -1;
    }
    return 0;
}
