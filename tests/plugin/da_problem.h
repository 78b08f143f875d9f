/*
 * A random deformable aggregation problem for the plugin tests, its float64
 * reference, and plugin descriptors/tensors for it (header-only, static).
 */
#ifndef S4D_TESTS_PLUGIN_DA_PROBLEM_H
#define S4D_TESTS_PLUGIN_DA_PROBLEM_H

#include <math.h>
#include <stdlib.h>

#include "plugin_test.h"
#include "s4d/plugin.h"

/* ---- a random problem -------------------------------------------------------------- */

enum { BS = 2, NC = 3, NL = 2, C = 16, G = 4, NA = 7, NP = 5 };

typedef struct problem {
    int64_t F;
    int32_t shape[NC * NL * 2];
    int32_t start[NC * NL];
    float *feat;  /* [BS, F, C] */
    float loc[BS * NA * NP * NC * 2];
    float w[BS * NA * NP * NC * NL * G];
} problem;

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static float uniform(float lo, float hi)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return lo + (hi - lo) * (float)((g_rng >> 11) * (1.0 / 9007199254740992.0));
}

static void make_problem(problem *pb)
{
    int64_t rows = 0;
    for (int n = 0; n < NC; n++) {
        for (int l = 0; l < NL; l++) {
            /* Cameras differ in size, as they may in a real rig. */
            int32_t H = l == 0 ? 5 + n : 3, W = l == 0 ? 8 + n : 4 + n;
            pb->shape[(n * NL + l) * 2] = H;
            pb->shape[(n * NL + l) * 2 + 1] = W;
            pb->start[n * NL + l] = (int32_t)rows;
            rows += (int64_t)H * W;
        }
    }
    pb->F = rows;
    pb->feat = malloc(sizeof(float) * BS * rows * C);
    for (int64_t i = 0; i < BS * rows * C; i++)
        pb->feat[i] = uniform(-1.f, 1.f);
    /* Locations reach past the image on every side so invalid points occur. */
    for (size_t i = 0; i < sizeof(pb->loc) / sizeof(float); i++)
        pb->loc[i] = uniform(-0.15f, 1.15f);
    pb->loc[6] = NAN; /* a NaN location counts as outside the image */
    for (size_t i = 0; i < sizeof(pb->w) / sizeof(float); i++)
        pb->w[i] = uniform(0.f, 1.f);
}

/* out[b,a,c] in float64 straight from the definition (SPARSE4D.md section 1). */
__attribute__((unused)) static void reference(const problem *pb, double *out)
{
    const int64_t F = pb->F;
    for (int b = 0; b < BS; b++)
        for (int a = 0; a < NA; a++)
            for (int c = 0; c < C; c++) {
                int g = c / (C / G);
                double acc = 0.0;
                for (int p = 0; p < NP; p++)
                    for (int n = 0; n < NC; n++) {
                        const float *xy = &pb->loc[((((int64_t)b * NA + a) * NP + p) * NC + n) * 2];
                        double x = xy[0], y = xy[1];
                        if (!(x > 0.0 && x < 1.0 && y > 0.0 && y < 1.0))
                            continue;
                        for (int l = 0; l < NL; l++) {
                            int H = pb->shape[(n * NL + l) * 2], W = pb->shape[(n * NL + l) * 2 + 1];
                            int64_t s0 = pb->start[n * NL + l];
                            double wt = pb->w[(((((int64_t)b * NA + a) * NP + p) * NC + n) * NL + l) * G + g];
                            double hy = y * H - 0.5, wx = x * W - 0.5;
                            double h0 = floor(hy), w0 = floor(wx);
                            double lh = hy - h0, lw = wx - w0;
                            double v = 0.0;
                            for (int dh = 0; dh < 2; dh++)
                                for (int dw = 0; dw < 2; dw++) {
                                    int64_t hh = (int64_t)h0 + dh, ww = (int64_t)w0 + dw;
                                    if (hh < 0 || hh > H - 1 || ww < 0 || ww > W - 1)
                                        continue;
                                    double cw = (dh ? lh : 1 - lh) * (dw ? lw : 1 - lw);
                                    v += cw * pb->feat[((int64_t)b * F + s0 + hh * W + ww) * C + c];
                                }
                            acc += wt * v;
                        }
                    }
                out[((int64_t)b * NA + a) * C + c] = acc;
            }
}

