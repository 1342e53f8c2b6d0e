/*
 * Bad samples: a data set of 40 good images in 2 classes with one file of
 * every bad kind planted in its class directories (corrupt, truncated, not a
 * JPEG, empty, deleted after indexing, over limits.file_size, over
 * limits.pixels), served by one prestod twice: as `good` (on_error: skip)
 * and as `strict` (on_error: fail).
 *
 * Under skip an epoch is the planned ids minus the bad ones, cut into full
 * batches (only the last short), whatever the batch size, prefetch or
 * worker count: every epoch is checked sample by sample against the same
 * epoch pulled with batch size 1, where no batch straddles a skip. Under
 * fail the stream ends with PRESTO_E_SAMPLE naming the file while other
 * streams go on.
 *
 * The planted files are named zz_*, so without shuffle they come after the
 * good images of their class: planned ids 20..23 (class_00) and 44..46
 * (class_01) of 47.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "presto.h"

#define NGOOD 40
#define NCLASSES 2
#define NBAD 7
#define NBAD_CLASS0 4 /* planned ids 20..23 without shuffle */
#define NFILES (NGOOD + NBAD)
#define SIDE 64
#define SAMPLE_BYTES ((size_t)SIDE * SIDE * 3)
#define FILE_LIMIT (200 * 1024) /* limits.file_size */
#define PIXEL_LIMIT 1000000     /* limits.pixels */
#define CASE_TIMEOUT_S 240

enum bad_kind { BAD_READ, BAD_DECODE, BAD_TOO_LARGE };

static const struct planted {
    const char *rel;      /* under the data set's root */
    enum bad_kind kind;   /* the stats counter it lands in */
    const char *message;  /* a piece of the reason the log gives */
} planted[NBAD] = {
    {"class_00/zz_corrupt.jpg", BAD_DECODE, "JPEG"},
    {"class_00/zz_empty.jpg", BAD_DECODE, "empty"},
    {"class_00/zz_text.jpg", BAD_DECODE, "not a JPEG"},
    {"class_00/zz_vanished.jpg", BAD_READ, "No such file"},
    {"class_01/zz_huge_file.jpg", BAD_TOO_LARGE, "over the limit"},
    {"class_01/zz_huge_pixels.jpg", BAD_TOO_LARGE, "pixels"},
    {"class_01/zz_truncated.jpg", BAD_DECODE, "JPEG"},
};
#define VANISHED 3 /* planted[3]: deleted once prestod has indexed it */

/* Writes the planted files (all but the empty and the vanished one from a
 * good image of the data set); argv[1] is the root. */
static const char plant_py[] =
    "import io, random, sys\n"
    "from PIL import Image\n"
    "root = sys.argv[1]\n"
    "src = open(root + '/class_00/img_00000.jpg', 'rb').read()\n"
    "def put(rel, data):\n"
    "    with open(root + '/' + rel, 'wb') as f:\n"
    "        f.write(data)\n"
    "def jpeg(im, quality):\n"
    "    out = io.BytesIO()\n"
    "    im.save(out, 'JPEG', quality=quality)\n"
    "    return out.getvalue()\n"
    "b = bytearray(src)\n"
    "b[len(b) // 2:len(b) // 2 + 64] = bytes(64)\n"
    "put('class_00/zz_corrupt.jpg', bytes(b))\n"
    "put('class_00/zz_empty.jpg', b'')\n"
    "put('class_00/zz_text.jpg', b'not an image, whatever its name\\n')\n"
    "put('class_01/zz_truncated.jpg', src[:len(src) * 2 // 5])\n"
    "noise = Image.frombytes('RGB', (600, 600), random.Random(7).randbytes(600 * 600 * 3))\n"
    "put('class_01/zz_huge_file.jpg', jpeg(noise, 90))\n"
    "grad = Image.linear_gradient('L').resize((1200, 1200)).convert('RGB')\n"
    "put('class_01/zz_huge_pixels.jpg', jpeg(grad, 75))\n";

static struct harness H;
static char data_root[HARNESS_PATH_MAX];
static char config_path[HARNESS_PATH_MAX];

static void planted_path(unsigned i, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s/%s", data_root, planted[i].rel);
    ck_assert_msg(n > 0 && (size_t)n < len, "path too long");
}

