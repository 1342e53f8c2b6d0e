/*
 * TIFF with libtiff (the library PIL's TiffImagePlugin reads compressed
 * TIFFs with; it reads uncompressed ones itself, to the same samples),
 * converted as Pillow 9.4 converts the modes its OPEN_INFO table gives:
 *
 *   photometric            samples (bits), extra samples   RGB of a pixel
 *   0 / 1 grey             1, 2, 4, 8                      v scaled to 0..255;
 *                                                          photometric 0 inverted
 *   1 grey, 0 grey (II)    16                              min(v, 255) (PIL's
 *                                                          I;16, never inverted)
 *   1 grey + alpha         8, 8 (2: unassociated)          v
 *   2 RGB                  3 x 8 or 16, optionally 1-3 more (the table's
 *                          extra samples)                  the high byte; an
 *                          associated alpha (1) divided out as PIL's RGBa:
 *                          c * 255 / a (0 when a is 0, at most 255)
 *   3 palette              1, 2, 4, 8 (+ alpha 8)          the colour map's
 *                          high bytes; past its end the grey ramp
 *   5 CMYK                 4 x 8 (+ 1-2 unused)            Pillow's cmyk2rgb
 *   6 YCbCr                3 x 8                           JPEG-compressed:
 *                          libjpeg's RGB (JPEGCOLORMODE_RGB, as PIL sets
 *                          it); otherwise libtiff's RGBA image reader, as
 *                          PIL uses it
 * and nothing else (LAB, floats, signed or 32-bit samples, big-endian
 * 16-bit photometric 0: PIL has no mode for several, the rest are rare):
 * those are refused as unsupported. The first image of a multi-page file
 * is read, strips or tiles, contiguous or separate planes, whatever
 * compression this libtiff decodes. Bit order (FillOrder 2) is undone by
 * libtiff, as PIL relies on it to be. libtiff's messages go into the
 * error, never to stderr.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tiffio.h>

#include "decode_formats.h"
#include "decode_impl.h"

#define WHAT "tiff"

/* What PIL makes of a layout (its mode and raw mode, reduced to what the
 * conversion needs). */
enum tiff_kind {
    TK_GREY,    /* 1-8 bits, scaled, maybe inverted */
    TK_GREY16,  /* clipped */
    TK_LA,      /* grey + alpha, 8 bits */
    TK_RGB,     /* 3+ samples, 8 or 16 bits */
    TK_PALETTE, /* 1-8 bits (+ alpha) */
    TK_CMYK,    /* 4+ samples, 8 bits */
    TK_YCBCR,   /* through libtiff's RGBA reader */
};

struct tiff_mem {
    const uint8_t *buf;
    size_t len, pos;
    char msg[160]; /* libtiff's first error */
};

static tmsize_t mem_read(thandle_t h, void *dst, tmsize_t n)
{
    struct tiff_mem *m = (struct tiff_mem *)h;
    if (n <= 0 || m->pos >= m->len)
        return 0;
    size_t k = m->len - m->pos < (size_t)n ? m->len - m->pos : (size_t)n;
    memcpy(dst, m->buf + m->pos, k);
    m->pos += k;
    return (tmsize_t)k;
}

static tmsize_t mem_write(thandle_t h, void *src, tmsize_t n)
{
    (void)h, (void)src, (void)n;
    return -1;
}

static toff_t mem_seek(thandle_t h, toff_t off, int whence)
{
    struct tiff_mem *m = (struct tiff_mem *)h;
    uint64_t base = whence == SEEK_CUR ? m->pos : whence == SEEK_END ? m->len : 0;
    if (off > UINT64_MAX - base)
        return (toff_t)-1;
    m->pos = base + off > m->len ? m->len : (size_t)(base + off);
    return base + off;
}

static int mem_close(thandle_t h)
{
    (void)h;
    return 0;
}

static toff_t mem_size(thandle_t h)
{
    return ((struct tiff_mem *)h)->len;
}

static int mem_map(thandle_t h, void **base, toff_t *size)
{
    struct tiff_mem *m = (struct tiff_mem *)h;
    *base = (void *)m->buf;
    *size = m->len;
    return 1;
}

static void mem_unmap(thandle_t h, void *base, toff_t size)
{
    (void)h, (void)base, (void)size;
}

static int on_error(TIFF *tif, void *user, const char *module, const char *fmt, va_list ap)
{
    (void)tif, (void)module;
    struct tiff_mem *m = user;
    if (m->msg[0] == '\0')
        vsnprintf(m->msg, sizeof(m->msg), fmt, ap);
    return 1; /* handled: not to stderr */
}

