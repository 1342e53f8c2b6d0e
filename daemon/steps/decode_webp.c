/*
 * WebP with libwebp, the library PIL's WebPImagePlugin decodes with, so
 * lossy files come out bit-exact too.
 *
 * Pillow 9.4 opens every WebP through WebPAnimDecoder with default options:
 * RGBA, libwebp's default (fancy) chroma upsampling, no threads; for a
 * still image that is WebPDecode into the zeroed canvas, and
 * convert('RGB') drops the alpha. So a still image is decoded here with
 * WebPDecode to RGB directly (the same per-pixel conversion, the alpha
 * never computed), and an animation through WebPAnimDecoder as PIL does,
 * taking its first frame on the canvas (convert gives the frame that is
 * loaded, the first). Grey is Pillow's L24 luma of that RGB.
 */
#include <errno.h>
#include <stdlib.h>
#include <webp/decode.h>
#include <webp/demux.h>

#include "decode_formats.h"
#include "decode_impl.h"

#define WHAT "webp"

static const char *status_name(VP8StatusCode st)
{
    switch (st) {
    case VP8_STATUS_OUT_OF_MEMORY:
        return "out of memory";
    case VP8_STATUS_INVALID_PARAM:
        return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR:
        return "corrupt bitstream";
    case VP8_STATUS_UNSUPPORTED_FEATURE:
        return "unsupported feature";
    case VP8_STATUS_NOT_ENOUGH_DATA:
        return "truncated file";
    default:
        return "decoding failed";
    }
}

static int status_fail(const struct decode_dst *dst, VP8StatusCode st)
{
    return decode_fail(dst, st == VP8_STATUS_OUT_OF_MEMORY ? -ENOMEM : -EBADMSG, WHAT, "%s",
                       status_name(st));
}

static int decode_animation(const uint8_t *buf, size_t len, const struct decode_dst *dst,
                            uint8_t *px)
{
    WebPData data = {.bytes = buf, .size = len};
    WebPAnimDecoder *dec = WebPAnimDecoderNew(&data, NULL);
    if (dec == NULL)
        return decode_fail(dst, -EBADMSG, WHAT, "corrupt animation");
    WebPAnimInfo info;
    uint8_t *canvas;
    int ts, rc = 0;
    if (!WebPAnimDecoderGetInfo(dec, &info) || !WebPAnimDecoderGetNext(dec, &canvas, &ts)) {
        rc = decode_fail(dst, -EBADMSG, WHAT, "cannot decode the first frame");
    } else {
        size_t w = info.canvas_width, out_row = w * dst->channels;
        for (size_t y = 0; y < info.canvas_height; y++)
            decode_row_rgb(dst, canvas + y * w * 4, 4, w, px + y * out_row);
    }
    WebPAnimDecoderDelete(dec);
    return rc;
}

int decode_webp(const uint8_t *buf, size_t len, const struct decode_dst *dst)
{
    WebPDecoderConfig config;
    if (!WebPInitDecoderConfig(&config))
        return decode_fail(dst, -EINVAL, WHAT, "libwebp version mismatch");
    VP8StatusCode st = WebPGetFeatures(buf, len, &config.input);
    if (st != VP8_STATUS_OK)
        return status_fail(dst, st);

    /* The canvas size, for an animation too (VP8X). */
    uint64_t w = (uint64_t)config.input.width, h = (uint64_t)config.input.height;
    uint8_t *px;
    int rc = decode_begin(dst, WHAT, w, h, &px);
    if (rc < 0)
        return rc;
    if (config.input.has_animation)
        return decode_animation(buf, len, dst, px);

    /* RGB, into the output or (grey) a scratch buffer made grey after. */
    uint8_t *rgb = px;
    if (dst->channels != 3) {
        rgb = malloc((size_t)w * h * 3);
        if (rgb == NULL)
            return decode_fail(dst, -ENOMEM, WHAT, "no room to decode a %llux%llu image",
                               (unsigned long long)w, (unsigned long long)h);
    }
    config.output.colorspace = MODE_RGB;
    config.output.is_external_memory = 1;
    config.output.u.RGBA.rgba = rgb;
    config.output.u.RGBA.stride = (int)(w * 3);
    config.output.u.RGBA.size = (size_t)w * h * 3;
    st = WebPDecode(buf, len, &config);
    WebPFreeDecBuffer(&config.output);
    if (st != VP8_STATUS_OK) {
        rc = status_fail(dst, st);
    } else if (rgb != px) {
        for (size_t y = 0; y < h; y++)
            decode_row_rgb(dst, rgb + y * w * 3, 3, (size_t)w, px + y * w);
    }
    if (rgb != px)
        free(rgb);
    return rc;
}
