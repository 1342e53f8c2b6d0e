/*
 * The systemd units and the sysusers snippet in systemd/, checked with the
 * host's systemd tools (no running systemd needed):
 *   - `systemd-analyze verify` accepts prestod.service and prestod.socket
 *     without a warning (ExecStart pointed at $PRESTO_BUILD/prestod, since
 *     verify checks that the binary exists);
 *   - `systemd-analyze security --offline` rates the service's exposure at
 *     most MAX_EXPOSURE (tenths: 15 = 1.5 of 10);
 *   - `systemd-sysusers --root` creates the user and group the units name;
 *   - the units agree with each other and with the daemon: the socket path,
 *     user and group, runtime directory, config path, Type=notify.
 * Skipped (exit 77) where systemd-analyze (with security --offline, systemd
 * 250 or later) or systemd-sysusers is missing.
 */
#include <check.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"

#define MAX_EXPOSURE "15"
#define VALUE_MAX 512

static struct harness H;
static char src_unit[HARNESS_PATH_MAX * 2], src_socket[HARNESS_PATH_MAX * 2];
static char src_sysusers[HARNESS_PATH_MAX * 2];

/* The last value of key= in a unit file (sections are not told apart: the
 * keys checked here are unique in each file). Returns 0 or -ENOENT. */
static int unit_value(const char *path, const char *key, char *out, size_t len)
{
    char line[1024];
    size_t klen = strlen(key);
    int found = -ENOENT;
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, key, klen) != 0 || line[klen] != '=')
            continue;
        line[strcspn(line, "\n")] = '\0';
        snprintf(out, len, "%s", line + klen + 1);
        found = 0;
    }
    fclose(f);
    return found;
}

static void expect_value(const char *path, const char *key, const char *want)
{
    char v[VALUE_MAX];
    ck_assert_msg(unit_value(path, key, v, sizeof(v)) == 0, "%s: no %s=", path, key);
    ck_assert_msg(strcmp(v, want) == 0, "%s: %s=%s, want %s", path, key, v, want);
}

/* Copies the units to h->dir/units/ with ExecStart's binary replaced by
 * the build's prestod; the service's path goes to service. */
static void stage_units(char *service, size_t len)
{
    char dir[HARNESS_PATH_MAX], socket[HARNESS_PATH_MAX * 2], prestod[PATH_MAX];
    char line[1024], v[VALUE_MAX];
    ck_assert_int_eq(harness_path(&H, "units", dir, sizeof(dir)), 0);
    mkdir(dir, 0755);
    ck_assert_msg(realpath(harness_env("PRESTO_BUILD", "build"), prestod) != NULL,
                  "PRESTO_BUILD: %s", strerror(errno));
    strncat(prestod, "/prestod", sizeof(prestod) - strlen(prestod) - 1);
    ck_assert_int_eq(unit_value(src_unit, "ExecStart", v, sizeof(v)), 0);
    size_t bin = strcspn(v, " ");

    snprintf(service, len, "%s/prestod.service", dir);
    FILE *in = fopen(src_unit, "r"), *out = fopen(service, "w");
    ck_assert(in && out);
    while (fgets(line, sizeof(line), in)) {
        if (strncmp(line, "ExecStart=", 10) == 0)
            fprintf(out, "ExecStart=%s%s", prestod, line + 10 + bin);
        else
            fputs(line, out);
    }
    fclose(in);
    ck_assert_int_eq(fclose(out), 0);

    snprintf(socket, sizeof(socket), "%s/prestod.socket", dir);
    in = fopen(src_socket, "r");
    out = fopen(socket, "w");
    ck_assert(in && out);
    while (fgets(line, sizeof(line), in))
        fputs(line, out);
    fclose(in);
    ck_assert_int_eq(fclose(out), 0);
}

/* Runs argv with output to h->dir/name; returns the status, and whether
 * it printed anything in *printed (NULL: output expected). The output goes
 * to stderr when the status is not 0, or when it printed and should not. */
