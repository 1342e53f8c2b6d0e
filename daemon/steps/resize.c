/*
 * resize: shorter side to N, bilinear with antialias, bit-exact with
 * Pillow's ImagingResample for 8-bit images (what torchvision's Resize does
 * on a PIL image).
 *
 * As in Pillow: a separable filter, horizontal pass first into an 8-bit
 * intermediate, then the vertical pass; a pass is skipped when its dimension
 * does not change. Each output pixel has its own list of input taps; the
 * triangle filter is widened by the scale factor when shrinking (that is the
 * antialias), its weights are normalised to sum 1 in double precision and
 * then rounded to signed fixed point with 22 fractional bits. Sums start at
 * one half (1 << 21) and are truncated back to 8 bits with clamping.
 *
 * Integer sums do not depend on the order of the additions and every
 * product and partial sum fits in 32 bits (weights sum to 2^22, pixels are
 * at most 255), so any kernel that forms the same products in 32-bit lanes
 * gives Pillow's results exactly. Two sets of kernels:
 *  - portable C: the vertical pass sums 16 bytes of a row at a time (loops
 *    the compiler vectorises), the horizontal pass one pixel at a time;
 *  - AVX2 (x86-64, chosen at run time): the horizontal pass multiplies
 *    two taps of an RGB pixel (or 8 of a gray one) at once with 16-bit
 *    multiply-adds on a widened copy of the row (see rs_hplan), the
 *    vertical pass 8 bytes of a row at once with 32-bit multiplies.
 *
 * The passes are interleaved: an output row is computed as soon as the
 * horizontal pass has produced the input rows it reads, kept in a ring of
 * as many rows as an output row reads at most. The working set stays in
 * the L1 cache. Coefficient tables and the ring live in one allocation per
 * call.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define RS_HAVE_AVX2 1
#define RS_AVX2 __attribute__((target("avx2")))
#else
#define RS_HAVE_AVX2 0
#endif

#include "proto.h"
#include "step.h"
#include "step_impl.h"

#define RS_BITS 22
#define RS_HALF (1 << (RS_BITS - 1))
/* Pillow keeps box coordinates in float: sizes stay exact below 2^24. */
#define RS_DIM_MAX (1u << 24)

/* Per output index: taps [first, first + count) of the input axis with
 * ksize-strided fixed-point weights. */
struct rs_axis {
    int32_t *k;
    uint32_t *first;
    uint32_t *count;
    uint32_t ksize;
    uint32_t most; /* the largest count */
};

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#define RS_NO_CONTRACT
#elif defined(__GNUC__)
/* Fused multiply-adds would round differently from Pillow's build. */
#define RS_NO_CONTRACT __attribute__((optimize("fp-contract=off")))
#else
#define RS_NO_CONTRACT
#endif

