/*
 * Access control against a real prestod run as root: admin operations
 * (RELOAD, DROP_CACHE, WARM) from peers that really are other users, made
 * by forked children that drop to uid 65534 with chosen groups before they
 * connect; the socket's mode and group; and symbolic links that leave a
 * dataset root, planted in the tree.
 *
 * Needs root (to become other users and to chown the socket): skips
 * otherwise.
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

#define NOBODY 65534
#define ADMIN_GID 4242
#define SOCKET_GID 4243
#define OTHER_GID 4244
#define NSAMPLES 24
#define NCLASSES 2
#define CASE_TIMEOUT_S 120

static struct harness H;
static char data_root[HARNESS_PATH_MAX], outside_root[HARNESS_PATH_MAX];

/* ---- children that are someone else ---- */

/* What a child does once it is uid NOBODY: returns 0 when every step gave
 * what it should, else the number of the step that did not (its exit
 * status), after saying why on stderr. Runs in a child with uid NOBODY,
 * primary group gid and the given supplementary groups. */
static int run_as(gid_t gid, const gid_t *groups, size_t ngroups, harness_child_fn fn,
                  void *arg)
{
    int rc = harness_run_as(NOBODY, gid, groups, ngroups, fn, arg);
    ck_assert_msg(rc >= 0 && rc < 128, "the child ended with status %d", rc);
    return rc;
}

static presto_stream_opts_t opts(const char *dataset)
{
    presto_stream_opts_t o;
    presto_stream_opts_init(&o);
    o.dataset = dataset;
    o.batch_size = 5;
    return o;
}

/* Every admin operation answers want (0 or -PRESTO_E_DENIED); streaming
 * and stats work either way. */
static int admin_ops(void *arg)
{
    int want = *(const int *)arg;
    presto_t *p;
    char *json = NULL;
    int rc;
    if (presto_connect(H.sock, &p) < 0) {
        fprintf(stderr, "child: connect: %s\n", presto_errmsg(p));
        return 1;
    }
    if ((rc = presto_stats(p, &json)) < 0) {
        fprintf(stderr, "child: stats: %d %s\n", rc, presto_errmsg(p));
        return 2;
    }
    free(json);
    json = NULL;
    if ((rc = presto_reload(p, &json)) != want) {
        fprintf(stderr, "child: reload gave %d (%s), want %d\n", rc, presto_errmsg(p), want);
        return 3;
    }
    if (want < 0 && !strstr(presto_errmsg(p), "admin")) {
        fprintf(stderr, "child: the denial says '%s'\n", presto_errmsg(p));
        return 4;
    }
    free(json);
    json = NULL;
    if ((rc = presto_drop_cache(p, &json)) != want) {
        fprintf(stderr, "child: drop-cache gave %d (%s), want %d\n", rc, presto_errmsg(p),
                want);
        return 5;
    }
    free(json);
    if ((rc = presto_warm(p, "acc", NULL, NULL)) != want) {
        fprintf(stderr, "child: warm gave %d (%s), want %d\n", rc, presto_errmsg(p), want);
        return 6;
    }
    presto_close(p);
    struct harness_epoch e;
    presto_stream_opts_t o = opts("acc");
    if ((rc = harness_pull_epoch(&H, &o, &e)) < 0 || e.samples != NSAMPLES) {
        fprintf(stderr, "child: epoch: %d, %llu samples\n", rc,
                (unsigned long long)e.samples);
        return 7;
    }
    return 0;
}

/* The tests of a case share its daemon: counters are checked as growth. */
static double stat_now(const char *parent, const char *key)
{
    double v = -1;
    ck_assert_int_eq(harness_stat(&H, parent, key, &v), 0);
    return v;
}

static void expect_stat(const char *parent, const char *key, double want)
{
    double v = -1;
    int rc = harness_wait_stat(&H, parent, key, want, 3000, &v);
    ck_assert_msg(rc == 0 && v == want, "stats %s.%s = %g, want %g", parent ? parent : "",
                  key, v, want);
}

/* ---- case "admin": socket 0666, admin_group ADMIN_GID ---- */

