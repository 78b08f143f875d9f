/*
 * Einsum (opset 12), float32 or float64, one or two operands without ellipsis or
 * repeated letters within a term (the forms attention exports use, such as
 * "bhqd,bhkd->bhqk" and "bhqk,bhkd->bhqd"). Two operands become one batched
 * product: letters in both inputs and the output are batch dims, in both
 * inputs only are contracted, in one input and the output are that side's
 * rows or columns, in one input only are summed away first. Operands whose
 * memory order already fits (possibly transposed) are used in place; others
 * are permuted into the workspace.
 */
#include <string.h>

#include "ops/dense.h"
#include "ops/dense_util.h"

#define MAX_LETTERS S4D_EINSUM_LETTERS

typedef s4d_einsum_term term; /* letter ids 0..51 */
typedef s4d_einsum_params es_plan;

static int letter_id(char ch)
{
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a';
    if (ch >= 'A' && ch <= 'Z')
        return 26 + ch - 'A';
    return -1;
}

static s4d_status parse_term(s4d_op_ctx *ctx, const char **s, term *t)
{
    t->n = 0;
    for (; **s && **s != ',' && **s != '-'; (*s)++) {
        char ch = **s;
        if (ch == ' ')
            continue;
        if (ch == '.')
            return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "ellipsis in the equation is not supported");
        int id = letter_id(ch);
        if (id < 0)
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "character '%c' in the equation is not a letter", ch);
        for (int i = 0; i < t->n; i++)
            if (t->l[i] == id)
                return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "repeated letter '%c' in one term (diagonal) is not supported",
                                    ch);
        if (t->n == S4D_MAX_RANK)
            return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "a term has more than %d letters", S4D_MAX_RANK);
        t->l[t->n++] = id;
    }
    return S4D_OK;
}

static int term_has(const term *t, int id)
{
    for (int i = 0; i < t->n; i++)
        if (t->l[i] == id)
            return 1;
    return 0;
}

/* Whether the term reads exactly as the concatenation of the given groups. */
static int order_is(const term *t, const int *g1, int n1, const int *g2, int n2, const int *g3, int n3)
{
    if (t->n != n1 + n2 + n3)
        return 0;
    int p = 0;
    for (int i = 0; i < n1; i++)
        if (t->l[p++] != g1[i])
            return 0;
    for (int i = 0; i < n2; i++)
        if (t->l[p++] != g2[i])
            return 0;
    for (int i = 0; i < n3; i++)
        if (t->l[p++] != g3[i])
            return 0;
    return 1;
}

