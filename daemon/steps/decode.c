/*
 * decode: image file bytes -> HWC uint8 RGB (mode: rgb) or grey (mode: grey).
 * JPEG with TurboJPEG (below); every other format torchvision's ImageFolder
 * opens (PNG, WebP, BMP, PPM/PGM, TIFF), found by its magic bytes as PIL
 * finds it, by decode_formats.h, bit-exact with PIL's convert('RGB'|'L').
 * A file of no format decoded here (GIF, unknown) fails with a message
 * naming what it is.
 *
 * Flags 0 select the accurate integer IDCT and fancy (smooth) chroma
 * upsampling, the libjpeg defaults PIL decodes with, so the pixels equal
 * PIL's Image.open(f).convert('RGB') on the same libjpeg-turbo. Greyscale
 * JPEGs come out as three equal channels, as convert('RGB') makes them.
 * mode: grey is PIL's convert('L'): a greyscale JPEG's samples as they are,
 * a colour one decoded to RGB and then weighted as Pillow does
 * (L = (19595 R + 38470 G + 7471 B + 2^15) >> 16).
 *
 * dct_scale: true decodes straight to a smaller size with libjpeg's scaled
 * inverse DCT: the smallest of TurboJPEG's factors 1/8, 1/4, 3/8 and 1/2
 * whose output still covers 5/4 of what the following resize makes of the
 * full image on each side (step_chain_init tells the step that size), else
 * the full size (the factors between 1/2 and 1 are no faster). The output
 * records the original size and the factor (struct img src_h...), so the
 * resize keeps torchvision's output shape and maps its box onto the
 * original's extent. Faster, and no longer bit-exact: the scaled IDCT
 * filters differently from the antialiased resize (tests report the PSNR).
 *
 * libjpeg only warns about a truncated or damaged entropy stream and fills
 * the rest of the image with grey; TurboJPEG then returns -1 with
 * TJERR_WARNING. Such an image is refused like a fatal error, so no half-
 * decoded sample ever reaches a trainer. (This is stricter than PIL, which
 * accepts a file that only lacks its end-of-image marker, or that has
 * stray bytes between markers.)
 *
 * CMYK and YCCK JPEGs are decoded to CMYK and converted as PIL does.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <turbojpeg.h>

#include "decode_formats.h"
#include "step.h"
#include "step_impl.h"

/* decode_formats' allocator: the step's output image, h x w x c. */
struct formats_out {
    struct step_ctx *ctx;
    struct img *out;
};

static int formats_alloc(void *arg, uint32_t h, uint32_t w, uint32_t c, uint8_t **px)
{
    struct formats_out *fo = arg;
    int rc = img_reserve(fo->out, (size_t)h * w * c);
    if (rc == 0)
        rc = step_out_pixels(fo->ctx, fo->out, h, w, c);
    if (rc == 0)
        *px = fo->out->data;
    return rc;
}

/* Any format but JPEG, through decode_formats.h. */
static int decode_other(const struct step *s, struct step_ctx *ctx, const struct img *in,
                        struct img *out)
{
    char msg[200] = "";
    struct formats_out fo = {ctx, out};
    struct decode_dst dst = {.channels = s->channels, .max_pixels = ctx->max_pixels,
                             .alloc = formats_alloc, .arg = &fo, .err = msg,
                             .errlen = sizeof(msg)};
    int rc = decode_image(in->data, in->len, &dst);
    if (rc < 0)
        return step_fail(ctx, rc, "decode: %s", msg[0] ? msg : strerror(-rc));
    return 0;
}

/* TurboJPEG's message, saying whether libjpeg only warned (damaged or
 * truncated entropy data) or gave up. */
static int decode_error(struct step_ctx *ctx, tjhandle tj, const char *what)
{
    const char *kind = tjGetErrorCode(tj) == TJERR_WARNING ? "damaged or truncated JPEG"
                                                           : what;
    return step_fail(ctx, -EBADMSG, "decode: %s: %s", kind, tjGetErrorStr2(tj));
}

/* (a * b) / 255 rounded, as Pillow's MULDIV255. */
static inline int muldiv255(int a, int b)
{
    int t = a * b + 128;
    return ((t >> 8) + t) >> 8;
}

