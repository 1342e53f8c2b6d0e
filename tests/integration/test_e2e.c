/*
 * End-to-end tests: a real prestod serving a small JPEG data set, driven
 * through libprestoclient (and a raw socket for malformed input).
 *
 * One data set (60 images, 3 classes) is made once; every test case starts
 * its own daemon (`-d e2e=DIR -w 2`) in an unchecked fixture, so its stats
 * start from zero, and checks in the teardown that SIGTERM makes it exit 0.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "presto.h"
#include "proto.h"

#define DATASET "e2e"
#define NSAMPLES 60
#define NCLASSES 3
#define SIDE 224
#define CHANNELS 3
#define SAMPLE_BYTES ((size_t)SIDE * SIDE * CHANNELS)
#define CASE_TIMEOUT_S 120

static struct harness H;
static char data_root[HARNESS_PATH_MAX];

/* ---- fixture ---- */

static void daemon_setup(void)
{
    char dataset_arg[HARNESS_PATH_MAX + 16];
    snprintf(dataset_arg, sizeof(dataset_arg), "%s=%s", DATASET, data_root);
    const char *args[] = {"-d", dataset_arg, "-w", "2", NULL};
    ck_assert_msg(harness_start(&H, args) == 0, "prestod did not start");
}

static void daemon_teardown(void)
{
    harness_stop_checked(&H);
}

/* ---- pulling epochs ---- */

struct epoch {
    uint64_t samples, batches, skipped;
    uint64_t fnv; /* every batch's labels then data, in order (as prestoctl --checksum) */
    int64_t labels[NSAMPLES];
    uint64_t hashes[NSAMPLES]; /* FNV of each sample's pixels */
};

static presto_stream_opts_t stream_opts(uint32_t batch_size, uint64_t epoch, int shuffle)
{
    presto_stream_opts_t o;
    presto_stream_opts_init(&o);
    o.dataset = DATASET;
    o.batch_size = batch_size;
    o.epoch = epoch;
    o.shuffle = shuffle;
    return o;
}

/* Pulls one epoch on a connection of its own, checking every batch's shape,
 * index and size against the stream's info and the planner's rules. */
static void pull_epoch(const presto_stream_opts_t *o, struct epoch *e)
{
    presto_t *p;
    presto_stream_t *s;
    presto_stream_info_t info;
    presto_batch_t b;
    uint64_t per_rank = (NSAMPLES + o->world - 1) / o->world;

    memset(e, 0, sizeof(*e));
    e->fnv = HARNESS_FNV_INIT;
    ck_assert_int_eq(harness_connect(&H, &p), 0);
    int rc = presto_stream_open(p, o, &s);
    ck_assert_msg(rc == 0, "stream_open: %d %s", rc, presto_errmsg(p));
    ck_assert_int_eq(presto_stream_info(s, &info), 0);
    ck_assert_uint_eq(info.samples, per_rank);
    ck_assert_uint_eq(info.batches, (per_rank + o->batch_size - 1) / o->batch_size);
    ck_assert_uint_eq(info.h, SIDE);
    ck_assert_uint_eq(info.w, SIDE);
    ck_assert_uint_eq(info.c, CHANNELS);
    ck_assert_uint_eq(info.dtype, PRESTO_DTYPE_U8);
    /* Class indices: the label tensor is int64 [n], no lengths. */
    ck_assert_uint_eq(info.label_dtype, PRESTO_DTYPE_I64);
    ck_assert_uint_eq(info.label_classes, 0);
    ck_assert_int_eq(info.has_lengths, 0);

    while ((rc = presto_next(s, &b)) > 0) {
        uint64_t left = per_rank - e->samples;
        ck_assert_uint_eq(b.index, e->batches);
        ck_assert_uint_eq(b.n, left < o->batch_size ? left : o->batch_size);
        ck_assert_uint_eq(b.h, SIDE);
        ck_assert_uint_eq(b.w, SIDE);
        ck_assert_uint_eq(b.c, CHANNELS);
        ck_assert_uint_eq(b.dtype, PRESTO_DTYPE_U8);
        ck_assert_uint_eq(b.size, b.n * SAMPLE_BYTES);
        ck_assert_ptr_nonnull(b.data);
        ck_assert_ptr_nonnull(b.labels);
        uint64_t shape[2];
        ck_assert_uint_eq(presto_batch_label_dtype(&b), PRESTO_DTYPE_I64);
        ck_assert_uint_eq(presto_batch_label_shape(&b, shape), 1);
        ck_assert_uint_eq(shape[0], b.n);
        ck_assert_ptr_eq(presto_batch_label_data(&b), b.labels);
        ck_assert_ptr_null(presto_batch_lengths(&b));
        e->fnv = harness_fnv(e->fnv, b.labels, b.n * sizeof(b.labels[0]));
        e->fnv = harness_fnv(e->fnv, b.data, b.size);
        for (uint32_t i = 0; i < b.n; i++) {
            ck_assert_msg(b.labels[i] >= 0 && b.labels[i] < NCLASSES, "label %lld",
                          (long long)b.labels[i]);
            e->labels[e->samples + i] = b.labels[i];
            e->hashes[e->samples + i] = harness_fnv(
                HARNESS_FNV_INIT, (const uint8_t *)b.data + i * SAMPLE_BYTES, SAMPLE_BYTES);
        }
        e->samples += b.n;
        e->batches++;
        presto_release(s, &b);
    }
    ck_assert_msg(rc == 0, "presto_next: %d %s", rc, presto_stream_errmsg(s));
    ck_assert_uint_eq(e->samples, info.samples);
    ck_assert_uint_eq(e->batches, info.batches);
    e->skipped = presto_stream_skipped(s);
    presto_stream_close(s);
    presto_close(p);
}

