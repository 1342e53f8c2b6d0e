/* Unit tests for the pipeline steps (daemon/steps/step.h): declarations, decode
 * (bit-exact with PIL), resize (Pillow's antialiased bilinear, every kernel
 * of daemon/steps/step_impl.h this machine can run), center_crop
 * (torchvision's offsets and padding), random_flip (seeded), and a
 * throughput figure for the default offline pipeline.
 *
 * Real photos come from $PRESTO_PHOTOS, else ../shared/photos (tests run
 * from the repository root). PIL references run $PYTHON (default
 * /usr/bin/python3); those comparisons are skipped with a message when it
 * cannot import PIL. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "hash.h"
#include "proto.h"
#include "step.h"
#include "photos.h"
#include "step_impl.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

struct photo {
    const char *name;
    uint32_t w, h;
};

static const struct photo photos[] = {
    {"china.jpg", 640, 427},
    {"flower.jpg", 640, 427},
    {"grace_hopper.jpg", 512, 600},
};

/* ---- helpers: files, python, images ---- */

static void photo_path(const char *name, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s/%s", photos_dir(), name);
    ck_assert_msg(n > 0 && (size_t)n < len, "photo path too long");
}

/* Reads a whole file into an IMG_ENCODED image with an owned buffer. */
static void read_encoded(const char *path, struct img *im)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s (set PRESTO_PHOTOS?)", path);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    long size = ftell(f);
    ck_assert_msg(size > 0, "%s is empty", path);
    rewind(f);
    memset(im, 0, sizeof(*im));
    ck_assert_int_eq(img_reserve(im, (size_t)size), 0);
    ck_assert_uint_eq(fread(im->data, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    im->fmt = IMG_ENCODED;
    im->len = (size_t)size;
}

static void read_photo(const struct photo *ph, struct img *im)
{
    char path[4096];
    photo_path(ph->name, path, sizeof(path));
    read_encoded(path, im);
}

static void write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot create %s", path);
    ck_assert_uint_eq(fwrite(data, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
}

/* A temporary file name; the file exists (empty) until unlinked. */
static void temp_path(char *buf, size_t len)
{
    const char *dir = getenv("TMPDIR");
    snprintf(buf, len, "%s/presto-test-steps-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(buf);
    ck_assert_msg(fd >= 0, "mkstemp(%s): %s", buf, strerror(errno));
    close(fd);
}

static const char *python(void)
{
    const char *py = getenv("PYTHON");
    return py && *py ? py : "/usr/bin/python3";
}

static int pil_available(void)
{
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "'%s' -c 'import PIL' >/dev/null 2>&1", python());
    int st = system(cmd);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        printf("SKIP: %s cannot import PIL; PIL comparison skipped\n", python());
        fflush(stdout);
        return 0;
    }
    return 1;
}

/* Runs `$PYTHON -c SCRIPT ARGS` (SCRIPT without single quotes, ARGS already
 * shell-safe) and reads exactly len bytes of its stdout into buf. */
static void python_bytes(const char *script, const char *args, uint8_t *buf,
                         size_t len)
{
    char cmd[8192];
    int n = snprintf(cmd, sizeof(cmd), "'%s' -c '%s' %s", python(), script, args);
    ck_assert_msg(n > 0 && (size_t)n < sizeof(cmd), "python command too long");
    FILE *p = popen(cmd, "r");
    ck_assert_msg(p != NULL, "popen(%s) failed", python());
    size_t got = 0, r;
    while (got < len && (r = fread(buf + got, 1, len - got, p)) > 0)
        got += r;
    uint8_t extra;
    size_t more = fread(&extra, 1, 1, p);
    int st = pclose(p);
    ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "python reference failed: %s", cmd);
    ck_assert_msg(got == len && more == 0, "python reference wrote %s%zu bytes, want %zu",
                  more ? "more than " : "", got, len);
}

#define PY_DECODE                                                           \
    "from PIL import Image;import sys;"                                     \
    "sys.stdout.buffer.write(Image.open(sys.argv[1]).convert(\"RGB\").tobytes())"
#define PY_BILINEAR "getattr(Image, \"Resampling\", Image).BILINEAR"
#define PY_RESIZE_FILE                                                      \
    "from PIL import Image;import sys;"                                     \
    "im=Image.open(sys.argv[1]).convert(\"RGB\");"                          \
    "sys.stdout.buffer.write(im.resize((int(sys.argv[2]),int(sys.argv[3])),"\
    PY_BILINEAR ").tobytes())"
#define PY_RESIZE_RAW                                                       \
    "from PIL import Image;import sys;a=[int(v) for v in sys.argv[2:]];"    \
    "im=Image.frombytes({1:\"L\",3:\"RGB\"}[a[2]],(a[0],a[1]),"             \
    "open(sys.argv[1],\"rb\").read());"                                     \
    "sys.stdout.buffer.write(im.resize((a[3],a[4])," PY_BILINEAR ").tobytes())"

static void pil_decode(const char *path, uint8_t *buf, size_t len)
{
    char args[4200];
    snprintf(args, sizeof(args), "'%s'", path);
    python_bytes(PY_DECODE, args, buf, len);
}

struct diff {
    unsigned max;
    double mean;
    size_t differing;
};

static struct diff compare(const uint8_t *a, const uint8_t *b, size_t len)
{
    struct diff d = {0, 0.0, 0};
    uint64_t sum = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned v = a[i] > b[i] ? a[i] - b[i] : b[i] - a[i];
        sum += v;
        d.differing += v != 0;
        if (v > d.max)
            d.max = v;
    }
    d.mean = len ? (double)sum / len : 0.0;
    return d;
}

static void make_pixels(struct img *im, uint32_t h, uint32_t w, uint32_t c)
{
    memset(im, 0, sizeof(*im));
    ck_assert_int_eq(img_reserve(im, (size_t)h * w * c), 0);
    im->fmt = IMG_PIXELS;
    im->h = h;
    im->w = w;
    im->c = c;
    im->dtype = PROTO_DTYPE_U8;
    im->len = (size_t)h * w * c;
}

/* Deterministic noisy pixels with some smooth structure. */
static void fill_pattern(struct img *im, uint64_t seed)
{
    for (size_t i = 0; i < im->len; i++) {
        uint64_t r = hash_mix64(seed + i);
        im->data[i] = (uint8_t)((i / im->c) % 251 + (r & 3) * 7);
    }
}

static void apply_ok(const struct step *s, struct step_ctx *ctx, const struct img *in,
                     struct img *out)
{
    char desc[64];
    step_describe(s, desc, sizeof(desc));
    int rc = step_apply(s, ctx, in, out);
    ck_assert_msg(rc == 0, "%s failed: %d (%s)", desc, rc, ctx->err);
    ck_assert_int_eq(out->fmt, IMG_PIXELS);
    ck_assert_uint_eq(out->dtype, step_out_dtype(s, in->dtype));
    ck_assert_uint_eq(out->len, (size_t)out->h * out->w * out->c * proto_dtype_size(out->dtype));
}

static struct step make_step(const char *name, const char *arg)
{
    struct step s;
    char err[256] = "";
    int rc = step_init_simple(&s, name, arg, err, sizeof(err));
    ck_assert_msg(rc == 0, "step_init(%s, %s): %d %s", name, arg ? arg : "NULL", rc, err);
    return s;
}

/* Parameters written as "KEY=VALUE;KEY=[V,V]" (no KEY=: the main one),
 * as config.c would hand them to step_init. */
struct spec {
    struct step_args args;
    char buf[512];
};

static void spec_parse(struct spec *sp, const char *text)
{
    memset(sp, 0, sizeof(*sp));
    ck_assert_uint_lt(strlen(text), sizeof(sp->buf));
    strcpy(sp->buf, text);
    char *save = NULL;
    for (char *item = strtok_r(sp->buf, ";", &save); item; item = strtok_r(NULL, ";", &save)) {
        ck_assert_uint_lt(sp->args.n, STEP_ARGS_MAX);
        struct step_arg *a = &sp->args.a[sp->args.n++];
        char *eq = strchr(item, '='), *v = item;
        if (eq) {
            *eq = '\0';
            a->key = item;
            v = eq + 1;
        }
        if (*v == '[') {
            a->list = 1;
            v++;
            char *end = strchr(v, ']');
            ck_assert_ptr_nonnull(end);
            *end = '\0';
            char *save2 = NULL;
            for (char *e = strtok_r(v, ",", &save2); e; e = strtok_r(NULL, ",", &save2)) {
                ck_assert_uint_lt(a->n, STEP_ARG_VALUES_MAX);
                a->v[a->n++] = e;
            }
        } else {
            a->v[a->n++] = v;
        }
    }
}

static struct step make_stepv(const char *name, const char *text)
{
    struct spec sp;
    struct step s;
    char err[256] = "";
    int bad = 99;
    spec_parse(&sp, text);
    int rc = step_init(&s, name, &sp.args, &bad, err, sizeof(err));
    ck_assert_msg(rc == 0, "step_init(%s, %s): %d %s", name, text, rc, err);
    ck_assert_int_eq(bad, -1);
    return s;
}

static void describe_is(const struct step *s, const char *want)
{
    char buf[256];
    step_describe(s, buf, sizeof(buf));
    ck_assert_msg(strcmp(buf, want) == 0, "described as '%s', want '%s'", buf, want);
}

static void decode_photo(const struct photo *ph, struct step_ctx *ctx, struct img *out)
{
    struct img enc;
    struct step dec = make_step("decode", NULL);
    read_photo(ph, &enc);
    apply_ok(&dec, ctx, &enc, out);
    img_free(&enc);
}

/* Resize kernels to check: every explicit one; those this machine cannot
 * run are skipped with a message. */
static const struct {
    enum step_resize_isa isa;
    const char *name;
} resize_isas[] = {
    {STEP_RESIZE_ISA_SCALAR, "scalar"},
    {STEP_RESIZE_ISA_AVX2, "avx2"},
};

/* Bit i set: resize_isas[i] runs here. Says which do not, once per call. */
static unsigned resize_isas_usable(void)
{
    unsigned mask = 0;
    for (size_t i = 0; i < NELEM(resize_isas); i++) {
        if (step_resize_isa_supported(resize_isas[i].isa))
            mask |= 1u << i;
        else
            printf("SKIP: resize kernel %s is not supported here\n", resize_isas[i].name);
    }
    fflush(stdout);
    return mask;
}

static void resize_isa_ok(size_t i, uint32_t size, struct step_ctx *ctx,
                          const struct img *in, struct img *out)
{
    int rc = step_resize_apply_isa(size, resize_isas[i].isa, ctx, in, out);
    ck_assert_msg(rc == 0, "resize(%u) with %s of %ux%ux%u failed: %d (%s)", size,
                  resize_isas[i].name, in->w, in->h, in->c, rc, ctx->err);
    ck_assert(out->fmt == IMG_PIXELS && out->dtype == PROTO_DTYPE_U8 && out->c == in->c);
    ck_assert_uint_eq(out->len, (size_t)out->h * out->w * out->c);
}

/* Pillow's resize of the raw pixels of in to out_w x out_h, into ref
 * (out_w * out_h * in->c bytes). */
static void pil_resize_raw(const struct img *in, uint32_t out_w, uint32_t out_h,
                           uint8_t *ref)
{
    char path[4096], args[4300];
    temp_path(path, sizeof(path));
    write_file(path, in->data, in->len);
    snprintf(args, sizeof(args), "'%s' %u %u %u %u %u", path, in->w, in->h, in->c, out_w,
             out_h);
    python_bytes(PY_RESIZE_RAW, args, ref, (size_t)out_w * out_h * in->c);
    unlink(path);
}

/* ---- declarations ---- */

START_TEST(test_init_valid)
{
    struct step s;
    char buf[64];

    s = make_step("decode", NULL);
    ck_assert_int_eq(s.kind, STEP_DECODE);
    step_describe(&s, buf, sizeof(buf));
    ck_assert_str_eq(buf, "decode");

    s = make_step("resize", "256");
    ck_assert_int_eq(s.kind, STEP_RESIZE);
    ck_assert(s.h == 256 && s.w == 256 && s.shorter);
    step_describe(&s, buf, sizeof(buf));
    ck_assert_str_eq(buf, "resize(256)");

    s = make_step("center_crop", "224");
    ck_assert_int_eq(s.kind, STEP_CENTER_CROP);
    ck_assert(s.h == 224 && s.w == 224 && !s.shorter);
    step_describe(&s, buf, sizeof(buf));
    ck_assert_str_eq(buf, "center_crop(224)");

    s = make_step("resize", "65535");
    ck_assert_uint_eq(s.h, 65535);
    s = make_step("center_crop", "1");
    ck_assert_uint_eq(s.h, 1);

    s = make_step("random_flip", NULL);
    ck_assert_int_eq(s.kind, STEP_RANDOM_FLIP);
    ck_assert(s.p == 0.5);
    step_describe(&s, buf, sizeof(buf));
    ck_assert_str_eq(buf, "random_flip(0.5)");
    s = make_step("random_flip", "0.25");
    ck_assert(s.p == 0.25);
    step_describe(&s, buf, sizeof(buf));
    ck_assert_str_eq(buf, "random_flip(0.25)");
    s = make_step("random_flip", "1");
    ck_assert(s.p == 1.0);
    s = make_step("random_flip", "0");
    ck_assert(s.p == 0.0);
    /* `- random_flip:` with an empty value means the default. */
    s = make_step("random_flip", "");
    ck_assert(s.p == 0.5);

    ck_assert(!step_is_random(&(struct step){.kind = STEP_DECODE}));
    ck_assert(!step_is_random(&(struct step){.kind = STEP_RESIZE, .h = 8}));
    ck_assert(!step_is_random(&(struct step){.kind = STEP_CENTER_CROP, .h = 8}));
    ck_assert(step_is_random(&(struct step){.kind = STEP_RANDOM_FLIP, .p = 0.5}));
    ck_assert(step_is_random(&(struct step){.kind = STEP_RANDOM_RESIZED_CROP, .h = 8}));
    ck_assert(!step_is_random(&(struct step){.kind = STEP_PAD}));
    ck_assert(!step_is_random(&(struct step){.kind = STEP_NORMALIZE}));
    ck_assert(!step_is_random(&(struct step){.kind = STEP_TO_FLOAT}));

    ck_assert_str_eq(step_name(STEP_DECODE), "decode");
    ck_assert_str_eq(step_name(STEP_RESIZE), "resize");
    ck_assert_str_eq(step_name(STEP_CENTER_CROP), "center_crop");
    ck_assert_str_eq(step_name(STEP_RANDOM_FLIP), "random_flip");
    ck_assert_str_eq(step_name(STEP_RANDOM_RESIZED_CROP), "random_resized_crop");
    ck_assert_str_eq(step_name(STEP_PAD), "pad");
    ck_assert_str_eq(step_name(STEP_NORMALIZE), "normalize");
    ck_assert_str_eq(step_name(STEP_TO_FLOAT), "to_float");
    ck_assert_str_eq(step_name(STEP_KIND_MAX), "unknown");
}
END_TEST

static void init_fails(const char *name, const char *arg, const char *want)
{
    struct step s;
    char err[256] = "";
    int rc = step_init_simple(&s, name, arg, err, sizeof(err));
    ck_assert_msg(rc == -EINVAL, "step_init(%s, %s) = %d, want -EINVAL", name,
                  arg ? arg : "NULL", rc);
    ck_assert_msg(strstr(err, want) != NULL, "step_init(%s, %s): message '%s' lacks '%s'",
                  name, arg ? arg : "NULL", err, want);
}

START_TEST(test_init_errors)
{
    init_fails("rotate", NULL, "unknown step 'rotate'");
    init_fails("rotate", NULL, "decode, resize, center_crop, random_flip");
    init_fails("Decode", NULL, "unknown step");
    init_fails("rotate", NULL, "random_resized_crop, pad, normalize, to_float");
    init_fails("decode", "1", "mode '1' is not rgb or grey");
    init_fails("resize", NULL, "needs size");
    init_fails("center_crop", NULL, "needs size");
    const char *bad_sizes[] = {"0", "65536", "100000000000", "-5", "+5", "abc",
                               "12x", "1.5", " 12", "0x10"};
    for (size_t i = 0; i < NELEM(bad_sizes); i++) {
        init_fails("resize", bad_sizes[i], "with each in 1..65535");
        init_fails("center_crop", bad_sizes[i], "with each in 1..65535");
    }
    const char *bad_p[] = {"1.5", "-0.1", "nan", "inf", "abc", "0.5x", "2"};
    for (size_t i = 0; i < NELEM(bad_p); i++)
        init_fails("random_flip", bad_p[i], "is not a number in [0, 1]");

    /* A NULL or zero-length err buffer is fine. */
    struct step s;
    ck_assert_int_eq(step_init(&s, "nope", NULL, NULL, NULL, 0), -EINVAL);
    ck_assert_int_eq(step_init_simple(&s, "resize", "x", NULL, 0), -EINVAL);
}
END_TEST

