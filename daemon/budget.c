/* The client memory budget: see budget.h. */
#include "budget.h"

#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "log.h"
#include "vec.h"

#define BUDGET_IDX(name, ...) BUD_##name,
enum { BUDGET_STATS(BUDGET_IDX) BUD_MAX };
static const struct stats_decl budget_decl[] = {BUDGET_STATS(STATS_DECL)};
static const struct stats_decl user_decl[] = {BUDGET_USER_STATS(STATS_DECL)};

/* An entry per uid with memory charged or connections (queues), searched
 * linearly (few users). */
struct budget_user {
    uid_t uid;
    uint64_t used;
    uint64_t queued;  /* of used, replies queued on its connections */
    uint32_t queues;  /* its connections' queues (budget_queue_new) */
    uint32_t paused;  /* of those, waiting */
    uint64_t ahead;   /* of used, chunks read ahead for its streams */
    uint64_t peak;    /* the most used at once */
    uint64_t floor;   /* the largest floor of its streams granted so far (budget_cap) */
};

/* A connection's queued replies. */
struct budget_queue {
    struct budget *b;
    uid_t uid;
    uint64_t queued;
    enum budget_wait paused;
    int closed; /* the connection is gone: freed with its last bytes */
};

/* A ring let go and still charged: its watch. */
struct budget_left {
    int wd;
    uid_t uid;
    uint64_t bytes;
};

struct budget {
    uint64_t limit, user_limit;
    uint64_t used, peak, lowered;
    struct budget_user *users; /* n entries, room for cap */
    size_t n, cap;
    int ino;                   /* inotify: the rings let go (-1: none) */
    struct event *ino_ev;
    int stopped;               /* budget_stop ran: the daemon is going */
    struct budget_left *left;  /* nleft entries, room for capleft */
    size_t nleft, capleft;
    uint64_t left_bytes;
    uint64_t queued, paused, pauses, pauses_user, pauses_all;
    uint64_t ahead, ahead_peak, ahead_skipped; /* read-ahead charged (of used), batches without */
    uint64_t ahead_waits, pauses_ahead; /* OPENs waiting on read-ahead now, ever */
    void (*notify)(void *arg); /* charges went down while connections wait */
    void *notify_arg;
};

static void budget_on_inotify(evutil_socket_t fd, short what, void *arg);

/* A gauge up by n (its peak kept), and down by n (never below 0). */
static void gauge_add(uint64_t *v, uint64_t *peak, uint64_t n)
{
    *v += n;
    if (*v > *peak)
        *peak = *v;
}

static void gauge_sub(uint64_t *v, uint64_t n)
{
    *v -= n < *v ? n : *v;
}

int budget_create(struct budget **out, struct event_base *base, uint64_t limit,
                  uint64_t user_limit)
{
    struct budget *b = calloc(1, sizeof(*b));
    if (!b)
        return -ENOMEM;
    budget_set_limits(b, limit, user_limit);
    b->ino = base ? inotify_init1(IN_NONBLOCK | IN_CLOEXEC) : -1;
    if (b->ino >= 0 &&
        (!(b->ino_ev = event_new(base, b->ino, EV_READ | EV_PERSIST, budget_on_inotify, b)) ||
         event_add(b->ino_ev, NULL) < 0)) {
        if (b->ino_ev)
            event_free(b->ino_ev);
        b->ino_ev = NULL;
        close(b->ino);
        b->ino = -1;
    }
    if (base && b->ino < 0)
        log_warn("inotify: %s: rings a client keeps after its connection are freed at once "
                 "instead of charged until it lets them go", strerror(errno));
    *out = b;
    return 0;
}

void budget_stop(struct budget *b)
{
    b->stopped = 1;
    b->notify = NULL;
    if (b->ino_ev)
        event_free(b->ino_ev);
    b->ino_ev = NULL;
    if (b->ino >= 0)
        close(b->ino);
    b->ino = -1;
}

void budget_destroy(struct budget *b)
{
    if (!b)
        return;
    budget_stop(b);
    free(b->left);
    free(b->users);
    free(b);
}

void budget_set_limits(struct budget *b, uint64_t limit, uint64_t user_limit)
{
    b->limit = limit;
    b->user_limit = user_limit < limit ? user_limit : limit;
}

