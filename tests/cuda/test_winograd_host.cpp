/*
 * The Winograd convolution's kernels (backend/cuda/kernels/winograd.cu) built
 * for the host (S4D_EW_HOST_BUILD) and run in the order dense_conv.c runs
 * them: U from W, V from X, the 36 products M = U V (here in double, rounded
 * to float), then Y from M with the bias, the residual and ReLU. Each case is
 * compared with a direct float64 convolution: the index math of the tiles
 * (the last ones cut by the plane's edge), the padding (0, 1 and 2), the
 * layouts of U, V and M, the 16-byte row stores and the element by element
 * ones (rows whose width is no multiple of 4, or buffers one element off
 * alignment), every epilogue, a residual that aliases Y, and NaN: every
 * output whose 3 x 3 window reads a NaN must be NaN, and outputs of tiles
 * whose 6 x 6 patch does not read it must be finite and right.
 *
 *   test_winograd_host     exit 0 when every case agrees, 1 otherwise
 */
#ifndef S4D_EW_HOST_BUILD
#error "build with S4D_EW_HOST_BUILD defined (tests/cuda/CMakeLists.txt)"
#endif

#include "backend/cuda/kernels/winograd.cu"

#include <math.h>
#include <stdio.h>

#include <random>
#include <vector>

namespace {

int g_failures = 0;
std::mt19937_64 g_rng(20261206);

float uniform(float lo, float hi)
{
    return std::uniform_real_distribution<float>(lo, hi)(g_rng);
}

struct Case {
    const char *name;
    int64_t n, c, m, h, w, pad;
    bool bias, z, relu, shift, alias, nan;
};

/* A buffer of `count` floats whose data starts one element past a 16-byte boundary when shift. */
struct Floats {
    std::vector<float> store;
    float *p;
    Floats(size_t count, bool shift) : store(count + 8)
    {
        uintptr_t a = (uintptr_t)store.data();
        size_t lead = ((16 - a % 16) % 16) / sizeof(float);
        p = store.data() + lead + (shift ? 1 : 0);
    }
};

void run_case(const Case &k)
{
    const int64_t ho = k.h + 2 * k.pad - 2, wo = k.w + 2 * k.pad - 2;
    s4d_cuda_wino_geom g = {k.n, k.c, k.m, k.h, k.w, ho, wo, (ho + 3) / 4, (wo + 3) / 4, k.pad, k.pad};
    const int64_t tiles = g.n * g.th * g.tw;
    Floats x((size_t)(k.n * k.c * k.h * k.w), k.shift), w((size_t)(k.m * k.c * 9), false), b((size_t)k.m, false);
    Floats y((size_t)(k.n * k.m * ho * wo), k.shift), z((size_t)(k.n * k.m * ho * wo), k.shift);
    for (int64_t i = 0; i < k.n * k.c * k.h * k.w; i++)
        x.p[i] = uniform(-1.0f, 1.0f);
    for (int64_t i = 0; i < k.m * k.c * 9; i++)
        w.p[i] = uniform(-1.0f, 1.0f) / sqrtf(9.0f * (float)k.c);
    for (int64_t i = 0; i < k.m; i++)
        b.p[i] = uniform(-0.5f, 0.5f);
    for (int64_t i = 0; i < k.n * k.m * ho * wo; i++)
        z.p[i] = uniform(-1.0f, 1.0f);
    int64_t nan_at[3] = {0, k.h / 2, k.w / 2 + 1}; /* (image, row, column) */
    if (k.nan)
        x.p[((nan_at[0] * k.c + k.c - 1) * k.h + nan_at[1]) * k.w + nan_at[2]] = NAN;

    /* The direct convolution in float64, with the epilogue. */
    std::vector<double> ref((size_t)(k.n * k.m * ho * wo));
    for (int64_t n = 0; n < k.n; n++)
        for (int64_t m = 0; m < k.m; m++)
            for (int64_t oy = 0; oy < ho; oy++)
                for (int64_t ox = 0; ox < wo; ox++) {
                    double acc = k.bias ? b.p[m] : 0.0;
                    for (int64_t c = 0; c < k.c; c++)
                        for (int i = 0; i < 3; i++)
                            for (int j = 0; j < 3; j++) {
                                int64_t iy = oy + i - k.pad, ix = ox + j - k.pad;
                                if (iy >= 0 && iy < k.h && ix >= 0 && ix < k.w)
                                    acc += (double)x.p[((n * k.c + c) * k.h + iy) * k.w + ix] *
                                           (double)w.p[(m * k.c + c) * 9 + i * 3 + j];
                            }
                    const int64_t at = ((n * k.m + m) * ho + oy) * wo + ox;
                    if (k.z)
                        acc += z.p[at];
                    if (k.relu && !(acc > 0.0) && acc == acc)
                        acc = 0.0;
                    ref[(size_t)at] = acc;
                }

    std::vector<float> u((size_t)(36 * k.m * k.c)), v((size_t)(36 * k.c * tiles)), mm((size_t)(36 * k.m * tiles));
    cudaError_t e = s4d_cuda_wino_filter_f32(w.p, u.data(), k.m, k.c, nullptr);
    if (e == cudaSuccess)
        e = s4d_cuda_wino_input_f32(x.p, v.data(), &g, nullptr);
    for (int64_t xi = 0; xi < 36; xi++)
        for (int64_t m = 0; m < k.m; m++)
            for (int64_t p = 0; p < tiles; p++) {
                double acc = 0.0;
                for (int64_t c = 0; c < k.c; c++)
                    acc += (double)u[(size_t)((xi * k.m + m) * k.c + c)] * (double)v[(size_t)((xi * k.c + c) * tiles + p)];
                mm[(size_t)((xi * k.m + m) * tiles + p)] = (float)acc;
            }
    float *out = y.p;
    if (k.alias) { /* the residual is Y itself, as the engine may plan it */
        out = z.p;
    }
    if (e == cudaSuccess)
        e = s4d_cuda_wino_output_f32(mm.data(), out, k.bias ? b.p : nullptr, k.z ? z.p : nullptr, k.relu, &g,
                                     nullptr);
    if (e != cudaSuccess) {
        printf("FAIL %s: a launcher returned %d\n", k.name, (int)e);
        g_failures++;
        return;
    }

    double scale = 0.0, worst = 0.0;
    for (double r : ref)
        if (r == r && fabs(r) > scale)
            scale = fabs(r);
    int bad = 0;
    for (int64_t n = 0; n < k.n; n++)
        for (int64_t m = 0; m < k.m; m++)
            for (int64_t oy = 0; oy < ho; oy++)
                for (int64_t ox = 0; ox < wo; ox++) {
                    const int64_t at = ((n * k.m + m) * ho + oy) * wo + ox;
                    const double r = ref[(size_t)at], got = out[at];
                    /* The tile's 6 x 6 patch starts at 4 * (oy / 4) - pad: does it read the NaN? */
                    const int64_t py = 4 * (oy / 4) - k.pad, px = 4 * (ox / 4) - k.pad;
                    const bool patch_nan = k.nan && n == nan_at[0] && nan_at[1] >= py && nan_at[1] < py + 6 &&
                                           nan_at[2] >= px && nan_at[2] < px + 6;
                    if (r != r) { /* the window reads the NaN */
                        if (got == got && bad++ < 3)
                            printf("   %s: y[%lld] = %g where the direct convolution is NaN\n", k.name,
                                   (long long)at, got);
                        continue;
                    }
                    if (patch_nan)
                        continue; /* NaN or not: the tile read it (documented) */
                    const double err = fabs(got - r) / scale;
                    if (!(err <= 2e-5)) {
                        if (bad++ < 3)
                            printf("   %s: y[%lld] = %.9g, float64 %.9g\n", k.name, (long long)at, got, r);
                    }
                    if (err > worst)
                        worst = err;
                }
    printf("%s %s: %lld x %lld x %lld x %lld -> %lld channels, pad %lld; worst error %.2e of the largest output\n",
           bad ? "FAIL" : "ok", k.name, (long long)k.n, (long long)k.c, (long long)k.h, (long long)k.w,
           (long long)k.m, (long long)k.pad, worst);
    g_failures += bad != 0;
}

} // namespace

