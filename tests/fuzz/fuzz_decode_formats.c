/*
 * libFuzzer target: a file through the format decoders
 * (daemon/steps/decode_*.c: PNG with libspng, WebP with libwebp, BMP, PNM,
 * TIFF with libtiff), as the decode step meets whatever lies in a dataset.
 *
 * Input: one knob byte, then the file. Knob bit 0: grey (else RGB); bits
 * 1-2: the pixel limit, 1 << (10 + 4 * k) pixels (1 K to 4 M), as prestod's
 * limits.pixels; bit 3: the allocator refuses (-ENOSPC).
 *
 * Besides "no crash, no sanitizer report" it checks the contract of
 * decode_formats.h: the result is 0 or one of -EBADMSG, -E2BIG, -ENOMEM
 * (or the allocator's -ENOSPC), with a message on every error; the
 * allocator is called at most once, never for more pixels than the limit,
 * and always before a success; and every output byte is written: the
 * file is decoded twice, into a buffer filled with 0x00 and then 0xff, and
 * both runs must give the same result and the same bytes.
 */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "steps/decode_formats.h"

struct out {
    uint8_t *px;
    size_t len;
    int calls, refuse;
    uint8_t poison;
    uint64_t limit;
};

static int out_alloc(void *arg, uint32_t h, uint32_t w, uint32_t c, uint8_t **px)
{
    struct out *o = arg;
    o->calls++;
    FUZZ_CHECK(o->calls == 1);
    FUZZ_CHECK(h > 0 && w > 0 && (c == 1 || c == 3));
    FUZZ_CHECK((uint64_t)h * w <= o->limit);
    if (o->refuse)
        return -ENOSPC;
    o->len = (size_t)h * w * c;
    o->px = malloc(o->len);
    FUZZ_CHECK(o->px != NULL);
    memset(o->px, o->poison, o->len);
    *px = o->px;
    return 0;
}

/* One decode into a buffer filled with poison; returns its result. */
static int run(const uint8_t *buf, size_t len, uint8_t knob, uint8_t poison, struct out *o,
               char *err, size_t errlen)
{
    *o = (struct out){.limit = 1ull << (10 + 4 * ((knob >> 1) & 3)), .refuse = knob & 8,
                      .poison = poison};
    err[0] = '\0';
    struct decode_dst dst = {.channels = knob & 1 ? 1 : 3, .max_pixels = o->limit,
                             .alloc = out_alloc, .arg = o, .err = err, .errlen = errlen};
    int rc = decode_image(buf, len, &dst);
    if (rc == 0) {
        FUZZ_CHECK(o->calls == 1 && o->px != NULL);
    } else {
        if (rc != -EBADMSG && rc != -E2BIG && rc != -ENOMEM && rc != -ENOSPC)
            fprintf(stderr, "decode_image: %d %s\n", rc, err);
        FUZZ_CHECK(rc == -EBADMSG || rc == -E2BIG || rc == -ENOMEM ||
                   (rc == -ENOSPC && o->refuse));
        FUZZ_CHECK(err[0] != '\0');
    }
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    /* The file in a buffer of its exact size (ASan sees any overread). */
    size_t len = size - 1;
    uint8_t *buf = malloc(len ? len : 1);
    FUZZ_CHECK(buf != NULL);
    memcpy(buf, data + 1, len);

    struct out a, b;
    char err[256];
    int rc = run(buf, len, data[0], 0x00, &a, err, sizeof(err));
    int rc2 = run(buf, len, data[0], 0xff, &b, err, sizeof(err));
    FUZZ_CHECK(rc == rc2);
    if (rc == 0) {
        FUZZ_CHECK(a.len == b.len);
        FUZZ_CHECK(memcmp(a.px, b.px, a.len) == 0);
    }
    free(a.px);
    free(b.px);
    free(buf);
    return 0;
}
