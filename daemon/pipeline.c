/* Batched pipeline through the cache tiers: see pipeline.h. */
#include "pipeline.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

#define ADD(p, v) __atomic_fetch_add((p), (v), __ATOMIC_RELAXED)
#define ARENA_ALIGN 64u

uint64_t pipeline_sample_seed(uint64_t seed, uint64_t epoch, uint32_t sample)
{
    return step_mix64(step_mix64(step_mix64(seed) ^ epoch) ^ sample);
}

/* ---- per-thread buffers ---- */

/* Where a sample of the chunk comes from. */
enum item_src {
    SRC_MEM,  /* a memory entry */
    SRC_DISK, /* a disk record, read with the chunk */
    SRC_FILE, /* the source file, read with the chunk */
    SRC_SKIP, /* (warm) on disk already, and memory does not want it */
    SRC_BAD,  /* the source file cannot be read at all */
};

struct item {
    uint32_t id;
    uint8_t src;
    uint8_t computed;            /* went through the offline steps */
    int err;                     /* SRC_BAD: the negative errno */
    const struct cache_entry *e; /* SRC_MEM */
    uint8_t pinned;              /* SRC_DISK: loc is pinned (until its read is done) */
    struct store_loc loc;        /* SRC_DISK */
    struct dataset_file f;       /* SRC_FILE: size and mtime as read (fd -1) */
    size_t off, len;             /* SRC_DISK, SRC_FILE: room in the arena (what is read) */
    uint32_t lead;               /* SRC_DISK: where the record starts in it (O_DIRECT
                                    reads start at an aligned offset before it) */
    struct img bytes;            /* a view of them once read (SRC_DISK: decoded) */
    unsigned req;                /* its read */
    char msg[160];               /* SRC_BAD: why */
};

/* A chunk of samples and their reads (see pipeline.h). */
struct chunk {
    struct item items[PIPELINE_CHUNK_SAMPLES];
    struct io_req reqs[PIPELINE_CHUNK_SAMPLES];
    uint32_t ids[PIPELINE_CHUNK_SAMPLES]; /* warm: the chunk's sample ids */
    uint8_t *arena; /* the chunk's records and files */
    size_t arena_cap;
    uint32_t req_item[PIPELINE_CHUNK_SAMPLES]; /* the item of each read */
    unsigned nreq;  /* the chunk's reads */
    uint32_t m;     /* samples gathered */
};

/* Two chunks: the one being run and the next, whose reads are in flight
 * meanwhile. */
struct pipe_local {
    struct chunk ck[2];
    struct img decoded; /* a disk record, decoded */
};

/* The first chunk of a batch, gathered and read on the event loop before a
 * worker takes the batch (pipeline.h). */
struct pipeline_ahead {
    struct chunk ck;
    const struct dataset *ds;
    uint64_t fingerprint; /* ds's strategy when gathered */
    uint32_t split;
    unsigned pending;     /* reads not done, plus one while they are queued */
    struct pipeline_ahead_budget *budget;
    size_t reserved;      /* of the budget: the arena */
    void (*ready)(void *arg);
    void *ready_arg;
};

static void local_free(void *p)
{
    struct pipe_local *L = p;
    for (int c = 0; c < 2; c++)
        free(L->ck[c].arena);
    img_free(&L->decoded);
    free(L);
}

static struct pipe_local *local_get(struct worker_ctx *ctx)
{
    if (!ctx->local && (ctx->local = calloc(1, sizeof(struct pipe_local))))
        ctx->local_free = local_free;
    return ctx->local;
}

/* Publishes what the thread's buffers take, for the memory stats. */
static void local_account(struct worker_ctx *ctx, struct pipe_local *L)
{
    uint64_t b = sizeof(*L) + L->ck[0].arena_cap + L->ck[1].arena_cap + L->decoded.cap;
    for (int k = 0; k < 3; k++)
        b += ctx->scratch[k].cap;
    __atomic_store_n(&ctx->mem_bytes, b, __ATOMIC_RELAXED);
}

/* ---- steps ---- */

/* Runs steps [from, to) starting at *cur; *cur ends at the result, which
 * lives in one of the two ping-pong scratch images (or is *cur unchanged),
 * or in last_out for the last step when last_out is given. */
