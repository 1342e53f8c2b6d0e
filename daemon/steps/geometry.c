/*
 * Geometric operations: Pillow's affine engines and Image.rotate, and
 * torchvision's inverse affine matrix (see geometry.h). Each function says
 * which Pillow or torchvision code it repeats; the arithmetic is kept in the
 * same order and precision, since a different rounding moves pixels.
 */
#include "exact.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "draw.h"
#include "geometry.h"

/* CPython's math.radians: x * (pi / 180). */
static const double deg2rad = M_PI / 180.0;

/* Geometry.c's COORD and FLOOR, bounded so that a wild matrix (a shear near
 * 90 degrees) maps far outside any image instead of overflowing an int. */
#define GEOM_FAR 1.0e9

static inline int coord(double v)
{
    return v < 0.0 ? -1 : v >= GEOM_FAR ? (int)GEOM_FAR : (int)v;
}

static inline int floor_int(double v)
{
    if (v <= -GEOM_FAR)
        return -(int)GEOM_FAR;
    if (v >= GEOM_FAR)
        return (int)GEOM_FAR;
    return v < 0.0 ? (int)floor(v) : (int)v;
}

/* One pixel of c bytes: inline for 1 and 3 (a memcpy of a variable size is
 * a library call per pixel). */
static inline void copy_px(uint8_t *dst, const uint8_t *src, uint32_t c)
{
    if (c == 3) {
        dst[0] = src[0];
        dst[1] = src[1];
        dst[2] = src[2];
    } else if (c == 1) {
        dst[0] = src[0];
    } else {
        memcpy(dst, src, c);
    }
}

static void fill_image(uint8_t *dst, size_t pixels, uint32_t c, const uint8_t *fill)
{
    if (c == 1 || (c == 3 && fill[0] == fill[1] && fill[1] == fill[2])) {
        memset(dst, fill[0], pixels * c);
        return;
    }
    for (size_t i = 0; i < pixels; i++, dst += c)
        copy_px(dst, fill, c);
}

/* ---- nearest neighbour ---- */

/* ImagingScaleAffine: no rotation or shear. Source columns are stepped once
 * for the row (xo += a[0]); the columns between the first and the last that
 * land inside are copied, rows stepped the same way. */
static void affine_scale(const uint8_t *src, uint8_t *dst, uint32_t h, uint32_t w,
                         uint32_t c, const double *a)
{
    size_t row = (size_t)w * c;
    uint32_t xmin = w, xmax = 0;
    double xo = a[2] + a[0] * 0.5;
    for (uint32_t x = 0; x < w; x++) {
        int xin = coord(xo);
        if (xin >= 0 && xin < (int)w) {
            xmax = x + 1;
            if (x < xmin)
                xmin = x;
        }
        xo += a[0];
    }
    double yo = a[5] + a[4] * 0.5;
    for (uint32_t y = 0; y < h; y++) {
        int yi = coord(yo);
        if (yi >= 0 && yi < (int)h) {
            const uint8_t *in = src + (size_t)yi * row;
            uint8_t *out = dst + (size_t)y * row;
            xo = a[2] + a[0] * 0.5;
            for (uint32_t x = 0; x < xmax; x++) {
                int xin = coord(xo);
                xo += a[0];
                if (x < xmin)
                    continue;
                /* Pillow's table holds 0 for a column outside (calloc). */
                if (xin < 0 || xin >= (int)w)
                    xin = 0;
                copy_px(out + (size_t)x * c, in + (size_t)xin * c, c);
            }
        }
        yo += a[4];
    }
}

/* check_fixed: a corner maps inside what 16.16 fixed point holds. */
static int fixed_ok(const double *a, double x, double y)
{
    return fabs(x * a[0] + y * a[1] + a[2]) < 32768.0 &&
           fabs(x * a[3] + y * a[4] + a[5]) < 32768.0;
}

