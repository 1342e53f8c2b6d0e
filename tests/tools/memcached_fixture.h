/*
 * Real memcached servers for the tests: Debian's memcached, started on a
 * free loopback port (-l 127.0.0.1 -U 0), killed with its test (SIGKILL on
 * the parent's death as well), nothing left behind. Header-only (static
 * functions), for the unit and the integration tests alike.
 *
 *   struct mcd m;
 *   if (!mcd_available()) return 77;
 *   mcd_start(&m, 0, "-m", "64", NULL);   // any free port; extra options
 *   ... m.spec is "127.0.0.1:PORT" ...
 *   mcd_stop(&m, SIGKILL);                // SIGTERM (slow: ~1 s), SIGSTOP/SIGCONT
 *   mcd_restart(&m);                      // same port and options, empty
 */
#ifndef PRESTO_MEMCACHED_FIXTURE_H
#define PRESTO_MEMCACHED_FIXTURE_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MCD_BIN "/usr/bin/memcached"
#define MCD_MAX_ARGS 16

struct mcd {
    pid_t pid; /* 0: not running */
    uint16_t port;
    char spec[32]; /* "127.0.0.1:PORT" */
    const char *extra[MCD_MAX_ARGS];
    int nextra;
};

static inline int mcd_available(void)
{
    return access(MCD_BIN, X_OK) == 0;
}

/* A port nobody listens on now (the kernel's choice). */
static inline uint16_t mcd_free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    uint16_t port = 0;
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

static inline int mcd_accepts(uint16_t port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    int ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return ok;
}

/* Starts m on its port (m->port) with its options; 0 once it accepts
 * connections, -1 when it exited (the port was taken) or never did. */
static inline int mcd_spawn(struct mcd *m)
{
    char port[8];
    snprintf(port, sizeof(port), "%u", m->port);
    const char *argv[8 + MCD_MAX_ARGS + 1];
    int n = 0;
    argv[n++] = MCD_BIN;
    argv[n++] = "-p";
    argv[n++] = port;
    argv[n++] = "-l";
    argv[n++] = "127.0.0.1";
    argv[n++] = "-U";
    argv[n++] = "0";
    if (geteuid() == 0) {
        argv[n++] = "-u";
        argv[n++] = "nobody";
    }
    for (int i = 0; i < m->nextra; i++)
        argv[n++] = m->extra[i];
    argv[n] = NULL;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        int null = open("/dev/null", O_RDWR);
        if (null >= 0) {
            dup2(null, 0);
            dup2(null, 1);
            dup2(null, 2);
        }
        execv(MCD_BIN, (char *const *)argv);
        _exit(127);
    }
    for (int i = 0; i < 1000; i++) { /* up to 10 s */
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid)
            return -1;
        if (mcd_accepts(m->port)) {
            m->pid = pid;
            snprintf(m->spec, sizeof(m->spec), "127.0.0.1:%u", m->port);
            return 0;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

/* Starts a memcached on port (0: a free one) with extra options (a NULL
 * terminated list of strings). Returns 0, or -1. */
static inline int mcd_start(struct mcd *m, uint16_t port, ...)
{
    memset(m, 0, sizeof(*m));
    va_list ap;
    va_start(ap, port);
    const char *a;
    while ((a = va_arg(ap, const char *)) && m->nextra < MCD_MAX_ARGS)
        m->extra[m->nextra++] = a;
    va_end(ap);
    for (int attempt = 0; attempt < 20; attempt++) {
        m->port = port ? port : mcd_free_port();
        if (m->port && mcd_spawn(m) == 0)
            return 0;
        if (port)
            break;
    }
    return -1;
}

/* Sends sig; SIGKILL and SIGTERM also reap the server, SIGSTOP waits until
 * it is stopped (a request sent then gets no answer). */
static inline void mcd_stop(struct mcd *m, int sig)
{
    if (m->pid <= 0)
        return;
    kill(m->pid, sig);
    if (sig == SIGSTOP) { /* returns once every thread stopped: no answer after it */
        int st;
        while (waitpid(m->pid, &st, WUNTRACED) < 0 && errno == EINTR)
            ;
    }
    if (sig == SIGKILL || sig == SIGTERM) {
        if (sig == SIGTERM) {
            kill(m->pid, SIGCONT);
        }
        waitpid(m->pid, NULL, 0);
        m->pid = 0;
    }
}

/* Kills m and starts it again on the same port, empty (SIGKILL: memcached
 * takes most of a second to leave on SIGTERM). */
static inline int mcd_restart(struct mcd *m)
{
    mcd_stop(m, SIGKILL);
    for (int attempt = 0; attempt < 100; attempt++) {
        if (mcd_spawn(m) == 0)
            return 0;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return -1;
}

#endif
