/*
 * Colour operations on HWC uint8 images of 1 (Pillow's mode L) or 3 (RGB)
 * channels, each equal to what torchvision.transforms.functional computes on
 * a PIL image, which is Pillow's integer and single-precision C code: these
 * repeat its arithmetic step for step, so the bytes are identical.
 *
 *   color_brightness   F.adjust_brightness  ImageEnhance.Brightness: blend with black
 *   color_contrast     F.adjust_contrast    ImageEnhance.Contrast: blend with the
 *                                           mean grey, int(mean of L + 0.5)
 *   color_saturation   F.adjust_saturation  ImageEnhance.Color: blend with convert('L')
 *   color_sharpness    F.adjust_sharpness   ImageEnhance.Sharpness: blend with
 *                                           ImageFilter.SMOOTH (3x3, 1 1 1 / 1 5 1 /
 *                                           1 1 1, border pixels kept)
 *   color_hue          F.adjust_hue         convert('HSV'), H + uint8(hue * 255)
 *                                           mod 256, convert('RGB'); L unchanged
 *   color_grayscale    F.rgb_to_grayscale   convert('L'), repeated on every channel
 *   color_posterize    F.posterize          ImageOps.posterize: keep the top bits
 *   color_solarize     F.solarize           ImageOps.solarize: invert v >= threshold
 *   color_invert       F.invert             ImageOps.invert
 *   color_autocontrast F.autocontrast       ImageOps.autocontrast (no cutoff): each
 *                                           channel's range stretched to 0..255
 *   color_equalize     F.equalize           ImageOps.equalize, per channel
 *
 * The four enhancers are Image.blend(degenerate, image, factor): factor is
 * taken as a C float, 0 and 1 copy, values in between interpolate and
 * truncate, others extrapolate and clip, in single precision as Pillow.
 *
 * src and dst hold h * w * c bytes; they may be the same buffer except for
 * color_sharpness, which reads neighbours. Nothing allocates or fails.
 */
#ifndef PRESTO_STEPS_COLOR_H
#define PRESTO_STEPS_COLOR_H

#include <stddef.h>
#include <stdint.h>

void color_brightness(const uint8_t *src, uint8_t *dst, size_t pixels, uint32_t c,
                      double factor);
void color_contrast(const uint8_t *src, uint8_t *dst, size_t pixels, uint32_t c,
                    double factor);
void color_saturation(const uint8_t *src, uint8_t *dst, size_t pixels, uint32_t c,
                      double factor);
void color_sharpness(const uint8_t *src, uint8_t *dst, uint32_t h, uint32_t w, uint32_t c,
                     double factor);
/* hue in [-0.5, 0.5] (the caller checks). */
void color_hue(const uint8_t *src, uint8_t *dst, size_t pixels, uint32_t c, double hue);
void color_grayscale(const uint8_t *src, uint8_t *dst, size_t pixels, uint32_t c);
/* bits in 0..8 */
void color_posterize(const uint8_t *src, uint8_t *dst, size_t pixels, uint32_t c,
                     uint32_t bits);
void color_solarize(const uint8_t *src, uint8_t *dst, size_t pixels, uint32_t c,
                    double threshold);
void color_invert(const uint8_t *src, uint8_t *dst, size_t pixels, uint32_t c);
void color_autocontrast(const uint8_t *src, uint8_t *dst, size_t pixels, uint32_t c);
void color_equalize(const uint8_t *src, uint8_t *dst, size_t pixels, uint32_t c);

/* ColorJitter(brightness, contrast, saturation, hue): each factor range
 * [lo, hi] (on 0: left out, as torchvision leaves out 0 and (1, 1)). The
 * decision is torchvision's get_params: an order of the four adjustments
 * (torch.randperm(4)), then a factor uniform in each range that is on. */
enum color_jitter_fn { JITTER_BRIGHTNESS, JITTER_CONTRAST, JITTER_SATURATION, JITTER_HUE };

struct color_jitter_params {
    int on[4];           /* by enum color_jitter_fn */
    double range[4][2];
};

struct color_jitter {
    uint32_t order[4];   /* enum color_jitter_fn, in the order they apply */
    double factor[4];    /* by enum color_jitter_fn (unset when off) */
    int on[4];
};

void color_jitter_draw(const struct color_jitter_params *p, uint64_t *st,
                       struct color_jitter *j);
/* Applies j to src into dst (may be the same buffer). */
void color_jitter_apply(const struct color_jitter *j, const uint8_t *src, uint8_t *dst,
                        size_t pixels, uint32_t c);

/* Pillow's RGB -> L: (19595 R + 38470 G + 7471 B + 2^15) >> 16. */
static inline uint8_t color_luma(const uint8_t *rgb)
{
    return (uint8_t)((rgb[0] * 19595 + rgb[1] * 38470 + rgb[2] * 7471 + 0x8000) >> 16);
}

#endif
