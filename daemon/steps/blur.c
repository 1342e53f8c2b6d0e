/*
 * gaussian_blur in float32, torch's way (see blur.h).
 */
#include "exact.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "blur.h"

float blur_linspace(double start, double end, uint32_t steps, uint32_t i)
{
    float s = (float)start, e = (float)end;
    if (steps <= 1)
        return s;
    float step = (e - s) / (float)(steps - 1);
    uint32_t half = steps / 2;
    /* The vector kernel: blocks of 8 from a base, two blocks (16 values) at a
     * time while 16 remain; the base is computed as the scalar path does. */
    uint32_t vec_end = steps / 16 * 16;
    uint32_t at = i;
    uint32_t k = 0;
    if (i < vec_end) {
        at = i / 8 * 8;
        k = i - at;
    }
    float base = at < half ? fmaf(step, (float)at, s)
                           : fmaf(-step, (float)(steps - at - 1), e);
    if (i >= vec_end)
        return base;
    return base + (float)k * step;
}

/* torch 1.13's sum of a float32 vector (cascade_sum, SumKernel.cpp), float
 * accumulators: under 8 values, four interleaved partial sums (row_sum's
 * ILP of 4), the rest added to the first, then the others; from 8 on, the
 * same over vectors of 8 lanes, then the scalar tail from 0, then the 8
 * lanes in order. Kernels stay under 16 vectors, below its cascade levels. */
static float torch_sum(const float *x, uint32_t n)
{
    float acc[4][8] = {{0}};
    uint32_t lanes = n < 8 ? 1 : 8, units = n < 8 ? n : n / 8;
    uint32_t q = units / 4;
    for (uint32_t r = 0; r < q; r++)
        for (uint32_t k = 0; k < 4; k++)
            for (uint32_t l = 0; l < lanes; l++)
                acc[k][l] += x[(4 * r + k) * lanes + l];
    for (uint32_t i = 4 * q; i < units; i++)
        for (uint32_t l = 0; l < lanes; l++)
            acc[0][l] += x[i * lanes + l];
    for (uint32_t k = 1; k < 4; k++)
        for (uint32_t l = 0; l < lanes; l++)
            acc[0][l] += acc[k][l];
    if (lanes == 1)
        return acc[0][0];
    float total = 0.0f;
    for (uint32_t i = units * 8; i < n; i++)
        total += x[i];
    for (uint32_t l = 0; l < 8; l++)
        total += acc[0][l];
    return total;
}

void blur_kernel(uint32_t ksize, double sigma, float *k)
{
    double half = (ksize - 1) * 0.5;
    float sig = (float)sigma;
    for (uint32_t i = 0; i < ksize; i++) {
        float x = blur_linspace(-half, half, ksize, i) / sig;
        k[i] = expf(-0.5f * (x * x));
    }
    float sum = torch_sum(k, ksize);
    for (uint32_t i = 0; i < ksize; i++)
        k[i] /= sum;
}

/* torch's reflect padding index, repeated for kernels wider than the image. */
static uint32_t reflect(int64_t i, uint32_t n)
{
    if (n == 1)
        return 0;
    int64_t period = 2 * (int64_t)(n - 1);
    i %= period;
    if (i < 0)
        i += period;
    return (uint32_t)(i < n ? i : period - i);
}

int blur_gaussian(const uint8_t *src, uint8_t *dst, uint32_t h, uint32_t w, uint32_t c,
                  uint32_t kx, uint32_t ky, double sigma_x, double sigma_y)
{
    float kh[BLUR_KERNEL_MAX], kv[BLUR_KERNEL_MAX];
    if (kx == 0 || ky == 0 || kx > BLUR_KERNEL_MAX || ky > BLUR_KERNEL_MAX)
        return -EINVAL;
    blur_kernel(kx, sigma_x, kh);
    blur_kernel(ky, sigma_y, kv);
    size_t row = (size_t)w * c;
    float *tmp = malloc(sizeof(float) * row * (h ? h : 1));
    if (tmp == NULL)
        return -ENOMEM;
    int rx = (int)(kx / 2), ry = (int)(ky / 2);

    /* Rows: interior columns without reflection, the edges with it. */
    for (uint32_t y = 0; y < h; y++) {
        const uint8_t *in = src + y * row;
        float *t = tmp + y * row;
        for (uint32_t x = 0; x < w; x++) {
            int inner = (int)x >= rx && x + (uint32_t)rx < w;
            for (uint32_t ch = 0; ch < c; ch++) {
                float s = 0.0f;
                for (int j = 0; j < (int)kx; j++) {
                    int64_t xs = (int64_t)x + j - rx;
                    uint32_t xi = inner ? (uint32_t)xs : reflect(xs, w);
                    s += (float)in[(size_t)xi * c + ch] * kh[j];
                }
                t[(size_t)x * c + ch] = s;
            }
        }
    }
    /* Columns, rounded half to even (torch.round), into dst. */
    for (uint32_t y = 0; y < h; y++) {
        uint8_t *out = dst + y * row;
        for (size_t i = 0; i < row; i++) {
            float s = 0.0f;
            for (int j = 0; j < (int)ky; j++) {
                uint32_t ys = reflect((int64_t)y + j - ry, h);
                s += tmp[ys * row + i] * kv[j];
            }
            float r = rintf(s);
            out[i] = r <= 0.0f ? 0 : r >= 255.0f ? 255 : (uint8_t)r;
        }
    }
    free(tmp);
    return 0;
}
