/*
 * The inverted residual block in one pass, AVX-512F (see mbconv.h and cc_mbc
 * in cpuconv_impl.h). Per group of output rows:
 *   1. the expanded input rows the group reads and the ring lacks: the 1x1
 *      expand as pixels-as-rows products (ukr_t_rn: vectors over 48 mid
 *      channels, one broadcast input value per pixel and channel), whose
 *      epilogue stores them channels-in-vectors into the ring with bias and
 *      activation; without an expand, the input rows are transposed into the
 *      ring instead;
 *   2. the depthwise rows from the ring (dwc_row_k), pixel-major into dout
 *      [pixel][cpad] with bias and activation;
 *   3. the 1x1 project, pixels as rows again, reading dout as its reduction
 *      (contiguous per pixel), and the 48-channel panels transposed into the
 *      NCHW output with bias, residual and activation (cc_ops.tr_out).
 * The whole-map mode (several threads, small maps) runs the same steps over
 * the whole image, split by panels of expanded channels, then by output
 * panels and pixel ranges. The operations per output element are those of
 * the unfused layers.
 */
#include <string.h>

#include "backend/cpu/conv/avx512_inl.h"
#include "backend/cpu/conv/cpuconv_impl.h"

#define MBC_TILE(NV)                                                                                              \
    static TGT void tile_##NV(int64_t kc, const float *x, const int64_t *off, int rows, int64_t lda,             \
                              const float *w, const cc_tepi *e)                                                  \
    {                                                                                                            \
        switch (rows) {                                                                                          \
        case 8: ukr_t_rn(8, NV, kc, x, off, lda, w, NULL, 0, 0, e); break;                                       \
        case 7: ukr_t_rn(7, NV, kc, x, off, lda, w, NULL, 0, 0, e); break;                                       \
        case 6: ukr_t_rn(6, NV, kc, x, off, lda, w, NULL, 0, 0, e); break;                                       \
        case 5: ukr_t_rn(5, NV, kc, x, off, lda, w, NULL, 0, 0, e); break;                                       \
        case 4: ukr_t_rn(4, NV, kc, x, off, lda, w, NULL, 0, 0, e); break;                                       \
        case 3: ukr_t_rn(3, NV, kc, x, off, lda, w, NULL, 0, 0, e); break;                                       \
        case 2: ukr_t_rn(2, NV, kc, x, off, lda, w, NULL, 0, 0, e); break;                                       \
        default: ukr_t_rn(1, NV, kc, x, off, lda, w, NULL, 0, 0, e); break;                                      \
        }                                                                                                        \
    }
MBC_TILE(1)
MBC_TILE(2)
MBC_TILE(3)
#undef MBC_TILE

/* Expand panels [mp0, mp1) of 48 expanded channels at the npix pixels listed: xoff, the input
 * offsets in a plane; dpos, each pixel's float offset from dst in block 0 of its row (channel
 * blocks bstride floats apart). The products' tiles go straight there with bias and activation. */
static TGT void expand_pixels(const cc_mbc *g, const float *x, const float *b1, const int64_t *xoff,
                              const int64_t *dpos, int64_t npix, float *dst, int64_t bstride, int64_t mp0,
                              int64_t mp1)
{
    const int64_t plane = g->h * g->w, ntiles = (npix + CC_TR_MAX - 1) / CC_TR_MAX;
    cc_tepi e;
    e.vstride = bstride;
    e.act = g->post1.act;
    e.lo = _mm512_set1_ps(g->post1.lo);
    e.hi = _mm512_set1_ps(g->post1.hi);
    for (int64_t mp = mp0; mp < mp1; mp++) {
        const int64_t ch0 = mp * CC_TN;
        const int ncol = (int)(g->mid - ch0 < CC_TN ? g->mid - ch0 : CC_TN);
        const float *wp = g->w1 + mp * g->c * CC_TN;
        __m512 bv[3];
        for (int j = 0; j < 3; j++)
            bv[j] = b1 && 16 * j < ncol ? _mm512_maskz_loadu_ps(lane_mask(ncol - 16 * j), b1 + ch0 + 16 * j)
                                        : _mm512_setzero_ps();
        e.bias = b1 ? bv : NULL;
        e.dst = dst + (ch0 / 16) * bstride;
        for (int64_t tl = 0; tl < ntiles; tl++) {
            const int64_t p0 = tl * npix / ntiles, p1 = (tl + 1) * npix / ntiles;
            const int rows = (int)(p1 - p0);
            e.pos = dpos + p0;
            if (ncol > 32)
                tile_3(g->c, x, xoff + p0, rows, plane, wp, &e);
            else if (ncol > 16)
                tile_2(g->c, x, xoff + p0, rows, plane, wp, &e);
            else
                tile_1(g->c, x, xoff + p0, rows, plane, wp, &e);
        }
    }
}