static int on_warning(TIFF *tif, void *user, const char *module, const char *fmt, va_list ap)
{
    (void)tif, (void)user, (void)module, (void)fmt, (void)ap;
    return 1;
}

struct layout {
    enum tiff_kind kind;
    uint32_t w, h;
    uint16_t bps, spp, planar;
    int invert;  /* TK_GREY with photometric 0 */
    int premult; /* TK_RGB with associated alpha */
    int jpeg_rgb;
    struct decode_palette pal;
};

static int tiff_error(const struct decode_dst *dst, const struct tiff_mem *m, const char *what)
{
    return decode_fail(dst, -EBADMSG, WHAT, "%s%s%s", what, m->msg[0] ? ": " : "", m->msg);
}

/* PIL's OPEN_INFO, for the layouts this decoder converts. */
static int classify(TIFF *tif, const struct decode_dst *dst, struct layout *l)
{
    uint16_t photo, sf, fill, compression, nextra = 0, *extra = NULL;
    if (!TIFFGetFieldDefaulted(tif, TIFFTAG_COMPRESSION, &compression))
        compression = COMPRESSION_NONE;
    if (!TIFFGetField(tif, TIFFTAG_PHOTOMETRIC, &photo))
        photo = PHOTOMETRIC_MINISWHITE; /* PIL's default: 0 */
    if (compression == COMPRESSION_OJPEG)
        photo = PHOTOMETRIC_YCBCR; /* as PIL: old JPEG is YCbCr */
    TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLEFORMAT, &sf);
    TIFFGetFieldDefaulted(tif, TIFFTAG_FILLORDER, &fill);
    TIFFGetFieldDefaulted(tif, TIFFTAG_BITSPERSAMPLE, &l->bps);
    TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLESPERPIXEL, &l->spp);
    TIFFGetFieldDefaulted(tif, TIFFTAG_PLANARCONFIG, &l->planar);
    TIFFGetField(tif, TIFFTAG_EXTRASAMPLES, &nextra, &extra);
    int le = !TIFFIsBigEndian(tif);
    uint16_t bps = l->bps, spp = l->spp;
    uint16_t e0 = nextra ? extra[0] : 0xffff;
    int extras_unused = 1; /* every extra sample after the first is 0 */
    for (uint16_t i = 1; i < nextra; i++)
        extras_unused &= extra[i] == 0;

    if (sf != SAMPLEFORMAT_UINT)
        goto unsupported;
    switch (photo) {
    case PHOTOMETRIC_MINISWHITE:
    case PHOTOMETRIC_MINISBLACK:
        if (spp == 1 && nextra == 0 && (bps == 1 || bps == 2 || bps == 4 || bps == 8)) {
            l->kind = TK_GREY;
            l->invert = photo == PHOTOMETRIC_MINISWHITE;
            return 0;
        }
        if (spp == 1 && nextra == 0 && bps == 16 &&
            ((photo == PHOTOMETRIC_MINISBLACK && (le || fill == FILLORDER_MSB2LSB)) ||
             (photo == PHOTOMETRIC_MINISWHITE && le && fill == FILLORDER_MSB2LSB))) {
            l->kind = TK_GREY16;
            return 0;
        }
        if (photo == PHOTOMETRIC_MINISBLACK && spp == 2 && bps == 8 && nextra == 1 &&
            e0 == EXTRASAMPLE_UNASSALPHA && fill == FILLORDER_MSB2LSB) {
            l->kind = TK_LA;
            return 0;
        }
        break;
    case PHOTOMETRIC_RGB:
        if (bps == 8 && spp == 3 && nextra == 0) {
            l->kind = TK_RGB;
            return 0;
        }
        if (fill != FILLORDER_MSB2LSB)
            break;
        if (bps == 16 && spp == 3 && nextra == 0) {
            l->kind = TK_RGB;
            return 0;
        }
        if (bps == 8 && spp == 4 && nextra == 0) { /* missing ExtraSamples: RGBA */
            l->kind = TK_RGB;
            return 0;
        }
        if (bps == 8 && spp <= 6 && nextra == spp - 3 && extras_unused &&
            (e0 <= EXTRASAMPLE_UNASSALPHA || (e0 == 999 && spp == 4))) {
            l->kind = TK_RGB;
            l->premult = e0 == EXTRASAMPLE_ASSOCALPHA;
            return 0;
        }
        if (bps == 16 && spp == 4 && (nextra == 0 || (nextra == 1 && e0 <= 2))) {
            l->kind = TK_RGB;
            l->premult = nextra && e0 == EXTRASAMPLE_ASSOCALPHA;
            return 0;
        }
        break;
    case PHOTOMETRIC_PALETTE:
        if (((spp == 1 && nextra == 0 && (bps == 1 || bps == 2 || bps == 4 || bps == 8)) ||
             (spp == 2 && bps == 8 && nextra == 1 && e0 == EXTRASAMPLE_UNASSALPHA &&
              fill == FILLORDER_MSB2LSB))) {
            uint16_t *r, *g, *b;
            if (!TIFFGetField(tif, TIFFTAG_COLORMAP, &r, &g, &b))
                return decode_fail(dst, -EBADMSG, WHAT, "palette image without a colour map");
            decode_palette_ramp(&l->pal);
            for (uint32_t i = 0; i < (1u << bps); i++) {
                l->pal.rgb[i][0] = (uint8_t)(r[i] >> 8);
                l->pal.rgb[i][1] = (uint8_t)(g[i] >> 8);
                l->pal.rgb[i][2] = (uint8_t)(b[i] >> 8);
            }
            l->kind = TK_PALETTE;
            return 0;
        }
        break;
    case PHOTOMETRIC_SEPARATED:
        if (bps == 8 && spp >= 4 && spp <= 6 && nextra == spp - 4 && fill == FILLORDER_MSB2LSB) {
            int all_zero = 1;
            for (uint16_t i = 0; i < nextra; i++)
                all_zero &= extra[i] == 0;
            if (all_zero) {
                l->kind = TK_CMYK;
                return 0;
            }
        }
        break;
    case PHOTOMETRIC_YCBCR:
        if (bps == 8 && spp == 3 && nextra == 0 && fill == FILLORDER_MSB2LSB) {
            /* PIL reads uncompressed YCbCr as if it were RGBX (wrongly):
             * refused here rather than copied. */
            if (compression == COMPRESSION_NONE)
                break;
            if (compression == COMPRESSION_JPEG && l->planar == PLANARCONFIG_CONTIG) {
                if (!TIFFSetField(tif, TIFFTAG_JPEGCOLORMODE, JPEGCOLORMODE_RGB))
                    return decode_fail(dst, -EBADMSG, WHAT, "cannot have libjpeg convert YCbCr");
                l->kind = TK_RGB;
                l->jpeg_rgb = 1;
            } else {
                l->kind = TK_YCBCR;
            }
            return 0;
        }
        break;
    }