static off_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? st.st_size : -1;
}

/* ---- the data set and the daemon ---- */

static int copy_file(const char *from, const char *to)
{
    char buf[65536];
    size_t n;
    int rc = 0;
    FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
    if (!in || !out) {
        fprintf(stderr, "copy %s to %s: %s\n", from, to, strerror(errno));
        rc = -1;
    }
    while (rc == 0 && (n = fread(buf, 1, sizeof(buf), in)) > 0)
        if (fwrite(buf, 1, n, out) != n)
            rc = -1;
    if (in)
        fclose(in);
    if (out && fclose(out) != 0)
        rc = -1;
    return rc;
}

static int make_data(void)
{
    char script[HARNESS_PATH_MAX], log[HARNESS_PATH_MAX], text[4096];
    int rc = harness_make_dataset(&H, "bad", NGOOD, NCLASSES, 1, 96, 160, data_root,
                                  sizeof(data_root));
    if (rc < 0)
        return rc;
    if ((rc = harness_write_file(&H, "plant.py", plant_py, script, sizeof(script))) < 0 ||
        (rc = harness_path(&H, "plant.log", log, sizeof(log))) < 0)
        return rc;
    const char *argv[] = {harness_env("PYTHON", "/usr/bin/python3"), script, data_root, NULL};
    if ((rc = harness_run(argv, log, 120)) != 0) {
        fprintf(stderr, "plant.py failed (status %d); see %s\n", rc, log);
        return -EIO;
    }

    static const char steps[] = "[decode, {resize: 64}, {center_crop: 64}, {random_flip: 0.5}]";
    int n = snprintf(text, sizeof(text),
             "workers: 2\n"
             "cache:\n"
             "  memory: 64MiB\n"
             "  dir: %s/cache\n"
             "limits:\n"
             "  file_size: %d\n"
             "  pixels: %d\n"
             "datasets:\n"
             "  - name: good\n"
             "    root: %s\n"
             "    steps: %s\n"
             "    on_error: skip\n"
             "  - name: strict\n"
             "    root: %s\n"
             "    steps: %s\n"
             "    on_error: fail\n",
             H.dir, FILE_LIMIT, PIXEL_LIMIT, data_root, steps, data_root, steps);
    if (n < 0 || (size_t)n >= sizeof(text))
        return -ENAMETOOLONG;
    return harness_write_file(&H, "prestod.yaml", text, config_path, sizeof(config_path));
}

/* Starts prestod on the planted data set, then deletes the file it indexed
 * as planted[VANISHED], so reading it fails (root reads anything chmod'ed). */
static void start_daemon(const char *workers)
{
    char src[HARNESS_PATH_MAX * 2], vanished[HARNESS_PATH_MAX * 2];
    int n = snprintf(src, sizeof(src), "%s/class_00/img_00000.jpg", data_root);
    ck_assert(n > 0 && (size_t)n < sizeof(src));
    planted_path(VANISHED, vanished, sizeof(vanished));
    ck_assert_int_eq(copy_file(src, vanished), 0);
    const char *args[] = {"-c", config_path, "-w", workers, NULL};
    ck_assert_msg(harness_start(&H, args) == 0, "prestod did not start");
    ck_assert_int_eq(unlink(vanished), 0);
}

static void daemon_setup(void)
{
    start_daemon("2");
}

static void daemon_teardown(void)
{
    harness_stop_checked(&H);
}

/* ---- pulling epochs ---- */

struct epoch {
    uint64_t samples, batches, skipped;
    uint64_t fnv; /* every batch's labels then data, in order (as prestoctl --checksum) */
    int64_t labels[NFILES];
    uint64_t hashes[NFILES]; /* FNV of each sample's pixels */
};

static presto_stream_opts_t stream_opts(const char *dataset, uint32_t batch_size,
                                        uint64_t epoch, int shuffle)
{
    presto_stream_opts_t o;
    presto_stream_opts_init(&o);
    o.dataset = dataset;
    o.batch_size = batch_size;
    o.seed = 3;
    o.epoch = epoch;
    o.shuffle = shuffle;
    return o;
}

/* Takes one batch into e, checking its shape, its index and that no batch
 * follows a short one. */
