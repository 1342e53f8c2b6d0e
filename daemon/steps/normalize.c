/*
 * normalize and to_float: uint8 pixels to float32, in NHWC or NCHW.
 *
 * torchvision's ToTensor divides by 255 in float32 and Normalize then
 * computes (x - mean) / std in float32 (mean and std as float32 tensors),
 * each operation rounded to float32. A pixel has 256 possible values, so
 * the results per channel are a 256-entry table computed with exactly
 * those float32 operations (no fused multiply-add, no reciprocal): the
 * output is bit-identical to torchvision's. to_float is mean 0 and std 1,
 * which leave x / 255 unchanged.
 *
 * Outputs are written with memcpy or unaligned vector stores (the batch slot
 * a last step writes into need not be 4-byte aligned). RGB images go eight
 * pixels at a time with AVX2 where the CPU has it (the same table values:
 * 270 -> 95 us per 224x224 image to NCHW, measured in isolation), the
 * store-bound part of a training pipeline's online work. (vgatherdps instead
 * of the eight loads: 81 -> 98 us on this EPYC, not taken.)
 *
 * RGB to planes (NCHW, what a training pipeline's last step writes) computes
 * instead where the CPU has FMA: the two divisions as a multiplication by
 * the reciprocal and one remainder correction (nz_div), which rounds as the
 * division does for most operands. When the tables are made, the kernel
 * runs on all 256 byte values of each channel and is kept only if it gives
 * every table value bit for bit (the ImageNet values and every mean and
 * std test_steps tries do), so the output is the tables' either way. Three
 * loads and a few shuffles per eight pixels instead of 48 loads and 21
 * inserts: prestod's warm epochs spent 24% of their cycles in the lookups.
 * RGB to interleaved floats (NHWC) computes the same way where the same
 * check passed for it (nz_packed3_fma: the bytes are already in order).
 * Streaming (non-temporal) stores into the slot measured 2.6x slower here
 * (92 -> 244 us), not taken.
 *
 * step_norm_pixels converts any run of pixels into their place in the
 * output, which lets random_resized_crop write each output row as floats
 * while it is in the L1 cache (pipeline.c fuses the two).
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "proto.h"
#include "step.h"
#include "step_impl.h"

#if defined(__GNUC__) && !defined(__clang__)
#define NZ_NO_CONTRACT __attribute__((optimize("fp-contract=off")))
#else
#define NZ_NO_CONTRACT
#endif

NZ_NO_CONTRACT
static void nz_table(float *t, float mean, float std)
{
    for (int v = 0; v < 256; v++) {
        volatile float x = (float)v / 255.0f; /* rounded to float32 here */
        volatile float d = x - mean;
        t[v] = d / std;
    }
}

static inline void nz_store(uint8_t *p, float v)
{
    memcpy(p, &v, sizeof(v));
}

typedef float nz_tab[STEP_CHANNELS_MAX][256];

/* The tables, kept per thread for the last (mean, std, channels) asked:
 * 768 divisions chained through memory, a few microseconds a sample. */
struct step_norm {
    nz_tab tab;
    int valid;
    uint32_t c, nmean;
    float mean[STEP_CHANNELS_MAX], std[STEP_CHANNELS_MAX];
    /* RGB to planes (arith) or interleaved (arith_nhwc) with arithmetic
     * instead of the tables (nz_planar3_fma, nz_packed3_fma): each only
     * where it gave every table value, checked when the tables were made. */
    int arith, arith_nhwc;
    float m3[3], s3[3], rs3[3]; /* mean, std, 1 / std per channel */
};
static __thread struct step_norm nz_cached;

#if defined(__x86_64__)
#include <immintrin.h>

/* Eight table values, the k-th from table t[k] at index src[k * stride]. */
#define NZ8(t0, t1, t2, t3, t4, t5, t6, t7, s, st)                                  \
    _mm256_setr_ps((t0)[(s)[0]], (t1)[(s)[(st)]], (t2)[(s)[2 * (st)]],               \
                   (t3)[(s)[3 * (st)]], (t4)[(s)[4 * (st)]], (t5)[(s)[5 * (st)]],     \
                   (t6)[(s)[6 * (st)]], (t7)[(s)[7 * (st)]])

