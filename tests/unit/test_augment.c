/* Unit tests for the image steps of daemon/steps/: the decision draws
 * (draw.h), the colour and geometric operations (color.h, geometry.h) and
 * the policies built on them (augment.h), gaussian_blur (blur.h),
 * random_erasing (erase.h), mixup and cutmix (mix.h), and region-of-
 * interest JPEG decoding (jpeg_roi.h): bit-identical to a full decode cut
 * to the box over many random boxes, sizes, subsamplings, grey and colour,
 * baseline and progressive, and DCT scales.
 *
 * These check the operations' own properties (identities, bounds, in-place
 * use, determinism, edge sizes, errors); fidelity to torchvision and to
 * torchvision's sampling is tests/python/test_augment.py's job, through the
 * same functions (build/testlib/libsteps_hook.so).
 *
 * Real photos come from $PRESTO_PHOTOS, else ../shared/photos; the ROI
 * cases need them (skip 77 without, like test_steps). */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "hash.h"
#include "step.h"
#include "steps/augment.h"
#include "steps/blur.h"
#include "steps/color.h"
#include "steps/draw.h"
#include "steps/erase.h"
#include "steps/geometry.h"
#include "steps/jpeg_roi.h"
#include "steps/mix.h"
#include "photos.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static const char *const photo_names[] = {"china.jpg", "flower.jpg", "grace_hopper.jpg"};

static uint8_t *read_photo(const char *name, size_t *len)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", photos_dir(), name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    ck_assert_int_gt(n, 0);
    rewind(f);
    uint8_t *buf = malloc((size_t)n);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

/* A deterministic test image: smooth gradients with some texture. */
static uint8_t *pattern(uint32_t h, uint32_t w, uint32_t c, uint64_t seed)
{
    uint8_t *p = malloc((size_t)h * w * c + 1);
    ck_assert_ptr_nonnull(p);
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++)
            for (uint32_t ch = 0; ch < c; ch++) {
                uint32_t v = (x * 7 + y * 3 + ch * 50) % 200 + 20;
                v += (uint32_t)(hash_mix64(seed + ((uint64_t)y * w + x) * 3 + ch) % 31);
                p[((size_t)y * w + x) * c + ch] = (uint8_t)v;
            }
    return p;
}

/* ---- draws ---- */

START_TEST(test_draws)
{
    uint64_t st = 42, again = 42;
    for (int i = 0; i < 10000; i++) {
        double u = draw_uniform(&st, -2.0, 3.0);
        ck_assert(u >= -2.0 && u < 3.0);
        ck_assert_uint_lt(draw_below(&st, 7), 7);
        ck_assert_uint_eq(draw_below(&st, 1), 0);
    }
    ck_assert(draw_uniform(&again, 0.0, 1.0) == draw_uniform(&(uint64_t){42}, 0.0, 1.0));

    /* Permutations are permutations, every one of 4! occurs. */
    int seen[24] = {0};
    st = 7;
    for (int i = 0; i < 2400; i++) {
        uint32_t v[4];
        draw_permutation(&st, v, 4);
        int mask = 0, code = 0;
        for (int k = 0; k < 4; k++) {
            ck_assert_uint_lt(v[k], 4);
            mask |= 1 << v[k];
        }
        ck_assert_int_eq(mask, 15);
        /* Lehmer code of the permutation */
        int f[4] = {6, 2, 1, 1};
        for (int k = 0; k < 4; k++) {
            int smaller = 0;
            for (int m = k + 1; m < 4; m++)
                smaller += v[m] < v[k];
            code += smaller * f[k];
        }
        seen[code]++;
    }
    for (int k = 0; k < 24; k++)
        ck_assert_int_gt(seen[k], 50);

    /* Moments of the normal, gamma and beta draws (loose bounds). */
    double sum = 0, sq = 0, g = 0, b = 0, bsq = 0;
    const int n = 20000;
    st = 3;
    for (int i = 0; i < n; i++) {
        double z = draw_normal(&st);
        sum += z;
        sq += z * z;
        g += draw_gamma(&st, 0.2);
        double x = draw_beta(&st, 0.2, 0.2);
        ck_assert(x >= 0.0 && x <= 1.0);
        b += x;
        bsq += x * x;
    }
    ck_assert(fabs(sum / n) < 0.05);
    ck_assert(fabs(sq / n - 1.0) < 0.05);
    ck_assert(fabs(g / n - 0.2) < 0.02);
    ck_assert(fabs(b / n - 0.5) < 0.02);
    /* Var of Beta(a, a) = 1 / (4 (2a + 1)) */
    ck_assert(fabs(bsq / n - 0.25 - 1.0 / (4 * 1.4)) < 0.02);
}
END_TEST

/* ---- colour ---- */

