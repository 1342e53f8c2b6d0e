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
 * The vertical pass sums 16 bytes of a row at a time over all its taps
 * (fixed-size contiguous loops the compiler vectorises); integer sums do
 * not depend on the order of the additions, so this gives Pillow's results
 * exactly. Coefficient tables and the intermediate image live in one
 * allocation per call.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

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

static double rs_filterscale(uint32_t in, uint32_t out, double *scale)
{
    *scale = (double)in / out;
    return *scale < 1.0 ? 1.0 : *scale;
}

static uint32_t rs_ksize(uint32_t in, uint32_t out)
{
    double scale, support = rs_filterscale(in, out, &scale); /* support 1.0 */
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

/* Fills a->k, a->first, a->count; a->ksize is set. */
RS_NO_CONTRACT
static void rs_coeffs(struct rs_axis *a, uint32_t in, uint32_t out)
{
    double scale, filterscale = rs_filterscale(in, out, &scale);
    double support = 1.0 * filterscale;
    double ss = 1.0 / filterscale;

    for (uint32_t i = 0; i < out; i++) {
        double center = (i + 0.5) * scale;
        int xmin = (int)(center - support + 0.5);
        int xmax = (int)(center + support + 0.5);
        if (xmin < 0)
            xmin = 0;
        if (xmax > (int)in)
            xmax = (int)in;
        int n = xmax - xmin;
        double ww = 0.0;
        for (int x = 0; x < n; x++)
            ww += rs_triangle((x + xmin - center + 0.5) * ss);
        int32_t *k = a->k + (size_t)i * a->ksize;
        for (int x = 0; x < n; x++) {
            double w = rs_triangle((x + xmin - center + 0.5) * ss);
            if (ww != 0.0)
                w /= ww;
            k[x] = (int32_t)(w < 0 ? -0.5 + w * (1 << RS_BITS)
                                   : 0.5 + w * (1 << RS_BITS));
        }
        a->first[i] = (uint32_t)xmin;
        a->count[i] = (uint32_t)n;
    }
}

/* Horizontal pass over rows of src (src_stride bytes apart) into rows of
 * out_w * c bytes. */
static void rs_horizontal(const struct rs_axis *a, const uint8_t *src,
                          size_t src_stride, uint8_t *dst, uint32_t rows,
                          uint32_t out_w, uint32_t c)
{
    for (uint32_t r = 0; r < rows; r++) {
        const uint8_t *s = src + r * src_stride;
        uint8_t *d = dst + (size_t)r * out_w * c;
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
            continue;
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
}

/* Bytes of a row the vertical pass sums at once: fixed-size inner loops
 * the compiler turns into vector code, sums held in registers across taps. */
#define RS_VBLOCK 16

/* Vertical pass: src holds rows y0.. of the (horizontally resized) image,
 * each rowbytes long. */
static void rs_vertical(const struct rs_axis *a, const uint8_t *src, uint32_t y0,
                        size_t rowbytes, uint8_t *dst, uint32_t out_h)
{
    const int32_t *k = a->k;
    for (uint32_t yy = 0; yy < out_h; yy++, k += a->ksize, dst += rowbytes) {
        const uint8_t *row = src + (size_t)(a->first[yy] - y0) * rowbytes;
        uint32_t n = a->count[yy];
        size_t j = 0;
        for (; j + RS_VBLOCK <= rowbytes; j += RS_VBLOCK) {
            int32_t sum[RS_VBLOCK];
            const uint8_t *p = row + j;
            for (int b = 0; b < RS_VBLOCK; b++)
                sum[b] = RS_HALF;
            for (uint32_t y = 0; y < n; y++, p += rowbytes) {
                int32_t kv = k[y];
                for (int b = 0; b < RS_VBLOCK; b++)
                    sum[b] += p[b] * kv;
            }
            for (int b = 0; b < RS_VBLOCK; b++)
                dst[j + b] = rs_clip8(sum[b]);
        }
        for (; j < rowbytes; j++) {
            int32_t sum = RS_HALF;
            const uint8_t *p = row + j;
            for (uint32_t y = 0; y < n; y++, p += rowbytes)
                sum += *p * k[y];
            dst[j] = rs_clip8(sum);
        }
    }
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

/* Carves the axis tables out of one block starting at *p. */
static void rs_axis_place(struct rs_axis *a, uint8_t **p, uint32_t in, uint32_t out)
{
    a->ksize = rs_ksize(in, out);
    a->k = (int32_t *)*p;
    *p += (size_t)out * a->ksize * sizeof(int32_t);
    a->first = (uint32_t *)*p;
    *p += (size_t)out * sizeof(uint32_t);
    a->count = (uint32_t *)*p;
    *p += (size_t)out * sizeof(uint32_t);
}

static size_t rs_axis_bytes(uint32_t in, uint32_t out)
{
    return (size_t)out * (rs_ksize(in, out) + 2) * sizeof(int32_t);
}

int step_resize_apply(uint32_t size, struct step_ctx *ctx, const struct img *in,
                      struct img *out)
{
    uint64_t oh64, ow64;
    int rc = step_check_pixels(ctx, in, "resize");
    if (rc < 0)
        return rc;

    step_resize_shape(size, in->h, in->w, &oh64, &ow64);
    if (in->h > RS_DIM_MAX || in->w > RS_DIM_MAX || oh64 > RS_DIM_MAX ||
        ow64 > RS_DIM_MAX || (ctx->max_pixels && oh64 * ow64 > ctx->max_pixels))
        return step_fail(ctx, -E2BIG, "resize: %ux%u to %llux%llu is too large",
                         in->w, in->h, (unsigned long long)ow64,
                         (unsigned long long)oh64);

    uint32_t in_h = in->h, in_w = in->w, c = in->c;
    uint32_t out_h = (uint32_t)oh64, out_w = (uint32_t)ow64;
    int need_h = out_w != in_w, need_v = out_h != in_h;

    rc = step_out_pixels(ctx, out, out_h, out_w, c);
    if (rc < 0)
        return rc;
    if (!need_h && !need_v) {
        memcpy(out->data, in->data, out->len);
        return 0;
    }

    /* Everything one call needs, in one block: coefficient tables and the
     * intermediate image. */
    size_t in_row = (size_t)in_w * c, mid_row = (size_t)out_w * c;
    size_t bytes = 0;
    if (need_h)
        bytes += rs_axis_bytes(in_w, out_w);
    if (need_v)
        bytes += rs_axis_bytes(in_h, out_h);
    if (need_h && need_v)
        bytes += mid_row * in_h; /* upper bound of the rows the vertical pass reads */
    uint8_t *block = malloc(bytes), *p = block;
    if (block == NULL)
        return step_fail(ctx, -ENOMEM, "resize: out of memory (%zu bytes of scratch)", bytes);

    struct rs_axis ah = {0}, av = {0};
    if (need_v) {
        rs_axis_place(&av, &p, in_h, out_h);
        rs_coeffs(&av, in_h, out_h);
    }
    if (need_h) {
        rs_axis_place(&ah, &p, in_w, out_w);
        rs_coeffs(&ah, in_w, out_w);
    }

    if (!need_v) {
        rs_horizontal(&ah, in->data, in_row, out->data, in_h, out_w, c);
    } else if (!need_h) {
        rs_vertical(&av, in->data, 0, in_row, out->data, out_h);
    } else {
        /* Only the input rows some output row reads. */
        uint32_t y0 = av.first[0];
        uint32_t y1 = av.first[out_h - 1] + av.count[out_h - 1];
        uint8_t *mid = p;
        rs_horizontal(&ah, in->data + (size_t)y0 * in_row, in_row, mid, y1 - y0,
                      out_w, c);
        rs_vertical(&av, mid, y0, mid_row, out->data, out_h);
    }
    free(block);
    return 0;
}