/* n RGB pixels to three planes of plane floats each, from pixel at on,
 * eight pixels per step; returns the pixels done. */
__attribute__((target("avx2"))) static size_t nz_planar3_avx2(const nz_tab tab,
                                                               const uint8_t *src,
                                                               float *d0, size_t plane,
                                                               size_t n)
{
    float *d1 = d0 + plane, *d2 = d1 + plane;
    const float *r = tab[0], *g = tab[1], *b = tab[2];
    size_t i = 0;
    for (; i + 8 <= n; i += 8, src += 24) {
        _mm256_storeu_ps(d0 + i, NZ8(r, r, r, r, r, r, r, r, src, 3));
        _mm256_storeu_ps(d1 + i, NZ8(g, g, g, g, g, g, g, g, src + 1, 3));
        _mm256_storeu_ps(d2 + i, NZ8(b, b, b, b, b, b, b, b, src + 2, 3));
    }
    return i;
}

/* a / b rounded once as the division is, for most a: q = a * (1 / b), then
 * one correction step with the remainder (exact with a fused multiply-add).
 * Not for every a and b: nz_arith_check tries every byte value. */
__attribute__((target("avx2,fma"))) static inline __m256 nz_div(__m256 a, __m256 b,
                                                                  __m256 rb)
{
    __m256 q = _mm256_mul_ps(a, rb);
    __m256 e = _mm256_fnmadd_ps(q, b, a);
    return _mm256_fmadd_ps(e, rb, q);
}

/* Eight bytes of channel values (the low 64 bits of v) as normalize's
 * floats: (v / 255 - mean) / std, each operation rounded to float32 as
 * torchvision's are (where nz_arith_check said nz_div gives the division's
 * results). */
__attribute__((target("avx2,fma"))) static inline __m256 nz_arith8(__m128i v, __m256 m,
                                                                    __m256 sd, __m256 rs)
{
    const __m256 b255 = _mm256_set1_ps(255.0f), r255 = _mm256_set1_ps(1.0f / 255.0f);
    __m256 x = nz_div(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)), b255, r255);
    return nz_div(_mm256_sub_ps(x, m), sd, rs);
}

/* nz_planar3_avx2 computing instead of looking up: the pixels' bytes
 * sorted into R, G and B with three shuffles of the 24 bytes, then
 * nz_arith8 on each (a third of the loads and shuffles of the table
 * lookups, which were most of normalize's time in prestod). Mirrored: the
 * n pixels right to left (random_flip folded in: the shuffles reverse each
 * eight), n a multiple of 8. */