static inline double rs_triangle(double x)
{
    if (x < 0.0)
        x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* An axis of the resampling: in pixels of input, of which [in0, in1) map
 * onto out pixels of output (Pillow's box; in0 = 0, in1 = in without one). */
struct rs_span {
    uint32_t in, out;
    double in0, in1;
};

static double rs_filterscale(const struct rs_span *sp, double *scale)
{
    *scale = (sp->in1 - sp->in0) / sp->out;
    return *scale < 1.0 ? 1.0 : *scale;
}

static uint32_t rs_ksize(const struct rs_span *sp)
{
    double scale, support = rs_filterscale(sp, &scale); /* support 1.0 */
    uint32_t whole = (uint32_t)support;
    if (whole < support)
        whole++; /* ceil */
    return whole * 2 + 1;
}

static inline uint8_t rs_clip8(int32_t v)
{
    v >>= RS_BITS;
    return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v;
}

/* Taps whose filter values rs_coeffs keeps between its two loops (a crop
 * to 224 has at most a few dozen). */
#define RS_COEFF_KEEP 64

/* Fills a->k, a->first, a->count, a->most; a->ksize is set. */
RS_NO_CONTRACT
static void rs_coeffs(struct rs_axis *a, const struct rs_span *sp)
{
    double scale, filterscale = rs_filterscale(sp, &scale);
    uint32_t in = sp->in, out = sp->out;
    double support = 1.0 * filterscale;
    double ss = 1.0 / filterscale;

    a->most = 0;
    for (uint32_t i = 0; i < out; i++) {
        double center = sp->in0 + (i + 0.5) * scale;
        int xmin = (int)(center - support + 0.5);
        int xmax = (int)(center + support + 0.5);
        if (xmin < 0)
            xmin = 0;
        if (xmax > (int)in)
            xmax = (int)in;
        int n = xmax - xmin;
        /* Each tap's filter value, kept for the second loop (the branchy
         * triangle was most of this function's time, computed twice). */
        double ww = 0.0, tw[RS_COEFF_KEEP];
        for (int x = 0; x < n; x++) {
            double t = rs_triangle((x + xmin - center + 0.5) * ss);
            if (x < RS_COEFF_KEEP)
                tw[x] = t;
            ww += t;
        }
        int32_t *k = a->k + (size_t)i * a->ksize;
        for (int x = 0; x < n; x++) {
            double w = x < RS_COEFF_KEEP ? tw[x] : rs_triangle((x + xmin - center + 0.5) * ss);
            if (ww != 0.0)
                w /= ww;
            k[x] = (int32_t)(w < 0 ? -0.5 + w * (1 << RS_BITS)
                                   : 0.5 + w * (1 << RS_BITS));
        }
        a->first[i] = (uint32_t)xmin;
        a->count[i] = (uint32_t)n;
        if ((uint32_t)n > a->most)
            a->most = (uint32_t)n;
    }
}

/* ---- portable kernels ---- */

/* One row of the horizontal pass: out_w pixels of c channels from s. */
static void rs_hrow(const struct rs_axis *a, const uint8_t *s, uint8_t *d,
                    uint32_t out_w, uint32_t c)
{
    const int32_t *k = a->k;
    if (c == 3) {
        for (uint32_t xx = 0; xx < out_w; xx++, k += a->ksize, d += 3) {
            const uint8_t *p = s + (size_t)a->first[xx] * 3;
            uint32_t n = a->count[xx];
            int32_t s0 = RS_HALF, s1 = RS_HALF, s2 = RS_HALF;
            for (uint32_t x = 0; x < n; x++, p += 3) {
                s0 += p[0] * k[x];
                s1 += p[1] * k[x];
                s2 += p[2] * k[x];
            }
            d[0] = rs_clip8(s0);
            d[1] = rs_clip8(s1);
            d[2] = rs_clip8(s2);
        }
        return;
    }
    for (uint32_t xx = 0; xx < out_w; xx++, k += a->ksize, d += c) {
        const uint8_t *p = s + (size_t)a->first[xx] * c;
        uint32_t n = a->count[xx];
        for (uint32_t ch = 0; ch < c; ch++) {
            int32_t sum = RS_HALF;
            for (uint32_t x = 0; x < n; x++)
                sum += p[(size_t)x * c + ch] * k[x];
            d[ch] = rs_clip8(sum);
        }
    }
}

/* Bytes of a row the vertical pass sums at once: fixed-size inner loops
 * the compiler turns into vector code, sums held in registers across taps. */
#define RS_VBLOCK 16

/* One row of the vertical pass: rowbytes bytes summed over rows[0..n)
 * with weights k. */
static void rs_vrow(const uint8_t *const *rows, const int32_t *k, uint32_t n,
                    uint8_t *d, size_t rowbytes)
{
    size_t j = 0;
    for (; j + RS_VBLOCK <= rowbytes; j += RS_VBLOCK) {
        int32_t sum[RS_VBLOCK];
        for (int b = 0; b < RS_VBLOCK; b++)
            sum[b] = RS_HALF;
        for (uint32_t y = 0; y < n; y++) {
            const uint8_t *p = rows[y] + j;
            int32_t kv = k[y];
            for (int b = 0; b < RS_VBLOCK; b++)
                sum[b] += p[b] * kv;
        }
        for (int b = 0; b < RS_VBLOCK; b++)
            d[j + b] = rs_clip8(sum[b]);
    }
    for (; j < rowbytes; j++) {
        int32_t sum = RS_HALF;
        for (uint32_t y = 0; y < n; y++)
            sum += rows[y][j] * k[y];
        d[j] = rs_clip8(sum);
    }
}

/* ---- AVX2 kernels ---- */

#if RS_HAVE_AVX2

/* The AVX2 horizontal pass multiplies with vpmaddwd, 16 x 16-bit
 * products summed in pairs into 8 x int32, twice the rate of 32-bit
 * multiplies. A 22-bit weight k is split as k = kh * 128 + kl, both halves
 * fitting int16, and each input byte p is widened once per row to the pair
 * (p * 128, p), so that one lane computes p * 128 * kh + p * kl = p * k
 * exactly. The widened row has 4 lanes per RGB pixel (the fourth zero, so
 * that 8 lanes hold two whole pixels, one per 128-bit half) or 1 per gray
 * pixel, then zeros. An output pixel sums groups of 8 lanes from its first
 * tap on, each an unaligned load against 8 lane weights (zero for the
 * fourth lane and past the pixel's taps). Every output pixel does the same
 * number of groups, a loop count the branch predictor gets right. */
struct rs_hplan {
    int32_t *w;            /* out * groups * rs_hplan_kw weights: kh | kl << 16 */
    int32_t *wide[2];      /* two widened rows (see rs_hrow3x2_avx2), zero tails */
    const uint32_t *first; /* the axis' first taps */
    uint32_t groups;
};

/* Lanes per input pixel in the widened row; 0: no AVX2 kernel for c. */
static uint32_t rs_hplan_lanes(uint32_t c)
{
    return c == 3 ? 4 : c == 1 ? 1 : 0;
}

/* Groups for up to ksize taps: the most a pixel can need. */
static uint32_t rs_hplan_groups(const struct rs_axis *a, uint32_t c)
{
    uint32_t taps = 8 / rs_hplan_lanes(c);
    return (a->ksize + taps - 1) / taps;
}

/* The widened row, with room for the last pixel's groups past its end. */
static size_t rs_hplan_wide_lanes(const struct rs_axis *a, uint32_t in, uint32_t c)
{
    return (size_t)in * rs_hplan_lanes(c) + rs_hplan_groups(a, c) * 8;
}

static size_t rs_hplan_bytes(const struct rs_axis *a, uint32_t in, uint32_t out,
                             uint32_t c)
{
    return ((size_t)out * rs_hplan_groups(a, c) * 8 + 2 * rs_hplan_wide_lanes(a, in, c)) *
           sizeof(int32_t);
}

/* A weight as the int16 pair (kh, kl) with k = kh * 128 + kl. Weights are
 * in [0, 2^22] (rs_coeffs normalises them); kh stops at INT16_MAX, which
 * leaves kl = 128 for k = 2^22. */
static int32_t rs_hplan_split(int32_t k)
{
    int32_t kh = k >> 7;
    if (kh > INT16_MAX)
        kh = INT16_MAX;
    int32_t kl = k - kh * 128;
    return (int32_t)((uint32_t)(uint16_t)kh | (uint32_t)(uint16_t)kl << 16);
}

/* Weights a group takes in the plan's table: RGB's two taps' (spread to
 * their lanes in the kernel: a quarter of the table, which with the two
 * widened rows no longer overflows the L1 cache), grey's eight lanes. */
static uint32_t rs_hplan_kw(uint32_t c)
{
    return c == 3 ? 2 : 8;
}

/* Carves the plan out of *p and fills it from a's taps. */
static void rs_hplan_make(struct rs_hplan *h, uint8_t **p, const struct rs_axis *a,
                          uint32_t in, uint32_t out, uint32_t c)
{
    /* Pixels have fewer taps than ksize allows (about twice the scale,
     * where ksize is twice its ceiling plus one): size groups to the most
     * any pixel has. */
    uint32_t lanes = rs_hplan_lanes(c), taps = 8 / lanes;
    h->groups = (a->most + taps - 1) / taps;
    h->first = a->first;
    h->w = (int32_t *)*p;
    *p += (size_t)out * rs_hplan_groups(a, c) * 8 * sizeof(int32_t);
    size_t wide = rs_hplan_wide_lanes(a, in, c);
    for (int r = 0; r < 2; r++) {
        h->wide[r] = (int32_t *)*p;
        *p += wide * sizeof(int32_t);
        memset(h->wide[r] + (size_t)in * lanes, 0,
               (wide - (size_t)in * lanes) * sizeof(int32_t));
    }

    size_t step = (size_t)h->groups * rs_hplan_kw(c);
    memset(h->w, 0, out * step * sizeof(int32_t));
    for (uint32_t xx = 0; xx < out; xx++) {
        const int32_t *k = a->k + (size_t)xx * a->ksize;
        int32_t *t = h->w + xx * step;
        /* RGB: tap i's weight once (rs_hw3_avx2 spreads a group's two over
         * the lanes); grey: tap i in lane i of its group. */
        for (uint32_t i = 0; i < a->count[xx]; i++)
            t[c == 3 ? i : i / taps * 8 + i % taps * lanes] = rs_hplan_split(k[i]);
    }
}

/* The widened lane of an input byte: p * 128 in the low int16, p in the
 * high one. */
static inline int32_t rs_hplan_lane(uint8_t p)
{
    return (int32_t)p << 7 | (int32_t)p << 16;
}

/* Widens n input pixels at s into w (one of h->wide), asking the cache for
 * the same bytes of the row at pf (not NULL) as it goes. */
RS_AVX2 static void rs_hplan_widen(int32_t *w, const uint8_t *s, uint32_t n, uint32_t c,
                                   const uint8_t *pf)
{
    size_t i = 0, bytes = (size_t)n * c;
    const __m256i scale = _mm256_set1_epi32(128 | 1 << 16);
    if (c == 3) {
        /* Four pixels per 16-byte load, while it stays in the row: each
         * byte into both int16 halves of its lane, then times (128, 1). */
        const __m256i lo = _mm256_setr_epi8(
            0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, -1, -1, -1, -1,
            3, -1, 3, -1, 4, -1, 4, -1, 5, -1, 5, -1, -1, -1, -1, -1);
        const __m256i hi = _mm256_setr_epi8(
            6, -1, 6, -1, 7, -1, 7, -1, 8, -1, 8, -1, -1, -1, -1, -1,
            9, -1, 9, -1, 10, -1, 10, -1, 11, -1, 11, -1, -1, -1, -1, -1);
        for (; i * 3 + 16 <= bytes; i += 4) {
            if (pf && i % 16 == 0) /* every 48 bytes: each line of pf's row */
                __builtin_prefetch(pf + i * 3, 0, 3);
            __m256i v = _mm256_broadcastsi128_si256(
                _mm_loadu_si128((const __m128i *)(s + i * 3)));
            _mm256_storeu_si256((__m256i *)(w + i * 4),
                                _mm256_mullo_epi16(_mm256_shuffle_epi8(v, lo), scale));
            _mm256_storeu_si256((__m256i *)(w + i * 4 + 8),
                                _mm256_mullo_epi16(_mm256_shuffle_epi8(v, hi), scale));
        }
        if (pf)
            __builtin_prefetch(pf + bytes - 1, 0, 3);
        for (; i < n; i++) {
            w[i * 4] = rs_hplan_lane(s[i * 3]);
            w[i * 4 + 1] = rs_hplan_lane(s[i * 3 + 1]);
            w[i * 4 + 2] = rs_hplan_lane(s[i * 3 + 2]);
            w[i * 4 + 3] = 0;
        }
        return;
    }
    const __m256i spread = _mm256_setr_epi8(
        0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1,
        4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1);
    for (; i + 8 <= bytes; i += 8) {
        int64_t q;
        memcpy(&q, s + i, 8);
        __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi64x(q), spread);
        _mm256_storeu_si256((__m256i *)(w + i), _mm256_mullo_epi16(v, scale));
    }
    for (; i < n; i++)
        w[i] = rs_hplan_lane(s[i]);
}

/* An RGB group's lane weights from its two taps' at k: the first tap's in
 * the low 128-bit half, the second's in the high one (the widened row's
 * fourth lanes are zero: their weight does not matter). */
RS_AVX2 static inline __attribute__((always_inline)) __m256i rs_hw3_avx2(const int32_t *k)
{
    __m256 b = _mm256_castpd_ps(_mm256_broadcast_sd((const double *)(const void *)k));
    return _mm256_castps_si256(
        _mm256_permutevar_ps(b, _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1)));
}

