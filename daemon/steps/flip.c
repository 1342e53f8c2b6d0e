/*
 * random_flip: mirrors the image left-right with probability p. The one
 * decision is the first hash_rand01 draw from the per-sample seed, so a
 * (seed, epoch, sample) triple always flips the same way. The result is
 * always written to out (a plain copy when not flipped).
 */
#include <string.h>

#include "hash.h"
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

/* RGB rows, 16 pixels (48 bytes, three vectors A, B, C) per group: each
 * output vector gathers its bytes from the two or three source vectors
 * that hold them (one pshufb each, unused lanes zeroed, then OR), and is
 * stored whole: three loads and three stores that neither overlap nor
 * leave the group (15-20% faster than flip_row3_ssse3's blocks of 5 alone,
 * whose 16-byte stores overlap by a byte). Returns the pixels done. */
__attribute__((target("ssse3"))) static uint32_t flip_row3_ssse3_48(const uint8_t *src,
                                                                    uint8_t *dst, uint32_t w)
{
    const __m128i o0c = _mm_setr_epi8(13, 14, 15, 10, 11, 12, 7, 8, 9, 4, 5, 6, 1, 2, 3, -1);
    const __m128i o0b = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                      -1, -1, 14);
    const __m128i o1a = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                      -1, 15, -1);
    const __m128i o1b = _mm_setr_epi8(15, -1, 11, 12, 13, 8, 9, 10, 5, 6, 7, 2, 3, 4, -1, 0);
    const __m128i o1c = _mm_setr_epi8(-1, 0, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                      -1, -1);
    const __m128i o2a = _mm_setr_epi8(-1, 12, 13, 14, 9, 10, 11, 6, 7, 8, 3, 4, 5, 0, 1, 2);
    const __m128i o2b = _mm_setr_epi8(1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                      -1, -1);
    uint32_t x = 0;
    for (; x + 16 <= w; x += 16) {
        const uint8_t *s = src + (size_t)(w - 16 - x) * 3;
        __m128i a = _mm_loadu_si128((const __m128i *)s);
        __m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
        uint8_t *d = dst + (size_t)x * 3;
        _mm_storeu_si128((__m128i *)d,
                         _mm_or_si128(_mm_shuffle_epi8(c, o0c), _mm_shuffle_epi8(b, o0b)));
        _mm_storeu_si128((__m128i *)(d + 16),
                         _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, o1a),
                                                   _mm_shuffle_epi8(b, o1b)),
                                      _mm_shuffle_epi8(c, o1c)));
        _mm_storeu_si128((__m128i *)(d + 32),
                         _mm_or_si128(_mm_shuffle_epi8(a, o2a), _mm_shuffle_epi8(b, o2b)));
    }
    return x;
}

static int flip_have_ssse3(void)
{
    return __builtin_cpu_supports("ssse3");
}

/* RGB rows, 21 pixels (63 bytes) per cross-lane byte permutation (AVX-512
 * VBMI). Masked loads and stores touch exactly the block's bytes: vector
 * byte 0 is left out, so source pixel i sits at bytes 1 + 3i.., and the
 * 64th output byte is not written. Returns the pixels done. */
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) static uint32_t
flip_row3_vbmi(const uint8_t *src, uint8_t *dst, uint32_t w)
{
    /* Output byte 3k + ch is source pixel 20 - k's byte ch: 1 + 3(20 - k) + ch. */
    static const uint8_t idx_bytes[64] = {
        61, 62, 63, 58, 59, 60, 55, 56, 57, 52, 53, 54, 49, 50, 51, 46,
        47, 48, 43, 44, 45, 40, 41, 42, 37, 38, 39, 34, 35, 36, 31, 32,
        33, 28, 29, 30, 25, 26, 27, 22, 23, 24, 19, 20, 21, 16, 17, 18,
        13, 14, 15, 10, 11, 12, 7, 8, 9, 4, 5, 6, 1, 2, 3, 0,
    };
    const __m512i idx = _mm512_loadu_si512(idx_bytes);
    const __mmask64 in_mask = ~(__mmask64)1, out_mask = ~(__mmask64)0 >> 1;
    uint32_t x = 0;
    for (; x + 21 <= w; x += 21) {
        const uint8_t *s = src + (size_t)(w - 21 - x) * 3 - 1;
        __m512i v = _mm512_maskz_loadu_epi8(in_mask, s);
        _mm512_mask_storeu_epi8(dst + (size_t)x * 3, out_mask, _mm512_permutexvar_epi8(idx, v));
    }
    return x;
}

