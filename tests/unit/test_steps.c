/* Unit tests for the pipeline steps (daemon/step.h): declarations, decode
 * (bit-exact with PIL), resize (Pillow's antialiased bilinear, every kernel
 * of daemon/step_impl.h this machine can run), center_crop
 * (torchvision's offsets and padding), random_flip (seeded), and a
 * throughput figure for the default offline pipeline.
 *
 * Real photos come from $PRESTO_PHOTOS, else ../shared/photos (tests run
 * from the repository root). PIL references run $PYTHON (default
 * /usr/bin/python3); those comparisons are skipped with a message when it
 * cannot import PIL. */
#include <check.h>
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

#include "proto.h"
#include "step.h"
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
    const char *dir = getenv("PRESTO_PHOTOS");
    if (dir == NULL || *dir == '\0')
        dir = "../shared/photos";
    int n = snprintf(buf, len, "%s/%s", dir, name);
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
        uint64_t r = step_mix64(seed + i);
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
    ck_assert_uint_eq(out->dtype, PROTO_DTYPE_U8);
    ck_assert_uint_eq(out->len, (size_t)out->h * out->w * out->c);
}

static struct step make_step(const char *name, const char *arg)
{
    struct step s;
    char err[256] = "";
    int rc = step_init(&s, name, arg, err, sizeof(err));
    ck_assert_msg(rc == 0, "step_init(%s, %s): %d %s", name, arg ? arg : "NULL", rc, err);
    return s;
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
    ck_assert_uint_eq(s.size, 256);
    step_describe(&s, buf, sizeof(buf));
    ck_assert_str_eq(buf, "resize(256)");

    s = make_step("center_crop", "224");
    ck_assert_int_eq(s.kind, STEP_CENTER_CROP);
    ck_assert_uint_eq(s.size, 224);
    step_describe(&s, buf, sizeof(buf));
    ck_assert_str_eq(buf, "center_crop(224)");

    s = make_step("resize", "65535");
    ck_assert_uint_eq(s.size, 65535);
    s = make_step("center_crop", "1");
    ck_assert_uint_eq(s.size, 1);

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
    ck_assert(!step_is_random(&(struct step){.kind = STEP_RESIZE, .size = 8}));
    ck_assert(!step_is_random(&(struct step){.kind = STEP_CENTER_CROP, .size = 8}));
    ck_assert(step_is_random(&(struct step){.kind = STEP_RANDOM_FLIP, .p = 0.5}));

    ck_assert_str_eq(step_name(STEP_DECODE), "decode");
    ck_assert_str_eq(step_name(STEP_RESIZE), "resize");
    ck_assert_str_eq(step_name(STEP_CENTER_CROP), "center_crop");
    ck_assert_str_eq(step_name(STEP_RANDOM_FLIP), "random_flip");
}
END_TEST

