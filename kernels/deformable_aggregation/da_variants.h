/*
 * The CUDA kernel variants of deformable aggregation (internal; C). The public
 * functions run the default variant of each algo; the benchmark and the GPU
 * tests run every variant through these entry points. Every forward variant is
 * bitwise reproducible run to run; backward variants are deterministic where
 * s4d_da_cuda_bwd_variant_deterministic says so.
 *
 * The defaults can be overridden at run time, for experiments, with the
 * environment variables S4D_DA_CUDA_FWD, S4D_DA_CUDA_FWD_DET, S4D_DA_CUDA_BWD
 * and S4D_DA_CUDA_BWD_DET set to a variant name (read once, at the first call).
 */
#ifndef S4D_DA_VARIANTS_H
#define S4D_DA_VARIANTS_H

#include "s4d/deformable_aggregation.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of variants; names are short identifiers such as "items_w4_c8". */
int s4d_da_cuda_fwd_variant_count(void);
int s4d_da_cuda_bwd_variant_count(void);
const char *s4d_da_cuda_fwd_variant_name(int variant); /* NULL when out of range */
const char *s4d_da_cuda_bwd_variant_name(int variant);
/* 1 when the backward variant gives bitwise the same gradients on every run. */
int s4d_da_cuda_bwd_variant_deterministic(int variant);
/* The variant a public call with this algo runs; _half: with float16 features and output. */
int s4d_da_cuda_fwd_variant_default(s4d_da_algo algo);
int s4d_da_cuda_fwd_variant_default_half(s4d_da_algo algo);
int s4d_da_cuda_bwd_variant_default(s4d_da_algo algo);
/* Index of a variant by name, -1 when unknown. */
int s4d_da_cuda_fwd_variant_find(const char *name);
int s4d_da_cuda_bwd_variant_find(const char *name);

/*
 * Like s4d_da_forward_cuda / s4d_da_backward_cuda_algo with an explicit
 * variant. A variant that cannot take the arguments (unaligned or scalar-only
 * shapes, index ranges) runs the first kernels instead, which compute the same
 * function; *ran (when not NULL) receives the variant that actually ran.
 */
size_t s4d_da_forward_workspace_size_variant(const s4d_da_sizes *sizes, int variant);
size_t s4d_da_backward_workspace_size_variant(const s4d_da_sizes *sizes, int variant);
s4d_status s4d_da_forward_cuda_variant(const s4d_da_forward_args *args, int variant,
                                       void *workspace, void *stream, int *ran,
                                       s4d_errbuf *err);
s4d_status s4d_da_backward_cuda_variant(const s4d_da_backward_args *args, int variant,
                                        void *workspace, void *stream, int *ran,
                                        s4d_errbuf *err);

#ifdef __cplusplus
}
#endif

#endif /* S4D_DA_VARIANTS_H */