/* affine_fixed: 16.16 fixed point, FIX(v) = FLOOR(v * 65536 + 0.5). */
static void affine_fixed(const uint8_t *src, uint8_t *dst, uint32_t h, uint32_t w,
                         uint32_t c, const double *a)
{
#define FIX(v) ((int64_t)floor_int((v) * 65536.0 + 0.5))
    int64_t a0 = FIX(a[0]), a1 = FIX(a[1]), a3 = FIX(a[3]), a4 = FIX(a[4]);
    int64_t a2 = FIX(a[2] + a[0] * 0.5 + a[1] * 0.5);
    int64_t a5 = FIX(a[5] + a[3] * 0.5 + a[4] * 0.5);
#undef FIX
    size_t row = (size_t)w * c;
    for (uint32_t y = 0; y < h; y++) {
        int64_t xx = a2, yy = a5;
        uint8_t *out = dst + (size_t)y * row;
        for (uint32_t x = 0; x < w; x++, out += c) {
            int64_t xin = xx >> 16, yin = yy >> 16;
            if (xin >= 0 && xin < w && yin >= 0 && yin < h)
                copy_px(out, src + ((size_t)yin * w + (size_t)xin) * c, c);
            xx += a0;
            yy += a3;
        }
        a2 += a1;
        a5 += a4;
    }
}

/* The double precision nearest path ImagingTransformAffine falls back on
 * when a corner maps beyond the fixed point range. */
static void affine_double(const uint8_t *src, uint8_t *dst, uint32_t h, uint32_t w,
                          uint32_t c, const double *a)
{
    double xo = a[2] + a[1] * 0.5 + a[0] * 0.5;
    double yo = a[5] + a[4] * 0.5 + a[3] * 0.5;
    size_t row = (size_t)w * c;
    for (uint32_t y = 0; y < h; y++) {
        double xx = xo, yy = yo;
        uint8_t *out = dst + (size_t)y * row;
        for (uint32_t x = 0; x < w; x++, out += c) {
            int xin = coord(xx), yin = coord(yy);
            if (xin >= 0 && xin < (int)w && yin >= 0 && yin < (int)h)
                copy_px(out, src + ((size_t)yin * w + (size_t)xin) * c, c);
            xx += a[0];
            yy += a[3];
        }
        xo += a[1];
        yo += a[4];
    }
}

/* ---- bilinear (ImagingGenericTransform with bilinear_filter) ---- */

/* Where pixel x of a row samples (BILINEAR_HEAD, and the clipped columns
 * and rows of BILINEAR_BODY): 0 when it maps outside (it keeps the fill).
 * The products a[1] * yc and a[4] * yc are the row's (rx, ry), and each sum
 * is formed in the order of a[0] * xc + a[1] * yc + a[2]: the same doubles
 * as per pixel. */
struct bl_at {
    double dx, dy;
    int x0, x1, y0, y1; /* y1: the row below, -1 when there is none */
};

static inline __attribute__((always_inline)) int
bilinear_at(uint32_t h, uint32_t w, const double *a, double rx, double ry, uint32_t x,
            struct bl_at *p)
{
    /* affine_transform: the pixel's centre */
    double xc = x + 0.5;
    double xin = a[0] * xc + rx + a[2];
    double yin = a[3] * xc + ry + a[5];
    if (xin < 0.0 || xin >= w || yin < 0.0 || yin >= h)
        return 0;
    xin -= 0.5;
    yin -= 0.5;
    int xi = floor_int(xin), yi = floor_int(yin);
    p->dx = xin - xi;
    p->dy = yin - yi;
    p->y0 = yi < 0 ? 0 : yi < (int)h ? yi : (int)h - 1;
    p->x0 = xi < 0 ? 0 : xi < (int)w ? xi : (int)w - 1;
    p->x1 = xi + 1 < 0 ? 0 : xi + 1 < (int)w ? xi + 1 : (int)w - 1;
    p->y1 = yi + 1 >= 0 && yi + 1 < (int)h ? yi + 1 : -1;
    return 1;
}

/* One row; c a constant where it is inlined for 3 (the compiler then
 * unrolls the channels). */