static void take_batch(const presto_stream_opts_t *o, const presto_batch_t *b, struct epoch *e,
                       int *short_seen)
{
    ck_assert_msg(!*short_seen, "batch %llu follows a short batch",
                  (unsigned long long)b->index);
    ck_assert_uint_eq(b->index, e->batches);
    ck_assert_uint_ge(b->n, 1);
    ck_assert_uint_le(b->n, o->batch_size);
    if (o->drop_last)
        ck_assert_uint_eq(b->n, o->batch_size);
    *short_seen = b->n < o->batch_size;
    ck_assert_uint_eq(b->h, SIDE);
    ck_assert_uint_eq(b->w, SIDE);
    ck_assert_uint_eq(b->c, 3);
    ck_assert_uint_eq(b->size, b->n * SAMPLE_BYTES);
    ck_assert_uint_le(e->samples + b->n, NFILES);
    e->fnv = harness_fnv(e->fnv, b->labels, b->n * sizeof(b->labels[0]));
    e->fnv = harness_fnv(e->fnv, b->data, b->size);
    for (uint32_t i = 0; i < b->n; i++) {
        ck_assert_msg(b->labels[i] >= 0 && b->labels[i] < NCLASSES, "label %lld",
                      (long long)b->labels[i]);
        e->labels[e->samples + i] = b->labels[i];
        e->hashes[e->samples + i] = harness_fnv(
            HARNESS_FNV_INIT, (const uint8_t *)b->data + i * SAMPLE_BYTES, SAMPLE_BYTES);
    }
    e->samples += b->n;
    e->batches++;
}

static void epoch_init(struct epoch *e)
{
    memset(e, 0, sizeof(*e));
    e->fnv = HARNESS_FNV_INIT;
}

/* Pulls one epoch on a connection of its own, checking every batch. */
static void pull_epoch(const presto_stream_opts_t *o, struct epoch *e)
{
    presto_t *p;
    presto_stream_t *s;
    presto_stream_info_t info;
    presto_batch_t b;
    int short_seen = 0;
    uint64_t planned = o->drop_last ? NFILES / o->batch_size * o->batch_size : NFILES;

    epoch_init(e);
    ck_assert_int_eq(harness_connect(&H, &p), 0);
    int rc = presto_stream_open(p, o, &s);
    ck_assert_msg(rc == 0, "stream_open: %d %s", rc, presto_errmsg(p));
    ck_assert_int_eq(presto_stream_info(s, &info), 0);
    /* What was planned: an upper bound of what comes. */
    ck_assert_uint_eq(info.samples, planned);
    ck_assert_uint_eq(info.batches, (planned + o->batch_size - 1) / o->batch_size);
    while ((rc = presto_next(s, &b)) > 0) {
        take_batch(o, &b, e, &short_seen);
        presto_release(s, &b);
    }
    ck_assert_msg(rc == 0, "presto_next: %d %s", rc, presto_stream_errmsg(s));
    e->skipped = presto_stream_skipped(s);
    /* Every planned sample was sent or skipped, but a short last batch under
     * drop_last. */
    ck_assert_uint_le(e->samples + e->skipped, planned);
    ck_assert_uint_lt(planned - e->samples - e->skipped, o->drop_last ? o->batch_size : 1);
    ck_assert_uint_le(e->batches, info.batches);
    presto_stream_close(s);
    presto_close(p);
}

static void expect_stat(const char *parent, const char *key, double want)
{
    double v = -1;
    int rc = harness_wait_stat(&H, parent, key, want, 3000, &v);
    ck_assert_msg(rc == 0 && v == want, "stats %s%s%s = %g, want %g (rc %d)",
                  parent ? parent : "", parent ? "." : "", key, v, want, rc);
}

static double stat_now(const char *parent, const char *key)
{
    double v;
    ck_assert_int_eq(harness_stat(&H, parent, key, &v), 0);
    return v;
}

/* Asserts that e's samples are the first e->samples of ref's, labels and
 * pixels both. */
static void expect_prefix(const struct epoch *e, const struct epoch *ref, const char *what)
{
    ck_assert_uint_le(e->samples, ref->samples);
    for (uint64_t i = 0; i < e->samples; i++)
        ck_assert_msg(e->hashes[i] == ref->hashes[i] && e->labels[i] == ref->labels[i],
                      "%s: sample %llu differs from the batch-size-1 epoch's", what,
                      (unsigned long long)i);
}