unsupported:
    return decode_fail(dst, -EBADMSG, WHAT,
                       "unsupported layout (photometric %u, %u samples of %u bits, format %u)",
                       photo, spp, bps, sf);
}

/* Reads the whole image into img as contiguous rows of row bytes
 * (interleaving separate planes). */
static int read_samples(TIFF *tif, const struct decode_dst *dst, struct tiff_mem *m,
                        const struct layout *l, uint8_t *img, size_t row)
{
    int separate = l->planar == PLANARCONFIG_SEPARATE && l->spp > 1;
    uint32_t planes = separate ? l->spp : 1, pspp = separate ? 1 : l->spp;
    size_t bps = l->bps, sample = bps / 8; /* bytes a sample (separate: 8 or 16 bits) */
    uint32_t tw, th;
    int tiled = TIFFIsTiled(tif);
    if (tiled) {
        if (!TIFFGetField(tif, TIFFTAG_TILEWIDTH, &tw) ||
            !TIFFGetField(tif, TIFFTAG_TILELENGTH, &th) || tw == 0 || th == 0 || tw % 16)
            return decode_fail(dst, -EBADMSG, WHAT, "bad tile size");
    } else {
        tw = l->w;
        if (!TIFFGetFieldDefaulted(tif, TIFFTAG_ROWSPERSTRIP, &th) || th == 0 || th > l->h)
            th = l->h;
    }
    /* One tile or strip, decoded. */
    uint64_t piece_row = ((uint64_t)tw * pspp * bps + 7) / 8;
    uint64_t piece = tiled ? TIFFTileSize64(tif) : TIFFStripSize64(tif);
    if (piece == 0 || piece < piece_row * th || piece > ((uint64_t)1 << 34))
        return tiff_error(dst, m, "bad strip or tile size");
    uint8_t *buf = malloc((size_t)piece);
    if (buf == NULL)
        return decode_fail(dst, -ENOMEM, WHAT, "no room for a strip of %llu bytes",
                           (unsigned long long)piece);
    int rc = 0;
    for (uint32_t p = 0; p < planes && rc == 0; p++) {
        for (uint32_t y0 = 0; y0 < l->h && rc == 0; y0 += th) {
            for (uint32_t x0 = 0; x0 < l->w && rc == 0; x0 += tw) {
                tmsize_t n;
                if (tiled)
                    n = TIFFReadEncodedTile(tif, TIFFComputeTile(tif, x0, y0, 0, (uint16_t)p),
                                            buf, (tmsize_t)piece);
                else
                    n = TIFFReadEncodedStrip(tif, TIFFComputeStrip(tif, y0, (uint16_t)p), buf,
                                             (tmsize_t)piece);
                uint32_t rows = l->h - y0 < th ? l->h - y0 : th;
                uint32_t cols = l->w - x0 < tw ? l->w - x0 : tw;
                if (n < 0 || (uint64_t)n < piece_row * (rows - 1) + (cols * pspp * bps + 7) / 8) {
                    rc = tiff_error(dst, m, tiled ? "cannot read a tile" : "cannot read a strip");
                    break;
                }
                for (uint32_t r = 0; r < rows; r++) {
                    const uint8_t *s = buf + r * piece_row;
                    uint8_t *d = img + (size_t)(y0 + r) * row;
                    if (!separate) {
                        memcpy(d + (size_t)x0 * l->spp * bps / 8, s,
                               ((size_t)cols * l->spp * bps + 7) / 8);
                        continue;
                    }
                    for (uint32_t x = 0; x < cols; x++)
                        memcpy(d + ((size_t)(x0 + x) * l->spp + p) * sample, s + x * sample,
                               sample);
                }
            }
        }
    }
    free(buf);
    return rc;
}

