/* Integration test harness: see harness.h. */
#define _GNU_SOURCE
#include "harness.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proto.h"

#define HARNESS_MAX_ARGS 64
#define READY_TIMEOUT_S 20
#define STOP_TIMEOUT_S 10
/* valgrind makes start-up and shutdown several times slower. */
#define VALGRIND_SLOWDOWN 4

const char *harness_env(const char *name, const char *def)
{
    const char *v = getenv(name);
    return v && *v ? v : def;
}

static int use_valgrind(void)
{
    return strcmp(harness_env("PRESTO_VALGRIND", "0"), "1") == 0;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Exit status of a reaped child: its code, or 128 + the signal. */
static int wait_status(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return -ECHILD;
}

/* Waits for pid up to timeout_s; returns its status or -ETIMEDOUT. */
static int wait_for(pid_t pid, double timeout_s)
{
    double deadline = now_s() + timeout_s;
    for (;;) {
        int status;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            return wait_status(status);
        if (r < 0 && errno != EINTR)
            return -errno;
        if (now_s() > deadline)
            return -ETIMEDOUT;
        sleep_ms(10);
    }
}

static void kill_and_reap(pid_t pid)
{
    kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
}

TCase *harness_tcase(const char *name, SFun setup, SFun teardown, double timeout_s)
{
    TCase *tc = tcase_create(name);
    if (setup || teardown)
        tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, timeout_s);
    return tc;
}

void harness_add_cases(Suite *s, const struct harness_case *cases, size_t n, SFun setup,
                       SFun teardown, double timeout_s)
{
    for (size_t i = 0; i < n; i++) {
        TCase *tc = harness_tcase(cases[i].name, setup, teardown, timeout_s);
        tcase_add_test(tc, cases[i].test);
        suite_add_tcase(s, tc);
    }
}

int harness_run_suite(Suite *s)
{
    /* A failing case's message often carries a command's output (up to
     * 16 KiB); past check's default of 4 KiB the runner gives up with
     * "Message string too long" and the message is lost. */
    check_set_max_msg_size(64 * 1024);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed;
}