/* Waits (up to 3 s) for a stat to reach want, then asserts it did. */
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

/* ---- case "epoch" ---- */

START_TEST(test_epoch_in_order)
{
    presto_stream_opts_t o = stream_opts(16, 0, 0);
    struct epoch e;
    pull_epoch(&o, &e);
    ck_assert_uint_eq(e.samples, NSAMPLES);
    ck_assert_uint_eq(e.batches, 4); /* 16 + 16 + 16 + 12 */
    ck_assert_uint_eq(e.skipped, 0);

    unsigned per_class[NCLASSES] = {0};
    for (unsigned i = 0; i < NSAMPLES; i++) {
        if (i > 0)
            ck_assert_msg(e.labels[i] >= e.labels[i - 1],
                          "unshuffled labels decrease at %u: %lld after %lld", i,
                          (long long)e.labels[i], (long long)e.labels[i - 1]);
        per_class[e.labels[i]]++;
    }
    for (unsigned c = 0; c < NCLASSES; c++)
        ck_assert_msg(per_class[c] == NSAMPLES / NCLASSES, "class %u has %u samples", c,
                      per_class[c]);
}
END_TEST

START_TEST(test_epoch_repeatable)
{
    presto_stream_opts_t o = stream_opts(16, 2, 1);
    o.seed = 7;
    struct epoch a, b, c;
    pull_epoch(&o, &a);
    pull_epoch(&o, &b);
    ck_assert_msg(a.fnv == b.fnv, "same seed and epoch: checksums %016llx and %016llx",
                  (unsigned long long)a.fnv, (unsigned long long)b.fnv);
    ck_assert(memcmp(a.labels, b.labels, sizeof(a.labels)) == 0);
    ck_assert(memcmp(a.hashes, b.hashes, sizeof(a.hashes)) == 0);

    o.epoch = 3;
    pull_epoch(&o, &c);
    ck_assert_msg(a.fnv != c.fnv, "epochs 2 and 3 give the same bytes");
    ck_assert_msg(memcmp(a.labels, c.labels, sizeof(a.labels)) != 0,
                  "epochs 2 and 3 give the same label order");

    /* Shuffled, the labels are not sorted any more. */
    int sorted = 1;
    for (unsigned i = 1; i < NSAMPLES; i++)
        sorted &= a.labels[i] >= a.labels[i - 1];
    ck_assert_msg(!sorted, "a shuffled epoch comes in class order");
}
END_TEST

struct labelled {
    uint64_t hash;
    int64_t label;
};

static int cmp_labelled(const void *x, const void *y)
{
    const struct labelled *a = x, *b = y;
    if (a->hash != b->hash)
        return a->hash < b->hash ? -1 : 1;
    return (a->label > b->label) - (a->label < b->label);
}

static void collect(const struct epoch *e, struct labelled *out, size_t *n)
{
    for (uint64_t i = 0; i < e->samples; i++) {
        out[*n].hash = e->hashes[i];
        out[*n].label = e->labels[i];
        (*n)++;
    }
}