/* ---- case "skip" ---- */

START_TEST(test_skip_keeps_batches_full)
{
    static const uint32_t sizes[] = {2, 3, 7, 8, 64};
    static const uint32_t prefetches[] = {0, 1, 3};
    int shuffle = _i;
    struct epoch ref, e;

    /* Batch size 1: a bad sample's batch is empty, nothing is repacked. */
    presto_stream_opts_t o = stream_opts("good", 1, 1, shuffle);
    pull_epoch(&o, &ref);
    ck_assert_uint_eq(ref.samples, NGOOD);
    ck_assert_uint_eq(ref.batches, NGOOD);
    ck_assert_uint_eq(ref.skipped, NBAD);
    unsigned per_class[NCLASSES] = {0}, sorted = 1;
    for (unsigned i = 0; i < NGOOD; i++) {
        per_class[ref.labels[i]]++;
        sorted &= i == 0 || ref.labels[i] >= ref.labels[i - 1];
    }
    for (unsigned c = 0; c < NCLASSES; c++)
        ck_assert_msg(per_class[c] == NGOOD / NCLASSES, "class %u has %u samples", c,
                      per_class[c]);
    ck_assert_msg(sorted == !shuffle, "labels %s sorted", sorted ? "are" : "are not");

    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        for (size_t k = 0; k < sizeof(prefetches) / sizeof(prefetches[0]); k++) {
            char what[64];
            o = stream_opts("good", sizes[i], 1, shuffle);
            o.prefetch = prefetches[k];
            snprintf(what, sizeof(what), "batch size %u, prefetch %u, shuffle %d", sizes[i],
                     prefetches[k], shuffle);
            pull_epoch(&o, &e);
            ck_assert_msg(e.samples == NGOOD && e.skipped == NBAD,
                          "%s: %llu samples, %llu skipped", what,
                          (unsigned long long)e.samples, (unsigned long long)e.skipped);
            ck_assert_uint_eq(e.batches, (NGOOD + sizes[i] - 1) / sizes[i]);
            expect_prefix(&e, &ref, what);
        }
    }
}
END_TEST

/* drop_last plans floor(47 / B) * B ids and drops the short last batch that
 * the skipped ones leave. */
START_TEST(test_skip_drop_last)
{
    static const uint32_t sizes[] = {7, 8};
    int shuffle = _i;
    struct epoch ref, e;
    presto_stream_opts_t o = stream_opts("good", 1, 2, shuffle);
    pull_epoch(&o, &ref);

    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        uint32_t bs = sizes[i];
        uint64_t planned = NFILES / bs * bs;
        o = stream_opts("good", bs, 2, shuffle);
        o.drop_last = 1;
        pull_epoch(&o, &e);
        if (!shuffle) /* the planned ids include class_00's bad files only */
            ck_assert_uint_eq(e.skipped, NBAD_CLASS0);
        ck_assert_uint_eq(e.samples, (planned - e.skipped) / bs * bs);
        ck_assert_uint_eq(e.batches, e.samples / bs);
        expect_prefix(&e, &ref, "drop_last");
    }
}
END_TEST

/* Stats count each bad sample by reason every time it is met; the log
 * names each bad file once, with the reason. */