static struct budget_user *budget_user(const struct budget *b, uid_t uid)
{
    for (size_t i = 0; i < b->n; i++)
        if (b->users[i].uid == uid)
            return &b->users[i];
    return NULL;
}

/* uid's entry, made when missing: NULL when it cannot be. */
static struct budget_user *budget_user_add(struct budget *b, uid_t uid)
{
    struct budget_user *u = budget_user(b, uid);
    if (u)
        return u;
    struct budget_user *nu = vec_grow(b->users, &b->cap, b->n + 1, sizeof(*nu), 8);
    if (!nu)
        return NULL;
    b->users = nu;
    u = &b->users[b->n++];
    *u = (struct budget_user){.uid = uid};
    return u;
}

/* u goes when nothing is charged to it and it has no connections. */
static void budget_user_drop(struct budget *b, struct budget_user *u)
{
    if (u->used == 0 && u->queues == 0)
        *u = b->users[--b->n];
}

uint64_t budget_used(const struct budget *b, uid_t uid)
{
    const struct budget_user *u = budget_user(b, uid);
    return u ? u->used : 0;
}

uint64_t budget_room(const struct budget *b, uid_t uid, int *by_user)
{
    uint64_t all = b->used < b->limit ? b->limit - b->used : 0;
    uint64_t used = budget_used(b, uid);
    uint64_t mine = used < b->user_limit ? b->user_limit - used : 0;
    if (by_user)
        *by_user = mine < all;
    return mine < all ? mine : all;
}

uint64_t budget_cap(struct budget *b, uid_t uid, uint64_t floor, uint64_t later,
                    int *by_user)
{
    struct budget_user *u = budget_user(b, uid); /* there: the connection's queue */
    uint64_t room = budget_room(b, uid, by_user);
    if (floor == 0 || floor > room)
        return 0;
    if (u && floor > u->floor) /* granted: read-ahead leaves room for one more */
        u->floor = floor;
    /* The share is reckoned without the uid's read-ahead, which goes as
     * its batches run (a stream's grant is for its life); the room, the
     * hard bound, with it. */
    uint64_t used = u ? u->used - u->ahead : 0;
    uint64_t mine = used < b->user_limit ? b->user_limit - used : 0;
    uint64_t most = b->user_limit / 4 * 3; /* the reserve's most: see budget.h */
    uint64_t reserve = later > most / floor ? most : later * floor;
    uint64_t above = mine > reserve ? mine - reserve : 0;
    uint64_t cap = above < room ? above : room;
    return cap > floor ? cap : floor;
}

int budget_charge(struct budget *b, uid_t uid, uint64_t bytes)
{
    struct budget_user *u = budget_user_add(b, uid);
    if (!u)
        return -ENOMEM;
    gauge_add(&u->used, &u->peak, bytes);
    gauge_add(&b->used, &b->peak, bytes);
    return 0;
}

void budget_uncharge(struct budget *b, uid_t uid, uint64_t bytes)
{
    struct budget_user *u = budget_user(b, uid);
    if (!u || bytes == 0)
        return;
    gauge_sub(&u->used, bytes);
    gauge_sub(&b->used, bytes);
    budget_user_drop(b, u);
    if (b->paused && b->notify)
        b->notify(b->notify_arg);
}

void budget_set_notify(struct budget *b, void (*fn)(void *arg), void *arg)
{
    b->notify = fn;
    b->notify_arg = arg;
}

/* ---- queued replies ---- */

int budget_queue_new(struct budget *b, uid_t uid, struct budget_queue **out)
{
    struct budget_queue *q = calloc(1, sizeof(*q));
    struct budget_user *u = q ? budget_user_add(b, uid) : NULL;
    if (!u) {
        free(q);
        return -ENOMEM;
    }
    u->queues++;
    q->b = b;
    q->uid = uid;
    *out = q;
    return 0;
}

void budget_queue_close(struct budget_queue *q)
{
    if (!q)
        return;
    budget_queue_pause(q, BUDGET_GO);
    struct budget_user *u = budget_user(q->b, q->uid);
    if (u) {
        u->queues--;
        budget_user_drop(q->b, u);
    }
    q->closed = 1;
    if (q->queued == 0)
        free(q);
}

