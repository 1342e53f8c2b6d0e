/*
 * Does prestod.service's sandbox let prestod work? Runs prestod under
 * strace through start-up, stats, datasets, two epochs, SIGHUP and SIGTERM,
 * and checks every system call it made against what the unit's
 * SystemCallFilter= lines allow (groups expanded by the host's
 * `systemd-analyze syscall-filter`, @default always allowed), every socket
 * it created against RestrictAddressFamilies=AF_UNIX, and its mappings
 * against MemoryDenyWriteExecute=yes (no writable+executable mapping, no
 * mprotect to executable).
 *
 * Skipped (exit 77) without strace or systemd-analyze, where ptrace is not
 * permitted, under valgrind, and for sanitizer builds (their runtimes make
 * calls the production binary does not).
 */
#include <check.h>
#include <ctype.h>
#include <sys/stat.h>

#include "harness.h"
#include "presto.h"
#include "sdtest.h"

#define DATASET "sc"
#define NSAMPLES 8
#define MAX_NAMES 1024
#define NAME_LEN 48

static struct harness H;
static char trace_path[HARNESS_PATH_MAX];

struct names {
    char v[MAX_NAMES][NAME_LEN];
    unsigned n;
};

static int names_has(const struct names *s, const char *name)
{
    for (unsigned i = 0; i < s->n; i++)
        if (strcmp(s->v[i], name) == 0)
            return 1;
    return 0;
}

static void names_add(struct names *s, const char *name)
{
    if (!names_has(s, name) && s->n < MAX_NAMES && strlen(name) < NAME_LEN)
        strcpy(s->v[s->n++], name);
}

/* Runs a command, its output to h->dir/name; 0 on exit status 0. */
static int run_to(const char *const *argv, const char *name, char *out, size_t outlen)
{
    if (harness_path(&H, name, out, outlen) < 0)
        return -1;
    return harness_run(argv, out, 60);
}

/* Adds every system call of the groups and names in `list` (space
 * separated, as in SystemCallFilter=) to s, expanding @groups with
 * systemd-analyze, recursively. */
static void expand(const char *list, struct names *s)
{
    struct names groups = {.n = 0}, done = {.n = 0};
    char buf[1024], *save = NULL;
    snprintf(buf, sizeof(buf), "%s", list);
    for (char *t = strtok_r(buf, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) {
        if (t[0] == '@')
            names_add(&groups, t);
        else
            names_add(s, t);
    }
    for (unsigned g = 0; g < groups.n; g++) {
        char out[HARNESS_PATH_MAX], line[256];
        if (names_has(&done, groups.v[g]))
            continue;
        names_add(&done, groups.v[g]);
        const char *argv[] = {"systemd-analyze", "syscall-filter", "--no-pager",
                              groups.v[g], NULL};
        ck_assert_msg(run_to(argv, "syscall-filter.out", out, sizeof(out)) == 0,
                      "systemd-analyze syscall-filter %s failed", groups.v[g]);
        FILE *f = fopen(out, "r");
        ck_assert_ptr_nonnull(f);
        while (fgets(line, sizeof(line), f)) {
            char *p = line;
            if (strncmp(p, "    ", 4) != 0)
                continue;
            p += 4;
            p[strcspn(p, " \t\r\n")] = '\0';
            if (*p == '#' || !*p)
                continue;
            if (*p == '@')
                names_add(&groups, p);
            else
                names_add(s, p);
        }
        fclose(f);
    }
}

/* What the unit's SystemCallFilter= lines allow: the allow lists, minus
 * the ~deny lists, plus @default (always allowed). */
static void unit_allowed(struct names *allowed)
{
    char unit[HARNESS_PATH_MAX * 2], line[1024];
    static struct names deny;
    int lists = 0;
    snprintf(unit, sizeof(unit), "%s/systemd/prestod.service", harness_env("PRESTO_SRC", "."));
    FILE *f = fopen(unit, "r");
    ck_assert_msg(f != NULL, "%s: %s", unit, strerror(errno));
    memset(allowed, 0, sizeof(*allowed));
    memset(&deny, 0, sizeof(deny));
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "SystemCallFilter=", 17) != 0)
            continue;
        line[strcspn(line, "\n")] = '\0';
        if (line[17] == '~')
            expand(line + 18, &deny);
        else
            expand(line + 17, allowed);
        lists++;
    }
    fclose(f);
    ck_assert_msg(lists > 0, "%s has no SystemCallFilter=", unit);
    for (unsigned i = 0; i < allowed->n;) {
        if (names_has(&deny, allowed->v[i]))
            memmove(allowed->v[i], allowed->v[--allowed->n], NAME_LEN);
        else
            i++;
    }
    expand("@default", allowed);
}

/* Calls each line of the trace: "PID name(args) = ...". Calls fn with the
 * name and the arguments' text for every call (resumed halves skipped). */
