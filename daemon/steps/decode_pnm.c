/*
 * PBM, PGM and PPM (P1-P6), read as Pillow 9.4's PpmImagePlugin reads them:
 *
 *   - the header: the magic (up to 6 bytes, ended by whitespace), then
 *     width, height and (not for bitmaps) maxval, each token at most 10
 *     bytes, ended by one whitespace byte; '#' starts a comment that runs to
 *     CR or LF and is cut out of the token it interrupts (so "1#x\n2" is
 *     12, as in PIL); the pixels start right after the last token's
 *     terminating byte. maxval must lie in 1..65535.
 *   - P4: 1 bit a pixel, rows padded to bytes, 1 is black. P1: one '0' or
 *     '1' a pixel, whitespace optional, '1' black.
 *   - P5/P6 with maxval 255: the bytes. P5 with 65535: big-endian 16-bit,
 *     PIL's mode I, which convert clips to 0..255. Any other maxval: one
 *     byte a sample under 256, else two, each rescaled to
 *     min(out, round(v / maxval * out)) with out 255, or 65535 for a PGM
 *     whose maxval is over 255 (mode I again, clipped to 0..255 after).
 *   - P2/P3: decimal tokens, each at most 10 bytes and at most maxval
 *     (else the file is refused, as PIL refuses it), rescaled the same way;
 *     comments are cut out of the data as in the header.
 * round is Python's: half to even, on the double v / maxval * out, which
 * C computes the same way. Fewer pixels than the header promises is a
 * truncated file; bytes after the last pixel are ignored. PIL's own
 * extensions (P0CMYK, PyP, ...) are refused.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "decode_formats.h"
#include "decode_impl.h"

#define WHAT "pnm"
#define TOKEN_MAX 10

struct pnm {
    const uint8_t *buf;
    size_t len, pos;
};

static int is_space(int c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* PIL's _read_token: skips leading whitespace, cuts comments, stops at the
 * first whitespace byte after the token (consumed). Returns the length, 0
 * at the end of the file, or -1 when over TOKEN_MAX bytes. */
static int read_token(struct pnm *p, char tok[TOKEN_MAX + 2])
{
    int n = 0;
    while (n <= TOKEN_MAX) {
        if (p->pos >= p->len)
            break;
        int c = p->buf[p->pos++];
        if (is_space(c)) {
            if (n == 0)
                continue;
            break;
        }
        if (c == '#') {
            while (p->pos < p->len) {
                c = p->buf[p->pos++];
                if (c == '\r' || c == '\n')
                    break;
            }
            continue;
        }
        tok[n++] = (char)c;
    }
    tok[n] = '\0';
    return n > TOKEN_MAX ? -1 : n;
}

/* Python's int() of a token: an optional sign, then digits with single
 * underscores between them. Returns 0 and *v, or -1. */
static int parse_int(const char *s, size_t n, long long *v)
{
    size_t i = 0;
    int neg = 0;
    if (i < n && (s[i] == '+' || s[i] == '-'))
        neg = s[i++] == '-';
    if (i >= n || s[i] < '0' || s[i] > '9')
        return -1;
    long long x = 0;
    for (; i < n; i++) {
        if (s[i] == '_') {
            if (i + 1 >= n || s[i + 1] < '0' || s[i + 1] > '9')
                return -1;
            continue;
        }
        if (s[i] < '0' || s[i] > '9')
            return -1;
        x = x * 10 + (s[i] - '0'); /* at most 10 digits: no overflow */
    }
    *v = neg ? -x : x;
    return 0;
}

static int header_int(struct pnm *p, const struct decode_dst *dst, const char *name,
                      long long *v)
{
    char tok[TOKEN_MAX + 2];
    int n = read_token(p, tok);
    if (n == 0)
        return decode_fail(dst, -EBADMSG, WHAT, "truncated header (no %s)", name);
    if (n < 0)
        return decode_fail(dst, -EBADMSG, WHAT, "header token too long (%s)", name);
    if (parse_int(tok, (size_t)n, v) < 0)
        return decode_fail(dst, -EBADMSG, WHAT, "%s '%s' is not a number", name, tok);
    return 0;
}