static s4d_status es_plan_make(s4d_op_ctx *ctx, es_plan *p)
{
    memset(p, 0, sizeof *p);
    const s4d_attr *eq = s4d_op_attr(ctx, "equation");
    if (!eq || eq->type != S4D_ATTR_STRING)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "the equation attribute is missing");
    if (ctx->num_inputs < 1 || ctx->num_inputs > 2 || ctx->num_outputs != 1)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "%d operands (1 or 2 supported)", ctx->num_inputs);
    const char *s = eq->s;
    s4d_status st;
    int nterms = 0;
    for (;;) {
        if (nterms == 2)
            return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "more than 2 operands in '%s'", eq->s);
        if ((st = parse_term(ctx, &s, &p->in[nterms++])) != S4D_OK)
            return st;
        if (*s == ',') {
            s++;
            continue;
        }
        break;
    }
    if (nterms != ctx->num_inputs)
        return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "equation '%s' names %d operands, the node has %d", eq->s,
                            nterms, ctx->num_inputs);
    p->nops = nterms;
    for (int i = 0; i < MAX_LETTERS; i++)
        p->size[i] = -1;
    p->f64 = ctx->inputs[0].dtype == S4D_DTYPE_FLOAT64;
    for (int o = 0; o < nterms; o++) {
        const s4d_tensor *t = &ctx->inputs[o];
        if (t->dtype != S4D_DTYPE_FLOAT32 && t->dtype != S4D_DTYPE_FLOAT64)
            return s4d_op_error(ctx, S4D_ERR_DTYPE, "input %d is %s (float32, float64 supported)", o,
                                s4d_dtype_name(t->dtype));
        if (t->dtype != ctx->inputs[0].dtype)
            return s4d_op_error(ctx, S4D_ERR_DTYPE, "inputs differ in dtype");
        if (t->rank != p->in[o].n)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "input %d has rank %d, its term %d letters", o, t->rank,
                                p->in[o].n);
        for (int i = 0; i < t->rank; i++) {
            int id = p->in[o].l[i];
            if (p->size[id] >= 0 && p->size[id] != t->dims[i])
                return s4d_op_error(ctx, S4D_ERR_SHAPE, "letter %d has sizes %lld and %lld", id,
                                    (long long)p->size[id], (long long)t->dims[i]);
            p->size[id] = t->dims[i];
        }
    }
    if (s[0] == '-') {
        if (s[1] != '>')
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "malformed equation '%s'", eq->s);
        s += 2;
        if ((st = parse_term(ctx, &s, &p->out)) != S4D_OK)
            return st;
        if (*s)
            return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "malformed equation '%s'", eq->s);
        for (int i = 0; i < p->out.n; i++)
            if (p->size[p->out.l[i]] < 0)
                return s4d_op_error(ctx, S4D_ERR_INVALID_ARG, "output letter %d appears in no input", p->out.l[i]);
    } else {
        /* Implicit output: letters seen exactly once, alphabetical (upper case first, as numpy). */
        p->out.n = 0;
        for (int pass = 0; pass < 2; pass++)
            for (int id0 = 0; id0 < 26; id0++) {
                int id = pass == 0 ? 26 + id0 : id0;
                int cnt = 0;
                for (int o = 0; o < nterms; o++)
                    cnt += term_has(&p->in[o], id);
                if (cnt == 1)
                    p->out.l[p->out.n++] = id;
            }
    }
    if (nterms == 1)
        return S4D_OK;

    const term *ta = &p->in[0], *tb = &p->in[1], *to = &p->out;
    p->B = p->M = p->N = p->K = 1;
    for (int i = 0; i < to->n; i++) {
        int id = to->l[i], a = term_has(ta, id), b = term_has(tb, id);
        if (a && b) {
            p->bl[p->nb++] = id;
            p->B *= p->size[id];
        } else if (a) {
            p->ml[p->nm++] = id;
            p->M *= p->size[id];
        } else {
            p->nl[p->nn++] = id;
            p->N *= p->size[id];
        }
    }
    for (int i = 0; i < ta->n; i++) {
        int id = ta->l[i];
        if (term_has(tb, id) && !term_has(to, id)) {
            p->kl[p->nk++] = id;
            p->K *= p->size[id];
        }
    }
    if (p->M > S4D_HOST_BLAS_MAX_DIM || p->N > S4D_HOST_BLAS_MAX_DIM || p->K > S4D_HOST_BLAS_MAX_DIM)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "a product dimension exceeds 2^31-1");
    /* Use operands in place when their order is [batch, rows, k] or [batch, k, rows]. */
    if (order_is(ta, p->bl, p->nb, p->ml, p->nm, p->kl, p->nk))
        p->ta = 0;
    else if (order_is(ta, p->bl, p->nb, p->kl, p->nk, p->ml, p->nm))
        p->ta = 1;
    else
        p->a_copy = 1;
    if (order_is(tb, p->bl, p->nb, p->kl, p->nk, p->nl, p->nn))
        p->tb = 0;
    else if (order_is(tb, p->bl, p->nb, p->nl, p->nn, p->kl, p->nk))
        p->tb = 1;
    else
        p->b_copy = 1;
    p->c_copy = !order_is(to, p->bl, p->nb, p->ml, p->nm, p->nl, p->nn);
    return S4D_OK;
}

/* The params infer made, or (white-box callers without params) a fresh parse. */
static s4d_status es_plan_get(const s4d_op_ctx *ctx, es_plan *p)
{
    if (ctx->params) {
        *p = *(const es_plan *)ctx->params;
        return S4D_OK;
    }
    return es_plan_make((s4d_op_ctx *)ctx, p);
}

static s4d_status es_infer(s4d_op_ctx *ctx)
{
    es_plan p;
    s4d_status st = es_plan_make(ctx, &p);
    if (st != S4D_OK)
        return st;
    if (ctx->params)
        *(es_plan *)ctx->params = p;
    s4d_tensor *y = &ctx->outputs[0];
    y->dtype = ctx->inputs[0].dtype;
    y->rank = p.out.n;
    for (int i = 0; i < p.out.n; i++)
        y->dims[i] = p.size[p.out.l[i]];
    return S4D_OK;
}

static size_t es_ws(const s4d_op_ctx *ctx)
{
    es_plan p;
    if (es_plan_get(ctx, &p) != S4D_OK || p.nops == 1)
        return 0;
    size_t f = 0;
    if (p.a_copy)
        f += (size_t)(p.B * p.M * p.K) + 16;
    if (p.b_copy)
        f += (size_t)(p.B * p.K * p.N) + 16;
    if (p.c_copy)
        f += (size_t)(p.B * p.M * p.N);
    return f * (p.f64 ? sizeof(double) : sizeof(float));
}

/*
 * dst[keep letters, in order] = sum over the src term's other letters of src.
 * keep letters must all be in the src term.
 */
