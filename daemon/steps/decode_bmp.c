/*
 * BMP, read as Pillow 9.4's BmpImagePlugin reads it, so the pixels equal
 * Image.open(f).convert('RGB' | 'L'):
 *
 *   - headers of 12 (OS/2 1.x: 16-bit sizes, BGR palette), 40, 64, 108
 *     and 124 bytes; a height whose top byte is 0xff is a top-down image
 *     of 2^32 - height rows; bits 1, 4, 8 (palette), 16 (5-5-5), 24, 32
 *     (BGRX: the fourth byte ignored).
 *   - BI_BITFIELDS with exactly the masks PIL takes (32-bit BGRX, XBGR,
 *     ABGR, RGBA, BGRA, all-zero as BGRA; 24-bit BGR; 16-bit 5-6-5 and
 *     5-5-5); the masks follow a 40-byte header, or lie in a longer one.
 *     16-bit samples become x * 255 / max per channel (integer division).
 *   - a palette of `colors` entries (2^bits when the header says 0) is read
 *     right after the header. If its first entries are the grey ramp
 *     (black and white for two colours) PIL drops it and reads the pixels
 *     as grey: 1 bit a pixel ("1") for two colours, a byte a pixel ("L")
 *     otherwise, whatever the file's bit depth (as PIL does, even when
 *     that misreads the rows, and refused when a row is too short for it);
 *     else the indices go through the palette, entries past its end being
 *     PIL's grey ramp; over 256 entries is refused.
 *   - RLE8 and RLE4 as PIL's BmpRleDecoder runs them (its odd-length
 *     absolute runs in RLE4 included), into 8-bit palette or grey rows.
 *   - rows are ((width * bits + 31) / 32) * 4 bytes, bottom-up unless the
 *     height says otherwise; the last row needs only its pixels' bytes.
 *     A file shorter than its pixels is refused.
 * Alpha (32-bit with an alpha mask) is dropped by convert, as in PIL.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "decode_formats.h"
#include "decode_impl.h"

#define WHAT "bmp"

enum { BMP_RAW = 0, BMP_RLE8 = 1, BMP_RLE4 = 2, BMP_BITFIELDS = 3 };

/* How a row's bytes become pixels: PIL's raw modes for BMP. */
enum rawmode {
    RAW_1,      /* 1 bit a pixel, grey 0/255 */
    RAW_L,      /* a byte a pixel, grey */
    RAW_P1,     /* palette indices of 1, 4 and 8 bits */
    RAW_P4,
    RAW_P8,
    RAW_BGR15,  /* 16-bit little-endian 5-5-5 */
    RAW_BGR16,  /* 16-bit little-endian 5-6-5 */
    RAW_BGR,
    RAW_BGRX,
    RAW_XBGR,
    RAW_ABGR,
    RAW_RGBA,
    RAW_BGRA,
};

static const uint8_t raw_bits[] = {
    [RAW_1] = 1,      [RAW_L] = 8,     [RAW_P1] = 1,    [RAW_P4] = 4,    [RAW_P8] = 8,
    [RAW_BGR15] = 16, [RAW_BGR16] = 16, [RAW_BGR] = 24, [RAW_BGRX] = 32, [RAW_XBGR] = 32,
    [RAW_ABGR] = 32,  [RAW_RGBA] = 32, [RAW_BGRA] = 32,
};

