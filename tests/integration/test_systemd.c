/*
 * prestod under systemd's protocols, without systemd: a fake NOTIFY_SOCKET
 * checks the readiness sequence (STATUS= during start-up, READY=1 only once
 * the socket accepts connections and the datasets are indexed, STOPPING=1
 * on SIGTERM), and a listening socket passed as fd 3 with LISTEN_FDS and
 * LISTEN_PID checks socket activation (as prestod.socket does it).
 *
 * One small data set is made once; every case starts its own prestod.
 */
#include <check.h>
#include <sys/stat.h>

#include "harness.h"
#include "presto.h"
#include "sdtest.h"

#define DATASET "sd"
#define NSAMPLES 12
#define NCLASSES 2
#define BATCH 5
#define SIDE 224
#define READY_TIMEOUT_S 20
#define STOP_TIMEOUT_S 10
#define CASE_TIMEOUT_S 120

static struct harness H;
static char data_root[HARNESS_PATH_MAX];
static char dataset_arg[HARNESS_PATH_MAX + 16];

static double slow(double s)
{
    return s * (sd_valgrind() ? SD_VALGRIND_SLOWDOWN : 1);
}

static void must_path(const char *name, char *buf, size_t len)
{
    ck_assert_int_eq(harness_path(&H, name, buf, len), 0);
}

/* "samples":N of the one dataset in the datasets JSON. */
static void expect_indexed(presto_t *p)
{
    char *json = NULL;
    double samples = -1;
    int rc = presto_datasets(p, &json);
    ck_assert_msg(rc == 0, "datasets: %s", presto_errmsg(p));
    ck_assert_int_eq(harness_json_number(json, NULL, "samples", &samples), 0);
    ck_assert_msg(samples == NSAMPLES, "the dataset has %g samples, want %d: %s", samples,
                  NSAMPLES, json);
    free(json);
}

/* Pulls one epoch through libprestoclient and checks its size and shapes. */
static void pull_epoch(presto_t *p)
{
    presto_stream_opts_t o;
    presto_stream_t *s;
    presto_batch_t b;
    uint64_t samples = 0, batches = 0;
    int rc;

    presto_stream_opts_init(&o);
    o.dataset = DATASET;
    o.batch_size = BATCH;
    rc = presto_stream_open(p, &o, &s);
    ck_assert_msg(rc == 0, "stream_open: %s", presto_errmsg(p));
    while ((rc = presto_next(s, &b)) > 0) {
        ck_assert_uint_eq(b.index, batches);
        ck_assert_uint_eq(b.h, SIDE);
        ck_assert_uint_eq(b.w, SIDE);
        ck_assert_uint_eq(b.size, (size_t)b.n * SIDE * SIDE * 3);
        for (uint32_t i = 0; i < b.n; i++)
            ck_assert(b.labels[i] >= 0 && b.labels[i] < NCLASSES);
        samples += b.n;
        batches++;
        presto_release(s, &b);
    }
    ck_assert_msg(rc == 0, "presto_next: %s", presto_stream_errmsg(s));
    ck_assert_uint_eq(samples, NSAMPLES);
    ck_assert_uint_eq(batches, (NSAMPLES + BATCH - 1) / BATCH);
    presto_stream_close(s);
}

/* Connects to path (retrying every 20 ms up to timeout_s while pid runs). */
static presto_t *wait_connect(const char *path, pid_t pid, const char *log, double timeout_s)
{
    double deadline = sd_now() + slow(timeout_s);
    for (;;) {
        presto_t *p = NULL;
        if (presto_connect(path, &p) == 0)
            return p;
        if (p)
            presto_close(p);
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            sd_print_file(log, "prestod log");
            ck_abort_msg("prestod exited during start-up (status %d)", status);
        }
        if (sd_now() > deadline) {
            sd_print_file(log, "prestod log");
            ck_abort_msg("prestod does not accept connections on %s after %.0f s", path,
                         slow(timeout_s));
        }
        sd_sleep_ms(20);
    }
}

static void expect_clean_exit(pid_t pid, const char *log)
{
    int rc = sd_stop(pid, STOP_TIMEOUT_S);
    if (rc != 0)
        sd_print_file(log, "prestod log");
    ck_assert_msg(rc == 0, "prestod exited with status %d after SIGTERM, want 0", rc);
}

/* ---- readiness ---- */

