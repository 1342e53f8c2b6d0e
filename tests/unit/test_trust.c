/*
 * trust_open_dir (common/trust.h) and the cache directory's file rules
 * (daemon/cachedir.h) on a real file system: trusted and untrusted owners
 * and modes, sticky directories, symbolic links of the user and of others,
 * "..", missing directories made or reported, and links planted under a
 * trial directory's name removed without their targets being touched.
 *
 * The other owner is uid 65534 (chown), so those checks need root; as
 * another user they are skipped, the rest runs.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cachedir.h"
#include "log.h"
#include "trust.h"

#define OTHER 65534

static char tdir[256];

static void rm_tree(const char *path)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
    ck_assert_int_eq(system(cmd), 0);
}

static void setup(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(tdir, sizeof(tdir), "%s/presto-trust-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(tdir));
}

static void teardown(void)
{
    rm_tree(tdir);
}

/* tdir/rel into buf. */
static const char *at(char *buf, const char *rel)
{
    snprintf(buf, PATH_MAX, "%s/%s", tdir, rel);
    return buf;
}

static void mkdir_mode(const char *rel, mode_t mode)
{
    char p[PATH_MAX];
    ck_assert_int_eq(mkdir(at(p, rel), 0700), 0);
    ck_assert_int_eq(chmod(p, mode), 0);
}

/* trust_open_dir(tdir/rel) as the daemon asks it of its cache directory:
 * its return (a descriptor is closed, 0 returned), the reason in why. */
static int open_as_cache(const char *rel, unsigned extra, char *why, size_t len)
{
    char p[PATH_MAX];
    struct trust_opts o = {geteuid(), TRUST_STICKY_OK | TRUST_OWNER_EXACT | extra, 0750};
    int fd = trust_open_dir(at(p, rel), &o, why, len);
    if (fd >= 0)
        close(fd);
    return fd < 0 ? fd : 0;
}

static int is_root(void)
{
    return geteuid() == 0;
}

START_TEST(test_trusted_paths)
{
    char why[512], p[PATH_MAX], q[PATH_MAX];
    mkdir_mode("a", 0755);
    mkdir_mode("a/b", 0700);
    ck_assert_int_eq(open_as_cache("a/b", 0, why, sizeof(why)), 0);
    ck_assert_int_eq(open_as_cache("a/./b/../b/", 0, why, sizeof(why)), 0);
    /* A link of the user's own is followed, relative or absolute. */
    ck_assert_int_eq(symlink("a/b", at(p, "rel")), 0);
    ck_assert_int_eq(symlink(at(q, "a"), at(p, "abs")), 0);
    ck_assert_int_eq(open_as_cache("rel", 0, why, sizeof(why)), 0);
    ck_assert_int_eq(open_as_cache("abs/b", 0, why, sizeof(why)), 0);
    /* "..": the parent of where a link led, as the kernel resolves it. */
    ck_assert_int_eq(open_as_cache("rel/../b", 0, why, sizeof(why)), 0);
    /* Missing: -ENOENT, or made with the mode asked. */
    ck_assert_int_eq(open_as_cache("a/b/c/d", 0, why, sizeof(why)), -ENOENT);
    ck_assert_msg(strstr(why, "/a/b/c: No such file") != NULL, "%s", why);
    ck_assert_int_eq(open_as_cache("a/b/c/d", TRUST_CREATE, why, sizeof(why)), 0);
    struct stat sb;
    ck_assert_int_eq(stat(at(p, "a/b/c/d"), &sb), 0);
    mode_t um = umask(0);
    umask(um);
    ck_assert_uint_eq(sb.st_mode & 07777, 0750 & ~um);
    /* A file on the way, a loop of links. */
    ck_assert_int_eq(close(open(at(p, "a/file"), O_CREAT | O_WRONLY, 0600)), 0);
    ck_assert_int_eq(open_as_cache("a/file/x", TRUST_CREATE, why, sizeof(why)), -ENOTDIR);
    ck_assert_int_eq(symlink("loop", at(p, "loop")), 0);
    ck_assert_int_eq(open_as_cache("loop", 0, why, sizeof(why)), -ELOOP);
}
END_TEST