/* 1 when dir holds a *.jpg file (the photos the datasets are made from). */
static int has_jpeg(const char *dir)
{
    DIR *d = opendir(dir);
    int found = 0;
    for (struct dirent *e; d && !found && (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        found = n > 4 && strcmp(e->d_name + n - 4, ".jpg") == 0;
    }
    if (d)
        closedir(d);
    return found;
}

int harness_photos_missing(void)
{
    const char *photos = getenv("PRESTO_PHOTOS");
    if (photos && *photos && !has_jpeg(photos)) {
        printf("skip: no *.jpg photos at PRESTO_PHOTOS=%s\n", photos);
        return 1;
    }
    return 0;
}

int harness_init(struct harness *h)
{
    memset(h, 0, sizeof(*h));
    int n = snprintf(h->dir, sizeof(h->dir), "%s/presto-test-XXXXXX",
                     harness_env("TMPDIR", "/tmp"));
    if (n < 0 || (size_t)n >= sizeof(h->dir)) {
        fprintf(stderr, "harness: TMPDIR is too long\n");
        return -ENAMETOOLONG;
    }
    if (!mkdtemp(h->dir)) {
        int e = errno;
        fprintf(stderr, "harness: mkdtemp %s: %s\n", h->dir, strerror(e));
        h->dir[0] = '\0';
        return -e;
    }
    return 0;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    if (remove(path) < 0)
        fprintf(stderr, "harness: remove %s: %s\n", path, strerror(errno));
    return 0;
}

void harness_cleanup(struct harness *h)
{
    if (h->pid > 0)
        harness_stop(h);
    if (h->dir[0])
        nftw(h->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    h->dir[0] = '\0';
}

int harness_path(const struct harness *h, const char *name, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s/%s", h->dir, name);
    if (n < 0 || (size_t)n >= len) {
        fprintf(stderr, "harness: path %s/%s is too long\n", h->dir, name);
        return -ENAMETOOLONG;
    }
    return 0;
}

int harness_write_file(const struct harness *h, const char *name, const char *text,
                       char *path, size_t pathlen)
{
    int rc = harness_path(h, name, path, pathlen);
    if (rc < 0)
        return rc;
    FILE *f = fopen(path, "w");
    if (!f) {
        rc = -errno;
        fprintf(stderr, "harness: %s: %s\n", path, strerror(-rc));
        return rc;
    }
    fputs(text, f);
    if (fclose(f) != 0) {
        rc = -errno;
        fprintf(stderr, "harness: writing %s: %s\n", path, strerror(-rc));
        return rc;
    }
    return 0;
}

/* In a forked child: stdin from /dev/null, stdout and stderr to out_path
 * (appending) unless NULL, then exec. Never returns. */
static void exec_child(const char *const *argv, const char *out_path)
{
    int in = open("/dev/null", O_RDONLY);
    if (in >= 0) {
        dup2(in, STDIN_FILENO);
        close(in);
    }
    if (out_path) {
        int fd = open(out_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd < 0) {
            fprintf(stderr, "harness: %s: %s\n", out_path, strerror(errno));
            _exit(126);
        }
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        close(fd);
    }
    /* If the test program dies, the daemon goes with it. */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    execvp(argv[0], (char *const *)argv);
    fprintf(stderr, "harness: exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

static pid_t spawn(const char *const *argv, const char *out_path)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        fprintf(stderr, "harness: fork: %s\n", strerror(e));
        return -e;
    }
    if (pid == 0)
        exec_child(argv, out_path);
    return pid;
}

int harness_run(const char *const *argv, const char *out_path, int timeout_s)
{
    if (out_path)
        unlink(out_path);
    pid_t pid = spawn(argv, out_path);
    if (pid < 0)
        return pid;
    int rc = wait_for(pid, timeout_s);
    if (rc == -ETIMEDOUT) {
        fprintf(stderr, "harness: %s ran past %d s; killed\n", argv[0], timeout_s);
        kill_and_reap(pid);
    }
    return rc;
}

int harness_run_config(const struct harness *h, const char *yaml, int timeout_s, char *out,
                       size_t len)
{
    char conf[HARNESS_PATH_MAX], outp[HARNESS_PATH_MAX], prestod[HARNESS_PATH_MAX];
    int rc = harness_write_file(h, "refused.yaml", yaml, conf, sizeof(conf));
    if (rc < 0)
        return rc;
    harness_path(h, "refused.out", outp, sizeof(outp));
    snprintf(prestod, sizeof(prestod), "%s/prestod", harness_env("PRESTO_BUILD", "build"));
    const char *argv[] = {prestod, "-c", conf, NULL};
    rc = harness_run(argv, outp, timeout_s);
    FILE *f = fopen(outp, "r");
    out[0] = '\0';
    if (f) {
        out[fread(out, 1, len - 1, f)] = '\0';
        fclose(f);
    }
    return rc;
}

static void print_file(const char *path, const char *title)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "harness: %s: %s\n", path, strerror(errno));
        return;
    }
    fprintf(stderr, "---- %s (%s) ----\n", title, path);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
        fwrite(buf, 1, n, stderr);
    fprintf(stderr, "---- end of %s ----\n", title);
    fclose(f);
}

int harness_make_dataset(const struct harness *h, const char *name, unsigned count,
                         unsigned classes, unsigned seed, unsigned min_side,
                         unsigned max_side, char *root, size_t rootlen)
{
    char script[HARNESS_PATH_MAX * 2], out[HARNESS_PATH_MAX], logname[128];
    char scount[16], sclasses[16], sseed[16], smin[16], smax[16];
    int rc;

    snprintf(logname, sizeof(logname), "mkdataset-%s.log", name);
    if ((rc = harness_path(h, name, root, rootlen)) < 0 ||
        (rc = harness_path(h, logname, out, sizeof(out))) < 0)
        return rc;
    snprintf(script, sizeof(script), "%s/tests/tools/mkdataset.py",
             harness_env("PRESTO_SRC", "."));
    snprintf(scount, sizeof(scount), "%u", count);
    snprintf(sclasses, sizeof(sclasses), "%u", classes);
    snprintf(sseed, sizeof(sseed), "%u", seed);
    snprintf(smin, sizeof(smin), "%u", min_side);
    snprintf(smax, sizeof(smax), "%u", max_side);
    const char *argv[] = {harness_env("PYTHON", "/usr/bin/python3"), script,
                          "--out", root, "--count", scount, "--classes", sclasses,
                          "--seed", sseed, "--min", smin, "--max", smax, NULL};
    rc = harness_run(argv, out, 300);
    if (rc != 0) {
        fprintf(stderr, "harness: mkdataset.py failed (status %d)\n", rc);
        print_file(out, "mkdataset.py output");
        return rc < 0 ? rc : -EIO;
    }
    return 0;
}

