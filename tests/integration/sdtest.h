/*
 * Helpers for the tests of prestod under systemd (test_systemd.c,
 * test_watchdog.c, test_seccomp.c): a fake $NOTIFY_SOCKET that receives
 * what prestod sends, starting prestod with extra environment and with a
 * listening socket passed as fd 3 (socket activation), and waiting for it.
 *
 * Header-only (static inline) because the Makefile links each integration
 * test with harness.c alone. Like the harness, every function returns 0 (or
 * a count) on success and a negative errno on failure, after printing what
 * went wrong to stderr.
 */
#ifndef PRESTO_TEST_SDTEST_H
#define PRESTO_TEST_SDTEST_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define SD_LISTEN_FD 3 /* SD_LISTEN_FDS_START */
#define SD_MSG_MAX 4096
/* valgrind makes start-up and shutdown several times slower. */
#define SD_VALGRIND_SLOWDOWN 4

static inline int sd_valgrind(void)
{
    return strcmp(harness_env("PRESTO_VALGRIND", "0"), "1") == 0;
}

static inline double sd_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline void sd_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* ---- the fake $NOTIFY_SOCKET ---- */

struct sd_notify {
    int fd;
    char env[HARNESS_PATH_MAX + 16]; /* "NOTIFY_SOCKET=..." */
};

/* Binds a datagram socket at h->dir/name, or in the abstract namespace
 * (NOTIFY_SOCKET=@...) when abstract is set. */
static inline int sd_notify_open(struct sd_notify *n, const struct harness *h,
                                 const char *name, int abstract)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    char path[HARNESS_PATH_MAX];
    socklen_t salen;
    int rc;

    n->fd = -1;
    if (abstract) {
        rc = snprintf(path, sizeof(path), "@presto-test-%d-%s", (int)getpid(), name);
    } else {
        rc = harness_path(h, name, path, sizeof(path));
        if (rc < 0)
            return rc;
        rc = (int)strlen(path);
    }
    if (rc < 0 || (size_t)rc >= sizeof(sa.sun_path)) {
        fprintf(stderr, "sdtest: notify socket path %s is too long\n", path);
        return -ENAMETOOLONG;
    }
    memcpy(sa.sun_path, path, (size_t)rc);
    if (abstract)
        sa.sun_path[0] = '\0';
    else
        unlink(path);
    salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)rc);
    n->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (n->fd < 0 || bind(n->fd, (struct sockaddr *)&sa, salen) < 0) {
        rc = -errno;
        fprintf(stderr, "sdtest: notify socket %s: %s\n", path, strerror(-rc));
        if (n->fd >= 0)
            close(n->fd);
        n->fd = -1;
        return rc;
    }
    snprintf(n->env, sizeof(n->env), "NOTIFY_SOCKET=%s", path);
    return 0;
}

static inline void sd_notify_close(struct sd_notify *n)
{
    if (n->fd >= 0)
        close(n->fd);
    n->fd = -1;
}

/* Receives one message (NUL-terminated into buf) within timeout_ms.
 * Returns its length, 0 on timeout, or a negative errno. */
static inline int sd_notify_recv(struct sd_notify *n, char *buf, size_t len, int timeout_ms)
{
    struct pollfd p = {.fd = n->fd, .events = POLLIN};
    int rc;
    while ((rc = poll(&p, 1, timeout_ms)) < 0 && errno == EINTR)
        ;
    if (rc < 0)
        return -errno;
    if (rc == 0)
        return 0;
    ssize_t got = recv(n->fd, buf, len - 1, MSG_DONTWAIT);
    if (got < 0)
        return errno == EAGAIN ? 0 : -errno;
    buf[got] = '\0';
    return (int)got;
}

/* 1 when the message has a line equal to line ("READY=1"), else 0. */
static inline int sd_msg_has(const char *msg, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = msg; *p;) {
        if (strncmp(p, line, n) == 0 && (p[n] == '\n' || p[n] == '\0'))
            return 1;
        const char *nl = strchr(p, '\n');
        if (!nl)
            break;
        p = nl + 1;
    }
    return 0;
}

/* 1 when every line of the message is KEY=VALUE with an upper-case KEY. */
static inline int sd_msg_well_formed(const char *msg)
{
    const char *p = msg;
    if (!*p)
        return 0;
    while (*p) {
        const char *k = p;
        while ((*p >= 'A' && *p <= 'Z') || *p == '_')
            p++;
        if (p == k || *p != '=')
            return 0;
        p = strchr(p, '\n');
        if (!p)
            return 1;
        p++;
    }
    return 1;
}

/* ---- starting prestod ---- */

