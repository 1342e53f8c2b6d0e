/*
 * Colour operations: Pillow's ImageEnhance, ImageOps and HSV conversion,
 * repeated operation for operation (see color.h). The comments name the
 * Pillow 9 C function each part follows (libImaging/Blend.c, Filter.c,
 * Convert.c; ImageOps.py and ImageEnhance.py for the Python parts).
 */
#include "exact.h"

#include <math.h>
#include <string.h>

#include "color.h"
#include "draw.h"

/* ---- Image.blend(degenerate, image, alpha) (ImagingBlend) ---- */

enum blend_kind { BLEND_DEGENERATE, BLEND_IMAGE, BLEND_INTERPOLATE, BLEND_EXTRAPOLATE };

struct blend {
    float alpha;
    enum blend_kind kind;
};

static struct blend blend_init(double factor)
{
    struct blend b = {(float)factor, BLEND_EXTRAPOLATE};
    if (b.alpha == 0.0f)
        b.kind = BLEND_DEGENERATE;
    else if (b.alpha == 1.0f)
        b.kind = BLEND_IMAGE;
    else if (b.alpha >= 0.0f && b.alpha <= 1.0f)
        b.kind = BLEND_INTERPOLATE;
    return b;
}

/* One byte: (int)in1 + alpha * ((int)in2 - (int)in1), in float. */
static inline uint8_t blend_px(const struct blend *b, int deg, int img)
{
    float t = (float)deg + b->alpha * (float)(img - deg);
    switch (b->kind) {
    case BLEND_DEGENERATE:
        return (uint8_t)deg;
    case BLEND_IMAGE:
        return (uint8_t)img;
    case BLEND_INTERPOLATE:
        return (uint8_t)t;
    default:
        return t <= 0.0f ? 0 : t >= 255.0f ? 255 : (uint8_t)t;
    }
}

static void lut_apply(const uint8_t *lut, const uint8_t *src, uint8_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = lut[src[i]];
}

/* A blend whose degenerate is one grey level for the whole image is a
 * table of the image's value. */
static void blend_constant(const uint8_t *src, uint8_t *dst, size_t n, int deg,
                           double factor)
{
    struct blend b = blend_init(factor);
    uint8_t lut[256];
    for (int v = 0; v < 256; v++)
        lut[v] = blend_px(&b, deg, v);
    lut_apply(lut, src, dst, n);
}

void color_brightness(const uint8_t *src, uint8_t *dst, size_t pixels, uint32_t c,
                      double factor)
{
    /* ImageEnhance.Brightness: the degenerate is Image.new(mode, size, 0). */
    blend_constant(src, dst, pixels * c, 0, factor);
}