/* Pillow's MULDIV255: (a * b) / 255 rounded. */
static inline int muldiv255(int a, int b)
{
    int t = a * b + 128;
    return ((t >> 8) + t) >> 8;
}

/* One row of samples (native byte order) to the output; tmp: w * 3. */
static void convert_row(const struct decode_dst *dst, const struct layout *l, const uint8_t *s,
                        uint8_t *tmp, uint8_t *out)
{
    size_t w = l->w, spp = l->spp;
    switch (l->kind) {
    case TK_GREY: {
        static const uint8_t scale[] = {[1] = 255, [2] = 85, [4] = 17, [8] = 1};
        if (l->bps == 8)
            memcpy(tmp, s, w);
        else
            decode_unpack_bits(s, l->bps, w, scale[l->bps], tmp);
        if (l->invert)
            for (size_t i = 0; i < w; i++)
                tmp[i] = (uint8_t)(255 - tmp[i]);
        decode_row_grey(dst, tmp, 1, w, out);
        return;
    }
    case TK_GREY16: {
        const uint16_t *v = (const uint16_t *)(const void *)s;
        for (size_t i = 0; i < w; i++)
            tmp[i] = v[i] > 255 ? 255 : (uint8_t)v[i];
        decode_row_grey(dst, tmp, 1, w, out);
        return;
    }
    case TK_LA:
        decode_row_grey(dst, s, 2, w, out);
        return;
    case TK_PALETTE:
        if (l->spp == 2) {
            for (size_t i = 0; i < w; i++)
                tmp[i] = s[2 * i];
        } else if (l->bps == 8) {
            memcpy(tmp, s, w);
        } else {
            decode_unpack_bits(s, l->bps, w, 1, tmp);
        }
        decode_row_index(dst, &l->pal, tmp, w, out);
        return;
    case TK_CMYK:
        for (size_t i = 0; i < w; i++) {
            const uint8_t *c = s + i * spp;
            int nk = 255 - c[3];
            for (int k = 0; k < 3; k++)
                tmp[3 * i + k] = (uint8_t)(nk - muldiv255(c[k], nk));
        }
        decode_row_rgb(dst, tmp, 3, w, out);
        return;
    case TK_RGB:
    case TK_YCBCR:
        break;
    }
    /* RGB: the high byte of 16-bit samples; associated alpha divided out. */
    for (size_t i = 0; i < w; i++) {
        uint32_t c[4];
        for (size_t k = 0; k < 4 && k < spp; k++)
            c[k] = l->bps == 16 ? ((const uint16_t *)(const void *)s)[i * spp + k] >> 8
                                : s[i * spp + k];
        if (l->premult) {
            uint32_t a = c[3];
            for (int k = 0; k < 3; k++)
                c[k] = a == 0 ? 0 : c[k] * 255 / a > 255 ? 255 : c[k] * 255 / a;
        }
        tmp[3 * i] = (uint8_t)c[0];
        tmp[3 * i + 1] = (uint8_t)c[1];
        tmp[3 * i + 2] = (uint8_t)c[2];
    }
    decode_row_rgb(dst, tmp, 3, w, out);
}