/* A group's weights: kw 2 (RGB, rs_hw3_avx2) or 8 (grey, the lanes'). */
RS_AVX2 static inline __attribute__((always_inline)) __m256i rs_hw_avx2(const int32_t *k,
                                                                         uint32_t kw)
{
    return kw == 2 ? rs_hw3_avx2(k) : _mm256_loadu_si256((const __m256i *)(const void *)k);
}

/* An output pixel's lane sums over its groups from the widened row at p,
 * without the half for rounding. For RGB: R, G, B and 0 in each 128-bit
 * half, the halves still to be added. */
RS_AVX2 static inline __attribute__((always_inline)) __m256i
rs_hacc_avx2(const int32_t *p, const int32_t *k, uint32_t groups, uint32_t kw)
{
    __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (uint32_t g = 0; g < groups; g++, p += 8, k += kw)
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(
                                        _mm256_loadu_si256((const __m256i *)p),
                                        rs_hw_avx2(k, kw)));
    return acc;
}

/* rs_hacc_avx2 for the same pixel of two widened rows at once: each group's
 * weights loaded once for both (the pass is bound by its loads: three
 * instead of four per two multiply-adds). */
RS_AVX2 static inline __attribute__((always_inline)) void
rs_hacc2_avx2(const int32_t *p0, const int32_t *p1, const int32_t *k, uint32_t groups,
              __m256i *acc0, __m256i *acc1)
{
    __m256i a0 = _mm256_setzero_si256(), a1 = a0;
#pragma GCC unroll 4
    for (uint32_t g = 0; g < groups; g++, p0 += 8, p1 += 8, k += 2) {
        __m256i kv = rs_hw3_avx2(k);
        a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(
                                      _mm256_loadu_si256((const __m256i *)p0), kv));
        a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(
                                      _mm256_loadu_si256((const __m256i *)p1), kv));
    }
    *acc0 = a0;
    *acc1 = a1;
}

