/* Unit tests for the configuration loader (daemon/config.h): defaults, a
 * full valid file, and every error path naming FILE:LINE and the key. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "braces.h"
#include "config.h"
#include "dataset.h"
#include "hash.h"
#include "log.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
#define GiB (1ull << 30)

static uint64_t ram_bytes(void)
{
    return (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* Loads yaml into a zeroed config as "test.yaml"; returns the result. */
static int load(struct config *c, const char *yaml, char *err, size_t errlen)
{
    memset(c, 0, sizeof(*c));
    err[0] = '\0';
    return config_load_string(c, yaml, strlen(yaml), "test.yaml", err, errlen);
}

static void check_defaults(const struct config *c)
{
    ck_assert_ptr_nonnull(c->socket_path);
    ck_assert_str_ne(c->socket_path, "");
    ck_assert_uint_eq(c->workers, 0);
    ck_assert_uint_eq(c->socket_mode, 0660);
    ck_assert_int_eq(c->log_level, LOG_LEVEL_INFO);
    ck_assert_uint_eq(c->prefetch, 8);
    ck_assert_uint_gt(c->cache_memory, 0);
    ck_assert_uint_eq(c->max_connections, 256);
    ck_assert_uint_eq(c->max_streams_per_conn, 16);
    ck_assert_uint_eq(c->max_batch_size, 4096);
    ck_assert_uint_eq(c->max_file_size, 64ull << 20);
    ck_assert_uint_eq(c->max_pixels, 100000000);
    ck_assert_uint_eq(c->socket_group, CONFIG_NO_GROUP);
    ck_assert_uint_eq(c->admin_group, CONFIG_NO_GROUP);
    ck_assert_uint_eq(c->max_streams_per_user, 256);
    ck_assert_uint_eq(c->max_prefetch, 64);
    ck_assert_uint_eq(c->max_frame_size, 65536);
    ck_assert_uint_eq(c->max_output_buffer, 1ull << 20);
    ck_assert_uint_eq(c->output_timeout, 30);
    ck_assert_uint_eq(c->client_memory, c->cache_memory); /* a quarter of RAM */
    ck_assert_uint_eq(c->user_memory, c->client_memory / 2);
    ck_assert_uint_eq(c->ndatasets, 0);
}

START_TEST(test_defaults)
{
    struct config c;
    ck_assert_int_eq(config_defaults(&c), 0);
    check_defaults(&c);
    ck_assert_ptr_null(c.path);
    config_free(&c);

    /* config_load with no file is the same as the defaults. */
    char err[512] = "";
    ck_assert_int_eq(config_load(&c, NULL, err, sizeof(err)), 0);
    check_defaults(&c);
    config_free(&c);
}
END_TEST

/* A document with no keys leaves every default in place. */
START_TEST(test_empty_document)
{
    static const char *const docs[] = {"", "# only a comment\n", "---\n"};
    for (size_t i = 0; i < NELEM(docs); i++) {
        struct config c;
        char err[512];
        ck_assert_msg(load(&c, docs[i], err, sizeof(err)) == 0, "'%s': %s",
                      docs[i], err);
        check_defaults(&c);
        config_free(&c);
    }
}
END_TEST

