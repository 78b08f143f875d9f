/* The v3 head's float32 products (Y[m, n] = X[m, k] W[k, n] + bias) through cuBLASLt with
   three compute types: CUBLAS_COMPUTE_32F (what a strict float32 engine runs), 32F_FAST_TF32
   and 32F_EMULATED_16BFX9 (float32 emulated with bfloat16 products). For each, the fastest of
   the heuristic's top 8 (median of 25 runs each, CUDA events) and the worst error of 64 rows
   against a float64 reference on the host, scaled by sum_k |x w| (float32 rounding: ~1e-7).
   Run with CUBLAS_EMULATION_STRATEGY=eager to ask for emulation wherever cuBLAS has it.
   nvcc -O2 -o probe fp32_emulation_probe.c -lcublasLt */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static const int S[][3] = {{900, 256, 256}, {900, 1024, 512}, {900, 256, 1024}, {900, 512, 512},
                           {1500, 512, 512}, {5400, 416, 256}, {900, 256, 512}};
static const cublasComputeType_t CT[3] = {CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32,
                                          CUBLAS_COMPUTE_32F_EMULATED_16BFX9};
static const char *CN[3] = {"32F", "32F_FAST_TF32", "32F_EMULATED_16BFX9"};

static int cmpf(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

int main(void)
{
    cublasLtHandle_t lt;
    cublasLtCreate(&lt);
    cudaStream_t s;
    cudaStreamCreate(&s);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    size_t wsz = 32 << 20;
    void *ws;
    cudaMalloc(&ws, wsz);
    srand(1);
    printf("%-18s %-22s %9s %8s %12s %s\n", "m x n x k", "compute", "us", "TFLOPS", "max err", "algos");
    for (unsigned si = 0; si < sizeof S / sizeof S[0]; si++) {
        const int m = S[si][0], n = S[si][1], k = S[si][2];
        float *hx = malloc(sizeof(float) * m * k), *hw = malloc(sizeof(float) * k * n),
              *hb = malloc(sizeof(float) * n), *hy = malloc(sizeof(float) * m * n);
        for (int i = 0; i < m * k; i++) hx[i] = (float)rand() / RAND_MAX * 2 - 1;
        for (int i = 0; i < k * n; i++) hw[i] = ((float)rand() / RAND_MAX * 2 - 1) / sqrtf((float)k);
        for (int i = 0; i < n; i++) hb[i] = (float)rand() / RAND_MAX - 0.5f;
        float *x, *w, *b, *y;
        cudaMalloc((void **)&x, sizeof(float) * m * k);
        cudaMalloc((void **)&w, sizeof(float) * k * n);
        cudaMalloc((void **)&b, sizeof(float) * n);
        cudaMalloc((void **)&y, sizeof(float) * m * n);
        cudaMemcpy(x, hx, sizeof(float) * m * k, cudaMemcpyHostToDevice);
        cudaMemcpy(w, hw, sizeof(float) * k * n, cudaMemcpyHostToDevice);
        cudaMemcpy(b, hb, sizeof(float) * n, cudaMemcpyHostToDevice);
        for (int c = 0; c < 3; c++) {
            /* column-major: Y^T[n, m] = W^T[n, k] X^T[k, m], bias per row of Y^T */
            cublasLtMatmulDesc_t op = NULL;
            cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
            cublasLtMatmulPreference_t pref = NULL;
            cublasStatus_t st = cublasLtMatmulDescCreate(&op, CT[c], CUDA_R_32F);
            uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
            if (st == CUBLAS_STATUS_SUCCESS) {
                cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
                cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof b);
                cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, n, k, n);
                cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, k, m, k);
                cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, n, m, n);
                cublasLtMatmulPreferenceCreate(&pref);
                uint64_t cap = wsz;
                cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &cap, sizeof cap);
            }
            cublasLtMatmulHeuristicResult_t res[8];
            int got = 0;
            if (st == CUBLAS_STATUS_SUCCESS)
                st = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 8, res, &got);
            float alpha = 1, beta = 0, best = 1e30f;
            int best_i = -1;
            for (int a = 0; st == CUBLAS_STATUS_SUCCESS && a < got; a++) {
                float t[25];
                int ok = 1;
                for (int r = -3; r < 25 && ok; r++) {
                    cudaEventRecord(e0, s);
                    ok = cublasLtMatmul(lt, op, &alpha, w, la, x, lb, &beta, y, lc, y, lc, &res[a].algo,
                                        ws, wsz, s) == CUBLAS_STATUS_SUCCESS;
                    cudaEventRecord(e1, s);
                    cudaEventSynchronize(e1);
                    if (r >= 0)
                        cudaEventElapsedTime(&t[r], e0, e1);
                }
                if (!ok)
                    continue;
                qsort(t, 25, sizeof t[0], cmpf);
                if (t[12] < best)
                    best = t[12], best_i = a;
            }
            double maxerr = -1;
            if (best_i >= 0) {
                cublasLtMatmul(lt, op, &alpha, w, la, x, lb, &beta, y, lc, y, lc, &res[best_i].algo, ws,
                               wsz, s);
                cudaStreamSynchronize(s);
                cudaMemcpy(hy, y, sizeof(float) * m * n, cudaMemcpyDeviceToHost);
                for (int i = 0; i < 64; i++) {
                    int row = (int)((long long)i * (m - 1) / 63);
                    for (int j = 0; j < n; j++) {
                        double ref = hb[j], scale = fabs(hb[j]);
                        for (int q = 0; q < k; q++) {
                            ref += (double)hx[(size_t)row * k + q] * hw[(size_t)q * n + j];
                            scale += fabs((double)hx[(size_t)row * k + q] * hw[(size_t)q * n + j]);
                        }
                        double e = fabs(hy[(size_t)row * n + j] - ref) / scale;
                        maxerr = e > maxerr ? e : maxerr;
                    }
                }
            }
            char shape[32];
            snprintf(shape, sizeof shape, "%dx%dx%d", m, n, k);
            if (best_i < 0)
                printf("%-18s %-22s %9s %8s %12s status %d, %d algos\n", shape, CN[c], "-", "-", "-", (int)st, got);
            else
                printf("%-18s %-22s %9.2f %8.1f %12.3e %d\n", shape, CN[c], best * 1e3,
                       2.0 * m * n * k / (best * 1e-3) / 1e12, maxerr, got);
            if (pref) cublasLtMatmulPreferenceDestroy(pref);
            if (la) cublasLtMatrixLayoutDestroy(la);
            if (lb) cublasLtMatrixLayoutDestroy(lb);
            if (lc) cublasLtMatrixLayoutDestroy(lc);
            if (op) cublasLtMatmulDescDestroy(op);
        }
        cudaFree(x); cudaFree(w); cudaFree(b); cudaFree(y);
        free(hx); free(hw); free(hb); free(hy);
    }
    return 0;
}