/* Sums (two pixels, one per 128-bit half) to bytes: R, G, B and a junk
 * byte in the low 32 bits of each half. */
RS_AVX2 static inline __attribute__((always_inline)) __m256i rs_pack3_avx2(__m256i v)
{
    v = _mm256_srai_epi32(_mm256_add_epi32(v, _mm256_set1_epi32(RS_HALF)), RS_BITS);
    return _mm256_packus_epi16(_mm256_packs_epi32(v, v), v);
}

/* a's halves added in the low half, e's in the high one: one lane-crossing
 * permute (a's high half beside e's low one) and a blend (a's low half,
 * e's high one). */
RS_AVX2 static inline __attribute__((always_inline)) __m256i rs_hhalves_avx2(__m256i a,
                                                                              __m256i e)
{
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, e, 0x21),
                            _mm256_blend_epi32(a, e, 0xf0));
}

/* Lane sums a (pixel x, RGB0 twice) and e (pixel x + 4) to one vector of
 * rounded, shifted sums: x's R, G, B, 0 in the low half, x + 4's in the
 * high one. */
RS_AVX2 static inline __attribute__((always_inline)) __m256i
rs_hpair_avx2(__m256i a, __m256i e, __m256i half)
{
    return _mm256_srai_epi32(_mm256_add_epi32(rs_hhalves_avx2(a, e), half), RS_BITS);
}

/* Output pixels xx + i and xx + 4 + i (k: xx's weights) of the widened row
 * wide, as rs_hpair_avx2 gives them. */
RS_AVX2 static inline __attribute__((always_inline)) __m256i
rs_hquad_avx2(const struct rs_hplan *h, const int32_t *wide, const int32_t *k, size_t step,
              uint32_t xx, uint32_t i, uint32_t groups, __m256i half)
{
    __m256i a = rs_hacc_avx2(wide + (size_t)h->first[xx + i] * 4, k + i * step, groups, 2);
    __m256i e = rs_hacc_avx2(wide + (size_t)h->first[xx + 4 + i] * 4, k + (4 + i) * step,
                             groups, 2);
    return rs_hpair_avx2(a, e, half);
}

/* rs_hquad_avx2 for two widened rows at once, sharing the weights. */
RS_AVX2 static inline __attribute__((always_inline)) void
rs_hquad2_avx2(const struct rs_hplan *h, const int32_t *k, size_t step, uint32_t xx,
               uint32_t i, uint32_t groups, __m256i half, __m256i *v0, __m256i *v1)
{
    size_t fa = (size_t)h->first[xx + i] * 4, fe = (size_t)h->first[xx + 4 + i] * 4;
    __m256i a0, a1, e0, e1;
    rs_hacc2_avx2(h->wide[0] + fa, h->wide[1] + fa, k + i * step, groups, &a0, &a1);
    rs_hacc2_avx2(h->wide[0] + fe, h->wide[1] + fe, k + (4 + i) * step, groups, &e0, &e1);
    *v0 = rs_hpair_avx2(a0, e0, half);
    *v1 = rs_hpair_avx2(a1, e1, half);
}

/* Eight pixels' rounded sums (rs_hpair_avx2's, pixels i and 4 + i in v[i])
 * packed and stored at d: 24 bytes, nothing past them. */
RS_AVX2 static inline __attribute__((always_inline)) void
rs_hstore8_avx2(uint8_t *d, __m256i v0, __m256i v1, __m256i v2, __m256i v3)
{
    /* Packed so that each 128-bit half holds four pixels' R, G, B and junk
     * bytes in order, then the junk squeezed out. */
    const __m256i squeeze = _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1,
                                             -1, -1, 0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14,
                                             -1, -1, -1, -1);
    __m256i b = _mm256_shuffle_epi8(
        _mm256_packus_epi16(_mm256_packs_epi32(v0, v1), _mm256_packs_epi32(v2, v3)),
        squeeze);
    __m128i hi = _mm256_extracti128_si256(b, 1);
    _mm_storeu_si128((__m128i *)(void *)d, _mm256_castsi256_si128(b));
    _mm_storel_epi64((__m128i *)(void *)(d + 12), hi);
    uint32_t last = (uint32_t)_mm_extract_epi32(hi, 2);
    memcpy(d + 20, &last, 4);
}

/* Pixels xx.. of one row, 3 channels, from the widened row wide (k: xx's
 * weights): what the eight-pixel loops leave. */
RS_AVX2 static inline __attribute__((always_inline)) void
rs_hrow3_tail_avx2(const struct rs_hplan *h, const int32_t *wide, const int32_t *k,
                   uint8_t *d, uint32_t xx, uint32_t out_w, uint32_t groups)
{
    size_t step = (size_t)groups * 2;
    /* Pairs of pixels share the adding of halves and the packing; 4-byte
     * stores whose fourth byte lands on the next pixel, written later. */
    for (; xx + 2 < out_w; xx += 2, d += 6, k += 2 * step) {
        __m256i a = rs_hacc_avx2(wide + (size_t)h->first[xx] * 4, k, groups, 2);
        __m256i b = rs_hacc_avx2(wide + (size_t)h->first[xx + 1] * 4, k + step, groups, 2);
        __m256i v = rs_pack3_avx2(rs_hhalves_avx2(a, b));
        uint32_t va = (uint32_t)_mm256_cvtsi256_si32(v);
        uint32_t vb = (uint32_t)_mm_cvtsi128_si32(_mm256_extracti128_si256(v, 1));
        memcpy(d, &va, 4);
        memcpy(d + 3, &vb, 4);
    }
    for (; xx < out_w; xx++, d += 3, k += step) {
        __m256i a = rs_hacc_avx2(wide + (size_t)h->first[xx] * 4, k, groups, 2);
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
        uint32_t v = (uint32_t)_mm256_cvtsi256_si32(rs_pack3_avx2(_mm256_castsi128_si256(s)));
        d[0] = (uint8_t)v;
        d[1] = (uint8_t)(v >> 8);
        d[2] = (uint8_t)(v >> 16);
    }
}