START_TEST(test_ranks_partition_epoch)
{
    struct epoch whole, r0, r1;
    struct labelled all[NSAMPLES], parts[NSAMPLES];
    size_t nall = 0, nparts = 0;

    presto_stream_opts_t o = stream_opts(8, 3, 1);
    o.seed = 11;
    pull_epoch(&o, &whole);
    o.world = 2;
    o.rank = 0;
    pull_epoch(&o, &r0);
    o.rank = 1;
    pull_epoch(&o, &r1);
    ck_assert_uint_eq(r0.samples + r1.samples, NSAMPLES);

    collect(&whole, all, &nall);
    collect(&r0, parts, &nparts);
    collect(&r1, parts, &nparts);
    qsort(all, nall, sizeof(all[0]), cmp_labelled);
    qsort(parts, nparts, sizeof(parts[0]), cmp_labelled);
    for (size_t i = 0; i < NSAMPLES; i++)
        ck_assert_msg(all[i].hash == parts[i].hash && all[i].label == parts[i].label,
                      "ranks 0 and 1 together differ from world 1 at sorted sample %zu", i);

    /* 60 does not divide by 7: every rank gets ceil(60/7) = 9 (checked in
     * pull_epoch), the last rank included. */
    o.world = 7;
    o.rank = 6;
    struct epoch r6;
    pull_epoch(&o, &r6);
    ck_assert_uint_eq(r6.samples, 9);
}
END_TEST

/* ---- case "cache" ---- */

START_TEST(test_second_epoch_from_cache)
{
    presto_stream_opts_t o = stream_opts(16, 0, 1);
    struct epoch e0, e1;

    pull_epoch(&o, &e0);
    expect_stat("cache", "misses", NSAMPLES);
    expect_stat("cache", "entries", NSAMPLES);
    expect_stat(NULL, "samples_served", NSAMPLES);
    expect_stat(NULL, "batches_served", 4);
    expect_stat(NULL, "samples_skipped", 0);
    double hits = stat_now("cache", "hits");
    double bytes = stat_now("cache", "memory_bytes");
    ck_assert_msg(bytes >= (double)NSAMPLES * SAMPLE_BYTES,
                  "cache.memory_bytes %g for %d cached 224x224x3 samples", bytes, NSAMPLES);
    ck_assert_msg(bytes <= stat_now("cache", "memory_budget"), "cache over its budget");

    o.epoch = 1;
    pull_epoch(&o, &e1);
    expect_stat("cache", "hits", hits + NSAMPLES);
    expect_stat("cache", "misses", NSAMPLES);
    expect_stat("cache", "entries", NSAMPLES);
    expect_stat(NULL, "samples_served", 2 * NSAMPLES);
    expect_stat(NULL, "batches_served", 8);
    /* The per-dataset counters agree. */
    expect_stat("datasets", "misses", NSAMPLES);
    expect_stat("datasets", "hits", hits + NSAMPLES);
    expect_stat("datasets", "samples", NSAMPLES);
    expect_stat("datasets", "classes", NCLASSES);
    expect_stat(NULL, "streams", 0);
}
END_TEST

/* ---- case "robust" ---- */

/* In a child: opens a stream, takes one batch, says so on fd, then dies
 * without closing anything. */
static void killed_client(int fd)
{
    presto_t *p;
    presto_stream_t *s;
    presto_batch_t b;
    presto_stream_opts_t o = stream_opts(4, 0, 1);
    o.prefetch = 2;
    if (presto_connect(H.sock, &p) < 0)
        _exit(2);
    if (presto_stream_open(p, &o, &s) < 0)
        _exit(3);
    if (presto_next(s, &b) != 1)
        _exit(4);
    if (write(fd, "x", 1) != 1)
        _exit(5);
    kill(getpid(), SIGKILL);
    _exit(6);
}

START_TEST(test_killed_client)
{
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    fflush(NULL);
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        close(fds[0]);
        killed_client(fds[1]);
    }
    close(fds[1]);

    /* Meanwhile, a whole epoch on another stream. */
    struct epoch e;
    presto_stream_opts_t o = stream_opts(16, 0, 1);
    pull_epoch(&o, &e);
    ck_assert_uint_eq(e.samples, NSAMPLES);

    char c = 0;
    ck_assert_int_eq(read(fds[0], &c, 1), 1);
    close(fds[0]);
    int status;
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
                  "the client child ended with status 0x%x", status);

    expect_stat(NULL, "streams", 0);
    ck_assert_msg(harness_alive(&H), "prestod died");
    o.epoch = 1;
    pull_epoch(&o, &e);
    ck_assert_uint_eq(e.samples, NSAMPLES);
}
END_TEST

