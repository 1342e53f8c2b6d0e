/* Unit tests for the image format decoders (daemon/steps/decode_formats.h):
 * PNG, WebP, BMP, PNM and TIFF files made from the real photos by
 * tests/tools/mkformats.py, each decoded to RGB and grey and compared byte
 * for byte with PIL's convert('RGB') and convert('L') of the same file;
 * files PIL refuses must be refused too (-EBADMSG with a message). Then
 * hostile input: the pixel limit refused before any allocation, an
 * allocator that fails, every format's magic, and for one file of each
 * format every prefix (truncations) and seeded byte flips, which must
 * give an image or an error, never a crash (the sanitizer builds and
 * valgrind watch the reads).
 *
 * Needs $PYTHON (default /usr/bin/python3) with PIL and numpy, and the
 * photos ($PRESTO_PHOTOS, else ../shared/photos); skips (77) without them. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "steps/decode_formats.h"

static char dir[512];

struct file {
    char name[64];
    char status[16];
    uint32_t w, h;
    char why[160];
};
static struct file files[256];
static int nfiles;

/* ---- helpers ---- */

static uint8_t *read_file(const char *name, const char *suffix, size_t *len)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s%s", dir, name, suffix);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "open %s: %s", path, strerror(errno));
    struct stat st;
    ck_assert_int_eq(fstat(fileno(f), &st), 0);
    uint8_t *buf = malloc(st.st_size ? (size_t)st.st_size : 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, (size_t)st.st_size, f), (size_t)st.st_size);
    fclose(f);
    *len = (size_t)st.st_size;
    return buf;
}

struct out {
    uint8_t *px;
    uint32_t h, w, c;
    int calls;
    int fail; /* alloc returns this when non-zero */
};

static int out_alloc(void *arg, uint32_t h, uint32_t w, uint32_t c, uint8_t **px)
{
    struct out *o = arg;
    o->calls++;
    if (o->fail)
        return o->fail;
    free(o->px);
    o->px = malloc((size_t)h * w * c);
    if (o->px == NULL)
        return -ENOMEM;
    o->h = h, o->w = w, o->c = c;
    *px = o->px;
    return 0;
}

static int decode(const uint8_t *buf, size_t len, uint32_t channels, uint64_t max_pixels,
                  struct out *o, char *err, size_t errlen)
{
    struct decode_dst dst = {.channels = channels, .max_pixels = max_pixels,
                             .alloc = out_alloc, .arg = o, .err = err, .errlen = errlen};
    err[0] = '\0';
    return decode_image(buf, len, &dst);
}

static int load_index(void)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/index.tsv", dir);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    char line[512];
    while (nfiles < (int)(sizeof(files) / sizeof(files[0])) && fgets(line, sizeof(line), f)) {
        struct file *e = &files[nfiles];
        if (sscanf(line, "%63[^\t]\t%15[^\t]\t%u\t%u\t%159[^\n]", e->name, e->status, &e->w,
                   &e->h, e->why) == 5)
            nfiles++;
    }
    fclose(f);
    return nfiles;
}

/* ---- fidelity ---- */

START_TEST(test_fidelity)
{
    int compared = 0, refused = 0;
    for (int i = 0; i < nfiles; i++) {
        struct file *e = &files[i];
        size_t len;
        uint8_t *buf = read_file(e->name, "", &len);
        for (uint32_t ch = 1; ch <= 3; ch += 2) {
            struct out o = {0};
            char err[256];
            int rc = decode(buf, len, ch, 0, &o, err, sizeof(err));
            if (strcmp(e->status, "ok") != 0) {
                ck_assert_msg(rc == -EBADMSG, "%s (%s): want -EBADMSG (PIL %s), got %d %s",
                              e->name, e->why, e->status, rc, err);
                ck_assert_msg(err[0] != '\0', "%s: refused without a message", e->name);
                if (ch == 3)
                    printf("refused %-22s %s: %s\n", e->name, e->why, err);
                refused++;
                free(o.px);
                continue;
            }
            ck_assert_msg(rc == 0, "%s (%s), %s: %d %s", e->name, e->why,
                          ch == 3 ? "rgb" : "grey", rc, err);
            ck_assert_msg(o.w == e->w && o.h == e->h && o.c == ch,
                          "%s: %ux%ux%u, PIL %ux%ux%u", e->name, o.w, o.h, o.c, e->w, e->h, ch);
            size_t rlen;
            uint8_t *ref = read_file(e->name, ch == 3 ? ".rgb" : ".l", &rlen);
            ck_assert_uint_eq(rlen, (size_t)o.w * o.h * ch);
            size_t differ = 0, first = 0;
            for (size_t k = 0; k < rlen; k++)
                if (ref[k] != o.px[k] && differ++ == 0)
                    first = k;
            ck_assert_msg(differ == 0,
                          "%s (%s), %s: %zu of %zu bytes differ from PIL, first at pixel "
                          "(%zu, %zu) channel %zu: %u, PIL %u",
                          e->name, e->why, ch == 3 ? "rgb" : "grey", differ, rlen,
                          first / ch % o.w, first / ch / o.w, first % ch, o.px[first],
                          ref[first]);
            compared++;
            free(ref);
            free(o.px);
        }
        free(buf);
    }
    printf("%d decodes equal to PIL's, %d refusals as PIL (or by design)\n", compared,
           refused);
    ck_assert_int_gt(compared, 100);
}
END_TEST

