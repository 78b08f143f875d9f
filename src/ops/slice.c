/*
 * Slice: starts/ends/axes/steps are inputs from opset 10 (they must be
 * constants: they decide the output shape) and attributes before. Bounds are
 * clamped as ONNX prescribes, so INT64_MAX / INT64_MIN mean "to the end".
 */
#include "ops/broadcast.h"
#include "ops/movement.h"

typedef s4d_slice_params slice_plan;

static s4d_status read_list(s4d_op_ctx *ctx, int idx, const char *attr, const char *what, int64_t *v, int64_t *n)
{
    if (ctx->opset >= 10) {
        if (!s4d_in_present(ctx, idx)) {
            *n = -1;
            return S4D_OK;
        }
        return s4d_const_ints(ctx, idx, what, v, S4D_MAX_RANK, n);
    }
    const s4d_attr *a = s4d_op_attr(ctx, attr);
    if (!a) {
        *n = -1;
        return S4D_OK;
    }
    if (a->type != S4D_ATTR_INTS || a->count > S4D_MAX_RANK)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "attribute %s must be a list of at most %d ints", attr, S4D_MAX_RANK);
    for (size_t i = 0; i < a->count; i++)
        v[i] = a->ints[i];
    *n = (int64_t)a->count;
    return S4D_OK;
}

static s4d_status make_plan(s4d_op_ctx *ctx, slice_plan *p)
{
    const s4d_tensor *in = &ctx->inputs[0];
    int64_t starts[S4D_MAX_RANK], ends[S4D_MAX_RANK], axes[S4D_MAX_RANK], steps[S4D_MAX_RANK];
    int64_t ns, ne, na, nst;
    s4d_status st;
    if ((st = read_list(ctx, 1, "starts", "starts", starts, &ns)) != S4D_OK ||
        (st = read_list(ctx, 2, "ends", "ends", ends, &ne)) != S4D_OK ||
        (st = read_list(ctx, 3, "axes", "axes", axes, &na)) != S4D_OK)
        return st;
    if (ctx->opset >= 10) {
        if ((st = read_list(ctx, 4, "", "steps", steps, &nst)) != S4D_OK)
            return st;
    } else {
        nst = -1;
    }
    if (ns < 0 || ne < 0)
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "starts and ends are required");
    if (ns != ne || (na >= 0 && na != ns) || (nst >= 0 && nst != ns))
        return s4d_op_error(ctx, S4D_ERR_SHAPE, "starts, ends, axes and steps must have the same length");
    p->rank = in->rank;
    for (int d = 0; d < in->rank; d++) {
        p->start[d] = 0;
        p->step[d] = 1;
        p->count[d] = in->dims[d];
    }
    int seen[S4D_MAX_RANK] = {0};
    for (int64_t i = 0; i < ns; i++) {
        int a = (int)i;
        if (na >= 0 && (st = s4d_norm_axis(ctx, axes[i], in->rank, "axes value", &a)) != S4D_OK)
            return st;
        if (a >= in->rank)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "%lld starts for rank %d", (long long)ns, in->rank);
        if (seen[a]++)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "axis %d is repeated", a);
        int64_t dim = in->dims[a], step = nst >= 0 ? steps[i] : 1, s = starts[i], e = ends[i];
        if (step == 0)
            return s4d_op_error(ctx, S4D_ERR_SHAPE, "steps[%lld] is 0", (long long)i);
        if (s < 0)
            s += dim;
        if (e < 0)
            e += dim;
        if (step > 0) {
            s = s < 0 ? 0 : s > dim ? dim : s;
            e = e < 0 ? 0 : e > dim ? dim : e;
            p->count[a] = e > s ? (e - s - 1) / step + 1 : 0;
        } else {
            s = s < 0 ? 0 : s > dim - 1 ? dim - 1 : s;
            e = e < -1 ? -1 : e > dim - 1 ? dim - 1 : e;
            int64_t ms = step == INT64_MIN ? INT64_MAX : -step; /* |INT64_MIN| is no int64 */
            p->count[a] = s > e ? (s - e - 1) / ms + 1 : 0;
        }
        p->start[a] = s;
        p->step[a] = step;
    }
    return S4D_OK;
}