START_TEST(test_fingerprint)
{
    struct step r256 = make_step("resize", "256"), r224 = make_step("resize", "224");
    struct step c224 = make_step("center_crop", "224"), dec = make_step("decode", NULL);
    struct step f5 = make_step("random_flip", "0.5"), f6 = make_step("random_flip", "0.6");
    struct step r256b = make_step("resize", "256"), f5b = make_step("random_flip", NULL);

    ck_assert_uint_eq(step_fingerprint(&r256, 0), step_fingerprint(&r256b, 0));
    ck_assert_uint_eq(step_fingerprint(&f5, 7), step_fingerprint(&f5b, 7));
    ck_assert_uint_ne(step_fingerprint(&r256, 0), step_fingerprint(&r224, 0));
    ck_assert_uint_ne(step_fingerprint(&r224, 0), step_fingerprint(&c224, 0));
    ck_assert_uint_ne(step_fingerprint(&f5, 0), step_fingerprint(&f6, 0));
    ck_assert_uint_ne(step_fingerprint(&dec, 0), step_fingerprint(&dec, 1));
    ck_assert_uint_ne(step_fingerprint(&dec, 0), step_fingerprint(&r256, 0));
    /* Order of a chain matters. */
    uint64_t a = step_fingerprint(&c224, step_fingerprint(&r256, 0));
    uint64_t b = step_fingerprint(&r256, step_fingerprint(&c224, 0));
    ck_assert_uint_ne(a, b);
}
END_TEST

START_TEST(test_out_shape)
{
    uint32_t h, w, c;
    struct step dec = make_step("decode", NULL), rs = make_step("resize", "256");
    struct step cc = make_step("center_crop", "224"), fl = make_step("random_flip", NULL);

    step_out_shape(&dec, 0, 0, 0, &h, &w, &c);
    ck_assert(h == 0 && w == 0 && c == 3);
    step_out_shape(&rs, 0, 0, 3, &h, &w, &c);
    ck_assert(h == 0 && w == 0 && c == 3);
    step_out_shape(&rs, 427, 640, 3, &h, &w, &c);
    ck_assert_msg(h == 256 && w == 383 && c == 3, "resize(256) of 640x427: %ux%u", w, h);
    step_out_shape(&rs, 600, 512, 3, &h, &w, &c);
    ck_assert_msg(h == 300 && w == 256, "resize(256) of 512x600: %ux%u", w, h);
    step_out_shape(&cc, 0, 0, 3, &h, &w, &c);
    ck_assert(h == 224 && w == 224 && c == 3);
    step_out_shape(&fl, 224, 224, 3, &h, &w, &c);
    ck_assert(h == 224 && w == 224 && c == 3);
}
END_TEST

START_TEST(test_splitmix)
{
    /* The reference splitmix64 generator seeded with 0 first returns
     * 0xe220a8397b1dcdaf. */
    uint64_t state = 0;
    double r = hash_rand01(&state);
    ck_assert_uint_eq(state, 0x9e3779b97f4a7c15ULL);
    ck_assert(r == (double)(0xe220a8397b1dcdafULL >> 11) / 9007199254740992.0);
    ck_assert_uint_eq(hash_mix64(0x9e3779b97f4a7c15ULL), 0xe220a8397b1dcdafULL);
    for (int i = 0; i < 1000; i++) {
        r = hash_rand01(&state);
        ck_assert(r >= 0.0 && r < 1.0);
    }
}
END_TEST

/* ---- decode ---- */

START_TEST(test_decode_shape)
{
    struct step_ctx ctx;
    struct img px = {0};
    step_ctx_init(&ctx);
    for (size_t i = 0; i < NELEM(photos); i++) {
        decode_photo(&photos[i], &ctx, &px);
        ck_assert_msg(px.w == photos[i].w && px.h == photos[i].h && px.c == 3,
                      "%s: decoded %ux%ux%u", photos[i].name, px.w, px.h, px.c);
        ck_assert_ptr_nonnull(ctx.tj);
    }
    img_free(&px);
    step_ctx_free(&ctx);
    ck_assert_ptr_null(ctx.tj);
}
END_TEST

START_TEST(test_decode_matches_pil)
{
    if (!pil_available())
        return;
    struct step_ctx ctx;
    struct img px = {0};
    step_ctx_init(&ctx);
    for (size_t i = 0; i < NELEM(photos); i++) {
        char path[4096];
        photo_path(photos[i].name, path, sizeof(path));
        decode_photo(&photos[i], &ctx, &px);
        uint8_t *ref = malloc(px.len);
        ck_assert_ptr_nonnull(ref);
        pil_decode(path, ref, px.len);
        struct diff d = compare(px.data, ref, px.len);
        printf("decode %s vs PIL: %zu of %zu bytes differ, max diff %u\n",
               photos[i].name, d.differing, px.len, d.max);
        ck_assert_msg(d.differing == 0, "%s: decode differs from PIL in %zu bytes",
                      photos[i].name, d.differing);
        free(ref);
    }
    img_free(&px);
    step_ctx_free(&ctx);
}
END_TEST

/* Re-encodes a photo with every chroma subsampling (and as greyscale), so
 * every upsampling path of the decoder is compared with PIL. */
START_TEST(test_decode_subsampling_matches_pil)
{
    static const int samps[] = {TJSAMP_444, TJSAMP_422, TJSAMP_420, TJSAMP_440,
                                TJSAMP_411, TJSAMP_GRAY};
    int have_pil = pil_available();
    struct step_ctx ctx;
    struct img src = {0}, enc = {0}, px = {0};
    struct step dec = make_step("decode", NULL);
    step_ctx_init(&ctx);
    decode_photo(&photos[0], &ctx, &src);

    tjhandle tj = tjInitCompress();
    ck_assert_ptr_nonnull(tj);
    for (size_t i = 0; i < NELEM(samps); i++) {
        unsigned char *jpeg = NULL;
        unsigned long jlen = 0;
        int rc = tjCompress2(tj, src.data, (int)src.w, 0, (int)src.h, TJPF_RGB, &jpeg,
                             &jlen, samps[i], 90, 0);
        ck_assert_msg(rc == 0, "tjCompress2: %s", tjGetErrorStr2(tj));
        enc = (struct img){.fmt = IMG_ENCODED, .data = jpeg, .len = jlen};
        apply_ok(&dec, &ctx, &enc, &px);
        ck_assert(px.w == src.w && px.h == src.h && px.c == 3);
        if (samps[i] == TJSAMP_GRAY) {
            int grey = 1;
            for (size_t p = 0; p < px.len; p += 3)
                grey &= px.data[p] == px.data[p + 1] && px.data[p] == px.data[p + 2];
            ck_assert_msg(grey, "greyscale JPEG decoded to unequal channels");
        }
        if (have_pil) {
            char path[4096];
            temp_path(path, sizeof(path));
            write_file(path, jpeg, jlen);
            uint8_t *ref = malloc(px.len);
            ck_assert_ptr_nonnull(ref);
            pil_decode(path, ref, px.len);
            unlink(path);
            struct diff d = compare(px.data, ref, px.len);
            ck_assert_msg(d.differing == 0,
                          "subsampling %d: decode differs from PIL in %zu bytes (max %u)",
                          samps[i], d.differing, d.max);
            free(ref);
        }
        tjFree(jpeg);
    }
    tjDestroy(tj);
    img_free(&src);
    img_free(&px);
    step_ctx_free(&ctx);
}
END_TEST

/* CMYK JPEGs: one written by TurboJPEG from CMYK pixels (stored as YCCK)
 * and one written by PIL (plain CMYK, Adobe polarity); both decode to RGB
 * exactly as PIL's convert('RGB'). */
#define PY_SAVE_CMYK                                                        \
    "from PIL import Image;import sys;"                                     \
    "Image.open(sys.argv[1]).convert(\"CMYK\").save(sys.argv[2],\"JPEG\",quality=90)"

START_TEST(test_decode_cmyk_matches_pil)
{
    if (!pil_available())
        return;
    struct step_ctx ctx;
    struct img src = {0}, cmyk = {0}, px = {0};
    struct step dec = make_step("decode", NULL);
    step_ctx_init(&ctx);
    decode_photo(&photos[1], &ctx, &src);

    /* CMYK pixels with a varying black channel. */
    size_t pixels = (size_t)src.w * src.h;
    ck_assert_int_eq(img_reserve(&cmyk, pixels * 4), 0);
    for (size_t i = 0; i < pixels; i++) {
        for (int ch = 0; ch < 3; ch++)
            cmyk.data[i * 4 + ch] = (uint8_t)(255 - src.data[i * 3 + ch]);
        cmyk.data[i * 4 + 3] = (uint8_t)(i % 256);
    }
    tjhandle tj = tjInitCompress();
    ck_assert_ptr_nonnull(tj);
    unsigned char *jpeg = NULL;
    unsigned long jlen = 0;
    ck_assert_msg(tjCompress2(tj, cmyk.data, (int)src.w, 0, (int)src.h, TJPF_CMYK, &jpeg,
                              &jlen, TJSAMP_420, 90, 0) == 0,
                  "tjCompress2: %s", tjGetErrorStr2(tj));

    char tj_path[4096], pil_path[4096], photo[4096], args[8400];
    temp_path(tj_path, sizeof(tj_path));
    write_file(tj_path, jpeg, jlen);
    temp_path(pil_path, sizeof(pil_path));
    photo_path(photos[1].name, photo, sizeof(photo));
    snprintf(args, sizeof(args), "'%s' '%s'", photo, pil_path);
    python_bytes(PY_SAVE_CMYK, args, NULL, 0);

    const char *paths[] = {tj_path, pil_path};
    for (size_t i = 0; i < NELEM(paths); i++) {
        struct img enc;
        read_encoded(paths[i], &enc);
        apply_ok(&dec, &ctx, &enc, &px);
        ck_assert(px.w == src.w && px.h == src.h && px.c == 3);
        uint8_t *ref = malloc(px.len);
        ck_assert_ptr_nonnull(ref);
        pil_decode(paths[i], ref, px.len);
        struct diff d = compare(px.data, ref, px.len);
        ck_assert_msg(d.differing == 0, "CMYK JPEG %zu: %zu bytes differ from PIL (max %u)",
                      i, d.differing, d.max);
        free(ref);
        img_free(&enc);
        unlink(paths[i]);
    }
    tjFree(jpeg);
    tjDestroy(tj);
    img_free(&src);
    img_free(&cmyk);
    img_free(&px);
    step_ctx_free(&ctx);
}
END_TEST

static void decode_fails(struct step_ctx *ctx, const struct img *in, int want,
                         const char *what)
{
    struct step dec = make_step("decode", NULL);
    struct img out = {0};
    ctx->err[0] = '\0';
    int rc = step_apply(&dec, ctx, in, &out);
    ck_assert_msg(rc == want, "%s: decode returned %d, want %d (%s)", what, rc, want,
                  ctx->err);
    ck_assert_msg(ctx->err[0] != '\0', "%s: no error message", what);
    img_free(&out);
}

START_TEST(test_decode_errors)
{
    struct step_ctx ctx;
    struct img enc;
    step_ctx_init(&ctx);
    read_photo(&photos[0], &enc);
    size_t full = enc.len;

    /* Truncated: the header parses, the entropy data runs out (a libjpeg
     * warning, refused as an error). */
    static const double cuts[] = {0.3, 0.9};
    for (size_t i = 0; i < NELEM(cuts); i++) {
        enc.len = (size_t)(full * cuts[i]);
        decode_fails(&ctx, &enc, -EBADMSG, "truncated JPEG");
        ck_assert_msg(strstr(ctx.err, "decode") != NULL, "message: %s", ctx.err);
    }
    /* Cut inside the headers. */
    enc.len = 100;
    decode_fails(&ctx, &enc, -EBADMSG, "JPEG cut in its header");
    enc.len = full;

    /* The decoder still works after failures. */
    struct step dec = make_step("decode", NULL);
    struct img px = {0};
    apply_ok(&dec, &ctx, &enc, &px);

    /* Garbage and empty input. */
    uint8_t garbage[4096];
    for (size_t i = 0; i < sizeof(garbage); i++)
        garbage[i] = (uint8_t)hash_mix64(i);
    struct img g = {.fmt = IMG_ENCODED, .data = garbage, .len = sizeof(garbage)};
    decode_fails(&ctx, &g, -EBADMSG, "garbage");
    ck_assert_msg(strstr(ctx.err, "JPEG") != NULL, "message: %s", ctx.err);
    /* A JPEG start marker followed by garbage. */
    garbage[0] = 0xff;
    garbage[1] = 0xd8;
    decode_fails(&ctx, &g, -EBADMSG, "SOI + garbage");
    g.len = 0;
    decode_fails(&ctx, &g, -EBADMSG, "empty");

    /* Decoding pixels is a usage error. */
    decode_fails(&ctx, &px, -EINVAL, "decode of pixels");

    img_free(&px);
    img_free(&enc);
    step_ctx_free(&ctx);
}
END_TEST

START_TEST(test_decode_max_pixels)
{
    struct step_ctx ctx;
    struct img enc, px = {0};
    struct step dec = make_step("decode", NULL);
    step_ctx_init(&ctx);
    read_photo(&photos[0], &enc);

    ctx.max_pixels = (uint64_t)photos[0].w * photos[0].h - 1;
    decode_fails(&ctx, &enc, -E2BIG, "over max_pixels");
    ck_assert_msg(strstr(ctx.err, "640x427") != NULL, "message: %s", ctx.err);

    ctx.max_pixels = (uint64_t)photos[0].w * photos[0].h;
    apply_ok(&dec, &ctx, &enc, &px);
    ctx.max_pixels = 0;
    apply_ok(&dec, &ctx, &enc, &px);

    img_free(&px);
    img_free(&enc);
    step_ctx_free(&ctx);
}
END_TEST

/* ---- resize ---- */

START_TEST(test_resize_photos_match_pil)
{
    if (!pil_available())
        return;
    struct step_ctx ctx;
    struct img px = {0}, out = {0};
    struct step rs = make_step("resize", "256");
    step_ctx_init(&ctx);
    for (size_t i = 0; i < NELEM(photos); i++) {
        char path[4096], args[4300];
        photo_path(photos[i].name, path, sizeof(path));
        decode_photo(&photos[i], &ctx, &px);
        apply_ok(&rs, &ctx, &px, &out);
        ck_assert_uint_eq(out.h < out.w ? out.h : out.w, 256);
        uint8_t *ref = malloc(out.len);
        ck_assert_ptr_nonnull(ref);
        snprintf(args, sizeof(args), "'%s' %u %u", path, out.w, out.h);
        python_bytes(PY_RESIZE_FILE, args, ref, out.len);
        struct diff d = compare(out.data, ref, out.len);
        printf("resize(256) %s %ux%u -> %ux%u vs PIL: max diff %u, mean diff %.6f, "
               "%zu of %zu bytes differ\n",
               photos[i].name, px.w, px.h, out.w, out.h, d.max, d.mean, d.differing,
               out.len);
        ck_assert_msg(d.max <= 1 && d.mean <= 0.5, "%s: max diff %u, mean %f",
                      photos[i].name, d.max, d.mean);
        free(ref);
    }
    img_free(&px);
    img_free(&out);
    step_ctx_free(&ctx);
}
END_TEST

/* The photos as our decoder sees them, resized by each kernel, equal
 * Pillow's resize of the same pixels exactly (independent of decoders). */
START_TEST(test_resize_photos_kernels_match_pil)
{
    if (!pil_available())
        return;
    struct step_ctx ctx;
    struct img px = {0}, out = {0};
    unsigned usable = resize_isas_usable();
    step_ctx_init(&ctx);
    for (size_t i = 0; i < NELEM(photos); i++) {
        decode_photo(&photos[i], &ctx, &px);
        uint64_t h, w;
        step_resize_shape(256, px.h, px.w, &h, &w);
        size_t len = (size_t)h * w * px.c;
        uint8_t *ref = malloc(len);
        ck_assert_ptr_nonnull(ref);
        pil_resize_raw(&px, (uint32_t)w, (uint32_t)h, ref);
        for (size_t k = 0; k < NELEM(resize_isas); k++) {
            if (!(usable >> k & 1))
                continue;
            resize_isa_ok(k, 256, &ctx, &px, &out);
            ck_assert(out.w == w && out.h == h);
            struct diff d = compare(out.data, ref, len);
            printf("resize(256) %s %ux%u -> %ux%u, %s kernel vs PIL on the same "
                   "pixels: %zu of %zu bytes differ\n",
                   photos[i].name, px.w, px.h, out.w, out.h, resize_isas[k].name,
                   d.differing, len);
            ck_assert_msg(d.differing == 0, "%s, %s kernel: %zu bytes differ, max %u",
                          photos[i].name, resize_isas[k].name, d.differing, d.max);
        }
        free(ref);
    }
    img_free(&px);
    img_free(&out);
    step_ctx_free(&ctx);
}
END_TEST

