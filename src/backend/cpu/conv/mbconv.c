/*
 * The inverted residual block (mbconv.h): planning, packing, and the run,
 * fused on AVX-512 (mbconv_avx512.c), otherwise three library convolutions
 * with the expanded tensors in the workspace.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/conv/cpuconv_impl.h"
#include "backend/cpu/conv/mbconv.h"

#define MBC_MAGIC 0x43424d53u /* "SMBC" */
#define MBC_VERSION 1u
#define MBC_HEADER 64 /* bytes before the packed floats */
#define MBC_ALIGN 64
#define MBC_GROUP_PIX 64 /* output pixels a row group aims at */
#define MBC_WHOLE_PIX 256              /* output maps up to 16x16 run whole on several slots */
#define MBC_WHOLE_MAP_FLOATS (1 << 19) /* and expanded maps up to 2 MiB */

typedef struct mbc_header {
    uint32_t magic, version, fused, reserved;
    int64_t c, mid, m, k, floats;
} mbc_header;

struct s4d_mbconv_plan {
    s4d_mbconv_params p;
    int fused;
    s4d_cpuconv_isa isa;
    int64_t ho, wo;
    size_t packed_bytes, ws_bytes;
    double macs;
    /* fused */
    cc_mbc g;
    int64_t chunks, items;
    size_t slot_bytes;
    int nslots;
    int whole;                   /* whole-map mode (several slots, small maps) */
    size_t map_bytes, dout_bytes;
    int64_t panels, pchunks;     /* phase 1 items; pixel ranges per output panel in phase 2 */
    /* three convolutions */
    s4d_cpuconv_plan *pe, *pd, *pp;
    size_t pk_e, pk_d, pk_p;     /* packed sizes, in this order after the header */
    size_t e_bytes, d_bytes;     /* the intermediates, at the start of the workspace */
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

static int64_t cdiv(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

static size_t align_up(size_t v)
{
    return (v + MBC_ALIGN - 1) / MBC_ALIGN * MBC_ALIGN;
}

/* The epilogue's two parameters as the kernels take them (see check_params in cpuconv.c). */
static cc_post post_of(const s4d_mbconv_act *a)
{
    cc_post q = {(int)a->act, a->act_min, a->act_max};
    if (a->act == S4D_CPUCONV_ACT_LEAKY_RELU || a->act == S4D_CPUCONV_ACT_HARD_SIGMOID) {
        q.lo = a->act_alpha;
        q.hi = a->act_beta;
    }
    return q;
}

static void conv_params(const s4d_mbconv_params *p, s4d_cpuconv_params *cp, int64_t c, int64_t h, int64_t w,
                        int64_t m, const s4d_mbconv_act *a, int has_bias)
{
    memset(cp, 0, sizeof *cp);
    cp->struct_size = sizeof *cp;
    cp->n = p->n;
    cp->c = c;
    cp->h = h;
    cp->w = w;
    cp->m = m;
    cp->kh = cp->kw = 1;
    cp->has_bias = has_bias;
    cp->act = a->act;
    cp->act_min = a->act_min;
    cp->act_max = a->act_max;
    cp->act_alpha = a->act_alpha;
    cp->act_beta = a->act_beta;
    cp->isa = p->isa;
    cp->num_threads = p->num_threads;
}

/* The three library plans (also validates every field the fused pass relies on). */
static s4d_status plan_layers(s4d_mbconv_plan *pl, s4d_errbuf *err)
{
    const s4d_mbconv_params *p = &pl->p;
    s4d_cpuconv_params cp;
    s4d_status st;
    if (p->has_expand) {
        conv_params(p, &cp, p->c, p->h, p->w, p->mid, &p->act1, p->has_b1);
        if ((st = s4d_cpuconv_plan_create(&cp, &pl->pe, err)) != S4D_OK)
            return st;
    }
    conv_params(p, &cp, p->mid, p->h, p->w, p->mid, &p->act2, p->has_b2);
    cp.kh = cp.kw = p->k;
    cp.stride_h = cp.stride_w = p->stride;
    cp.pad_top = p->pad_top;
    cp.pad_left = p->pad_left;
    cp.pad_bottom = p->pad_bottom;
    cp.pad_right = p->pad_right;
    cp.group = p->mid;
    if ((st = s4d_cpuconv_plan_create(&cp, &pl->pd, err)) != S4D_OK)
        return st;
    s4d_cpuconv_info di;
    s4d_cpuconv_plan_info(pl->pd, &di);
    pl->ho = di.ho;
    pl->wo = di.wo;
    conv_params(p, &cp, p->mid, pl->ho, pl->wo, p->m, &p->act3, p->has_b3);
    cp.has_residual = p->has_residual;
    if ((st = s4d_cpuconv_plan_create(&cp, &pl->pp, err)) != S4D_OK)
        return st;
    s4d_cpuconv_info ie = {0}, ip;
    if (pl->pe)
        s4d_cpuconv_plan_info(pl->pe, &ie);
    s4d_cpuconv_plan_info(pl->pp, &ip);
    pl->pk_e = ie.packed_bytes;
    pl->pk_d = di.packed_bytes;
    pl->pk_p = ip.packed_bytes;
    pl->e_bytes = p->has_expand ? align_up(sizeof(float) * (size_t)(p->n * p->mid * p->h * p->w)) : 0;
    pl->d_bytes = align_up(sizeof(float) * (size_t)(p->n * p->mid * pl->ho * pl->wo));
    size_t conv_ws = ie.workspace_bytes;
    if (di.workspace_bytes > conv_ws)
        conv_ws = di.workspace_bytes;
    if (ip.workspace_bytes > conv_ws)
        conv_ws = ip.workspace_bytes;
    pl->ws_bytes = pl->e_bytes + pl->d_bytes + conv_ws + MBC_ALIGN;
    pl->packed_bytes = MBC_HEADER + pl->pk_e + pl->pk_d + pl->pk_p;
    pl->macs = (double)p->n * ((p->has_expand ? (double)p->c * (double)p->mid * (double)(p->h * p->w) : 0.0) +
                               (double)p->mid * (double)(p->k * p->k) * (double)(pl->ho * pl->wo) +
                               (double)p->mid * (double)p->m * (double)(pl->ho * pl->wo));
    return S4D_OK;
}

/* The fused pass's geometry; 0 when it does not cover the shape. */
static int plan_fused(s4d_mbconv_plan *pl)
{
    const s4d_mbconv_params *p = &pl->p;
    if (pl->isa != S4D_CPUCONV_ISA_AVX512)
        return 0;
    if (!(p->k == 3 || p->k == 5 || p->k == 7) || !(p->stride == 1 || p->stride == 2))
        return 0;
    cc_mbc *g = &pl->g;
    memset(g, 0, sizeof *g);
    g->c = p->c;
    g->h = p->h;
    g->w = p->w;
    g->mid = p->mid;
    g->m = p->m;
    g->k = p->k;
    g->s = p->stride;
    g->pt = p->pad_top;
    g->pl = p->pad_left;
    g->ho = pl->ho;
    g->wo = pl->wo;
    g->has_expand = p->has_expand;
    g->cb = cdiv(p->mid, 16);
    g->cpad = g->cb * 16;
    /* every column a tap reads: (wo - 1) * s + k, and the image with its left padding */
    g->wp = (pl->wo - 1) * p->stride + p->k;
    if (g->wp < p->pad_left + p->w)
        g->wp = p->pad_left + p->w;
    g->grp = cdiv(MBC_GROUP_PIX, pl->wo);
    if (g->grp > pl->ho)
        g->grp = pl->ho;
    /* with several slots, at least two groups each (a 7x7 map is one group otherwise), at
     * the price of the expanded rows neighbouring chunks both compute */
    if (pl->nslots > 1 && g->grp > cdiv(pl->ho, 2 * (int64_t)pl->nslots))
        g->grp = cdiv(pl->ho, 2 * (int64_t)pl->nslots);
    while (g->grp > 1 && (g->grp - 1) * p->stride + p->k > CC_MBC_RING_MAX)
        g->grp--;
    g->ring = (g->grp - 1) * p->stride + p->k;
    g->nmp1 = cdiv(p->mid, CC_TN);
    g->nmp3 = cdiv(p->m, CC_TN);
    g->post1 = post_of(&p->act1);
    g->post2 = post_of(&p->act2);
    g->post3 = post_of(&p->act3);
    const int64_t groups = cdiv(pl->ho, g->grp);
    pl->chunks = pl->nslots > 1 ? (groups < pl->nslots ? groups : pl->nslots) : 1;
    pl->items = p->n * pl->chunks;
    pl->slot_bytes = align_up(sizeof(float) * (size_t)cc_mbc_slot_layout(g).total);
    pl->ws_bytes = (size_t)pl->nslots * pl->slot_bytes + MBC_ALIGN;
    /* Several slots on a small map: row groups would be one or two per slot, each computing the
     * expanded rows it shares with its neighbours; the whole map in two phases splits the
     * expanded channels instead. */
    if (pl->nslots > 1 && pl->ho * pl->wo <= MBC_WHOLE_PIX && cc_mbc_map_floats(g) <= MBC_WHOLE_MAP_FLOATS) {
        pl->whole = 1;
        pl->panels = cdiv(g->cb, 3);
        pl->pchunks = cdiv(2 * (int64_t)pl->nslots, g->nmp3);
        if (pl->pchunks > cdiv(pl->ho * pl->wo, CC_TR_MAX))
            pl->pchunks = cdiv(pl->ho * pl->wo, CC_TR_MAX);
        pl->map_bytes = align_up(sizeof(float) * (size_t)cc_mbc_map_floats(g));
        pl->dout_bytes = align_up(sizeof(float) * (size_t)(pl->ho * pl->wo * g->cpad));
        pl->slot_bytes = align_up(sizeof(float) * (size_t)cc_mbc_whole_slot_floats(g));
        pl->ws_bytes = pl->map_bytes + pl->dout_bytes + (size_t)pl->nslots * pl->slot_bytes + MBC_ALIGN;
    }
    pl->packed_bytes = MBC_HEADER + sizeof(float) * (size_t)((p->has_expand ? g->nmp1 * p->c * CC_TN : 0) +
                                                             g->cb * p->k * p->k * 16 + g->nmp3 * p->mid * CC_TN);
    return 1;
}

static s4d_status check(const s4d_mbconv_params *in, s4d_mbconv_params *p, s4d_errbuf *err)
{
    if (in->struct_size < sizeof(s4d_mbconv_params))
        return fail(err, S4D_ERR_INVALID_ARG, "mbconv params: struct_size %u is below %zu", in->struct_size,
                    sizeof(s4d_mbconv_params));
    *p = *in;
    if (p->num_threads <= 0)
        p->num_threads = 1;
    if (!p->has_expand && p->mid != p->c)
        return fail(err, S4D_ERR_SHAPE, "mbconv params: without an expand, mid = %lld must equal c = %lld",
                    (long long)p->mid, (long long)p->c);
    if (p->k < 1 || p->k > CC_DWR_MAX_K)
        return fail(err, S4D_ERR_UNSUPPORTED, "mbconv params: depthwise kernel %lld, 1 to %d supported",
                    (long long)p->k, CC_DWR_MAX_K);
    if (p->stride != 1 && p->stride != 2)
        return fail(err, S4D_ERR_UNSUPPORTED, "mbconv params: depthwise stride %lld, 1 or 2 supported",
                    (long long)p->stride);
    const int64_t pads[4] = {p->pad_top, p->pad_left, p->pad_bottom, p->pad_right};
    for (int i = 0; i < 4; i++)
        if (pads[i] < 0 || pads[i] >= p->k)
            return fail(err, S4D_ERR_UNSUPPORTED, "mbconv params: depthwise padding %lld outside [0, %lld)",
                        (long long)pads[i], (long long)p->k);
    return S4D_OK;
}

s4d_status s4d_mbconv_plan_create(const s4d_mbconv_params *params, s4d_mbconv_plan **out, s4d_errbuf *err)
{
    if (!out)
        return fail(err, S4D_ERR_INVALID_ARG, "mbconv plan: out is NULL");
    *out = NULL;
    if (!params)
        return fail(err, S4D_ERR_INVALID_ARG, "mbconv plan: params is NULL");
    s4d_mbconv_plan *pl = calloc(1, sizeof *pl);
    if (!pl)
        return fail(err, S4D_ERR_NO_MEMORY, "mbconv plan: out of memory");
    s4d_status st = check(params, &pl->p, err);
    if (st == S4D_OK)
        st = plan_layers(pl, err);
    if (st != S4D_OK) {
        s4d_mbconv_plan_destroy(pl);
        return st;
    }
    pl->nslots = pl->p.num_threads;
    pl->isa = pl->p.isa == S4D_CPUCONV_ISA_AUTO ? s4d_cpuconv_isa_best() : pl->p.isa;
    pl->fused = plan_fused(pl);
    *out = pl;
    return S4D_OK;
}

void s4d_mbconv_plan_destroy(s4d_mbconv_plan *plan)
{
    if (!plan)
        return;
    s4d_cpuconv_plan_destroy(plan->pe);
    s4d_cpuconv_plan_destroy(plan->pd);
    s4d_cpuconv_plan_destroy(plan->pp);
    free(plan);
}

void s4d_mbconv_plan_info(const s4d_mbconv_plan *plan, s4d_mbconv_info *info)
{
    memset(info, 0, sizeof *info);
    info->fused = plan->fused;
    info->isa = plan->isa;
    info->ho = plan->ho;
    info->wo = plan->wo;
    info->workspace_bytes = plan->ws_bytes;
    info->packed_bytes = plan->packed_bytes;
    info->macs = plan->macs;
}

int s4d_mbconv_plan_describe(const s4d_mbconv_plan *plan, char *buf, size_t size)
{
    const s4d_mbconv_params *p = &plan->p;
    if (plan->fused && plan->whole)
        return snprintf(buf, size,
                        "mbconv fused %s: %lld->%lld->%lld, dw %lldx%lld/%lld, whole map in two phases on %d slots",
                        s4d_cpuconv_isa_name(plan->isa), (long long)p->c, (long long)p->mid, (long long)p->m,
                        (long long)p->k, (long long)p->k, (long long)p->stride, plan->nslots);
    if (plan->fused)
        return snprintf(buf, size,
                        "mbconv fused %s: %lld->%lld->%lld, dw %lldx%lld/%lld, rows in groups of %lld, ring %lld",
                        s4d_cpuconv_isa_name(plan->isa), (long long)p->c, (long long)p->mid, (long long)p->m,
                        (long long)p->k, (long long)p->k, (long long)p->stride, (long long)plan->g.grp,
                        (long long)plan->g.ring);
    return snprintf(buf, size, "mbconv as three convolutions (%s): %lld->%lld->%lld, dw %lldx%lld/%lld",
                    s4d_cpuconv_isa_name(plan->isa), (long long)p->c, (long long)p->mid, (long long)p->m,
                    (long long)p->k, (long long)p->k, (long long)p->stride);
}

s4d_status s4d_mbconv_pack_weights(const s4d_mbconv_plan *plan, const float *w1, const float *w2,
                                   const float *w3, void *packed, size_t packed_bytes, s4d_errbuf *err)
{
    if (!plan || !w2 || !w3 || !packed || (plan->p.has_expand && !w1))
        return fail(err, S4D_ERR_INVALID_ARG, "mbconv pack: %s is NULL",
                    !plan ? "plan" : !w2 ? "w2" : !w3 ? "w3" : !packed ? "packed" : "w1");
    if (packed_bytes < plan->packed_bytes)
        return fail(err, S4D_ERR_INVALID_ARG, "mbconv pack: %zu bytes given, %zu needed", packed_bytes,
                    plan->packed_bytes);
    const s4d_mbconv_params *p = &plan->p;
    mbc_header h;
    memset(&h, 0, sizeof h);
    h.magic = MBC_MAGIC;
    h.version = MBC_VERSION;
    h.fused = (uint32_t)plan->fused;
    h.c = p->c;
    h.mid = p->mid;
    h.m = p->m;
    h.k = p->k;
    h.floats = (int64_t)((plan->packed_bytes - MBC_HEADER) / sizeof(float));
    memset(packed, 0, MBC_HEADER);
    memcpy(packed, &h, sizeof h);
    char *dst = (char *)packed + MBC_HEADER;
    if (!plan->fused) {
        s4d_status st = S4D_OK;
        if (plan->pe)
            st = s4d_cpuconv_pack_weights(plan->pe, w1, dst, plan->pk_e, err);
        if (st == S4D_OK)
            st = s4d_cpuconv_pack_weights(plan->pd, w2, dst + plan->pk_e, plan->pk_d, err);
        if (st == S4D_OK)
            st = s4d_cpuconv_pack_weights(plan->pp, w3, dst + plan->pk_e + plan->pk_d, plan->pk_p, err);
        return st;
    }
    const cc_mbc *g = &plan->g;
    float *f = (float *)dst;
    if (p->has_expand)
        f = cc_pack_tn(w1, p->mid, p->c, f);
    const int64_t kk = p->k * p->k;
    for (int64_t cb = 0; cb < g->cb; cb++) /* [block][tap][16] */
        for (int64_t t = 0; t < kk; t++)
            for (int j = 0; j < 16; j++) {
                const int64_t ch = cb * 16 + j;
                *f++ = ch < p->mid ? w2[ch * kk + t] : 0.0f;
            }
    cc_pack_tn(w3, p->m, p->mid, f);
    return S4D_OK;
}

typedef struct mbc_run {
    const s4d_mbconv_plan *pl;
    cc_mbc g;
    const float *x, *b1, *b2, *b3, *z;
    float *y;
    char *ws;
    atomic_llong next;
    int phase;      /* whole-map mode: 1 or 2 */
    int64_t image;  /* whole-map mode: the image of this phase */
} mbc_run;

/* Whole-map mode: the items of one phase of one image. */
static void whole_slots(void *arg, int64_t begin, int64_t end)
{
    mbc_run *r = arg;
    const s4d_mbconv_plan *pl = r->pl;
    const s4d_mbconv_params *p = &pl->p;
    const int64_t pix = pl->ho * pl->wo, n = r->image;
    float *map = (float *)(void *)r->ws, *dout = (float *)(void *)(r->ws + pl->map_bytes);
    const int64_t items = r->phase == 1 ? pl->panels : r->g.nmp3 * pl->pchunks;
    for (int64_t s = begin; s < end; s++) {
        float *slot = (float *)(void *)(r->ws + pl->map_bytes + pl->dout_bytes + (size_t)s * pl->slot_bytes);
        for (;;) {
            const int64_t item = atomic_fetch_add(&r->next, 1);
            if (item >= items)
                break;
            if (r->phase == 1) {
                s4d_cc_mbc_panel_avx512(&r->g, r->x + n * p->c * p->h * p->w, r->b1, r->b2, item, map, dout, slot);
                continue;
            }
            const int64_t mp = item / pl->pchunks, ch = item % pl->pchunks;
            const int64_t p0 = ch * pix / pl->pchunks, p1 = (ch + 1) * pix / pl->pchunks;
            s4d_cc_mbc_project_avx512(&r->g, dout + p0 * r->g.cpad, r->b3, r->z ? r->z + n * p->m * pix : NULL,
                                      r->y + n * p->m * pix, mp, p0, p1 - p0, slot);
        }
    }
}

static void run_slots(void *arg, int64_t begin, int64_t end)
{
    mbc_run *r = arg;
    const s4d_mbconv_plan *pl = r->pl;
    const s4d_mbconv_params *p = &pl->p;
    const int64_t groups = cdiv(pl->ho, r->g.grp), in_img = p->c * p->h * p->w;
    const int64_t out_img = p->m * pl->ho * pl->wo;
    for (int64_t s = begin; s < end; s++) {
        float *slot = (float *)(void *)(r->ws + (size_t)s * pl->slot_bytes);
        for (;;) {
            const int64_t item = atomic_fetch_add(&r->next, 1);
            if (item >= pl->items)
                break;
            const int64_t n = item / pl->chunks, ch = item % pl->chunks;
            const int64_t g0 = ch * groups / pl->chunks, g1 = (ch + 1) * groups / pl->chunks;
            s4d_cc_mbc_groups_avx512(&r->g, r->x + n * in_img, r->b1, r->b2, r->b3,
                                     r->z ? r->z + n * out_img : NULL, r->y + n * out_img, g0, g1, slot);
        }
    }
}

s4d_status s4d_mbconv_run(const s4d_mbconv_plan *plan, const void *packed, const float *x,
                          const float *b1, const float *b2, const float *b3, const float *z, float *y,
                          void *workspace, size_t workspace_bytes,
                          s4d_cpuconv_parallel_for parallel_for, void *pool, s4d_errbuf *err)
{
    if (!plan || !packed || !x || !y)
        return fail(err, S4D_ERR_INVALID_ARG, "mbconv run: %s is NULL",
                    !plan ? "plan" : !packed ? "packed" : !x ? "x" : "y");
    const s4d_mbconv_params *p = &plan->p;
    if ((p->has_expand && p->has_b1 && !b1) || (p->has_b2 && !b2) || (p->has_b3 && !b3) ||
        (p->has_residual && !z))
        return fail(err, S4D_ERR_INVALID_ARG, "mbconv run: a bias or the residual the plan has is NULL");
    if (workspace_bytes < plan->ws_bytes || (plan->ws_bytes && !workspace))
        return fail(err, S4D_ERR_INVALID_ARG, "mbconv run: workspace of %zu bytes, %zu needed",
                    workspace ? workspace_bytes : 0, plan->ws_bytes);
    mbc_header h;
    memcpy(&h, packed, sizeof h);
    if (h.magic != MBC_MAGIC || h.version != MBC_VERSION || h.fused != (uint32_t)plan->fused || h.c != p->c ||
        h.mid != p->mid || h.m != p->m || h.k != p->k ||
        h.floats != (int64_t)((plan->packed_bytes - MBC_HEADER) / sizeof(float)))
        return fail(err, S4D_ERR_INVALID_ARG, "mbconv run: the packed weights were not made for this plan");
    const char *w = (const char *)packed + MBC_HEADER;
    char *ws = (char *)(((uintptr_t)workspace + MBC_ALIGN - 1) / MBC_ALIGN * MBC_ALIGN);
    b1 = p->has_expand && p->has_b1 ? b1 : NULL;
    b2 = p->has_b2 ? b2 : NULL;
    b3 = p->has_b3 ? b3 : NULL;
    z = p->has_residual ? z : NULL;
    if (!plan->fused) {
        float *e = (float *)(void *)ws, *d = (float *)(void *)(ws + plan->e_bytes);
        char *cws = ws + plan->e_bytes + plan->d_bytes;
        const size_t cbytes = plan->ws_bytes - plan->e_bytes - plan->d_bytes - MBC_ALIGN;
        s4d_status st = S4D_OK;
        if (plan->pe)
            st = s4d_cpuconv_run(plan->pe, w, x, b1, NULL, e, cws, cbytes, parallel_for, pool, err);
        if (st == S4D_OK)
            st = s4d_cpuconv_run(plan->pd, w + plan->pk_e, plan->pe ? e : x, b2, NULL, d, cws, cbytes,
                                 parallel_for, pool, err);
        if (st == S4D_OK)
            st = s4d_cpuconv_run(plan->pp, w + plan->pk_e + plan->pk_d, d, b3, z, y, cws, cbytes, parallel_for,
                                 pool, err);
        return st;
    }
    mbc_run r;
    r.pl = plan;
    r.g = plan->g;
    const float *f = (const float *)(const void *)w;
    r.g.w1 = p->has_expand ? f : NULL;
    r.g.w2 = f + (p->has_expand ? r.g.nmp1 * p->c * CC_TN : 0);
    r.g.w3 = r.g.w2 + r.g.cb * p->k * p->k * 16;
    r.x = x;
    r.b1 = b1;
    r.b2 = b2;
    r.b3 = b3;
    r.z = z;
    r.y = y;
    r.ws = ws;
    if (plan->whole) {
        for (int64_t n = 0; n < p->n; n++)
            for (int phase = 1; phase <= 2; phase++) {
                r.phase = phase;
                r.image = n;
                atomic_init(&r.next, 0);
                const int64_t items = phase == 1 ? plan->panels : r.g.nmp3 * plan->pchunks;
                const int64_t slots = plan->nslots < items ? plan->nslots : items;
                if (parallel_for && slots > 1)
                    parallel_for(pool, slots, whole_slots, &r);
                else
                    whole_slots(&r, 0, 1);
            }
        return S4D_OK;
    }
    atomic_init(&r.next, 0);
    const int64_t slots = plan->nslots < plan->items ? plan->nslots : plan->items;
    if (parallel_for && slots > 1)
        parallel_for(pool, slots, run_slots, &r);
    else
        run_slots(&r, 0, 1);
    return S4D_OK;
}
