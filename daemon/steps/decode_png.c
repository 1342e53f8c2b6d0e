/*
 * PNG with libspng, converted as PIL's PngImagePlugin and
 * convert('RGB' | 'L') make the pixels (Pillow 9.4):
 *
 *   colour type, depth   PIL mode (raw mode)   RGB of a pixel
 *   grey 1               1                     0 or 255
 *   grey 2, 4            L (L;2, L;4)          v * 85, v * 17
 *   grey 8               L                     v
 *   grey 16              I (I;16B)             min(v, 255): PIL clips, it
 *                                              does not scale
 *   RGB 8, 16            RGB (RGB;16B)         the high byte of each sample
 *   palette 1, 2, 4, 8   P                     PLTE[i]; past PLTE's end the
 *                                              grey ramp (i, i, i)
 *   grey+alpha 8         LA                    v
 *   grey+alpha 16        RGBA (LA;16B)         the high byte
 *   RGBA 8, 16           RGBA (RGBA;16B)       the high byte, alpha dropped
 *
 * tRNS, gAMA, sBIT, cHRM and iCCP change nothing (convert('RGB') drops
 * transparency; PIL applies no gamma or profile). Grey output is Pillow's
 * L24 luma of that RGB, which for grey sources is the value itself.
 *
 * libspng decodes to its raw format (samples as the file has them,
 * big-endian, de-interlaced, sub-byte samples packed); 8-bit RGB to RGB and
 * 8-bit grey to grey land straight in the output, everything else goes
 * through one row conversion per row. libspng is stricter than PIL in one
 * way: a bad CRC on any critical chunk (PIL skips the check on IDAT) or a
 * bad zlib checksum fails the file.
 */
#include <errno.h>
#include <spng.h>
#include <stdlib.h>
#include <string.h>

#include "decode_formats.h"
#include "decode_impl.h"

#define WHAT "png"
/* Ancillary chunks libspng keeps (text, profiles, EXIF) in all: PIL caps
 * text at 64 MB too; the pixels are bounded by the pixel limit instead. */
#define PNG_CHUNK_CACHE (64u << 20)

enum { PNG_GREY = 0, PNG_RGB = 2, PNG_PALETTE = 3, PNG_GREY_ALPHA = 4, PNG_RGBA = 6 };

static int spng_fail(const struct decode_dst *dst, int err, const char *during)
{
    if (err == SPNG_EMEM)
        return decode_fail(dst, -ENOMEM, WHAT, "out of memory %s", during);
    return decode_fail(dst, -EBADMSG, WHAT, "%s: %s", during, spng_strerror(err));
}

static uint32_t png_channels(uint8_t color_type)
{
    switch (color_type) {
    case PNG_RGB:
        return 3;
    case PNG_GREY_ALPHA:
        return 2;
    case PNG_RGBA:
        return 4;
    default:
        return 1;
    }
}

/* One raw row (samples as in the file, big-endian) to the output row;
 * tmp holds w * 4 bytes. */
static void convert_row(const struct decode_dst *dst, const struct spng_ihdr *ih,
                        const struct decode_palette *pal, const uint8_t *raw, uint8_t *tmp,
                        uint8_t *out)
{
    size_t w = ih->width;
    uint32_t depth = ih->bit_depth, ch = png_channels(ih->color_type);

    if (depth < 8) {
        static const uint8_t grey_scale[] = {[1] = 255, [2] = 85, [4] = 17};
        int index = ih->color_type == PNG_PALETTE;
        decode_unpack_bits(raw, depth, w, index ? 1 : grey_scale[depth], tmp);
        if (index)
            decode_row_index(dst, pal, tmp, w, out);
        else
            decode_row_grey(dst, tmp, 1, w, out);
        return;
    }
    if (depth == 16) {
        if (ih->color_type == PNG_GREY) {
            /* PIL's mode I, clipped to 0..255 by convert. */
            for (size_t i = 0; i < w; i++) {
                unsigned v = (unsigned)raw[2 * i] << 8 | raw[2 * i + 1];
                tmp[i] = v > 255 ? 255 : (uint8_t)v;
            }
        } else {
            /* The high byte of every sample (RGB;16B, LA;16B, RGBA;16B). */
            for (size_t i = 0; i < w * ch; i++)
                tmp[i] = raw[2 * i];
        }
        raw = tmp;
    }
    switch (ih->color_type) {
    case PNG_GREY:
        decode_row_grey(dst, raw, 1, w, out);
        break;
    case PNG_GREY_ALPHA:
        decode_row_grey(dst, raw, 2, w, out);
        break;
    case PNG_RGB:
        decode_row_rgb(dst, raw, 3, w, out);
        break;
    case PNG_RGBA:
        decode_row_rgb(dst, raw, 4, w, out);
        break;
    case PNG_PALETTE:
        decode_row_index(dst, pal, raw, w, out);
        break;
    }
}

