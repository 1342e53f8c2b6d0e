/*
 * stepbench: what each online image step costs per sample, on one thread.
 *
 *     stepbench DIR [ROUNDS] [FILES]
 *
 * Decodes the first FILES JPEGs under DIR (an ImageFolder tree or a flat
 * folder, files in sorted order; default 256) with the decode
 * step, then times, over ROUNDS seeds per image (default 20):
 *   random_resized_crop 224   on the full-resolution pixels
 *   random_flip               (p 0.5) on the 224x224 crop
 *   normalize nchw            (ImageNet mean and std) on the crop, into the
 *                             slots of a batch of 64 in turn (as a stream's
 *                             last step writes: memory the cache does not hold)
 *   normalize_nhwc            the same into interleaved floats (layout nhwc)
 *   rrc_flip_normalize_fused  the three as the pipeline runs them, in one
 *                             (step_decode_rrc_tail_apply), into the next slot;
 *                             fused_equal: its digest is normalize's
 *   each op of TrivialAugmentWide (bilinear, fill 0) on the crop, at the
 *   magnitude of bin 15 of 31, signs alternating with the round
 * and prints one JSON line: microseconds of this thread's CPU time per call of each, and an XXH64 of
 * every output (the same digests before and after a kernel change: the same
 * bytes, which the fidelity suite ties to torchvision's).
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hash.h"
#include "img.h"
#include "proto.h"
#include "step.h"
#include "step_impl.h"
#include "steps/augment.h"
#include "jpegdir.h"

#define OUT 224
#define BATCH 64                               /* slots normalize writes into, in turn */
#define SLOT_BYTES ((size_t)OUT * OUT * 3 * 4) /* a float32 224x224 RGB sample */

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); /* CPU time: a loaded machine's other work left out */
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int read_file(const char *path, struct img *f)
{
    memset(f, 0, sizeof(*f));
    f->fmt = IMG_ENCODED;
    int rc = jpegdir_read(path, &f->data, &f->len);
    f->cap = f->len;
    return rc;
}

static struct jpegdir dir;

struct acc {
    const char *name;
    double us;
    unsigned long calls;
    uint64_t digest;
};

static void acc_add(struct acc *a, double us, const void *p, size_t len)
{
    a->us += us;
    a->calls++;
    a->digest = hash_combine(a->digest, hash_xxh64(p, len));
}

