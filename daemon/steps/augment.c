/*
 * AutoAugment (ImageNet policy), RandAugment and TrivialAugmentWide: the
 * decision draws and torchvision's _apply_op (see augment.h).
 */
#include "exact.h"

#include <math.h>
#include <string.h>

#include "augment.h"
#include "blur.h"
#include "color.h"
#include "draw.h"

static const char *const op_names[AUG_OP_MAX] = {
    [AUG_IDENTITY] = "Identity",
    [AUG_SHEAR_X] = "ShearX",
    [AUG_SHEAR_Y] = "ShearY",
    [AUG_TRANSLATE_X] = "TranslateX",
    [AUG_TRANSLATE_Y] = "TranslateY",
    [AUG_ROTATE] = "Rotate",
    [AUG_BRIGHTNESS] = "Brightness",
    [AUG_COLOR] = "Color",
    [AUG_CONTRAST] = "Contrast",
    [AUG_SHARPNESS] = "Sharpness",
    [AUG_POSTERIZE] = "Posterize",
    [AUG_SOLARIZE] = "Solarize",
    [AUG_AUTOCONTRAST] = "AutoContrast",
    [AUG_EQUALIZE] = "Equalize",
    [AUG_INVERT] = "Invert",
};

const char *aug_op_name(enum aug_op op)
{
    return (unsigned)op < AUG_OP_MAX ? op_names[op] : "unknown";
}

int aug_op_signed(enum aug_op op)
{
    return op >= AUG_SHEAR_X && op <= AUG_SHARPNESS;
}

int aug_op_has_magnitudes(enum aug_op op)
{
    return op >= AUG_SHEAR_X && op <= AUG_SOLARIZE;
}

/* AutoAugmentPolicy.IMAGENET: (op, probability, magnitude bin or -1). */
static const struct aug_sub {
    enum aug_op op;
    double p;
    int bin;
} imagenet[25][2] = {
    {{AUG_POSTERIZE, 0.4, 8}, {AUG_ROTATE, 0.6, 9}},
    {{AUG_SOLARIZE, 0.6, 5}, {AUG_AUTOCONTRAST, 0.6, -1}},
    {{AUG_EQUALIZE, 0.8, -1}, {AUG_EQUALIZE, 0.6, -1}},
    {{AUG_POSTERIZE, 0.6, 7}, {AUG_POSTERIZE, 0.6, 6}},
    {{AUG_EQUALIZE, 0.4, -1}, {AUG_SOLARIZE, 0.2, 4}},
    {{AUG_EQUALIZE, 0.4, -1}, {AUG_ROTATE, 0.8, 8}},
    {{AUG_SOLARIZE, 0.6, 3}, {AUG_EQUALIZE, 0.6, -1}},
    {{AUG_POSTERIZE, 0.8, 5}, {AUG_EQUALIZE, 1.0, -1}},
    {{AUG_ROTATE, 0.2, 3}, {AUG_SOLARIZE, 0.6, 8}},
    {{AUG_EQUALIZE, 0.6, -1}, {AUG_POSTERIZE, 0.4, 6}},
    {{AUG_ROTATE, 0.8, 8}, {AUG_COLOR, 0.4, 0}},
    {{AUG_ROTATE, 0.4, 9}, {AUG_EQUALIZE, 0.6, -1}},
    {{AUG_EQUALIZE, 0.0, -1}, {AUG_EQUALIZE, 0.8, -1}},
    {{AUG_INVERT, 0.6, -1}, {AUG_EQUALIZE, 1.0, -1}},
    {{AUG_COLOR, 0.6, 4}, {AUG_CONTRAST, 1.0, 8}},
    {{AUG_ROTATE, 0.8, 8}, {AUG_COLOR, 1.0, 2}},
    {{AUG_COLOR, 0.8, 8}, {AUG_SOLARIZE, 0.8, 7}},
    {{AUG_SHARPNESS, 0.4, 7}, {AUG_INVERT, 0.6, -1}},
    {{AUG_SHEAR_X, 0.6, 5}, {AUG_EQUALIZE, 1.0, -1}},
    {{AUG_COLOR, 0.4, 0}, {AUG_EQUALIZE, 0.6, -1}},
    {{AUG_EQUALIZE, 0.4, -1}, {AUG_SOLARIZE, 0.2, 4}},
    {{AUG_SOLARIZE, 0.6, 5}, {AUG_AUTOCONTRAST, 0.6, -1}},
    {{AUG_INVERT, 0.6, -1}, {AUG_EQUALIZE, 1.0, -1}},
    {{AUG_COLOR, 0.6, 4}, {AUG_CONTRAST, 1.0, 8}},
    {{AUG_EQUALIZE, 0.8, -1}, {AUG_EQUALIZE, 0.6, -1}},
};
#define IMAGENET_BINS 10

double aug_magnitude(enum aug_policy policy, enum aug_op op, uint32_t bins, uint32_t bin,
                     uint32_t h, uint32_t w)
{
    int wide = policy == AUG_TRIVIAL_WIDE;
    double top;
    switch (op) {
    case AUG_SHEAR_X:
    case AUG_SHEAR_Y:
        top = wide ? 0.99 : 0.3;
        break;
    case AUG_TRANSLATE_X:
        top = wide ? 32.0 : 150.0 / 331.0 * w;
        break;
    case AUG_TRANSLATE_Y:
        top = wide ? 32.0 : 150.0 / 331.0 * h;
        break;
    case AUG_ROTATE:
        top = wide ? 135.0 : 30.0;
        break;
    case AUG_BRIGHTNESS:
    case AUG_COLOR:
    case AUG_CONTRAST:
    case AUG_SHARPNESS:
        top = wide ? 0.99 : 0.9;
        break;
    case AUG_POSTERIZE: {
        /* 8 - (arange(bins) / ((bins - 1) / 4 or 6)).round(), in float32 */
        float q = (float)bin / (float)((bins - 1) / (wide ? 6.0 : 4.0));
        return 8.0 - (double)nearbyintf(q);
    }
    case AUG_SOLARIZE:
        return blur_linspace(255.0, 0.0, bins, bin);
    default:
        return 0.0;
    }
    return blur_linspace(0.0, top, bins, bin);
}

