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
 * step_norm_pixels converts any run of pixels into their place in the
 * output, which lets random_resized_crop write each output row as floats
 * while it is in the L1 cache (pipeline.c fuses the two).
 */
#include <errno.h>
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
struct nz_cache {
    int valid;
    uint32_t c, nmean;
    float mean[STEP_CHANNELS_MAX], std[STEP_CHANNELS_MAX];
    nz_tab tab;
};
static __thread struct nz_cache nz_cached;

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
#endif

const float *step_norm_prepare(const struct step *s, struct step_ctx *ctx, uint32_t c)
{
    const char *who = step_name(s->kind);
    if (c > STEP_CHANNELS_MAX || (s->nmean != 1 && s->nmean != c)) {
        step_fail(ctx, -EINVAL, "%s: %u values for %u channels", who, s->nmean, c);
        return NULL;
    }
    struct nz_cache *z = &nz_cached;
    if (z->valid && z->c == c && z->nmean == s->nmean &&
        memcmp(z->mean, s->mean, sizeof(z->mean)) == 0 &&
        memcmp(z->std, s->std, sizeof(z->std)) == 0)
        return &z->tab[0][0];
    z->valid = 0;
    for (uint32_t ch = 0; ch < c; ch++) {
        uint32_t k = s->nmean == 1 ? 0 : ch;
        nz_table(z->tab[ch], s->mean[k], s->std[k]);
    }
    z->c = c;
    z->nmean = s->nmean;
    memcpy(z->mean, s->mean, sizeof(z->mean));
    memcpy(z->std, s->std, sizeof(z->std));
    z->valid = 1;
    return &z->tab[0][0];
}

void step_norm_pixels(const struct step *s, const float *tables, const uint8_t *src,
                      size_t n, uint32_t c, uint8_t *dst, size_t total, size_t at)
{
    const nz_tab *tp = (const nz_tab *)(const void *)tables;
    const float(*tab)[256] = *tp;
    if (s->layout == STEP_LAYOUT_NCHW) {
        size_t plane = total * sizeof(float);
        dst += at * sizeof(float);
        if (c == 3) {
            uint8_t *d0 = dst, *d1 = dst + plane, *d2 = dst + 2 * plane;
            size_t i = nz_have_avx2() ? nz_planar3_avx2(tab, src, (float *)(void *)dst,
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
        size_t i = nz_have_avx2() ? nz_packed3_avx2(tab, src, (float *)(void *)dst, total, n)
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

int step_normalize_apply(const struct step *s, struct step_ctx *ctx, const struct img *in,
                         struct img *out)
{
    int rc = step_check_pixels(ctx, in, step_name(s->kind));
    if (rc < 0)
        return rc;
    const float *tables = step_norm_prepare(s, ctx, in->c);
    if (tables == NULL)
        return -EINVAL;
    size_t n = (size_t)in->h * in->w;
    rc = step_out_pixels_as(ctx, out, in->h, in->w, in->c, PROTO_DTYPE_F32);
    if (rc < 0)
        return rc;
    step_norm_pixels(s, tables, in->data, n, in->c, out->data, n, 0);
    return 0;
}
