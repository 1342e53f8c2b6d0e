/*
 * The automatic augmentation policies of torchvision 0.14
 * (transforms/autoaugment.py): AutoAugment with the ImageNet policy,
 * RandAugment and TrivialAugmentWide, on HWC uint8 images of 1 or 3
 * channels.
 *
 * A policy draws its decision (which ops, which magnitudes, which signs)
 * from a splitmix64 state with aug_draw(); aug_apply_op() applies one op
 * with a given magnitude exactly as torchvision's _apply_op does on a PIL
 * image (through color.h and geometry.h: the same bytes). The magnitude
 * tables are torch's: float32 linspace values (blur_linspace), posterize
 * bits 8 - round(bin / ((bins - 1) / 4 or 6)), solarize thresholds from 255
 * down to 0; a negative sign applies to the signed ops.
 *
 * How each policy draws (torchvision's forward):
 *   auto_augment     one of the 25 ImageNet sub-policies uniformly; each of
 *                    its two (op, probability, magnitude bin) pairs applies
 *                    when a uniform draw is <= the probability; each signed
 *                    magnitude is negated with probability 1/2. 10 bins.
 *   rand_augment     num_ops times: one of the 14 ops uniformly, at the
 *                    configured magnitude bin, negated with probability 1/2.
 *   trivial_augment  one of the 14 ops uniformly, a bin uniformly in
 *   _wide            0..bins-1 (for ops that have magnitudes), negated with
 *                    probability 1/2.
 */
#ifndef PRESTO_STEPS_AUGMENT_H
#define PRESTO_STEPS_AUGMENT_H

#include <stdint.h>

#include "geometry.h"

/* The ops, in the order of RandAugment's and TrivialAugmentWide's
 * augmentation space (the first AUG_SPACE_OPS); Invert only appears in
 * AutoAugment's policies. */
enum aug_op {
    AUG_IDENTITY,
    AUG_SHEAR_X,
    AUG_SHEAR_Y,
    AUG_TRANSLATE_X,
    AUG_TRANSLATE_Y,
    AUG_ROTATE,
    AUG_BRIGHTNESS,
    AUG_COLOR,
    AUG_CONTRAST,
    AUG_SHARPNESS,
    AUG_POSTERIZE,
    AUG_SOLARIZE,
    AUG_AUTOCONTRAST,
    AUG_EQUALIZE,
    AUG_INVERT,
    AUG_OP_MAX
};
#define AUG_SPACE_OPS 14

enum aug_policy { AUG_AUTO_IMAGENET, AUG_RAND, AUG_TRIVIAL_WIDE };

#define AUG_OPS_MAX 16   /* most ops one decision applies (rand_augment num_ops) */
#define AUG_BINS_MAX 1024

/* torchvision's name of an op ("ShearX", ...). */
const char *aug_op_name(enum aug_op op);
/* Whether the op's magnitude is negated on a sign draw. */
int aug_op_signed(enum aug_op op);
/* Whether the op has a magnitude table (torchvision's magnitudes.ndim > 0). */
int aug_op_has_magnitudes(enum aug_op op);

/* The magnitude of bin for op in policy's space of bins bins (10 for
 * AUG_AUTO_IMAGENET), for an h x w image (translations scale with it),
 * unsigned: float(magnitudes[bin]) of torchvision's _augmentation_space. */
double aug_magnitude(enum aug_policy policy, enum aug_op op, uint32_t bins, uint32_t bin,
                     uint32_t h, uint32_t w);

/* One op of a decision, with its signed magnitude. */
struct aug_choice {
    enum aug_op op;
    double magnitude;
};

/* A policy and its parameters. */
struct aug_params {
    enum aug_policy policy;
    uint32_t num_ops;    /* rand_augment: ops applied (1..AUG_OPS_MAX) */
    uint32_t magnitude;  /* rand_augment: the bin (< bins) */
    uint32_t bins;       /* rand_augment, trivial_augment_wide: 2..AUG_BINS_MAX */
    enum geom_interp interp;
    uint8_t fill[3];     /* one value per channel */
};

/* Draws a decision for an h x w image: the ops to apply, in order (at most
 * AUG_OPS_MAX); returns their count. */
uint32_t aug_draw(const struct aug_params *p, uint64_t *st, uint32_t h, uint32_t w,
                  struct aug_choice *out);

/* torchvision's _apply_op(img, op, magnitude, interpolation, fill) on an
 * h x w x c image (c 1 or 3) from src into dst (separate buffers). */
void aug_apply_op(enum aug_op op, double magnitude, enum geom_interp interp,
                  const uint8_t *fill, const uint8_t *src, uint8_t *dst, uint32_t h,
                  uint32_t w, uint32_t c);

#endif
