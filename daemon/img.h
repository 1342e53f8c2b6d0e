/*
 * The image type every layer passes around: a sample's bytes as read from
 * its source (IMG_ENCODED: a JPEG file's bytes, len of them) or its pixels
 * (IMG_PIXELS: h x w x c of dtype PROTO_DTYPE_*, row-major HWC unless the
 * step that made them says otherwise). The steps make and read them, the
 * tiers store them, the pipeline writes the last one into a batch.
 */
#ifndef PRESTO_IMG_H
#define PRESTO_IMG_H

#include <stddef.h>
#include <stdint.h>

enum img_fmt { IMG_ENCODED = 0, IMG_PIXELS = 1 };

struct img {
    enum img_fmt fmt;
    uint32_t h, w, c;  /* IMG_PIXELS only; logical sizes whatever the layout */
    uint32_t dtype;    /* PROTO_DTYPE_*; IMG_PIXELS only */
    uint32_t rate;     /* audio: samples per second of the waveform (or of the one a
                        * spectrogram was made from); 0 for images */
    uint8_t *data;
    size_t len;        /* bytes of data in use */
    size_t cap;        /* bytes allocated (owned buffers only) */
    int borrowed;      /* data is someone else's, cap bytes long: never grown */
    /* Set by decode with dct_scale only: the pixels are the src_h x src_w
     * original scaled by scale_num / scale_den (src_h 0: not scaled). The
     * resize after it reads this; every step's output clears it. */
    uint32_t src_h, src_w, scale_num, scale_den;
};

/* Makes sure img->data can hold len bytes (reallocating an owned buffer);
 * returns 0, -ENOMEM, or -ENOSPC when a borrowed buffer is too small. */
int img_reserve(struct img *im, size_t len);
void img_free(struct img *im);

#endif