START_TEST(test_skip_stats_and_log)
{
    static const char *const keys[] = {"read", "decode", "too_large"};
    double before[3], want[3] = {0};
    for (unsigned k = 0; k < 3; k++)
        before[k] = stat_now("errors", keys[k]);
    for (unsigned i = 0; i < NBAD; i++)
        want[planted[i].kind]++;
    double skipped = stat_now(NULL, "samples_skipped");
    double served = stat_now(NULL, "samples_served");

    struct epoch e;
    presto_stream_opts_t o = stream_opts("good", 8, 5, 1);
    pull_epoch(&o, &e);
    ck_assert_uint_eq(e.samples, NGOOD);
    for (unsigned k = 0; k < 3; k++)
        expect_stat("errors", keys[k], before[k] + want[k]);
    expect_stat(NULL, "samples_skipped", skipped + NBAD);
    expect_stat(NULL, "samples_served", served + NGOOD);

    o.epoch = 6;
    pull_epoch(&o, &e);
    for (unsigned k = 0; k < 3; k++)
        expect_stat("errors", keys[k], before[k] + 2 * want[k]);
    expect_stat(NULL, "samples_skipped", skipped + 2 * NBAD);

    /* The log: each bad file on one line of `good`, with its reason. */
    FILE *f = fopen(H.log, "r");
    ck_assert_ptr_nonnull(f);
    unsigned lines[NBAD] = {0};
    char line[8192];
    while (fgets(line, sizeof(line), f)) {
        if (!strstr(line, "dataset 'good'"))
            continue;
        for (unsigned i = 0; i < NBAD; i++) {
            char path[HARNESS_PATH_MAX * 2];
            planted_path(i, path, sizeof(path));
            if (!strstr(line, path))
                continue;
            lines[i]++;
            ck_assert_msg(strstr(line, planted[i].message), "log line for %s lacks '%s': %s",
                          planted[i].rel, planted[i].message, line);
        }
    }
    fclose(f);
    for (unsigned i = 0; i < NBAD; i++)
        ck_assert_msg(lines[i] == 1, "%s is logged %u times, want once", planted[i].rel,
                      lines[i]);
}
END_TEST

/* ---- case "fail" ---- */

/* The strict stream ends at its first bad sample with the file's path, while
 * a stream on `good` opened before it goes on to the end. */
START_TEST(test_fail_names_file)
{
    presto_t *pg, *ps;
    presto_stream_t *sg, *ss;
    presto_batch_t b;
    struct epoch eg, es;
    int rc, short_g = 0, short_s = 0;
    char first_bad[HARNESS_PATH_MAX * 2];

    presto_stream_opts_t og = stream_opts("good", 8, 0, 0);
    presto_stream_opts_t os = stream_opts("strict", 8, 0, 0);
    og.prefetch = os.prefetch = 2;
    epoch_init(&eg);
    epoch_init(&es);
    ck_assert_int_eq(harness_connect(&H, &pg), 0);
    ck_assert_int_eq(harness_connect(&H, &ps), 0);
    ck_assert_int_eq(presto_stream_open(pg, &og, &sg), 0);
    ck_assert_int_eq(presto_stream_open(ps, &os, &ss), 0);

    ck_assert_int_eq(presto_next(sg, &b), 1);
    take_batch(&og, &b, &eg, &short_g);
    presto_release(sg, &b);
    while ((rc = presto_next(ss, &b)) > 0) {
        take_batch(&os, &b, &es, &short_s);
        presto_release(ss, &b);
    }
    ck_assert_msg(rc == -PRESTO_E_SAMPLE, "strict stream: %d %s", rc, presto_stream_errmsg(ss));
    /* In order: batches 0 and 1 (ids 0..15) are whole; batch 2 holds id 20. */
    ck_assert_uint_eq(es.samples, 16);
    planted_path(0, first_bad, sizeof(first_bad));
    ck_assert_msg(strstr(presto_stream_errmsg(ss), first_bad) != NULL,
                  "the error '%s' does not name %s", presto_stream_errmsg(ss), first_bad);
    presto_stream_close(ss);

    while ((rc = presto_next(sg, &b)) > 0) {
        take_batch(&og, &b, &eg, &short_g);
        presto_release(sg, &b);
    }
    ck_assert_msg(rc == 0, "good stream: %d %s", rc, presto_stream_errmsg(sg));
    ck_assert_uint_eq(eg.samples, NGOOD);
    ck_assert_uint_eq(presto_stream_skipped(sg), NBAD);
    presto_stream_close(sg);

    /* Shuffled, the error names one of the planted files. */
    os.shuffle = 1;
    ck_assert_int_eq(presto_stream_open(ps, &os, &ss), 0);
    while ((rc = presto_next(ss, &b)) > 0)
        presto_release(ss, &b);
    ck_assert_msg(rc == -PRESTO_E_SAMPLE, "shuffled strict stream: %d %s", rc,
                  presto_stream_errmsg(ss));
    unsigned named = 0;
    for (unsigned i = 0; i < NBAD; i++) {
        char path[HARNESS_PATH_MAX * 2];
        planted_path(i, path, sizeof(path));
        named += strstr(presto_stream_errmsg(ss), path) != NULL;
    }
    ck_assert_msg(named == 1, "the error '%s' names %u planted files", presto_stream_errmsg(ss),
                  named);
    presto_stream_close(ss);
    presto_close(ps);
    presto_close(pg);

    /* The daemon serves on. */
    ck_assert_msg(harness_alive(&H), "prestod died");
    expect_stat(NULL, "streams", 0);
    struct epoch e;
    presto_stream_opts_t o = stream_opts("good", 7, 1, 1);
    pull_epoch(&o, &e);
    ck_assert_uint_eq(e.samples, NGOOD);
}
END_TEST