/* One row, 3 channels, from widened row r; groups is a constant where
 * inlined. */
RS_AVX2 static inline __attribute__((always_inline)) void
rs_hrow3_avx2_n(const struct rs_hplan *h, int r, uint8_t *d, uint32_t out_w, uint32_t groups)
{
    const int32_t *k = h->w, *wide = h->wide[r];
    size_t step = (size_t)groups * 2;
    uint32_t xx = 0;
    /* Eight pixels share the rounding, the packing and the stores. */
    const __m256i half = _mm256_set1_epi32(RS_HALF);
    for (; xx + 8 <= out_w; xx += 8, d += 24, k += 8 * step)
        rs_hstore8_avx2(d, rs_hquad_avx2(h, wide, k, step, xx, 0, groups, half),
                        rs_hquad_avx2(h, wide, k, step, xx, 1, groups, half),
                        rs_hquad_avx2(h, wide, k, step, xx, 2, groups, half),
                        rs_hquad_avx2(h, wide, k, step, xx, 3, groups, half));
    rs_hrow3_tail_avx2(h, wide, k, d, xx, out_w, groups);
}

/* Two rows, 3 channels, from the two widened rows into d0 and d1. */
RS_AVX2 static inline __attribute__((always_inline)) void
rs_hrow3x2_avx2_n(const struct rs_hplan *h, uint8_t *d0, uint8_t *d1, uint32_t out_w,
                  uint32_t groups)
{
    const int32_t *k = h->w;
    size_t step = (size_t)groups * 2;
    uint32_t xx = 0;
    const __m256i half = _mm256_set1_epi32(RS_HALF);
    for (; xx + 8 <= out_w; xx += 8, d0 += 24, d1 += 24, k += 8 * step) {
        __m256i p0, p1, p2, p3, q0, q1, q2, q3;
        rs_hquad2_avx2(h, k, step, xx, 0, groups, half, &p0, &q0);
        rs_hquad2_avx2(h, k, step, xx, 1, groups, half, &p1, &q1);
        rs_hquad2_avx2(h, k, step, xx, 2, groups, half, &p2, &q2);
        rs_hquad2_avx2(h, k, step, xx, 3, groups, half, &p3, &q3);
        rs_hstore8_avx2(d0, p0, p1, p2, p3);
        rs_hstore8_avx2(d1, q0, q1, q2, q3);
    }
    rs_hrow3_tail_avx2(h, h->wide[0], k, d0, xx, out_w, groups);
    rs_hrow3_tail_avx2(h, h->wide[1], k, d1, xx, out_w, groups);
}

/* Rows from the widened rows: rows 2 (d1 not NULL: both) or 1 (wide[0]
 * into d0), each kernel with its groups a constant up to 4 (up to 8 taps:
 * scales below 4). */
RS_AVX2 static void rs_hrow3_avx2(const struct rs_hplan *h, uint8_t *d0, uint8_t *d1,
                                  uint32_t out_w)
{
#define RS_HROW3_CASE(n)                                                                  \
    if (d1)                                                                               \
        rs_hrow3x2_avx2_n(h, d0, d1, out_w, n);                                           \
    else                                                                                  \
        rs_hrow3_avx2_n(h, 0, d0, out_w, n);                                              \
    break
    switch (h->groups) {
    case 1:
        RS_HROW3_CASE(1);
    case 2:
        RS_HROW3_CASE(2);
    case 3:
        RS_HROW3_CASE(3);
    case 4:
        RS_HROW3_CASE(4);
    default:
        RS_HROW3_CASE(h->groups);
    }
#undef RS_HROW3_CASE
}

/* One row, 1 channel, from widened row r. */
RS_AVX2 static void rs_hrow1_avx2(const struct rs_hplan *h, int r, uint8_t *d,
                                  uint32_t out_w)
{
    const int32_t *k = h->w;
    for (uint32_t xx = 0; xx < out_w; xx++, k += (size_t)h->groups * 8) {
        __m256i acc = rs_hacc_avx2(h->wide[r] + h->first[xx], k, h->groups, 8);
        __m128i v = _mm_add_epi32(_mm256_castsi256_si128(acc),
                                  _mm256_extracti128_si256(acc, 1));
        v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0x4e));
        v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0xb1));
        d[xx] = rs_clip8(RS_HALF + _mm_cvtsi128_si32(v));
    }
}

/* rs_hrow for c 1 or 3, of one row (s1 NULL) or two (s0 into d0, s1 into
 * d1); rows pf0 and pf1 (or NULL) are asked for as s0 and s1 are read. */
RS_AVX2 static void rs_hrow_avx2(const struct rs_hplan *h, const uint8_t *s0,
                                 const uint8_t *s1, uint8_t *d0, uint8_t *d1, uint32_t in_w,
                                 uint32_t out_w, uint32_t c, const uint8_t *pf0,
                                 const uint8_t *pf1)
{
    rs_hplan_widen(h->wide[0], s0, in_w, c, pf0);
    if (s1)
        rs_hplan_widen(h->wide[1], s1, in_w, c, pf1);
    if (c == 3) {
        rs_hrow3_avx2(h, d0, s1 ? d1 : NULL, out_w);
        return;
    }
    rs_hrow1_avx2(h, 0, d0, out_w);
    if (s1)
        rs_hrow1_avx2(h, 1, d1, out_w);
}

/* Bytes of a row the AVX2 vertical pass does at once. */
#define RS_VBLOCK_AVX2 32

