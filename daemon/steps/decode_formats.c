/*
 * The format decoders' common part: finding the format from the magic
 * bytes (as PIL's plugins accept them), the dispatcher, and the size check,
 * errors and pixel conversions the decoders share (decode_impl.h).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "decode_formats.h"
#include "decode_impl.h"

/* Larger sides than this are refused whatever the pixel limit: no format
 * here has a use for them, and it keeps every row size far from overflow. */
#define DECODE_SIDE_MAX (1u << 24)

static const char *const format_names[DECODE_FMT_MAX] = {
    [DECODE_FMT_UNKNOWN] = "unknown", [DECODE_FMT_JPEG] = "jpeg", [DECODE_FMT_PNG] = "png",
    [DECODE_FMT_WEBP] = "webp",       [DECODE_FMT_BMP] = "bmp",   [DECODE_FMT_PNM] = "pnm",
    [DECODE_FMT_TIFF] = "tiff",       [DECODE_FMT_GIF] = "gif",
};

const char *decode_format_name(enum decode_format f)
{
    return (unsigned)f < DECODE_FMT_MAX ? format_names[f] : "unknown";
}

static int has_prefix(const uint8_t *buf, size_t len, const char *magic, size_t n)
{
    return len >= n && memcmp(buf, magic, n) == 0;
}

enum decode_format decode_sniff(const uint8_t *buf, size_t len)
{
    if (buf == NULL)
        return DECODE_FMT_UNKNOWN;
    if (has_prefix(buf, len, "\xff\xd8\xff", 3))
        return DECODE_FMT_JPEG;
    if (has_prefix(buf, len, "\x89PNG\r\n\x1a\n", 8))
        return DECODE_FMT_PNG;
    /* WebPImagePlugin: RIFF, WEBP, and one of its three chunk types. */
    if (len >= 16 && memcmp(buf, "RIFF", 4) == 0 && memcmp(buf + 8, "WEBP", 4) == 0 &&
        (memcmp(buf + 12, "VP8 ", 4) == 0 || memcmp(buf + 12, "VP8L", 4) == 0 ||
         memcmp(buf + 12, "VP8X", 4) == 0))
        return DECODE_FMT_WEBP;
    if (has_prefix(buf, len, "BM", 2))
        return DECODE_FMT_BMP;
    /* PpmImagePlugin: "P" and one of 0123456y (the ones it then decodes
     * are P1-P6). */
    if (len >= 2 && buf[0] == 'P' && memchr("0123456y", buf[1], 8) != NULL)
        return DECODE_FMT_PNM;
    /* TIFF, little and big endian, classic and BigTIFF. */
    if (has_prefix(buf, len, "II*\0", 4) || has_prefix(buf, len, "MM\0*", 4) ||
        has_prefix(buf, len, "II+\0", 4) || has_prefix(buf, len, "MM\0+", 4))
        return DECODE_FMT_TIFF;
    if (has_prefix(buf, len, "GIF87a", 6) || has_prefix(buf, len, "GIF89a", 6))
        return DECODE_FMT_GIF;
    return DECODE_FMT_UNKNOWN;
}

int decode_image(const uint8_t *buf, size_t len, const struct decode_dst *dst)
{
    if (buf == NULL || len == 0)
        return decode_fail(dst, -EBADMSG, "decode", "empty file");
    enum decode_format f = decode_sniff(buf, len);
    switch (f) {
    case DECODE_FMT_PNG:
        return decode_png(buf, len, dst);
    case DECODE_FMT_WEBP:
        return decode_webp(buf, len, dst);
    case DECODE_FMT_BMP:
        return decode_bmp(buf, len, dst);
    case DECODE_FMT_PNM:
        return decode_pnm(buf, len, dst);
    case DECODE_FMT_TIFF:
        return decode_tiff(buf, len, dst);
    case DECODE_FMT_UNKNOWN:
        return decode_fail(dst, -EBADMSG, "decode", "not an image file presto recognises");
    default:
        return decode_fail(dst, -EBADMSG, "decode", "%s files are not decoded",
                           decode_format_name(f));
    }
}