START_TEST(test_request_errors)
{
    presto_t *p;
    presto_stream_t *s = NULL;
    ck_assert_int_eq(harness_connect(&H, &p), 0);

    presto_stream_opts_t o = stream_opts(16, 0, 1);
    o.dataset = "no_such_dataset";
    int rc = presto_stream_open(p, &o, &s);
    ck_assert_int_eq(rc, -PRESTO_E_NODATASET);
    ck_assert_msg(strstr(presto_errmsg(p), "no_such_dataset") != NULL,
                  "errmsg '%s' does not name the dataset", presto_errmsg(p));

    o = stream_opts(0, 0, 1);
    rc = presto_stream_open(p, &o, &s);
    ck_assert_msg(rc == -PRESTO_E_INVAL, "batch_size 0: %d %s", rc, presto_errmsg(p));

    o = stream_opts(16, 0, 1);
    o.world = 2;
    o.rank = 2;
    rc = presto_stream_open(p, &o, &s);
    ck_assert_msg(rc == -PRESTO_E_INVAL, "rank 2 of 2: %d %s", rc, presto_errmsg(p));

    /* The connection still works. */
    char *json = NULL;
    ck_assert_int_eq(presto_stats(p, &json), 0);
    ck_assert_ptr_nonnull(strstr(json, "\"samples_served\""));
    free(json);
    presto_close(p);
}
END_TEST

/* A raw connection to the daemon's socket. */
static int raw_connect(void)
{
    int fd = harness_raw_connect(&H);
    ck_assert_msg(fd >= 0, "connect: %s", strerror(-fd));
    return fd;
}

START_TEST(test_garbage_connection)
{
    static const char junk[] = "GET / HTTP/1.1\r\nHost: presto\r\n\r\n";
    int fd = raw_connect();
    ck_assert_int_eq(write(fd, junk, sizeof(junk) - 1), (ssize_t)(sizeof(junk) - 1));
    /* If it says anything first, it is an ERROR frame; then it closes. */
    struct proto_header h;
    uint8_t body[256];
    int rc = harness_read_frame(fd, 5000, &h, body, sizeof(body));
    ck_assert_msg(rc == 0 || rc == -ECONNRESET, "no reply and no close (%d)", rc);
    if (rc == 0)
        ck_assert_uint_eq(h.type, PROTO_ERROR);
    long n = harness_read_until_eof(fd, 5000);
    close(fd);
    ck_assert_msg(n >= 0, "the daemon kept a garbage connection open (%ld)", n);

    ck_assert_msg(harness_alive(&H), "prestod died");
    struct epoch e;
    presto_stream_opts_t o = stream_opts(32, 0, 1);
    pull_epoch(&o, &e);
    ck_assert_uint_eq(e.samples, NSAMPLES);
}
END_TEST

/* A frame of an unknown protocol version gets an ERROR (PROTO_E_VERSION)
 * and the connection stays usable. */
START_TEST(test_unknown_version)
{
    uint8_t body[256];
    struct proto_header h;
    int fd = raw_connect();

    ck_assert_int_eq(harness_send_frame(fd, PROTO_VERSION + 41, PROTO_STATS, 7, NULL, 0), 0);
    ck_assert_int_eq(harness_read_frame(fd, 5000, &h, body, sizeof(body)), 0);
    ck_assert_uint_eq(h.type, PROTO_ERROR);
    ck_assert_uint_eq(h.req_id, 7);
    ck_assert_uint_ge(h.body_len, 4);
    ck_assert_uint_eq(harness_error_code(body), PROTO_E_VERSION);

    ck_assert_int_eq(harness_send_frame(fd, PROTO_VERSION, PROTO_STATS, 8, NULL, 0), 0);
    ck_assert_int_eq(harness_read_frame(fd, 5000, &h, body, sizeof(body)), 0);
    ck_assert_uint_eq(h.type, PROTO_STATS_REPLY);
    ck_assert_uint_eq(h.req_id, 8);
    close(fd);
}
END_TEST

/* ---- case "shutdown" ---- */

/* SIGTERM while a client is in the middle of an epoch: the client's stream
 * ends (completed, or with an error saying the daemon closed the connection,
 * but it does not hang) and the daemon exits 0 (checked by the teardown). */
