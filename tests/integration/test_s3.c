/*
 * The S3 source end to end (issue 16): a real prestod reading s3://BUCKET/
 * PREFIX from s3rver behind the SigV4-checking, failing proxy
 * (tests/tools/objfixture.py), next to the local ImageFolder of the same
 * JPEGs. Skips (77) where s3rver cannot be had (`make deps` installs it).
 *
 *   - "same": the S3 dataset's epochs equal the folder's, sample for
 *     sample (labels and pixels), cold and from memory, over a listing of
 *     several pages (source.page_keys 7 for 40 keys); its stats section;
 *     with every GET held 200 ms, the batches prepared ahead have theirs
 *     in flight beside the running batches' (more than two batches' at
 *     once);
 *   - "faults": a fifth of the requests fail (503s and resets): the cold
 *     epoch completes after retries, equal to the folder's; with the server
 *     down mid-run every sample fails after its last try (counted, skipped
 *     under on_error: skip, the message names the server), and once it is
 *     back the epoch is whole and equal: nothing was cached from a failure;
 *   - "cancel": a trainer closes its stream while the server holds every
 *     GET: the running batch jobs take their requests back (transfers
 *     dropped) at once, no bad sample is reported, nothing is kept;
 *   - "disk": after a restart the epoch comes from the disk tier (objects
 *     keyed by key, size and ETag) without a single request to S3;
 *   - "tar": WebDataset shards in the bucket (a brace pattern of keys):
 *     indexed with one ranged GET a shard, each sample then its member's
 *     byte range; the epochs equal the folder's; after a restart the
 *     shards' member lists in cache.dir are used (the listing is the only
 *     request) and the epoch is still the folder's;
 *   - "window": 4 KiB indexing windows (source.index_window): a shard's
 *     later windows asked together (more than one at once), the member
 *     lists put together from them give the folder's epoch;
 *   - "changed": a shard replaced in the bucket after indexing: its
 *     members' GETs carry the indexed ETag (If-Match), the proxy answers
 *     412 as S3 does, its samples fail at once with a message saying so
 *     (no other version's bytes at the old offsets); a restart indexes it
 *     again;
 *   - "own": a dataset's own source keys (endpoint, credentials_file)
 *     reach the bucket while the global ones name no server and the
 *     environment a wrong secret;
 *   - "rows": a CSV manifest whose rows are s3:// URLs (the folder's
 *     images in its order): indexed with one listing per directory, its
 *     epochs equal the folder's; rows of two buckets, a URL among local
 *     paths: refused with FILE:LINE;
 *   - "refused": a wrong secret (403 SignatureDoesNotMatch from the proxy),
 *     a missing bucket, a server that is down, no credentials: prestod
 *     refuses to start, naming the URL and the server's message;
 *   - "memo": the bench's fixture (objfixture.py --memo: the proxy answers
 *     whole-object GETs with s3rver's first answer, kept before READY):
 *     the cold epoch equals the folder's with every GET answered from the
 *     memo, a wrong secret is still refused, a replaced object empties it
 *     (the next cold epoch goes to s3rver again).
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../tools/objfixture.h"
#include "harness.h"
#include "presto.h"

#define NSAMPLES 40
#define NCLASSES 3
#define CASE_TIMEOUT_S 240
#define AK "S3RVER"
#define SK "presto-s3-test-secret"

static struct harness H;
static struct objfixture fx;
static char data_dir[HARNESS_PATH_MAX], shard_dir[HARNESS_PATH_MAX], endpoint[64];
#define NSHARDS 4

static void start_cache(const char *cache, const char *source_extra)
{
    char yaml[4096];
    snprintf(yaml, sizeof(yaml),
             "workers: 2\n"
             "cache:\n%s"
             "source:\n  endpoint: %s\n  page_keys: 7\n%s"
             "datasets:\n"
             "  - name: folder\n    root: %s\n    steps: [decode, {resize: 48}, {center_crop: 48}]\n"
             "  - name: s3\n    root: s3://data/train\n"
             "    steps: [decode, {resize: 48}, {center_crop: 48}]\n"
             "  - name: s3b\n    root: s3://data/train/\n"
             "    steps: [decode, {resize: 48}, {center_crop: 48}]\n",
             cache, endpoint, source_extra, data_dir);
    ck_assert_msg(harness_start_config(&H, yaml, NULL) == 0, "prestod did not start");
}

static void start_daemon(const char *source_extra)
{
    start_cache("  memory: 64M\n", source_extra);
}

static void daemon_teardown(void)
{
    harness_stop_checked(&H);
    objfixture_cmd(&fx, "up", NULL, 0);
    objfixture_cmd(&fx, "fail 0 503", NULL, 0);
    objfixture_cmd(&fx, "delay 0", NULL, 0);
}

static void pull(const char *name, uint64_t epoch, int shuffle, struct harness_epoch *e)
{
    presto_stream_opts_t o;
    presto_stream_opts_init(&o);
    o.dataset = name;
    o.batch_size = 7;
    o.epoch = epoch;
    o.seed = 11;
    o.shuffle = shuffle;
    ck_assert_int_eq(harness_pull_epoch(&H, &o, e), 0);
}

static void same_as_folder(const char *name, uint64_t epoch, int shuffle)
{
    struct harness_epoch ref, e;
    pull("folder", epoch, shuffle, &ref);
    ck_assert_uint_eq(ref.samples, NSAMPLES);
    pull(name, epoch, shuffle, &e);
    ck_assert_msg(e.samples == NSAMPLES && e.skipped == 0,
                  "%s: %llu samples (%llu skipped)", name, (unsigned long long)e.samples,
                  (unsigned long long)e.skipped);
    ck_assert_msg(e.fnv == ref.fnv, "%s: epoch %llu (shuffle %d) differs from the folder's",
                  name, (unsigned long long)epoch, shuffle);
}

/* A remote source's stats are a snapshot taken every 250 ms: waits (up to
 * 30 s) until dataset's source.key is at least min, and returns it. */
