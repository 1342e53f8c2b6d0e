/*
 * A stop during start-up (issue 15): prestod indexing a dataset whose
 * manifest sits on slow storage (tests/tools/slowfs, LATENCY_MS added to
 * every open and read: indexing takes several of them) is sent SIGTERM
 * (then, in a second run, SIGINT) before it serves. It must exit promptly
 * (within one in-flight read, not after the indexing), with status 0 and
 * a log line saying it stopped during start-up, and leave no socket
 * behind. A SIGHUP during start-up does not end it: it comes up and
 * serves.
 *
 * Skips (exit 77) with a message where FUSE is not available.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "presto.h"

#define LATENCY_MS 2000
#define NFILES 4
#define CASE_TIMEOUT_S 120

static struct harness H;
static char src[HARNESS_PATH_MAX], mnt[HARNESS_PATH_MAX];

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* prestod with one dataset, the manifest on the mount, started without
 * waiting for it (it takes a few LATENCY_MS to index). */
static void launch(void)
{
    char yaml[1024], conf[HARNESS_PATH_MAX];
    snprintf(yaml, sizeof(yaml),
             "workers: 1\n"
             "datasets:\n"
             "  - name: slow\n"
             "    root: %s/list.csv\n"
             "    steps: [decode, {resize: 32}, {center_crop: 32}]\n",
             mnt);
    ck_assert_int_eq(harness_write_file(&H, "prestod.yaml", yaml, conf, sizeof(conf)), 0);
    const char *args[] = {"-c", conf, NULL};
    ck_assert_int_eq(harness_launch(&H, args), 0);
    /* In the indexing (the log says so first): the manifest's open and
     * reads on the mount take LATENCY_MS each from here. */
    ck_assert_msg(harness_wait_log(&H, "indexing 1 datasets", 60000) == 0,
                  "prestod did not start indexing");
}

static void stop_while_indexing(int sig, const char *line)
{
    launch();
    double t0 = now_s();
    pid_t pid = H.pid;
    ck_assert_int_eq(kill(pid, sig), 0);
    int status = -1;
    /* Within the read under way (LATENCY_MS) and a margin, not the rest of
     * the indexing (the manifest's open and reads). */
    while (waitpid(pid, &status, WNOHANG) == 0 && now_s() - t0 < 30)
        usleep(20 * 1000);
    double took = now_s() - t0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        harness_print_log(&H);
    H.pid = 0;
    printf("signal %d while indexing: exited %s %d after %.2f s\n", sig,
           WIFEXITED(status) ? "with status" : "by signal",
           WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), took);
    fflush(stdout);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
    /* valgrind's prestod takes longer to deliver the signal and to exit
     * (its leak check) */
    double margin = getenv("PRESTO_VALGRIND") && *getenv("PRESTO_VALGRIND") == '1' ? 10 : 2.5;
    ck_assert_msg(took < LATENCY_MS / 1000.0 + margin, "took %.2f s", took);
    ck_assert_msg(harness_log_contains(&H, line), "no '%s' in the log", line);
    struct stat st;
    ck_assert_msg(lstat(H.sock, &st) < 0 && errno == ENOENT, "the socket %s is left", H.sock);
}

START_TEST(test_sigterm_while_indexing)
{
    stop_while_indexing(SIGTERM, "signal 15 during start-up: stopped before serving");
}
END_TEST

START_TEST(test_sigint_while_indexing)
{
    stop_while_indexing(SIGINT, "signal 2 during start-up: stopped before serving");
}
END_TEST

/* A SIGHUP during start-up is not a stop: the daemon comes up, serves,
 * and reloads once it does. */
START_TEST(test_sighup_while_indexing)
{
    launch();
    ck_assert_int_eq(kill(H.pid, SIGHUP), 0);
    presto_t *p = NULL;
    double t0 = now_s();
    int rc = -1;
    while (now_s() - t0 < 60 && harness_alive(&H)) {
        if ((rc = presto_connect(H.sock, &p)) == 0)
            break;
        if (p)
            presto_close(p);
        p = NULL;
        usleep(50 * 1000);
    }
    ck_assert_msg(rc == 0, "prestod did not come up after a SIGHUP during start-up");
    presto_close(p);
    ck_assert_int_eq(harness_wait_log(&H, "reload", 10000), 0);
    ck_assert_int_eq(harness_stop(&H), 0);
}
END_TEST

static Suite *startup_suite(void)
{
    Suite *s = suite_create("startup");
    TCase *tc = tcase_create("startup");
    tcase_set_timeout(tc, CASE_TIMEOUT_S);
    tcase_add_test(tc, test_sigterm_while_indexing);
    tcase_add_test(tc, test_sigint_while_indexing);
    tcase_add_test(tc, test_sighup_while_indexing);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    char why[512], list[HARNESS_PATH_MAX * 2];
    if (harness_init(&H) < 0)
        return 1;
    /* A few files (never decoded: the test ends before serving) and the
     * manifest listing them. */
    if (harness_path(&H, "src", src, sizeof(src)) < 0 || mkdir(src, 0755) < 0)
        return harness_finish(&H, 1);
    FILE *f = fopen((snprintf(list, sizeof(list), "%s/list.csv", src), list), "w");
    if (!f)
        return harness_finish(&H, 1);
    fputs("path,label\n", f);
    for (int i = 0; i < NFILES; i++) {
        char name[HARNESS_PATH_MAX * 2];
        fprintf(f, "s%d.jpg,%d\n", i, i % 2);
        snprintf(name, sizeof(name), "%s/s%d.jpg", src, i);
        FILE *g = fopen(name, "w");
        if (!g)
            return harness_finish(&H, 1);
        fputs("not decoded", g);
        fclose(g);
    }
    fclose(f);
    if (harness_slowfs_mount(&H, src, LATENCY_MS, mnt, sizeof(mnt), why, sizeof(why)) < 0) {
        printf("skip: FUSE is not available here: %s\n", why);
        harness_cleanup(&H);
        return HARNESS_SKIP;
    }
    int failed = harness_run_suite(startup_suite());
    harness_slowfs_unmount(mnt);
    return harness_finish(&H, failed);
}