START_TEST(test_color_identities)
{
    const uint32_t h = 13, w = 17;
    for (uint32_t c = 1; c <= 3; c += 2) {
        size_t n = (size_t)h * w * c;
        uint8_t *src = pattern(h, w, c, c), *dst = malloc(n), *tmp = malloc(n);
        /* Factor 1 is the image; brightness 0 black; contrast 0 one grey. */
        color_brightness(src, dst, (size_t)h * w, c, 1.0);
        ck_assert_mem_eq(dst, src, n);
        color_contrast(src, dst, (size_t)h * w, c, 1.0);
        ck_assert_mem_eq(dst, src, n);
        color_saturation(src, dst, (size_t)h * w, c, 1.0);
        ck_assert_mem_eq(dst, src, n);
        color_sharpness(src, dst, h, w, c, 1.0);
        ck_assert_mem_eq(dst, src, n);
        color_brightness(src, dst, (size_t)h * w, c, 0.0);
        for (size_t i = 0; i < n; i++)
            ck_assert_uint_eq(dst[i], 0);
        color_contrast(src, dst, (size_t)h * w, c, 0.0);
        for (size_t i = 1; i < n; i++)
            ck_assert_uint_eq(dst[i], dst[0]);
        /* Extrapolation clips. */
        color_brightness(src, dst, (size_t)h * w, c, 100.0);
        for (size_t i = 0; i < n; i++)
            ck_assert_uint_eq(dst[i], 255);
        /* Invert twice, posterize 8, solarize above 255: the image. */
        color_invert(src, tmp, (size_t)h * w, c);
        color_invert(tmp, dst, (size_t)h * w, c);
        ck_assert_mem_eq(dst, src, n);
        color_posterize(src, dst, (size_t)h * w, c, 8);
        ck_assert_mem_eq(dst, src, n);
        color_solarize(src, dst, (size_t)h * w, c, 256.0);
        ck_assert_mem_eq(dst, src, n);
        color_posterize(src, dst, (size_t)h * w, c, 0);
        for (size_t i = 0; i < n; i++)
            ck_assert_uint_eq(dst[i], 0);
        /* Autocontrast stretches each channel to 0..255. */
        color_autocontrast(src, dst, (size_t)h * w, c);
        for (uint32_t ch = 0; ch < c; ch++) {
            uint8_t lo = 255, hi = 0;
            for (size_t i = ch; i < n; i += c) {
                lo = dst[i] < lo ? dst[i] : lo;
                hi = dst[i] > hi ? dst[i] : hi;
            }
            ck_assert_uint_eq(lo, 0);
            ck_assert_uint_eq(hi, 255);
        }
        /* Grey input: grayscale and hue change nothing, saturation neither. */
        if (c == 1) {
            color_hue(src, dst, (size_t)h * w, c, 0.3);
            ck_assert_mem_eq(dst, src, n);
            color_grayscale(src, dst, (size_t)h * w, c);
            ck_assert_mem_eq(dst, src, n);
            color_saturation(src, dst, (size_t)h * w, c, 0.3);
            ck_assert_mem_eq(dst, src, n);
        } else {
            color_grayscale(src, dst, (size_t)h * w, c);
            for (size_t i = 0; i < n; i += 3) {
                ck_assert_uint_eq(dst[i], dst[i + 1]);
                ck_assert_uint_eq(dst[i], dst[i + 2]);
                ck_assert_uint_eq(dst[i], color_luma(src + i));
            }
        }
        free(src);
        free(dst);
        free(tmp);
    }
}
END_TEST

START_TEST(test_color_in_place)
{
    /* Every pointwise operation gives the same bytes in place. */
    const uint32_t h = 21, w = 9, c = 3;
    size_t n = (size_t)h * w * c, px = (size_t)h * w;
    uint8_t *src = pattern(h, w, c, 5), *want = malloc(n), *buf = malloc(n);
    for (int op = 0; op < 10; op++) {
        memcpy(buf, src, n);
        switch (op) {
        case 0: color_brightness(src, want, px, c, 1.7); color_brightness(buf, buf, px, c, 1.7); break;
        case 1: color_contrast(src, want, px, c, 0.4); color_contrast(buf, buf, px, c, 0.4); break;
        case 2: color_saturation(src, want, px, c, 1.9); color_saturation(buf, buf, px, c, 1.9); break;
        case 3: color_hue(src, want, px, c, -0.2); color_hue(buf, buf, px, c, -0.2); break;
        case 4: color_grayscale(src, want, px, c); color_grayscale(buf, buf, px, c); break;
        case 5: color_posterize(src, want, px, c, 3); color_posterize(buf, buf, px, c, 3); break;
        case 6: color_solarize(src, want, px, c, 99.5); color_solarize(buf, buf, px, c, 99.5); break;
        case 7: color_invert(src, want, px, c); color_invert(buf, buf, px, c); break;
        case 8: color_autocontrast(src, want, px, c); color_autocontrast(buf, buf, px, c); break;
        default: color_equalize(src, want, px, c); color_equalize(buf, buf, px, c); break;
        }
        ck_assert_msg(memcmp(buf, want, n) == 0, "op %d differs in place", op);
    }
    free(src);
    free(want);
    free(buf);
}
END_TEST