START_TEST(test_modes)
{
    char why[512];
    mkdir_mode("open", 0777);
    mkdir_mode("group", 0770);
    mkdir_mode("tmp", 01777);
    mkdir_mode("tmp/mine", 0700);
    mkdir_mode("open/mine", 0700);
    ck_assert_int_eq(open_as_cache("open", 0, why, sizeof(why)), -EPERM);
    ck_assert_msg(strstr(why, "writable by others (mode 0777)") != NULL, "%s", why);
    ck_assert_int_eq(open_as_cache("group", 0, why, sizeof(why)), -EPERM);
    ck_assert_msg(strstr(why, "writable by its group") != NULL, "%s", why);
    /* Below an open directory: another user could swap what is below. */
    ck_assert_int_eq(open_as_cache("open/mine", 0, why, sizeof(why)), -EPERM);
    /* A sticky one on the way is fine (its entries are their owners'), as
     * the last one it is not. */
    ck_assert_int_eq(open_as_cache("tmp/mine", 0, why, sizeof(why)), 0);
    ck_assert_int_eq(open_as_cache("tmp", 0, why, sizeof(why)), -EPERM);
    /* The client's rule: no sticky directory on the way either. */
    char p[PATH_MAX];
    struct trust_opts o = {geteuid(), TRUST_OWNER_EXACT, 0};
    ck_assert_int_eq(trust_open_dir(at(p, "tmp/mine"), &o, why, sizeof(why)), -EPERM);
    ck_assert_msg(strstr(why, "tmp is writable by others (mode 1777)") != NULL, "%s", why);
}
END_TEST

START_TEST(test_other_owners)
{
    char why[512], p[PATH_MAX], q[PATH_MAX];
    if (!is_root()) {
        printf("test_other_owners: skipped (needs root to chown)\n");
        return;
    }
    mkdir_mode("theirs", 0755);
    ck_assert_int_eq(chown(at(p, "theirs"), OTHER, OTHER), 0);
    mkdir_mode("theirs/mine", 0700);
    mkdir_mode("tmp", 01777);
    mkdir_mode("tmp/squat", 0755);
    ck_assert_int_eq(chown(at(p, "tmp/squat"), OTHER, OTHER), 0);
    mkdir_mode("mine", 0700);
    ck_assert_int_eq(open_as_cache("theirs", 0, why, sizeof(why)), -EPERM);
    ck_assert_msg(strstr(why, "belongs to uid 65534") != NULL, "%s", why);
    ck_assert_int_eq(open_as_cache("theirs/mine", 0, why, sizeof(why)), -EPERM);
    /* A directory squatted in a sticky one: refused for the daemon... */
    ck_assert_int_eq(open_as_cache("tmp/squat", TRUST_CREATE, why, sizeof(why)), -EPERM);
    /* ...and so is a link there of another user, wherever it leads. */
    ck_assert_int_eq(symlink(at(q, "mine"), at(p, "tmp/link")), 0);
    ck_assert_int_eq(lchown(p, OTHER, OTHER), 0);
    ck_assert_int_eq(open_as_cache("tmp/link", 0, why, sizeof(why)), -EPERM);
    ck_assert_msg(strstr(why, "symbolic link of uid 65534") != NULL, "%s", why);
    /* For its owner, the squatted directory is that user's alone... */
    struct trust_opts o = {OTHER, TRUST_STICKY_OK | TRUST_OWNER_EXACT, 0};
    int fd = trust_open_dir(at(p, "tmp/squat"), &o, why, sizeof(why));
    ck_assert_int_ge(fd, 0);
    close(fd);
    /* ...but not where only root's entries count in a sticky directory (the
     * client's rule: anyone can make a directory named like another's)... */
    o.flags = TRUST_OWNER_EXACT | TRUST_STICKY_ROOT;
    ck_assert_int_eq(trust_open_dir(at(p, "tmp/squat"), &o, why, sizeof(why)), -EPERM);
    ck_assert_msg(strstr(why, "squat belongs to uid 65534, in a directory anyone may write"),
                  "%s", why);
    ck_assert_int_eq(trust_open_dir(at(p, "tmp/link"), &o, why, sizeof(why)), -EPERM);
    /* ...where a directory of that user's in one of root's is its own. */
    mkdir_mode("mine/theirs", 0755);
    ck_assert_int_eq(chown(at(p, "mine/theirs"), OTHER, OTHER), 0);
    fd = trust_open_dir(at(p, "mine/theirs"), &o, why, sizeof(why));
    ck_assert_msg(fd >= 0, "%s", why);
    close(fd);
    /* TRUST_OWNER_EXACT: root's own directory is not the user's; without
     * it, root's is as good. */
    o.flags = TRUST_STICKY_OK | TRUST_OWNER_EXACT;
    ck_assert_int_eq(trust_open_dir(at(p, "mine"), &o, why, sizeof(why)), -EPERM);
    o.flags = TRUST_STICKY_OK;
    fd = trust_open_dir(at(p, "mine"), &o, why, sizeof(why));
    ck_assert_msg(fd >= 0, "%d %s", fd, why);
    close(fd);
}
END_TEST

