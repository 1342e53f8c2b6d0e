/*
 * libFuzzer target: a sample file through the pipeline steps (the modules of daemon/steps:
 * TurboJPEG decode, resize, crops, flip, pad, float conversion), as a
 * worker runs them on whatever lies in a dataset directory.
 *
 * Input: three knob bytes, then the file's bytes. Knob 0 picks the pipeline:
 *   0x01 decode mode grey (else rgb)   0x02 decode with dct_scale
 *   0x0c resize: none, 7 (shorter side), [13, 5], 64 (dct_scale: 7 at least)
 *   0x10 random_resized_crop (else center_crop)
 *   0x20 pad [1, 2, 3, 4] with fill 7   0x40 to_float nchw   0x80 normalize
 * Knob 1 sets the crop size (1 + knob % 32) and the per-sample seed.
 * Knob 2 under 0x80: the bytes are a file for decode; else they are pixels
 * (1 or 3 channels as the decode mode says) of an image 1 + (knob & 0x3f)
 * rows high, as wide as they go, fed to the steps after decode (mutated
 * JPEGs rarely decode, so this is how the other steps see odd shapes).
 * Every pipeline ends with random_flip. The decoder refuses images over
 * 4 Mpixels, as prestod's limits.pixels does.
 *
 * Besides "no crash, no sanitizer report", it checks that a step either
 * fails with a message and -E2BIG, -ENOMEM, or (decode only) -EBADMSG, or
 * makes pixels of the shape, dtype and byte length step_out_shape and
 * step_out_dtype promise.
 */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "hash.h"
#include "proto.h"
#include "step.h"

#define MAX_STEPS 8
#define MAX_PIXELS (4u << 20)

struct pipe {
    struct step steps[MAX_STEPS];
    uint32_t n;
};

static void add(struct pipe *p, const char *name, const struct step_args *args)
{
    char err[256];
    FUZZ_CHECK(p->n < MAX_STEPS);
    if (step_init(&p->steps[p->n], name, args, NULL, err, sizeof(err)) < 0) {
        fprintf(stderr, "step %s: %s\n", name, err);
        abort();
    }
    p->n++;
}

/* One parameter: key (NULL: the main one) with one or two values. */
static struct step_args one(const char *key, const char *v0, const char *v1)
{
    struct step_args a = {.n = 1};
    a.a[0].key = key;
    a.a[0].v[0] = v0;
    a.a[0].v[1] = v1;
    a.a[0].n = v1 ? 2 : 1;
    a.a[0].list = v1 != NULL;
    return a;
}