/* Random images of awkward shapes (1-pixel wide or tall, upscaling, odd
 * ratios, 1 and 3 channels, one pass only, rows shorter than a vector,
 * strong downscales) must equal Pillow exactly, through step_apply and
 * through every kernel. */
START_TEST(test_resize_shapes_match_pil)
{
    static const struct {
        uint32_t h, w, c, size;
    } cases[] = {
        {1, 50, 3, 7},   {50, 1, 3, 7},    {1, 1, 3, 5},     {3, 2, 3, 16},
        {17, 29, 1, 11}, {29, 17, 3, 64},  {100, 37, 3, 13}, {64, 64, 3, 31},
        {7, 300, 1, 3},  {33, 35, 3, 34},  {3, 5, 3, 9},     {1, 1, 1, 3},
        {16, 41, 3, 16}, {41, 16, 3, 16},  {40, 5, 1, 5},    {5, 40, 1, 5},
        {200, 301, 3, 20}, {37, 123, 1, 29}, {427, 640, 3, 256}, {2, 3, 1, 200},
    };
    if (!pil_available())
        return;
    struct step_ctx ctx;
    struct img in = {0}, out = {0};
    unsigned usable = resize_isas_usable();
    step_ctx_init(&ctx);
    for (size_t i = 0; i < NELEM(cases); i++) {
        char sz[16];
        snprintf(sz, sizeof(sz), "%u", cases[i].size);
        struct step rs = make_step("resize", sz);
        make_pixels(&in, cases[i].h, cases[i].w, cases[i].c);
        fill_pattern(&in, i);
        apply_ok(&rs, &ctx, &in, &out);
        uint8_t *ref = malloc(out.len);
        ck_assert_ptr_nonnull(ref);
        pil_resize_raw(&in, out.w, out.h, ref);
        struct diff d = compare(out.data, ref, out.len);
        ck_assert_msg(d.differing == 0,
                      "%ux%ux%u resize(%u) -> %ux%u: %zu bytes differ from PIL, max %u",
                      in.w, in.h, in.c, cases[i].size, out.w, out.h, d.differing, d.max);
        for (size_t k = 0; k < NELEM(resize_isas); k++) {
            if (!(usable >> k & 1))
                continue;
            resize_isa_ok(k, cases[i].size, &ctx, &in, &out);
            d = compare(out.data, ref, out.len);
            ck_assert_msg(d.differing == 0,
                          "%ux%ux%u resize(%u) -> %ux%u, %s kernel: %zu bytes differ "
                          "from PIL, max %u",
                          in.w, in.h, in.c, cases[i].size, out.w, out.h,
                          resize_isas[k].name, d.differing, d.max);
        }
        free(ref);
        img_free(&in);
    }
    img_free(&out);
    step_ctx_free(&ctx);
}
END_TEST

/* Every kernel gives the scalar kernel's bytes on many random shapes,
 * channel counts 1 to 4 and sizes, with noise over the whole byte range
 * and images of only 0 and 255 (the extremes of the sums). */
START_TEST(test_resize_kernels_agree)
{
    struct step_ctx ctx;
    struct img in = {0}, ref = {0}, out = {0};
    /* The kernels to compare with the scalar one. */
    unsigned usable = resize_isas_usable();
    for (size_t k = 0; k < NELEM(resize_isas); k++)
        if (resize_isas[k].isa == STEP_RESIZE_ISA_SCALAR)
            usable &= ~(1u << k);
    step_ctx_init(&ctx);
    for (uint64_t n = 0; n < 400 && usable; n++) {
        uint64_t r = hash_mix64(n + 1000);
        uint32_t h = 1 + r % 90, w = 1 + (r >> 8) % 90, c = 1 + (r >> 16) % 4;
        uint32_t size = 1 + (r >> 24) % 120;
        if (n % 10 == 0) { /* the benchmark's kind: larger photos to 256 */
            h = 256 + (r >> 32) % 450;
            w = 256 + (r >> 44) % 450;
            c = 3;
            size = 256;
        }
        make_pixels(&in, h, w, c);
        for (size_t i = 0; i < in.len; i++) {
            uint64_t v = hash_mix64(n * 1000003 + i);
            in.data[i] = n % 4 == 3 ? (v & 1 ? 255 : 0) : (uint8_t)v;
        }
        ck_assert_int_eq(step_resize_apply_isa(size, STEP_RESIZE_ISA_SCALAR, &ctx, &in,
                                               &ref), 0);
        for (size_t k = 0; k < NELEM(resize_isas); k++) {
            if (!(usable >> k & 1))
                continue;
            resize_isa_ok(k, size, &ctx, &in, &out);
            ck_assert(out.w == ref.w && out.h == ref.h && out.len == ref.len);
            struct diff d = compare(out.data, ref.data, ref.len);
            ck_assert_msg(d.differing == 0,
                          "%ux%ux%u resize(%u) -> %ux%u: %s kernel differs from the "
                          "scalar one in %zu bytes, max %u",
                          w, h, c, size, out.w, out.h, resize_isas[k].name, d.differing,
                          d.max);
        }
        img_free(&in);
    }
    img_free(&ref);
    img_free(&out);
    step_ctx_free(&ctx);
}
END_TEST

START_TEST(test_resize_isa_errors)
{
    struct step_ctx ctx;
    struct img in = {0}, out = {0};
    step_ctx_init(&ctx);
    ck_assert(step_resize_isa_supported(STEP_RESIZE_ISA_AUTO));
    ck_assert(step_resize_isa_supported(STEP_RESIZE_ISA_SCALAR));
    ck_assert(!step_resize_isa_supported((enum step_resize_isa)99));
    make_pixels(&in, 10, 20, 3);
    fill_pattern(&in, 7);
    ck_assert_int_eq(step_resize_apply_isa(5, (enum step_resize_isa)99, &ctx, &in, &out),
                     -ENOTSUP);
    ck_assert_msg(strstr(ctx.err, "not supported") != NULL, "message: %s", ctx.err);
    int rc = step_resize_apply_isa(5, STEP_RESIZE_ISA_AVX2, &ctx, &in, &out);
    ck_assert_int_eq(rc, step_resize_isa_supported(STEP_RESIZE_ISA_AVX2) ? 0 : -ENOTSUP);
    /* The usual input checks come first. */
    in.dtype = PROTO_DTYPE_U8 + 1;
    ck_assert_int_eq(step_resize_apply_isa(5, STEP_RESIZE_ISA_SCALAR, &ctx, &in, &out),
                     -EINVAL);
    img_free(&in);
    img_free(&out);
    step_ctx_free(&ctx);
}
END_TEST

START_TEST(test_resize_constant)
{
    static const uint32_t shapes[][3] = {{427, 640, 3}, {10, 10, 3}, {3, 5, 1},
                                         {1, 9, 3},     {30, 1, 3},  {256, 999, 3},
                                         {700, 300, 1}};
    struct step_ctx ctx;
    struct img in = {0}, out = {0};
    struct step rs = make_step("resize", "256");
    unsigned usable = resize_isas_usable();
    step_ctx_init(&ctx);
    for (size_t i = 0; i < NELEM(shapes); i++) {
        for (int v = 0; v <= 255; v += 85) {
            make_pixels(&in, shapes[i][0], shapes[i][1], shapes[i][2]);
            memset(in.data, v, in.len);
            /* step_apply, then each kernel (-1: step_apply). */
            for (int k = -1; k < (int)NELEM(resize_isas); k++) {
                if (k < 0)
                    apply_ok(&rs, &ctx, &in, &out);
                else if (usable >> k & 1)
                    resize_isa_ok((size_t)k, 256, &ctx, &in, &out);
                else
                    continue;
                ck_assert_uint_eq(out.c, in.c);
                size_t j = 0;
                while (j < out.len && out.data[j] == v)
                    j++;
                ck_assert_msg(j == out.len, "%ux%u value %d, %s: byte %zu is %u", in.w,
                              in.h, v, k < 0 ? "step_apply" : resize_isas[k].name, j,
                              out.data[j]);
            }
            img_free(&in);
        }
    }
    img_free(&out);
    step_ctx_free(&ctx);
}
END_TEST

START_TEST(test_resize_shapes)
{
    struct step_ctx ctx;
    struct img in = {0}, out = {0};
    struct step rs = make_step("resize", "256");
    step_ctx_init(&ctx);

    /* Upscaling a horizontal ramp keeps it monotonic and in range. */
    make_pixels(&in, 2, 4, 1);
    static const uint8_t ramp[] = {0, 80, 160, 240};
    memcpy(in.data, ramp, 4);
    memcpy(in.data + 4, ramp, 4);
    apply_ok(&rs, &ctx, &in, &out);
    ck_assert_uint_eq(out.h, 256);
    ck_assert_uint_eq(out.w, 512);
    ck_assert_uint_eq(out.data[0], 0);
    ck_assert_uint_eq(out.data[511], 240);
    int rows_equal = 1, monotonic = 1;
    for (uint32_t x = 1; x < out.w; x++)
        monotonic &= out.data[x] >= out.data[x - 1];
    for (uint32_t y = 1; y < out.h; y++)
        rows_equal &= memcmp(out.data + (size_t)y * out.w, out.data, out.w) == 0;
    ck_assert(monotonic && rows_equal);
    img_free(&in);

    /* 1-pixel-wide and -tall images. */
    make_pixels(&in, 50, 1, 3);
    fill_pattern(&in, 1);
    apply_ok(&rs, &ctx, &in, &out);
    ck_assert(out.w == 256 && out.h == 12800 && out.c == 3);
    img_free(&in);
    make_pixels(&in, 1, 3, 3);
    fill_pattern(&in, 2);
    apply_ok(&rs, &ctx, &in, &out);
    ck_assert(out.w == 768 && out.h == 256);
    img_free(&in);

    /* Already the right size: an exact copy. */
    make_pixels(&in, 256, 300, 3);
    fill_pattern(&in, 3);
    apply_ok(&rs, &ctx, &in, &out);
    ck_assert(out.w == 300 && out.h == 256);
    ck_assert(memcmp(out.data, in.data, in.len) == 0);
    img_free(&in);

    /* torchvision truncates the longer side: int(256 * 640 / 427) = 383. */
    make_pixels(&in, 427, 640, 3);
    fill_pattern(&in, 4);
    apply_ok(&rs, &ctx, &in, &out);
    ck_assert(out.w == 383 && out.h == 256);

    /* Wrong input kinds and an output over max_pixels. */
    struct img enc = {.fmt = IMG_ENCODED, .data = in.data, .len = in.len};
    ck_assert_int_eq(step_apply(&rs, &ctx, &enc, &out), -EINVAL);
    ck_assert(ctx.err[0] != '\0');
    in.dtype = PROTO_DTYPE_F32;
    ck_assert_int_eq(step_apply(&rs, &ctx, &in, &out), -EINVAL);
    in.dtype = PROTO_DTYPE_U8;
    ctx.max_pixels = 1000;
    ck_assert_int_eq(step_apply(&rs, &ctx, &in, &out), -E2BIG);

    img_free(&in);
    img_free(&out);
    step_ctx_free(&ctx);
}
END_TEST

/* ---- center_crop ---- */

/* Pixel (y, x) channel ch of the pattern image. */
static uint8_t px_at(uint32_t y, uint32_t x, uint32_t ch)
{
    return (uint8_t)(y * 16 + x * 3 + ch + 1);
}

static void make_coords(struct img *im, uint32_t h, uint32_t w, uint32_t c)
{
    make_pixels(im, h, w, c);
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++)
            for (uint32_t ch = 0; ch < c; ch++)
                im->data[((size_t)y * w + x) * c + ch] = px_at(y, x, ch);
}

/* Crops an h x w image to nh x nw and checks every output pixel: output
 * (y, x) is input (y - pad_top + top, x - pad_left + left), zero outside. */
static void check_crop_hw(uint32_t h, uint32_t w, uint32_t c, uint32_t nh, uint32_t nw,
                          uint32_t top, uint32_t left, uint32_t pad_top, uint32_t pad_left)
{
    struct step_ctx ctx;
    struct img in, out = {0};
    char arg[32];
    snprintf(arg, sizeof(arg), "[%u,%u]", nh, nw);
    struct step cc = make_stepv("center_crop", arg);
    step_ctx_init(&ctx);
    make_coords(&in, h, w, c);
    memset(&out, 0, sizeof(out));
    ck_assert_int_eq(img_reserve(&out, (size_t)nh * nw * c), 0);
    memset(out.data, 0xee, (size_t)nh * nw * c); /* padding must be written */
    apply_ok(&cc, &ctx, &in, &out);
    ck_assert(out.h == nh && out.w == nw && out.c == c);
    for (uint32_t y = 0; y < nh; y++) {
        for (uint32_t x = 0; x < nw; x++) {
            for (uint32_t ch = 0; ch < c; ch++) {
                int64_t sy = (int64_t)y - pad_top + top, sx = (int64_t)x - pad_left + left;
                uint8_t want = sy >= 0 && sy < h && sx >= 0 && sx < w
                                   ? px_at((uint32_t)sy, (uint32_t)sx, ch)
                                   : 0;
                uint8_t got = out.data[((size_t)y * nw + x) * c + ch];
                if (got != want)
                    ck_abort_msg("%ux%u crop %ux%u: (%u,%u,%u) is %u, want %u", h, w, nh, nw,
                                 y, x, ch, got, want);
            }
        }
    }
    img_free(&in);
    img_free(&out);
    step_ctx_free(&ctx);
}

static void check_crop(uint32_t h, uint32_t w, uint32_t c, uint32_t n, uint32_t top,
                       uint32_t left, uint32_t pad_top, uint32_t pad_left)
{
    check_crop_hw(h, w, c, n, n, top, left, pad_top, pad_left);
}

START_TEST(test_crop_offsets)
{
    /* Even differences: half. */
    check_crop(8, 6, 3, 2, 3, 2, 0, 0);
    check_crop(10, 10, 1, 4, 3, 3, 0, 0);
    /* Odd differences round half to even: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2,
     * 3.5 -> 4. */
    check_crop(4, 3, 3, 3, 0, 0, 0, 0);     /* d=1,0 */
    check_crop(5, 7, 3, 2, 2, 2, 0, 0);     /* d=3 -> 2, d=5 -> 2 */
    check_crop(9, 11, 3, 2, 4, 4, 0, 0);    /* d=7 -> 4, d=9 -> 4 */
    check_crop(256, 383, 3, 224, 16, 80, 0, 0); /* d=159 -> 79.5 -> 80 */
    check_crop(300, 256, 3, 224, 38, 16, 0, 0);
    /* Same size: identity. */
    check_crop(5, 5, 3, 5, 0, 0, 0, 0);
}
END_TEST

START_TEST(test_crop_padding)
{
    /* Smaller in both: pad (n - s) // 2 before, the rest after. */
    check_crop(3, 5, 3, 6, 0, 0, 1, 0);
    check_crop(2, 2, 1, 7, 0, 0, 2, 2);
    /* Taller than n but narrower: rows cropped (d=5 -> 2), columns padded 1
     * and 1. */
    check_crop(9, 2, 3, 4, 2, 0, 0, 1);
    /* Wider than n but shorter: columns cropped (d=3 -> 2), rows padded 0
     * before and 1 after. */
    check_crop(3, 7, 3, 4, 0, 2, 0, 0);
}
END_TEST

START_TEST(test_crop_hw)
{
    /* [H, W]: each dimension on its own (d=4 -> 2; d=3 -> 1.5 -> 2). */
    check_crop_hw(8, 6, 3, 4, 3, 2, 2, 0, 0);
    /* Taller crop than the image, narrower than it: rows padded 1 + 2,
     * columns cropped (d=5 -> 2.5 -> 2). */
    check_crop_hw(3, 9, 3, 6, 4, 0, 2, 1, 0);
    check_crop_hw(256, 383, 1, 224, 200, 16, 92, 0, 0);
}
END_TEST

/* ---- random_flip ---- */

static int flip_once(double p, uint64_t seed, const struct img *in, struct img *out)
{
    struct step_ctx ctx;
    struct step fl = {.kind = STEP_RANDOM_FLIP, .p = p};
    step_ctx_init(&ctx);
    ctx.seed = seed;
    apply_ok(&fl, &ctx, in, out);
    step_ctx_free(&ctx);
    ck_assert(out->h == in->h && out->w == in->w && out->c == in->c);
    if (memcmp(out->data, in->data, in->len) == 0)
        return 0;
    /* Otherwise it must be the exact mirror image. */
    int mirrored = 1;
    for (uint32_t y = 0; y < in->h; y++)
        for (uint32_t x = 0; x < in->w; x++)
            mirrored &= memcmp(out->data + ((size_t)y * in->w + x) * in->c,
                               in->data + ((size_t)y * in->w + (in->w - 1 - x)) * in->c,
                               in->c) == 0;
    ck_assert_msg(mirrored, "random_flip output is neither the input nor its mirror");
    return 1;
}

