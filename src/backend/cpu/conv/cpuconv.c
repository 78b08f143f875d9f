/*
 * The convolution library's driver: parameter checks, the algorithm and
 * blocking choice, weight packing, and the three run loops (implicit GEMM,
 * Winograd, depthwise) over work items spread on the caller's threads. The
 * arithmetic lives in kernels_<set>.c behind a table of function pointers.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/conv/cpuconv_impl.h"
#include "backend/winograd4.h"

#define PACK_MAGIC 0x57433453u /* "S4CW" */
#define PACK_VERSION 1u
#define PACK_HEADER 64         /* bytes before the packed floats */
#define WS_ALIGN 64
/* Floats between consecutive Winograd elements' buffers beyond their size: the
 * 36 transforms of one channel are written (and read back) together, and
 * buffer sizes that are multiples of 4 KiB would put them all in one L1 set. */
#define XI_PAD 16

typedef struct pack_header {
    uint32_t magic, version, algo, reserved;
    int64_t m, c, kh, kw, group, floats;
} pack_header;

struct s4d_cpuconv_plan {
    s4d_cpuconv_params p;
    const cc_ops *ops;
    s4d_cpuconv_algo algo;
    int wm;          /* Winograd output tile side: 2 or 4 */
    int64_t ho, wo, cg, mg, mgp, kdim;
    int nslots;
    int64_t items;
    size_t slot_bytes, extra_bytes, ws_bytes, packed_bytes;
    double gflop;
    /* implicit GEMM */
    int flat;        /* 1x1, stride 1, no padding: the plane packs as one row */
    int64_t kc, nb, nblk, mchunk, nmch;
    int shared_b;      /* pack every block once, in a first pass, for all M chunks */
    int64_t nkb;       /* reduction blocks */
    int tr;            /* small map: pixels as rows, vectors over channels (CC_TN, cc_ops.ukr_t) */
    int tr_direct;     /* ... reading a 1x1 unpadded convolution's input in place */
    int64_t tr_rows;   /* pixels per ukr_t tile */
    size_t shared_off; /* workspace offset of the shared panels */
    /* Winograd */
    int64_t th, tw, tiles, tb, ntb;
    /* depthwise */
    int64_t rows_per_item, nrch;
    int dw_staged;     /* sub-plane staging (cc_dws) instead of row kernels */
    int dw_ring;       /* a ring of staged rows (cc_dwr) */
    int dw_cv;         /* small maps: 16 channels in a vector (cc_dwc) */
    int64_t dw_wp;     /* its tile rows' width (dw_rows: strip rows, dw_ring_n: ring rows) */
    int64_t dw_pitch, dw_rows, dw_ring_n;
    int dw_nres;       /* stride residues the taps use */
    int dw_res_y[CC_DW_MAX_TAPS], dw_res_x[CC_DW_MAX_TAPS];
    int64_t dw_off[CC_DW_MAX_TAPS]; /* per tap, into the staged sub-planes */
    int64_t dw_ws, dw_hs, dw_len, dw_sub; /* pitch, rows, outputs, floats per sub-plane */
};

