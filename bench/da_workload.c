/*
 * Generator of the realistic deformable aggregation workload.
 *
 * The rig follows nuScenes: six cameras around the car (front, front-right,
 * front-left, back, back-left, back-right), 1600x900 images resized by 0.44
 * and cropped by 140 rows at the top to 704x256. Anchors are spread like
 * nuScenes objects within ~55 m (cars, pedestrians, trucks, barriers); each
 * carries Sparse4D's 13 keypoints: the centre, +-0.45 x size along each axis,
 * and 6 random offsets within the box.
 */
#include "da_workload.h"

#define PI 3.14159265358979323846

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NCAM 6
#define NLVL 4
#define NPTS 13
#define IMG_W 704.0
#define IMG_H 256.0

typedef struct cam {
    double yaw;   /* optical axis direction in the ego x-y plane (x forward, y left) */
    double fx;    /* focal length in pixels of the resized, cropped image */
    double pos[3];
} cam;

/* Intrinsics after resize 0.44 and the crop: cx, cy in the 704x256 image. */
static const double kCx = 0.44 * 816.0, kCy = 0.44 * 491.0 - 140.0;

static const cam kRig[NCAM] = {
    {0.0, 0.44 * 1266.0, {1.7, 0.0, -0.3}},
    {-55.0 * PI / 180.0, 0.44 * 1260.0, {1.5, -0.5, -0.3}},
    {55.0 * PI / 180.0, 0.44 * 1257.0, {1.5, 0.5, -0.3}},
    {PI, 0.44 * 796.0, {0.0, 0.0, -0.3}},
    {110.0 * PI / 180.0, 0.44 * 1256.0, {1.0, 0.5, -0.3}},
    {-110.0 * PI / 180.0, 0.44 * 1259.0, {1.0, -0.5, -0.3}},
};

static const int kLevels[NLVL][2] = {{64, 176}, {32, 88}, {16, 44}, {8, 22}};

static uint64_t s_state;