START_TEST(test_flip)
{
    struct img in, out = {0}, out2 = {0};
    make_coords(&in, 3, 5, 3);

    /* Same seed, same result; different seeds give both outcomes. */
    int flipped[2] = {0, 0};
    for (uint64_t seed = 0; seed < 64; seed++) {
        int a = flip_once(0.5, seed, &in, &out);
        int b = flip_once(0.5, seed, &in, &out2);
        ck_assert_int_eq(a, b);
        ck_assert(memcmp(out.data, out2.data, out.len) == 0);
        flipped[a] = 1;
    }
    ck_assert(flipped[0] && flipped[1]);

    for (uint64_t seed = 0; seed < 1000; seed++) {
        ck_assert_int_eq(flip_once(0.0, seed * 0x1234567ULL, &in, &out), 0);
        ck_assert_int_eq(flip_once(1.0, seed * 0x1234567ULL, &in, &out), 1);
    }
    /* RGB widths around the 21- and 5-pixel SIMD blocks and the row ends. */
    for (uint32_t w = 1; w <= 100; w++) {
        img_free(&in);
        make_coords(&in, 3, w, 3);
        ck_assert_int_eq(flip_once(1.0, 0, &in, &out), w > 1);
    }
    /* Other channel counts. */
    img_free(&in);
    make_coords(&in, 2, 4, 1);
    ck_assert_int_eq(flip_once(1.0, 0, &in, &out), 1);
    img_free(&in);
    make_coords(&in, 2, 3, 4);
    ck_assert_int_eq(flip_once(1.0, 0, &in, &out), 1);

    img_free(&in);
    img_free(&out);
    img_free(&out2);
}
END_TEST

START_TEST(test_flip_rate)
{
    struct img in, out = {0};
    make_coords(&in, 1, 2, 3);
    int n = 10000, flips = 0;
    for (int seed = 0; seed < n; seed++)
        flips += flip_once(0.5, (uint64_t)seed, &in, &out);
    double rate = (double)flips / n;
    ck_assert_msg(fabs(rate - 0.5) <= 0.02, "flip rate %f over %d seeds", rate, n);
    flips = 0;
    for (int seed = 0; seed < n; seed++)
        flips += flip_once(0.1, (uint64_t)seed, &in, &out);
    rate = (double)flips / n;
    ck_assert_msg(fabs(rate - 0.1) <= 0.02, "flip rate %f at p=0.1", rate);
    img_free(&in);
    img_free(&out);
}
END_TEST

/* ---- parameters, pipelines, shapes ---- */

START_TEST(test_params_valid)
{
    struct step s;

    s = make_stepv("resize", "[256,320]");
    ck_assert(s.h == 256 && s.w == 320 && !s.shorter);
    describe_is(&s, "resize([256,320])");
    s = make_stepv("resize", "[256]"); /* torchvision: a 1-list is the shorter side */
    ck_assert(s.h == 256 && s.shorter);
    describe_is(&s, "resize(256)");
    s = make_stepv("resize", "size=[128,128]");
    ck_assert(!s.shorter);
    describe_is(&s, "resize([128,128])");
    s = make_stepv("center_crop", "size=[224,200]");
    ck_assert(s.h == 224 && s.w == 200);
    describe_is(&s, "center_crop([224,200])");

    s = make_stepv("random_resized_crop", "224");
    ck_assert(s.h == 224 && s.w == 224);
    ck_assert(s.scale[0] == 0.08 && s.scale[1] == 1.0);
    ck_assert(s.ratio[0] == 3.0 / 4.0 && s.ratio[1] == 4.0 / 3.0);
    describe_is(&s, "random_resized_crop(224)");
    s = make_stepv("random_resized_crop", "size=[96,128];scale=[0.5,1];ratio=[3/4,4/3]");
    ck_assert(s.h == 96 && s.w == 128 && s.scale[0] == 0.5);
    describe_is(&s, "random_resized_crop([96,128],scale=[0.5,1])");
    s = make_stepv("random_resized_crop", "size=8;ratio=[0.5,2]");
    describe_is(&s, "random_resized_crop(8,ratio=[0.5,2])");

    s = make_stepv("decode", "mode=grey");
    ck_assert(s.channels == 1 && !s.dct_scale);
    describe_is(&s, "decode(mode=grey)");
    s = make_stepv("decode", "gray");
    ck_assert_uint_eq(s.channels, 1);
    s = make_stepv("decode", "mode=rgb;dct_scale=true");
    ck_assert(s.channels == 3 && s.dct_scale);
    describe_is(&s, "decode(dct_scale=true)");
    s = make_stepv("decode", "dct_scale=false");
    describe_is(&s, "decode");

    s = make_stepv("pad", "4");
    ck_assert(s.pad[0] == 4 && s.pad[1] == 4 && s.pad[2] == 4 && s.pad[3] == 4);
    describe_is(&s, "pad(4)");
    s = make_stepv("pad", "padding=[1,2]");
    ck_assert(s.pad[0] == 1 && s.pad[1] == 2 && s.pad[2] == 1 && s.pad[3] == 2);
    s = make_stepv("pad", "padding=[1,2,3,4];fill=[1,2,3]");
    ck_assert(s.pad[0] == 1 && s.pad[1] == 2 && s.pad[2] == 3 && s.pad[3] == 4);
    ck_assert(s.nfill == 3 && s.fill[2] == 3);
    describe_is(&s, "pad([1,2,3,4],fill=[1,2,3])");
    s = make_stepv("pad", "padding=0;fill=255");
    describe_is(&s, "pad(0,fill=255)");

    s = make_stepv("normalize", "mean=[0.485,0.456,0.406];std=[0.229,0.224,0.225];layout=nchw");
    ck_assert(s.nmean == 3 && s.mean[1] == 0.456f && s.std[2] == 0.225f);
    ck_assert_uint_eq(s.layout, STEP_LAYOUT_NCHW);
    describe_is(&s, "normalize(mean=[0.485,0.456,0.406],std=[0.229,0.224,0.225],layout=nchw)");
    s = make_stepv("normalize", "mean=0.5;std=[0.1,0.2,0.3]");
    ck_assert(s.nmean == 3 && s.mean[2] == 0.5f && s.std[1] == 0.2f);
    ck_assert_uint_eq(s.layout, STEP_LAYOUT_NHWC);
    describe_is(&s, "normalize(mean=[0.5,0.5,0.5],std=[0.1,0.2,0.3])");
    s = make_stepv("normalize", "mean=[0.5];std=0.25");
    ck_assert(s.nmean == 1);
    describe_is(&s, "normalize(mean=0.5,std=0.25)");

    s = make_stepv("to_float", "");
    describe_is(&s, "to_float");
    s = make_stepv("to_float", "nchw");
    ck_assert_uint_eq(s.layout, STEP_LAYOUT_NCHW);
    describe_is(&s, "to_float(layout=nchw)");
    s = make_stepv("random_flip", "p=0.25");
    describe_is(&s, "random_flip(0.25)");

    ck_assert_str_eq(step_main_param("resize"), "size");
    ck_assert_str_eq(step_main_param("decode"), "mode");
    ck_assert_str_eq(step_main_param("random_flip"), "p");
    ck_assert_str_eq(step_main_param("pad"), "padding");
    ck_assert_str_eq(step_main_param("to_float"), "layout");
    ck_assert_ptr_null(step_main_param("normalize"));
    ck_assert_ptr_null(step_main_param("nope"));
    ck_assert_ptr_null(step_main_param(NULL));
}
END_TEST

/* step_init(name, spec) fails naming want, at parameter bad (-1: the step). */
static void initv_fails(const char *name, const char *text, int bad, const char *want)
{
    struct spec sp;
    struct step s;
    char err[256] = "";
    int got_bad = 99;
    spec_parse(&sp, text);
    int rc = step_init(&s, name, &sp.args, &got_bad, err, sizeof(err));
    ck_assert_msg(rc == -EINVAL, "step_init(%s, %s) = %d, want -EINVAL", name, text, rc);
    ck_assert_msg(got_bad == bad, "step_init(%s, %s): bad parameter %d, want %d (%s)", name,
                  text, got_bad, bad, err);
    ck_assert_msg(strstr(err, want) != NULL, "step_init(%s, %s): message '%s' lacks '%s'",
                  name, text, err, want);
}

START_TEST(test_params_errors)
{
    initv_fails("resize", "sise=3", 0, "no parameter 'sise' (it takes: size)");
    initv_fails("resize", "size=3;size=4", 1, "given twice");
    initv_fails("resize", "[1,2,3]", 0, "size '[1, 2, 3]'");
    initv_fails("resize", "[0,2]", 0, "1..65535");
    initv_fails("resize", "[]", 0, "size");
    initv_fails("center_crop", "size=[2,x]", 0, "size");
    initv_fails("decode", "mode=cmyk", 0, "mode 'cmyk' is not rgb or grey");
    initv_fails("decode", "mode=rgb;dct_scale=yes", 1, "dct_scale 'yes' is not true or false");
    initv_fails("decode", "mode=[rgb]", 0, "mode");
    initv_fails("random_flip", "[0.5,0.5]", 0, "is not a number in [0, 1]");
    initv_fails("random_resized_crop", "scale=[0.1,1]", -1, "needs size");
    initv_fails("random_resized_crop", "size=8;scale=[1,0.5]", 1, "0 < LO <= HI");
    initv_fails("random_resized_crop", "size=8;scale=[0,0.5]", 1, "scale '[0, 0.5]'");
    initv_fails("random_resized_crop", "size=8;ratio=[0.5]", 1, "ratio");
    initv_fails("random_resized_crop", "size=8;ratio=[1/0,2]", 1, "ratio");
    initv_fails("random_resized_crop", "size=8;ratio=[nan,2]", 1, "ratio");
    initv_fails("pad", "[1,2,3]", 0, "[LR, TB] or [L, T, R, B]");
    initv_fails("pad", "-1", 0, "padding");
    initv_fails("pad", "padding=1;fill=256", 1, "fill '256'");
    initv_fails("pad", "padding=1;fill=[1,2,3,4,5]", 1, "up to 4");
    initv_fails("pad", "fill=1", -1, "needs padding");
    initv_fails("normalize", "0.5", 0, "takes a mapping of parameters (mean, std, layout)");
    initv_fails("normalize", "mean=[0.5,0.5,0.5]", -1, "needs std");
    initv_fails("normalize", "std=1", -1, "needs mean");
    initv_fails("normalize", "mean=0;std=[1,0,1]", 1, "non-zero");
    initv_fails("normalize", "mean=[0,1];std=[1,2,3]", -1, "mean has 2 values and std 3");
    initv_fails("normalize", "mean=1e99;std=1", 0, "mean");
    initv_fails("normalize", "mean=0;std=1;layout=chw", 2, "nhwc or nchw");
    initv_fails("to_float", "layout=nhwc;scale=2", 1, "no parameter 'scale'");
}
END_TEST

/* Fingerprints of steps written two ways are equal when they compute
 * alike, and different whenever a parameter differs. */
START_TEST(test_fingerprint_params)
{
    static const struct {
        const char *name, *a, *b;
        int same;
    } cases[] = {
        {"resize", "256", "[256]", 1},
        {"resize", "256", "[256,256]", 0},
        {"center_crop", "224", "[224,224]", 1},
        {"center_crop", "[224,200]", "[200,224]", 0},
        {"decode", "", "mode=rgb;dct_scale=false", 1},
        {"decode", "", "grey", 0},
        {"decode", "", "dct_scale=true", 0},
        {"random_resized_crop", "224", "size=224;scale=[0.08,1];ratio=[3/4,4/3]", 1},
        {"random_resized_crop", "224", "size=224;scale=[0.08,0.9]", 0},
        {"random_resized_crop", "224", "size=224;ratio=[0.75,1.3333]", 0},
        {"pad", "4", "[4,4,4,4]", 1},
        {"pad", "4", "padding=4;fill=1", 0},
        {"pad", "padding=4;fill=[1,1,1]", "padding=4;fill=[1,1,2]", 0},
        {"pad", "[1,2]", "[2,1]", 0},
        {"normalize", "mean=0.5;std=0.25", "mean=0.5;std=0.25;layout=nhwc", 1},
        {"normalize", "mean=0.5;std=0.25", "mean=0.5;std=0.25;layout=nchw", 0},
        {"normalize", "mean=[0.485,0.456,0.406];std=0.2", "mean=[0.485,0.456,0.407];std=0.2",
         0},
        {"normalize", "mean=0.1;std=0.2", "mean=0.1;std=0.2000001", 0},
        {"to_float", "", "nhwc", 1},
        {"to_float", "", "nchw", 0},
        {"random_flip", "0.5", "p=0.5", 1},
    };
    for (size_t i = 0; i < NELEM(cases); i++) {
        struct step a = make_stepv(cases[i].name, cases[i].a);
        struct step b = make_stepv(cases[i].name, cases[i].b);
        int same = step_fingerprint(&a, 42) == step_fingerprint(&b, 42);
        ck_assert_msg(same == cases[i].same, "%s(%s) vs %s(%s): fingerprints %s",
                      cases[i].name, cases[i].a, cases[i].name, cases[i].b,
                      same ? "equal" : "differ");
    }
    /* to_float is not normalize(mean=0, std=1) by name, even if it computes
     * the same. */
    struct step tf = make_stepv("to_float", ""), nz = make_stepv("normalize", "mean=0;std=1");
    ck_assert_uint_ne(step_fingerprint(&tf, 0), step_fingerprint(&nz, 0));
}
END_TEST

static void chain_fails(const char *const *names, const char *const *specs, uint32_t n,
                        uint32_t want_bad, const char *want)
{
    struct step steps[8];
    char err[256] = "";
    uint32_t bad = 99;
    for (uint32_t i = 0; i < n; i++)
        steps[i] = make_stepv(names[i], specs[i]);
    int rc = step_chain_init(steps, n, &bad, err, sizeof(err));
    ck_assert_msg(rc == -EINVAL, "%s...: chain accepted", names[0]);
    ck_assert_msg(bad == want_bad, "bad step %u, want %u (%s)", bad, want_bad, err);
    ck_assert_msg(strstr(err, want) != NULL, "message '%s' lacks '%s'", err, want);
}

/* The sample model: every step's declared input and output, the types a
 * chain walks through, and the messages that name both sides. */
START_TEST(test_sample_types)
{
    char text[96];
    struct step_type t = step_type_source, u;
    ck_assert_uint_eq(t.domain, STEP_DOMAIN_ENCODED);
    ck_assert_uint_eq(t.rank, 0);
    step_type_describe(&t, text, sizeof(text));
    ck_assert_str_eq(text, "encoded bytes (a source file)");

    struct step dec = make_stepv("decode", "grey"), rs = make_stepv("resize", "8");
    struct step nchw = make_stepv("to_float", "layout=nchw");
    struct step nz = make_stepv("normalize", "mean=0;std=1");
    ck_assert(step_takes(&dec, &t));
    ck_assert(!step_takes(&rs, &t));
    step_gives(&dec, &t, &u);
    ck_assert_uint_eq(u.domain, STEP_DOMAIN_IMAGE);
    ck_assert_uint_eq(u.dtype, PROTO_DTYPE_U8);
    ck_assert_uint_eq(u.rank, 3);
    ck_assert_uint_eq(u.layout, STEP_LAYOUT_NHWC);
    ck_assert(!step_takes(&dec, &u));
    ck_assert(step_takes(&rs, &u) && step_takes(&nchw, &u) && step_takes(&nz, &u));
    step_type_describe(&u, text, sizeof(text));
    ck_assert_str_eq(text, "uint8 image [H, W, C]");
    /* An image step keeps its input's type. */
    step_gives(&rs, &u, &t);
    ck_assert(memcmp(&t, &u, sizeof(t)) == 0);
    /* float32 outputs take their layout from the step; nothing image-like
     * takes them. */
    step_gives(&nchw, &u, &t);
    ck_assert_uint_eq(t.dtype, PROTO_DTYPE_F32);
    ck_assert_uint_eq(t.layout, STEP_LAYOUT_NCHW);
    step_type_describe(&t, text, sizeof(text));
    ck_assert_str_eq(text, "float32 image [C, H, W]");
    ck_assert(!step_takes(&rs, &t) && !step_takes(&nz, &t));
    step_gives(&nz, &u, &t);
    ck_assert_uint_eq(t.layout, STEP_LAYOUT_NHWC);
    ck_assert(!step_takes(&rs, &t));

    /* step_out_dtype / step_out_layout agree with the table. */
    ck_assert_uint_eq(step_out_dtype(&dec, PROTO_DTYPE_F32), PROTO_DTYPE_U8);
    ck_assert_uint_eq(step_out_dtype(&rs, PROTO_DTYPE_U8), PROTO_DTYPE_U8);
    ck_assert_uint_eq(step_out_dtype(&nz, PROTO_DTYPE_U8), PROTO_DTYPE_F32);
    ck_assert_uint_eq(step_out_layout(&nchw, STEP_LAYOUT_NHWC), STEP_LAYOUT_NCHW);
    ck_assert_uint_eq(step_out_layout(&dec, STEP_LAYOUT_NCHW), STEP_LAYOUT_NHWC);

    /* A chain's type is its last step's. */
    struct step chain[3] = {dec, rs, nchw};
    step_chain_type(chain, 3, &t);
    ck_assert_uint_eq(t.dtype, PROTO_DTYPE_F32);
    ck_assert_uint_eq(t.layout, STEP_LAYOUT_NCHW);
    step_chain_type(chain, 0, &t);
    ck_assert_uint_eq(t.domain, STEP_DOMAIN_ENCODED);
    ck_assert_str_eq(step_takes_text(STEP_RESIZE), "a uint8 image [H, W, C]");
}
END_TEST