/* Zeros the padding columns of one row of one channel block (the expand writes only the
 * image's columns). */
static void zero_border_columns(const cc_mbc *g, float *row)
{
    memset(row, 0, sizeof(float) * 16 * (size_t)g->pl);
    memset(row + (g->pl + g->w) * 16, 0, sizeof(float) * 16 * (size_t)(g->wp - g->pl - g->w));
}

/* No expand: input row iy of the channel blocks [cb0, cb1), transposed into its slot (blocks bstride
 * floats apart; 16 pixels x 16 channels per register transpose). */
static TGT void transpose_row_blocks(const cc_mbc *g, const float *x, int64_t iy, float *slot, int64_t bstride,
                                     int64_t cb0, int64_t cb1)
{
    const int64_t plane = g->h * g->w;
    __m512 r[16];
    for (int64_t cb = cb0; cb < cb1; cb++) {
        const int nch = (int)(g->c - cb * 16 < 16 ? g->c - cb * 16 : 16);
        for (int64_t ix = 0; ix < g->w; ix += 16) {
            const int n = (int)(g->w - ix < 16 ? g->w - ix : 16);
            const __mmask16 mn = lane_mask(n);
            for (int c = 0; c < 16; c++)
                r[c] = c < nch ? _mm512_maskz_loadu_ps(mn, x + (cb * 16 + c) * plane + iy * g->w + ix)
                               : _mm512_setzero_ps();
            transpose16(r);
            float *dst = slot + cb * bstride + (g->pl + ix) * 16;
            for (int j = 0; j < n; j++)
                _mm512_storeu_ps(dst + j * 16, r[j]);
        }
    }
}

#define MBC_ROW(K, S)                                                                                             \
    static TGT void dw_row_##K##_##S(const float *const *rp, const __m512 *wv, float *o, int64_t wo, int64_t ps, \
                                     const cc_tepi *e)                                                           \
    {                                                                                                            \
        dwc_row_k(K, S, rp, wv, o, wo, ps, e);                                                                   \
    }
MBC_ROW(3, 1)
MBC_ROW(3, 2)
MBC_ROW(5, 1)
MBC_ROW(5, 2)
MBC_ROW(7, 1)
MBC_ROW(7, 2)
#undef MBC_ROW

typedef void (*dw_row_fn)(const float *const *, const __m512 *, float *, int64_t, int64_t, const cc_tepi *);

static dw_row_fn dw_row_for(int64_t k, int64_t s)
{
    if (k == 3)
        return s == 1 ? dw_row_3_1 : dw_row_3_2;
    if (k == 5)
        return s == 1 ? dw_row_5_1 : dw_row_5_2;
    return s == 1 ? dw_row_7_1 : dw_row_7_2;
}

/* Where the depthwise taps find the expanded rows: padded row r (input row r - pt) of channel
 * block cb. The row-group mode keeps image rows in a ring of `ring` slots (rowf floats each) and
 * reads `zero` outside the image; the whole-map mode (ring 0) keeps every padded row, rowf floats
 * apart, blocks bstride apart. */
typedef struct mbc_rows {
    const float *base, *zero;
    int64_t ring, rowf, bstride;
} mbc_rows;