START_TEST(test_color_jitter)
{
    struct color_jitter_params p = {{1, 1, 1, 1}, {{0.6, 1.4}, {0.6, 1.4}, {0.6, 1.4}, {-0.1, 0.1}}};
    uint64_t st = 9;
    const uint32_t h = 8, w = 8, c = 3;
    uint8_t *src = pattern(h, w, c, 1), *a = malloc(h * w * c), *b = malloc(h * w * c);
    for (int i = 0; i < 200; i++) {
        struct color_jitter j;
        color_jitter_draw(&p, &st, &j);
        int seen = 0;
        for (int k = 0; k < 4; k++)
            seen |= 1 << j.order[k];
        ck_assert_int_eq(seen, 15);
        for (int f = 0; f < 3; f++)
            ck_assert(j.factor[f] >= 0.6 && j.factor[f] < 1.4);
        ck_assert(j.factor[3] >= -0.1 && j.factor[3] < 0.1);
        /* Applying equals the four operations in the drawn order. */
        color_jitter_apply(&j, src, a, (size_t)h * w, c);
        memcpy(b, src, h * w * c);
        for (int k = 0; k < 4; k++) {
            uint32_t f = j.order[k];
            if (f == JITTER_BRIGHTNESS)
                color_brightness(b, b, (size_t)h * w, c, j.factor[f]);
            else if (f == JITTER_CONTRAST)
                color_contrast(b, b, (size_t)h * w, c, j.factor[f]);
            else if (f == JITTER_SATURATION)
                color_saturation(b, b, (size_t)h * w, c, j.factor[f]);
            else
                color_hue(b, b, (size_t)h * w, c, j.factor[f]);
        }
        ck_assert_mem_eq(a, b, h * w * c);
    }
    /* Everything off: a copy. */
    struct color_jitter_params off = {{0, 0, 0, 0}, {{0}}};
    struct color_jitter j;
    color_jitter_draw(&off, &st, &j);
    color_jitter_apply(&j, src, a, (size_t)h * w, c);
    ck_assert_mem_eq(a, src, h * w * c);
    free(src);
    free(a);
    free(b);
}
END_TEST

/* ---- geometry ---- */

START_TEST(test_geometry_identities)
{
    const uint8_t fill[3] = {1, 2, 3};
    for (uint32_t c = 1; c <= 3; c += 2) {
        const uint32_t h = 19, w = 19;
        size_t n = (size_t)h * w * c;
        uint8_t *src = pattern(h, w, c, 11), *dst = malloc(n), *tmp = malloc(n);
        for (int interp = 0; interp < 2; interp++) {
            /* The identity matrix, a rotation by 0 or 360: the image. */
            geom_affine(src, dst, h, w, c, 0.0, 0, 0, 1.0, 0.0, 0.0, NULL, interp, fill);
            ck_assert_mem_eq(dst, src, n);
            geom_rotate(src, dst, h, w, c, 360.0, interp, fill);
            ck_assert_mem_eq(dst, src, n);
            /* Four quarter turns of a square image: the image. */
            geom_rotate(src, dst, h, w, c, 90.0, interp, fill);
            geom_rotate(dst, tmp, h, w, c, 90.0, interp, fill);
            geom_rotate(tmp, dst, h, w, c, -90.0, interp, fill);
            geom_rotate(dst, tmp, h, w, c, 270.0, interp, fill);
            ck_assert_mem_eq(tmp, src, n);
        }
        /* A quarter turn counter-clockwise: out(w - 1 - x, y) = in(y, x). */
        geom_rotate(src, dst, h, w, c, 90.0, GEOM_NEAREST, fill);
        for (uint32_t y = 0; y < h; y++)
            for (uint32_t x = 0; x < w; x++)
                ck_assert_mem_eq(dst + ((size_t)(w - 1 - x) * w + y) * c,
                                 src + ((size_t)y * w + x) * c, c);
        /* A translation by whole pixels shifts and fills. */
        geom_affine(src, dst, h, w, c, 0.0, 5, -3, 1.0, 0.0, 0.0, NULL, GEOM_NEAREST, fill);
        for (uint32_t y = 0; y < h; y++)
            for (uint32_t x = 0; x < w; x++) {
                const uint8_t *o = dst + ((size_t)y * w + x) * c;
                int sx = (int)x - 5, sy = (int)y + 3;
                if (sx < 0 || sy >= (int)h)
                    ck_assert_mem_eq(o, fill, c);
                else
                    ck_assert_mem_eq(o, src + ((size_t)sy * w + (uint32_t)sx) * c, c);
            }
        /* A shear near 90 degrees maps far outside: all fill, no overflow. */
        geom_affine(src, dst, h, w, c, 0.0, 0, 0, 1.0, 89.9999, 0.0, NULL, GEOM_NEAREST, fill);
        geom_affine(src, dst, h, w, c, 0.0, 0, 0, 1e-9, 0.0, 0.0, NULL, GEOM_BILINEAR, fill);
        free(src);
        free(dst);
        free(tmp);
    }
    /* 1 x 1 and thin images. */
    uint8_t one[3] = {9, 8, 7}, out[3];
    geom_rotate(one, out, 1, 1, 3, 33.0, GEOM_BILINEAR, fill);
    geom_affine(one, out, 1, 1, 3, 10.0, 1, 0, 1.0, 5.0, 5.0, NULL, GEOM_NEAREST, fill);
}
END_TEST

START_TEST(test_affine_draw)
{
    struct geom_affine_params p = {{-30, 30}, 1, 1, {1, 1}, {0.1, 0.2}, {0.8, 1.2},
                                   {{-10, 10}, {-5, 5}}};
    uint64_t st = 77;
    for (int i = 0; i < 2000; i++) {
        struct geom_affine_decision d;
        geom_affine_draw(&p, &st, 100, 200, &d);
        ck_assert(d.angle >= -30 && d.angle < 30);
        ck_assert(abs(d.tx) <= 20 && abs(d.ty) <= 20);
        ck_assert(d.scale >= 0.8 && d.scale < 1.2);
        ck_assert(d.shear_x >= -10 && d.shear_x < 10);
        ck_assert(d.shear_y >= -5 && d.shear_y < 5);
    }
    struct geom_affine_params none = {{0, 0}, 0, 0, {0, 0}, {0}, {0}, {{0}}};
    struct geom_affine_decision d;
    geom_affine_draw(&none, &st, 10, 10, &d);
    ck_assert(d.angle == 0 && d.tx == 0 && d.ty == 0 && d.scale == 1.0 && d.shear_x == 0);
}
END_TEST