static void admin_setup(void)
{
    char yaml[1024];
    snprintf(yaml, sizeof(yaml),
             "socket_mode: 0666\n"
             "admin_group: %d\n"
             "workers: 2\n"
             "datasets:\n"
             "  - name: acc\n"
             "    root: %s\n"
             "    steps: [decode, {resize: 32}, {center_crop: 32}]\n",
             ADMIN_GID, data_root);
    ck_assert_msg(harness_start_config(&H, yaml, NULL) == 0, "prestod did not start");
}

static void daemon_teardown(void)
{
    harness_stop_checked(&H);
}

START_TEST(test_nobody_is_denied)
{
    int want = -PRESTO_E_DENIED;
    double denied = stat_now("access", "denied");
    int rc = run_as(NOBODY, NULL, 0, admin_ops, &want);
    ck_assert_msg(rc == 0, "the unprivileged child failed at step %d", rc);
    expect_stat("access", "denied", denied + 3);
    ck_assert_msg(harness_wait_log(&H, "RELOAD denied to pid", 2000) == 0,
                  "no denial in the log");
    ck_assert_msg(harness_log_contains(&H, "uid 65534"), "the denial does not name the uid");
    /* A supplementary group that is not the admin group changes nothing. */
    gid_t other = OTHER_GID;
    rc = run_as(NOBODY, &other, 1, admin_ops, &want);
    ck_assert_msg(rc == 0, "the child in another group failed at step %d", rc);
    expect_stat("access", "denied", denied + 6);
    ck_assert(harness_alive(&H));
}
END_TEST

START_TEST(test_admin_group_member_allowed)
{
    int want = 0;
    gid_t admin = ADMIN_GID;
    double denied = stat_now("access", "denied"), reloads = stat_now("access", "reloads");
    double drops = stat_now("access", "cache_drops");
    int rc = run_as(NOBODY, &admin, 1, admin_ops, &want);
    ck_assert_msg(rc == 0, "the admin group member failed at step %d", rc);
    /* The admin group as the primary group counts as well. */
    rc = run_as(ADMIN_GID, NULL, 0, admin_ops, &want);
    ck_assert_msg(rc == 0, "the child with primary group %d failed at step %d", ADMIN_GID,
                  rc);
    expect_stat("access", "denied", denied);
    expect_stat("access", "reloads", reloads + 2);
    expect_stat("access", "cache_drops", drops + 2);
}
END_TEST

START_TEST(test_root_allowed)
{
    int want = 0;
    double denied = stat_now("access", "denied");
    ck_assert_int_eq(admin_ops(&want), 0);
    expect_stat("access", "denied", denied);
}
END_TEST

/* ---- case "socket": mode 0660, group SOCKET_GID ---- */

static void socket_setup(void)
{
    char yaml[1024];
    snprintf(yaml, sizeof(yaml),
             "socket_mode: 0660\n"
             "socket_group: %d\n"
             "workers: 1\n"
             "datasets:\n"
             "  - name: acc\n"
             "    root: %s\n"
             "    steps: [decode, {resize: 32}, {center_crop: 32}]\n",
             SOCKET_GID, data_root);
    ck_assert_msg(harness_start_config(&H, yaml, NULL) == 0, "prestod did not start");
}

/* arg: 1 when the connection must work, 0 when it must be refused. */
static int try_connect(void *arg)
{
    int want = *(const int *)arg;
    presto_t *p;
    char *json = NULL;
    int rc = presto_connect(H.sock, &p);
    if (want && (rc < 0 || presto_stats(p, &json) < 0)) {
        fprintf(stderr, "child: %s\n", presto_errmsg(p));
        return 1;
    }
    if (!want && (rc != -PRESTO_E_IO || !strstr(presto_errmsg(p), "Permission denied"))) {
        fprintf(stderr, "child: connect gave %d (%s), want a refusal\n", rc,
                presto_errmsg(p));
        return 2;
    }
    free(json);
    presto_close(p);
    return 0;
}