static void each_call(void (*fn)(const char *name, const char *args, void *arg), void *arg)
{
    char line[8192];
    FILE *f = fopen(trace_path, "r");
    ck_assert_msg(f != NULL, "%s: %s", trace_path, strerror(errno));
    while (fgets(line, sizeof(line), f)) {
        char *p = line;
        while (isdigit((unsigned char)*p))
            p++;
        while (*p == ' ')
            p++;
        char *name = p;
        while (isalnum((unsigned char)*p) || *p == '_')
            p++;
        if (p == name || *p != '(')
            continue;
        *p = '\0';
        fn(name, p + 1, arg);
    }
    fclose(f);
}

struct check {
    const struct names *allowed;
    struct names bad; /* offending calls, deduplicated */
};

static void check_syscall(const char *name, const char *args, void *arg)
{
    struct check *c = arg;
    (void)args;
    if (!names_has(c->allowed, name))
        names_add(&c->bad, name);
}

static void check_socket(const char *name, const char *args, void *arg)
{
    struct check *c = arg;
    char fam[NAME_LEN];
    if (strcmp(name, "socket") != 0 && strcmp(name, "socketpair") != 0)
        return;
    snprintf(fam, sizeof(fam), "%.*s", (int)strcspn(args, ","), args);
    if (strcmp(fam, "AF_UNIX") != 0)
        names_add(&c->bad, fam);
}

static void check_wx(const char *name, const char *args, void *arg)
{
    struct check *c = arg;
    char what[NAME_LEN];
    int mmap = strcmp(name, "mmap") == 0 || strcmp(name, "mmap2") == 0;
    int mprotect = strcmp(name, "mprotect") == 0 || strcmp(name, "pkey_mprotect") == 0;
    if (!mmap && !mprotect)
        return;
    int w = strstr(args, "PROT_WRITE") != NULL, x = strstr(args, "PROT_EXEC") != NULL;
    if ((mmap && w && x) || (mprotect && x)) {
        snprintf(what, sizeof(what), "%s(%s%s)", name, w ? "W" : "", x ? "X" : "");
        names_add(&c->bad, what);
    }
}

static void report(const struct check *c, const char *what)
{
    char list[4096] = "";
    for (unsigned i = 0; i < c->bad.n; i++)
        snprintf(list + strlen(list), sizeof(list) - strlen(list), " %s", c->bad.v[i]);
    ck_assert_msg(c->bad.n == 0, "%s:%s", what, list);
}

START_TEST(test_syscalls_allowed)
{
    static struct names allowed;
    static struct check c;
    unit_allowed(&allowed);
    ck_assert_msg(names_has(&allowed, "io_uring_setup") && names_has(&allowed, "io_uring_enter"),
                  "the unit's SystemCallFilter= does not allow io_uring");
    c.allowed = &allowed;
    each_call(check_syscall, &c);
    report(&c, "system calls SystemCallFilter= would refuse (EPERM)");
}
END_TEST

START_TEST(test_unix_sockets_only)
{
    static struct check c;
    each_call(check_socket, &c);
    report(&c, "socket families RestrictAddressFamilies=AF_UNIX would refuse");
}
END_TEST

START_TEST(test_no_writable_executable_memory)
{
    static struct check c;
    each_call(check_wx, &c);
    report(&c, "mappings MemoryDenyWriteExecute=yes would refuse");
}
END_TEST

/* ---- the traced run ---- */

static int pull_epoch(presto_t *p, uint64_t epoch)
{
    presto_stream_opts_t o;
    presto_stream_t *s;
    presto_batch_t b;
    uint64_t n = 0;
    int rc;
    presto_stream_opts_init(&o);
    o.dataset = DATASET;
    o.batch_size = 3;
    o.epoch = epoch;
    if ((rc = presto_stream_open(p, &o, &s)) < 0) {
        fprintf(stderr, "stream_open: %s\n", presto_errmsg(p));
        return rc;
    }
    while ((rc = presto_next(s, &b)) > 0) {
        n += b.n;
        presto_release(s, &b);
    }
    if (rc < 0)
        fprintf(stderr, "presto_next: %s\n", presto_stream_errmsg(s));
    presto_stream_close(s);
    return rc < 0 ? rc : n == NSAMPLES ? 0 : -EIO;
}