void color_contrast(const uint8_t *src, uint8_t *dst, size_t pixels, uint32_t c,
                    double factor)
{
    /* ImageEnhance.Contrast: int(ImageStat.Stat(image.convert("L")).mean[0]
     * + 0.5), the mean of the L histogram (a sum of integers, exact in a
     * double) over the pixel count. */
    uint64_t sum = 0;
    for (size_t i = 0; i < pixels; i++)
        sum += c == 3 ? color_luma(src + i * 3) : src[i * c];
    int mean = pixels ? (int)((double)sum / (double)pixels + 0.5) : 0;
    blend_constant(src, dst, pixels * c, mean, factor);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define COLOR_HAVE_AVX2 1
#define COLOR_AVX2 __attribute__((target("avx2")))

/* Eight bytes at p as eight floats (exact). */
COLOR_AVX2 static inline __m256 ld8f(const uint8_t *p)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* Truncation of v, clamped to [0, 255] first, as eight bytes at d. */
COLOR_AVX2 static inline void st8u(uint8_t *d, __m256 v)
{
    v = _mm256_min_ps(_mm256_max_ps(v, _mm256_setzero_ps()), _mm256_set1_ps(255.0f));
    __m256i i = _mm256_cvttps_epi32(v);
    __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
    _mm_storel_epi64((__m128i *)d, _mm_packus_epi16(w, w));
}

/* color_saturation for RGB, eight pixels at a time from pixel i on while
 * i + 10 <= pixels (two 16-byte loads 12 bytes apart stay in the image):
 * the luma as color_luma's integers, then blend_px's float operations per
 * channel in the same order (no fused multiply-add), so the same bytes.
 * Interpolation and extrapolation only (a clamped truncation serves both).
 * Returns where it stopped. */
COLOR_AVX2 static size_t saturation_avx2(const uint8_t *src, uint8_t *dst, size_t i,
                                         size_t pixels, float alpha_f)
{
    /* Four RGB pixels of a 128-bit lane to R0-3 G0-3 B0-3, and back. */
    const __m256i planar = _mm256_broadcastsi128_si256(
        _mm_setr_epi8(0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11, -1, -1, -1, -1));
    const __m256i r32 = _mm256_broadcastsi128_si256(
        _mm_setr_epi8(0, -1, -1, -1, 1, -1, -1, -1, 2, -1, -1, -1, 3, -1, -1, -1));
    const __m256i g32 = _mm256_broadcastsi128_si256(
        _mm_setr_epi8(4, -1, -1, -1, 5, -1, -1, -1, 6, -1, -1, -1, 7, -1, -1, -1));
    const __m256i b32 = _mm256_broadcastsi128_si256(
        _mm_setr_epi8(8, -1, -1, -1, 9, -1, -1, -1, 10, -1, -1, -1, 11, -1, -1, -1));
    const __m256i packed = _mm256_broadcastsi128_si256(
        _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1));
    const __m256 alpha = _mm256_set1_ps(alpha_f), zero = _mm256_setzero_ps();
    const __m256 top = _mm256_set1_ps(255.0f);
    for (; i + 10 <= pixels; i += 8) {
        const uint8_t *s = src + i * 3;
        __m256i m = _mm256_shuffle_epi8(
            _mm256_setr_m128i(_mm_loadu_si128((const __m128i *)s),
                              _mm_loadu_si128((const __m128i *)(s + 12))),
            planar);
        __m256i r = _mm256_shuffle_epi8(m, r32), g = _mm256_shuffle_epi8(m, g32);
        __m256i b = _mm256_shuffle_epi8(m, b32);
        __m256i l = _mm256_add_epi32(
            _mm256_add_epi32(_mm256_mullo_epi32(r, _mm256_set1_epi32(19595)),
                             _mm256_mullo_epi32(g, _mm256_set1_epi32(38470))),
            _mm256_add_epi32(_mm256_mullo_epi32(b, _mm256_set1_epi32(7471)),
                             _mm256_set1_epi32(0x8000)));
        __m256 lf = _mm256_cvtepi32_ps(_mm256_srli_epi32(l, 16));
        __m256i out[3];
        __m256i ch[3] = {r, g, b};
        for (int k = 0; k < 3; k++) {
            __m256 t = _mm256_add_ps(
                lf, _mm256_mul_ps(alpha, _mm256_sub_ps(_mm256_cvtepi32_ps(ch[k]), lf)));
            out[k] = _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(t, zero), top));
        }
        __m256i v = _mm256_or_si256(out[0], _mm256_or_si256(_mm256_slli_epi32(out[1], 8),
                                                            _mm256_slli_epi32(out[2], 16)));
        v = _mm256_shuffle_epi8(v, packed);
        uint8_t *d = dst + i * 3;
        __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
        uint64_t q = (uint64_t)_mm_cvtsi128_si64(lo);
        uint32_t w = (uint32_t)_mm_extract_epi32(lo, 2);
        memcpy(d, &q, 8);
        memcpy(d + 8, &w, 4);
        q = (uint64_t)_mm_cvtsi128_si64(hi);
        w = (uint32_t)_mm_extract_epi32(hi, 2);
        memcpy(d + 12, &q, 8);
        memcpy(d + 20, &w, 4);
    }
    return i;
}

static int color_have_avx2(void)
{
    return __builtin_cpu_supports("avx2");
}
#else
#define COLOR_HAVE_AVX2 0
#endif

