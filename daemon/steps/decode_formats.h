/*
 * Image file formats beyond JPEG: PNG, WebP, BMP, PPM/PGM/PBM and TIFF,
 * decoded to HWC uint8 RGB or grey exactly as PIL's
 * Image.open(f).convert('RGB' | 'L') makes them (Pillow 9.4, Debian 12),
 * which is what torchvision's ImageFolder feeds a transform.
 *
 * The format is found from the bytes, as PIL finds it (decode_sniff), never
 * from the file name: a PNG named x.jpg decodes. Each decoder is a pure
 * function of the file's bytes:
 *   - it reads the header, refuses an image of more than dst->max_pixels
 *     pixels with -E2BIG before it allocates anything for the pixels,
 *   - asks dst->alloc for exactly h * w * channels bytes and fills them,
 *   - returns 0, or -errno with a one-line message in dst->err:
 *     -EBADMSG for a corrupt, truncated or unsupported file (the message
 *     says which), -E2BIG over the pixel limit, -ENOMEM, or what
 *     dst->alloc returned.
 * Nothing is written through dst->alloc's buffer after a failure that the
 * caller could mistake for an image: a caller must ignore the buffer unless
 * 0 comes back.
 *
 * What PIL makes of each format, and so what these decoders make (the
 * per-format files say the details):
 *   PNG   every bit depth and colour type: 1/2/4-bit grey scaled to 0..255,
 *         16-bit grey clipped to 0..255 (PIL's mode I), 16-bit colour and
 *         alpha by their high byte, palette through PLTE (entries past its
 *         end are PIL's grey ramp), alpha and tRNS dropped, no gamma.
 *   WebP  libwebp, RGBA as PIL's WebPAnimDecoder decodes it, alpha dropped;
 *         an animation gives its first frame on the canvas.
 *   BMP   1/4/8-bit palette, 16 (5-5-5, 5-6-5), 24, 32-bit, bitfields PIL
 *         takes, RLE4/RLE8, bottom-up and top-down.
 *   PNM   P1-P6, any maxval (rescaled as PIL does, 16-bit grey clipped).
 *   TIFF  libtiff: grey, RGB(A), palette, 1/8/16 bits, strips or tiles,
 *         any compression libtiff decodes; see decode_tiff.c.
 * Grey (channels 1) is PIL's convert('L'): ITU-R 601-2 luma with Pillow's
 * 16-bit fixed-point weights, from the RGB a palette or colour file gives.
 */
#ifndef PRESTO_DECODE_FORMATS_H
#define PRESTO_DECODE_FORMATS_H

#include <stddef.h>
#include <stdint.h>

enum decode_format {
    DECODE_FMT_UNKNOWN = 0,
    DECODE_FMT_JPEG,
    DECODE_FMT_PNG,
    DECODE_FMT_WEBP,
    DECODE_FMT_BMP,
    DECODE_FMT_PNM,
    DECODE_FMT_TIFF,
    DECODE_FMT_GIF, /* recognised, not decoded */
    DECODE_FMT_MAX
};

/* The format of a file from its first bytes (the magic numbers PIL's
 * plugins accept), DECODE_FMT_UNKNOWN when none matches. */
enum decode_format decode_sniff(const uint8_t *buf, size_t len);
/* "jpeg", "png", "webp", "bmp", "pnm", "tiff", "gif", "unknown". */
const char *decode_format_name(enum decode_format f);

/* Where a decoder puts the image and its error. */
struct decode_dst {
    uint32_t channels;   /* 3: convert('RGB'), 1: convert('L') */
    uint64_t max_pixels; /* 0: no limit */
    /* Called once, with the image's size, after the pixel limit check:
     * sets *px to a buffer of h * w * c bytes and returns 0, or returns
     * -errno (-ENOMEM, -ENOSPC) that the decoder then returns. */
    int (*alloc)(void *arg, uint32_t h, uint32_t w, uint32_t c, uint8_t **px);
    void *arg;
    char *err; /* errlen bytes for a message; may be NULL */
    size_t errlen;
};

/* Decodes any format below by its magic (not JPEG: that is TurboJPEG's, in
 * the decode step); -EBADMSG naming the format for one it cannot decode. */
int decode_image(const uint8_t *buf, size_t len, const struct decode_dst *dst);

int decode_png(const uint8_t *buf, size_t len, const struct decode_dst *dst);
int decode_webp(const uint8_t *buf, size_t len, const struct decode_dst *dst);
int decode_bmp(const uint8_t *buf, size_t len, const struct decode_dst *dst);
int decode_pnm(const uint8_t *buf, size_t len, const struct decode_dst *dst);
int decode_tiff(const uint8_t *buf, size_t len, const struct decode_dst *dst);

#endif