static const float *expanded_row(const cc_mbc *g, const mbc_rows *r, int64_t row, int64_t cb)
{
    if (!r->ring)
        return r->base + cb * r->bstride + row * r->rowf;
    const int64_t iy = row - g->pt;
    if (iy < 0 || iy >= g->h)
        return r->zero + cb * r->bstride;
    return r->base + (iy % r->ring) * r->rowf + cb * r->bstride;
}

/* Depthwise rows [oy0, oy1) of channel blocks [cb0, cb1) into dout (row oy0 at its start) with
 * bias and activation. */
static TGT void depthwise_rows(const cc_mbc *g, const mbc_rows *src, const float *b2, int64_t cb0, int64_t cb1,
                               int64_t oy0, int64_t oy1, float *dout)
{
    const dw_row_fn row = dw_row_for(g->k, g->s);
    const int64_t kk = g->k * g->k;
    __m512 wv[CC_DWR_MAX_K * CC_DWR_MAX_K], bv;
    cc_tepi e;
    memset(&e, 0, sizeof e);
    e.bias = &bv;
    e.act = g->post2.act;
    e.lo = _mm512_set1_ps(g->post2.lo);
    e.hi = _mm512_set1_ps(g->post2.hi);
    for (int64_t cb = cb0; cb < cb1; cb++) {
        for (int64_t t = 0; t < kk; t++)
            wv[t] = _mm512_loadu_ps(g->w2 + (cb * kk + t) * 16);
        bv = b2 ? _mm512_maskz_loadu_ps(lane_mask((int)(g->mid - cb * 16)), b2 + cb * 16) : _mm512_setzero_ps();
        for (int64_t oy = oy0; oy < oy1; oy++) {
            const float *rp[CC_DWR_MAX_K];
            for (int64_t ky = 0; ky < g->k; ky++)
                rp[ky] = expanded_row(g, src, oy * g->s + ky, cb);
            row(rp, wv, dout + (oy - oy0) * g->wo * g->cpad + cb * 16, g->wo, g->cpad, &e);
        }
    }
}

TGT void s4d_cc_mbc_project_avx512(const cc_mbc *g, const float *dout, const float *b3, const float *z, float *y,
                                   int64_t mp, int64_t p0, int64_t pix, float *t)
{
    const int64_t plane = g->ho * g->wo, m0 = mp * CC_TN;
    const int ncol = (int)(g->m - m0 < CC_TN ? g->m - m0 : CC_TN);
    const float *wp = g->w3 + mp * g->mid * CC_TN;
    const int64_t ntiles = (pix + CC_TR_MAX - 1) / CC_TR_MAX;
    int64_t off[CC_TR_MAX];
    for (int64_t tl = 0; tl < ntiles; tl++) {
        const int64_t q0 = tl * pix / ntiles, q1 = (tl + 1) * pix / ntiles;
        for (int64_t i = q0; i < q1; i++)
            off[i - q0] = i * g->cpad;
        s4d_cc_ops_avx512.ukr_t(g->mid, dout, off, (int)(q1 - q0), 1, wp, t + q0 * CC_TN, ncol, 0, 0);
    }
    s4d_cc_ops_avx512.tr_out(t, pix, ncol, b3 ? b3 + m0 : NULL, z ? z + m0 * plane + p0 : NULL, y + m0 * plane + p0,
                             plane, &g->post3);
}

