/* Times cuBLASLt on the backbone's 1x1 convolutions as Y[n] = W . X[n] (row-major, NCHW),
   column-major form (no bias) and row-order form with the bias epilogue; best of the heuristic's top 16. */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

static const int S[][4] = {{64, 64, 64, 176}, {256, 64, 64, 176}, {64, 256, 64, 176}, {256, 256, 64, 176},
                           {256, 128, 64, 176}, {512, 128, 32, 88}, {128, 512, 32, 88}, {512, 256, 32, 88},
                           {1024, 256, 16, 44}, {256, 1024, 16, 44}, {1024, 512, 16, 44}, {2048, 512, 8, 22},
                           {512, 2048, 8, 22}, {2048, 256, 8, 22}};
#define CK(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { printf("  %s: status %d\n", #x, (int)s_); goto done; } } while (0)

static void setl(cublasLtMatrixLayout_t l, int row, int batch, long long stride)
{
    if (row) { int32_t o = CUBLASLT_ORDER_ROW; cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ORDER, &o, sizeof o); }
    int32_t b = batch; int64_t st = stride;
    cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b);
    cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &st, sizeof st);
}

int main(void)
{
    cublasLtHandle_t lt; cublasLtCreate(&lt);
    cudaStream_t s; cudaStreamCreate(&s);
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    const int N = 6; size_t wsz = 32 << 20; void *ws; cudaMalloc(&ws, wsz);
    for (unsigned si = 0; si < sizeof S / sizeof S[0]; si++) {
        const int cin = S[si][0], cout = S[si][1], hw = S[si][2] * S[si][3];
        float *w, *x, *y, *bias;
        cudaMalloc((void **)&w, sizeof(float) * cout * cin); cudaMalloc((void **)&x, sizeof(float) * N * cin * hw);
        cudaMalloc((void **)&y, sizeof(float) * N * cout * hw); cudaMalloc((void **)&bias, sizeof(float) * cout);
        { size_t nb = (size_t)N * cin * hw; float *h = malloc(sizeof(float) * nb);
          for (size_t i = 0; i < nb; i++) h[i] = (float)rand() / RAND_MAX - 0.5f;
          cudaMemcpy(x, h, sizeof(float) * nb, cudaMemcpyHostToDevice);
          cudaMemcpy(w, h, sizeof(float) * cout * cin, cudaMemcpyHostToDevice);
          cudaMemcpy(bias, h, sizeof(float) * cout, cudaMemcpyHostToDevice); free(h); }
        double gf = 2.0 * N * cout * cin * hw / 1e9;
        for (int row = 0; row < 2; row++) {
            cublasLtMatmulDesc_t op = NULL; cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL; cublasLtMatmulPreference_t pref = NULL;
            CK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
            if (row) {
                /* row order: D[cout, hw] = W[cout, cin] . X[cin, hw], bias per row */
                uint32_t epi = CUBLASLT_EPILOGUE_RELU_BIAS;
                CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
                CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
                CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, cout, cin, cin)); setl(la, 1, N, 0);
                CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, cin, hw, hw)); setl(lb, 1, N, (long long)cin * hw);
                CK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, cout, hw, hw)); setl(lc, 1, N, (long long)cout * hw);
            } else {
                /* column major: D^T[hw, cout] = X^T[hw, cin] . W^T[cin, cout] */
                CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, hw, cin, hw)); setl(la, 0, N, (long long)cin * hw);
                CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, cin, cout, cin)); setl(lb, 0, N, 0);
                CK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, hw, cout, hw)); setl(lc, 0, N, (long long)cout * hw);
            }
            CK(cublasLtMatmulPreferenceCreate(&pref));
            uint64_t cap = wsz; cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &cap, sizeof cap);
            uint32_t red = CUBLASLT_REDUCTION_SCHEME_MASK; cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &red, sizeof red);
            cublasLtMatmulHeuristicResult_t res[16]; int got = 0;
            cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 16, res, &got);
            float best = 1e9f; int bi = -1;
            const float one = 1.0f, zero = 0.0f;
            for (int i = 0; i < got; i++) {
                const void *A = row ? (const void *)w : (const void *)x, *B = row ? (const void *)x : (const void *)w;
                int ok = 1;
                for (int r = 0; r < 3; r++) if (cublasLtMatmul(lt, op, &one, A, la, B, lb, &zero, y, lc, y, lc, &res[i].algo, ws, wsz, s) != CUBLAS_STATUS_SUCCESS) ok = 0;
                if (!ok) continue;
                float t[21];
                for (int r = 0; r < 21; r++) {
                    cudaEventRecord(e0, s);
                    cublasLtMatmul(lt, op, &one, A, la, B, lb, &zero, y, lc, y, lc, &res[i].algo, ws, wsz, s);
                    cudaEventRecord(e1, s); cudaEventSynchronize(e1); cudaEventElapsedTime(&t[r], e0, e1);
                }
                for (int a = 0; a < 21; a++) for (int b = a + 1; b < 21; b++) if (t[b] < t[a]) { float z = t[a]; t[a] = t[b]; t[b] = z; }
                if (t[10] < best) { best = t[10]; bi = i; }
            }
            printf("cin %4d cout %4d hw %5d %s: heuristic %d, %d candidates, best #%d %.4f ms (%.1f TFLOPS)\n", cin, cout, hw,
                   row ? "row+bias+relu" : "colmajor     ", (int)hs, got, bi, best, gf / best);
        done:
            if (pref) cublasLtMatmulPreferenceDestroy(pref);
            if (la) cublasLtMatrixLayoutDestroy(la); if (lb) cublasLtMatrixLayoutDestroy(lb); if (lc) cublasLtMatrixLayoutDestroy(lc);
            if (op) cublasLtMatmulDescDestroy(op);
        }
        cudaFree(w); cudaFree(x); cudaFree(y); cudaFree(bias);
    }
    printf("error: %s\n", cudaGetErrorString(cudaDeviceSynchronize()));
    return 0;
}