static int run_quiet(const char *const *argv, const char *name, int *printed)
{
    int dummy;
    char out[HARNESS_PATH_MAX];
    struct stat st;
    ck_assert_int_eq(harness_path(&H, name, out, sizeof(out)), 0);
    int rc = harness_run(argv, out, 120), quiet = printed != NULL;
    if (!printed)
        printed = &dummy;
    *printed = stat(out, &st) == 0 && st.st_size > 0;
    if (rc != 0 || (quiet && *printed)) {
        FILE *f = fopen(out, "r");
        char line[1024];
        fprintf(stderr, "---- %s ----\n", argv[0]);
        while (f && fgets(line, sizeof(line), f))
            fputs(line, stderr);
        if (f)
            fclose(f);
    }
    return rc;
}

START_TEST(test_verify)
{
    char service[HARNESS_PATH_MAX * 2], socket[HARNESS_PATH_MAX * 2];
    int printed;
    stage_units(service, sizeof(service));
    snprintf(socket, sizeof(socket), "%.*s.socket", (int)(strlen(service) - 8), service);
    const char *argv[] = {"systemd-analyze", "verify", "--man=no", service, socket, NULL};
    int rc = run_quiet(argv, "verify.out", &printed);
    ck_assert_msg(rc == 0, "systemd-analyze verify failed (status %d)", rc);
    ck_assert_msg(!printed, "systemd-analyze verify warns about the units (above)");
}
END_TEST

START_TEST(test_security_exposure)
{
    char service[HARNESS_PATH_MAX * 2];
    stage_units(service, sizeof(service));
    const char *argv[] = {"systemd-analyze", "security", "--offline=true", "--no-pager",
                          "--threshold=" MAX_EXPOSURE, service, NULL};
    int rc = run_quiet(argv, "security.out", NULL);
    ck_assert_msg(rc == 0, "exposure level over %s tenths (status %d): hardening was lost "
                  "(report above)", MAX_EXPOSURE, rc);
}
END_TEST

START_TEST(test_sysusers_creates_user)
{
    char root[HARNESS_PATH_MAX], etc[HARNESS_PATH_MAX + 8], path[HARNESS_PATH_MAX + 16];
    char line[512], user[VALUE_MAX], group[VALUE_MAX];
    int found_user = 0, found_group = 0;
    ck_assert_int_eq(unit_value(src_unit, "User", user, sizeof(user)), 0);
    ck_assert_int_eq(unit_value(src_unit, "Group", group, sizeof(group)), 0);
    ck_assert_int_eq(harness_path(&H, "sysroot", root, sizeof(root)), 0);
    snprintf(etc, sizeof(etc), "%s/etc", root);
    ck_assert(mkdir(root, 0755) == 0 && mkdir(etc, 0755) == 0);
    char rootarg[HARNESS_PATH_MAX + 16];
    snprintf(rootarg, sizeof(rootarg), "--root=%s", root);
    const char *argv[] = {"systemd-sysusers", rootarg, src_sysusers, NULL};
    ck_assert_int_eq(run_quiet(argv, "sysusers.out", NULL), 0);

    snprintf(path, sizeof(path), "%s/passwd", etc);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "systemd-sysusers wrote no %s", path);
    size_t ulen = strlen(user);
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, user, ulen) == 0 && line[ulen] == ':') {
            found_user = 1;
            ck_assert_msg(strstr(line, "nologin") != NULL, "%s can log in: %s", user, line);
        }
    }
    fclose(f);
    snprintf(path, sizeof(path), "%s/group", etc);
    f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    size_t glen = strlen(group);
    while (fgets(line, sizeof(line), f))
        found_group |= strncmp(line, group, glen) == 0 && line[glen] == ':';
    fclose(f);
    ck_assert_msg(found_user, "%s creates no user %s", src_sysusers, user);
    ck_assert_msg(found_group, "%s creates no group %s", src_sysusers, group);
}
END_TEST

/* The argument after flag in a command line, or "". */
static void arg_after(const char *cmd, const char *flag, char *out, size_t len)
{
    const char *p = strstr(cmd, flag);
    out[0] = '\0';
    if (!p)
        return;
    p += strlen(flag);
    while (*p == ' ')
        p++;
    snprintf(out, len, "%.*s", (int)strcspn(p, " "), p);
}