START_TEST(test_chain)
{
    struct step steps[4];
    char err[256];
    uint32_t bad = 99;

    steps[0] = make_stepv("decode", "dct_scale=true");
    steps[1] = make_stepv("resize", "[200,300]");
    steps[2] = make_stepv("center_crop", "128");
    steps[3] = make_stepv("normalize", "mean=0;std=1;layout=nchw");
    ck_assert_msg(step_chain_init(steps, 4, &bad, err, sizeof(err)) == 0, "%s", err);
    ck_assert(steps[0].dct_h == 200 && steps[0].dct_w == 300 && !steps[0].dct_shorter);
    steps[1] = make_stepv("resize", "256");
    ck_assert_int_eq(step_chain_init(steps, 4, &bad, err, sizeof(err)), 0);
    ck_assert(steps[0].dct_h == 256 && steps[0].dct_shorter);
    /* dct_scale off: nothing recorded (so it does not reach fingerprints). */
    steps[0] = make_stepv("decode", "");
    ck_assert_int_eq(step_chain_init(steps, 4, &bad, err, sizeof(err)), 0);
    ck_assert(steps[0].dct_h == 0 && steps[0].dct_w == 0);

    ck_assert_int_eq(step_chain_init(steps, 0, &bad, err, sizeof(err)), -EINVAL);
    chain_fails((const char *[]){"resize", "decode"}, (const char *[]){"8", ""}, 2, 0,
                "first step must be decode");
    chain_fails((const char *[]){"decode", "decode"}, (const char *[]){"", ""}, 2, 1,
                "only be the first");
    chain_fails((const char *[]){"decode", "to_float", "random_flip"},
                (const char *[]){"", "", ""}, 3, 2,
                "random_flip cannot follow to_float");
    chain_fails((const char *[]){"decode", "normalize", "to_float"},
                (const char *[]){"", "mean=0;std=1", ""}, 3, 2, "must be the last step");
    /* The messages name what the step takes and what it was given. */
    chain_fails((const char *[]){"decode", "to_float", "resize"},
                (const char *[]){"", "layout=nchw", "8"}, 3, 2,
                "resize takes a uint8 image [H, W, C], but to_float gives float32 image "
                "[C, H, W]");
    chain_fails((const char *[]){"center_crop"}, (const char *[]){"8"}, 1, 0,
                "center_crop takes a uint8 image [H, W, C], but the pipeline starts from "
                "encoded bytes");
    chain_fails((const char *[]){"decode", "resize", "decode"}, (const char *[]){"", "8", ""},
                3, 2, "decode takes encoded bytes (a source file), but resize before it "
                "gives uint8 image");
    chain_fails((const char *[]){"decode", "center_crop"},
                (const char *[]){"dct_scale=true", "8"}, 2, 0, "needs a resize right after");
    chain_fails((const char *[]){"decode"}, (const char *[]){"dct_scale=true"}, 1, 0,
                "dct_scale");
    chain_fails((const char *[]){"decode", "pad"}, (const char *[]){"grey", "padding=1;fill=[1,2,3]"},
                2, 1, "fill has 3 values for 1 channels");
    chain_fails((const char *[]){"decode", "normalize"},
                (const char *[]){"grey", "mean=[1,2,3];std=1"}, 2, 1,
                "3 values for 1 channels");

    /* Split points. */
    struct step tr[5] = {make_stepv("decode", ""), make_stepv("resize", "256"),
                         make_stepv("random_resized_crop", "224"),
                         make_stepv("random_flip", ""),
                         make_stepv("normalize", "mean=0;std=1")};
    ck_assert_int_eq(step_chain_init(tr, 5, &bad, err, sizeof(err)), 0);
    for (uint32_t split = 0; split <= 5; split++) {
        int rc = step_split_check(tr, 5, split, err, sizeof(err));
        ck_assert_int_eq(rc, split <= 2 ? 0 : -EINVAL);
        if (rc < 0)
            ck_assert_msg(strstr(err, "random_resized_crop") != NULL, "%s", err);
    }
    struct step dct[3] = {make_stepv("decode", "dct_scale=true"), make_stepv("resize", "64"),
                          make_stepv("random_flip", "")};
    ck_assert_int_eq(step_chain_init(dct, 3, &bad, err, sizeof(err)), 0);
    ck_assert_int_eq(step_split_check(dct, 3, 0, err, sizeof(err)), 0);
    ck_assert_int_eq(step_split_check(dct, 3, 2, err, sizeof(err)), 0);
    ck_assert_int_eq(step_split_check(dct, 3, 1, err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, "dct_scale") != NULL, "%s", err);
    ck_assert_int_eq(step_split_check(dct, 3, 3, err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, "random_flip") != NULL, "%s", err);
}
END_TEST

START_TEST(test_out_shape_params)
{
    uint32_t h, w, c;
    struct step s = make_stepv("decode", "grey");
    step_out_shape(&s, 0, 0, 0, &h, &w, &c);
    ck_assert(h == 0 && w == 0 && c == 1);
    ck_assert_uint_eq(step_out_dtype(&s, PROTO_DTYPE_F32), PROTO_DTYPE_U8);

    s = make_stepv("resize", "[100,50]"); /* fixed, even from an unknown size */
    step_out_shape(&s, 0, 0, 3, &h, &w, &c);
    ck_assert(h == 100 && w == 50 && c == 3);
    s = make_stepv("random_resized_crop", "[20,30]");
    step_out_shape(&s, 0, 0, 1, &h, &w, &c);
    ck_assert(h == 20 && w == 30 && c == 1);
    s = make_stepv("center_crop", "[20,30]");
    step_out_shape(&s, 7, 9, 3, &h, &w, &c);
    ck_assert(h == 20 && w == 30 && c == 3);
    s = make_stepv("pad", "[1,2,3,4]");
    step_out_shape(&s, 10, 20, 3, &h, &w, &c);
    ck_assert_msg(h == 16 && w == 24 && c == 3, "pad: %ux%u", w, h);
    step_out_shape(&s, 0, 0, 3, &h, &w, &c);
    ck_assert(h == 0 && w == 0);

    s = make_stepv("normalize", "mean=0;std=1;layout=nchw");
    step_out_shape(&s, 10, 20, 3, &h, &w, &c);
    ck_assert(h == 10 && w == 20 && c == 3);
    ck_assert_uint_eq(step_out_dtype(&s, PROTO_DTYPE_U8), PROTO_DTYPE_F32);
    ck_assert_uint_eq(step_out_layout(&s, STEP_LAYOUT_NHWC), STEP_LAYOUT_NCHW);
    s = make_stepv("to_float", "");
    ck_assert_uint_eq(step_out_dtype(&s, PROTO_DTYPE_U8), PROTO_DTYPE_F32);
    ck_assert_uint_eq(step_out_layout(&s, STEP_LAYOUT_NCHW), STEP_LAYOUT_NHWC);
    s = make_stepv("random_flip", "");
    ck_assert_uint_eq(step_out_dtype(&s, PROTO_DTYPE_U8), PROTO_DTYPE_U8);
    ck_assert_uint_eq(step_out_layout(&s, STEP_LAYOUT_NHWC), STEP_LAYOUT_NHWC);
    s = make_stepv("decode", "");
    ck_assert_uint_eq(step_out_layout(&s, STEP_LAYOUT_NCHW), STEP_LAYOUT_NHWC);
}
END_TEST

/* ---- decode: grey, dct_scale ---- */

#define PY_DECODE_L                                                         \
    "from PIL import Image;import sys;"                                     \
    "sys.stdout.buffer.write(Image.open(sys.argv[1]).convert(\"L\").tobytes())"

static void decode_file(const struct step *dec, const char *path, struct step_ctx *ctx,
                        struct img *out)
{
    struct img enc;
    read_encoded(path, &enc);
    apply_ok(dec, ctx, &enc, out);
    img_free(&enc);
}

/* decode(mode=grey) of a file equals PIL's convert("L"), byte for byte. */
static void check_grey_file(const char *path, const char *what)
{
    struct step_ctx ctx;
    struct img px = {0};
    struct step dec = make_stepv("decode", "grey");
    step_ctx_init(&ctx);
    decode_file(&dec, path, &ctx, &px);
    ck_assert_uint_eq(px.c, 1);
    uint8_t *ref = malloc(px.len);
    ck_assert_ptr_nonnull(ref);
    char args[4200];
    snprintf(args, sizeof(args), "'%s'", path);
    python_bytes(PY_DECODE_L, args, ref, px.len);
    struct diff d = compare(px.data, ref, px.len);
    printf("decode(mode=grey) %s vs PIL convert(\"L\"): %zu of %zu bytes differ\n", what,
           d.differing, px.len);
    ck_assert_msg(d.differing == 0, "%s: grey decode differs from PIL in %zu bytes (max %u)",
                  what, d.differing, d.max);
    free(ref);
    img_free(&px);
    step_ctx_free(&ctx);
}

/* Writes pixels (h x w, RGB or CMYK by pf) as a JPEG with subsampling samp
 * to a new temporary file named in path. */
static void write_jpeg(const uint8_t *px, uint32_t w, uint32_t h, int pf, int samp,
                       char *path, size_t pathlen)
{
    tjhandle tj = tjInitCompress();
    ck_assert_ptr_nonnull(tj);
    unsigned char *jpeg = NULL;
    unsigned long jlen = 0;
    ck_assert_msg(tjCompress2(tj, px, (int)w, 0, (int)h, pf, &jpeg, &jlen, samp, 90, 0) == 0,
                  "tjCompress2: %s", tjGetErrorStr2(tj));
    temp_path(path, pathlen);
    write_file(path, jpeg, jlen);
    tjFree(jpeg);
    tjDestroy(tj);
}

START_TEST(test_decode_grey_matches_pil)
{
    if (!pil_available())
        return;
    char path[4096];
    for (size_t i = 0; i < NELEM(photos); i++) {
        photo_path(photos[i].name, path, sizeof(path));
        check_grey_file(path, photos[i].name);
    }
    /* A greyscale JPEG and a CMYK one. */
    struct step_ctx ctx;
    struct img src = {0};
    step_ctx_init(&ctx);
    decode_photo(&photos[2], &ctx, &src);
    write_jpeg(src.data, src.w, src.h, TJPF_RGB, TJSAMP_GRAY, path, sizeof(path));
    check_grey_file(path, "greyscale JPEG");
    unlink(path);
    size_t pixels = (size_t)src.w * src.h;
    uint8_t *cmyk = malloc(pixels * 4);
    ck_assert_ptr_nonnull(cmyk);
    for (size_t i = 0; i < pixels; i++) {
        memcpy(cmyk + i * 4, src.data + i * 3, 3);
        cmyk[i * 4 + 3] = (uint8_t)(i * 7);
    }
    write_jpeg(cmyk, src.w, src.h, TJPF_CMYK, TJSAMP_420, path, sizeof(path));
    check_grey_file(path, "CMYK JPEG");
    unlink(path);
    free(cmyk);
    img_free(&src);
    step_ctx_free(&ctx);
}
END_TEST

static double psnr(const uint8_t *a, const uint8_t *b, size_t len)
{
    double se = 0;
    for (size_t i = 0; i < len; i++) {
        double d = (double)a[i] - b[i];
        se += d * d;
    }
    return se == 0 ? INFINITY : 10.0 * log10(255.0 * 255.0 * len / se);
}

/* A pipeline of decode (with dct) and resize (spec) run by hand, as the
 * worker does. */
static void decode_resize(const char *path, const char *dec_spec, const char *rs_spec,
                          struct step_ctx *ctx, struct img *mid, struct img *out)
{
    struct step st[2] = {make_stepv("decode", dec_spec), make_stepv("resize", rs_spec)};
    char err[256];
    uint32_t bad;
    ck_assert_msg(step_chain_init(st, 2, &bad, err, sizeof(err)) == 0, "%s", err);
    decode_file(&st[0], path, ctx, mid);
    apply_ok(&st[1], ctx, mid, out);
}

START_TEST(test_decode_dct_scale)
{
    static const struct {
        const char *rs;     /* the resize after decode */
        uint32_t num, den;  /* the factor for 640x427 */
    } cases[] = {
        /* 5/4 of what resize makes must fit: */
        {"256", 1, 1},       /* 479x320 for 383x256: 1/2 gives only 320x214 */
        {"100", 3, 8},       /* 187x125 for 149x100: 3/8 gives 240x161, 1/4 160x107 */
        {"80", 1, 4},        /* 149x100 for 119x80: 1/4 gives 160x107 */
        {"20", 1, 8},        /* 37x25 for 29x20: 1/8 (80x54) is the smallest */
        {"427", 1, 1},       /* nothing smaller covers it */
        {"[160,240]", 1, 2}, /* 300x200: 1/2 gives 320x214 */
        {"[171,256]", 1, 2}, /* 320x214 */
        {"[172,256]", 1, 1}, /* 320x215: 5/8 would, but is no faster than 1/1 */
    };
    struct step_ctx ctx;
    struct img mid = {0}, out = {0}, ref_mid = {0}, ref = {0};
    char path[4096];
    step_ctx_init(&ctx);
    photo_path(photos[0].name, path, sizeof(path));
    for (size_t i = 0; i < NELEM(cases); i++) {
        struct step st[2] = {make_stepv("decode", "dct_scale=true"),
                             make_stepv("resize", cases[i].rs)};
        uint32_t num, den, bad;
        char err[256];
        ck_assert_int_eq(step_chain_init(st, 2, &bad, err, sizeof(err)), 0);
        step_decode_scale(&st[0], photos[0].h, photos[0].w, &num, &den);
        ck_assert_msg(num * cases[i].den == den * cases[i].num,
                      "resize(%s) of 640x427: factor %u/%u, want %u/%u", cases[i].rs, num,
                      den, cases[i].num, cases[i].den);
        decode_resize(path, "dct_scale=true", cases[i].rs, &ctx, &mid, &out);
        ck_assert_uint_eq(mid.w, (photos[0].w * num + den - 1) / den);
        ck_assert_uint_eq(mid.h, (photos[0].h * num + den - 1) / den);
        ck_assert_uint_eq(mid.src_w, num == den ? 0 : photos[0].w);
        decode_resize(path, "", cases[i].rs, &ctx, &ref_mid, &ref);
        ck_assert_msg(out.w == ref.w && out.h == ref.h,
                      "resize(%s) after dct_scale: %ux%u, exact path %ux%u", cases[i].rs,
                      out.w, out.h, ref.w, ref.h);
    }
    /* The deviation from the exact path, per photo, colour and grey, when
     * decode scales (an unscaled decode is exact). */
    static const char *const sizes[] = {"256", "128", "64"};
    for (size_t i = 0; i < NELEM(photos); i++) {
        photo_path(photos[i].name, path, sizeof(path));
        for (size_t k = 0; k < NELEM(sizes) * 2; k++) {
            int grey = k & 1;
            const char *size = sizes[k / 2];
            decode_resize(path, grey ? "grey;dct_scale=true" : "dct_scale=true", size, &ctx,
                          &mid, &out);
            decode_resize(path, grey ? "grey" : "", size, &ctx, &ref_mid, &ref);
            ck_assert(out.w == ref.w && out.h == ref.h && out.c == ref.c);
            struct diff d = compare(out.data, ref.data, out.len);
            double p = psnr(out.data, ref.data, out.len);
            if (mid.w == ref_mid.w) {
                ck_assert_msg(d.differing == 0, "%s: unscaled decode differs", photos[i].name);
                continue;
            }
            printf("dct_scale: %s%s %ux%u decoded at %ux%u, resize(%s) -> %ux%u: "
                   "PSNR %.2f dB, mean abs diff %.3f, max %u vs the exact path\n",
                   photos[i].name, grey ? " (grey)" : "", ref_mid.w, ref_mid.h, mid.w, mid.h,
                   size, out.w, out.h, p, d.mean, d.max);
            ck_assert_msg(p >= 30.0, "%s: PSNR %.2f dB", photos[i].name, p);
        }
    }
    img_free(&mid);
    img_free(&out);
    img_free(&ref_mid);
    img_free(&ref);
    step_ctx_free(&ctx);
}
END_TEST

