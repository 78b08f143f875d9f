/*
 * Internals of the CPU convolution library shared by the driver (cpuconv.c)
 * and the per-instruction-set kernel files (kernels_*.c).
 *
 * Packed weights, all algorithms: panels of CC_MR output channels,
 * [panel][k][CC_MR] with k the reduction index, M padded with zero rows to a
 * multiple of CC_MR. The micro-kernel broadcasts one weight per row and
 * multiplies it with a vector of output pixels (or Winograd tiles): every set
 * reads the same packed bytes, only its panel width (nr) differs.
 */
#ifndef S4D_CPU_CONV_CPUCONV_IMPL_H
#define S4D_CPU_CONV_CPUCONV_IMPL_H

#include <stdint.h>
#include <string.h>

#include "backend/cpu/conv/cpuconv.h"

#define CC_MR 8          /* rows of a weight panel */
#define CC_NR_MAX 48     /* widest pixel panel of any set */
#define CC_VL_MAX 16     /* widest vector of any set */

/*
 * Small maps (pixels-as-rows GEMM, "transposed"): where an output plane has
 * too few pixels to fill the pixel vectors (a 7x7 map is 49 pixels, 64 lanes
 * in vectors of 16), the product runs the other way round: vectors over
 * CC_TN output channels, one broadcast per pixel and reduction step, the
 * weights packed [M / CC_TN panel][k][CC_TN] with M padded with zero rows.
 * A tile of up to CC_TR_MAX pixels x CC_TN channels is accumulated in a
 * pixel-major buffer T[pixel][CC_TN]; a last pass transposes T into the NCHW
 * output with bias, residual and activation.
 */
#define CC_TN 48
#define CC_TR_MAX 8

/* Weights w[m][kdim] packed as panels of CC_TN rows, [panel][k][CC_TN], rows past m zero (the
 * small-map GEMM's and the inverted residual block's layout); returns the end of dst. */
static inline float *cc_pack_tn(const float *w, int64_t m, int64_t kdim, float *dst)
{
    for (int64_t mp = 0; mp * CC_TN < m; mp++)
        for (int64_t k = 0; k < kdim; k++)
            for (int j = 0; j < CC_TN; j++) {
                const int64_t row = mp * CC_TN + j;
                *dst++ = row < m ? w[row * kdim + k] : 0.0f;
            }
    return dst;
}

/* What a micro-kernel does after its reduction, on the final K block only. */
typedef struct cc_epi {
    const float *bias;   /* bias of the tile's first row, or NULL */
    const float *res;    /* residual at the tile's first element, or NULL */
    int64_t ldr;
    int act;             /* s4d_cpuconv_act */
    float lo, hi;
} cc_epi;

/* Where the lanes of one Winograd tile vector sit: tile origin in the output
 * (oy, ox), its input origin iy = oy - pad_top, ix = ox - pad_left. */
typedef struct cc_tiles {
    int n;                      /* valid lanes */
    int32_t oy[CC_VL_MAX], ox[CC_VL_MAX];
} cc_tiles;

/* Runs of consecutive tiles of one tile row within a tile vector: the vector
 * kernels load and store whole input and output rows per run (masked at the
 * image border) instead of gathering and scattering single elements. */
#define CC_RUNS_MAX 4
typedef struct cc_runs {
    int n;
    int l0[CC_RUNS_MAX], len[CC_RUNS_MAX];
} cc_runs;

/* Splits t into runs; 0 when there are more than CC_RUNS_MAX. */
static inline int cc_tile_runs(const cc_tiles *t, int m, cc_runs *r)
{
    r->n = 0;
    for (int l = 0; l < t->n;) {
        int e = l + 1;
        while (e < t->n && t->oy[e] == t->oy[l] && t->ox[e] == t->ox[l] + m * (e - l))
            e++;
        if (r->n == CC_RUNS_MAX)
            return 0;
        r->l0[r->n] = l;
        r->len[r->n] = e - l;
        r->n++;
        l = e;
    }
    return 1;
}

/* Geometry of one image plane as the kernels see it. */
typedef struct cc_geom {
    int64_t h, w, ho, wo;
    int64_t kh, kw, sh, sw, pt, pl, dh, dw;
} cc_geom;

/* A run of output pixels of one pixel block that lies in one output row and
 * one panel; `at` is the position of its first pixel in the block. */
typedef struct cc_seg {
    int32_t oy, ox, len, at;
} cc_seg;

