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
 *
 * A tensor's byte count must equal its element count times the element size,
 * so a mutated dim alone stops at the reader. When bit 0 of the input's
 * checksum field (overwritten anyway) is set, the target also rewrites each
 * tensor record's byte count to match its dims, so that shape mutations
 * reach the layer checks: re-inference, the memory plan, the context cap.
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

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const uint8_t *p)
{
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

/* Element sizes by dtype value (0: not a tensor dtype the reader takes). */
static uint64_t dtype_bytes(uint32_t dt)
{
    static const uint8_t sizes[17] = {0, 4, 1, 1, 2, 2, 4, 8, 0, 1, 2, 8, 4, 8, 0, 0, 2};
    return dt < 17 ? sizes[dt] : 0;
}

/* Rewrites the byte count of each tensor record of the TNSR section to its dims'. Walks
   the file as the format lays it out (docs/engine-format.md) and stops at anything odd. */
static void fix_tensor_bytes(uint8_t *b, size_t size)
{
    size_t pos = HEADER;
    uint32_t nsec = get_u32(b + 32);
    for (uint32_t k = 0; k < nsec && k < 64; k++) {
        while ((pos + 16) % 64 && pos < size)
            pos++;
        if (size - pos < 16 || pos > size)
            return;
        uint32_t id = get_u32(b + pos);
        uint64_t ssize = get_u64(b + pos + 8);
        pos += 16;
        if (ssize > size - pos)
            return;
        if (id == 0x52534e54u /* "TNSR" */ && ssize >= 4) {
            size_t r = pos + 4, end = pos + (size_t)ssize;
            for (uint32_t i = 0, n = get_u32(b + pos); i < n && end - r >= 4; i++) {
                size_t rsize = get_u32(b + r), at = r + 4;
                if (rsize > end - at)
                    return;
                r = at + rsize;
                if (rsize < 4 || get_u32(b + at) > rsize - 4)
                    continue;
                size_t q = at + 4 + get_u32(b + at); /* past the name */
                if (r - q < 8)
                    continue;
                uint64_t bytes = dtype_bytes(get_u32(b + q));
                uint32_t rank = get_u32(b + q + 4);
                q += 8;
                if (rank > 8 || r - q < 8u * rank + 8)
                    continue;
                for (uint32_t d = 0; d < rank && bytes; d++) {
                    uint64_t v = get_u64(b + q + 8u * d);
                    bytes = v > (UINT64_MAX >> 8) || (v && bytes > (UINT64_MAX >> 8) / v) ? 0 : bytes * v;
                }
                put_u64(b + q + 8u * rank, bytes);
            }
        }
        pos += (size_t)ssize;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    if (size >= HEADER) {
        if (copy[24] & 1)
            fix_tensor_bytes(copy, size);
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
