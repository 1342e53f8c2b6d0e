/*
 * Reloading the configuration of a real prestod: through RELOAD (the API
 * and prestoctl) and SIGHUP; a good config adds, replaces and removes
 * datasets and changes limits live; a bad one (a key error, a root that
 * cannot be indexed) keeps the running configuration and says why in the
 * log; a stream open on a dataset a reload removes runs to its end; keys
 * that need a restart are reported and keep their running values;
 * DROP_CACHE empties the memory tier and epochs stay the same after it.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "presto.h"

#define NSAMPLES 30
#define NCLASSES 3
#define CASE_TIMEOUT_S 120

static struct harness H;
static char root_a[HARNESS_PATH_MAX], root_b[HARNESS_PATH_MAX];

/* A config of the given datasets (a, b: the two data sets; "" leaves one
 * out) with extra top-level text. */
static void write_config(char *buf, size_t len, const char *extra, const char *a,
                         const char *b)
{
    int n = snprintf(buf, len, "workers: 2\n%sdatasets:\n", extra);
    if (a[0])
        n += snprintf(buf + n, len - (size_t)n,
                      "  - name: %s\n    root: %s\n"
                      "    steps: [decode, {resize: 32}, {center_crop: 32}]\n",
                      a, root_a);
    if (b[0])
        snprintf(buf + n, len - (size_t)n,
                 "  - name: %s\n    root: %s\n"
                 "    steps: [decode, {resize: 40}, {center_crop: 40}]\n",
                 b, root_b);
}

static void rewrite(const char *yaml)
{
    FILE *f = fopen(H.conf, "w");
    ck_assert_ptr_nonnull(f);
    fputs(yaml, f);
    ck_assert_int_eq(fclose(f), 0);
}

static void daemon_setup(void)
{
    char yaml[2048];
    write_config(yaml, sizeof(yaml), "", "a", "");
    ck_assert_msg(harness_start_config(&H, yaml, NULL) == 0, "prestod did not start");
}

static void daemon_teardown(void)
{
    harness_stop_checked(&H);
}

static presto_stream_opts_t opts(const char *dataset)
{
    presto_stream_opts_t o;
    presto_stream_opts_init(&o);
    o.dataset = dataset;
    o.batch_size = 4;
    o.prefetch = 1;
    return o;
}

static char *datasets_json(void)
{
    presto_t *p;
    char *json = NULL;
    ck_assert_int_eq(harness_connect(&H, &p), 0);
    ck_assert_int_eq(presto_datasets(p, &json), 0);
    presto_close(p);
    return json;
}

static int serves(const char *name)
{
    char key[96];
    char *json = datasets_json();
    snprintf(key, sizeof(key), "\"name\":\"%s\"", name);
    int yes = strstr(json, key) != NULL;
    free(json);
    return yes;
}

/* RELOAD through the API: its return code, the report or the error. */
static int reload(char *out, size_t len)
{
    presto_t *p;
    char *report = NULL;
    ck_assert_int_eq(harness_connect(&H, &p), 0);
    int rc = presto_reload(p, &report);
    snprintf(out, len, "%s", rc == 0 ? report : presto_errmsg(p));
    free(report);
    presto_close(p);
    return rc;
}

static void expect_epoch(const char *dataset, uint64_t samples)
{
    struct harness_epoch e;
    presto_stream_opts_t o = opts(dataset);
    ck_assert_int_eq(harness_pull_epoch(&H, &o, &e), 0);
    ck_assert_uint_eq(e.samples, samples);
}