void color_saturation(const uint8_t *src, uint8_t *dst, size_t pixels, uint32_t c,
                      double factor)
{
    /* ImageEnhance.Color: the degenerate is image.convert("L").convert(mode). */
    struct blend b = blend_init(factor);
    if (c != 3) { /* L to L and back: the image itself */
        for (size_t i = 0; i < pixels * c; i++)
            dst[i] = blend_px(&b, src[i], src[i]);
        return;
    }
    size_t i = 0;
#if COLOR_HAVE_AVX2
    if ((b.kind == BLEND_INTERPOLATE || b.kind == BLEND_EXTRAPOLATE) && color_have_avx2()) {
        i = saturation_avx2(src, dst, 0, pixels, b.alpha);
        src += i * 3;
        dst += i * 3;
    }
#endif
    for (; i < pixels; i++, src += 3, dst += 3) {
        int l = color_luma(src);
        uint8_t r = blend_px(&b, l, src[0]), g = blend_px(&b, l, src[1]);
        dst[2] = blend_px(&b, l, src[2]);
        dst[0] = r;
        dst[1] = g;
    }
}

/* ---- ImageEnhance.Sharpness: ImageFilter.SMOOTH (ImagingFilter3x3) ---- */

/* Pillow's kernel: the list (1, 1, 1, 1, 5, 1, 1, 1, 1) as float32, each
 * divided by the float scale 13; the offset 0 plus the rounding 0.5. The
 * row below the pixel takes kernel[0..2], the pixel's row [3..5], the row
 * above [6..8]; each row is summed left to right, then added. */
static inline uint8_t smooth_px(const uint8_t *up, const uint8_t *mid, const uint8_t *down,
                                size_t d, float k1, float k5)
{
    float ss = 0.5f;
    ss += (float)down[-(ptrdiff_t)d] * k1 + (float)down[0] * k1 + (float)down[d] * k1;
    ss += (float)mid[-(ptrdiff_t)d] * k1 + (float)mid[0] * k5 + (float)mid[d] * k1;
    ss += (float)up[-(ptrdiff_t)d] * k1 + (float)up[0] * k1 + (float)up[d] * k1;
    return ss <= 0.0f ? 0 : ss >= 255.0f ? 255 : (uint8_t)ss;
}


#if COLOR_HAVE_AVX2
/* One row of the sharpness blend, eight bytes at a time from byte i on
 * while i + 8 <= end (every load stays in the three rows): smooth_px and
 * blend_px for eight bytes, the same float operations in the same order
 * (each a correctly rounded IEEE operation, no fused multiply-add: the
 * target has none), so the same bytes. Returns where it stopped. */
COLOR_AVX2 static size_t sharpness_row_avx2(const uint8_t *in, uint8_t *out, size_t row,
                                            size_t d, size_t i, size_t end, float k1f,
                                            float k5f, const struct blend *b)
{
    const __m256 k1 = _mm256_set1_ps(k1f), k5 = _mm256_set1_ps(k5f);
    const __m256 half = _mm256_set1_ps(0.5f), alpha = _mm256_set1_ps(b->alpha);
    const uint8_t *up = in - row, *down = in + row;
    for (; i + 8 <= end; i += 8) {
        __m256 ss = half;
        __m256 t = _mm256_add_ps(_mm256_mul_ps(ld8f(down + i - d), k1),
                                 _mm256_mul_ps(ld8f(down + i), k1));
        ss = _mm256_add_ps(ss, _mm256_add_ps(t, _mm256_mul_ps(ld8f(down + i + d), k1)));
        t = _mm256_add_ps(_mm256_mul_ps(ld8f(in + i - d), k1), _mm256_mul_ps(ld8f(in + i), k5));
        ss = _mm256_add_ps(ss, _mm256_add_ps(t, _mm256_mul_ps(ld8f(in + i + d), k1)));
        t = _mm256_add_ps(_mm256_mul_ps(ld8f(up + i - d), k1), _mm256_mul_ps(ld8f(up + i), k1));
        ss = _mm256_add_ps(ss, _mm256_add_ps(t, _mm256_mul_ps(ld8f(up + i + d), k1)));
        /* deg: the clamped truncation, back to float (exact) */
        __m256 deg = _mm256_cvtepi32_ps(_mm256_cvttps_epi32(
            _mm256_min_ps(_mm256_max_ps(ss, _mm256_setzero_ps()), _mm256_set1_ps(255.0f))));
        __m256 img = ld8f(in + i);
        /* (float)(img - deg): the difference of two integers, exact either way */
        st8u(out + i, _mm256_add_ps(deg, _mm256_mul_ps(alpha, _mm256_sub_ps(img, deg))));
    }
    return i;
}