/* ---- policies ---- */

START_TEST(test_augment_tables)
{
    /* Endpoints of torchvision's spaces. */
    ck_assert(aug_magnitude(AUG_TRIVIAL_WIDE, AUG_ROTATE, 31, 30, 1, 1) == 135.0);
    ck_assert(aug_magnitude(AUG_TRIVIAL_WIDE, AUG_SHEAR_X, 31, 30, 1, 1) == 0.99f);
    ck_assert(aug_magnitude(AUG_RAND, AUG_ROTATE, 31, 30, 1, 1) == 30.0);
    ck_assert(aug_magnitude(AUG_RAND, AUG_TRANSLATE_X, 31, 30, 100, 331) == 150.0f);
    ck_assert(aug_magnitude(AUG_RAND, AUG_SOLARIZE, 31, 0, 1, 1) == 255.0);
    ck_assert(aug_magnitude(AUG_RAND, AUG_SOLARIZE, 31, 30, 1, 1) == 0.0);
    ck_assert(aug_magnitude(AUG_RAND, AUG_POSTERIZE, 31, 0, 1, 1) == 8.0);
    ck_assert(aug_magnitude(AUG_RAND, AUG_POSTERIZE, 31, 30, 1, 1) == 4.0);
    ck_assert(aug_magnitude(AUG_TRIVIAL_WIDE, AUG_POSTERIZE, 31, 30, 1, 1) == 2.0);
    ck_assert(aug_magnitude(AUG_AUTO_IMAGENET, AUG_ROTATE, 10, 9, 1, 1) == 30.0);
    ck_assert(aug_magnitude(AUG_RAND, AUG_EQUALIZE, 31, 5, 1, 1) == 0.0);
    /* Monotonic between them. */
    for (uint32_t b = 1; b < 31; b++)
        ck_assert(aug_magnitude(AUG_TRIVIAL_WIDE, AUG_BRIGHTNESS, 31, b, 1, 1) >
                  aug_magnitude(AUG_TRIVIAL_WIDE, AUG_BRIGHTNESS, 31, b - 1, 1, 1));
    ck_assert_str_eq(aug_op_name(AUG_SHEAR_Y), "ShearY");
    ck_assert(aug_op_signed(AUG_SHARPNESS) && !aug_op_signed(AUG_SOLARIZE));
}
END_TEST

START_TEST(test_augment_draws)
{
    struct aug_params ps[3] = {
        {AUG_AUTO_IMAGENET, 0, 0, 10, GEOM_NEAREST, {0}},
        {AUG_RAND, 2, 9, 31, GEOM_NEAREST, {0}},
        {AUG_TRIVIAL_WIDE, 0, 0, 31, GEOM_NEAREST, {0}},
    };
    for (int k = 0; k < 3; k++) {
        int counts[AUG_OP_MAX] = {0};
        for (uint64_t seed = 0; seed < 3000; seed++) {
            uint64_t st = hash_mix64(seed), again = st;
            struct aug_choice a[AUG_OPS_MAX], b[AUG_OPS_MAX];
            uint32_t n = aug_draw(&ps[k], &st, 224, 224, a);
            uint32_t m = aug_draw(&ps[k], &again, 224, 224, b);
            ck_assert_uint_eq(n, m);
            ck_assert_uint_le(n, k == 1 ? 2 : k == 2 ? 1 : 2);
            if (k != 0)
                ck_assert_uint_eq(n, k == 1 ? 2 : 1);
            for (uint32_t i = 0; i < n; i++) {
                ck_assert_int_eq(a[i].op, b[i].op);
                ck_assert(a[i].magnitude == b[i].magnitude);
                ck_assert_int_lt(a[i].op, AUG_OP_MAX);
                if (!aug_op_signed(a[i].op))
                    ck_assert(a[i].magnitude >= 0);
                counts[a[i].op]++;
            }
        }
        if (k != 0) /* the 14 ops of the space all occur, Invert never */
            for (int op = 0; op < AUG_SPACE_OPS; op++)
                ck_assert_int_gt(counts[op], 100);
        ck_assert_int_eq(counts[AUG_INVERT] > 0, k == 0);
        if (k == 0)
            ck_assert_int_eq(counts[AUG_IDENTITY], 0);
    }
}
END_TEST

START_TEST(test_augment_ops_edge_sizes)
{
    /* Every op at its strongest, on odd and tiny images, grey and colour:
     * in bounds (run under the sanitizers) and deterministic. */
    static const uint32_t sizes[][2] = {{1, 1}, {1, 7}, {6, 1}, {2, 2}, {3, 5}, {31, 17}};
    const uint8_t fill[3] = {128, 0, 255};
    for (size_t s = 0; s < NELEM(sizes); s++) {
        uint32_t h = sizes[s][0], w = sizes[s][1];
        for (uint32_t c = 1; c <= 3; c += 2) {
            uint8_t *src = pattern(h, w, c, s), *a = malloc(h * w * c), *b = malloc(h * w * c);
            for (int op = 0; op < AUG_OP_MAX; op++)
                for (int interp = 0; interp < 2; interp++)
                    for (int sign = -1; sign <= 1; sign += 2) {
                        double m = aug_magnitude(AUG_TRIVIAL_WIDE, (enum aug_op)op, 31, 30, h,
                                                 w);
                        if (aug_op_signed((enum aug_op)op))
                            m *= sign;
                        aug_apply_op((enum aug_op)op, m, interp, fill, src, a, h, w, c);
                        aug_apply_op((enum aug_op)op, m, interp, fill, src, b, h, w, c);
                        ck_assert_mem_eq(a, b, h * w * c);
                    }
            free(src);
            free(a);
            free(b);
        }
    }
}
END_TEST

