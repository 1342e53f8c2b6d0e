/* Batched pipeline through the cache tiers: see pipeline.h. */
#include "pipeline.h"
#include "source.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audio.h"
#include "decode_formats.h"
#include "hash.h"
#include "log.h"
#include "mix.h"
#include "stats.h"

#define ARENA_ALIGN 64u
#define ARENA_GRAIN ((size_t)1 << 20) /* arenas grow in these (chunk_arena) */

/* The pipeline's per-thread counters: bad samples by kind, then each
 * step kind's calls, then its nanoseconds. */
#define CNT_CALLS PIPELINE_ERR_MAX
#define CNT_NS (PIPELINE_ERR_MAX + STEP_KIND_MAX)
/* Per format, the image formats (enum decode_format) then the audio ones
 * (enum audio_format from AUDIO_FMT_WAV): decoded, failed, region, bytes. */
#define FMT_AUDIO_FIRST DECODE_FMT_MAX
#define FMT_MAX (DECODE_FMT_MAX + AUDIO_FMT_MP3)
#define CNT_FMT_OK (PIPELINE_ERR_MAX + 2 * STEP_KIND_MAX)
#define CNT_FMT_FAIL (CNT_FMT_OK + FMT_MAX)
#define CNT_FMT_REGION (CNT_FMT_FAIL + FMT_MAX)
#define CNT_FMT_BYTES (CNT_FMT_REGION + FMT_MAX)
#define CNT_MAX (CNT_FMT_BYTES + FMT_MAX)

/* The stats' name of format f (lower case: a metric's label value). */
static const char *fmt_name(int f)
{
    static const char *const audio[] = {"wav", "flac", "ogg", "mp3"};
    _Static_assert(AUDIO_FMT_WAV == 1 && AUDIO_FMT_MP3 == 4, "audio formats 1..4");
    return f < FMT_AUDIO_FIRST ? decode_format_name((enum decode_format)f)
                               : audio[f - FMT_AUDIO_FIRST];
}

struct pipeline {
    struct tiers *tiers;
    uint64_t max_file_size;
    struct stats_percpu counters;
};

int pipeline_create(struct pipeline **out, struct tiers *tiers, uint64_t max_file_size,
                    unsigned threads)
{
    struct pipeline *p = calloc(1, sizeof(*p));
    if (!p || stats_percpu_init(&p->counters, threads, CNT_MAX) < 0) {
        free(p);
        return -ENOMEM;
    }
    p->tiers = tiers;
    p->max_file_size = max_file_size;
    *out = p;
    return 0;
}

void pipeline_destroy(struct pipeline *p)
{
    if (!p)
        return;
    stats_percpu_free(&p->counters);
    free(p);
}

struct tiers *pipeline_tiers(const struct pipeline *p)
{
    return p->tiers;
}

void pipeline_set_max_file_size(struct pipeline *p, uint64_t bytes)
{
    p->max_file_size = bytes;
}

static const struct stats_decl errors_decl[] = {PIPELINE_ERRORS(STATS_DECL)};
static const struct stats_decl step_decl[] = {PIPELINE_STEP_STATS(STATS_DECL)};
static const struct stats_decl format_decl[] = {PIPELINE_FORMAT_STATS(STATS_DECL)};

void pipeline_stats(const struct pipeline *p, struct stats_out *o)
{
    uint64_t c[CNT_MAX];
    stats_percpu_sum(&p->counters, c);
    stats_begin(o, "errors", NULL, NULL, NULL);
    stats_emit_u64(o, errors_decl, c, PIPELINE_ERR_MAX);
    stats_end(o);
    stats_begin(o, "steps", "", NULL, NULL);
    for (int k = 0; k < STEP_KIND_MAX; k++) {
        const char *name = step_name((enum step_kind)k);
        struct stats_val v[] = {stats_u64(c[CNT_CALLS + k]),
                                stats_f64((double)c[CNT_NS + k] / 1e9)};
        stats_begin(o, name, "step", "step", name);
        stats_emit(o, step_decl, v, 2);
        stats_end(o);
    }
    stats_end(o);
    stats_begin(o, "formats", "", NULL, NULL);
    for (int f = 0; f < FMT_MAX; f++) {
        const char *name = fmt_name(f);
        uint64_t v[] = {c[CNT_FMT_OK + f], c[CNT_FMT_FAIL + f], c[CNT_FMT_REGION + f],
                        c[CNT_FMT_BYTES + f]};
        stats_begin(o, name, "format", "format", name);
        stats_emit_u64(o, format_decl, v, 4);
        stats_end(o);
    }
    stats_end(o);
}

/* ---- per-thread buffers ---- */

/* A sample of the chunk: where it is (enum tiers_where), and its read. */
struct item {
    uint32_t id;
    uint8_t where;
    uint8_t computed;       /* went through the offline steps */
    uint8_t region;         /* a stream's TIERS_SOURCE item no tier would store, whose
                               decode is left to the online crop (region_deferrable):
                               set by the batch around its materializing */
    struct tiers_item t;    /* where in the tiers */
    struct source_file f;   /* TIERS_SOURCE: size and mtime as read (fd -1) */
    size_t off, len;        /* TIERS_DISK, TIERS_SOURCE: room in the arena (what is read);
                               TIERS_SKIP: its bytes */
    struct img bytes;       /* a view of them once read (TIERS_DISK: decoded;
                               TIERS_MEMORY: the entry) */
    unsigned req;           /* its read */
};

/* A chunk of samples and their reads (see pipeline.h). */
struct chunk {
    struct tiers_ctx x; /* the tiers it was gathered from */
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
    const struct strategy *st; /* pinned while armed: what it was gathered under */
    unsigned pending;     /* reads not done, plus one while they are queued */
    struct pipeline_ahead_budget *budget;
    size_t reserved;      /* of the budget: the arena */
    void (*ready)(void *arg);
    void *ready_arg;
};

static void local_free(void *p)
{
    struct pipe_local *L = p;
    /* Their registrations go with the worker's ring, destroyed next
     * (workers.c) with no read between. */
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
    b += ctx->step.aux.cap; /* the augmentations' and the cold path's image */
    __atomic_store_n(&ctx->mem_bytes, b, __ATOMIC_RELAXED);
}

/* ---- steps ---- */

/* Whether the random_flip at step i mirrors the sample of sample_seed:
 * the seed it draws from is the step's own, as every step's is. */
static int flip_mirrors(const struct config_dataset *cfg, uint32_t i, uint64_t sample_seed)
{
    return step_flip_decide(cfg->steps[i].p, hash_mix64(sample_seed + i));
}

/* Runs steps [from, to) starting at *cur; *cur ends at the result, which
 * lives in one of the two ping-pong scratch images (or is *cur unchanged),
 * or in last_out for the last step when last_out is given. decode followed
 * by random_resized_crop, both in the range (online: the cold path), run
 * as one (step_decode_rrc_apply: only the crop's region decoded); so does
 * random_resized_crop followed by random_flip (the resize writes its rows
 * mirrored, when the flip's own seed says so, instead of a pass of its
 * own), and the crop (and flip) followed by normalize or to_float (each
 * output row goes to float32 as it is made, the uint8 image never
 * written); the time is the first step's, each step counts its call. */
