/* Fuzz target: .npy bytes -> s4d_npy_parse, then every promise of the result. */
#include <stdint.h>
#include <string.h>

#include "fuzz_common.h"
#include "s4d/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    s4d_npy a;
    s4d_errbuf err = {{0}};
    s4d_status st = s4d_npy_parse(data, size, &a, &err);
    if (st != S4D_OK) {
        if (a.data || a.bytes || a.rank)
            fuzz_fail("a failed parse (%s) left the array set", s4d_status_string(st));
        if (!err.msg[0])
            fuzz_fail("a failed parse (%s) gave no message", s4d_status_string(st));
        return 0;
    }
    if (a.rank < 0 || a.rank > S4D_NPY_MAX_RANK || !a.data)
        fuzz_fail("parsed array with rank %d, data %p", a.rank, a.data);
    uint64_t n = 1;
    for (int d = 0; d < a.rank; d++) {
        if (a.dims[d] < 0)
            fuzz_fail("negative dimension %lld", (long long)a.dims[d]);
        n *= (uint64_t)a.dims[d];
    }
    size_t esz = s4d_dtype_size(a.dtype);
    if (esz == 0 || n * esz != a.bytes || a.bytes > size)
        fuzz_fail("%llu elements of %zu bytes, but %zu data bytes from a %zu-byte file",
                  (unsigned long long)n, esz, a.bytes, size);
    if (((uintptr_t)a.data & 63) != 0)
        fuzz_fail("data is not 64-byte aligned");
    /* The data are the file's last bytes, unchanged. */
    if (a.bytes && memcmp(a.data, data + size - a.bytes, a.bytes) != 0)
        fuzz_fail("data differ from the file's bytes");
    s4d_npy_free(&a);
    if (a.data)
        fuzz_fail("s4d_npy_free left data set");
    return 0;
}