static void init_fails(const char *name, const char *arg, const char *want)
{
    struct step s;
    char err[256] = "";
    int rc = step_init(&s, name, arg, err, sizeof(err));
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
    init_fails("decode", "1", "takes no argument");
    init_fails("resize", NULL, "needs a size");
    init_fails("center_crop", NULL, "needs a size");
    const char *bad_sizes[] = {"0", "65536", "100000000000", "-5", "+5", "abc",
                               "12x", "1.5", " 12", "0x10"};
    for (size_t i = 0; i < NELEM(bad_sizes); i++) {
        init_fails("resize", bad_sizes[i], "is not an integer in 1..65535");
        init_fails("center_crop", bad_sizes[i], "is not an integer in 1..65535");
    }
    const char *bad_p[] = {"1.5", "-0.1", "nan", "inf", "abc", "0.5x", "2"};
    for (size_t i = 0; i < NELEM(bad_p); i++)
        init_fails("random_flip", bad_p[i], "is not a number in [0, 1]");

    /* A NULL or zero-length err buffer is fine. */
    struct step s;
    ck_assert_int_eq(step_init(&s, "nope", NULL, NULL, 0), -EINVAL);
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
    double r = step_rand01(&state);
    ck_assert_uint_eq(state, 0x9e3779b97f4a7c15ULL);
    ck_assert(r == (double)(0xe220a8397b1dcdafULL >> 11) / 9007199254740992.0);
    ck_assert_uint_eq(step_mix64(0x9e3779b97f4a7c15ULL), 0xe220a8397b1dcdafULL);
    for (int i = 0; i < 1000; i++) {
        r = step_rand01(&state);
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
        garbage[i] = (uint8_t)step_mix64(i);
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
        uint64_t r = step_mix64(n + 1000);
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
            uint64_t v = step_mix64(n * 1000003 + i);
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

/* Crops an h x w image to n and checks every output pixel: output (y, x)
 * is input (y - pad_top + top, x - pad_left + left), zero outside. */
static void check_crop(uint32_t h, uint32_t w, uint32_t c, uint32_t n, uint32_t top,
                       uint32_t left, uint32_t pad_top, uint32_t pad_left)
{
    struct step_ctx ctx;
    struct img in, out = {0};
    char arg[16];
    snprintf(arg, sizeof(arg), "%u", n);
    struct step cc = make_step("center_crop", arg);
    step_ctx_init(&ctx);
    make_coords(&in, h, w, c);
    memset(&out, 0, sizeof(out));
    ck_assert_int_eq(img_reserve(&out, (size_t)n * n * c), 0);
    memset(out.data, 0xee, (size_t)n * n * c); /* padding must be written */
    apply_ok(&cc, &ctx, &in, &out);
    ck_assert(out.h == n && out.w == n && out.c == c);
    for (uint32_t y = 0; y < n; y++) {
        for (uint32_t x = 0; x < n; x++) {
            for (uint32_t ch = 0; ch < c; ch++) {
                int64_t sy = (int64_t)y - pad_top + top, sx = (int64_t)x - pad_left + left;
                uint8_t want = sy >= 0 && sy < h && sx >= 0 && sx < w
                                   ? px_at((uint32_t)sy, (uint32_t)sx, ch)
                                   : 0;
                uint8_t got = out.data[((size_t)y * n + x) * c + ch];
                if (got != want)
                    ck_abort_msg("%ux%u crop %u: (%u,%u,%u) is %u, want %u", h, w, n, y,
                                 x, ch, got, want);
            }
        }
    }
    img_free(&in);
    img_free(&out);
    step_ctx_free(&ctx);
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

/* ---- throughput (informational) ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

START_TEST(test_throughput)
{
    /* Repeated use of one context; the figure printed is informational
     * (speed is measured by `make bench`, not by unit tests). */
    const char *env = getenv("PRESTO_STEP_ITERS");
    int iters = env ? atoi(env) : 5;
    struct step_ctx ctx;
    struct img enc[NELEM(photos)], a = {0}, b = {0}, c = {0};
    struct step dec = make_step("decode", NULL), rs = make_step("resize", "256");
    struct step cc = make_step("center_crop", "224");
    double t_dec = 0, t_rs = 0, t_cc = 0;
    step_ctx_init(&ctx);
    for (size_t i = 0; i < NELEM(photos); i++)
        read_photo(&photos[i], &enc[i]);

    int rc = 0;
    double t0 = now_s();
    for (int it = 0; it < iters; it++) {
        for (size_t i = 0; i < NELEM(photos); i++) {
            double t1 = now_s();
            rc |= step_apply(&dec, &ctx, &enc[i], &a);
            double t2 = now_s();
            rc |= step_apply(&rs, &ctx, &a, &b);
            double t3 = now_s();
            rc |= step_apply(&cc, &ctx, &b, &c);
            t_cc += now_s() - t3;
            t_rs += t3 - t2;
            t_dec += t2 - t1;
        }
    }
    double total = now_s() - t0;
    ck_assert_msg(rc == 0, "a step failed: %s", ctx.err);
    int images = iters * (int)NELEM(photos);
    ck_assert(c.w == 224 && c.h == 224 && c.c == 3);
    printf("throughput: decode+resize(256)+center_crop(224), %d images in %.3f s: "
           "%.1f images/s on one thread (decode %.3f ms, resize %.3f ms, "
           "center_crop %.3f ms per image)\n",
           images, total, images / total, t_dec * 1e3 / images, t_rs * 1e3 / images,
           t_cc * 1e3 / images);
    for (size_t i = 0; i < NELEM(photos); i++)
        img_free(&enc[i]);
    img_free(&a);
    img_free(&b);
    img_free(&c);
    step_ctx_free(&ctx);
}
END_TEST

static Suite *steps_suite(void)
{
    Suite *s = suite_create("steps");

    TCase *tc = tcase_create("declarations");
    tcase_add_test(tc, test_init_valid);
    tcase_add_test(tc, test_init_errors);
    tcase_add_test(tc, test_fingerprint);
    tcase_add_test(tc, test_out_shape);
    tcase_add_test(tc, test_splitmix);
    suite_add_tcase(s, tc);

    tc = tcase_create("decode");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_decode_shape);
    tcase_add_test(tc, test_decode_matches_pil);
    tcase_add_test(tc, test_decode_subsampling_matches_pil);
    tcase_add_test(tc, test_decode_cmyk_matches_pil);
    tcase_add_test(tc, test_decode_errors);
    tcase_add_test(tc, test_decode_max_pixels);
    suite_add_tcase(s, tc);

    tc = tcase_create("resize");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_resize_photos_match_pil);
    tcase_add_test(tc, test_resize_photos_kernels_match_pil);
    tcase_add_test(tc, test_resize_shapes_match_pil);
    tcase_add_test(tc, test_resize_kernels_agree);
    tcase_add_test(tc, test_resize_isa_errors);
    tcase_add_test(tc, test_resize_constant);
    tcase_add_test(tc, test_resize_shapes);
    suite_add_tcase(s, tc);

    tc = tcase_create("center_crop");
    tcase_add_test(tc, test_crop_offsets);
    tcase_add_test(tc, test_crop_padding);
    suite_add_tcase(s, tc);

    tc = tcase_create("random_flip");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_flip);
    tcase_add_test(tc, test_flip_rate);
    suite_add_tcase(s, tc);

    tc = tcase_create("throughput");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_throughput);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(steps_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