#endif

void color_sharpness(const uint8_t *src, uint8_t *dst, uint32_t h, uint32_t w, uint32_t c,
                     double factor)
{
    struct blend b = blend_init(factor);
    volatile float thirteen = 13.0f; /* the division happens at run time in Pillow */
    const float k1 = 1.0f / thirteen, k5 = 5.0f / thirteen;
    size_t row = (size_t)w * c;
    if (b.kind == BLEND_IMAGE) { /* the image itself, border and all */
        memcpy(dst, src, row * h);
        return;
    }
    /* Interpolation and extrapolation both truncate a clamped float (an
     * interpolation's value is already inside [0, 255]): one vector loop. */
    int simd = 0;
#if COLOR_HAVE_AVX2
    simd = b.kind != BLEND_DEGENERATE && color_have_avx2();
#endif

    for (uint32_t y = 0; y < h; y++) {
        const uint8_t *in = src + y * row;
        uint8_t *out = dst + y * row;
        /* Pillow copies the border (and a whole image under 3x3). */
        if (y == 0 || y + 1 == h || h < 3 || w < 3) {
            memcpy(out, in, row);
            continue;
        }
        memcpy(out, in, c);
        size_t i = c;
#if COLOR_HAVE_AVX2
        if (simd)
            i = sharpness_row_avx2(in, out, row, c, i, row - c, k1, k5, &b);
#else
        (void)simd;
#endif
        for (; i < row - c; i++) {
            uint8_t deg = smooth_px(in - row + i, in + i, in + row + i, c, k1, k5);
            out[i] = blend_px(&b, deg, in[i]);
        }
        memcpy(out + row - c, in + row - c, c);
    }
}

/* ---- F.adjust_hue: RGB -> HSV -> RGB (Convert.c rgb2hsv, hsv2rgb) ---- */

static inline uint8_t clip8i(int v)
{
    return v <= 0 ? 0 : v >= 255 ? 255 : (uint8_t)v;
}

static void rgb2hsv(const uint8_t *in, uint8_t *out)
{
    uint8_t r = in[0], g = in[1], b = in[2];
    uint8_t maxc = r > g ? (r > b ? r : b) : (g > b ? g : b);
    uint8_t minc = r < g ? (r < b ? r : b) : (g < b ? g : b);
    uint8_t uh = 0, us = 0;
    if (minc != maxc) {
        float cr = (float)(maxc - minc);
        float s = cr / (float)maxc;
        float rc = ((float)(maxc - r)) / cr;
        float gc = ((float)(maxc - g)) / cr;
        float bc = ((float)(maxc - b)) / cr;
        float hh;
        if (r == maxc)
            hh = bc - gc;
        else if (g == maxc)
            hh = (float)(2.0 + rc - bc);
        else
            hh = (float)(4.0 + gc - rc);
        hh = (float)fmod(hh / 6.0 + 1.0, 1.0);
        uh = clip8i((int)(hh * 255.0));
        us = clip8i((int)(s * 255.0));
    }
    out[0] = uh;
    out[1] = us;
    out[2] = maxc;
}