static double wait_source_stat(const char *dataset, const char *key, double min);

static double stat_of(const char *json, const char *dataset, const char *key)
{
    char parent[128];
    double v = -1;
    snprintf(parent, sizeof(parent), "\"name\":\"%s\"", dataset);
    const char *p = strstr(json, parent);
    ck_assert_msg(p, "no dataset %s in the stats", dataset);
    ck_assert_int_eq(harness_json_number(p, "source", key, &v), 0);
    return v;
}

static double stat_of_now(const char *dataset, const char *key)
{
    char *json;
    ck_assert_int_eq(harness_stats(&H, &json), 0);
    double v = stat_of(json, dataset, key);
    free(json);
    return v;
}

static double wait_source_stat(const char *dataset, const char *key, double min)
{
    double v = -1;
    for (int i = 0; i < 300; i++) {
        char *json;
        ck_assert_int_eq(harness_stats(&H, &json), 0);
        v = stat_of(json, dataset, key);
        free(json);
        if (v >= min)
            break;
        usleep(100 * 1000);
    }
    return v;
}

/* ---- case "same" ---- */

static void same_setup(void)
{
    start_daemon("");
}

START_TEST(test_same_epochs)
{
    same_as_folder("s3", 0, 0); /* cold: every object fetched */
    same_as_folder("s3", 1, 1); /* from memory, shuffled */
    char *json, want[128];
    ck_assert_int_eq(harness_stats(&H, &json), 0);
    snprintf(want, sizeof(want), "{\"name\":\"s3\",\"samples\":%d,\"classes\":%d,", NSAMPLES,
             NCLASSES);
    ck_assert_msg(strstr(json, want), "no %s in the stats", want);
    ck_assert(wait_source_stat("s3", "completed", NSAMPLES) >= NSAMPLES);
    ck_assert(stat_of(json, "s3", "failed") == 0);
    ck_assert(wait_source_stat("s3", "latency_p99_us", 1) > 0);
    ck_assert_msg(!strstr(json, SK) && !strstr(json, AK), "credentials in the stats");
    free(json);
    /* 40 keys and the data set's marker, 7 a page */
    ck_assert(harness_log_contains(&H, "40 samples in 3 classes from s3://data/train (6 listing pages"));
    ck_assert_msg(!harness_log_contains(&H, SK), "the secret is in the log");
    /* read ahead: with every request held 200 ms, the GETs of the batches
     * prepared ahead are in flight beside those of the batches the two
     * workers run: more at once than two batches of 7 (the most without
     * it: a batch's reads went out only when a worker took it) */
    ck_assert_int_eq(objfixture_cmd(&fx, "delay 200", NULL, 0), 0);
    ck_assert_int_eq(objfixture_cmd(&fx, "peak", NULL, 0), 0);
    same_as_folder("s3b", 0, 0);
    ck_assert_int_eq(objfixture_cmd(&fx, "delay 0", NULL, 0), 0);
    ck_assert_msg(objfixture_stat(&fx, "max_in_flight") > 2 * 7,
                  "%ld GETs at once: no batch's reads went out ahead",
                  objfixture_stat(&fx, "max_in_flight"));
}
END_TEST

/* ---- case "faults" ---- */

static void faults_setup(void)
{
    start_daemon("  retries: 8\n  timeout_ms: 20000\n");
}

