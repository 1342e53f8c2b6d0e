/* Unit tests for daemon/access.h: the admin rule, peer credentials read
 * from a real socket pair, the denial log's rate limit, and opening files
 * below a root (real files and symbolic links in a temporary directory). */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access.h"
#include "log.h"

START_TEST(test_admin_rule)
{
    gid_t groups[] = {10, 20};
    struct access_peer p = {.pid = 1, .uid = 1000, .gid = 100, .ngroups = 2, .groups = groups};
    ck_assert_int_eq(access_is_admin(&p, 999, ACCESS_NO_GROUP), 0);
    ck_assert_int_eq(access_is_admin(&p, 1000, ACCESS_NO_GROUP), 1); /* the daemon's user */
    ck_assert_int_eq(access_is_admin(&p, 999, 100), 1);              /* primary group */
    ck_assert_int_eq(access_is_admin(&p, 999, 20), 1);               /* supplementary */
    ck_assert_int_eq(access_is_admin(&p, 999, 30), 0);
    p.uid = 0;
    ck_assert_int_eq(access_is_admin(&p, 999, ACCESS_NO_GROUP), 1); /* root */
    p.uid = (uid_t)-1; /* credentials unknown: no one */
    ck_assert_int_eq(access_is_admin(&p, (uid_t)-1, 20), 0);
    ck_assert_int_eq(access_in_group(&p, 10), 1);
    ck_assert_int_eq(access_in_group(&p, 11), 0);
}
END_TEST

START_TEST(test_peer_of_socketpair)
{
    int sv[2];
    struct access_peer p;
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ck_assert_int_eq(access_peer_read(sv[0], &p), 0);
    ck_assert_int_eq(p.pid, getpid());
    ck_assert_uint_eq(p.uid, geteuid());
    ck_assert_uint_eq(p.gid, getegid());
    ck_assert_int_eq(p.source, ACCESS_GROUPS_PEERGROUPS);
    gid_t mine[256];
    int n = getgroups(256, mine);
    ck_assert_int_ge(n, 0);
    ck_assert_uint_eq(p.ngroups, (uint32_t)n);
    for (int i = 0; i < n; i++)
        ck_assert(access_in_group(&p, mine[i]));
    access_peer_free(&p);
    close(sv[0]);
    close(sv[1]);
    /* Not a socket: an error, and a peer that is no one. */
    int fd = open("/dev/null", O_RDONLY);
    ck_assert_int_lt(access_peer_read(fd, &p), 0);
    ck_assert_uint_eq(p.uid, (uid_t)-1);
    ck_assert_int_eq(access_is_admin(&p, (uid_t)-1, ACCESS_NO_GROUP), 0);
    access_peer_free(&p);
    close(fd);
}
END_TEST

START_TEST(test_denials_rate_limited)
{
    struct access_log l = {0, 0};
    struct access_peer p = {.pid = 2, .uid = 7, .gid = 7};
    log_set_level(LOG_LEVEL_ERROR); /* the lines themselves are not the point */
    access_log_denied(&l, &p, "RELOAD", 0, ACCESS_NO_GROUP);
    ck_assert_uint_gt(l.last_ns, 0);
    uint64_t first = l.last_ns;
    for (int i = 0; i < 5; i++)
        access_log_denied(&l, &p, "RELOAD", 0, ACCESS_NO_GROUP);
    ck_assert_uint_eq(l.suppressed, 5);
    ck_assert_uint_eq(l.last_ns, first);
    l.last_ns -= 2000000000ull; /* a second and more later: logged, with the count */
    access_log_denied(&l, &p, "RELOAD", 0, 42);
    ck_assert_uint_eq(l.suppressed, 0);
    ck_assert_uint_gt(l.last_ns, first);
}
END_TEST

/* A root with a file, links that stay inside and links that leave. */
static char base[PATH_MAX / 2], root[PATH_MAX], real_root[PATH_MAX];

static void make_file(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "x", 1), 1);
    close(fd);
}