static void hsv2rgb(const uint8_t *in, uint8_t *out)
{
    uint8_t h = in[0], s = in[1], v = in[2];
    if (s == 0) {
        out[0] = out[1] = out[2] = v;
        return;
    }
    int i = (int)floor((float)h * 6.0 / 255.0);
    float f = (float)((float)h * 6.0 / 255.0 - (float)i);
    float fs = (float)(((float)s) / 255.0);
    uint8_t up = clip8i((int)round((float)v * (1.0 - fs)));
    uint8_t uq = clip8i((int)round((float)v * (1.0 - fs * f)));
    uint8_t ut = clip8i((int)round((float)v * (1.0 - fs * (1.0 - f))));
    switch (i % 6) {
    case 0: out[0] = v; out[1] = ut; out[2] = up; break;
    case 1: out[0] = uq; out[1] = v; out[2] = up; break;
    case 2: out[0] = up; out[1] = v; out[2] = ut; break;
    case 3: out[0] = up; out[1] = uq; out[2] = v; break;
    case 4: out[0] = ut; out[1] = up; out[2] = v; break;
    default: out[0] = v; out[1] = up; out[2] = uq; break;
    }
}

void color_hue(const uint8_t *src, uint8_t *dst, size_t pixels, uint32_t c, double hue)
{
    if (c != 3) { /* torchvision returns mode L images as they are */
        if (dst != src)
            memcpy(dst, src, pixels * c);
        return;
    }
    /* np.uint8(hue_factor * 255): truncated toward zero, then modulo 256. */
    uint8_t shift = (uint8_t)(int)(hue * 255.0);
    for (size_t i = 0; i < pixels; i++, src += 3, dst += 3) {
        uint8_t hsv[3];
        rgb2hsv(src, hsv);
        hsv[0] = (uint8_t)(hsv[0] + shift);
        hsv2rgb(hsv, dst);
    }
}

void color_grayscale(const uint8_t *src, uint8_t *dst, size_t pixels, uint32_t c)
{
    if (c != 3) {
        if (dst != src)
            memcpy(dst, src, pixels * c);
        return;
    }
    for (size_t i = 0; i < pixels; i++, src += 3, dst += 3)
        dst[0] = dst[1] = dst[2] = color_luma(src);
}

/* ---- ImageOps: lookup tables ---- */

void color_posterize(const uint8_t *src, uint8_t *dst, size_t pixels, uint32_t c,
                     uint32_t bits)
{
    uint8_t lut[256];
    int mask = ~((1 << (8 - (bits > 8 ? 8 : bits))) - 1);
    for (int v = 0; v < 256; v++)
        lut[v] = (uint8_t)(v & mask);
    lut_apply(lut, src, dst, pixels * c);
}

void color_solarize(const uint8_t *src, uint8_t *dst, size_t pixels, uint32_t c,
                    double threshold)
{
    uint8_t lut[256];
    for (int v = 0; v < 256; v++)
        lut[v] = (double)v < threshold ? (uint8_t)v : (uint8_t)(255 - v);
    lut_apply(lut, src, dst, pixels * c);
}

void color_invert(const uint8_t *src, uint8_t *dst, size_t pixels, uint32_t c)
{
    for (size_t i = 0; i < pixels * c; i++)
        dst[i] = (uint8_t)(255 - src[i]);
}

/* Image.histogram(): 256 counts per channel. */
static void histogram(const uint8_t *src, size_t pixels, uint32_t c, uint32_t (*h)[256])
{
    memset(h, 0, sizeof(*h) * c);
    if (c == 3) {
        /* Odd pixels into a second set of counts, added at the end: runs of
         * equal bytes no longer wait on the previous increment of one count. */
        uint32_t odd[3][256];
        memset(odd, 0, sizeof(odd));
        size_t i = 0;
        for (; i + 2 <= pixels; i += 2, src += 6) {
            h[0][src[0]]++;
            h[1][src[1]]++;
            h[2][src[2]]++;
            odd[0][src[3]]++;
            odd[1][src[4]]++;
            odd[2][src[5]]++;
        }
        if (i < pixels) {
            h[0][src[0]]++;
            h[1][src[1]]++;
            h[2][src[2]]++;
        }
        for (int ch = 0; ch < 3; ch++)
            for (int v = 0; v < 256; v++)
                h[ch][v] += odd[ch][v];
        return;
    }
    for (size_t i = 0; i < pixels; i++)
        for (uint32_t ch = 0; ch < c; ch++)
            h[ch][src[i * c + ch]]++;
}

