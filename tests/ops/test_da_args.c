/*
 * Bad arguments to the deformable aggregation API: each gets its status and
 * a message that names the argument; nothing is written on failure.
 */
#include "da_test_util.h"

static void expect(s4d_status got, s4d_status want, const s4d_errbuf *e, const char *needle,
                   const char *what)
{
    CHECK(got == want, "%s: status %s (%d), want %s (%d); msg '%s'", what,
          s4d_status_string(got), (int)got, s4d_status_string(want), (int)want, e->msg);
    if (needle)
        CHECK(strstr(e->msg, needle) != NULL, "%s: message '%s' does not name '%s'", what, e->msg,
              needle);
}

#define FWD(mutation, want, needle)                                                          \
    do {                                                                                     \
        s4d_da_forward_args a = fwd_args(&p, out);                                           \
        s4d_errbuf e = {{0}};                                                                \
        mutation;                                                                            \
        for (int64_t i = 0; i < n_out(&p); i++)                                              \
            out[i] = 7.0f;                                                                   \
        expect(s4d_da_forward_cpu(&a, 1, &e), want, &e, needle, "forward_cpu: " #mutation);  \
        if ((want) != S4D_OK)                                                                \
            CHECK(out[0] == 7.0f, "forward_cpu wrote output on failure: " #mutation);        \
        s4d_errbuf e2 = {{0}};                                                               \
        s4d_status cs = s4d_da_check_forward(&a, &e2);                                       \
        if ((want) != S4D_OK && cs == S4D_OK)                                                \
            cs = s4d_da_check_indices(&a.sizes, a.spatial_shape, a.scale_start_index, &e2);  \
        expect(cs, want, &e2, needle, "check_forward: " #mutation);                          \
        CHECK(s4d_da_forward_cpu(&a, 1, NULL) == (want), "NULL errbuf: " #mutation);         \
    } while (0)

#define BWD(mutation, want, needle)                                                          \
    do {                                                                                     \
        s4d_da_backward_args a = bwd_args(&p, gout, gf, gl, gw);                             \
        s4d_errbuf e = {{0}};                                                                \
        mutation;                                                                            \
        expect(s4d_da_backward_cpu(&a, 1, &e), want, &e, needle, "backward_cpu: " #mutation); \
    } while (0)

int main(void)
{
    problem p;
    problem_alloc(&p, 2, 3, 2, 16, 4, 5, 3, 6, 8);
    problem_locations(&p, 0.5);
    float *out = (float *)malloc(sizeof(float) * (size_t)n_out(&p));
    float *gout = (float *)malloc(sizeof(float) * (size_t)n_out(&p));
    float *gf = (float *)malloc(sizeof(float) * (size_t)n_feat(&p));
    float *gl = (float *)malloc(sizeof(float) * 2 * (size_t)n_pairs(&p));
    float *gw = (float *)malloc(sizeof(float) * (size_t)n_w(&p));
    for (int64_t i = 0; i < n_out(&p); i++)
        gout[i] = 1.0f;
    int32_t shape_backup[12], start_backup[6];
    memcpy(shape_backup, p.shape, sizeof shape_backup);
    memcpy(start_backup, p.start, sizeof start_backup);

    FWD((void)0, S4D_OK, NULL);
    {
        s4d_errbuf e = {{0}};
        expect(s4d_da_forward_cpu(NULL, 1, &e), S4D_ERR_INVALID_ARG, &e, "args", "NULL args");
        expect(s4d_da_backward_cpu(NULL, 1, &e), S4D_ERR_INVALID_ARG, &e, "args", "NULL args");
        expect(s4d_da_check_indices(NULL, p.shape, p.start, &e), S4D_ERR_INVALID_ARG, &e,
               "sizes", "NULL sizes");
    }
    FWD(a.struct_size = 8, S4D_ERR_INVALID_ARG, "struct_size");
    FWD(a.sizes.struct_size = 0, S4D_ERR_INVALID_ARG, "struct_size");
    FWD(a.sizes.batch = -1, S4D_ERR_INVALID_ARG, "batch");
    FWD(a.sizes.num_rows = -5, S4D_ERR_INVALID_ARG, "num_rows");
    FWD(a.sizes.channels = -16, S4D_ERR_INVALID_ARG, "channels");
    FWD(a.sizes.num_cams = -3, S4D_ERR_INVALID_ARG, "num_cams");
    FWD(a.sizes.num_levels = -2, S4D_ERR_INVALID_ARG, "num_levels");
    FWD(a.sizes.num_groups = -4, S4D_ERR_INVALID_ARG, "num_groups");
    FWD(a.sizes.num_anchors = -5, S4D_ERR_INVALID_ARG, "num_anchors");
    FWD(a.sizes.num_points = -3, S4D_ERR_INVALID_ARG, "num_points");
    FWD(a.sizes.num_groups = 0, S4D_ERR_SHAPE, "num_groups");
    FWD(a.sizes.num_groups = 3, S4D_ERR_SHAPE, "divisible");
    FWD(a.sizes.channels = 18, S4D_ERR_SHAPE, "divisible");
    FWD(a.sizes.num_anchors = INT64_MAX / 4, S4D_ERR_SHAPE, "overflow");
    FWD(a.sizes.num_rows = (int64_t)INT32_MAX + 1, S4D_ERR_SHAPE, "num_rows");
    FWD(a.features_dtype = S4D_DTYPE_FLOAT64, S4D_ERR_DTYPE, "features");
    FWD(a.weights_dtype = S4D_DTYPE_INT32, S4D_ERR_DTYPE, "weights");
    FWD(a.output_dtype = S4D_DTYPE_BFLOAT16, S4D_ERR_DTYPE, "output");
    FWD(a.output_dtype = (s4d_dtype)99, S4D_ERR_DTYPE, "output");
    FWD(a.features = NULL, S4D_ERR_INVALID_ARG, "features");
    FWD(a.weights = NULL, S4D_ERR_INVALID_ARG, "weights");
    FWD(a.sampling_location = NULL, S4D_ERR_INVALID_ARG, "sampling_location");
    FWD(a.spatial_shape = NULL, S4D_ERR_INVALID_ARG, "spatial_shape");
    FWD(a.scale_start_index = NULL, S4D_ERR_INVALID_ARG, "scale_start_index");
    FWD(a.output = NULL, S4D_ERR_INVALID_ARG, "output");
    /* Index tables that point outside the features. */
    FWD(p.shape[2] = 0, S4D_ERR_SHAPE, "spatial_shape[0][1]");
    memcpy(p.shape, shape_backup, sizeof shape_backup);
    FWD(p.shape[5] = -3, S4D_ERR_SHAPE, "spatial_shape[1][0]");
    memcpy(p.shape, shape_backup, sizeof shape_backup);
    FWD(p.start[1] = -1, S4D_ERR_SHAPE, "scale_start_index");
    memcpy(p.start, start_backup, sizeof start_backup);
    FWD(p.start[5] = (int32_t)p.s.num_rows, S4D_ERR_SHAPE, "outside");
    memcpy(p.start, start_backup, sizeof start_backup);
    FWD(a.sizes.num_rows = p.s.num_rows - 1, S4D_ERR_SHAPE, "outside");
    FWD(p.shape[10] = 1000, S4D_ERR_SHAPE, "map [2][1]");
    memcpy(p.shape, shape_backup, sizeof shape_backup);
    /* Empty problems succeed without reading their (absent) tensors. */
    FWD((a.sizes.num_anchors = 0, a.output = NULL, a.features = NULL), S4D_OK, NULL);

    BWD((void)0, S4D_OK, NULL);
    BWD(a.struct_size = 0, S4D_ERR_INVALID_ARG, "struct_size");
    BWD(a.sizes.channels = 15, S4D_ERR_SHAPE, "divisible");
    BWD(a.grad_output_dtype = S4D_DTYPE_INT64, S4D_ERR_DTYPE, "grad_output");
    BWD(a.features_dtype = S4D_DTYPE_UNDEFINED, S4D_ERR_DTYPE, "features");
    BWD(a.grad_output = NULL, S4D_ERR_INVALID_ARG, "grad_output");
    BWD(a.features = NULL, S4D_ERR_INVALID_ARG, "features");
    BWD(a.weights = NULL, S4D_ERR_INVALID_ARG, "weights");
    BWD(a.sampling_location = NULL, S4D_ERR_INVALID_ARG, "sampling_location");
    BWD(a.spatial_shape = NULL, S4D_ERR_INVALID_ARG, "spatial_shape");
    BWD(p.start[3] = 100000, S4D_ERR_SHAPE, "outside");
    memcpy(p.start, start_backup, sizeof start_backup);
    /* No gradient asked: nothing to read, success. */
    BWD((a.grad_features = NULL, a.grad_sampling_location = NULL, a.grad_weights = NULL,
         a.grad_output = NULL),
        S4D_OK, NULL);

    /* CUDA entry points check the same things before touching the device. */
    {
        s4d_da_forward_args a = fwd_args(&p, out);
        a.sizes.num_groups = 3;
        s4d_errbuf e = {{0}};
        expect(s4d_da_forward_cuda(&a, S4D_DA_ALGO_FAST, NULL, NULL, &e), S4D_ERR_SHAPE, &e,
               "divisible", "forward_cuda bad groups");
        a.sizes.num_groups = 4;
        expect(s4d_da_forward_cuda(&a, (s4d_da_algo)7, NULL, NULL, &e), S4D_ERR_INVALID_ARG, &e,
               "algo", "forward_cuda bad algo");
        s4d_da_backward_args b = bwd_args(&p, gout, gf, gl, gw);
        b.weights_dtype = S4D_DTYPE_INT8;
        expect(s4d_da_backward_cuda(&b, NULL, NULL, &e), S4D_ERR_DTYPE, &e, "weights",
               "backward_cuda bad dtype");
        if (!s4d_cuda_available()) {
            /* Host pointers and no device: must fail cleanly, never crash. */
            a = fwd_args(&p, out);
            s4d_status st = s4d_da_forward_cuda(&a, S4D_DA_ALGO_FAST, NULL, NULL, &e);
            CHECK(st == S4D_ERR_UNSUPPORTED || st == S4D_ERR_NO_DEVICE || st == S4D_ERR_CUDA,
                  "forward_cuda without a device: status %d", (int)st);
            CHECK(e.msg[0] != 0, "forward_cuda without a device: empty message");
        }
    }

    free(out);
    free(gout);
    free(gf);
    free(gl);
    free(gw);
    problem_free(&p);
    return test_exit("args", 0);
}
