/*
 * The fp16 accuracy guard (docs/precision.md). It builds the float32
 * reference of the model and fp16 candidates on the target device, runs them
 * on every calibration set and measures each graph output's relative L2
 * error against the reference. While some output is above its tolerance it
 * ranks the float16 layers by how much they amplify error - the relative L2
 * of a layer's outputs over the largest of its inputs', both against the
 * reference run, read through a per-layer hook of the context - and moves
 * the top k (k = 1, 2, 4, ...) to float32, so that the number of rebuilds
 * grows with the logarithm of the layers moved. Afterwards it tries to put
 * back the less suspicious half of the last batch. Layers the user pinned
 * are never changed. An output whose rows follow a TopK that selected other
 * rows than float32 is an error of the selection, invisible to the
 * amplification of the layers that copy the rows: the layers computing that
 * TopK's scores are ranked alone, and when moving them stops helping the
 * build fails naming the selection's margin instead of moving everything.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ops/broadcast.h"
#include "runtime/precision_metric.h"
#include "runtime/runtime.h"
#include "s4d/npy.h"
#include "util/util.h"

#define DEFAULT_TOLERANCE 1e-2
/* Input error below which a layer's output error counts as its own: float16's rounding. */
#define ERR_FLOOR 1e-3
#define MAX_PUT_BACK_TRIALS 3
/* An output whose rows another selection replaced stops the search after this many
   iterations that did not bring the worst output's error (over its tolerance) below
   STALL_GAIN times its best since that selection was first followed. */
#define STALL_ITERATIONS 3
#define STALL_GAIN 0.9
/* The largest finite float16. */
#define FP16_MAX 65504.0

/* Progress on stderr when S4D_BUILD_LOG is set (s4dexec --verbose sets it). */
static void progress(const char *fmt, ...) S4D_PRINTF(1, 2);

static int build_log(void)
{
    const char *env = getenv("S4D_BUILD_LOG");
    return env && env[0] && strcmp(env, "0") != 0;
}

