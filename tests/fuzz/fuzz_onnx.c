/*
 * Fuzz target: ONNX bytes -> import, build (the deformable aggregation
 * plugin registered), save/load round trip, one run on generated inputs.
 */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    s4d_build_options bo;
    s4d_build_options_init(&bo);
    bo.registry = fuzz_registry();
    s4d_engine *e = NULL;
    s4d_errbuf err = {{0}};
    s4d_status st = s4d_engine_build_onnx_memory(data, size, &bo, &e, &err);
    if (st != S4D_OK) {
        if (e)
            fuzz_fail("a failed build (%s) left *out set", s4d_status_string(st));
        if (!err.msg[0])
            fuzz_fail("a failed build (%s) gave no message", s4d_status_string(st));
        return 0;
    }
    if (!e)
        fuzz_fail("a successful build gave no engine");
    fuzz_roundtrip_engine(e);
    fuzz_run_engine(e);
    s4d_engine_destroy(e);
    return 0;
}
