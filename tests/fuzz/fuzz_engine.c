/*
 * Fuzz target: engine file bytes -> load, save/load round trip, one run on
 * generated inputs.
 *
 * Random bytes almost never carry a valid checksum, which would stop every
 * input at the header; the target therefore rewrites the header's body size
 * and checksum (format version 2: u64 at offsets 16 and 24, FNV-1a 64 of the
 * bytes after the 40-byte header) before loading, so the fuzzer explores the
 * body's parser. The header checks themselves are few and have unit tests.
 *
 * Loading runs under a context memory cap of the run budget, so the loader's
 * own cap (derived from the arena sizes and the kernels' workspaces, never
 * from the file's claims) is what keeps a run small.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { HEADER = 40 };

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t fnv1a64(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    if (size >= HEADER) {
        put_u64(copy + 16, (uint64_t)(size - HEADER));
        put_u64(copy + 24, fnv1a64(copy + HEADER, size - HEADER));
    }
    s4d_load_options lo;
    s4d_load_options_init(&lo);
    lo.registry = fuzz_registry();
    lo.max_context_bytes = FUZZ_RUN_BUDGET_BYTES;
    s4d_engine *e = NULL;
    s4d_errbuf err = {{0}};
    s4d_status st = s4d_engine_load_memory(copy, size, &lo, &e, &err);
    free(copy);
    if (st != S4D_OK) {
        if (e)
            fuzz_fail("a failed load (%s) left *out set", s4d_status_string(st));
        if (!err.msg[0])
            fuzz_fail("a failed load (%s) gave no message", s4d_status_string(st));
        return 0;
    }
    if (!e)
        fuzz_fail("a successful load gave no engine");
    fuzz_roundtrip_engine(e);
    /* Running what was loaded tests the loader's promise that it verifies what it runs. */
    const char *no_run = getenv("S4D_FUZZ_ENGINE_NO_RUN");
    if (!(no_run && no_run[0]))
        fuzz_run_engine(e);
    s4d_engine_destroy(e);
    return 0;
}