/* Starts prestod with a fake NOTIFY_SOCKET and follows the sequence. */
static void notify_sequence(int abstract)
{
    struct sd_notify n;
    char sock[HARNESS_PATH_MAX], log[HARNESS_PATH_MAX], msg[SD_MSG_MAX];
    unsigned status_before = 0;
    int ready = 0, stopping = 0;

    const char *name = abstract ? "notify-abstract" : "notify-path";
    snprintf(msg, sizeof(msg), "%s.sock", name);
    must_path(msg, sock, sizeof(sock));
    snprintf(msg, sizeof(msg), "%s.log", name);
    must_path(msg, log, sizeof(log));
    ck_assert_int_eq(sd_notify_open(&n, &H, name, abstract), 0);
    const char *args[] = {"-s", sock, "-d", dataset_arg, "-w", "2", NULL};
    const char *env[] = {n.env, NULL};
    struct sd_child c = {.args = args, .env = env, .listen_fd = -1, .log = log};
    pid_t pid = sd_spawn(&c);
    ck_assert_int_gt(pid, 0);

    double deadline = sd_now() + slow(READY_TIMEOUT_S);
    while (!ready) {
        int len = sd_notify_recv(&n, msg, sizeof(msg), 50);
        ck_assert_int_ge(len, 0);
        if (len == 0) {
            int status;
            if (waitpid(pid, &status, WNOHANG) == pid) {
                sd_print_file(log, "prestod log");
                ck_abort_msg("prestod exited before READY=1 (status %d)", status);
            }
            if (sd_now() > deadline) {
                sd_print_file(log, "prestod log");
                ck_abort_msg("no READY=1 within %.0f s", slow(READY_TIMEOUT_S));
            }
            continue;
        }
        ck_assert_msg(sd_msg_well_formed(msg), "malformed notify message '%s'", msg);
        ck_assert_msg(!sd_msg_has(msg, "STOPPING=1"), "STOPPING=1 during start-up");
        if (sd_msg_has(msg, "READY=1")) {
            /* READY=1 promises that a connection made now is served. */
            presto_t *p = NULL;
            int rc = presto_connect(sock, &p);
            ck_assert_msg(rc == 0, "READY=1 was sent, but connecting to %s fails: %s",
                          sock, presto_strerror(rc));
            expect_indexed(p);
            presto_close(p);
            ready = 1;
        } else if (strncmp(msg, "STATUS=", 7) == 0 || strstr(msg, "\nSTATUS=")) {
            status_before++;
        }
    }
    ck_assert_msg(status_before > 0, "no STATUS= message before READY=1");

    kill(pid, SIGTERM);
    deadline = sd_now() + slow(STOP_TIMEOUT_S);
    while (!stopping && sd_now() < deadline) {
        int len = sd_notify_recv(&n, msg, sizeof(msg), 50);
        ck_assert_int_ge(len, 0);
        if (len == 0)
            continue;
        ck_assert_msg(sd_msg_well_formed(msg), "malformed notify message '%s'", msg);
        ck_assert_msg(!sd_msg_has(msg, "READY=1"), "a second READY=1 ('%s')", msg);
        stopping = sd_msg_has(msg, "STOPPING=1");
    }
    ck_assert_msg(stopping, "no STOPPING=1 within %.0f s of SIGTERM", slow(STOP_TIMEOUT_S));
    int rc = sd_wait(pid, STOP_TIMEOUT_S);
    if (rc != 0)
        sd_print_file(log, "prestod log");
    ck_assert_msg(rc == 0, "prestod exited with status %d after SIGTERM, want 0", rc);
    sd_notify_close(&n);
}

START_TEST(test_notify_sequence)
{
    notify_sequence(0);
}
END_TEST

START_TEST(test_notify_abstract_socket)
{
    notify_sequence(1);
}
END_TEST

/* A NOTIFY_SOCKET nobody listens on is not prestod's problem. */
START_TEST(test_notify_socket_gone)
{
    char sock[HARNESS_PATH_MAX], log[HARNESS_PATH_MAX], env0[HARNESS_PATH_MAX + 64];
    must_path("gone.sock", sock, sizeof(sock));
    must_path("gone.log", log, sizeof(log));
    snprintf(env0, sizeof(env0), "NOTIFY_SOCKET=%s/no-such-notify-socket", H.dir);
    const char *args[] = {"-s", sock, "-d", dataset_arg, "-w", "1", NULL};
    const char *env[] = {env0, NULL};
    struct sd_child c = {.args = args, .env = env, .listen_fd = -1, .log = log};
    pid_t pid = sd_spawn(&c);
    ck_assert_int_gt(pid, 0);
    presto_t *p = wait_connect(sock, pid, log, READY_TIMEOUT_S);
    expect_indexed(p);
    presto_close(p);
    expect_clean_exit(pid, log);
}
END_TEST

