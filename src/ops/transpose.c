/*
 * Transpose: any element type, any permutation up to S4D_MAX_RANK. Dims that
 * stay neighbours in the same order are merged first, so common layouts
 * (NCHW <-> NHWC, head splits in attention) reduce to 2-4 dims. A 2-D tile
 * pass handles the case where the innermost dim moves, which would otherwise
 * read memory with a large stride for every element.
 */
#include "ops/broadcast.h"
#include "ops/movement.h"

typedef struct tr_job {
    int rank;                     /* collapsed */
    int64_t odims[S4D_MAX_RANK];  /* output dims */
    int64_t ist[S4D_MAX_RANK];    /* input stride (elements) of each output dim */
    size_t es;
    const char *in;
    char *out;
    /* Tiled path: the output dim `ta` has input stride 1 and the last output dim stride `ist[rank-1]`. */
    int tiled;
    int ta;
} tr_job;

#define COPY_RUN(T)                                   \
    do {                                              \
        const T *s = (const T *)src;                  \
        T *d = (T *)dst;                              \
        for (int64_t i = 0; i < n; i++)               \
            d[i] = s[i * st];                         \
    } while (0)

static void strided_run(char *dst, const char *src, int64_t st, int64_t n, size_t es)
{
    switch (es) {
    case 1: COPY_RUN(uint8_t); return;
    case 2: COPY_RUN(uint16_t); return;
    case 4: COPY_RUN(uint32_t); return;
    case 8: COPY_RUN(uint64_t); return;
    default:
        for (int64_t i = 0; i < n; i++)
            memcpy(dst + (size_t)i * es, src + (size_t)(i * st) * es, es);
    }
}

/* Rows of the output: every dim but the last. */
static void tr_rows(void *vp, int64_t r0, int64_t r1)
{
    const tr_job *j = vp;
    int R = j->rank;
    int64_t inner = j->odims[R - 1], st = j->ist[R - 1];
    int64_t idx[S4D_MAX_RANK], off = 0, row = r0;
    for (int d = R - 2; d >= 0; d--) {
        idx[d] = row % j->odims[d];
        row /= j->odims[d];
        off += idx[d] * j->ist[d];
    }
    for (int64_t r = r0; r < r1; r++) {
        strided_run(j->out + (size_t)(r * inner) * j->es, j->in + (size_t)off * j->es, st, inner, j->es);
        for (int d = R - 2; d >= 0; d--) {
            idx[d]++;
            off += j->ist[d];
            if (idx[d] < j->odims[d])
                break;
            off -= idx[d] * j->ist[d];
            idx[d] = 0;
        }
    }
}

#define TILE 32

/*
 * Tiled: output dims (.., ta, .., last) where ta has input stride 1. Units are
 * (every output dim except ta and last) x (tiles of ta). Each TILE x TILE block
 * is read along ta (contiguous in the input) into a small buffer, then written
 * out row by row (contiguous in the output), so neither side touches more
 * than TILE cache lines at a time; large power-of-two strides would otherwise
 * make those lines evict each other.
 */
static void tr_tiles(void *vp, int64_t u0, int64_t u1)
{
    const tr_job *j = vp;
    int R = j->rank, ta = j->ta;
    int64_t inner = j->odims[R - 1], sl = j->ist[R - 1], na = j->odims[ta];
    int64_t ntile = (na + TILE - 1) / TILE;
    int64_t ostr[S4D_MAX_RANK];
    ostr[R - 1] = 1;
    for (int d = R - 2; d >= 0; d--)
        ostr[d] = ostr[d + 1] * j->odims[d + 1];
    size_t es = j->es;
    uint64_t buf[TILE * TILE]; /* the widest fast-path element is 8 bytes */
    for (int64_t u = u0; u < u1; u++) {
        int64_t t = u % ntile, rest = u / ntile, ioff = 0, ooff = 0;
        for (int d = R - 2; d >= 0; d--) {
            if (d == ta)
                continue;
            int64_t i = rest % j->odims[d];
            rest /= j->odims[d];
            ioff += i * j->ist[d];
            ooff += i * ostr[d];
        }
        int64_t a0 = t * TILE, m = na - a0 < TILE ? na - a0 : TILE, ds = ostr[ta];
        for (int64_t c0 = 0; c0 < inner; c0 += TILE) {
            int64_t w = inner - c0 < TILE ? inner - c0 : TILE;
            const char *src = j->in + (size_t)(ioff + c0 * sl + a0) * es;
            char *dst = j->out + (size_t)(ooff + a0 * ds + c0) * es;
            switch (es) {
            case 4: {
                uint32_t *b = (uint32_t *)buf;
                for (int64_t c = 0; c < w; c++)
                    for (int64_t a = 0; a < m; a++)
                        b[a * TILE + c] = ((const uint32_t *)src)[c * sl + a];
                for (int64_t a = 0; a < m; a++)
                    memcpy(dst + (size_t)(a * ds) * 4, b + a * TILE, (size_t)w * 4);
                break;
            }
            case 8: {
                for (int64_t c = 0; c < w; c++)
                    for (int64_t a = 0; a < m; a++)
                        buf[a * TILE + c] = ((const uint64_t *)src)[c * sl + a];
                for (int64_t a = 0; a < m; a++)
                    memcpy(dst + (size_t)(a * ds) * 8, buf + a * TILE, (size_t)w * 8);
                break;
            }
            default:
                for (int64_t c = 0; c < w; c++)
                    for (int64_t a = 0; a < m; a++)
                        memcpy(dst + (size_t)(a * ds + c) * es, src + (size_t)(c * sl + a) * es, es);
            }
        }
    }
}