START_TEST(test_faults)
{
    /* a fifth of the requests fail: retried, the epoch is whole */
    ck_assert_int_eq(objfixture_cmd(&fx, "fail 0.2 mix", NULL, 0), 0);
    same_as_folder("s3", 0, 1);
    ck_assert_int_eq(objfixture_cmd(&fx, "fail 0 503", NULL, 0), 0);
    ck_assert_msg(wait_source_stat("s3", "retries", 1) > 0, "no retries counted");
    ck_assert(wait_source_stat("s3", "completed", NSAMPLES) >= NSAMPLES);
    char *json;
    ck_assert_int_eq(harness_stats(&H, &json), 0);
    ck_assert(stat_of(json, "s3", "failed") == 0);
    free(json);

    /* the server down: every sample fails after its last try */
    ck_assert_int_eq(objfixture_cmd(&fx, "down", NULL, 0), 0);
    struct harness_epoch e;
    pull("s3b", 0, 0, &e);
    ck_assert_uint_eq(e.samples, 0);
    ck_assert_uint_eq(e.skipped, NSAMPLES);
    ck_assert_msg(wait_source_stat("s3b", "failed", NSAMPLES) >= NSAMPLES,
                  "failures not counted");
    ck_assert_msg(wait_source_stat("s3b", "failed_connect", 1) >= 1,
                  "no connection failure counted");
    ck_assert(harness_log_contains(&H, "bad sample train/"));
    ck_assert(harness_log_contains(&H, "after the last retry"));
    /* back up: whole and equal, nothing kept from the failed reads */
    ck_assert_int_eq(objfixture_cmd(&fx, "up", NULL, 0), 0);
    same_as_folder("s3b", 1, 1);
}
END_TEST

/* ---- case "cancel": a stream closed while its GETs hang ---- */

static long start_tar_in(const char *cache_name);

/* Opens a stream of name while every GET hangs, waits for in_flight of
 * its GETs, closes it: nothing may stay out, the GETs taken back. */
static void abandon_stream(const char *name, double in_flight)
{
    ck_assert_int_eq(objfixture_cmd(&fx, "delay 300000", NULL, 0), 0);
    presto_t *p;
    presto_stream_t *st;
    presto_stream_opts_t o;
    presto_stream_opts_init(&o);
    o.dataset = name;
    o.batch_size = 7;
    ck_assert_int_eq(harness_connect(&H, &p), 0);
    ck_assert_int_eq(presto_stream_open(p, &o, &st), 0);
    ck_assert_msg(wait_source_stat(name, "in_flight", in_flight) >= in_flight,
                  "the batch's GETs never went out");
    /* the trainer goes away: its running batch jobs take their GETs back
     * (the transfers dropped) instead of waiting for the server */
    presto_stream_close(st);
    presto_close(p);
    double left = -1;
    for (int i = 0; i < 600; i++) {
        left = stat_of_now(name, "in_flight") + stat_of_now(name, "queued") +
               stat_of_now(name, "waiting");
        if (left == 0)
            break;
        usleep(100 * 1000);
    }
    ck_assert_msg(left == 0, "%g requests still out 60 s after the stream closed", left);
    ck_assert(stat_of_now(name, "cancelled") >= in_flight);
    ck_assert(stat_of_now(name, "failed") == 0);
    ck_assert_msg(!harness_log_contains(&H, "bad sample"), "a taken-back read was a bad sample");
    ck_assert_int_eq(objfixture_cmd(&fx, "delay 0", NULL, 0), 0);
}

START_TEST(test_cancel)
{
    /* started here (the case stops it): a GET would wait out the proxy's
     * delay (300 s) within its timeout */
    start_daemon("  retries: 2\n  timeout_ms: 240000\n");
    abandon_stream("s3", 7);
    /* the server answers again: the dataset is whole, nothing was kept
     * from the reads taken back */
    same_as_folder("s3", 1, 1);
    harness_stop_checked(&H);
    /* shard members, their neighbours sharing a GET: the same */
    start_tar_in("cache-cancel");
    abandon_stream("s3tar", 1);
    same_as_folder("s3tar", 0, 0);
    harness_stop_checked(&H);
}
END_TEST

/* ---- case "disk": objects keyed by their ETag in the disk tier ---- */

START_TEST(test_disk_tier)
{
    char dir[HARNESS_PATH_MAX], cache[HARNESS_PATH_MAX + 64];
    harness_path(&H, "cache", dir, sizeof(dir));
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    snprintf(cache, sizeof(cache), "  memory: 64M\n  dir: %s\n  disk: 256M\n", dir);
    start_cache(cache, "");
    same_as_folder("s3", 0, 0); /* cold: fetched, stored on disk */
    harness_stop_checked(&H);
    /* restarted: listed again, then every sample from the disk tier, no GET */
    start_cache(cache, "");
    long before = objfixture_stat(&fx, "requests");
    same_as_folder("s3", 1, 1);
    ck_assert_msg(objfixture_stat(&fx, "requests") == before,
                  "%ld requests to S3 for an epoch on disk", objfixture_stat(&fx, "requests") - before);
    char *json;
    double hits = -1;
    ck_assert_int_eq(harness_stats(&H, &json), 0);
    const char *p = strstr(json, "\"name\":\"s3\"");
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(harness_json_number(p, "disk", "hits", &hits), 0);
    free(json);
    ck_assert_msg(hits == NSAMPLES, "%g disk hits", hits);
    harness_stop_checked(&H); /* started here, in the test's process */
}
END_TEST

/* ---- case "tar": WebDataset shards in the bucket ---- */