START_TEST(test_reload_adds_and_removes)
{
    char yaml[2048], out[4096];
    ck_assert(serves("a"));
    ck_assert(!serves("b"));
    write_config(yaml, sizeof(yaml), "", "a", "b");
    rewrite(yaml);
    ck_assert_msg(reload(out, sizeof(out)) == 0, "reload: %s", out);
    ck_assert_msg(strstr(out, "\"added\":[\"b\"]"), "report: %s", out);
    ck_assert_msg(strstr(out, "\"removed\":[]"), "report: %s", out);
    ck_assert(serves("a") && serves("b"));
    expect_epoch("b", NSAMPLES);
    expect_epoch("a", NSAMPLES);

    /* a redeclared (other steps) is replaced; the old one goes. */
    write_config(yaml, sizeof(yaml), "", "", "b");
    size_t n = strlen(yaml);
    snprintf(yaml + n, sizeof(yaml) - n,
             "  - name: a\n    root: %s\n"
             "    steps: [decode, {resize: 24}, {center_crop: 24}]\n", root_a);
    rewrite(yaml);
    ck_assert_msg(reload(out, sizeof(out)) == 0, "reload: %s", out);
    ck_assert_msg(strstr(out, "\"replaced\":[\"a\"]"), "report: %s", out);
    char *json = datasets_json();
    ck_assert_msg(strstr(json, "\"shape\":[24,24,3]"), "datasets: %s", json);
    free(json);

    /* Removed: new streams cannot name it. */
    write_config(yaml, sizeof(yaml), "", "", "b");
    rewrite(yaml);
    ck_assert_msg(reload(out, sizeof(out)) == 0, "reload: %s", out);
    ck_assert_msg(strstr(out, "\"removed\":[\"a\"]"), "report: %s", out);
    ck_assert(!serves("a"));
    presto_t *p;
    presto_stream_t *s;
    presto_stream_opts_t o = opts("a");
    ck_assert_int_eq(harness_connect(&H, &p), 0);
    ck_assert_int_eq(presto_stream_open(p, &o, &s), -PRESTO_E_NODATASET);
    presto_close(p);
    double v;
    ck_assert_int_eq(harness_stat(&H, "access", "reloads", &v), 0);
    ck_assert_int_eq((int)v, 3);
}
END_TEST

START_TEST(test_sighup_reloads)
{
    char yaml[2048];
    write_config(yaml, sizeof(yaml), "", "a", "b");
    rewrite(yaml);
    ck_assert_int_eq(kill(H.pid, SIGHUP), 0);
    for (int i = 0; i < 250 && !serves("b"); i++)
        usleep(20000);
    ck_assert_msg(serves("b"), "b is not served 5 s after SIGHUP");
    expect_epoch("b", NSAMPLES);
}
END_TEST

START_TEST(test_bad_config_keeps_running_one)
{
    char yaml[2048], out[4096], want[HARNESS_PATH_MAX + 64];
    /* A key error: the reply and the log name FILE:LINE and the key. */
    write_config(yaml, sizeof(yaml), "limits:\n  connections: -5\n", "a", "b");
    rewrite(yaml);
    ck_assert_int_eq(reload(out, sizeof(out)), -PRESTO_E_INVAL);
    snprintf(want, sizeof(want), "%s:3: key 'limits.connections'", H.conf);
    ck_assert_msg(strstr(out, want), "error '%s' lacks '%s'", out, want);
    ck_assert_msg(harness_wait_log(&H, want, 2000) == 0, "the log lacks '%s'", want);
    ck_assert(harness_log_contains(&H, "the running configuration stays"));
    ck_assert(serves("a") && !serves("b"));
    expect_epoch("a", NSAMPLES);

    /* The same through SIGHUP: only the log can say it. */
    write_config(yaml, sizeof(yaml), "log_level: chatty\n", "a", "b");
    rewrite(yaml);
    snprintf(want, sizeof(want), "%s:2: key 'log_level'", H.conf);
    ck_assert_int_eq(kill(H.pid, SIGHUP), 0);
    ck_assert_msg(harness_wait_log(&H, want, 5000) == 0, "the log lacks '%s'", want);
    ck_assert(serves("a") && !serves("b"));

    /* A dataset whose root is not there fails the whole reload. */
    write_config(yaml, sizeof(yaml), "", "a", "");
    size_t n = strlen(yaml);
    snprintf(yaml + n, sizeof(yaml) - n, "  - name: ghost\n    root: %s/nowhere\n", H.dir);
    rewrite(yaml);
    ck_assert_int_eq(reload(out, sizeof(out)), -PRESTO_E_INVAL);
    ck_assert_msg(strstr(out, "dataset 'ghost'"), "error: %s", out);
    ck_assert(serves("a") && !serves("ghost"));
    double v;
    ck_assert_int_eq(harness_stat(&H, "access", "reload_failures", &v), 0);
    ck_assert_int_eq((int)v, 3);
    ck_assert(harness_alive(&H));
}
END_TEST

