/*
 * Private helpers of the format decoders (decode_*.c): the size check and
 * allocation every decoder starts with, errors, and the conversions to
 * PIL's RGB and L that several formats share. The contract is
 * decode_formats.h.
 */
#ifndef PRESTO_DECODE_IMPL_H
#define PRESTO_DECODE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "decode_formats.h"

/* Writes "what: message" into dst->err; returns rc. */
int decode_fail(const struct decode_dst *dst, int rc, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The start of every decode once the header is read: refuses an empty or
 * too large image (w or h 0 or over 2^24; w * h over dst->max_pixels:
 * -E2BIG) and asks dst->alloc for the pixels. what names the format. */
int decode_begin(const struct decode_dst *dst, const char *what, uint64_t w, uint64_t h,
                 uint8_t **px);

/* PIL's convert('L') of an RGB pixel: (19595 R + 38470 G + 7471 B + 2^15)
 * >> 16 (Pillow's L24). */
static inline uint8_t decode_luma(uint32_t r, uint32_t g, uint32_t b)
{
    return (uint8_t)((r * 19595u + g * 38470u + b * 7471u + 0x8000u) >> 16);
}

/* A palette as PIL holds one: 256 RGB entries; those a file does not give
 * are PIL's default grey ramp (i, i, i). */
struct decode_palette {
    uint8_t rgb[256][3];
};
void decode_palette_ramp(struct decode_palette *p);

/* One output row of n pixels from n pixels of RGB samples step bytes apart
 * (3 for RGB, 4 to skip an alpha or pad byte): copied, or made grey. */
void decode_row_rgb(const struct decode_dst *dst, const uint8_t *in, size_t step, size_t n,
                    uint8_t *out);
/* From n grey samples, step bytes apart (2 skips an alpha byte). */
void decode_row_grey(const struct decode_dst *dst, const uint8_t *in, size_t step, size_t n,
                     uint8_t *out);
/* From n palette indices (one byte each). */
void decode_row_index(const struct decode_dst *dst, const struct decode_palette *pal,
                      const uint8_t *in, size_t n, uint8_t *out);

/* Unpacks n samples of bits (1, 2 or 4) per sample, most significant bits
 * first as PNG, BMP, PBM and TIFF store them, to one byte each, multiplied
 * by scale (1 for palette indices; 255, 85, 17 for grey as PIL scales it). */
void decode_unpack_bits(const uint8_t *in, uint32_t bits, size_t n, uint32_t scale,
                        uint8_t *out);

#endif