static void build(struct pipe *p, uint8_t k0, uint8_t k1, char *crop)
{
    static const char *const resizes[] = {NULL, "7", "13", "64"};
    struct step_args a = {.n = 2};
    int grey = k0 & 0x01, dct = k0 & 0x02, resize = (k0 >> 2) & 3;

    p->n = 0;
    a.a[0].key = "mode";
    a.a[0].v[0] = grey ? "grey" : "rgb";
    a.a[0].n = 1;
    a.a[1].key = "dct_scale";
    a.a[1].v[0] = dct ? "true" : "false";
    a.a[1].n = 1;
    add(p, "decode", &a);
    if (dct && resize == 0)
        resize = 1; /* dct_scale needs the resize it decodes for */
    if (resize == 2) {
        struct step_args r = one(NULL, "13", "5");
        add(p, "resize", &r);
    } else if (resize) {
        struct step_args r = one(NULL, resizes[resize], NULL);
        add(p, "resize", &r);
    }
    snprintf(crop, 8, "%u", 1u + k1 % 32);
    struct step_args c = one(NULL, crop, NULL);
    add(p, k0 & 0x10 ? "random_resized_crop" : "center_crop", &c);
    struct step_args f = one(NULL, "0.5", NULL);
    add(p, "random_flip", &f);
    if (k0 & 0x20) {
        struct step_args pad = {.n = 2};
        pad.a[0] = (struct step_arg){.key = "padding", .v = {"1", "2", "3", "4"}, .n = 4,
                                     .list = 1};
        pad.a[1] = (struct step_arg){.key = "fill", .v = {"7"}, .n = 1};
        add(p, "pad", &pad);
    }
    if (k0 & 0x80) {
        struct step_args norm = {.n = 2};
        norm.a[0] = (struct step_arg){.key = "mean", .v = {"0.5"}, .n = 1, .list = 1};
        norm.a[1] = (struct step_arg){.key = "std", .v = {"0.25"}, .n = 1, .list = 1};
        add(p, "normalize", &norm);
    } else if (k0 & 0x40) {
        struct step_args tf = one(NULL, "nchw", NULL);
        add(p, "to_float", &tf);
    }
    char err[256];
    uint32_t bad;
    if (step_chain_init(p->steps, p->n, &bad, err, sizeof(err)) < 0) {
        fprintf(stderr, "pipeline: step %u: %s\n", bad, err);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct step_ctx ctx; /* one per worker thread, reused: so here too */
    static int ready;
    struct pipe p;
    char crop[8];

    if (size < 3)
        return 0;
    if (!ready) {
        step_ctx_init(&ctx);
        ready = 1;
    }
    ctx.max_pixels = MAX_PIXELS;
    ctx.seed = hash_mix64(data[1]);
    build(&p, data[0], data[1], crop);

    /* The bytes, in a buffer of their exact size (ASan sees any overread). */
    struct img in = {.fmt = IMG_ENCODED, .len = size - 3};
    uint32_t h = 0, w = 0, c = 0, dtype = PROTO_DTYPE_U8, first = 0;
    if (data[2] & 0x80) { /* pixels, for the steps after decode */
        c = data[0] & 0x01 ? 1 : 3;
        h = 1 + (data[2] & 0x3f);
        w = (uint32_t)(in.len / ((size_t)h * c));
        if (w == 0)
            return 0;
        in = (struct img){.fmt = IMG_PIXELS, .h = h, .w = w, .c = c, .dtype = dtype,
                          .len = (size_t)h * w * c};
        first = 1;
    }
    in.data = malloc(in.len ? in.len : 1);
    FUZZ_CHECK(in.data != NULL);
    memcpy(in.data, data + 3, in.len);
    in.cap = in.len;

    struct img bufs[2] = {{0}, {0}};
    const struct img *cur = &in;
    for (uint32_t i = first; i < p.n; i++) {
        const struct step *s = &p.steps[i];
        struct img *out = &bufs[i & 1];
        uint32_t eh, ew, ec;
        step_out_shape(s, h, w, c, &eh, &ew, &ec);
        uint32_t edtype = step_out_dtype(s, dtype);
        ctx.err[0] = '\0';
        int rc = step_apply(s, &ctx, cur, out);
        if (rc < 0) {
            /* Only decode may call a file bad; any step may find the image
             * too large (resize: an output side over 65535, as a 1045x1
             * image resized to a shorter side of 64 would have). */
            if (rc != -E2BIG && rc != -ENOMEM && (i > 0 || rc != -EBADMSG))
                fprintf(stderr, "step %u (%s) refused a %ux%ux%u image: %d %s\n", i,
                        step_name(s->kind), cur->h, cur->w, cur->c, rc, ctx.err);
            FUZZ_CHECK(rc == -E2BIG || rc == -ENOMEM || (i == 0 && rc == -EBADMSG));
            FUZZ_CHECK(ctx.err[0] != '\0');
            break;
        }
        FUZZ_CHECK(out->fmt == IMG_PIXELS);
        FUZZ_CHECK(out->h > 0 && out->w > 0 && out->c > 0);
        FUZZ_CHECK(eh == 0 || out->h == eh);
        FUZZ_CHECK(ew == 0 || out->w == ew);
        FUZZ_CHECK(ec == 0 || out->c == ec);
        FUZZ_CHECK(out->dtype == edtype);
        FUZZ_CHECK(out->len == (size_t)out->h * out->w * out->c * proto_dtype_size(out->dtype));
        FUZZ_CHECK(out->len <= out->cap || out->borrowed);
        if (i == 0)
            FUZZ_CHECK((uint64_t)out->h * out->w <= MAX_PIXELS);
        h = out->h;
        w = out->w;
        c = out->c;
        dtype = out->dtype;
        cur = out;
    }
    img_free(&bufs[0]);
    img_free(&bufs[1]);
    free(in.data);
    return 0;
}