static s4d_status infer_slice(s4d_op_ctx *ctx)
{
    s4d_status st = s4d_check_arity(ctx, ctx->opset >= 10 ? 3 : 1, ctx->opset >= 10 ? 5 : 1, 1);
    if (st != S4D_OK)
        return st;
    const s4d_tensor *in = &ctx->inputs[0];
    if (s4d_dtype_size(in->dtype) == 0)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "input 0 (data) has unsupported dtype %s", s4d_dtype_name(in->dtype));
    slice_plan local, *p = ctx->params ? ctx->params : &local;
    if ((st = make_plan(ctx, p)) != S4D_OK)
        return st;
    s4d_set_out(ctx, 0, in->dtype, in->rank, p->count);
    return S4D_OK;
}

typedef struct slice_job {
    slice_plan p;
    int64_t ist[S4D_MAX_RANK];
    int k;          /* dims k.. form each row: dims past k taken whole, so a row of step 1 is one run */
    size_t es;
    const char *in;
    char *out;
} slice_job;

static void slice_rows(void *vp, int64_t r0, int64_t r1)
{
    const slice_job *j = vp;
    const int R = j->p.rank, k = j->k;
    /* a merged row (k < R - 1) has step 1 and whole dims after it: one contiguous run */
    int64_t inner = 1, istep = R && k == R - 1 ? j->p.step[k] * j->ist[k] : 1;
    for (int d = k; d < R; d++)
        inner *= j->p.count[d];
    size_t es = j->es;
    for (int64_t r = r0; r < r1; r++) {
        int64_t rem = r, off = R ? j->p.start[k] * j->ist[k] : 0;
        for (int d = k - 1; d >= 0; d--) {
            off += (j->p.start[d] + (rem % j->p.count[d]) * j->p.step[d]) * j->ist[d];
            rem /= j->p.count[d];
        }
        char *dst = j->out + (size_t)(r * inner) * es;
        const char *src = j->in + (size_t)off * es;
        if (istep == 1) {
            memcpy(dst, src, (size_t)inner * es);
        } else {
            for (int64_t i = 0; i < inner; i++)
                memcpy(dst + (size_t)i * es, src + (i * istep) * (int64_t)es, es);
        }
    }
}

static s4d_status run_slice(s4d_op_ctx *ctx)
{
    slice_job *j = &(slice_job){0};
    if (ctx->params) {
        j->p = *(const slice_plan *)ctx->params;
    } else {
        s4d_status st = make_plan(ctx, &j->p);
        if (st != S4D_OK)
            return st;
    }
    const s4d_tensor *in = &ctx->inputs[0];
    int64_t s = 1;
    for (int d = in->rank - 1; d >= 0; d--) {
        j->ist[d] = s;
        s *= in->dims[d];
    }
    j->es = s4d_dtype_size(in->dtype);
    j->in = in->data;
    j->out = ctx->outputs[0].data;
    int64_t total = s4d_tensor_numel(&ctx->outputs[0]);
    if (total == 0)
        return S4D_OK;
    /* Trailing dims taken whole join the row before them (a channel slice of NCHW is one run per
     * image, not one per pixel row). */
    int k = in->rank ? in->rank - 1 : 0;
    while (k > 0 && j->p.step[k] == 1 && j->p.start[k] == 0 && j->p.count[k] == in->dims[k] &&
           j->p.step[k - 1] == 1)
        k--;
    j->k = k;
    int64_t inner = 1;
    for (int d = k; d < in->rank; d++)
        inner *= j->p.count[d];
    s4d_parallel_for(ctx->pool, total / inner, 1 + 16384 / inner, slice_rows, j);
    return S4D_OK;
}

/* Opset 10 made starts, ends and axes inputs. */
static const s4d_attr_spec slice_attrs[] = {{"starts", S4D_ATTR_INTS, 0, 0, 9},
                                            {"ends", S4D_ATTR_INTS, 0, 0, 9},
                                            {"axes", S4D_ATTR_INTS, 0, 0, 9},
                                            {NULL}};
const s4d_op_schema s4d_op_slice = {"", "Slice", 1, infer_slice, NULL, run_slice,
                                    sizeof(s4d_slice_params), 0, slice_attrs};