/* One block of the implicit im2col matrix: rows [k0, k0 + kcb) of the
 * reduction (k = (channel * kh + ky) * kw + kx), the block's pixels given as
 * segments; written as panels dst[at / nr][kk][at % nr]. */
typedef struct cc_pack {
    const float *x; /* the group's first input channel */
    int64_t plane, h, w, cg;
    int64_t kh, kw, sh, sw, pt, pl, dh, dw;
    int64_t k0, kcb;
    const cc_seg *segs;
    int64_t nseg;
    float *dst;
} cc_pack;

/* A prefetch GCC keeps: without the empty volatile asm it judges a function
 * made only of prefetches pure and deletes its inlined calls. */
static inline void cc_prefetch(const void *p)
{
    __builtin_prefetch(p);
    __asm__ __volatile__("");
}

/* The same for a line about to be written. */
static inline void cc_prefetch_w(const void *p)
{
    __builtin_prefetch(p, 1);
    __asm__ __volatile__("");
}

/*
 * Software prefetch of the input rows that channel ci of a block will read.
 * Consecutive reduction rows jump a whole plane, a pattern the hardware
 * prefetchers do not follow; asking a few channels ahead hides the latency.
 */
static inline void cc_prefetch_channel(const cc_pack *pk, int64_t ci)
{
    if (ci >= pk->cg)
        return;
    const float *xc = pk->x + ci * pk->plane;
    for (int64_t s = 0; s < pk->nseg; s++) {
        const cc_seg *sg = &pk->segs[s];
        int64_t ix0 = (int64_t)sg->ox * pk->sw - pk->pl;
        int64_t ix1 = ix0 + (int64_t)(sg->len - 1) * pk->sw + (pk->kw - 1) * pk->dw + 1;
        ix0 = ix0 < 0 ? 0 : ix0;
        ix1 = ix1 > pk->w ? pk->w : ix1;
        for (int64_t ky = 0; ky < pk->kh; ky++) {
            int64_t iy = (int64_t)sg->oy * pk->sh - pk->pt + ky * pk->dh;
            if (iy < 0 || iy >= pk->h || ix1 <= ix0)
                continue;
            const float *row = xc + iy * pk->w;
            for (int64_t ix = ix0; ix < ix1; ix += 16)
                cc_prefetch(row + ix);
            cc_prefetch(row + ix1 - 1);
        }
    }
}

/* Channels ahead that packing prefetches: about four reduction rows' worth of
 * 1x1 work, at least one channel. */
static inline int64_t cc_prefetch_distance(const cc_pack *pk)
{
    return pk->kh * pk->kw >= 4 ? 1 : 4;
}

/* Epilogue shared by the Winograd output transform and depthwise. */
typedef struct cc_post {
    int act;
    float lo, hi;
} cc_post;

/*
 * Depthwise convolution on staged sub-planes (any kernel, stride, dilation):
 * the input plane, zero-padded, is split by stride residue into sub-planes
 * of pitch ws (one per residue a tap uses), so that every tap reads the
 * flattened output positions q = oy * ws + ox at sub[off[t] + q]: one
 * unmasked contiguous load per tap and vector, whatever the border. The
 * ws - wo columns past each output row are computed and dropped.
 */
#define CC_DW_MAX_TAPS 64
#define CC_DW_UNROLL 64 /* outputs per step of the vector loops, then steps of 16 */
typedef struct cc_dws {
    const float *sub;   /* the staged sub-planes */
    float *out;         /* flattened outputs, len floats */
    int64_t len;        /* ho * ws rounded up to 16 */
    int64_t ws, ho, wo;
    int ntaps;
    const int64_t *off; /* per tap (ky * kw + kx): float offset into sub */
} cc_dws;

/*
 * Depthwise on a ring of staged input rows (stride s = 1 or 2 both ways,
 * dilation 1, kernels up to CC_DWR_MAX_K): each input row a tap reads is
 * copied once, zero-padded and split by column residue into s sub-rows of
 * `pitch` floats, into slot iy % ring of a ring of (rows - 1) * s + kh input
 * rows (buf: ring + 1 slots of s * pitch floats, the last one zeros for rows
 * outside the image); `rows` output rows (1, 2 or 4: narrow planes) are
 * computed together. Tap
 * (ky, kx) of output column ox then reads sub-row kx % s at ox + kx / s: one
 * unmasked load per tap and 16 outputs, and the epilogue runs in registers.
 * The ring stays in L1, where staging whole planes (cc_dws) streams them
 * through L2 twice.
 */
