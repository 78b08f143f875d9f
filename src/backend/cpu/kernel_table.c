/* The CPU backend's table of kernels of its own (see cpu_kernels.h). */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"

static const s4d_kernel *const own_kernels[] = {
    &s4d_cpu_kernel_conv,
    &s4d_cpu_kernel_fused_conv,
    &s4d_cpu_kernel_fused_conv_act,
    &s4d_cpu_kernel_fused_mbconv,
    &s4d_cpu_kernel_maxpool,
    &s4d_cpu_kernel_relu,
    &s4d_cpu_kernel_leaky_relu,
    &s4d_cpu_kernel_sigmoid,
    &s4d_cpu_kernel_hard_sigmoid,
    &s4d_cpu_kernel_hard_swish,
    &s4d_cpu_kernel_clip,
    &s4d_cpu_kernel_fused_pointwise,
    &s4d_cpu_kernel_global_avgpool,
    &s4d_cpu_kernel_gemm,
};

static int same_domain(const char *a, const char *b)
{
    /* "" and "ai.onnx" name the same default domain. */
    if (strcmp(a, "ai.onnx") == 0)
        a = "";
    if (strcmp(b, "ai.onnx") == 0)
        b = "";
    return strcmp(a, b) == 0;
}

const s4d_kernel *s4d_cpu_find_own_kernel(const char *domain, const char *op_type, int opset)
{
    /* A diagnostic switch: every op through its host reference, to compare or bisect. */
    const char *host_only = getenv("S4D_CPU_HOST_ONLY");
    if (host_only && host_only[0] && strcmp(host_only, "0") != 0)
        return NULL;
    const s4d_kernel *best = NULL;
    for (size_t i = 0; i < sizeof own_kernels / sizeof own_kernels[0]; i++) {
        const s4d_kernel *k = own_kernels[i];
        if (k->since_version <= opset && strcmp(k->op_type, op_type) == 0 &&
            same_domain(k->domain, domain) && (!best || k->since_version > best->since_version))
            best = k;
    }
    return best;
}