static int run_steps(struct pipeline *p, const struct config_dataset *cfg, uint32_t from,
                     uint32_t to, uint64_t seed, struct worker_ctx *ctx,
                     const struct img **cur, struct img *last_out, char *err, size_t errlen)
{
    for (uint32_t i = from; i < to; i++) {
        const struct step *s = &cfg->steps[i];
        int fused = s->kind == STEP_DECODE && i + 1 < to &&
                    cfg->steps[i + 1].kind == STEP_RANDOM_RESIZED_CROP;
        uint32_t crop = i + (uint32_t)fused; /* random_resized_crop, when fused */
        int flip = cfg->steps[crop].kind == STEP_RANDOM_RESIZED_CROP && crop + 1 < to &&
                   cfg->steps[crop + 1].kind == STEP_RANDOM_FLIP;
        uint32_t last = crop + (uint32_t)flip; /* the step whose output this is */
        const struct step *norm = NULL; /* normalize / to_float right after, fused */
        if (cfg->steps[crop].kind == STEP_RANDOM_RESIZED_CROP && last + 1 < to &&
            (cfg->steps[last + 1].kind == STEP_NORMALIZE ||
             cfg->steps[last + 1].kind == STEP_TO_FLOAT))
            norm = &cfg->steps[++last];
        struct img *out = &ctx->scratch[1 + (*cur == &ctx->scratch[1])];
        /* The last step writes into the slot, or, when it works in place
         * there (random_erasing), the one before it does. */
        if (last_out && (last + 1 == to || (last + 2 == to && *cur != last_out &&
                                             step_in_place(&cfg->steps[to - 1]))))
            out = last_out;
        ctx->step.seed = hash_mix64(seed + crop);
        size_t in_len = (*cur)->len; /* a decode's: the file's bytes */
        uint64_t t0 = stats_now_ns();
        int mirror = flip && flip_mirrors(cfg, crop + 1, seed);
        int rc = fused || flip || norm
                     ? step_decode_rrc_tail_apply(fused ? s : NULL, &cfg->steps[crop], mirror,
                                                  norm, &ctx->step, *cur, out)
                     : step_apply(s, &ctx->step, *cur, out);
        stats_percpu_add(&p->counters, ctx->index, CNT_CALLS + s->kind, 1);
        stats_percpu_add(&p->counters, ctx->index, CNT_NS + s->kind, stats_now_ns() - t0);
        if (flip)
            stats_percpu_add(&p->counters, ctx->index, CNT_CALLS + STEP_RANDOM_FLIP, 1);
        if (norm)
            stats_percpu_add(&p->counters, ctx->index, CNT_CALLS + norm->kind, 1);
        if (fused) {
            stats_percpu_add(&p->counters, ctx->index,
                             CNT_CALLS + STEP_RANDOM_RESIZED_CROP, 1);
            if (rc == 1 && (unsigned)ctx->step.format < DECODE_FMT_MAX)
                stats_percpu_add(&p->counters, ctx->index,
                                 CNT_FMT_REGION + ctx->step.format, 1);
            rc = rc > 0 ? 0 : rc;
        }
        if (fused || flip || norm) {
            s = &cfg->steps[crop];
            i = last;
        }
        int f = -1;
        if ((s->kind == STEP_DECODE || fused) && (unsigned)ctx->step.format < DECODE_FMT_MAX)
            f = ctx->step.format;
        else if (s->kind == STEP_DECODE_AUDIO && ctx->step.audio_format >= AUDIO_FMT_WAV &&
                 ctx->step.audio_format <= AUDIO_FMT_MP3)
            f = FMT_AUDIO_FIRST + ctx->step.audio_format - AUDIO_FMT_WAV;
        if (f >= 0) {
            stats_percpu_add(&p->counters, ctx->index, (rc < 0 ? CNT_FMT_FAIL : CNT_FMT_OK) + f,
                             1);
            if (rc >= 0)
                stats_percpu_add(&p->counters, ctx->index, CNT_FMT_BYTES + f, in_len);
        }
        if (rc == -ENOSPC && out == last_out) {
            snprintf(err, errlen, "%s: output larger than the stream's %zu-byte sample",
                     step_name(s->kind), last_out->cap);
            return -EBADMSG;
        }
        if (rc < 0) {
            snprintf(err, errlen, "%s", ctx->step.err); /* steps name themselves */
            return rc == -E2BIG ? -E2BIG : -EBADMSG;
        }
        *cur = out;
    }
    return 0;
}

/* batch: {pad: longest}: a sample whose time axis (w) is its length goes
 * into a slot of o->w (max_length) columns: each of its c x h rows cropped
 * to that and zeros after it. *len is the length kept. */
static int pad_into(const struct img *cur, const struct dataset_output *o, uint8_t *dst,
                    int64_t *len, char *err, size_t errlen)
{
    size_t es = proto_dtype_size(o->dtype);
    if (cur->fmt != IMG_PIXELS || cur->h != o->h || cur->c != o->c || cur->w == 0 ||
        cur->dtype != o->dtype || cur->len != (size_t)cur->h * cur->w * cur->c * es) {
        snprintf(err, errlen, "output is %ux%ux%u, the stream's is %ux%ux(up to %u)", cur->c,
                 cur->h, cur->w, o->c, o->h, o->w);
        return -EBADMSG;
    }
    uint32_t t = cur->w < o->w ? cur->w : o->w;
    for (size_t r = 0; r < (size_t)o->c * o->h; r++) {
        uint8_t *row = dst + r * o->w * es;
        memcpy(row, cur->data + r * cur->w * es, t * es);
        memset(row + t * es, 0, (o->w - t) * es);
    }
    *len = t;
    return 0;
}

/* The online steps (from the split, or from the step before it: a
 * deferred decode), the last one writing straight into the batch's slot
 * (padded: through pad_into, *len the sample's length). */
static int run_online(struct pipeline *p, const struct dataset *ds, uint32_t from,
                      const struct img *cur, uint64_t sample_seed, uint8_t *dst,
                      int64_t *len, struct worker_ctx *ctx, char *err, size_t errlen)
{
    const struct config_dataset *cfg = dataset_config(ds);
    const struct dataset_output *o = dataset_output(ds);
    struct img slot = {.fmt = IMG_PIXELS, .data = dst, .cap = o->bytes, .borrowed = 1};
    int rc = run_steps(p, cfg, from, cfg->nsteps, sample_seed, ctx, &cur,
                       cfg->pad_max ? NULL : &slot, err, errlen);
    if (rc < 0)
        return rc;
    if (cfg->pad_max)
        return pad_into(cur, o, dst, len, err, errlen);
    if (cur->fmt != IMG_PIXELS || cur->h != o->h || cur->w != o->w || cur->c != o->c ||
        cur->len != o->bytes) {
        snprintf(err, errlen, "output is %ux%ux%u, the stream's is %ux%ux%u", cur->h,
                 cur->w, cur->c, o->h, o->w, o->c);
        return -EBADMSG;
    }
    if (cur->data != dst)
        memcpy(dst, cur->data, cur->len);
    return 0;
}