void harness_print_log(const struct harness *h)
{
    if (h->log[0])
        print_file(h->log, "prestod log");
}

void harness_print_all_logs(const struct harness *h)
{
    for (unsigned i = 1; i <= h->starts; i++) {
        char name[64], path[HARNESS_PATH_MAX];
        snprintf(name, sizeof(name), "prestod-%u.log", i);
        if (harness_path(h, name, path, sizeof(path)) == 0)
            print_file(path, name);
    }
}

int harness_alive(const struct harness *h)
{
    char path[64], buf[256];
    if (h->pid <= 0)
        return 0;
    /* Works in forked test processes too, where waitpid cannot. */
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)h->pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')');
    return paren && paren[1] == ' ' && paren[2] != 'Z' && paren[2] != 'X';
}

int harness_connect(const struct harness *h, presto_t **p)
{
    int rc = presto_connect(h->sock, p);
    if (rc < 0) {
        fprintf(stderr, "harness: connect %s: %s\n", h->sock,
                *p ? presto_errmsg(*p) : presto_strerror(rc));
        if (*p)
            presto_close(*p);
        *p = NULL;
    }
    return rc;
}

int harness_launch(struct harness *h, const char *const *args)
{
    const char *argv[HARNESS_MAX_ARGS];
    char prestod[HARNESS_PATH_MAX * 2], name[64];
    size_t n = 0;
    int rc;

    if (h->pid > 0) {
        fprintf(stderr, "harness: a daemon is already running\n");
        return -EBUSY;
    }
    h->starts++;
    snprintf(name, sizeof(name), "prestod-%u.sock", h->starts);
    if ((rc = harness_path(h, name, h->sock, sizeof(h->sock))) < 0)
        return rc;
    snprintf(name, sizeof(name), "prestod-%u.log", h->starts);
    if ((rc = harness_path(h, name, h->log, sizeof(h->log))) < 0)
        return rc;
    snprintf(prestod, sizeof(prestod), "%s/prestod", harness_env("PRESTO_BUILD", "build"));
    if (access(prestod, X_OK) != 0) {
        rc = -errno;
        fprintf(stderr, "harness: %s: %s\n", prestod, strerror(-rc));
        return rc;
    }

    if (use_valgrind()) {
        static const char *const vg[] = {"valgrind", "-q", "--error-exitcode=99",
                                         "--leak-check=full",
                                         "--errors-for-leak-kinds=definite"};
        for (size_t i = 0; i < sizeof(vg) / sizeof(vg[0]); i++)
            argv[n++] = vg[i];
        /* libjpeg-turbo's SIMD decoders store whole vectors whose definedness
         * memcheck loses: some images (a 206x210 one, say) then read as
         * "uninitialised" pixels although every byte is written (the output
         * is the same over a buffer of zeros or of 0xff). Without SIMD the
         * daemon decodes the same bytes and memcheck can follow them. */
        setenv("JSIMD_FORCENONE", "1", 1);
    }
    argv[n++] = prestod;
    argv[n++] = "-s";
    argv[n++] = h->sock;
    for (size_t i = 0; args && args[i]; i++) {
        if (n + 1 >= HARNESS_MAX_ARGS) {
            fprintf(stderr, "harness: too many daemon arguments\n");
            return -E2BIG;
        }
        argv[n++] = args[i];
    }
    argv[n] = NULL;

    unlink(h->log);
    pid_t pid = spawn(argv, h->log);
    if (pid < 0)
        return pid;
    h->pid = pid;
    return 0;
}