/* CMYK (as libjpeg returns it for CMYK and YCCK JPEGs) to RGB, in place,
 * exactly as PIL: its JPEG reader takes the samples as inverted ("CMYK;I",
 * Adobe's convention), so PIL's C = 255 - c, K = 255 - k, and
 * convert('RGB') computes R = (255 - K) - (C * (255 - K)) / 255. */
static void cmyk_to_rgb(uint8_t *px, size_t pixels)
{
    const uint8_t *s = px;
    uint8_t *d = px;
    for (size_t i = 0; i < pixels; i++, s += 4, d += 3) {
        int nk = s[3];
        for (int ch = 0; ch < 3; ch++)
            d[ch] = (uint8_t)(nk - muldiv255(255 - s[ch], nk));
    }
}

/* Pillow's RGB -> L conversion (ITU-R 601-2 luma with 16-bit fixed-point
 * weights, rounded), in place: 3 bytes per pixel in, 1 out. */
static void rgb_to_l(uint8_t *px, size_t pixels)
{
    const uint8_t *s = px;
    uint8_t *d = px;
    for (size_t i = 0; i < pixels; i++, s += 3)
        d[i] = (uint8_t)((s[0] * 19595 + s[1] * 38470 + s[2] * 7471 + 0x8000) >> 16);
}

/* TurboJPEG's scaling factors, largest first as it lists them. */
static const tjscalingfactor *scaling_factors(int *n)
{
    const tjscalingfactor *sf = tjGetScalingFactors(n);
    if (sf == NULL)
        *n = 0;
    return sf;
}

/* A scaled IDCT that lands on the resize's output size itself filters
 * unlike the antialiased bilinear resize (about 35 dB PSNR against the
 * exact path on a sharp photo): decode keeps at least 5/4 of that size on
 * each side, so that the resize does the last filtering (over 40 dB;
 * tests/unit/test_steps.c prints the figures). The largest factor worth
 * using: libjpeg-turbo's 5/8, 3/4 and 7/8 IDCTs are
 * plain C and decode no faster than the SIMD 8x8 one at full size (measured
 * on 4:4:4 and 4:2:0 photos); 1/2 and below are faster (1/2 by 15-20%,
 * 1/4 by 25-30%, 1/8 by 40%: the entropy decoding stays). */
#define STEP_DECODE_SCALE_MAX 0.5

static uint32_t scaled(uint32_t dim, int num, int den)
{
    return (uint32_t)(((uint64_t)dim * (uint64_t)num + (uint64_t)den - 1) / (uint64_t)den);
}

void step_decode_scale(const struct step *s, uint32_t h, uint32_t w, uint32_t *num,
                       uint32_t *den)
{
    *num = *den = 1;
    if (!s->dct_scale || h == 0 || w == 0 || s->dct_h == 0)
        return; /* dct_h 0: before random_resized_crop, scaled per crop */
    /* What the resize after decode makes of the full image. */
    uint64_t need_h = s->dct_h, need_w = s->dct_w;
    if (s->dct_shorter)
        step_resize_shape(s->dct_h, h, w, &need_h, &need_w);
    int n;
    const tjscalingfactor *sf = scaling_factors(&n);
    double best = 1.0;
    for (int i = 0; i < n; i++) {
        double f = (double)sf[i].num / sf[i].denom;
        if (f > STEP_DECODE_SCALE_MAX || f >= best ||
            (uint64_t)scaled(h, sf[i].num, sf[i].denom) * 4 < need_h * 5 ||
            (uint64_t)scaled(w, sf[i].num, sf[i].denom) * 4 < need_w * 5)
            continue;
        best = f;
        *num = (uint32_t)sf[i].num;
        *den = (uint32_t)sf[i].denom;
    }
    /* TurboJPEG picks the largest factor whose output fits the size it is
     * asked for: when a larger one gives the same size, it is that one. */
    uint32_t sh = scaled(h, (int)*num, (int)*den), sw = scaled(w, (int)*num, (int)*den);
    for (int i = 0; i < n; i++) {
        if (scaled(h, sf[i].num, sf[i].denom) <= sh &&
            scaled(w, sf[i].num, sf[i].denom) <= sw) {
            *num = (uint32_t)sf[i].num;
            *den = (uint32_t)sf[i].denom;
            break;
        }
    }
}

