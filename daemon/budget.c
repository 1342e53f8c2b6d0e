/* The client memory budget: see budget.h. */
#include "budget.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUDGET_IDX(name, ...) BUD_##name,
enum { BUDGET_STATS(BUDGET_IDX) BUD_MAX };
static const struct stats_decl budget_decl[] = {BUDGET_STATS(STATS_DECL)};
static const struct stats_decl user_decl[] = {BUDGET_USER_STATS(STATS_DECL)};

/* An entry per uid with memory charged, searched linearly (few users). */
struct budget_user {
    uid_t uid;
    uint64_t used;
};

struct budget {
    uint64_t limit, user_limit;
    uint64_t used, peak, lowered;
    struct budget_user *users; /* n entries, room for cap */
    uint32_t n, cap;
};

int budget_create(struct budget **out, uint64_t limit, uint64_t user_limit)
{
    struct budget *b = calloc(1, sizeof(*b));
    if (!b)
        return -ENOMEM;
    budget_set_limits(b, limit, user_limit);
    *out = b;
    return 0;
}

void budget_destroy(struct budget *b)
{
    if (!b)
        return;
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
    for (uint32_t i = 0; i < b->n; i++)
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

int budget_charge(struct budget *b, uid_t uid, uint64_t bytes)
{
    struct budget_user *u = budget_user(b, uid);
    if (!u) {
        if (b->n == b->cap) {
            uint32_t cap = b->cap ? 2 * b->cap : 8;
            struct budget_user *nu = realloc(b->users, cap * sizeof(*nu));
            if (!nu)
                return -ENOMEM;
            b->users = nu;
            b->cap = cap;
        }
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

void budget_lowered(struct budget *b)
{
    b->lowered++;
}

void budget_stats(const struct budget *b, struct stats_out *o)
{
    const uint64_t v[BUD_MAX] = {b->limit, b->user_limit, b->used, b->peak, b->n, b->lowered};
    stats_begin(o, "client_memory", NULL, NULL, NULL);
    stats_emit_u64(o, budget_decl, v, BUD_MAX);
    stats_list_begin(o, "per_uid");
    for (uint32_t i = 0; i < b->n; i++) {
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