/* 32 output bytes at d from bytes j.. of rows[0..n). */
RS_AVX2 static inline void rs_vblock_avx2(const uint8_t *const *rows, size_t j,
                                          const int32_t *k, uint32_t n, uint8_t *d)
{
    __m256i s0 = _mm256_set1_epi32(RS_HALF), s1 = s0, s2 = s0, s3 = s0;
    for (uint32_t y = 0; y < n; y++) {
        const uint8_t *p = rows[y] + j;
        __m256i kv = _mm256_set1_epi32(k[y]);
        s0 = _mm256_add_epi32(s0, _mm256_mullo_epi32(kv,
                 _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p))));
        s1 = _mm256_add_epi32(s1, _mm256_mullo_epi32(kv,
                 _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8)))));
        s2 = _mm256_add_epi32(s2, _mm256_mullo_epi32(kv,
                 _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 16)))));
        s3 = _mm256_add_epi32(s3, _mm256_mullo_epi32(kv,
                 _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 24)))));
    }
    __m256i lo = _mm256_packs_epi32(_mm256_srai_epi32(s0, RS_BITS),
                                    _mm256_srai_epi32(s1, RS_BITS));
    __m256i hi = _mm256_packs_epi32(_mm256_srai_epi32(s2, RS_BITS),
                                    _mm256_srai_epi32(s3, RS_BITS));
    /* The packs work per 128-bit lane: put the 4-byte groups back in order. */
    __m256i v = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(lo, hi),
                                            _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)(d + j), v);
}

/* rs_vrow; rows shorter than a block go to it. */
RS_AVX2 static void rs_vrow_avx2(const uint8_t *const *rows, const int32_t *k,
                                 uint32_t n, uint8_t *d, size_t rowbytes)
{
    if (rowbytes < RS_VBLOCK_AVX2) {
        rs_vrow(rows, k, n, d, rowbytes);
        return;
    }
    size_t j = 0;
    for (; j + RS_VBLOCK_AVX2 <= rowbytes; j += RS_VBLOCK_AVX2)
        rs_vblock_avx2(rows, j, k, n, d);
    /* The tail as one more block ending at the row's end (bytes computed
     * twice come out the same). */
    if (j < rowbytes)
        rs_vblock_avx2(rows, rowbytes - RS_VBLOCK_AVX2, k, n, d);
}

#endif /* RS_HAVE_AVX2 */

/* ---- driver ---- */

/* Input rows the horizontal pass asks the cache for ahead of reading them:
 * a crop's rows are a box's width out of a wider image, each row a jump the
 * hardware prefetcher does not foresee, and the image comes from the memory
 * tier, not the cache (a quarter of the pass stalled on its first loads). */
#define RS_PREFETCH_ROWS 2

static inline void rs_prefetch(const uint8_t *p, size_t bytes)
{
    for (size_t off = 0; off < bytes; off += 64)
        __builtin_prefetch(p + off, 0, 3);
    __builtin_prefetch(p + bytes - 1, 0, 3);
}

void step_resize_shape(uint32_t size, uint32_t in_h, uint32_t in_w,
                       uint64_t *h, uint64_t *w)
{
    uint32_t shorter = in_w <= in_h ? in_w : in_h;
    uint32_t longer = in_w <= in_h ? in_h : in_w;
    /* Python's int(size * long / short): an exact product, one correctly
     * rounded division, truncation. */
    uint64_t new_long = (uint64_t)((double)((uint64_t)size * longer) / shorter);
    if (in_w <= in_h) {
        *w = size;
        *h = new_long;
    } else {
        *h = size;
        *w = new_long;
    }
}

/* Carves the axis tables out of *p and fills them. */
static void rs_axis_make(struct rs_axis *a, uint8_t **p, const struct rs_span *sp)
{
    a->ksize = rs_ksize(sp);
    a->k = (int32_t *)*p;
    *p += (size_t)sp->out * a->ksize * sizeof(int32_t);
    a->first = (uint32_t *)*p;
    *p += (size_t)sp->out * sizeof(uint32_t);
    a->count = (uint32_t *)*p;
    *p += (size_t)sp->out * sizeof(uint32_t);
    rs_coeffs(a, sp);
}

static size_t rs_axis_bytes(const struct rs_span *sp)
{
    return (size_t)sp->out * (rs_ksize(sp) + 2) * sizeof(int32_t);
}

int step_resize_isa_supported(enum step_resize_isa isa)
{
    switch (isa) {
    case STEP_RESIZE_ISA_AUTO:
    case STEP_RESIZE_ISA_SCALAR:
        return 1;
    case STEP_RESIZE_ISA_AVX2:
#if RS_HAVE_AVX2
        return __builtin_cpu_supports("avx2");
#else
        return 0;
#endif
    }
    return 0;
}

/* One call's kernels and tables. */
struct rs_run {
    struct rs_axis ah, av;
    uint32_t in_w, out_w, c;
    int avx2_h, avx2_v; /* which passes use the AVX2 kernels */
#if RS_HAVE_AVX2
    struct rs_hplan hplan;
#endif
};

/* The horizontal pass of row s0 into d0 and, where s1 is not NULL, of row
 * s1 into d1 (the AVX2 kernel does two rows with one load of each weight);
 * rows pf0 and pf1 (or NULL), read later, are asked for meanwhile. */
static void rs_run_hrow(const struct rs_run *r, const uint8_t *s0, const uint8_t *s1,
                        uint8_t *d0, uint8_t *d1, const uint8_t *pf0, const uint8_t *pf1)
{
#if RS_HAVE_AVX2
    if (r->avx2_h && r->c == 3) {
        rs_hrow_avx2(&r->hplan, s0, s1, d0, d1, r->in_w, r->out_w, r->c, pf0, pf1);
        return;
    }
#endif
    size_t bytes = (size_t)r->in_w * r->c;
    if (pf0)
        rs_prefetch(pf0, bytes);
    if (pf1)
        rs_prefetch(pf1, bytes);
#if RS_HAVE_AVX2
    if (r->avx2_h) {
        rs_hrow_avx2(&r->hplan, s0, s1, d0, d1, r->in_w, r->out_w, r->c, NULL, NULL);
        return;
    }
#endif
    rs_hrow(&r->ah, s0, d0, r->out_w, r->c);
    if (s1)
        rs_hrow(&r->ah, s1, d1, r->out_w, r->c);
}

static void rs_run_vrow(const struct rs_run *r, const uint8_t *const *rows, uint32_t yy,
                        uint8_t *d, size_t rowbytes)
{
    const int32_t *k = r->av.k + (size_t)yy * r->av.ksize;
#if RS_HAVE_AVX2
    if (r->avx2_v) {
        rs_vrow_avx2(rows, k, r->av.count[yy], d, rowbytes);
        return;
    }
#endif
    rs_vrow(rows, k, r->av.count[yy], d, rowbytes);
}