/* Writes text to tdir/rel, mode 0600. */
static void write_text(const char *rel, const char *text)
{
    char p[PATH_MAX];
    FILE *f = fopen(at(p, rel), "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_int_eq(chmod(p, 0600), 0);
}

START_TEST(test_cachedir_files)
{
    char err[512], p[PATH_MAX], q[PATH_MAX];
    mkdir_mode("cache", 0750);
    mkdir_mode("secret", 0700);
    write_text("secret/a", "a");
    write_text("secret/b", "b");
    write_text("victim", "precious");
    int dfd = cachedir_open(at(p, "cache"), 0, err, sizeof(err));
    ck_assert_msg(dfd >= 0, "%s", err);
    /* Files: links and non-files refused, never followed. */
    ck_assert_int_eq(symlink(at(q, "victim"), at(p, "cache/link")), 0);
    ck_assert_int_eq(cachedir_open_file(dfd, "link", O_RDWR, 0), -ELOOP);
    ck_assert_int_eq(cachedir_open_file(dfd, "link", O_RDWR | O_CREAT | O_EXCL, 0640), -EEXIST);
    ck_assert_int_eq(link(at(q, "victim"), at(p, "cache/hard")), 0);
    ck_assert_int_eq(cachedir_open_file(dfd, "hard", O_RDWR, 0), -EPERM);
    ck_assert_int_eq(mkfifo(at(p, "cache/fifo"), 0600), 0);
    ck_assert_int_eq(cachedir_open_file(dfd, "fifo", O_RDONLY, 0), -EINVAL);
    int fd = cachedir_open_file(dfd, "new", O_RDWR | O_CREAT | O_EXCL, 0640);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
    close(fd);
    /* Removal by name: a link under a trial directory's name goes, its
     * target directory keeps its files; a real one is emptied and goes. */
    ck_assert_int_eq(symlink(at(q, "secret"), at(p, "cache/profile-trial-999999")), 0);
    ck_assert_int_eq(cachedir_remove_dir(dfd, "profile-trial-999999"), 1);
    ck_assert_int_eq(access(at(p, "secret/a"), F_OK), 0);
    ck_assert_int_eq(access(at(p, "secret/b"), F_OK), 0);
    mkdir_mode("cache/trial", 0750);
    write_text("cache/trial/seg-000001.dat", "x");
    ck_assert_int_eq(symlink(at(q, "secret/a"), at(p, "cache/trial/seg-000002.dat")), 0);
    ck_assert_int_eq(cachedir_remove_dir(dfd, "trial"), 0);
    ck_assert_int_eq(access(at(p, "cache/trial"), F_OK), -1);
    ck_assert_int_eq(access(at(p, "secret/a"), F_OK), 0);
    close(dfd);
    char buf[16] = "";
    FILE *f = fopen(at(p, "victim"), "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fread(buf, 1, sizeof(buf) - 1, f), 8);
    fclose(f);
    ck_assert_str_eq(buf, "precious");
    /* cachedir_check: untrusted refuses, missing under trusted is fine. */
    mkdir_mode("open", 0777);
    ck_assert_int_eq(cachedir_check(at(p, "open"), err, sizeof(err)), -EPERM);
    ck_assert_msg(strstr(err, "cache.dir ") && strstr(err, "only the daemon's user and root"),
                  "%s", err);
    ck_assert_int_eq(cachedir_check(at(p, "cache/not/yet"), err, sizeof(err)), 0);
    ck_assert_int_eq(cachedir_check(at(p, "open/not/yet"), err, sizeof(err)), -EPERM);
}
END_TEST

int main(void)
{
    log_set_level(LOG_LEVEL_ERROR);
    Suite *s = suite_create("trust");
    TCase *tc = tcase_create("trust");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_trusted_paths);
    tcase_add_test(tc, test_modes);
    tcase_add_test(tc, test_other_owners);
    tcase_add_test(tc, test_cachedir_files);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
