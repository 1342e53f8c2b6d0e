/*
 * A hostile local user, and an unlucky operator, against a real prestod run
 * as root. The other user is real: forked children that drop to uid 65534
 * (harness_spawn_as, harness_run_as), as test_access does.
 *
 *   cache:  a cache.dir another user owns, may write to, or reaches through
 *           a link of theirs is refused at start-up and by --check-config,
 *           with the same line. Links planted in a trusted one, under the
 *           names prestod uses (a segment to a root-owned file, a
 *           hard-linked segment, a profile trial directory to a 0700
 *           directory, the profile record and its temporary file, the
 *           O_DIRECT probe), are never followed through start-up, epochs, a
 *           profile and its record: every target keeps its bytes and the
 *           0700 directory its files; the record is written 0640 under
 *           umask 000.
 *   socket: a socket directory of another user, writable by others, or
 *           reached through their link is refused; one prestod makes is
 *           0700 (0711 when socket_mode lets others connect).
 *   impostor: a server of another user where the victim looks for prestod
 *           (a /tmp-like squatted directory, a link there) is refused by the
 *           client and by prestoctl, unless PRESTO_TRUST_ANY_PEER=1; a
 *           daemon of a user who alone owns its socket's directory is not.
 *   per_user: a user at limits.connections_per_user is refused more while
 *           another user connects; 202 refusals make at most a few log
 *           lines, whose counts add up to 202.
 *   idle:   a connection that sends nothing is closed after
 *           limits.idle_timeout (1 s here) with an ERROR saying so; one with
 *           an open stream that it does not read, and one that keeps asking,
 *           are not; a client's control connection and its kept stream
 *           connection, closed that way, are made again by the client.
 *   check:  --check-config refuses what start-up refuses (a dataset root
 *           missing or a file, a socket path over 107 bytes, the above),
 *           with the same message, and passes what starts.
 *
 * Needs root (other users, chown): skips otherwise.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "presto.h"
#include "proto.h"

#define NOBODY 65534
#define NSAMPLES 16
#define CASE_TIMEOUT_S 240
#define STEPS "[decode, {resize: [32, 32]}]"

static struct harness H;
static char data_root[HARNESS_PATH_MAX];
/* H.dir/tmp: world-writable and sticky, like /tmp. */
static char tmp_dir[HARNESS_PATH_MAX];

/* ---- helpers ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void path_of(char *buf, size_t len, const char *rel)
{
    ck_assert_int_eq(harness_path(&H, rel, buf, len), 0);
}

/* A directory of H.dir made by root with this mode. */
static void root_dir(const char *rel, mode_t mode)
{
    char p[HARNESS_PATH_MAX];
    path_of(p, sizeof(p), rel);
    ck_assert_msg(mkdir(p, 0700) == 0 || errno == EEXIST, "mkdir %s: %s", p, strerror(errno));
    ck_assert_int_eq(chmod(p, mode), 0);
}

/* What a child that is NOBODY makes: a directory, or a link. */
struct made {
    const char *path, *target; /* target: a symbolic link to it */
    mode_t mode;
};

static int make_as_nobody(void *arg)
{
    const struct made *m = arg;
    if (m->target ? symlink(m->target, m->path) < 0
                  : mkdir(m->path, 0700) < 0 || chmod(m->path, m->mode) < 0) {
        fprintf(stderr, "child: %s: %s\n", m->path, strerror(errno));
        return 1;
    }
    return 0;
}

/* H.dir/rel made by the other user (a directory of mode, or a link to target). */
static void nobody_makes(const char *rel, mode_t mode, const char *target)
{
    char p[HARNESS_PATH_MAX];
    path_of(p, sizeof(p), rel);
    struct made m = {p, target, mode};
    ck_assert_int_eq(harness_run_as(NOBODY, NOBODY, NULL, 0, make_as_nobody, &m), 0);
}

static void slurp(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, len - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
}

static const char *prestod_path(void)
{
    static char p[HARNESS_PATH_MAX * 2];
    snprintf(p, sizeof(p), "%s/prestod", harness_env("PRESTO_BUILD", "build"));
    return p;
}

/* The config's datasets: ours, with split: auto when asked. */
static void yaml_with(char *buf, size_t len, const char *head, int split_auto)
{
    snprintf(buf, len,
             "%s"
             "workers: 2\n"
             "datasets:\n"
             "  - name: hd\n"
             "    root: %s\n"
             "    steps: " STEPS "\n"
             "%s",
             head, data_root, split_auto ? "    split: auto\n" : "");
}

/* prestod -c (yaml) -s sock --check-config, and the same as a start: both
 * exit 1 with the same one line, which holds want. */