void step_resample_src_img(struct step_resample_src *src, const struct img *in)
{
    src->data = in->data;
    src->stride = (size_t)in->w * in->c;
    src->h = in->h;
    src->w = in->w;
    src->c = in->c;
    src->x0 = 0.0;
    src->y0 = 0.0;
    src->x1 = in->w;
    src->y1 = in->h;
    src->mirror = 0;
    src->norm = NULL;
    src->norm_tables = NULL;
}

/* Where output rows go: straight into out, or (mirrored, normalized) through
 * a row of scratch. */
struct rs_sink {
    struct img *out;
    const struct step_resample_src *src;
    uint8_t *tmp;  /* the row the passes write, when not out's */
    uint8_t *flip; /* a mirrored row on its way to normalize */
    uint32_t h, w, c;
};

/* Where the passes write output row y. */
static inline uint8_t *rs_row(const struct rs_sink *k, uint32_t y)
{
    return k->tmp ? k->tmp : k->out->data + (size_t)y * k->w * k->c;
}

/* Output row y, computed at row (rs_row's, or a source row), into out. */
static void rs_emit(const struct rs_sink *k, const uint8_t *row, uint32_t y)
{
    size_t bytes = (size_t)k->w * k->c;
    if (!k->src->norm) {
        uint8_t *d = k->out->data + (size_t)y * bytes;
        if (k->src->mirror)
            step_flip_row(row, d, k->w, k->c);
        else if (row != d)
            memcpy(d, row, bytes);
        return;
    }
    if (k->src->mirror) {
        if (step_norm_pixels_mirror(k->src->norm, k->src->norm_tables, row, k->w, k->c,
                                    k->out->data, (size_t)k->h * k->w, (size_t)y * k->w))
            return;
        step_flip_row(row, k->flip, k->w, k->c);
        row = k->flip;
    }
    step_norm_pixels(k->src->norm, k->src->norm_tables, row, k->w, k->c, k->out->data,
                     (size_t)k->h * k->w, (size_t)y * k->w);
}

int step_resample(struct step_ctx *ctx, enum step_resize_isa isa,
                  const struct step_resample_src *src, uint32_t out_h, uint32_t out_w,
                  struct img *out, const char *who)
{
    if (isa == STEP_RESIZE_ISA_AUTO)
        isa = step_resize_isa_supported(STEP_RESIZE_ISA_AVX2) ? STEP_RESIZE_ISA_AVX2
                                                              : STEP_RESIZE_ISA_SCALAR;
    else if (!step_resize_isa_supported(isa))
        return step_fail(ctx, -ENOTSUP, "%s: kernel %d is not supported here", who,
                         (int)isa);
    if (src->h > RS_DIM_MAX || src->w > RS_DIM_MAX || out_h > RS_DIM_MAX ||
        out_w > RS_DIM_MAX || out_h == 0 || out_w == 0 ||
        (ctx->max_pixels && (uint64_t)out_h * out_w > ctx->max_pixels))
        return step_fail(ctx, -E2BIG, "%s: %ux%u to %ux%u is too large", who, src->w,
                         src->h, out_w, out_h);
    if (!(src->x0 >= 0.0 && src->x0 < src->x1 && src->x1 <= src->w && src->y0 >= 0.0 &&
          src->y0 < src->y1 && src->y1 <= src->h))
        return step_fail(ctx, -EINVAL, "%s: box (%g, %g, %g, %g) is not inside %ux%u", who,
                         src->x0, src->y0, src->x1, src->y1, src->w, src->h);

    uint32_t in_h = src->h, in_w = src->w, c = src->c;
    struct rs_span sh = {in_w, out_w, src->x0, src->x1};
    struct rs_span sv = {in_h, out_h, src->y0, src->y1};
    /* As Pillow: a pass runs unless its axis keeps its size and box. */
    int need_h = out_w != in_w || src->x0 != 0.0 || src->x1 != out_w;
    int need_v = out_h != in_h || src->y0 != 0.0 || src->y1 != out_h;

    int rc = src->norm ? step_out_pixels_as(ctx, out, out_h, out_w, c, PROTO_DTYPE_F32)
                       : step_out_pixels(ctx, out, out_h, out_w, c);
    if (rc < 0)
        return rc;
    size_t in_row = src->stride, mid_row = (size_t)out_w * c;
    struct rs_sink sink = {.out = out, .src = src, .h = out_h, .w = out_w, .c = c};
    /* Rows that are not out's own: a row before it is mirrored or
     * normalized, and a mirrored one before it is normalized. */
    size_t extra = src->mirror || src->norm ? mid_row : 0;
    if (src->mirror && src->norm)
        extra += mid_row;
    if (!need_h && !need_v) {
        if (src->mirror && src->norm && (sink.flip = malloc(mid_row)) == NULL)
            return step_fail(ctx, -ENOMEM, "%s: out of memory", who);
        for (uint32_t y = 0; y < in_h; y++)
            rs_emit(&sink, src->data + y * in_row, y);
        free(sink.flip);
        return 0;
    }

    struct rs_run r = {.in_w = in_w, .out_w = out_w, .c = c};
#if RS_HAVE_AVX2
    r.avx2_h = isa == STEP_RESIZE_ISA_AVX2 && need_h && rs_hplan_lanes(c) != 0;
    r.avx2_v = isa == STEP_RESIZE_ISA_AVX2;
#endif

    /* One block: the vertical pass' row pointers, the coefficient tables,
     * the AVX2 plan, the ring of horizontally resized rows and the rows on
     * their way to out. */
    uint32_t vtaps = need_v ? rs_ksize(&sv) : 0;
    size_t bytes = vtaps * sizeof(const uint8_t *);
    if (need_v)
        bytes += rs_axis_bytes(&sv);
    if (need_h)
        bytes += rs_axis_bytes(&sh);
#if RS_HAVE_AVX2
    if (r.avx2_h) {
        r.ah.ksize = rs_ksize(&sh);
        bytes += rs_hplan_bytes(&r.ah, in_w, out_w, c);
    }
#endif
    if (need_h && need_v)
        bytes += mid_row * (vtaps + 1); /* the ring: see below */
    bytes += extra;
    uint8_t *block = malloc(bytes), *p = block;
    if (block == NULL)
        return step_fail(ctx, -ENOMEM, "%s: out of memory (%zu bytes of scratch)", who,
                         bytes);

