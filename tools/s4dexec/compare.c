/* Output comparison metrics for s4dexec: see compare.h. */
#include "compare.h"

#include <math.h>
#include <string.h>

static double half_to_double(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 0x1f, frac = h & 0x3ff;
    double v;
    if (exp == 0)
        v = ldexp(frac, -24);
    else if (exp == 31)
        v = frac ? NAN : INFINITY;
    else
        v = ldexp(frac | 0x400, exp - 25);
    return sign ? -v : v;
}

double elem_to_double(s4d_dtype dtype, const void *data, int64_t i)
{
    switch (dtype) {
    case S4D_DTYPE_FLOAT32: return ((const float *)data)[i];
    case S4D_DTYPE_FLOAT64: return ((const double *)data)[i];
    case S4D_DTYPE_FLOAT16: return half_to_double(((const uint16_t *)data)[i]);
    case S4D_DTYPE_BFLOAT16: {
        uint32_t u = (uint32_t)((const uint16_t *)data)[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    case S4D_DTYPE_INT8: return ((const int8_t *)data)[i];
    case S4D_DTYPE_UINT8:
    case S4D_DTYPE_BOOL: return ((const uint8_t *)data)[i];
    case S4D_DTYPE_INT16: return ((const int16_t *)data)[i];
    case S4D_DTYPE_UINT16: return ((const uint16_t *)data)[i];
    case S4D_DTYPE_INT32: return ((const int32_t *)data)[i];
    case S4D_DTYPE_UINT32: return ((const uint32_t *)data)[i];
    case S4D_DTYPE_INT64: return (double)((const int64_t *)data)[i];
    case S4D_DTYPE_UINT64: return (double)((const uint64_t *)data)[i];
    case S4D_DTYPE_STRING:
    case S4D_DTYPE_UNDEFINED: break;
    }
    return NAN;
}

int compare_arrays(s4d_dtype dtype, const void *got, const void *want, int64_t n, double rtol,
                   double atol, cmp_result *r)
{
    memset(r, 0, sizeof *r);
    r->first_bad = -1;
    if (s4d_dtype_size(dtype) == 0)
        return -1;
    int exact = !(dtype == S4D_DTYPE_FLOAT32 || dtype == S4D_DTYPE_FLOAT64 ||
                  dtype == S4D_DTYPE_FLOAT16 || dtype == S4D_DTYPE_BFLOAT16);
    double dot = 0, gg = 0, ww = 0, dd = 0;
    for (int64_t i = 0; i < n; i++) {
        double g = elem_to_double(dtype, got, i), w = elem_to_double(dtype, want, i);
        int ok;
        if (isnan(g) || isnan(w)) {
            ok = isnan(g) && isnan(w);
        } else if (isinf(g) || isinf(w)) {
            ok = g == w;
        } else {
            double d = fabs(g - w);
            if (d > r->max_abs)
                r->max_abs = d;
            ok = exact ? g == w : d <= atol + rtol * fabs(w);
            dot += g * w;
            gg += g * g;
            ww += w * w;
            dd += d * d;
        }
        if (!ok) {
            if (r->first_bad < 0)
                r->first_bad = i;
            r->bad++;
        }
    }
    r->rel_l2 = ww > 0 ? sqrt(dd / ww) : (dd > 0 ? INFINITY : 0);
    r->cosine = (gg > 0 && ww > 0) ? dot / sqrt(gg * ww) : (gg == 0 && ww == 0 ? 1 : 0);
    return 0;
}