/* ---- socket activation ---- */

START_TEST(test_socket_activation)
{
    char sock[HARNESS_PATH_MAX], unused[HARNESS_PATH_MAX], log[HARNESS_PATH_MAX];
    char env0[HARNESS_PATH_MAX + 32];
    struct stat st;

    must_path("activated.sock", sock, sizeof(sock));
    must_path("default.sock", unused, sizeof(unused));
    must_path("activated.log", log, sizeof(log));
    /* Without -s prestod would bind its default path: point it into the
     * test's directory, to check that it does not. */
    snprintf(env0, sizeof(env0), "PRESTO_SOCKET=%s", unused);
    int lfd = sd_listen(sock);
    ck_assert_int_ge(lfd, 0);
    const char *args[] = {"-d", dataset_arg, "-w", "2", NULL};
    const char *env[] = {env0, NULL};
    struct sd_child c = {.args = args, .env = env, .listen_fd = lfd, .log = log};
    pid_t pid = sd_spawn(&c);
    ck_assert_int_gt(pid, 0);
    close(lfd); /* prestod holds the only copy now, as with systemd */

    presto_t *p = wait_connect(sock, pid, log, READY_TIMEOUT_S);
    char *json = NULL;
    double spid = 0;
    ck_assert_msg(presto_stats(p, &json) == 0, "stats: %s", presto_errmsg(p));
    ck_assert_int_eq(harness_json_number(json, NULL, "pid", &spid), 0);
    free(json);
    ck_assert_msg(spid == pid, "the passed socket is served by pid %g, not %d", spid,
                  (int)pid);
    expect_indexed(p);
    pull_epoch(p);
    presto_close(p);
    ck_assert_msg(stat(unused, &st) != 0 && errno == ENOENT,
                  "prestod bound %s although it was passed a socket", unused);

    expect_clean_exit(pid, log);
    /* The socket belongs to whoever passed it (systemd): left in place. */
    ck_assert_msg(stat(sock, &st) == 0 && S_ISSOCK(st.st_mode),
                  "prestod removed the socket file it was passed");
}
END_TEST

/* LISTEN_PID names another process: the fds are not for prestod. */
START_TEST(test_listen_pid_mismatch)
{
    char passed[HARNESS_PATH_MAX], own[HARNESS_PATH_MAX], log[HARNESS_PATH_MAX];
    must_path("passed.sock", passed, sizeof(passed));
    must_path("own.sock", own, sizeof(own));
    must_path("mismatch.log", log, sizeof(log));
    int lfd = sd_listen(passed);
    ck_assert_int_ge(lfd, 0);
    const char *args[] = {"-s", own, "-d", dataset_arg, "-w", "1", NULL};
    const char *env[] = {"LISTEN_PID=1", NULL}; /* overrides the child's own pid */
    struct sd_child c = {.args = args, .env = env, .listen_fd = lfd, .log = log};
    pid_t pid = sd_spawn(&c);
    ck_assert_int_gt(pid, 0);
    close(lfd);
    presto_t *p = wait_connect(own, pid, log, READY_TIMEOUT_S);
    expect_indexed(p);
    presto_close(p);
    expect_clean_exit(pid, log);
}
END_TEST

static Suite *systemd_suite(void)
{
    Suite *s = suite_create("systemd");
    TCase *tc = tcase_create("notify");
    tcase_set_timeout(tc, CASE_TIMEOUT_S);
    tcase_add_test(tc, test_notify_sequence);
    tcase_add_test(tc, test_notify_abstract_socket);
    tcase_add_test(tc, test_notify_socket_gone);
    suite_add_tcase(s, tc);

    tc = tcase_create("activation");
    tcase_set_timeout(tc, CASE_TIMEOUT_S);
    tcase_add_test(tc, test_socket_activation);
    tcase_add_test(tc, test_listen_pid_mismatch);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    if (harness_photos_missing())
        return HARNESS_SKIP;
    if (harness_init(&H) < 0)
        return EXIT_FAILURE;
    if (harness_make_dataset(&H, DATASET, NSAMPLES, NCLASSES, 3, 64, 200, data_root,
                             sizeof(data_root)) < 0) {
        harness_cleanup(&H);
        return EXIT_FAILURE;
    }
    snprintf(dataset_arg, sizeof(dataset_arg), "%s=%s", DATASET, data_root);

    int failed = harness_run_suite(systemd_suite());
    harness_cleanup(&H);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
