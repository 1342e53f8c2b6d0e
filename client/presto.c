/*
 * libprestoclient: the public C API (presto.h) over the wire protocol
 * (common/proto.h).
 *
 * A presto_t holds one control connection for STATS and DATASETS; every
 * epoch stream gets a connection of its own, so a stream's BATCH frames
 * never interleave with anything else.
 *
 * Shared memory (the default where the daemon can): the OPENED reply brings
 * the stream's ring as a file descriptor, mapped once; a batch is a view of
 * one of its slots, handed back with a RELEASE frame.
 *
 * Socket: batches are read straight into a buffer owned by the stream, laid
 * out so that the sample bytes start at a 64-byte boundary and the labels at
 * an 8-byte one; the buffer is reused (and grown when needed) from one batch
 * to the next, or, under manual_release, one buffer per batch held, which
 * its release hands back to a small pool of the stream's (OWN_POOL_MAX) for
 * the batches after it: a fresh buffer per batch was mapped, faulted in,
 * zeroed and unmapped by glibc every time (a fifth of a Python socket
 * epoch's time).
 *
 * Under manual_release a stream counts the batches its caller holds, under
 * its own lock, since presto_release may come from any thread (a Python
 * finalizer): the lock covers that count, the stream's state as release
 * reads it, and every frame sent on the stream's connection; presto_next
 * waits and reads without it. A stream closed while batches are held stays
 * allocated (and its ring mapped) until the last of them is released.
 *
 * Lock order: a stream's lock, then kept_lock.
 */
#include "presto.h"
#include "proto.h"
#include "trust.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <pthread.h>
#include <unistd.h>

#define PRESTO_API __attribute__((visibility("default")))

/* The public codes are the wire codes. */
#define SAME(a, b) ((int)(a) == (int)(b))
_Static_assert(SAME(PRESTO_E_PROTO, PROTO_E_PROTO) && SAME(PRESTO_E_VERSION, PROTO_E_VERSION) &&
                   SAME(PRESTO_E_TOOBIG, PROTO_E_TOOBIG) &&
                   SAME(PRESTO_E_NODATASET, PROTO_E_NODATASET) &&
                   SAME(PRESTO_E_INVAL, PROTO_E_INVAL) && SAME(PRESTO_E_LIMIT, PROTO_E_LIMIT) &&
                   SAME(PRESTO_E_SAMPLE, PROTO_E_SAMPLE) &&
                   SAME(PRESTO_E_SHUTDOWN, PROTO_E_SHUTDOWN) && SAME(PRESTO_E_IO, PROTO_E_IO) &&
                   SAME(PRESTO_E_NOMEM, PROTO_E_NOMEM) &&
                   SAME(PRESTO_E_INTERNAL, PROTO_E_INTERNAL) &&
                   SAME(PRESTO_E_DENIED, PROTO_E_DENIED) &&
                   SAME(PRESTO_E_DENIED + 1, PROTO_E_MAX),
               "PRESTO_E_* and PROTO_E_* must be the same codes");
_Static_assert(SAME(PRESTO_DTYPE_U8, PROTO_DTYPE_U8) && SAME(PRESTO_DTYPE_F32, PROTO_DTYPE_F32) &&
                   SAME(PRESTO_DTYPE_I16, PROTO_DTYPE_I16) &&
                   SAME(PRESTO_DTYPE_I64, PROTO_DTYPE_I64),
               "PRESTO_DTYPE_* and PROTO_DTYPE_* must be the same codes");
#undef SAME

#define PRESTO_ERRMSG_SIZE 512
#define BATCH_N_OFFSET 12
/* Sample bytes start at this alignment inside the stream's buffer. */
#define DATA_ALIGN 64
/* Buffers of released manual_release batches a stream keeps for the next. */
#define OWN_POOL_MAX 4
/* Largest OPENED/END body; ERROR bodies are bounded by PROTO_MAX_STR. */
#define SMALL_BODY_MAX 128
#define ERROR_BODY_MAX (8 + PROTO_MAX_STR)

/* One socket to the daemon and the message that explains its last failure. */
struct conn {
    int fd;
    const char *path;
    char err[PRESTO_ERRMSG_SIZE];
};

/* Who may keep a finished stream's connection (see "kept connections"):
 * a presto_t and its streams share one, and only while the presto_t is open
 * does a stream closing keep its connection. Counted under kept_lock. */
struct kept_owner {
    unsigned refs;
    int open;
};

struct presto {
    struct conn ctl;
    uint32_t next_req;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    struct kept_owner *owner;
};

enum stream_state { STREAM_RUNNING, STREAM_DONE, STREAM_FAILED };

struct presto_stream {
    struct conn c;
    enum stream_state state;
    int error;          /* the negative code presto_next repeats once failed */
    uint32_t req_id;    /* the OPEN's, echoed by every frame of the stream */
    uint32_t stream_id;
    presto_stream_info_t info;
    uint64_t skipped;
    uint8_t *buf;       /* DATA_ALIGN-aligned receive buffer */
    size_t buf_cap;
    uint32_t batch_size;
    uint32_t prefetch;  /* granted (OPENED's slots; 0: the daemon did not say) */
    int manual_release;
    uint32_t transport; /* PROTO_TRANSPORT_* */
    uint8_t *ring;      /* shared memory: the mapped ring */
    size_t ring_bytes;
    uint64_t slot_bytes;
    pid_t ring_pid;     /* the process that mapped it */
    uint32_t last_slot; /* slot + 1 of the batch presto_next returned last */
    struct kept_owner *owner; /* its presto_t's */
    int copy_when_full, interruptible;
    int daemon_info;    /* its OPENED had the dataset info: it takes RELEASE flags */
    struct proto_labels labels; /* every batch's label format (OPENED) */
    pthread_mutex_t lock; /* see the top of this file */
    uint32_t held;      /* manual_release: batches returned, not yet released */
    uint32_t held_slots; /* ... of them on a ring slot */
    int closed;         /* presto_stream_close ran: the last release frees it */
    void *pool[OWN_POOL_MAX]; /* under lock: released batches' buffers (own_alloc) */
    uint32_t npool;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
};

/* ---- messages and errors ---- */

__attribute__((format(printf, 3, 4)))
static int conn_fail(struct conn *c, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof(c->err), fmt, ap);
    va_end(ap);
    return -code;
}

/* An ERROR code from the daemon as a negative PRESTO_E_* (never 0). */
static int daemon_code(uint32_t code)
{
    if (code == PROTO_OK || code >= PROTO_E_MAX)
        return -PRESTO_E_INTERNAL;
    return -(int)code;
}

/* ---- socket I/O ---- */

/* Who answers at path must be the daemon meant there: root, this process's
 * user, or the user who alone controls the socket's directory and every
 * one on the way (trust.h: it owns the directory, nobody else may write to
 * one on the way, and what is taken from a sticky /tmp is root's: anyone
 * can make a directory there named like another user's). Else the
 * connection is refused, unless PRESTO_TRUST_ANY_PEER=1, so that an
 * impostor who took the socket's place first cannot answer. */
static int conn_check_peer(struct conn *c, int fd, const char *path)
{
    struct { pid_t pid; uid_t uid; gid_t gid; } cr; /* struct ucred, without _GNU_SOURCE */
    socklen_t len = sizeof(cr);
    const char *any = getenv("PRESTO_TRUST_ANY_PEER");
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0)
        return conn_fail(c, PRESTO_E_IO, "cannot tell who listens at %s (SO_PEERCRED): %s",
                         path, strerror(errno));
    if (cr.uid == 0 || cr.uid == geteuid() || (any && strcmp(any, "1") == 0))
        return 0;
    char dir[sizeof(((struct sockaddr_un *)0)->sun_path)], why[384];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    const char *name = slash ? path + (slash - dir) + 1 : path;
    if (slash)
        slash[slash == dir] = '\0'; /* "/x.sock": the directory is "/" */
    else
        snprintf(dir, sizeof(dir), ".");
    struct trust_opts o = {cr.uid, TRUST_OWNER_EXACT | TRUST_STICKY_ROOT, 0};
    int dfd = trust_open_dir(dir, &o, why, sizeof(why));
    if (dfd >= 0) {
        struct stat sb;
        if (fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISSOCK(sb.st_mode))
            why[0] = '\0';
        else
            snprintf(why, sizeof(why), "%s is not a socket itself (a symbolic link?)", path);
        close(dfd);
        if (!why[0])
            return 0;
    }
    return conn_fail(c, PRESTO_E_DENIED, "refusing prestod at %s: it runs as uid %u, neither "
                     "root nor this user (uid %u), and the socket's path is not that user's "
                     "alone: %s (PRESTO_TRUST_ANY_PEER=1 connects anyway)", path,
                     (unsigned)cr.uid, (unsigned)geteuid(), why);
}