static s4d_status fail(s4d_errbuf *err, s4d_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static s4d_status fail(s4d_errbuf *err, s4d_status st, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return st;
}

s4d_cpuconv_isa s4d_cpuconv_isa_best(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return S4D_CPUCONV_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return S4D_CPUCONV_ISA_AVX2;
#endif
    return S4D_CPUCONV_ISA_SCALAR;
}

const char *s4d_cpuconv_isa_name(s4d_cpuconv_isa isa)
{
    switch (isa) {
    case S4D_CPUCONV_ISA_AUTO:
        return "auto";
    case S4D_CPUCONV_ISA_SCALAR:
        return "scalar";
    case S4D_CPUCONV_ISA_AVX2:
        return "avx2";
    case S4D_CPUCONV_ISA_AVX512:
        return "avx512";
    }
    return "unknown";
}

const char *s4d_cpuconv_algo_name(s4d_cpuconv_algo algo)
{
    switch (algo) {
    case S4D_CPUCONV_ALGO_AUTO:
        return "auto";
    case S4D_CPUCONV_ALGO_GEMM:
        return "gemm";
    case S4D_CPUCONV_ALGO_WINOGRAD2:
        return "winograd2";
    case S4D_CPUCONV_ALGO_WINOGRAD4:
        return "winograd4";
    case S4D_CPUCONV_ALGO_DEPTHWISE:
        return "depthwise";
    }
    return "unknown";
}

static const cc_ops *ops_for(s4d_cpuconv_isa isa)
{
    switch (isa) {
    case S4D_CPUCONV_ISA_AVX512:
        return &s4d_cc_ops_avx512;
    case S4D_CPUCONV_ISA_AVX2:
        return &s4d_cc_ops_avx2;
    case S4D_CPUCONV_ISA_SCALAR:
    case S4D_CPUCONV_ISA_AUTO:
        break;
    }
    return &s4d_cc_ops_scalar;
}

static int64_t cdiv(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

static int64_t imin(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static int64_t imax(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

/* Share of useful lanes when n columns are done in vectors of 16. */
static double lane_use(int64_t n)
{
    return (double)n / (double)(cdiv(n, 16) * 16);
}


/*
 * Estimated cost, in multiply-add equivalents, of each algorithm on one
 * thread. It depends on the shape only (not on the instruction set or the
 * thread count), so that the plan made at build time and the one made at run
 * time choose, and pack, the same. Terms: multiply-adds over the share of
 * vector lanes used; packing or transforms; the packed weights, read once from
 * memory (4 multiply-adds a byte: chosen on whole networks, ResNet-18/50 at
 * 224x224 and ResNet50+FPN, see bench/ort/results; 12, from single
 * layers, kept Winograd off the 7x7 and 14x14 maps where it is up to 1.8x
 * faster) and again from cache (1 a byte) for each further pixel or tile
 * block.
 */
#define COST_MEM_BYTE 4.0
#define COST_CACHE_BYTE 1.0
#define COST_NB 288 /* pixels per block of the implicit GEMM (6 AVX-512 panels) */
#define COST_TP 48  /* tiles per Winograd panel (AVX-512) */

static double weight_cost(double bytes, int64_t blocks)
{
    return bytes * (COST_MEM_BYTE + COST_CACHE_BYTE * (double)(blocks - 1));
}

/*
 * Whether a GEMM runs pixels as rows (CC_TN, cc_ops.ukr_t): a single group whose output planes fill
 * the pixel vectors worse than its channels fill channel vectors, on maps below 64 pixels (7x7:
 * 49 pixels in 64 lanes, and the 1x1 maps of squeeze-excitation blocks: 1 in 16).
 */
static int tr_fits(int64_t group, int64_t mg, int64_t pix)
{
    return group == 1 && pix < 64 && lane_use(mg) > lane_use(pix) + 0.05;
}

static double cost_gemm(int64_t group, int64_t mg, int64_t kdim, int64_t pix)
{
    const double mgp = (double)(cdiv(mg, CC_MR) * CC_MR);
    const double lanes = tr_fits(group, mg, pix) ? lane_use(mg) : lane_use(pix);
    double c = (double)group * mgp * (double)kdim * (double)pix / lanes;
    c += 3.0 * (double)group * (double)kdim * (double)pix;
    return c + weight_cost(4.0 * (double)group * mgp * (double)kdim, cdiv(pix, COST_NB));
}

static double cost_wino(int wm, int64_t c, int64_t m, int64_t ho, int64_t wo)
{
    const double a2 = (double)((wm + 2) * (wm + 2)), mp = (double)(cdiv(m, CC_MR) * CC_MR);
    const int64_t tiles = cdiv(ho, wm) * cdiv(wo, wm);
    double gemm = a2 * mp * (double)c * (double)tiles / lane_use(tiles);
    double trans = (double)tiles * a2 * (2.0 * (double)c + 1.5 * (double)m);
    const double ubytes = 4.0 * a2 * mp * (double)c;
    const int64_t panels = imax(1, imin(4, (int64_t)(ubytes / (2 << 20))));
    return gemm + trans + weight_cost(ubytes, cdiv(tiles, panels * COST_TP));
}

static int wino_fits(const s4d_cpuconv_plan *pl)
{
    const s4d_cpuconv_params *p = &pl->p;
    return p->kh == 3 && p->kw == 3 && p->stride_h == 1 && p->stride_w == 1 && p->dil_h == 1 && p->dil_w == 1 &&
           p->group == 1;
}

static int dw_fits(const s4d_cpuconv_plan *pl)
{
    const s4d_cpuconv_params *p = &pl->p;
    return p->group > 1 && p->group == p->c && p->m == p->c;
}

/* Reduction block: all of K up to `whole`, else equal blocks of at most `most`
 * (values from the sweeps of bench/results/cpu-conv-*). */
static int64_t pick_kc(int64_t k, int64_t whole, int64_t most)
{
    return k <= whole ? k : cdiv(k, cdiv(k, most));
}

/*
 * Small maps (tr_fits): one item per image and panel of CC_TN output channels, all pixels, the
 * reduction in blocks whose weight panel (kc x CC_TN floats, 48 KiB) stays in L2 across the
 * pixel tiles. The input is read in place for 1x1 unpadded convolutions (any stride: a pixel's
 * values are one plane apart); otherwise its im2col blocks are packed once, in a first pass, into
 * shared panels that every channel panel reads.
 */
static void plan_gemm_t(s4d_cpuconv_plan *pl)
{
    const s4d_cpuconv_params *p = &pl->p;
    const int64_t nr = pl->ops->nr, pix = pl->ho * pl->wo, nbp = cdiv(pix, nr) * nr;
    pl->tr = 1;
    pl->flat = 0;
    pl->tr_direct = p->kh == 1 && p->kw == 1 && p->pad_top == 0 && p->pad_left == 0 && p->pad_bottom == 0 &&
                    p->pad_right == 0;
    pl->tr_rows = cdiv(pix, cdiv(pix, CC_TR_MAX));
    pl->kc = pick_kc(pl->kdim, 256, 256);
    pl->nb = nbp;
    pl->nblk = 1;
    pl->mchunk = CC_TN;
    pl->nmch = cdiv(p->m, CC_TN);
    pl->items = p->n * pl->nmch;
    pl->nkb = cdiv(pl->kdim, pl->kc);
    pl->shared_b = !pl->tr_direct;
    const size_t tbytes = sizeof(float) * (size_t)(pix * CC_TN) + sizeof(int64_t) * (size_t)pix;
    const size_t segs = (size_t)pl->nb * sizeof(cc_seg);
    pl->slot_bytes = ((tbytes > segs ? tbytes : segs) + WS_ALIGN - 1) / WS_ALIGN * WS_ALIGN;
    pl->shared_off = (size_t)pl->nslots * pl->slot_bytes;
    pl->extra_bytes = pl->shared_b ? sizeof(float) * (size_t)p->n * (size_t)pl->kdim * (size_t)nbp : 0;
    pl->packed_bytes = PACK_HEADER + sizeof(float) * (size_t)(pl->nmch * CC_TN * pl->kdim);
}

static void plan_gemm(s4d_cpuconv_plan *pl)
{
    const s4d_cpuconv_params *p = &pl->p;
    const int64_t nr = pl->ops->nr, pix = pl->ho * pl->wo;
    pl->flat = p->kh == 1 && p->kw == 1 && p->stride_h == 1 && p->stride_w == 1 && p->pad_top == 0 &&
               p->pad_left == 0 && p->pad_bottom == 0 && p->pad_right == 0;
    if (tr_fits(p->group, pl->mg, pix)) {
        plan_gemm_t(pl);
        return;
    }
    pl->kc = pick_kc(pl->kdim, 448, 384);
    /*
     * The pixel block and M chunk of an item. One item per pixel block of 6
     * panels with all of M suits one slot; more slots want about 3 items each,
     * and the split is the one that adds the least work: a narrower block
     * re-reads the weights once more per block (and reuses each weight panel
     * over fewer pixel panels), an M chunk re-packs the block once more.
     */
    const int64_t want = pl->nslots > 1 ? 3 * (int64_t)pl->nslots : 1, ng = p->n * p->group;
    const double macs = (double)ng * (double)pl->mgp * (double)pl->kdim * (double)pix;
    double best = -1.0;
    /* a flat plane read in place costs nothing to split by M chunks; others pack the block again */
    const int direct = pl->flat && pix >= 64;
    const double repack = direct ? 0.0 : 3.0;
    pl->nb = imin(6 * nr, cdiv(pix, nr) * nr);
    pl->mchunk = pl->mgp;
    for (int64_t np = 6; np >= 1; np--) {
        const int64_t nb = imin(np * nr, cdiv(pix, nr) * nr), nblk = cdiv(pix, nb);
        const int narrowest = nb == nr || np == 1;
        if (!narrowest && nb == imin((np - 1) * nr, cdiv(pix, nr) * nr))
            continue; /* the next, narrower try is the same block */
        for (int64_t mch = pl->mgp;; mch = imax(32, (mch / 2 + CC_MR - 1) / CC_MR * CC_MR)) {
            /* mch: all of M, then halves down to 32 rows */
            const int64_t nmch = cdiv(pl->mgp, mch), items = ng * nblk * nmch;
            const int last_try = narrowest && (mch <= 32 || (mch / 2 + CC_MR - 1) / CC_MR * CC_MR >= mch);
            if (items >= want || last_try) {
                double extra = (double)ng * ((double)(nmch - 1) * (double)pl->kdim * (double)pix * repack +
                                             (double)nblk * (double)pl->mgp * (double)pl->kdim * 4.0) +
                               macs * 0.04 * (6.0 / (double)cdiv(nb, nr) - 1.0);
                if (items < want)
                    extra += 1e30; /* nothing reaches want: the most items */
                if (best < 0.0 || extra < best) {
                    best = extra;
                    pl->nb = nb;
                    pl->mchunk = mch;
                }
                break;
            }
            if (mch <= 32 || (mch / 2 + CC_MR - 1) / CC_MR * CC_MR >= mch)
                break;
        }
    }
    pl->nblk = cdiv(pix, pl->nb);
    pl->nmch = cdiv(pl->mgp, pl->mchunk);
    pl->items = ng * pl->nblk * pl->nmch;
    pl->nkb = cdiv(pl->kdim, pl->kc);
    const size_t nbp = (size_t)(cdiv(pl->nb, nr) * nr);
    /* Items that share a pixel block (M was split) would each pack it; when
     * all blocks are small enough they are packed once, before the products. */
    const size_t all_b = sizeof(float) * (size_t)ng * (size_t)pl->nblk * (size_t)pl->kdim * nbp;
    pl->shared_b = pl->nmch > 1 && all_b <= ((size_t)8 << 20) && !direct;
    size_t bfloats = pl->shared_b ? 0 : (size_t)pl->kc * nbp;
    size_t segs = (size_t)pl->nb * sizeof(cc_seg);
    pl->slot_bytes = (bfloats * sizeof(float) + segs + WS_ALIGN - 1) / WS_ALIGN * WS_ALIGN;
    pl->shared_off = (size_t)pl->nslots * pl->slot_bytes;
    if (pl->shared_b)
        pl->extra_bytes = all_b;
    pl->packed_bytes = PACK_HEADER + sizeof(float) * (size_t)(p->group * pl->mgp * pl->kdim);
}

static void plan_wino(s4d_cpuconv_plan *pl)
{
    const s4d_cpuconv_params *p = &pl->p;
    const int64_t nr = pl->ops->nr, a = pl->wm + 2;
    pl->th = cdiv(pl->ho, pl->wm);
    pl->tw = cdiv(pl->wo, pl->wm);
    pl->tiles = pl->th * pl->tw;
    pl->kc = pick_kc(p->c, 512, 512);
    /*
     * More tile panels per item when the transformed weights are too big for
     * L2 and each tile block re-reads them; fewer keep V and M smaller. More
     * slots want about 2 items each (items are long), made by the split that
     * adds the least: a tile block re-reads the weights, an M chunk redoes
     * the input transform of its tiles.
     */
    const int64_t ubytes = 4 * a * a * pl->mgp * p->c;
    const int64_t tp0 = imax(1, imin(4, ubytes / (2 << 20)));
    const int64_t want = pl->nslots > 1 ? 2 * (int64_t)pl->nslots : 1;
    double best = -1.0;
    pl->tb = imin(tp0 * nr, cdiv(pl->tiles, nr) * nr);
    pl->mchunk = pl->mgp;
    for (int64_t tp = tp0; tp >= 1; tp--) {
        const int64_t tb = imin(tp * nr, cdiv(pl->tiles, nr) * nr), ntb = cdiv(pl->tiles, tb);
        for (int64_t mch = pl->mgp;; mch = imax(64, (mch / 2 + CC_MR - 1) / CC_MR * CC_MR)) {
            const int64_t nmch = cdiv(pl->mgp, mch), items = p->n * ntb * nmch;
            const int last_try = tp == 1 && (mch <= 64 || (mch / 2 + CC_MR - 1) / CC_MR * CC_MR >= mch);
            if (items >= want || last_try) {
                double extra = (double)p->n * ((double)ntb * (double)ubytes +
                                               (double)(nmch - 1) * (double)(p->c * pl->tiles * a * a) * 2.0);
                if (items < want)
                    extra += 1e30;
                if (best < 0.0 || extra < best) {
                    best = extra;
                    pl->tb = tb;
                    pl->mchunk = mch;
                }
                break;
            }
            if (mch <= 64 || (mch / 2 + CC_MR - 1) / CC_MR * CC_MR >= mch)
                break;
        }
    }
    pl->ntb = cdiv(pl->tiles, pl->tb);
    pl->nmch = cdiv(pl->mgp, pl->mchunk);
    pl->items = p->n * pl->ntb * pl->nmch;
    const int64_t np = cdiv(pl->tb, nr);
    size_t vfloats = (size_t)(a * a * (np * nr * p->c + XI_PAD));
    size_t mfloats = (size_t)(a * a * (pl->mchunk * np * nr + XI_PAD));
    pl->slot_bytes = ((vfloats + mfloats) * sizeof(float) + WS_ALIGN - 1) / WS_ALIGN * WS_ALIGN;
    pl->packed_bytes = PACK_HEADER + sizeof(float) * (size_t)(a * a * pl->mgp * p->c);
}

/*
 * Depthwise: 3x3 kernels of stride 1 or 2 (the common case) run output rows
 * with the weights in registers; every other kernel runs on staged
 * sub-planes (cc_dws), one plane per item, which trades a copy of the plane
 * for border-free loads: the row kernels' masked and strided loads cost
 * several times the multiply-adds of a 5x5 kernel.
 */
#define DW_CV_SMALL 1024 /* pixels per plane (input and output) of a small depthwise map */

static void plan_dw(s4d_cpuconv_plan *pl)
{
    const s4d_cpuconv_params *p = &pl->p;
    const int64_t planes = p->n * p->c, want = 4 * (int64_t)pl->nslots;
    const int fast3 = p->kh == 3 && p->kw == 3 && p->dil_h == 1 && p->dil_w == 1 && p->stride_h == p->stride_w &&
                      (p->stride_w == 1 || p->stride_w == 2);
    pl->packed_bytes = PACK_HEADER + sizeof(float) * (size_t)(p->c * p->kh * p->kw);
    /* AVX-512 takes channels in vectors: small maps have too few outputs per plane to pay for
     * staging rows and the masked tail of every row (a 7x7 plane is 49 outputs), and on larger
     * ones the ring of transposed rows still beats the per-plane kernels (MobileNetV2's 112x112
     * and 56x56 layers, s4d_conv_bench --net=mbv2). Fewer than 16 channels would leave lanes idle,
     * so those keep the per-plane kernels unless the map is small. */
    pl->dw_cv = pl->ops->dw_cv != NULL && p->kh * p->kw <= CC_DW_MAX_TAPS &&
                (p->c >= 16 || (pl->ho * pl->wo <= DW_CV_SMALL && p->h * p->w <= DW_CV_SMALL));
    if (pl->dw_cv) {
        const int64_t blocks = p->n * cdiv(p->c, 16);
        pl->dw_wp = (pl->wo - 1) * p->stride_w + (p->kw - 1) * p->dil_w + 1;
        /* strips of about 256 outputs; row chunks when there are fewer channel blocks than slots want */
        pl->dw_rows = imax(1, imin(pl->ho, cdiv(256, pl->wo)));
        pl->dw_ring_n = (pl->dw_rows - 1) * p->stride_h + (p->kh - 1) * p->dil_h + 1;
        pl->nrch = blocks >= want ? 1 : imin(cdiv(pl->ho, pl->dw_rows), cdiv(want, blocks));
        pl->rows_per_item = cdiv(pl->ho, pl->nrch);
        pl->nrch = cdiv(pl->ho, pl->rows_per_item);
        pl->items = blocks * pl->nrch;
        pl->slot_bytes = (size_t)cdiv((int64_t)sizeof(float) * 16 * (pl->dw_ring_n * pl->dw_wp + pl->dw_rows * pl->wo),
                                      WS_ALIGN) * WS_ALIGN;
        return;
    }
    /* The row ring wins on 5x5 and 7x7 kernels and on narrow planes (several rows per step); 3x3
     * kernels on wider planes stay faster on the row kernel (stride 2) and the staged planes
     * (stride 1) inside networks (bench/ort/profile_layers.py, MobileNetV3 and EfficientNet). */
    pl->dw_ring = pl->ops->dw_ring != NULL && p->kh == p->kw && (p->kh == 3 || p->kh == 5 || p->kh == 7) &&
                  p->dil_h == 1 && p->dil_w == 1 && p->stride_h == p->stride_w &&
                  (p->stride_w == 1 || p->stride_w == 2) && (p->kh > 3 || (p->stride_w == 1 && pl->wo <= 32));
    if (pl->dw_ring) {
        pl->dw_staged = 0;
        pl->dw_pitch = cdiv(cdiv(pl->wo, 16) * 16 + (p->kw - 1) / p->stride_w, 16) * 16;
        pl->nrch = planes >= want ? 1 : imin(pl->ho, cdiv(want, planes));
        pl->rows_per_item = cdiv(pl->ho, pl->nrch);
        pl->nrch = cdiv(pl->ho, pl->rows_per_item);
        pl->items = planes * pl->nrch;
        pl->dw_rows = pl->wo <= 16 ? 4 : pl->wo <= 32 ? 2 : 1;
        pl->dw_ring_n = (pl->dw_rows - 1) * p->stride_h + p->kh;
        pl->slot_bytes = (size_t)cdiv((int64_t)sizeof(float) * (pl->dw_ring_n + 1) * p->stride_w * pl->dw_pitch,
                                      WS_ALIGN) * WS_ALIGN;
        return;
    }
    /* (the AVX2 and scalar row kernels have no 3x3 path of their own; narrow
     * planes waste most lanes of a row vector and pay its masks per tap) */
    pl->dw_staged = !(fast3 && pl->ops->isa == S4D_CPUCONV_ISA_AVX512 && p->stride_w == 2) &&
                    p->kh * p->kw <= CC_DW_MAX_TAPS && p->stride_h <= 8 && p->stride_w <= 8 &&
                    pl->ops->dw_staged != NULL;
    if (pl->dw_staged) {
        const int64_t oky = (p->kh - 1) * p->dil_h / p->stride_h, okx = (p->kw - 1) * p->dil_w / p->stride_w;
        pl->dw_ws = pl->wo + okx;
        pl->dw_hs = pl->ho + oky;
        pl->dw_len = cdiv(pl->ho * pl->dw_ws, 16) * 16;
        pl->dw_sub = cdiv(pl->dw_len + oky * pl->dw_ws + okx + 16, 16) * 16;
        pl->dw_nres = 0;
        for (int64_t ky = 0; ky < p->kh; ky++)
            for (int64_t kx = 0; kx < p->kw; kx++) {
                const int64_t ay = ky * p->dil_h, ax = kx * p->dil_w;
                const int ry = (int)(ay % p->stride_h), rx = (int)(ax % p->stride_w);
                int r = 0;
                while (r < pl->dw_nres && (pl->dw_res_y[r] != ry || pl->dw_res_x[r] != rx))
                    r++;
                if (r == pl->dw_nres) {
                    pl->dw_res_y[r] = ry;
                    pl->dw_res_x[r] = rx;
                    pl->dw_nres++;
                }
                pl->dw_off[ky * p->kw + kx] = r * pl->dw_sub + ay / p->stride_h * pl->dw_ws + ax / p->stride_w;
            }
        pl->nrch = 1;
        pl->rows_per_item = pl->ho;
        pl->items = planes;
        pl->slot_bytes = (size_t)cdiv((int64_t)sizeof(float) * (pl->dw_nres * pl->dw_sub + pl->dw_len), WS_ALIGN) *
                         WS_ALIGN;
        return;
    }
    pl->nrch = planes >= want ? 1 : imin(pl->ho, cdiv(want, planes));
    pl->rows_per_item = cdiv(pl->ho, pl->nrch);
    pl->nrch = cdiv(pl->ho, pl->rows_per_item);
    pl->items = planes * pl->nrch;
    pl->slot_bytes = 0;
}

static s4d_status check_params(const s4d_cpuconv_params *in, s4d_cpuconv_params *p, s4d_errbuf *err)
{
    if (in->struct_size < sizeof(s4d_cpuconv_params))
        return fail(err, S4D_ERR_INVALID_ARG, "cpuconv params: struct_size %u is below %zu", in->struct_size,
                    sizeof(s4d_cpuconv_params));
    *p = *in;
    int64_t *ones[] = {&p->stride_h, &p->stride_w, &p->dil_h, &p->dil_w, &p->group};
    for (size_t i = 0; i < sizeof ones / sizeof ones[0]; i++)
        if (*ones[i] == 0)
            *ones[i] = 1;
    if (p->num_threads <= 0)
        p->num_threads = 1;
    const struct {
        const char *name;
        int64_t v;
    } pos[] = {{"n", p->n},           {"c", p->c},         {"h", p->h},       {"w", p->w},
               {"m", p->m},           {"kh", p->kh},       {"kw", p->kw},     {"stride_h", p->stride_h},
               {"stride_w", p->stride_w}, {"dil_h", p->dil_h}, {"dil_w", p->dil_w}, {"group", p->group}};
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v <= 0)
            return fail(err, S4D_ERR_INVALID_ARG, "cpuconv params: %s = %lld must be positive", pos[i].name,
                        (long long)pos[i].v);
    const struct {
        const char *name;
        int64_t v;
    } pads[] = {{"pad_top", p->pad_top}, {"pad_left", p->pad_left}, {"pad_bottom", p->pad_bottom},
                {"pad_right", p->pad_right}};
    for (size_t i = 0; i < 4; i++)
        if (pads[i].v < 0)
            return fail(err, S4D_ERR_INVALID_ARG, "cpuconv params: %s = %lld is negative", pads[i].name,
                        (long long)pads[i].v);
    if (p->act < S4D_CPUCONV_ACT_NONE || p->act > S4D_CPUCONV_ACT_HARD_SWISH)
        return fail(err, S4D_ERR_INVALID_ARG, "cpuconv params: unknown activation %d", (int)p->act);
    if (p->act == S4D_CPUCONV_ACT_CLIP && !(p->act_min <= p->act_max))
        return fail(err, S4D_ERR_INVALID_ARG, "cpuconv params: clip range [%g, %g] is empty", (double)p->act_min,
                    (double)p->act_max);
    if ((p->act == S4D_CPUCONV_ACT_LEAKY_RELU || p->act == S4D_CPUCONV_ACT_HARD_SIGMOID) &&
        !(p->act_alpha == p->act_alpha && p->act_beta == p->act_beta))
        return fail(err, S4D_ERR_INVALID_ARG, "cpuconv params: activation alpha or beta is NaN");
    /* The epilogues carry two parameters, lo and hi: the bounds, or alpha and beta. */
    if (p->act == S4D_CPUCONV_ACT_LEAKY_RELU || p->act == S4D_CPUCONV_ACT_HARD_SIGMOID) {
        p->act_min = p->act_alpha;
        p->act_max = p->act_beta;
    }
    if (p->algo < S4D_CPUCONV_ALGO_AUTO || p->algo > S4D_CPUCONV_ALGO_DEPTHWISE)
        return fail(err, S4D_ERR_INVALID_ARG, "cpuconv params: unknown algorithm %d", (int)p->algo);
    if (p->isa < S4D_CPUCONV_ISA_AUTO || p->isa > S4D_CPUCONV_ISA_AVX512)
        return fail(err, S4D_ERR_INVALID_ARG, "cpuconv params: unknown instruction set %d", (int)p->isa);
    if (p->c % p->group != 0 || p->m % p->group != 0)
        return fail(err, S4D_ERR_SHAPE, "cpuconv params: group %lld must divide c = %lld and m = %lld",
                    (long long)p->group, (long long)p->c, (long long)p->m);
    /* Sizes the kernels index with 32-bit lanes or multiply together. */
    const int64_t big = INT32_MAX / 2;
    if (p->h > big || p->w > big || p->h * p->w > big || p->kh > 4096 || p->kw > 4096 || p->pad_top > big ||
        p->pad_left > big || p->pad_bottom > big || p->pad_right > big || p->stride_h > big || p->stride_w > big ||
        p->dil_h > 4096 || p->dil_w > 4096 || p->c > big || p->m > big || p->n > big)
        return fail(err, S4D_ERR_UNSUPPORTED, "cpuconv params: a size exceeds the 2^30 elements per plane supported");
    return S4D_OK;
}

s4d_status s4d_cpuconv_plan_create(const s4d_cpuconv_params *params, s4d_cpuconv_plan **out, s4d_errbuf *err)
{
    if (!out)
        return fail(err, S4D_ERR_INVALID_ARG, "cpuconv plan: out is NULL");
    *out = NULL;
    if (!params)
        return fail(err, S4D_ERR_INVALID_ARG, "cpuconv plan: params is NULL");
    s4d_cpuconv_plan tmp;
    memset(&tmp, 0, sizeof tmp);
    s4d_cpuconv_plan *pl = &tmp;
    s4d_status st = check_params(params, &pl->p, err);
    if (st != S4D_OK)
        return st;
    const s4d_cpuconv_params *p = &pl->p;
    const int64_t ext_h = p->dil_h * (p->kh - 1) + 1, ext_w = p->dil_w * (p->kw - 1) + 1;
    if (p->h + p->pad_top + p->pad_bottom < ext_h || p->w + p->pad_left + p->pad_right < ext_w)
        return fail(err, S4D_ERR_SHAPE, "cpuconv plan: the dilated kernel %lldx%lld exceeds the padded input %lldx%lld",
                    (long long)ext_h, (long long)ext_w, (long long)(p->h + p->pad_top + p->pad_bottom),
                    (long long)(p->w + p->pad_left + p->pad_right));
    pl->ho = (p->h + p->pad_top + p->pad_bottom - ext_h) / p->stride_h + 1;
    pl->wo = (p->w + p->pad_left + p->pad_right - ext_w) / p->stride_w + 1;
    if (pl->ho * pl->wo > INT32_MAX / 2)
        return fail(err, S4D_ERR_UNSUPPORTED, "cpuconv plan: output plane %lldx%lld exceeds 2^30 elements",
                    (long long)pl->ho, (long long)pl->wo);
    pl->cg = p->c / p->group;
    pl->mg = p->m / p->group;
    pl->mgp = cdiv(pl->mg, CC_MR) * CC_MR;
    pl->kdim = pl->cg * p->kh * p->kw;
    pl->nslots = p->num_threads;

    s4d_cpuconv_isa best = s4d_cpuconv_isa_best(), isa = p->isa == S4D_CPUCONV_ISA_AUTO ? best : p->isa;
    if (isa > best)
        return fail(err, S4D_ERR_UNSUPPORTED, "cpuconv plan: this CPU lacks the %s instructions asked for (best: %s)",
                    s4d_cpuconv_isa_name(isa), s4d_cpuconv_isa_name(best));
    pl->ops = ops_for(isa);

    const int64_t pix = pl->ho * pl->wo;
    s4d_cpuconv_algo algo = p->algo;
    if (algo == S4D_CPUCONV_ALGO_AUTO) {
        if (dw_fits(pl)) {
            algo = S4D_CPUCONV_ALGO_DEPTHWISE;
        } else {
            double best_cost = cost_gemm(p->group, pl->mg, pl->kdim, pix);
            algo = S4D_CPUCONV_ALGO_GEMM;
            if (wino_fits(pl)) {
                double c2 = cost_wino(2, p->c, p->m, pl->ho, pl->wo), c4 = cost_wino(4, p->c, p->m, pl->ho, pl->wo);
                if (c2 < best_cost) {
                    best_cost = c2;
                    algo = S4D_CPUCONV_ALGO_WINOGRAD2;
                }
                if (c4 < best_cost)
                    algo = S4D_CPUCONV_ALGO_WINOGRAD4;
            }
        }
    } else if ((algo == S4D_CPUCONV_ALGO_WINOGRAD2 || algo == S4D_CPUCONV_ALGO_WINOGRAD4) && !wino_fits(pl)) {
        return fail(err, S4D_ERR_UNSUPPORTED,
                    "cpuconv plan: Winograd needs a 3x3 kernel, stride 1, dilation 1 and group 1 (got %lldx%lld, "
                    "stride %lldx%lld, dilation %lldx%lld, group %lld)",
                    (long long)p->kh, (long long)p->kw, (long long)p->stride_h, (long long)p->stride_w,
                    (long long)p->dil_h, (long long)p->dil_w, (long long)p->group);
    } else if (algo == S4D_CPUCONV_ALGO_DEPTHWISE && !dw_fits(pl)) {
        return fail(err, S4D_ERR_UNSUPPORTED,
                    "cpuconv plan: depthwise needs group = c = m > 1 (got group %lld, c %lld, m %lld)",
                    (long long)p->group, (long long)p->c, (long long)p->m);
    }
    pl->algo = algo;
    switch (algo) {
    case S4D_CPUCONV_ALGO_GEMM:
        plan_gemm(pl);
        pl->gflop = 2e-9 * (double)p->n * (double)p->m * (double)pl->kdim * (double)pix;
        break;
    case S4D_CPUCONV_ALGO_WINOGRAD2:
    case S4D_CPUCONV_ALGO_WINOGRAD4:
        pl->wm = algo == S4D_CPUCONV_ALGO_WINOGRAD4 ? 4 : 2;
        plan_wino(pl);
        pl->gflop = 2e-9 * (double)p->n * (double)((pl->wm + 2) * (pl->wm + 2)) * (double)p->m * (double)p->c *
                    (double)pl->tiles;
        break;
    case S4D_CPUCONV_ALGO_DEPTHWISE:
        plan_dw(pl);
        pl->gflop = 2e-9 * (double)p->n * (double)p->c * (double)(p->kh * p->kw) * (double)pix;
        break;
    case S4D_CPUCONV_ALGO_AUTO:
        return fail(err, S4D_ERR_INTERNAL, "cpuconv plan: no algorithm chosen");
    }
    pl->ws_bytes = pl->slot_bytes || pl->extra_bytes ? (size_t)pl->nslots * pl->slot_bytes + pl->extra_bytes + WS_ALIGN
                                                     : 0;
    s4d_cpuconv_plan *heap = malloc(sizeof *heap);
    if (!heap)
        return fail(err, S4D_ERR_NO_MEMORY, "cpuconv plan: out of memory");
    *heap = tmp;
    *out = heap;
    return S4D_OK;
}

void s4d_cpuconv_plan_destroy(s4d_cpuconv_plan *plan)
{
    free(plan);
}

void s4d_cpuconv_plan_info(const s4d_cpuconv_plan *plan, s4d_cpuconv_info *info)
{
    memset(info, 0, sizeof *info);
    if (!plan)
        return;
    info->algo = plan->algo;
    info->isa = plan->ops->isa;
    info->ho = plan->ho;
    info->wo = plan->wo;
    info->workspace_bytes = plan->ws_bytes;
    info->packed_bytes = plan->packed_bytes;
    info->est_gflop = plan->gflop;
}

int s4d_cpuconv_plan_describe(const s4d_cpuconv_plan *plan, char *buf, size_t size)
{
    if (!plan)
        return snprintf(buf, size, "(no plan)");
    const s4d_cpuconv_params *p = &plan->p;
    switch (plan->algo) {
    case S4D_CPUCONV_ALGO_GEMM:
        return snprintf(buf, size,
                        "gemm %s: K %lld in blocks of %lld, %lld pixel blocks of %lld x %lld M chunks of %lld%s, "
                        "%lld items, %d slots",
                        s4d_cpuconv_isa_name(plan->ops->isa), (long long)plan->kdim, (long long)plan->kc,
                        (long long)plan->nblk, (long long)plan->nb, (long long)plan->nmch, (long long)plan->mchunk,
                        plan->tr ? (plan->tr_direct ? " (small map: pixels as rows, input in place)"
                                                    : " (small map: pixels as rows, panels packed once, shared)")
                        : plan->shared_b ? " (panels packed once, shared)" : "",
                        (long long)plan->items, plan->nslots);
    case S4D_CPUCONV_ALGO_WINOGRAD2:
    case S4D_CPUCONV_ALGO_WINOGRAD4:
        return snprintf(buf, size,
                        "winograd F(%dx%d,3x3) %s: %lld tiles in %lld blocks of %lld x %lld M chunks of %lld, "
                        "C in blocks of %lld, %lld items, %d slots",
                        plan->wm, plan->wm, s4d_cpuconv_isa_name(plan->ops->isa), (long long)plan->tiles,
                        (long long)plan->ntb, (long long)plan->tb, (long long)plan->nmch, (long long)plan->mchunk,
                        (long long)plan->kc, (long long)plan->items, plan->nslots);
    case S4D_CPUCONV_ALGO_DEPTHWISE:
        return snprintf(buf, size, "depthwise %lldx%lld %s, %s: %lld planes x %lld row chunks, %d slots",
                        (long long)p->kh, (long long)p->kw, s4d_cpuconv_isa_name(plan->ops->isa),
                        plan->dw_cv     ? "16 channels a vector"
                        : plan->dw_ring ? "row ring"
                        : plan->dw_staged ? "staged planes"
                                          : "rows",
                        (long long)(p->n * p->c),
                        (long long)plan->nrch, plan->nslots);
    case S4D_CPUCONV_ALGO_AUTO:
        break;
    }
    return snprintf(buf, size, "(no algorithm)");
}

/* ---- weight packing ---- */

/* G of F(m x m, 3x3): the kernel's values at the interpolation points. */
static const double G4[6][3] = S4D_WINO4_G;
static const double G2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};

s4d_status s4d_cpuconv_pack_weights(const s4d_cpuconv_plan *plan, const float *w, void *packed, size_t packed_bytes,
                                    s4d_errbuf *err)
{
    if (!plan || !w || !packed)
        return fail(err, S4D_ERR_INVALID_ARG, "cpuconv pack: %s is NULL", !plan ? "plan" : !w ? "w" : "packed");
    if (packed_bytes < plan->packed_bytes)
        return fail(err, S4D_ERR_INVALID_ARG, "cpuconv pack: %zu bytes given, %zu needed", packed_bytes,
                    plan->packed_bytes);
    const s4d_cpuconv_params *p = &plan->p;
    pack_header h;
    memset(&h, 0, sizeof h);
    h.magic = PACK_MAGIC;
    h.version = PACK_VERSION;
    h.algo = (uint32_t)plan->algo;
    h.m = p->m;
    h.c = p->c;
    h.kh = p->kh;
    h.kw = p->kw;
    h.group = p->group;
    h.floats = (int64_t)((plan->packed_bytes - PACK_HEADER) / sizeof(float));
    memset(packed, 0, PACK_HEADER);
    memcpy(packed, &h, sizeof h);
    float *dst = (float *)((char *)packed + PACK_HEADER);
    const int64_t kdim = plan->kdim, mgp = plan->mgp, mg = plan->mg;
    switch (plan->algo) {
    case S4D_CPUCONV_ALGO_GEMM:
        if (plan->tr) {
            cc_pack_tn(w, p->m, kdim, dst);
            break;
        }
        /* [group][panel][k][CC_MR], rows past mg zero */
        for (int64_t g = 0; g < p->group; g++)
            for (int64_t mp = 0; mp < mgp / CC_MR; mp++)
                for (int64_t k = 0; k < kdim; k++)
                    for (int i = 0; i < CC_MR; i++) {
                        int64_t row = mp * CC_MR + i;
                        *dst++ = row < mg ? w[(g * mg + row) * kdim + k] : 0.0f;
                    }
        break;
    case S4D_CPUCONV_ALGO_WINOGRAD2:
    case S4D_CPUCONV_ALGO_WINOGRAD4: {
        /* U = G g G^T in double, then [xi][panel][c][CC_MR] */
        const int a = plan->wm + 2;
        const double(*G)[3] = plan->wm == 4 ? G4 : G2;
        const int64_t c = p->c;
        float *u = dst;
        memset(u, 0, sizeof(float) * (size_t)(a * a * mgp * c));
        for (int64_t mo = 0; mo < p->m; mo++)
            for (int64_t ci = 0; ci < c; ci++) {
                const float *g = w + (mo * c + ci) * 9;
                double gt[6][3]; /* G g */
                for (int r = 0; r < a; r++)
                    for (int j = 0; j < 3; j++)
                        gt[r][j] = G[r][0] * g[j] + G[r][1] * g[3 + j] + G[r][2] * g[6 + j];
                for (int r = 0; r < a; r++)
                    for (int q = 0; q < a; q++) {
                        double v = gt[r][0] * G[q][0] + gt[r][1] * G[q][1] + gt[r][2] * G[q][2];
                        int64_t xi = r * a + q;
                        u[((xi * (mgp / CC_MR) + mo / CC_MR) * c + ci) * CC_MR + mo % CC_MR] = (float)v;
                    }
            }
        break;
    }
    case S4D_CPUCONV_ALGO_DEPTHWISE:
        memcpy(dst, w, sizeof(float) * (size_t)(p->c * p->kh * p->kw));
        break;
    case S4D_CPUCONV_ALGO_AUTO:
        return fail(err, S4D_ERR_INTERNAL, "cpuconv pack: plan without an algorithm");
    }
    return S4D_OK;
}

/* ---- run ---- */

typedef struct run_ctx {
    const s4d_cpuconv_plan *pl;
    const float *w, *x, *bias, *res;
    float *y;
    char *ws;
    int pack_pass;     /* the first pass of a shared-panel run */
    int64_t items;
    atomic_llong next;
} run_ctx;

/* The segments of pixel block blk (a flat plane is one row: each panel is
 * then one contiguous copy) and the packing geometry that goes with them. */
static int64_t gemm_segs(const s4d_cpuconv_plan *pl, int64_t blk, cc_seg *segs, int64_t *h, int64_t *w)
{
    const s4d_cpuconv_params *p = &pl->p;
    const int64_t nr = pl->ops->nr, pix = pl->ho * pl->wo;
    const int64_t n0 = blk * pl->nb, nbb = imin(pl->nb, pix - n0), wo = pl->flat ? pix : pl->wo;
    *h = pl->flat ? 1 : p->h;
    *w = pl->flat ? p->h * p->w : p->w;
    int64_t nseg = 0;
    for (int64_t j = 0; j < nbb;) {
        int64_t q = n0 + j, oy = q / wo, ox = q % wo;
        int64_t len = imin(imin(wo - ox, nbb - j), nr - j % nr);
        segs[nseg++] = (cc_seg){(int32_t)oy, (int32_t)ox, (int32_t)len, (int32_t)j};
        j += len;
    }
    return nseg;
}

static void gemm_pack(const run_ctx *r, int64_t ng_i, int64_t blk, int64_t k0, int64_t kcb, const cc_seg *segs,
                      int64_t nseg, int64_t h, int64_t w, float *dst)
{
    const s4d_cpuconv_plan *pl = r->pl;
    const s4d_cpuconv_params *p = &pl->p;
    const int64_t plane = p->h * p->w, n = ng_i / p->group, g = ng_i % p->group;
    const cc_pack pk = {r->x + (n * p->c + g * pl->cg) * plane, plane, h, w, pl->cg, p->kh, p->kw,
                        p->stride_h, p->stride_w, p->pad_top, p->pad_left, p->dil_h, p->dil_w, k0, kcb, segs, nseg,
                        dst};
    (void)blk;
    pl->ops->pack_b(&pk);
}

/* Shared panels of (image x group ng_i, block blk), reduction rows from k0. */
static float *gemm_shared(const run_ctx *r, int64_t ng_i, int64_t blk, int64_t k0)
{
    const s4d_cpuconv_plan *pl = r->pl;
    const int64_t nbp = cdiv(pl->nb, pl->ops->nr) * pl->ops->nr;
    return (float *)(r->ws + pl->shared_off) + ((ng_i * pl->nblk + blk) * pl->kdim + k0) * nbp;
}

/* First pass of a shared-panel run: item = (image x group, block, K block). */
static void gemm_pack_item(const run_ctx *r, int64_t item, char *slot)
{
    const s4d_cpuconv_plan *pl = r->pl;
    const int64_t kb = item % pl->nkb, blk = (item / pl->nkb) % pl->nblk, ng_i = item / pl->nkb / pl->nblk;
    const int64_t k0 = kb * pl->kc, kcb = imin(pl->kc, pl->kdim - k0);
    int64_t h, w;
    cc_seg *segs = (cc_seg *)slot;
    const int64_t nseg = gemm_segs(pl, blk, segs, &h, &w);
    gemm_pack(r, ng_i, blk, k0, kcb, segs, nseg, h, w, gemm_shared(r, ng_i, blk, k0));
}

static void gemm_item(const run_ctx *r, int64_t item, char *slot)
{
    const s4d_cpuconv_plan *pl = r->pl;
    const s4d_cpuconv_params *p = &pl->p;
    const cc_ops *ops = pl->ops;
    const int64_t nr = ops->nr, pix = pl->ho * pl->wo, kdim = pl->kdim;
    const int64_t mc = item % pl->nmch, blk = (item / pl->nmch) % pl->nblk, ng_i = item / pl->nmch / pl->nblk;
    const int64_t g = ng_i % p->group, n = ng_i / p->group;
    const int64_t ych = n * p->m + g * pl->mg; /* first output channel of the group */
    const float *ag = r->w + g * pl->mgp * kdim;
    const int64_t m0 = mc * pl->mchunk, m1 = imin(pl->mg, m0 + pl->mchunk);
    const int64_t n0 = blk * pl->nb, nbb = imin(pl->nb, pix - n0), np = cdiv(nbb, nr);
    float *bbuf = (float *)slot;
    cc_seg *segs = (cc_seg *)(slot + sizeof(float) * (size_t)(pl->shared_b ? 0 : pl->kc * cdiv(pl->nb, nr) * nr));
    int64_t h = 0, w = 0, nseg = pl->shared_b || (pl->flat && pix >= 64) ? 0 : gemm_segs(pl, blk, segs, &h, &w);
    cc_epi epi = {NULL, NULL, pix, (int)p->act, p->act_min, p->act_max};
    /* A flat plane (1x1, stride 1, unpadded) is already B, row k at x + k * pix: the micro-kernel
     * reads it in place rather than from a packed copy (which costs a pass over the input, about
     * a tenth of the convolution), except on maps of a few dozen pixels, whose rows are too short
     * for the hardware prefetchers. */
    const int direct = pl->flat && !pl->shared_b && pix >= 64;
    const int store_bound = kdim <= 64 && pix >= 4096;
    for (int64_t k0 = 0; k0 < kdim; k0 += pl->kc) {
        const int64_t kcb = imin(pl->kc, kdim - k0);
        const int last = k0 + kcb == kdim;
        const float *b;
        if (direct) {
            b = r->x + (n * p->c + g * pl->cg + k0) * pix + n0;
        } else if (pl->shared_b) {
            b = gemm_shared(r, ng_i, blk, k0);
        } else {
            gemm_pack(r, ng_i, blk, k0, kcb, segs, nseg, h, w, bbuf);
            b = bbuf;
        }
        /* Weight micro-panel in L1 across the block's pixel panels (in L2);
         * the output is written 8 rows x the block's width at a time. */
        for (int64_t mrow = m0; mrow < m1; mrow += CC_MR) {
            const int mr = (int)imin(CC_MR, m1 - mrow);
            for (int64_t pp = 0; pp < np; pp++) {
                const int nc = (int)imin(nr, nbb - pp * nr);
                const int64_t at = (ych + mrow) * pix + n0 + pp * nr;
                if (last) {
                    epi.bias = r->bias ? r->bias + (g * pl->mg + mrow) : NULL;
                    epi.res = r->res ? r->res + at : NULL;
                }
                if (store_bound && k0 == 0) {
                    /* the next tile's output lines, for writing: on a short reduction the stores of a
                     * large map wait on fetching their lines otherwise */
                    const int64_t nx = pp + 1 < np ? at + nr : (ych + mrow + CC_MR) * pix + n0;
                    if (pp + 1 < np || mrow + CC_MR < m1)
                        for (int i = 0; i < CC_MR; i++)
                            for (int64_t j = 0; j < nr; j += 16)
                                cc_prefetch_w(r->y + nx + i * pix + j);
                }
                if (direct)
                    ops->ukr(kcb, ag + mrow * kdim + k0 * CC_MR, b + pp * nr, pix, r->y + at, pix, mr, nc, k0 > 0,
                             last ? &epi : NULL);
                else
                    ops->ukr(kcb, ag + mrow * kdim + k0 * CC_MR, b + pp * kcb * nr, nr, r->y + at, pix, mr, nc,
                             k0 > 0, last ? &epi : NULL);
            }
        }
    }
}

/* Small maps (plan_gemm_t): channel panel mc of image n. Per pixel, the reduction runs in the
 * order of gemm_item, so both give the same bits. */
static void gemm_t_item(const run_ctx *r, int64_t item, char *slot)
{
    const s4d_cpuconv_plan *pl = r->pl;
    const s4d_cpuconv_params *p = &pl->p;
    const cc_ops *ops = pl->ops;
    const int64_t nr = ops->nr, pix = pl->ho * pl->wo, kdim = pl->kdim, plane = p->h * p->w;
    const int64_t mc = item % pl->nmch, n = item / pl->nmch, co0 = mc * CC_TN;
    const int ncol = (int)imin(CC_TN, p->m - co0);
    float *t = (float *)slot;
    int64_t *off = (int64_t *)(t + pix * CC_TN);
    const float *wp = r->w + mc * kdim * CC_TN;
    if (pl->tr_direct)
        for (int64_t q = 0; q < pix; q++)
            off[q] = (q / pl->wo) * p->stride_h * p->w + (q % pl->wo) * p->stride_w;
    for (int64_t k0 = 0; k0 < kdim; k0 += pl->kc) {
        const int64_t kcb = imin(pl->kc, kdim - k0);
        const float *base;
        int64_t lda;
        if (pl->tr_direct) {
            base = r->x + (n * p->c + k0) * plane;
            lda = plane;
        } else {
            /* pixel q of the block's panels: panel q / nr, row kk at kk * nr */
            base = gemm_shared(r, n, 0, k0);
            lda = nr;
            for (int64_t q = 0; q < pix; q++)
                off[q] = (q / nr) * kcb * nr + q % nr;
        }
        for (int64_t q0 = 0; q0 < pix; q0 += pl->tr_rows)
            ops->ukr_t(kcb, base, off + q0, (int)imin(pl->tr_rows, pix - q0), lda, wp + k0 * CC_TN,
                       t + q0 * CC_TN, ncol, k0 > 0, q0 == 0);
    }
    const int64_t ych = n * p->m + co0;
    const cc_post post = {(int)p->act, p->act_min, p->act_max};
    ops->tr_out(t, pix, ncol, r->bias ? r->bias + co0 : NULL, r->res ? r->res + ych * pix : NULL, r->y + ych * pix,
                pix, &post);
}

static void wino_item(const run_ctx *r, int64_t item, char *slot)
{
    const s4d_cpuconv_plan *pl = r->pl;
    const s4d_cpuconv_params *p = &pl->p;
    const cc_ops *ops = pl->ops;
    const int wm = pl->wm, a = wm + 2;
    const int64_t nr = ops->nr, vl = ops->vl, pix = pl->ho * pl->wo, plane = p->h * p->w, c = p->c;
    int64_t it = item;
    const int64_t mc = it % pl->nmch;
    it /= pl->nmch;
    const int64_t tbi = it % pl->ntb, n = it / pl->ntb;
    const int64_t m0 = mc * pl->mchunk, m1 = imin(p->m, m0 + pl->mchunk), mrows = cdiv(m1 - m0, CC_MR) * CC_MR;
    const int64_t t0 = tbi * pl->tb, ntl = imin(pl->tb, pl->tiles - t0), np = cdiv(ntl, nr);
    const int64_t ncols = cdiv(ntl, vl) * vl; /* whole vectors: lanes past ntl hold transforms of zeros */
    const int64_t tbp = np * nr;
    float *vbuf = (float *)slot;
    float *mbuf = vbuf + (size_t)(a * a) * ((size_t)(cdiv(pl->tb, nr) * nr) * (size_t)c + XI_PAD);
    const int64_t vxi = np * c * nr + XI_PAD, mxi = mrows * tbp + XI_PAD;
    const float *xn = r->x + n * c * plane;
    cc_tiles tl;
    for (int64_t j = 0; j < ntl; j += vl) {
        tl.n = (int)imin(vl, ntl - j);
        for (int l = 0; l < tl.n; l++) {
            int64_t t = t0 + j + l;
            tl.oy[l] = (int32_t)((t / pl->tw) * wm);
            tl.ox[l] = (int32_t)((t % pl->tw) * wm);
        }
        ops->wino_in(wm, xn, plane, c, p->h, p->w, p->pad_top, p->pad_left, &tl, vbuf + (j / nr) * c * nr + j % nr,
                     vxi, nr);
    }
    const float *u = r->w;
    const int64_t upan = pl->mgp / CC_MR;
    for (int64_t xi = 0; xi < a * a; xi++)
        for (int64_t k0 = 0; k0 < c; k0 += pl->kc) {
            const int64_t kcb = imin(pl->kc, c - k0);
            for (int64_t mrow = m0; mrow < m1; mrow += CC_MR) {
                const int mr = (int)imin(CC_MR, m1 - mrow);
                const float *ap = u + ((xi * upan + mrow / CC_MR) * c + k0) * CC_MR;
                for (int64_t pp = 0; pp < np; pp++) {
                    const int nc = (int)imin(nr, ncols - pp * nr);
                    const float *bp = vbuf + xi * vxi + pp * c * nr + k0 * nr;
                    ops->ukr(kcb, ap, bp, nr, mbuf + xi * mxi + (mrow - m0) * tbp + pp * nr, tbp, mr, nc, k0 > 0,
                             NULL);
                }
            }
        }
    const int64_t ych = n * p->m + m0;
    const cc_post post = {(int)p->act, p->act_min, p->act_max};
    for (int64_t j = 0; j < ntl; j += vl) {
        tl.n = (int)imin(vl, ntl - j);
        for (int l = 0; l < tl.n; l++) {
            int64_t t = t0 + j + l;
            tl.oy[l] = (int32_t)((t / pl->tw) * wm);
            tl.ox[l] = (int32_t)((t % pl->tw) * wm);
        }
        ops->wino_out(wm, mbuf + j, mxi, tbp, m1 - m0, &tl, pl->ho, pl->wo, r->bias ? r->bias + m0 : NULL,
                      r->res ? r->res + ych * pix : NULL, r->y + ych * pix, pix, &post);
    }
}

/* Writes the zero-padded sub-planes of one input plane (see cc_dws). */
static void dw_stage(const s4d_cpuconv_plan *pl, const float *x, float *sub)
{
    const s4d_cpuconv_params *p = &pl->p;
    const int64_t ws = pl->dw_ws, hs = pl->dw_hs, sh = p->stride_h, sw = p->stride_w;
    for (int r = 0; r < pl->dw_nres; r++) {
        float *s = sub + r * pl->dw_sub;
        for (int64_t i = 0; i < hs; i++) {
            float *row = s + i * ws;
            const int64_t iy = i * sh + pl->dw_res_y[r] - p->pad_top;
            if (iy < 0 || iy >= p->h) {
                memset(row, 0, sizeof(float) * (size_t)ws);
                continue;
            }
            const float *src = x + iy * p->w;
            /* columns j with 0 <= j * sw + rx - pad_left < w */
            const int64_t c0 = pl->dw_res_x[r] - p->pad_left;
            int64_t j0 = c0 >= 0 ? 0 : cdiv(-c0, sw), j1 = c0 >= p->w ? 0 : cdiv(p->w - c0, sw);
            j0 = imin(j0, ws);
            j1 = imin(imax(j1, j0), ws);
            for (int64_t j = 0; j < j0; j++)
                row[j] = 0.0f;
            if (sw == 1)
                memcpy(row + j0, src + j0 + c0, sizeof(float) * (size_t)(j1 - j0));
            else
                for (int64_t j = j0; j < j1; j++)
                    row[j] = src[j * sw + c0];
            for (int64_t j = j1; j < ws; j++)
                row[j] = 0.0f;
        }
        memset(s + hs * ws, 0, sizeof(float) * (size_t)(pl->dw_sub - hs * ws));
    }
}

static void dw_item(const run_ctx *r, int64_t item, char *slot)
{
    const s4d_cpuconv_plan *pl = r->pl;
    if (pl->dw_cv) {
        const s4d_cpuconv_params *p = &pl->p;
        const int64_t nb = cdiv(p->c, 16), rc = item % pl->nrch, blk = item / pl->nrch;
        const int64_t n = blk / nb, c0 = (blk % nb) * 16, pix = pl->ho * pl->wo;
        const int64_t plane = p->h * p->w, ch = n * p->c + c0;
        float *tile = (float *)slot;
        const cc_dwc d = {p->h, p->w, pl->ho, pl->wo, p->kh, p->kw, p->stride_h, p->stride_w, p->pad_top, p->pad_left,
                          p->dil_h, p->dil_w, pl->dw_wp, pl->dw_rows, pl->dw_ring_n, tile,
                          tile + 16 * pl->dw_ring_n * pl->dw_wp};
        const cc_post post = {(int)p->act, p->act_min, p->act_max};
        const int64_t oy0 = rc * pl->rows_per_item, oy1 = imin(pl->ho, oy0 + pl->rows_per_item);
        pl->ops->dw_cv(&d, r->x + ch * plane, plane, (int)imin(16, p->c - c0), r->w + c0 * p->kh * p->kw,
                       r->bias ? r->bias + c0 : NULL, r->res ? r->res + ch * pix : NULL, r->y + ch * pix, oy0, oy1,
                       &post);
        return;
    }
    if (pl->dw_staged) {
        const s4d_cpuconv_params *p = &pl->p;
        const int64_t ci = item % p->c, pix = pl->ho * pl->wo;
        float *sub = (float *)slot, *out = sub + pl->dw_nres * pl->dw_sub;
        dw_stage(pl, r->x + item * p->h * p->w, sub);
        const cc_dws d = {sub, out, pl->dw_len, pl->dw_ws, pl->ho, pl->wo, (int)(p->kh * p->kw), pl->dw_off};
        const cc_post post = {(int)p->act, p->act_min, p->act_max};
        pl->ops->dw_staged(&d, r->w + ci * p->kh * p->kw, r->bias ? r->bias[ci] : 0.0f,
                           r->res ? r->res + item * pix : NULL, r->y + item * pix, &post);
        return;
    }
    const s4d_cpuconv_params *p = &pl->p;
    const int64_t rc = item % pl->nrch, plane_id = item / pl->nrch, ci = plane_id % p->c;
    const int64_t pix = pl->ho * pl->wo;
    if (pl->dw_ring) {
        const cc_dwr d = {p->h, p->w, pl->ho, pl->wo, p->kh, p->kw, p->stride_w, p->pad_top, p->pad_left,
                          pl->dw_pitch, pl->dw_rows, pl->dw_ring_n, (float *)slot};
        const cc_post post = {(int)p->act, p->act_min, p->act_max};
        const int64_t oy0 = rc * pl->rows_per_item, oy1 = imin(pl->ho, oy0 + pl->rows_per_item);
        pl->ops->dw_ring(&d, r->x + plane_id * p->h * p->w, r->w + ci * p->kh * p->kw, r->bias ? r->bias[ci] : 0.0f,
                         r->res ? r->res + plane_id * pix : NULL, r->y + plane_id * pix, oy0, oy1, &post);
        return;
    }
    const cc_geom g = {p->h, p->w, pl->ho, pl->wo, p->kh, p->kw, p->stride_h, p->stride_w,
                       p->pad_top, p->pad_left, p->dil_h, p->dil_w};
    const cc_post post = {(int)p->act, p->act_min, p->act_max};
    const int64_t oy0 = rc * pl->rows_per_item, oy1 = imin(pl->ho, oy0 + pl->rows_per_item);
    pl->ops->dw_rows(&g, r->x + plane_id * p->h * p->w, r->w + ci * p->kh * p->kw, r->bias ? r->bias[ci] : 0.0f,
                     r->res ? r->res + plane_id * pix : NULL, r->y + plane_id * pix, oy0, oy1, &post);
}

static void run_slots(void *arg, int64_t begin, int64_t end)
{
    run_ctx *r = arg;
    const s4d_cpuconv_plan *pl = r->pl;
    for (int64_t s = begin; s < end; s++) {
        char *slot = r->ws ? r->ws + (size_t)s * pl->slot_bytes : NULL;
        for (;;) {
            int64_t item = atomic_fetch_add(&r->next, 1);
            if (item >= r->items)
                break;
            switch (pl->algo) {
            case S4D_CPUCONV_ALGO_GEMM:
                if (r->pack_pass)
                    gemm_pack_item(r, item, slot);
                else if (pl->tr)
                    gemm_t_item(r, item, slot);
                else
                    gemm_item(r, item, slot);
                break;
            case S4D_CPUCONV_ALGO_WINOGRAD2:
            case S4D_CPUCONV_ALGO_WINOGRAD4:
                wino_item(r, item, slot);
                break;
            case S4D_CPUCONV_ALGO_DEPTHWISE:
                dw_item(r, item, slot);
                break;
            case S4D_CPUCONV_ALGO_AUTO:
                break;
            }
        }
    }
}

s4d_status s4d_cpuconv_run(const s4d_cpuconv_plan *plan, const void *packed, const float *x, const float *bias,
                           const float *residual, float *y, void *workspace, size_t workspace_bytes,
                           s4d_cpuconv_parallel_for parallel_for, void *pool, s4d_errbuf *err)
{
    if (!plan || !packed || !x || !y)
        return fail(err, S4D_ERR_INVALID_ARG, "cpuconv run: %s is NULL",
                    !plan ? "plan" : !packed ? "packed" : !x ? "x" : "y");
    const s4d_cpuconv_params *p = &plan->p;
    if (p->has_bias && !bias)
        return fail(err, S4D_ERR_INVALID_ARG, "cpuconv run: the plan has a bias but bias is NULL");
    if (p->has_residual && !residual)
        return fail(err, S4D_ERR_INVALID_ARG, "cpuconv run: the plan has a residual but residual is NULL");
    if (workspace_bytes < plan->ws_bytes || (plan->ws_bytes && !workspace))
        return fail(err, S4D_ERR_INVALID_ARG, "cpuconv run: workspace of %zu bytes, %zu needed",
                    workspace ? workspace_bytes : 0, plan->ws_bytes);
    pack_header h;
    memcpy(&h, packed, sizeof h);
    if (h.magic != PACK_MAGIC || h.version != PACK_VERSION || h.algo != (uint32_t)plan->algo || h.m != p->m ||
        h.c != p->c || h.kh != p->kh || h.kw != p->kw || h.group != p->group ||
        h.floats != (int64_t)((plan->packed_bytes - PACK_HEADER) / sizeof(float)))
        return fail(err, S4D_ERR_INVALID_ARG,
                    "cpuconv run: the packed weights were not made for this plan (%s, m %lld, c %lld, %lldx%lld, "
                    "group %lld)",
                    s4d_cpuconv_algo_name(plan->algo), (long long)p->m, (long long)p->c, (long long)p->kh,
                    (long long)p->kw, (long long)p->group);
    run_ctx r;
    r.pl = plan;
    r.w = (const float *)((const char *)packed + PACK_HEADER);
    r.x = x;
    r.bias = p->has_bias ? bias : NULL;
    r.res = p->has_residual ? residual : NULL;
    r.y = y;
    r.ws = NULL;
    if (plan->ws_bytes) {
        uintptr_t at = ((uintptr_t)workspace + WS_ALIGN - 1) / WS_ALIGN * WS_ALIGN;
        r.ws = (char *)at;
    }
    r.pack_pass = 0;
    if (plan->shared_b) {
        r.pack_pass = 1;
        r.items = p->n * p->group * plan->nblk * plan->nkb;
        atomic_init(&r.next, 0);
        int64_t slots = imin(plan->nslots, r.items);
        if (parallel_for && slots > 1)
            parallel_for(pool, slots, run_slots, &r);
        else
            run_slots(&r, 0, 1);
        r.pack_pass = 0;
    }
    r.items = plan->items;
    atomic_init(&r.next, 0);
    int64_t slots = imin(plan->nslots, plan->items);
    if (parallel_for && slots > 1)
        parallel_for(pool, slots, run_slots, &r);
    else
        run_slots(&r, 0, 1);
    return S4D_OK;
}

/* ---- max pooling ---- */

typedef struct pool_ctx {
    const cc_ops *ops;
    cc_geom g;
    const float *x;
    float *y;
    int64_t rows_per_item, nrch;
} pool_ctx;

static void pool_items(void *arg, int64_t begin, int64_t end)
{
    const pool_ctx *c = arg;
    for (int64_t it = begin; it < end; it++) {
        const int64_t rc = it % c->nrch, plane = it / c->nrch;
        const int64_t oy0 = rc * c->rows_per_item, oy1 = imin(c->g.ho, oy0 + c->rows_per_item);
        c->ops->maxpool_rows(&c->g, c->x + plane * c->g.h * c->g.w, c->y + plane * c->g.ho * c->g.wo, oy0, oy1);
    }
}

s4d_status s4d_cpuconv_maxpool(const s4d_cpuconv_pool_params *params, const float *x, float *y,
                               s4d_cpuconv_parallel_for parallel_for, void *pool, s4d_errbuf *err)
{
    if (!params || !x || !y)
        return fail(err, S4D_ERR_INVALID_ARG, "cpuconv maxpool: %s is NULL", !params ? "params" : !x ? "x" : "y");
    if (params->struct_size < sizeof(s4d_cpuconv_pool_params))
        return fail(err, S4D_ERR_INVALID_ARG, "cpuconv maxpool: struct_size %u is below %zu", params->struct_size,
                    sizeof(s4d_cpuconv_pool_params));
    s4d_cpuconv_pool_params p = *params;
    p.stride_h = p.stride_h ? p.stride_h : 1;
    p.stride_w = p.stride_w ? p.stride_w : 1;
    p.dil_h = p.dil_h ? p.dil_h : 1;
    p.dil_w = p.dil_w ? p.dil_w : 1;
    if (p.n <= 0 || p.c <= 0 || p.h <= 0 || p.w <= 0 || p.kh <= 0 || p.kw <= 0 || p.stride_h <= 0 ||
        p.stride_w <= 0 || p.dil_h <= 0 || p.dil_w <= 0 || p.ho <= 0 || p.wo <= 0 || p.pad_top < 0 || p.pad_left < 0)
        return fail(err, S4D_ERR_INVALID_ARG,
                    "cpuconv maxpool: sizes must be positive and pads non-negative (n %lld, c %lld, %lldx%lld, "
                    "kernel %lldx%lld, output %lldx%lld)",
                    (long long)p.n, (long long)p.c, (long long)p.h, (long long)p.w, (long long)p.kh, (long long)p.kw,
                    (long long)p.ho, (long long)p.wo);
    const int64_t big = INT32_MAX / 2;
    if (p.h * p.w > big || p.ho * p.wo > big || p.stride_w > big || p.dil_w > 4096 || p.kw > 4096 ||
        p.pad_left > big || p.pad_top > big)
        return fail(err, S4D_ERR_UNSUPPORTED, "cpuconv maxpool: a size exceeds the 2^30 elements per plane supported");
    if (p.isa < S4D_CPUCONV_ISA_AUTO || p.isa > S4D_CPUCONV_ISA_AVX512)
        return fail(err, S4D_ERR_INVALID_ARG, "cpuconv maxpool: unknown instruction set %d", (int)p.isa);
    s4d_cpuconv_isa best = s4d_cpuconv_isa_best(), isa = p.isa == S4D_CPUCONV_ISA_AUTO ? best : p.isa;
    if (isa > best)
        return fail(err, S4D_ERR_UNSUPPORTED, "cpuconv maxpool: this CPU lacks the %s instructions asked for",
                    s4d_cpuconv_isa_name(isa));
    pool_ctx c = {ops_for(isa),
                  {p.h, p.w, p.ho, p.wo, p.kh, p.kw, p.stride_h, p.stride_w, p.pad_top, p.pad_left, p.dil_h, p.dil_w},
                  x, y, 0, 0};
    /* Items of at least a few thousand outputs, planes split into row chunks
     * when there are few of them. */
    const int64_t planes = p.n * p.c;
    c.rows_per_item = imax(1, imin(p.ho, cdiv(4096, p.wo)));
    c.nrch = cdiv(p.ho, c.rows_per_item);
    if (planes >= 64) {
        c.rows_per_item = p.ho;
        c.nrch = 1;
    }
    if (parallel_for)
        parallel_for(pool, planes * c.nrch, pool_items, &c);
    else
        pool_items(&c, 0, planes * c.nrch);
    return S4D_OK;
}
