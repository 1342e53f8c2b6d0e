/*
 * The strategy profiler and split: auto against a real prestod:
 *
 *   - slow online step: the pipeline decode, resize 512 (an upscale of
 *     these small images, deliberately expensive), resize 48, center_crop
 *     48, random_flip. Strategies that leave the big resize online (split
 *     0 and 1) must lose by far to the winner, which caches past it; the
 *     measurements are real, so this only holds if they are. prestoctl
 *     profile's CSV, JSON and SVG are parsed back (python3: csv, json,
 *     xml.etree) and agree; random steps are never offline; the profile ran
 *     on its share of the workers; and nothing of the trials stays: the
 *     memory and disk tiers hold what they held before and cache.dir has
 *     no trial directory.
 *   - disk budget: with a disk budget no cached strategy fits, the winner
 *     is everything online, however slow, and every strategy over the
 *     budget is marked infeasible.
 *   - split: auto: pending at start (a WARM is refused and starts the
 *     profile), chosen in the background, applied (streams give the same
 *     bytes before, during and after), recorded in cache.dir; a restart
 *     takes the record without profiling again; a new profile on the same
 *     data picks the same strategy; --apply on a fixed split is refused.
 *   - a profile whose client goes away stops and removes its trial tier;
 *   - tests/bench/profile_accuracy.py (the profile against real epochs of
 *     each strategy) prints predicted and measured side by side, all real;
 *   - prestoctl profile --verify-top 2 --apply on a split: auto dataset of a
 *     short pipeline: the two best strategies' real epochs (cold, memory, disk) on the whole
 *     dataset in the daemon's trial tiers, printed against the predictions
 *     and carried by the JSON and CSV; the figures are real (non-zero, every
 *     sample delivered) and the winner's agree with the daemon's own epochs
 *     of it (applied) within a loose bound; nothing of the trials stays;
 *   - mixup and cutmix (batch-level steps) are in the online rates: the same
 *     steps with them profile slower, strategy by strategy, than without.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "presto.h"

#define CASE_TIMEOUT_S 280
#define SLOW_STEPS "[decode, {resize: 512}, {resize: 48}, {center_crop: 48}, {random_flip: 0.5}]"
#define RANDOM_STEP 4 /* random_flip's index in SLOW_STEPS */

static struct harness H;
static char root[HARNESS_PATH_MAX];
/* Under valgrind or ThreadSanitizer the daemon is 10-50 times slower: fewer
 * images, smaller samples, and the second profile of test_split_auto left out. */
static int slow;
static unsigned nimages = 120;
static unsigned samples = 24; /* per profile: small, for the tests' time */

/* ---- daemons ---- */

/* A daemon with 2 workers, a disk tier of disk_budget in dir, a 16 MiB
 * memory tier, and the datasets in yaml ("  - name: ..." items). */
static void start(const char *dir, const char *disk_budget, const char *datasets)
{
    char yaml[4096];
    snprintf(yaml, sizeof(yaml),
             "workers: 2\n"
             "cache:\n"
             "  memory: 16MiB\n"
             "  dir: %s\n"
             "  disk: %s\n"
             "profile:\n"
             "  samples: %u\n"
             "  worker_share: 50\n"
             "datasets:\n%s",
             dir, disk_budget, samples, datasets);
    ck_assert_msg(harness_start_config(&H, yaml, NULL) == 0, "prestod did not start");
}

static void stop(void)
{
    ck_assert_msg(harness_stop(&H) == 0, "prestod did not exit 0 on SIGTERM");
}

static void test_dir(const char *what, char *buf, size_t len)
{
    char name[64];
    snprintf(name, sizeof(name), "%s-%d", what, (int)getpid());
    ck_assert_int_eq(harness_path(&H, name, buf, len), 0);
}

static void dataset_item(char *buf, size_t len, const char *name, const char *split)
{
    snprintf(buf, len, "  - name: %s\n    root: %s\n    steps: %s\n%s%s%s", name, root,
             SLOW_STEPS, split ? "    split: " : "", split ? split : "", split ? "\n" : "");
}

