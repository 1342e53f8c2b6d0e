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

/* An entry per uid with memory charged, searched linearly (few users). */
struct budget_user {
    uid_t uid;
    uint64_t used;
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
};

static void budget_on_inotify(evutil_socket_t fd, short what, void *arg);

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

uint64_t budget_cap(const struct budget *b, uid_t uid, uint64_t floor, uint64_t later,
                    int *by_user)
{
    uint64_t room = budget_room(b, uid, by_user);
    if (floor == 0 || floor > room)
        return 0;
    uint64_t used = budget_used(b, uid);
    uint64_t mine = used < b->user_limit ? b->user_limit - used : 0;
    uint64_t most = b->user_limit / 4 * 3; /* the reserve's most: see budget.h */
    uint64_t reserve = later > most / floor ? most : later * floor;
    uint64_t above = mine > reserve ? mine - reserve : 0;
    uint64_t cap = above < room ? above : room;
    return cap > floor ? cap : floor;
}

int budget_charge(struct budget *b, uid_t uid, uint64_t bytes)
{
    struct budget_user *u = budget_user(b, uid);
    if (!u) {
        struct budget_user *nu = vec_grow(b->users, &b->cap, b->n + 1, sizeof(*nu), 8);
        if (!nu)
            return -ENOMEM;
        b->users = nu;
        u = &b->users[b->n++];
        *u = (struct budget_user){uid, 0};
    }
    u->used += bytes;
    b->used += bytes;
    if (b->used > b->peak)
        b->peak = b->used;
    return 0;
}

void budget_uncharge(struct budget *b, uid_t uid, uint64_t bytes)
{
    struct budget_user *u = budget_user(b, uid);
    if (!u || bytes == 0)
        return;
    u->used -= bytes < u->used ? bytes : u->used;
    b->used -= bytes < b->used ? bytes : b->used;
    if (u->used == 0)
        *u = b->users[--b->n];
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

void budget_lowered(struct budget *b)
{
    b->lowered++;
}

void budget_stats(const struct budget *b, struct stats_out *o)
{
    const uint64_t v[BUD_MAX] = {b->limit, b->user_limit, b->used, b->peak,
                                 b->n,     b->lowered,    b->nleft, b->left_bytes};
    stats_begin(o, "client_memory", NULL, NULL, NULL);
    stats_emit_u64(o, budget_decl, v, BUD_MAX);
    stats_list_begin(o, "per_uid");
    for (size_t i = 0; i < b->n; i++) {
        char uid[16];
        snprintf(uid, sizeof(uid), "%u", (unsigned)b->users[i].uid);
        stats_begin(o, NULL, "user", "uid", uid);
        struct stats_val u[] = {stats_str(uid), stats_u64(b->users[i].used)};
        stats_emit(o, user_decl, u, 2);
        stats_end(o);
    }
    stats_list_end(o);
    stats_end(o);
}