/* Applies one table per channel. */
static void lut_apply_channels(uint8_t (*lut)[256], const uint8_t *src, uint8_t *dst,
                               size_t pixels, uint32_t c)
{
    if (c == 3) {
        for (size_t i = 0; i < pixels; i++, src += 3, dst += 3) {
            dst[0] = lut[0][src[0]];
            dst[1] = lut[1][src[1]];
            dst[2] = lut[2][src[2]];
        }
        return;
    }
    for (size_t i = 0; i < pixels; i++)
        for (uint32_t ch = 0; ch < c; ch++)
            dst[i * c + ch] = lut[ch][src[i * c + ch]];
}

void color_autocontrast(const uint8_t *src, uint8_t *dst, size_t pixels, uint32_t c)
{
    uint32_t h[3][256];
    uint8_t lut[3][256];
    if (c > 3)
        c = 3;
    histogram(src, pixels, c, h);
    for (uint32_t ch = 0; ch < c; ch++) {
        int lo = 0, hi = 255;
        while (lo < 256 && h[ch][lo] == 0)
            lo++;
        while (hi >= 0 && h[ch][hi] == 0)
            hi--;
        if (hi <= lo) {
            for (int v = 0; v < 256; v++)
                lut[ch][v] = (uint8_t)v;
            continue;
        }
        double scale = 255.0 / (hi - lo), offset = -lo * scale;
        for (int v = 0; v < 256; v++) {
            double t = v * scale + offset;
            int ix = (int)t; /* Python int(): toward zero */
            lut[ch][v] = clip8i(ix);
        }
    }
    lut_apply_channels(lut, src, dst, pixels, c);
}

void color_equalize(const uint8_t *src, uint8_t *dst, size_t pixels, uint32_t c)
{
    uint32_t h[3][256];
    uint8_t lut[3][256];
    if (c > 3)
        c = 3;
    histogram(src, pixels, c, h);
    for (uint32_t ch = 0; ch < c; ch++) {
        /* step = (sum of the non-zero counts - the last of them) // 255 */
        uint64_t sum = 0, last = 0;
        int nonzero = 0;
        for (int v = 0; v < 256; v++) {
            if (h[ch][v]) {
                sum += h[ch][v];
                last = h[ch][v];
                nonzero++;
            }
        }
        uint64_t step = nonzero > 1 ? (sum - last) / 255 : 0;
        if (step == 0) {
            for (int v = 0; v < 256; v++)
                lut[ch][v] = (uint8_t)v;
            continue;
        }
        uint64_t n = step / 2;
        for (int v = 0; v < 256; v++) {
            uint64_t q = n / step;
            lut[ch][v] = (uint8_t)(q > 255 ? 255 : q);
            n += h[ch][v];
        }
    }
    lut_apply_channels(lut, src, dst, pixels, c);
}

/* ---- ColorJitter ---- */

void color_jitter_draw(const struct color_jitter_params *p, uint64_t *st,
                       struct color_jitter *j)
{
    draw_permutation(st, j->order, 4);
    for (int f = 0; f < 4; f++) {
        j->on[f] = p->on[f];
        j->factor[f] = p->on[f] ? draw_uniform(st, p->range[f][0], p->range[f][1]) : 0.0;
    }
}

void color_jitter_apply(const struct color_jitter *j, const uint8_t *src, uint8_t *dst,
                        size_t pixels, uint32_t c)
{
    if (dst != src)
        memcpy(dst, src, pixels * c);
    for (int k = 0; k < 4; k++) {
        uint32_t f = j->order[k];
        if (f >= 4 || !j->on[f])
            continue;
        switch ((enum color_jitter_fn)f) {
        case JITTER_BRIGHTNESS:
            color_brightness(dst, dst, pixels, c, j->factor[f]);
            break;
        case JITTER_CONTRAST:
            color_contrast(dst, dst, pixels, c, j->factor[f]);
            break;
        case JITTER_SATURATION:
            color_saturation(dst, dst, pixels, c, j->factor[f]);
            break;
        case JITTER_HUE:
            color_hue(dst, dst, pixels, c, j->factor[f]);
            break;
        }
    }
}