/* Entries in dir whose names start with prefix. */
static int count_entries(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    if (!d)
        return 0;
    while ((e = readdir(d)))
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

static double stat_num(const char *parent, const char *key)
{
    double v = -1;
    ck_assert_int_eq(harness_stat(&H, parent, key, &v), 0);
    return v;
}

/* The text of the file at path in buf (empty when it cannot be read). */
static void read_text(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
}

/* ---- profiles ---- */

struct progress_seen {
    unsigned calls;
    uint32_t strategies;
    double last_fraction;
};

static void progress_cb(const presto_profile_progress_t *pr, void *arg)
{
    struct progress_seen *s = arg;
    ck_assert_uint_lt(pr->strategy, pr->strategies);
    ck_assert(pr->fraction >= 0 && pr->fraction <= 1);
    ck_assert_ptr_nonnull(pr->name);
    s->calls++;
    s->strategies = pr->strategies;
    s->last_fraction = pr->fraction;
}

/* Profiles through the C API; returns the daemon's code (0 or negative). */
static int profile(const char *dataset, int apply, presto_profile_result_t **r,
                   char *msg, size_t msglen)
{
    presto_t *p;
    presto_profile_opts_t o;
    struct progress_seen seen = {0};
    presto_profile_opts_init(&o);
    o.dataset = dataset;
    o.apply = apply;
    ck_assert_int_eq(harness_connect(&H, &p), 0);
    int rc = presto_profile(p, &o, progress_cb, &seen, r);
    snprintf(msg, msglen, "%s", presto_errmsg(p));
    presto_close(p);
    if (rc == 0) {
        ck_assert_uint_ge(seen.calls, 1);
        ck_assert_uint_eq(seen.strategies, (*r)->count);
    }
    return rc;
}

static const presto_profile_strategy_t *winner(const presto_profile_result_t *r)
{
    ck_assert_uint_lt(r->winner, r->count);
    return &r->strategies[r->winner];
}

/* The datasets document's "auto" object of a dataset: its state and strategy. */
static void auto_state(const char *dataset, char *state, size_t slen, char *strategy,
                       size_t stlen)
{
    presto_t *p;
    char *json, key[96];
    ck_assert_int_eq(harness_connect(&H, &p), 0);
    ck_assert_int_eq(presto_datasets(p, &json), 0);
    presto_close(p);
    snprintf(key, sizeof(key), "\"name\":\"%s\"", dataset);
    const char *at = strstr(json, key);
    ck_assert_msg(at, "no %s in %s", dataset, json);
    const char *st = strstr(at, "\"state\":\""), *sg = strstr(at, "\"strategy\":\"");
    ck_assert_msg(st && sg, "no auto state for %s: %s", dataset, at);
    st += strlen("\"state\":\"");
    sg += strlen("\"strategy\":\"");
    snprintf(state, slen, "%.*s", (int)strcspn(st, "\""), st);
    snprintf(strategy, stlen, "%.*s", (int)strcspn(sg, "\""), sg);
    free(json);
}

static void wait_chosen(const char *dataset, char *strategy, size_t len)
{
    char state[32];
    for (int i = 0; i < (slow ? 3000 : 600); i++) {
        auto_state(dataset, state, sizeof(state), strategy, len);
        if (strcmp(state, "chosen") == 0)
            return;
        ck_assert_msg(strcmp(state, "pending") == 0 || strcmp(state, "profiling") == 0,
                      "state %s", state);
        struct timespec ts = {0, 200 * 1000000L};
        nanosleep(&ts, NULL);
    }
    ck_abort_msg("dataset %s: no strategy chosen in time", dataset);
}

static struct harness_epoch pull(const char *dataset, uint64_t epoch)
{
    presto_stream_opts_t o;
    struct harness_epoch e;
    presto_stream_opts_init(&o);
    o.dataset = dataset;
    o.batch_size = 16;
    o.seed = 7;
    o.epoch = epoch;
    ck_assert_int_eq(harness_pull_epoch(&H, &o, &e), 0);
    ck_assert_uint_eq(e.samples, nimages);
    return e;
}

/* ---- tests ---- */

/* Checks prestoctl profile's files with python3 (stdlib only). */
static const char validate_py[] =
    "import csv, json, sys, xml.etree.ElementTree as ET\n"
    "js, cs, sv, random_step = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])\n"
    "doc = json.load(open(js))\n"
    "st = doc['strategies']\n"
    "rows = list(csv.DictReader(open(cs)))\n"
    "assert len(rows) == len(st) == 1 + 4 * 4, (len(rows), len(st))\n"
    "assert [r['strategy'] for r in rows] == [s['name'] for s in st]\n"
    "assert sum(int(r['winner']) for r in rows) == 1\n"
    "w = st[doc['winner']]\n"
    "assert w['name'] == doc['winner_name'] and w['winner'] and w['rank'] == 1\n"
    "assert rows[doc['winner']]['winner'] == '1'\n"
    "assert sorted(s['rank'] for s in st) == list(range(1, len(st) + 1))\n"
    "for s, r in zip(st, rows):\n"
    "    assert s['split'] <= random_step, s  # random steps never offline\n"
    "    assert abs(float(r['expected_samples_per_s']) - s['expected_samples_per_s']) <= "
    "1e-6 * s['expected_samples_per_s'] + 1e-9\n"
    "    assert s['samples'] > 0 and s['failed'] == 0, s\n"
    "    assert s['memory_samples_per_s_measured'] > 0 and s['disk_samples_per_s_measured'] > 0\n"
    "    assert (s['split'] == 0) == (s['stored_bytes_per_sample'] == 0), s\n"
    "# The slow step online loses by far.\n"
    "assert w['split'] >= 3, w\n"
    "for s in st:\n"
    "    if s['split'] <= 1:\n"
    "        assert s['expected_samples_per_s'] * 2 < w['expected_samples_per_s'], (s, w)\n"
    "assert doc['workers'] == 2 and doc['profile_workers'] == 1, doc\n"
    "d = doc['disk']  # the trials' write-back and source reads; no probe: too small\n"
    "assert d['writeback_bytes_per_s'] > 0 and d['source_s_per_sample'] > 0, d\n"
    "assert d['read_bytes_per_s'] == d['probe_bytes'] == d['probe_depth'] == 0, d\n"
    "root = ET.parse(sv).getroot()\n"
    "assert root.tag == '{http://www.w3.org/2000/svg}svg', root.tag\n"
    "texts = [t.text or '' for t in root.iter('{http://www.w3.org/2000/svg}text')]\n"
    "for s in st:\n"
    "    assert any(t.startswith(s['name']) for t in texts), s['name']\n"
    "assert w['name'] + ' (winner)' in texts, texts\n"
    "circles = list(root.iter('{http://www.w3.org/2000/svg}circle'))\n"
    "assert len(circles) >= len(st), len(circles)\n"
    "print('ok', w['name'])\n";

START_TEST(test_slow_online_step_loses)
{
    enum { LEN = HARNESS_PATH_MAX + 16 };
    char dir[HARNESS_PATH_MAX], cache[LEN], item[1024];
    char csv[LEN], json[LEN], svg[LEN], out[LEN], py[HARNESS_PATH_MAX], prestoctl[LEN];
    test_dir("slow", dir, sizeof(dir));
    snprintf(cache, sizeof(cache), "%s/cache", dir);
    dataset_item(item, sizeof(item), "slow", NULL);
    start(cache, "1GiB", item);
    double entries = stat_num("cache", "entries"), mem = stat_num("memory", "cache_bytes");
    double disk_entries = stat_num("disk", "entries");

    snprintf(csv, sizeof(csv), "%s.csv", dir);
    snprintf(json, sizeof(json), "%s.json", dir);
    snprintf(svg, sizeof(svg), "%s.svg", dir);
    snprintf(out, sizeof(out), "%s.out", dir);
    snprintf(prestoctl, sizeof(prestoctl), "%s/prestoctl", harness_env("PRESTO_BUILD", "build"));
    const char *argv[] = {prestoctl, "-s", H.sock, "profile", "slow", "--csv", csv,
                          "--json", json, "--svg", svg, NULL};
    int rc = harness_run(argv, out, CASE_TIMEOUT_S - 30);
    ck_assert_msg(rc == 0, "prestoctl profile exited %d", rc);
    /* Not a terminal: a progress line per strategy, then the table. */
    char text[16384];
    read_text(out, text, sizeof(text));
    ck_assert_msg(strstr(text, "profile slow: strategy 17/17"), "%s", text);
    ck_assert_msg(strstr(text, "<- winner") && strstr(text, "winner: "), "%s", text);

    ck_assert_int_eq(harness_write_file(&H, "validate.py", validate_py, py, sizeof(py)), 0);
    char rs[8];
    snprintf(rs, sizeof(rs), "%d", RANDOM_STEP);
    const char *pyargv[] = {harness_env("PYTHON", "/usr/bin/python3"), py, json, csv, svg, rs,
                            NULL};
    snprintf(out, sizeof(out), "%s.py.out", dir);
    rc = harness_run(pyargv, out, 60);
    if (rc != 0) {
        read_text(out, text, sizeof(text));
        char doc[16384];
        read_text(json, doc, sizeof(doc));
        ck_abort_msg("the profile's files failed the checks (%d):\n%s\n%s", rc, text, doc);
    }

    /* Nothing of the trials stays. */
    ck_assert_int_eq(count_entries(cache, "profile-trial-"), 0);
    ck_assert_int_eq(count_entries(cache, "profile-"), 0); /* no record: not split: auto */
    ck_assert(stat_num("cache", "entries") == entries);
    ck_assert(stat_num("memory", "cache_bytes") == mem);
    ck_assert(stat_num("disk", "entries") == disk_entries);
    ck_assert(stat_num("cache", "hits") == 0); /* trials do not count as the daemon's */
    ck_assert(harness_log_contains(&H, "profile of dataset 'slow': 17 strategies"));
    stop();
}
END_TEST

START_TEST(test_disk_budget)
{
    char dir[HARNESS_PATH_MAX], item[1024], msg[512];
    presto_profile_result_t *r;
    test_dir("budget", dir, sizeof(dir));
    dataset_item(item, sizeof(item), "slow", NULL);
    start(dir, "16KiB", item); /* under any cached strategy's need */
    int rc = profile("slow", 0, &r, msg, sizeof(msg));
    ck_assert_msg(rc == 0, "profile: %s", msg);
    ck_assert_uint_eq(r->disk_budget, 16 << 10);
    ck_assert_uint_eq(r->count, 17);
    const presto_profile_strategy_t *w = winner(r);
    ck_assert_msg(w->split == 0, "%s was chosen over the disk budget", w->name);
    ck_assert(w->feasible && w->total_bytes <= (double)r->disk_budget);
    int over = 0;
    for (uint32_t i = 0; i < r->count; i++) {
        const presto_profile_strategy_t *s = &r->strategies[i];
        if (s->split == 0)
            continue;
        ck_assert_msg(s->total_bytes > (double)r->disk_budget, "%s: %.0f bytes", s->name,
                      s->total_bytes);
        ck_assert_msg(!s->feasible && !s->fits_disk, "%s feasible", s->name);
        ck_assert_uint_gt(s->rank, 1);
        /* It would have won on throughput. */
        over += s->expected_rate > w->expected_rate;
    }
    ck_assert_int_gt(over, 0);
    presto_profile_free(r);
    stop();
}
END_TEST

START_TEST(test_split_auto)
{
    char dir[HARNESS_PATH_MAX], items[2048], a[1024], b[1024], msg[512];
    char state[32], strategy[64], strategy2[64], path[HARNESS_PATH_MAX + 32];
    presto_profile_result_t *r;
    test_dir("auto", dir, sizeof(dir));
    dataset_item(a, sizeof(a), "auto", "auto");
    dataset_item(b, sizeof(b), "fixed", "center_crop");
    snprintf(items, sizeof(items), "%s%s", a, b);
    start(dir, "1GiB", items);

    auto_state("auto", state, sizeof(state), strategy, sizeof(strategy));
    ck_assert_str_eq(state, "pending");
    ck_assert_str_eq(strategy, "");
    /* The reference bytes, from the fixed split. */
    struct harness_epoch ref = pull("fixed", 3);

    /* A WARM is refused until a strategy is chosen, and starts the profile. */
    presto_t *p;
    ck_assert_int_eq(harness_connect(&H, &p), 0);
    ck_assert_int_eq(presto_warm(p, "auto", NULL, NULL), -PRESTO_E_LIMIT);
    ck_assert_msg(strstr(presto_errmsg(p), "split: auto"), "%s", presto_errmsg(p));
    presto_close(p);
    /* Streams run meanwhile, with the default split, the same bytes. */
    struct harness_epoch e = pull("auto", 3);
    ck_assert_uint_eq(e.fnv, ref.fnv);
    /* Only one profile at a time. */
    if (!slow) {
        auto_state("auto", state, sizeof(state), strategy, sizeof(strategy));
        if (strcmp(state, "profiling") == 0) {
            ck_assert_int_eq(profile("fixed", 0, &r, msg, sizeof(msg)), -PRESTO_E_LIMIT);
            ck_assert_msg(strstr(msg, "one runs at a time"), "%s", msg);
        }
    }
    wait_chosen("auto", strategy, sizeof(strategy));
    ck_assert_msg(harness_log_contains(&H, "split: auto chose"), "no log line of the choice");
    /* Cold with the chosen split (now cached), then from the cache. */
    ck_assert_uint_eq(pull("auto", 3).fnv, ref.fnv);
    ck_assert_uint_eq(pull("auto", 3).fnv, ref.fnv);
    if (strcmp(strategy, "none") != 0) /* "none" caches nothing, by its definition */
        ck_assert(stat_num("cache", "hits") > 0);
    snprintf(path, sizeof(path), "%s/profile-auto.txt", dir);
    ck_assert_msg(access(path, R_OK) == 0, "no record at %s", path);
    ck_assert_int_eq(count_entries(dir, "profile-trial-"), 0);
    ck_assert_int_eq(harness_connect(&H, &p), 0);
    /* A WARM now runs; "none" has nothing to cache and is refused (under a
     * heavy load the wall-clock rates can make it the winner, as above). */
    ck_assert_int_eq(presto_warm(p, "auto", NULL, NULL),
                     strcmp(strategy, "none") != 0 ? 0 : -PRESTO_E_INVAL);
    presto_close(p);
    stop();

    /* A restart takes the record: no profile. */
    start(dir, "1GiB", items);
    auto_state("auto", state, sizeof(state), strategy2, sizeof(strategy2));
    ck_assert_str_eq(state, "chosen");
    ck_assert_str_eq(strategy2, strategy);
    ck_assert(harness_log_contains(&H, "as chosen by an earlier profile"));
    ck_assert_uint_eq(pull("auto", 3).fnv, ref.fnv);
    ck_assert(!harness_log_contains(&H, "profiling"));

    /* --apply on a fixed split is refused. */
    ck_assert_int_eq(profile("fixed", 1, &r, msg, sizeof(msg)), -PRESTO_E_INVAL);
    ck_assert_msg(strstr(msg, "split: auto"), "%s", msg);
    /* Consistent on the same data: the same sample, the same choice. */
    if (!slow) {
        int rc = profile("auto", 1, &r, msg, sizeof(msg));
        ck_assert_msg(rc == 0, "profile: %s", msg);
        /* The same choice, unless the two were a near tie the machine's load
         * tipped (rates are wall-clock measures): then the first is still a
         * feasible strategy scoring at least half the new winner's. */
        const presto_profile_strategy_t *w = winner(r);
        if (strcmp(w->name, strategy) == 0) {
            ck_assert_int_eq(r->applied, PRESTO_APPLIED_UNCHANGED);
        } else {
            const presto_profile_strategy_t *first = NULL;
            for (uint32_t i = 0; i < r->count; i++)
                if (strcmp(r->strategies[i].name, strategy) == 0)
                    first = &r->strategies[i];
            ck_assert_msg(first != NULL, "first %s is not among the strategies now", strategy);
            /* Under load the wall-clock rates of strategies doing the same
             * work online (all past the slow resize) scatter several times;
             * either choice must still cache past it. */
            ck_assert_msg(first->feasible && first->split >= 3 && w->split >= 3,
                          "first %s (score %g), now %s (score %g): not a near tie", strategy,
                          first->score, w->name, w->score);
            fprintf(stderr, "test_split_auto: first %s, now %s, scores %g and %g (a near tie)\n",
                    strategy, w->name, first->score, w->score);
        }
        ck_assert_uint_eq(r->sample_size, samples);
        presto_profile_free(r);
    }
    stop();

    /* Other budgets: chosen again. */
    start(dir, "2GiB", items);
    auto_state("auto", state, sizeof(state), strategy2, sizeof(strategy2));
    ck_assert_str_eq(state, "pending");
    ck_assert(harness_log_contains(&H, "budgets changed"));
    stop();
}
END_TEST

START_TEST(test_client_gone_stops_profile)
{
    char dir[HARNESS_PATH_MAX], item[1024], msg[512];
    test_dir("gone", dir, sizeof(dir));
    dataset_item(item, sizeof(item), "slow", NULL);
    start(dir, "1GiB", item);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        presto_profile_result_t *r;
        profile("slow", 0, &r, msg, sizeof(msg));
        _exit(0);
    }
    /* Kill the client while a trial store exists. */
    int seen = 0;
    for (int i = 0; i < 3000 && !seen; i++) {
        seen = count_entries(dir, "profile-trial-") > 0;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    ck_assert_msg(seen, "no trial directory appeared");
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    ck_assert_int_eq(harness_wait_log(&H, "profile of dataset 'slow' stopped", 20000), 0);
    int gone = 0;
    for (int i = 0; i < 1000 && !gone; i++) {
        gone = count_entries(dir, "profile-trial-") == 0;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    ck_assert_msg(gone, "the trial directory stayed");
    ck_assert(stat_num("cache", "entries") == 0);
    stop();
}
END_TEST

/* Checks profile_accuracy.py's JSON (python3, stdlib only). */
static const char verify_py[] =
    "import json, math, sys\n"
    "doc, n = json.load(open(sys.argv[1])), int(sys.argv[2])\n"
    "rows = doc['rows']\n"
    "assert [r['name'] for r in rows] == ['none', 'center_crop/raw'], rows\n"
    "for r in rows:\n"
    "    m, p = r['measured'], r['predicted']\n"
    "    assert m['samples'] == n, m\n"
    "    for k in ('memory', 'disk', 'cold'):\n"
    "        assert math.isfinite(m[k]) and m[k] > 0, (r['name'], k, m)\n"
    "        assert math.isfinite(p[k]) and p[k] > 0, (r['name'], k, p)\n"
    "        assert r['ratio'][k] >= 1 and math.isfinite(r['ratio'][k]), r\n"
    "        assert 0 <= r['spread'][k] < 10, r\n"
    "        # the interval: the spread and the model's own error (at least 39%)\n"
    "        assert r['spread'][k] <= r['interval'][k] < 11 and r['interval'][k] >= 0.39, r\n"
    "    assert ('stored_bytes' in p) == (r['split'] > 0), r\n"
    "c = rows[1]\n"
    "assert c['measured']['stored_bytes'] > 0 and c['predicted']['stored_bytes'] > 0, c\n"
    "# Stored bytes are no timing: the sample predicts the dataset's closely.\n"
    "assert c['ratio']['stored_bytes'] < 1.5, c\n"
    "assert doc['ratio'] == max(v for r in rows for v in r['ratio'].values()), doc\n"
    "assert 0 <= doc['inside_interval'] <= doc['rates'] == 6, doc\n"
    "print('ok')\n";

/* The profile against real epochs (tests/bench/profile_accuracy.py, what
 * make bench's profile-accuracy runs for every strategy): two strategies on
 * the test's images, each in a prestod of the helper's own, every measured
 * figure real and the table printed side by side. */
START_TEST(test_verify)
{
    enum { LEN = HARNESS_PATH_MAX + 64 };
    char dir[HARNESS_PATH_MAX], json[LEN], out[LEN], py[HARNESS_PATH_MAX], script[LEN];
    char build[LEN], nsamples[16], text[16384];
    test_dir("verify", dir, sizeof(dir));
    snprintf(json, sizeof(json), "%s.json", dir);
    snprintf(out, sizeof(out), "%s.out", dir);
    snprintf(script, sizeof(script), "%s/tests/bench/profile_accuracy.py",
             harness_env("PRESTO_SRC", "."));
    snprintf(build, sizeof(build), "%s", harness_env("PRESTO_BUILD", "build"));
    snprintf(nsamples, sizeof(nsamples), "%u", samples);
    const char *python = harness_env("PYTHON", "/usr/bin/python3");
    const char *argv[] = {python, script, "--build", build, "--data", root, "--tmp", dir,
                          "--steps", SLOW_STEPS, "--samples", nsamples, "--only",
                          "none,center_crop/raw", "--epochs", "1", "--out", json, NULL};
    int rc = harness_run(argv, out, CASE_TIMEOUT_S - 30);
    read_text(out, text, sizeof(text));
    ck_assert_msg(rc == 0, "profile_accuracy.py exited %d:\n%s", rc, text);
    /* Side by side: a row per strategy under the header, and the worst ratio. */
    ck_assert_msg(strstr(text, "warm mem/s predicted/measured") &&
                      strstr(text, "\nnone ") && strstr(text, "\ncenter_crop/raw ") &&
                      strstr(text, "worst max(predicted/measured, measured/predicted): "),
                  "%s", text);

    ck_assert_int_eq(harness_write_file(&H, "verify.py", verify_py, py, sizeof(py)), 0);
    char ns[16];
    snprintf(ns, sizeof(ns), "%u", nimages);
    const char *pyargv[] = {python, py, json, ns, NULL};
    snprintf(out, sizeof(out), "%s.py.out", dir);
    rc = harness_run(pyargv, out, 60);
    read_text(out, text, sizeof(text));
    ck_assert_msg(rc == 0, "the verification's JSON failed the checks (%d):\n%s", rc, text);
    ck_assert_int_eq(count_entries(dir, "cache-"), 0); /* the helper removed its caches */
}
END_TEST

/* Checks prestoctl profile --verify-top 2's JSON and CSV (python3, stdlib). */
static const char cli_verify_py[] =
    "import csv, json, math, sys\n"
    "doc, rows, n = json.load(open(sys.argv[1])), list(csv.DictReader(open(sys.argv[2]))), "
    "int(sys.argv[3])\n"
    "st = doc['strategies']\n"
    "ver, top = [s for s in st if s['verified']], int(sys.argv[4])\n"
    "assert sorted(s['rank'] for s in ver) == list(range(1, top + 1)), "
    "[(s['name'], s['rank']) for s in st]\n"
    "err = {'memory': 0.51, 'disk': 0.56, 'cold': 0.39}  # profile.h PROFILE_ERR_*\n"
    "for s, r in zip(st, rows):\n"
    "    assert r['strategy'] == s['name'] and int(r['verified']) == int(s['verified']), r\n"
    "    for k in ('memory', 'disk', 'cold'):  # each rate's interval: spread and model\n"
    "        sp, iv = s[k + '_spread'], s[k + '_interval']\n"
    "        # both printed with 9 significant digits (%.9g): each off by up to\n"
    "        # half a unit of the 9th, 5e-9 of the value, the interval's hypot too\n"
    "        assert abs(iv - math.hypot(sp, err[k])) <= 1e-8 * iv, (s['name'], k, sp, iv)\n"
    "        assert abs(float(r[k + '_interval']) - iv) <= 1e-6 * iv, r\n"
    "    if not s['verified']:\n"
    "        assert s['verify_note'] == 'not among the %d best' % top, s\n"
    "        assert s['measured_cold_samples_per_s'] == 0, s\n"
    "        continue\n"
    "    assert s['verify_note'] == '', s\n"
    "    for k in ('cold', 'memory', 'disk'):\n"
    "        v = s['measured_%s_samples_per_s' % k]\n"
    "        assert math.isfinite(v) and v > 0, (s['name'], k, v)\n"
    "        assert abs(float(r['measured_%s_samples_per_s' % k]) - v) <= 1e-6 * v, r\n"
    "    assert s['measured_memory_fraction'] == 1, s  # profile.memory holds it all\n"
    "    assert s['verify_s'] > 0, s\n"
    "    if s['split'] > 0:\n"
    "        b, p = s['measured_bytes'], s['total_bytes']\n"
    "        # stored bytes are no timing: the sample predicts the dataset's closely\n"
    "        assert b > 0 and max(b / p, p / b) < 1.5, (b, p)\n"
    "w = st[doc['winner']]\n"
    "assert w['verified'], w\n"
    "print(w['name'], w['measured_cold_samples_per_s'], w['measured_memory_samples_per_s'])\n";

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

START_TEST(test_cli_verify)
{
    enum { LEN = HARNESS_PATH_MAX + 16 };
    char dir[HARNESS_PATH_MAX], cache[LEN], item[1024], csv[LEN], json[LEN], out[LEN];
    char py[HARNESS_PATH_MAX], prestoctl[LEN], text[16384], ns[16];
    test_dir("cliverify", dir, sizeof(dir));
    snprintf(cache, sizeof(cache), "%s/cache", dir);
    /* A short pipeline (13 strategies, no upscale): the verification runs
     * seven epochs of the whole dataset per strategy, under valgrind too
     * (then only the winner's). */
    const char *top = slow ? "1" : "2";
    snprintf(item, sizeof(item), "  - name: ver\n    root: %s\n    steps: [decode, {resize: 48}, "
             "{center_crop: 40}, {random_flip: 0.5}]\n    split: auto\n", root);
    start(cache, "1GiB", item);
    snprintf(csv, sizeof(csv), "%s.csv", dir);
    snprintf(json, sizeof(json), "%s.json", dir);
    snprintf(out, sizeof(out), "%s.out", dir);
    snprintf(prestoctl, sizeof(prestoctl), "%s/prestoctl", harness_env("PRESTO_BUILD", "build"));
    /* Before any OPEN: the winner is applied at once (nothing cached yet). */
    const char *argv[] = {prestoctl, "-s", H.sock, "profile", "ver", "--apply", "--verify-top",
                          top, "--csv", csv, "--json", json, NULL};
    int rc = harness_run(argv, out, CASE_TIMEOUT_S - 60);
    read_text(out, text, sizeof(text));
    ck_assert_msg(rc == 0, "prestoctl profile --verify-top %s exited %d:\n%s", top, rc, text);
    /* The table: predicted, measured and their ratio for each tier, per
     * strategy verified, and the worst ratio. */
    ck_assert_msg(strstr(text, "verification: real epochs of all ") &&
                      strstr(text, "warm memory/s") && strstr(text, "warm disk/s") &&
                      strstr(text, "cold/s") && strstr(text, "worst ratio: ") &&
                      strstr(text, "measured inside the predicted +-interval: ") &&
                      strstr(text, "applied: now"),
                  "%s", text);
    ck_assert_int_eq(harness_write_file(&H, "cliverify.py", cli_verify_py, py, sizeof(py)), 0);
    snprintf(ns, sizeof(ns), "%u", nimages);
    const char *pyargv[] = {harness_env("PYTHON", "/usr/bin/python3"), py, json, csv, ns, top,
                            NULL};
    char pyout[LEN];
    snprintf(pyout, sizeof(pyout), "%s.py.out", dir);
    rc = harness_run(pyargv, pyout, 60);
    char res[2048];
    read_text(pyout, res, sizeof(res));
    ck_assert_msg(rc == 0, "the verification's files failed the checks (%d):\n%s\n%s", rc, res,
                  text);
    char wname[64];
    double vcold = 0, vmem = 0;
    ck_assert_msg(sscanf(res, "%63s %lf %lf", wname, &vcold, &vmem) == 3, "%s", res);
    char strategy[64];
    wait_chosen("ver", strategy, sizeof(strategy));
    ck_assert_str_eq(strategy, wname);
    ck_assert_int_eq(count_entries(cache, "profile-trial-"), 0);

    /* The daemon's own epochs of the winner: the first (the files now in the
     * page cache: faster than the verification's, whose were dropped) and a
     * warm one. The verification ran on one of the two workers, so its rates
     * may be half these; under load either may move a few times. */
    double t0 = now_s();
    pull("ver", 0);
    double cold = nimages / (now_s() - t0);
    double mem = 0;
    for (int e = 1; e <= 3; e++) {
        t0 = now_s();
        pull("ver", (uint64_t)e);
        mem = fmax(mem, nimages / (now_s() - t0));
    }
    printf("test_cli_verify: %s: cold %.0f verified / %.0f epoch, memory %.0f / %.0f samples/s\n",
           wname, vcold, cold, vmem, mem);
    ck_assert_msg(vcold * 8 > cold && vcold < cold * 8, "cold: %.0f verified, %.0f by an epoch",
                  vcold, cold);
    ck_assert_msg(vmem * 20 > mem && vmem < mem * 20, "memory: %.0f verified, %.0f by an epoch",
                  vmem, mem);
    stop();
}
END_TEST

/* The batch-level steps are in the online rates: two datasets on the same
 * images, the same steps but for mixup and cutmix at the end of one (their
 * soft targets made large, MIX_CLASSES classes: 200 KB a sample mixed and
 * one-hot coded, against the 19 KB a 40x40 float image is made of), each
 * profiled. Where the online work is mostly theirs (split after
 * center_crop or to_float: to_float and a copy, or a copy, is all the rest),
 * the mixed strategy is slower from memory, and takes more CPU a sample from
 * memory and from disk, than the same strategy of the plain one. Below that (none, the
 * decode strategies) a JPEG decode or a 40x40 crop of a 300-pixel image
 * online is of the same order as the mixing and the two are within the
 * noise of a busy machine (none measured 2364 and 1057 samples/s the other way round once);
 * those rates need only be real. Under valgrind or TSan (slow) only the
 * mixed one is profiled and its rates asserted real: the comparison is the
 * native and ASan builds' (two profiles took test_profile from 225 s to
 * 313 s under valgrind, the runner's limit being 600). */
#define MIX_CLASSES 50000
START_TEST(test_batch_steps_in_rates)
{
    char dir[HARNESS_PATH_MAX], items[2048], msg[512];
    presto_profile_result_t *r[2] = {NULL, NULL};
    test_dir("mix", dir, sizeof(dir));
    snprintf(items, sizeof(items),
             "  - name: plain\n    root: %s\n"
             "    steps: [decode, {center_crop: 40}, to_float]\n"
             "  - name: mixed\n    root: %s\n"
             "    steps: [decode, {center_crop: 40}, to_float,\n"
             "            {mixup: {alpha: 0.2, num_classes: %u}},\n"
             "            {cutmix: {alpha: 1.0, num_classes: %u}}]\n",
             root, root, MIX_CLASSES, MIX_CLASSES);
    start(dir, "1GiB", items);
    const char *names[2] = {"plain", "mixed"};
    for (int d = slow ? 1 : 0; d < 2; d++) {
        int rc = profile(names[d], 0, &r[d], msg, sizeof(msg));
        ck_assert_msg(rc == 0, "profile %s: %s", names[d], msg);
    }
    /* none, then decode, center_crop and to_float each raw and zstd:1/3/9:
     * mixup and cutmix are random, never offline. */
    ck_assert_uint_eq(r[1]->count, 13);
    if (!slow)
        ck_assert_uint_eq(r[0]->count, 13);
    for (uint32_t i = 0; i < r[1]->count; i++) {
        const presto_profile_strategy_t *b = &r[1]->strategies[i];
        ck_assert_msg(b->memory_rate > 0 && b->disk_rate > 0, "%s: mixed rates %.0f, %.0f",
                      b->name, b->memory_rate, b->disk_rate);
    }
    for (uint32_t i = 0; !slow && i < r[0]->count; i++) {
        const presto_profile_strategy_t *a = &r[0]->strategies[i], *b = &r[1]->strategies[i];
        ck_assert_str_eq(a->name, b->name);
        if (a->split < 2)
            continue;
        ck_assert_msg(b->memory_rate < a->memory_rate,
                      "%s: memory %.0f samples/s with mixup/cutmix, %.0f without", a->name,
                      b->memory_rate, a->memory_rate);
        /* From disk the mixing is a third of the work, not most of it: two
         * profiles' wall-clock disk rates crossed under a load of 7 (7,351
         * with, 5,137 without); CPU a sample does not move with the load. */
        ck_assert_msg(b->disk_cpu_s > a->disk_cpu_s,
                      "%s: disk CPU %g s a sample with mixup/cutmix, %g without", a->name,
                      b->disk_cpu_s, a->disk_cpu_s);
        ck_assert_msg(b->memory_cpu_s > a->memory_cpu_s, "%s: CPU %g s a sample with, %g without",
                      a->name, b->memory_cpu_s, a->memory_cpu_s);
        if (strcmp(a->name, "to_float/raw") == 0)
            fprintf(stderr, "test_batch_steps_in_rates: %s memory %.0f samples/s with "
                            "mixup/cutmix, %.0f without\n", a->name, b->memory_rate,
                    a->memory_rate);
    }
    if (r[0])
        presto_profile_free(r[0]);
    presto_profile_free(r[1]);
    stop();
}
END_TEST

static Suite *profile_suite(void)
{
    Suite *s = suite_create("profile");
    TCase *tc = tcase_create("profile");
    tcase_set_timeout(tc, CASE_TIMEOUT_S);
    tcase_add_test(tc, test_slow_online_step_loses);
    tcase_add_test(tc, test_disk_budget);
    tcase_add_test(tc, test_split_auto);
    tcase_add_test(tc, test_client_gone_stops_profile);
    tcase_add_test(tc, test_verify);
    tcase_add_test(tc, test_cli_verify);
    tcase_add_test(tc, test_batch_steps_in_rates);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    if (harness_photos_missing())
        return HARNESS_SKIP;
    slow = strcmp(harness_env("PRESTO_VALGRIND", "0"), "1") == 0;
#if defined(__SANITIZE_THREAD__)
    slow = 1;
#endif
    if (slow) {
        nimages = 24;
        samples = 4;
    }
    if (harness_init(&H) < 0)
        return EXIT_FAILURE;
    if (harness_make_dataset(&H, "images", nimages, 4, 3, 200, 320, root, sizeof(root)) < 0) {
        harness_cleanup(&H);
        return EXIT_FAILURE;
    }
    return harness_finish(&H, harness_run_suite(profile_suite()));
}