START_TEST(test_units_agree)
{
    char exec[VALUE_MAX], sock[VALUE_MAX], cfg[VALUE_MAX], listen[VALUE_MAX];
    char rundir[VALUE_MAX], group[VALUE_MAX], want[VALUE_MAX + 16];

    expect_value(src_unit, "Type", "notify");
    ck_assert_int_eq(unit_value(src_unit, "ExecStart", exec, sizeof(exec)), 0);
    ck_assert_msg(strncmp(exec, "/usr/local/sbin/prestod ", 24) == 0,
                  "ExecStart=%s: `make install` rewrites /usr/local/sbin/prestod", exec);
    arg_after(exec, " -s", sock, sizeof(sock));
    arg_after(exec, " -c", cfg, sizeof(cfg));
    ck_assert_msg(strcmp(cfg, "/etc/presto/prestod.yaml") == 0,
                  "ExecStart reads %s, but `make install` puts the config in "
                  "/etc/presto/prestod.yaml", cfg);

    /* One socket path: the socket unit's, the daemon's -s, in its RuntimeDirectory. */
    ck_assert_int_eq(unit_value(src_socket, "ListenStream", listen, sizeof(listen)), 0);
    ck_assert_msg(strcmp(sock, listen) == 0, "prestod -s %s, but the socket unit listens on %s",
                  sock, listen);
    ck_assert_int_eq(unit_value(src_unit, "RuntimeDirectory", rundir, sizeof(rundir)), 0);
    snprintf(want, sizeof(want), "/run/%s/", rundir);
    ck_assert_msg(strncmp(listen, want, strlen(want)) == 0,
                  "the socket %s is not in RuntimeDirectory=%s", listen, rundir);
    /* The socket outlives the service: its directory must too. */
    expect_value(src_unit, "RuntimeDirectoryPreserve", "yes");

    /* Who may connect: the service's group owns the socket, 0660. */
    ck_assert_int_eq(unit_value(src_unit, "Group", group, sizeof(group)), 0);
    expect_value(src_socket, "SocketGroup", group);
    expect_value(src_socket, "SocketMode", "0660");
    expect_value(src_unit, "NoNewPrivileges", "yes");
    expect_value(src_unit, "RestrictAddressFamilies", "AF_UNIX");
}
END_TEST

/* Why this host cannot run the test, or NULL. */
static const char *cannot_run(void)
{
    char out[HARNESS_PATH_MAX], line[256];
    int offline = 0;
    if (harness_path(&H, "probe.out", out, sizeof(out)) < 0)
        return "no temporary directory";
    const char *help[] = {"systemd-analyze", "security", "--help", NULL};
    if (harness_run(help, out, 30) != 0)
        return "no systemd-analyze (Debian package systemd)";
    FILE *f = fopen(out, "r");
    while (f && fgets(line, sizeof(line), f))
        offline |= strstr(line, "--offline") != NULL;
    if (f)
        fclose(f);
    if (!offline)
        return "systemd-analyze has no security --offline (systemd older than 250)";
    const char *su[] = {"systemd-sysusers", "--help", NULL};
    if (harness_run(su, out, 30) != 0)
        return "no systemd-sysusers (Debian package systemd)";
    return NULL;
}

static Suite *units_suite(void)
{
    Suite *s = suite_create("units");
    TCase *tc = tcase_create("units");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_verify);
    tcase_add_test(tc, test_security_exposure);
    tcase_add_test(tc, test_sysusers_creates_user);
    tcase_add_test(tc, test_units_agree);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    const char *src = harness_env("PRESTO_SRC", ".");
    snprintf(src_unit, sizeof(src_unit), "%s/systemd/prestod.service", src);
    snprintf(src_socket, sizeof(src_socket), "%s/systemd/prestod.socket", src);
    snprintf(src_sysusers, sizeof(src_sysusers), "%s/systemd/presto.sysusers.conf", src);
    if (harness_init(&H) < 0)
        return EXIT_FAILURE;
    const char *why = cannot_run();
    if (why) {
        harness_cleanup(&H);
        printf("skip: %s\n", why);
        return HARNESS_SKIP;
    }
    int failed = harness_run_suite(units_suite());
    harness_cleanup(&H);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