static int flip_have_vbmi(void)
{
    return __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bw");
}
#else
static uint32_t flip_row3_ssse3(const uint8_t *src, uint8_t *dst, uint32_t w)
{
    (void)src;
    (void)dst;
    (void)w;
    return 0;
}

static uint32_t flip_row3_ssse3_48(const uint8_t *src, uint8_t *dst, uint32_t w)
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

static uint32_t flip_row3_vbmi(const uint8_t *src, uint8_t *dst, uint32_t w)
{
    (void)src;
    (void)dst;
    (void)w;
    return 0;
}

static int flip_have_vbmi(void)
{
    return 0;
}
#endif

/* The widest row flip this CPU has, decided once. */
static int flip_simd_level(void)
{
    static int level = -1;
    int l = __atomic_load_n(&level, __ATOMIC_RELAXED);
    if (l < 0) {
        l = flip_have_vbmi() ? 2 : flip_have_ssse3() ? 1 : 0;
        __atomic_store_n(&level, l, __ATOMIC_RELAXED);
    }
    return l;
}

void step_flip_row(const uint8_t *src, uint8_t *dst, uint32_t w, uint32_t c)
{
    size_t row = (size_t)w * c;
    const uint8_t *s = src + row;
    uint8_t *d = dst;
    if (c == 3) {
        int simd = flip_simd_level();
        uint32_t x = 0;
        if (simd == 2) /* whole blocks of 21 pixels, then of 5 */
            x = flip_row3_vbmi(src, dst, w);
        else if (simd == 1) /* groups of 16 pixels, then blocks of 5 */
            x = flip_row3_ssse3_48(src, dst, w);
        if (simd >= 1 && x < w)
            x += flip_row3_ssse3(src, dst + (size_t)x * 3, w - x);
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

static void flip_rows(const uint8_t *src, uint8_t *dst, uint32_t h, uint32_t w,
                      uint32_t c)
{
    size_t row = (size_t)w * c;
    for (uint32_t y = 0; y < h; y++, src += row, dst += row)
        step_flip_row(src, dst, w, c);
}

/* Bytes per checksum block: three of hash_crc32c's long streams (its
 * fastest path), which still fit L1 (32 KiB) for the flip that follows. */
#define FLIP_CRC_BLOCK (3u * 8192u)

uint32_t step_flip_copy_crc32c(uint32_t crc, int mirror, const struct img *in, uint8_t *dst)
{
    if (!mirror)
        return hash_crc32c_copy(crc, dst, in->data, in->len);
    /* Each block is summed, then the rows it completed are flipped while
     * they are still in L1. */
    size_t row = (size_t)in->w * in->c, len = (size_t)in->h * row, summed = 0, flipped = 0;
    while (flipped < len) {
        size_t n = len - summed < FLIP_CRC_BLOCK ? len - summed : FLIP_CRC_BLOCK;
        crc = hash_crc32c(crc, in->data + summed, n);
        summed += n;
        uint32_t rows = (uint32_t)((summed - flipped) / row);
        flip_rows(in->data + flipped, dst + flipped, rows, in->w, in->c);
        flipped += rows * row;
    }
    return crc;
}

int step_flip_decide(double p, uint64_t seed)
{
    uint64_t state = seed;
    return hash_rand01(&state) < p;
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

    if (step_flip_decide(p, ctx->seed))
        flip_rows(in->data, out->data, in->h, in->w, in->c);
    else
        memcpy(out->data, in->data, out->len);
    return 0;
}
