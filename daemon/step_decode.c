/*
 * decode: JPEG bytes -> HWC uint8 RGB with TurboJPEG.
 *
 * Flags 0 select the accurate integer IDCT and fancy (smooth) chroma
 * upsampling, the libjpeg defaults PIL decodes with, so the pixels equal
 * PIL's Image.open(f).convert('RGB') on the same libjpeg-turbo. Greyscale
 * JPEGs come out as three equal channels, as convert('RGB') makes them.
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
#include <turbojpeg.h>

#include "step.h"
#include "step_impl.h"

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

int step_decode_apply(struct step_ctx *ctx, const struct img *in,
                      struct img *out)
{
    int w = 0, h = 0, subsamp = -1, colorspace = -1; /* unset for tables-only data */
    int rc;

    if (in->fmt != IMG_ENCODED)
        return step_fail(ctx, -EINVAL, "decode: input is already decoded");
    if (in->len == 0 || in->data == NULL)
        return step_fail(ctx, -EBADMSG, "decode: empty file");
#if SIZE_MAX > ULONG_MAX
    if (in->len > ULONG_MAX)
        return step_fail(ctx, -E2BIG, "decode: file of %zu bytes is too large", in->len);
#endif

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

    int cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
    if (cmyk && img_reserve(out, (size_t)pixels * 4) < 0)
        return step_fail(ctx, -ENOMEM, "decode: out of memory for a %dx%d CMYK image", w, h);
    rc = step_out_pixels(ctx, out, (uint32_t)h, (uint32_t)w, 3);
    if (rc < 0)
        return rc;
    if (tjDecompress2(tj, in->data, (unsigned long)in->len, out->data, w, 0, h,
                      cmyk ? TJPF_CMYK : TJPF_RGB, 0) < 0)
        return decode_error(ctx, tj, "corrupt JPEG");
    if (cmyk)
        cmyk_to_rgb(out->data, (size_t)pixels);
    return 0;
}

void step_decode_ctx_free(struct step_ctx *ctx)
{
    if (ctx->tj != NULL) {
        tjDestroy(ctx->tj);
        ctx->tj = NULL;
    }
}