void budget_queue_add(struct budget_queue *q, uint64_t bytes)
{
    struct budget *b = q->b;
    struct budget_user *u = budget_user(b, q->uid); /* there while q is open */
    if (!u || q->closed)
        return;
    q->queued += bytes;
    u->queued += bytes;
    b->queued += bytes;
    budget_charge(b, q->uid, bytes); /* the entry is there: cannot fail */
}

void budget_queue_sub(struct budget_queue *q, uint64_t bytes)
{
    struct budget *b = q->b;
    struct budget_user *u = budget_user(b, q->uid);
    if (bytes > q->queued)
        bytes = q->queued;
    q->queued -= bytes;
    b->queued -= bytes;
    if (u)
        u->queued -= bytes < u->queued ? bytes : u->queued;
    int gone = q->closed && q->queued == 0;
    budget_uncharge(b, q->uid, bytes);
    if (gone)
        free(q);
}

uint64_t budget_queue_bytes(const struct budget_queue *q)
{
    return q->queued;
}

enum budget_wait budget_queue_wait(const struct budget_queue *q, uint64_t own)
{
    const struct budget *b = q->b;
    const struct budget_user *u = budget_user(b, q->uid);
    if (q->queued > own)
        return BUDGET_WAIT_OWN;
    if (!u || u->queued == 0)
        return BUDGET_GO;
    if (u->used >= b->user_limit)
        return BUDGET_WAIT_USER;
    if (b->used >= b->limit)
        return BUDGET_WAIT_ALL;
    return BUDGET_GO;
}

void budget_queue_pause(struct budget_queue *q, enum budget_wait why)
{
    struct budget *b = q->b;
    struct budget_user *u = budget_user(b, q->uid);
    if (q->paused == BUDGET_WAIT_AHEAD && why != BUDGET_WAIT_AHEAD)
        b->ahead_waits--;
    else if (q->paused != BUDGET_WAIT_AHEAD && why == BUDGET_WAIT_AHEAD) {
        b->ahead_waits++;
        b->pauses_ahead++;
    }
    if ((q->paused != BUDGET_GO) == (why != BUDGET_GO)) {
        q->paused = why;
        return;
    }
    q->paused = why;
    if (why == BUDGET_GO) {
        b->paused--;
        if (u)
            u->paused--;
        return;
    }
    b->paused++;
    b->pauses++;
    b->pauses_user += why == BUDGET_WAIT_USER;
    b->pauses_all += why == BUDGET_WAIT_ALL;
    if (u)
        u->paused++;
}

int budget_linger(struct budget *b, uid_t uid, uint64_t bytes, int fd)
{
    char path[64];
    if (b->stopped) /* nothing to charge any more; the client's pages stay its own */
        return 0;
    if (b->ino < 0)
        return -ENOSYS;
    struct budget_left *l = vec_grow(b->left, &b->capleft, b->nleft + 1, sizeof(*l), 16);
    if (!l)
        return -ENOMEM;
    b->left = l;
    /* Any event will do: IN_IGNORED comes when the file is freed. */
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    int wd = inotify_add_watch(b->ino, path, IN_ATTRIB);
    if (wd < 0)
        return -errno;
    int rc = budget_charge(b, uid, bytes);
    if (rc < 0) {
        inotify_rm_watch(b->ino, wd);
        return rc;
    }
    b->left[b->nleft++] = (struct budget_left){wd, uid, bytes};
    b->left_bytes += bytes;
    return 0;
}

/* The files of rings let go were freed: their charges go. */
static void budget_on_inotify(evutil_socket_t fd, short what, void *arg)
{
    struct budget *b = arg;
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    (void)what;
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n <= 0)
            return;
        for (char *p = buf; p < buf + n;) {
            const struct inotify_event *e = (const struct inotify_event *)p;
            p += sizeof(*e) + e->len;
            if (!(e->mask & IN_IGNORED))
                continue;
            for (size_t i = 0; i < b->nleft; i++) {
                if (b->left[i].wd != e->wd)
                    continue;
                budget_uncharge(b, b->left[i].uid, b->left[i].bytes);
                b->left_bytes -= b->left[i].bytes;
                b->left[i] = b->left[--b->nleft];
                break;
            }
        }
    }
}