#define CC_DWR_MAX_K 7
typedef struct cc_dwr {
    int64_t h, w, ho, wo, kh, kw, s, pt, pl;
    int64_t pitch; /* >= roundup16(wo) + (kw - 1) / s, a multiple of 16 */
    int64_t rows, ring;
    float *buf;
} cc_dwr;

/*
 * Depthwise with 16 channels in a vector: output rows are computed in strips of `strip` rows;
 * the input rows a strip reads are transposed (16 x 16 blocks in registers) into a ring of `ring`
 * zero-bordered pixel-major rows of wp pixels x 16 channels (tile row ty, pixel tx is input pixel
 * (ty - pt, tx - pl); ty sits in slot ty % ring), every output pixel is one chain of FMAs over the
 * taps with weight vectors, into out[pixel][16], and the strip's outputs are transposed back into
 * their planes with bias, residual and activation. No per-plane staging, no masked row tails (a
 * 7x7 plane is 49 outputs), and the ring and the strip stay in L1 / L2 on any map.
 */
typedef struct cc_dwc {
    int64_t h, w, ho, wo, kh, kw, sh, sw, pt, pl, dh, dw;
    int64_t wp, strip, ring;
    float *tile; /* ring * wp * 16 floats */
    float *out;  /* strip * wo * 16 floats */
} cc_dwc;

typedef struct cc_ops {
    s4d_cpuconv_isa isa;
    int nr; /* pixel panel width of the micro-kernel */
    int vl; /* lanes of a vector (Winograd tiles per vector) */
    /*
     * C[mr x nc] = (accumulate ? C : 0) + A[kc][CC_MR] x B[kc][ldb]; rows past mr
     * and columns past nc are neither read nor written (B's columns past nc
     * are not read either). With epi, bias, residual and activation follow.
     */
    void (*ukr)(int64_t kc, const float *a, const float *b, int64_t ldb, float *c, int64_t ldc, int mr, int nc,
                int accumulate, const cc_epi *epi);
    /* Packs one block of the implicit im2col matrix (see cc_pack). */
    void (*pack_b)(const cc_pack *pk);
    /*
     * Winograd input transform of tile vector t (F(m x m, 3x3), m = 2 or 4) for
     * channels [0, nc) of x (planes plane_stride apart, h x w, input origins
     * at (oy - pt, ox - pl)): element xi of channel c goes to
     * dst[xi * xi_stride + c * c_stride + lane].
     */
    void (*wino_in)(int m, const float *x, int64_t plane_stride, int64_t nc, int64_t h, int64_t w, int64_t pt,
                    int64_t pl, const cc_tiles *t, float *dst, int64_t xi_stride, int64_t c_stride);
    /*
     * Winograd output transform of tile vector t for channels [0, nm): element
     * xi of channel j at src[xi * xi_stride + j * m_stride + lane]; writes
     * y[j] (planes ho x wo, plane_stride apart) = act(A^T M A + bias[j] + res[j]).
     */
    void (*wino_out)(int m, const float *src, int64_t xi_stride, int64_t m_stride, int64_t nm, const cc_tiles *t,
                     int64_t ho, int64_t wo, const float *bias, const float *res, float *y, int64_t plane_stride,
                     const cc_post *post);
    /* Depthwise: output rows [oy0, oy1) of one channel. */
    void (*dw_rows)(const cc_geom *g, const float *x, const float *wk, float bias, const float *res, float *y,
                    int64_t oy0, int64_t oy1, const cc_post *post);
    /* Depthwise on staged sub-planes (cc_dws): out, then y = act(out + bias + res). */
    void (*dw_staged)(const cc_dws *d, const float *wk, float bias, const float *res, float *y,
                      const cc_post *post);
    /* Max pooling, output rows [oy0, oy1) of one plane (g's kernel and
     * geometry; padding takes no part; an empty window gives -inf; NaN wins). */
    void (*maxpool_rows)(const cc_geom *g, const float *x, float *y, int64_t oy0, int64_t oy1);
    /* Depthwise on a ring of rows (cc_dwr): output rows [oy0, oy1) of one plane; NULL where
     * the set has none. */
    void (*dw_ring)(const cc_dwr *d, const float *x, const float *wk, float bias, const float *res, float *y,
                    int64_t oy0, int64_t oy1, const cc_post *post);
    /*
     * Small maps: t[i][j] = (accumulate ? t[i][j] : 0) + sum_k x[off[i] + k * lda] * w[k][j] for the
     * rows < CC_TR_MAX pixels i and all CC_TN columns j (t's rows are CC_TN floats; w is a weight panel
     * [kc][CC_TN]); columns from ncol on may be skipped (their weights are zero). prefetch: the
     * weights stream from memory (the first tile of a block), so ask for them ahead.
     */
    void (*ukr_t)(int64_t kc, const float *x, const int64_t *off, int rows, int64_t lda, const float *w, float *t,
                  int ncol, int accumulate, int prefetch);
    /* y[j * ldy + i] = act(t[i][j] + bias[j] + res[j * ldy + i]) for pixels i < pix, channels j < ncol
     * (bias and res may be NULL). */
    void (*tr_out)(const float *t, int64_t pix, int ncol, const float *bias, const float *res, float *y, int64_t ldy,
                   const cc_post *post);
    /* Depthwise, channels in vectors (cc_dwc): output rows [oy0, oy1) of channels [0, nch) (nch <= 16)
     * from x (planes `plane` floats apart), weights wk [nch][kh * kw], bias and res at the block's
     * first channel or NULL; NULL where the set has none. */
    void (*dw_cv)(const cc_dwc *d, const float *x, int64_t plane, int nch, const float *wk, const float *bias,
                  const float *res, float *y, int64_t oy0, int64_t oy1, const cc_post *post);
} cc_ops;