/* ---- resize to [H, W], boxes ---- */

#define PY_RESIZE_BOX                                                       \
    "from PIL import Image;import sys;a=sys.argv[2:];"                      \
    "im=Image.frombytes({\"1\":\"L\",\"3\":\"RGB\"}[a[2]],(int(a[0]),int(a[1])),"\
    "open(sys.argv[1],\"rb\").read());"                                     \
    "sys.stdout.buffer.write(im.resize((int(a[3]),int(a[4]))," PY_BILINEAR   \
    ",box=tuple(float(v) for v in a[5:9])).tobytes())"

/* Pillow's resize of in to out_w x out_h with box, into ref. */
static void pil_resize_box(const struct img *in, uint32_t out_w, uint32_t out_h,
                           const double box[4], uint8_t *ref)
{
    char path[4096], args[4400];
    temp_path(path, sizeof(path));
    write_file(path, in->data, in->len);
    snprintf(args, sizeof(args), "'%s' %u %u %u %u %u %.17g %.17g %.17g %.17g", path, in->w,
             in->h, in->c, out_w, out_h, box[0], box[1], box[2], box[3]);
    python_bytes(PY_RESIZE_BOX, args, ref, (size_t)out_w * out_h * in->c);
    unlink(path);
}

START_TEST(test_resize_hw_matches_pil)
{
    static const struct {
        uint32_t h, w, c;
        const char *size;
    } cases[] = {
        {427, 640, 3, "[256,320]"}, {60, 40, 3, "[100,10]"}, {33, 35, 1, "[34,33]"},
        {50, 50, 3, "[50,50]"},     {7, 300, 3, "[7,299]"},   {1, 1, 3, "[3,2]"},
    };
    if (!pil_available())
        return;
    struct step_ctx ctx;
    struct img in = {0}, out = {0};
    step_ctx_init(&ctx);
    for (size_t i = 0; i < NELEM(cases); i++) {
        struct step rs = make_stepv("resize", cases[i].size);
        make_pixels(&in, cases[i].h, cases[i].w, cases[i].c);
        fill_pattern(&in, i + 100);
        apply_ok(&rs, &ctx, &in, &out);
        ck_assert(out.h == rs.h && out.w == rs.w && out.c == in.c);
        uint8_t *ref = malloc(out.len);
        ck_assert_ptr_nonnull(ref);
        pil_resize_raw(&in, out.w, out.h, ref);
        struct diff d = compare(out.data, ref, out.len);
        ck_assert_msg(d.differing == 0, "%ux%u resize(%s): %zu bytes differ from PIL",
                      in.w, in.h, cases[i].size, d.differing);
        free(ref);
        img_free(&in);
    }
    img_free(&out);
    step_ctx_free(&ctx);
}
END_TEST

/* Pillow's box (fractional, anywhere in the image) through every kernel. */
START_TEST(test_resample_box_matches_pil)
{
    if (!pil_available())
        return;
    struct step_ctx ctx;
    struct img in = {0}, out = {0};
    unsigned usable = resize_isas_usable();
    step_ctx_init(&ctx);
    for (uint64_t n = 0; n < 12; n++) {
        uint64_t r = hash_mix64(n + 77);
        uint32_t h = 8 + r % 90, w = 8 + (r >> 8) % 90, c = n % 3 == 2 ? 1 : 3;
        uint32_t oh = 1 + (r >> 16) % 60, ow = 1 + (r >> 24) % 60;
        /* Box corners on 1/8 steps: exact in Pillow's float box. */
        double x0 = (double)((r >> 32) % (w * 4)) / 8, y0 = (double)((r >> 40) % (h * 4)) / 8;
        double x1 = x0 + 0.125 + (double)((r >> 48) % (uint64_t)((w - x0) * 8 - 1)) / 8;
        double y1 = y0 + 0.125 + (double)((r >> 56) % (uint64_t)((h - y0) * 8 - 1)) / 8;
        if (n == 0) { /* the whole image: one pass skipped */
            x0 = y0 = 0;
            x1 = w;
            y1 = h;
            oh = h;
        }
        make_pixels(&in, h, w, c);
        fill_pattern(&in, n);
        const double box[4] = {x0, y0, x1, y1};
        uint8_t *ref = malloc((size_t)oh * ow * c);
        ck_assert_ptr_nonnull(ref);
        pil_resize_box(&in, ow, oh, box, ref);
        struct step_resample_src src;
        step_resample_src_img(&src, &in);
        src.x0 = x0;
        src.y0 = y0;
        src.x1 = x1;
        src.y1 = y1;
        for (size_t k = 0; k < NELEM(resize_isas); k++) {
            if (!(usable >> k & 1))
                continue;
            int rc = step_resample(&ctx, resize_isas[k].isa, &src, oh, ow, &out, "test");
            ck_assert_msg(rc == 0, "step_resample: %d %s", rc, ctx.err);
            struct diff d = compare(out.data, ref, out.len);
            ck_assert_msg(d.differing == 0,
                          "%ux%ux%u box (%g,%g,%g,%g) -> %ux%u, %s kernel: %zu bytes differ "
                          "from PIL, max %u",
                          w, h, c, x0, y0, x1, y1, ow, oh, resize_isas[k].name, d.differing,
                          d.max);
        }
        free(ref);
        img_free(&in);
    }
    /* Boxes outside the view are refused. */
    make_pixels(&in, 10, 10, 3);
    struct step_resample_src src;
    step_resample_src_img(&src, &in);
    src.x1 = 10.5;
    ck_assert_int_eq(step_resample(&ctx, STEP_RESIZE_ISA_AUTO, &src, 5, 5, &out, "t"),
                     -EINVAL);
    src.x1 = 10;
    src.y0 = src.y1 = 3;
    ck_assert_int_eq(step_resample(&ctx, STEP_RESIZE_ISA_AUTO, &src, 5, 5, &out, "t"),
                     -EINVAL);
    img_free(&in);
    img_free(&out);
    step_ctx_free(&ctx);
}
END_TEST

/* ---- random_resized_crop ---- */

START_TEST(test_rrc_params)
{
    struct step s = make_stepv("random_resized_crop", "224");
    struct step_box b, b2;
    const uint32_t h = 256, w = 341;
    int n = 20000, fallbacks = 0;
    double area_sum = 0, lratio_sum = 0;
    for (int i = 0; i < n; i++) {
        uint64_t seed = hash_mix64((uint64_t)i);
        int at = step_rrc_params(&s, seed, h, w, &b);
        ck_assert(at >= 1 && at <= 11);
        step_rrc_params(&s, seed, h, w, &b2);
        ck_assert(memcmp(&b, &b2, sizeof(b)) == 0); /* same seed, same box */
        ck_assert(b.h >= 1 && b.w >= 1 && b.top + b.h <= h && b.left + b.w <= w);
        if (at == 11) {
            fallbacks++;
            continue;
        }
        double area = (double)b.h * b.w / (h * w), ratio = (double)b.w / b.h;
        /* Rounding moves the box by at most half a pixel a side. */
        ck_assert_msg(area >= 0.08 * 0.97 && area <= 1.0, "area fraction %f", area);
        ck_assert_msg(ratio >= 0.75 * 0.97 && ratio <= 4.0 / 3.0 * 1.03, "ratio %f", ratio);
        area_sum += area;
        lratio_sum += log(ratio);
    }
    int kept = n - fallbacks;
    /* With scale [0.08, 1] on a 4:3 image nearly every draw fits at the
     * first or second attempt; accepted draws are biased to smaller areas
     * (large areas at extreme ratios do not fit) and, the image being wide,
     * to wide crops. torchvision's get_params on 341x256 gives a mean area
     * fraction of 0.4355 and a mean log ratio of 0.031 over 20000 draws;
     * tests/python/test_fidelity.py compares the distributions. */
    ck_assert_msg(fallbacks < n / 1000, "%d fallbacks in %d", fallbacks, n);
    ck_assert_msg(fabs(area_sum / kept - 0.4355) < 0.01, "mean area fraction %f",
                  area_sum / kept);
    ck_assert_msg(fabs(lratio_sum / kept - 0.031) < 0.01, "mean log ratio %f",
                  lratio_sum / kept);
    printf("random_resized_crop(224) of %ux%u over %d seeds: mean area fraction %.4f, mean "
           "log ratio %.4f, %d fallbacks\n", w, h, n, area_sum / kept, lratio_sum / kept,
           fallbacks);

    /* The fallback: no draw fits (scale above 1), so the whole image, its
     * ratio clamped into [3/4, 4/3], centred. */
    struct step never = make_stepv("random_resized_crop", "size=8;scale=[2,3]");
    ck_assert_int_eq(step_rrc_params(&never, 1, 256, 341, &b), 11);
    ck_assert(b.top == 0 && b.left == 0 && b.h == 256 && b.w == 341);
    ck_assert_int_eq(step_rrc_params(&never, 1, 100, 400, &b), 11);
    ck_assert(b.h == 100 && b.w == 133 && b.top == 0 && b.left == 133); /* round(133.3) */
    ck_assert_int_eq(step_rrc_params(&never, 1, 401, 100, &b), 11);
    ck_assert(b.w == 100 && b.h == 133 && b.left == 0 && b.top == 134); /* round(133.3) */
    ck_assert_int_eq(step_rrc_params(&never, 1, 1, 1, &b), 11);
    ck_assert(b.w == 1 && b.h == 1);
    /* scale [1, 1] and ratio [1, 1] on a square: the whole image. */
    struct step whole = make_stepv("random_resized_crop", "size=8;scale=[1,1];ratio=[1,1]");
    ck_assert_int_eq(step_rrc_params(&whole, 5, 64, 64, &b), 1);
    ck_assert(b.h == 64 && b.w == 64 && b.top == 0 && b.left == 0);
}
END_TEST

#define PY_CROP_RESIZE                                                      \
    "from PIL import Image;import sys;a=[int(v) for v in sys.argv[2:]];"    \
    "im=Image.frombytes({1:\"L\",3:\"RGB\"}[a[2]],(a[0],a[1]),"             \
    "open(sys.argv[1],\"rb\").read());"                                     \
    "im=im.crop((a[6],a[5],a[6]+a[8],a[5]+a[7]));"                          \
    "sys.stdout.buffer.write(im.resize((a[3],a[4])," PY_BILINEAR ").tobytes())"

/* random_resized_crop is F.resized_crop with its box: crop, then resize. */
START_TEST(test_rrc_matches_pil)
{
    if (!pil_available())
        return;
    struct step_ctx ctx;
    struct img px = {0}, in = {0}, out = {0};
    char path[4096], args[4400];
    step_ctx_init(&ctx);
    decode_photo(&photos[2], &ctx, &px);
    struct step rs = make_step("resize", "256");
    apply_ok(&rs, &ctx, &px, &in);
    static const char *const specs[] = {"224", "size=[64,96];scale=[0.01,0.05]",
                                        "size=[300,200];scale=[0.9,1]"};
    for (int grey = 0; grey < 2; grey++) {
        if (grey) { /* the same through one channel */
            struct step dg = make_stepv("decode", "grey");
            char ppath[4096];
            photo_path(photos[2].name, ppath, sizeof(ppath));
            decode_file(&dg, ppath, &ctx, &px);
            apply_ok(&rs, &ctx, &px, &in);
        }
        temp_path(path, sizeof(path));
        write_file(path, in.data, in.len);
        for (size_t i = 0; i < NELEM(specs); i++) {
            struct step s = make_stepv("random_resized_crop", specs[i]);
            for (uint64_t seed = 1; seed <= 3; seed++) {
                struct step_box b;
                ctx.seed = hash_mix64(seed * 1000 + i);
                step_rrc_params(&s, ctx.seed, in.h, in.w, &b);
                apply_ok(&s, &ctx, &in, &out);
                ck_assert(out.h == s.h && out.w == s.w && out.c == in.c);
                uint8_t *ref = malloc(out.len);
                ck_assert_ptr_nonnull(ref);
                snprintf(args, sizeof(args), "'%s' %u %u %u %u %u %u %u %u %u", path, in.w,
                         in.h, in.c, out.w, out.h, b.top, b.left, b.h, b.w);
                python_bytes(PY_CROP_RESIZE, args, ref, out.len);
                struct diff d = compare(out.data, ref, out.len);
                ck_assert_msg(d.differing == 0,
                              "random_resized_crop(%s) box %ux%u at (%u,%u) of %ux%ux%u: %zu "
                              "bytes differ from PIL crop+resize, max %u",
                              specs[i], b.w, b.h, b.left, b.top, in.w, in.h, in.c,
                              d.differing, d.max);
                free(ref);
            }
        }
        unlink(path);
    }
    img_free(&px);
    img_free(&in);
    img_free(&out);
    step_ctx_free(&ctx);
}
END_TEST

/* ---- pad ---- */

START_TEST(test_pad)
{
    struct step_ctx ctx;
    struct img in, out = {0};
    step_ctx_init(&ctx);
    static const struct {
        const char *spec;
        uint32_t c;
        uint32_t l, t, r, b;
        uint8_t fill[3];
    } cases[] = {
        {"2", 3, 2, 2, 2, 2, {0, 0, 0}},
        {"padding=[1,3];fill=9", 1, 1, 3, 1, 3, {9, 9, 9}},
        {"padding=[0,1,2,3];fill=[10,20,30]", 3, 0, 1, 2, 3, {10, 20, 30}},
        {"padding=0", 3, 0, 0, 0, 0, {0, 0, 0}},
    };
    for (size_t i = 0; i < NELEM(cases); i++) {
        struct step s = make_stepv("pad", cases[i].spec);
        make_coords(&in, 3, 4, cases[i].c);
        apply_ok(&s, &ctx, &in, &out);
        uint32_t oh = 3 + cases[i].t + cases[i].b, ow = 4 + cases[i].l + cases[i].r;
        ck_assert(out.h == oh && out.w == ow && out.c == in.c);
        for (uint32_t y = 0; y < oh; y++)
            for (uint32_t x = 0; x < ow; x++)
                for (uint32_t ch = 0; ch < in.c; ch++) {
                    int64_t sy = (int64_t)y - cases[i].t, sx = (int64_t)x - cases[i].l;
                    uint8_t want = sy >= 0 && sy < 3 && sx >= 0 && sx < 4
                                       ? px_at((uint32_t)sy, (uint32_t)sx, ch)
                                       : cases[i].fill[ch];
                    uint8_t got = out.data[((size_t)y * ow + x) * in.c + ch];
                    if (got != want)
                        ck_abort_msg("pad(%s): (%u,%u,%u) is %u, want %u", cases[i].spec, y,
                                     x, ch, got, want);
                }
        img_free(&in);
    }
    /* Per-channel fill on an image of other channels; too large. */
    struct step s = make_stepv("pad", "padding=1;fill=[1,2,3]");
    make_coords(&in, 3, 4, 1);
    ck_assert_int_eq(step_apply(&s, &ctx, &in, &out), -EINVAL);
    s = make_stepv("pad", "65535");
    ctx.max_pixels = 1000000;
    ck_assert_int_eq(step_apply(&s, &ctx, &in, &out), -E2BIG);
    img_free(&in);
    img_free(&out);
    step_ctx_free(&ctx);
}
END_TEST

/* ---- normalize, to_float ---- */

/* torchvision's arithmetic, one float32 operation at a time. */
static float tv_normalize(uint8_t v, float mean, float std)
{
    volatile float x = (float)v / 255.0f;
    volatile float d = x - mean;
    return d / std;
}

static float f32_at(const struct img *im, size_t i)
{
    float f;
    memcpy(&f, im->data + i * 4, 4);
    return f;
}