/* What a bad sample's -errno counts as: over a limit (file size, pixels),
 * a step that failed on it (-EBADMSG), or else a read. */
static enum pipeline_error fault_kind(int err)
{
    switch (err) {
    case -EFBIG:
    case -E2BIG: return PIPELINE_ERR_too_large;
    case -EBADMSG: return PIPELINE_ERR_decode;
    default: return PIPELINE_ERR_read;
    }
}

/* Counts a bad sample and logs it the first time. */
static void fault_report(struct pipeline *p, struct worker_ctx *ctx, struct dataset *ds,
                         uint32_t id, int f, const char *err)
{
    stats_percpu_add(&p->counters, ctx->index, fault_kind(f), 1);
    dataset_bad_sample(ds, id, err);
}

/* 1 when st's offline steps end with decode and its online ones start with
 * random_resized_crop, so that a sample no tier will store can skip the
 * whole decode: run online from the decode, it takes the cold path (only
 * the crop's region decoded, the same pixels as a full decode's; not with
 * dct_scale, whose scaled IDCT would change them). */
static int region_deferrable(const struct config_dataset *cfg, const struct strategy *st)
{
    return st->split >= 1 && st->split < cfg->nsteps &&
           cfg->steps[st->split - 1].kind == STEP_DECODE &&
           !cfg->steps[st->split - 1].dct_scale &&
           cfg->steps[st->split].kind == STEP_RANDOM_RESIZED_CROP;
}

/* Source bytes through the offline steps, then into the tiers (an item
 * marked region: its encoded bytes as they are, for run_online to decode
 * from the step before the split). */
static int compute(struct pipeline *p, const struct tiers_ctx *x, struct item *it,
                   const struct img *src, const struct source_file *f, struct worker_ctx *ctx,
                   struct img *view, const struct img **out, char *err, size_t errlen)
{
    const struct img *cur = src;
    dataset_count(x->ds, DATASET_source_reads, 1);
    dataset_count(x->ds, DATASET_source_bytes, src->len);
    if (it->region && src->fmt == IMG_ENCODED) {
        *out = src;
        return 0;
    }
    it->region = 0;
    dataset_count(x->ds, DATASET_computed, 1);
    it->computed = 1;
    ctx->step.name = dataset_path(x->ds, it->id); /* decode_audio: the format's name */
    /* Offline steps are deterministic: they take no seed. */
    int rc = run_steps(p, dataset_config(x->ds), 0, x->st->split, 0, ctx, &cur, NULL, err,
                       errlen);
    if (rc < 0)
        return rc;
    /* Nothing offline: nothing to cache (split: auto still undecided: the
     * tiers take nothing). */
    *out = x->st->split == 0 ? cur : tiers_put(x, it->id, cur, f, view);
    return 0;
}

/* ---- a chunk of samples ---- */

static size_t align_up(size_t n, size_t a)
{
    return (n + a - 1) & ~(a - 1);
}

/* Frees an arena, unregistered first from reg (the ring it may be
 * registered with; NULL: none), or a later arena at its address would be
 * read into the old pages. */
static void arena_free(struct io_ring *reg, void *arena)
{
    if (reg)
        io_ring_buf_unregister(reg, arena);
    free(arena);
}

/* Gives chunk C an arena of at least bytes, aligned for O_DIRECT reads:
 * the one it has where that is large enough, else a new one of size
 * (>= bytes; the read-ahead charges exactly that). Callers ask whole
 * ARENA_GRAIN units where they may: batches of one dataset differ by a few
 * records' alignment, and an arena grown by exactly that much each time was
 * unmapped and mapped again (glibc mmaps these sizes), every page of the
 * new one faulted in and zeroed by the next read. 0, or -ENOMEM (C then
 * has none). */
static int chunk_arena(struct chunk *C, size_t bytes, size_t size, struct io_ring *reg)
{
    /* reg: the ring its arena may be registered with (chunk_prepare) */
    if (bytes <= C->arena_cap)
        return 0;
    arena_free(reg, C->arena);
    void *p = io_buf_alloc(size, STORE_DIRECT_ALIGN, 1); /* a large one on huge pages */
    C->arena = p;
    C->arena_cap = p ? size : 0;
    return p ? 0 : -ENOMEM;
}

/* Where each of C's first m items goes in the arena (their lengths set);
 * returns the bytes they take. */
static size_t chunk_layout(struct chunk *C, uint32_t m)
{
    size_t total = 0;
    for (uint32_t i = 0; i < m; i++) {
        struct item *it = &C->items[i];
        if (it->where == TIERS_MEMORY || it->where == TIERS_SKIP)
            continue;
        it->off = align_up(total, it->where == TIERS_DISK ? it->t.align : 1);
        total = it->off + align_up(it->len, ARENA_ALIGN);
    }
    return total;
}

/* The cluster tier, on a worker: the first m items bound for the source
 * looked up there in one batch; a hit becomes TIERS_CLUSTER, its record
 * to be copied into the arena (chunk_prepare: the next lookup reuses the
 * buffer it is in). Returns the number of hits. */
static unsigned chunk_cluster(struct chunk *C, uint32_t m)
{
    uint32_t ids[PIPELINE_CHUNK_SAMPLES];
    struct tiers_item *its[PIPELINE_CHUNK_SAMPLES];
    unsigned n = 0;
    if (!tiers_cluster_on(&C->x))
        return 0;
    for (uint32_t i = 0; i < m; i++)
        if (C->items[i].where == TIERS_SOURCE) {
            ids[n] = C->items[i].id;
            its[n++] = &C->items[i].t;
        }
    unsigned hits = tiers_cluster_lookup(&C->x, ids, its, n);
    for (uint32_t i = 0; hits && i < m; i++) {
        struct item *it = &C->items[i];
        if (it->where == TIERS_SOURCE && it->t.rec) {
            it->where = TIERS_CLUSTER;
            it->len = it->t.rec_len;
        }
    }
    return hits;
}

/*
 * Looks up samples ids[0..n) (at least one, at most a chunk's limits) in
 * C's tiers: memory entries, disk records (pinned), source files. Sets
 * *bytes to the arena size their reads need. Returns how many it took.
 */
