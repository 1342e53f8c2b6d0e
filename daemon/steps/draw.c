/*
 * Decision draws from a splitmix64 state: see draw.h.
 */
#include <math.h>

#include "draw.h"
#include "hash.h"
#include "step.h"

double draw_uniform(uint64_t *st, double lo, double hi)
{
    return lo + (hi - lo) * hash_rand01(st);
}

uint32_t draw_below(uint64_t *st, uint32_t n)
{
    uint32_t v = (uint32_t)(hash_rand01(st) * (double)n);
    return v >= n ? n - 1 : v;
}

int draw_chance(uint64_t *st, double p)
{
    return hash_rand01(st) < p;
}

void draw_normal2(uint64_t *st, double *a, double *b)
{
    /* 1 - u is in (0, 1]: the logarithm is finite. */
    double r = sqrt(-2.0 * log(1.0 - hash_rand01(st)));
    double t = 2.0 * M_PI * hash_rand01(st);
    *a = r * cos(t);
    *b = r * sin(t);
}

double draw_normal(uint64_t *st)
{
    double a, b;
    draw_normal2(st, &a, &b);
    return a;
}

double draw_gamma(uint64_t *st, double shape)
{
    if (shape < 1.0) {
        /* Gamma(a) = Gamma(a + 1) * U^(1/a) (Marsaglia and Tsang, 2000). */
        double g = draw_gamma(st, shape + 1.0);
        double u = 1.0 - hash_rand01(st);
        return g * pow(u, 1.0 / shape);
    }
    double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = draw_normal(st), v = 1.0 + c * x;
        if (v <= 0.0)
            continue;
        v = v * v * v;
        double u = 1.0 - hash_rand01(st);
        if (log(u) < 0.5 * x * x + d - d * v + d * log(v))
            return d * v;
    }
}

double draw_beta(uint64_t *st, double a, double b)
{
    double x = draw_gamma(st, a), y = draw_gamma(st, b);
    double s = x + y;
    /* Both underflow only for tiny shapes: split the mass evenly. */
    return s > 0.0 ? x / s : 0.5;
}

void draw_permutation(uint64_t *st, uint32_t *v, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        v[i] = i;
    for (uint32_t i = n; i > 1; i--) {
        uint32_t j = draw_below(st, i);
        uint32_t t = v[i - 1];
        v[i - 1] = v[j];
        v[j] = t;
    }
}