static void die(const char *what, const char *err)
{
    fprintf(stderr, "stepbench: %s: %s\n", what, err);
    exit(1);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: stepbench DIR [ROUNDS] [FILES] [crop]\n");
        return 2;
    }
    /* "crop": the crop, flip and normalize cases alone (a kernel's quick A/B) */
    int crop_only = argc > 4 && strcmp(argv[4], "crop") == 0;
    int rounds = argc > 2 ? atoi(argv[2]) : 20;
    size_t files_max = argc > 3 && atoi(argv[3]) > 0 ? (size_t)atoi(argv[3]) : 256;
    jpegdir_collect(&dir, argv[1], 0);
    if (dir.n > files_max)
        dir.n = files_max;
    if (dir.n == 0)
        die(argv[1], "no .jpg files");

    char err[256];
    struct step dec, rrc, flip, norm, norm_nhwc;
    struct step_args nargs = {
        .a = {{.key = "mean", .v = {"0.485", "0.456", "0.406"}, .n = 3, .list = 1},
              {.key = "std", .v = {"0.229", "0.224", "0.225"}, .n = 3, .list = 1},
              {.key = "layout", .v = {"nchw"}, .n = 1}},
        .n = 3};
    if (step_init_simple(&dec, "decode", NULL, err, sizeof(err)) < 0 ||
        step_init_simple(&rrc, "random_resized_crop", "224", err, sizeof(err)) < 0 ||
        step_init_simple(&flip, "random_flip", NULL, err, sizeof(err)) < 0 ||
        step_init(&norm, "normalize", &nargs, NULL, err, sizeof(err)) < 0)
        die("steps", err);
    nargs.a[2].v[0] = "nhwc";
    if (step_init(&norm_nhwc, "normalize", &nargs, NULL, err, sizeof(err)) < 0)
        die("steps", err);

    struct step_ctx ctx;
    step_ctx_init(&ctx);
    struct acc a_rrc = {"random_resized_crop", 0, 0, 0}, a_flip = {"random_flip", 0, 0, 0},
               a_norm = {"normalize", 0, 0, 0}, a_nhwc = {"normalize_nhwc", 0, 0, 0},
               a_fused = {"rrc_flip_normalize_fused", 0, 0, 0};
    struct acc a_op[AUG_SPACE_OPS];
    for (int op = 0; op < AUG_SPACE_OPS; op++)
        a_op[op] = (struct acc){aug_op_name((enum aug_op)op), 0, 0, 0};
    static const uint8_t fill[3] = {0, 0, 0};
    uint8_t *batch = aligned_alloc(64, (size_t)BATCH * SLOT_BYTES);
    unsigned long nslot = 0;
    if (batch == NULL)
        die("batch", "out of memory");

    for (size_t f = 0; f < dir.n; f++) {
        struct img file, pix = {0}, crop = {0}, flipped = {0};
        if (read_file(dir.paths[f], &file) < 0)
            die(dir.paths[f], "unreadable");
        if (step_apply(&dec, &ctx, &file, &pix) < 0)
            die(dir.paths[f], ctx.err);
        uint8_t *dst = malloc((size_t)OUT * OUT * 3);
        for (int r = 0; r < rounds; r++) {
            ctx.seed = hash_mix64((uint64_t)f * 1000 + (uint64_t)r);
            double t0 = now_us();
            if (step_apply(&rrc, &ctx, &pix, &crop) < 0)
                die("random_resized_crop", ctx.err);
            double t1 = now_us();
            acc_add(&a_rrc, t1 - t0, crop.data, crop.len);
            if (crop.c != 3)
                continue;
            t0 = now_us();
            step_apply(&flip, &ctx, &crop, &flipped);
            t1 = now_us();
            acc_add(&a_flip, t1 - t0, flipped.data, flipped.len);
            t0 = now_us();
            /* into the next slot of a batch, as the pipeline's last step */
            struct img fl = {.fmt = IMG_PIXELS, .cap = SLOT_BYTES, .borrowed = 1,
                             .data = batch + (size_t)(nslot++ % BATCH) * SLOT_BYTES};
            if (step_apply(&norm, &ctx, &flipped, &fl) < 0)
                die("normalize", ctx.err);
            t1 = now_us();
            acc_add(&a_norm, t1 - t0, fl.data, fl.len);
            struct img nh = {.fmt = IMG_PIXELS, .cap = SLOT_BYTES, .borrowed = 1,
                             .data = batch + (size_t)(nslot++ % BATCH) * SLOT_BYTES};
            t0 = now_us();
            if (step_apply(&norm_nhwc, &ctx, &flipped, &nh) < 0)
                die("normalize nhwc", ctx.err);
            t1 = now_us();
            acc_add(&a_nhwc, t1 - t0, nh.data, nh.len);
            /* the three in one, as a stream runs them (the pipeline fuses
             * them): its digest is normalize's when the bytes are the same */
            struct img fu = {.fmt = IMG_PIXELS, .cap = SLOT_BYTES, .borrowed = 1,
                             .data = batch + (size_t)(nslot++ % BATCH) * SLOT_BYTES};
            t0 = now_us();
            if (step_decode_rrc_tail_apply(NULL, &rrc, step_flip_decide(flip.p, ctx.seed),
                                           &norm, &ctx, &pix, &fu) < 0)
                die("random_resized_crop + random_flip + normalize", ctx.err);
            t1 = now_us();
            acc_add(&a_fused, t1 - t0, fu.data, fu.len);
            for (int op = 0; op < AUG_SPACE_OPS && !crop_only; op++) {
                double m = aug_op_has_magnitudes((enum aug_op)op)
                               ? aug_magnitude(AUG_TRIVIAL_WIDE, (enum aug_op)op, 31,
                                               (uint32_t)(r % 31), OUT, OUT)
                               : 0.0;
                if ((r & 1) && aug_op_signed((enum aug_op)op))
                    m = -m;
                t0 = now_us();
                aug_apply_op((enum aug_op)op, m, GEOM_BILINEAR, fill, crop.data, dst, OUT,
                             OUT, 3);
                t1 = now_us();
                acc_add(&a_op[op], t1 - t0, dst, (size_t)OUT * OUT * 3);
            }
        }
        free(dst);
        img_free(&file);
        img_free(&pix);
        img_free(&crop);
        img_free(&flipped);
    }
    step_ctx_free(&ctx);
    free(batch);

    printf("{\"images\": %zu, \"rounds\": %d", dir.n, rounds);
    struct acc *all[4 + AUG_SPACE_OPS] = {&a_rrc, &a_flip, &a_norm, &a_fused};
    for (int op = 0; op < AUG_SPACE_OPS; op++)
        all[4 + op] = &a_op[op];
    double ta = 0;
    for (int i = 0; i < 4 + AUG_SPACE_OPS; i++) {
        struct acc *a = all[i];
        if (i >= 4 && crop_only)
            break;
        double us = a->calls ? a->us / a->calls : 0;
        if (i >= 4)
            ta += us / AUG_SPACE_OPS;
        printf(", \"%s\": {\"us\": %.1f, \"xxh64\": \"%016llx\"}", a->name, us,
               (unsigned long long)a->digest);
    }
    printf(", \"%s\": {\"us\": %.1f, \"xxh64\": \"%016llx\"}", a_nhwc.name,
           a_nhwc.calls ? a_nhwc.us / a_nhwc.calls : 0, (unsigned long long)a_nhwc.digest);
    printf(", \"fused_equal\": %s", a_fused.digest == a_norm.digest ? "true" : "false");
    printf(", \"trivial_augment_wide_mean_us\": %.1f}\n", ta);
    return 0;
}