/* prestod with the folder and the shards in the bucket (cache.dir in the
 * test's directory): the requests the start-up made to S3. */
/* Starts prestod with the folder and s3tar (shards first to last), cache.dir
 * cache_name, source_extra under source:; the requests that took. */
static long start_shards(const char *cache_name, const char *source_extra, unsigned last)
{
    char yaml[4096], cache[HARNESS_PATH_MAX];
    harness_path(&H, cache_name, cache, sizeof(cache));
    snprintf(yaml, sizeof(yaml),
             "workers: 2\ncache:\n  memory: 64M\n  dir: %s\n"
             "source:\n  endpoint: %s\n%s"
             "datasets:\n"
             "  - name: folder\n    root: %s\n    steps: [decode, {resize: 48}, {center_crop: 48}]\n"
             "  - name: s3tar\n    root: s3://data/shards/train-{000000..%06u}.tar\n"
             "    steps: [decode, {resize: 48}, {center_crop: 48}]\n",
             cache, endpoint, source_extra, data_dir, last);
    long before = objfixture_stat(&fx, "requests");
    ck_assert_msg(harness_start_config(&H, yaml, NULL) == 0, "prestod did not start");
    return objfixture_stat(&fx, "requests") - before;
}

static long start_tar_in(const char *cache_name)
{
    return start_shards(cache_name, "", NSHARDS - 1);
}

static long start_tar(void)
{
    return start_tar_in("cache-tar");
}

START_TEST(test_tar_shards)
{
    /* first start: the listing, then one ranged GET per shard (its headers
     * and labels come in one window), the shards' all in flight at once
     * (each held 300 ms by the proxy: they overlap); each member then by
     * its own range */
    ck_assert_int_eq(objfixture_cmd(&fx, "delay 300", NULL, 0), 0);
    ck_assert_int_eq(objfixture_cmd(&fx, "peak", NULL, 0), 0);
    long n = start_tar();
    ck_assert_int_eq(objfixture_cmd(&fx, "delay 0", NULL, 0), 0);
    ck_assert_msg(objfixture_stat(&fx, "max_in_flight") >= NSHARDS,
                  "the shards were indexed one after another (%ld at once)",
                  objfixture_stat(&fx, "max_in_flight"));
    ck_assert(harness_log_contains(&H, "40 samples in 3 classes from 4 tar shards"));
    ck_assert(harness_log_contains(&H, "member lists: 0 from cache.dir, 4 shards read"));
    ck_assert_msg(n == 1 + NSHARDS, "%ld requests to index 4 shards", n);
    /* cold, in order: a chunk's members next to each other in a shard
     * share one GET; batches of 7 over shards of 10 make 9 runs at most
     * (a batch is a chunk; two workers' chunks may even join) */
    long before = objfixture_stat(&fx, "requests");
    same_as_folder("s3tar", 0, 0);
    n = objfixture_stat(&fx, "requests") - before;
    ck_assert_msg(n >= 1 && n <= 9, "%ld GETs for 40 members read in order", n);
    same_as_folder("s3tar", 1, 1); /* from memory, shuffled */
    ck_assert_msg(wait_source_stat("s3tar", "completed", 1 + NSHARDS + n) >= 1 + NSHARDS + n,
                  "fewer requests completed than made");
    ck_assert_msg(stat_of_now("s3tar", "failed") == 0, "failed requests");
    harness_stop_checked(&H);
    /* restarted: the listing only (the ETags and sizes match the lists
     * kept), no shard read; the cold epoch is the folder's */
    n = start_tar();
    ck_assert(harness_log_contains(&H, "member lists: 4 from cache.dir, 0 shards read"));
    ck_assert_msg(n == 1, "%ld requests to index 4 shards with their lists kept", n);
    same_as_folder("s3tar", 2, 1);
    harness_stop_checked(&H);
}
END_TEST

/* ---- case "window": a shard's headers over several windows ---- */

START_TEST(test_index_window)
{
    /* 4 KiB windows (source.index_window): one shard's headers span
     * several; after the first window the walk asks the next ones
     * together (each held 200 ms: they overlap), where one at a time
     * made it one round trip a window */
    ck_assert_int_eq(objfixture_cmd(&fx, "delay 200", NULL, 0), 0);
    ck_assert_int_eq(objfixture_cmd(&fx, "peak", NULL, 0), 0);
    long n = start_shards("cache-window1", "  index_window: 4096\n", 0);
    ck_assert_int_eq(objfixture_cmd(&fx, "delay 0", NULL, 0), 0);
    ck_assert(harness_log_contains(&H, "member lists: 0 from cache.dir, 1 shards read"));
    ck_assert_msg(n >= 3, "%ld requests: the shard fit one 4 KiB window", n);
    ck_assert_msg(objfixture_stat(&fx, "max_in_flight") >= 2,
                  "the shard's windows were read one after another (%ld at once, %ld GETs)",
                  objfixture_stat(&fx, "max_in_flight"), n);
    harness_stop_checked(&H);
    /* all four shards walked through 4 KiB windows: the member lists (the
     * windows' bytes put together in order) give the folder's epoch */
    start_shards("cache-window4", "  index_window: 4096\n", NSHARDS - 1);
    ck_assert(harness_log_contains(&H, "member lists: 0 from cache.dir, 4 shards read"));
    same_as_folder("s3tar", 0, 1);
    harness_stop_checked(&H);
}
END_TEST