extern const cc_ops s4d_cc_ops_scalar;
extern const cc_ops s4d_cc_ops_avx2;
extern const cc_ops s4d_cc_ops_avx512;

/* exp(t) for t <= 0 as the vector files compute it (Cody-Waite reduction, a
 * degree-6 polynomial, the exponent added to the bits); below -87.3 it is
 * taken at -87.3. Relative error about 1e-7. */
static inline float cc_exp_neg(float t)
{
    if (!(t >= -87.3f))
        t = -87.3f;
    float fx = t * 1.44269504088896341f + 12582912.0f;
    int32_t n, bits;
    memcpy(&n, &fx, 4);
    n -= 0x4B400000; /* the bits of 12582912.0f */
    fx -= 12582912.0f;
    float r = t - fx * 0.693359375f;
    r = r + fx * 2.12194440e-4f;
    float q = 1.9875691500e-4f;
    q = q * r + 1.3981999507e-3f;
    q = q * r + 8.3334519073e-3f;
    q = q * r + 4.1665795894e-2f;
    q = q * r + 1.6666665459e-1f;
    q = q * r + 5.0000001201e-1f;
    q = q * r * r + r + 1.0f;
    memcpy(&bits, &q, 4);
    bits += n * (1 << 23);
    memcpy(&q, &bits, 4);
    return q;
}

static inline float cc_sigmoid1(float v)
{
    float e = cc_exp_neg(v < 0.0f ? v : -v), s = 1.0f / (1.0f + e);
    return v != v ? v : v < 0.0f ? e * s : s;
}

/* Scalar helpers the vector files share for their rare cases. */
static inline float cc_act1(float v, const cc_post *p)
{
    switch (p->act) {
    case S4D_CPUCONV_ACT_RELU:
        return v > 0.0f || v != v ? v : 0.0f;
    case S4D_CPUCONV_ACT_CLIP:
        if (v < p->lo)
            v = p->lo;
        if (v > p->hi)
            v = p->hi;
        return v;
    case S4D_CPUCONV_ACT_LEAKY_RELU:
        return v < 0.0f ? p->lo * v : v;
    case S4D_CPUCONV_ACT_SIGMOID:
        return cc_sigmoid1(v);
    case S4D_CPUCONV_ACT_SILU:
        return v * cc_sigmoid1(v);
    case S4D_CPUCONV_ACT_HARD_SIGMOID: {
        float t = p->lo * v + p->hi;
        return t < 0.0f ? 0.0f : t > 1.0f ? 1.0f : t;
    }
    case S4D_CPUCONV_ACT_HARD_SWISH: {
        float t = v * (1.0f / 6.0f) + 0.5f;
        return v * (t < 0.0f ? 0.0f : t > 1.0f ? 1.0f : t);
    }
    default:
        return v;
    }
}

/* The small-map output pass (cc_ops.tr_out) in plain C, for the sets without a vector one. */
static inline void cc_tr_out_c(const float *t, int64_t pix, int ncol, const float *bias, const float *res, float *y,
                               int64_t ldy, const cc_post *post)
{
    for (int j = 0; j < ncol; j++)
        for (int64_t i = 0; i < pix; i++) {
            float v = t[i * CC_TN + j];
            if (bias)
                v += bias[j];
            if (res)
                v += res[j * ldy + i];
            y[j * ldy + i] = cc_act1(v, post);
        }
}