int decode_tiff(const uint8_t *buf, size_t len, const struct decode_dst *dst)
{
    struct tiff_mem m = {.buf = buf, .len = len};
    TIFFOpenOptions *opts = TIFFOpenOptionsAlloc();
    if (opts == NULL)
        return decode_fail(dst, -ENOMEM, WHAT, "cannot create a decoder");
    TIFFOpenOptionsSetErrorHandlerExtR(opts, on_error, &m);
    TIFFOpenOptionsSetWarningHandlerExtR(opts, on_warning, &m);
    /* libtiff's own buffers (compressed strips, tables): bounded by what a
     * file within the pixel limit could need. */
    uint64_t cap = dst->max_pixels ? dst->max_pixels * 16 : (uint64_t)1 << 32;
    TIFFOpenOptionsSetMaxSingleMemAlloc(opts, (tmsize_t)(cap < (64u << 20) ? (64u << 20) : cap));
    TIFF *tif = TIFFClientOpenExt("tiff", "r", (thandle_t)&m, mem_read, mem_write, mem_seek,
                                  mem_close, mem_size, mem_map, mem_unmap, opts);
    TIFFOpenOptionsFree(opts);
    if (tif == NULL)
        return tiff_error(dst, &m, "not a readable TIFF");

    struct layout *l = calloc(1, sizeof(*l));
    uint8_t *img = NULL, *tmp = NULL, *px;
    uint32_t *rgba = NULL;
    int rc;
    if (l == NULL) {
        rc = decode_fail(dst, -ENOMEM, WHAT, "out of memory");
        goto out;
    }
    if (!TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &l->w) ||
        !TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &l->h)) {
        rc = tiff_error(dst, &m, "no image size");
        goto out;
    }
    rc = classify(tif, dst, l);
    if (rc == 0)
        rc = decode_begin(dst, WHAT, l->w, l->h, &px);
    if (rc < 0)
        goto out;
    size_t w = l->w, h = l->h, out_row = w * dst->channels;
    tmp = malloc(w * 3);
    if (tmp == NULL) {
        rc = decode_fail(dst, -ENOMEM, WHAT, "no room for a row");
        goto out;
    }
    if (l->kind == TK_YCBCR) {
        rgba = malloc(w * h * 4);
        if (rgba == NULL) {
            rc = decode_fail(dst, -ENOMEM, WHAT, "no room for the image");
            goto out;
        }
        if (!TIFFReadRGBAImageOriented(tif, l->w, l->h, rgba, ORIENTATION_TOPLEFT, 1)) {
            rc = tiff_error(dst, &m, "cannot decode YCbCr");
            goto out;
        }
        /* Packed ABGR words: R in the low byte. */
        for (size_t y = 0; y < h; y++) {
            for (size_t x = 0; x < w; x++) {
                uint32_t v = rgba[y * w + x];
                tmp[3 * x] = (uint8_t)v;
                tmp[3 * x + 1] = (uint8_t)(v >> 8);
                tmp[3 * x + 2] = (uint8_t)(v >> 16);
            }
            decode_row_rgb(dst, tmp, 3, w, px + y * out_row);
        }
        goto out;
    }
    size_t row = (w * l->spp * l->bps + 7) / 8;
    if (l->jpeg_rgb && TIFFScanlineSize64(tif) != row) {
        rc = tiff_error(dst, &m, "unexpected scanline size");
        goto out;
    }
    img = malloc(row * h);
    if (img == NULL) {
        rc = decode_fail(dst, -ENOMEM, WHAT, "no room for the image");
        goto out;
    }
    rc = read_samples(tif, dst, &m, l, img, row);
    for (size_t y = 0; rc == 0 && y < h; y++)
        convert_row(dst, l, img + y * row, tmp, px + y * out_row);
out:
    free(rgba);
    free(img);
    free(tmp);
    free(l);
    TIFFClose(tif);
    return rc;
}