/* ---- gaussian blur ---- */

START_TEST(test_blur)
{
    float k[BLUR_KERNEL_MAX];
    for (uint32_t ks = 1; ks <= 31; ks += 2) {
        blur_kernel(ks, 1.3, k);
        double sum = 0;
        for (uint32_t i = 0; i < ks; i++) {
            sum += k[i];
            ck_assert(k[i] == k[ks - 1 - i]); /* symmetric */
        }
        ck_assert(fabs(sum - 1.0) < 1e-6);
    }
    /* torch.linspace's values at the ends and the middle. */
    ck_assert(blur_linspace(-11.0, 11.0, 23, 0) == -11.0f);
    ck_assert(blur_linspace(-11.0, 11.0, 23, 22) == 11.0f);
    ck_assert(blur_linspace(-11.0, 11.0, 23, 11) == 0.0f);

    /* A constant image stays constant, even under kernels wider than it. */
    const uint32_t h = 5, w = 4;
    uint8_t flat[5 * 4 * 3], out[5 * 4 * 3];
    memset(flat, 77, sizeof(flat));
    ck_assert_int_eq(blur_gaussian(flat, out, h, w, 3, 23, 9, 3.0, 1.0), 0);
    ck_assert_mem_eq(out, flat, sizeof(flat));
    /* A tiny sigma is the identity; in place works. */
    uint8_t *src = pattern(17, 23, 3, 4), *dst = malloc(17 * 23 * 3);
    ck_assert_int_eq(blur_gaussian(src, dst, 17, 23, 3, 5, 5, 0.05, 0.05), 0);
    ck_assert_mem_eq(dst, src, 17 * 23 * 3);
    ck_assert_int_eq(blur_gaussian(src, dst, 17, 23, 3, 9, 3, 2.0, 0.7), 0);
    ck_assert_int_eq(blur_gaussian(src, src, 17, 23, 3, 9, 3, 2.0, 0.7), 0);
    ck_assert_mem_eq(dst, src, 17 * 23 * 3);
    ck_assert_int_eq(blur_gaussian(src, dst, 1, 1, 3, 3, 3, 1.0, 1.0), 0);
    ck_assert_int_eq(blur_gaussian(src, dst, 17, 23, 3, 0, 3, 1.0, 1.0), -EINVAL);
    ck_assert_int_eq(blur_gaussian(src, dst, 17, 23, 3, 3, BLUR_KERNEL_MAX + 2, 1.0, 1.0),
                     -EINVAL);
    free(src);
    free(dst);
}
END_TEST

/* ---- random erasing ---- */

START_TEST(test_erase)
{
    struct erase_params p = {0.5, {0.02, 0.33}, {0.3, 3.3}, 0, 3, {1.0f, 2.0f, 3.0f}};
    uint64_t st = 5;
    int erased = 0;
    const uint32_t h = 40, w = 30, c = 3;
    float *x = malloc(sizeof(float) * h * w * c);
    for (int i = 0; i < 2000; i++) {
        struct erase_box b;
        erase_draw(&p, &st, h, w, &b);
        if (b.h == 0)
            continue;
        erased++;
        ck_assert_uint_lt(b.h, h);
        ck_assert_uint_lt(b.w, w);
        ck_assert_uint_le(b.top + b.h, h);
        ck_assert_uint_le(b.left + b.w, w);
    }
    ck_assert(erased > 850 && erased < 1150); /* p = 0.5, less the rare misses */
    p.p = 0.0;
    for (int i = 0; i < 100; i++) {
        struct erase_box b;
        erase_draw(&p, &st, h, w, &b);
        ck_assert_uint_eq(b.h, 0);
    }
    /* Only the box changes, to the value of its channel, in both layouts. */
    struct erase_box b = {5, 7, 10, 4};
    for (int nchw = 0; nchw < 2; nchw++) {
        for (size_t i = 0; i < (size_t)h * w * c; i++)
            x[i] = -9.0f;
        erase_apply(&p, &b, &st, x, h, w, c, nchw);
        for (uint32_t ch = 0; ch < c; ch++)
            for (uint32_t y = 0; y < h; y++)
                for (uint32_t xx = 0; xx < w; xx++) {
                    size_t at = nchw ? ((size_t)ch * h + y) * w + xx : ((size_t)y * w + xx) * c + ch;
                    int inside = y >= 5 && y < 15 && xx >= 7 && xx < 11;
                    ck_assert(x[at] == (inside ? p.value[ch] : -9.0f));
                }
    }
    /* value random: normal draws inside the box, a function of the state. */
    p.random = 1;
    uint64_t s1 = 11, s2 = 11;
    float *y = malloc(sizeof(float) * h * w * c);
    for (size_t i = 0; i < (size_t)h * w * c; i++)
        x[i] = y[i] = 0.0f;
    erase_apply(&p, &b, &s1, x, h, w, c, 1);
    erase_apply(&p, &b, &s2, y, h, w, c, 1);
    ck_assert_mem_eq(x, y, sizeof(float) * h * w * c);
    double sum = 0;
    for (size_t i = 0; i < (size_t)h * w * c; i++)
        sum += fabs(x[i]);
    ck_assert(sum > 0.3 * 120); /* 120 draws with mean |z| 0.8 */
    free(x);
    free(y);
}
END_TEST

