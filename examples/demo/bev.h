/*
 * Bird's-eye-view and camera pictures of decoded boxes (PNG through libpng).
 * Ego frame: x forward, y left, metres; the bird's-eye view shows forward up.
 */
#ifndef S4D_DEMO_BEV_H
#define S4D_DEMO_BEV_H

#include <stdint.h>

/*
 * A box in the model's convention: the box's local x axis (at angle yaw)
 * spans w, its local y axis spans l, so the heading (where the length
 * points) is yaw + pi/2.
 */
typedef struct demo_box {
    float x, y, z;    /* centre, metres */
    float w, l, h;    /* sizes, metres */
    float yaw;        /* radians, about z */
    float vx, vy;     /* metres per second */
    float score;
    int cls;
    int64_t track_id; /* -1 when none */
} demo_box;

/*
 * Draws range rings every 10 m, the ego car, the ground-truth boxes (gt,
 * may be NULL; light grey) and each box scoring at least score_threshold
 * with its heading and track id, coloured by class, into a size x size
 * picture covering +-range metres, and writes it. Returns 0 on success, -1
 * with a message in err on failure.
 */
int bev_write_png(const char *path, const demo_box *boxes, int num_boxes, const demo_box *gt,
                  int num_gt, float score_threshold, int size, float range, char *err,
                  int err_size);

/*
 * The cameras side by side (six: front-left, front, front-right above
 * back-left, back, back-right), each image [3, H, W] uint8 of `images`
 * ([N, 3, H, W]) enlarged `scale` times, with the ground-truth boxes (thin,
 * light grey) and the boxes scoring at least score_threshold (class colour,
 * track id) projected through `projection` ([N, 4, 4] lidar to image
 * pixels). Returns 0, or -1 with a message in err.
 */
int mosaic_write_png(const char *path, const uint8_t *images, int num_cams, int height, int width,
                     const float *projection, const demo_box *boxes, int num_boxes,
                     const demo_box *gt, int num_gt, float score_threshold, int scale, char *err,
                     int err_size);

#endif