int decode_png(const uint8_t *buf, size_t len, const struct decode_dst *dst)
{
    spng_ctx *ctx = spng_ctx_new(0);
    uint8_t *raw = NULL, *tmp = NULL;
    int rc;

    if (ctx == NULL)
        return decode_fail(dst, -ENOMEM, WHAT, "cannot create a decoder");
    int err = spng_set_png_buffer(ctx, buf, len);
    if (!err)
        err = spng_set_chunk_limits(ctx, PNG_CHUNK_CACHE, PNG_CHUNK_CACHE);
    /* The pixel limit is ours (below); libspng's own is the PNG maximum. */
    struct spng_ihdr ih;
    if (!err)
        err = spng_get_ihdr(ctx, &ih);
    if (err) {
        rc = spng_fail(dst, err, "reading the header");
        goto out;
    }

    uint8_t *px;
    rc = decode_begin(dst, WHAT, ih.width, ih.height, &px);
    if (rc < 0)
        goto out;

    struct decode_palette pal;
    if (ih.color_type == PNG_PALETTE) {
        struct spng_plte plte;
        err = spng_get_plte(ctx, &plte);
        if (err) {
            rc = spng_fail(dst, err, "reading the palette");
            goto out;
        }
        decode_palette_ramp(&pal);
        for (uint32_t i = 0; i < plte.n_entries && i < 256; i++) {
            pal.rgb[i][0] = plte.entries[i].red;
            pal.rgb[i][1] = plte.entries[i].green;
            pal.rgb[i][2] = plte.entries[i].blue;
        }
    }

    /* Straight into the output when the raw layout is the output's. */
    int direct = ih.bit_depth == 8 &&
                 ((ih.color_type == PNG_RGB && dst->channels == 3) ||
                  (ih.color_type == PNG_GREY && dst->channels == 1));
    size_t w = ih.width, h = ih.height, out_row = w * dst->channels;
    size_t raw_len;
    err = spng_decoded_image_size(ctx, SPNG_FMT_RAW, &raw_len);
    if (err) {
        rc = spng_fail(dst, err, "sizing the image");
        goto out;
    }
    if (direct) {
        err = spng_decode_image(ctx, px, h * out_row, SPNG_FMT_RAW, 0);
        if (err)
            rc = spng_fail(dst, err, "decoding");
        goto out;
    }
    /* libspng de-interlaces packed samples by OR-ing them into place: the
     * buffer must start zeroed. */
    raw = ih.interlace_method && ih.bit_depth < 8 ? calloc(1, raw_len) : malloc(raw_len);
    tmp = malloc(w * 4);
    if (raw == NULL || tmp == NULL) {
        rc = decode_fail(dst, -ENOMEM, WHAT, "no room to decode a %zux%zu image", w, h);
        goto out;
    }
    err = spng_decode_image(ctx, raw, raw_len, SPNG_FMT_RAW, 0);
    if (err) {
        rc = spng_fail(dst, err, "decoding");
        goto out;
    }
    size_t raw_row = raw_len / h;
    for (size_t y = 0; y < h; y++)
        convert_row(dst, &ih, &pal, raw + y * raw_row, tmp, px + y * out_row);
out:
    free(raw);
    free(tmp);
    spng_ctx_free(ctx);
    return rc;
}