START_TEST(test_socket_mode_and_group)
{
    struct stat sb;
    ck_assert_int_eq(stat(H.sock, &sb), 0);
    ck_assert_uint_eq(sb.st_mode & 07777, 0660);
    ck_assert_uint_eq(sb.st_gid, SOCKET_GID);
    int refused = 0, allowed = 1;
    ck_assert_int_eq(run_as(NOBODY, NULL, 0, try_connect, &refused), 0);
    gid_t g = SOCKET_GID;
    ck_assert_int_eq(run_as(NOBODY, &g, 1, try_connect, &allowed), 0);
    /* Connecting is not administering: the socket group's member may
     * stream, and is denied the admin operations. */
    int denied = -PRESTO_E_DENIED;
    int rc = run_as(NOBODY, &g, 1, admin_ops, &denied);
    ck_assert_msg(rc == 0, "the socket group member failed at step %d", rc);
    expect_stat("access", "denied", 3);
}
END_TEST

/* ---- case "paths": links that leave a dataset root ---- */

static char links_root[HARNESS_PATH_MAX];

/* A copy of the data set (hard links) with two planted symbolic links:
 * class_00/zz_alias.jpg to a file of class_01 (inside the root) and
 * class_00/zz_evil.jpg to a JPEG outside the root. */
static void plant_links(void)
{
    char cmd[HARNESS_PATH_MAX * 4], target[HARNESS_PATH_MAX * 2], link[HARNESS_PATH_MAX * 2];
    ck_assert_int_eq(harness_path(&H, "links", links_root, sizeof(links_root)), 0);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s' && cp -al '%s' '%s'", links_root, data_root,
             links_root);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(link, sizeof(link), "%s/class_00/zz_alias.jpg", links_root);
    ck_assert_int_eq(symlink("../class_01/img_00001.jpg", link), 0);
    snprintf(target, sizeof(target), "%s/class_00/img_00000.jpg", outside_root);
    snprintf(link, sizeof(link), "%s/class_00/zz_evil.jpg", links_root);
    ck_assert_int_eq(symlink(target, link), 0);
}

static char swap_root[HARNESS_PATH_MAX];

static void paths_setup(void)
{
    char yaml[4096], cmd[HARNESS_PATH_MAX * 4];
    plant_links();
    /* A plain copy, one of whose files becomes a link after indexing. */
    ck_assert_int_eq(harness_path(&H, "swap", swap_root, sizeof(swap_root)), 0);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s' && cp -al '%s' '%s'", swap_root, data_root,
             swap_root);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(yaml, sizeof(yaml),
             "workers: 2\n"
             "datasets:\n"
             "  - name: links\n"
             "    root: %s\n"
             "    steps: [decode, {resize: 32}, {center_crop: 32}]\n"
             "  - name: trusting\n"
             "    root: %s\n"
             "    steps: [decode, {resize: 32}, {center_crop: 32}]\n"
             "    follow_symlinks: true\n"
             "  - name: swap\n"
             "    root: %s\n"
             "    steps: [decode, {resize: 32}, {center_crop: 32}]\n"
             "    on_error: fail\n",
             links_root, links_root, swap_root);
    ck_assert_msg(harness_start_config(&H, yaml, NULL) == 0, "prestod did not start");
}

