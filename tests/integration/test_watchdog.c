/*
 * systemd's watchdog (WatchdogSec= in prestod.service): with WATCHDOG_USEC
 * set, prestod sends WATCHDOG=1 to $NOTIFY_SOCKET at half that interval
 * from its event loop once it is ready, also while it streams; it does not
 * when WATCHDOG_PID names another process or WATCHDOG_USEC is unset.
 *
 * Until prestod sends pings at all this test is skipped (exit 77, "watchdog
 * pings not implemented"), unless PRESTO_EXPECT_WATCHDOG is set, which
 * makes it a failure.
 */
#include <check.h>

#include "harness.h"
#include "presto.h"
#include "sdtest.h"

#define DATASET "wd"
#define NSAMPLES 12
#define NCLASSES 2
#define READY_TIMEOUT_S 20
#define STOP_TIMEOUT_S 10
#define CASE_TIMEOUT_S 120
/* The interval systemd would pass for WatchdogSec=200ms (1 s under valgrind). */
#define WATCHDOG_USEC 200000
#define WINDOW_S 1.5

static struct harness H;
static char dataset_arg[HARNESS_PATH_MAX + 16];
static unsigned runs;

static long watchdog_usec(void)
{
    return WATCHDOG_USEC * (sd_valgrind() ? 5 : 1);
}

struct wd_result {
    int ready;         /* READY=1 arrived */
    unsigned pings;    /* WATCHDOG=1 after READY=1 */
    unsigned early;    /* WATCHDOG=1 before READY=1 */
    double max_gap_s;  /* longest time without a ping, READY=1 included */
    int puller;        /* exit status of the process that streamed meanwhile */
    int exit_status;   /* prestod's, after SIGTERM */
    char why[256];     /* what went wrong, when something did */
};

/* Pulls epochs from sock until `seconds` have passed; exit status 0 when
 * every epoch was whole. Runs in a forked child. */
static int pull_for(const char *sock, double seconds)
{
    presto_t *p = NULL;
    if (presto_connect(sock, &p) < 0)
        return 1;
    double end = sd_now() + seconds;
    while (sd_now() < end) {
        presto_stream_opts_t o;
        presto_stream_t *s;
        presto_batch_t b;
        uint64_t n = 0;
        int rc;
        presto_stream_opts_init(&o);
        o.dataset = DATASET;
        o.batch_size = 4;
        if (presto_stream_open(p, &o, &s) < 0)
            return 2;
        while ((rc = presto_next(s, &b)) > 0) {
            n += b.n;
            presto_release(s, &b);
        }
        presto_stream_close(s);
        if (rc < 0 || n != NSAMPLES)
            return 3;
    }
    presto_close(p);
    return 0;
}

/* Starts prestod with a fake NOTIFY_SOCKET and env, waits for READY=1,
 * records the pings for WINDOW_S while another process streams, then stops
 * it. Fills r; returns 0, or -1 with r->why set when the run itself failed. */
static int watchdog_run(const char *const *extra_env, int watchdog_pid, struct wd_result *r)
{
    struct sd_notify n;
    char name[64], sock[HARNESS_PATH_MAX], log[HARNESS_PATH_MAX], msg[SD_MSG_MAX];
    const char *env[8];
    size_t ne = 0;

    memset(r, 0, sizeof(*r));
    runs++;
    snprintf(name, sizeof(name), "wd-%u.sock", runs);
    if (harness_path(&H, name, sock, sizeof(sock)) < 0)
        return -1;
    snprintf(name, sizeof(name), "wd-%u.log", runs);
    if (harness_path(&H, name, log, sizeof(log)) < 0)
        return -1;
    snprintf(name, sizeof(name), "wd-%u-notify", runs);
    if (sd_notify_open(&n, &H, name, 0) < 0)
        return -1;
    env[ne++] = n.env;
    for (size_t i = 0; extra_env && extra_env[i] && ne + 1 < 8; i++)
        env[ne++] = extra_env[i];
    env[ne] = NULL;
    const char *args[] = {"-s", sock, "-d", dataset_arg, "-w", "2", NULL};
    struct sd_child c = {.args = args, .env = env, .listen_fd = -1,
                         .watchdog_pid = watchdog_pid, .log = log};
    pid_t pid = sd_spawn(&c), puller = -1;
    if (pid < 0) {
        sd_notify_close(&n);
        snprintf(r->why, sizeof(r->why), "cannot start prestod");
        return -1;
    }

    double slowdown = sd_valgrind() ? SD_VALGRIND_SLOWDOWN : 1;
    double deadline = sd_now() + READY_TIMEOUT_S * slowdown, last = 0, end = 0;
    for (;;) {
        double now = sd_now();
        if (!r->ready && now > deadline) {
            snprintf(r->why, sizeof(r->why), "no READY=1 within %.0f s",
                     READY_TIMEOUT_S * slowdown);
            break;
        }
        if (r->ready && now > end)
            break;
        int len = sd_notify_recv(&n, msg, sizeof(msg), 10);
        now = sd_now();
        if (len < 0) {
            snprintf(r->why, sizeof(r->why), "receiving: %s", strerror(-len));
            break;
        }
        if (len == 0) {
            int status;
            if (waitpid(pid, &status, WNOHANG) == pid) {
                pid = -1;
                snprintf(r->why, sizeof(r->why), "prestod exited (status %d)", status);
                break;
            }
            continue;
        }
        if (sd_msg_has(msg, "WATCHDOG=1")) {
            if (!r->ready) {
                r->early++;
            } else {
                r->pings++;
                if (now - last > r->max_gap_s)
                    r->max_gap_s = now - last;
                last = now;
            }
        }
        if (sd_msg_has(msg, "READY=1") && !r->ready) {
            r->ready = 1;
            last = now;
            end = now + WINDOW_S * slowdown;
            fflush(NULL);
            puller = fork();
            if (puller == 0)
                _exit(pull_for(sock, WINDOW_S * slowdown * 0.8));
        }
    }
    if (r->ready && end - last > r->max_gap_s)
        r->max_gap_s = end - last; /* the silence at the end counts too */
    if (puller > 0) {
        r->puller = sd_wait(puller, 30);
    }
    if (pid > 0) {
        r->exit_status = sd_stop(pid, STOP_TIMEOUT_S);
        if (r->exit_status != 0 && !r->why[0])
            snprintf(r->why, sizeof(r->why), "prestod exited with status %d after SIGTERM",
                     r->exit_status);
    }
    sd_notify_close(&n);
    if (r->why[0] || r->puller != 0)
        sd_print_file(log, "prestod log");
    return r->why[0] ? -1 : 0;
}