__attribute__((target("avx2,fma"))) static size_t nz_planar3_fma(const struct step_norm *z,
                                                                  const uint8_t *src,
                                                                  float *d0, size_t plane,
                                                                  size_t n, int mirror)
{
    float *d1 = d0 + plane, *d2 = d1 + plane;
    __m128i ra = _mm_setr_epi8(0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1),
            rb = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, 2, 5, -1, -1, -1, -1, -1, -1, -1, -1),
            ga = _mm_setr_epi8(1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1),
            gb = _mm_setr_epi8(-1, -1, -1, -1, -1, 0, 3, 6, -1, -1, -1, -1, -1, -1, -1, -1),
            ba = _mm_setr_epi8(2, 5, 8, 11, 14, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1),
            bb = _mm_setr_epi8(-1, -1, -1, -1, -1, 1, 4, 7, -1, -1, -1, -1, -1, -1, -1, -1);
    ptrdiff_t step = 24;
    if (mirror) {
        /* Byte 3 * (7 - k) + channel of the 24 to lane k. */
        ra = _mm_setr_epi8(-1, -1, 15, 12, 9, 6, 3, 0, -1, -1, -1, -1, -1, -1, -1, -1);
        rb = _mm_setr_epi8(5, 2, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
        ga = _mm_setr_epi8(-1, -1, -1, 13, 10, 7, 4, 1, -1, -1, -1, -1, -1, -1, -1, -1);
        gb = _mm_setr_epi8(6, 3, 0, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
        ba = _mm_setr_epi8(-1, -1, -1, 14, 11, 8, 5, 2, -1, -1, -1, -1, -1, -1, -1, -1);
        bb = _mm_setr_epi8(7, 4, 1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
        if (n % 8)
            return 0;
        src += (n - 8) * 3;
        step = -24;
    }
    __m256 m0 = _mm256_set1_ps(z->m3[0]), m1 = _mm256_set1_ps(z->m3[1]),
           m2 = _mm256_set1_ps(z->m3[2]);
    __m256 s0 = _mm256_set1_ps(z->s3[0]), s1 = _mm256_set1_ps(z->s3[1]),
           s2 = _mm256_set1_ps(z->s3[2]);
    __m256 q0 = _mm256_set1_ps(z->rs3[0]), q1 = _mm256_set1_ps(z->rs3[1]),
           q2 = _mm256_set1_ps(z->rs3[2]);
    size_t i = 0;
    for (; i + 8 <= n; i += 8, src += step) {
        __m128i a = _mm_loadu_si128((const __m128i *)(const void *)src);
        __m128i b = _mm_loadl_epi64((const __m128i *)(const void *)(src + 16));
        __m128i r = _mm_or_si128(_mm_shuffle_epi8(a, ra), _mm_shuffle_epi8(b, rb));
        __m128i g = _mm_or_si128(_mm_shuffle_epi8(a, ga), _mm_shuffle_epi8(b, gb));
        __m128i bl = _mm_or_si128(_mm_shuffle_epi8(a, ba), _mm_shuffle_epi8(b, bb));
        _mm256_storeu_ps(d0 + i, nz_arith8(r, m0, s0, q0));
        _mm256_storeu_ps(d1 + i, nz_arith8(g, m1, s1, q1));
        _mm256_storeu_ps(d2 + i, nz_arith8(bl, m2, s2, q2));
    }
    return i;
}

/* RGB to interleaved floats (NHWC) computing instead of looking up: the
 * 24 bytes of eight pixels are already in the output's order, so each eight
 * go through nz_arith8 against mean and std vectors in the channels'
 * rotation (R G B R G B R G, B R G ..., G B R ...): no shuffles, and the
 * same operations on each channel's values as nz_planar3_fma. */
__attribute__((target("avx2,fma"))) static size_t nz_packed3_fma(const struct step_norm *z,
                                                                  const uint8_t *src,
                                                                  float *d, size_t n)
{
    __m256 m[3], sd[3], rs[3];
    for (int k = 0; k < 3; k++) {
        float mv[8], sv[8], rv[8];
        for (int l = 0; l < 8; l++) {
            int ch = (k * 8 + l) % 3;
            mv[l] = z->m3[ch];
            sv[l] = z->s3[ch];
            rv[l] = z->rs3[ch];
        }
        m[k] = _mm256_loadu_ps(mv);
        sd[k] = _mm256_loadu_ps(sv);
        rs[k] = _mm256_loadu_ps(rv);
    }
    size_t i = 0;
    for (; i + 8 <= n; i += 8, src += 24, d += 24)
        for (int k = 0; k < 3; k++)
            _mm256_storeu_ps(d + 8 * k,
                             nz_arith8(_mm_loadl_epi64((const __m128i *)(const void *)(src +
                                                                                    8 * k)),
                                       m[k], sd[k], rs[k]));
    return i;
}

static int nz_have_fma(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* Whether nz_planar3_fma gives z's table values for every byte of every
 * channel: 256 pixels (i, i, i) through it, compared bit for bit. */
static int nz_arith_check(struct step_norm *z)
{
    uint8_t px[256 * 3];
    float out[3][256];
    for (int v = 0; v < 256; v++)
        px[v * 3] = px[v * 3 + 1] = px[v * 3 + 2] = (uint8_t)v;
    if (nz_planar3_fma(z, px, out[0], 256, 256, 0) != 256 ||
        memcmp(out, z->tab, sizeof(out)) != 0)
        return 0;
    /* And mirrored (the same values, the other way round). */
    if (nz_planar3_fma(z, px, out[0], 256, 256, 1) != 256)
        return 0;
    for (int ch = 0; ch < 3; ch++)
        for (int v = 0; v < 256; v++)
            if (memcmp(&out[ch][255 - v], &z->tab[ch][v], sizeof(float)) != 0)
                return 0;
    return 1;
}

/* The same for nz_packed3_fma: value v of channel ch lands at 3 * v + ch. */
static int nz_arith_check_nhwc(const struct step_norm *z)
{
    uint8_t px[256 * 3];
    float out[256 * 3];
    for (int v = 0; v < 256; v++)
        px[v * 3] = px[v * 3 + 1] = px[v * 3 + 2] = (uint8_t)v;
    if (nz_packed3_fma(z, px, out, 256) != 256)
        return 0;
    for (int ch = 0; ch < 3; ch++)
        for (int v = 0; v < 256; v++)
            if (memcmp(&out[3 * v + ch], &z->tab[ch][v], sizeof(float)) != 0)
                return 0;
    return 1;
}

/* RGB to interleaved floats, eight pixels (24 values) per step. */
__attribute__((target("avx2"))) static size_t nz_packed3_avx2(const nz_tab tab,
                                                               const uint8_t *src,
                                                               float *d, size_t plane,
                                                               size_t n)
{
    (void)plane;
    const float *r = tab[0], *g = tab[1], *b = tab[2];
    size_t i = 0;
    for (; i + 8 <= n; i += 8, src += 24, d += 24) {
        _mm256_storeu_ps(d, NZ8(r, g, b, r, g, b, r, g, src, 1));
        _mm256_storeu_ps(d + 8, NZ8(b, r, g, b, r, g, b, r, src + 8, 1));
        _mm256_storeu_ps(d + 16, NZ8(g, b, r, g, b, r, g, b, src + 16, 1));
    }
    return i;
}

static int nz_have_avx2(void)
{
    return __builtin_cpu_supports("avx2");
}
#else
static size_t nz_planar3_avx2(const nz_tab tab, const uint8_t *src, float *d, size_t plane,
                              size_t n)
{
    (void)tab;
    (void)src;
    (void)d;
    (void)plane;
    (void)n;
    return 0;
}
#define nz_packed3_avx2 nz_planar3_avx2
static int nz_have_avx2(void)
{
    return 0;
}
#define nz_planar3_fma(z, src, d, plane, n, mirror)                                        \
    ((void)(z), (void)(mirror), nz_planar3_avx2(NULL, src, d, plane, n))
#define nz_packed3_fma(z, src, d, n) ((void)(z), nz_planar3_avx2(NULL, src, d, 0, n))
static int nz_have_fma(void)
{
    return 0;
}
static int nz_arith_check(struct step_norm *z)
{
    (void)z;
    return 0;
}
#define nz_arith_check_nhwc nz_arith_check
#endif

const struct step_norm *step_norm_prepare(const struct step *s, struct step_ctx *ctx,
                                          uint32_t c)
{
    const char *who = step_name(s->kind);
    if (c > STEP_CHANNELS_MAX || (s->nmean != 1 && s->nmean != c)) {
        step_fail(ctx, -EINVAL, "%s: %u values for %u channels", who, s->nmean, c);
        return NULL;
    }
    struct step_norm *z = &nz_cached;
    if (z->valid && z->c == c && z->nmean == s->nmean &&
        memcmp(z->mean, s->mean, sizeof(z->mean)) == 0 &&
        memcmp(z->std, s->std, sizeof(z->std)) == 0)
        return z;
    z->valid = 0;
    for (uint32_t ch = 0; ch < c; ch++) {
        uint32_t k = s->nmean == 1 ? 0 : ch;
        nz_table(z->tab[ch], s->mean[k], s->std[k]);
    }
    z->c = c;
    z->nmean = s->nmean;
    memcpy(z->mean, s->mean, sizeof(z->mean));
    memcpy(z->std, s->std, sizeof(z->std));
    z->arith = z->arith_nhwc = 0;
    if (c == 3 && nz_have_fma()) {
        for (uint32_t ch = 0; ch < 3; ch++) {
            uint32_t k = s->nmean == 1 ? 0 : ch;
            z->m3[ch] = s->mean[k];
            z->s3[ch] = s->std[k];
            z->rs3[ch] = 1.0f / s->std[k];
        }
        z->arith = nz_arith_check(z);
        z->arith_nhwc = nz_arith_check_nhwc(z);
    }
    z->valid = 1;
    return z;
}

void step_norm_pixels(const struct step *s, const struct step_norm *z, const uint8_t *src,
                      size_t n, uint32_t c, uint8_t *dst, size_t total, size_t at)
{
    const float(*tab)[256] = z->tab;
    if (s->layout == STEP_LAYOUT_NCHW) {
        size_t plane = total * sizeof(float);
        dst += at * sizeof(float);
        if (c == 3) {
            uint8_t *d0 = dst, *d1 = dst + plane, *d2 = dst + 2 * plane;
            size_t i = z->arith        ? nz_planar3_fma(z, src, (float *)(void *)dst, total, n, 0)
                       : nz_have_avx2() ? nz_planar3_avx2(tab, src, (float *)(void *)dst,
                                                          total, n)
                                        : 0;
            for (src += i * 3; i < n; i++, src += 3) {
                nz_store(d0 + i * 4, tab[0][src[0]]);
                nz_store(d1 + i * 4, tab[1][src[1]]);
                nz_store(d2 + i * 4, tab[2][src[2]]);
            }
        } else {
            for (uint32_t ch = 0; ch < c; ch++)
                for (size_t i = 0; i < n; i++)
                    nz_store(dst + ch * plane + i * 4, tab[ch][src[i * c + ch]]);
        }
        return;
    }
    dst += at * c * sizeof(float);
    if (c == 3) {
        size_t i = z->arith_nhwc   ? nz_packed3_fma(z, src, (float *)(void *)dst, n)
                   : nz_have_avx2() ? nz_packed3_avx2(tab, src, (float *)(void *)dst, total, n)
                                    : 0;
        for (src += i * 3, dst += i * 12; i < n; i++, src += 3, dst += 12) {
            nz_store(dst, tab[0][src[0]]);
            nz_store(dst + 4, tab[1][src[1]]);
            nz_store(dst + 8, tab[2][src[2]]);
        }
    } else {
        for (size_t i = 0; i < n * c; i++)
            nz_store(dst + i * 4, tab[i % c][src[i]]);
    }
}

int step_norm_pixels_mirror(const struct step *s, const struct step_norm *z,
                            const uint8_t *src, size_t n, uint32_t c, uint8_t *dst, size_t total,
                            size_t at)
{
    if (s->layout != STEP_LAYOUT_NCHW || c != 3 || !z->arith || n % 8)
        return 0;
    return nz_planar3_fma(z, src, (float *)(void *)(dst + at * sizeof(float)), total, n, 1) ==
           n;
}

int step_normalize_apply(const struct step *s, struct step_ctx *ctx, const struct img *in,
                         struct img *out)
{
    int rc = step_check_pixels(ctx, in, step_name(s->kind));
    if (rc < 0)
        return rc;
    const struct step_norm *tables = step_norm_prepare(s, ctx, in->c);
    if (tables == NULL)
        return -EINVAL;
    size_t n = (size_t)in->h * in->w;
    rc = step_out_pixels_as(ctx, out, in->h, in->w, in->c, PROTO_DTYPE_F32);
    if (rc < 0)
        return rc;
    step_norm_pixels(s, tables, in->data, n, in->c, out->data, n, 0);
    return 0;
}
