/* Einsum against a direct float64 sum over every letter assignment. */
#include "op_test.h"

/* Reference: equation with explicit output, letters a-z only, <= 2 operands. */
static void ref_einsum(const char *eq, int nops, const float *const *ops, int64_t *size, double *out, int64_t nout)
{
    char terms[3][16];
    int nt = 0, len = 0;
    for (const char *s = eq;; s++) {
        if (*s == ',' || *s == '-' || *s == '\0') {
            terms[nt][len] = '\0';
            nt++;
            len = 0;
            if (*s == '-')
                s++;
            if (*s == '\0')
                break;
            continue;
        }
        terms[nt][len++] = *s;
    }
    const char *outt = terms[nops];
    int letters[26], nl = 0;
    for (int c = 0; c < 26; c++)
        if (size[c] > 0 && strchr(eq, 'a' + c))
            letters[nl++] = c;
    memset(out, 0, sizeof(double) * (size_t)nout);
    int64_t total = 1;
    for (int i = 0; i < nl; i++)
        total *= size[letters[i]];
    int64_t val[26];
    for (int64_t idx = 0; idx < total; idx++) {
        int64_t r = idx;
        for (int i = nl - 1; i >= 0; i--) {
            val[letters[i]] = r % size[letters[i]];
            r /= size[letters[i]];
        }
        double prod = 1.0;
        for (int o = 0; o < nops; o++) {
            int64_t off = 0;
            for (const char *t = terms[o]; *t; t++)
                off = off * size[*t - 'a'] + val[*t - 'a'];
            prod *= ops[o][off];
        }
        int64_t off = 0;
        for (const char *t = outt; *t; t++)
            off = off * size[*t - 'a'] + val[*t - 'a'];
        out[off] += prod;
    }
}

static void check(const char *eq, int nops, const char *ta, const char *tb, const char *to, int64_t *size)
{
    const char *tt[2] = {ta, tb};
    float *ops[2] = {NULL, NULL};
    s4d_tensor in[2];
    for (int o = 0; o < nops; o++) {
        int64_t d[8], n = 1;
        int r = (int)strlen(tt[o]);
        for (int i = 0; i < r; i++) {
            d[i] = size[tt[o][i] - 'a'];
            n *= d[i];
        }
        ops[o] = t_rand_buf(n, -1, 1);
        in[o] = t_tensor(S4D_DTYPE_FLOAT32, ops[o], r, d);
    }
    int64_t nout = 1;
    for (const char *t = to; *t; t++)
        nout *= size[*t - 'a'];
    double *ref = malloc(sizeof(double) * (size_t)nout);
    ref_einsum(eq, nops, (const float *const *)ops, size, ref, nout);
    s4d_attr at[1] = {t_attr_string("equation", eq)};
    s4d_tensor o[1];
    s4d_status st = t_run_op("Einsum", 12, in, nops, at, 1, o, 1);
    T_CHECK(st == S4D_OK, "einsum %s: %s", eq, t_err);
    if (st == S4D_OK) {
        T_CHECK(o[0].rank == (int)strlen(to), "einsum %s rank", eq);
        T_CLOSE(o[0].data, ref, nout, 1e-5, 1e-4, "einsum %s values", eq);
    }
    t_free_outputs(o, 1);
    free(ops[0]);
    free(ops[1]);
    free(ref);
}