static s4d_status read_perm(s4d_op_ctx *ctx, int rank, int *perm)
{
    const s4d_attr *a = s4d_op_attr(ctx, "perm");
    if (!a) {
        for (int d = 0; d < rank; d++)
            perm[d] = rank - 1 - d;
        return S4D_OK;
    }
    if (a->type != S4D_ATTR_INTS || (int64_t)a->count != rank)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "perm has %zu values, the input rank is %d", a->count, rank);
    int seen[S4D_MAX_RANK] = {0};
    for (int d = 0; d < rank; d++) {
        int64_t p = a->ints[d];
        if (p < 0)
            p += rank;
        if (p < 0 || p >= rank || seen[p])
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "perm is not a permutation of 0..%d", rank - 1);
        seen[p] = 1;
        perm[d] = (int)p;
    }
    return S4D_OK;
}

/* Fills p from the input's shape and the perm attribute. */
static s4d_status transpose_params(s4d_op_ctx *ctx, s4d_transpose_params *p)
{
    const s4d_tensor *in = &ctx->inputs[0];
    s4d_status st = read_perm(ctx, in->rank, p->perm);
    if (st != S4D_OK)
        return st;
    p->rank = in->rank;
    int64_t ist_full[S4D_MAX_RANK];
    int64_t s = 1;
    for (int d = in->rank - 1; d >= 0; d--) {
        ist_full[d] = s;
        s *= in->dims[d];
    }
    /* Drop size-1 dims, merge output neighbours that are input neighbours too. */
    int R = 0;
    for (int d = 0; d < in->rank; d++) {
        int64_t n = in->dims[p->perm[d]], is = ist_full[p->perm[d]];
        if (n == 1)
            continue;
        if (R > 0 && p->ist[R - 1] == is * n) {
            p->odims[R - 1] *= n;
            p->ist[R - 1] = is;
        } else {
            p->odims[R] = n;
            p->ist[R] = is;
            R++;
        }
    }
    if (R == 0) {
        p->odims[0] = 1;
        p->ist[0] = 1;
        R = 1;
    }
    p->crank = R;
    return S4D_OK;
}

static s4d_status infer_transpose(s4d_op_ctx *ctx)
{
    s4d_status st = s4d_check_arity(ctx, 1, 1, 1);
    if (st != S4D_OK)
        return st;
    const s4d_tensor *in = &ctx->inputs[0];
    if (s4d_dtype_size(in->dtype) == 0)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 0 (data) has unsupported dtype %s",
                            s4d_dtype_name(in->dtype));
    s4d_transpose_params local = {0}, *p = ctx->params ? ctx->params : &local;
    if ((st = transpose_params(ctx, p)) != S4D_OK)
        return st;
    int64_t dims[S4D_MAX_RANK];
    for (int d = 0; d < in->rank; d++)
        dims[d] = in->dims[p->perm[d]];
    s4d_set_out(ctx, 0, in->dtype, in->rank, dims);
    return S4D_OK;
}

static s4d_status run_transpose(s4d_op_ctx *ctx)
{
    const s4d_tensor *in = &ctx->inputs[0];
    s4d_tensor *out = &ctx->outputs[0];
    s4d_transpose_params local = {0};
    const s4d_transpose_params *p = ctx->params;
    if (!p) {
        s4d_status st = transpose_params(ctx, &local);
        if (st != S4D_OK)
            return st;
        p = &local;
    }
    int64_t total = s4d_tensor_numel(in);
    if (total == 0)
        return S4D_OK;
    tr_job j = {0};
    j.es = s4d_dtype_size(in->dtype);
    j.in = in->data;
    j.out = out->data;
    int R = p->crank;
    for (int d = 0; d < R; d++) {
        j.odims[d] = p->odims[d];
        j.ist[d] = p->ist[d];
    }
    j.rank = R;
    if (R == 1) { /* the permutation keeps the order: a plain copy */
        memcpy(out->data, in->data, (size_t)total * j.es);
        return S4D_OK;
    }
    if (j.ist[R - 1] != 1) {
        for (int d = 0; d < R - 1; d++)
            if (j.ist[d] == 1)
                j.ta = d;
        int64_t units = total / (j.odims[R - 1] * j.odims[j.ta]) * ((j.odims[j.ta] + TILE - 1) / TILE);
        j.tiled = 1;
        s4d_parallel_for(ctx->pool, units, 1 + 4096 / (TILE * j.odims[R - 1]), tr_tiles, &j);
        return S4D_OK;
    }
    int64_t rows = total / j.odims[R - 1];
    s4d_parallel_for(ctx->pool, rows, 1 + 16384 / j.odims[R - 1], tr_rows, &j);
    return S4D_OK;
}

static const s4d_attr_spec transpose_attrs[] = {{"perm", S4D_ATTR_INTS}, {NULL}};
const s4d_op_schema s4d_op_transpose = {"", "Transpose", 1, infer_transpose, NULL, run_transpose,
                                        sizeof(s4d_transpose_params), 0, transpose_attrs};