int step_decode_apply(const struct step *s, struct step_ctx *ctx, const struct img *in,
                      struct img *out)
{
    int w = 0, h = 0, subsamp = -1, colorspace = -1; /* unset for tables-only data */
    int rc;

    if (in->fmt != IMG_ENCODED)
        return step_fail(ctx, -EINVAL, "decode: input is already decoded");
    ctx->format = DECODE_FMT_UNKNOWN;
    if (in->len == 0 || in->data == NULL)
        return step_fail(ctx, -EBADMSG, "decode: empty file");
#if SIZE_MAX > ULONG_MAX
    if (in->len > ULONG_MAX)
        return step_fail(ctx, -E2BIG, "decode: file of %zu bytes is too large", in->len);
#endif
    ctx->format = decode_sniff(in->data, in->len);
    if (ctx->format != DECODE_FMT_JPEG && ctx->format != DECODE_FMT_UNKNOWN)
        return decode_other(s, ctx, in, out);

    if (ctx->tj == NULL) {
        ctx->tj = tjInitDecompress();
        if (ctx->tj == NULL)
            return step_fail(ctx, -ENOMEM, "decode: cannot create a TurboJPEG decompressor: %s",
                             tjGetErrorStr2(NULL));
    }
    tjhandle tj = ctx->tj;

    if (tjDecompressHeader3(tj, in->data, (unsigned long)in->len, &w, &h, &subsamp,
                            &colorspace) < 0)
        return decode_error(ctx, tj, "not a JPEG or a corrupt header");
    if (w <= 0 || h <= 0)
        return step_fail(ctx, -EBADMSG,
                         "decode: truncated JPEG header (no image frame)");

    uint64_t pixels = (uint64_t)w * (uint64_t)h;
    if (ctx->max_pixels && pixels > ctx->max_pixels)
        return step_fail(ctx, -E2BIG,
                         "decode: image is %dx%d (%llu pixels), over the limit of %llu pixels",
                         w, h, (unsigned long long)pixels,
                         (unsigned long long)ctx->max_pixels);

    uint32_t num, den;
    step_decode_scale(s, (uint32_t)h, (uint32_t)w, &num, &den);
    uint32_t oh = scaled((uint32_t)h, (int)num, (int)den);
    uint32_t ow = scaled((uint32_t)w, (int)num, (int)den);
    size_t opx = (size_t)oh * ow;

    /* CMYK comes out 4 bytes a pixel and grey from colour 3, converted in
     * place; a grey JPEG decodes to grey directly (PIL's mode L). */
    int cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
    int grey_src = colorspace == TJCS_GRAY;
    uint32_t c = s->channels;
    int pf = cmyk ? TJPF_CMYK : (c == 1 && grey_src) ? TJPF_GRAY : TJPF_RGB;
    size_t need = opx * (size_t)tjPixelSize[pf];
    rc = img_reserve(out, need);
    if (rc < 0)
        return step_fail(ctx, rc, "decode: no room for a %ux%u image", ow, oh);
    rc = step_out_pixels(ctx, out, oh, ow, c);
    if (rc < 0)
        return rc;
    if (tjDecompress2(tj, in->data, (unsigned long)in->len, out->data, (int)ow, 0, (int)oh,
                      pf, 0) < 0)
        return decode_error(ctx, tj, "corrupt JPEG");
    if (cmyk)
        cmyk_to_rgb(out->data, opx);
    if (c == 1 && pf != TJPF_GRAY)
        rgb_to_l(out->data, opx);
    if (num != den) {
        out->src_h = (uint32_t)h;
        out->src_w = (uint32_t)w;
        out->scale_num = num;
        out->scale_den = den;
    }
    return 0;
}

void step_decode_ctx_free(struct step_ctx *ctx)
{
    if (ctx->tj != NULL) {
        tjDestroy(ctx->tj);
        ctx->tj = NULL;
    }
}
