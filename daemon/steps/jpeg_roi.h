/*
 * Region-of-interest JPEG decoding for a random crop that follows decode
 * online: only the part of the image a crop box needs is decoded, with
 * libjpeg-turbo's jpeg_crop_scanline (whole iMCU columns) and
 * jpeg_skip_scanlines (whole iMCU rows, entropy-decoded but not
 * transformed), and decoding stops after the box's last row.
 *
 * The pixels equal a full decode's (TurboJPEG, flags 0: the accurate
 * integer IDCT and fancy upsampling, what PIL decodes with) cut to the box:
 * fancy upsampling reads the chroma next to each pixel, and libjpeg treats
 * the edges of a cropped region as the image's, so the decoded region keeps
 * a margin of one iMCU (8 or 16 pixels at full scale) on every side where
 * the image continues: whole iMCU rows are skipped up to the one above the
 * box's, whose rows are decoded and dropped. Without the margin about one
 * box in ten differs (tests/unit/test_augment.c checks bit-identity over
 * random boxes, sizes, subsamplings, grey and colour, baseline and
 * progressive, and scales).
 *
 * Output: 3 channels RGB, or 1 channel (PIL's convert('L'): a grey JPEG's
 * samples, a colour one's RGB weighted as Pillow does). CMYK and YCCK JPEGs
 * are not handled here (-ENOTSUP: decode them whole). Damage after the
 * box's last row goes unnoticed, since it is never read.
 *
 * A decoder holds a libjpeg decompressor and a row buffer: one per thread.
 * Functions return 0 or -errno: -EBADMSG for a corrupt or non-JPEG input
 * (a message in err), -E2BIG over max_pixels, -EINVAL for a box outside
 * the (scaled) image or a bad scale, -ENOTSUP, -ENOMEM.
 */
#ifndef PRESTO_STEPS_JPEG_ROI_H
#define PRESTO_STEPS_JPEG_ROI_H

#include <stddef.h>
#include <stdint.h>

struct roi_decoder;

int roi_decoder_new(struct roi_decoder **out);
void roi_decoder_free(struct roi_decoder *d);

struct roi_header {
    uint32_t h, w;       /* full size */
    uint32_t components; /* 1 grey, 3 colour, 4 CMYK/YCCK */
    int cmyk;            /* CMYK or YCCK (not decodable here) */
};

/* Reads the JPEG's header. */
int roi_read_header(struct roi_decoder *d, const uint8_t *data, size_t len,
                    struct roi_header *hdr, char *err, size_t errlen);

/* A box of the image decoded at scale num/den (libjpeg's scaled IDCT; 1/1
 * for the full size): top, left, h, w in the scaled image's pixels. */
struct roi_box {
    uint32_t top, left, h, w;
};

/* The scaled size libjpeg gives an h x w image at num/den (ceil(h * num /
 * den) x ceil(w * num / den)). */
void roi_scaled_size(uint32_t h, uint32_t w, uint32_t num, uint32_t den, uint32_t *sh,
                     uint32_t *sw);

/* Decodes box into out (box->h rows of box->w * channels bytes, stride
 * bytes apart). channels: 1 or 3. max_pixels: refuse larger images (0: no
 * limit). */
int roi_decode(struct roi_decoder *d, const uint8_t *data, size_t len, uint32_t channels,
               uint32_t num, uint32_t den, const struct roi_box *box, uint64_t max_pixels,
               uint8_t *out, size_t stride, char *err, size_t errlen);

#endif