/* Half of what the charges other than read-ahead leave under limit, and a
 * stream's floor besides, less the read-ahead charged already: a stream
 * opening as large as the largest so far is never refused for read-ahead
 * (budget.h). */
static uint64_t ahead_half(uint64_t limit, uint64_t used, uint64_t ahead, uint64_t floor)
{
    uint64_t other = used - ahead + floor;
    uint64_t half = other < limit ? (limit - other) / 2 : 0;
    return half > ahead ? half - ahead : 0;
}

int budget_ahead_blocks(const struct budget *b, uid_t uid, uint64_t floor)
{
    const struct budget_user *u = budget_user(b, uid);
    if (b->ahead == 0 || floor <= budget_room(b, uid, NULL))
        return 0;
    uint64_t other = u ? u->used - u->ahead : 0, all = b->used - b->ahead;
    return other + floor <= b->user_limit && all + floor <= b->limit;
}

uint64_t budget_ahead_room(const struct budget *b, uid_t uid)
{
    const struct budget_user *u = budget_user(b, uid);
    if (b->ahead_waits > 0) /* an OPEN waits for read-ahead to go */
        return 0;
    uint64_t floor = 0; /* the largest of any uid's now */
    for (size_t i = 0; i < b->n; i++)
        floor = b->users[i].floor > floor ? b->users[i].floor : floor;
    uint64_t mine = ahead_half(b->user_limit, u ? u->used : 0, u ? u->ahead : 0,
                               u ? u->floor : 0);
    uint64_t all = ahead_half(b->limit, b->used, b->ahead, floor);
    return mine < all ? mine : all;
}

int budget_ahead_charge(struct budget *b, uid_t uid, uint64_t bytes)
{
    int rc = budget_charge(b, uid, bytes);
    if (rc < 0)
        return rc;
    budget_user(b, uid)->ahead += bytes; /* made by the charge */
    gauge_add(&b->ahead, &b->ahead_peak, bytes);
    return 0;
}

void budget_ahead_uncharge(struct budget *b, uid_t uid, uint64_t bytes)
{
    struct budget_user *u = budget_user(b, uid);
    if (!u || bytes == 0)
        return;
    gauge_sub(&u->ahead, bytes);
    gauge_sub(&b->ahead, bytes);
    budget_uncharge(b, uid, bytes);
}

void budget_ahead_skipped(struct budget *b)
{
    b->ahead_skipped++;
}

void budget_lowered(struct budget *b)
{
    b->lowered++;
}

void budget_stats(const struct budget *b, struct stats_out *o)
{
    uint64_t users = 0;
    for (size_t i = 0; i < b->n; i++)
        users += b->users[i].used > 0;
    const uint64_t v[BUD_MAX] = {b->limit,    b->user_limit, b->used,   b->peak,
                                 users,       b->lowered,    b->nleft,  b->left_bytes,
                                 b->queued,   b->paused,     b->pauses, b->pauses_user,
                                 b->pauses_all, b->pauses_ahead, b->ahead,  b->ahead_peak,
                                 b->ahead_skipped};
    stats_begin(o, "client_memory", NULL, NULL, NULL);
    stats_emit_u64(o, budget_decl, v, BUD_MAX);
    stats_list_begin(o, "per_uid");
    for (size_t i = 0; i < b->n; i++) {
        char uid[16];
        if (b->users[i].used == 0 && b->users[i].paused == 0)
            continue; /* only connected: as a uid that never connected */
        snprintf(uid, sizeof(uid), "%u", (unsigned)b->users[i].uid);
        stats_begin(o, NULL, "user", "uid", uid);
        struct stats_val u[] = {stats_str(uid), stats_u64(b->users[i].used),
                                stats_u64(b->users[i].peak), stats_u64(b->users[i].queued), stats_u64(b->users[i].paused),
                                stats_u64(b->users[i].ahead)};
        stats_emit(o, user_decl, u, sizeof(u) / sizeof(u[0]));
        stats_end(o);
    }
    stats_list_end(o);
    stats_end(o);
}