/* ---- limits and allocation ---- */

START_TEST(test_pixel_limit)
{
    int checked = 0;
    for (int i = 0; i < nfiles; i++) {
        struct file *e = &files[i];
        if (strcmp(e->status, "ok") != 0)
            continue;
        size_t len;
        uint8_t *buf = read_file(e->name, "", &len);
        uint64_t pixels = (uint64_t)e->w * e->h;
        struct out o = {0};
        char err[256];
        int rc = decode(buf, len, 3, pixels - 1, &o, err, sizeof(err));
        ck_assert_msg(rc == -E2BIG, "%s over the limit: %d %s", e->name, rc, err);
        ck_assert_msg(o.calls == 0, "%s: allocated before refusing", e->name);
        ck_assert_msg(strstr(err, "limit") != NULL, "%s: message '%s'", e->name, err);
        rc = decode(buf, len, 3, pixels, &o, err, sizeof(err));
        ck_assert_msg(rc == 0, "%s at the limit: %d %s", e->name, rc, err);
        /* An allocator that says no: its error comes back, with a message. */
        struct out nope = {.fail = -ENOSPC};
        rc = decode(buf, len, 1, 0, &nope, err, sizeof(err));
        ck_assert_msg(rc == -ENOSPC && nope.calls == 1 && err[0], "%s: %d %s", e->name, rc, err);
        free(o.px);
        free(buf);
        checked++;
    }
    ck_assert_int_gt(checked, 50);
}
END_TEST