/* ---- mixup, cutmix ---- */

START_TEST(test_mix)
{
    struct mix_params p = {0.2, 1.0, 1.0, 0.5};
    uint64_t st = 1;
    int kinds[3] = {0};
    for (int i = 0; i < 4000; i++) {
        struct mix_decision d;
        mix_draw(&p, &st, 20, 30, &d);
        kinds[d.kind]++;
        ck_assert(d.lambda >= 0.0 && d.lambda <= 1.0);
        if (d.kind == MIX_CUTMIX) {
            ck_assert_uint_le(d.x1, d.x2);
            ck_assert_uint_le(d.y1, d.y2);
            ck_assert_uint_le(d.x2, 30);
            ck_assert_uint_le(d.y2, 20);
            double area = (double)(d.x2 - d.x1) * (d.y2 - d.y1);
            ck_assert(fabs(d.lambda - (1.0 - area / 600.0)) < 1e-12);
        }
    }
    ck_assert_int_eq(kinds[MIX_NONE], 0);
    ck_assert(kinds[MIX_MIXUP] > 1800 && kinds[MIX_CUTMIX] > 1800);
    /* p = 0: never; one alpha: only that one. */
    struct mix_params off = {0.2, 1.0, 0.0, 0.5}, only = {0.0, 1.0, 1.0, 0.0};
    for (int i = 0; i < 100; i++) {
        struct mix_decision d;
        mix_draw(&off, &st, 20, 30, &d);
        ck_assert_int_eq(d.kind, MIX_NONE);
        mix_draw(&only, &st, 20, 30, &d);
        ck_assert_int_eq(d.kind, MIX_CUTMIX);
    }

    /* Apply: sample i mixes with i - 1 (the first with the last). */
    const uint32_t n = 3, h = 4, w = 5, c = 2, k = 4;
    size_t len = (size_t)h * w * c;
    float batch[3 * 4 * 5 * 2], orig[3 * 4 * 5 * 2], t[3 * 4], scratch[4 * 5 * 2 + 4];
    int64_t labels[3] = {0, 3, 1};
    for (size_t i = 0; i < n * len; i++)
        orig[i] = batch[i] = (float)(i % 17) - 3.0f;
    ck_assert_int_eq(mix_one_hot(labels, n, k, t), 0);
    struct mix_decision mu = {MIX_MIXUP, 0.3, 0, 0, 0, 0};
    mix_apply(&mu, batch, n, h, w, c, 1, t, k, scratch);
    for (uint32_t s = 0; s < n; s++) {
        uint32_t prev = (s + n - 1) % n;
        for (size_t i = 0; i < len; i++) {
            float a = orig[s * len + i] * 0.3f, b = orig[prev * len + i] * (float)(1.0 - 0.3);
            ck_assert(batch[s * len + i] == a + b);
        }
        float sum = 0;
        for (uint32_t j = 0; j < k; j++)
            sum += t[s * k + j];
        ck_assert(fabsf(sum - 1.0f) < 1e-6f);
        ck_assert(t[s * k + (uint32_t)labels[s]] >= 0.3f - 1e-6f);
    }
    ck_assert_int_eq(mix_one_hot((int64_t[]){0, 4, 1}, n, k, t), -ERANGE);
    /* Cutmix copies the box from the previous sample, nothing else. */
    memcpy(batch, orig, sizeof(orig));
    struct mix_decision cm = {MIX_CUTMIX, 1.0 - 6.0 / 20.0, 1, 1, 4, 3};
    mix_one_hot(labels, n, k, t);
    for (int nchw = 0; nchw < 2; nchw++) {
        memcpy(batch, orig, sizeof(orig));
        mix_apply(&cm, batch, n, h, w, c, nchw, t, k, scratch);
        for (uint32_t s = 0; s < n; s++) {
            uint32_t prev = (s + n - 1) % n;
            for (uint32_t ch = 0; ch < c; ch++)
                for (uint32_t y = 0; y < h; y++)
                    for (uint32_t x = 0; x < w; x++) {
                        size_t at = nchw ? ((size_t)ch * h + y) * w + x : ((size_t)y * w + x) * c + ch;
                        int in = x >= 1 && x < 4 && y >= 1 && y < 3;
                        ck_assert(batch[s * len + at] == orig[(in ? prev : s) * len + at]);
                    }
        }
    }
    /* One sample mixes with itself. */
    memcpy(batch, orig, sizeof(orig));
    mix_one_hot(labels, 1, k, t);
    mix_apply(&mu, batch, 1, h, w, c, 0, t, k, scratch);
    for (size_t i = 0; i < len; i++)
        ck_assert(fabsf(batch[i] - orig[i]) <= 1e-6f * (1.0f + fabsf(orig[i])));
}
END_TEST

/* ---- region-of-interest decoding ---- */

/* The photo decoded whole, re-encoded with each subsampling (and grey),
 * baseline and progressive, at odd and even sizes; random boxes decoded
 * with roi_decode at scales 1, 1/2 and 3/8 must equal TurboJPEG's decode of
 * the whole image at that scale, cut to the box. */