START_TEST(test_normalize)
{
    struct step_ctx ctx;
    struct img in = {0}, out = {0};
    step_ctx_init(&ctx);
    static const struct {
        const char *name, *spec;
        uint32_t c;
    } cases[] = {
        {"normalize", "mean=[0.485,0.456,0.406];std=[0.229,0.224,0.225]", 3},
        {"normalize", "mean=[0.485,0.456,0.406];std=[0.229,0.224,0.225];layout=nchw", 3},
        {"normalize", "mean=0.5;std=0.5;layout=nchw", 1},
        {"normalize", "mean=[0.1,0.2,0.3,0.4];std=[1,2,3,4];layout=nchw", 4},
        {"normalize", "mean=[0.1,0.2,0.3,0.4];std=[1,2,3,4]", 4},
        {"to_float", "", 3},
        {"to_float", "nchw", 3},
    };
    for (size_t i = 0; i < NELEM(cases); i++) {
        struct step s = make_stepv(cases[i].name, cases[i].spec);
        uint32_t h = 5, w = 7, c = cases[i].c;
        make_pixels(&in, h, w, c);
        for (size_t k = 0; k < in.len; k++)
            in.data[k] = (uint8_t)(k * 37 + (k >> 8));
        in.data[0] = 0;
        in.data[1] = 255;
        /* Into a borrowed buffer at an odd address, as a batch slot may be. */
        size_t len = (size_t)h * w * c * 4;
        uint8_t *mem = malloc(len + 1);
        ck_assert_ptr_nonnull(mem);
        struct img slot = {.fmt = IMG_PIXELS, .data = mem + 1, .cap = len, .borrowed = 1};
        int rc = step_apply(&s, &ctx, &in, &slot);
        ck_assert_msg(rc == 0, "%s(%s): %d %s", cases[i].name, cases[i].spec, rc, ctx.err);
        ck_assert(slot.data == mem + 1 && slot.len == len && slot.dtype == PROTO_DTYPE_F32);
        ck_assert(slot.h == h && slot.w == w && slot.c == c);
        int nchw = s.layout == STEP_LAYOUT_NCHW;
        for (uint32_t y = 0; y < h; y++)
            for (uint32_t x = 0; x < w; x++)
                for (uint32_t ch = 0; ch < c; ch++) {
                    size_t pix = (size_t)y * w + x;
                    uint8_t v = in.data[pix * c + ch];
                    uint32_t k = s.nmean == 1 ? 0 : ch;
                    float want = tv_normalize(v, s.mean[k], s.std[k]);
                    float got = f32_at(&slot, nchw ? (size_t)ch * h * w + pix : pix * c + ch);
                    if (memcmp(&got, &want, 4) != 0)
                        ck_abort_msg("%s(%s): (%u,%u,%u) = %.9g, want %.9g", cases[i].name,
                                     cases[i].spec, y, x, ch, got, want);
                }
        if (s.kind == STEP_TO_FLOAT) /* pixel 0 is (0, 255, ...) */
            ck_assert(f32_at(&slot, 0) == 0.0f && f32_at(&slot, nchw ? h * w : 1) == 1.0f);
        /* An owned output grows to fit. */
        apply_ok(&s, &ctx, &in, &out);
        ck_assert(memcmp(out.data, slot.data, len) == 0);
        /* A slot too small is -ENOSPC. */
        slot.cap = len - 1;
        ck_assert_int_eq(step_apply(&s, &ctx, &in, &slot), -ENOSPC);
        free(mem);
        img_free(&in);
    }
    /* Channels the values do not fit; float input. */
    struct step s = make_stepv("normalize", "mean=[0,0,0];std=[1,1,1]");
    make_pixels(&in, 2, 2, 1);
    ck_assert_int_eq(step_apply(&s, &ctx, &in, &out), -EINVAL);
    img_free(&in);
    make_pixels(&in, 2, 2, 3);
    in.dtype = PROTO_DTYPE_F32;
    ck_assert_int_eq(step_apply(&s, &ctx, &in, &out), -EINVAL);
    img_free(&in);
    img_free(&out);
    step_ctx_free(&ctx);
}
END_TEST

/* Every byte value of every channel, for many means and stds, NCHW and
 * NHWC: torchvision's floats bit for bit, whichever kernel normalize picks
 * for the values (RGB to planes computes instead of looking up where that
 * gives every table value, and looks up where it does not). */
START_TEST(test_normalize_every_byte)
{
    struct step_ctx ctx;
    struct img in = {0}, out = {0};
    step_ctx_init(&ctx);
    uint32_t h = 3, w = 91, c = 3; /* 273 pixels: every byte, and a tail */
    make_pixels(&in, h, w, c);
    for (size_t i = 0; i < (size_t)h * w; i++) {
        in.data[i * 3] = (uint8_t)i;
        in.data[i * 3 + 1] = (uint8_t)(255 - i);
        in.data[i * 3 + 2] = (uint8_t)(i * 7);
    }
    for (int n = 0; n < 120; n++) {
        char spec[256];
        float mean[3], std[3];
        for (int ch = 0; ch < 3; ch++) {
            uint64_t r = hash_mix64((uint64_t)n * 3 + ch + 77);
            mean[ch] = n < 2 ? (n == 0 ? 0.485f - 0.029f * ch : 0.0f)
                             : (float)((r & 0xffff) / 65535.0 * 2.0 - 0.5);
            std[ch] = n < 2 ? (n == 0 ? 0.229f - 0.0025f * ch : 1.0f)
                            : (float)(0.001 + (r >> 16 & 0xffff) / 65535.0 *
                                                  (n % 3 == 0 ? 0.5 : 20.0));
        }
        snprintf(spec, sizeof(spec), "mean=[%.9g,%.9g,%.9g];std=[%.9g,%.9g,%.9g]%s", mean[0],
                 mean[1], mean[2], std[0], std[1], std[2], n % 2 ? "" : ";layout=nchw");
        struct step s = make_stepv("normalize", spec);
        apply_ok(&s, &ctx, &in, &out);
        int nchw = s.layout == STEP_LAYOUT_NCHW;
        for (size_t pix = 0; pix < (size_t)h * w; pix++)
            for (uint32_t ch = 0; ch < c; ch++) {
                float want = tv_normalize(in.data[pix * c + ch], s.mean[ch], s.std[ch]);
                float got = f32_at(&out, nchw ? (size_t)ch * h * w + pix : pix * c + ch);
                if (memcmp(&got, &want, 4) != 0)
                    ck_abort_msg("normalize(%s): pixel %zu channel %u = %.9g, want %.9g",
                                 spec, pix, ch, got, want);
            }
    }
    img_free(&in);
    img_free(&out);
    step_ctx_free(&ctx);
}
END_TEST

/* ---- throughput (informational) ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Runs steps st[0..n) over every input iters times, with ctx's seed
 * changing per run, and prints the time per image of each step; out is
 * the last output. */
static void time_pipeline(const char *label, const struct step *st, size_t n,
                          const struct img *inputs, size_t ninputs, int iters,
                          struct step_ctx *ctx, struct img *out)
{
    double t[8] = {0};
    struct img mid[2] = {{0}, {0}};
    int rc = 0;
    ck_assert_uint_le(n, NELEM(t));
    double t0 = now_s();
    for (int it = 0; it < iters; it++) {
        for (size_t i = 0; i < ninputs; i++) {
            const struct img *cur = &inputs[i];
            ctx->seed = hash_mix64((uint64_t)it * ninputs + i);
            for (size_t k = 0; k < n; k++) {
                struct img *o = k + 1 == n ? out : &mid[k % 2];
                double t1 = now_s();
                rc |= step_apply(&st[k], ctx, cur, o);
                t[k] += now_s() - t1;
                cur = o;
            }
        }
    }
    double total = now_s() - t0;
    ck_assert_msg(rc == 0, "%s: a step failed: %s", label, ctx->err);
    int images = iters * (int)ninputs;
    char line[512];
    size_t pos = (size_t)snprintf(line, sizeof(line), "throughput: %s, %d images: %.1f/s on "
                                  "one thread (", label, images, images / total);
    for (size_t k = 0; k < n && pos < sizeof(line); k++) {
        char desc[128];
        step_describe(&st[k], desc, sizeof(desc));
        pos += (size_t)snprintf(line + pos, sizeof(line) - pos, "%s%s %.3f ms", k ? ", " : "",
                                desc, t[k] * 1e3 / images);
    }
    printf("%s per image)\n", line);
    img_free(&mid[0]);
    img_free(&mid[1]);
}

/* ---- audio steps (issue 18) ---- */

/* A 16-bit PCM WAV of a sine (440 Hz) in a malloc'd img; data_len 0: the
 * real size. */
static void sine_wav(struct img *im, uint32_t rate, uint32_t channels, uint32_t frames,
                     uint32_t claimed_rate)
{
    size_t data = (size_t)frames * channels * 2;
    uint8_t *b = calloc(1, 44 + data);
    ck_assert_ptr_nonnull(b);
    uint32_t r = claimed_rate ? claimed_rate : rate;
    memcpy(b, "RIFF", 4);
    uint32_t v = (uint32_t)(36 + data);
    memcpy(b + 4, &v, 4);
    memcpy(b + 8, "WAVEfmt ", 8);
    v = 16;
    memcpy(b + 16, &v, 4);
    uint16_t h = 1;
    memcpy(b + 20, &h, 2);
    h = (uint16_t)channels;
    memcpy(b + 22, &h, 2);
    memcpy(b + 24, &r, 4);
    v = r * 2 * channels;
    memcpy(b + 28, &v, 4);
    h = (uint16_t)(2 * channels);
    memcpy(b + 32, &h, 2);
    h = 16;
    memcpy(b + 34, &h, 2);
    memcpy(b + 36, "data", 4);
    v = (uint32_t)data;
    memcpy(b + 40, &v, 4);
    for (uint32_t t = 0; t < frames; t++)
        for (uint32_t c = 0; c < channels; c++) {
            int16_t x = (int16_t)(8000 * sin(2 * M_PI * 440.0 * t / rate) * (c + 1));
            memcpy(b + 44 + ((size_t)t * channels + c) * 2, &x, 2);
        }
    *im = (struct img){.fmt = IMG_ENCODED, .data = b, .len = 44 + data, .cap = 44 + data};
}

START_TEST(test_audio_steps)
{
    char text[256];
    struct step dec = make_stepv("decode_audio", "mono=true");
    struct step rs = make_stepv("resample", "16000");
    struct step crop = make_stepv("time_crop", "length=8000");
    struct step rcrop = make_stepv("random_time_crop", "length=8000;pad=random");
    struct step mel = make_stepv("mel_spectrogram", "n_mels=40;sample_rate=16000");
    struct step db = make_stepv("amplitude_to_db", "top_db=80");
    struct step tm = make_stepv("time_mask", "10");
    struct step fm = make_stepv("frequency_mask", "6");
    struct step gain = make_stepv("random_gain", "[-6,6]");
    describe_is(&dec, "decode_audio(mono=true)");
    describe_is(&rs, "resample(rate=16000)");
    describe_is(&db, "amplitude_to_db(top_db=80)");
    describe_is(&gain, "random_gain(gain_db=[-6,6])");
    ck_assert(!step_is_random(&dec) && !step_is_random(&mel) && !step_is_random(&crop));
    ck_assert(step_is_random(&rcrop) && step_is_random(&tm) && step_is_random(&fm) &&
              step_is_random(&gain));
    /* parameters are in the fingerprint */
    struct step rs2 = make_stepv("resample", "rate=16000;rolloff=0.95");
    ck_assert(step_fingerprint(&rs, 0) != step_fingerprint(&rs2, 0));

    /* types: waveform, then spectrogram; an image step takes neither */
    struct step_type t = step_type_source;
    struct step resize = make_step("resize", "8");
    ck_assert(step_takes(&dec, &t));
    step_gives(&dec, &t, &t);
    step_type_describe(&t, text, sizeof(text));
    ck_assert_str_eq(text, "float32 waveform [C, T]");
    ck_assert_uint_eq(t.rank, 2);
    ck_assert(step_takes(&rs, &t) && step_takes(&gain, &t) && !step_takes(&tm, &t) &&
              !step_takes(&resize, &t));
    step_gives(&mel, &t, &t);
    step_type_describe(&t, text, sizeof(text));
    ck_assert_str_eq(text, "float32 spectrogram [C, F, T]");
    ck_assert(step_takes(&db, &t) && step_takes(&tm, &t) && !step_takes(&rs, &t) &&
              !step_takes(&resize, &t));

    /* a chain and its shapes: [1, 40, 8000 / 200 + 1] */
    struct step chain[] = {dec, rs, crop, mel, db, tm, fm};
    uint32_t bad = 99, h = 0, w = 0, c = 0;
    ck_assert_int_eq(step_chain_init(chain, 7, &bad, text, sizeof(text)), 0);
    for (int i = 0; i < 7; i++)
        step_out_shape(&chain[i], h, w, c, &h, &w, &c);
    ck_assert_uint_eq(c, 1);
    ck_assert_uint_eq(h, 40);
    ck_assert_uint_eq(w, 41);

    /* running it: a 0.75 s stereo sine at 22050 Hz */
    struct step_ctx ctx;
    step_ctx_init(&ctx);
    struct img enc, a = {0}, b = {0};
    sine_wav(&enc, 22050, 2, 16537, 0);
    apply_ok(&dec, &ctx, &enc, &a);
    ck_assert_uint_eq(a.c, 1);
    ck_assert_uint_eq(a.h, 1);
    ck_assert_uint_eq(a.w, 16537);
    ck_assert_uint_eq(a.rate, 22050);
    apply_ok(&rs, &ctx, &a, &b);
    ck_assert_uint_eq(b.rate, 16000);
    ck_assert_uint_eq(b.w, 12000); /* ceil(16537 * 16000 / 22050) */
    apply_ok(&crop, &ctx, &b, &a);
    ck_assert_uint_eq(a.w, 8000);
    apply_ok(&mel, &ctx, &a, &b);
    ck_assert_uint_eq(b.h, 40);
    ck_assert_uint_eq(b.w, 41);
    ck_assert_uint_eq(b.rate, 16000);
    apply_ok(&db, &ctx, &b, &a);
    /* random steps: a function of the seed */
    struct img m1 = {0}, m2 = {0};
    ctx.seed = 7;
    apply_ok(&tm, &ctx, &a, &m1);
    ctx.seed = 7;
    apply_ok(&tm, &ctx, &a, &m2);
    ck_assert_mem_eq(m1.data, m2.data, m1.len);
    int differs = 0;
    for (uint64_t seed = 1; seed < 20 && !differs; seed++) {
        ctx.seed = seed;
        apply_ok(&tm, &ctx, &a, &m2);
        differs = memcmp(m1.data, m2.data, m1.len) != 0;
    }
    ck_assert(differs);
    /* the mel step refuses a clip at another rate */
    ck_assert_int_eq(step_apply(&mel, &ctx, &m1, &b), -EINVAL); /* a spectrogram in */
    apply_ok(&dec, &ctx, &enc, &b);
    ck_assert_int_eq(step_apply(&mel, &ctx, &b, &m2), -EBADMSG);
    ck_assert_ptr_nonnull(strstr(ctx.err, "22050 Hz"));
    img_free(&enc);

    /* bad files: a claimed rate of 4 GHz; over the duration and channel limits */
    sine_wav(&enc, 16000, 1, 100, 0xfffffff0u);
    ck_assert_int_eq(step_apply(&dec, &ctx, &enc, &b), -EBADMSG);
    img_free(&enc);
    sine_wav(&enc, 8000, 3, 8000 * 3, 0);
    ctx.max_seconds = 2;
    ck_assert_int_eq(step_apply(&dec, &ctx, &enc, &b), -E2BIG);
    ctx.max_seconds = 0;
    ctx.max_channels = 2;
    ck_assert_int_eq(step_apply(&dec, &ctx, &enc, &b), -E2BIG);
    ctx.max_channels = 0;
    apply_ok(&dec, &ctx, &enc, &b);
    ctx.name = "class/clip.flac"; /* the extension says the format */
    ck_assert_int_eq(step_apply(&dec, &ctx, &enc, &b), -EBADMSG);
    ck_assert_ptr_nonnull(strstr(ctx.err, "wrong extension"));
    ctx.name = "class/clip.WAV";
    apply_ok(&dec, &ctx, &enc, &b);
    ctx.name = "clip.bin"; /* not one of ours: the bytes say */
    apply_ok(&dec, &ctx, &enc, &b);
    ctx.name = NULL;
    enc.len = 3; /* truncated to nothing recognisable */
    ck_assert_int_eq(step_apply(&dec, &ctx, &enc, &b), -EBADMSG);
    img_free(&enc);
    img_free(&a);
    img_free(&b);
    img_free(&m1);
    img_free(&m2);
    step_ctx_free(&ctx);
}
END_TEST

