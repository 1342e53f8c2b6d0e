/*
 * Region-of-interest JPEG decoding with libjpeg-turbo (see jpeg_roi.h).
 *
 * libjpeg reports errors through error_exit, which must not return: it
 * longjmps back to the function that started the work, which aborts the
 * decompression (the object stays reusable) and returns -EBADMSG. Corrupt-
 * data warnings (emit_message level -1: a damaged entropy stream that
 * libjpeg would fill with grey) are errors too, as for the whole-image
 * decode step.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "color.h"
#include "jpeg_roi.h"

/* Rows read per call: a call for fewer rows than the upsampler makes at
 * once has libjpeg upsample into a spare row and copy it out. */
#define ROI_ROWS 16

struct roi_error {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
};

struct roi_decoder {
    struct jpeg_decompress_struct cinfo;
    struct roi_error jerr;
    uint8_t *rows;    /* ROI_ROWS decoded rows of the cropped width */
    size_t rows_cap;
};

static void roi_error_exit(j_common_ptr c)
{
    struct roi_error *e = (struct roi_error *)c->err;
    (*c->err->format_message)(c, e->msg);
    longjmp(e->jump, 1);
}

static void roi_emit_message(j_common_ptr c, int level)
{
    if (level < 0) /* a warning: corrupt data */
        roi_error_exit(c);
}

int roi_decoder_new(struct roi_decoder **out)
{
    struct roi_decoder *d = calloc(1, sizeof(*d));
    if (d == NULL)
        return -ENOMEM;
    d->cinfo.err = jpeg_std_error(&d->jerr.pub);
    d->jerr.pub.error_exit = roi_error_exit;
    d->jerr.pub.emit_message = roi_emit_message;
    if (setjmp(d->jerr.jump)) { /* jpeg_create_decompress only fails for memory */
        free(d);
        return -ENOMEM;
    }
    jpeg_create_decompress(&d->cinfo);
    *out = d;
    return 0;
}

void roi_decoder_free(struct roi_decoder *d)
{
    if (d == NULL)
        return;
    jpeg_destroy_decompress(&d->cinfo);
    free(d->rows);
    free(d);
}

static int roi_fail(char *err, size_t errlen, int rc, const char *what, const char *msg)
{
    if (err && errlen)
        snprintf(err, errlen, "decode: %s%s%s", what, msg ? ": " : "", msg ? msg : "");
    return rc;
}

void roi_scaled_size(uint32_t h, uint32_t w, uint32_t num, uint32_t den, uint32_t *sh,
                     uint32_t *sw)
{
    *sh = (uint32_t)(((uint64_t)h * num + den - 1) / den);
    *sw = (uint32_t)(((uint64_t)w * num + den - 1) / den);
}

/* Starts reading data: the header. Called under the caller's setjmp. */
static void roi_start(struct roi_decoder *d, const uint8_t *data, size_t len)
{
    jpeg_mem_src(&d->cinfo, data, (unsigned long)len);
    jpeg_read_header(&d->cinfo, TRUE);
}

int roi_read_header(struct roi_decoder *d, const uint8_t *data, size_t len,
                    struct roi_header *hdr, char *err, size_t errlen)
{
    struct jpeg_decompress_struct *ci = &d->cinfo;
    if (data == NULL || len == 0)
        return roi_fail(err, errlen, -EBADMSG, "empty file", NULL);
    if (setjmp(d->jerr.jump)) {
        jpeg_abort_decompress(ci);
        return roi_fail(err, errlen, -EBADMSG, "not a JPEG or a corrupt header", d->jerr.msg);
    }
    roi_start(d, data, len);
    hdr->h = ci->image_height;
    hdr->w = ci->image_width;
    hdr->components = (uint32_t)ci->num_components;
    hdr->cmyk = ci->jpeg_color_space == JCS_CMYK || ci->jpeg_color_space == JCS_YCCK;
    jpeg_abort_decompress(ci);
    return 0;
}

/* Copies the box's part of n decoded rows starting at image row first. */
static void roi_copy(const struct roi_box *box, const uint8_t *rows, size_t pitch,
                     size_t off, size_t comps, uint32_t first, uint32_t n,
                     uint32_t channels, uint8_t *out, size_t stride)
{
    for (uint32_t r = 0; r < n; r++) {
        uint32_t y = first + r;
        if (y < box->top)
            continue;
        uint8_t *o = out + (size_t)(y - box->top) * stride;
        const uint8_t *in = rows + (size_t)r * pitch + off;
        if (comps == channels) {
            memcpy(o, in, (size_t)box->w * channels);
        } else { /* RGB to Pillow's L */
            for (uint32_t x = 0; x < box->w; x++)
                o[x] = color_luma(in + (size_t)x * 3);
        }
    }
}