    const uint8_t **rows = (const uint8_t **)(void *)p;
    p += vtaps * sizeof(const uint8_t *);
    if (need_v)
        rs_axis_make(&r.av, &p, &sv);
    if (need_h)
        rs_axis_make(&r.ah, &p, &sh);
#if RS_HAVE_AVX2
    if (r.avx2_h)
        rs_hplan_make(&r.hplan, &p, &r.ah, in_w, out_w, c);
#endif
    /* Mirrored: each output row goes to tmp, then reversed into out (the
     * passes work on columns apart, so mirroring their rows mirrors the
     * image: the same bytes as random_flip after the resize). Normalized:
     * each row to tmp, then (mirrored into flip first) to floats in out,
     * the same values as normalize after the resize. */
    if (extra) {
        sink.tmp = p;
        p += mid_row;
        if (src->mirror && src->norm) {
            sink.flip = p;
            p += mid_row;
        }
    }

    if (!need_v) {
        for (uint32_t y = 0; y < in_h; y++) {
            rs_run_hrow(&r, src->data + y * in_row, NULL, rs_row(&sink, y), NULL, NULL,
                        NULL);
            if (extra)
                rs_emit(&sink, sink.tmp, y);
        }
    } else if (!need_h) {
        for (uint32_t yy = 0; yy < out_h; yy++) {
            for (uint32_t t = 0; t < r.av.count[yy]; t++)
                rows[t] = src->data + (size_t)(r.av.first[yy] + t) * in_row;
            rs_run_vrow(&r, rows, yy, rs_row(&sink, yy), mid_row);
            if (extra)
                rs_emit(&sink, sink.tmp, yy);
        }
    } else {
        /* Input row y goes to ring slot y % slots. Rows are computed in
         * pairs (one weight load for both), so an output row may compute
         * one row past its last when the next output row reads it. An
         * output row reads at most most consecutive rows: row y - slots,
         * whose slot row y (at most one past the last read) takes, is
         * behind the current output row's first. */
        uint8_t *ring = p;
        uint32_t slots = (r.av.most ? r.av.most : 1) + 1, next = 0;
        for (uint32_t yy = 0; yy < out_h; yy++) {
            uint32_t first = r.av.first[yy], end = first + r.av.count[yy];
            if (next < first)
                next = first;
            /* Row end, one ahead: only where output row yy + 1 reads it. */
            int ahead = yy + 1 < out_h && end < in_h && r.av.first[yy + 1] <= end &&
                        end < r.av.first[yy + 1] + r.av.count[yy + 1];
            while (next < end) {
                uint32_t n = next + 1 < end || ahead ? 2 : 1;
                const uint8_t *pf[2] = {NULL, NULL};
                for (uint32_t i = 0; i < n; i++)
                    if (next + i + RS_PREFETCH_ROWS < in_h)
                        pf[i] = src->data + (next + i + RS_PREFETCH_ROWS) * in_row;
                rs_run_hrow(&r, src->data + next * in_row,
                            n == 2 ? src->data + (next + 1) * in_row : NULL,
                            ring + (size_t)(next % slots) * mid_row,
                            ring + (size_t)((next + 1) % slots) * mid_row, pf[0], pf[1]);
                next += n;
            }
            for (uint32_t y = first; y < end; y++)
                rows[y - first] = ring + (size_t)(y % slots) * mid_row;
            rs_run_vrow(&r, rows, yy, rs_row(&sink, yy), mid_row);
            if (extra)
                rs_emit(&sink, sink.tmp, yy);
        }
    }
    free(block);
    return 0;
}

/* The resize of in for s (NULL: a shorter side of size), with kernel isa.
 * After a dct_scale decode the output shape comes from the original size
 * and the box covers the original's extent in the scaled pixels. */
static int rs_resize(const struct step *s, uint32_t size, enum step_resize_isa isa,
                     struct step_ctx *ctx, const struct img *in, struct img *out)
{
    struct step_resample_src src;
    uint64_t oh, ow;
    int rc = step_check_pixels(ctx, in, "resize");
    if (rc < 0)
        return rc;
    step_resample_src_img(&src, in);
    uint32_t h = in->h, w = in->w;
    if (in->src_h && in->src_w && in->scale_den) {
        h = in->src_h;
        w = in->src_w;
        src.x1 = (double)w * in->scale_num / in->scale_den;
        src.y1 = (double)h * in->scale_num / in->scale_den;
        if (src.x1 > in->w || src.y1 > in->h)
            return step_fail(ctx, -EINVAL, "resize: %ux%u is not %ux%u scaled by %u/%u",
                             in->w, in->h, w, h, in->scale_num, in->scale_den);
    }
    if (s == NULL || s->shorter) {
        step_resize_shape(s ? s->h : size, h, w, &oh, &ow);
    } else {
        oh = s->h;
        ow = s->w;
    }
    if (oh > RS_DIM_MAX || ow > RS_DIM_MAX)
        return step_fail(ctx, -E2BIG, "resize: %ux%u to %llux%llu is too large", w, h,
                         (unsigned long long)ow, (unsigned long long)oh);
    return step_resample(ctx, isa, &src, (uint32_t)oh, (uint32_t)ow, out, "resize");
}

int step_resize_apply_isa(uint32_t size, enum step_resize_isa isa,
                          struct step_ctx *ctx, const struct img *in, struct img *out)
{
    return rs_resize(NULL, size, isa, ctx, in, out);
}

int step_resize_apply(const struct step *s, struct step_ctx *ctx, const struct img *in,
                      struct img *out)
{
    return rs_resize(s, 0, STEP_RESIZE_ISA_AUTO, ctx, in, out);
}