/* ---- case "workers" ---- */

/* Pulls the same epochs on a daemon with `workers` threads. */
static void pull_with_workers(const char *workers, struct epoch *e, size_t n)
{
    static const uint32_t sizes[] = {7, 8, 8};
    static const uint32_t prefetches[] = {0, 0, 1};
    start_daemon(workers);
    for (size_t i = 0; i < n; i++) {
        presto_stream_opts_t o = stream_opts("good", sizes[i], 4, 1);
        o.seed = 9;
        o.prefetch = prefetches[i];
        pull_epoch(&o, &e[i]);
        ck_assert_uint_eq(e[i].samples, NGOOD);
    }
    ck_assert_int_eq(harness_stop_checked(&H), 0);
}

START_TEST(test_same_bytes_any_workers)
{
    struct epoch one[3], two[3];
    pull_with_workers("1", one, 3);
    pull_with_workers("2", two, 3);
    for (size_t i = 0; i < 3; i++)
        ck_assert_msg(one[i].fnv == two[i].fnv, "epoch %zu: -w 1 gives %016llx, -w 2 %016llx",
                      i, (unsigned long long)one[i].fnv, (unsigned long long)two[i].fnv);
    /* Batch sizes 7 and 8 cut the same samples differently. */
    ck_assert(memcmp(one[0].hashes, one[1].hashes, sizeof(one[0].hashes)) == 0);
    ck_assert_uint_eq(one[1].fnv, one[2].fnv);
}
END_TEST

static TCase *daemon_case(const char *name)
{
    TCase *tc = tcase_create(name);
    tcase_add_unchecked_fixture(tc, daemon_setup, daemon_teardown);
    tcase_set_timeout(tc, CASE_TIMEOUT_S);
    return tc;
}

static Suite *badsamples_suite(void)
{
    Suite *s = suite_create("badsamples");
    TCase *tc = daemon_case("skip");
    tcase_add_loop_test(tc, test_skip_keeps_batches_full, 0, 2);
    tcase_add_loop_test(tc, test_skip_drop_last, 0, 2);
    tcase_add_test(tc, test_skip_stats_and_log);
    suite_add_tcase(s, tc);

    tc = daemon_case("fail");
    tcase_add_test(tc, test_fail_names_file);
    suite_add_tcase(s, tc);

    tc = tcase_create("workers");
    tcase_set_timeout(tc, CASE_TIMEOUT_S);
    tcase_add_test(tc, test_same_bytes_any_workers);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    if (harness_photos_missing())
        return HARNESS_SKIP;
    if (harness_init(&H) < 0)
        return EXIT_FAILURE;
    int rc = make_data();
    if (rc == 0) {
        /* The limits catch what they are meant to catch. */
        char big[HARNESS_PATH_MAX * 2], wide[HARNESS_PATH_MAX * 2];
        snprintf(big, sizeof(big), "%s/%s", data_root, planted[4].rel);
        snprintf(wide, sizeof(wide), "%s/%s", data_root, planted[5].rel);
        if (file_size(big) <= FILE_LIMIT || file_size(wide) >= FILE_LIMIT) {
            fprintf(stderr, "planted files of %lld and %lld bytes miss the %d-byte limit\n",
                    (long long)file_size(big), (long long)file_size(wide), FILE_LIMIT);
            rc = -EINVAL;
        }
    }
    if (rc < 0) {
        harness_cleanup(&H);
        return EXIT_FAILURE;
    }

    return harness_finish(&H, harness_run_suite(badsamples_suite()));
}