static void permute_reduce(const es_plan *p, const term *st, const void *src, const int *keep, int nkeep, void *dst)
{
    int64_t sstride[S4D_MAX_RANK], s = 1;
    for (int i = st->n - 1; i >= 0; i--) {
        sstride[i] = s;
        s *= p->size[st->l[i]];
    }
    int64_t kst[S4D_MAX_RANK], kdim[S4D_MAX_RANK], rst[S4D_MAX_RANK], rdim[S4D_MAX_RANK];
    int nr = 0;
    int64_t nkeep_el = 1, nred = 1;
    for (int i = 0; i < nkeep; i++)
        for (int j = 0; j < st->n; j++)
            if (st->l[j] == keep[i]) {
                kst[i] = sstride[j];
                kdim[i] = p->size[keep[i]];
                nkeep_el *= kdim[i];
            }
    for (int j = 0; j < st->n; j++) {
        int kept = 0;
        for (int i = 0; i < nkeep; i++)
            kept |= st->l[j] == keep[i];
        if (!kept) {
            rst[nr] = sstride[j];
            rdim[nr++] = p->size[st->l[j]];
            nred *= p->size[st->l[j]];
        }
    }
    for (int64_t o = 0; o < nkeep_el; o++) {
        int64_t base = 0, r = o;
        for (int i = nkeep - 1; i >= 0; i--) {
            base += (r % kdim[i]) * kst[i];
            r /= kdim[i];
        }
        double acc = 0.0;
        for (int64_t q = 0; q < nred; q++) {
            int64_t off = base, rr = q;
            for (int i = nr - 1; i >= 0; i--) {
                off += (rr % rdim[i]) * rst[i];
                rr /= rdim[i];
            }
            acc += p->f64 ? ((const double *)src)[off] : (double)((const float *)src)[off];
        }
        if (p->f64)
            ((double *)dst)[o] = acc;
        else
            ((float *)dst)[o] = (float)acc;
    }
}

static s4d_status es_run(s4d_op_ctx *ctx)
{
    es_plan p;
    s4d_status st = es_plan_get(ctx, &p);
    if (st != S4D_OK)
        return st;
    void *y = ctx->outputs[0].data;
    if (p.nops == 1) {
        permute_reduce(&p, &p.in[0], ctx->inputs[0].data, p.out.l, p.out.n, y);
        return S4D_OK;
    }
    if (ctx->workspace_size < es_ws(ctx))
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "workspace of %zu bytes is too small", ctx->workspace_size);
    const size_t es = p.f64 ? sizeof(double) : sizeof(float);
    char *ws = ctx->workspace;
    const void *a = ctx->inputs[0].data, *b = ctx->inputs[1].data;
    int ta = p.ta, tb = p.tb;
    if (p.a_copy) {
        int keep[3 * S4D_MAX_RANK], nk = 0;
        for (int i = 0; i < p.nb; i++)
            keep[nk++] = p.bl[i];
        for (int i = 0; i < p.nm; i++)
            keep[nk++] = p.ml[i];
        for (int i = 0; i < p.nk; i++)
            keep[nk++] = p.kl[i];
        permute_reduce(&p, &p.in[0], a, keep, nk, ws);
        a = ws;
        ws += (size_t)(p.B * p.M * p.K + 16) * es;
        ta = 0;
    }
    if (p.b_copy) {
        int keep[3 * S4D_MAX_RANK], nk = 0;
        for (int i = 0; i < p.nb; i++)
            keep[nk++] = p.bl[i];
        for (int i = 0; i < p.nk; i++)
            keep[nk++] = p.kl[i];
        for (int i = 0; i < p.nn; i++)
            keep[nk++] = p.nl[i];
        permute_reduce(&p, &p.in[1], b, keep, nk, ws);
        b = ws;
        ws += (size_t)(p.B * p.K * p.N + 16) * es;
        tb = 0;
    }
    void *c = p.c_copy ? (void *)ws : y;
    if (p.f64) {
        for (int64_t i = 0; i < p.B; i++)
            s4d_host_dgemm(ctx->pool, ta, tb, p.M, p.N, p.K, 1.0, (const double *)a + i * p.M * p.K, ta ? p.M : p.K,
                          (const double *)b + i * p.K * p.N, tb ? p.K : p.N, 0.0, (double *)c + i * p.M * p.N, p.N);
    } else {
        s4d_host_sgemm_batched(ctx->pool, p.B, ta, tb, p.M, p.N, p.K, a, p.M * p.K, ta ? p.M : p.K, b, p.K * p.N,
                              tb ? p.K : p.N, c, p.M * p.N);
    }
    if (p.c_copy) {
        term ct;
        ct.n = 0;
        for (int i = 0; i < p.nb; i++)
            ct.l[ct.n++] = p.bl[i];
        for (int i = 0; i < p.nm; i++)
            ct.l[ct.n++] = p.ml[i];
        for (int i = 0; i < p.nn; i++)
            ct.l[ct.n++] = p.nl[i];
        permute_reduce(&p, &ct, c, p.out.l, p.out.n, y);
    }
    return S4D_OK;
}

static const s4d_attr_spec es_attrs[] = {{"equation", S4D_ATTR_STRING}, {NULL}};
const s4d_op_schema s4d_op_einsum = {"", "Einsum", 12, es_infer, es_ws, es_run, sizeof(es_plan), 0, es_attrs};
