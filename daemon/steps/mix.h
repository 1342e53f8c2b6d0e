/*
 * mixup and cutmix on a batch, as torchvision's reference training scripts
 * write them (references/classification/transforms.py: RandomMixup,
 * RandomCutmix, chosen by RandomChoice in the collate function; they are
 * not in the installed package). The batch is float32 (after normalize),
 * the labels become soft targets: one-hot float32 rows of num_classes.
 *
 * The decision, one per batch, drawn from a state seeded by the batch:
 *   kind     mixup or cutmix; with both alphas > 0, cutmix with probability
 *            switch_p (RandomChoice: 1/2), else the one whose alpha > 0;
 *            then nothing at all unless a uniform draw is < p
 *   lambda   Beta(alpha, alpha) (torch._sample_dirichlet([alpha, alpha])[0])
 *   cutmix   a centre (r_x, r_y) uniform over the pixels, half sides
 *            int(0.5 sqrt(1 - lambda) * W) and * H, the box clipped to the
 *            image; lambda becomes 1 - box area / image area
 * Sample i is paired with sample i - 1 (batch.roll(1, 0); sample 0 with the
 * last). mixup: x_i * lambda + x_(i-1) * (1 - lambda), each product rounded
 * to float32 and then added, as torch's mul_ and add_; cutmix copies the
 * box from x_(i-1); targets mix like mixup's pixels with the final lambda.
 */
#ifndef PRESTO_STEPS_MIX_H
#define PRESTO_STEPS_MIX_H

#include <stdint.h>

enum mix_kind { MIX_NONE, MIX_MIXUP, MIX_CUTMIX };

struct mix_params {
    double mixup_alpha, cutmix_alpha; /* 0: that one is off */
    double p;                         /* probability of mixing a batch */
    double switch_p;                  /* cutmix's share when both are on */
};

struct mix_decision {
    enum mix_kind kind;
    double lambda;
    uint32_t x1, y1, x2, y2; /* cutmix: the box, [x1, x2) x [y1, y2) */
};

void mix_draw(const struct mix_params *p, uint64_t *st, uint32_t h, uint32_t w,
              struct mix_decision *d);

/* Writes one-hot float32 rows (n x num_classes) of int64 labels; a label
 * outside 0..num_classes-1 gets a row of zeros and makes it return -ERANGE. */
int mix_one_hot(const int64_t *labels, uint32_t n, uint32_t num_classes, float *targets);

/* Applies d to n samples of h x w x c float32 (channels first when nchw)
 * and their n x num_classes targets, in place. scratch holds one sample
 * (h * w * c floats) and one target row. */
void mix_apply(const struct mix_decision *d, float *batch, uint32_t n, uint32_t h,
               uint32_t w, uint32_t c, int nchw, float *targets, uint32_t num_classes,
               float *scratch);

#endif