START_TEST(test_roi_matches_full_decode)
{
    static const int subsamp[] = {TJSAMP_444, TJSAMP_422, TJSAMP_420, TJSAMP_440,
                                  TJSAMP_411, TJSAMP_GRAY};
    static const uint32_t scales[][2] = {{1, 1}, {1, 2}, {3, 8}};
    tjhandle dec = tjInitDecompress();
    struct roi_decoder *rd;
    ck_assert_int_eq(roi_decoder_new(&rd), 0);
    uint64_t st = 123;
    long boxes = 0;
    for (size_t p = 0; p < NELEM(photo_names); p++) {
        size_t len;
        uint8_t *jpg = read_photo(photo_names[p], &len);
        int w, h, ss, cs;
        ck_assert_int_eq(tjDecompressHeader3(dec, jpg, (unsigned long)len, &w, &h, &ss, &cs), 0);
        uint8_t *rgb = malloc((size_t)w * h * 3);
        ck_assert_int_eq(tjDecompress2(dec, jpg, (unsigned long)len, rgb, w, 0, h, TJPF_RGB, 0), 0);
        for (size_t si = 0; si < NELEM(subsamp); si++) {
            int prog = (int)((si + p) % 2); /* baseline and progressive both */
            int ew = w - (int)(p * 5 + si), eh = h - (int)(si * 3); /* odd sizes too */
            tjhandle enc = tjInitCompress();
            unsigned char *jb = NULL;
            unsigned long jl = 0;
            ck_assert_int_eq(tjCompress2(enc, rgb, ew, w * 3, eh, TJPF_RGB, &jb, &jl,
                                         subsamp[si], 85, prog ? TJFLAG_PROGRESSIVE : 0), 0);
            tjDestroy(enc);
            for (uint32_t ch = 1; ch <= 3; ch += 2) {
                /* 1 channel only for grey JPEGs here (a colour one becomes L
                 * by Pillow's weights, which TurboJPEG does not do). */
                if (ch == 1 && subsamp[si] != TJSAMP_GRAY)
                    continue;
                for (size_t sc = 0; sc < NELEM(scales); sc++) {
                    uint32_t num = scales[sc][0], den = scales[sc][1], sh, sw;
                    roi_scaled_size((uint32_t)eh, (uint32_t)ew, num, den, &sh, &sw);
                    uint8_t *full = malloc((size_t)sw * sh * ch), *got = malloc((size_t)sw * sh * ch);
                    ck_assert_int_eq(tjDecompress2(dec, jb, jl, full, (int)sw, 0, (int)sh,
                                                   ch == 3 ? TJPF_RGB : TJPF_GRAY, 0), 0);
                    for (int k = 0; k < 40; k++) {
                        struct roi_box b;
                        b.h = 1 + draw_below(&st, sh);
                        b.w = 1 + draw_below(&st, sw);
                        if (k == 0) { /* the whole image */
                            b.h = sh;
                            b.w = sw;
                        }
                        b.top = draw_below(&st, sh - b.h + 1);
                        b.left = draw_below(&st, sw - b.w + 1);
                        char err[256];
                        int rc = roi_decode(rd, jb, jl, ch, num, den, &b, 0, got,
                                            (size_t)b.w * ch, err, sizeof(err));
                        ck_assert_msg(rc == 0, "%s", err);
                        for (uint32_t y = 0; y < b.h; y++)
                            ck_assert_msg(memcmp(got + (size_t)y * b.w * ch,
                                                 full + ((size_t)(b.top + y) * sw + b.left) * ch,
                                                 (size_t)b.w * ch) == 0,
                                          "%s subsampling %d %s %dx%d, %u channels, scale "
                                          "%u/%u: box (%u, %u) %ux%u differs in row %u",
                                          photo_names[p], subsamp[si],
                                          prog ? "progressive" : "baseline", ew, eh, ch, num,
                                          den, b.top, b.left, b.h, b.w, y);
                        boxes++;
                    }
                    free(full);
                    free(got);
                }
            }
            tjFree(jb);
        }
        free(rgb);
        free(jpg);
    }
    printf("roi: %ld random boxes bit-identical to a full decode cut to the box\n", boxes);
    fflush(stdout);
    roi_decoder_free(rd);
    tjDestroy(dec);
}
END_TEST

START_TEST(test_roi_grey_of_colour)
{
    /* One channel of a colour JPEG: Pillow's L of the RGB decode. */
    size_t len;
    uint8_t *jpg = read_photo(photo_names[0], &len);
    tjhandle dec = tjInitDecompress();
    int w, h, ss, cs;
    ck_assert_int_eq(tjDecompressHeader3(dec, jpg, (unsigned long)len, &w, &h, &ss, &cs), 0);
    uint8_t *rgb = malloc((size_t)w * h * 3), *l = malloc((size_t)w * h);
    ck_assert_int_eq(tjDecompress2(dec, jpg, (unsigned long)len, rgb, w, 0, h, TJPF_RGB, 0), 0);
    struct roi_decoder *rd;
    ck_assert_int_eq(roi_decoder_new(&rd), 0);
    struct roi_box b = {37, 101, 200, 150};
    char err[256];
    ck_assert_int_eq(roi_decode(rd, jpg, len, 1, 1, 1, &b, 0, l, b.w, err, sizeof(err)), 0);
    for (uint32_t y = 0; y < b.h; y++)
        for (uint32_t x = 0; x < b.w; x++)
            ck_assert_uint_eq(l[y * b.w + x],
                              color_luma(rgb + ((size_t)(b.top + y) * w + b.left + x) * 3));
    roi_decoder_free(rd);
    tjDestroy(dec);
    free(rgb);
    free(l);
    free(jpg);
}
END_TEST

