/*
 * The CUDA entry points of the op in a build without CUDA: they check their
 * arguments like the real ones, then report S4D_ERR_UNSUPPORTED, so callers
 * link the same symbols either way. Builds with CUDA define S4D_HAVE_CUDA and
 * get da_cuda.cu instead.
 */
#include "da_internal.h"

#ifndef S4D_HAVE_CUDA

size_t s4d_da_forward_workspace_size(const s4d_da_sizes *sizes, s4d_da_algo algo)
{
    (void)sizes;
    (void)algo;
    return 0;
}

size_t s4d_da_backward_workspace_size(const s4d_da_sizes *sizes)
{
    (void)sizes;
    return 0;
}

s4d_status s4d_da_forward_cuda(const s4d_da_forward_args *args, s4d_da_algo algo, void *workspace,
                               void *stream, s4d_errbuf *err)
{
    (void)workspace;
    (void)stream;
    s4d_status st = s4d_da_check_forward(args, err);
    if (st != S4D_OK)
        return st;
    if ((st = s4d_da_check_algo(algo, err)) != S4D_OK)
        return st;
    return s4d_da_fail(err, S4D_ERR_UNSUPPORTED,
                       "deformable_aggregation: this build of s4d has no CUDA kernels");
}

s4d_status s4d_da_backward_cuda(const s4d_da_backward_args *args, void *workspace, void *stream,
                                s4d_errbuf *err)
{
    (void)workspace;
    (void)stream;
    s4d_status st = s4d_da_check_backward(args, err);
    if (st != S4D_OK)
        return st;
    return s4d_da_fail(err, S4D_ERR_UNSUPPORTED,
                       "deformable_aggregation: this build of s4d has no CUDA kernels");
}

size_t s4d_da_backward_workspace_size_algo(const s4d_da_sizes *sizes, s4d_da_algo algo)
{
    (void)sizes;
    (void)algo;
    return 0;
}

s4d_status s4d_da_backward_cuda_algo(const s4d_da_backward_args *args, s4d_da_algo algo,
                                     void *workspace, void *stream, s4d_errbuf *err)
{
    (void)workspace;
    (void)stream;
    s4d_status st = s4d_da_check_backward(args, err);
    if (st != S4D_OK)
        return st;
    if ((st = s4d_da_check_algo(algo, err)) != S4D_OK)
        return st;
    return s4d_da_fail(err, S4D_ERR_UNSUPPORTED,
                       "deformable_aggregation: this build of s4d has no CUDA kernels");
}

int s4d_cuda_available(void)
{
    return 0;
}

#else
/* ISO C forbids an empty translation unit. */
typedef int s4d_da_cuda_stub_unused;
#endif
