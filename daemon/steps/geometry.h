/*
 * Geometric operations on HWC uint8 images (1 or 3 channels), equal to
 * torchvision.transforms.functional on a PIL image: F.affine builds its
 * inverse matrix in double precision (_get_inverse_affine_matrix) and calls
 * Image.transform(size, AFFINE, matrix, resample, fillcolor), F.rotate calls
 * Image.rotate(angle, resample, expand=False, fillcolor). These repeat
 * Pillow 9's engines (libImaging/Geometry.c) exactly:
 *
 * - nearest, matrix without rotation or shear (a[1] == a[3] == 0): the
 *   scale path, source columns stepped in double precision;
 * - nearest otherwise: 16.16 fixed point when the four corners map inside
 *   +-32768, else double precision stepping;
 * - bilinear: each output pixel's centre mapped in double precision, the
 *   2x2 neighbours (edges clamped) interpolated in double, truncated;
 * - outside the source: the fill colour.
 *
 * Image.rotate reduces the angle modulo 360, copies at 0, turns the image
 * at 180 (and at 90 and 270 when it is square) without resampling, and
 * otherwise rounds cos and sin of the angle to 15 decimals (Python's round,
 * done here with a correctly rounded printf and strtod) about the centre
 * (w / 2, h / 2).
 *
 * src and dst hold h * w * c bytes and must not overlap; fill holds c
 * values. Nothing allocates or fails.
 */
#ifndef PRESTO_STEPS_GEOMETRY_H
#define PRESTO_STEPS_GEOMETRY_H

#include <stdint.h>

enum geom_interp { GEOM_NEAREST = 0, GEOM_BILINEAR = 1 };

/* torchvision's _get_inverse_affine_matrix(center, angle, translate, scale,
 * shear) with inverted=True: angles in degrees, clockwise; m maps output
 * pixel coordinates to source ones (Pillow's AFFINE data). */
void geom_inverse_matrix(double cx, double cy, double angle, double tx, double ty,
                         double scale, double shear_x, double shear_y, double m[6]);

/* Image.transform((w, h), AFFINE, m, resample, fillcolor=fill). */
void geom_transform(const uint8_t *src, uint8_t *dst, uint32_t h, uint32_t w, uint32_t c,
                    const double m[6], enum geom_interp interp, const uint8_t *fill);

/* F.affine(img, angle, [tx, ty], scale, [shear_x, shear_y], interp, fill,
 * center): center NULL is torchvision's (w * 0.5, h * 0.5). tx and ty are
 * whole pixels, as torchvision takes them. */
void geom_affine(const uint8_t *src, uint8_t *dst, uint32_t h, uint32_t w, uint32_t c,
                 double angle, int32_t tx, int32_t ty, double scale, double shear_x,
                 double shear_y, const double *center, enum geom_interp interp,
                 const uint8_t *fill);

/* F.rotate(img, angle, interp, expand=False, center=None, fill): degrees,
 * counter-clockwise. */
void geom_rotate(const uint8_t *src, uint8_t *dst, uint32_t h, uint32_t w, uint32_t c,
                 double angle, enum geom_interp interp, const uint8_t *fill);

/* RandomAffine(degrees, translate, scale, shear, interpolation, fill): the
 * ranges as torchvision keeps them (degrees [lo, hi]; translate the largest
 * fractions of the width and height, or off; scale [lo, hi] or off; shear
 * x [lo, hi] and y [lo, hi], each possibly off). RandomRotation is the
 * angle alone (Image.rotate, not an affine matrix). */
struct geom_affine_params {
    double degrees[2];
    int translate_on, scale_on, shear_on[2];
    double translate[2], scale[2], shear[2][2];
};

struct geom_affine_decision {
    double angle, scale, shear_x, shear_y;
    int32_t tx, ty;
};

/* RandomAffine.get_params for an h x w image: angle uniform; tx =
 * int(round(uniform(-translate[0] * w, translate[0] * w))) (half to even),
 * ty likewise with h; scale uniform; shear x, then y, uniform. */
void geom_affine_draw(const struct geom_affine_params *p, uint64_t *st, uint32_t h,
                      uint32_t w, struct geom_affine_decision *d);

#endif
