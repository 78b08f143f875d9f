/*
 * Bird's-eye-view rendering of decoded boxes into a PNG (libpng).
 * Ego frame: x forward, y left, metres; the picture shows forward up.
 */
#ifndef S4D_DEMO_BEV_H
#define S4D_DEMO_BEV_H

#include <stdint.h>

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
 * Draws range rings every 10 m, the ego car, each box with its heading and
 * track id, into a size x size picture covering +-range metres, and writes it.
 * Returns 0 on success, -1 with a message in err on failure.
 */
int bev_write_png(const char *path, const demo_box *boxes, int num_boxes, float score_threshold,
                  int size, float range, char *err, int err_size);

#endif