START_TEST(test_roi_errors)
{
    size_t len;
    uint8_t *jpg = read_photo(photo_names[1], &len);
    struct roi_decoder *rd;
    ck_assert_int_eq(roi_decoder_new(&rd), 0);
    struct roi_header hdr;
    char err[256];
    ck_assert_int_eq(roi_read_header(rd, jpg, len, &hdr, err, sizeof(err)), 0);
    ck_assert_uint_eq(hdr.w, 640);
    ck_assert_uint_eq(hdr.h, 427);
    ck_assert_uint_eq(hdr.components, 3);
    ck_assert(!hdr.cmyk);
    uint8_t *out = malloc(640 * 427 * 3);
    struct roi_box whole = {0, 0, 427, 640}, outside = {400, 0, 28, 10}, empty = {0, 0, 0, 5};
    /* Boxes outside the image, bad scales and channels. */
    ck_assert_int_eq(roi_decode(rd, jpg, len, 3, 1, 1, &outside, 0, out, 30, err, sizeof(err)),
                     -EINVAL);
    ck_assert_int_eq(roi_decode(rd, jpg, len, 3, 1, 1, &empty, 0, out, 30, err, sizeof(err)),
                     -EINVAL);
    ck_assert_int_eq(roi_decode(rd, jpg, len, 2, 1, 1, &whole, 0, out, 1280, err, sizeof(err)),
                     -EINVAL);
    ck_assert_int_eq(roi_decode(rd, jpg, len, 3, 1, 0, &whole, 0, out, 1920, err, sizeof(err)),
                     -EINVAL);
    /* The pixel limit. */
    ck_assert_int_eq(roi_decode(rd, jpg, len, 3, 1, 1, &whole, 1000, out, 1920, err,
                                sizeof(err)), -E2BIG);
    /* Not a JPEG, empty, a truncated header. */
    ck_assert_int_eq(roi_read_header(rd, (const uint8_t *)"hello", 5, &hdr, err, sizeof(err)),
                     -EBADMSG);
    ck_assert_int_eq(roi_decode(rd, jpg, 0, 3, 1, 1, &whole, 0, out, 1920, err, sizeof(err)),
                     -EBADMSG);
    ck_assert_int_eq(roi_decode(rd, jpg, 100, 3, 1, 1, &whole, 0, out, 1920, err, sizeof(err)),
                     -EBADMSG);
    /* Truncated in the middle of the entropy data: an error for a box that
     * reaches past the cut, and the decoder still works after it. */
    ck_assert_int_eq(roi_decode(rd, jpg, len / 2, 3, 1, 1, &whole, 0, out, 1920, err,
                                sizeof(err)), -EBADMSG);
    ck_assert_ptr_nonnull(strstr(err, "decode:"));
    /* Damage inside the data (bytes overwritten): an error. */
    uint8_t *bad = malloc(len);
    memcpy(bad, jpg, len);
    for (size_t i = len / 3; i < len / 3 + 64; i++)
        bad[i] = 0xff;
    ck_assert_int_eq(roi_decode(rd, bad, len, 3, 1, 1, &whole, 0, out, 1920, err, sizeof(err)),
                     -EBADMSG);
    ck_assert_int_eq(roi_decode(rd, jpg, len, 3, 1, 1, &whole, 0, out, 1920, err, sizeof(err)),
                     0);
    /* A CMYK JPEG is left to the whole-image decoder. */
    tjhandle enc = tjInitCompress();
    uint8_t cmyk[16 * 16 * 4];
    memset(cmyk, 100, sizeof(cmyk));
    unsigned char *jb = NULL;
    unsigned long jl = 0;
    ck_assert_int_eq(tjCompress2(enc, cmyk, 16, 64, 16, TJPF_CMYK, &jb, &jl, TJSAMP_444, 90, 0),
                     0);
    ck_assert_int_eq(roi_read_header(rd, jb, jl, &hdr, err, sizeof(err)), 0);
    ck_assert(hdr.cmyk);
    struct roi_box small = {0, 0, 4, 4};
    ck_assert_int_eq(roi_decode(rd, jb, jl, 3, 1, 1, &small, 0, out, 12, err, sizeof(err)),
                     -ENOTSUP);
    tjFree(jb);
    tjDestroy(enc);
    free(bad);
    free(out);
    free(jpg);
    roi_decoder_free(rd);
}
END_TEST

static Suite *augment_suite(int with_photos, int *skipped)
{
    Suite *s = suite_create("augment");
    TCase *tc = tcase_create("draws");
    tcase_add_test(tc, test_draws);
    suite_add_tcase(s, tc);

    tc = tcase_create("operations");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_color_identities);
    tcase_add_test(tc, test_color_in_place);
    tcase_add_test(tc, test_color_jitter);
    tcase_add_test(tc, test_geometry_identities);
    tcase_add_test(tc, test_affine_draw);
    tcase_add_test(tc, test_augment_tables);
    tcase_add_test(tc, test_augment_draws);
    tcase_add_test(tc, test_augment_ops_edge_sizes);
    tcase_add_test(tc, test_blur);
    tcase_add_test(tc, test_erase);
    tcase_add_test(tc, test_mix);
    suite_add_tcase(s, tc);

    if (with_photos) {
        tc = tcase_create("roi");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_roi_matches_full_decode);
        tcase_add_test(tc, test_roi_grey_of_colour);
        tcase_add_test(tc, test_roi_errors);
        suite_add_tcase(s, tc);
    } else {
        *skipped = 3;
    }
    return s;
}

int main(void)
{
    int with_photos = photos_present(), skipped = 0;
    Suite *s = augment_suite(with_photos, &skipped); /* sets skipped: before photos_run reads it */
    return photos_run(s, with_photos, skipped);
}