TGT void s4d_cc_mbc_groups_avx512(const cc_mbc *g, const float *x, const float *b1, const float *b2,
                                  const float *b3, const float *z, float *y, int64_t g0, int64_t g1, float *ws)
{
    const cc_mbc_slot lay = cc_mbc_slot_layout(g);
    const int64_t slotb = g->wp * 16, rowf = g->cb * slotb;
    float *ring = ws, *zero = ws + lay.zero, *dout = ws + lay.dout, *t = ws + lay.t;
    int64_t *xoff = (int64_t *)(void *)(ws + lay.lists), *dpos = xoff + g->ring * g->w;
    memset(zero, 0, sizeof(float) * (size_t)rowf);
    for (int64_t r = 0; r < g->ring; r++)
        for (int64_t cb = 0; cb < g->cb; cb++)
            zero_border_columns(g, ring + r * rowf + cb * slotb);
    int64_t tag[CC_MBC_RING_MAX];
    for (int64_t r = 0; r < g->ring; r++)
        tag[r] = -1;
    const mbc_rows src = {ring, zero, g->ring, rowf, slotb};
    for (int64_t gi = g0; gi < g1; gi++) {
        const int64_t oy0 = gi * g->grp, oy1 = oy0 + g->grp < g->ho ? oy0 + g->grp : g->ho;
        const int64_t iy0 = oy0 * g->s - g->pt, iy1 = (oy1 - 1) * g->s - g->pt + g->k; /* [iy0, iy1) */
        int64_t npix = 0;
        for (int64_t iy = iy0 < 0 ? 0 : iy0; iy < iy1 && iy < g->h; iy++) {
            const int64_t slot = iy % g->ring;
            if (tag[slot] == iy)
                continue;
            tag[slot] = iy;
            if (!g->has_expand) {
                transpose_row_blocks(g, x, iy, ring + slot * rowf, slotb, 0, g->cb);
                continue;
            }
            for (int64_t ix = 0; ix < g->w; ix++, npix++) {
                xoff[npix] = iy * g->w + ix;
                dpos[npix] = slot * rowf + (g->pl + ix) * 16;
            }
        }
        if (npix)
            expand_pixels(g, x, b1, xoff, dpos, npix, ring, slotb, 0, g->nmp1);
        depthwise_rows(g, &src, b2, 0, g->cb, oy0, oy1, dout);
        for (int64_t mp = 0; mp < g->nmp3; mp++)
            s4d_cc_mbc_project_avx512(g, dout, b3, z, y, mp, oy0 * g->wo, (oy1 - oy0) * g->wo, t);
    }
}

/* ---- whole-map mode (cc_mbc_map_floats) ---- */

TGT void s4d_cc_mbc_panel_avx512(const cc_mbc *g, const float *x, const float *b1, const float *b2, int64_t panel,
                                 float *map, float *dout, float *ws)
{
    const int64_t hp = (g->ho - 1) * g->s + g->k, slotb = g->wp * 16, bplane = hp * slotb;
    const int64_t cb0 = panel * 3, cb1 = cb0 + 3 < g->cb ? cb0 + 3 : g->cb;
    /* the padding of the panel's blocks: rows outside the image, columns beside it */
    for (int64_t cb = cb0; cb < cb1; cb++)
        for (int64_t r = 0; r < hp; r++) {
            float *row = map + cb * bplane + r * slotb;
            if (r < g->pt || r - g->pt >= g->h)
                memset(row, 0, sizeof(float) * (size_t)slotb);
            else
                zero_border_columns(g, row);
        }
    const int64_t rows_in = hp - g->pt < g->h ? hp - g->pt : g->h; /* image rows the taps read */
    if (g->has_expand) {
        int64_t *xoff = (int64_t *)(void *)ws, *dpos = xoff + g->h * g->w, npix = 0;
        for (int64_t iy = 0; iy < rows_in; iy++)
            for (int64_t ix = 0; ix < g->w; ix++, npix++) {
                xoff[npix] = iy * g->w + ix;
                dpos[npix] = (iy + g->pt) * slotb + (g->pl + ix) * 16;
            }
        expand_pixels(g, x, b1, xoff, dpos, npix, map, bplane, panel, panel + 1);
    } else {
        for (int64_t iy = 0; iy < rows_in; iy++)
            transpose_row_blocks(g, x, iy, map + (iy + g->pt) * slotb, bplane, cb0, cb1);
    }
    const mbc_rows src = {map, NULL, 0, slotb, bplane};
    depthwise_rows(g, &src, b2, cb0, cb1, 0, g->ho, dout);
}