static void usec_env(char *buf, size_t len)
{
    snprintf(buf, len, "WATCHDOG_USEC=%ld", watchdog_usec());
}

START_TEST(test_pings_at_half_the_interval)
{
    char usec[64];
    usec_env(usec, sizeof(usec));
    const char *env[] = {usec, NULL};
    struct wd_result r;
    int rc = watchdog_run(env, 1, &r);
    ck_assert_msg(rc == 0, "%s", r.why);
    ck_assert_msg(r.puller == 0, "streaming during the window failed (status %d)", r.puller);
    double interval = watchdog_usec() / 1e6;
    unsigned want = (unsigned)(WINDOW_S / interval); /* half of the pings due */
    if (sd_valgrind())
        want = (unsigned)(WINDOW_S * SD_VALGRIND_SLOWDOWN / interval);
    ck_assert_msg(r.pings >= want,
                  "%u WATCHDOG=1 in %.1f s with WATCHDOG_USEC=%ld, want at least %u "
                  "(one every %.0f ms)", r.pings, WINDOW_S, watchdog_usec(), want,
                  interval * 500);
    ck_assert_msg(r.max_gap_s < interval,
                  "%.0f ms without WATCHDOG=1: systemd would have killed prestod "
                  "(WATCHDOG_USEC=%ld)", r.max_gap_s * 1000, watchdog_usec());
    ck_assert_msg(r.early == 0, "%u WATCHDOG=1 before READY=1", r.early);
}
END_TEST

START_TEST(test_no_pings_for_another_pid)
{
    char usec[64];
    usec_env(usec, sizeof(usec));
    const char *env[] = {usec, "WATCHDOG_PID=1", NULL};
    struct wd_result r;
    ck_assert_msg(watchdog_run(env, 0, &r) == 0, "%s", r.why);
    ck_assert_msg(r.pings == 0 && r.early == 0,
                  "%u WATCHDOG=1 although WATCHDOG_PID is another process", r.pings + r.early);
}
END_TEST

START_TEST(test_no_pings_without_watchdog_usec)
{
    struct wd_result r;
    ck_assert_msg(watchdog_run(NULL, 0, &r) == 0, "%s", r.why);
    ck_assert_msg(r.pings == 0 && r.early == 0, "%u WATCHDOG=1 without WATCHDOG_USEC",
                  r.pings + r.early);
}
END_TEST

static Suite *watchdog_suite(void)
{
    Suite *s = suite_create("watchdog");
    TCase *tc = tcase_create("watchdog");
    tcase_set_timeout(tc, CASE_TIMEOUT_S);
    tcase_add_test(tc, test_pings_at_half_the_interval);
    tcase_add_test(tc, test_no_pings_for_another_pid);
    tcase_add_test(tc, test_no_pings_without_watchdog_usec);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    char root[HARNESS_PATH_MAX], usec[64];
    if (harness_photos_missing())
        return HARNESS_SKIP;
    if (harness_init(&H) < 0)
        return EXIT_FAILURE;
    if (harness_make_dataset(&H, DATASET, NSAMPLES, NCLASSES, 5, 64, 200, root,
                             sizeof(root)) < 0) {
        harness_cleanup(&H);
        return EXIT_FAILURE;
    }
    snprintf(dataset_arg, sizeof(dataset_arg), "%s=%s", DATASET, root);

    /* Does this prestod ping at all? */
    usec_env(usec, sizeof(usec));
    const char *env[] = {usec, NULL};
    struct wd_result r;
    if (watchdog_run(env, 1, &r) < 0) {
        fprintf(stderr, "FAIL: %s\n", r.why);
        harness_cleanup(&H);
        return EXIT_FAILURE;
    }
    if (r.pings + r.early == 0 && !getenv("PRESTO_EXPECT_WATCHDOG")) {
        harness_cleanup(&H);
        printf("skip: watchdog pings not implemented (no WATCHDOG=1 in %.1f s with "
               "WATCHDOG_USEC=%ld; PRESTO_EXPECT_WATCHDOG=1 makes this a failure)\n",
               WINDOW_S, watchdog_usec());
        return HARNESS_SKIP;
    }

    int failed = harness_run_suite(watchdog_suite());
    harness_cleanup(&H);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