static double urand(void)
{
    uint64_t z = (s_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

/* Projects an ego-frame point into camera k: normalised (x, y), depth clamped like Sparse4D. */
static void project(const cam *c, const double p[3], float *x, float *y)
{
    double d[3] = {p[0] - c->pos[0], p[1] - c->pos[1], p[2] - c->pos[2]};
    double cy = cos(c->yaw), sy = sin(c->yaw);
    /* Camera frame: z forward, x right, y down. */
    double zc = cy * d[0] + sy * d[1];
    double xc = sy * d[0] - cy * d[1];
    double yc = -d[2];
    double depth = zc < 1e-5 ? 1e-5 : zc;
    double u = c->fx * xc / depth + kCx, v = c->fx * yc / depth + kCy;
    *x = (float)(u / IMG_W);
    *y = (float)(v / IMG_H);
}

int da_workload_make(da_workload *w, int64_t batch, int64_t anchors, int64_t channels, uint64_t seed)
{
    memset(w, 0, sizeof *w);
    s_state = seed;
    s4d_da_sizes *s = &w->sizes;
    s->struct_size = sizeof *s;
    s->batch = batch;
    s->channels = channels;
    s->num_cams = NCAM;
    s->num_levels = NLVL;
    s->num_groups = 8;
    s->num_anchors = anchors;
    s->num_points = NPTS;
    w->spatial_shape = (int32_t *)malloc(sizeof(int32_t) * NCAM * NLVL * 2);
    w->scale_start_index = (int32_t *)malloc(sizeof(int32_t) * NCAM * NLVL);
    if (!w->spatial_shape || !w->scale_start_index)
        return -1;
    int64_t rows = 0;
    for (int n = 0; n < NCAM; n++)
        for (int l = 0; l < NLVL; l++) {
            w->spatial_shape[2 * (n * NLVL + l)] = kLevels[l][0];
            w->spatial_shape[2 * (n * NLVL + l) + 1] = kLevels[l][1];
            w->scale_start_index[n * NLVL + l] = (int32_t)rows;
            rows += (int64_t)kLevels[l][0] * kLevels[l][1];
        }
    s->num_rows = rows;
    int64_t nfeat = batch * rows * s->channels;
    int64_t npairs = batch * anchors * NPTS * NCAM;
    int64_t nw = npairs * NLVL * s->num_groups;
    w->features = (float *)malloc(sizeof(float) * (size_t)nfeat);
    w->sampling_location = (float *)malloc(sizeof(float) * 2 * (size_t)npairs);
    w->weights = (float *)malloc(sizeof(float) * (size_t)nw);
    if (!w->features || !w->sampling_location || !w->weights)
        return -1;
    for (int64_t i = 0; i < nfeat; i++)
        w->features[i] = (float)(urand() * 2.0 - 1.0);
    /* Weights: positive, softmax-like scale (Sparse4D normalises over 312 entries per group). */
    for (int64_t i = 0; i < nw; i++)
        w->weights[i] = (float)((0.2 + urand()) / 312.0 * 2.0);

    int64_t seen_hist[4] = {0, 0, 0, 0}, inside = 0;
    for (int64_t b = 0; b < batch; b++)
        for (int64_t a = 0; a < anchors; a++) {
            /* Object centre: denser nearby, like annotated objects; z near the ground. */
            double r = 3.0 + 52.0 * sqrt(urand()), th = 2.0 * PI * urand();
            double cx = r * cos(th), cy = r * sin(th);
            double kind = urand();
            double size[3]; /* w, l, h */
            if (kind < 0.55) {
                size[0] = 1.9; size[1] = 4.6; size[2] = 1.7;
            } else if (kind < 0.75) {
                size[0] = 0.7; size[1] = 0.7; size[2] = 1.8;
            } else if (kind < 0.87) {
                size[0] = 2.5; size[1] = 7.0; size[2] = 3.0;
            } else {
                size[0] = 0.5; size[1] = 2.0; size[2] = 1.0;
            }
            double cz = -1.8 + size[2] / 2.0;
            double yaw = 2.0 * PI * urand();
            double c = cos(yaw), sn = sin(yaw);
            for (int p = 0; p < NPTS; p++) {
                double off[3] = {0, 0, 0}; /* along length (x), width (y), height (z) */
                if (p >= 1 && p <= 6) {
                    int axis = (p - 1) / 2;
                    double sgn = (p - 1) % 2 ? -0.45 : 0.45;
                    off[axis] = sgn * (axis == 0 ? size[1] : axis == 1 ? size[0] : size[2]);
                } else if (p >= 7) {
                    off[0] = (urand() - 0.5) * size[1];
                    off[1] = (urand() - 0.5) * size[0];
                    off[2] = (urand() - 0.5) * size[2];
                }
                double pt[3] = {cx + c * off[0] - sn * off[1], cy + sn * off[0] + c * off[1],
                                cz + off[2]};
                int seen = 0;
                for (int n = 0; n < NCAM; n++) {
                    int64_t pair = ((b * anchors + a) * NPTS + p) * NCAM + n;
                    float x, y;
                    project(&kRig[n], pt, &x, &y);
                    w->sampling_location[2 * pair] = x;
                    w->sampling_location[2 * pair + 1] = y;
                    if (da_location_inside(x, y))
                        seen++;
                }
                inside += seen;
                seen_hist[seen < 3 ? seen : 3]++;
            }
        }
    w->valid_pairs = inside;
    w->inside_fraction = npairs ? (double)inside / (double)npairs : 0.0;
    int64_t npts = batch * anchors * NPTS;
    for (int i = 0; i < 4; i++)
        w->seen_by[i] = npts ? (double)seen_hist[i] / (double)npts : 0.0;

    /* Unique feature rows the forward reads: mark every in-map corner. */
    unsigned char *mark = (unsigned char *)calloc((size_t)(batch * rows), 1);
    if (!mark)
        return -1;
    for (int64_t pair = 0; pair < npairs; pair++) {
        float x = w->sampling_location[2 * pair], y = w->sampling_location[2 * pair + 1];
        if (!(x > 0.0f && x < 1.0f && y > 0.0f && y < 1.0f))
            continue;
        int64_t n = pair % NCAM, b = pair / (anchors * NPTS * NCAM);
        for (int l = 0; l < NLVL; l++) {
            int64_t H = kLevels[l][0], W = kLevels[l][1];
            double hf = y * (double)H - 0.5, wf = x * (double)W - 0.5;
            int64_t h0 = (int64_t)floor(hf), w0 = (int64_t)floor(wf);
            for (int k = 0; k < 4; k++) {
                int64_t h = h0 + (k >> 1), ww = w0 + (k & 1);
                if (h < 0 || h >= H || ww < 0 || ww >= W)
                    continue;
                mark[b * rows + w->scale_start_index[n * NLVL + l] + h * W + ww] = 1;
            }
        }
    }
    for (int64_t i = 0; i < batch * rows; i++)
        w->unique_rows += mark[i];
    free(mark);
    return 0;
}

void da_workload_free(da_workload *w)
{
    free(w->spatial_shape);
    free(w->scale_start_index);
    free(w->features);
    free(w->sampling_location);
    free(w->weights);
    memset(w, 0, sizeof *w);
}

s4d_da_forward_args da_forward_args_f32(const s4d_da_sizes *s, const int32_t *shape,
                                        const int32_t *start, const float *feat, const float *loc,
                                        const float *w, void *out)
{
    s4d_da_forward_args a;
    memset(&a, 0, sizeof a);
    a.struct_size = sizeof a;
    a.sizes = *s;
    a.features_dtype = a.weights_dtype = a.output_dtype = S4D_DTYPE_FLOAT32;
    a.features = feat;
    a.spatial_shape = shape;
    a.scale_start_index = start;
    a.sampling_location = loc;
    a.weights = w;
    a.output = out;
    return a;
}

s4d_da_backward_args da_backward_args_f32(const s4d_da_sizes *s, const int32_t *shape,
                                          const int32_t *start, const float *feat,
                                          const float *loc, const float *w, const void *gout,
                                          void *gfeat, float *gloc, void *gw)
{
    s4d_da_backward_args a;
    memset(&a, 0, sizeof a);
    a.struct_size = sizeof a;
    a.sizes = *s;
    a.features_dtype = a.weights_dtype = a.grad_output_dtype = S4D_DTYPE_FLOAT32;
    a.features = feat;
    a.spatial_shape = shape;
    a.scale_start_index = start;
    a.sampling_location = loc;
    a.weights = w;
    a.grad_output = gout;
    a.grad_features = gfeat;
    a.grad_sampling_location = gloc;
    a.grad_weights = gw;
    return a;
}
