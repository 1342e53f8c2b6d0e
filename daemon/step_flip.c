/*
 * random_flip: mirrors the image left-right with probability p. The one
 * decision is the first step_rand01 draw from the per-sample seed, so a
 * (seed, epoch, sample) triple always flips the same way. The result is
 * always written to out (a plain copy when not flipped).
 */
#include <string.h>

#include "step.h"
#include "step_impl.h"

#if defined(__x86_64__)
#include <immintrin.h>

/* RGB rows, five pixels per 16-byte shuffle. The load starts one byte before
 * the five source pixels and the store writes one byte past the five output
 * pixels (the next block overwrites it), so both stay inside the row: the
 * loop runs while x + 6 <= w, and the scalar loop finishes the row. */
__attribute__((target("ssse3"))) static uint32_t flip_row3_ssse3(const uint8_t *src,
                                                                 uint8_t *dst, uint32_t w)
{
    const __m128i rev = _mm_setr_epi8(13, 14, 15, 10, 11, 12, 7, 8, 9, 4, 5, 6, 1, 2, 3, 0);
    uint32_t x = 0;
    for (; x + 6 <= w; x += 5) {
        __m128i v = _mm_loadu_si128((const __m128i *)(src + (size_t)(w - 5 - x) * 3 - 1));
        _mm_storeu_si128((__m128i *)(dst + (size_t)x * 3), _mm_shuffle_epi8(v, rev));
    }
    return x;
}

static int flip_have_ssse3(void)
{
    return __builtin_cpu_supports("ssse3");
}
#else
static uint32_t flip_row3_ssse3(const uint8_t *src, uint8_t *dst, uint32_t w)
{
    (void)src;
    (void)dst;
    (void)w;
    return 0;
}

static int flip_have_ssse3(void)
{
    return 0;
}
#endif

static void flip_rows(const uint8_t *src, uint8_t *dst, uint32_t h, uint32_t w,
                      uint32_t c)
{
    size_t row = (size_t)w * c;
    int simd = c == 3 && flip_have_ssse3();
    for (uint32_t y = 0; y < h; y++, src += row, dst += row) {
        const uint8_t *s = src + row;
        uint8_t *d = dst;
        if (c == 3) {
            uint32_t x = simd ? flip_row3_ssse3(src, dst, w) : 0;
            s -= (size_t)x * 3;
            d += (size_t)x * 3;
            for (; x < w; x++, d += 3) {
                s -= 3;
                d[0] = s[0];
                d[1] = s[1];
                d[2] = s[2];
            }
        } else {
            for (uint32_t x = 0; x < w; x++, d += c) {
                s -= c;
                memcpy(d, s, c);
            }
        }
    }
}

int step_flip_apply(double p, struct step_ctx *ctx, const struct img *in,
                    struct img *out)
{
    int rc = step_check_pixels(ctx, in, "random_flip");
    if (rc < 0)
        return rc;
    rc = step_out_pixels(ctx, out, in->h, in->w, in->c);
    if (rc < 0)
        return rc;

    uint64_t state = ctx->seed;
    if (step_rand01(&state) < p)
        flip_rows(in->data, out->data, in->h, in->w, in->c);
    else
        memcpy(out->data, in->data, out->len);
    return 0;
}
