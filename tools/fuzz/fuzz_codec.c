/*
 * fuzz_codec.c -- libFuzzer target: arbitrary bytes into the codec decoder.
 * The decoder must refuse or decode, never crash, read out of bounds or hand
 * back a non-finite value. Built and run by tools/fuzz/smoke.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "al_codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    al_codec_info info;
    if (al_codec_peek(data, size, &info, NULL)) return 0;
    if (info.n > (1u << 22)) return 0; /* a valid header for a huge vector: skip the allocation */
    float *x = malloc((info.n ? info.n : 1) * sizeof(float));
    if (!x) return 0;
    if (al_codec_decode(data, size, x, info.n, NULL) == 0) {
        for (uint64_t i = 0; i < info.n; i++)
            if (!isfinite(x[i])) abort(); /* the decoder promises finite output */
    }
    /* Most mutations die at the checksum; decode once more with the checksum
     * made to match, so the fuzzer also explores the body and zstd paths. */
    uint8_t *copy = malloc(size);
    if (copy) {
        memcpy(copy, data, size);
        uint64_t c = al_xxh64(copy + AL_CODEC_HEADER_BYTES, size - AL_CODEC_HEADER_BYTES, 0);
        memcpy(copy + 40, &c, 8);
        if (al_codec_decode(copy, size, x, info.n, NULL) == 0)
            for (uint64_t i = 0; i < info.n; i++)
                if (!isfinite(x[i])) abort();
        free(copy);
    }
    free(x);
    return 0;
}