/* ---- case "changed": a shard replaced between indexing and reading ---- */

static void put_shard(unsigned into, unsigned from)
{
    char cmd[HARNESS_PATH_MAX + 128];
    snprintf(cmd, sizeof(cmd), "put data/shards/train-%06u.tar %s/train-%06u.tar", into,
             shard_dir, from);
    ck_assert_int_eq(objfixture_cmd(&fx, cmd, NULL, 0), 0);
}

START_TEST(test_shard_changed)
{
    /* indexed at one version (ETag) of shard 1 ... */
    start_tar_in("cache-changed");
    long pre = objfixture_stat(&fx, "precondition_failed");
    /* ... which is then replaced (shard 2's bytes: other members at other
     * offsets) before any sample is read */
    put_shard(1, 2);
    struct harness_epoch e;
    pull("s3tar", 0, 0, &e);
    /* every member GET carried the indexed ETag (If-Match): shard 1's 10
     * samples fail at once (412, not retried), the others are the folder's
     * (its members read in order share GETs: 2 with batches of 7) */
    ck_assert_msg(e.samples == NSAMPLES - 10 && e.skipped == 10,
                  "%llu samples, %llu skipped", (unsigned long long)e.samples,
                  (unsigned long long)e.skipped);
    long refused = objfixture_stat(&fx, "precondition_failed") - pre;
    ck_assert_msg(refused >= 1 && refused <= 10, "%ld GETs refused by If-Match", refused);
    ck_assert(wait_source_stat("s3tar", "failed_changed", (double)refused) == refused);
    ck_assert(stat_of_now("s3tar", "retries") == 0);
    ck_assert(harness_log_contains(&H, "shard shards/train-000001.tar was replaced since it "
                                       "was indexed"));
    ck_assert(harness_log_contains(&H, "the shard was replaced since it was indexed"));
    harness_stop_checked(&H);
    /* a restart indexes the replaced shard again (its list's ETag differs)
     * and serves all of it */
    start_tar_in("cache-changed");
    ck_assert(harness_log_contains(&H, "member lists: 3 from cache.dir, 1 shards read"));
    pull("s3tar", 0, 0, &e);
    ck_assert_msg(e.samples == NSAMPLES && e.skipped == 0, "%llu samples after the re-index",
                  (unsigned long long)e.samples);
    harness_stop_checked(&H);
    put_shard(1, 1); /* as it was (the same bytes: the same ETag) */
    start_tar_in("cache-changed");
    same_as_folder("s3tar", 0, 0);
    harness_stop_checked(&H);
}
END_TEST

/* ---- case "own": a dataset's own endpoint and credentials ---- */

START_TEST(test_own_source)
{
    char creds[HARNESS_PATH_MAX], yaml[4096];
    ck_assert_int_eq(harness_write_file(&H, "own-creds",
                                        "[default]\naws_access_key_id = " AK "\n"
                                        "aws_secret_access_key = " SK "\n",
                                        creds, sizeof(creds)), 0);
    ck_assert_int_eq(chmod(creds, 0600), 0);
    /* the global keys name a server that is not there and the environment
     * a wrong secret: only the dataset's own keys can reach the bucket */
    setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret", 1);
    snprintf(yaml, sizeof(yaml),
             "workers: 2\ncache:\n  memory: 64M\n"
             "source:\n  endpoint: http://127.0.0.1:1\n  retries: 0\n"
             "datasets:\n"
             "  - name: folder\n    root: %s\n    steps: [decode, {resize: 48}, {center_crop: 48}]\n"
             "  - name: s3own\n    root: s3://data/train\n"
             "    source:\n      endpoint: %s\n      credentials_file: %s\n"
             "    steps: [decode, {resize: 48}, {center_crop: 48}]\n",
             data_dir, endpoint, creds);
    long denied = objfixture_stat(&fx, "denied");
    int rc = harness_start_config(&H, yaml, NULL);
    setenv("AWS_SECRET_ACCESS_KEY", SK, 1);
    ck_assert_msg(rc == 0, "prestod did not start");
    same_as_folder("s3own", 0, 0);
    ck_assert_msg(objfixture_stat(&fx, "denied") == denied, "requests signed with another secret");
    ck_assert_msg(!harness_log_contains(&H, SK), "the secret is in the log");
    harness_stop_checked(&H);
}
END_TEST

/* ---- case "rows": a manifest whose rows name objects ---- */

static int cmp_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