static inline __attribute__((always_inline)) void
bilinear_row(const uint8_t *src, uint8_t *out, uint32_t h, uint32_t w, const uint32_t c,
             const double *a, uint32_t y)
{
    size_t row = (size_t)w * c;
    {
        const double yc = y + 0.5, rx = a[1] * yc, ry = a[4] * yc;
        for (uint32_t x = 0; x < w; x++, out += c) {
            struct bl_at at;
            if (!bilinear_at(h, w, a, rx, ry, x, &at))
                continue; /* keeps the fill */
            double dx = at.dx, dy = at.dy;
            int x0 = at.x0, x1 = at.x1, next = at.y1 >= 0;
            const uint8_t *r0 = src + (size_t)at.y0 * row;
            const uint8_t *r1 = src + (size_t)(next ? at.y1 : at.y0) * row;
            for (uint32_t b = 0; b < c; b++) {
                int p0 = r0[(size_t)x0 * c + b], p1 = r0[(size_t)x1 * c + b];
                double v1 = p0 + (p1 - p0) * dx, v2 = v1;
                if (next) {
                    int q0 = r1[(size_t)x0 * c + b], q1 = r1[(size_t)x1 * c + b];
                    v2 = q0 + (q1 - q0) * dx;
                }
                v1 = v1 + (v2 - v1) * dy;
                out[b] = (uint8_t)v1;
            }
        }
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define GEOM_HAVE_AVX2 1
#define GEOM_AVX2 __attribute__((target("avx2")))

/* An RGB pixel's three bytes as four doubles (the fourth 0); reads exactly
 * three bytes. */
GEOM_AVX2 static inline __m256d px3_pd(const uint8_t *p)
{
    uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16;
    return _mm256_cvtepi32_pd(_mm_cvtepu8_epi32(_mm_cvtsi32_si128((int)v)));
}

/* One RGB pixel of bilinear_row, the three channels in the lanes of one
 * vector: the same coordinates (computed as there), then the same three
 * interpolations in double, each lane's operations those of its channel
 * (correctly rounded IEEE operations in the same order, no fused
 * multiply-add: the target has none), so the same bytes. */
GEOM_AVX2 static inline void bilinear_px3_avx2(const uint8_t *src, uint8_t *out, uint32_t h,
                                               uint32_t w, const double *a, double rx,
                                               double ry, uint32_t x)
{
    size_t row = (size_t)w * 3;
    struct bl_at at;
    if (!bilinear_at(h, w, a, rx, ry, x, &at))
        return; /* keeps the fill */
    const uint8_t *r0 = src + (size_t)at.y0 * row;
    __m256d vdx = _mm256_set1_pd(at.dx);
    __m256d p0 = px3_pd(r0 + (size_t)at.x0 * 3), p1 = px3_pd(r0 + (size_t)at.x1 * 3);
    __m256d v1 = _mm256_add_pd(p0, _mm256_mul_pd(_mm256_sub_pd(p1, p0), vdx)), v2 = v1;
    if (at.y1 >= 0) {
        const uint8_t *r1 = src + (size_t)at.y1 * row;
        __m256d q0 = px3_pd(r1 + (size_t)at.x0 * 3), q1 = px3_pd(r1 + (size_t)at.x1 * 3);
        v2 = _mm256_add_pd(q0, _mm256_mul_pd(_mm256_sub_pd(q1, q0), vdx));
    }
    v1 = _mm256_add_pd(v1, _mm256_mul_pd(_mm256_sub_pd(v2, v1), _mm256_set1_pd(at.dy)));
    /* (uint8_t) of a value in [0, 255]: truncation */
    __m128i i = _mm256_cvttpd_epi32(v1);
    uint32_t v = (uint32_t)_mm_cvtsi128_si32(_mm_packus_epi16(_mm_packus_epi32(i, i), i));
    out[0] = (uint8_t)v;
    out[1] = (uint8_t)(v >> 8);
    out[2] = (uint8_t)(v >> 16);
}

/* Channel k of four gathered pixels (a byte of each 32-bit word) as doubles. */
GEOM_AVX2 static inline __m256d ch_pd(__m128i words, int k)
{
    __m128i b = _mm_and_si128(_mm_srl_epi32(words, _mm_cvtsi32_si128(8 * k)),
                              _mm_set1_epi32(0xff));
    return _mm256_cvtepi32_pd(b);
}

/* v1 + (v2 - v1) * d, as BILINEAR does. */
GEOM_AVX2 static inline __m256d lerp_pd(__m256d v1, __m256d v2, __m256d d)
{
    return _mm256_add_pd(v1, _mm256_mul_pd(_mm256_sub_pd(v2, v1), d));
}

/* bilinear_row for RGB, four pixels at once with a pixel per lane: the
 * coordinates as bilinear_row forms them (x + 0.5, then a[0] * xc + rx +
 * a[2], ...: the same operations per lane; floor of a value in [-0.5, w) is
 * floor_int's), each channel's three interpolations likewise, so the same
 * bytes. A group with a pixel outside, or whose 4-byte loads would pass the
 * image's end, goes pixel by pixel. */
GEOM_AVX2 static void bilinear_row3_avx2(const uint8_t *src, uint8_t *out, uint32_t h,
                                         uint32_t w, const double *a, uint32_t y)
{
    size_t row = (size_t)w * 3;
    const double yc = y + 0.5, rx = a[1] * yc, ry = a[4] * yc;
    uint32_t x = 0;
    if ((uint64_t)row * h < (1u << 31)) { /* 32-bit gather offsets */
        const __m256d a0 = _mm256_set1_pd(a[0]), a2 = _mm256_set1_pd(a[2]);
        const __m256d a3 = _mm256_set1_pd(a[3]), a5 = _mm256_set1_pd(a[5]);
        const __m256d vrx = _mm256_set1_pd(rx), vry = _mm256_set1_pd(ry);
        const __m256d half = _mm256_set1_pd(0.5), zero = _mm256_setzero_pd();
        const __m256d vw = _mm256_set1_pd((double)w), vh = _mm256_set1_pd((double)h);
        const __m128i wmax = _mm_set1_epi32((int)w - 1), one = _mm_set1_epi32(1);
        const __m128i hmax = _mm_set1_epi32((int)h - 1), zi = _mm_setzero_si128();
        const __m128i three = _mm_set1_epi32(3), vrow = _mm_set1_epi32((int)row);
        const int last = (int)(row * h) - 4; /* the largest offset a 4-byte load may take */
        /* r0 g0 b0 r1 g1 b1 ... from r0..r3 g0..g3 b0..b3 */
        const __m128i inter = _mm_setr_epi8(0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11, -1, -1, -1, -1);
        for (; x + 4 <= w; x += 4) {
            __m256d xc = _mm256_add_pd(
                _mm256_cvtepi32_pd(_mm_add_epi32(_mm_set1_epi32((int)x),
                                                 _mm_setr_epi32(0, 1, 2, 3))), half);
            __m256d xin = _mm256_add_pd(_mm256_add_pd(_mm256_mul_pd(a0, xc), vrx), a2);
            __m256d yin = _mm256_add_pd(_mm256_add_pd(_mm256_mul_pd(a3, xc), vry), a5);
            __m256d in = _mm256_and_pd(
                _mm256_and_pd(_mm256_cmp_pd(xin, zero, _CMP_GE_OQ),
                              _mm256_cmp_pd(xin, vw, _CMP_LT_OQ)),
                _mm256_and_pd(_mm256_cmp_pd(yin, zero, _CMP_GE_OQ),
                              _mm256_cmp_pd(yin, vh, _CMP_LT_OQ)));
            int m = _mm256_movemask_pd(in);
            if (m == 0)
                continue;
            if (m != 0xf)
                goto by_pixel;
            xin = _mm256_sub_pd(xin, half);
            yin = _mm256_sub_pd(yin, half);
            __m256d xf = _mm256_floor_pd(xin), yf = _mm256_floor_pd(yin);
            __m256d dx = _mm256_sub_pd(xin, xf), dy = _mm256_sub_pd(yin, yf);
            __m128i xi = _mm256_cvttpd_epi32(xf), yi = _mm256_cvttpd_epi32(yf);
            __m128i x0 = _mm_min_epi32(_mm_max_epi32(xi, zi), wmax);
            __m128i x1 = _mm_min_epi32(_mm_max_epi32(_mm_add_epi32(xi, one), zi), wmax);
            __m128i y0 = _mm_min_epi32(_mm_max_epi32(yi, zi), hmax);
            __m128i y1 = _mm_add_epi32(yi, one);
            /* next: yi + 1 inside; elsewhere row y0 is read and v2 = v1 */
            __m128i next = _mm_andnot_si128(_mm_cmpgt_epi32(y1, hmax),
                                            _mm_cmpgt_epi32(y1, _mm_set1_epi32(-1)));
            y1 = _mm_blendv_epi8(y0, y1, next);
            __m128i o0 = _mm_mullo_epi32(y0, vrow), o1 = _mm_mullo_epi32(y1, vrow);
            __m128i c0 = _mm_mullo_epi32(x0, three), c1 = _mm_mullo_epi32(x1, three);
            __m128i op0 = _mm_add_epi32(o0, c0), op1 = _mm_add_epi32(o0, c1);
            __m128i oq0 = _mm_add_epi32(o1, c0), oq1 = _mm_add_epi32(o1, c1);
            __m128i most = _mm_max_epi32(_mm_max_epi32(op0, op1), _mm_max_epi32(oq0, oq1));
            most = _mm_max_epi32(most, _mm_shuffle_epi32(most, 0x4e));
            most = _mm_max_epi32(most, _mm_shuffle_epi32(most, 0xb1));
            if (_mm_cvtsi128_si32(most) > last)
                goto by_pixel;
            const int *base = (const int *)(const void *)src;
            __m128i wp0 = _mm_i32gather_epi32(base, op0, 1), wp1 = _mm_i32gather_epi32(base, op1, 1);
            __m128i wq0 = _mm_i32gather_epi32(base, oq0, 1), wq1 = _mm_i32gather_epi32(base, oq1, 1);
            __m256d nextd = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(next));
            __m128i res[3];
            for (int k = 0; k < 3; k++) {
                __m256d v1 = lerp_pd(ch_pd(wp0, k), ch_pd(wp1, k), dx);
                __m256d v2 = lerp_pd(ch_pd(wq0, k), ch_pd(wq1, k), dx);
                v2 = _mm256_blendv_pd(v1, v2, nextd);
                res[k] = _mm256_cvttpd_epi32(lerp_pd(v1, v2, dy));
            }
            __m128i rg = _mm_packus_epi32(res[0], res[1]), bb = _mm_packus_epi32(res[2], res[2]);
            __m128i bytes = _mm_shuffle_epi8(_mm_packus_epi16(rg, bb), inter);
            uint8_t *d = out + (size_t)x * 3;
            uint64_t lo = (uint64_t)_mm_cvtsi128_si64(bytes);
            uint32_t hi = (uint32_t)_mm_extract_epi32(bytes, 2);
            memcpy(d, &lo, 8);
            memcpy(d + 8, &hi, 4);
            continue;
        by_pixel:
            for (uint32_t k = 0; k < 4; k++)
                bilinear_px3_avx2(src, out + (size_t)(x + k) * 3, h, w, a, rx, ry, x + k);
        }
    }
    for (; x < w; x++)
        bilinear_px3_avx2(src, out + (size_t)x * 3, h, w, a, rx, ry, x);
}

static int geom_have_avx2(void)
{
    return __builtin_cpu_supports("avx2");
}
#else
#define GEOM_HAVE_AVX2 0
#endif

/* A matrix that only moves by whole pixels (a translation by integers, what
 * TranslateX/Y give): the bilinear filter's weights are then 0 (xin - 0.5
 * is the integer x + a[2]), v1 + (v2 - v1) * 0 is v1 and each pixel is the
 * source's at (x + a[2], y + a[5]) when that is inside, else the fill: rows
 * copied. Returns 0 when the matrix is not such a move. */
static int affine_shift(const uint8_t *src, uint8_t *dst, uint32_t h, uint32_t w,
                        uint32_t c, const double *a)
{
    if (!(a[0] == 1.0 && a[1] == 0.0 && a[3] == 0.0 && a[4] == 1.0 &&
          a[2] == floor(a[2]) && a[5] == floor(a[5]) && fabs(a[2]) < 1 << 24 &&
          fabs(a[5]) < 1 << 24 && w < 1 << 24 && h < 1 << 24))
        return 0;
    long dx = (long)a[2], dy = (long)a[5];
    /* Columns x with 0 <= x + dx < w, rows likewise. */
    long x0 = dx < 0 ? -dx : 0, x1 = (long)w - (dx > 0 ? dx : 0);
    long y0 = dy < 0 ? -dy : 0, y1 = (long)h - (dy > 0 ? dy : 0);
    if (x0 >= x1 || y0 >= y1)
        return 1;
    size_t row = (size_t)w * c;
    for (long y = y0; y < y1; y++)
        memcpy(dst + (size_t)y * row + (size_t)x0 * c,
               src + (size_t)(y + dy) * row + (size_t)(x0 + dx) * c, (size_t)(x1 - x0) * c);
    return 1;
}

static void affine_bilinear(const uint8_t *src, uint8_t *dst, uint32_t h, uint32_t w,
                            uint32_t c, const double *a)
{
    if (affine_shift(src, dst, h, w, c, a))
        return;
    size_t row = (size_t)w * c;
#if GEOM_HAVE_AVX2
    if (c == 3 && geom_have_avx2()) {
        for (uint32_t y = 0; y < h; y++)
            bilinear_row3_avx2(src, dst + (size_t)y * row, h, w, a, y);
        return;
    }
#endif
    for (uint32_t y = 0; y < h; y++) {
        if (c == 3)
            bilinear_row(src, dst + (size_t)y * row, h, w, 3, a, y);
        else
            bilinear_row(src, dst + (size_t)y * row, h, w, c, a, y);
    }
}

void geom_transform(const uint8_t *src, uint8_t *dst, uint32_t h, uint32_t w, uint32_t c,
                    const double m[6], enum geom_interp interp, const uint8_t *fill)
{
    fill_image(dst, (size_t)h * w, c, fill);
    if (h == 0 || w == 0)
        return;
    if (interp == GEOM_BILINEAR)
        affine_bilinear(src, dst, h, w, c, m);
    else if (m[1] == 0 && m[3] == 0)
        affine_scale(src, dst, h, w, c, m);
    else if (fixed_ok(m, 0, 0) && fixed_ok(m, w, h) && fixed_ok(m, 0, h) &&
             fixed_ok(m, w, 0))
        affine_fixed(src, dst, h, w, c, m);
    else
        affine_double(src, dst, h, w, c, m);
}

/* ---- torchvision's matrix, F.affine ---- */

void geom_inverse_matrix(double cx, double cy, double angle, double tx, double ty,
                         double scale, double shear_x, double shear_y, double m[6])
{
    double rot = angle * deg2rad, sx = shear_x * deg2rad, sy = shear_y * deg2rad;
    double a = cos(rot - sy) / cos(sy);
    double b = -cos(rot - sy) * tan(sx) / cos(sy) - sin(rot);
    double c = sin(rot - sy) / cos(sy);
    double d = -sin(rot - sy) * tan(sx) / cos(sy) + cos(rot);
    m[0] = d / scale;
    m[1] = -b / scale;
    m[2] = 0.0 / scale;
    m[3] = -c / scale;
    m[4] = a / scale;
    m[5] = 0.0 / scale;
    m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
    m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
    m[2] += cx;
    m[5] += cy;
}

void geom_affine(const uint8_t *src, uint8_t *dst, uint32_t h, uint32_t w, uint32_t c,
                 double angle, int32_t tx, int32_t ty, double scale, double shear_x,
                 double shear_y, const double *center, enum geom_interp interp,
                 const uint8_t *fill)
{
    double m[6];
    double cx = center ? center[0] : w * 0.5, cy = center ? center[1] : h * 0.5;
    geom_inverse_matrix(cx, cy, angle, tx, ty, scale, shear_x, shear_y, m);
    geom_transform(src, dst, h, w, c, m, interp, fill);
}

/* ---- Image.rotate ---- */

/* Python's round(x, 15): the correctly rounded decimal, read back. */
static double round15(double x)
{
    char buf[64];
    snprintf(buf, sizeof(buf), "%.15f", x);
    return strtod(buf, NULL);
}

/* Python's x % m for floats: the sign of m. */
static double py_mod(double x, double m)
{
    double r = fmod(x, m);
    if (r != 0.0) {
        if ((m < 0) != (r < 0))
            r += m;
    } else {
        r = copysign(0.0, m);
    }
    return r;
}

/* Transpose.ROTATE_90 (counter-clockwise), ROTATE_180, ROTATE_270 of an h x w
 * image (90 and 270 only square, as Image.rotate uses them). */
static void turn(const uint8_t *src, uint8_t *dst, uint32_t h, uint32_t w, uint32_t c,
                 int quarter)
{
    for (uint32_t y = 0; y < h; y++) {
        for (uint32_t x = 0; x < w; x++) {
            uint32_t oy, ox;
            if (quarter == 1) { /* out(w - 1 - x, y) = in(y, x) */
                oy = w - 1 - x;
                ox = y;
            } else if (quarter == 2) {
                oy = h - 1 - y;
                ox = w - 1 - x;
            } else { /* out(x, h - 1 - y) = in(y, x) */
                oy = x;
                ox = h - 1 - y;
            }
            copy_px(dst + ((size_t)oy * w + ox) * c, src + ((size_t)y * w + x) * c, c);
        }
    }
}

void geom_rotate(const uint8_t *src, uint8_t *dst, uint32_t h, uint32_t w, uint32_t c,
                 double angle, enum geom_interp interp, const uint8_t *fill)
{
    angle = py_mod(angle, 360.0);
    if (angle == 0) {
        memcpy(dst, src, (size_t)h * w * c);
        return;
    }
    if (angle == 180) {
        turn(src, dst, h, w, c, 2);
        return;
    }
    if ((angle == 90 || angle == 270) && w == h) {
        turn(src, dst, h, w, c, angle == 90 ? 1 : 3);
        return;
    }
    double rad = -(angle * deg2rad);
    double m[6] = {round15(cos(rad)), round15(sin(rad)), 0.0,
                   round15(-sin(rad)), round15(cos(rad)), 0.0};
    double cx = w / 2.0, cy = h / 2.0;
    double x = -cx - 0, y = -cy - 0;
    double m2 = m[0] * x + m[1] * y + m[2];
    double m5 = m[3] * x + m[4] * y + m[5];
    m[2] = m2 + cx;
    m[5] = m5 + cy;
    geom_transform(src, dst, h, w, c, m, interp, fill);
}

/* ---- RandomAffine's draws ---- */

void geom_affine_draw(const struct geom_affine_params *p, uint64_t *st, uint32_t h,
                      uint32_t w, struct geom_affine_decision *d)
{
    d->angle = draw_uniform(st, p->degrees[0], p->degrees[1]);
    d->tx = d->ty = 0;
    if (p->translate_on) {
        double dx = p->translate[0] * w, dy = p->translate[1] * h;
        d->tx = (int32_t)nearbyint(draw_uniform(st, -dx, dx));
        d->ty = (int32_t)nearbyint(draw_uniform(st, -dy, dy));
    }
    d->scale = p->scale_on ? draw_uniform(st, p->scale[0], p->scale[1]) : 1.0;
    d->shear_x = p->shear_on[0] ? draw_uniform(st, p->shear[0][0], p->shear[0][1]) : 0.0;
    d->shear_y = p->shear_on[1] ? draw_uniform(st, p->shear[1][0], p->shear[1][1]) : 0.0;
}