static enum pipeline_fault run_steps(const struct config_dataset *cfg, uint32_t from,
                                     uint32_t to, uint64_t seed, struct worker_ctx *ctx,
                                     const struct img **cur, struct img *last_out,
                                     char *err, size_t errlen)
{
    for (uint32_t i = from; i < to; i++) {
        const struct step *s = &cfg->steps[i];
        struct img *out = &ctx->scratch[1 + (*cur == &ctx->scratch[1])];
        if (last_out && i + 1 == to)
            out = last_out;
        ctx->step.seed = step_mix64(seed + i);
        uint64_t t0 = stats_now_ns();
        int rc = step_apply(s, &ctx->step, *cur, out);
        stats_step(ctx->stats, s->kind, stats_now_ns() - t0);
        if (rc == -ENOSPC && out == last_out) {
            snprintf(err, errlen, "%s: output larger than the stream's %zu-byte sample",
                     step_name(s->kind), last_out->cap);
            return PIPE_SHAPE;
        }
        if (rc < 0) {
            snprintf(err, errlen, "%s", ctx->step.err); /* steps name themselves */
            if (rc == -E2BIG)
                return PIPE_TOO_LARGE;
            return s->kind == STEP_DECODE ? PIPE_DECODE : PIPE_SHAPE;
        }
        *cur = out;
    }
    return PIPE_OK;
}

/* The online steps, the last one writing straight into the batch's slot. */
static enum pipeline_fault run_online(const struct dataset *ds, const struct img *cur,
                                      uint64_t sample_seed, uint8_t *dst,
                                      struct worker_ctx *ctx, char *err, size_t errlen)
{
    const struct config_dataset *cfg = ds->cfg;
    struct img slot = {.fmt = IMG_PIXELS, .data = dst, .cap = ds->sample_bytes, .borrowed = 1};
    enum pipeline_fault f =
        run_steps(cfg, ds->split, cfg->nsteps, sample_seed, ctx, &cur, &slot, err, errlen);
    if (f != PIPE_OK)
        return f;
    if (cur->fmt != IMG_PIXELS || cur->h != ds->out_h || cur->w != ds->out_w ||
        cur->c != ds->out_c || cur->len != ds->sample_bytes) {
        snprintf(err, errlen, "output is %ux%ux%u, the stream's is %ux%ux%u", cur->h,
                 cur->w, cur->c, ds->out_h, ds->out_w, ds->out_c);
        return PIPE_SHAPE;
    }
    if (cur->data != dst)
        memcpy(dst, cur->data, cur->len);
    return PIPE_OK;
}

static enum stats_counter fault_counter(enum pipeline_fault f)
{
    switch (f) {
    case PIPE_READ: return STAT_err_read;
    case PIPE_TOO_LARGE: return STAT_err_too_large;
    default: return STAT_err_decode;
    }
}

/* Counts a bad sample and logs it the first time. */
static void fault_report(struct worker_ctx *ctx, struct dataset *ds, uint32_t id,
                         enum pipeline_fault f, const char *err)
{
    stats_add(ctx->stats, fault_counter(f), 1);
    ADD(&ds->n.errors, 1);
    if (dataset_first_error(ds, id))
        log_warn("dataset '%s': bad sample %s/%s: %s", ds->cfg->name, ds->cfg->root,
                 dataset_path(ds, id), err);
}

/* ---- the tiers ---- */

static int disk_writable(const struct pipeline_env *env, const struct dataset *ds)
{
    return env->store && ds->on_disk && !store_degraded(env->store);
}

static int on_disk(const struct dataset *ds, uint32_t id)
{
    return ds->on_disk && __atomic_load_n(&ds->on_disk[id], __ATOMIC_RELAXED);
}

/* Notes that the disk tier holds sample id under its current key. */
static void mark_on_disk(struct store *st, struct dataset *ds, uint32_t id,
                         const struct store_key *key)
{
    struct store_loc loc;
    if (__atomic_exchange_n(&ds->on_disk[id], 1, __ATOMIC_RELAXED))
        return; /* a record stored again: the old one is dead bytes */
    ADD(&ds->n.disk_entries, 1);
    if (store_lookup(st, key, &loc) == 0) {
        ADD(&ds->n.disk_bytes_raw, loc.raw_len);
        ADD(&ds->n.disk_bytes_stored, loc.stored_len);
        store_release(st, &loc);
    }
}

/* Stores a materialized sample in the disk tier under the key of the file
 * as read (f): when that is no longer the indexed file, nobody looks the
 * record up, and compaction reclaims it after the next restart. */
static void disk_put(const struct pipeline_env *env, struct dataset *ds, uint32_t id,
                     const struct img *im, const struct dataset_file *f)
{
    struct store_key key, indexed;
    if (!disk_writable(env, ds))
        return;
    dataset_key(ds, id, f, &key);
    int rc = store_put(env->store, &key, im, ds->zstd_level);
    if (rc == 0) {
        ADD(&ds->n.disk_puts, 1);
        dataset_key(ds, id, NULL, &indexed);
        if (memcmp(&key, &indexed, sizeof(key)) == 0)
            mark_on_disk(env->store, ds, id, &key);
        return;
    }
    ADD(&ds->n.disk_put_errors, 1);
    if (rc == -ENOSPC && !store_degraded(env->store))
        pipeline_compact_request(env->compactor); /* over the disk budget */
}