static void expect_refused(const char *yaml, const char *sock, const char *want)
{
    static unsigned n;
    char conf[HARNESS_PATH_MAX], name[64], out1[HARNESS_PATH_MAX], out2[HARNESS_PATH_MAX];
    char text1[2048], text2[2048];
    snprintf(name, sizeof(name), "refused-%u.yaml", ++n);
    ck_assert_int_eq(harness_write_file(&H, name, yaml, conf, sizeof(conf)), 0);
    path_of(out1, sizeof(out1), "refused-check.out");
    path_of(out2, sizeof(out2), "refused-start.out");
    const char *check[] = {prestod_path(), "-c", conf, "-s", sock, "--check-config", NULL};
    const char *start[] = {prestod_path(), "-c", conf, "-s", sock, NULL};
    int rc1 = harness_run(check, out1, 30), rc2 = harness_run(start, out2, 30);
    slurp(out1, text1, sizeof(text1));
    slurp(out2, text2, sizeof(text2));
    ck_assert_msg(rc1 == 1 && strstr(text1, want),
                  "--check-config exited %d with '%s', want 1 and '%s'", rc1, text1, want);
    ck_assert_msg(rc2 == 1 && strcmp(text1, text2) == 0,
                  "the start exited %d with '%s', want 1 and what --check-config said", rc2,
                  text2);
    ck_assert_msg(strchr(text1, '\n') == text1 + strlen(text1) - 1, "more than a line: %s",
                  text1);
}

static void expect_ok(const char *yaml, const char *sock)
{
    char conf[HARNESS_PATH_MAX], out[HARNESS_PATH_MAX], text[2048];
    ck_assert_int_eq(harness_write_file(&H, "ok.yaml", yaml, conf, sizeof(conf)), 0);
    path_of(out, sizeof(out), "ok.out");
    const char *check[] = {prestod_path(), "-c", conf, "-s", sock, "--check-config", NULL};
    int rc = harness_run(check, out, 30);
    slurp(out, text, sizeof(text));
    ck_assert_msg(rc == 0 && strstr(text, ": ok, 1 datasets"), "--check-config: %d '%s'", rc,
                  text);
}

/* The text of an ERROR body (code u32, then a string: u32 length, bytes). */
static void error_text(const uint8_t *body, size_t got, char *out, size_t len)
{
    uint32_t n = 0;
    if (got >= 8)
        memcpy(&n, body + 4, 4);
    if (n > got - 8 || got < 8)
        n = 0;
    snprintf(out, len, "%.*s", (int)n, (const char *)body + 8);
}

/* An ERROR on fd within timeout_ms, then the end: its code and text. */
static uint32_t expect_error_then_eof(int fd, int timeout_ms, char *text, size_t len)
{
    struct proto_header h;
    uint8_t body[512];
    int rc = harness_read_frame(fd, timeout_ms, &h, body, sizeof(body));
    ck_assert_msg(rc == 0, "no frame from the daemon (%d)", rc);
    ck_assert_uint_eq(h.type, PROTO_ERROR);
    error_text(body, h.body_len < sizeof(body) ? h.body_len : sizeof(body), text, len);
    ck_assert_int_ge(harness_read_until_eof(fd, timeout_ms), 0);
    return harness_error_code(body);
}

/* ---- directories another user could change ---- */

/* Made once (the tests of a run share them): "good", root's 0700 one, and
 * the bad ones below, each with what prestod says of it. */
static const struct {
    const char *rel, *why;
} bad_dirs[] = {
    {"tmp/theirs", "tmp/theirs belongs to uid 65534, not to uid 0"},
    {"open", "open is writable by others (mode 0777)"},
    {"group", "group is writable by its group (mode 0770)"},
    {"tmp/theirs/mine", "theirs belongs to uid 65534, not to root or uid 0"},
    {"tmp/link", "tmp/link is a symbolic link of uid 65534"},
    {"tmp", "tmp is writable by others (mode 1777)"},
};
#define NBAD (sizeof(bad_dirs) / sizeof(bad_dirs[0]))

static void make_bad_dirs(char *good, size_t len)
{
    struct stat sb;
    path_of(good, len, "good");
    if (lstat(good, &sb) == 0)
        return;
    root_dir("good", 0700);
    nobody_makes("tmp/theirs", 0755, NULL);
    nobody_makes("tmp/link", 0, good); /* theirs, to root's own */
    root_dir("open", 0777);
    root_dir("group", 0770);
    root_dir("tmp/theirs/mine", 0700); /* root's, in their directory */
}

/* ---- cache: an untrusted cache.dir ---- */

static void cache_yaml(char *buf, size_t len, const char *dir, const char *disk, int split_auto)
{
    char head[HARNESS_PATH_MAX + 64];
    snprintf(head, sizeof(head), "cache:\n  dir: %s\n  disk: %s\n", dir, disk);
    yaml_with(buf, len, head, split_auto);
}

