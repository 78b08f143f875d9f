/*
 * src/backend/winograd4.h - the one-dimensional transforms of Winograd
 * F(4x4, 3x3) (interpolation points 0, +-1, +-2 and infinity), shared by the
 * CPU backend's scalar kernels (cpu/conv/kernels_scalar.c) and the CUDA
 * backend's (cuda/kernels/winograd.cu), so that both compute the same
 * expressions: r = B^T d (six values to six), o = A^T s (six to four), with
 * d, r, s and o read and written at the given strides; and G, the filter's
 * transform (six by three), in double.
 */
#ifndef S4D_BACKEND_WINOGRAD4_H
#define S4D_BACKEND_WINOGRAD4_H

#if defined(__CUDACC__)
#define S4D_WINO4_FN static __host__ __device__ __forceinline__
#else
#define S4D_WINO4_FN static inline
#endif

/* G's rows: the 3x3 kernel's values at the six interpolation points. */
#define S4D_WINO4_G                                                                                                \
    {                                                                                                              \
        {1.0 / 4, 0, 0}, {-1.0 / 6, -1.0 / 6, -1.0 / 6}, {-1.0 / 6, 1.0 / 6, -1.0 / 6},                            \
            {1.0 / 24, 1.0 / 12, 1.0 / 6}, {1.0 / 24, -1.0 / 12, 1.0 / 6}, { 0, 0, 1 }                             \
    }

S4D_WINO4_FN void s4d_wino4_bt(const float *d, int ds, float *r, int rs)
{
    const float t0 = d[4 * ds] - 4.0f * d[2 * ds], t1 = d[3 * ds] - 4.0f * d[1 * ds];
    const float t2 = d[4 * ds] - d[2 * ds], t3 = 2.0f * (d[3 * ds] - d[1 * ds]);
    r[0] = 4.0f * d[0] - 5.0f * d[2 * ds] + d[4 * ds];
    r[1 * rs] = t0 + t1;
    r[2 * rs] = t0 - t1;
    r[3 * rs] = t2 + t3;
    r[4 * rs] = t2 - t3;
    r[5 * rs] = 4.0f * d[1 * ds] - 5.0f * d[3 * ds] + d[5 * ds];
}

S4D_WINO4_FN void s4d_wino4_at(const float *s, int ss, float *o, int os)
{
    const float s12 = s[1 * ss] + s[2 * ss], d12 = s[1 * ss] - s[2 * ss];
    const float s34 = s[3 * ss] + s[4 * ss], d34 = s[3 * ss] - s[4 * ss];
    o[0] = s[0] + s12 + s34;
    o[1 * os] = d12 + 2.0f * d34;
    o[2 * os] = s12 + 4.0f * s34;
    o[3 * os] = d12 + 8.0f * d34 + s[5 * ss];
}

#endif /* S4D_BACKEND_WINOGRAD4_H */