/*
 * The inverted residual block in one pass (mbconv.h), AVX-512: geometry and packed weights as
 * the item function sees them. Output rows go in groups of `grp` rows (about 64 pixels, so the
 * 1x1 products have rows to share their weight panels); the ring holds the `ring` = (grp - 1) *
 * s + k expanded input rows a group reads, each [cb][wp][16] floats (channel block, padded
 * column, channel), row iy in slot iy % ring; rows outside the image read a zero slot.
 * Packed: w1 [nmp1][c][CC_TN] (expand, panels of 48 of the mid channels), w2 [cb][k * k][16]
 * (depthwise, channels past mid zero), w3 [nmp3][mid][CC_TN] (project).
 */
typedef struct cc_mbc {
    int64_t c, h, w, mid, m, k, s, pt, pl, ho, wo;
    int has_expand;
    int64_t cb, cpad, wp, grp, ring, nmp1, nmp3;
    const float *w1, *w2, *w3;
    cc_post post1, post2, post3;
} cc_mbc;

#define CC_MBC_RING_MAX 64 /* ring rows at most */

/* One slot's workspace in the row-group mode, offsets in floats from its start: the ring, the
 * zero slot for rows outside the image, dout, the projection's tile, then two int64 pixel lists
 * of ring * w entries (every size before them is a multiple of 16 floats, so they are aligned). */
typedef struct cc_mbc_slot {
    int64_t zero, dout, t, lists, total;
} cc_mbc_slot;

static inline cc_mbc_slot cc_mbc_slot_layout(const cc_mbc *g)
{
    const int64_t rowf = g->cb * g->wp * 16, pix = g->grp * g->wo;
    cc_mbc_slot s;
    s.zero = g->ring * rowf;
    s.dout = s.zero + rowf;
    s.t = s.dout + pix * g->cpad;
    s.lists = s.t + (pix > CC_TR_MAX ? pix : CC_TR_MAX) * CC_TN;
    s.total = s.lists + 4 * g->ring * g->w;
    return s;
}

/* Output row groups [g0, g1) of one image: x its block input, y its output, z its residual or
 * NULL; ws one slot (cc_mbc_slot_layout(g).total floats, 64-byte aligned). */
void s4d_cc_mbc_groups_avx512(const cc_mbc *g, const float *x, const float *b1, const float *b2,
                              const float *b3, const float *z, float *y, int64_t g0, int64_t g1, float *ws);

/*
 * Small maps on several threads (whole-map mode): the image's expanded map is kept whole,
 * [cb][hp][wp][16] with hp = (ho - 1) * s + k padded rows (zero outside the image), and the run
 * has two phases. Phase 1, one item per panel of 48 expanded channels: its part of the map, then
 * its channels of the depthwise output into dout [ho * wo][cpad]. Phase 2, items of (output panel,
 * pixel range): the projection from dout into y. Each output gets the same operations as in the
 * row-group pass; only the order of the work differs.
 */
static inline int64_t cc_mbc_map_floats(const cc_mbc *g)
{
    return g->cb * ((g->ho - 1) * g->s + g->k) * g->wp * 16;
}

/* Slot floats of the whole-map mode (per thread): phase 1 keeps its two int64 pixel lists of
 * h * w entries there, phase 2 the projection's tile. */
static inline int64_t cc_mbc_whole_slot_floats(const cc_mbc *g)
{
    const int64_t pix = g->ho * g->wo, tile = (pix > CC_TR_MAX ? pix : CC_TR_MAX) * CC_TN;
    return tile > 4 * g->h * g->w ? tile : 4 * g->h * g->w;
}

void s4d_cc_mbc_panel_avx512(const cc_mbc *g, const float *x, const float *b1, const float *b2, int64_t panel,
                             float *map, float *dout, float *ws);
/* Output panel mp of pixels [p0, p0 + pix) of one image's output y (and residual z), from dout
 * holding those pixels' depthwise outputs from its start; t: the tile, pix * CC_TN floats. */
void s4d_cc_mbc_project_avx512(const cc_mbc *g, const float *dout, const float *b3, const float *z, float *y,
                               int64_t mp, int64_t p0, int64_t pix, float *t);

#endif /* S4D_CPU_CONV_CPUCONV_IMPL_H */