START_TEST(test_link_leaving_root_refused)
{
    char *json = NULL;
    /* links: the 24 files and the alias; trusting: the evil link as well. */
    ck_assert_int_eq(harness_stats(&H, &json), 0);
    const char *links = strstr(json, "\"name\":\"links\"");
    const char *trusting = strstr(json, "\"name\":\"trusting\"");
    ck_assert_ptr_nonnull(links);
    ck_assert_ptr_nonnull(trusting);
    double v;
    ck_assert_int_eq(harness_json_number(links, NULL, "samples", &v), 0);
    ck_assert_int_eq((int)v, NSAMPLES + 1);
    ck_assert_int_eq(harness_json_number(links, NULL, "refused", &v), 0);
    ck_assert_int_eq((int)v, 1);
    ck_assert_int_eq(harness_json_number(trusting, NULL, "samples", &v), 0);
    ck_assert_int_eq((int)v, NSAMPLES + 2);
    ck_assert_int_eq(harness_json_number(trusting, NULL, "refused", &v), 0);
    ck_assert_int_eq((int)v, 0);
    free(json);
    ck_assert_msg(harness_log_contains(&H, "zz_evil.jpg: a symbolic link that leaves the root"),
                  "the refused link is not in the log");

    /* The refused link is never read: the epoch is the other 25. */
    struct harness_epoch e;
    presto_stream_opts_t o = opts("links");
    ck_assert_int_eq(harness_pull_epoch(&H, &o, &e), 0);
    ck_assert_uint_eq(e.samples, NSAMPLES + 1);
    ck_assert_uint_eq(e.skipped, 0);
    /* follow_symlinks: true serves both links. */
    o = opts("trusting");
    ck_assert_int_eq(harness_pull_epoch(&H, &o, &e), 0);
    ck_assert_uint_eq(e.samples, NSAMPLES + 2);
    ck_assert_uint_eq(e.skipped, 0);
}
END_TEST

/* A file swapped for a link out of the root after indexing: the read
 * (io_uring's OPENAT2 with RESOLVE_BENEATH, else the worker's open) is
 * refused, and the stream's error says the path leaves the dataset root,
 * not the errno's "Invalid cross-device link". */
START_TEST(test_link_swapped_after_indexing)
{
    char file[HARNESS_PATH_MAX * 2], target[HARNESS_PATH_MAX * 2];
    snprintf(file, sizeof(file), "%s/class_00/img_00000.jpg", swap_root);
    snprintf(target, sizeof(target), "%s/class_00/img_00000.jpg", outside_root);
    ck_assert_int_eq(unlink(file), 0);
    ck_assert_int_eq(symlink(target, file), 0);
    presto_t *p;
    presto_stream_t *st;
    presto_batch_t b;
    presto_stream_opts_t o = opts("swap");
    o.shuffle = 0;
    ck_assert_int_eq(harness_connect(&H, &p), 0);
    ck_assert_int_eq(presto_stream_open(p, &o, &st), 0);
    int rc;
    while ((rc = presto_next(st, &b)) > 0)
        presto_release(st, &b);
    ck_assert_int_eq(rc, -PRESTO_E_SAMPLE);
    const char *msg = presto_stream_errmsg(st);
    ck_assert_msg(strstr(msg, "img_00000.jpg") && strstr(msg, "leaves the dataset root") &&
                  !strstr(msg, "cross-device"), "the stream failed with '%s'", msg);
    presto_stream_close(st);
    presto_close(p);
}
END_TEST

static TCase *daemon_case(const char *name, void (*setup)(void))
{
    return harness_tcase(name, setup, daemon_teardown, CASE_TIMEOUT_S);
}

static Suite *access_suite(void)
{
    Suite *s = suite_create("access");
    TCase *tc = daemon_case("admin", admin_setup);
    tcase_add_test(tc, test_nobody_is_denied);
    tcase_add_test(tc, test_admin_group_member_allowed);
    tcase_add_test(tc, test_root_allowed);
    suite_add_tcase(s, tc);
    tc = daemon_case("socket", socket_setup);
    tcase_add_test(tc, test_socket_mode_and_group);
    suite_add_tcase(s, tc);
    tc = daemon_case("paths", paths_setup);
    tcase_add_test(tc, test_link_leaving_root_refused);
    tcase_add_test(tc, test_link_swapped_after_indexing);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    /* Others must reach the socket in it; the data stay the daemon's. */
    int rc = harness_init_for_others(&H);
    if (rc != 0)
        return rc == HARNESS_SKIP ? rc : EXIT_FAILURE;
    rc = harness_make_dataset(&H, "acc", NSAMPLES, NCLASSES, 3, 48, 80, data_root,
                              sizeof(data_root));
    if (rc == 0)
        rc = harness_make_dataset(&H, "outside", 2, 1, 4, 48, 80, outside_root,
                                  sizeof(outside_root));
    if (rc < 0) {
        harness_cleanup(&H);
        return EXIT_FAILURE;
    }
    return harness_finish(&H, harness_run_suite(access_suite()));
}