/* A CSV manifest (name, in the test's directory) of the folder's images in
 * its order, each row base + CLASS/NAME and the class name. */
static void write_url_manifest(const char *name, const char *base, char *path, size_t len)
{
    struct dirent **cls;
    char text[16384];
    size_t at = (size_t)snprintf(text, sizeof(text), "path,label\n");
    int nc = scandir(data_dir, &cls, NULL, cmp_name);
    ck_assert_int_gt(nc, 0);
    for (int c = 0; c < nc; c++) {
        char dir[HARNESS_PATH_MAX + 256];
        struct dirent **f;
        snprintf(dir, sizeof(dir), "%s/%s", data_dir, cls[c]->d_name);
        int nf = cls[c]->d_name[0] == '.' ? -1 : scandir(dir, &f, NULL, cmp_name);
        for (int i = 0; i < nf; i++) {
            if (f[i]->d_name[0] != '.')
                at += (size_t)snprintf(text + at, sizeof(text) - at, "%s%s/%s,%s\n", base,
                                       cls[c]->d_name, f[i]->d_name, cls[c]->d_name);
            free(f[i]);
        }
        if (nf >= 0)
            free(f);
        free(cls[c]);
    }
    free(cls);
    ck_assert(at < sizeof(text));
    ck_assert_int_eq(harness_write_file(&H, name, text, path, len), 0);
}

START_TEST(test_url_rows)
{
    char csv[HARNESS_PATH_MAX], yaml[4096];
    write_url_manifest("rows.csv", "s3://data/train/", csv, sizeof(csv));
    snprintf(yaml, sizeof(yaml),
             "workers: 2\ncache:\n  memory: 64M\nsource:\n  endpoint: %s\n"
             "datasets:\n"
             "  - name: folder\n    root: %s\n    steps: [decode, {resize: 48}, {center_crop: 48}]\n"
             "  - name: rows\n    root: %s\n    steps: [decode, {resize: 48}, {center_crop: 48}]\n",
             endpoint, data_dir, csv);
    long before = objfixture_stat(&fx, "requests");
    ck_assert_msg(harness_start_config(&H, yaml, NULL) == 0, "prestod did not start");
    /* indexing: one listing a class directory, no request per row */
    long n = objfixture_stat(&fx, "requests") - before;
    ck_assert_msg(n == NCLASSES, "%ld requests to index the rows", n);
    ck_assert(harness_log_contains(&H, "40 samples in 3 classes from the manifest"));
    ck_assert(harness_log_contains(&H, "(URLs of s3://data; 3 listings)"));
    same_as_folder("rows", 0, 0); /* cold: one GET a row */
    same_as_folder("rows", 1, 1); /* from memory */
    ck_assert(wait_source_stat("rows", "completed", NCLASSES + NSAMPLES) >= NCLASSES + NSAMPLES);
    ck_assert(stat_of_now("rows", "failed") == 0);
    harness_stop_checked(&H);
    /* rows of two buckets, and a URL among local paths: FILE:LINE */
    char bad[HARNESS_PATH_MAX], sock[HARNESS_PATH_MAX], got[8192];
    harness_path(&H, "refused.sock", sock, sizeof(sock));
    ck_assert_int_eq(harness_write_file(&H, "two.csv",
                                        "path,label\ns3://data/train/a.jpg,0\n"
                                        "s3://other/train/b.jpg,1\n", bad, sizeof(bad)), 0);
    snprintf(yaml, sizeof(yaml), "socket: %s\nsource:\n  endpoint: %s\n"
             "datasets:\n  - name: r\n    root: %s\n", sock, endpoint, bad);
    int rc = harness_run_config(&H, yaml, 60, got, sizeof(got));
    ck_assert_msg(rc > 0 && rc < 128 && strstr(got, "two.csv:3: s3://other/train/b.jpg: another "
                                                   "bucket"), "exit %d:\n%s", rc, got);
    ck_assert_int_eq(harness_write_file(&H, "mixed.csv",
                                        "path,label\n/x/a.jpg,0\nhttp://h/b.jpg,1\n", bad,
                                        sizeof(bad)), 0);
    snprintf(yaml, sizeof(yaml), "socket: %s\ndatasets:\n  - name: r\n    root: %s\n", sock,
             bad);
    rc = harness_run_config(&H, yaml, 60, got, sizeof(got));
    ck_assert_msg(rc > 0 && rc < 128 && strstr(got, "mixed.csv:3: http://h/b.jpg: a URL among "
                                                   "local paths"), "exit %d:\n%s", rc, got);
}
END_TEST

/* ---- case "refused" ---- */

