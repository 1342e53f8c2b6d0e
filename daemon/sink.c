/* A stream's client stood in for by a thread: see sink.h. */
#include "sink.h"

#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SINK_ANSWERS 256u             /* answers the loop reads at once */
#define SINK_QUEUE (4 * SINK_MAX_MESSAGE) /* messages queued, not yet written */

struct sink {
    int fd[2]; /* [0] the event loop's (non-blocking), [1] the thread's */
    pthread_t thread;
    int started;
    struct event *ev, *wev; /* answers to read; output to write */
    sink_answer_fn fn;
    void *arg;
    uint8_t *out; /* messages to send, one after the other (zeros past their headers) */
    size_t nout;
    uint8_t in[SINK_ANSWERS * SINK_HEADER];
    size_t nin;
    int dispatching, dead; /* in fn; destroyed from within it */
    int broken;            /* the socket failed: errno */
};

static void header_put(uint8_t *b, uint32_t len, uint64_t tag)
{
    memset(b, 0, SINK_HEADER);
    memcpy(b, &len, sizeof(len));
    memcpy(b + 8, &tag, sizeof(tag));
}

static int write_all(int fd, const uint8_t *b, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, b, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        b += n;
        len -= (size_t)n;
    }
    return 0;
}

/* The client: reads what comes, answers each whole message, until the
 * loop's end is shut. */
static void *sink_main(void *arg)
{
    struct sink *s = arg;
    size_t cap = 2 * SINK_MAX_MESSAGE, have = 0;
    uint8_t *buf = malloc(cap);
    while (buf) {
        ssize_t n = read(s->fd[1], buf + have, cap - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        have += (size_t)n;
        size_t off = 0;
        while (have - off >= SINK_HEADER) {
            uint32_t len;
            uint64_t tag;
            memcpy(&len, buf + off, sizeof(len));
            memcpy(&tag, buf + off + 8, sizeof(tag));
            if (have - off < len)
                break;
            uint8_t ans[SINK_HEADER];
            header_put(ans, SINK_HEADER, tag);
            if (write_all(s->fd[1], ans, sizeof(ans)) < 0)
                goto out;
            off += len;
        }
        memmove(buf, buf + off, have - off);
        have -= off;
    }
out:
    free(buf);
    return NULL;
}

static void sink_free(struct sink *s)
{
    if (s->fd[0] >= 0)
        shutdown(s->fd[0], SHUT_RDWR); /* the thread reads its end */
    if (s->started)
        pthread_join(s->thread, NULL);
    if (s->ev)
        event_free(s->ev);
    if (s->wev)
        event_free(s->wev);
    for (int i = 0; i < 2; i++)
        if (s->fd[i] >= 0)
            close(s->fd[i]);
    free(s->out);
    free(s);
}

/* Answers, on the loop: each to the owner, in the order they came. */
static void sink_on_read(evutil_socket_t fd, short what, void *arg)
{
    struct sink *s = arg;
    (void)what;
    ssize_t n = recv(fd, s->in + s->nin, sizeof(s->in) - s->nin, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) { /* the thread is gone: sink_send says so from now on */
        event_del(s->ev);
        return;
    }
    s->nin += (size_t)n;
    size_t off = 0;
    s->dispatching = 1;
    while (!s->dead && s->nin - off >= SINK_HEADER) {
        uint64_t tag;
        memcpy(&tag, s->in + off + 8, sizeof(tag));
        off += SINK_HEADER;
        s->fn(s->arg, tag);
    }
    s->dispatching = 0;
    if (s->dead) {
        sink_free(s);
        return;
    }
    memmove(s->in, s->in + off, s->nin - off);
    s->nin -= off;
}

/* The messages queued, written once the socket is writable (the loop's
 * next pass), as a bufferevent writes a connection's frames. */
static void sink_on_write(evutil_socket_t fd, short what, void *arg)
{
    struct sink *s = arg;
    (void)what;
    ssize_t n = send(fd, s->out, s->nout, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
        s->nout = 0; /* the thread is gone: sink_send says so */
        s->broken = errno;
        return;
    }
    if (n > 0) {
        memmove(s->out, s->out + n, s->nout - (size_t)n);
        s->nout -= (size_t)n;
    }
    if (s->nout > 0)
        event_add(s->wev, NULL);
}

int sink_create(struct sink **out, struct event_base *base, sink_answer_fn fn, void *arg)
{
    struct sink *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->fd[0] = s->fd[1] = -1;
    s->fn = fn;
    s->arg = arg;
    int rc = 0;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s->fd) < 0)
        rc = -errno;
    else if (!(s->out = calloc(1, SINK_QUEUE)) ||
             !(s->ev = event_new(base, s->fd[0], EV_READ | EV_PERSIST, sink_on_read, s)) ||
             !(s->wev = event_new(base, s->fd[0], EV_WRITE, sink_on_write, s)))
        rc = -ENOMEM;
    else if (evutil_make_socket_nonblocking(s->fd[0]) < 0 || event_add(s->ev, NULL) < 0)
        rc = -EIO;
    if (rc == 0) {
        /* The thread takes no signal: they are the loop's. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        rc = -pthread_create(&s->thread, NULL, sink_main, s);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        s->started = rc == 0;
    }
    if (rc < 0) {
        sink_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

int sink_send(struct sink *s, uint64_t tag, size_t bytes)
{
    if (s->broken)
        return -s->broken;
    if (bytes < SINK_HEADER)
        bytes = SINK_HEADER;
    if (bytes > SINK_MAX_MESSAGE)
        bytes = SINK_MAX_MESSAGE;
    if (s->nout + bytes > SINK_QUEUE)
        return -EAGAIN;
    memset(s->out + s->nout, 0, bytes);
    header_put(s->out + s->nout, (uint32_t)bytes, tag);
    if (s->nout == 0 && event_add(s->wev, NULL) < 0)
        return -EIO;
    s->nout += bytes;
    return 0;
}

void sink_destroy(struct sink *s)
{
    if (!s)
        return;
    if (s->dispatching) { /* from within an answer: once it returns */
        s->dead = 1;
        return;
    }
    sink_free(s);
}