static void tree_setup(void)
{
    char p[PATH_MAX * 2], t[PATH_MAX * 2];
    snprintf(base, sizeof(base), "%s/presto-access-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(base));
    snprintf(root, sizeof(root), "%s/root", base);
    ck_assert_int_eq(mkdir(root, 0755), 0);
    ck_assert_ptr_nonnull(realpath(root, real_root));
    snprintf(p, sizeof(p), "%s/c", root);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof(p), "%s/c/a.jpg", root);
    make_file(p);
    snprintf(p, sizeof(p), "%s/secret.jpg", base);
    make_file(p);
    snprintf(p, sizeof(p), "%s/c/rel.jpg", root);
    ck_assert_int_eq(symlink("a.jpg", p), 0);
    snprintf(p, sizeof(p), "%s/c/up.jpg", root);
    ck_assert_int_eq(symlink("../c/a.jpg", p), 0);
    snprintf(p, sizeof(p), "%s/c/abs_in.jpg", root);
    snprintf(t, sizeof(t), "%s/c/a.jpg", real_root);
    ck_assert_int_eq(symlink(t, p), 0);
    snprintf(p, sizeof(p), "%s/c/escape.jpg", root);
    ck_assert_int_eq(symlink("../../secret.jpg", p), 0);
    snprintf(p, sizeof(p), "%s/c/abs_out.jpg", root);
    snprintf(t, sizeof(t), "%s/secret.jpg", base);
    ck_assert_int_eq(symlink(t, p), 0);
    snprintf(p, sizeof(p), "%s/out", root);
    ck_assert_int_eq(symlink(base, p), 0); /* a directory link that leaves */
}

static void tree_teardown(void)
{
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", base);
}

START_TEST(test_open_beneath)
{
    static const struct {
        const char *rel;
        int want; /* 0: opens, else the negative errno */
    } cases[] = {
        {"c/a.jpg", 0},
        {"c/rel.jpg", 0},
        {"c/up.jpg", 0},
        {"c/abs_in.jpg", 0},
        {"c/escape.jpg", -EXDEV},
        {"c/abs_out.jpg", -EXDEV},
        {"out/secret.jpg", -EXDEV},
        {"../secret.jpg", -EXDEV},
        {"c/none.jpg", -ENOENT},
    };
    int dfd = open(real_root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    ck_assert_int_ge(dfd, 0);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int fd = access_open_beneath(dfd, real_root, cases[i].rel);
        if (cases[i].want == 0) {
            ck_assert_msg(fd >= 0, "%s: %s", cases[i].rel, strerror(-fd));
            char c;
            ck_assert_int_eq(read(fd, &c, 1), 1);
            close(fd);
        } else {
            ck_assert_msg(fd == cases[i].want, "%s: got %d, want %d", cases[i].rel, fd,
                          cases[i].want);
        }
    }
    close(dfd);
}
END_TEST

START_TEST(test_path_within)
{
    char p[PATH_MAX * 2];
    snprintf(p, sizeof(p), "%s/c/abs_in.jpg", root);
    ck_assert_int_eq(access_path_within(real_root, p), 1);
    snprintf(p, sizeof(p), "%s/c/escape.jpg", root);
    ck_assert_int_eq(access_path_within(real_root, p), 0);
    snprintf(p, sizeof(p), "%s/out", root);
    ck_assert_int_eq(access_path_within(real_root, p), 0);
    ck_assert_int_eq(access_path_within(real_root, real_root), 1);
    /* A sibling that shares the root's name as a prefix is outside. */
    snprintf(p, sizeof(p), "%s2", real_root);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    ck_assert_int_eq(access_path_within(real_root, p), 0);
    snprintf(p, sizeof(p), "%s/c/dangling.jpg", root);
    ck_assert_int_eq(symlink("nowhere.jpg", p), 0);
    ck_assert_int_eq(access_path_within(real_root, p), -ENOENT);
}
END_TEST

static Suite *access_suite(void)
{
    Suite *s = suite_create("access_rules");
    TCase *tc = tcase_create("peers");
    tcase_add_test(tc, test_admin_rule);
    tcase_add_test(tc, test_peer_of_socketpair);
    tcase_add_test(tc, test_denials_rate_limited);
    suite_add_tcase(s, tc);
    tc = tcase_create("paths");
    tcase_add_checked_fixture(tc, tree_setup, tree_teardown);
    tcase_add_test(tc, test_open_beneath);
    tcase_add_test(tc, test_path_within);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(access_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