START_TEST(test_sigterm_mid_stream)
{
    presto_t *p;
    presto_stream_t *s;
    presto_batch_t b;
    presto_stream_opts_t o = stream_opts(4, 0, 1);
    o.prefetch = 2;
    ck_assert_int_eq(harness_connect(&H, &p), 0);
    ck_assert_int_eq(presto_stream_open(p, &o, &s), 0);
    ck_assert_int_eq(presto_next(s, &b), 1);
    presto_release(s, &b);

    ck_assert_int_eq(kill(H.pid, SIGTERM), 0);
    int rc;
    unsigned more = 0;
    while ((rc = presto_next(s, &b)) > 0) {
        more++;
        presto_release(s, &b);
    }
    ck_assert_msg(rc == 0 || rc == -PRESTO_E_SHUTDOWN || rc == -PRESTO_E_IO,
                  "after SIGTERM presto_next gave %d (%s)", rc, presto_stream_errmsg(s));
    /* What the daemon did, on either transport: not what a later call on a
     * dead descriptor says (a failed RELEASE used to close it first). */
    if (rc == -PRESTO_E_IO)
        ck_assert_msg(strstr(presto_stream_errmsg(s), "closed the connection") != NULL,
                      "after SIGTERM: %s", presto_stream_errmsg(s));
    if (rc == 0)
        ck_assert_uint_eq(more, NSAMPLES / 4 - 1);
    presto_stream_close(s);
    presto_close(p);

    for (int i = 0; i < 500 && harness_alive(&H); i++)
        usleep(20000);
    ck_assert_msg(!harness_alive(&H), "prestod still runs 10 s after SIGTERM");
}
END_TEST

/* ---- case "cli" ---- */

START_TEST(test_check_config)
{
    char path[HARNESS_PATH_MAX], out[HARNESS_PATH_MAX], prestod[HARNESS_PATH_MAX * 2];
    char text[HARNESS_PATH_MAX * 2];
    snprintf(prestod, sizeof(prestod), "%s/prestod", harness_env("PRESTO_BUILD", "build"));
    ck_assert_int_eq(harness_path(&H, "check-config.out", out, sizeof(out)), 0);
    const char *argv[] = {prestod, "--check-config", "-c", path, NULL};

    snprintf(text, sizeof(text),
             "workers: 2\n"
             "datasets:\n"
             "  - name: x\n"
             "    root: %s\n"
             "    colour: red\n", data_root);
    ck_assert_int_eq(harness_write_file(&H, "bad.yaml", text, path, sizeof(path)), 0);
    int rc = harness_run(argv, out, 30);
    ck_assert_msg(rc > 0 && rc < 128, "--check-config on a bad key: status %d", rc);

    char want[HARNESS_PATH_MAX + 8], got[4096] = "";
    snprintf(want, sizeof(want), "%s:5:", path);
    FILE *f = fopen(out, "r");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(got, 1, sizeof(got) - 1, f);
    got[n] = '\0';
    fclose(f);
    ck_assert_msg(strstr(got, want) && strstr(got, "colour"),
                  "--check-config printed '%s', want '%s' and the key", got, want);

    /* Without the bad key the same file passes. */
    *strstr(text, "    colour: red\n") = '\0';
    ck_assert_int_eq(harness_write_file(&H, "good.yaml", text, path, sizeof(path)), 0);
    rc = harness_run(argv, out, 30);
    ck_assert_msg(rc == 0, "--check-config on a good file: status %d", rc);
}
END_TEST

static TCase *daemon_case(const char *name)
{
    TCase *tc = tcase_create(name);
    tcase_add_unchecked_fixture(tc, daemon_setup, daemon_teardown);
    tcase_set_timeout(tc, CASE_TIMEOUT_S);
    return tc;
}

static Suite *e2e_suite(void)
{
    Suite *s = suite_create("e2e");
    TCase *tc = daemon_case("epoch");
    tcase_add_test(tc, test_epoch_in_order);
    tcase_add_test(tc, test_epoch_repeatable);
    tcase_add_test(tc, test_ranks_partition_epoch);
    suite_add_tcase(s, tc);

    tc = daemon_case("cache");
    tcase_add_test(tc, test_second_epoch_from_cache);
    suite_add_tcase(s, tc);

    tc = daemon_case("robust");
    tcase_add_test(tc, test_killed_client);
    tcase_add_test(tc, test_request_errors);
    tcase_add_test(tc, test_garbage_connection);
    tcase_add_test(tc, test_unknown_version);
    suite_add_tcase(s, tc);

    tc = daemon_case("shutdown");
    tcase_add_test(tc, test_sigterm_mid_stream);
    suite_add_tcase(s, tc);

    tc = tcase_create("cli");
    tcase_set_timeout(tc, CASE_TIMEOUT_S);
    tcase_add_test(tc, test_check_config);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    if (harness_photos_missing())
        return HARNESS_SKIP;
    if (harness_init(&H) < 0)
        return EXIT_FAILURE;
    if (harness_make_dataset(&H, DATASET, NSAMPLES, NCLASSES, 1, 240, 400, data_root,
                             sizeof(data_root)) < 0) {
        harness_cleanup(&H);
        return EXIT_FAILURE;
    }

    return harness_finish(&H, harness_run_suite(e2e_suite()));
}