/* im, admitted to memory if the policy takes it (then *out is the entry). */
static void admit(const struct pipeline_env *env, struct dataset *ds, uint32_t id,
                  const struct img *im, struct img *view, const struct img **out)
{
    const struct cache_entry *e = cache_put(env->cache, ds->id, ds->fingerprint, id, im);
    if (e) {
        cache_entry_img(e, view);
        *out = view;
    } else {
        *out = im;
    }
}

/* Source bytes through the offline steps, then into the tiers. */
static enum pipeline_fault compute(const struct pipeline_env *env, struct dataset *ds,
                                   struct item *it, const struct img *src,
                                   const struct dataset_file *f, struct worker_ctx *ctx,
                                   struct img *view, const struct img **out, char *err,
                                   size_t errlen)
{
    const struct config_dataset *cfg = ds->cfg;
    const struct img *cur = src;
    ADD(&ds->n.source_reads, 1);
    ADD(&ds->n.source_bytes, src->len);
    ADD(&ds->n.computed, 1);
    it->computed = 1;
    /* Offline steps are deterministic: they take no seed. */
    enum pipeline_fault fault = run_steps(cfg, 0, ds->split, 0, ctx, &cur, NULL, err, errlen);
    if (fault != PIPE_OK)
        return fault;
    /* Nothing offline, or split: auto still undecided: nothing to cache. */
    if (ds->split == 0 || ds->autos.state == DATASET_AUTO_PENDING) {
        *out = cur;
        return PIPE_OK;
    }
    disk_put(env, ds, it->id, cur, f);
    admit(env, ds, it->id, cur, view, out);
    return PIPE_OK;
}

/* ---- a chunk of samples ---- */

