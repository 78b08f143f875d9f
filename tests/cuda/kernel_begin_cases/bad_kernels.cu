// Not compiled: input for check_kernel_begin.py's own test (cuda_kernels.begin_check_catches).
// Two of the three kernels break the rule.
__global__ void reads_before_waiting(const float *x, float *y)
{
    y[0] = x[0];
}

__global__ void constants_first_never_waits(const float *w, float *y)
{
    S4D_KERNEL_BEGIN_CONSTANTS_FIRST();
    y[0] = w[0];
}

__global__ void constants_first_then_waits(const float *w, const float *x, float *y)
{
    S4D_KERNEL_BEGIN_CONSTANTS_FIRST();
    const float c = w[0];
    S4D_KERNEL_WAIT();
    y[0] = c * x[0];
}