static void progress(const char *fmt, ...)
{
    if (!build_log())
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[fp16 guard] ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ---- calibration sets ---- */

typedef struct calib {
    int num_sets, num_inputs;
    char **set_names;
    s4d_npy *arrays; /* num_sets * num_inputs */
} calib;

static void calib_free(calib *c)
{
    for (int i = 0; c->arrays && i < c->num_sets * c->num_inputs; i++)
        s4d_npy_free(&c->arrays[i]);
    for (int i = 0; c->set_names && i < c->num_sets; i++)
        free(c->set_names[i]);
    free(c->arrays);
    free(c->set_names);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static s4d_status calib_load(const char *dir, const s4d_engine *e, calib *c, char *err,
                             size_t errsz)
{
    memset(c, 0, sizeof *c);
    DIR *d = opendir(dir);
    if (!d)
        return s4d_fmt_err(err, errsz, S4D_ERR_IO, "calibration directory '%s' cannot be opened",
                           dir);
    int npy = 0, cap = 0;
    /* One set when a graph input's file is in DIR itself (other .npy files there are
       ignored: a golden sequence's folder keeps more), else one set per folder. */
    for (int i = 0; i < s4d_engine_num_inputs(e) && !npy; i++) {
        s4d_tensor_info ti;
        s4d_engine_input_info(e, i, &ti);
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.npy", dir, ti.name);
        struct stat sb;
        npy = stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
    }
    char **subs = NULL;
    struct dirent *de;
    s4d_status st = S4D_OK;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        struct stat sb;
        if (stat(path, &sb) != 0)
            continue;
        if (S_ISDIR(sb.st_mode)) {
            if (c->num_sets == cap) {
                cap = cap ? cap * 2 : 16;
                char **n = realloc(subs, (size_t)cap * sizeof *n);
                if (!n) {
                    st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
                    break;
                }
                subs = n;
            }
            subs[c->num_sets] = s4d_strdup(de->d_name);
            if (!subs[c->num_sets]) {
                st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
                break;
            }
            c->num_sets++;
        }
    }
    closedir(d);
    c->set_names = subs;
    if (st != S4D_OK)
        return st;
    if (npy) {
        /* The directory itself is the one set. */
        for (int i = 0; i < c->num_sets; i++)
            free(subs[i]);
        c->num_sets = 1;
        if (!c->set_names && !(c->set_names = malloc(sizeof(char *))))
            return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
        c->set_names[0] = NULL;
    } else if (!c->num_sets) {
        return s4d_fmt_err(err, errsz, S4D_ERR_NOT_FOUND,
                           "calibration directory '%s' has no calibration set: give one .npy per "
                           "graph input (DIR/<input>.npy) or one folder per set "
                           "(DIR/<set>/<input>.npy)",
                           dir);
    } else {
        qsort(c->set_names, (size_t)c->num_sets, sizeof(char *), cmp_str);
    }
    c->num_inputs = s4d_engine_num_inputs(e);
    c->arrays = calloc((size_t)c->num_sets * (size_t)c->num_inputs + 1, sizeof *c->arrays);
    if (!c->arrays)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
    for (int s = 0; s < c->num_sets; s++) {
        for (int i = 0; i < c->num_inputs; i++) {
            s4d_tensor_info ti;
            s4d_engine_input_info(e, i, &ti);
            char path[4096];
            if (c->set_names[s])
                snprintf(path, sizeof path, "%s/%s/%s.npy", dir, c->set_names[s], ti.name);
            else
                snprintf(path, sizeof path, "%s/%s.npy", dir, ti.name);
            struct stat sb;
            if (stat(path, &sb) != 0)
                return s4d_fmt_err(err, errsz, S4D_ERR_NOT_FOUND,
                                   "calibration: '%s' is missing (graph input '%s')", path,
                                   ti.name);
            s4d_npy *a = &c->arrays[s * c->num_inputs + i];
            s4d_errbuf eb;
            st = s4d_npy_load(path, a, &eb);
            if (st != S4D_OK)
                return s4d_fmt_err(err, errsz, st, "calibration: %s", eb.msg);
            int same = a->dtype == ti.dtype && a->rank == ti.rank;
            for (int k = 0; same && k < ti.rank; k++)
                same = a->dims[k] == ti.dims[k];
            if (!same) {
                char want[200], got[200];
                s4d_dims_str(ti.rank, ti.dims, want, sizeof want);
                s4d_dims_str(a->rank, a->dims, got, sizeof got);
                return s4d_fmt_err(err, errsz, S4D_ERR_SHAPE,
                                   "calibration: '%s' is %s%s; graph input '%s' is %s%s", path,
                                   s4d_dtype_name(a->dtype), got, ti.name,
                                   s4d_dtype_name(ti.dtype), want);
            }
        }
    }
    return S4D_OK;
}

/* ---- measuring ---- */

static int is_float(s4d_dtype t)
{
    return t == S4D_DTYPE_FLOAT32 || t == S4D_DTYPE_FLOAT16;
}

static size_t tensor_numel(const s4d_plan_tensor *t)
{
    size_t n = 1;
    for (int d = 0; d < t->rank; d++)
        n *= (size_t)t->dims[d];
    return n;
}

/* What one evaluation of a candidate measures. */
typedef struct measure {
    double *out_err;   /* per graph output: the worst over the sets, by its metric */
    double *out_ordered; /* per graph output: the same, element by element */
    double *score;     /* per candidate layer: amplification, worst over the sets */
    double *layer_err; /* per candidate layer: its outputs' error */
    double *in_err;    /* per candidate layer: its inputs' error */
    double *range;     /* per candidate layer: the largest magnitude of its float32 outputs */
    s4d_selection_diff *sel; /* per candidate TopK layer: how its selection differs (worst set) */
} measure;

/* The hook's state for one run. */
typedef struct run_state {
    const s4d_engine *e;
    int reference;        /* capturing the float32 reference */
    float **ref_out;      /* reference: per layer * MAXO outputs (float32 copies) */
    const int *match;     /* candidate: per layer, the reference layer with its name, or -1 */
    const float **cp;     /* candidate: per tensor, its reference values (borrowed) */
    double *terr;         /* candidate: per tensor, its error */
    double *serr;         /* candidate: per tensor, its error before the Casts it went through */
    double *ref_max;      /* per reference layer: the largest magnitude of its float32 outputs */
    float *buf;           /* scratch: widened output */
    uint8_t *raw;         /* scratch: raw output bytes */
    measure *m;
    char *err;
    size_t errsz;
} run_state;

#define MAXO 16

/* Widens a tensor's elements to float (integers and bools for comparing them); 0 when
   the dtype is not one the guard compares. */
static int widen_to_float(s4d_dtype dt, const void *raw, size_t n, float *out)
{
    switch (dt) {
    case S4D_DTYPE_FLOAT32: memcpy(out, raw, n * sizeof(float)); return 1;
    case S4D_DTYPE_FLOAT16:
        for (size_t k = 0; k < n; k++)
            out[k] = s4d_half_to_float(((const uint16_t *)raw)[k]);
        return 1;
    case S4D_DTYPE_INT64:
        for (size_t k = 0; k < n; k++)
            out[k] = (float)((const int64_t *)raw)[k];
        return 1;
    case S4D_DTYPE_INT32:
        for (size_t k = 0; k < n; k++)
            out[k] = (float)((const int32_t *)raw)[k];
        return 1;
    case S4D_DTYPE_BOOL:
    case S4D_DTYPE_UINT8:
        for (size_t k = 0; k < n; k++)
            out[k] = (float)((const uint8_t *)raw)[k];
        return 1;
    case S4D_DTYPE_INT8:
        for (size_t k = 0; k < n; k++)
            out[k] = (float)((const int8_t *)raw)[k];
        return 1;
    default: return 0;
    }
}

/* Integers (indices from a TopK, ids) are right or wrong: the fraction that differ. */
static double mismatch(const float *a, const float *b, size_t n)
{
    size_t bad = 0;
    for (size_t k = 0; k < n; k++)
        bad += a[k] != b[k];
    return n ? (double)bad / (double)n : 0;
}

static int is_topk(const s4d_plan_layer *l)
{
    return l->op_type && strcmp(l->op_type, "TopK") == 0 && l->num_outputs >= 2 &&
           l->num_inputs >= 1 && l->inputs[0] >= 0;
}

static int64_t attr_int(const s4d_plan_layer *l, const char *name, int64_t dflt)
{
    for (int i = 0; i < l->num_attrs; i++)
        if (strcmp(l->attrs[i].name, name) == 0 && l->attrs[i].type == S4D_ATTR_INT)
            return l->attrs[i].i;
    return dflt;
}

/* A candidate TopK against the reference's: which rows it selects that float32 does not,
   and how near a tie float32's k-th place is. Kept for the worst set. */
static s4d_status compare_selection(s4d_context *c, int li, run_state *rs)
{
    const s4d_plan *p = rs->e->plan;
    const s4d_plan_layer *l = &p->layers[li];
    const s4d_plan_tensor *in = &p->tensors[l->inputs[0]];
    const s4d_plan_tensor *vt = &p->tensors[l->outputs[0]], *it = &p->tensors[l->outputs[1]];
    const float *scores = rs->cp[l->inputs[0]];
    const float *rv = rs->ref_out[(size_t)rs->match[li] * MAXO];
    const float *ri = rs->ref_out[(size_t)rs->match[li] * MAXO + 1];
    int axis = (int)attr_int(l, "axis", -1);
    if (axis < 0)
        axis += in->rank;
    if (!scores || !ri || axis < 0 || axis >= in->rank || it->rank != in->rank)
        return S4D_OK;
    size_t nv = tensor_numel(vt), ni = tensor_numel(it);
    float *cv = malloc((nv + ni) * sizeof(float) + 4);
    if (!cv)
        return s4d_fmt_err(rs->err, rs->errsz, S4D_ERR_NO_MEMORY, "out of memory");
    float *ci = cv + nv;
    s4d_status st = s4d_context_layer_output(c, li, 0, rs->raw);
    int ok = st == S4D_OK && widen_to_float(vt->dtype, rs->raw, nv, cv);
    if (st == S4D_OK)
        st = s4d_context_layer_output(c, li, 1, rs->raw);
    ok = ok && st == S4D_OK && widen_to_float(it->dtype, rs->raw, ni, ci);
    if (st != S4D_OK) {
        free(cv);
        return s4d_fmt_err(rs->err, rs->errsz, st, "%s", s4d_context_errmsg(c));
    }
    s4d_selection_diff d;
    if (ok) {
        st = s4d_selection_compare(scores, in->rank, in->dims, axis, it->dims[axis],
                                   (int)attr_int(l, "largest", 1), ri, ci,
                                   vt->dtype == S4D_DTYPE_INT64 ? NULL : rv, cv, &d);
        if (st == S4D_ERR_NO_MEMORY) {
            free(cv);
            return s4d_fmt_err(rs->err, rs->errsz, st, "out of memory");
        }
        s4d_selection_diff *w = &rs->m->sel[li];
        if (st == S4D_OK && (d.other > w->other || (d.other == w->other && d.margin < w->margin)))
            *w = d;
    }
    free(cv);
    return S4D_OK;
}

static s4d_status hook(s4d_context *c, int li, void *user)
{
    run_state *rs = user;
    const s4d_plan *p = rs->e->plan;
    const s4d_plan_layer *l = &p->layers[li];
    double out_err = 0, in_err = 0;
    int half = 0, any = 0;
    int passes = !rs->reference && rs->match[li] < 0 && l->num_inputs == 1 &&
                 l->inputs[0] >= 0 && l->num_outputs == 1;
    for (int j = 0; j < l->num_outputs && j < MAXO; j++) {
        int ti = l->outputs[j];
        const s4d_plan_tensor *t = &p->tensors[ti];
        size_t n = tensor_numel(t);
        if (rs->reference) {
            float *copy = malloc(n * sizeof(float) + 4);
            if (!copy)
                return s4d_fmt_err(rs->err, rs->errsz, S4D_ERR_NO_MEMORY, "out of memory");
            s4d_status st = s4d_context_layer_output(c, li, j, rs->raw);
            if (st != S4D_OK) {
                free(copy);
                return s4d_fmt_err(rs->err, rs->errsz, st, "%s", s4d_context_errmsg(c));
            }
            if (!widen_to_float(t->dtype, rs->raw, n, copy)) {
                free(copy);
                continue;
            }
            if (t->dtype == S4D_DTYPE_FLOAT32)
                for (size_t k = 0; k < n; k++)
                    if (fabsf(copy[k]) > rs->ref_max[li] && isfinite(copy[k]))
                        rs->ref_max[li] = fabsf(copy[k]);
            rs->ref_out[(size_t)li * MAXO + j] = copy;
            continue;
        }
        const float *ref = NULL;
        if (rs->match[li] >= 0)
            ref = rs->ref_out[(size_t)rs->match[li] * MAXO + j];
        else if (passes)
            ref = rs->cp[l->inputs[0]]; /* a Cast or copy layer: the same values */
        rs->cp[ti] = ref;
        if (!ref)
            continue;
        s4d_status st = s4d_context_layer_output(c, li, j, rs->raw);
        if (st != S4D_OK)
            return s4d_fmt_err(rs->err, rs->errsz, st, "%s", s4d_context_errmsg(c));
        if (!widen_to_float(t->dtype, rs->raw, n, rs->buf))
            continue;
        half |= t->dtype == S4D_DTYPE_FLOAT16;
        double e = is_float(t->dtype) ? s4d_rel_l2(rs->buf, ref, n) : mismatch(rs->buf, ref, n);
        rs->terr[ti] = e;
        /* The rounding a Cast adds to a layer's input is that layer's own doing. */
        rs->serr[ti] = passes && rs->serr[l->inputs[0]] >= 0 ? rs->serr[l->inputs[0]] : e;
        any = 1;
        if (e > out_err || isnan(e))
            out_err = e;
    }
    if (!rs->reference && rs->match[li] >= 0 && any && is_topk(l)) {
        s4d_status st = compare_selection(c, li, rs);
        if (st != S4D_OK)
            return st;
    }
    if (rs->reference || rs->match[li] < 0 || !half || !any)
        return S4D_OK;
    for (int j = 0; j < l->num_inputs; j++) {
        int ti = l->inputs[j];
        if (ti < 0 || rs->serr[ti] < 0)
            continue;
        if (rs->serr[ti] > in_err || isnan(rs->serr[ti]))
            in_err = rs->serr[ti];
    }
    double score;
    if (rs->ref_max[rs->match[li]] > FP16_MAX)
        score = INFINITY; /* its float32 outputs do not fit in float16 */
    else if (!isfinite(in_err))
        score = 0; /* it inherits the error; whoever made it is to blame */
    else if (!isfinite(out_err))
        score = INFINITY;
    else
        score = out_err / (in_err > ERR_FLOOR ? in_err : ERR_FLOOR);
    if (score > rs->m->score[li] || (score == rs->m->score[li] && out_err > rs->m->layer_err[li])) {
        rs->m->score[li] = score;
        rs->m->layer_err[li] = out_err;
        rs->m->in_err[li] = in_err;
        rs->m->range[li] = rs->ref_max[rs->match[li]];
    }
    return S4D_OK;
}

/* Binds set s to the context's inputs, in engine input order. */
static s4d_status bind_inputs(s4d_context *c, const s4d_engine *e, const calib *cal, int s,
                              char *err, size_t errsz)
{
    for (int i = 0; i < cal->num_inputs; i++) {
        const s4d_npy *a = &cal->arrays[s * cal->num_inputs + i];
        s4d_tensor_info ti;
        s4d_engine_input_info(e, i, &ti);
        s4d_status st = s4d_context_bind(c, ti.name, a->dtype, a->rank, a->dims, a->data);
        if (st != S4D_OK)
            return s4d_fmt_err(err, errsz, st, "calibration: binding '%s': %s", ti.name,
                               s4d_context_errmsg(c));
    }
    return S4D_OK;
}

/* Everything one evaluation needs; reference outputs are per set. */
typedef struct guard {
    const s4d_engine *ref;
    const calib *cal;
    int num_outputs;
    float **ref_outputs; /* per set * output (float32, integers widened); NULL: not compared */
    int *axis;           /* per output: the axis of the rows matched, -1: element by element */
    int *topk;           /* per output: the TopK layer its rows follow (reference plan), or -1 */
    int *forced;         /* per output: its metric was given (output_metrics) */
    int *state_in;       /* per output: the input it feeds on the next set (carried state), -1 */
    int num_state;       /* outputs that feed an input */
} guard;

static s4d_status make_context(const s4d_engine *e, s4d_context **c, char *err, size_t errsz)
{
    s4d_context_options co;
    s4d_context_options_init(&co);
    s4d_errbuf eb;
    s4d_status st = s4d_context_create(e, &co, c, &eb);
    if (st != S4D_OK)
        return s4d_fmt_err(err, errsz, st, "%s", eb.msg);
    return S4D_OK;
}

static size_t largest_tensor(const s4d_plan *p)
{
    size_t m = 16;
    for (int i = 0; i < p->num_tensors; i++) {
        size_t n = tensor_numel(&p->tensors[i]) * sizeof(float);
        if ((size_t)p->tensors[i].bytes > n)
            n = (size_t)p->tensors[i].bytes;
        if (n > m)
            m = n;
    }
    return m;
}

static size_t output_numel(const s4d_tensor_info *ti)
{
    size_t n = 1;
    for (int d = 0; d < ti->rank; d++)
        n *= (size_t)ti->dims[d];
    return n;
}

/* Compares one candidate output (widened into buf) with the reference's by the
   output's metric; *ordered gets the element-by-element error. */
static s4d_status compare_output(const guard *gd, int o, const s4d_tensor_info *ti,
                                 const void *data, const float *ref, float *buf, double *e,
                                 double *ordered)
{
    size_t n = output_numel(ti);
    if (!widen_to_float(ti->dtype, data, n, buf)) {
        *e = *ordered = 0;
        return S4D_OK;
    }
    *e = *ordered = s4d_rel_l2(buf, ref, n);
    if (gd->axis[o] < 0)
        return S4D_OK;
    return s4d_matched_rel_l2(buf, ref, ti->rank, ti->dims, gd->axis[o], e, NULL);
}

/* compare_output, kept in m as the output's worst so far (NaN as infinity) and in
   errs[o] for the set's progress line. */
static s4d_status account_output(const guard *gd, measure *m, int o, const s4d_tensor_info *ti,
                                 const void *data, const float *ref, float *buf, double *errs)
{
    double e, ordered;
    s4d_status st = compare_output(gd, o, ti, data, ref, buf, &e, &ordered);
    if (st != S4D_OK)
        return st;
    errs[o] = e;
    if (e > m->out_err[o] || isnan(e))
        m->out_err[o] = isnan(e) ? INFINITY : e;
    if (ordered > m->out_ordered[o] || isnan(ordered))
        m->out_ordered[o] = isnan(ordered) ? INFINITY : ordered;
    return S4D_OK;
}

/* With S4D_BUILD_LOG: each compared output's error on one set ("alone": with the
   reference's state; "carried": in the sequence), so that an error growing from set to
   set shows. errs[o] < 0: not compared. */
static void set_progress(const guard *gd, const s4d_engine *e, int s, const char *how,
                         const double *errs)
{
    if (!build_log())
        return;
    char line[1024];
    size_t n = 0;
    line[0] = 0;
    for (int o = 0; o < gd->num_outputs && n < sizeof line; o++) {
        if (errs[o] < 0)
            continue;
        s4d_tensor_info ti;
        s4d_engine_output_info(e, o, &ti);
        int w = snprintf(line + n, sizeof line - n, "%s'%s' %.3g", n ? ", " : "", ti.name,
                         errs[o]);
        n = w < 0 ? sizeof line : n + (size_t)w;
    }
    if (line[0])
        progress("  set '%s' %s: %s", gd->cal->set_names[s], how, line);
}

/* Each output's metric: the one asked for, else matched rows where the layer graph
   says the rows follow a TopK's selection. */
static s4d_status resolve_metrics(guard *gd, const s4d_build_options *o, char *err, size_t errsz)
{
    const s4d_plan *p = gd->ref->plan;
    int no = p->num_outputs;
    gd->axis = malloc(((size_t)no + 1) * sizeof *gd->axis);
    gd->topk = malloc(((size_t)no + 1) * sizeof *gd->topk);
    gd->forced = calloc((size_t)no + 1, sizeof *gd->forced);
    if (!gd->axis || !gd->topk || !gd->forced || s4d_selection_axes(p, gd->axis, gd->topk) != S4D_OK)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
    for (int k = 0; k < o->num_output_metrics; k++) {
        const s4d_output_metric *om = &o->output_metrics[k];
        int found = -1;
        for (int i = 0; om->output && i < no; i++) {
            s4d_tensor_info ti;
            s4d_engine_output_info(gd->ref, i, &ti);
            if (strcmp(ti.name, om->output) == 0)
                found = i;
        }
        if (found < 0)
            return s4d_fmt_err(err, errsz, S4D_ERR_NOT_FOUND,
                               "accuracy metric for output '%s': the network has no such output",
                               om->output ? om->output : "(null)");
        const s4d_plan_tensor *t = &p->tensors[p->outputs[found]];
        switch (om->metric) {
        case S4D_METRIC_AUTO: continue;
        case S4D_METRIC_ORDERED:
            gd->axis[found] = gd->topk[found] = -1;
            break;
        case S4D_METRIC_MATCHED:
            if (gd->axis[found] < 0) {
                /* Rows along the first axis longer than 1 (a [1, N, D] output: N rows). */
                for (int d = 0; d < t->rank && gd->axis[found] < 0; d++)
                    if (t->dims[d] > 1)
                        gd->axis[found] = d;
                if (gd->axis[found] < 0 && t->rank > 0)
                    gd->axis[found] = 0;
            }
            break;
        default:
            return s4d_fmt_err(err, errsz, S4D_ERR_INVALID_ARG,
                               "accuracy metric for output '%s' is %d; give S4D_METRIC_AUTO, "
                               "S4D_METRIC_ORDERED or S4D_METRIC_MATCHED",
                               om->output, (int)om->metric);
        }
        gd->forced[found] = 1;
    }
    return S4D_OK;
}

/* How the report names an output's metric. */
static void metric_str(const guard *gd, int o, char *b, size_t n)
{
    const s4d_plan *p = gd->ref->plan;
    if (gd->axis[o] < 0)
        snprintf(b, n, "ordered%s", gd->forced[o] ? ", as asked" : "");
    else if (gd->topk[o] >= 0)
        snprintf(b, n, "matched rows along axis %d%s: their order follows TopK '%s'", gd->axis[o],
                 gd->forced[o] ? ", as asked" : "", p->layers[gd->topk[o]].name);
    else
        snprintf(b, n, "matched rows along axis %d, as asked", gd->axis[o]);
}

/* Runs the reference on every set once: keeps its graph outputs. */
static s4d_status reference_outputs(guard *gd, char *err, size_t errsz)
{
    const s4d_engine *e = gd->ref;
    const calib *cal = gd->cal;
    gd->num_outputs = s4d_engine_num_outputs(e);
    gd->ref_outputs = calloc((size_t)cal->num_sets * (size_t)gd->num_outputs + 1, sizeof(float *));
    if (!gd->ref_outputs)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
    s4d_context *c = NULL;
    s4d_status st = make_context(e, &c, err, errsz);
    for (int s = 0; st == S4D_OK && s < cal->num_sets; s++) {
        st = bind_inputs(c, e, cal, s, err, errsz);
        if (st == S4D_OK && (st = s4d_context_run(c, NULL)) != S4D_OK)
            s4d_fmt_err(err, errsz, st, "float32 reference run: %s", s4d_context_errmsg(c));
        for (int o = 0; st == S4D_OK && o < gd->num_outputs; o++) {
            s4d_tensor_info ti;
            s4d_engine_output_info(e, o, &ti);
            const void *data;
            st = s4d_context_output(c, ti.name, &data, NULL);
            /* float32 outputs are compared; other dtypes when their metric was given. */
            if (st != S4D_OK || (ti.dtype != S4D_DTYPE_FLOAT32 && !gd->forced[o]))
                continue;
            size_t n = output_numel(&ti);
            float *copy = malloc(n * sizeof(float) + 4);
            if (!copy) {
                st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
                break;
            }
            if (!widen_to_float(ti.dtype, data, n, copy)) {
                free(copy);
                continue;
            }
            gd->ref_outputs[s * gd->num_outputs + o] = copy;
        }
    }
    s4d_context_destroy(c);
    return st;
}

/*
 * The carried state: an output NAME_out of the same dtype and shape as an input NAME feeds
 * that input on the next frame (the instance bank of the Sparse4Dv3 head). Calibration sets
 * in name order are then taken as consecutive frames of one sequence.
 */
static s4d_status find_state(guard *gd, char *err, size_t errsz)
{
    const s4d_engine *e = gd->ref;
    int no = s4d_engine_num_outputs(e), ni = s4d_engine_num_inputs(e);
    gd->state_in = malloc(((size_t)no + 1) * sizeof *gd->state_in);
    if (!gd->state_in)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
    gd->num_state = 0;
    for (int o = 0; o < no; o++) {
        s4d_tensor_info to;
        s4d_engine_output_info(e, o, &to);
        gd->state_in[o] = -1;
        size_t len = strlen(to.name);
        if (len <= 4 || strcmp(to.name + len - 4, "_out") != 0)
            continue;
        for (int i = 0; i < ni; i++) {
            s4d_tensor_info ti;
            s4d_engine_input_info(e, i, &ti);
            if (strlen(ti.name) != len - 4 || strncmp(ti.name, to.name, len - 4) != 0 ||
                ti.dtype != to.dtype || ti.rank != to.rank ||
                memcmp(ti.dims, to.dims, (size_t)ti.rank * sizeof ti.dims[0]) != 0)
                continue;
            gd->state_in[o] = i;
            gd->num_state++;
        }
    }
    return S4D_OK;
}

/* One set of the carried run: the set's inputs, the state inputs from the previous set's
   outputs (state[o], from set 1 on), then the state outputs kept for the next set. */
static s4d_status run_carried(const guard *gd, s4d_context *c, const s4d_engine *e, int s,
                              void **state, char *err, size_t errsz)
{
    s4d_status st = bind_inputs(c, e, gd->cal, s, err, errsz);
    int no = s4d_engine_num_outputs(e);
    for (int o = 0; st == S4D_OK && s > 0 && o < no; o++) {
        if (gd->state_in[o] < 0)
            continue;
        s4d_tensor_info ti;
        s4d_engine_input_info(e, gd->state_in[o], &ti);
        st = s4d_context_bind(c, ti.name, ti.dtype, ti.rank, ti.dims, state[o]);
        if (st != S4D_OK)
            return s4d_fmt_err(err, errsz, st, "calibration, carried state: binding '%s': %s",
                               ti.name, s4d_context_errmsg(c));
    }
    if (st == S4D_OK && (st = s4d_context_run(c, NULL)) != S4D_OK)
        return s4d_fmt_err(err, errsz, st, "calibration, carried state: %s", s4d_context_errmsg(c));
    for (int o = 0; st == S4D_OK && o < no; o++) {
        if (gd->state_in[o] < 0)
            continue;
        s4d_tensor_info ti;
        s4d_engine_output_info(e, o, &ti);
        const void *data;
        st = s4d_context_output(c, ti.name, &data, NULL);
        if (st != S4D_OK)
            return s4d_fmt_err(err, errsz, st, "calibration, carried state: output '%s': %s",
                               ti.name, s4d_context_errmsg(c));
        memcpy(state[o], data, output_numel(&ti) * s4d_dtype_size(ti.dtype));
    }
    return st;
}

/*
 * The sets again as one sequence, each engine carrying its own state from set to set, as
 * a deployment does: a float16 error in the state reaches the next frame and may grow there,
 * which the sets alone (every set with the reference's state) do not show. Each output's
 * error from set 1 on counts like the sets' own.
 */
static s4d_status evaluate_carried(const guard *gd, const s4d_engine *e16, s4d_context *c32,
                                   s4d_context *c16, measure *m, float *buf, size_t big,
                                   char *err, size_t errsz)
{
    const s4d_engine *e32 = gd->ref;
    int no = gd->num_outputs;
    void **st32 = calloc((size_t)no + 1, sizeof *st32), **st16 = calloc((size_t)no + 1, sizeof *st16);
    float *ref = malloc(big + 64);
    double *errs = malloc(((size_t)no + 1) * sizeof *errs);
    s4d_status st = S4D_OK;
    /* the contexts of the sets' runs, without their per-layer hooks */
    s4d_context_set_layer_hook(c32, NULL, NULL);
    s4d_context_set_layer_hook(c16, NULL, NULL);
    if (!st32 || !st16 || !ref || !errs)
        st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
    for (int o = 0; st == S4D_OK && o < no; o++) {
        if (gd->state_in[o] < 0)
            continue;
        s4d_tensor_info ti;
        s4d_engine_output_info(e32, o, &ti);
        size_t bytes = output_numel(&ti) * s4d_dtype_size(ti.dtype) + 8;
        st32[o] = malloc(bytes);
        st16[o] = malloc(bytes);
        if (!st32[o] || !st16[o])
            st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
    }
    for (int s = 0; st == S4D_OK && s < gd->cal->num_sets; s++) {
        st = run_carried(gd, c32, e32, s, st32, err, errsz);
        if (st == S4D_OK)
            st = run_carried(gd, c16, e16, s, st16, err, errsz);
        for (int o = 0; o < no; o++)
            errs[o] = -1;
        for (int o = 0; st == S4D_OK && s > 0 && o < no; o++) {
            if (!gd->ref_outputs[s * no + o]) /* not compared */
                continue;
            s4d_tensor_info t32, t16;
            s4d_engine_output_info(e32, o, &t32);
            s4d_engine_output_info(e16, o, &t16);
            const void *d32, *d16;
            if ((st = s4d_context_output(c32, t32.name, &d32, NULL)) != S4D_OK ||
                (st = s4d_context_output(c16, t16.name, &d16, NULL)) != S4D_OK) {
                s4d_fmt_err(err, errsz, st, "calibration, carried state: output '%s'", t32.name);
                break;
            }
            if (!widen_to_float(t32.dtype, d32, output_numel(&t32), ref))
                continue;
            if ((st = account_output(gd, m, o, &t16, d16, ref, buf, errs)) != S4D_OK) {
                s4d_fmt_err(err, errsz, st, "out of memory");
                break;
            }
        }
        if (st == S4D_OK && s > 0)
            set_progress(gd, e32, s, "carried", errs);
    }
    for (int o = 0; st32 && st16 && o < no; o++) {
        free(st32[o]);
        free(st16[o]);
    }
    free(st32);
    free(st16);
    free(ref);
    free(errs);
    return st;
}

/* Measures candidate e16 on every set (outputs and per-layer amplification). */
static s4d_status evaluate(guard *gd, const s4d_engine *e16, measure *m, char *err, size_t errsz)
{
    const s4d_plan *p16 = e16->plan, *p32 = gd->ref->plan;
    const calib *cal = gd->cal;
    int nl = p16->num_layers;
    for (int o = 0; o < gd->num_outputs; o++)
        m->out_err[o] = m->out_ordered[o] = 0;
    for (int i = 0; i < nl; i++) {
        m->score[i] = m->layer_err[i] = m->in_err[i] = m->range[i] = 0;
        memset(&m->sel[i], 0, sizeof m->sel[i]);
        m->sel[i].margin = INFINITY;
    }
    s4d_status st = S4D_OK;
    int *match = malloc(((size_t)nl + 1) * sizeof *match);
    float **ref_out = calloc((size_t)p32->num_layers * MAXO + 1, sizeof *ref_out);
    const float **cp = calloc((size_t)p16->num_tensors + 1, sizeof *cp);
    double *terr = malloc(((size_t)p16->num_tensors + 1) * sizeof *terr);
    double *serr = malloc(((size_t)p16->num_tensors + 1) * sizeof *serr);
    double *ref_max = calloc((size_t)p32->num_layers + 1, sizeof *ref_max);
    size_t big = largest_tensor(p16);
    size_t big32 = largest_tensor(p32);
    if (big32 > big)
        big = big32;
    float *buf = malloc(big + 64);
    uint8_t *raw = malloc(big + 64);
    double *errs = malloc(((size_t)gd->num_outputs + 1) * sizeof *errs);
    s4d_namemap names = {0};
    s4d_context *c32 = NULL, *c16 = NULL;
    if (!match || !ref_out || !cp || !terr || !serr || !ref_max || !buf || !raw || !errs) {
        st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
        goto done;
    }
    for (int i = 0; i < p32->num_layers; i++)
        if (s4d_namemap_put(&names, p32->layers[i].name, i) != 0) {
            st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
            goto done;
        }
    for (int i = 0; i < nl; i++) {
        const s4d_plan_layer *l = &p16->layers[i];
        int k = l->kind == S4D_LAYER_COPY ? -1 : s4d_namemap_get(&names, l->name);
        match[i] = k >= 0 && p32->layers[k].num_outputs == l->num_outputs ? k : -1;
    }
    st = make_context(gd->ref, &c32, err, errsz);
    if (st == S4D_OK)
        st = make_context(e16, &c16, err, errsz);
    for (int s = 0; st == S4D_OK && s < cal->num_sets; s++) {
        run_state r32 = {gd->ref, 1, ref_out, NULL, NULL, NULL, NULL, ref_max, buf, raw, m, err,
                         errsz};
        s4d_context_set_layer_hook(c32, hook, &r32);
        st = bind_inputs(c32, gd->ref, cal, s, err, errsz);
        if (st == S4D_OK && (st = s4d_context_run(c32, NULL)) != S4D_OK && st != S4D_ERR_NO_MEMORY)
            s4d_fmt_err(err, errsz, st, "float32 reference run: %s", s4d_context_errmsg(c32));
        if (st != S4D_OK)
            break;
        for (int t = 0; t < p16->num_tensors; t++) {
            cp[t] = NULL;
            terr[t] = serr[t] = -1;
        }
        for (int i = 0; i < p16->num_inputs; i++) {
            int ti = p16->inputs[i];
            terr[ti] = serr[ti] = 0;
            /* Graph inputs are the same bytes in both runs. */
            if (p16->tensors[ti].dtype == S4D_DTYPE_FLOAT32)
                cp[ti] = cal->arrays[s * cal->num_inputs + i].data;
        }
        run_state r16 = {e16, 0, ref_out, match, cp, terr, serr, ref_max, buf, raw, m, err,
                         errsz};
        s4d_context_set_layer_hook(c16, hook, &r16);
        st = bind_inputs(c16, e16, cal, s, err, errsz);
        if (st == S4D_OK && (st = s4d_context_run(c16, NULL)) != S4D_OK && st != S4D_ERR_NO_MEMORY)
            s4d_fmt_err(err, errsz, st, "fp16 candidate run: %s", s4d_context_errmsg(c16));
        for (int o = 0; o < gd->num_outputs; o++)
            errs[o] = -1;
        for (int o = 0; st == S4D_OK && o < gd->num_outputs; o++) {
            const float *ref = gd->ref_outputs[s * gd->num_outputs + o];
            if (!ref)
                continue;
            s4d_tensor_info ti;
            s4d_engine_output_info(e16, o, &ti);
            const void *data;
            st = s4d_context_output(c16, ti.name, &data, NULL);
            if (st != S4D_OK)
                break;
            if ((st = account_output(gd, m, o, &ti, data, ref, buf, errs)) != S4D_OK) {
                s4d_fmt_err(err, errsz, st, "out of memory");
                break;
            }
        }
        if (st == S4D_OK)
            set_progress(gd, e16, s, "alone", errs);
        for (int i = 0; i < p32->num_layers * MAXO; i++) {
            free(ref_out[i]);
            ref_out[i] = NULL;
        }
    }
    if (st == S4D_OK && gd->num_state > 0 && cal->num_sets > 1)
        st = evaluate_carried(gd, e16, c32, c16, m, buf, big, err, errsz);
done:
    s4d_context_destroy(c16);
    s4d_context_destroy(c32);
    if (ref_out)
        for (int i = 0; i < p32->num_layers * MAXO; i++)
            free(ref_out[i]);
    s4d_namemap_free(&names);
    free(match);
    free(ref_out);
    free(cp);
    free(terr);
    free(serr);
    free(ref_max);
    free(buf);
    free(raw);
    free(errs);
    return st;
}

/* ---- the search ---- */

typedef struct guard_state {
    const s4d_build_options *o;
    const s4d_build_config *cfg;
    const void *data;
    size_t size;
    char **moved;        /* layer names the guard keeps in float32 */
    int *moved_iter;
    char **moved_why;
    int num_moved, cap_moved;
    int builds;
} guard_state;

static s4d_status build_candidate(guard_state *gs, int num_moved, s4d_engine **out, char *err,
                                  size_t errsz)
{
    s4d_build_config c = *gs->cfg;
    c.guard_fp32 = (const char *const *)gs->moved;
    c.num_guard_fp32 = num_moved;
    gs->builds++;
    return s4d_engine_build_config(gs->data, gs->size, &c, out, err, errsz);
}

static int pinned(const s4d_build_options *o, const char *name)
{
    for (int i = 0; i < o->num_layer_precisions; i++)
        if (o->layer_precisions[i].layer && strcmp(o->layer_precisions[i].layer, name) == 0)
            return 1;
    return 0;
}

static int worst_output(const measure *m, const double *tol, int no, double *worst)
{
    int at = -1;
    double w = 0;
    for (int i = 0; i < no; i++) {
        double r = m->out_err[i] / tol[i];
        if (at < 0 || r > w || isnan(r)) {
            w = r;
            at = i;
        }
    }
    *worst = at >= 0 ? m->out_err[at] : 0;
    return at;
}

static int all_ok(const measure *m, const double *tol, int no)
{
    for (int i = 0; i < no; i++)
        if (!(m->out_err[i] <= tol[i]))
            return 0;
    return 1;
}

static s4d_status measure_alloc(measure *m, int no, int nl)
{
    m->out_err = calloc((size_t)no + 1, sizeof(double));
    m->out_ordered = calloc((size_t)no + 1, sizeof(double));
    m->score = calloc((size_t)nl + 1, sizeof(double));
    m->layer_err = calloc((size_t)nl + 1, sizeof(double));
    m->in_err = calloc((size_t)nl + 1, sizeof(double));
    m->range = calloc((size_t)nl + 1, sizeof(double));
    m->sel = calloc((size_t)nl + 1, sizeof *m->sel);
    return m->out_err && m->out_ordered && m->score && m->layer_err && m->in_err && m->range &&
                   m->sel
               ? S4D_OK
               : S4D_ERR_NO_MEMORY;
}

static void measure_free(measure *m)
{
    free(m->out_err);
    free(m->out_ordered);
    free(m->score);
    free(m->layer_err);
    free(m->in_err);
    free(m->range);
    free(m->sel);
    memset(m, 0, sizeof *m);
}

typedef struct ranked {
    int layer;
    double score;
    double err;
} ranked;

static int cmp_ranked(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    if (x->err != y->err)
        return x->err > y->err ? -1 : 1;
    return x->layer - y->layer;
}

static s4d_status add_moved(guard_state *gs, const char *name, int iter, const char *why)
{
    if (gs->num_moved == gs->cap_moved) {
        int cap = gs->cap_moved ? gs->cap_moved * 2 : 16;
        char **a = realloc(gs->moved, (size_t)cap * sizeof *a);
        if (a)
            gs->moved = a;
        int *b = realloc(gs->moved_iter, (size_t)cap * sizeof *b);
        if (b)
            gs->moved_iter = b;
        char **w = realloc(gs->moved_why, (size_t)cap * sizeof *w);
        if (w)
            gs->moved_why = w;
        if (!a || !b || !w)
            return S4D_ERR_NO_MEMORY;
        gs->cap_moved = cap;
    }
    gs->moved[gs->num_moved] = s4d_strdup(name);
    gs->moved_why[gs->num_moved] = s4d_strdup(why);
    gs->moved_iter[gs->num_moved] = iter;
    if (!gs->moved[gs->num_moved] || !gs->moved_why[gs->num_moved])
        return S4D_ERR_NO_MEMORY;
    gs->num_moved++;
    return S4D_OK;
}

static void fmt_err(char *b, size_t n, double e)
{
    if (isinf(e))
        snprintf(b, n, "inf");
    else if (isnan(e))
        snprintf(b, n, "nan");
    else
        snprintf(b, n, "%.3e", e);
}

/* The layer of p that is the TopK ordering output o's rows (the reference's, by name), or -1. */
static int topk_of(const guard *gd, const s4d_plan *p, int o)
{
    if (o < 0 || gd->topk[o] < 0)
        return -1;
    const char *name = gd->ref->plan->layers[gd->topk[o]].name;
    for (int i = 0; i < p->num_layers; i++)
        if (p->layers[i].name && strcmp(p->layers[i].name, name) == 0)
            return is_topk(&p->layers[i]) ? i : -1;
    return -1;
}

/* Marks in `on` TopK layer t and every layer of p that its scores (first input) depend on.
   Layers are in execution order, so one backward sweep finds them. */
static s4d_status score_path(const s4d_plan *p, int t, unsigned char *on)
{
    unsigned char *need = calloc((size_t)p->num_tensors + 1, 1);
    if (!need)
        return S4D_ERR_NO_MEMORY;
    memset(on, 0, (size_t)p->num_layers);
    on[t] = 1;
    need[p->layers[t].inputs[0]] = 1;
    for (int li = t - 1; li >= 0; li--) {
        const s4d_plan_layer *l = &p->layers[li];
        int hit = 0;
        for (int j = 0; j < l->num_outputs && !hit; j++)
            hit = need[l->outputs[j]];
        if (!hit)
            continue;
        on[li] = 1;
        for (int j = 0; j < l->num_inputs; j++)
            if (l->inputs[j] >= 0)
                need[l->inputs[j]] = 1;
    }
    free(need);
    return S4D_OK;
}

/* "TopK 'x' selects 2 of its 12 rows other than float32 (float32's 12th and 13th scores
   1.2e-02 apart at 0.5; float16 moves the scores there by 3.1e-02)" */
static void selection_str(const s4d_plan *p, int t, const s4d_selection_diff *d, char *b,
                          size_t n)
{
    char gap[32];
    if (isinf(d->margin))
        snprintf(gap, sizeof gap, "no (k+1)-th");
    else
        snprintf(gap, sizeof gap, "%.3g apart", d->margin);
    snprintf(b, n,
             "TopK '%s' selects %lld of its %lld rows other than float32 (float32's k-th and "
             "(k+1)-th scores %s at %.4g; float16 moves the scores there by %.3g)",
             p->layers[t].name, (long long)d->other, (long long)d->k, gap, d->kth, d->err);
}

s4d_status s4d_precision_guard(const void *data, size_t size, const s4d_build_options *o,
                               const s4d_build_config *cfg, s4d_engine **out, char *err,
                               size_t errsz)
{
    *out = NULL;
    guard_state gs;
    memset(&gs, 0, sizeof gs);
    gs.o = o;
    gs.cfg = cfg;
    gs.data = data;
    gs.size = size;
    calib cal;
    memset(&cal, 0, sizeof cal);
    guard gd;
    memset(&gd, 0, sizeof gd);
    measure m, first;
    memset(&m, 0, sizeof m);
    memset(&first, 0, sizeof first);
    double *tol = NULL;
    unsigned char *own_tol = NULL; /* outputs given their own tolerance */
    s4d_engine *ref = NULL, *cur = NULL, *trial = NULL;
    s4d_text rep = {0};
    s4d_status st;
    double default_tol = o->accuracy > 0 ? o->accuracy : DEFAULT_TOLERANCE;

    /* The float32 reference: the same pipeline without the precision pass. */
    s4d_build_config c32 = *cfg;
    /* The same convolution layouts as the candidates, so that layers compare element by element. */
    c32.conv_layout = s4d_build_nhwc(cfg) ? S4D_CONV_LAYOUT_NHWC : S4D_CONV_LAYOUT_NCHW;
    c32.fp16 = 0;
    c32.layer_precisions = NULL;
    c32.num_layer_precisions = 0;
    progress("building the float32 reference");
    st = s4d_engine_build_config(data, size, &c32, &ref, err, errsz);
    if (st != S4D_OK)
        goto done;
    gd.ref = ref;
    st = calib_load(o->calib_dir, ref, &cal, err, errsz);
    if (st != S4D_OK)
        goto done;
    gd.cal = &cal;
    int no = s4d_engine_num_outputs(ref);
    tol = malloc(((size_t)no + 1) * sizeof *tol);
    own_tol = calloc((size_t)no + 1, 1);
    if (!tol || !own_tol) {
        st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
        goto done;
    }
    for (int i = 0; i < no; i++)
        tol[i] = default_tol;
    for (int k = 0; k < o->num_output_tolerances; k++) {
        const s4d_output_tolerance *ot = &o->output_tolerances[k];
        int found = -1;
        for (int i = 0; ot->output && i < no; i++) {
            s4d_tensor_info ti;
            s4d_engine_output_info(ref, i, &ti);
            if (strcmp(ti.name, ot->output) == 0)
                found = i;
        }
        if (found < 0) {
            st = s4d_fmt_err(err, errsz, S4D_ERR_NOT_FOUND,
                             "accuracy for output '%s': the network has no such output",
                             ot->output ? ot->output : "(null)");
            goto done;
        }
        if (!(ot->rel_l2 > 0)) {
            st = s4d_fmt_err(err, errsz, S4D_ERR_INVALID_ARG,
                             "accuracy for output '%s' is %g; give a relative L2 > 0", ot->output,
                             ot->rel_l2);
            goto done;
        }
        tol[found] = ot->rel_l2;
        own_tol[found] = 1;
    }
    st = resolve_metrics(&gd, o, err, errsz);
    if (st == S4D_OK)
        st = reference_outputs(&gd, err, errsz);
    if (st == S4D_OK)
        st = find_state(&gd, err, errsz);
    if (st != S4D_OK)
        goto done;

    s4d_text_add(&rep, "fp16 accuracy guard: relative L2 tolerance %g per output", default_tol);
    for (int k = 0; k < o->num_output_tolerances; k++)
        s4d_text_add(&rep, "%s'%s' %g", k ? ", " : " (", o->output_tolerances[k].output,
                 o->output_tolerances[k].rel_l2);
    s4d_text_add(&rep, "%s; %d calibration set%s from %s\n", o->num_output_tolerances ? ")" : "",
             cal.num_sets, cal.num_sets == 1 ? "" : "s", o->calib_dir);
    if (gd.num_state > 0 && cal.num_sets > 1)
        s4d_text_add(&rep, "carried state: %d output%s feed%s the input of the same name without "
                           "'_out'; the sets also run as one sequence in name order, each engine "
                           "carrying its own state\n",
                     gd.num_state, gd.num_state == 1 ? "" : "s", gd.num_state == 1 ? "s" : "");
    /* The general tolerance says nothing about what later frames tolerate in the state:
       a tracker's decisions may need far less (the Sparse4Dv3 head's anchors: 5e-6). */
    int general = 0;
    for (int i = 0; gd.num_state > 0 && cal.num_sets > 1 && i < no; i++) {
        if (gd.state_in[i] < 0 || own_tol[i] || !gd.ref_outputs[i]) /* [i]: set 0, compared */
            continue;
        s4d_tensor_info ti;
        s4d_engine_output_info(ref, i, &ti);
        s4d_text_add(&rep, "%s'%s'", general++ ? ", " : "carried state at the general tolerance: ",
                     ti.name);
    }
    if (general)
        s4d_text_add(&rep, " (%g, as every output); what the state may differ by is what the "
                           "following frames' results tolerate, which may be far less: give "
                           "%s its own (--accuracy=%g,NAME:X; docs/precision.md, \"How "
                           "accurate the carried state must be\")\n",
                     default_tol, general == 1 ? "it" : "each", default_tol);

    progress("building the fp16 candidate (iteration 0)");
    st = build_candidate(&gs, 0, &cur, err, errsz);
    if (st != S4D_OK)
        goto done;
    if ((st = measure_alloc(&m, no, cur->plan->num_layers)) != S4D_OK ||
        (st = measure_alloc(&first, no, 1)) != S4D_OK) {
        s4d_fmt_err(err, errsz, st, "out of memory");
        goto done;
    }
    st = evaluate(&gd, cur, &m, err, errsz);
    if (st != S4D_OK)
        goto done;
    memcpy(first.out_err, m.out_err, (size_t)no * sizeof(double));
    memcpy(first.out_ordered, m.out_ordered, (size_t)no * sizeof(double));
    int iter = 0, k = 1, k_sel = 1, last_batch = 0;
    /* The stopping rule: the TopK (reference layer) whose changed selection is followed,
       the best worst-output error over tolerance since, and how many iterations in a row
       did not reduce it (outputs of one selection may take turns at being the worst). */
    int stall_topk = -1, stall = 0, whole_path = 0;
    double stall_best = 0;
    char e1[32], e2[32];
    for (;;) {
        double worst;
        int wo = worst_output(&m, tol, no, &worst);
        s4d_tensor_info wi;
        memset(&wi, 0, sizeof wi);
        wi.name = "";
        if (wo >= 0)
            s4d_engine_output_info(ref, wo, &wi);
        fmt_err(e1, sizeof e1, worst);
        s4d_text_add(&rep, "iteration %d: %d layer%s kept in fp32 by the guard; worst output '%s' "
                       "rel_l2 %s\n",
                 iter, gs.num_moved, gs.num_moved == 1 ? "" : "s", wi.name, e1);
        progress("iteration %d: %d layers in fp32 by the guard; worst output '%s' rel_l2 %s",
                 iter, gs.num_moved, wi.name, e1);
        if (all_ok(&m, tol, no))
            break;
        const s4d_plan *p = cur->plan;
        /* A worst output whose rows follow a TopK that selected other rows than float32:
           the error is in the selection, so the layers computing its scores go first. */
        int sel_t = topk_of(&gd, p, wo);
        if (sel_t >= 0 && m.sel[sel_t].other <= 0)
            sel_t = -1;
        char selmsg[512] = "";
        if (sel_t >= 0) {
            selection_str(p, sel_t, &m.sel[sel_t], selmsg, sizeof selmsg);
            double ratio = m.out_err[wo] / tol[wo];
            if (gd.topk[wo] == stall_topk && !(ratio < STALL_GAIN * stall_best)) {
                stall++;
            } else {
                stall_topk = gd.topk[wo];
                stall_best = ratio;
                stall = 0;
            }
        } else {
            stall_topk = -1;
            stall = 0;
        }
        unsigned char *on = NULL;
        if (sel_t >= 0) {
            on = malloc((size_t)p->num_layers + 1);
            if (!on || score_path(p, sel_t, on) != S4D_OK) {
                free(on);
                st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
                goto done;
            }
        }
        /* Rank the float16 layers the guard may move (those on the score path only, while
           a selection is followed and any is left there). */
        ranked *r = malloc(((size_t)p->num_layers + 1) * sizeof *r);
        if (!r) {
            free(on);
            st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
            goto done;
        }
        int nr = 0, on_path = 0;
        for (int pass = on ? 0 : 1; pass < 2 && !nr; pass++) {
            for (int i = 0; i < p->num_layers; i++) {
                const s4d_plan_layer *l = &p->layers[i];
                int half = 0;
                for (int j = 0; j < l->num_outputs; j++)
                    half |= p->tensors[l->outputs[j]].dtype == S4D_DTYPE_FLOAT16;
                if (!half || l->kind == S4D_LAYER_COPY || strncmp(l->name, "cast ", 5) == 0 ||
                    pinned(o, l->name) || (pass == 0 && !on[i]))
                    continue;
                r[nr++] = (ranked){i, m.score[i], m.layer_err[i]};
            }
            on_path = pass == 0 && nr > 0;
        }
        free(on);
        if (sel_t >= 0) {
            s4d_text_add(&rep, "iteration %d: output '%s': %s%s\n", iter, wi.name, selmsg,
                         on_path ? "; the layers computing those scores go first"
                                 : "; no float16 layer the guard may change computes them");
            progress("output '%s': %s", wi.name, selmsg);
        }
        /* The stopping rule: the error comes from rows another selection replaced and
           moving layers no longer reduces it (or nothing on the score path is left). The
           first time, the rest of the score path goes to float32 at once (a float32 score
           path selects the float32 rows unless a pin keeps part of it in float16); only
           when that does not help either does the build fail. */
        const int stalled = sel_t >= 0 && (stall >= STALL_ITERATIONS || (stall >= 1 && !on_path));
        const int move_path = stalled && on_path && !whole_path;
        if (move_path) {
            whole_path = 1;
            stall = 0;
            s4d_text_add(&rep, "iteration %d: moving the %d float16 layer%s left on the score path "
                           "of TopK '%s' at once\n",
                     iter + 1, nr, nr == 1 ? "" : "s", p->layers[sel_t].name);
            progress("moving the %d float16 layers left on the score path at once", nr);
        } else if (stalled) {
            free(r);
            const s4d_selection_diff *d = &m.sel[sel_t];
            /* Under the 512 bytes of an error message, with long names. */
            st = s4d_fmt_err(
                err, errsz, S4D_ERR_UNSUPPORTED,
                "fp16 accuracy guard: output '%s' stays at rel_l2 %s above its tolerance %g "
                "(%d iteration%s without improvement, %d layer%s moved to fp32): the error comes "
                "from a selection near a tie: TopK '%s' selects %lld of its %lld rows other than "
                "float32 (float32's k-th and (k+1)-th scores %.3g apart at %.4g, float16 moves "
                "them by %.3g). Accept it with --accuracy=%s:inf, or build without fp16",
                wi.name, e1, tol[wo], stall, stall == 1 ? "" : "s", gs.num_moved,
                gs.num_moved == 1 ? "" : "s", p->layers[sel_t].name, (long long)d->other,
                (long long)d->k, d->margin, d->kth, d->err, wi.name);
            progress("stopping: %s", err);
            goto done;
        }
        if (!nr) {
            free(r);
            s4d_text_add(&rep, "every layer the guard may change is fp32 now; output '%s' still has "
                           "rel_l2 %s above its tolerance %g (layers pinned to fp16 or the "
                           "float32 network itself)\n",
                     wi.name, e1, wo >= 0 ? tol[wo] : default_tol);
            break;
        }
        qsort(r, (size_t)nr, sizeof *r, cmp_ranked);
        iter++;
        /* Layers that break float16 outright (overflow, NaN) all go at once; otherwise
           the top k, k doubling, so that the rebuilds grow with log(moved). */
        int broken = 0;
        while (broken < nr && isinf(r[broken].score))
            broken++;
        int *kk = on_path ? &k_sel : &k;
        int take = move_path ? nr : broken ? broken : (*kk < nr ? *kk : nr);
        if (!broken && !move_path)
            *kk *= 2;
        for (int q = 0; q < take; q++) {
            const s4d_plan_layer *l = &p->layers[r[q].layer];
            char why[256];
            fmt_err(e1, sizeof e1, m.layer_err[r[q].layer]);
            fmt_err(e2, sizeof e2, m.in_err[r[q].layer]);
            if (m.range[r[q].layer] > FP16_MAX)
                snprintf(why, sizeof why,
                         "iteration %d: its float32 outputs reach %.4g, past float16's 65504",
                         iter, m.range[r[q].layer]);
            else
                snprintf(why, sizeof why,
                         "iteration %d: %s%s%sits outputs' error %s from inputs' %s "
                         "(amplification %.3g)",
                         iter, on_path ? "on the score path of TopK '" : "",
                         on_path ? p->layers[sel_t].name : "", on_path ? "'; " : "", e1, e2,
                         r[q].score);
            if (add_moved(&gs, l->name, iter, why) != S4D_OK) {
                free(r);
                st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
                goto done;
            }
            progress("  moving '%s' (%s) to fp32: %s", l->name, l->op_type, why);
        }
        free(r);
        last_batch = broken ? 0 : take;
        s4d_engine_destroy(cur);
        cur = NULL;
        progress("rebuilding (iteration %d)", iter);
        st = build_candidate(&gs, gs.num_moved, &cur, err, errsz);
        if (st != S4D_OK)
            goto done;
        measure_free(&m);
        if ((st = measure_alloc(&m, no, cur->plan->num_layers)) != S4D_OK) {
            s4d_fmt_err(err, errsz, st, "out of memory");
            goto done;
        }
        st = evaluate(&gd, cur, &m, err, errsz);
        if (st != S4D_OK)
            goto done;
    }
    /* Put back the less suspicious part of the last batch when it is not needed. */
    if (last_batch > 1 && all_ok(&m, tol, no)) {
        int back = last_batch / 2;
        for (int trials = 0; back >= 1 && trials < MAX_PUT_BACK_TRIALS; trials++, back /= 2) {
            int keep = gs.num_moved - back;
            progress("trying to put back %d layer%s", back, back == 1 ? "" : "s");
            st = build_candidate(&gs, keep, &trial, err, errsz);
            if (st != S4D_OK)
                goto done;
            measure tm;
            memset(&tm, 0, sizeof tm);
            if ((st = measure_alloc(&tm, no, trial->plan->num_layers)) == S4D_OK)
                st = evaluate(&gd, trial, &tm, err, errsz);
            if (st != S4D_OK) {
                measure_free(&tm);
                goto done;
            }
            if (all_ok(&tm, tol, no)) {
                for (int q = keep; q < gs.num_moved; q++) {
                    s4d_text_add(&rep, "put back in fp16: '%s' (not needed)\n", gs.moved[q]);
                    free(gs.moved[q]);
                    free(gs.moved_why[q]);
                }
                gs.num_moved = keep;
                s4d_engine_destroy(cur);
                cur = trial;
                trial = NULL;
                measure_free(&m);
                m = tm;
                break;
            }
            measure_free(&tm);
            s4d_engine_destroy(trial);
            trial = NULL;
        }
    }
    for (int i = 0; i < no; i++) {
        s4d_tensor_info ti;
        s4d_engine_output_info(ref, i, &ti);
        if (ti.dtype != S4D_DTYPE_FLOAT32 && !gd.forced[i])
            continue; /* not compared */
        char how[400];
        metric_str(&gd, i, how, sizeof how);
        fmt_err(e1, sizeof e1, first.out_err[i]);
        fmt_err(e2, sizeof e2, m.out_err[i]);
        s4d_text_add(&rep, "output '%s': rel_l2 before %s, after %s (tolerance %g) %s [%s", ti.name,
                     e1, e2, tol[i], m.out_err[i] <= tol[i] ? "ok" : "ABOVE TOLERANCE", how);
        if (gd.axis[i] >= 0) {
            fmt_err(e1, sizeof e1, first.out_ordered[i]);
            fmt_err(e2, sizeof e2, m.out_ordered[i]);
            s4d_text_add(&rep, "; element by element %s before, %s after", e1, e2);
            int t = topk_of(&gd, cur->plan, i);
            if (t >= 0 && m.sel[t].other > 0)
                s4d_text_add(&rep, "; TopK '%s' selects %lld of its %lld rows other than float32",
                             cur->plan->layers[t].name, (long long)m.sel[t].other,
                             (long long)m.sel[t].k);
        }
        s4d_text_add(&rep, "]\n");
    }
    for (int i = 0; i < gs.num_moved; i++)
        s4d_text_add(&rep, "moved to fp32: '%s' (%s)\n", gs.moved[i], gs.moved_why[i]);
    if (!gs.num_moved)
        s4d_text_add(&rep, "moved to fp32: none\n");
    s4d_text_add(&rep, "builds: 1 float32 reference + %d fp16 candidate%s\n", gs.builds,
             gs.builds == 1 ? "" : "s");
    if (cur->plan->precision_report)
        s4d_text_put(&rep, cur->plan->precision_report);
    if (rep.failed) {
        st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
        goto done;
    }
    free(cur->plan->precision_report);
    cur->plan->precision_report = rep.s;
    rep.s = NULL;
    *out = cur;
    cur = NULL;
done:
    s4d_engine_destroy(cur);
    s4d_engine_destroy(trial);
    s4d_engine_destroy(ref);
    if (gd.ref_outputs)
        for (int i = 0; i < cal.num_sets * gd.num_outputs; i++)
            free(gd.ref_outputs[i]);
    free(gd.ref_outputs);
    free(gd.axis);
    free(gd.topk);
    free(gd.forced);
    free(gd.state_in);
    calib_free(&cal);
    measure_free(&m);
    measure_free(&first);
    free(tol);
    free(own_tol);
    free(rep.s);
    for (int i = 0; i < gs.num_moved; i++) {
        free(gs.moved[i]);
        free(gs.moved_why[i]);
    }
    free(gs.moved);
    free(gs.moved_iter);
    free(gs.moved_why);
    return st;
}