int roi_decode(struct roi_decoder *d, const uint8_t *data, size_t len, uint32_t channels,
               uint32_t num, uint32_t den, const struct roi_box *box, uint64_t max_pixels,
               uint8_t *out, size_t stride, char *err, size_t errlen)
{
    struct jpeg_decompress_struct *ci = &d->cinfo;
    if (data == NULL || len == 0)
        return roi_fail(err, errlen, -EBADMSG, "empty file", NULL);
    if ((channels != 1 && channels != 3) || num == 0 || den == 0 || num > 16 * den)
        return roi_fail(err, errlen, -EINVAL, "bad channels or scale", NULL);
    if (setjmp(d->jerr.jump)) {
        jpeg_abort_decompress(ci);
        return roi_fail(err, errlen, -EBADMSG, "corrupt JPEG", d->jerr.msg);
    }
    roi_start(d, data, len);
    if (ci->image_width == 0 || ci->image_height == 0) {
        jpeg_abort_decompress(ci);
        return roi_fail(err, errlen, -EBADMSG, "truncated JPEG header (no image frame)", NULL);
    }
    if (max_pixels && (uint64_t)ci->image_width * ci->image_height > max_pixels) {
        jpeg_abort_decompress(ci);
        return roi_fail(err, errlen, -E2BIG, "image over the pixel limit", NULL);
    }
    if (ci->jpeg_color_space == JCS_CMYK || ci->jpeg_color_space == JCS_YCCK) {
        jpeg_abort_decompress(ci);
        return roi_fail(err, errlen, -ENOTSUP, "CMYK JPEG", NULL);
    }
    int grey_src = ci->jpeg_color_space == JCS_GRAYSCALE;
    ci->out_color_space = channels == 1 && grey_src ? JCS_GRAYSCALE : JCS_RGB;
    ci->dct_method = JDCT_ISLOW;
    ci->do_fancy_upsampling = TRUE;
    ci->scale_num = num;
    ci->scale_denom = den;
    jpeg_calc_output_dimensions(ci);
    uint32_t ow = ci->output_width, oh = ci->output_height;
    if (box->h == 0 || box->w == 0 || box->top > oh || box->h > oh - box->top ||
        box->left > ow || box->w > ow - box->left) {
        jpeg_abort_decompress(ci);
        return roi_fail(err, errlen, -EINVAL, "crop box outside the image", NULL);
    }
    jpeg_start_decompress(ci);

    /* The iMCU in output pixels: jpeg_crop_scanline's alignment. */
    uint32_t unit = (uint32_t)ci->min_DCT_scaled_size;
    uint32_t imcu_w = unit, imcu_h = unit;
    if (ci->comps_in_scan != 1 || ci->num_components != 1) {
        imcu_w = unit * (uint32_t)ci->max_h_samp_factor;
        imcu_h = unit * (uint32_t)ci->max_v_samp_factor;
    }

    /* Columns: a margin of one iMCU each side, then libjpeg aligns. */
    JDIMENSION x0 = box->left > imcu_w ? box->left - imcu_w : 0;
    uint32_t x1 = box->left + box->w + imcu_w;
    JDIMENSION cw = (x1 < ow ? x1 : ow) - x0;
    if (x0 > 0 || cw < ow)
        jpeg_crop_scanline(ci, &x0, &cw);

    /* Rows: skip whole iMCU rows up to one iMCU above the box. */
    uint32_t y0 = box->top > imcu_h ? (box->top - imcu_h) / imcu_h * imcu_h : 0;
    if (y0 > 0)
        jpeg_skip_scanlines(ci, y0);

    size_t comps = (size_t)ci->output_components;
    size_t pitch = (size_t)cw * comps;
    if (pitch * ROI_ROWS > d->rows_cap) {
        uint8_t *p = realloc(d->rows, pitch * ROI_ROWS);
        if (p == NULL) {
            jpeg_abort_decompress(ci);
            return roi_fail(err, errlen, -ENOMEM, "no memory for rows", NULL);
        }
        d->rows = p;
        d->rows_cap = pitch * ROI_ROWS;
    }
    JSAMPROW rowp[ROI_ROWS];
    for (int i = 0; i < ROI_ROWS; i++)
        rowp[i] = d->rows + (size_t)i * pitch;
    size_t off = (size_t)(box->left - x0) * comps;
    uint32_t end = box->top + box->h;
    while (ci->output_scanline < end) {
        uint32_t first = ci->output_scanline;
        uint32_t want = end - first < ROI_ROWS ? end - first : ROI_ROWS;
        uint32_t got = jpeg_read_scanlines(ci, rowp, want);
        if (got == 0) { /* a memory source never suspends: a broken stream */
            jpeg_abort_decompress(ci);
            return roi_fail(err, errlen, -EBADMSG, "corrupt JPEG", "no rows decoded");
        }
        roi_copy(box, d->rows, pitch, off, comps, first, got, channels, out, stride);
    }
    jpeg_abort_decompress(ci);
    return 0;
}