static uint32_t le16(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* One row of w pixels in raw mode m to the output; tmp holds w * 3 bytes. */
static void convert_row(const struct decode_dst *dst, enum rawmode m,
                        const struct decode_palette *pal, const uint8_t *in, size_t w,
                        uint8_t *tmp, uint8_t *out)
{
    switch (m) {
    case RAW_1:
        decode_unpack_bits(in, 1, w, 255, tmp);
        decode_row_grey(dst, tmp, 1, w, out);
        return;
    case RAW_L:
        decode_row_grey(dst, in, 1, w, out);
        return;
    case RAW_P1:
    case RAW_P4:
        decode_unpack_bits(in, raw_bits[m], w, 1, tmp);
        decode_row_index(dst, pal, tmp, w, out);
        return;
    case RAW_P8:
        decode_row_index(dst, pal, in, w, out);
        return;
    case RAW_BGR15:
    case RAW_BGR16:
        for (size_t i = 0; i < w; i++) {
            uint32_t v = le16(in + 2 * i);
            uint8_t *t = tmp + 3 * i;
            if (m == RAW_BGR15) {
                t[0] = (uint8_t)(((v >> 10) & 31) * 255 / 31);
                t[1] = (uint8_t)(((v >> 5) & 31) * 255 / 31);
            } else {
                t[0] = (uint8_t)(((v >> 11) & 31) * 255 / 31);
                t[1] = (uint8_t)(((v >> 5) & 63) * 255 / 63);
            }
            t[2] = (uint8_t)((v & 31) * 255 / 31);
        }
        decode_row_rgb(dst, tmp, 3, w, out);
        return;
    default:
        break;
    }
    /* Byte-order modes: where R, G and B lie in each pixel. */
    size_t step = raw_bits[m] / 8, r, g, b;
    switch (m) {
    case RAW_RGBA:
        r = 0, g = 1, b = 2;
        break;
    case RAW_XBGR:
    case RAW_ABGR:
        r = 3, g = 2, b = 1;
        break;
    default: /* BGR, BGRX, BGRA */
        r = 2, g = 1, b = 0;
        break;
    }
    for (size_t i = 0; i < w; i++) {
        tmp[3 * i] = in[i * step + r];
        tmp[3 * i + 1] = in[i * step + g];
        tmp[3 * i + 2] = in[i * step + b];
    }
    decode_row_rgb(dst, tmp, 3, w, out);
}

/* PIL's BmpRleDecoder: fills data (w * h bytes, zeroed) with indices or
 * grey bytes, rows in file order. pos is the absolute offset of the data
 * (its absolute-run padding aligns to the file). Returns the bytes it
 * produced (PIL needs w * h). */
static size_t rle_decode(const uint8_t *buf, size_t len, size_t pos, int rle4, size_t w,
                         size_t h, uint8_t *data)
{
    size_t total = w * h, n = 0, x = 0;
#define PUT(v)              \
    do {                    \
        if (n < total)      \
            data[n] = (v);  \
        n++;                \
    } while (0)
    while (n < total) {
        if (pos + 2 > len)
            break;
        size_t count = buf[pos];
        uint8_t byte = buf[pos + 1];
        pos += 2;
        if (count) {
            if (x + count > w) /* too much for the row */
                count = x < w ? w - x : 0;
            for (size_t i = 0; i < count; i++)
                PUT(rle4 ? (i % 2 == 0 ? byte >> 4 : byte & 15) : byte);
            x += count;
        } else if (byte == 0) { /* end of line */
            while (n % w != 0)
                PUT(0);
            x = 0;
        } else if (byte == 1) { /* end of bitmap */
            break;
        } else if (byte == 2) { /* delta */
            if (pos + 2 > len)
                break;
            size_t right = buf[pos], up = buf[pos + 1];
            pos += 2;
            size_t skip = right + up * w;
            for (size_t i = 0; i < skip && n < total; i++)
                PUT(0);
            if (n >= total)
                break;
            x = n % w;
        } else { /* absolute run */
            size_t bytes = rle4 ? byte / 2u : byte;
            size_t avail = len - pos < bytes ? len - pos : bytes;
            for (size_t i = 0; i < avail; i++) {
                uint8_t v = buf[pos + i];
                if (rle4) {
                    PUT(v >> 4);
                    PUT(v & 15);
                } else {
                    PUT(v);
                }
            }
            pos += avail;
            if (avail < bytes)
                break;
            x += byte;
            if (pos % 2 != 0)
                pos++;
        }
    }
#undef PUT
    return n;
}

int decode_bmp(const uint8_t *buf, size_t len, const struct decode_dst *dst)
{
    if (len < 18 || memcmp(buf, "BM", 2) != 0)
        return decode_fail(dst, -EBADMSG, WHAT, "truncated file header");
    size_t offset = le32(buf + 10);
    uint32_t hsize = le32(buf + 14);
    if (hsize != 12 && hsize != 40 && hsize != 64 && hsize != 108 && hsize != 124)
        return decode_fail(dst, -EBADMSG, WHAT, "unsupported header of %u bytes", hsize);
    if (len < 14 + (size_t)hsize)
        return decode_fail(dst, -EBADMSG, WHAT, "truncated header");
    const uint8_t *hd = buf + 18; /* the header after its size field */
    size_t pos = 14 + (size_t)hsize;

    uint64_t w, h;
    uint32_t bits, compression = BMP_RAW, colors = 0, padding;
    int top_down = 0;
    uint32_t mask[4] = {0, 0, 0, 0};
    if (hsize == 12) {
        w = le16(hd);
        h = le16(hd + 2);
        bits = le16(hd + 6);
        padding = 3;
    } else {
        top_down = hd[7] == 0xff;
        w = le32(hd);
        h = top_down ? (1ull << 32) - le32(hd + 4) : le32(hd + 4);
        bits = le16(hd + 10);
        compression = le32(hd + 12);
        colors = le32(hd + 28);
        padding = 4;
        if (compression == BMP_BITFIELDS) {
            if (hsize - 4 >= 52) {
                for (int i = 0; i < 4; i++)
                    mask[i] = le32(hd + 36 + 4 * i);
            } else {
                if (len < pos + 12)
                    return decode_fail(dst, -EBADMSG, WHAT, "truncated bitfield masks");
                for (int i = 0; i < 3; i++)
                    mask[i] = le32(buf + pos + 4 * i);
                pos += 12;
            }
        }
    }
    uint64_t ncolors = colors ? colors : 1ull << (bits < 63 ? bits : 63);
    if (offset == 14 + (size_t)hsize && bits <= 8)
        offset += 4 * ncolors;

    enum rawmode m;
    switch (bits) {
    case 1:
        m = RAW_P1;
        break;
    case 4:
        m = RAW_P4;
        break;
    case 8:
        m = RAW_P8;
        break;
    case 16:
        m = RAW_BGR15;
        break;
    case 24:
        m = RAW_BGR;
        break;
    case 32:
        m = RAW_BGRX;
        break;
    default:
        return decode_fail(dst, -EBADMSG, WHAT, "unsupported depth of %u bits", bits);
    }
    int rle = 0;
    if (compression == BMP_BITFIELDS) {
        static const struct {
            uint32_t bits, mask[4];
            enum rawmode m;
        } masks[] = {
            {32, {0xff0000, 0xff00, 0xff, 0}, RAW_BGRX},
            {32, {0xff000000, 0xff0000, 0xff00, 0}, RAW_XBGR},
            {32, {0xff000000, 0xff0000, 0xff00, 0xff}, RAW_ABGR},
            {32, {0xff, 0xff00, 0xff0000, 0xff000000}, RAW_RGBA},
            {32, {0xff0000, 0xff00, 0xff, 0xff000000}, RAW_BGRA},
            {32, {0, 0, 0, 0}, RAW_BGRA},
            {24, {0xff0000, 0xff00, 0xff, 0}, RAW_BGR},
            {16, {0xf800, 0x7e0, 0x1f, 0}, RAW_BGR16},
            {16, {0x7c00, 0x3e0, 0x1f, 0}, RAW_BGR15},
        };
        size_t i, n = sizeof(masks) / sizeof(masks[0]);
        for (i = 0; i < n; i++) {
            /* 24 and 16 bits: PIL compares the RGB masks only. */
            int cmp = masks[i].bits == 32 ? 4 : 3;
            if (masks[i].bits == bits && memcmp(masks[i].mask, mask, cmp * sizeof(uint32_t)) == 0)
                break;
        }
        if (i == n)
            return decode_fail(dst, -EBADMSG, WHAT, "unsupported bitfields layout");
        m = masks[i].m;
    } else if (compression == BMP_RLE8 || compression == BMP_RLE4) {
        rle = compression == BMP_RLE4 ? 4 : 8;
    } else if (compression != BMP_RAW) {
        return decode_fail(dst, -EBADMSG, WHAT, "unsupported compression %u", compression);
    }

    struct decode_palette pal;
    if (bits <= 8) {
        if (ncolors == 0 || ncolors > 65536)
            return decode_fail(dst, -EBADMSG, WHAT, "unsupported palette of %llu colours",
                               (unsigned long long)ncolors);
        /* Read as far as the file goes, as PIL's read() does. */
        size_t want = padding * (size_t)ncolors;
        size_t got = pos < len ? (len - pos < want ? len - pos : want) : 0;
        const uint8_t *p = buf + pos;
        pos += got;
        int grey = 1;
        for (size_t i = 0; i < ncolors && grey; i++) {
            uint8_t v = ncolors == 2 ? (i ? 255 : 0) : (uint8_t)i;
            grey = i * padding + 3 <= got && p[i * padding] == v && p[i * padding + 1] == v &&
                   p[i * padding + 2] == v;
        }
        if (grey) {
            m = ncolors == 2 ? RAW_1 : RAW_L;
        } else {
            size_t entries = got / padding;
            if (entries > 256)
                return decode_fail(dst, -EBADMSG, WHAT, "palette of %zu colours", entries);
            decode_palette_ramp(&pal);
            for (size_t i = 0; i < entries; i++) {
                pal.rgb[i][0] = p[i * padding + 2];
                pal.rgb[i][1] = p[i * padding + 1];
                pal.rgb[i][2] = p[i * padding];
            }
        }
    }
    /* PIL's run-length decoder makes palette or grey bytes only. */
    if (rle && (bits > 8 || m == RAW_1))
        return decode_fail(dst, -EBADMSG, WHAT, "run-length coding of a %u-bit%s image",
                           bits, m == RAW_1 ? " black and white" : "");
    if (offset == 0)
        offset = pos;

    uint8_t *px;
    int rc = decode_begin(dst, WHAT, w, h, &px);
    if (rc < 0)
        return rc;
    size_t W = (size_t)w, H = (size_t)h, out_row = W * dst->channels;
    uint8_t *tmp = malloc(W * 3), *rows = NULL;
    if (tmp == NULL)
        return decode_fail(dst, -ENOMEM, WHAT, "no room for a row");
    const uint8_t *data;
    size_t stride;
    if (rle) {
        rows = calloc(H, W);
        if (rows == NULL) {
            free(tmp);
            return decode_fail(dst, -ENOMEM, WHAT, "no room for the rows");
        }
        size_t n = offset < len ? rle_decode(buf, len, offset, rle == 4, W, H, rows) : 0;
        if (n < W * H) {
            free(rows);
            free(tmp);
            return decode_fail(dst, -EBADMSG, WHAT, "truncated run-length data");
        }
        m = m == RAW_L ? RAW_L : RAW_P8;
        data = rows;
        stride = W;
    } else {
        stride = (size_t)(((w * bits + 31) >> 3) & ~(uint64_t)3);
        size_t bytes = (W * raw_bits[m] + 7) / 8;
        if (stride < bytes) {
            free(tmp);
            return decode_fail(dst, -EBADMSG, WHAT, "rows too short for their pixels");
        }
        if (offset > len || len - offset < bytes || (len - offset - bytes) / stride < H - 1) {
            free(tmp);
            return decode_fail(dst, -EBADMSG, WHAT, "truncated: pixels need %zu bytes from %zu",
                               (H - 1) * stride + bytes, offset);
        }
        data = buf + offset;
    }
    for (size_t y = 0; y < H; y++) {
        size_t oy = top_down ? y : H - 1 - y;
        convert_row(dst, m, &pal, data + y * stride, W, tmp, px + oy * out_row);
    }
    free(rows);
    free(tmp);
    return 0;
}