/* PIL's rescaling of one sample to 0..out (Python round: half to even). */
static uint32_t rescale(uint32_t v, uint32_t maxval, uint32_t out)
{
    double r = nearbyint((double)v / (double)maxval * (double)out);
    return r > out ? out : (uint32_t)r;
}

/* Writes a row of n pixels of ch samples (1 or 3) already 8-bit. */
static void put_row(const struct decode_dst *dst, const uint8_t *s, uint32_t ch, size_t n,
                    uint8_t *out)
{
    if (ch == 3)
        decode_row_rgb(dst, s, 3, n, out);
    else
        decode_row_grey(dst, s, 1, n, out);
}

/* The data of a comment-free plain file as PIL's PpmPlainDecoder sees it:
 * comments ('#' through the next CR or LF, inclusive) cut out. */
static uint8_t *strip_comments(const uint8_t *s, size_t n, size_t *out_n)
{
    uint8_t *d = malloc(n ? n : 1);
    if (d == NULL)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '#') {
            d[k++] = s[i];
            continue;
        }
        while (i < n && s[i] != '\r' && s[i] != '\n')
            i++;
    }
    *out_n = k;
    return d;
}

/* P1: '0' and '1' only (whitespace skipped), '1' black. */
static int decode_plain_bits(const struct decode_dst *dst, const uint8_t *s, size_t n,
                             size_t w, size_t h, uint8_t *px, uint8_t *row)
{
    size_t need = w * h, got = 0;
    for (size_t i = 0; i < n && got < need; i++) {
        if (is_space(s[i]))
            continue;
        if (s[i] != '0' && s[i] != '1')
            return decode_fail(dst, -EBADMSG, WHAT, "invalid byte 0x%02x in a plain bitmap",
                               s[i]);
        row[got % w] = s[i] == '1' ? 0 : 255;
        got++;
        if (got % w == 0)
            put_row(dst, row, 1, w, px + (got / w - 1) * w * dst->channels);
    }
    if (got < need)
        return decode_fail(dst, -EBADMSG, WHAT, "truncated: %zu of %zu pixels", got, need);
    return 0;
}

/* P2, P3: decimal samples, rescaled to out and clipped to 255. */
static int decode_plain(const struct decode_dst *dst, const uint8_t *s, size_t n, size_t w,
                        size_t h, uint32_t ch, uint32_t maxval, uint32_t out, uint8_t *px,
                        uint8_t *row)
{
    size_t need = w * h * ch, got = 0, row_len = w * ch;
    size_t i = 0;
    while (got < need) {
        while (i < n && is_space(s[i]))
            i++;
        if (i >= n)
            break;
        size_t start = i;
        while (i < n && !is_space(s[i]))
            i++;
        size_t tl = i - start;
        long long v;
        if (tl > TOKEN_MAX)
            return decode_fail(dst, -EBADMSG, WHAT, "token too long in the data");
        if (parse_int((const char *)s + start, tl, &v) < 0 || v < 0)
            return decode_fail(dst, -EBADMSG, WHAT, "invalid sample '%.*s'", (int)tl,
                               (const char *)s + start);
        if (v > maxval)
            return decode_fail(dst, -EBADMSG, WHAT, "sample %lld over maxval %u", v, maxval);
        uint32_t r = rescale((uint32_t)v, maxval, out);
        row[got % row_len] = r > 255 ? 255 : (uint8_t)r;
        got++;
        if (got % row_len == 0)
            put_row(dst, row, ch, w, px + (got / row_len - 1) * w * dst->channels);
    }
    if (got < need)
        return decode_fail(dst, -EBADMSG, WHAT, "truncated: %zu of %zu samples", got, need);
    return 0;
}