static int conn_open(struct conn *c, const char *path)
{
    struct sockaddr_un sa;
    size_t len = strlen(path);

    c->path = path;
    if (len == 0 || len >= sizeof(sa.sun_path))
        return conn_fail(c, PRESTO_E_INVAL, "bad socket path '%s' (1 to %zu bytes)", path,
                         sizeof(sa.sun_path) - 1);
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, len);

    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return conn_fail(c, PRESTO_E_IO, "socket: %s", strerror(errno));
    int rc;
    do
        rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    while (rc < 0 && errno == EINTR);
    if (rc < 0) {
        int e = errno;
        close(fd);
        return conn_fail(c, PRESTO_E_IO, "cannot connect to prestod at %s: %s", path,
                         strerror(e));
    }
    if ((rc = conn_check_peer(c, fd, path)) < 0) {
        close(fd);
        return rc;
    }
    c->fd = fd;
    return 0;
}

static void conn_close(struct conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

static int conn_lost(struct conn *c, int err)
{
    /* On a Unix socket both mean the daemon closed its end: EPIPE on a send,
     * ECONNRESET on a receive when it closed with requests unread (a
     * RELEASE sent meanwhile). */
    if (err && err != EPIPE && err != ECONNRESET)
        return conn_fail(c, PRESTO_E_IO, "connection to prestod at %s failed: %s", c->path,
                         strerror(err));
    return conn_fail(c, PRESTO_E_IO, "prestod at %s closed the connection", c->path);
}

static int conn_recv_error(struct conn *c, const struct proto_header *h);

/* The daemon closed the connection: the ERROR it may have sent before
 * (too many connections, idle too long) says why, else conn_lost does. */
static int conn_closed_why(struct conn *c, int err)
{
    uint8_t raw[PROTO_HEADER_SIZE];
    struct proto_header h;
    if (recv(c->fd, raw, sizeof(raw), MSG_DONTWAIT | MSG_PEEK) == (ssize_t)sizeof(raw) &&
        proto_header_decode(raw, PROTO_MAX_REPLY, &h) == 0 && h.type == PROTO_ERROR &&
        recv(c->fd, raw, sizeof(raw), MSG_DONTWAIT) == (ssize_t)sizeof(raw))
        return conn_recv_error(c, &h);
    return conn_lost(c, err);
}

/* A connection the daemon closed while this side did not use it (idle for
 * limits.idle_timeout, a restart) has its ERROR or its end to read: it is
 * closed, so that the caller makes a fresh one. */
static void conn_drop_stale(struct conn *c)
{
    struct pollfd pfd = {c->fd, POLLIN, 0};
    if (c->fd >= 0 && poll(&pfd, 1, 0) > 0)
        conn_close(c);
}

/* 0, or -errno. */
static int send_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int conn_send(struct conn *c, const void *buf, size_t len)
{
    int rc = send_all(c->fd, buf, len);
    if (rc == -EPIPE || rc == -ECONNRESET)
        return conn_closed_why(c, -rc);
    return rc < 0 ? conn_lost(c, -rc) : 0;
}

/* conn_recv that also takes a file descriptor passed with the bytes
 * (SCM_RIGHTS): the first one into *fd (which starts at -1), any others
 * closed. */
/* Finishes a frame begun with proto_frame_begin(type), sends it and frees
 * it. Returns 0 or a negative code explained in c->err. */
static int conn_send_frame(struct conn *c, struct proto_wbuf *w, uint16_t type)
{
    proto_frame_finish(w);
    int rc = w->failed ? conn_fail(c, PRESTO_E_NOMEM, "cannot build %s request",
                                   proto_type_name(type))
                       : conn_send(c, w->data, w->len);
    proto_wbuf_free(w);
    return rc;
}

static int conn_recv_fd(struct conn *c, void *buf, size_t len, int *fd)
{
    uint8_t *p = buf;
    while (len) {
        union {
            struct cmsghdr h;
            char buf[CMSG_SPACE(4 * sizeof(int))];
        } ctl;
        struct iovec iov = {p, len};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                             .msg_controllen = sizeof(ctl.buf)};
        ssize_t n = recvmsg(c->fd, &msg, MSG_CMSG_CLOEXEC);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return conn_lost(c, errno);
        }
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
            if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                continue;
            size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < nfd; i++) {
                int f;
                memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
                if (*fd < 0)
                    *fd = f;
                else
                    close(f);
            }
        }
        if (n == 0)
            return conn_lost(c, 0);
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int conn_recv(struct conn *c, void *buf, size_t len)
{
    uint8_t *p = buf;
    while (len) {
        ssize_t n = recv(c->fd, p, len, MSG_WAITALL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return conn_lost(c, errno);
        }
        if (n == 0)
            return conn_lost(c, 0);
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Reads and checks the next frame header. req_id must match unless the frame
 * is an ERROR with req_id 0 (a connection-wide error). */
static int conn_check_header(struct conn *c, const uint8_t raw[PROTO_HEADER_SIZE],
                             uint32_t req_id, struct proto_header *h);

static int conn_recv_header(struct conn *c, uint32_t req_id, struct proto_header *h)
{
    uint8_t raw[PROTO_HEADER_SIZE];
    int rc = conn_recv(c, raw, sizeof(raw));
    return rc < 0 ? rc : conn_check_header(c, raw, req_id, h);
}

static int conn_check_header(struct conn *c, const uint8_t raw[PROTO_HEADER_SIZE],
                             uint32_t req_id, struct proto_header *h)
{
    int rc = proto_header_decode(raw, PROTO_MAX_REPLY, h);
    switch (-rc) {
    case 0:
        break;
    case PROTO_E_VERSION:
        return conn_fail(c, PRESTO_E_VERSION,
                         "prestod speaks protocol version %u, this client version %u",
                         h->version, PROTO_VERSION);
    case PROTO_E_TOOBIG:
        return conn_fail(c, PRESTO_E_TOOBIG, "%s reply of %u bytes exceeds the limit of %u",
                         proto_type_name(h->type), h->body_len, PROTO_MAX_REPLY);
    default:
        return conn_fail(c, PRESTO_E_PROTO, "bad frame from prestod (magic 0x%08x)",
                         h->magic);
    }
    if (h->req_id != req_id && !(h->type == PROTO_ERROR && h->req_id == 0))
        return conn_fail(c, PRESTO_E_PROTO, "%s reply for request %u, expected %u",
                         proto_type_name(h->type), h->req_id, req_id);
    return 0;
}

/* Reads a body of at most cap bytes (a small, fixed-size message). */
static int conn_recv_small(struct conn *c, const struct proto_header *h, void *buf,
                           size_t cap)
{
    if (h->body_len > cap)
        return conn_fail(c, PRESTO_E_PROTO, "%s body of %u bytes is too long",
                         proto_type_name(h->type), h->body_len);
    return conn_recv(c, buf, h->body_len);
}

/* Reads an ERROR body; the daemon's message goes into c->err. Returns the
 * daemon's code, negated. */
static int conn_recv_error(struct conn *c, const struct proto_header *h)
{
    uint8_t body[ERROR_BODY_MAX];
    char msg[PRESTO_ERRMSG_SIZE];
    struct proto_rbuf r;
    uint32_t code;

    int rc = conn_recv_small(c, h, body, sizeof(body));
    if (rc < 0)
        return rc;
    proto_rbuf_init(&r, body, h->body_len);
    if (proto_get_error(&r, &code, msg, sizeof(msg)) < 0)
        return conn_fail(c, PRESTO_E_PROTO, "malformed ERROR from prestod");
    conn_fail(c, 0, "prestod: %s", msg);
    return daemon_code(code);
}

static int conn_unexpected(struct conn *c, const struct proto_header *h)
{
    return conn_fail(c, PRESTO_E_PROTO, "unexpected %s (type %u) from prestod",
                     proto_type_name(h->type), h->type);
}

/* ---- handle ---- */

PRESTO_API const char *presto_default_socket(void)
{
    static _Thread_local char buf[4096];
    const char *env = getenv("PRESTO_SOCKET");
    int n;

    if (env && *env) {
        n = snprintf(buf, sizeof(buf), "%s", env);
        if (n > 0 && (size_t)n < sizeof(buf))
            return buf;
    }
    env = getenv("XDG_RUNTIME_DIR");
    if (env && *env) {
        n = snprintf(buf, sizeof(buf), "%s/presto/prestod.sock", env);
        if (n > 0 && (size_t)n < sizeof(buf))
            return buf;
    }
    snprintf(buf, sizeof(buf), "/tmp/presto-%u/prestod.sock", (unsigned)getuid());
    return buf;
}

PRESTO_API const char *presto_strerror(int code)
{
    if (code == PRESTO_E_INTR || code == -PRESTO_E_INTR) /* the client's own */
        return "interrupted by a signal";
    return proto_strerror(code);
}

PRESTO_API const char *presto_version(void)
{
    return PRESTO_VERSION_STRING;
}

static uint32_t presto_req_id(presto_t *p)
{
    if (++p->next_req == 0)
        p->next_req = 1;
    return p->next_req;
}

PRESTO_API int presto_connect(const char *path, presto_t **out)
{
    presto_t *p = calloc(1, sizeof(*p));
    *out = p;
    if (!p)
        return -PRESTO_E_NOMEM;
    p->ctl.fd = -1;
    p->owner = calloc(1, sizeof(*p->owner));
    if (!p->owner)
        return conn_fail(&p->ctl, PRESTO_E_NOMEM, "cannot allocate a presto handle");
    p->owner->refs = 1;
    p->owner->open = 1;
    if (!path)
        path = presto_default_socket();
    size_t len = strlen(path);
    if (len >= sizeof(p->path)) {
        p->ctl.path = p->path;
        snprintf(p->path, sizeof(p->path), "%s", path);
        return conn_fail(&p->ctl, PRESTO_E_INVAL, "socket path too long (%zu bytes, max %zu)",
                         len, sizeof(p->path) - 1);
    }
    memcpy(p->path, path, len + 1);
    return conn_open(&p->ctl, p->path);
}

/* ---- kept connections ----
 *
 * A shared-memory stream that ended keeps its connection and mapped ring
 * for the next stream to the same daemon: the daemon hands the ring back
 * (PROTO_TRANSPORT_SHM_KEPT), so an epoch after the first neither maps a
 * new ring nor makes the daemon fault in fresh pages. Process-wide, since a
 * stream outlives its presto_t, but only while that presto_t is open:
 * presto_close drops what its streams kept. A few entries, the oldest
 * dropped first. A forked child never uses its parent's (it only closes its
 * copies). */
#define KEPT_MAX 4

struct kept {
    pid_t pid;
    int fd;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    uint8_t *ring;
    size_t ring_bytes;
    uint64_t slot_bytes;
    uint32_t slots;
    pid_t ring_pid;
    struct kept_owner *owner;
};

static struct kept kept_conns[KEPT_MAX];
static unsigned nkept;
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;

/* presto_set_ring_hooks's, under kept_lock. */
static struct {
    presto_ring_fn mapped, unmapping;
    void *arg;
} ring_hooks;

PRESTO_API void presto_set_ring_hooks(presto_ring_fn mapped, presto_ring_fn unmapping, void *arg)
{
    pthread_mutex_lock(&kept_lock);
    ring_hooks.mapped = mapped;
    ring_hooks.unmapping = unmapping;
    ring_hooks.arg = arg;
    pthread_mutex_unlock(&kept_lock);
}

/* Calls a ring hook (never under kept_lock: a hook may take its own locks). */
static void ring_hook(int unmapping, void *base, size_t len)
{
    pthread_mutex_lock(&kept_lock);
    presto_ring_fn fn = unmapping ? ring_hooks.unmapping : ring_hooks.mapped;
    void *arg = ring_hooks.arg;
    pthread_mutex_unlock(&kept_lock);
    if (fn)
        fn(base, len, arg);
}

/* Unmaps a ring, telling the hook first when this process mapped it (a
 * forked child only drops its copy of the parent's mapping). */
static void ring_unmap(void *base, size_t len, pid_t mapped_by)
{
    if (mapped_by == getpid())
        ring_hook(1, base, len);
    munmap(base, len);
}

/* Closes what an entry taken out of the table holds. */
static void kept_dispose(struct kept *k)
{
    close(k->fd);
    ring_unmap(k->ring, k->ring_bytes, k->ring_pid);
}

/* Under kept_lock. */
static void owner_unref_locked(struct kept_owner *o)
{
    if (o && --o->refs == 0)
        free(o);
}

static struct kept_owner *owner_ref(struct kept_owner *o)
{
    pthread_mutex_lock(&kept_lock);
    o->refs++;
    pthread_mutex_unlock(&kept_lock);
    return o;
}

static void owner_unref(struct kept_owner *o)
{
    pthread_mutex_lock(&kept_lock);
    owner_unref_locked(o);
    pthread_mutex_unlock(&kept_lock);
}

/* Under kept_lock: moves entry i out of the table into *out. */
static void kept_remove_locked(unsigned i, struct kept *out)
{
    *out = kept_conns[i];
    owner_unref_locked(kept_conns[i].owner);
    memmove(kept_conns + i, kept_conns + i + 1, (nkept - i - 1) * sizeof(kept_conns[0]));
    nkept--;
}

/* Moves the newest entry for path made by this process into *out: 1, else 0
 * (older entries for path that another process made are dropped). */
static int kept_take(const char *path, struct kept *out)
{
    struct kept gone[KEPT_MAX];
    unsigned ngone = 0;
    int found = 0;
    pthread_mutex_lock(&kept_lock);
    for (unsigned i = nkept; i-- > 0 && !found;) {
        if (strcmp(kept_conns[i].path, path) != 0)
            continue;
        found = kept_conns[i].pid == getpid();
        kept_remove_locked(i, found ? out : &gone[ngone++]);
    }
    pthread_mutex_unlock(&kept_lock);
    while (ngone)
        kept_dispose(&gone[--ngone]);
    return found;
}

/* Keeps *k (its fd and mapping pass to the table) while its owner is open:
 * 1, else 0 and nothing is taken. */
static int kept_put(const struct kept *k)
{
    struct kept gone;
    int kept = 0, evicted = 0;
    pthread_mutex_lock(&kept_lock);
    if (k->owner->open) {
        if (nkept == KEPT_MAX) {
            kept_remove_locked(0, &gone);
            evicted = 1;
        }
        k->owner->refs++;
        kept_conns[nkept++] = *k;
        kept = 1;
    }
    pthread_mutex_unlock(&kept_lock);
    if (evicted)
        kept_dispose(&gone);
    return kept;
}

/* presto_close: the owner closes, and what its streams kept goes. */
static void kept_close_owner(struct kept_owner *o)
{
    struct kept gone[KEPT_MAX];
    unsigned ngone = 0;
    pthread_mutex_lock(&kept_lock);
    o->open = 0;
    for (unsigned i = nkept; i-- > 0;)
        if (kept_conns[i].owner == o)
            kept_remove_locked(i, &gone[ngone++]);
    owner_unref_locked(o);
    pthread_mutex_unlock(&kept_lock);
    while (ngone)
        kept_dispose(&gone[--ngone]);
}

PRESTO_API void presto_close(presto_t *p)
{
    if (!p)
        return;
    conn_close(&p->ctl);
    if (p->owner)
        kept_close_owner(p->owner);
    free(p);
}

PRESTO_API const char *presto_errmsg(const presto_t *p)
{
    return p ? p->ctl.err : "cannot allocate a presto handle";
}

/* One request with an empty body on the control connection, answered by a
 * single str field (a JSON document), returned NUL-terminated in *json. A
 * connection that failed is dropped, and the next call reconnects. */
static int presto_call_json(presto_t *p, uint16_t type, uint16_t reply, char **json)
{
    struct conn *c = &p->ctl;
    struct proto_header h;
    uint8_t raw[PROTO_HEADER_SIZE];
    int rc;

    *json = NULL;
    conn_drop_stale(c); /* closed by the daemon meanwhile (idle, a restart) */
    if (c->fd < 0 && (rc = conn_open(c, p->path)) < 0)
        return rc;
    uint32_t req = presto_req_id(p);
    proto_header_encode(raw, type, req, 0);
    if ((rc = conn_send(c, raw, sizeof(raw))) < 0 ||
        (rc = conn_recv_header(c, req, &h)) < 0)
        goto drop;
    if (h.type == PROTO_ERROR) {
        rc = conn_recv_error(c, &h);
        if (rc == -PRESTO_E_PROTO || rc == -PRESTO_E_IO)
            goto drop;
        return rc;
    }
    if (h.type != reply) {
        rc = conn_unexpected(c, &h);
        goto drop;
    }
    /* The body is u32 len + bytes: the bytes move to the front, NUL-terminated. */
    uint8_t *body = malloc((size_t)h.body_len + 1);
    if (!body) {
        rc = conn_fail(c, PRESTO_E_NOMEM, "cannot allocate %u bytes for %s", h.body_len,
                       proto_type_name(h.type));
        goto drop;
    }
    if ((rc = conn_recv(c, body, h.body_len)) < 0) {
        free(body);
        goto drop;
    }
    struct proto_rbuf r;
    const char *s;
    uint32_t n;
    proto_rbuf_init(&r, body, h.body_len);
    if (proto_get_str(&r, &s, &n, h.body_len) < 0 || proto_remaining(&r)) {
        free(body);
        rc = conn_fail(c, PRESTO_E_PROTO, "malformed %s from prestod", proto_type_name(reply));
        goto drop;
    }
    memmove(body, s, n);
    body[n] = '\0';
    *json = (char *)body;
    c->err[0] = '\0';
    return 0;
drop:
    conn_close(c);
    return rc;
}

PRESTO_API int presto_stats(presto_t *p, char **json)
{
    return presto_call_json(p, PROTO_STATS, PROTO_STATS_REPLY, json);
}

PRESTO_API int presto_stats_prometheus(presto_t *p, char **text)
{
    return presto_call_json(p, PROTO_METRICS, PROTO_METRICS_REPLY, text);
}

PRESTO_API int presto_datasets(presto_t *p, char **json)
{
    return presto_call_json(p, PROTO_DATASETS, PROTO_DATASETS_REPLY, json);
}

PRESTO_API int presto_reload(presto_t *p, char **report)
{
    return presto_call_json(p, PROTO_RELOAD, PROTO_RELOAD_REPLY, report);
}

PRESTO_API int presto_drop_cache(presto_t *p, char **report)
{
    return presto_call_json(p, PROTO_DROP_CACHE, PROTO_DROP_CACHE_REPLY, report);
}

/* ---- warm ---- */

/* Reads one PROGRESS or DONE body into *pr. */
static int warm_recv_progress(struct conn *c, const struct proto_header *h,
                              presto_progress_t *pr)
{
    uint8_t body[SMALL_BODY_MAX];
    struct proto_rbuf r;
    struct proto_progress m;
    int rc = conn_recv_small(c, h, body, sizeof(body));
    if (rc < 0)
        return rc;
    proto_rbuf_init(&r, body, h->body_len);
    if (proto_get_progress(&r, &m) < 0)
        return conn_fail(c, PRESTO_E_PROTO, "malformed %s from prestod",
                         proto_type_name(h->type));
    pr->done = m.done;
    pr->total = m.total;
    pr->bytes = m.bytes;
    pr->failed = m.failed;
    pr->computed = m.computed;
    return 0;
}

static int warm_run(struct conn *c, uint32_t req, const char *dataset, presto_progress_fn cb,
                    void *arg)
{
    struct proto_wbuf w;
    struct proto_warm m;
    struct proto_header h;
    presto_progress_t pr;
    int rc;

    memset(&m, 0, sizeof(m));
    memcpy(m.dataset, dataset, strlen(dataset));
    proto_wbuf_init(&w);
    proto_frame_begin(&w, PROTO_WARM, req);
    proto_put_warm(&w, &m);
    rc = conn_send_frame(c, &w, PROTO_WARM);
    while (rc == 0) {
        if ((rc = conn_recv_header(c, req, &h)) < 0)
            break;
        if (h.type == PROTO_ERROR)
            return conn_recv_error(c, &h);
        if (h.type != PROTO_PROGRESS && h.type != PROTO_DONE)
            return conn_unexpected(c, &h);
        if ((rc = warm_recv_progress(c, &h, &pr)) < 0)
            break;
        if (cb)
            cb(&pr, h.type == PROTO_DONE, arg);
        if (h.type == PROTO_DONE)
            return 0;
    }
    return rc;
}

PRESTO_API int presto_warm(presto_t *p, const char *dataset, presto_progress_fn cb, void *arg)
{
    struct conn c = {.fd = -1};
    int rc;
    if (!dataset || !*dataset || strlen(dataset) >= sizeof(((struct proto_warm *)0)->dataset))
        return conn_fail(&p->ctl, PRESTO_E_INVAL, "bad dataset name (1 to %zu bytes)",
                         sizeof(((struct proto_warm *)0)->dataset) - 1);
    if ((rc = conn_open(&c, p->path)) == 0)
        rc = warm_run(&c, presto_req_id(p), dataset, cb, arg);
    conn_close(&c);
    if (rc < 0)
        memcpy(p->ctl.err, c.err, sizeof(p->ctl.err));
    else
        p->ctl.err[0] = '\0';
    return rc;
}

/* ---- profile ---- */

/* Largest PROFILE_PROGRESS and PROFILE_RESULT bodies accepted. */
#define PROFILE_PROGRESS_MAX 256
#define PROFILE_RESULT_MAX (1u << 20)

PRESTO_API void presto_profile_opts_init(presto_profile_opts_t *o)
{
    memset(o, 0, sizeof(*o));
}

PRESTO_API void presto_profile_free(presto_profile_result_t *r)
{
    if (r)
        free(r->strategies);
    free(r);
}

static void profile_strategy_out(presto_profile_strategy_t *d,
                                 const struct proto_profile_strategy *m)
{
    memcpy(d->name, m->name, sizeof(d->name));
    d->split = m->split;
    memcpy(d->last_step, m->last_step, sizeof(d->last_step));
    d->zstd_level = m->zstd_level;
    d->samples = m->samples;
    d->failed = m->failed;
    d->offline_s = m->offline_s;
    d->stored_bytes = m->stored_bytes;
    d->raw_bytes = m->raw_bytes;
    d->memory_rate = m->memory_rate;
    d->disk_rate = m->disk_rate;
    d->memory_cpu_s = m->memory_cpu_s;
    d->disk_cpu_s = m->disk_cpu_s;
    d->total_offline_s = m->total_offline_s;
    d->total_bytes = m->total_bytes;
    d->memory_fraction = m->memory_fraction;
    d->epoch_memory_s = m->epoch_memory_s;
    d->epoch_disk_s = m->epoch_disk_s;
    d->expected_rate = m->expected_rate;
    d->expected_epoch_s = m->expected_epoch_s;
    d->score = m->score;
    d->cold_rate = m->cold_rate;
    d->memory_spread = m->memory_spread;
    d->disk_spread = m->disk_spread;
    d->cold_spread = m->cold_spread;
    d->memory_interval = m->memory_interval;
    d->disk_interval = m->disk_interval;
    d->cold_interval = m->cold_interval;
    d->fits_memory = (int)m->fits_memory;
    d->fits_disk = (int)m->fits_disk;
    d->feasible = (int)m->feasible;
    d->rank = m->rank;
}

/* Reads a PROFILE_RESULT body into a new result. */
static int profile_recv_result(struct conn *c, const struct proto_header *h, int verify,
                               presto_profile_result_t **out)
{
    struct proto_profile_result m;
    struct proto_rbuf r;
    int rc;
    if (h->body_len > PROFILE_RESULT_MAX)
        return conn_fail(c, PRESTO_E_PROTO, "PROFILE_RESULT of %u bytes is too long",
                         h->body_len);
    uint8_t *body = malloc(h->body_len ? h->body_len : 1);
    presto_profile_result_t *res = calloc(1, sizeof(*res));
    if (!body || !res) {
        free(body);
        free(res);
        return conn_fail(c, PRESTO_E_NOMEM, "no memory for a profile's result");
    }
    if ((rc = conn_recv(c, body, h->body_len)) < 0)
        goto fail;
    proto_rbuf_init(&r, body, h->body_len);
    if (proto_get_profile_result(&r, &m) < 0 ||
        !(res->strategies = calloc(m.count ? m.count : 1, sizeof(*res->strategies)))) {
        rc = conn_fail(c, PRESTO_E_PROTO, "malformed PROFILE_RESULT from prestod");
        goto fail;
    }
    for (uint32_t i = 0; i < m.count; i++) {
        struct proto_profile_strategy st;
        if (proto_get_profile_strategy(&r, &st, 0) < 0) {
            rc = conn_fail(c, PRESTO_E_PROTO, "malformed PROFILE_RESULT from prestod");
            goto fail;
        }
        profile_strategy_out(&res->strategies[i], &st);
    }
    for (uint32_t i = 0; verify && i < m.count; i++) {
        struct proto_profile_verified v;
        presto_profile_strategy_t *d = &res->strategies[i];
        if (proto_get_profile_verified(&r, &v, 0) < 0) {
            rc = conn_fail(c, PRESTO_E_PROTO, "malformed PROFILE_RESULT from prestod");
            goto fail;
        }
        d->verified = v.verified != 0;
        d->verified_samples = v.samples;
        d->measured_cold_rate = v.cold_rate;
        d->measured_memory_rate = v.memory_rate;
        d->measured_disk_rate = v.disk_rate;
        d->measured_memory_fraction = v.memory_fraction;
        d->measured_bytes = v.stored_bytes;
        d->verify_seconds = v.seconds;
        memcpy(d->verify_note, v.note, sizeof(d->verify_note));
    }
    /* The disk's figures, last, from a daemon that knows PROTO_PROFILE_DISK;
     * nothing else may follow. */
    if (proto_remaining(&r) && proto_get_profile_disk(&r, &m.disk) < 0) {
        rc = conn_fail(c, PRESTO_E_PROTO, "malformed PROFILE_RESULT from prestod");
        goto fail;
    }
    res->disk_read_bw = m.disk.read_bw;
    res->disk_write_bw = m.disk.write_bw;
    res->disk_probe_bytes = m.disk.probe_bytes;
    res->disk_probe_depth = m.disk.probe_depth;
    res->writeback_bw = m.disk.writeback_bw;
    res->source_s_per_sample = m.disk.source_s;
    res->admit_bw = m.disk.admit_bw;
    memcpy(res->dataset, m.dataset, sizeof(res->dataset));
    res->samples = m.samples;
    res->sample_size = m.sample_size;
    res->workers = m.workers;
    res->profile_workers = m.profile_workers;
    res->memory_budget = m.memory_budget;
    res->disk_budget = m.disk_budget;
    res->w_throughput = m.w_throughput;
    res->w_offline = m.w_offline;
    res->w_storage = m.w_storage;
    res->seconds = m.seconds;
    res->winner = m.winner;
    res->applied = (int)m.applied;
    res->count = m.count;
    res->verify = verify;
    free(body);
    *out = res;
    return 0;
fail:
    free(body);
    presto_profile_free(res);
    return rc;
}

static int profile_run(struct conn *c, uint32_t req, const presto_profile_opts_t *o,
                       presto_profile_progress_fn cb, void *arg, presto_profile_result_t **out)
{
    struct proto_wbuf w;
    struct proto_profile m;
    struct proto_header h;
    int rc;

    memset(&m, 0, sizeof(m));
    memcpy(m.dataset, o->dataset, strlen(o->dataset));
    m.samples = o->samples;
    m.flags = (o->apply ? PROTO_PROFILE_APPLY : 0) | (o->verify ? PROTO_PROFILE_VERIFY : 0) |
              PROTO_PROFILE_DISK;
    m.verify_top = o->verify_top;
    m.batch_size = o->batch_size;
    m.w_throughput = o->w_throughput;
    m.w_offline = o->w_offline;
    m.w_storage = o->w_storage;
    proto_wbuf_init(&w);
    proto_frame_begin(&w, PROTO_PROFILE, req);
    proto_put_profile(&w, &m);
    rc = conn_send_frame(c, &w, PROTO_PROFILE);
    while (rc == 0) {
        if ((rc = conn_recv_header(c, req, &h)) < 0)
            break;
        if (h.type == PROTO_ERROR)
            return conn_recv_error(c, &h);
        if (h.type == PROTO_PROFILE_RESULT)
            return profile_recv_result(c, &h, o->verify != 0, out);
        if (h.type != PROTO_PROFILE_PROGRESS)
            return conn_unexpected(c, &h);
        uint8_t body[PROFILE_PROGRESS_MAX];
        struct proto_profile_progress pm;
        struct proto_rbuf r;
        if ((rc = conn_recv_small(c, &h, body, sizeof(body))) < 0)
            break;
        proto_rbuf_init(&r, body, h.body_len);
        if (proto_get_profile_progress(&r, &pm) < 0)
            return conn_fail(c, PRESTO_E_PROTO, "malformed PROFILE_PROGRESS from prestod");
        if (cb) {
            presto_profile_progress_t pr = {pm.strategy, pm.strategies, pm.name, pm.phase,
                                            pm.fraction, pm.eta_s};
            cb(&pr, arg);
        }
    }
    return rc;
}

PRESTO_API int presto_profile(presto_t *p, const presto_profile_opts_t *o,
                              presto_profile_progress_fn cb, void *arg,
                              presto_profile_result_t **out)
{
    struct conn c = {.fd = -1};
    const size_t max = sizeof(((struct proto_profile *)0)->dataset) - 1;
    int rc;
    *out = NULL;
    if (!o || !o->dataset || !*o->dataset || strlen(o->dataset) > max)
        return conn_fail(&p->ctl, PRESTO_E_INVAL, "bad dataset name (1 to %zu bytes)", max);
    if (!(o->w_throughput >= 0 && o->w_offline >= 0 && o->w_storage >= 0))
        return conn_fail(&p->ctl, PRESTO_E_INVAL, "profile weights must be >= 0");
    if ((rc = conn_open(&c, p->path)) == 0)
        rc = profile_run(&c, presto_req_id(p), o, cb, arg, out);
    conn_close(&c);
    if (rc < 0)
        memcpy(p->ctl.err, c.err, sizeof(p->ctl.err));
    else
        p->ctl.err[0] = '\0';
    return rc;
}

/* ---- streams ---- */

PRESTO_API void presto_stream_opts_init(presto_stream_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->batch_size = 64;
    o->world = 1;
    o->shuffle = 1;
}

static int stream_check_opts(struct conn *c, const presto_stream_opts_t *o,
                             struct proto_open *m)
{
    if (!o || !o->dataset || !*o->dataset)
        return conn_fail(c, PRESTO_E_INVAL, "no dataset name given");
    size_t len = strlen(o->dataset);
    if (len >= sizeof(m->dataset))
        return conn_fail(c, PRESTO_E_INVAL, "dataset name too long (%zu bytes, max %zu)",
                         len, sizeof(m->dataset) - 1);
    if (o->batch_size == 0)
        return conn_fail(c, PRESTO_E_INVAL, "batch_size must be at least 1");
    if (o->world == 0 || o->rank >= o->world)
        return conn_fail(c, PRESTO_E_INVAL, "rank %u is not below world size %u", o->rank,
                         o->world);
    memset(m, 0, sizeof(*m));
    memcpy(m->dataset, o->dataset, len);
    m->batch_size = o->batch_size;
    m->seed = o->seed;
    m->epoch = o->epoch;
    m->rank = o->rank;
    m->world = o->world;
    m->flags = (o->shuffle ? PROTO_OPEN_SHUFFLE : 0) | (o->drop_last ? PROTO_OPEN_DROP_LAST : 0) |
               PROTO_OPEN_INFO | PROTO_OPEN_LABELS;
    m->prefetch = o->prefetch;
    if (o->start_batch) { /* sent only when needed: older daemons refuse the field */
        m->flags |= PROTO_OPEN_START;
        m->start_batch = o->start_batch;
    }
    uint32_t t = o->transport;
    if (t > PRESTO_TRANSPORT_SOCKET)
        return conn_fail(c, PRESTO_E_INVAL, "unknown transport %u", t);
    const char *env = getenv("PRESTO_TRANSPORT");
    if (t == PRESTO_TRANSPORT_AUTO && env && *env) {
        if (strcmp(env, "shm") == 0)
            t = PRESTO_TRANSPORT_SHM;
        else if (strcmp(env, "socket") == 0)
            t = PRESTO_TRANSPORT_SOCKET;
        else
            return conn_fail(c, PRESTO_E_INVAL,
                             "PRESTO_TRANSPORT='%s': expected 'shm' or 'socket'", env);
    }
    if (t != PRESTO_TRANSPORT_SOCKET)
        m->flags |= PROTO_OPEN_SHM;
    return t;
}

/* Maps the ring the OPENED brought: its size must be what OPENED says. */
static int stream_map_ring(presto_stream_t *s, const struct proto_opened *op, int fd)
{
    struct conn *c = &s->c;
    struct stat st;
    if (fd < 0)
        return conn_fail(c, PRESTO_E_PROTO, "OPENED for shared memory came without the ring");
    if (op->slots == 0 || op->slot_bytes == 0 || op->slot_bytes > SIZE_MAX / op->slots ||
        fstat(fd, &st) < 0 || (uint64_t)st.st_size != op->slots * op->slot_bytes) {
        close(fd);
        return conn_fail(c, PRESTO_E_PROTO, "shared-memory ring of %u x %llu bytes does not "
                         "match its file", op->slots, (unsigned long long)op->slot_bytes);
    }
    size_t len = (size_t)(op->slots * op->slot_bytes);
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED)
        return conn_fail(c, PRESTO_E_NOMEM, "cannot map the shared-memory ring (%zu bytes): %s",
                         len, strerror(e));
    s->ring = p;
    s->ring_bytes = len;
    s->slot_bytes = op->slot_bytes;
    s->ring_pid = getpid();
    ring_hook(0, p, len);
    return 0;
}

/* Sends OPEN and waits for OPENED (which may bring the ring). Failures are
 * explained in s->c.err. */
static int stream_start(presto_stream_t *s, const struct proto_open *m, uint32_t transport)
{
    struct conn *c = &s->c;
    struct proto_wbuf w;
    struct proto_header h;
    uint8_t raw[PROTO_HEADER_SIZE];
    int rc, fd = -1;

    proto_wbuf_init(&w);
    proto_frame_begin(&w, PROTO_OPEN, s->req_id);
    proto_put_open(&w, m);
    rc = conn_send_frame(c, &w, PROTO_OPEN);
    if (rc < 0 || (rc = conn_recv_fd(c, raw, sizeof(raw), &fd)) < 0 ||
        (rc = conn_check_header(c, raw, s->req_id, &h)) < 0)
        goto fail;
    if (h.type == PROTO_ERROR) {
        rc = conn_recv_error(c, &h);
        if (rc == -PRESTO_E_PROTO && (m->flags & PROTO_OPEN_START)) {
            char said[sizeof(c->err)];
            memcpy(said, c->err, sizeof(said));
            conn_fail(c, PRESTO_E_PROTO, "%.400s (a prestod too old to resume an epoch: "
                      "start_batch needs a newer one)", said);
        }
        goto fail;
    }
    if (h.type != PROTO_OPENED) {
        rc = conn_unexpected(c, &h);
        goto fail;
    }

    uint8_t body[SMALL_BODY_MAX];
    struct proto_rbuf r;
    struct proto_opened op;
    if ((rc = conn_recv_small(c, &h, body, sizeof(body))) < 0)
        goto fail;
    proto_rbuf_init(&r, body, h.body_len);
    if (proto_get_opened(&r, &op) < 0) {
        rc = conn_fail(c, PRESTO_E_PROTO, "malformed OPENED from prestod");
        goto fail;
    }
    if (op.transport == PROTO_TRANSPORT_SHM_KEPT) {
        if (!s->ring || op.slots != s->info.slots || op.slot_bytes != s->slot_bytes) {
            rc = conn_fail(c, PRESTO_E_PROTO, "prestod offered a kept ring this stream "
                           "does not have");
            goto fail;
        }
    } else if (s->ring) { /* a kept ring the daemon did not reuse */
        ring_unmap(s->ring, s->ring_bytes, s->ring_pid);
        s->ring = NULL;
    }
    if (op.transport == PROTO_TRANSPORT_SHM) {
        rc = stream_map_ring(s, &op, fd); /* takes fd */
        fd = -1;
        if (rc < 0)
            return rc;
    } else if (op.transport == PROTO_TRANSPORT_SOCKET && transport == PRESTO_TRANSPORT_SHM) {
        rc = conn_fail(c, PRESTO_E_INVAL, "prestod could not give this stream shared memory "
                       "(see its log); the socket transport would work");
        goto fail;
    }
    s->transport = op.transport;
    s->info.layout = op.layout;
    s->info.transport = op.transport == PROTO_TRANSPORT_SOCKET ? PRESTO_TRANSPORT_SOCKET
                                                               : PRESTO_TRANSPORT_SHM;
    s->info.slots = op.transport == PROTO_TRANSPORT_SOCKET ? 0 : op.slots;
    s->prefetch = op.slots; /* both transports: the prefetch granted */
    s->stream_id = op.stream_id;
    s->info.samples = op.samples;
    s->info.batches = op.batches;
    s->info.h = op.h;
    s->info.w = op.w;
    s->info.c = op.c;
    s->info.dtype = op.dtype;
    s->info.dataset_samples = op.dataset_samples;
    s->info.fingerprint = op.fingerprint;
    s->daemon_info = op.has_info;
    s->labels = op.labels; /* int64 [n] from a daemon that did not say */
    s->info.label_dtype = op.labels.dtype;
    s->info.label_classes = op.labels.classes;
    s->info.has_lengths = (int)op.labels.lengths;
    if (fd >= 0)
        close(fd);
    return 0;
fail:
    if (fd >= 0)
        close(fd);
    return rc;
}

/* A batch's own buffer (presto_batch_t.own_) of at least len bytes,
 * DATA_ALIGN-aligned, its capacity in the DATA_ALIGN bytes before it:
 * own_take_locked takes one from the stream's pool when one is large enough
 * (under s->lock; NULL when none is), own_new makes one (NULL when out of
 * memory), own_alloc does both from any thread. */
static void *own_take_locked(presto_stream_t *s, size_t len)
{
    for (uint32_t i = s->npool; i-- > 0;) {
        if (*(size_t *)((uint8_t *)s->pool[i] - DATA_ALIGN) >= len) {
            void *p = s->pool[i];
            s->pool[i] = s->pool[--s->npool];
            return p;
        }
    }
    return NULL;
}

static void *own_new(size_t len)
{
    size_t cap = (len + DATA_ALIGN - 1) / DATA_ALIGN * DATA_ALIGN;
    uint8_t *raw = aligned_alloc(DATA_ALIGN, DATA_ALIGN + (cap ? cap : DATA_ALIGN));
    if (!raw)
        return NULL;
    *(size_t *)(void *)raw = cap;
    return raw + DATA_ALIGN;
}

static void *own_alloc(presto_stream_t *s, size_t len)
{
    pthread_mutex_lock(&s->lock);
    void *p = own_take_locked(s, len);
    pthread_mutex_unlock(&s->lock);
    return p ? p : own_new(len);
}

static void own_free_now(void *own)
{
    if (own)
        free((uint8_t *)own - DATA_ALIGN);
}

/* Gives a batch's own buffer back, under s->lock: into the pool (the
 * smallest goes when it is full), or freed. */
static void own_put_locked(presto_stream_t *s, void *own)
{
    if (!own)
        return;
    if (s->npool == OWN_POOL_MAX) {
        uint32_t small = 0;
        for (uint32_t i = 1; i < s->npool; i++)
            if (*(size_t *)((uint8_t *)s->pool[i] - DATA_ALIGN) <
                *(size_t *)((uint8_t *)s->pool[small] - DATA_ALIGN))
                small = i;
        if (*(size_t *)((uint8_t *)own - DATA_ALIGN) <=
            *(size_t *)((uint8_t *)s->pool[small] - DATA_ALIGN)) {
            own_free_now(own);
            return;
        }
        own_free_now(s->pool[small]);
        s->pool[small] = s->pool[--s->npool];
    }
    s->pool[s->npool++] = own;
}

static void stream_free(presto_stream_t *s)
{
    if (s->state == STREAM_DONE && s->ring && s->c.fd >= 0 && s->owner) {
        struct kept k = {getpid(), s->c.fd, "", s->ring, s->ring_bytes, s->slot_bytes,
                         s->info.slots, s->ring_pid, s->owner};
        memcpy(k.path, s->path, sizeof(k.path));
        if (kept_put(&k)) {
            s->c.fd = -1;
            s->ring = NULL;
        }
    }
    if (s->owner)
        owner_unref(s->owner);
    conn_close(&s->c);
    if (s->ring)
        ring_unmap(s->ring, s->ring_bytes, s->ring_pid);
    pthread_mutex_destroy(&s->lock);
    for (uint32_t i = 0; i < s->npool; i++)
        own_free_now(s->pool[i]);
    free(s->buf);
    free(s);
}

PRESTO_API int presto_stream_open(presto_t *p, const presto_stream_opts_t *o,
                                  presto_stream_t **out)
{
    struct proto_open m;
    int rc, transport;

    *out = NULL;
    if ((transport = stream_check_opts(&p->ctl, o, &m)) < 0)
        return transport;
    presto_stream_t *s = calloc(1, sizeof(*s));
    if (!s)
        return conn_fail(&p->ctl, PRESTO_E_NOMEM, "cannot allocate a stream");
    s->c.fd = -1;
    pthread_mutex_init(&s->lock, NULL);
    memcpy(s->path, p->path, sizeof(s->path));
    s->req_id = presto_req_id(p);
    s->batch_size = m.batch_size;
    s->manual_release = !!o->manual_release;
    s->copy_when_full = !!o->copy_when_full;
    s->interruptible = !!o->interruptible;
    s->owner = p->owner ? owner_ref(p->owner) : NULL;
    struct kept k;
    int reuse = (m.flags & PROTO_OPEN_SHM) && kept_take(s->path, &k);
    if (reuse) { /* the connection and ring of this process's last stream */
        s->c.fd = k.fd;
        s->c.path = s->path;
        s->ring = k.ring;
        s->ring_bytes = k.ring_bytes;
        s->slot_bytes = k.slot_bytes;
        s->info.slots = k.slots;
        s->ring_pid = k.ring_pid;
        conn_drop_stale(&s->c); /* closed by the daemon meanwhile (idle) */
        rc = s->c.fd < 0 ? -PRESTO_E_IO : stream_start(s, &m, (uint32_t)transport);
        if (rc == -PRESTO_E_IO) { /* the daemon closed it meanwhile: a fresh one */
            conn_close(&s->c);
            if (s->ring)
                ring_unmap(s->ring, s->ring_bytes, s->ring_pid);
            s->ring = NULL;
            reuse = 0;
        }
    }
    if (!reuse && (rc = conn_open(&s->c, s->path)) == 0)
        rc = stream_start(s, &m, (uint32_t)transport);
    if (rc < 0) {
        memcpy(p->ctl.err, s->c.err, sizeof(p->ctl.err));
        stream_free(s);
        return rc;
    }
    s->state = STREAM_RUNNING;
    *out = s;
    return 0;
}

PRESTO_API int presto_stream_info(const presto_stream_t *s, presto_stream_info_t *info)
{
    *info = s->info;
    return 0;
}

PRESTO_API uint32_t presto_stream_prefetch(const presto_stream_t *s)
{
    return s->prefetch;
}

/* Makes room for need bytes; the old contents need not survive. */
static int stream_reserve(presto_stream_t *s, size_t need)
{
    if (need <= s->buf_cap)
        return 0;
    size_t cap = s->buf_cap ? s->buf_cap : 1u << 16;
    while (cap < need)
        cap *= 2;
    void *p = aligned_alloc(DATA_ALIGN, cap);
    if (!p)
        return conn_fail(&s->c, PRESTO_E_NOMEM, "cannot allocate %zu bytes for a batch", cap);
    free(s->buf);
    s->buf = p;
    s->buf_cap = cap;
    return 0;
}

/* Points b's label fields at its label block (the label tensor's n rows,
 * then the lengths), as the stream's format lays it out. Little-endian on
 * the wire: converted in place on a big-endian host. */
static void batch_labels(const presto_stream_t *s, presto_batch_t *b, uint8_t *block, uint32_t n)
{
    uint64_t tensor = (uint64_t)n * proto_label_row(&s->labels);
    b->label_data = block;
    b->label_dtype = s->labels.dtype;
    b->label_classes = s->labels.classes;
    b->labels = s->labels.dtype == PROTO_DTYPE_I64 ? (const int64_t *)(void *)block : NULL;
    b->lengths = s->labels.lengths ? (const int64_t *)(void *)(block + tensor) : NULL;
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
    uint64_t len = proto_labels_size(&s->labels, n);
    size_t w = s->labels.dtype == PROTO_DTYPE_F32 ? 4 : 8;
    for (uint64_t i = 0; i < len; i += (i < tensor ? w : 8)) {
        size_t k = i < tensor ? w : 8;
        for (size_t j = 0; j < k / 2; j++) {
            uint8_t t = block[i + j];
            block[i + j] = block[i + k - 1 - j];
            block[i + k - 1 - j] = t;
        }
    }
#endif
}

/* A BATCH body: the fixed part is read first to learn n, then the whole body
 * is placed so that the sample bytes (after 32 + 8n bytes) start on a
 * DATA_ALIGN boundary, which also puts the labels on an 8-byte one. */
static int stream_recv_batch(presto_stream_t *s, const struct proto_header *h,
                             presto_batch_t *b)
{
    struct conn *c = &s->c;
    uint8_t fixed[PROTO_BATCH_FIXED_SIZE];
    struct proto_rbuf r;
    struct proto_batch_hdr bh;
    uint32_t n;
    int rc;

    if (h->body_len < PROTO_BATCH_FIXED_SIZE)
        return conn_fail(c, PRESTO_E_PROTO, "BATCH body of %u bytes is too short",
                         h->body_len);
    if ((rc = conn_recv(c, fixed, sizeof(fixed))) < 0)
        return rc;
    proto_rbuf_init(&r, fixed + BATCH_N_OFFSET, sizeof(fixed) - BATCH_N_OFFSET);
    proto_get_u32(&r, &n);
    uint64_t head64 = PROTO_BATCH_FIXED_SIZE + proto_labels_size(&s->labels, n);
    if (head64 > h->body_len)
        return conn_fail(c, PRESTO_E_PROTO, "BATCH of %u samples in %u bytes", n,
                         h->body_len);
    size_t head = (size_t)head64;
    size_t pad = (DATA_ALIGN - head % DATA_ALIGN) % DATA_ALIGN;
    uint8_t *base;
    if (s->manual_release) { /* a buffer of the batch's own, until its release */
        size_t len = pad + h->body_len;
        if (!(base = own_alloc(s, len)))
            return conn_fail(c, PRESTO_E_NOMEM, "cannot allocate %zu bytes for a batch", len);
        b->own_ = base;
    } else if ((rc = stream_reserve(s, pad + h->body_len)) < 0) {
        return rc;
    } else {
        base = s->buf;
    }
    uint8_t *body = base + pad;
    memcpy(body, fixed, sizeof(fixed));
    if ((rc = conn_recv(c, body + PROTO_BATCH_FIXED_SIZE, h->body_len - PROTO_BATCH_FIXED_SIZE)) < 0)
        return rc;

    proto_rbuf_init(&r, body, h->body_len);
    if (proto_get_batch_hdr_fmt(&r, &bh, &s->labels) < 0)
        return conn_fail(c, PRESTO_E_PROTO, "malformed BATCH from prestod");
    if (bh.stream_id != s->stream_id)
        return conn_fail(c, PRESTO_E_PROTO, "BATCH for stream %u on stream %u", bh.stream_id,
                         s->stream_id);
    batch_labels(s, b, body + PROTO_BATCH_FIXED_SIZE, n);
    b->index = bh.index;
    b->n = bh.n;
    b->h = bh.h;
    b->w = bh.w;
    b->c = bh.c;
    b->dtype = bh.dtype;
    b->layout = s->info.layout;
    b->data = body + head;
    b->size = h->body_len - head;
    return 1;
}

/* A BATCH_SHM body: the fixed part and the labels, read into the stream's
 * buffer; the samples are a view of the ring, checked to lie in the slot. */
static int stream_recv_batch_shm(presto_stream_t *s, const struct proto_header *h,
                                 presto_batch_t *b)
{
    struct conn *c = &s->c;
    struct proto_rbuf r;
    struct proto_batch_shm m;
    int rc;

    if (!s->ring)
        return conn_fail(c, PRESTO_E_PROTO, "BATCH_SHM on a socket stream");
    uint64_t per = proto_labels_size(&s->labels, 1);
    if (h->body_len < PROTO_BATCH_SHM_FIXED_SIZE ||
        h->body_len > PROTO_BATCH_SHM_FIXED_SIZE + proto_labels_size(&s->labels, s->batch_size) ||
        (h->body_len - PROTO_BATCH_SHM_FIXED_SIZE) % per)
        return conn_fail(c, PRESTO_E_PROTO, "BATCH_SHM body of %u bytes", h->body_len);
    if ((rc = stream_reserve(s, h->body_len + 8)) < 0)
        return rc;
    /* The labels' end (after 44 bytes and the label tensor) lands on an
     * 8-byte boundary: int64 labels and lengths are aligned, soft targets
     * on 4 bytes at least. */
    uint8_t *body = s->buf + (8 - h->body_len % 8) % 8;
    if ((rc = conn_recv(c, body, h->body_len)) < 0)
        return rc;
    proto_rbuf_init(&r, body, h->body_len);
    if (proto_get_batch_shm(&r, &m) < 0)
        return conn_fail(c, PRESTO_E_PROTO, "malformed BATCH_SHM from prestod");
    if (m.stream_id != s->stream_id)
        return conn_fail(c, PRESTO_E_PROTO, "BATCH_SHM for stream %u on stream %u",
                         m.stream_id, s->stream_id);
    uint64_t size = (uint64_t)m.n * m.h * m.w * m.c * proto_dtype_size(m.dtype);
    uint64_t slot_off = (uint64_t)m.slot * s->slot_bytes;
    if (h->body_len != PROTO_BATCH_SHM_FIXED_SIZE + proto_labels_size(&s->labels, m.n) ||
        m.slot >= s->info.slots || m.offset < slot_off ||
        m.offset + size > slot_off + s->slot_bytes || size == 0)
        return conn_fail(c, PRESTO_E_PROTO, "BATCH_SHM of %u samples at slot %u offset %llu "
                         "does not fit the ring", m.n, m.slot, (unsigned long long)m.offset);
    uint8_t *labels = body + PROTO_BATCH_SHM_FIXED_SIZE;
    if (s->manual_release) { /* the stream's buffer is reused: the labels move out */
        size_t len = (size_t)proto_labels_size(&s->labels, m.n);
        uint8_t *own = own_alloc(s, len ? len : 1);
        if (!own)
            return conn_fail(c, PRESTO_E_NOMEM, "cannot allocate a batch's labels");
        memcpy(own, labels, len);
        labels = own;
        b->own_ = own;
    }
    batch_labels(s, b, labels, m.n);
    b->index = m.index;
    b->n = m.n;
    b->h = m.h;
    b->w = m.w;
    b->c = m.c;
    b->dtype = m.dtype;
    b->layout = s->info.layout;
    b->data = s->ring + m.offset;
    b->size = (size_t)size;
    b->slot_ = m.slot + 1;
    return 1;
}

/* Hands a slot back to the daemon, under s->lock. A failure is not
 * reported here: the daemon went away or dropped the stream, and the next
 * presto_next reads why (its ERROR, or the end of the connection), which a
 * failed send must not replace. */
static void stream_send_release(presto_stream_t *s, uint32_t slot, uint32_t flags)
{
    struct proto_wbuf w;
    struct proto_release m = {s->stream_id, slot, s->daemon_info ? flags : 0};
    if (s->c.fd < 0) /* the stream is over: the daemon let go of its ring */
        return;
    proto_wbuf_init(&w);
    proto_frame_begin(&w, PROTO_RELEASE, s->req_id);
    proto_put_release(&w, &m);
    proto_frame_finish(&w);
    if (!w.failed)
        (void)send_all(s->c.fd, w.data, w.len);
    proto_wbuf_free(&w);
}

/* copy_when_full, under s->lock: the batch just received takes the last
 * slot the caller does not hold, so it moves into memory of its own (data,
 * then its labels, in one block) and its slot goes back at once. Without
 * the memory it keeps the slot, as without copy_when_full. */
static void stream_copy_out(presto_stream_t *s, presto_batch_t *b)
{
    size_t data_len = (b->size + DATA_ALIGN - 1) / DATA_ALIGN * DATA_ALIGN;
    size_t labels_len = (size_t)proto_labels_size(&s->labels, b->n);
    uint8_t *p = own_take_locked(s, data_len + labels_len);
    if (!p && !(p = own_new(data_len + labels_len))) {
        s->held_slots++;
        return;
    }
    memcpy(p, b->data, b->size);
    memcpy(p + data_len, b->label_data, labels_len);
    own_put_locked(s, b->own_); /* the labels' own copy */
    b->own_ = p;
    b->data = p;
    batch_labels(s, b, p + data_len, b->n);
    stream_send_release(s, b->slot_ - 1, PROTO_RELEASE_COPIED);
    b->slot_ = 0;
    s->info.copies++;
}

static int stream_recv_end(presto_stream_t *s, const struct proto_header *h)
{
    struct conn *c = &s->c;
    uint8_t body[SMALL_BODY_MAX];
    struct proto_rbuf r;
    struct proto_end e;
    int rc;

    if ((rc = conn_recv_small(c, h, body, sizeof(body))) < 0)
        return rc;
    proto_rbuf_init(&r, body, h->body_len);
    if (proto_get_end(&r, &e) < 0)
        return conn_fail(c, PRESTO_E_PROTO, "malformed END from prestod");
    if (e.stream_id != s->stream_id)
        return conn_fail(c, PRESTO_E_PROTO, "END for stream %u on stream %u", e.stream_id,
                         s->stream_id);
    s->skipped = e.skipped;
    return 0;
}

/* An interruptible stream waits for the next frame here, in poll, which a
 * signal handler interrupts (recv on a blocking socket may be restarted). */
static int stream_wait(presto_stream_t *s)
{
    struct pollfd pfd = {s->c.fd, POLLIN, 0};
    for (;;) {
        int n = poll(&pfd, 1, -1);
        if (n > 0)
            return 0;
        if (n < 0 && errno == EINTR)
            return -PRESTO_E_INTR;
        if (n < 0)
            return conn_lost(&s->c, errno);
    }
}

/* A batch presto_next hands out under manual_release: counted as held. */
static void stream_hold(presto_stream_t *s, presto_batch_t *b)
{
    pthread_mutex_lock(&s->lock);
    s->held++;
    if (b->slot_) {
        if (s->copy_when_full && s->held_slots + 1 >= s->info.slots)
            stream_copy_out(s, b);
        else
            s->held_slots++;
    }
    pthread_mutex_unlock(&s->lock);
}

PRESTO_API int presto_next(presto_stream_t *s, presto_batch_t *b)
{
    struct proto_header h;
    int rc;

    memset(b, 0, sizeof(*b));
    if (s->state == STREAM_DONE)
        return 0;
    if (s->state == STREAM_FAILED)
        return s->error;
    if (s->last_slot && !s->manual_release) { /* the batch returned last */
        pthread_mutex_lock(&s->lock);
        stream_send_release(s, s->last_slot - 1, 0);
        pthread_mutex_unlock(&s->lock);
        s->last_slot = 0;
    }
    rc = s->interruptible ? stream_wait(s) : 0;
    if (rc == -PRESTO_E_INTR) /* nothing was read: the stream goes on */
        return rc;
    if (rc == 0)
        rc = conn_recv_header(&s->c, s->req_id, &h);
    if (rc == 0) {
        switch (h.type) {
        case PROTO_BATCH:
            rc = stream_recv_batch(s, &h, b);
            break;
        case PROTO_BATCH_SHM:
            rc = stream_recv_batch_shm(s, &h, b);
            if (rc > 0 && !s->manual_release)
                s->last_slot = b->slot_;
            break;
        case PROTO_END:
            rc = stream_recv_end(s, &h);
            if (rc == 0) {
                pthread_mutex_lock(&s->lock);
                s->state = STREAM_DONE;
                if (!s->ring) /* a shm stream's connection may be kept (stream_free) */
                    conn_close(&s->c);
                pthread_mutex_unlock(&s->lock);
            }
            break;
        case PROTO_ERROR:
            rc = conn_recv_error(&s->c, &h);
            break;
        default:
            rc = conn_unexpected(&s->c, &h);
        }
    }
    if (rc > 0 && s->manual_release)
        stream_hold(s, b);
    if (rc < 0) {
        pthread_mutex_lock(&s->lock);
        own_put_locked(s, b->own_);
        memset(b, 0, sizeof(*b));
        s->state = STREAM_FAILED;
        s->error = rc;
        conn_close(&s->c);
        pthread_mutex_unlock(&s->lock);
    }
    return rc;
}

PRESTO_API void presto_release(presto_stream_t *s, presto_batch_t *b)
{
    int last = 0;
    if (!b->data) { /* cleared, or never a batch */
        memset(b, 0, sizeof(*b));
        return;
    }
    pthread_mutex_lock(&s->lock);
    if (b->slot_ && s->state == STREAM_RUNNING)
        stream_send_release(s, b->slot_ - 1, 0);
    if (s->manual_release) {
        if (s->held)
            s->held--;
        if (b->slot_ && s->held_slots)
            s->held_slots--;
        last = s->closed && s->held == 0;
    } else if (s->last_slot == b->slot_) {
        s->last_slot = 0;
    }
    own_put_locked(s, b->own_); /* else the buffer is reused by the next presto_next */
    pthread_mutex_unlock(&s->lock);
    memset(b, 0, sizeof(*b));
    if (last)
        stream_free(s);
}

PRESTO_API uint32_t presto_batch_label_dtype(const presto_batch_t *b)
{
    return b->label_dtype ? b->label_dtype : PRESTO_DTYPE_I64;
}

PRESTO_API uint32_t presto_batch_label_shape(const presto_batch_t *b, uint64_t shape[2])
{
    shape[0] = b->n;
    shape[1] = b->label_classes;
    return b->label_classes ? 2 : 1;
}

PRESTO_API const void *presto_batch_label_data(const presto_batch_t *b)
{
    return b->label_data;
}

PRESTO_API const int64_t *presto_batch_lengths(const presto_batch_t *b)
{
    return b->lengths;
}

PRESTO_API uint64_t presto_stream_skipped(const presto_stream_t *s)
{
    return s->skipped;
}

PRESTO_API const char *presto_stream_errmsg(const presto_stream_t *s)
{
    return s->c.err;
}

/* Closing the socket of a running stream is what stops it: the daemon
 * treats the disconnect as a CLOSE. A finished one with batches still held
 * keeps its connection (and the daemon its ring) until the last release,
 * when it may be kept for the next stream. */
PRESTO_API void presto_stream_close(presto_stream_t *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    s->closed = 1;
    int last = s->held == 0;
    if (!last && s->state != STREAM_DONE)
        conn_close(&s->c); /* the held batches stay mapped */
    pthread_mutex_unlock(&s->lock);
    if (last)
        stream_free(s);
}