int harness_start(struct harness *h, const char *const *args)
{
    int rc = harness_launch(h, args);
    if (rc < 0)
        return rc;
    pid_t pid = h->pid;
    double timeout = READY_TIMEOUT_S * (use_valgrind() ? VALGRIND_SLOWDOWN : 1);
    double deadline = now_s() + timeout;
    for (;;) {
        int status;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) {
            h->pid = 0;
            fprintf(stderr, "harness: prestod exited during start-up (status %d)\n",
                    wait_status(status));
            harness_print_log(h);
            return -ECHILD;
        }
        presto_t *p = NULL;
        if (presto_connect(h->sock, &p) == 0) {
            presto_close(p);
            return 0;
        }
        if (p)
            presto_close(p);
        if (now_s() > deadline) {
            fprintf(stderr, "harness: prestod not ready after %.0f s\n", timeout);
            kill_and_reap(pid);
            h->pid = 0;
            harness_print_log(h);
            return -ETIMEDOUT;
        }
        sleep_ms(20);
    }
}

int harness_slowfs_mount(const struct harness *h, const char *src, int latency_ms, char *mnt,
                         size_t mntlen, char *why, size_t whylen)
{
    char slowfs[HARNESS_PATH_MAX * 2], log[HARNESS_PATH_MAX], lat[16], name[32];
    static unsigned mounts;
    snprintf(slowfs, sizeof(slowfs), "%s/slowfs", harness_env("PRESTO_BUILD", "build"));
    if (access(slowfs, X_OK) != 0) {
        snprintf(why, whylen, "no slowfs in %.200s (libfuse3-dev missing? make deps)",
                 harness_env("PRESTO_BUILD", "build"));
        return -1;
    }
    if (access("/dev/fuse", R_OK | W_OK) != 0) {
        snprintf(why, whylen, "/dev/fuse: %s", strerror(errno));
        return -1;
    }
    snprintf(name, sizeof(name), "mnt%u", mounts);
    if (harness_path(h, name, mnt, mntlen) < 0 || mkdir(mnt, 0700) < 0) {
        snprintf(why, whylen, "cannot make the mount point");
        return -1;
    }
    snprintf(name, sizeof(name), "slowfs%u.log", mounts++);
    if (harness_path(h, name, log, sizeof(log)) < 0) {
        snprintf(why, whylen, "cannot name the mount's log");
        return -1;
    }
    snprintf(lat, sizeof(lat), "%d", latency_ms);
    const char *argv[] = {slowfs, "--latency-ms", lat, src, mnt, NULL};
    int rc = harness_run(argv, log, 30);
    if (rc != 0) {
        char msg[256] = "";
        FILE *f = fopen(log, "r");
        if (f) {
            if (!fgets(msg, sizeof(msg), f))
                msg[0] = '\0';
            fclose(f);
        }
        msg[strcspn(msg, "\n")] = '\0';
        snprintf(why, whylen, "slowfs could not mount (status %d): %s", rc, msg);
        return -1;
    }
    return 0;
}

void harness_slowfs_unmount(const char *mnt)
{
    const char *argv[] = {"fusermount3", "-u", "-z", mnt, NULL};
    if (harness_run(argv, NULL, 30) != 0 && umount2(mnt, MNT_DETACH) < 0)
        fprintf(stderr, "cannot unmount %s: %s\n", mnt, strerror(errno));
}

int harness_start_config(struct harness *h, const char *yaml, const char *const *args)
{
    const char *argv[HARNESS_MAX_ARGS];
    char name[64];
    size_t n = 0;
    snprintf(name, sizeof(name), "prestod-%u.yaml", h->starts + 1);
    int rc = harness_write_file(h, name, yaml, h->conf, sizeof(h->conf));
    if (rc < 0)
        return rc;
    argv[n++] = "-c";
    argv[n++] = h->conf;
    for (size_t i = 0; args && args[i]; i++) {
        if (n + 1 >= HARNESS_MAX_ARGS)
            return -E2BIG;
        argv[n++] = args[i];
    }
    argv[n] = NULL;
    return harness_start(h, argv);
}