static size_t align_up(size_t n)
{
    return (n + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
}

static size_t direct_align(size_t n)
{
    return (n + STORE_DIRECT_ALIGN - 1) & ~(size_t)(STORE_DIRECT_ALIGN - 1);
}

/* Gives chunk C an arena of at least bytes, aligned for O_DIRECT reads.
 * 0, or -ENOMEM (C then has none). */
static int chunk_arena(struct chunk *C, size_t bytes)
{
    void *p = NULL;
    if (bytes <= C->arena_cap)
        return 0;
    free(C->arena);
    if (posix_memalign(&p, STORE_DIRECT_ALIGN, direct_align(bytes)) != 0)
        p = NULL;
    C->arena = p;
    C->arena_cap = p ? bytes : 0;
    return p ? 0 : -ENOMEM;
}

/*
 * Looks up samples ids[0..n) (at least one, at most a chunk's limits):
 * memory entries, disk records (pinned), source files (opened). Sets
 * *bytes to the arena size their reads need. Returns how many it took.
 */
static uint32_t chunk_gather(const struct pipeline_env *env, struct dataset *ds,
                             const uint32_t *ids, uint32_t n, int warm,
                             struct chunk *C, size_t *bytes)
{
    size_t total = 0;
    uint32_t m;
    for (m = 0; m < n && m < PIPELINE_CHUNK_SAMPLES; m++) {
        struct item *it = &C->items[m];
        uint32_t id = ids[m];
        it->id = id;
        it->computed = 0;
        it->pinned = 0;
        it->e = NULL;
        it->loc.seg = NULL;
        it->f.fd = -1;
        it->len = 0;
        it->lead = 0;
        if (ds->split > 0 && (it->e = cache_get(env->cache, ds->id, ds->fingerprint, id))) {
            /* Warm also stores what memory has and disk has not. */
            if (!warm || on_disk(ds, id) || !disk_writable(env, ds)) {
                it->src = SRC_MEM;
                continue;
            }
        }
        /* Warm without a disk tier: only what memory will take. */
        if (warm && !on_disk(ds, id) && !disk_writable(env, ds) && ds->mat_bytes &&
            !cache_admits(env->cache, ds->id, id, ds->mat_bytes)) {
            it->src = SRC_SKIP;
            continue;
        }
        if (ds->split > 0 && on_disk(ds, id)) {
            struct store_key key;
            dataset_key(ds, id, NULL, &key);
            if (store_lookup(env->store, &key, &it->loc) == 0) {
                if (warm && !cache_admits(env->cache, ds->id, id, it->loc.raw_len)) {
                    it->len = it->loc.raw_len;
                    store_release(env->store, &it->loc);
                    it->src = SRC_SKIP;
                    continue;
                }
                /* O_DIRECT: whole aligned blocks around the record, read
                 * into an aligned place of the (aligned) arena. */
                size_t lead = 0, len = it->loc.len, at = total;
                if (it->loc.dfd >= 0) {
                    lead = it->loc.off % STORE_DIRECT_ALIGN;
                    len = direct_align(lead + it->loc.len);
                    at = direct_align(total);
                }
                if (m > 0 && at + len > PIPELINE_CHUNK_BYTES) {
                    store_release(env->store, &it->loc);
                    break;
                }
                it->src = SRC_DISK;
                it->pinned = 1;
                it->lead = (uint32_t)lead;
                it->len = len;
                it->off = at;
                total = at + align_up(len);
                continue;
            }
        }
        /* The file is read whole with room for its size at indexing; one
         * that grew since is read again (item_materialize). */
        uint64_t size = ds->samples[id].size;
        if (size > env->max_file_size)
            size = 0; /* the read says how large it is now */
        if (m > 0 && total + size > PIPELINE_CHUNK_BYTES)
            break;
        it->src = SRC_FILE;
        it->len = (size_t)size;
        it->off = total;
        total += align_up(it->len);
    }
    *bytes = total;
    return m;
}

/* Lets go of the record item it pinned for its read. */
static void item_unpin(const struct pipeline_env *env, struct item *it)
{
    if (it->pinned) {
        store_release(env->store, &it->loc);
        it->pinned = 0;
    }
}

/*
 * Queues the reads of the chunk's records and files on a ring (the
 * worker's, or the event loop's for a batch read ahead), in sample order,
 * behind those queued before (the chunk before, whose samples run
 * meanwhile, or the batches before), and hands them to the kernel:
 * io.depth of them in flight, the next one issued as soon as one
 * completes, so the reads run ahead of decoding along the epoch's order. A
 * source file is one request (opened below the dataset's root, statted,
 * read and closed by the kernel). A read that could not be made has res < 0
 * and is done (with no on_done call). Each request queued calls on_done
 * (may be NULL) with arg as it completes.
 */
static void chunk_prepare(const struct dataset *ds, struct chunk *C, struct io_ring *io,
                          size_t bytes, void (*on_done)(struct io_req *), void *arg)
{
    int have_arena = chunk_arena(C, bytes) == 0;
    C->nreq = 0;
    for (uint32_t i = 0; i < C->m; i++) {
        struct item *it = &C->items[i];
        if (it->src != SRC_DISK && it->src != SRC_FILE)
            continue;
        struct io_req *q = &C->reqs[C->nreq];
        q->buf = have_arena ? C->arena + it->off : NULL;
        q->len = it->len;
        q->on_done = on_done;
        q->arg = arg;
        q->direct = it->src == SRC_DISK && it->loc.dfd >= 0;
        if (q->direct) {
            q->fd = it->loc.dfd;
            q->off = it->loc.off - it->lead;
            q->path = NULL;
        } else if (it->src == SRC_DISK) {
            q->fd = it->loc.fd;
            q->off = it->loc.off;
            q->path = NULL;
        } else {
            q->fd = ds->root_fd;
            q->off = 0;
            q->path = dataset_path(ds, it->id);
            /* Links out of the root stay refused at open (access.h). */
            q->real_root = ds->cfg->follow_symlinks ? NULL : ds->real_root;
        }
        C->req_item[C->nreq] = i;
        it->req = C->nreq++;
        if (!have_arena) {
            q->res = -ENOMEM;
            q->failed = IO_STEP_OPEN;
            q->state = IO_S_DONE; /* no on_done: the loop's chunks have their arena */
            continue;
        }
        io_submit(io, q);
    }
    io_poll(io);
}

/* Makes sure the read of item it is done. */
static void chunk_need(const struct pipeline_env *env, struct worker_ctx *ctx, struct chunk *C,
                       struct item *it)
{
    if (it->src != SRC_DISK && it->src != SRC_FILE)
        return;
    io_poll(ctx->io); /* completions in, more reads out */
    io_wait(ctx->io, &C->reqs[it->req]);
    item_unpin(env, it);
}

/* After a chunk: reads not needed (the batch stopped) are taken back, and
 * an arena grown past the chunk limit for one large file is given back. */
static void chunk_end(const struct pipeline_env *env, struct worker_ctx *ctx,
                      struct pipe_local *L, struct chunk *C)
{
    for (unsigned r = 0; r < C->nreq; r++) {
        struct item *it = &C->items[C->req_item[r]];
        io_cancel(ctx->io, &C->reqs[r]);
        item_unpin(env, it);
    }
    C->nreq = 0;
    C->m = 0;
    if (C->arena_cap > PIPELINE_CHUNK_BYTES) {
        free(C->arena);
        C->arena = NULL;
        C->arena_cap = 0;
    }
    local_account(ctx, L);
}

/* A disk record that cannot be used: recomputed from the source and
 * stored again (the new record supersedes it). */
static enum pipeline_fault disk_recover(const struct pipeline_env *env, struct dataset *ds,
                                        struct item *it, int why, struct worker_ctx *ctx,
                                        struct img *view, const struct img **out, char *err,
                                        size_t errlen)
{
    struct dataset_file f;
    ADD(&ds->n.disk_bad, 1);
    log_warn("dataset '%s': disk tier record of %s is unusable (%s); recomputing it",
             ds->cfg->name, dataset_path(ds, it->id),
             why == -EBADMSG ? "corrupt" : strerror(-why));
    int rc = dataset_read(ds, it->id, env->max_file_size, &ctx->scratch[0], &f, err, errlen);
    if (rc < 0)
        return rc == -EFBIG ? PIPE_TOO_LARGE : PIPE_READ;
    return compute(env, ds, it, &ctx->scratch[0], &f, ctx, view, out, err, errlen);
}

/* The offline output of a gathered and read sample: *out is a memory
 * entry, a decoded record or a computed image (NULL for SRC_SKIP), valid
 * until the next sample. Counts the disk tier's hits and misses when
 * `count` (streams; warm reads are not training reads). */
static enum pipeline_fault item_materialize(const struct pipeline_env *env,
                                            struct dataset *ds, struct item *it,
                                            struct pipe_local *L, struct chunk *C,
                                            struct worker_ctx *ctx, int count,
                                            struct img *view, const struct img **out,
                                            char *err, size_t errlen)
{
    const struct io_req *q = it->src == SRC_DISK || it->src == SRC_FILE ? &C->reqs[it->req]
                                                                          : NULL;
    int tiered = env->store && ds->split > 0;
    switch (it->src) {
    case SRC_MEM:
        cache_entry_img(it->e, view);
        *out = view;
        return PIPE_OK;
    case SRC_SKIP:
        *out = NULL;
        return PIPE_OK;
    case SRC_DISK: {
        struct store_key key;
        size_t rec_len = it->loc.len; /* kept by item_unpin */
        int rc = q->res < 0 ? (int)q->res : (size_t)q->res < it->lead + rec_len ? -EIO : 0;
        dataset_key(ds, it->id, NULL, &key);
        if (rc == 0)
            rc = store_decode_view(env->store, &key, C->arena + it->off + it->lead, rec_len,
                                   &L->decoded, &it->bytes);
        if (rc < 0) {
            if (count)
                ADD(&ds->n.disk_misses, 1);
            return disk_recover(env, ds, it, rc, ctx, view, out, err, errlen);
        }
        if (count)
            ADD(&ds->n.disk_hits, 1);
        ADD(&ds->n.disk_bytes_read, rec_len);
        /* A raw record is used where it was read (it->bytes points into
         * the arena, valid until the chunk ends): no copy. */
        admit(env, ds, it->id, &it->bytes, view, out);
        return PIPE_OK;
    }
    case SRC_FILE: {
        if (count && tiered)
            ADD(&ds->n.disk_misses, 1);
        if (q->res < 0) {
            if (q->failed == IO_STEP_OPEN) /* -EXDEV: RESOLVE_BENEATH refused a link */
                dataset_open_error(ds, (int)q->res, err, errlen);
            else
                snprintf(err, errlen, "%s: %s", q->failed == IO_STEP_STAT ? "stat" : "read",
                         strerror((int)-q->res));
            return PIPE_READ;
        }
        if (q->size > env->max_file_size) {
            snprintf(err, errlen, "file is %llu bytes, over the limit of %llu",
                     (unsigned long long)q->size, (unsigned long long)env->max_file_size);
            return PIPE_TOO_LARGE;
        }
        it->f = (struct dataset_file){.fd = -1, .size = q->size, .mtime_ns = q->mtime_ns};
        if (q->size > it->len) { /* grew since indexing: read it whole now */
            int rc = dataset_read(ds, it->id, env->max_file_size, &ctx->scratch[0], &it->f,
                                  err, errlen);
            if (rc < 0)
                return rc == -EFBIG ? PIPE_TOO_LARGE : PIPE_READ;
            return compute(env, ds, it, &ctx->scratch[0], &it->f, ctx, view, out, err, errlen);
        }
        /* A file that shrank since indexing: decode sees what is there.
         * With nothing offline, *out is this view: it lives in the item. */
        it->bytes = (struct img){.fmt = IMG_ENCODED, .data = C->arena + it->off,
                                 .len = (size_t)q->res, .cap = it->len, .borrowed = 1};
        return compute(env, ds, it, &it->bytes, &it->f, ctx, view, out, err, errlen);
    }
    default: /* SRC_BAD */
        if (count && tiered)
            ADD(&ds->n.disk_misses, 1);
        snprintf(err, errlen, "%s", it->msg);
        return it->err == -EFBIG ? PIPE_TOO_LARGE : PIPE_READ;
    }
}

/* Gathers the next chunk of ids[0..n) into C and queues its reads on the
 * worker's ring. Returns how many samples it took (at least one). */
static uint32_t chunk_start(const struct pipeline_env *env, struct dataset *ds,
                            struct chunk *C, const uint32_t *ids, uint32_t n, int warm,
                            struct worker_ctx *ctx)
{
    size_t bytes;
    C->m = chunk_gather(env, ds, ids, n, warm, C, &bytes);
    chunk_prepare(ds, C, ctx->io, bytes, NULL, NULL);
    return C->m;
}

/* chunk_start over samples [first, first + n) (warm). */
static uint32_t warm_start(const struct pipeline_env *env, struct dataset *ds,
                           struct chunk *C, uint32_t first, uint32_t n, struct worker_ctx *ctx)
{
    uint32_t want = n < PIPELINE_CHUNK_SAMPLES ? n : PIPELINE_CHUNK_SAMPLES;
    for (uint32_t i = 0; i < want; i++)
        C->ids[i] = first + i;
    return chunk_start(env, ds, C, C->ids, want, 1, ctx);
}

/* ---- batches read ahead (on the event loop) ---- */

struct pipeline_ahead *pipeline_ahead_new(void)
{
    return calloc(1, sizeof(struct pipeline_ahead));
}

size_t pipeline_ahead_size(void)
{
    return sizeof(struct pipeline_ahead);
}

int pipeline_ahead_armed(const struct pipeline_ahead *a)
{
    return a && a->ck.m > 0;
}

/* Lets go of what a gathered chunk holds (pins, arena, budget); reads done. */
void pipeline_ahead_drop(const struct pipeline_env *env, struct pipeline_ahead *a)
{
    if (!a)
        return;
    for (uint32_t i = 0; i < a->ck.m; i++)
        item_unpin(env, &a->ck.items[i]);
    a->ck.m = 0;
    a->ck.nreq = 0;
    free(a->ck.arena);
    a->ck.arena = NULL;
    a->ck.arena_cap = 0;
    if (a->reserved)
        __atomic_fetch_sub(&a->budget->used, a->reserved, __ATOMIC_RELAXED);
    a->reserved = 0;
}

void pipeline_ahead_free(const struct pipeline_env *env, struct pipeline_ahead *a)
{
    pipeline_ahead_drop(env, a);
    free(a);
}

static void ahead_read_done(struct io_req *q)
{
    struct pipeline_ahead *a = q->arg;
    if (--a->pending == 0)
        a->ready(a->ready_arg);
}

int pipeline_ahead_start(const struct pipeline_env *env, struct dataset *ds,
                         const uint32_t *ids, uint32_t n, struct pipeline_ahead *a,
                         struct io_ring *io, struct pipeline_ahead_budget *budget,
                         void (*ready)(void *arg), void *arg)
{
    size_t bytes;
    uint32_t reads = 0;
    if (n == 0 || pthread_rwlock_tryrdlock(&ds->strategy_lock) != 0)
        return -EBUSY; /* the strategy is changing: the worker reads */
    a->ck.m = chunk_gather(env, ds, ids, n, 0, &a->ck, &bytes);
    for (uint32_t i = 0; i < a->ck.m; i++)
        reads += a->ck.items[i].src == SRC_DISK || a->ck.items[i].src == SRC_FILE;
    uint64_t used = __atomic_load_n(&budget->used, __ATOMIC_RELAXED);
    if (reads == 0 || used + bytes > budget->limit) {
        pthread_rwlock_unlock(&ds->strategy_lock);
        pipeline_ahead_drop(env, a);
        return reads == 0 ? 0 : -ENOBUFS;
    }
    if (chunk_arena(&a->ck, bytes) < 0) { /* so that every read is made */
        pthread_rwlock_unlock(&ds->strategy_lock);
        pipeline_ahead_drop(env, a);
        return -ENOMEM;
    }
    __atomic_fetch_add(&budget->used, bytes, __ATOMIC_RELAXED);
    a->budget = budget;
    a->reserved = bytes;
    a->ds = ds;
    a->fingerprint = ds->fingerprint;
    a->split = ds->split;
    a->ready = ready;
    a->ready_arg = arg;
    a->pending = 1 + reads;
    chunk_prepare(ds, &a->ck, io, bytes, ahead_read_done, a);
    pthread_rwlock_unlock(&ds->strategy_lock);
    return --a->pending == 0 ? 2 : 1; /* 2: every read ended at once (deferred) */
}

/*
 * Worker: takes over a batch's chunk read ahead as C, when it still fits
 * the dataset's strategy and its memory entries are all still there (a
 * DROP_CACHE in between drops them). Reads the event loop left
 * (IO_DEFERRED) are queued on the worker's ring. 0 when it cannot be used
 * (then it is dropped).
 */
static int ahead_take(const struct pipeline_env *env, struct dataset *ds,
                      struct pipeline_ahead *a, const uint32_t *ids, uint32_t n,
                      struct worker_ctx *ctx)
{
    struct chunk *C = &a->ck;
    int ok = a->ds == ds && a->fingerprint == ds->fingerprint && a->split == ds->split &&
             C->m <= n;
    for (uint32_t i = 0; ok && i < C->m; i++) {
        struct item *it = &C->items[i];
        ok = it->id == ids[i];
        if (ok && it->src == SRC_MEM)
            ok = (it->e = cache_get(env->cache, ds->id, ds->fingerprint, it->id)) != NULL;
    }
    if (!ok) {
        pipeline_ahead_drop(env, a);
        return 0;
    }
    for (unsigned r = 0; r < C->nreq; r++) {
        struct io_req *q = &C->reqs[r];
        q->on_done = NULL;
        if (q->res == IO_DEFERRED)
            io_submit(ctx->io, q);
    }
    io_poll(ctx->io);
    return 1;
}

/* ---- batches ---- */

/* The chunk after C: one of the worker's two that C is not. */
static struct chunk *chunk_other(struct pipe_local *L, const struct chunk *C)
{
    return C == &L->ck[0] ? &L->ck[1] : &L->ck[0];
}

uint32_t pipeline_batch(const struct pipeline_env *env, struct dataset *ds,
                        const uint32_t *ids, uint32_t n, uint64_t seed, uint64_t epoch,
                        uint8_t *dst, int64_t *labels, struct worker_ctx *ctx,
                        struct pipeline_ahead *pre, pipeline_bad_fn bad, void *arg)
{
    struct pipe_local *L = local_get(ctx);
    struct chunk *C = NULL;
    char err[512];
    uint32_t k = 0, done = 0, ahead = 0;
    int stop = 0;

    pthread_rwlock_rdlock(&ds->strategy_lock);
    if (!L) {
        pipeline_ahead_drop(env, pre);
    } else if (pipeline_ahead_armed(pre) && ahead_take(env, ds, pre, ids, n, ctx)) {
        C = &pre->ck;
        ahead = C->m;
    } else {
        C = &L->ck[0];
        ahead = chunk_start(env, ds, C, ids, n, 0, ctx);
    }
    while (done < n && !stop) {
        uint32_t m = 1;
        struct chunk *next = NULL;
        if (L) {
            /* The next chunk's reads go out behind this one's. */
            m = C->m;
            next = chunk_other(L, C);
            if (ahead < n)
                ahead += chunk_start(env, ds, next, ids + ahead, n - ahead, 0, ctx);
        }
        for (uint32_t i = 0; i < m && !stop; i++) {
            uint32_t id = ids[done + i];
            struct img view;
            const struct img *im = NULL;
            enum pipeline_fault f;
            if (!L) {
                snprintf(err, sizeof(err), "no memory for the pipeline's buffers");
                f = PIPE_READ;
            } else {
                struct item *it = &C->items[i];
                int hit = it->src == SRC_MEM;
                chunk_need(env, ctx, C, it);
                stats_add(ctx->stats, hit ? STAT_cache_hits : STAT_cache_misses, 1);
                ADD(hit ? &ds->n.hits : &ds->n.misses, 1);
                f = item_materialize(env, ds, it, L, C, ctx, 1, &view, &im, err, sizeof(err));
            }
            if (f == PIPE_OK)
                f = run_online(ds, im, pipeline_sample_seed(seed, epoch, id),
                               dst + (size_t)k * ds->sample_bytes, ctx, err, sizeof(err));
            if (f == PIPE_OK) {
                labels[k++] = ds->samples[id].label;
                continue;
            }
            fault_report(ctx, ds, id, f, err);
            stop = bad(arg, done + i, f, err);
        }
        done += m;
        if (L) {
            chunk_end(env, ctx, L, C);
            if (pre && C == &pre->ck)
                pipeline_ahead_drop(env, pre); /* its arena and budget back */
            C = next;
        }
    }
    if (L && C) /* stopped early: the reads ahead are not needed */
        chunk_end(env, ctx, L, C);
    if (pre && C == &pre->ck)
        pipeline_ahead_drop(env, pre);
    pthread_rwlock_unlock(&ds->strategy_lock);
    return k;
}

void pipeline_warm(const struct pipeline_env *env, struct dataset *ds, uint32_t first,
                   uint32_t n, struct worker_ctx *ctx, struct pipeline_warm_result *res)
{
    struct pipe_local *L = local_get(ctx);
    char err[512];

    if (!L) {
        res->done += n;
        res->failed += n;
        log_error("dataset '%s': warm: no memory for the pipeline's buffers", ds->cfg->name);
        return;
    }
    pthread_rwlock_rdlock(&ds->strategy_lock);
    struct chunk *C = &L->ck[0], *next = &L->ck[1];
    uint32_t ahead = warm_start(env, ds, C, first, n, ctx);
    while (n > 0) {
        uint32_t m = C->m;
        if (ahead < n)
            ahead += warm_start(env, ds, next, first + ahead, n - ahead, ctx);
        for (uint32_t i = 0; i < m; i++) {
            struct item *it = &C->items[i];
            chunk_need(env, ctx, C, it);
            struct img view;
            const struct img *im = NULL;
            enum pipeline_fault f =
                item_materialize(env, ds, it, L, C, ctx, 0, &view, &im, err, sizeof(err));
            res->done++;
            if (f != PIPE_OK) {
                res->failed++;
                fault_report(ctx, ds, it->id, f, err);
            } else {
                res->bytes += im ? im->len : it->len;
                res->computed += it->computed;
            }
        }
        chunk_end(env, ctx, L, C);
        struct chunk *t = C;
        C = next;
        next = t;
        first += m;
        n -= m;
        ahead -= m;
    }
    pthread_rwlock_unlock(&ds->strategy_lock);
}

/* ---- the disk tier around the pipeline ---- */

int pipeline_key_live(const struct store_key *key, void *arg)
{
    const struct pipeline_datasets *dss = arg;
    for (uint32_t i = 0; i < dss->n; i++)
        if (dataset_key_current(dss->ds[i], key))
            return 1;
    return 0;
}

int pipeline_disk_scan(struct store *st, struct dataset *ds)
{
    if (ds->split == 0) /* nothing offline: nothing on disk */
        return 0;
    if (!ds->on_disk && !(ds->on_disk = calloc(ds->nsamples, 1)))
        return -ENOMEM;
    for (uint32_t id = 0; id < ds->nsamples; id++) {
        struct store_key key;
        struct store_loc loc;
        dataset_key(ds, id, NULL, &key);
        if (store_lookup(st, &key, &loc) < 0)
            continue;
        ds->on_disk[id] = 1;
        ds->n.disk_entries++;
        ds->n.disk_bytes_raw += loc.raw_len;
        ds->n.disk_bytes_stored += loc.stored_len;
        store_release(st, &loc);
    }
    return 0;
}

struct pipeline_compactor {
    struct work work; /* first: the work is the compactor */
    struct store *st;
    struct workers *workers;
    struct pipeline_datasets dss;
    int busy;         /* atomic: queued or running */
    uint64_t last_ns; /* atomic: when the last run started (0: never) */
    uint64_t runs;    /* atomic */
};

static void compact_run(struct work *w, struct worker_ctx *ctx)
{
    struct pipeline_compactor *pc = (struct pipeline_compactor *)w;
    (void)ctx;
    uint64_t t0 = stats_now_ns();
    __atomic_store_n(&pc->last_ns, t0, __ATOMIC_RELAXED);
    int rc = store_compact(pc->st, pipeline_key_live, &pc->dss);
    ADD(&pc->runs, 1);
    if (rc < 0)
        log_warn("disk tier: compaction failed: %s", strerror(-rc));
    else
        log_info("disk tier: over its budget; compaction rewrote %d segments in %.2f s", rc,
                 (double)(stats_now_ns() - t0) / 1e9);
}

static void compact_done(struct work *w, int cancelled)
{
    struct pipeline_compactor *pc = (struct pipeline_compactor *)w;
    (void)cancelled;
    __atomic_store_n(&pc->busy, 0, __ATOMIC_RELEASE);
}

int pipeline_compactor_create(struct pipeline_compactor **out, struct store *st,
                              struct workers *workers, const struct pipeline_datasets *dss)
{
    struct pipeline_compactor *pc = calloc(1, sizeof(*pc));
    if (!pc)
        return -ENOMEM;
    pc->work.run = compact_run;
    pc->work.done = compact_done;
    pc->st = st;
    pc->workers = workers;
    pc->dss = *dss;
    *out = pc;
    return 0;
}

void pipeline_compactor_set_datasets(struct pipeline_compactor *pc,
                                     const struct pipeline_datasets *dss)
{
    if (pc)
        pc->dss = *dss;
}

void pipeline_compactor_destroy(struct pipeline_compactor *pc)
{
    free(pc);
}

void pipeline_compact_request(struct pipeline_compactor *pc)
{
    int idle = 0;
    uint64_t last = pc ? __atomic_load_n(&pc->last_ns, __ATOMIC_RELAXED) : 0;
    if (!pc || (last && stats_now_ns() - last <
                            (uint64_t)PIPELINE_COMPACT_INTERVAL_S * 1000000000ull))
        return;
    if (__atomic_compare_exchange_n(&pc->busy, &idle, 1, 0, __ATOMIC_ACQUIRE,
                                    __ATOMIC_RELAXED))
        workers_submit(pc->workers, &pc->work);
}

uint64_t pipeline_compactor_runs(const struct pipeline_compactor *pc)
{
    return pc ? __atomic_load_n(&pc->runs, __ATOMIC_RELAXED) : 0;
}