/* ---- descriptors and tensors --------------------------------------------------------- */

static s4d_plugin_tensor_desc desc(s4d_dtype dt, int rank, const int64_t *dims)
{
    s4d_plugin_tensor_desc d;
    memset(&d, 0, sizeof(d));
    d.abi_version = S4D_PLUGIN_ABI_VERSION;
    d.struct_size = sizeof(d);
    d.dtype = dt;
    d.device = S4D_DEVICE_CPU;
    d.rank = rank;
    for (int i = 0; i < rank; i++)
        d.dims[i] = dims[i];
    return d;
}

static void input_descs(const problem *pb, s4d_plugin_tensor_desc in[5])
{
    int64_t d0[] = {BS, pb->F, C}, d1[] = {NC, NL, 2}, d2[] = {NC, NL}, d3[] = {BS, NA, NP, NC, 2},
            d4[] = {BS, NA, NP, NC, NL, G};
    in[0] = desc(S4D_DTYPE_FLOAT32, 3, d0);
    in[1] = desc(S4D_DTYPE_INT32, 3, d1);
    in[2] = desc(S4D_DTYPE_INT32, 2, d2);
    in[3] = desc(S4D_DTYPE_FLOAT32, 5, d3);
    in[4] = desc(S4D_DTYPE_FLOAT32, 6, d4);
}

static void run_tensors(problem *pb, float *out, s4d_plugin_tensor in[5], s4d_plugin_tensor *o)
{
    s4d_plugin_tensor_desc d[5];
    input_descs(pb, d);
    void *data[5] = {pb->feat, pb->shape, pb->start, pb->loc, pb->w};
    for (int i = 0; i < 5; i++) {
        memset(&in[i], 0, sizeof(in[i]));
        in[i].abi_version = S4D_PLUGIN_ABI_VERSION;
        in[i].struct_size = sizeof(in[i]);
        in[i].desc = d[i];
        in[i].data = data[i];
    }
    int64_t od[] = {BS, NA, C};
    memset(o, 0, sizeof(*o));
    o->abi_version = S4D_PLUGIN_ABI_VERSION;
    o->struct_size = sizeof(*o);
    o->desc = desc(S4D_DTYPE_FLOAT32, 3, od);
    o->data = out;
}

__attribute__((unused)) static s4d_plugin_run_info cpu_run(int threads)
{
    s4d_plugin_run_info r;
    memset(&r, 0, sizeof(r));
    r.abi_version = S4D_PLUGIN_ABI_VERSION;
    r.struct_size = sizeof(r);
    r.device = S4D_DEVICE_CPU;
    r.num_threads = threads;
    return r;
}

__attribute__((unused)) static s4d_status enqueue(const s4d_plugin *p, problem *pb, float *out, int threads, s4d_errbuf *err)
{
    s4d_plugin_tensor in[5], o;
    run_tensors(pb, out, in, &o);
    s4d_plugin_run_info run = cpu_run(threads);
    return p->enqueue(p, in, 5, &o, 1, &run, err);
}

#define OUT_N (BS * NA * C)

/* float <-> IEEE float16 bits, round to nearest even (normal, subnormal, inf, NaN). */
__attribute__((unused)) static uint16_t f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u, mag = u & 0x7fffffffu;
    if (mag >= 0x7f800000u)
        return (uint16_t)(sign | 0x7c00u | (mag > 0x7f800000u ? 0x200u : 0u));
    if (mag >= 0x477ff000u) /* rounds to 65520 or more: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (mag < 0x38800000u) { /* below 2^-14: subnormal half (or zero) */
        float a;
        memcpy(&a, &mag, 4);
        return (uint16_t)(sign | (uint32_t)lrintf(a * 16777216.0f)); /* units of 2^-24, nearest even */
    }
    uint32_t h = ((mag - 0x38000000u) >> 13), rest = mag & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
        h++;
    return (uint16_t)(sign | h);
}

__attribute__((unused)) static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    if (e == 0) {
        float f = (float)m / 16777216.0f;
        return sign ? -f : f;
    }
    u = e == 31 ? sign | 0x7f800000u | (m << 13) : sign | ((e + 112u) << 23) | (m << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#endif