START_TEST(test_sniff)
{
    static const struct {
        const char *bytes;
        size_t len;
        enum decode_format f;
    } cases[] = {
        {"\xff\xd8\xff\xe0", 4, DECODE_FMT_JPEG},
        {"\x89PNG\r\n\x1a\n", 8, DECODE_FMT_PNG},
        {"\x89PNG\r\n\x1a", 7, DECODE_FMT_UNKNOWN},
        {"RIFF\0\0\0\0WEBPVP8 ", 16, DECODE_FMT_WEBP},
        {"RIFF\0\0\0\0WEBPVP8L", 16, DECODE_FMT_WEBP},
        {"RIFF\0\0\0\0WEBPVP8X", 16, DECODE_FMT_WEBP},
        {"RIFF\0\0\0\0WEBPVP9 ", 16, DECODE_FMT_UNKNOWN},
        {"RIFF\0\0\0\0WAVEfmt ", 16, DECODE_FMT_UNKNOWN},
        {"BM", 2, DECODE_FMT_BMP},
        {"P6\n", 3, DECODE_FMT_PNM},
        {"P1", 2, DECODE_FMT_PNM},
        {"P7", 2, DECODE_FMT_UNKNOWN},
        {"II*\0", 4, DECODE_FMT_TIFF},
        {"MM\0*", 4, DECODE_FMT_TIFF},
        {"II+\0", 4, DECODE_FMT_TIFF},
        {"GIF89a", 6, DECODE_FMT_GIF},
        {"", 0, DECODE_FMT_UNKNOWN},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        ck_assert_msg(decode_sniff((const uint8_t *)cases[i].bytes, cases[i].len) == cases[i].f,
                      "case %zu: %s", i, decode_format_name(cases[i].f));
    ck_assert_str_eq(decode_format_name(DECODE_FMT_WEBP), "webp");
    ck_assert_str_eq(decode_format_name((enum decode_format)99), "unknown");
    /* The dispatcher: nothing, JPEG (not its job), unknown bytes. */
    struct out o = {0};
    char err[256];
    ck_assert_int_eq(decode(NULL, 0, 3, 0, &o, err, sizeof(err)), -EBADMSG);
    ck_assert_int_eq(decode((const uint8_t *)"\xff\xd8\xff\xe0", 4, 3, 0, &o, err, sizeof(err)),
                     -EBADMSG);
    ck_assert_msg(strstr(err, "jpeg") != NULL, "%s", err);
    ck_assert_int_eq(decode((const uint8_t *)"hello", 5, 3, 0, &o, err, sizeof(err)), -EBADMSG);
    ck_assert_int_eq(o.calls, 0);
    /* A message buffer is optional. */
    struct decode_dst dst = {.channels = 3, .alloc = out_alloc, .arg = &o};
    ck_assert_int_eq(decode_image((const uint8_t *)"BM", 2, &dst), -EBADMSG);
}
END_TEST

/* ThreadSanitizer slows the decoders some twenty times and has nothing to
 * watch in them (one thread): there, a sample of the hostile inputs. */
#if defined(__SANITIZE_THREAD__)
#define HOSTILE_STEP 9
#define HOSTILE_FLIPS 40
#else
#define HOSTILE_STEP 1
#define HOSTILE_FLIPS 300
#endif

/* Truncations and byte flips of one small file of each format. */
static void hostile(const char *name)
{
    size_t len;
    uint8_t *good = read_file(name, "", &len);
    int decoded = 0, refused = 0;
    /* Every prefix up to 600 bytes (headers), then every 61st. */
    for (size_t n = 0; n < len; n += n < 600 ? HOSTILE_STEP : 61 * HOSTILE_STEP) {
        uint8_t *buf = malloc(n ? n : 1); /* exact size: overreads show */
        memcpy(buf, good, n);
        struct out o = {0};
        char err[256];
        int rc = decode(buf, n, n % 2 ? 1 : 3, 1u << 22, &o, err, sizeof(err));
        ck_assert_msg(rc == 0 || rc == -EBADMSG || rc == -E2BIG,
                      "%s cut to %zu bytes: %d %s", name, n, rc, err);
        ck_assert_msg(rc == 0 || err[0], "%s cut to %zu: no message", name, n);
        rc == 0 ? decoded++ : refused++;
        free(o.px);
        free(buf);
    }
    /* Seeded flips of 1-4 bytes anywhere. */
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int t = 0; t < HOSTILE_FLIPS; t++) {
        uint8_t *buf = malloc(len);
        memcpy(buf, good, len);
        int flips = 1 + t % 4;
        for (int k = 0; k < flips; k++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            size_t at = t % 3 == 0 ? (size_t)(s % (len < 300 ? len : 300)) : (size_t)(s % len);
            buf[at] ^= (uint8_t)(1u << (s >> 61));
        }
        struct out o = {0};
        char err[256];
        int rc = decode(buf, len, t % 2 ? 1 : 3, 1u << 22, &o, err, sizeof(err));
        ck_assert_msg(rc == 0 || rc == -EBADMSG || rc == -E2BIG || rc == -ENOMEM,
                      "%s flip %d: %d %s", name, t, rc, err);
        rc == 0 ? decoded++ : refused++;
        free(o.px);
        free(buf);
    }
    printf("%-20s hostile variants: %d decoded, %d refused\n", name, decoded, refused);
    free(good);
}

START_TEST(test_hostile)
{
    static const char *const names[] = {
        "rgb.png", "p3_interlaced.png", "lossy.webp", "lossless_alpha.webp", "anim.webp",
        "p4.bmp", "rle8.bmp", "rle4.bmp", "rgb565.bmp", "l_max1000.pgm", "rgb_plain.ppm",
        "bw.pbm", "rgb_tiled.tif", "rgb_planar.tif", "rgb_jpeg.tif", "p.tif",
    };
    hostile(names[_i]);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("decode_formats");
    TCase *tc = tcase_create("fidelity");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_fidelity);
    tcase_add_test(tc, test_pixel_limit);
    tcase_add_test(tc, test_sniff);
    tcase_add_loop_test(tc, test_hostile, 0, 16);
    suite_add_tcase(s, tc);
    return s;
}

static int run(const char *cmd)
{
    int st = system(cmd);
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int main(void)
{
    const char *py = getenv("PYTHON"), *src = getenv("PRESTO_SRC"), *tmp = getenv("TMPDIR");
    py = py && *py ? py : "/usr/bin/python3";
    src = src && *src ? src : ".";
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "'%s' -c 'import PIL, numpy' >/dev/null 2>&1", py);
    if (run(cmd) != 0) {
        printf("SKIP: %s cannot import PIL and numpy\n", py);
        return 77;
    }
    snprintf(dir, sizeof(dir), "%s/presto-test-formats-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(cmd, sizeof(cmd), "'%s' '%s/tests/tools/mkformats.py' --out '%s'", py, src, dir);
    int rc = run(cmd);
    if (rc == 2 || (rc == 0 && load_index() <= 0)) {
        printf("SKIP: no photos to make the test images from\n");
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        run(cmd);
        return 77;
    }
    if (rc != 0) {
        printf("mkformats.py failed (%d)\n", rc);
        return 1;
    }
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    run(cmd);
    return failed ? 1 : 0;
}