int decode_fail(const struct decode_dst *dst, int rc, const char *what, const char *fmt, ...)
{
    if (dst->err == NULL || dst->errlen == 0)
        return rc;
    int n = snprintf(dst->err, dst->errlen, "%s: ", what);
    if (n < 0 || (size_t)n >= dst->errlen)
        return rc;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst->err + n, dst->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return rc;
}

int decode_begin(const struct decode_dst *dst, const char *what, uint64_t w, uint64_t h,
                 uint8_t **px)
{
    if (w == 0 || h == 0)
        return decode_fail(dst, -EBADMSG, what, "image of %llux%llu pixels",
                           (unsigned long long)w, (unsigned long long)h);
    uint64_t pixels = w * h; /* both under 2^32 here or refused below */
    if (w > DECODE_SIDE_MAX || h > DECODE_SIDE_MAX ||
        (dst->max_pixels && pixels > dst->max_pixels))
        return decode_fail(dst, -E2BIG, what,
                           "image is %llux%llu, over the limit of %llu pixels",
                           (unsigned long long)w, (unsigned long long)h,
                           (unsigned long long)(dst->max_pixels
                                                    ? dst->max_pixels
                                                    : (uint64_t)DECODE_SIDE_MAX));
    int rc = dst->alloc(dst->arg, (uint32_t)h, (uint32_t)w, dst->channels, px);
    if (rc < 0)
        return decode_fail(dst, rc, what, "no room for a %llux%llu image",
                           (unsigned long long)w, (unsigned long long)h);
    return 0;
}

void decode_palette_ramp(struct decode_palette *p)
{
    for (int i = 0; i < 256; i++)
        p->rgb[i][0] = p->rgb[i][1] = p->rgb[i][2] = (uint8_t)i;
}

void decode_row_rgb(const struct decode_dst *dst, const uint8_t *in, size_t step, size_t n,
                    uint8_t *out)
{
    if (dst->channels == 1) {
        for (size_t i = 0; i < n; i++, in += step)
            out[i] = decode_luma(in[0], in[1], in[2]);
    } else if (step == 3) {
        memcpy(out, in, n * 3);
    } else {
        for (size_t i = 0; i < n; i++, in += step, out += 3) {
            out[0] = in[0];
            out[1] = in[1];
            out[2] = in[2];
        }
    }
}

void decode_row_grey(const struct decode_dst *dst, const uint8_t *in, size_t step, size_t n,
                     uint8_t *out)
{
    if (dst->channels == 1) {
        if (step == 1)
            memcpy(out, in, n);
        else
            for (size_t i = 0; i < n; i++, in += step)
                out[i] = in[0];
    } else {
        for (size_t i = 0; i < n; i++, in += step, out += 3)
            out[0] = out[1] = out[2] = in[0];
    }
}

void decode_row_index(const struct decode_dst *dst, const struct decode_palette *pal,
                      const uint8_t *in, size_t n, uint8_t *out)
{
    if (dst->channels == 1) {
        for (size_t i = 0; i < n; i++) {
            const uint8_t *e = pal->rgb[in[i]];
            out[i] = decode_luma(e[0], e[1], e[2]);
        }
    } else {
        for (size_t i = 0; i < n; i++, out += 3)
            memcpy(out, pal->rgb[in[i]], 3);
    }
}

void decode_unpack_bits(const uint8_t *in, uint32_t bits, size_t n, uint32_t scale,
                        uint8_t *out)
{
    uint32_t per = 8 / bits, mask = (1u << bits) - 1;
    for (size_t i = 0; i < n; i++) {
        uint32_t byte = in[i / per];
        uint32_t shift = 8 - bits * (uint32_t)(i % per + 1);
        out[i] = (uint8_t)(((byte >> shift) & mask) * scale);
    }
}