int main()
{
    const Case cases[] = {
        /* name                  n  c   m   h   w  pad bias   z     relu   shift  alias  nan */
        {"whole_rows_bias_relu", 2, 16, 8, 9, 12, 1, true, false, true, false, false, false},
        {"whole_rows_residual", 1, 8, 8, 8, 16, 1, true, true, true, false, false, false},
        {"residual_aliasing_y", 2, 8, 8, 9, 12, 1, true, true, true, false, true, false},
        {"cut_tiles_plain", 3, 5, 7, 5, 6, 1, false, false, false, false, false, false},
        {"cut_tiles_residual", 1, 6, 4, 11, 13, 1, true, true, false, false, false, false},
        {"pad0", 1, 8, 8, 7, 13, 0, false, false, false, false, false, false},
        {"pad2_relu", 1, 8, 4, 7, 13, 2, true, false, true, false, false, false},
        {"off_alignment", 2, 8, 8, 8, 12, 1, true, true, true, true, false, false},
        {"one_pixel", 1, 4, 3, 1, 1, 1, true, false, false, false, false, false},
        {"nan_input", 1, 4, 4, 12, 12, 1, true, false, true, false, false, true},
    };
    for (const Case &k : cases)
        run_case(k);
    printf("%d of %d cases agree\n", (int)(sizeof cases / sizeof cases[0]) - g_failures,
           (int)(sizeof cases / sizeof cases[0]));
    return g_failures ? 1 : 0;
}