int main(void)
{
    int64_t s[26] = {0};
    s['b' - 'a'] = 2;
    s['h' - 'a'] = 3;
    s['q' - 'a'] = 5;
    s['k' - 'a'] = 6;
    s['d' - 'a'] = 4;
    check("bhqd,bhkd->bhqk", 2, "bhqd", "bhkd", "bhqk", s);
    check("bhqk,bhkd->bhqd", 2, "bhqk", "bhkd", "bhqd", s);
    check("bqhd,bkhd->bhqk", 2, "bqhd", "bkhd", "bhqk", s);
    check("bhqk,bkhd->bqhd", 2, "bhqk", "bkhd", "bqhd", s);
    check("bhdq,bhdk->bhkq", 2, "bhdq", "bhdk", "bhkq", s);
    check("qd,kd->qk", 2, "qd", "kd", "qk", (int64_t[26]){['q' - 'a'] = 7, ['k' - 'a'] = 3, ['d' - 'a'] = 5});
    /* A letter summed away on one side only, an outer product, a reduction. */
    check("bqd,bk->bqk", 2, "bqd", "bk", "bqk", s);
    check("q,k->qk", 2, "q", "k", "qk", s);
    check("bhqd->bdq", 1, "bhqd", NULL, "bdq", s);
    check("qd,qd->q", 2, "qd", "qd", "q", s);

    /* Implicit output: "ij,jk" is "ij,jk->ik". */
    {
        int64_t ad[2] = {3, 4}, bd[2] = {4, 2};
        float *a = t_rand_buf(12, -1, 1), *b = t_rand_buf(8, -1, 1);
        double ref[6];
        for (int i = 0; i < 3; i++)
            for (int k = 0; k < 2; k++) {
                ref[i * 2 + k] = 0;
                for (int j = 0; j < 4; j++)
                    ref[i * 2 + k] += (double)a[i * 4 + j] * b[j * 2 + k];
            }
        s4d_attr at[1] = {t_attr_string("equation", "ij,jk")};
        s4d_tensor in[2] = {t_tensor(S4D_DTYPE_FLOAT32, a, 2, ad), t_tensor(S4D_DTYPE_FLOAT32, b, 2, bd)}, o[1];
        T_CHECK(t_run_op("Einsum", 12, in, 2, at, 1, o, 1) == S4D_OK, "implicit: %s", t_err);
        T_CHECK(o[0].rank == 2 && o[0].dims[0] == 3 && o[0].dims[1] == 2, "implicit dims");
        T_CLOSE(o[0].data, ref, 6, 1e-6, 1e-5, "implicit values");
        t_free_outputs(o, 1);
        free(a);
        free(b);
    }
    /* float64 operands, permuted output (i and k swapped). */
    {
        int64_t ad[3] = {2, 3, 4}, bd[3] = {2, 4, 5};
        double a[24], b[40], ref[30];
        for (int i = 0; i < 24; i++)
            a[i] = t_randf(-1, 1);
        for (int i = 0; i < 40; i++)
            b[i] = t_randf(-1, 1);
        for (int n = 0; n < 2; n++)
            for (int i = 0; i < 3; i++)
                for (int k = 0; k < 5; k++) {
                    double acc = 0;
                    for (int j = 0; j < 4; j++)
                        acc += a[(n * 3 + i) * 4 + j] * b[(n * 4 + j) * 5 + k];
                    ref[(n * 5 + k) * 3 + i] = acc;
                }
        s4d_attr at[1] = {t_attr_string("equation", "bij,bjk->bki")};
        s4d_tensor in[2] = {t_tensor(S4D_DTYPE_FLOAT64, a, 3, ad), t_tensor(S4D_DTYPE_FLOAT64, b, 3, bd)}, o[1];
        T_CHECK(t_run_op("Einsum", 12, in, 2, at, 1, o, 1) == S4D_OK, "f64: %s", t_err);
        double worst = 0;
        for (int i = 0; i < 30; i++)
            worst = fmax(worst, fabs(((double *)o[0].data)[i] - ref[i]));
        T_CHECK(o[0].dtype == S4D_DTYPE_FLOAT64 && worst < 1e-12, "f64 einsum values, worst %g", worst);
        t_free_outputs(o, 1);
        in[1].dtype = S4D_DTYPE_FLOAT32;
        T_EXPECT_FAIL(t_run_op("Einsum", 12, in, 2, at, 1, o, 1), S4D_ERR_DTYPE, "mixed dtypes");
    }
    /* Errors. */
    float buf[64] = {1};
    int64_t d2[2] = {3, 4}, d2b[2] = {5, 4};
    s4d_tensor in[2] = {t_tensor(S4D_DTYPE_FLOAT32, buf, 2, d2), t_tensor(S4D_DTYPE_FLOAT32, buf, 2, d2b)}, o[1];
    s4d_attr bad1[1] = {t_attr_string("equation", "ij,ij->ij")};
    T_EXPECT_FAIL(t_run_op("Einsum", 12, in, 2, bad1, 1, o, 1), S4D_ERR_SHAPE, "letter size mismatch");
    s4d_attr bad2[1] = {t_attr_string("equation", "...j,kj->k")};
    T_EXPECT_FAIL(t_run_op("Einsum", 12, in, 2, bad2, 1, o, 1), S4D_ERR_UNSUPPORTED, "ellipsis");
    s4d_attr bad3[1] = {t_attr_string("equation", "ij,kj->ix")};
    T_EXPECT_FAIL(t_run_op("Einsum", 12, in, 2, bad3, 1, o, 1), S4D_ERR_INVALID_ARG, "unknown output letter");
    s4d_attr bad4[1] = {t_attr_string("equation", "ijk,kj->i")};
    T_EXPECT_FAIL(t_run_op("Einsum", 12, in, 2, bad4, 1, o, 1), S4D_ERR_SHAPE, "rank vs term");
    s4d_attr bad5[1] = {t_attr_string("equation", "ii,kj->i")};
    T_EXPECT_FAIL(t_run_op("Einsum", 12, in, 2, bad5, 1, o, 1), S4D_ERR_UNSUPPORTED, "diagonal");
    T_EXPECT_FAIL(t_run_op("Einsum", 12, in, 2, NULL, 0, o, 1), S4D_ERR_INVALID_ARG, "no equation");
    return t_finish("test_einsum");
}