/* Runs prestod under strace through a day in its life. 0 or -1. */
static int traced_run(const char *root)
{
    char sock[HARNESS_PATH_MAX], log[HARNESS_PATH_MAX], cache[HARNESS_PATH_MAX];
    char ds[HARNESS_PATH_MAX + 16], cfg[HARNESS_PATH_MAX * 3], cfgpath[HARNESS_PATH_MAX];
    char *json = NULL;
    double dpid = 0;
    presto_t *p = NULL;
    int rc = -1;

    if (harness_path(&H, "prestod.sock", sock, sizeof(sock)) < 0 ||
        harness_path(&H, "prestod.log", log, sizeof(log)) < 0 ||
        harness_path(&H, "cache", cache, sizeof(cache)) < 0 ||
        harness_path(&H, "strace.out", trace_path, sizeof(trace_path)) < 0)
        return -1;
    /* With a disk tier, so that its files and io_uring are in the trace. */
    snprintf(cfg, sizeof(cfg), "cache:\n  dir: %s\n  disk: 64MiB\n", cache);
    if (harness_write_file(&H, "prestod.yaml", cfg, cfgpath, sizeof(cfgpath)) < 0)
        return -1;
    snprintf(ds, sizeof(ds), "%s=%s", DATASET, root);
    const char *args[] = {"-c", cfgpath, "-s", sock, "-d", ds, "-w", "2", NULL};
    const char *wrap[] = {"strace", "-f", "-qq", "-o", trace_path, NULL};
    struct sd_child c = {.args = args, .listen_fd = -1, .log = log, .wrap = wrap};
    pid_t pid = sd_spawn(&c);
    if (pid < 0)
        return -1;

    double deadline = sd_now() + 60;
    while (presto_connect(sock, &p) < 0) {
        if (p)
            presto_close(p);
        p = NULL;
        if (sd_now() > deadline || waitpid(pid, NULL, WNOHANG) == pid) {
            fprintf(stderr, "prestod under strace did not get ready\n");
            goto out;
        }
        sd_sleep_ms(50);
    }
    if (presto_stats(p, &json) < 0 || harness_json_number(json, NULL, "pid", &dpid) < 0 ||
        dpid <= 0) {
        fprintf(stderr, "stats: %s\n", presto_errmsg(p));
        goto out;
    }
    free(json);
    json = NULL;
    if (presto_datasets(p, &json) < 0 || pull_epoch(p, 0) < 0 || pull_epoch(p, 1) < 0)
        goto out;
    kill((pid_t)dpid, SIGHUP);
    sd_sleep_ms(200);
    free(json);
    json = NULL;
    if (presto_stats(p, &json) < 0) { /* still serving after SIGHUP */
        fprintf(stderr, "stats after SIGHUP: %s\n", presto_errmsg(p));
        goto out;
    }
    presto_close(p);
    p = NULL;
    kill((pid_t)dpid, SIGTERM);
    rc = sd_wait(pid, 60); /* strace exits with prestod's status */
    pid = -1;
    if (rc != 0)
        fprintf(stderr, "prestod under strace exited with status %d\n", rc);
    rc = rc == 0 ? 0 : -1;
out:
    free(json);
    if (p)
        presto_close(p);
    if (pid > 0)
        sd_stop(pid, 10);
    if (rc < 0)
        sd_print_file(log, "prestod log");
    return rc;
}

/* Why this host cannot run the test, or NULL. */
static const char *cannot_run(void)
{
    char out[HARNESS_PATH_MAX], prestod[HARNESS_PATH_MAX * 2], line[512];
    static char why[HARNESS_PATH_MAX * 3];
    if (sd_valgrind())
        return "strace and valgrind do not mix";
    const char *sa[] = {"systemd-analyze", "syscall-filter", "--no-pager", "@default", NULL};
    if (run_to(sa, "probe-analyze.out", out, sizeof(out)) != 0)
        return "no working systemd-analyze (Debian package systemd)";
    const char *st[] = {"strace", "-f", "-qq", "-o", "/dev/null", "true", NULL};
    if (run_to(st, "probe-strace.out", out, sizeof(out)) != 0)
        return "strace is missing or ptrace is not permitted here";
    snprintf(prestod, sizeof(prestod), "%s/prestod", harness_env("PRESTO_BUILD", "build"));
    const char *ldd[] = {"ldd", prestod, NULL};
    if (run_to(ldd, "probe-ldd.out", out, sizeof(out)) == 0) {
        FILE *f = fopen(out, "r");
        while (f && fgets(line, sizeof(line), f)) {
            if (strstr(line, "libasan") || strstr(line, "libtsan") || strstr(line, "libubsan")) {
                snprintf(why, sizeof(why), "%s is a sanitizer build", prestod);
                fclose(f);
                return why;
            }
        }
        if (f)
            fclose(f);
    }
    return NULL;
}

static Suite *seccomp_suite(void)
{
    Suite *s = suite_create("seccomp");
    TCase *tc = tcase_create("sandbox");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_syscalls_allowed);
    tcase_add_test(tc, test_unix_sockets_only);
    tcase_add_test(tc, test_no_writable_executable_memory);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    char root[HARNESS_PATH_MAX];
    if (harness_photos_missing())
        return HARNESS_SKIP;
    if (harness_init(&H) < 0)
        return EXIT_FAILURE;
    const char *why = cannot_run();
    if (why) {
        harness_cleanup(&H);
        printf("skip: %s\n", why);
        return HARNESS_SKIP;
    }
    if (harness_make_dataset(&H, DATASET, NSAMPLES, 2, 9, 64, 200, root, sizeof(root)) < 0 ||
        traced_run(root) < 0) {
        harness_cleanup(&H);
        return EXIT_FAILURE;
    }
    int failed = harness_run_suite(seccomp_suite());
    harness_cleanup(&H);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