/* P4, P5, P6. */
static int decode_binary(const struct decode_dst *dst, const uint8_t *s, size_t n,
                         size_t w, size_t h, uint32_t ch, uint32_t maxval, uint32_t out,
                         int bitmap, uint8_t *px, uint8_t *row)
{
    size_t in_bytes = bitmap ? 0 : maxval < 256 ? 1 : 2;
    size_t stride = bitmap ? (w + 7) / 8 : w * ch * in_bytes;
    if (n / stride < h)
        return decode_fail(dst, -EBADMSG, WHAT, "truncated: %zu bytes of pixels, %zu needed",
                           n, stride * h);
    uint8_t *lut = NULL;
    if (!bitmap && maxval != 255) {
        /* Every possible sample value, rescaled (and clipped: 16-bit PGMs
         * are PIL's mode I, which convert clips to 0..255). */
        size_t nv = in_bytes == 1 ? 256 : 65536;
        lut = malloc(nv);
        if (lut == NULL)
            return decode_fail(dst, -ENOMEM, WHAT, "no room for a table");
        for (size_t v = 0; v < nv; v++) {
            uint32_t r = maxval == 65535 && out == 65535 ? (uint32_t)v
                                                         : rescale((uint32_t)v, maxval, out);
            lut[v] = r > 255 ? 255 : (uint8_t)r;
        }
    }
    for (size_t y = 0; y < h; y++) {
        const uint8_t *src = s + y * stride;
        uint8_t *o = px + y * w * dst->channels;
        if (bitmap) {
            decode_unpack_bits(src, 1, w, 255, row);
            for (size_t x = 0; x < w; x++)
                row[x] = (uint8_t)(255 - row[x]); /* 1 is black */
            put_row(dst, row, 1, w, o);
        } else if (lut == NULL) {
            put_row(dst, src, ch, w, o);
        } else {
            for (size_t i = 0; i < w * ch; i++)
                row[i] = lut[in_bytes == 1 ? src[i] : (size_t)src[2 * i] << 8 | src[2 * i + 1]];
            put_row(dst, row, ch, w, o);
        }
    }
    free(lut);
    return 0;
}

int decode_pnm(const uint8_t *buf, size_t len, const struct decode_dst *dst)
{
    struct pnm p = {.buf = buf, .len = len};
    char magic[7];
    size_t m = 0;
    while (m < 6 && p.pos < len && !is_space(buf[p.pos]))
        magic[m++] = (char)buf[p.pos++];
    if (m < 6 && p.pos < len)
        p.pos++; /* the whitespace byte that ended it */
    magic[m] = '\0';
    if (m != 2 || magic[0] != 'P' || magic[1] < '1' || magic[1] > '6')
        return decode_fail(dst, -EBADMSG, WHAT, "unsupported kind '%s'", magic);
    int kind = magic[1] - '0';
    int plain = kind <= 3, bitmap = kind == 1 || kind == 4;
    uint32_t ch = kind == 3 || kind == 6 ? 3 : 1;

    long long w, h, maxval = 1;
    int rc = header_int(&p, dst, "width", &w);
    if (rc == 0)
        rc = header_int(&p, dst, "height", &h);
    if (rc == 0 && !bitmap)
        rc = header_int(&p, dst, "maxval", &maxval);
    if (rc < 0)
        return rc;
    if (maxval < 1 || maxval > 65535)
        return decode_fail(dst, -EBADMSG, WHAT, "maxval %lld is not in 1..65535", maxval);
    if (w <= 0 || h <= 0)
        return decode_fail(dst, -EBADMSG, WHAT, "image of %lldx%lld pixels", w, h);
    /* PGMs with maxval over 255 are PIL's mode I (0..65535). */
    uint32_t out = ch == 1 && maxval > 255 ? 65535 : 255;

    uint8_t *px;
    rc = decode_begin(dst, WHAT, (uint64_t)w, (uint64_t)h, &px);
    if (rc < 0)
        return rc;
    uint8_t *row = malloc((size_t)w * 3);
    if (row == NULL)
        return decode_fail(dst, -ENOMEM, WHAT, "no room for a row");
    const uint8_t *data = buf + p.pos;
    size_t n = len - p.pos;
    if (!plain) {
        rc = decode_binary(dst, data, n, (size_t)w, (size_t)h, ch, (uint32_t)maxval, out,
                           bitmap, px, row);
    } else {
        size_t sn;
        uint8_t *s = strip_comments(data, n, &sn);
        if (s == NULL) {
            rc = decode_fail(dst, -ENOMEM, WHAT, "no room for the data");
        } else {
            rc = bitmap ? decode_plain_bits(dst, s, sn, (size_t)w, (size_t)h, px, row)
                        : decode_plain(dst, s, sn, (size_t)w, (size_t)h, ch,
                                       (uint32_t)maxval, out, px, row);
            free(s);
        }
    }
    free(row);
    return rc;
}