int harness_stop(struct harness *h)
{
    if (h->pid <= 0)
        return 0;
    pid_t pid = h->pid;
    h->pid = 0;
    if (kill(pid, SIGTERM) < 0 && errno != ESRCH)
        fprintf(stderr, "harness: kill %d: %s\n", (int)pid, strerror(errno));
    int limit = STOP_TIMEOUT_S * (use_valgrind() ? VALGRIND_SLOWDOWN : 1);
    int rc = wait_for(pid, limit);
    if (rc == -ETIMEDOUT) {
        fprintf(stderr, "harness: prestod did not exit %d s after SIGTERM; killed\n",
                limit);
        kill_and_reap(pid);
    } else if (rc != 0) {
        fprintf(stderr, "harness: prestod exited with status %d after SIGTERM\n", rc);
    }
    if (rc != 0)
        harness_print_log(h);
    return rc;
}

int harness_stop_checked(struct harness *h)
{
    int rc = harness_stop(h);
    if (rc != 0) {
        fprintf(stderr, "FAIL: prestod exited with status %d after SIGTERM (want 0)\n", rc);
        h->stop_failures++;
    }
    return rc;
}

int harness_finish(struct harness *h, int failed)
{
    int bad = failed || h->stop_failures;
    if (bad)
        harness_print_all_logs(h);
    harness_cleanup(h);
    return bad ? EXIT_FAILURE : EXIT_SUCCESS;
}

