/*
 * roibench: what region-of-interest decoding saves a random crop.
 *
 *     roibench DIR [SAMPLES] [ROUNDS]
 *
 * For SAMPLES JPEGs of DIR (an ImageFolder tree, files in sorted order;
 * default 400) and ROUNDS crops of each (default 3), draws the box of
 * RandomResizedCrop(224) (torchvision's scale and ratio) for the image's
 * size and times, on one thread and in turn:
 *   full      TurboJPEG decode of the whole image (what decode does), then
 *             the box copied out
 *   roi       daemon/steps/jpeg_roi.c: only the box (and its one-iMCU margin)
 *   roi-dct   the same at the smallest DCT scale of 1/8, 1/4, 3/8, 1/2 that
 *             keeps the box at least 5/4 of 224 on each side (decode's
 *             dct_scale rule), else 1/1
 * and checks that roi gave full's pixels. Prints one JSON line: microseconds
 * per crop for each, and the ratios full / roi and full / roi-dct.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <turbojpeg.h>

#include "hash.h"
#include "step.h"
#include "step_impl.h"
#include "steps/jpeg_roi.h"
#include "jpegdir.h"

#define OUT_SIZE 224

struct file {
    uint8_t *data;
    size_t len;
};

static struct jpegdir dir;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* decode's dct_scale rule for a box: the smallest factor that keeps 5/4 of
 * the output on each side. */
static void box_scale(uint32_t bh, uint32_t bw, uint32_t *num, uint32_t *den)
{
    static const uint32_t nums[] = {1, 2, 3, 4}; /* eighths */
    *num = *den = 1;
    for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
        uint64_t sh = ((uint64_t)bh * nums[i] + 7) / 8, sw = ((uint64_t)bw * nums[i] + 7) / 8;
        if (sh * 4 >= OUT_SIZE * 5 && sw * 4 >= OUT_SIZE * 5) {
            *num = nums[i];
            *den = 8;
            return;
        }
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: roibench DIR [SAMPLES] [ROUNDS]\n");
        return 2;
    }
    size_t want = argc > 2 ? strtoul(argv[2], NULL, 10) : 400;
    int rounds = argc > 3 ? atoi(argv[3]) : 3;
    jpegdir_collect(&dir, argv[1], 0);
    if (dir.n == 0) {
        fprintf(stderr, "roibench: no .jpg under %s\n", argv[1]);
        return 1;
    }
    if (want > dir.n)
        want = dir.n;
    struct file *files = calloc(want, sizeof(*files));
    for (size_t i = 0; i < want; i++)
        if (jpegdir_read(dir.paths[i], &files[i].data, &files[i].len) < 0) {
            fprintf(stderr, "roibench: cannot read %s\n", dir.paths[i]);
            return 1;
        }

    struct step rrc;
    char err[256];
    if (step_init_simple(&rrc, "random_resized_crop", "224", err, sizeof(err)) < 0) {
        fprintf(stderr, "roibench: %s\n", err);
        return 1;
    }
    tjhandle tj = tjInitDecompress();
    struct roi_decoder *rd;
    if (tj == NULL || roi_decoder_new(&rd) < 0)
        return 1;
    size_t cap = 0;
    uint8_t *full = NULL, *crop = NULL, *roi = NULL;
    double t_full = 0, t_roi = 0, t_dct = 0;
    size_t crops = 0, mismatches = 0, skipped = 0;
    uint64_t px_full = 0, px_box = 0;

    for (int r = 0; r < rounds; r++) {
        for (size_t i = 0; i < want; i++) {
            struct roi_header hdr;
            if (roi_read_header(rd, files[i].data, files[i].len, &hdr, err, sizeof(err)) < 0 ||
                hdr.cmyk) {
                skipped++;
                continue;
            }
            struct step_box b;
            step_rrc_params(&rrc, hash_mix64((uint64_t)r * 1000003u + i), hdr.h, hdr.w, &b);
            size_t need = (size_t)hdr.h * hdr.w * 3;
            if (need > cap) {
                cap = need;
                full = realloc(full, cap);
                crop = realloc(crop, cap);
                roi = realloc(roi, cap);
            }
            double t0 = now();
            if (tjDecompress2(tj, files[i].data, (unsigned long)files[i].len, full,
                              (int)hdr.w, 0, (int)hdr.h, TJPF_RGB, 0) < 0) {
                skipped++;
                continue;
            }
            for (uint32_t y = 0; y < b.h; y++)
                memcpy(crop + (size_t)y * b.w * 3,
                       full + ((size_t)(b.top + y) * hdr.w + b.left) * 3, (size_t)b.w * 3);
            double t1 = now();
            struct roi_box box = {b.top, b.left, b.h, b.w};
            int rc = roi_decode(rd, files[i].data, files[i].len, 3, 1, 1, &box, 0, roi,
                                (size_t)b.w * 3, err, sizeof(err));
            double t2 = now();
            uint32_t num, den;
            box_scale(b.h, b.w, &num, &den);
            /* The box at that scale: its scaled extent, rounded outwards. */
            uint32_t sh, sw;
            roi_scaled_size(hdr.h, hdr.w, num, den, &sh, &sw);
            struct roi_box sbox;
            sbox.top = (uint32_t)((uint64_t)b.top * num / den);
            sbox.left = (uint32_t)((uint64_t)b.left * num / den);
            uint32_t bottom = (uint32_t)(((uint64_t)(b.top + b.h) * num + den - 1) / den);
            uint32_t right = (uint32_t)(((uint64_t)(b.left + b.w) * num + den - 1) / den);
            sbox.h = (bottom < sh ? bottom : sh) - sbox.top;
            sbox.w = (right < sw ? right : sw) - sbox.left;
            double t3 = now();
            int rc2 = roi_decode(rd, files[i].data, files[i].len, 3, num, den, &sbox, 0, full,
                                 (size_t)sbox.w * 3, err, sizeof(err));
            double t4 = now();
            if (rc < 0 || rc2 < 0) {
                fprintf(stderr, "roibench: %s: %s\n", dir.paths[i], err);
                return 1;
            }
            mismatches += memcmp(crop, roi, (size_t)b.h * b.w * 3) != 0;
            t_full += t1 - t0;
            t_roi += t2 - t1;
            t_dct += t4 - t3;
            px_full += (uint64_t)hdr.h * hdr.w;
            px_box += (uint64_t)b.h * b.w;
            crops++;
        }
    }
    if (crops == 0) {
        fprintf(stderr, "roibench: no crop decoded\n");
        return 1;
    }
    printf("{\"crops\": %zu, \"skipped\": %zu, \"box_area_fraction\": %.3f, "
           "\"full_us\": %.1f, \"roi_us\": %.1f, \"roi_dct_us\": %.1f, "
           "\"full_over_roi\": %.2f, \"full_over_roi_dct\": %.2f, \"mismatches\": %zu}\n",
           crops, skipped, (double)px_box / (double)px_full, t_full / crops * 1e6,
           t_roi / crops * 1e6, t_dct / crops * 1e6, t_full / t_roi, t_full / t_dct,
           mismatches);
    roi_decoder_free(rd);
    tjDestroy(tj);
    return mismatches ? 1 : 0;
}