START_TEST(test_cache_dir_untrusted)
{
    char good[HARNESS_PATH_MAX], sock[HARNESS_PATH_MAX], dir[HARNESS_PATH_MAX];
    char yaml[2048], want[HARNESS_PATH_MAX * 2];
    path_of(sock, sizeof(sock), "chk.sock");
    make_bad_dirs(good, sizeof(good));
    for (size_t i = 0; i < NBAD; i++) {
        path_of(dir, sizeof(dir), bad_dirs[i].rel);
        cache_yaml(yaml, sizeof(yaml), dir, "64MiB", 0);
        snprintf(want, sizeof(want), "prestod: cache.dir %s: ", dir);
        expect_refused(yaml, sock, want);
        expect_refused(yaml, sock, bad_dirs[i].why);
    }
    /* No disk tier, but a split: auto dataset's record lives there: refused
     * too. Neither: the directory is not used, and not asked about. */
    path_of(dir, sizeof(dir), "open");
    cache_yaml(yaml, sizeof(yaml), dir, "0", 1);
    expect_refused(yaml, sock, "is writable by others (mode 0777)");
    cache_yaml(yaml, sizeof(yaml), dir, "0", 0);
    expect_ok(yaml, sock);
    /* The good one, and one to be made in it. */
    cache_yaml(yaml, sizeof(yaml), good, "64MiB", 1);
    expect_ok(yaml, sock);
    path_of(dir, sizeof(dir), "good/not/yet");
    cache_yaml(yaml, sizeof(yaml), dir, "64MiB", 1);
    expect_ok(yaml, sock);
}
END_TEST

/* ---- cache: links planted in a trusted cache.dir ---- */

struct victim {
    const char *name, *text;
};
static const struct victim victims[] = {
    {"victim-seg", "precious: a root-owned file a segment link points to\n"},
    {"victim-hard", "precious: hard-linked as a segment\n"},
    {"victim-record", "precious: the profile record's link\n"},
    {"victim-tmp", "precious: the record's temporary file's link\n"},
    {"victim-probe", "precious: the O_DIRECT probe's link\n"},
    {"secret/a", "a file of a root-owned 0700 directory\n"},
    {"secret/b", "another one\n"},
};

static void plant(const char *cache, const char *name, const char *target, int hard)
{
    char at[HARNESS_PATH_MAX * 2], to[HARNESS_PATH_MAX];
    snprintf(at, sizeof(at), "%s/%s", cache, name);
    path_of(to, sizeof(to), target);
    ck_assert_msg((hard ? link(to, at) : symlink(to, at)) == 0, "%s: %s", at, strerror(errno));
}

START_TEST(test_cache_links_untouched)
{
    char cache[HARNESS_PATH_MAX], path[HARNESS_PATH_MAX * 2], text[256], yaml[2048];
    root_dir("secret", 0700);
    for (size_t i = 0; i < sizeof(victims) / sizeof(victims[0]); i++) {
        char p[HARNESS_PATH_MAX];
        ck_assert_int_eq(harness_write_file(&H, victims[i].name, victims[i].text, p,
                                            sizeof(p)), 0);
        ck_assert_int_eq(chmod(p, 0600), 0);
    }
    root_dir("cache", 0700);
    path_of(cache, sizeof(cache), "cache");
    plant(cache, "seg-000099.dat", "victim-seg", 0);
    plant(cache, "seg-000098.dat", "victim-hard", 1);
    plant(cache, "profile-trial-999999", "secret", 0);
    plant(cache, "profile-probe-999999", "secret", 0);
    plant(cache, "profile-hd.txt", "victim-record", 0);
    plant(cache, "profile-hd.txt.tmp", "victim-tmp", 0);
    plant(cache, "direct-io-probe.tmp", "victim-probe", 0);

    char head[HARNESS_PATH_MAX + 128];
    snprintf(head, sizeof(head),
             "cache:\n  dir: %s\n  disk: 64MiB\n  direct_io: true\n"
             "profile:\n  samples: %d\n", cache, NSAMPLES);
    yaml_with(yaml, sizeof(yaml), head, 1);
    mode_t old = umask(0); /* the daemon's: its files' modes are its own */
    int started = harness_start_config(&H, yaml, NULL);
    umask(old);
    ck_assert_msg(started == 0, "prestod did not start");
    ck_assert(harness_log_contains(&H, "seg-000099.dat: a symbolic link; segment skipped"));
    ck_assert(harness_log_contains(&H, "seg-000098.dat: not the daemon's own file, or "
                                       "hard-linked; segment skipped"));
    ck_assert(harness_log_contains(&H, "profile-trial-999999, which was not a directory"));
    ck_assert(harness_log_contains(&H, "profile-probe-999999, left by a daemon that stopped"));

    /* A profile (trial stores in the cache dir, the record written), then
     * epochs filling the disk tier. */
    presto_t *p;
    presto_profile_opts_t po;
    presto_profile_result_t *r = NULL;
    presto_profile_opts_init(&po);
    po.dataset = "hd";
    po.apply = 1;
    ck_assert_int_eq(harness_connect(&H, &p), 0);
    int rc = presto_profile(p, &po, NULL, NULL, &r);
    ck_assert_msg(rc == 0, "profile: %s", presto_errmsg(p));
    presto_profile_free(r);
    presto_close(p);
    struct harness_epoch e;
    presto_stream_opts_t o;
    presto_stream_opts_init(&o);
    o.dataset = "hd";
    o.batch_size = 4;
    for (int epoch = 0; epoch < 2; epoch++) {
        o.epoch = (uint32_t)epoch;
        ck_assert_int_eq(harness_pull_epoch(&H, &o, &e), 0);
        ck_assert_uint_eq(e.samples, NSAMPLES);
    }
    ck_assert_int_eq(harness_stop(&H), 0);

    for (size_t i = 0; i < sizeof(victims) / sizeof(victims[0]); i++) {
        path_of(path, sizeof(path), victims[i].name);
        slurp(path, text, sizeof(text));
        ck_assert_msg(strcmp(text, victims[i].text) == 0, "%s now holds '%s'",
                      victims[i].name, text);
    }
    struct stat sb;
    snprintf(path, sizeof(path), "%s/seg-000099.dat", cache);
    ck_assert_int_eq(lstat(path, &sb), 0);
    ck_assert_msg(S_ISLNK(sb.st_mode), "the planted segment link was replaced");
    /* The record replaced the link under its name: a file of its own, 0640
     * (not the 0666 umask 000 would have given), the temporary one gone. */
    snprintf(path, sizeof(path), "%s/profile-hd.txt", cache);
    ck_assert_int_eq(lstat(path, &sb), 0);
    ck_assert_msg(S_ISREG(sb.st_mode) && (sb.st_mode & 07777) == 0640,
                  "the record is mode %o", (unsigned)sb.st_mode);
    slurp(path, text, sizeof(text));
    ck_assert_msg(strstr(text, "(split: auto)"), "the record holds '%s'", text);
    snprintf(path, sizeof(path), "%s/profile-hd.txt.tmp", cache);
    ck_assert_int_eq(lstat(path, &sb), -1);
    snprintf(path, sizeof(path), "%s/profile-trial-999999", cache);
    ck_assert_int_eq(lstat(path, &sb), -1);
    snprintf(path, sizeof(path), "%s/profile-probe-999999", cache);
    ck_assert_int_eq(lstat(path, &sb), -1);
    /* A restart takes the record, and the disk tier's records. */
    umask(0);
    started = harness_start_config(&H, yaml, NULL);
    umask(old);
    ck_assert_msg(started == 0, "prestod did not start again");
    ck_assert(harness_log_contains(&H, "as chosen by an earlier profile"));
    ck_assert_int_eq(harness_pull_epoch(&H, &o, &e), 0);
    ck_assert_uint_eq(e.samples, NSAMPLES);
    ck_assert_int_eq(harness_stop(&H), 0);
}
END_TEST

