/*
 * gaussian_blur: torchvision's F.gaussian_blur on a PIL image, which turns
 * the image into a float32 tensor, pads it by reflection (without repeating
 * the edge), convolves each channel with the outer product of two 1-D
 * kernels, rounds half to even and converts back to uint8.
 *
 * The kernels are torch's, computed the same way in float32 (linspace of
 * the offsets, exp(-0.5 (x / sigma)^2), divided by their sum). The
 * convolution here is separable (rows, then columns) where torch sums the
 * k x k products in an order of its own: sums that differ in the last bits
 * of a float round to different integers when they fall within about 1e-4
 * of a half, so a small fraction of values differ by 1 (the fidelity suite
 * measures and bounds it). Images smaller than half a kernel, which torch
 * refuses, are padded by repeated reflection.
 */
#ifndef PRESTO_STEPS_BLUR_H
#define PRESTO_STEPS_BLUR_H

#include <stdint.h>

#define BLUR_KERNEL_MAX 255 /* largest kernel side */

/* torch.linspace(start, end, steps)[i] in float32, as torch 1.13 computes it
 * on x86-64 with AVX2 (its vector kernel for the first 16 values of each 16,
 * fused multiply-adds elsewhere); other CPU kernels of torch differ from it
 * by at most one unit in the last place. */
float blur_linspace(double start, double end, uint32_t steps, uint32_t i);

/* torchvision's _get_gaussian_kernel1d(ksize, sigma) into k (ksize floats):
 * ksize odd, 1..BLUR_KERNEL_MAX, sigma > 0. */
void blur_kernel(uint32_t ksize, double sigma, float *k);

/* F.gaussian_blur(img, [kx, ky], [sigma_x, sigma_y]) of an h x w x c image;
 * src and dst may be the same. Returns 0 or -ENOMEM (a float copy of the
 * image is made). */
int blur_gaussian(const uint8_t *src, uint8_t *dst, uint32_t h, uint32_t w, uint32_t c,
                  uint32_t kx, uint32_t ky, double sigma_x, double sigma_y);

#endif