static uint32_t chunk_gather(struct pipeline *p, struct chunk *C, const uint32_t *ids,
                             uint32_t n, int warm, size_t *bytes)
{
    size_t total = 0, spare = 0;
    size_t rec_room = tiers_cluster_on(&C->x) ? C->x.st->mat_bytes + STORE_HEADER_SIZE : 0;
    uint32_t m;
    for (m = 0; m < n && m < PIPELINE_CHUNK_SAMPLES; m++) {
        struct item *it = &C->items[m];
        uint32_t id = ids[m];
        it->id = id;
        it->computed = 0;
        it->f.fd = -1;
        it->len = 0;
        it->where = (uint8_t)tiers_locate(&C->x, id, warm, &it->t, &it->bytes);
        if (it->where == TIERS_MEMORY)
            continue;
        if (it->where == TIERS_SKIP) {
            it->len = it->t.len;
            continue;
        }
        if (it->where == TIERS_DISK) {
            size_t at = align_up(total, it->t.align);
            if (m > 0 && at + it->t.len > PIPELINE_CHUNK_BYTES) {
                tiers_unpin(&C->x, &it->t);
                break;
            }
            it->len = it->t.len;
            it->off = at;
            total = at + align_up(it->len, ARENA_ALIGN);
            continue;
        }
        /* The source file is read whole with room for its size at indexing;
         * one that grew since is read again (item_materialize). */
        uint64_t size = dataset_file_size(C->x.ds, id);
        if (size > p->max_file_size)
            size = 0; /* the read says how large it is now */
        /* A cluster record may take its place: room for the larger. */
        size_t more = rec_room > size ? rec_room - (size_t)size : 0;
        if (m > 0 && total + spare + size + more > PIPELINE_CHUNK_BYTES)
            break;
        spare += more;
        it->len = (size_t)size;
        it->off = total;
        total += align_up(it->len, ARENA_ALIGN);
    }
    if (chunk_cluster(C, m))
        total = chunk_layout(C, m);
    *bytes = total;
    return m;
}