/* A stream open on a dataset that a reload takes out of service keeps it
 * to the end of its epoch; then the dataset is freed. */
START_TEST(test_stream_outlives_removal)
{
    char yaml[2048], out[4096];
    presto_t *p;
    presto_stream_t *s;
    presto_batch_t b;
    presto_stream_opts_t o = opts("a");
    ck_assert_int_eq(harness_connect(&H, &p), 0);
    ck_assert_int_eq(presto_stream_open(p, &o, &s), 0);
    ck_assert_int_eq(presto_next(s, &b), 1);
    uint64_t got = b.n;
    presto_release(s, &b);

    write_config(yaml, sizeof(yaml), "", "", "b");
    rewrite(yaml);
    ck_assert_msg(reload(out, sizeof(out)) == 0, "reload: %s", out);
    ck_assert(!serves("a"));
    ck_assert(harness_log_contains(&H, "dataset 'a': out of service; 1 streams"));
    int rc;
    while ((rc = presto_next(s, &b)) > 0) {
        got += b.n;
        presto_release(s, &b);
    }
    ck_assert_msg(rc == 0, "the stream ended with %d: %s", rc, presto_stream_errmsg(s));
    ck_assert_uint_eq(got, NSAMPLES);
    presto_stream_close(s);
    presto_close(p);
    ck_assert_msg(harness_wait_log(&H, "dataset 'a': its last stream ended; freed", 3000) == 0,
                  "the removed dataset was not freed");
    expect_epoch("b", NSAMPLES);
}
END_TEST

START_TEST(test_live_and_restart_keys)
{
    char yaml[2048], out[4096];
    write_config(yaml, sizeof(yaml),
                 "workers: 3\nlog_level: debug\ncache:\n  memory: 64MiB\n"
                 "limits:\n  connections: 77\n  batch_size: 16\n", "a", "");
    /* write_config put workers: 2 first; the second one is a duplicate. */
    char *dup = strstr(yaml, "workers: 2\n");
    memmove(dup, dup + strlen("workers: 2\n"), strlen(dup + strlen("workers: 2\n")) + 1);
    rewrite(yaml);
    ck_assert_msg(reload(out, sizeof(out)) == 0, "reload: %s", out);
    ck_assert_msg(strstr(out, "\"restart_needed\":[\"workers\"]"), "report: %s", out);
    ck_assert_msg(strstr(out, "\"limits.connections\"") && strstr(out, "\"log_level\"") &&
                      strstr(out, "\"cache.memory\"") && strstr(out, "\"limits.batch_size\""),
                  "report: %s", out);
    ck_assert(harness_log_contains(&H, "workers: 2 -> 3 needs a restart"));
    double v;
    ck_assert_int_eq(harness_stat(&H, "limits.connections", "value", &v), 0);
    ck_assert_int_eq((int)v, 77);
    ck_assert_int_eq(harness_stat(&H, NULL, "workers", &v), 0);
    ck_assert_int_eq((int)v, 2);
    ck_assert_int_eq(harness_stat(&H, "memory", "budget", &v), 0);
    ck_assert_int_eq((long)v, 64L << 20);
    /* limits.batch_size is in force for the next OPEN. */
    presto_t *p;
    presto_stream_t *s;
    presto_stream_opts_t o = opts("a");
    o.batch_size = 17;
    ck_assert_int_eq(harness_connect(&H, &p), 0);
    ck_assert_int_eq(presto_stream_open(p, &o, &s), -PRESTO_E_LIMIT);
    presto_close(p);
    /* log_level: debug is in force: streams are logged now. */
    expect_epoch("a", NSAMPLES);
    ck_assert_msg(harness_wait_log(&H, "dataset 'a' epoch 0", 2000) == 0,
                  "no debug line after log_level: debug");
    /* The same file again changes nothing but still says workers waits. */
    ck_assert_msg(reload(out, sizeof(out)) == 0, "reload: %s", out);
    ck_assert_msg(strstr(out, "\"changed\":[]"), "report: %s", out);
    ck_assert_msg(strstr(out, "\"restart_needed\":[\"workers\"]"), "report: %s", out);
}
END_TEST