int harness_log_contains(const struct harness *h, const char *needle)
{
    FILE *f = fopen(h->log, "r");
    char line[4096];
    int found = 0;
    if (!f)
        return 0;
    while (!found && fgets(line, sizeof(line), f))
        found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

int harness_wait_log(const struct harness *h, const char *needle, int timeout_ms)
{
    double deadline = now_s() + timeout_ms / 1000.0;
    while (!harness_log_contains(h, needle)) {
        if (now_s() > deadline)
            return -ETIMEDOUT;
        sleep_ms(20);
    }
    return 0;
}

int harness_pull_epoch(const struct harness *h, const presto_stream_opts_t *o,
                       struct harness_epoch *e)
{
    presto_t *p;
    presto_stream_t *s;
    presto_batch_t b;
    memset(e, 0, sizeof(*e));
    e->fnv = HARNESS_FNV_INIT;
    int rc = harness_connect(h, &p);
    if (rc < 0)
        return rc;
    if ((rc = presto_stream_open(p, o, &s)) < 0) {
        fprintf(stderr, "harness: open '%s': %s\n", o->dataset, presto_errmsg(p));
        presto_close(p);
        return rc;
    }
    while ((rc = presto_next(s, &b)) > 0) {
        e->fnv = harness_fnv(e->fnv, b.labels, b.n * sizeof(b.labels[0]));
        e->fnv = harness_fnv(e->fnv, b.data, b.size);
        e->samples += b.n;
        e->batches++;
        presto_release(s, &b);
    }
    if (rc < 0)
        fprintf(stderr, "harness: epoch of '%s': %s\n", o->dataset, presto_stream_errmsg(s));
    e->skipped = presto_stream_skipped(s);
    presto_stream_close(s);
    presto_close(p);
    return rc;
}

int harness_stats(const struct harness *h, char **json)
{
    presto_t *p;
    int rc = harness_connect(h, &p);
    if (rc < 0)
        return rc;
    rc = presto_stats(p, json);
    if (rc < 0)
        fprintf(stderr, "harness: stats: %s\n", presto_errmsg(p));
    presto_close(p);
    return rc;
}

/* Just past the ':' (and blanks) of "key": at or after from, or NULL. */
static const char *json_find_key(const char *from, const char *key)
{
    size_t klen = strlen(key);
    for (const char *q = strchr(from, '"'); q; q = strchr(q + 1, '"')) {
        if (strncmp(q + 1, key, klen) != 0 || q[1 + klen] != '"')
            continue;
        const char *v = q + 2 + klen;
        while (isspace((unsigned char)*v))
            v++;
        if (*v != ':')
            continue;
        v++;
        while (isspace((unsigned char)*v))
            v++;
        return v;
    }
    return NULL;
}

int harness_json_number(const char *json, const char *parent, const char *key,
                        double *out)
{
    const char *from = json;
    /* parent may be a path of keys, "limits.connections": each is looked
     * for after the one before. */
    for (const char *p = parent; p && *p;) {
        char part[128];
        size_t n = strcspn(p, ".");
        if (n >= sizeof(part))
            return -ENAMETOOLONG;
        memcpy(part, p, n);
        part[n] = '\0';
        if (!(from = json_find_key(from, part)))
            return -ENOENT;
        p += n + (p[n] == '.');
    }
    const char *v = json_find_key(from, key);
    if (!v)
        return -ENOENT;
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (end == v || errno)
        return -EINVAL;
    *out = d;
    return 0;
}

int harness_stat(const struct harness *h, const char *parent, const char *key,
                 double *out)
{
    char *json = NULL;
    int rc = harness_stats(h, &json);
    if (rc < 0)
        return rc;
    rc = harness_json_number(json, parent, key, out);
    if (rc < 0)
        fprintf(stderr, "harness: no number at %s%s%s in the stats: %s\n",
                parent ? parent : "", parent ? "." : "", key, json);
    free(json);
    return rc;
}

int harness_wait_stat(const struct harness *h, const char *parent, const char *key,
                      double want, int timeout_ms, double *last)
{
    double deadline = now_s() + timeout_ms / 1000.0;
    for (;;) {
        int rc = harness_stat(h, parent, key, last);
        if (rc < 0)
            return rc;
        if (*last == want)
            return 0;
        if (now_s() > deadline)
            return -ETIMEDOUT;
        sleep_ms(20);
    }
}

/* ---- raw protocol ---- */

int harness_raw_connect(const struct harness *h)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(h->sock) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    memcpy(sa.sun_path, h->sock, strlen(h->sock) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

static int write_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int harness_send_frame(int fd, uint16_t version, uint16_t type, uint32_t req_id,
                       const void *body, uint32_t len)
{
    uint8_t hdr[PROTO_HEADER_SIZE];
    proto_header_encode(hdr, type, req_id, len);
    hdr[4] = (uint8_t)version;
    hdr[5] = (uint8_t)(version >> 8);
    int rc = write_all(fd, hdr, sizeof(hdr));
    return rc == 0 && len ? write_all(fd, body, len) : rc;
}

/* Reads exactly len bytes (buf NULL: drops them) before the deadline. */
static int read_exact(int fd, uint8_t *buf, size_t len, double deadline)
{
    uint8_t scratch[4096];
    while (len) {
        int left = (int)((deadline - now_s()) * 1000);
        if (left <= 0)
            return -ETIMEDOUT;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int pr = poll(&pfd, 1, left);
        if (pr < 0 && errno != EINTR)
            return -errno;
        if (pr <= 0)
            continue;
        size_t want = buf ? len : (len < sizeof(scratch) ? len : sizeof(scratch));
        ssize_t n = read(fd, buf ? buf : scratch, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            return -ECONNRESET;
        if (n < 0)
            return -errno;
        if (buf)
            buf += n;
        len -= (size_t)n;
    }
    return 0;
}

int harness_read_frame(int fd, int timeout_ms, struct proto_header *hdr, uint8_t *body,
                       size_t cap)
{
    uint8_t raw[PROTO_HEADER_SIZE];
    double deadline = now_s() + timeout_ms / 1000.0;
    int rc = read_exact(fd, raw, sizeof(raw), deadline);
    if (rc < 0)
        return rc;
    if (proto_header_decode(raw, UINT32_MAX, hdr) == -PROTO_E_PROTO) {
        fprintf(stderr, "harness: a frame with a bad magic from the daemon\n");
        return -EPROTO;
    }
    size_t keep = hdr->body_len < cap ? hdr->body_len : cap;
    if ((rc = read_exact(fd, body, keep, deadline)) < 0)
        return rc;
    return read_exact(fd, NULL, hdr->body_len - keep, deadline);
}

long harness_read_until_eof(int fd, int timeout_ms)
{
    double deadline = now_s() + timeout_ms / 1000.0;
    long got = 0;
    uint8_t buf[4096];
    for (;;) {
        int left = (int)((deadline - now_s()) * 1000);
        if (left <= 0)
            return -ETIMEDOUT;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, left) <= 0)
            continue;
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            return got;
        if (n < 0 && errno != EINTR)
            return -errno;
        if (n > 0)
            got += n;
    }
}

uint32_t harness_error_code(const uint8_t *body)
{
    return (uint32_t)body[0] | (uint32_t)body[1] << 8 | (uint32_t)body[2] << 16 |
           (uint32_t)body[3] << 24;
}

/* ---- a process's resources ---- */

long harness_proc_status_kb(pid_t pid, const char *key)
{
    char path[64], line[256];
    size_t klen = strlen(key);
    long kb = -ENOENT;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -errno;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, key, klen) == 0 && line[klen] == ':')
            kb = strtol(line + klen + 1, NULL, 10);
    fclose(f);
    return kb;
}