/* prestod on a one-dataset config must exit non-zero with want in its output. */
static void refused(const char *source, const char *root, const char *want)
{
    char sock[HARNESS_PATH_MAX], yaml[2048], got[8192];
    harness_path(&H, "refused.sock", sock, sizeof(sock));
    snprintf(yaml, sizeof(yaml),
             "socket: %s\nworkers: 1\nsource:\n%s\ndatasets:\n  - name: r\n    root: %s\n",
             sock, source, root);
    int rc = harness_run_config(&H, yaml, 120, got, sizeof(got));
    ck_assert_msg(rc > 0 && rc < 128, "%s: prestod exited %d", root, rc);
    ck_assert_msg(strstr(got, want), "%s: the output lacks '%s':\n%s", root, want, got);
    ck_assert_msg(!strstr(got, SK) && !strstr(got, "wrong-secret"), "a secret in the output");
}

/* A credentials file with secret in it; src: the source keys naming it and endpoint. */
static void creds_source(const char *secret, char *src, size_t len)
{
    char text[256], creds[HARNESS_PATH_MAX];
    snprintf(text, sizeof(text), "[default]\naws_access_key_id = " AK "\n"
             "aws_secret_access_key = %s\n", secret);
    ck_assert_int_eq(harness_write_file(&H, "creds", text, creds, sizeof(creds)), 0);
    snprintf(src, len, "  endpoint: %s\n  retries: 1\n  credentials_file: %s", endpoint, creds);
}

/* A wrong secret: the 403 of f's proxy. */
static void wrong_secret_refused(struct objfixture *f)
{
    char src[512];
    creds_source("wrong-secret", src, sizeof(src));
    long denied = objfixture_stat(f, "denied");
    refused(src, "s3://data/train", "SignatureDoesNotMatch");
    ck_assert_msg(objfixture_stat(f, "denied") > denied, "the proxy denied nothing");
}

START_TEST(test_refused)
{
    char src[512], creds[HARNESS_PATH_MAX];
    wrong_secret_refused(&fx);
    /* the right one from the file: a missing bucket */
    creds_source(SK, src, sizeof(src));
    harness_path(&H, "creds", creds, sizeof(creds));
    refused(src, "s3://nosuchbucket/x", "NoSuchBucket");
    /* a credentials file others may write is not read */
    ck_assert_int_eq(chmod(creds, 0662), 0);
    refused(src, "s3://data/train", "not trusted: writable by its group or others");
    ck_assert_int_eq(chmod(creds, 0600), 0);
    /* an empty prefix */
    refused(src, "s3://data/nothing-here", "no PREFIX/CLASS/IMAGE objects");
    /* the server down at start: the URL named */
    ck_assert_int_eq(objfixture_cmd(&fx, "down", NULL, 0), 0);
    snprintf(src, sizeof(src), "  endpoint: %s\n  retries: 1", endpoint);
    refused(src, "s3://data/train", "cannot list the bucket");
    refused(src, "s3://data/train", endpoint);
    ck_assert_int_eq(objfixture_cmd(&fx, "up", NULL, 0), 0);
    /* no credentials at all */
    unsetenv("AWS_ACCESS_KEY_ID");
    refused(src, "s3://data/train", "no credentials");
    setenv("AWS_ACCESS_KEY_ID", AK, 1);
}
END_TEST

/* ---- case "memo" ---- */

START_TEST(test_memo)
{
    struct objfixture mfx;
    char args[HARNESS_PATH_MAX + 256], keep[sizeof(endpoint)];
    snprintf(args, sizeof(args), "s3 --memo --bucket 'data/train=%s' --access-key %s --secret %s",
             data_dir, AK, SK);
    ck_assert_msg(objfixture_start(&mfx, args) == 0, "objfixture --memo: %s", mfx.why);
    ck_assert_int_eq(objfixture_stat(&mfx, "memo"), NSAMPLES + 1); /* and the marker */
    memcpy(keep, endpoint, sizeof(keep));
    snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%d", mfx.port);
    start_daemon("");
    same_as_folder("s3", 0, 0);
    ck_assert_msg(objfixture_stat(&mfx, "memo_hits") >= NSAMPLES, "%ld GETs from the memo",
                  objfixture_stat(&mfx, "memo_hits"));
    harness_stop_checked(&H);
    wrong_secret_refused(&mfx); /* every request still checked */
    /* an object replaced (by itself: the epoch stays the folder's): the
     * memo emptied, the next cold epoch's GETs answered by s3rver */
    struct dirent **cls;
    int n = scandir(data_dir, &cls, NULL, alphasort);
    ck_assert_int_gt(n, 2);
    char cmd[2 * HARNESS_PATH_MAX + 1280], dir[HARNESS_PATH_MAX + 256];
    snprintf(dir, sizeof(dir), "%s/%s", data_dir, cls[n - 1]->d_name);
    struct dirent **files;
    int m = scandir(dir, &files, NULL, alphasort);
    ck_assert_int_gt(m, 2);
    snprintf(cmd, sizeof(cmd), "put data/train/%s/%s %s/%s", cls[n - 1]->d_name,
             files[m - 1]->d_name, dir, files[m - 1]->d_name);
    for (int i = 0; i < m; i++)
        free(files[i]);
    free(files);
    for (int i = 0; i < n; i++)
        free(cls[i]);
    free(cls);
    ck_assert_int_eq(objfixture_cmd(&mfx, cmd, NULL, 0), 0);
    ck_assert_int_eq(objfixture_stat(&mfx, "memo"), 0);
    long hits = objfixture_stat(&mfx, "memo_hits");
    start_daemon("");
    same_as_folder("s3", 0, 0);
    ck_assert_int_eq(objfixture_stat(&mfx, "memo_hits"), hits);
    ck_assert_int_eq(objfixture_stat(&mfx, "memo"), NSAMPLES);
    harness_stop_checked(&H);
    memcpy(endpoint, keep, sizeof(keep));
    objfixture_stop(&mfx);
}
END_TEST

