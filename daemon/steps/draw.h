/*
 * Decisions of the random steps: the distributions torchvision draws its
 * parameters from, drawn from a splitmix64 state (hash_rand01) that the
 * pipeline seeds from (stream seed, epoch, sample id), or from the batch
 * index for batch steps. Every draw is a function of the state alone, so a
 * decision never depends on the worker, the rank or the cache.
 *
 * torch's generator (mt19937 and its float32 conversions) cannot be
 * reproduced, so these equal torchvision's draws in distribution, which
 * the fidelity suite tests (tests/python/test_augment.py), not draw for
 * draw; the operations themselves take the decision as a parameter and
 * match torchvision given the same one.
 */
#ifndef PRESTO_STEPS_DRAW_H
#define PRESTO_STEPS_DRAW_H

#include <stdint.h>

/* Uniform in [lo, hi) (torch.empty(1).uniform_(lo, hi)). */
double draw_uniform(uint64_t *st, double lo, double hi);
/* Uniform integer in [0, n), n >= 1 (torch.randint(n)). */
uint32_t draw_below(uint64_t *st, uint32_t n);
/* 1 with probability p (torch.rand(1) < p). */
int draw_chance(uint64_t *st, double p);
/* A standard normal (Box-Muller; consumes two uniforms). */
double draw_normal(uint64_t *st);
/* Two standard normals from the same two uniforms. */
void draw_normal2(uint64_t *st, double *a, double *b);
/* Gamma(shape, 1), shape > 0 (Marsaglia and Tsang). */
double draw_gamma(uint64_t *st, double shape);
/* Beta(a, b) as the first coordinate of a Dirichlet([a, b]), which is how
 * torchvision's mixup and cutmix draw lambda. */
double draw_beta(uint64_t *st, double a, double b);
/* A uniform permutation of 0..n-1 into v (torch.randperm(n)). */
void draw_permutation(uint64_t *st, uint32_t *v, uint32_t n);

#endif