START_TEST(test_throughput)
{
    /* Repeated use of one context; the figures printed are informational
     * (speed is measured by `make bench`, not by unit tests). */
    const char *env = getenv("PRESTO_STEP_ITERS");
    int iters = env ? atoi(env) : 5;
    struct step_ctx ctx;
    struct img enc[NELEM(photos)], resized[NELEM(photos)], out = {0};
    char err[256];
    uint32_t bad;
    step_ctx_init(&ctx);
    for (size_t i = 0; i < NELEM(photos); i++)
        read_photo(&photos[i], &enc[i]);

    struct step eval[3] = {make_step("decode", NULL), make_step("resize", "256"),
                           make_step("center_crop", "224")};
    time_pipeline("decode+resize(256)+center_crop(224)", eval, 3, enc, NELEM(photos), iters,
                  &ctx, &out);
    ck_assert(out.w == 224 && out.h == 224 && out.c == 3);
    /* dct_scale pays for large images: here to 112 (1/2 or 3/8). */
    eval[1] = make_step("resize", "128");
    eval[2] = make_step("center_crop", "112");
    time_pipeline("decode+resize(128)+center_crop(112)", eval, 3, enc, NELEM(photos), iters,
                  &ctx, &out);
    eval[0] = make_stepv("decode", "dct_scale=true");
    ck_assert_int_eq(step_chain_init(eval, 3, &bad, err, sizeof(err)), 0);
    time_pipeline("the same with dct_scale", eval, 3, enc, NELEM(photos), iters, &ctx, &out);
    ck_assert(out.w == 112 && out.h == 112 && out.c == 3);
    eval[1] = make_step("resize", "256");

    /* The online part of the ImageNet training transforms, from the
     * resize(256) a cache would hold. */
    struct img px = {0};
    eval[0] = make_step("decode", NULL);
    for (size_t i = 0; i < NELEM(photos); i++) {
        memset(&resized[i], 0, sizeof(resized[i]));
        apply_ok(&eval[0], &ctx, &enc[i], &px);
        apply_ok(&eval[1], &ctx, &px, &resized[i]);
    }
    img_free(&px);
    struct step train[3] = {
        make_step("random_resized_crop", "224"), make_step("random_flip", NULL),
        make_stepv("normalize", "mean=[0.485,0.456,0.406];std=[0.229,0.224,0.225];"
                                "layout=nchw")};
    time_pipeline("random_resized_crop(224)+random_flip+normalize", train, 3, resized,
                  NELEM(photos), iters * 20, &ctx, &out);
    ck_assert(out.w == 224 && out.h == 224 && out.dtype == PROTO_DTYPE_F32);

    for (size_t i = 0; i < NELEM(photos); i++) {
        img_free(&enc[i]);
        img_free(&resized[i]);
    }
    img_free(&out);
    step_ctx_free(&ctx);
}
END_TEST

/* ---- the image augmentations (imgaug.c) and the cold path (rrc.c) ---- */

/* A synthetic h x w x c uint8 image: gradients and a few edges. */
static void gradient(struct img *im, uint32_t h, uint32_t w, uint32_t c)
{
    make_pixels(im, h, w, c);
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++)
            for (uint32_t k = 0; k < c; k++)
                im->data[((size_t)y * w + x) * c + k] =
                    (uint8_t)((x * 7 + y * 3 + k * 60 + ((x / 5 + y / 7) % 2) * 90) & 255);
}

START_TEST(test_augment_steps)
{
    static const struct {
        const char *name, *spec;
    } cases[] = {
        {"color_jitter", "brightness=0.5;contrast=0.5;saturation=0.5;hue=0.2"},
        {"random_grayscale", "p=0.5"},
        {"gaussian_blur", "kernel_size=[5,3];sigma=[0.5,2]"},
        {"random_rotation", "degrees=40;interpolation=bilinear;fill=9"},
        {"random_affine", "degrees=10;translate=[0.2,0.1];scale=[0.7,1.3];shear=[-5,5,-5,5]"},
        {"auto_augment", ""},
        {"rand_augment", "num_ops=4;magnitude=20"},
        {"trivial_augment_wide", "interpolation=bilinear"},
    };
    struct step_ctx ctx;
    struct img in[2], a = {0}, b = {0};
    step_ctx_init(&ctx);
    gradient(&in[0], 37, 53, 3);
    gradient(&in[1], 37, 53, 1);
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        struct step s = make_stepv(cases[k].name, cases[k].spec);
        ck_assert(step_is_random(&s));
        for (int g = 0; g < 2; g++) {
            uint32_t changed = 0;
            for (uint64_t seed = 1; seed <= 24; seed++) {
                ctx.seed = hash_mix64(seed);
                apply_ok(&s, &ctx, &in[g], &a);
                apply_ok(&s, &ctx, &in[g], &b);
                ck_assert(a.h == 37 && a.w == 53 && a.c == in[g].c && a.len == in[g].len);
                ck_assert_msg(memcmp(a.data, b.data, a.len) == 0, "%s: seed %llu twice",
                              cases[k].name, (unsigned long long)seed);
                changed += memcmp(a.data, in[g].data, a.len) != 0;
            }
            /* On grey, saturation and hue do nothing, as on a PIL image of mode L;
             * grayscale neither; everything else changes most images. */
            if (!(g == 1 && strcmp(cases[k].name, "random_grayscale") == 0))
                ck_assert_msg(changed >= 6, "%s (%u channels): %u of 24 changed",
                              cases[k].name, in[g].c, changed);
        }
    }
    /* A fixed sigma is not random: it may be cached. */
    struct step fixed = make_stepv("gaussian_blur", "kernel_size=3;sigma=1");
    ck_assert(!step_is_random(&fixed));
    /* Input types: an image step refuses float32, random_erasing uint8. */
    struct step jit = make_stepv("color_jitter", "brightness=0.4");
    struct step er = make_stepv("random_erasing", "p=1;value=random");
    ck_assert_int_eq(step_apply(&er, &ctx, &in[0], &a), -EINVAL);
    ck_assert_ptr_nonnull(strstr(ctx.err, "float32"));
    struct step tf = make_step("to_float", NULL);
    struct img f = {0}, e = {0};
    apply_ok(&tf, &ctx, &in[0], &f);
    ck_assert_int_eq(step_apply(&jit, &ctx, &f, &a), -EINVAL);
    /* random_erasing, p 1: a box of normal values, the rest untouched. */
    uint32_t erased = 0;
    for (uint64_t seed = 1; seed <= 24; seed++) {
        ctx.seed = hash_mix64(seed);
        apply_ok(&er, &ctx, &f, &e);
        ck_assert(e.len == f.len && e.dtype == PROTO_DTYPE_F32);
        const float *x = (const float *)(void *)e.data, *y = (const float *)(void *)f.data;
        for (size_t i = 0; i < e.len / 4; i++)
            erased += x[i] != y[i];
    }
    ck_assert_uint_gt(erased, 24 * 20);
    img_free(&f);
    img_free(&e);
    img_free(&a);
    img_free(&b);
    img_free(&in[0]);
    img_free(&in[1]);
    step_ctx_free(&ctx);
}
END_TEST

/* decode + random_resized_crop as the cold path runs them: the crop's region
 * alone, the same bytes as decode then crop (RGB and grey), and at the DCT
 * scale close to them. With random_flip fused in (the resize writing its rows
 * mirrored), on the region and on decoded pixels: the bytes of crop then
 * flip. */
START_TEST(test_decode_rrc_region)
{
    struct step_ctx ctx;
    struct img enc, full = {0}, want = {0}, got = {0}, flipped = {0}, nwant = {0};
    struct step flip = make_stepv("random_flip", "p=1");
    step_ctx_init(&ctx);
    for (size_t p = 0; p < sizeof(photos) / sizeof(photos[0]); p++) {
        read_photo(&photos[p], &enc);
        for (int grey = 0; grey < 2; grey++) {
            struct step dec = make_step("decode", grey ? "grey" : NULL);
            struct step rrc = make_stepv("random_resized_crop", "size=[64,80]");
            for (uint64_t seed = 1; seed <= 12; seed++) {
                ctx.seed = 0;
                apply_ok(&dec, &ctx, &enc, &full);
                ctx.seed = hash_mix64(seed * 31 + p);
                apply_ok(&rrc, &ctx, &full, &want);
                ck_assert_int_eq(step_decode_rrc_apply(&dec, &rrc, &ctx, &enc, &got), 1);
                ck_assert(got.h == 64 && got.w == 80 && got.len == want.len);
                ck_assert_msg(memcmp(got.data, want.data, got.len) == 0,
                              "%s grey %d seed %llu: region differs", photos[p].name, grey,
                              (unsigned long long)seed);
                /* crop then flip, and the two fused: on the region, on the pixels */
                apply_ok(&flip, &ctx, &want, &flipped);
                ck_assert_int_eq(step_decode_rrc_tail_apply(&dec, &rrc, 1, NULL, &ctx, &enc, &got),
                                 1);
                ck_assert(got.len == flipped.len);
                ck_assert_msg(memcmp(got.data, flipped.data, got.len) == 0,
                              "%s grey %d seed %llu: mirrored region differs", photos[p].name,
                              grey, (unsigned long long)seed);
                ck_assert_int_eq(
                    step_decode_rrc_tail_apply(NULL, &rrc, 1, NULL, &ctx, &full, &got), 0);
                ck_assert(got.len == flipped.len);
                ck_assert_msg(memcmp(got.data, flipped.data, got.len) == 0,
                              "%s grey %d seed %llu: mirrored crop differs", photos[p].name,
                              grey, (unsigned long long)seed);
                ck_assert_int_eq(
                    step_decode_rrc_tail_apply(NULL, &rrc, 0, NULL, &ctx, &full, &got), 0);
                ck_assert(memcmp(got.data, want.data, got.len) == 0);
                /* normalize (NHWC, NCHW) or to_float fused in too, flipped or
                 * not: the floats of the steps apart */
                for (int m = 0; m < 2; m++) {
                    static const char *const nzp[2][2] = {
                        {"mean=[0.485,0.456,0.406];std=[0.229,0.224,0.225]",
                         "mean=[0.485,0.456,0.406];std=[0.229,0.224,0.225];layout=nchw"},
                        {"mean=[0.449];std=[0.226]", "mean=[0.449];std=[0.226];layout=nchw"}};
                    struct step nz = seed % 3 == 0
                                         ? make_stepv("to_float", m ? "layout=nchw" : "layout=nhwc")
                                         : make_stepv("normalize", nzp[grey][(seed + m) & 1]);
                    apply_ok(&nz, &ctx, m ? &flipped : &want, &nwant);
                    ck_assert_int_eq(
                        step_decode_rrc_tail_apply(&dec, &rrc, m, &nz, &ctx, &enc, &got), 1);
                    ck_assert(got.len == nwant.len && got.dtype == PROTO_DTYPE_F32 &&
                              got.h == 64 && got.w == 80);
                    ck_assert_msg(memcmp(got.data, nwant.data, got.len) == 0,
                                  "%s grey %d seed %llu mirror %d: normalized region differs",
                                  photos[p].name, grey, (unsigned long long)seed, m);
                    ck_assert_int_eq(
                        step_decode_rrc_tail_apply(NULL, &rrc, m, &nz, &ctx, &full, &got), 0);
                    ck_assert(got.len == nwant.len);
                    ck_assert_msg(memcmp(got.data, nwant.data, got.len) == 0,
                                  "%s grey %d seed %llu mirror %d: normalized crop differs",
                                  photos[p].name, grey, (unsigned long long)seed, m);
                }
            }
        }
        /* dct_scale: a region at a reduced scale for small crops; close. */
        struct step dct = make_stepv("decode", "dct_scale=true");
        struct step small = make_stepv("random_resized_crop", "size=24");
        struct step dec = make_step("decode", NULL);
        double se = 0;
        size_t n = 0;
        for (uint64_t seed = 1; seed <= 12; seed++) {
            ctx.seed = 0;
            apply_ok(&dec, &ctx, &enc, &full);
            ctx.seed = hash_mix64(seed + 1000 * p);
            apply_ok(&small, &ctx, &full, &want);
            ck_assert_int_eq(step_decode_rrc_apply(&dct, &small, &ctx, &enc, &got), 1);
            for (size_t i = 0; i < got.len; i++, n++)
                se += ((double)got.data[i] - want.data[i]) * ((double)got.data[i] - want.data[i]);
        }
        double psnr = 10 * log10(255.0 * 255.0 / (se / n + 1e-12));
        printf("decode_rrc_region %s: region equal to full decode; dct_scale %.1f dB\n",
               photos[p].name, psnr);
        ck_assert_msg(psnr > 30.0, "%s: dct_scale region %.1f dB", photos[p].name, psnr);
        img_free(&enc);
    }
    /* Not a JPEG: decoded whole (and refused as decode refuses it). */
    uint8_t junk[64] = "not an image at all";
    struct img bad = {.fmt = IMG_ENCODED, .data = junk, .len = sizeof(junk)};
    struct step dec = make_step("decode", NULL);
    struct step rrc = make_stepv("random_resized_crop", "size=8");
    ck_assert_int_eq(step_decode_rrc_apply(&dec, &rrc, &ctx, &bad, &got), -EBADMSG);
    img_free(&flipped);
    img_free(&nwant);
    img_free(&full);
    img_free(&want);
    img_free(&got);
    step_ctx_free(&ctx);
}
END_TEST

/* Adds a case that reads the photos when they are there; else only counts it
 * (tc is not used then: the decode and throughput TCases are not created). */
#define ADD_PHOTO_TEST(tc, t)                                                    \
    do {                                                                         \
        if (with_photos)                                                         \
            tcase_add_test(tc, t);                                               \
        else                                                                     \
            (*photo_cases_skipped)++;                                            \
    } while (0)

static Suite *steps_suite(int with_photos, int *photo_cases_skipped)
{
    Suite *s = suite_create("steps");

    TCase *tc = tcase_create("declarations");
    tcase_add_test(tc, test_init_valid);
    tcase_add_test(tc, test_init_errors);
    tcase_add_test(tc, test_fingerprint);
    tcase_add_test(tc, test_out_shape);
    tcase_add_test(tc, test_splitmix);
    tcase_add_test(tc, test_params_valid);
    tcase_add_test(tc, test_params_errors);
    tcase_add_test(tc, test_fingerprint_params);
    tcase_add_test(tc, test_sample_types);
    tcase_add_test(tc, test_chain);
    tcase_add_test(tc, test_out_shape_params);
    tcase_add_test(tc, test_audio_steps);
    suite_add_tcase(s, tc);

    if (with_photos) {
        tc = tcase_create("decode");
        tcase_set_timeout(tc, 60);
        suite_add_tcase(s, tc);
    }
    ADD_PHOTO_TEST(tc, test_decode_shape);
    ADD_PHOTO_TEST(tc, test_decode_matches_pil);
    ADD_PHOTO_TEST(tc, test_decode_subsampling_matches_pil);
    ADD_PHOTO_TEST(tc, test_decode_cmyk_matches_pil);
    ADD_PHOTO_TEST(tc, test_decode_errors);
    ADD_PHOTO_TEST(tc, test_decode_max_pixels);
    ADD_PHOTO_TEST(tc, test_decode_grey_matches_pil);
    ADD_PHOTO_TEST(tc, test_decode_dct_scale);

    tc = tcase_create("resize");
    tcase_set_timeout(tc, 60);
    ADD_PHOTO_TEST(tc, test_resize_photos_match_pil);
    ADD_PHOTO_TEST(tc, test_resize_photos_kernels_match_pil);
    tcase_add_test(tc, test_resize_shapes_match_pil);
    tcase_add_test(tc, test_resize_kernels_agree);
    tcase_add_test(tc, test_resize_isa_errors);
    tcase_add_test(tc, test_resize_constant);
    tcase_add_test(tc, test_resize_shapes);
    tcase_add_test(tc, test_resize_hw_matches_pil);
    tcase_add_test(tc, test_resample_box_matches_pil);
    suite_add_tcase(s, tc);

    tc = tcase_create("center_crop");
    tcase_add_test(tc, test_crop_offsets);
    tcase_add_test(tc, test_crop_padding);
    tcase_add_test(tc, test_crop_hw);
    tcase_add_test(tc, test_pad);
    suite_add_tcase(s, tc);

    tc = tcase_create("random_resized_crop");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_rrc_params);
    ADD_PHOTO_TEST(tc, test_rrc_matches_pil);
    suite_add_tcase(s, tc);

    tc = tcase_create("normalize");
    tcase_add_test(tc, test_normalize);
    tcase_add_test(tc, test_normalize_every_byte);
    suite_add_tcase(s, tc);

    tc = tcase_create("augment");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_augment_steps);
    ADD_PHOTO_TEST(tc, test_decode_rrc_region);
    suite_add_tcase(s, tc);

    tc = tcase_create("random_flip");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_flip);
    tcase_add_test(tc, test_flip_rate);
    suite_add_tcase(s, tc);

    if (with_photos) {
        tc = tcase_create("throughput");
        tcase_set_timeout(tc, 120);
        suite_add_tcase(s, tc);
    }
    ADD_PHOTO_TEST(tc, test_throughput);
    return s;
}

/* Without photos (no *.jpg in $PRESTO_PHOTOS, else ../shared/photos) the
 * cases that read them are left out and, when the others pass, the run
 * ends with a skip line and exit status 77, like the integration suites. */
int main(void)
{
    int with_photos = photos_present(), skipped = 0;
    Suite *s = steps_suite(with_photos, &skipped); /* sets skipped: before photos_run reads it */
    return photos_run(s, with_photos, skipped);
}
