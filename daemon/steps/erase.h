/*
 * random_erasing: torchvision's RandomErasing on the normalized float32
 * tensor (it runs after Normalize). With probability p, up to 10 attempts
 * of
 *     erase_area   = h * w * uniform(scale)
 *     aspect_ratio = exp(uniform(log(ratio[0]), log(ratio[1])))
 *     eh = round(sqrt(erase_area * aspect_ratio))   (half to even)
 *     ew = round(sqrt(erase_area / aspect_ratio))
 *     if eh < h and ew < w: top = randint(0, h - eh), left = randint(0, w - ew)
 * and the box is set to the value (one per channel, or one for all), or
 * with value random to standard normal draws per element; when no attempt
 * fits, nothing is erased (torchvision "erases" the image with itself).
 */
#ifndef PRESTO_STEPS_ERASE_H
#define PRESTO_STEPS_ERASE_H

#include <stdint.h>

struct erase_box {
    uint32_t top, left, h, w; /* h == 0: nothing erased */
};

struct erase_params {
    double p;
    double scale[2];   /* (0.02, 0.33) */
    double ratio[2];   /* (0.3, 3.3) */
    int random;        /* value random: normal draws */
    uint32_t nvalue;   /* 1 value for every channel, or one each */
    float value[4];
};

/* Draws the box for an h x w image (h == 0 when nothing is erased). */
void erase_draw(const struct erase_params *p, uint64_t *st, uint32_t h, uint32_t w,
                struct erase_box *box);

/* Erases box in an h x w x c float32 image, channels last (nchw 0) or
 * first (nchw 1). With p->random, the normal draws come from st, channel by
 * channel, row by row, as torchvision fills its [c, eh, ew] tensor. */
void erase_apply(const struct erase_params *p, const struct erase_box *box, uint64_t *st,
                 float *x, uint32_t h, uint32_t w, uint32_t c, int nchw);

#endif