static int item_reads(const struct item *it)
{
    return it->where == TIERS_DISK || it->where == TIERS_SOURCE;
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
static void chunk_prepare(struct chunk *C, struct io_ring *io, size_t bytes,
                          struct io_ring *reg, void (*on_done)(struct io_req *), void *arg)
{
    int have_arena = chunk_arena(C, bytes, align_up(bytes, ARENA_GRAIN), reg) == 0;
    int remote = 0;
    C->nreq = 0;
    /* An arena that takes O_DIRECT records is registered with reg (the ring
     * the reads go to), which pins its pages once, not at every read; it
     * lives as long as it fits (ARENA_GRAIN; the read-ahead's are kept).
     * Only then: a registered arena is resident whole, while buffered and
     * source reads gain nothing from it. Where the kernel refuses (old, or
     * the locked-memory limit) the reads pin as before (counted). */
    for (uint32_t i = 0; reg && have_arena && i < C->m; i++) {
        if (C->items[i].where == TIERS_DISK && C->items[i].t.align > 1) {
            if (!io_ring_buf_registered(reg, C->arena))
                io_ring_buf_register(reg, C->arena, C->arena_cap);
            break;
        }
    }
    for (uint32_t i = 0; i < C->m; i++) {
        struct item *it = &C->items[i];
        if (it->where == TIERS_CLUSTER) {
            if (have_arena)
                memcpy(C->arena + it->off, it->t.rec, it->t.rec_len);
            else
                it->t.rec = NULL; /* computed instead */
            continue;
        }
        if (!item_reads(it))
            continue;
        struct io_req *q = &C->reqs[C->nreq];
        uint8_t *buf = have_arena ? C->arena + it->off : NULL;
        if (it->where == TIERS_DISK)
            tiers_read_req(&it->t, buf, q);
        else
            dataset_file_req(C->x.ds, it->id, buf, it->len, q);
        q->on_done = on_done;
        q->arg = arg;
        C->req_item[C->nreq] = i;
        it->req = C->nreq++;
        if (!have_arena) {
            q->res = -ENOMEM;
            q->failed = IO_STEP_OPEN;
            q->state = IO_S_DONE; /* no on_done: the loop's chunks have their arena */
            continue;
        }
        if (it->where == TIERS_SOURCE) {
            source_submit(dataset_source(C->x.ds), io, q); /* remote: its own loop */
            remote = 1;
        } else {
            io_submit(io, q);
        }
    }
    if (remote) /* the chunk's remote reads together: neighbours share a GET */
        source_kick(dataset_source(C->x.ds));
    io_poll(io);
}

/* Makes sure the read of item it is done. */
static void chunk_need(struct worker_ctx *ctx, struct chunk *C, struct item *it)
{
    if (!item_reads(it))
        return;
    io_poll(ctx->io); /* completions in, more reads out */
    if (it->where == TIERS_SOURCE)
        source_wait(dataset_source(C->x.ds), ctx->io, &C->reqs[it->req], ctx->stop);
    else
        io_wait(ctx->io, &C->reqs[it->req]);
    tiers_unpin(&C->x, &it->t);
}

/* Lets go of what a chunk holds: its reads not needed any more (the batch
 * stopped) are taken back (io: the ring they went to; NULL when they are
 * all done, a remote source's excepted: those are taken back from the
 * source whatever io is, a batch read ahead never waited for them), then
 * the records pinned for them are unpinned. */
static void chunk_release(struct chunk *C, struct io_ring *io)
{
    const struct source *src = C->nreq ? dataset_source(C->x.ds) : NULL;
    int remote = src && source_remote(src);
    for (unsigned r = 0; (io || remote) && r < C->nreq; r++) {
        if (C->items[C->req_item[r]].where == TIERS_SOURCE)
            source_cancel(src, io, &C->reqs[r]);
        else if (io)
            io_cancel(io, &C->reqs[r]);
    }
    for (uint32_t i = 0; i < C->m; i++)
        tiers_unpin(&C->x, &C->items[i].t);
    C->nreq = 0;
    C->m = 0;
}

/* After a chunk: reads not needed (the batch stopped) are taken back, and
 * an arena grown past the chunk limit for one large file is given back. */
static void chunk_end(struct worker_ctx *ctx, struct pipe_local *L, struct chunk *C)
{
    chunk_release(C, ctx->io);
    /* (a chunk read ahead gives its arena back to its budget: not here) */
    if (C->arena_cap > PIPELINE_CHUNK_BYTES && (C == &L->ck[0] || C == &L->ck[1])) {
        arena_free(ctx->io, C->arena);
        C->arena = NULL;
        C->arena_cap = 0;
    }
    local_account(ctx, L);
}

/* A disk or cluster record that cannot be used (tiers_decode or
 * tiers_cluster_decode counted and logged it): recomputed from the source
 * and stored again (the new record supersedes it). */
static int disk_recover(struct pipeline *p, const struct tiers_ctx *x, struct item *it,
                        struct worker_ctx *ctx, struct img *view, const struct img **out,
                        char *err, size_t errlen)
{
    struct source_file f;
    int rc = dataset_read(x->ds, it->id, p->max_file_size, &ctx->scratch[0], &f, err, errlen);
    if (rc < 0)
        return rc;
    return compute(p, x, it, &ctx->scratch[0], &f, ctx, view, out, err, errlen);
}

/* The offline output of a gathered and read sample: *out is a memory
 * entry, a decoded record or a computed image (NULL for TIERS_SKIP), valid
 * until the next sample. Counts the disk tier's hits and misses when
 * `count` (streams; warm reads are not training reads). */
static int item_materialize(struct pipeline *p, const struct tiers_ctx *x, struct item *it,
                            struct pipe_local *L, struct chunk *C, struct worker_ctx *ctx,
                            int count, struct img *view, const struct img **out, char *err,
                            size_t errlen)
{
    const struct io_req *q = item_reads(it) ? &C->reqs[it->req] : NULL;
    switch (it->where) {
    case TIERS_MEMORY:
        *out = &it->bytes;
        return 0;
    case TIERS_SKIP:
        *out = NULL;
        return 0;
    case TIERS_CLUSTER:
        if (!it->t.rec || tiers_cluster_decode(x, it->id, &it->t, C->arena + it->off,
                                               &L->decoded, &it->bytes, view, out) < 0)
            return disk_recover(p, x, it, ctx, view, out, err, errlen);
        return 0;
    case TIERS_DISK:
        /* A raw record is used where it was read (it->bytes points into
         * the arena, valid until the chunk ends): no copy. */
        if (tiers_decode(x, it->id, &it->t, q->res, C->arena + it->off, &L->decoded,
                         &it->bytes, view, out, count) < 0)
            return disk_recover(p, x, it, ctx, view, out, err, errlen);
        return 0;
    default: /* TIERS_SOURCE */
        if (q->res < 0) {
            if (q->failed == IO_STEP_OPEN) /* -EXDEV: RESOLVE_BENEATH refused a link */
                dataset_open_error(x->ds, (int)q->res, err, errlen);
            else
                snprintf(err, errlen, "%s: %s", q->failed == IO_STEP_STAT ? "stat" : "read",
                         strerror((int)-q->res));
            return (int)q->res;
        }
        if (q->size > p->max_file_size) {
            snprintf(err, errlen, "file is %llu bytes, over the limit of %llu",
                     (unsigned long long)q->size, (unsigned long long)p->max_file_size);
            return -EFBIG;
        }
        it->f = (struct source_file){.fd = -1, .size = q->size, .mtime_ns = q->mtime_ns};
        if (q->size > it->len) { /* grew since indexing: read it whole now */
            int rc = dataset_read(x->ds, it->id, p->max_file_size, &ctx->scratch[0], &it->f,
                                  err, errlen);
            if (rc < 0)
                return rc;
            return compute(p, x, it, &ctx->scratch[0], &it->f, ctx, view, out, err, errlen);
        }
        /* A file that shrank since indexing: decode sees what is there.
         * With nothing offline, *out is this view: it lives in the item. */
        it->bytes = (struct img){.fmt = IMG_ENCODED, .data = C->arena + it->off,
                                 .len = (size_t)q->res, .cap = it->len, .borrowed = 1};
        return compute(p, x, it, &it->bytes, &it->f, ctx, view, out, err, errlen);
    }
}

/* ---- a raw disk record checked as it goes into its slot ---- */

/* What a batch's online part is, when a raw disk record's checksum can be
 * computed in the same pass that writes it into its slot: nothing online
 * (a copy), random_flip alone (a flip or a copy), else FUSE_NONE. */
enum fuse { FUSE_NONE, FUSE_COPY, FUSE_FLIP };

static enum fuse online_fuse(const struct config_dataset *cfg, const struct strategy *st)
{
    if (cfg->pad_max || st->split > cfg->nsteps)
        return FUSE_NONE;
    if (st->split == cfg->nsteps)
        return FUSE_COPY;
    if (st->split + 1 == cfg->nsteps && cfg->steps[st->split].kind == STEP_RANDOM_FLIP)
        return FUSE_FLIP;
    return FUSE_NONE;
}

/* disk_into_slot's answers besides a failed sample's -errno. */
#define DISK_IN_SLOT 1  /* the slot holds the sample: checked, flipped or copied */
#define DISK_NOT_FUSED 2 /* nothing done: item_materialize and run_online it */

/* A TIERS_DISK item whose online part is `fuse`, in one pass over its
 * record's bytes: the payload's CRC32C computed while it is flipped or
 * copied into slot (the decoded image's place: o->bytes), then compared.
 * A record that fails (counted and logged as tiers_decode's) has its slot
 * zeroed, never delivered: it is recomputed from the source (0, *out the
 * image for run_online, which overwrites the slot) or fails (-errno). A
 * compressed record, or a shape not the stream's: DISK_NOT_FUSED. */
static int disk_into_slot(struct pipeline *p, const struct tiers_ctx *x, struct item *it,
                          struct chunk *C, struct worker_ctx *ctx, enum fuse fuse,
                          uint64_t sample_seed, uint8_t *slot, int count, struct img *view,
                          const struct img **out, char *err, size_t errlen)
{
    const struct config_dataset *cfg = dataset_config(x->ds);
    const struct dataset_output *o = dataset_output(x->ds);
    const struct io_req *q = &C->reqs[it->req];
    uint32_t want;
    int rc = tiers_decode_unchecked(x, it->id, &it->t, q->res, C->arena + it->off, &it->bytes,
                                    &want, count);
    if (rc == -EAGAIN)
        return DISK_NOT_FUSED;
    if (rc < 0)
        return disk_recover(p, x, it, ctx, view, out, err, errlen);
    const struct img *im = &it->bytes;
    if (im->fmt != IMG_PIXELS || im->h != o->h || im->w != o->w || im->c != o->c ||
        im->len != o->bytes || (size_t)im->h * im->w * im->c != im->len ||
        (fuse == FUSE_FLIP && im->dtype != PROTO_DTYPE_U8))
        return DISK_NOT_FUSED; /* the steps' own checks and messages */
    int mirror = 0;
    uint64_t t0 = 0;
    if (fuse == FUSE_FLIP) {
        mirror = flip_mirrors(cfg, x->st->split, sample_seed);
        t0 = stats_now_ns();
    }
    uint32_t got = step_flip_copy_crc32c(0, mirror, im, slot);
    if (fuse == FUSE_FLIP) {
        stats_percpu_add(&p->counters, ctx->index, CNT_CALLS + STEP_RANDOM_FLIP, 1);
        stats_percpu_add(&p->counters, ctx->index, CNT_NS + STEP_RANDOM_FLIP,
                         stats_now_ns() - t0);
    }
    if (tiers_decode_checked(x, it->id, &it->t, got == want, im, view, out, count) < 0) {
        memset(slot, 0, o->bytes); /* a bad record's bytes never leave */
        return disk_recover(p, x, it, ctx, view, out, err, errlen);
    }
    return DISK_IN_SLOT;
}

/* Gathers the next chunk of ids[0..n) into C, from x's tiers, and queues
 * its reads on the worker's ring. Returns how many samples it took (at
 * least one). */
static uint32_t chunk_start(struct pipeline *p, const struct tiers_ctx *x, struct chunk *C,
                            const uint32_t *ids, uint32_t n, int warm, struct worker_ctx *ctx)
{
    size_t bytes;
    C->x = *x;
    C->m = chunk_gather(p, C, ids, n, warm, &bytes);
    chunk_prepare(C, ctx->io, bytes, ctx->io, NULL, NULL);
    return C->m;
}

/* chunk_start over samples [first, first + n) (warm). */
static uint32_t warm_start(struct pipeline *p, const struct tiers_ctx *x, struct chunk *C,
                           uint32_t first, uint32_t n, struct worker_ctx *ctx)
{
    uint32_t want = n < PIPELINE_CHUNK_SAMPLES ? n : PIPELINE_CHUNK_SAMPLES;
    for (uint32_t i = 0; i < want; i++)
        C->ids[i] = first + i;
    return chunk_start(p, x, C, C->ids, want, 1, ctx);
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

size_t pipeline_ahead_arena(const struct pipeline_ahead *a)
{
    return a ? a->reserved : 0;
}

void pipeline_ahead_budget_init(struct pipeline_ahead_budget *b, uint64_t limit)
{
    memset(b, 0, sizeof(*b));
    b->limit = limit;
    pthread_mutex_init(&b->lock, NULL);
}

/* A dead arena's link and size, in its first bytes (every arena has at
 * least STORE_DIRECT_ALIGN). */
struct dead_arena {
    void *next;
    size_t cap;
};

/* Frees the arenas on b's dead list: the loop (the ring's owner), or no
 * ring any more. */
static void ahead_dead_free(struct pipeline_ahead_budget *b)
{
    pthread_mutex_lock(&b->lock);
    void *d = b->dead;
    b->dead = NULL;
    pthread_mutex_unlock(&b->lock);
    while (d) {
        struct dead_arena h;
        memcpy(&h, d, sizeof(h));
        arena_free(b->reg, d);
        pthread_mutex_lock(&b->lock); /* used and kept change together */
        __atomic_fetch_sub(&b->kept, h.cap, __ATOMIC_RELAXED);
        __atomic_fetch_sub(&b->used, h.cap, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&b->lock);
        d = h.next;
    }
}

void pipeline_ahead_budget_register(struct pipeline_ahead_budget *b, struct io_ring *io)
{
    if (!io)
        ahead_dead_free(b); /* unregistered while the ring is there */
    pthread_mutex_lock(&b->lock); /* ahead_arena_put reads it on the workers */
    b->reg = io;
    pthread_mutex_unlock(&b->lock);
}

void pipeline_ahead_budget_release(struct pipeline_ahead_budget *b)
{
    pipeline_ahead_budget_register(b, NULL);
    pthread_mutex_lock(&b->lock);
    while (b->nkept > 0) {
        b->nkept--;
        free(b->kept_arena[b->nkept]);
        __atomic_fetch_sub(&b->kept, b->kept_cap[b->nkept], __ATOMIC_RELAXED);
        __atomic_fetch_sub(&b->used, b->kept_cap[b->nkept], __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&b->lock);
    pthread_mutex_destroy(&b->lock);
}

void pipeline_ahead_budget_use(const struct pipeline_ahead_budget *b, uint64_t *armed,
                               uint64_t *kept)
{
    pthread_mutex_t *lock = (pthread_mutex_t *)&b->lock; /* a reader's lock */
    pthread_mutex_lock(lock); /* used and kept change together under it */
    *kept = __atomic_load_n(&b->kept, __ATOMIC_RELAXED);
    *armed = __atomic_load_n(&b->used, __ATOMIC_RELAXED) - *kept;
    pthread_mutex_unlock(lock);
}

/* Gives a (not armed, no arena) an arena of at least bytes, at most room,
 * under budget b: the smallest kept one large enough, else a new one where
 * the budget has room (kept ones freed to make it). 0, -EDQUOT (bytes are
 * over room), -ENOBUFS (the budget is in use) or -ENOMEM. */
static int ahead_arena_get(struct pipeline_ahead_budget *b, struct pipeline_ahead *a,
                           size_t bytes, uint64_t room)
{
    struct chunk *C = &a->ck;
    void *spare[PIPELINE_AHEAD_KEEP];
    unsigned nspare = 0, best = UINT32_MAX;
    /* whole grains (kept ones then fit the next chunk) where the uid's room
     * allows, else only the O_DIRECT alignment: a small budget still reads
     * ahead */
    size_t grain = align_up(bytes, ARENA_GRAIN);
    bytes = grain <= room ? grain : align_up(bytes, STORE_DIRECT_ALIGN);
    if (bytes > room)
        return -EDQUOT;
    ahead_dead_free(b);
    pthread_mutex_lock(&b->lock);
    for (unsigned i = 0; i < b->nkept; i++)
        if (b->kept_cap[i] >= bytes && b->kept_cap[i] <= room &&
            (best == UINT32_MAX || b->kept_cap[i] < b->kept_cap[best]))
            best = i;
    if (best != UINT32_MAX) {
        C->arena = b->kept_arena[best];
        C->arena_cap = b->kept_cap[best];
        __atomic_fetch_sub(&b->kept, C->arena_cap, __ATOMIC_RELAXED);
        b->nkept--;
        b->kept_arena[best] = b->kept_arena[b->nkept];
        b->kept_cap[best] = b->kept_cap[b->nkept];
        pthread_mutex_unlock(&b->lock);
        a->budget = b;
        a->reserved = C->arena_cap;
        return 0;
    }
    uint64_t used = __atomic_load_n(&b->used, __ATOMIC_RELAXED);
    while (b->nkept > 0 && used + bytes > b->limit) { /* too small: make room */
        b->nkept--;
        spare[nspare++] = b->kept_arena[b->nkept];
        used -= b->kept_cap[b->nkept];
        __atomic_fetch_sub(&b->kept, b->kept_cap[b->nkept], __ATOMIC_RELAXED);
    }
    int fits = used + bytes <= b->limit;
    __atomic_store_n(&b->used, fits ? used + bytes : used, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&b->lock);
    while (nspare > 0)
        arena_free(b->reg, spare[--nspare]);
    if (!fits)
        return -ENOBUFS;
    if (chunk_arena(C, bytes, bytes, NULL) < 0) { /* C has none */
        __atomic_fetch_sub(&b->used, bytes, __ATOMIC_RELAXED);
        return -ENOMEM;
    }
    a->budget = b;
    a->reserved = bytes;
    return 0;
}

/* Gives a's arena back to its budget: kept for the next chunk where there
 * is room, else freed. */
static void ahead_arena_put(struct pipeline_ahead *a)
{
    struct pipeline_ahead_budget *b = a->budget;
    struct chunk *C = &a->ck;
    void *arena = C->arena;
    C->arena = NULL;
    C->arena_cap = 0;
    if (!b) {
        free(arena);
        return;
    }
    pthread_mutex_lock(&b->lock);
    if (arena && b->nkept < PIPELINE_AHEAD_KEEP && a->reserved <= PIPELINE_CHUNK_BYTES) {
        b->kept_arena[b->nkept] = arena;
        b->kept_cap[b->nkept++] = a->reserved;
        __atomic_fetch_add(&b->kept, a->reserved, __ATOMIC_RELAXED);
        arena = NULL;
    } else if (arena && b->reg) { /* maybe registered: the loop frees it */
        struct dead_arena h = {.next = b->dead, .cap = a->reserved};
        memcpy(arena, &h, sizeof(h));
        b->dead = arena;
        __atomic_fetch_add(&b->kept, a->reserved, __ATOMIC_RELAXED); /* held, not armed */
        arena = NULL;
    } else {
        __atomic_fetch_sub(&b->used, a->reserved, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&b->lock);
    free(arena);
    a->budget = NULL;
    a->reserved = 0;
}

void pipeline_ahead_drop(struct pipeline_ahead *a)
{
    if (!a)
        return;
    chunk_release(&a->ck, NULL); /* its reads are done */
    ahead_arena_put(a);
    strategy_put(a->st);
    a->st = NULL;
}

void pipeline_ahead_free(struct pipeline_ahead *a)
{
    pipeline_ahead_drop(a);
    free(a);
}

static void ahead_read_done(struct io_req *q)
{
    struct pipeline_ahead *a = q->arg;
    if (--a->pending == 0)
        a->ready(a->ready_arg);
}

int pipeline_ahead_start(struct pipeline *p, struct dataset *ds, const uint32_t *ids,
                         uint32_t n, struct pipeline_ahead *a, struct io_ring *io,
                         struct pipeline_ahead_budget *budget, uint64_t room,
                         void (*ready)(void *arg), void *arg)
{
    size_t bytes;
    uint32_t reads = 0, remote = 0;
    if (n == 0)
        return 0;
    a->st = dataset_strategy(ds);
    tiers_begin(p->tiers, ds, a->st, UINT32_MAX, &a->ck.x); /* the loop counts nothing */
    a->ck.m = chunk_gather(p, &a->ck, ids, n, 0, &bytes);
    for (uint32_t i = 0; i < a->ck.m; i++) {
        reads += item_reads(&a->ck.items[i]);
        /* The cluster tier is looked up by the worker, before the source.
         * A remote source's reads are started here (its own thread runs
         * them, the loop pays one hand-over): the batch's GETs are in
         * flight while the batches before it decode, so a stream's
         * prefetched batches keep hundreds of requests out and the worker
         * that takes the batch waits for each (source_wait), never the
         * loop. A buffered disk record is left to the worker: io_uring
         * runs a buffered read's copy out of the page cache on the thread
         * that submitted it, so read ahead here the loop would pay every
         * copy; an O_DIRECT record (DMA into the arena) costs the loop
         * nothing. */
        const struct item *it = &a->ck.items[i];
        int buffered = it->where == TIERS_DISK && it->t.align == 1;
        if (buffered || (it->where == TIERS_SOURCE && tiers_cluster_on(&a->ck.x))) {
            pipeline_ahead_drop(a);
            return buffered ? -EAGAIN : 0;
        }
        if (it->where == TIERS_SOURCE && source_remote(dataset_source(ds)))
            remote++;
    }
    int rc = reads == 0 ? 0 : ahead_arena_get(budget, a, bytes, room); /* every read is made */
    if (reads == 0 || rc < 0) {
        pipeline_ahead_drop(a);
        return rc;
    }
    a->ds = ds;
    a->ready = ready;
    a->ready_arg = arg;
    a->pending = 1 + reads - remote; /* a remote read calls no on_done */
    chunk_prepare(&a->ck, io, bytes, budget->reg == io ? io : NULL, ahead_read_done, a);
    return --a->pending == 0 ? 2 : 1; /* 2: every read ended at once (deferred), or remote */
}

/*
 * Worker: takes over a batch's chunk read ahead as C, when it was gathered
 * under the strategy this batch runs (x->st) and its memory entries are all
 * still there (a DROP_CACHE in between drops them). Reads the event loop
 * left (IO_DEFERRED) are queued on the worker's ring. 0 when it cannot be
 * used (then it is dropped).
 */
static int ahead_take(const struct tiers_ctx *x, struct pipeline_ahead *a, const uint32_t *ids,
                      uint32_t n, struct worker_ctx *ctx)
{
    struct chunk *C = &a->ck;
    int ok = a->ds == x->ds && a->st == x->st && C->m <= n;
    for (uint32_t i = 0; ok && i < C->m; i++) {
        struct item *it = &C->items[i];
        ok = it->id == ids[i];
        if (ok && it->where == TIERS_MEMORY)
            ok = tiers_still_in_memory(x, it->id, &it->t, &it->bytes);
    }
    if (!ok) {
        pipeline_ahead_drop(a);
        return 0;
    }
    C->x.thread = x->thread;
    int remote = C->nreq && source_remote(dataset_source(C->x.ds));
    for (unsigned r = 0; r < C->nreq; r++) {
        struct io_req *q = &C->reqs[r];
        if (remote && C->items[C->req_item[r]].where == TIERS_SOURCE)
            continue; /* its source's thread finishes it (source_wait): not ours to look at */
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

uint32_t pipeline_batch(struct pipeline *p, struct dataset *ds, const uint32_t *ids,
                        uint32_t n, uint64_t seed, uint64_t epoch, uint8_t *dst,
                        int64_t *labels, struct worker_ctx *ctx, struct pipeline_ahead *pre,
                        pipeline_bad_fn bad, void *arg)
{
    return pipeline_batch_padded(p, ds, ids, n, seed, epoch, dst, labels, NULL, ctx, pre,
                                 bad, arg);
}

uint32_t pipeline_batch_padded(struct pipeline *p, struct dataset *ds, const uint32_t *ids,
                               uint32_t n, uint64_t seed, uint64_t epoch, uint8_t *dst,
                               int64_t *labels, int64_t *lengths, struct worker_ctx *ctx,
                               struct pipeline_ahead *pre, pipeline_bad_fn bad, void *arg)
{
    struct pipe_local *L = local_get(ctx);
    const struct strategy *st = dataset_strategy(ds); /* for the whole batch */
    size_t sample_bytes = dataset_output(ds)->bytes;
    enum fuse fuse = online_fuse(dataset_config(ds), st);
    struct chunk *C = NULL;
    struct tiers_ctx x;
    char err[512];
    uint32_t k = 0, done = 0, ahead = 0;
    int stop = 0;
    int deferrable = region_deferrable(dataset_config(ds), st);

    tiers_begin(p->tiers, ds, st, ctx->index, &x);
    if (!L) {
        pipeline_ahead_drop(pre);
    } else if (pipeline_ahead_armed(pre) && ahead_take(&x, pre, ids, n, ctx)) {
        C = &pre->ck;
        ahead = C->m;
    } else {
        C = &L->ck[0];
        ahead = chunk_start(p, &x, C, ids, n, 0, ctx);
    }
    while (done < n && !stop) {
        uint32_t m = 1;
        struct chunk *next = NULL;
        if (L) {
            /* The next chunk's reads go out behind this one's. */
            m = C->m;
            next = chunk_other(L, C);
            if (ahead < n)
                ahead += chunk_start(p, &x, next, ids + ahead, n - ahead, 0, ctx);
        }
        for (uint32_t i = 0; i < m && !stop; i++) {
            uint32_t id = ids[done + i];
            struct img view;
            const struct img *im = NULL;
            uint32_t from = st->split;
            int f;
            if (!L) {
                snprintf(err, sizeof(err), "no memory for the pipeline's buffers");
                f = -ENOMEM;
            } else {
                struct item *it = &C->items[i];
                chunk_need(ctx, C, it);
                tiers_count(&x, it->where);
                /* A miss no tier would store: decoded for its crop alone. */
                it->region = deferrable && it->where == TIERS_SOURCE && tiers_refuses(&x, id);
                f = DISK_NOT_FUSED;
                if (it->where == TIERS_DISK && fuse != FUSE_NONE)
                    f = disk_into_slot(p, &x, it, C, ctx, fuse,
                                       hash_sample_seed(seed, epoch, id),
                                       dst + (size_t)k * sample_bytes, 1, &view, &im, err,
                                       sizeof(err));
                if (f == DISK_NOT_FUSED)
                    f = item_materialize(p, &x, it, L, C, ctx, 1, &view, &im, err,
                                         sizeof(err));
                if (it->region) {
                    from--;
                    dataset_count(ds, DATASET_region_unstored, 1);
                }
                it->region = 0;
            }
            ctx->step.name = dataset_path(ds, id);
            int64_t len = 0;
            if (f == DISK_IN_SLOT)
                f = 0;
            else if (f == 0)
                f = run_online(p, ds, from, im, hash_sample_seed(seed, epoch, id),
                               dst + (size_t)k * sample_bytes, &len, ctx, err, sizeof(err));
            if (f == 0) {
                if (lengths)
                    lengths[k] = len;
                labels[k++] = dataset_label(ds, id);
                continue;
            }
            if (f == -ECANCELED && ctx->stop && __atomic_load_n(ctx->stop, __ATOMIC_ACQUIRE)) {
                stop = 1; /* its stream went away: not a bad sample */
                continue;
            }
            fault_report(p, ctx, ds, id, f, err);
            stop = bad(arg, done + i, f, err);
        }
        done += m;
        if (L) {
            chunk_end(ctx, L, C);
            if (pre && C == &pre->ck)
                pipeline_ahead_drop(pre); /* its arena, budget and strategy back */
            C = next;
        }
    }
    if (L && C) /* stopped early: the reads ahead are not needed */
        chunk_end(ctx, L, C);
    if (pre && C == &pre->ck)
        pipeline_ahead_drop(pre);
    strategy_put(st);
    return k;
}

void pipeline_warm(struct pipeline *p, struct dataset *ds, uint32_t first, uint32_t n,
                   struct worker_ctx *ctx, struct pipeline_warm_result *res)
{
    struct pipe_local *L = local_get(ctx);
    struct tiers_ctx x;
    char err[512];

    if (!L) {
        res->done += n;
        res->failed += n;
        log_error("dataset '%s': warm: no memory for the pipeline's buffers", dataset_name(ds));
        return;
    }
    const struct strategy *st = dataset_strategy(ds);
    tiers_begin(p->tiers, ds, st, ctx->index, &x);
    struct chunk *C = &L->ck[0], *next = &L->ck[1];
    uint32_t ahead = warm_start(p, &x, C, first, n, ctx);
    while (n > 0) {
        uint32_t m = C->m;
        if (ahead < n)
            ahead += warm_start(p, &x, next, first + ahead, n - ahead, ctx);
        for (uint32_t i = 0; i < m; i++) {
            struct item *it = &C->items[i];
            chunk_need(ctx, C, it);
            struct img view;
            const struct img *im = NULL;
            int f = item_materialize(p, &x, it, L, C, ctx, 0, &view, &im, err, sizeof(err));
            res->done++;
            if (f < 0) {
                res->failed++;
                fault_report(p, ctx, ds, it->id, f, err);
            } else {
                res->bytes += im ? im->len : it->len;
                res->computed += it->computed;
            }
        }
        chunk_end(ctx, L, C);
        struct chunk *t = C;
        C = next;
        next = t;
        first += m;
        n -= m;
        ahead -= m;
    }
    strategy_put(st);
}

/* ---- batch-level steps ---- */

int pipeline_batch_steps(const struct dataset *ds, uint64_t seed, uint8_t *data, uint32_t n,
                         const int64_t *labels, float *targets)
{
    const struct config_dataset *dc = dataset_config(ds);
    const struct dataset_output *o = dataset_output(ds);
    uint32_t k = o->labels.classes;
    struct mix_params mp = {0, 0, 1.0, 0.5};
    for (uint32_t i = 0; i < dc->nbatch_steps; i++) {
        const struct step *s = &dc->batch_steps[i];
        *(s->kind == STEP_MIXUP ? &mp.mixup_alpha : &mp.cutmix_alpha) = s->alpha;
        mp.p = s->p; /* the same on both (step_chain_init) */
        mp.switch_p = s->switch_p;
    }
    int rc = mix_one_hot(labels, n, k, targets);
    struct mix_decision d;
    mix_draw(&mp, &seed, o->h, o->w, &d);
    if (d.kind == MIX_NONE || n == 0)
        return rc;
    size_t len = (size_t)o->h * o->w * o->c;
    float *scratch = malloc((len + k) * sizeof(float));
    if (!scratch)
        return -ENOMEM;
    mix_apply(&d, (float *)(void *)data, n, o->h, o->w, o->c, o->layout == STEP_LAYOUT_NCHW,
              targets, k, scratch);
    free(scratch);
    return rc;
}

/* ---- padded batches (batch: {pad: longest}) ---- */

uint32_t pipeline_pad_relay(uint8_t *data, uint32_t n, size_t rows, uint32_t max_length,
                            size_t elem, const int64_t *lengths)
{
    uint32_t t = 1;
    for (uint32_t i = 0; i < n; i++)
        if (lengths[i] > (int64_t)t)
            t = (uint32_t)lengths[i];
    if (t > max_length)
        t = max_length;
    /* Row r moves from r * max_length to r * t elements: never later, so in
     * ascending order no row is overwritten before it moved. */
    for (size_t r = 1; t < max_length && r < (size_t)n * rows; r++)
        memmove(data + r * t * elem, data + r * max_length * elem, t * elem);
    return t;
}