START_TEST(test_drop_cache)
{
    struct harness_epoch e1, e2;
    presto_stream_opts_t o = opts("a");
    o.shuffle = 0;
    ck_assert_int_eq(harness_pull_epoch(&H, &o, &e1), 0);
    double v;
    ck_assert_int_eq(harness_wait_stat(&H, "cache", "entries", NSAMPLES, 3000, &v), 0);
    presto_t *p;
    char *report = NULL;
    ck_assert_int_eq(harness_connect(&H, &p), 0);
    ck_assert_int_eq(presto_drop_cache(p, &report), 0);
    ck_assert_msg(strstr(report, "\"entries\":30"), "report: %s", report);
    free(report);
    presto_close(p);
    ck_assert_int_eq(harness_stat(&H, "cache", "entries", &v), 0);
    ck_assert_int_eq((int)v, 0);
    ck_assert_int_eq(harness_stat(&H, "access", "cache_drops", &v), 0);
    ck_assert_int_eq((int)v, 1);
    /* Computed again, the same bytes. */
    ck_assert_int_eq(harness_pull_epoch(&H, &o, &e2), 0);
    ck_assert_uint_eq(e2.samples, NSAMPLES);
    ck_assert_uint_eq(e1.fnv, e2.fnv);
    ck_assert_int_eq(harness_wait_stat(&H, "cache", "entries", NSAMPLES, 3000, &v), 0);
}
END_TEST

/* prestoctl reload and drop-cache print the daemon's JSON. */
START_TEST(test_prestoctl)
{
    char ctl[HARNESS_PATH_MAX * 2], out[HARNESS_PATH_MAX], text[4096] = "";
    snprintf(ctl, sizeof(ctl), "%s/prestoctl", harness_env("PRESTO_BUILD", "build"));
    ck_assert_int_eq(harness_path(&H, "prestoctl.out", out, sizeof(out)), 0);
    const char *reload_argv[] = {ctl, "-s", H.sock, "reload", NULL};
    ck_assert_int_eq(harness_run(reload_argv, out, 30), 0);
    FILE *f = fopen(out, "r");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    text[n] = '\0';
    fclose(f);
    ck_assert_msg(strstr(text, "\"restart_needed\":[]"), "prestoctl reload: %s", text);
    const char *drop_argv[] = {ctl, "-s", H.sock, "drop-cache", NULL};
    ck_assert_int_eq(harness_run(drop_argv, out, 30), 0);
    f = fopen(out, "r");
    ck_assert_ptr_nonnull(f);
    n = fread(text, 1, sizeof(text) - 1, f);
    text[n] = '\0';
    fclose(f);
    ck_assert_msg(strstr(text, "\"entries\":"), "prestoctl drop-cache: %s", text);
}
END_TEST

static Suite *reload_suite(void)
{
    Suite *s = suite_create("reload");
    const struct harness_case cases[] = {
        {"adds_removes", test_reload_adds_and_removes},
        {"sighup", test_sighup_reloads},
        {"bad", test_bad_config_keeps_running_one},
        {"stream", test_stream_outlives_removal},
        {"keys", test_live_and_restart_keys},
        {"drop", test_drop_cache},
        {"prestoctl", test_prestoctl},
    };
    /* A daemon of its own for each: every one rewrites the config. */
    harness_add_cases(s, cases, sizeof(cases) / sizeof(cases[0]), daemon_setup, daemon_teardown,
                      CASE_TIMEOUT_S);
    return s;
}

int main(void)
{
    if (harness_photos_missing())
        return HARNESS_SKIP;
    if (harness_init(&H) < 0)
        return EXIT_FAILURE;
    if (harness_make_dataset(&H, "a", NSAMPLES, NCLASSES, 5, 48, 80, root_a,
                             sizeof(root_a)) < 0 ||
        harness_make_dataset(&H, "b", NSAMPLES, NCLASSES, 6, 48, 80, root_b,
                             sizeof(root_b)) < 0) {
        harness_cleanup(&H);
        return EXIT_FAILURE;
    }
    return harness_finish(&H, harness_run_suite(reload_suite()));
}