/* config_load_string applies the defaults first, like config_load. */
START_TEST(test_string_has_defaults)
{
    struct config c;
    char err[512];
    ck_assert_msg(load(&c, "workers: 3\n", err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(c.workers, 3);
    ck_assert_ptr_nonnull(c.socket_path);
    ck_assert_uint_eq(c.prefetch, 8);
    ck_assert_uint_eq(c.max_connections, 256);
    ck_assert_uint_gt(c.cache_memory, 0);
    config_free(&c);
}
END_TEST

static const char full_yaml[] =
    "# a full configuration\n"                /* 1 */
    "socket: /tmp/presto-test/prestod.sock\n" /* 2 */
    "socket_mode: 0640\n"                     /* 3 */
    "workers: 3\n"                            /* 4 */
    "log_level: debug\n"                      /* 5 */
    "prefetch: 8\n"                           /* 6 */
    "cache:\n"                                /* 7 */
    "  memory: 2GiB\n"                        /* 8 */
    "  dir: /var/cache/presto-test\n"         /* 9 */
    "limits:\n"                               /* 10 */
    "  connections: 10\n"                     /* 11 */
    "  streams_per_connection: 4\n"           /* 12 */
    "  batch_size: 512\n"                     /* 13 */
    "  file_size: 64KiB\n"                    /* 14 */
    "  pixels: 5000000\n"                     /* 15 */
    "datasets:\n"                             /* 16 */
    "  - name: train\n"                       /* 17 */
    "    root: /data/train\n"                 /* 18 */
    "    steps:\n"                            /* 19 */
    "      - decode\n"                        /* 20 */
    "      - resize: 256\n"                   /* 21 */
    "      - center_crop: 224\n"              /* 22 */
    "      - random_flip: 0.25\n"             /* 23 */
    "    split: center_crop\n"                /* 24 */
    "    on_error: fail\n"                    /* 25 */
    "  - name: val\n"                         /* 26 */
    "    root: /data/val\n"                   /* 27 */
    "    steps: [decode, {resize: 128}, {center_crop: 112}, random_flip]\n"
    "    split: 2\n";                         /* 29 */

static void check_step(const struct step *s, enum step_kind kind, uint32_t size)
{
    ck_assert_int_eq(s->kind, kind);
    if (kind == STEP_RESIZE || kind == STEP_CENTER_CROP)
        ck_assert(s->h == size && s->w == size);
}

static void check_full(const struct config *c)
{
    ck_assert_str_eq(c->socket_path, "/tmp/presto-test/prestod.sock");
    ck_assert_uint_eq(c->socket_mode, 0640);
    ck_assert_uint_eq(c->workers, 3);
    ck_assert_int_eq(c->log_level, LOG_LEVEL_DEBUG);
    ck_assert_uint_eq(c->prefetch, 8);
    ck_assert_uint_eq(c->cache_memory, 2 * GiB);
    ck_assert_str_eq(c->cache_dir, "/var/cache/presto-test");
    ck_assert_uint_eq(c->max_connections, 10);
    ck_assert_uint_eq(c->max_streams_per_conn, 4);
    ck_assert_uint_eq(c->max_batch_size, 512);
    ck_assert_uint_eq(c->max_file_size, 64 * 1024);
    ck_assert_uint_eq(c->max_pixels, 5000000);
    ck_assert_uint_eq(c->ndatasets, 2);

    const struct config_dataset *t = &c->datasets[0];
    ck_assert_str_eq(t->name, "train");
    ck_assert_str_eq(t->root, "/data/train");
    ck_assert_uint_eq(t->nsteps, 4);
    check_step(&t->steps[0], STEP_DECODE, 0);
    check_step(&t->steps[1], STEP_RESIZE, 256);
    check_step(&t->steps[2], STEP_CENTER_CROP, 224);
    check_step(&t->steps[3], STEP_RANDOM_FLIP, 0);
    ck_assert_double_eq_tol(t->steps[3].p, 0.25, 1e-12);
    ck_assert_uint_eq(t->split, 3);
    ck_assert_int_eq(t->on_error, CONFIG_ON_ERROR_FAIL);
    ck_assert_int_eq(t->line, 17);

    const struct config_dataset *v = &c->datasets[1];
    ck_assert_str_eq(v->name, "val");
    ck_assert_str_eq(v->root, "/data/val");
    ck_assert_uint_eq(v->nsteps, 4);
    check_step(&v->steps[0], STEP_DECODE, 0);
    check_step(&v->steps[1], STEP_RESIZE, 128);
    check_step(&v->steps[2], STEP_CENTER_CROP, 112);
    check_step(&v->steps[3], STEP_RANDOM_FLIP, 0);
    ck_assert_double_eq_tol(v->steps[3].p, 0.5, 1e-12); /* the default */
    ck_assert_uint_eq(v->split, 2);
    ck_assert_int_eq(v->on_error, CONFIG_ON_ERROR_SKIP); /* the default */
    ck_assert_int_eq(v->line, 26);

    ck_assert_ptr_eq(config_find_dataset(c, "val"), v);
    ck_assert_ptr_eq(config_find_dataset(c, "train"), t);
    ck_assert_ptr_null(config_find_dataset(c, "test"));
}

START_TEST(test_full)
{
    struct config c;
    char err[512];
    ck_assert_msg(load(&c, full_yaml, err, sizeof(err)) == 0, "%s", err);
    check_full(&c);
    config_free(&c);
}
END_TEST

START_TEST(test_load_file)
{
    char path[] = "/tmp/presto-test-config-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, full_yaml, strlen(full_yaml)), (ssize_t)strlen(full_yaml));
    close(fd);

    struct config c;
    char err[512] = "";
    int rc = config_load(&c, path, err, sizeof(err));
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_str_eq(c.path, path);
    check_full(&c);
    config_free(&c);

    /* Errors name the file itself. */
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("workers: 2\nfrobnicate: 1\n", f);
    fclose(f);
    rc = config_load(&c, path, err, sizeof(err));
    config_free(&c);
    unlink(path);
    char want[256];
    snprintf(want, sizeof(want), "%s:2:", path);
    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_msg(strstr(err, want) && strstr(err, "frobnicate"),
                  "error '%s' lacks '%s' or the key", err, want);

    /* A missing file is an error that names it. */
    rc = config_load(&c, "/nonexistent/presto.yaml", err, sizeof(err));
    config_free(&c);
    ck_assert_int_lt(rc, 0);
    ck_assert_msg(strstr(err, "/nonexistent/presto.yaml"), "error '%s'", err);
}
END_TEST

START_TEST(test_percent_memory)
{
    struct config c;
    char err[512];
    ck_assert_msg(load(&c, "cache: {memory: 25%}\n", err, sizeof(err)) == 0, "%s", err);
    uint64_t want = ram_bytes() / 4;
    ck_assert_msg(c.cache_memory > want - want / 50 && c.cache_memory < want + want / 50,
                  "25%% of RAM: %llu, want about %llu",
                  (unsigned long long)c.cache_memory, (unsigned long long)want);
    config_free(&c);
}
END_TEST

/* limits.user_memory: half of the file's client_memory unless set (0 too). */
START_TEST(test_client_memory)
{
    struct config c;
    char err[512];
    ck_assert_msg(load(&c, "limits: {client_memory: 1GiB}\n", err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(c.client_memory, 1ull << 30);
    ck_assert_uint_eq(c.user_memory, 512ull << 20);
    config_free(&c);
    ck_assert_msg(load(&c, "limits: {client_memory: 1GiB, user_memory: 100MiB}\n", err,
                       sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(c.user_memory, 100ull << 20);
    config_free(&c);
    ck_assert_msg(load(&c, "limits: {client_memory: 2GiB, user_memory: 0}\n", err,
                       sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(c.user_memory, 1ull << 30);
    config_free(&c);
    ck_assert_msg(load(&c, "limits: {client_memory: 10%}\n", err, sizeof(err)) == 0, "%s", err);
    uint64_t want = ram_bytes() / 10;
    ck_assert(c.client_memory > want - want / 50 && c.client_memory < want + want / 50);
    config_free(&c);
    int rc = load(&c, "limits: {client_memory: 1KiB}\n", err, sizeof(err));
    config_free(&c);
    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_msg(strstr(err, "limits.client_memory"), "%s", err);
}
END_TEST

/* One configuration that must be refused: the error names test.yaml:LINE:
 * and contains each of the words in `words` (the key, the bad value). */
struct bad_case {
    const char *what;
    const char *yaml;
    int line;
    const char *words[2];
};

#define DS "datasets:\n  - name: a\n    root: /d\n" /* lines 1-3 */

static const struct bad_case bad_cases[] = {
    {"unknown top-level key", "workers: 2\nfrobnicate: yes\n", 2, {"frobnicate"}},
    {"unknown cache key", "cache:\n  memory: 1GiB\n  colour: red\n", 3, {"colour"}},
    {"unknown limits key", "limits:\n  bogus_limit: 3\n", 2, {"bogus_limit"}},
    {"unknown dataset key", DS "    frobnicate: 1\n", 4, {"frobnicate"}},
    {"list for a scalar", "socket_mode: 0600\nsocket: [a, b]\n", 2, {"socket"}},
    {"workers out of range", "workers: 100000\n", 1, {"workers"}},
    {"socket_mode out of range", "workers: 1\nsocket_mode: 99999\n", 2, {"socket_mode"}},
    {"negative number", "prefetch: -1\n", 1, {"prefetch"}},
    {"bad size", "cache:\n  memory: 12XB\n", 2, {"memory", "12XB"}},
    {"bad limit size", "limits:\n  file_size: lots\n", 2, {"file_size"}},
    {"bad log level", "log_level: chatty\n", 1, {"log_level", "chatty"}},
    {"unknown step", DS "    steps: [decode, blur]\n", 4, {"steps", "blur"}},
    {"unknown step in block list", DS "    steps:\n      - decode\n      - sharpen: 2\n",
     6, {"steps", "sharpen"}},
    {"bad step argument", DS "    steps:\n      - decode\n      - resize: -3\n", 6,
     {"steps.resize.size", "'-3'"}},
    {"unknown step parameter", DS "    steps:\n      - decode\n      - resize: {sise: 3}\n",
     6, {"steps.resize.sise", "it takes: size"}},
    {"bad value in a parameter list", DS "    steps:\n      - decode\n"
                                         "      - resize:\n          size: [1, 2, 3]\n",
     7, {"steps.resize.size", "[1, 2, 3]"}},
    {"nested list", DS "    steps:\n      - decode\n      - resize: [[1, 2]]\n", 6,
     {"steps.resize.size", "scalars"}},
    {"mapping as a value", DS "    steps:\n      - decode\n      - resize: {size: {a: 1}}\n",
     6, {"steps.resize.size", "a mapping"}},
    {"duplicate step parameter", DS "    steps:\n      - decode\n"
                                    "      - resize: {size: 3, size: 4}\n",
     6, {"steps.resize.size", "duplicate"}},
    {"missing required parameter", DS "    steps:\n      - decode\n"
                                      "      - normalize: {mean: [0.5, 0.5, 0.5]}\n",
     6, {"steps", "needs std"}},
    {"normalize without a mapping", DS "    steps:\n      - decode\n      - normalize: 0.5\n",
     6, {"steps.normalize", "mapping"}},
    {"zero std", DS "    steps:\n      - decode\n"
                    "      - normalize:\n          mean: 0\n          std: [1, 0, 1]\n",
     8, {"steps.normalize.std", "non-zero"}},
    {"bad layout", DS "    steps: [decode, {to_float: {layout: chw}}]\n", 4,
     {"steps.to_float.layout", "chw"}},
    {"bad decode mode", DS "    steps: [{decode: cmyk}]\n", 4, {"steps.decode.mode", "cmyk"}},
    {"bad scale range", DS "    steps:\n      - decode\n"
                           "      - random_resized_crop: {size: 8, scale: [1, 0.5]}\n",
     6, {"steps.random_resized_crop.scale", "LO <= HI"}},
    {"step after normalize", DS "    steps:\n      - decode\n"
                                "      - normalize: {mean: 0, std: 1}\n      - resize: 8\n",
     7, {"steps", "must be the last step"}},
    {"decode not first", DS "    steps:\n      - resize: 8\n      - decode\n", 5,
     {"steps", "first step must be decode"}},
    {"image step after a float32 one", DS "    steps:\n      - decode\n"
                                          "      - to_float: {layout: nchw}\n"
                                          "      - random_flip\n",
     7, {"steps", "random_flip takes a uint8 image [H, W, C], but to_float gives "
                  "float32 image [C, H, W]"}},
    {"decode twice", DS "    steps:\n      - decode\n      - resize: 8\n"
                        "      - decode: grey\n",
     7, {"steps", "decode takes encoded bytes"}},
    /* batch-level steps: mixup, cutmix */
    {"mixup before to_float", DS "    steps:\n      - decode\n"
                                 "      - mixup: {alpha: 0.2, num_classes: 10}\n",
     6, {"steps", "mixup cannot follow decode: mixup takes a float32 image (after to_float "
                  "or normalize)"}},
    {"mixup without num_classes", DS "    steps:\n      - decode\n      - to_float\n"
                                     "      - mixup: 0.2\n",
     7, {"steps", "needs num_classes"}},
    {"mixup alpha 0", DS "    steps:\n      - decode\n      - to_float\n"
                         "      - mixup: {alpha: 0, num_classes: 3}\n",
     7, {"steps.mixup.alpha", "above 0"}},
    {"a sample's step after mixup", DS "    steps:\n      - decode\n      - to_float\n"
                                       "      - mixup: {alpha: 0.2, num_classes: 3}\n"
                                       "      - random_flip\n",
     8, {"steps", "random_flip cannot follow mixup: mixup and cutmix act on a whole batch"}},
    {"mixup twice", DS "    steps:\n      - decode\n      - to_float\n"
                       "      - mixup: {alpha: 0.2, num_classes: 3}\n"
                       "      - mixup: {alpha: 0.4, num_classes: 3}\n",
     8, {"steps", "mixup is given twice"}},
    {"mixup and cutmix of other classes", DS "    steps:\n      - decode\n      - to_float\n"
                                             "      - mixup: {alpha: 0.2, num_classes: 3}\n"
                                             "      - cutmix: {alpha: 1, num_classes: 4}\n",
     8, {"steps", "num_classes 4 differs from mixup's 3"}},
    {"mixup and cutmix with other p", DS "    steps:\n      - decode\n      - to_float\n"
                                         "      - cutmix: {alpha: 1, num_classes: 3, p: 0.5}\n"
                                         "      - mixup: {alpha: 0.2, num_classes: 3}\n",
     8, {"steps", "p and switch_p must be cutmix's"}},
    /* audio (issue 18) */
    {"image step after an audio step", DS "    steps:\n      - decode_audio\n"
                                          "      - resample: 16000\n      - resize: 8\n",
     7, {"steps", "resize takes a uint8 image [H, W, C], but resample gives "
                  "float32 waveform [C, T]"}},
    {"spectrogram step on a waveform", DS "    steps:\n      - decode_audio\n"
                                          "      - time_mask: 4\n",
     6, {"steps", "time_mask takes a float32 spectrogram [C, F, T], but decode_audio gives "
                  "float32 waveform [C, T]"}},
    {"resample rate out of range", DS "    steps:\n      - decode_audio\n"
                                      "      - resample: {rate: 0}\n",
     6, {"steps.resample.rate", "an integer in 1..768000"}},
    {"mel on another rate", DS "    steps:\n      - decode_audio\n      - resample: 8000\n"
                               "      - mel_spectrogram: {sample_rate: 16000}\n",
     7, {"steps", "sample_rate 16000 is not the 8000 Hz"}},
    {"mel win over n_fft", DS "    steps:\n      - decode_audio\n"
                              "      - mel_spectrogram: {n_fft: 256, win_length: 400}\n",
     6, {"steps", "win_length 400 is more than n_fft 256"}},
    {"random gain range", DS "    steps:\n      - decode_audio\n"
                             "      - random_gain: [6, -6]\n",
     6, {"steps.random_gain.gain_db", "LO <= HI"}},
    {"time mask offline", DS "    steps: [decode_audio, {mel_spectrogram: {n_mels: 8}}, "
                             "{time_mask: 4}]\n    split: 3\n", 5,
     {"split", "time_mask"}},
    {"a float32 step after int16", DS "    steps:\n      - decode_audio: {dtype: int16}\n"
                                      "      - resample: 16000\n",
     6, {"steps", "resample takes a float32 waveform [C, T], but decode_audio gives "
                  "int16 waveform [C, T]"}},
    {"audio dtype", DS "    steps:\n      - decode_audio: {dtype: int8}\n", 5,
     {"steps.decode_audio.dtype"}},
    /* batch: {pad: longest} (issue 18) */
    {"pad without max_length", DS "    steps: [{decode_audio: {mono: true}}]\n"
                                  "    batch: {pad: longest}\n",
     5, {"batch.max_length", "pad: longest needs max_length"}},
    {"max_length without pad", DS "    steps: [{decode_audio: {mono: true}}]\n"
                                  "    batch:\n      max_length: 100\n",
     6, {"batch.max_length", "for pad: longest"}},
    {"pad kind", DS "    batch: {pad: shortest, max_length: 9}\n", 4,
     {"batch.pad", "'shortest' is not longest or none"}},
    {"max_length range", DS "    batch: {pad: longest, max_length: 0}\n", 4,
     {"batch.max_length", "out of range [1, 16777216]"}},
    {"unknown batch key", DS "    batch: {pad: longest, fill: 0}\n", 4,
     {"batch.fill", "unknown key"}},
    {"pad an image", DS "    steps: [decode, {resize: 8}]\n"
                        "    batch: {pad: longest, max_length: 8}\n",
     5, {"batch.pad", "uint8 image [H, W, C]"}},
    {"pad channels that vary", DS "    steps: [decode_audio]\n"
                                  "    batch: {pad: longest, max_length: 8}\n",
     5, {"batch.pad", "channels vary per file (decode_audio with mono: true)"}},
    {"dct_scale without a resize", DS "    steps:\n      - decode: {dct_scale: true}\n"
                                      "      - center_crop: 8\n",
     5, {"steps", "dct_scale"}},
    {"normalize values for other channels", DS "    steps:\n      - decode: grey\n"
                                               "      - normalize: {mean: [1, 2, 3], std: 1}\n",
     6, {"steps", "3 values for 1 channels"}},
    {"random_resized_crop offline", DS "    steps: [decode, {random_resized_crop: 8}]\n"
                                       "    split: random_resized_crop\n", 5,
     {"split", "random_resized_crop"}},
    {"dct_scale split from its resize", DS "    steps: [{decode: {dct_scale: true}}, {resize: 8}]\n"
                                           "    split: decode\n", 5,
     {"split", "dct_scale"}},
    /* the image augmentations (issue 17) */
    {"negative brightness", DS "    steps:\n      - decode\n"
                               "      - color_jitter: {brightness: -1}\n",
     6, {"steps.color_jitter.brightness", "X >= 0"}},
    {"hue past 0.5", DS "    steps:\n      - decode\n      - color_jitter: {hue: [-0.2, 0.7]}\n",
     6, {"steps.color_jitter.hue", "0.5"}},
    {"even blur kernel", DS "    steps:\n      - decode\n      - gaussian_blur: 4\n",
     6, {"steps.gaussian_blur.kernel_size", "odd"}},
    {"zero blur sigma", DS "    steps:\n      - decode\n"
                          "      - gaussian_blur: {kernel_size: 3, sigma: 0}\n",
     6, {"steps.gaussian_blur.sigma", "X > 0"}},
    {"affine without degrees", DS "    steps:\n      - decode\n"
                                  "      - random_affine: {translate: [0.1, 0.1]}\n",
     6, {"steps", "needs degrees"}},
    {"translate past 1", DS "    steps:\n      - decode\n"
                            "      - random_affine: {degrees: 0, translate: [0.1, 1.5]}\n",
     6, {"steps.random_affine.translate", "[0, 1]"}},
    {"bicubic", DS "    steps:\n      - decode\n"
                   "      - random_rotation: {degrees: 10, interpolation: bicubic}\n",
     6, {"steps.random_rotation.interpolation", "nearest or bilinear"}},
    {"cifar10 policy", DS "    steps:\n      - decode\n      - auto_augment: cifar10\n",
     6, {"steps.auto_augment.policy", "imagenet"}},
    {"magnitude past the bins", DS "    steps:\n      - decode\n"
                                   "      - rand_augment: {magnitude: 31}\n",
     6, {"steps", "magnitude 31 is not below num_magnitude_bins 31"}},
    {"erasing before normalize", DS "    steps:\n      - decode\n      - random_erasing\n",
     6, {"steps", "random_erasing takes a float32 image"}},
    {"erasing values for other channels", DS "    steps:\n      - decode\n      - to_float\n"
                                             "      - random_erasing: {value: [1, 2]}\n",
     7, {"steps", "value has 2 values for 3 channels"}},
    {"erasing scale past 1", DS "    steps:\n      - decode\n      - to_float\n"
                                "      - random_erasing: {scale: [0.5, 2]}\n",
     7, {"steps", "at most 1"}},
    {"rotation fill for other channels", DS "    steps:\n      - decode: grey\n"
                                            "      - random_rotation: {degrees: 5, fill: [1, 2]}\n",
     6, {"steps", "fill has 2 values for 1 channels"}},
    {"trivial_augment_wide offline", DS "    steps: [decode, trivial_augment_wide]\n"
                                        "    split: 2\n", 5,
     {"split", "random step trivial_augment_wide"}},
    {"dct_scale decode offline before its crop",
     DS "    steps: [{decode: {dct_scale: true}}, {random_resized_crop: 8}]\n"
        "    split: decode\n", 5, {"split", "before decode (0)"}},
    {"split names a missing step", DS "    steps: [decode, {resize: 64}]\n"
                                      "    split: center_crop\n", 5,
     {"split", "center_crop"}},
    {"split count too large", DS "    steps: [decode, {resize: 64}]\n    split: 3\n", 5,
     {"split"}},
    {"random_flip offline by name", DS "    steps: [decode, {random_flip: 0.5}, {resize: 64}]\n"
                                       "    split: resize\n", 5,
     {"split", "random_flip"}},
    {"random_flip offline by count", DS "    split: 4\n", 4, {"split", "random_flip"}},
    {"duplicate dataset", DS "  - name: b\n    root: /e\n  - name: a\n    root: /f\n", 6,
     {"name"}},
    {"duplicates: the first second declaration in the file is named",
     DS "  - name: b\n    root: /e\n  - name: b\n    root: /f\n  - name: a\n    root: /g\n"
        "  - name: b\n    root: /h\n", 6, {"datasets.name", "'b' is declared twice (line 4)"}},
    {"dataset without root", "datasets:\n  - name: a\n  - name: b\n    root: /e\n", 2,
     {"root"}},
    {"dataset without name", "datasets:\n  - root: /d\n", 2, {"name"}},
    {"bad on_error", DS "    on_error: ignore\n", 4, {"on_error", "ignore"}},
    {"bad follow_symlinks", DS "    follow_symlinks: maybe\n", 4, {"follow_symlinks", "maybe"}},
    {"a key with line breaks stays one line", "workers: 1\n\"fr\\nob\\r\": 1\n", 2,
     {"'fr?ob?'", "unknown key"}},
    {"unknown admin group", "workers: 1\nadmin_group: no-such-group-here\n", 2,
     {"admin_group", "no such group"}},
    {"socket_group out of range", "socket_group: 4294967295\n", 1, {"socket_group"}},
    {"frame_size under its minimum", "limits:\n  frame_size: 100\n", 2,
     {"limits.frame_size", "100"}},
    {"output_timeout zero", "limits:\n  output_timeout: 0\n", 2, {"limits.output_timeout"}},
    {"prefetch over limits.prefetch", "prefetch: 16\nlimits:\n  prefetch: 8\n", 3,
     {"limits.prefetch", "under prefetch (16)"}},
    {"limits.prefetch under prefetch", "limits:\n  prefetch: 4\nprefetch: 16\n", 3,
     {"'prefetch'", "over limits.prefetch (4)"}},
    {"datasets not a list", "datasets:\n  name: a\n", 2, {"datasets"}},
    {"cluster server without a port", "cluster:\n  memcached: [a:1, b]\n", 2,
     {"cluster.memcached", "HOST:PORT"}},
    {"cluster server port out of range", "cluster:\n  memcached:\n    - a:1\n    - b:70000\n",
     4, {"cluster.memcached", "port"}},
    {"cluster server listed twice", "cluster:\n  memcached: [a:1, a:1]\n", 2,
     {"cluster.memcached", "twice"}},
    {"cluster server as a mapping", "cluster:\n  memcached: [{a: 1}]\n", 2,
     {"cluster.memcached", "a mapping"}},
    {"cluster timeout out of range", "cluster:\n  timeout_ms: 0\n", 2, {"cluster.timeout_ms"}},
    {"cluster item_max not a size", "cluster:\n  item_max: big\n", 2,
     {"cluster.item_max", "big"}},
    {"cluster item_max under its minimum", "cluster:\n  item_max: 100\n", 2,
     {"cluster.item_max", "100"}},
    {"unknown cluster key", "cluster:\n  servers: [a:1]\n", 2, {"cluster.servers", "unknown"}},
    {"source retries out of range", "source:\n  retries: 101\n", 2, {"source.retries", "101"}},
    {"source page_keys zero", "workers: 1\nsource:\n  page_keys: 0\n", 3,
     {"source.page_keys"}},
    {"unknown source key", "source:\n  secret: x\n", 2, {"source.secret", "unknown"}},
    {"dataset source key unknown", DS "    source:\n      retries: 3\n", 5,
     {"source.retries", "the others are global"}},
    {"dataset source key empty", DS "    source:\n      endpoint: \"\"\n", 5,
     {"source.endpoint", "non-empty"}},
    {"dataset source not a mapping", DS "    source: http://x\n", 4, {"source", "mapping"}},
    {"root list not tar", "datasets:\n  - name: a\n    root:\n      - /s/a.tar\n      - /s/b.zip\n",
     5, {"b.zip", "does not end in .tar"}},
    {"root list mixed", "datasets:\n  - name: a\n    root: [/s/a.tar, s3://b/c.tar]\n", 3,
     {"root", "all local"}},
    {"root list buckets", "datasets:\n  - name: a\n    root: [s3://b/a.tar, s3://c/a.tar]\n", 3,
     {"root", "one bucket"}},
    {"root list empty", "datasets:\n  - name: a\n    root: []\n", 3, {"root", "empty"}},
    {"YAML syntax error", "socket: /x\nworkers: 2\n  bad: 1\n", 3, {NULL}},
    {"YAML unclosed flow list", "workers: 2\nsocket: [a, b\nprefetch: 2\n", 3, {NULL}},
};

/* mixup and cutmix leave the samples' steps for batch_steps, with their
 * lines, and make the labels float32 [n, num_classes]. */
START_TEST(test_batch_steps)
{
    struct config c;
    char err[512];
    ck_assert_int_eq(load(&c, DS "    steps:\n      - decode\n      - center_crop: 8\n"
                                 "      - normalize: {mean: 0.5, std: 0.25, layout: nchw}\n"
                                 "      - mixup: {alpha: 0.2, num_classes: 1000}\n"
                                 "      - cutmix: {alpha: 1.0, num_classes: 1000}\n",
                          err, sizeof(err)), 0);
    const struct config_dataset *d = &c.datasets[0];
    ck_assert_uint_eq(d->nsteps, 3);
    ck_assert_uint_eq(d->nbatch_steps, 2);
    ck_assert_int_eq(d->batch_steps[0].kind, STEP_MIXUP);
    ck_assert_int_eq(d->batch_steps[1].kind, STEP_CUTMIX);
    ck_assert_int_eq(d->batch_lines[0], 8);
    ck_assert_int_eq(d->batch_lines[1], 9);
    ck_assert(d->batch_steps[0].alpha == 0.2 && d->batch_steps[1].alpha == 1.0);
    ck_assert(d->batch_steps[0].p == 1.0 && d->batch_steps[0].switch_p == 0.5);
    ck_assert(step_is_random(&d->batch_steps[0]) && step_is_batch(&d->batch_steps[1]));
    struct proto_labels f = config_dataset_labels(d);
    ck_assert_uint_eq(f.dtype, PROTO_DTYPE_F32);
    ck_assert_uint_eq(f.classes, 1000);
    ck_assert_uint_eq(f.lengths, 0);
    /* the samples' output is the normalize's */
    ck_assert_uint_eq(d->chain[d->nsteps].dtype, PROTO_DTYPE_F32);
    ck_assert_uint_eq(d->chain[d->nsteps].h, 8);
    char text[128];
    step_describe(&d->batch_steps[0], text, sizeof(text));
    ck_assert_str_eq(text, "mixup(0.2,num_classes=1000)");
    /* a dataset with them is not the same as one without */
    struct config c2;
    ck_assert_int_eq(load(&c2, DS "    steps:\n      - decode\n      - center_crop: 8\n"
                                  "      - normalize: {mean: 0.5, std: 0.25, layout: nchw}\n",
                          err, sizeof(err)), 0);
    ck_assert(!config_dataset_same(d, &c2.datasets[0]));
    ck_assert(config_dataset_same(d, d));
    f = config_dataset_labels(&c2.datasets[0]);
    ck_assert_uint_eq(f.dtype, PROTO_DTYPE_I64);
    ck_assert_uint_eq(f.classes, 0);
    config_free(&c2);
    config_free(&c);
}
END_TEST

/* batch: {pad: longest, max_length: N}: the bound, its line, the lengths in
 * the labels' format; a dataset that pads is not the same as one that does
 * not. */
START_TEST(test_batch_pad)
{
    struct config c, c2;
    char err[512];
    ck_assert_int_eq(load(&c, DS "    steps:\n      - decode_audio: {mono: true}\n"
                                 "      - mel_spectrogram: {n_mels: 8}\n"
                                 "    batch:\n      pad: longest\n      max_length: 300\n",
                          err, sizeof(err)), 0);
    const struct config_dataset *d = &c.datasets[0];
    ck_assert_uint_eq(d->pad_max, 300);
    ck_assert_int_eq(d->batch_line, 8);
    ck_assert_uint_eq(d->chain[d->nsteps].w, 0); /* the samples' own lengths */
    struct proto_labels f = config_dataset_labels(d);
    ck_assert_uint_eq(f.dtype, PROTO_DTYPE_I64);
    ck_assert_uint_eq(f.lengths, 1);
    ck_assert_int_eq(load(&c2, DS "    steps:\n      - decode_audio: {mono: true}\n"
                                  "      - mel_spectrogram: {n_mels: 8}\n"
                                  "    batch: {pad: none}\n",
                          err, sizeof(err)), 0);
    ck_assert_uint_eq(c2.datasets[0].pad_max, 0);
    ck_assert_uint_eq(config_dataset_labels(&c2.datasets[0]).lengths, 0);
    ck_assert(!config_dataset_same(d, &c2.datasets[0]));
    config_free(&c2);
    config_free(&c);
}
END_TEST

START_TEST(test_bad)
{
    const struct bad_case *bc = &bad_cases[_i];
    struct config c;
    char err[512];
    int rc = load(&c, bc->yaml, err, sizeof(err));
    config_free(&c);
    ck_assert_msg(rc == -EINVAL, "%s: accepted (rc %d)", bc->what, rc);
    char want[64];
    snprintf(want, sizeof(want), "test.yaml:%d:", bc->line);
    ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "%s: error '%s' does not start with '%s'",
                  bc->what, err, want);
    for (size_t w = 0; w < NELEM(bc->words) && bc->words[w]; w++)
        ck_assert_msg(strstr(err, bc->words[w]) != NULL, "%s: error '%s' lacks '%s'",
                      bc->what, err, bc->words[w]);    /* One line whatever the file holds: nothing in it can forge log lines. */
    for (const char *p = err; *p; p++)
        ck_assert_msg((unsigned char)*p >= 0x20 && *p != 0x7f, "%s: a control character in '%s'",
                      bc->what, err);
}
END_TEST

/* Every way of writing a step's parameters, as the header documents. */
static const char params_yaml[] =
    "datasets:\n"
    "  - name: train\n"
    "    root: /d\n"
    "    steps:\n"
    "      - decode: {mode: rgb, dct_scale: true}\n"
    "      - resize: {size: [256, 320]}\n"
    "      - random_resized_crop: {size: 224, scale: [0.08, 1.0], ratio: [3/4, 4/3]}\n"
    "      - random_flip:\n"
    "      - normalize:\n"
    "          mean: [0.485, 0.456, 0.406]\n"
    "          std: [0.229, 0.224, 0.225]\n"
    "          layout: nchw\n"
    "  - name: eval\n"
    "    root: /d\n"
    "    steps: [{decode: grey}, {resize: [128]}, {center_crop: [112, 100]},\n"
    "            {pad: {padding: [1, 2], fill: 7}}, {to_float: nchw}]\n";

static void describe_is(const struct step *s, const char *want)
{
    char buf[256];
    step_describe(s, buf, sizeof(buf));
    ck_assert_msg(strcmp(buf, want) == 0, "described as '%s', want '%s'", buf, want);
}

START_TEST(test_step_params)
{
    struct config c;
    char err[512];
    ck_assert_msg(load(&c, params_yaml, err, sizeof(err)) == 0, "%s", err);
    const struct config_dataset *t = config_find_dataset(&c, "train");
    ck_assert_uint_eq(t->nsteps, 5);
    describe_is(&t->steps[0], "decode(dct_scale=true)");
    ck_assert(t->steps[0].dct_h == 256 && t->steps[0].dct_w == 320); /* linked */
    describe_is(&t->steps[1], "resize([256,320])");
    describe_is(&t->steps[2], "random_resized_crop(224)");
    describe_is(&t->steps[3], "random_flip(0.5)");
    describe_is(&t->steps[4],
                "normalize(mean=[0.485,0.456,0.406],std=[0.229,0.224,0.225],layout=nchw)");
    ck_assert_uint_eq(t->split, 2); /* before the first random step */

    const struct config_dataset *e = config_find_dataset(&c, "eval");
    ck_assert_uint_eq(e->nsteps, 5);
    describe_is(&e->steps[0], "decode(mode=grey)");
    describe_is(&e->steps[1], "resize(128)");
    describe_is(&e->steps[2], "center_crop([112,100])");
    describe_is(&e->steps[3], "pad([1,2,1,2],fill=7)");
    describe_is(&e->steps[4], "to_float(layout=nchw)");
    /* No random step: offline up to the float conversion, which stays online
     * (the cache keeps uint8). */
    ck_assert_uint_eq(e->split, 4);
    config_free(&c);
}
END_TEST

/* The image augmentations: every parameter as torchvision names it, their
 * canonical descriptions, defaults left out, and where the default split
 * falls (a fixed-sigma blur is deterministic, so it can be cached). */
static const char recipe_yaml[] =
    "datasets:\n"
    "  - name: recipe\n"
    "    root: /d\n"
    "    steps:\n"
    "      - decode\n"
    "      - resize: 64\n"
    "      - gaussian_blur: {kernel_size: [5, 3], sigma: 1.5}\n"
    "      - color_jitter: {brightness: 0.4, contrast: [0.5, 1.5], saturation: 0, hue: 0.1}\n"
    "      - random_grayscale\n"
    "      - random_rotation: {degrees: 30, interpolation: bilinear, fill: [1, 2, 3]}\n"
    "      - random_affine: {degrees: [-5, 10], translate: [0.1, 0.2], scale: [0.9, 1.1],\n"
    "                        shear: 8, fill: 9, center: [3, 4]}\n"
    "      - auto_augment\n"
    "      - rand_augment: {num_ops: 3, magnitude: 5, num_magnitude_bins: 11}\n"
    "      - trivial_augment_wide: {num_magnitude_bins: 31, interpolation: bilinear}\n"
    "      - normalize: {mean: 0.5, std: 0.25, layout: nchw}\n"
    "      - random_erasing: {p: 0.25, scale: [0.1, 0.2], ratio: [1/2, 2], value: random}\n";

START_TEST(test_recipe_params)
{
    struct config c;
    char err[512];
    ck_assert_msg(load(&c, recipe_yaml, err, sizeof(err)) == 0, "%s", err);
    const struct config_dataset *d = config_find_dataset(&c, "recipe");
    ck_assert_uint_eq(d->nsteps, 12);
    static const char *const want[] = {
        "decode", "resize(64)", "gaussian_blur(kernel_size=[5,3],sigma=[1.5,1.5])",
        "color_jitter(brightness=[0.6,1.4],contrast=[0.5,1.5],hue=[-0.1,0.1])",
        "random_grayscale",
        "random_rotation(degrees=[-30,30],interpolation=bilinear,fill=[1,2,3])",
        "random_affine(degrees=[-5,10],translate=[0.1,0.2],scale=[0.9,1.1],shear=[-8,8],"
        "center=[3,4],fill=9)",
        "auto_augment", "rand_augment(num_ops=3,magnitude=5,num_magnitude_bins=11)",
        "trivial_augment_wide(interpolation=bilinear)",
        "normalize(mean=0.5,std=0.25,layout=nchw)",
        "random_erasing(p=0.25,scale=[0.1,0.2],ratio=[0.5,2],value=random)",
    };
    for (uint32_t i = 0; i < d->nsteps; i++)
        describe_is(&d->steps[i], want[i]);
    ck_assert_uint_eq(d->split, 3); /* through the fixed blur */
    ck_assert_int_eq(d->steps[11].erase_nchw, 1); /* what normalize gives */
    config_free(&c);
    /* decode (dct_scale) before random_resized_crop: both online by default
     * (the cold path scales each crop's region), nothing recorded for a resize. */
    ck_assert_msg(load(&c, DS "    steps: [{decode: {dct_scale: true}}, "
                              "{random_resized_crop: 8}]\n", err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(c.datasets[0].split, 0);
    ck_assert_uint_eq(c.datasets[0].steps[0].dct_h, 0);
    config_free(&c);
}
END_TEST

/* The cache key's fingerprint, folded over the offline steps as dataset.c
 * does: it changes with an offline step's parameters, not an online one's. */
static uint64_t offline_fingerprint(const char *steps, const char *split)
{
    char yaml[1024], err[512];
    struct config c;
    snprintf(yaml, sizeof(yaml),
             "datasets:\n  - name: a\n    root: /d\n    steps: %s\n    split: %s\n", steps,
             split);
    ck_assert_msg(load(&c, yaml, err, sizeof(err)) == 0, "%s", err);
    const struct config_dataset *d = &c.datasets[0];
    uint64_t fp = 0xcbf29ce484222325ull;
    for (uint32_t i = 0; i < d->split; i++)
        fp = step_fingerprint(&d->steps[i], fp);
    config_free(&c);
    return fp;
}

START_TEST(test_offline_fingerprint)
{
    static const char *const base =
        "[decode, {resize: 256}, {center_crop: 224}, {random_flip: 0.5}]";
    uint64_t fp = offline_fingerprint(base, "center_crop");
    /* The same pipeline written otherwise. */
    ck_assert_uint_eq(fp, offline_fingerprint(
        "[{decode: {mode: rgb}}, {resize: [256]}, {center_crop: [224, 224]}, random_flip]",
        "3"));
    /* Online parameters do not matter, nor steps added online. */
    ck_assert_uint_eq(fp, offline_fingerprint(
        "[decode, {resize: 256}, {center_crop: 224}, {random_flip: 0.1}]", "center_crop"));
    ck_assert_uint_eq(fp, offline_fingerprint(
        "[decode, {resize: 256}, {center_crop: 224}, {random_flip: 0.5}, "
        "{normalize: {mean: 0.5, std: 0.5}}]", "center_crop"));
    /* An offline parameter does; so does moving the split. */
    ck_assert_uint_ne(fp, offline_fingerprint(
        "[decode, {resize: 256}, {center_crop: 200}, {random_flip: 0.5}]", "center_crop"));
    ck_assert_uint_ne(fp, offline_fingerprint(
        "[decode, {resize: [256, 256]}, {center_crop: 224}, {random_flip: 0.5}]",
        "center_crop"));
    ck_assert_uint_ne(fp, offline_fingerprint(
        "[{decode: grey}, {resize: 256}, {center_crop: 224}, {random_flip: 0.5}]",
        "center_crop"));
    ck_assert_uint_ne(fp, offline_fingerprint(
        "[{decode: {dct_scale: true}}, {resize: 256}, {center_crop: 224}, random_flip]",
        "center_crop"));
    ck_assert_uint_ne(fp, offline_fingerprint(base, "resize"));
    /* A parameter of a step that moved online stops mattering. */
    ck_assert_uint_eq(offline_fingerprint(base, "resize"),
                      offline_fingerprint(
                          "[decode, {resize: 256}, {center_crop: 200}, random_flip]",
                          "resize"));
}
END_TEST

START_TEST(test_dataset_arg)
{
    struct config c;
    char err[512] = "";
    ck_assert_int_eq(config_defaults(&c), 0);
    ck_assert_msg(config_add_dataset_arg(&c, "a=/tmp", err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(c.ndatasets, 1);
    const struct config_dataset *d = config_find_dataset(&c, "a");
    ck_assert_ptr_nonnull(d);
    ck_assert_str_eq(d->root, "/tmp");
    ck_assert_uint_eq(d->nsteps, 4);
    check_step(&d->steps[0], STEP_DECODE, 0);
    check_step(&d->steps[1], STEP_RESIZE, 256);
    check_step(&d->steps[2], STEP_CENTER_CROP, 224);
    check_step(&d->steps[3], STEP_RANDOM_FLIP, 0);
    ck_assert_double_eq_tol(d->steps[3].p, 0.5, 1e-12);
    ck_assert_uint_eq(d->split, 3);
    ck_assert_int_eq(d->on_error, CONFIG_ON_ERROR_SKIP);
    ck_assert_int_eq(d->line, 0);

    /* A second one next to it, and the first is still found. */
    ck_assert_int_eq(config_add_dataset_arg(&c, "b=/srv/b", err, sizeof(err)), 0);
    ck_assert_uint_eq(c.ndatasets, 2);
    ck_assert_str_eq(config_find_dataset(&c, "a")->root, "/tmp");
    ck_assert_str_eq(config_find_dataset(&c, "b")->root, "/srv/b");

    static const char *const bad[] = {"noequals", "=dir", ""};
    for (size_t i = 0; i < NELEM(bad); i++) {
        err[0] = '\0';
        ck_assert_msg(config_add_dataset_arg(&c, bad[i], err, sizeof(err)) == -EINVAL,
                      "'%s' accepted", bad[i]);
        ck_assert_msg(err[0] != '\0', "'%s': no message", bad[i]);
    }
    ck_assert_uint_eq(c.ndatasets, 2);
    config_free(&c);
}
END_TEST

/* Datasets from the command line come on top of the file's. */
START_TEST(test_dataset_arg_after_file)
{
    struct config c;
    char err[512];
    ck_assert_msg(load(&c, full_yaml, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(config_add_dataset_arg(&c, "extra=/x", err, sizeof(err)), 0);
    ck_assert_uint_eq(c.ndatasets, 3);
    ck_assert_str_eq(config_find_dataset(&c, "extra")->root, "/x");
    ck_assert_str_eq(config_find_dataset(&c, "train")->root, "/data/train");
    config_free(&c);
}
END_TEST

START_TEST(test_parse_size)
{
    static const struct {
        const char *s;
        uint64_t v;
    } good[] = {
        {"0", 0},
        {"123", 123},
        {"64KiB", 64 * 1024},
        {"64kib", 64 * 1024},
        {"1MiB", 1 << 20},
        {"2GiB", 2 * GiB},
        {"1.5G", 3 * GiB / 2},
        {"1TiB", 1ull << 40},
    };
    for (size_t i = 0; i < NELEM(good); i++) {
        uint64_t v = 7;
        ck_assert_msg(config_parse_size(good[i].s, &v) == 0, "'%s' refused", good[i].s);
        ck_assert_msg(v == good[i].v, "'%s' = %llu, want %llu", good[i].s,
                      (unsigned long long)v, (unsigned long long)good[i].v);
    }

    uint64_t quarter, half;
    ck_assert_int_eq(config_parse_size("25%", &quarter), 0);
    ck_assert_int_eq(config_parse_size("50%", &half), 0);
    ck_assert_uint_gt(quarter, 0);
    ck_assert_uint_le(quarter, ram_bytes() / 4 + 4096);
    ck_assert_uint_ge(quarter + 4096, ram_bytes() / 4);
    ck_assert_uint_le(half - 2 * quarter, 2);

    static const char *const bad[] = {"", "12XB", "abc", "-5", "KiB", "1.2.3G", "200%",
                                      "5 apples"};
    for (size_t i = 0; i < NELEM(bad); i++) {
        uint64_t v;
        ck_assert_msg(config_parse_size(bad[i], &v) == -EINVAL, "'%s' accepted", bad[i]);
    }
}
END_TEST

/* The keys access control and limits add. */
START_TEST(test_access_and_limit_keys)
{
    struct config c;
    char err[512];
    ck_assert_msg(load(&c,
                       "socket_group: 4243\n"
                       "admin_group: root\n"
                       "prefetch: 4\n"
                       "limits:\n"
                       "  streams_per_user: 7\n"
                       "  prefetch: 4\n"
                       "  frame_size: 2KiB\n"
                       "  output_buffer: 1MiB\n"
                       "  output_timeout: 5\n"
                       DS "    follow_symlinks: true\n"
                       "  - name: b\n    root: /e\n    follow_symlinks: no\n",
                       err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(c.socket_group, 4243);
    ck_assert_uint_eq(c.admin_group, 0); /* "root", looked up */
    ck_assert_uint_eq(c.max_streams_per_user, 7);
    ck_assert_uint_eq(c.max_prefetch, 4);
    ck_assert_uint_eq(c.max_frame_size, 2048);
    ck_assert_uint_eq(c.max_output_buffer, 1u << 20);
    ck_assert_uint_eq(c.output_timeout, 5);
    ck_assert_int_eq(c.datasets[0].follow_symlinks, 1);
    ck_assert_int_eq(c.datasets[1].follow_symlinks, 0);
    config_free(&c);
}
END_TEST

struct diff_seen {
    char keys[16][64];
    int live[16];
    int n;
};

static void on_diff(void *arg, const char *key, const char *was, const char *now, int live)
{
    struct diff_seen *d = arg;
    ck_assert_str_ne(was, now);
    ck_assert_int_lt(d->n, 16);
    snprintf(d->keys[d->n], sizeof(d->keys[0]), "%s", key);
    d->live[d->n++] = live;
}

/* What a reload compares: which keys changed, and which need a restart. */
START_TEST(test_diff_and_restart_keys)
{
    struct config a, b;
    char err[512];
    ck_assert_msg(load(&a, "workers: 2\nlog_level: info\nadmin_group: 5\n"
                           "cache:\n  dir: /c1\n  memory: 1GiB\n", err, sizeof(err)) == 0,
                  "%s", err);
    ck_assert_msg(load(&b, "workers: 4\nlog_level: debug\nadmin_group: 6\n"
                           "cache:\n  dir: /c2\n  memory: 2GiB\n"
                           "limits:\n  connections: 9\n  pixels: 1000\n", err,
                       sizeof(err)) == 0, "%s", err);
    struct diff_seen d = {.n = 0};
    config_diff(&a, &b, on_diff, &d);
    static const struct {
        const char *key;
        int live;
    } want[] = {{"admin_group", 1}, {"workers", 0}, {"log_level", 1}, {"cache.memory", 1},
                {"cache.dir", 0}, {"limits.connections", 1}, {"limits.pixels", 0}};
    ck_assert_int_eq(d.n, (int)NELEM(want));
    for (size_t i = 0; i < NELEM(want); i++) {
        int found = 0;
        for (int k = 0; k < d.n; k++)
            if (strcmp(d.keys[k], want[i].key) == 0) {
                found = 1;
                ck_assert_msg(d.live[k] == want[i].live, "%s: live %d", want[i].key,
                              d.live[k]);
            }
        ck_assert_msg(found, "%s not reported", want[i].key);
    }
    /* Adopting b keeps what needs a restart as it runs in a. */
    ck_assert_int_eq(config_keep_restart_keys(&b, &a), 0);
    ck_assert_uint_eq(b.workers, 2);
    ck_assert_str_eq(b.cache_dir, "/c1");
    ck_assert_uint_eq(b.max_pixels, a.max_pixels);
    ck_assert_uint_eq(b.max_connections, 9);
    ck_assert_int_eq(b.log_level, LOG_LEVEL_DEBUG);
    d.n = 0;
    config_diff(&a, &b, on_diff, &d);
    for (int k = 0; k < d.n; k++)
        ck_assert_msg(d.live[k], "%s still differs after keeping it", d.keys[k]);
    config_free(&a);
    config_free(&b);
}
END_TEST

/* cluster.*: parsed, defaulted, reported by a reload as needing a restart
 * and kept as it runs. */
START_TEST(test_cluster_keys)
{
    struct config a, b;
    char err[512];
    ck_assert_msg(load(&a, "workers: 2\n", err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(a.cluster.nservers, 0);
    ck_assert_uint_eq(a.cluster.timeout_ms, CLUSTER_TIMEOUT_MS_DEFAULT);
    ck_assert_uint_eq(a.cluster.item_max, CLUSTER_ITEM_MAX_DEFAULT);
    ck_assert_msg(load(&b, "workers: 2\ncluster:\n  memcached: [10.0.0.1:11211, \"[::1]:11212\"]\n"
                           "  timeout_ms: 50\n  item_max: 4MiB\n", err, sizeof(err)) == 0,
                  "%s", err);
    ck_assert_uint_eq(b.cluster.nservers, 2);
    ck_assert_str_eq(b.cluster.servers[0], "10.0.0.1:11211");
    ck_assert_str_eq(b.cluster.servers[1], "[::1]:11212");
    ck_assert_uint_eq(b.cluster.timeout_ms, 50);
    ck_assert_uint_eq(b.cluster.item_max, 4u << 20);
    struct diff_seen d = {.n = 0};
    config_diff(&a, &b, on_diff, &d);
    ck_assert_msg(d.n == 1, "%d keys differ: %s, %s", d.n, d.keys[0], d.keys[1]);
    ck_assert_str_eq(d.keys[0], "cluster");
    ck_assert_int_eq(d.live[0], 0);
    ck_assert_int_eq(config_keep_restart_keys(&b, &a), 0);
    ck_assert_uint_eq(b.cluster.nservers, 0);
    ck_assert_uint_eq(b.cluster.timeout_ms, CLUSTER_TIMEOUT_MS_DEFAULT);
    d.n = 0;
    config_diff(&a, &b, on_diff, &d);
    ck_assert_int_eq(d.n, 0);
    config_free(&a);
    config_free(&b);
    /* One server may be written without the list. */
    ck_assert_msg(load(&a, "cluster:\n  memcached: host:1\n", err, sizeof(err)) == 0, "%s",
                  err);
    ck_assert_uint_eq(a.cluster.nservers, 1);
    config_free(&a);
}
END_TEST

/* source.*: defaults, the file's values, copied into every dataset (the
 * file's and the command line's) with io.depth. */
/* root: a YAML list of shards is the brace pattern naming them, in order
 * (braces_join), and expands back to the list; cache.dir reaches every
 * dataset's source, --cache-dir too. */
START_TEST(test_root_list)
{
    struct config a;
    char err[512];
    ck_assert_msg(load(&a, "cache:\n  dir: /var/cache/p\n"
                           "datasets:\n  - name: d\n    root:\n      - /s/x/a.tar\n"
                           "      - /s/x/b,{c}.tar\n      - /s/y.tar\n"
                           "  - name: e\n    root: [s3://b/t/1.tar, s3://b/t/0.tar]\n",
                       err, sizeof(err)) == 0, "%s", err);
    ck_assert_str_eq(a.datasets[0].root, "/s/{x/a,x/b\\,\\{c\\},y}.tar");
    ck_assert_str_eq(a.datasets[1].root, "s3://b/t/{1,0}.tar");
    char **names = NULL;
    size_t n = 0;
    ck_assert_int_eq(braces_expand(a.datasets[0].root, 10, &names, &n, err, sizeof(err)), 0);
    ck_assert_uint_eq(n, 3);
    ck_assert_str_eq(names[0], "/s/x/a.tar");
    ck_assert_str_eq(names[1], "/s/x/b,{c}.tar");
    ck_assert_str_eq(names[2], "/s/y.tar");
    braces_free(names, n);
    ck_assert_str_eq(a.datasets[1].source.cache_dir, "/var/cache/p");
    ck_assert_int_eq(config_set_cache_dir(&a, "/tmp/other"), 0);
    ck_assert_str_eq(a.datasets[0].source.cache_dir, "/tmp/other");
    config_free(&a);
    /* one shard: itself */
    ck_assert_msg(load(&a, "datasets:\n  - name: d\n    root: [/s/a.tar]\n", err,
                       sizeof(err)) == 0, "%s", err);
    ck_assert_str_eq(a.datasets[0].root, "/s/a.tar");
    config_free(&a);
}
END_TEST

START_TEST(test_source_keys)
{
    struct config a;
    char err[512];
    ck_assert_msg(load(&a, "datasets:\n  - name: d\n    root: s3://b/p\n", err,
                       sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(a.source_retries, 5);
    ck_assert_str_eq(a.datasets[0].source.endpoint, "");
    ck_assert_uint_eq(a.datasets[0].source.retries, 5);
    ck_assert_uint_eq(a.datasets[0].source.timeout_ms, 30000);
    ck_assert_uint_eq(a.datasets[0].source.page_keys, 1000);
    ck_assert_uint_eq(a.datasets[0].source.depth, 128);
    ck_assert_uint_eq(a.datasets[0].source.max_bytes, 64u << 20);
    config_free(&a);
    ck_assert_msg(load(&a, "datasets:\n  - name: d\n    root: s3://b/p\n"
                           "io:\n  depth: 32\n"
                           "source:\n  endpoint: http://127.0.0.1:9000\n  region: eu-west-3\n"
                           "  credentials_file: /etc/presto/aws\n  retries: 0\n"
                           "  timeout_ms: 1000\n  connect_timeout_ms: 200\n  page_keys: 7\n",
                       err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(config_add_dataset_arg(&a, "e=s3://c/q", err, sizeof(err)), 0);
    for (uint32_t i = 0; i < 2; i++) {
        const struct config_source *cs = &a.datasets[i].source;
        ck_assert_str_eq(cs->endpoint, "http://127.0.0.1:9000");
        ck_assert_str_eq(cs->region, "eu-west-3");
        ck_assert_str_eq(cs->credentials_file, "/etc/presto/aws");
        ck_assert_uint_eq(cs->retries, 0);
        ck_assert_uint_eq(cs->timeout_ms, 1000);
        ck_assert_uint_eq(cs->connect_timeout_ms, 200);
        ck_assert_uint_eq(cs->page_keys, 7);
        ck_assert_uint_eq(cs->depth, 32);
    }
    config_free(&a);
    /* a value longer than a dataset keeps: FILE:LINE */
    char yaml[1024];
    snprintf(yaml, sizeof(yaml), "datasets:\n  - name: d\n    root: s3://b/p\n"
                                 "source:\n  region: %0300d\n", 0);
    ck_assert_int_eq(load(&a, yaml, err, sizeof(err)), -EINVAL);
    config_free(&a);
    ck_assert_msg(strstr(err, "test.yaml:5:") && strstr(err, "source.region"), "%s", err);
    /* a dataset's own endpoint, region and credentials file, beside the
     * global ones: each overrides its key for that dataset only */
    ck_assert_msg(load(&a, "source:\n  endpoint: http://127.0.0.1:9000\n  region: eu-west-3\n"
                           "  credentials_file: /etc/presto/aws\n  retries: 2\n"
                           "datasets:\n  - name: d\n    root: s3://b/p\n"
                           "  - name: e\n    root: s3://c/q\n    source:\n"
                           "      endpoint: https://minio.local:9000\n"
                           "      credentials_file: /etc/presto/minio\n",
                       err, sizeof(err)) == 0, "%s", err);
    ck_assert_str_eq(a.datasets[0].source.endpoint, "http://127.0.0.1:9000");
    ck_assert_str_eq(a.datasets[0].source.credentials_file, "/etc/presto/aws");
    ck_assert_str_eq(a.datasets[1].source.endpoint, "https://minio.local:9000");
    ck_assert_str_eq(a.datasets[1].source.region, "eu-west-3"); /* not overridden */
    ck_assert_str_eq(a.datasets[1].source.credentials_file, "/etc/presto/minio");
    ck_assert_uint_eq(a.datasets[1].source.retries, 2);
    ck_assert_int_eq(a.datasets[1].source.own_line[0], 12);
    ck_assert_int_eq(a.datasets[1].source.own_line[1], 0);
    /* a reload sees a dataset whose endpoint changed as another dataset */
    struct config b;
    ck_assert_msg(load(&b, "source:\n  endpoint: http://127.0.0.1:9000\n"
                           "datasets:\n  - name: e\n    root: s3://c/q\n",
                       err, sizeof(err)) == 0, "%s", err);
    ck_assert(!config_dataset_same(&a.datasets[1], &b.datasets[0]));
    config_free(&b);
    config_free(&a);
    snprintf(yaml, sizeof(yaml), "datasets:\n  - name: d\n    root: s3://b/p\n"
                                 "    source:\n      region: %0300d\n", 0);
    ck_assert_int_eq(load(&a, yaml, err, sizeof(err)), -EINVAL);
    config_free(&a);
    ck_assert_msg(strstr(err, "test.yaml:5:") && strstr(err, "source.region") &&
                  strstr(err, "longer than 63"), "%s", err);
}
END_TEST

/* A dataset is the same only when everything that defines it is. */
START_TEST(test_dataset_same_and_copy)
{
    static const char *const variants[] = {
        "    root: /d\n",
        "    root: /other\n",
        "    root: /d\n    steps: [decode, {resize: 255}, {center_crop: 224}]\n",
        "    root: /d\n    steps: [decode, {resize: 256}, {center_crop: 224}, "
        "{random_flip: 0.4}]\n",
        "    root: /d\n    split: 1\n",
        "    root: /d\n    on_error: fail\n",
        "    root: /d\n    encoding: zstd\n",
        "    root: /d\n    follow_symlinks: true\n",
    };
    struct config c[NELEM(variants)];
    char yaml[512], err[512];
    for (size_t i = 0; i < NELEM(variants); i++) {
        snprintf(yaml, sizeof(yaml), "datasets:\n  - name: a\n%s", variants[i]);
        ck_assert_msg(load(&c[i], yaml, err, sizeof(err)) == 0, "%s: %s", variants[i], err);
    }
    for (size_t i = 0; i < NELEM(variants); i++)
        for (size_t k = 0; k < NELEM(variants); k++)
            ck_assert_msg(config_dataset_same(&c[i].datasets[0], &c[k].datasets[0]) == (i == k),
                          "variants %zu and %zu", i, k);
    struct config_dataset copy;
    ck_assert_int_eq(config_dataset_copy(&copy, &c[1].datasets[0]), 0);
    ck_assert_ptr_ne(copy.root, c[1].datasets[0].root);
    /* The per-step chain travels with it (a reload's datasets never recompute it). */
    ck_assert(memcmp(copy.chain, c[1].datasets[0].chain, sizeof(copy.chain)) == 0);
    ck_assert_uint_eq(copy.chain[copy.nsteps].h, 224);
    for (size_t i = 0; i < NELEM(variants); i++)
        config_free(&c[i]);
    ck_assert_str_eq(copy.root, "/other"); /* its own, after the config went */
    ck_assert_uint_eq(copy.nsteps, 4);
    config_dataset_free(&copy);
}
END_TEST


/* ---- the per-step chain, pinned ----
 * The disk tier keys a record by (the dataset's name hash, the strategy's
 * fingerprint, the sample's identity), and clients see the dataset's
 * content fingerprint: a change of either orphans every cache dir written
 * before it. These are the values the code computed before config.c took
 * over the chain from dataset.c (552b89b); they must never change. */

struct pinned_pipeline {
    const char *steps; /* YAML flow list */
    uint64_t digest;   /* of every split's strategy, the output and the content hash */
};

/* One digest over everything a dataset derives from its steps, per split. */
static uint64_t chain_digest(struct dataset *ds, uint32_t nsteps)
{
    const struct dataset_output *o = dataset_output(ds);
    uint64_t h = hash_combine(0, dataset_fingerprint(ds));
    h = hash_combine(h, ((uint64_t)o->h << 32) | o->w);
    h = hash_combine(h, ((uint64_t)o->c << 32) | o->dtype);
    h = hash_combine(h, ((uint64_t)o->layout << 32) | o->bytes);
    for (uint32_t split = 0; split <= nsteps; split++) {
        ck_assert_int_eq(dataset_switch(ds, split, 0, 1), 0);
        const struct strategy *st = dataset_strategy(ds);
        ck_assert_uint_eq(st->split, split);
        h = hash_combine(h, st->fingerprint);
        h = hash_combine(h, ((uint64_t)st->mat_h << 32) | st->mat_w);
        h = hash_combine(h, ((uint64_t)st->mat_c << 32) | st->mat_dtype);
        h = hash_combine(h, st->mat_bytes);
        strategy_put(st);
    }
    return h;
}

/* A root of two classes, three files of fixed sizes and mtimes. */
static void make_pinned_root(char *dir)
{
    static const char *const files[] = {"cat/a.jpg", "cat/b.jpg", "dog/c.jpg"};
    char path[512];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    for (size_t i = 0; i < NELEM(files); i++) {
        snprintf(path, sizeof(path), "%s/%.3s", dir, files[i]);
        mkdir(path, 0755);
        snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        for (size_t k = 0; k < 100 * (i + 1); k++)
            fputc((int)(k * 7 + i), f);
        fclose(f);
        struct timespec ts[2] = {{1700000000 + (time_t)i, 123456789},
                                 {1700000000 + (time_t)i, 123456789}};
        ck_assert_int_eq(utimensat(AT_FDCWD, path, ts, 0), 0);
    }
}

static void remove_pinned_root(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_chain_pinned)
{
    static const struct pinned_pipeline pipes[] = {
        {"[decode, {resize: 256}, {center_crop: 224}, {random_flip: 0.5}]",
         0x063a41c933f73caaull},
        {"[{decode: {mode: grey, dct_scale: true}}, {resize: 128}, {pad: 4}, "
         "{to_float: {layout: nchw}}]", 0x5c312db8c1057404ull},
        {"[decode, {random_resized_crop: 160}, {normalize: {mean: [0.485, 0.456, 0.406], "
         "std: [0.229, 0.224, 0.225], layout: nchw}}]", 0x510dac58efabd689ull},
        {"[decode, {resize: [200, 100]}, {center_crop: 96}, {random_flip: 0.25}, "
         "{normalize: {mean: [0.5, 0.5, 0.5], std: [0.25, 0.25, 0.25]}}]",
         0x4be6ed19864a8674ull},
        {"[decode, {center_crop: [64, 32]}, {pad: {padding: [1, 2, 3, 4], fill: [9, 8, 7]}}]",
         0x68255b17da669d7full},
    };
    char dir[] = "/tmp/presto-test-chain-XXXXXX", yaml[1024], err[512];
    make_pinned_root(dir);
    for (size_t i = 0; i < NELEM(pipes); i++) {
        struct config c;
        struct dataset *ds;
        snprintf(yaml, sizeof(yaml), "datasets:\n  - name: pin%zu\n    root: %s\n    steps: %s\n",
                 i, dir, pipes[i].steps);
        ck_assert_msg(load(&c, yaml, err, sizeof(err)) == 0, "%s: %s", pipes[i].steps, err);
        ck_assert_msg(dataset_open(&ds, &c.datasets[0], err, sizeof(err)) == 0, "%s", err);
        uint64_t d = chain_digest(ds, c.datasets[0].nsteps);
        ck_assert_msg(d == pipes[i].digest,
                      "pipeline %zu (%s): digest 0x%016llx, pinned 0x%016llx", i,
                      pipes[i].steps, (unsigned long long)d,
                      (unsigned long long)pipes[i].digest);
        dataset_free(ds);
        config_free(&c);
    }
    /* The -d default pipeline, and its fingerprints one by one. */
    static const uint64_t default_fp[] = {0xcbf29ce484222325ull, 0xa6499f4b794aeab5ull,
                                          0xdefea55687bc5673ull, 0x52b0df1252242b15ull,
                                          0xe38c73a54ce257a6ull};
    struct config c;
    struct dataset *ds;
    ck_assert_int_eq(config_defaults(&c), 0);
    snprintf(yaml, sizeof(yaml), "pin=%s", dir);
    ck_assert_msg(config_add_dataset_arg(&c, yaml, err, sizeof(err)) == 0, "%s", err);
    ck_assert_msg(dataset_open(&ds, &c.datasets[0], err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(dataset_fingerprint(ds), 0x4659274d5193f4daull);
    for (uint32_t split = 0; split <= 4; split++) {
        ck_assert_int_eq(dataset_switch(ds, split, 3, 1), 0);
        const struct strategy *st = dataset_strategy(ds);
        ck_assert_uint_eq(st->fingerprint, default_fp[split]);
        strategy_put(st);
    }
    /* The same steps as pipeline 0, from the command line's default. */
    ck_assert_uint_eq(chain_digest(ds, 4), pipes[0].digest);
    dataset_free(ds);
    config_free(&c);
    remove_pinned_root(dir);
}
END_TEST

static Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("load");
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_empty_document);
    tcase_add_test(tc, test_string_has_defaults);
    tcase_add_test(tc, test_full);
    tcase_add_test(tc, test_load_file);
    tcase_add_test(tc, test_percent_memory);
    tcase_add_test(tc, test_client_memory);
    suite_add_tcase(s, tc);

    tc = tcase_create("errors");
    tcase_add_loop_test(tc, test_bad, 0, (int)NELEM(bad_cases));
    tcase_add_test(tc, test_batch_steps);
    tcase_add_test(tc, test_batch_pad);
    suite_add_tcase(s, tc);

    tc = tcase_create("misc");
    tcase_add_test(tc, test_step_params);
    tcase_add_test(tc, test_recipe_params);
    tcase_add_test(tc, test_offline_fingerprint);
    tcase_add_test(tc, test_dataset_arg);
    tcase_add_test(tc, test_dataset_arg_after_file);
    tcase_add_test(tc, test_parse_size);
    tcase_add_test(tc, test_access_and_limit_keys);
    tcase_add_test(tc, test_diff_and_restart_keys);
    tcase_add_test(tc, test_cluster_keys);
    tcase_add_test(tc, test_source_keys);
    tcase_add_test(tc, test_root_list);
    tcase_add_test(tc, test_dataset_same_and_copy);
    tcase_add_test(tc, test_chain_pinned);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(config_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