/* ---- socket: an untrusted socket directory ---- */

/* Starts prestod (args) on sock, not the harness's: its pid once sock
 * answers a request (its event loop runs: SIGTERM is its own by then). */
static pid_t start_on(const char *sock, const char *const *args)
{
    const char *argv[16];
    char log[HARNESS_PATH_MAX];
    size_t n = 0;
    argv[n++] = prestod_path();
    argv[n++] = "-s";
    argv[n++] = sock;
    for (size_t i = 0; args && args[i]; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    path_of(log, sizeof(log), "start-on.log");
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) {
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    for (double end = now_s() + 20 * (harness_env("PRESTO_VALGRIND", NULL) ? 4 : 1);
         now_s() < end;) {
        presto_t *p = NULL;
        char *json = NULL;
        int rc = presto_connect(sock, &p);
        if (rc == 0)
            rc = presto_stats(p, &json);
        free(json);
        presto_close(p);
        if (rc == 0)
            return pid;
        ck_assert_msg(waitpid(pid, NULL, WNOHANG) == 0, "prestod on %s exited", sock);
        usleep(20000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    ck_abort_msg("prestod on %s did not answer", sock);
    return -1;
}

static void stop_pid(pid_t pid)
{
    int status;
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status 0x%x", status);
}

START_TEST(test_socket_dir_untrusted)
{
    char good[HARNESS_PATH_MAX], sock[HARNESS_PATH_MAX * 2], yaml[2048];
    make_bad_dirs(good, sizeof(good));
    yaml_with(yaml, sizeof(yaml), "", 0);
    for (size_t i = 0; i < NBAD; i++) {
        char dir[HARNESS_PATH_MAX];
        path_of(dir, sizeof(dir), bad_dirs[i].rel);
        snprintf(sock, sizeof(sock), "%s/prestod.sock", dir);
        expect_refused(yaml, sock, "prestod: socket directory of ");
        expect_refused(yaml, sock, bad_dirs[i].why);
        expect_refused(yaml, sock, "or another user could replace the socket");
    }
    /* Made by prestod: 0700, or 0711 (search only) when others may connect. */
    static const struct {
        const char *dir, *mode;
        mode_t want;
    } made[] = {{"smade1", "0600", 0700}, {"smade2", "0660", 0711}, {"smade3", "0666", 0711}};
    for (size_t i = 0; i < sizeof(made) / sizeof(made[0]); i++) {
        char dir[HARNESS_PATH_MAX];
        struct stat sb;
        path_of(dir, sizeof(dir), made[i].dir);
        snprintf(sock, sizeof(sock), "%s/prestod.sock", dir);
        char conf[HARNESS_PATH_MAX], text[128];
        snprintf(text, sizeof(text), "socket_mode: %s\n", made[i].mode);
        ck_assert_int_eq(harness_write_file(&H, "smade.yaml", text, conf, sizeof(conf)), 0);
        const char *args[] = {"-c", conf, NULL};
        mode_t old = umask(0);
        pid_t pid = start_on(sock, args);
        umask(old);
        ck_assert_int_eq(stat(dir, &sb), 0);
        ck_assert_msg((sb.st_mode & 07777) == made[i].want && sb.st_uid == 0,
                      "socket_mode %s: the directory is mode %o uid %u", made[i].mode,
                      (unsigned)(sb.st_mode & 07777), (unsigned)sb.st_uid);
        stop_pid(pid);
    }
}
END_TEST

/* ---- impostor: a server of another user where prestod is looked for ---- */

struct impostor {
    const char *const *socks; /* NULL-terminated */
    int ready;                /* a pipe's write end */
};

/* As NOBODY: listens on every socket and answers any request with a
 * STATS_REPLY of its own, until killed. */
static int impostor_serve(void *arg)
{
    const struct impostor *im = arg;
    struct pollfd pfd[8];
    int n = 0;
    for (; im->socks[n]; n++) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (strlen(im->socks[n]) >= sizeof(sa.sun_path))
            return 4;
        memcpy(sa.sun_path, im->socks[n], strlen(im->socks[n]) + 1);
        pfd[n].fd = socket(AF_UNIX, SOCK_STREAM, 0);
        pfd[n].events = POLLIN;
        if (bind(pfd[n].fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
            chmod(im->socks[n], 0666) < 0 || listen(pfd[n].fd, 16) < 0) {
            fprintf(stderr, "impostor: %s: %s\n", im->socks[n], strerror(errno));
            return 1;
        }
    }
    if (write(im->ready, "r", 1) != 1)
        return 2;
    for (;;) {
        if (poll(pfd, (nfds_t)n, -1) < 0)
            return 3;
        for (int i = 0; i < n; i++) {
            if (!(pfd[i].revents & POLLIN))
                continue;
            int c = accept(pfd[i].fd, NULL, NULL);
            uint8_t raw[PROTO_HEADER_SIZE];
            struct proto_header h;
            if (c < 0)
                continue;
            if (recv(c, raw, sizeof(raw), MSG_WAITALL) == (ssize_t)sizeof(raw) &&
                proto_header_decode(raw, 1u << 20, &h) == 0) {
                static const char json[] = "{\"impostor\": true}";
                struct proto_wbuf w;
                proto_wbuf_init(&w);
                proto_frame_begin(&w, PROTO_STATS_REPLY, h.req_id);
                proto_put_str(&w, json, sizeof(json) - 1);
                proto_frame_finish(&w);
                if (send(c, w.data, w.len, MSG_NOSIGNAL) < 0)
                    perror("impostor: send");
                proto_wbuf_free(&w);
            }
            close(c);
        }
    }
}

/* presto_connect + presto_stats on sock: 0 with the reply in json (freed
 * by the caller), or the code with the message in msg. */
static int ask_stats(const char *sock, char **json, char *msg, size_t len)
{
    presto_t *p;
    *json = NULL;
    int rc = presto_connect(sock, &p);
    if (rc == 0)
        rc = presto_stats(p, json);
    snprintf(msg, len, "%s", presto_errmsg(p));
    presto_close(p);
    return rc;
}

START_TEST(test_impostor_refused)
{
    char squat[HARNESS_PATH_MAX + 32], open_sock[HARNESS_PATH_MAX + 32];
    char link_sock[HARNESS_PATH_MAX + 32], own_sock[HARNESS_PATH_MAX + 32];
    char home[HARNESS_PATH_MAX], msg[1024], out[HARNESS_PATH_MAX], text[2048];
    char *json = NULL;
    /* Where root's prestod would be with XDG_RUNTIME_DIR unset, squatted in
     * a sticky directory anyone may write (as /tmp/presto-0); a directory
     * anyone may write; a link of theirs there; and a directory that is the
     * other user's alone, in one they cannot change (legitimate). */
    nobody_makes("tmp/presto-0", 0755, NULL);
    root_dir("iopen", 0777);
    root_dir("ihome", 0755);
    path_of(home, sizeof(home), "ihome");
    ck_assert_int_eq(chown(home, NOBODY, NOBODY), 0);
    nobody_makes("ihome/run", 0755, NULL);
    path_of(out, sizeof(out), "ihome/run");
    nobody_makes("tmp/ilink", 0, out);
    snprintf(squat, sizeof(squat), "%s/presto-0/prestod.sock", tmp_dir);
    snprintf(open_sock, sizeof(open_sock), "%s/iopen/prestod.sock", H.dir);
    snprintf(link_sock, sizeof(link_sock), "%s/ilink/prestod.sock", tmp_dir);
    snprintf(own_sock, sizeof(own_sock), "%s/ihome/run/prestod.sock", H.dir);
    const char *socks[] = {squat, open_sock, own_sock, NULL};
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    struct impostor im = {socks, fds[1]};
    pid_t pid = harness_spawn_as(NOBODY, NOBODY, NULL, 0, impostor_serve, &im);
    ck_assert_int_gt(pid, 0);
    close(fds[1]);
    char c;
    ck_assert_msg(read(fds[0], &c, 1) == 1, "the impostor did not start");
    close(fds[0]);

    const char *refused[] = {squat, open_sock, link_sock};
    for (size_t i = 0; i < 3; i++) {
        int rc = ask_stats(refused[i], &json, msg, sizeof(msg));
        ck_assert_msg(rc == -PRESTO_E_DENIED && !json, "%s: %d '%s'", refused[i], rc, msg);
        ck_assert_msg(strstr(msg, "refusing prestod at ") && strstr(msg, "uid 65534") &&
                      strstr(msg, "PRESTO_TRUST_ANY_PEER=1"), "%s", msg);
    }
    ck_assert_msg(strstr(msg, "ilink belongs to uid 65534, in a directory anyone may write"),
                  "%s", msg);
    /* prestoctl, the victim of the issue, says so too and prints nothing of it. */
    char ctl[HARNESS_PATH_MAX * 2], outp[HARNESS_PATH_MAX];
    snprintf(ctl, sizeof(ctl), "%s/prestoctl", harness_env("PRESTO_BUILD", "build"));
    path_of(outp, sizeof(outp), "prestoctl-impostor.out");
    const char *argv[] = {ctl, "-s", squat, "stats", NULL};
    ck_assert_int_ne(harness_run(argv, outp, 30), 0);
    slurp(outp, text, sizeof(text));
    ck_assert_msg(strstr(text, "refusing prestod") && !strstr(text, "impostor"), "%s", text);
    /* The other user's own daemon, in its own directory: accepted. */
    ck_assert_int_eq(ask_stats(own_sock, &json, msg, sizeof(msg)), 0);
    ck_assert_msg(strstr(json, "impostor"), "%s", json);
    free(json);
    /* Told to trust any peer, the client connects (and hears the impostor). */
    setenv("PRESTO_TRUST_ANY_PEER", "1", 1);
    int rc = ask_stats(squat, &json, msg, sizeof(msg));
    unsetenv("PRESTO_TRUST_ANY_PEER");
    ck_assert_msg(rc == 0 && strstr(json, "impostor"), "%d %s", rc, msg);
    free(json);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}
END_TEST

/* ---- per_user: limits.connections_per_user ---- */

static void per_user_setup(void)
{
    char yaml[2048];
    yaml_with(yaml, sizeof(yaml),
              "socket_mode: 0666\n"
              "limits:\n  connections: 8\n  connections_per_user: 3\n  idle_timeout: 600\n",
              0);
    ck_assert_msg(harness_start_config(&H, yaml, NULL) == 0, "prestod did not start");
}

static void daemon_teardown(void)
{
    harness_stop_checked(&H);
}

#define FLOOD 200

struct holder {
    int to_parent, from_parent;
};

static int wait_byte(int fd)
{
    char c;
    return read(fd, &c, 1) == 1 ? 0 : -1;
}

/* As NOBODY: holds its 3 connections, is refused a 4th (told why), lets
 * the parent connect as root, then is refused FLOOD + 1 times. */
static int hold_cap(void *arg)
{
    const struct holder *ho = arg;
    int fds[3];
    char text[256];
    for (int i = 0; i < 3; i++)
        if ((fds[i] = harness_raw_connect(&H)) < 0)
            return 1;
    int fd = harness_raw_connect(&H);
    if (fd < 0)
        return 2;
    struct proto_header h;
    uint8_t body[256];
    if (harness_read_frame(fd, 10000, &h, body, sizeof(body)) < 0 || h.type != PROTO_ERROR ||
        harness_error_code(body) != PROTO_E_LIMIT)
        return 3;
    error_text(body, h.body_len, text, sizeof(text));
    if (!strstr(text, "too many connections of uid 65534: limits.connections_per_user (3)")) {
        fprintf(stderr, "child: refused with '%s'\n", text);
        return 4;
    }
    close(fd);
    if (write(ho->to_parent, "h", 1) != 1 || wait_byte(ho->from_parent) < 0)
        return 5;
    for (int i = 0; i < FLOOD; i++) {
        if ((fd = harness_raw_connect(&H)) < 0)
            return 6;
        close(fd); /* refused all the same: the daemon counts at accept */
    }
    usleep(1200 * 1000); /* past the log's second: the next line has the count */
    if ((fd = harness_raw_connect(&H)) < 0 ||
        harness_read_frame(fd, 10000, &h, body, sizeof(body)) < 0)
        return 7;
    close(fd);
    if (write(ho->to_parent, "f", 1) != 1 || wait_byte(ho->from_parent) < 0)
        return 8;
    for (int i = 0; i < 3; i++)
        close(fds[i]);
    return 0;
}

static double limit_hits(const char *name)
{
    char parent[64];
    double v = -1;
    snprintf(parent, sizeof(parent), "limits.%s", name);
    ck_assert_int_eq(harness_stat(&H, parent, "hits", &v), 0);
    return v;
}

START_TEST(test_connections_per_user)
{
    int up[2], down[2];
    ck_assert_int_eq(pipe(up), 0);
    ck_assert_int_eq(pipe(down), 0);
    struct holder ho = {up[1], down[0]};
    pid_t pid = harness_spawn_as(NOBODY, NOBODY, NULL, 0, hold_cap, &ho);
    ck_assert_int_gt(pid, 0);
    close(up[1]);
    close(down[0]);
    ck_assert_msg(wait_byte(up[0]) == 0, "the other user did not get to its cap");
    /* It holds its 3: another user still connects and is served. */
    char *json = NULL;
    ck_assert_int_eq(harness_stats(&H, &json), 0);
    double v = -1;
    ck_assert_int_eq(harness_json_number(json, "limits.connections_per_user", "value", &v), 0);
    ck_assert_int_eq((int)v, 3);
    free(json);
    ck_assert_int_eq((int)limit_hits("connections_per_user"), 1);
    struct harness_epoch e;
    presto_stream_opts_t o;
    presto_stream_opts_init(&o);
    o.dataset = "hd";
    o.batch_size = 4;
    ck_assert_int_eq(harness_pull_epoch(&H, &o, &e), 0);
    ck_assert_uint_eq(e.samples, NSAMPLES);
    ck_assert_int_eq(write(down[1], "g", 1), 1);
    ck_assert_msg(wait_byte(up[0]) == 0, "the other user's flood failed");
    v = -1;
    ck_assert_int_eq(harness_wait_stat(&H, "limits.connections_per_user", "hits", FLOOD + 2,
                                       5000, &v), 0);
    /* FLOOD + 2 refusals: a few lines, whose counts add up. */
    FILE *f = fopen(H.log, "r");
    char line[1024];
    unsigned lines = 0;
    unsigned long long more = 0;
    ck_assert_ptr_nonnull(f);
    while (fgets(line, sizeof(line), f)) {
        if (!strstr(line, "refused: too many connections of uid 65534"))
            continue;
        lines++;
        const char *m = strstr(line, "; ");
        if (m)
            more += strtoull(m + 2, NULL, 10);
    }
    fclose(f);
    printf("test_connections_per_user: %d refusals logged in %u lines\n", FLOOD + 2, lines);
    ck_assert_msg(lines >= 2 && lines <= 6, "%u log lines for %d refusals", lines, FLOOD + 2);
    ck_assert_uint_eq(lines + more, FLOOD + 2);
    ck_assert_int_eq(write(down[1], "x", 1), 1);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the other user: 0x%x",
                  status);
    close(up[0]);
    close(down[1]);
    ck_assert(harness_alive(&H));
}
END_TEST

/* ---- idle: limits.idle_timeout ---- */

static void idle_setup(void)
{
    char yaml[2048];
    yaml_with(yaml, sizeof(yaml), "prefetch: 1\nlimits:\n  idle_timeout: 1\n", 0);
    ck_assert_msg(harness_start_config(&H, yaml, NULL) == 0, "prestod did not start");
}

START_TEST(test_idle_timeout)
{
    presto_stream_opts_t o;
    presto_stream_opts_init(&o);
    o.dataset = "hd";
    o.batch_size = 4;
    o.prefetch = 1;
    /* A: sends nothing. B: a stream it reads one batch of, then leaves.
     * C: a handle left alone (its control connection). D: a handle that
     * keeps asking. E: a handle whose finished stream left its connection
     * kept for the next one. */
    double t0 = now_s(), closed_after = -1;
    int a = harness_raw_connect(&H);
    ck_assert_int_ge(a, 0);
    presto_t *pb, *pc, *pd, *pe;
    presto_stream_t *sb;
    presto_batch_t b;
    ck_assert_int_eq(harness_connect(&H, &pb), 0);
    ck_assert_int_eq(presto_stream_open(pb, &o, &sb), 0);
    ck_assert_int_eq(presto_next(sb, &b), 1);
    uint64_t got = b.n;
    presto_release(sb, &b);
    ck_assert_int_eq(harness_connect(&H, &pc), 0);
    ck_assert_int_eq(harness_connect(&H, &pd), 0);
    ck_assert_int_eq(harness_connect(&H, &pe), 0);
    presto_stream_t *se;
    ck_assert_int_eq(presto_stream_open(pe, &o, &se), 0);
    while (presto_next(se, &b) > 0)
        presto_release(se, &b);
    presto_stream_close(se); /* its connection is kept, idle from now */
    int asked = 0;
    while (now_s() - t0 < 2.6) {
        char *json = NULL;
        ck_assert_msg(presto_stats(pd, &json) == 0, "D: %s", presto_errmsg(pd));
        free(json);
        asked++;
        struct pollfd pfd = {a, POLLIN, 0};
        if (closed_after < 0 && poll(&pfd, 1, 0) > 0)
            closed_after = now_s() - t0;
        usleep(200 * 1000);
    }
    /* A: the ERROR, then the end, after about a second. */
    char text[256];
    ck_assert_uint_eq(expect_error_then_eof(a, 10000, text, sizeof(text)), PROTO_E_LIMIT);
    if (closed_after < 0)
        closed_after = now_s() - t0;
    close(a);
    printf("test_idle_timeout: an idle connection closed after %.2f s (idle_timeout 1 s); "
           "one that asked %d times in %.1f s stayed\n", closed_after, asked, now_s() - t0);
    ck_assert_msg(strstr(text, "idle for 1 s: limits.idle_timeout"), "%s", text);
    ck_assert_msg(closed_after >= 0.9, "closed after %.2f s", closed_after);
    /* B: the stream was open, so its connection stayed: the rest comes. */
    int rc;
    while ((rc = presto_next(sb, &b)) > 0) {
        got += b.n;
        presto_release(sb, &b);
    }
    ck_assert_msg(rc == 0, "B: %s", presto_stream_errmsg(sb));
    ck_assert_uint_eq(got, NSAMPLES);
    presto_stream_close(sb);
    /* C and E: what the daemon closed, the client makes again by itself. */
    char *json = NULL;
    ck_assert_msg(presto_stats(pc, &json) == 0, "C: %s", presto_errmsg(pc));
    free(json);
    ck_assert_int_eq(presto_stream_open(pe, &o, &se), 0);
    got = 0;
    while ((rc = presto_next(se, &b)) > 0) {
        got += b.n;
        presto_release(se, &b);
    }
    ck_assert_msg(rc == 0 && got == NSAMPLES, "E: %d %s", rc, presto_stream_errmsg(se));
    presto_stream_close(se);
    presto_close(pb);
    presto_close(pc);
    presto_close(pd);
    presto_close(pe);
    /* A, and the idle connections of B, C and E's handles (3 at least). */
    ck_assert_int_ge((int)limit_hits("idle_timeout"), 3);
    double v = -1;
    ck_assert_int_eq(harness_stat(&H, "limits.idle_timeout", "value", &v), 0);
    ck_assert_int_eq((int)v, 1);
    ck_assert(harness_log_contains(&H, "closed: idle for 1 s: limits.idle_timeout"));
}
END_TEST

/* ---- check: --check-config refuses what start-up refuses ---- */

START_TEST(test_check_config)
{
    char sock[HARNESS_PATH_MAX], yaml[2048], file[HARNESS_PATH_MAX], want[HARNESS_PATH_MAX * 2];
    path_of(sock, sizeof(sock), "chk.sock");
    /* A root that does not exist, or is a file: the file's line and the key. */
    snprintf(yaml, sizeof(yaml),
             "workers: 1\ndatasets:\n  - name: gone\n    steps: " STEPS "\n"
             "    root: %s/no-such-dir\n", H.dir);
    snprintf(want, sizeof(want), ":5: key 'datasets.root': dataset 'gone': %s/no-such-dir: "
             "No such file or directory", H.dir);
    expect_refused(yaml, sock, want);
    ck_assert_int_eq(harness_write_file(&H, "a-file", "x", file, sizeof(file)), 0);
    snprintf(yaml, sizeof(yaml), "datasets:\n  - name: f\n    root: %s\n", file);
    expect_refused(yaml, sock, "key 'datasets.root': dataset 'f'");
    expect_refused(yaml, sock, ": not a directory");
    /* A socket path longer than sun_path holds. */
    char longsock[HARNESS_PATH_MAX * 2];
    snprintf(longsock, sizeof(longsock), "%s/%0120d.sock", H.dir, 0);
    yaml_with(yaml, sizeof(yaml), "", 0);
    expect_refused(yaml, longsock, "is longer than 107 bytes");
    /* What starts passes. */
    yaml_with(yaml, sizeof(yaml), "log_level: warn\n", 0);
    expect_ok(yaml, sock);
}
END_TEST

static TCase *daemon_case(const char *name, void (*setup)(void))
{
    return harness_tcase(name, setup, setup ? daemon_teardown : NULL, CASE_TIMEOUT_S);
}

static Suite *hostile_suite(void)
{
    Suite *s = suite_create("hostile");
    TCase *tc = daemon_case("cache", NULL);
    tcase_add_test(tc, test_cache_dir_untrusted);
    tcase_add_test(tc, test_cache_links_untouched);
    suite_add_tcase(s, tc);
    tc = daemon_case("socket", NULL);
    tcase_add_test(tc, test_socket_dir_untrusted);
    tcase_add_test(tc, test_impostor_refused);
    suite_add_tcase(s, tc);
    tc = daemon_case("per_user", per_user_setup);
    tcase_add_test(tc, test_connections_per_user);
    suite_add_tcase(s, tc);
    tc = daemon_case("idle", idle_setup);
    tcase_add_test(tc, test_idle_timeout);
    suite_add_tcase(s, tc);
    tc = daemon_case("check", NULL);
    tcase_add_test(tc, test_check_config);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    /* Others must reach their directories and the sockets in it. */
    int rc = harness_init_for_others(&H);
    if (rc != 0)
        return rc == HARNESS_SKIP ? rc : EXIT_FAILURE;
    rc = harness_path(&H, "tmp", tmp_dir, sizeof(tmp_dir));
    if (rc == 0 && (mkdir(tmp_dir, 0700) < 0 || chmod(tmp_dir, 01777) < 0))
        rc = -errno;
    if (rc == 0)
        rc = harness_make_dataset(&H, "hd", NSAMPLES, 2, 5, 48, 80, data_root,
                                  sizeof(data_root));
    if (rc < 0) {
        harness_cleanup(&H);
        return EXIT_FAILURE;
    }
    return harness_finish(&H, harness_run_suite(hostile_suite()));
}