struct sd_child {
    const char *const *args; /* prestod's arguments, NULL-terminated */
    const char *const *env;  /* extra NAME=VALUE, NULL-terminated, or NULL */
    int listen_fd;           /* >= 0: passed as fd 3 with LISTEN_FDS=1, LISTEN_PID */
    int watchdog_pid;        /* set WATCHDOG_PID to prestod's pid */
    const char *log;         /* stdout and stderr (appended) */
    const char *const *wrap; /* a command to run prestod under, or NULL */
};

/* In the forked child: never returns. */
static inline void sd_exec_child(const struct sd_child *c, const char *const *argv)
{
    char pid[24];
    int in = open("/dev/null", O_RDONLY);
    if (in >= 0) {
        dup2(in, STDIN_FILENO);
        close(in);
    }
    int fd = open(c->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "sdtest: %s: %s\n", c->log, strerror(errno));
        _exit(126);
    }
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    snprintf(pid, sizeof(pid), "%d", (int)getpid());
    if (c->listen_fd >= 0) {
        if (c->listen_fd != SD_LISTEN_FD && dup2(c->listen_fd, SD_LISTEN_FD) < 0)
            _exit(126);
        fcntl(SD_LISTEN_FD, F_SETFD, 0); /* inherited across exec */
        setenv("LISTEN_FDS", "1", 1);
        setenv("LISTEN_PID", pid, 1);
    }
    if (c->watchdog_pid)
        setenv("WATCHDOG_PID", pid, 1);
    for (size_t i = 0; c->env && c->env[i]; i++)
        putenv((char *)c->env[i]);
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* if the test dies, prestod goes too */
    execvp(argv[0], (char *const *)argv);
    fprintf(stderr, "sdtest: exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

/* Starts $PRESTO_BUILD/prestod (under valgrind with PRESTO_VALGRIND=1, or
 * under c->wrap). Returns its pid or a negative errno. */
static inline pid_t sd_spawn(const struct sd_child *c)
{
    static const char *const vg[] = {"valgrind", "-q", "--error-exitcode=99",
                                     "--leak-check=full",
                                     "--errors-for-leak-kinds=definite", NULL};
    const char *argv[64];
    char prestod[HARNESS_PATH_MAX * 2];
    size_t n = 0;

    snprintf(prestod, sizeof(prestod), "%s/prestod", harness_env("PRESTO_BUILD", "build"));
    if (access(prestod, X_OK) != 0) {
        int e = errno;
        fprintf(stderr, "sdtest: %s: %s\n", prestod, strerror(e));
        return -e;
    }
    const char *const *wrap = c->wrap ? c->wrap : sd_valgrind() ? vg : NULL;
    for (size_t i = 0; wrap && wrap[i]; i++)
        argv[n++] = wrap[i];
    argv[n++] = prestod;
    for (size_t i = 0; c->args && c->args[i]; i++) {
        if (n + 1 >= sizeof(argv) / sizeof(argv[0]))
            return -E2BIG;
        argv[n++] = c->args[i];
    }
    argv[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        fprintf(stderr, "sdtest: fork: %s\n", strerror(e));
        return -e;
    }
    if (pid == 0)
        sd_exec_child(c, argv);
    return pid;
}

/* Waits up to timeout_s (times the valgrind slowdown) for pid; returns its
 * exit status, 128 + signal, or -ETIMEDOUT (it is then killed). */
static inline int sd_wait(pid_t pid, double timeout_s)
{
    double deadline = sd_now() + timeout_s * (sd_valgrind() ? SD_VALGRIND_SLOWDOWN : 1);
    for (;;) {
        int status;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (r < 0 && errno != EINTR)
            return -errno;
        if (sd_now() > deadline) {
            kill(pid, SIGKILL);
            while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
            return -ETIMEDOUT;
        }
        sd_sleep_ms(10);
    }
}

/* SIGTERM, then sd_wait. */
static inline int sd_stop(pid_t pid, double timeout_s)
{
    kill(pid, SIGTERM);
    return sd_wait(pid, timeout_s);
}

/* A listening Unix stream socket at path (SOCK_CLOEXEC), or -errno. */
static inline int sd_listen(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 64) < 0) {
        int e = errno;
        fprintf(stderr, "sdtest: listen on %s: %s\n", path, strerror(e));
        if (fd >= 0)
            close(fd);
        return -e;
    }
    return fd;
}

/* Copies a file to stderr under a title (a daemon's log when a check fails). */
static inline void sd_print_file(const char *path, const char *title)
{
    FILE *f = fopen(path, "r");
    char buf[4096];
    size_t n;
    if (!f)
        return;
    fprintf(stderr, "---- %s (%s) ----\n", title, path);
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
        fwrite(buf, 1, n, stderr);
    fprintf(stderr, "---- end of %s ----\n", title);
    fclose(f);
}

#endif