int main(void)
{
    if (harness_photos_missing())
        return HARNESS_SKIP;
    if (harness_init(&H) < 0 ||
        harness_make_dataset(&H, "jpg", NSAMPLES, NCLASSES, 16, 64, 160, data_dir,
                             sizeof(data_dir)) < 0) {
        harness_cleanup(&H);
        return 1;
    }
    /* the same images as WebDataset shards, 10 a shard */
    char script[HARNESS_PATH_MAX], pattern[HARNESS_PATH_MAX + 32], log[HARNESS_PATH_MAX];
    harness_path(&H, "shards", shard_dir, sizeof(shard_dir));
    harness_path(&H, "mkshards.log", log, sizeof(log));
    snprintf(script, sizeof(script), "%s/tests/tools/mkshards.py", harness_env("PRESTO_SRC", "."));
    snprintf(pattern, sizeof(pattern), "%s/train-%%06d.tar", shard_dir);
    const char *mk[] = {harness_env("PYTHON", "/usr/bin/python3"), script, data_dir, pattern,
                        "--per-shard", "10", NULL};
    if (harness_run(mk, log, 120) != 0) {
        fprintf(stderr, "test_s3: mkshards.py failed\n");
        harness_cleanup(&H);
        return 1;
    }
    char args[3 * HARNESS_PATH_MAX + 256];
    snprintf(args, sizeof(args),
             "s3 --bucket 'data/train=%s' --bucket 'data/shards=%s' --access-key %s --secret %s",
             data_dir, shard_dir, AK, SK);
    int rc = objfixture_start(&fx, args);
    if (rc != 0) {
        fprintf(stderr, "test_s3: %s: skipped\n", fx.why);
        harness_cleanup(&H);
        return rc == 77 ? HARNESS_SKIP : 1;
    }
    snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%d", fx.port);
    setenv("AWS_ACCESS_KEY_ID", AK, 1);
    setenv("AWS_SECRET_ACCESS_KEY", SK, 1);
    unsetenv("AWS_SESSION_TOKEN");
    unsetenv("AWS_PROFILE");
    Suite *s = suite_create("s3");
    TCase *tc = harness_tcase("same", same_setup, daemon_teardown, CASE_TIMEOUT_S);
    tcase_add_test(tc, test_same_epochs);
    suite_add_tcase(s, tc);
    tc = harness_tcase("faults", faults_setup, daemon_teardown, CASE_TIMEOUT_S);
    tcase_add_test(tc, test_faults);
    suite_add_tcase(s, tc);
    tc = harness_tcase("cancel", NULL, daemon_teardown, CASE_TIMEOUT_S);
    tcase_add_test(tc, test_cancel);
    suite_add_tcase(s, tc);
    tc = harness_tcase("disk", NULL, NULL, CASE_TIMEOUT_S);
    tcase_add_test(tc, test_disk_tier);
    suite_add_tcase(s, tc);
    tc = harness_tcase("tar", NULL, daemon_teardown, CASE_TIMEOUT_S);
    tcase_add_test(tc, test_tar_shards);
    suite_add_tcase(s, tc);
    tc = harness_tcase("window", NULL, daemon_teardown, CASE_TIMEOUT_S);
    tcase_add_test(tc, test_index_window);
    suite_add_tcase(s, tc);
    tc = harness_tcase("changed", NULL, daemon_teardown, CASE_TIMEOUT_S);
    tcase_add_test(tc, test_shard_changed);
    suite_add_tcase(s, tc);
    tc = harness_tcase("own", NULL, daemon_teardown, CASE_TIMEOUT_S);
    tcase_add_test(tc, test_own_source);
    suite_add_tcase(s, tc);
    tc = harness_tcase("rows", NULL, daemon_teardown, CASE_TIMEOUT_S);
    tcase_add_test(tc, test_url_rows);
    suite_add_tcase(s, tc);
    tc = harness_tcase("refused", NULL, NULL, CASE_TIMEOUT_S);
    tcase_add_test(tc, test_refused);
    suite_add_tcase(s, tc);
    tc = harness_tcase("memo", NULL, NULL, CASE_TIMEOUT_S);
    tcase_add_test(tc, test_memo);
    suite_add_tcase(s, tc);
    rc = harness_run_suite(s);
    objfixture_stop(&fx);
    return harness_finish(&H, rc);
}
