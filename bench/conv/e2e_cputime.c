/*
 * Runs a built engine on one input and reports, per inference, the process's
 * CPU time next to the wall clock: on a shared machine the CPU time leaves
 * out the time other processes hold the cores. A benchmark, not a test.
 *
 *   s4d_e2e_cputime MODEL.onnx INPUT.npy THREADS ITERATIONS WARMUP
 *
 * The input is the model's first input (float32, C order). Prints one JSON
 * line with the median and minimum of each. On more than one thread the CPU
 * time is summed over the threads (it shows the cost of the split, not the
 * latency).
 *
 * The warm-up runs WARMUP times and until 0.25 s have passed since the
 * program started: with OPENBLAS_NUM_THREADS above 1, OpenBLAS's worker
 * threads spin for about 0.1 s after they start (2^28 cycles), holding a core
 * that the engine's second thread then waits for; a few runs of a small
 * network (MobileNetV2 on 2 threads: 4.7 ms wall in the first 0.1 s, 3.6 ms
 * after) would otherwise time that start-up instead of the steady state.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "s4d/engine.h"

static double now_ms(clockid_t c)
{
    struct timespec t;
    clock_gettime(c, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: %s MODEL.onnx INPUT.npy THREADS ITERATIONS WARMUP\n", argv[0]);
        return 2;
    }
    const double t_start = now_ms(CLOCK_MONOTONIC);
    const int threads = atoi(argv[3]), iters = atoi(argv[4]), warm = atoi(argv[5]);
    if (iters < 1 || iters > 1000 || warm < 0) {
        fprintf(stderr, "s4d_e2e_cputime: iterations must be 1 to 1000, warm-up >= 0\n");
        return 2;
    }
    s4d_errbuf err;
    s4d_engine *eng = NULL;
    if (s4d_engine_build_onnx_file(argv[1], NULL, &eng, &err) != S4D_OK) {
        fprintf(stderr, "s4d_e2e_cputime: %s\n", err.msg);
        return 1;
    }
    s4d_context_options co;
    s4d_context_options_init(&co);
    co.num_threads = threads;
    s4d_context *ctx = NULL;
    if (s4d_context_create(eng, &co, &ctx, &err) != S4D_OK) {
        fprintf(stderr, "s4d_e2e_cputime: %s\n", err.msg);
        return 1;
    }
    s4d_tensor_info in;
    s4d_engine_input_info(eng, 0, &in);
    char *x = malloc(in.bytes);
    FILE *f = fopen(argv[2], "rb");
    /* .npy: the data is the file's last in.bytes bytes */
    if (!x || !f || fseek(f, -(long)in.bytes, SEEK_END) != 0 || fread(x, 1, in.bytes, f) != in.bytes) {
        fprintf(stderr, "s4d_e2e_cputime: cannot read %zu bytes of input from %s\n", in.bytes, argv[2]);
        return 1;
    }
    fclose(f);
    if (s4d_context_bind(ctx, in.name, in.dtype, in.rank, in.dims, x) != S4D_OK) {
        fprintf(stderr, "s4d_e2e_cputime: %s\n", s4d_context_errmsg(ctx));
        return 1;
    }
    double *cpu = malloc(sizeof(double) * (size_t)iters), *wall = malloc(sizeof(double) * (size_t)iters);
    for (int done = 0; done < warm || now_ms(CLOCK_MONOTONIC) - t_start < 250.0; done++)
        if (s4d_context_run(ctx, NULL) != S4D_OK) {
            fprintf(stderr, "s4d_e2e_cputime: %s\n", s4d_context_errmsg(ctx));
            return 1;
        }
    for (int i = warm; i < warm + iters; i++) {
        double c = now_ms(CLOCK_PROCESS_CPUTIME_ID), w = now_ms(CLOCK_MONOTONIC);
        if (s4d_context_run(ctx, NULL) != S4D_OK) {
            fprintf(stderr, "s4d_e2e_cputime: %s\n", s4d_context_errmsg(ctx));
            return 1;
        }
        if (i >= warm) {
            cpu[i - warm] = now_ms(CLOCK_PROCESS_CPUTIME_ID) - c;
            wall[i - warm] = now_ms(CLOCK_MONOTONIC) - w;
        }
    }
    qsort(cpu, (size_t)iters, sizeof(double), cmp_double);
    qsort(wall, (size_t)iters, sizeof(double), cmp_double);
    printf("{\"runtime\":\"s4d\",\"threads\":%d,\"iterations\":%d,\"cpu_median_ms\":%.3f,\"cpu_min_ms\":%.3f,"
           "\"wall_median_ms\":%.3f,\"wall_min_ms\":%.3f}\n",
           threads, iters, cpu[iters / 2], cpu[0], wall[iters / 2], wall[0]);
    free(cpu);
    free(wall);
    free(x);
    s4d_context_destroy(ctx);
    s4d_engine_destroy(eng);
    return 0;
}