int harness_proc_fds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return -errno;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

uint64_t harness_fnv(uint64_t h, const void *p, size_t len)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < len; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

int harness_init_for_others(struct harness *h)
{
    if (geteuid() != 0) {
        printf("skip: needs root to run as other users\n");
        return HARNESS_SKIP;
    }
    if (harness_photos_missing())
        return HARNESS_SKIP;
    int rc = harness_init(h);
    if (rc == 0 && chmod(h->dir, 0711) < 0) {
        rc = -errno;
        fprintf(stderr, "harness: chmod %s: %s\n", h->dir, strerror(-rc));
        harness_cleanup(h);
    }
    return rc;
}

int harness_become(uid_t uid, gid_t gid, const gid_t *groups, size_t ngroups)
{
    if (setgroups(ngroups, groups) < 0 || setgid(gid) < 0 || setuid(uid) < 0) {
        int e = errno;
        fprintf(stderr, "harness: becoming uid %u: %s\n", (unsigned)uid, strerror(e));
        return -e;
    }
    if (getuid() != uid || geteuid() != uid) {
        fprintf(stderr, "harness: still uid %u\n", (unsigned)geteuid());
        return -EPERM;
    }
    return 0;
}

pid_t harness_spawn_as(uid_t uid, gid_t gid, const gid_t *groups, size_t ngroups,
                       harness_child_fn fn, void *arg)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0)
        _exit(harness_become(uid, gid, groups, ngroups) < 0 ? 100 : fn(arg));
    return pid;
}

int harness_run_as(uid_t uid, gid_t gid, const gid_t *groups, size_t ngroups,
                   harness_child_fn fn, void *arg)
{
    pid_t pid = harness_spawn_as(uid, gid, groups, ngroups, fn, arg);
    if (pid < 0)
        return (int)pid;
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -errno;
    return wait_status(status);
}

void harness_send_wbuf(int fd, struct proto_wbuf *w)
{
    proto_frame_finish(w);
    ck_assert(!w->failed);
    ck_assert_int_eq(send(fd, w->data, w->len, MSG_NOSIGNAL), (ssize_t)w->len);
    proto_wbuf_free(w);
}

void harness_recv_frame_fd(int fd, struct proto_header *h, uint8_t *buf, size_t cap,
                           int *passed)
{
    uint8_t hdr[PROTO_HEADER_SIZE];
    char ctl[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {hdr, sizeof(hdr)};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
                         .msg_controllen = sizeof(ctl)};
    ck_assert_int_eq(recvmsg(fd, &msg, MSG_WAITALL), (ssize_t)sizeof(hdr));
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    if (passed && cm && cm->cmsg_type == SCM_RIGHTS)
        memcpy(passed, CMSG_DATA(cm), sizeof(int));
    ck_assert_int_eq(proto_header_decode(hdr, (uint32_t)cap, h), 0);
    ck_assert_int_eq(recv(fd, buf, h->body_len, MSG_WAITALL), (ssize_t)h->body_len);
}