static void push(struct aug_choice *out, uint32_t *n, enum aug_op op, double magnitude)
{
    out[*n].op = op;
    out[*n].magnitude = magnitude;
    (*n)++;
}

uint32_t aug_draw(const struct aug_params *p, uint64_t *st, uint32_t h, uint32_t w,
                  struct aug_choice *out)
{
    uint32_t n = 0;
    switch (p->policy) {
    case AUG_AUTO_IMAGENET: {
        /* get_params: the sub-policy, two probabilities, two signs. */
        const struct aug_sub *sub = imagenet[draw_below(st, 25)];
        double probs[2] = {draw_uniform(st, 0.0, 1.0), draw_uniform(st, 0.0, 1.0)};
        int signs[2] = {(int)draw_below(st, 2), (int)draw_below(st, 2)};
        for (int i = 0; i < 2; i++) {
            if (!(probs[i] <= sub[i].p))
                continue;
            double m = sub[i].bin < 0 ? 0.0
                                      : aug_magnitude(AUG_AUTO_IMAGENET, sub[i].op,
                                                      IMAGENET_BINS, (uint32_t)sub[i].bin,
                                                      h, w);
            if (aug_op_signed(sub[i].op) && signs[i] == 0)
                m = -m;
            push(out, &n, sub[i].op, m);
        }
        return n;
    }
    case AUG_RAND:
        for (uint32_t k = 0; k < p->num_ops && k < AUG_OPS_MAX; k++) {
            enum aug_op op = (enum aug_op)draw_below(st, AUG_SPACE_OPS);
            double m = aug_op_has_magnitudes(op)
                           ? aug_magnitude(AUG_RAND, op, p->bins, p->magnitude, h, w)
                           : 0.0;
            if (aug_op_signed(op) && draw_below(st, 2))
                m = -m;
            push(out, &n, op, m);
        }
        return n;
    case AUG_TRIVIAL_WIDE: {
        enum aug_op op = (enum aug_op)draw_below(st, AUG_SPACE_OPS);
        double m = aug_op_has_magnitudes(op)
                       ? aug_magnitude(AUG_TRIVIAL_WIDE, op, p->bins,
                                       draw_below(st, p->bins), h, w)
                       : 0.0;
        if (aug_op_signed(op) && draw_below(st, 2))
            m = -m;
        push(out, &n, op, m);
        return n;
    }
    }
    return 0;
}

/* CPython's math.degrees: x * (180 / pi). */
static const double rad2deg = 180.0 / M_PI;

void aug_apply_op(enum aug_op op, double magnitude, enum geom_interp interp,
                  const uint8_t *fill, const uint8_t *src, uint8_t *dst, uint32_t h,
                  uint32_t w, uint32_t c)
{
    static const double origin[2] = {0.0, 0.0};
    size_t px = (size_t)h * w;
    switch (op) {
    case AUG_SHEAR_X:
        geom_affine(src, dst, h, w, c, 0.0, 0, 0, 1.0, atan(magnitude) * rad2deg, 0.0,
                    origin, interp, fill);
        return;
    case AUG_SHEAR_Y:
        geom_affine(src, dst, h, w, c, 0.0, 0, 0, 1.0, 0.0, atan(magnitude) * rad2deg,
                    origin, interp, fill);
        return;
    case AUG_TRANSLATE_X: /* int(magnitude): toward zero */
        geom_affine(src, dst, h, w, c, 0.0, (int32_t)magnitude, 0, 1.0, 0.0, 0.0, NULL,
                    interp, fill);
        return;
    case AUG_TRANSLATE_Y:
        geom_affine(src, dst, h, w, c, 0.0, 0, (int32_t)magnitude, 1.0, 0.0, 0.0, NULL,
                    interp, fill);
        return;
    case AUG_ROTATE:
        geom_rotate(src, dst, h, w, c, magnitude, interp, fill);
        return;
    case AUG_BRIGHTNESS:
        color_brightness(src, dst, px, c, 1.0 + magnitude);
        return;
    case AUG_COLOR:
        color_saturation(src, dst, px, c, 1.0 + magnitude);
        return;
    case AUG_CONTRAST:
        color_contrast(src, dst, px, c, 1.0 + magnitude);
        return;
    case AUG_SHARPNESS:
        color_sharpness(src, dst, h, w, c, 1.0 + magnitude);
        return;
    case AUG_POSTERIZE:
        color_posterize(src, dst, px, c, (uint32_t)magnitude);
        return;
    case AUG_SOLARIZE:
        color_solarize(src, dst, px, c, magnitude);
        return;
    case AUG_AUTOCONTRAST:
        color_autocontrast(src, dst, px, c);
        return;
    case AUG_EQUALIZE:
        color_equalize(src, dst, px, c);
        return;
    case AUG_INVERT:
        color_invert(src, dst, px, c);
        return;
    default:
        memcpy(dst, src, px * c);
        return;
    }
}
