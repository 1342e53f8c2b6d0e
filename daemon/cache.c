/* Memory tier: see cache.h. */
#include "cache.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "hash.h"

/* Entries are never freed one by one, so they are carved from large
 * anonymous mappings (slabs): no malloc bookkeeping, and only the pages
 * entries are written to become resident. Not MADV_HUGEPAGE: zeroing
 * 2 MiB pages on first touch stalled the cold epoch (848 against
 * 1,063-1,103 samples/s). */
#define CACHE_SLAB_SIZE (64ull << 20)
#define CACHE_ALIGN 64
/* A partly admitted dataset takes this much of its fraction, so that the
 * spread of a hash-chosen subset rarely meets the hard budget. */
#define CACHE_ADMIT_MARGIN 0.98

struct cache_slab {
    struct cache_slab *next;
    size_t size, used;
};

struct cache_ds {
    struct cache_entry **slot; /* atomic pointers */
    uint32_t n;
    uint64_t entry_bytes;      /* atomic; 0 until known */
    uint64_t threshold;        /* atomic: admit a sample whose hash is <= this */
    uint64_t entries, bytes;   /* atomic */
    uint64_t rejected, not_admitted; /* atomic */
};

struct cache {
    uint64_t budget;
    uint64_t bytes;       /* atomic: entries plus the slot arrays */
    uint64_t index_bytes; /* the slot arrays; fixed */
    uint64_t entries;     /* atomic */
    struct cache_ds *ds;
    uint32_t ndatasets;
    pthread_mutex_t plan_lock; /* serializes cache_plan; a leaf */
    pthread_mutex_t slab_lock; /* leaf lock: guards slabs */
    struct cache_slab *slabs;  /* the first has room */
};

#define LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define ADD(p, v) __atomic_fetch_add((p), (v), __ATOMIC_RELAXED)

/* Budget bytes an entry of len image bytes takes. */
static uint64_t entry_need(uint64_t len)
{
    return (sizeof(struct cache_entry) + len + CACHE_ALIGN - 1) & ~(uint64_t)(CACHE_ALIGN - 1);
}

static uint64_t sample_hash(uint32_t dataset, uint32_t sample)
{
    return hash_mix64((((uint64_t)dataset << 32) | sample) + 0x9e3779b97f4a7c15ull);
}

static uint64_t fraction_threshold(double f)
{
    double t = f * CACHE_ADMIT_MARGIN * 18446744073709551616.0; /* 2^64 */
    return t >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)t;
}

struct plan_item {
    uint64_t need;
    uint32_t i;
};

static int plan_cmp(const void *a, const void *b)
{
    const struct plan_item *x = a, *y = b;
    if (x->need != y->need)
        return x->need < y->need ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

/*
 * Shares the budget out by water-filling: the smallest dataset not yet
 * served gets all it needs when that is within an equal share of what is
 * left, else every dataset left gets that equal share as a fraction of
 * its size. Datasets of unknown entry size take nothing and admit
 * everything until their size is known (then this runs again). Sorted by
 * need first: O(n log n) (200,000 datasets start in seconds).
 */
static void cache_plan(struct cache *c)
{
    pthread_mutex_lock(&c->plan_lock);
    uint64_t left = c->budget > c->index_bytes ? c->budget - c->index_bytes : 0;
    uint32_t nleft = 0;
    struct plan_item *v = malloc((c->ndatasets ? c->ndatasets : 1) * sizeof(*v));
    for (uint32_t i = 0; i < c->ndatasets; i++) {
        uint64_t eb = LOAD(&c->ds[i].entry_bytes);
        if (eb == 0 || !v)
            __atomic_store_n(&c->ds[i].threshold, UINT64_MAX, __ATOMIC_RELAXED);
        else
            v[nleft++] = (struct plan_item){c->ds[i].n * entry_need(eb), i};
    }
    /* No memory to plan (v NULL): first-come admission, still in budget. */
    if (nleft)
        qsort(v, nleft, sizeof(*v), plan_cmp);
    for (uint32_t k = 0; k < nleft; k++) {
        uint64_t share = left / (nleft - k);
        if (v[k].need <= share) {
            __atomic_store_n(&c->ds[v[k].i].threshold, UINT64_MAX, __ATOMIC_RELAXED);
            left -= v[k].need;
            continue;
        }
        /* Every dataset left is larger than an equal share. */
        for (; k < nleft; k++)
            __atomic_store_n(&c->ds[v[k].i].threshold,
                             fraction_threshold((double)share / (double)v[k].need),
                             __ATOMIC_RELAXED);
    }
    free(v);
    pthread_mutex_unlock(&c->plan_lock);
}

/* Bump allocation from the current slab; a new slab when it is full. */
static void *cache_alloc(struct cache *c, size_t need)
{
    void *p = NULL;
    pthread_mutex_lock(&c->slab_lock);
    struct cache_slab *sl = c->slabs;
    if (!sl || sl->size - sl->used < need) {
        size_t size = need + CACHE_ALIGN > CACHE_SLAB_SIZE ? need + CACHE_ALIGN : CACHE_SLAB_SIZE;
        void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            goto out;
        sl = m;
        sl->next = c->slabs;
        sl->size = size;
        sl->used = CACHE_ALIGN; /* the header */
        c->slabs = sl;
    }
    p = (char *)sl + sl->used;
    sl->used += need;
out:
    pthread_mutex_unlock(&c->slab_lock);
    return p;
}

int cache_create(struct cache **out, uint64_t budget, const struct cache_dataset *ds,
                 uint32_t ndatasets)
{
    struct cache *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->budget = budget;
    c->ndatasets = ndatasets;
    pthread_mutex_init(&c->plan_lock, NULL);
    pthread_mutex_init(&c->slab_lock, NULL);
    c->ds = calloc(ndatasets ? ndatasets : 1, sizeof(*c->ds));
    if (!c->ds) {
        cache_destroy(c);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < ndatasets; i++) {
        struct cache_ds *d = &c->ds[i];
        d->n = ds[i].nsamples;
        d->entry_bytes = ds[i].entry_bytes;
        d->slot = calloc(d->n ? d->n : 1, sizeof(*d->slot));
        if (!d->slot) {
            cache_destroy(c);
            return -ENOMEM;
        }
        c->index_bytes += (uint64_t)d->n * sizeof(*d->slot);
    }
    c->bytes = c->index_bytes;
    cache_plan(c);
    *out = c;
    return 0;
}

void cache_destroy(struct cache *c)
{
    if (!c)
        return;
    for (uint32_t i = 0; c->ds && i < c->ndatasets; i++)
        free(c->ds[i].slot);
    for (struct cache_slab *sl = c->slabs, *next; sl; sl = next) {
        next = sl->next;
        munmap(sl, sl->size);
    }
    pthread_mutex_destroy(&c->plan_lock);
    pthread_mutex_destroy(&c->slab_lock);
    free(c->ds);
    free(c);
}

static struct cache_entry **cache_slot(struct cache *c, uint32_t dataset, uint32_t sample)
{
    if (dataset >= c->ndatasets || sample >= c->ds[dataset].n)
        return NULL;
    return &c->ds[dataset].slot[sample];
}

const struct cache_entry *cache_get(struct cache *c, uint32_t dataset,
                                    uint64_t fingerprint, uint32_t sample)
{
    struct cache_entry **slot = cache_slot(c, dataset, sample);
    if (!slot)
        return NULL;
    struct cache_entry *e = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    return e && e->fingerprint == fingerprint ? e : NULL;
}

static int in_subset(struct cache *c, uint32_t dataset, uint32_t sample)
{
    uint64_t thr = LOAD(&c->ds[dataset].threshold);
    return thr == UINT64_MAX || sample_hash(dataset, sample) <= thr;
}

int cache_admits(struct cache *c, uint32_t dataset, uint32_t sample, size_t len)
{
    struct cache_entry **slot = cache_slot(c, dataset, sample);
    return slot && !__atomic_load_n(slot, __ATOMIC_ACQUIRE) && in_subset(c, dataset, sample) &&
           LOAD(&c->bytes) + entry_need(len) <= c->budget;
}

const struct cache_entry *cache_put(struct cache *c, uint32_t dataset,
                                    uint64_t fingerprint, uint32_t sample,
                                    const struct img *im)
{
    struct cache_entry **slot = cache_slot(c, dataset, sample);
    if (!slot || im->fmt != IMG_PIXELS)
        return NULL;
    struct cache_ds *d = &c->ds[dataset];
    struct cache_entry *resident = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (resident) /* resident already: nothing to reserve */
        return resident->fingerprint == fingerprint ? resident : NULL;
    uint64_t unknown = 0;
    if (LOAD(&d->entry_bytes) == 0 &&
        __atomic_compare_exchange_n(&d->entry_bytes, &unknown, im->len, 0, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED))
        cache_plan(c); /* once per dataset of variable shape */
    if (!in_subset(c, dataset, sample)) {
        ADD(&d->not_admitted, 1);
        return NULL;
    }
    uint64_t need = entry_need(im->len);
    /* Reserve budget first, so concurrent writers never overshoot it. */
    uint64_t cur = LOAD(&c->bytes);
    do {
        if (cur + need > c->budget) {
            ADD(&d->rejected, 1);
            return NULL;
        }
    } while (!__atomic_compare_exchange_n(&c->bytes, &cur, cur + need, 1,
                                          __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    struct cache_entry *e = cache_alloc(c, need);
    if (!e) {
        __atomic_fetch_sub(&c->bytes, need, __ATOMIC_RELAXED);
        return NULL;
    }
    e->fingerprint = fingerprint;
    e->dataset = dataset;
    e->sample = sample;
    e->h = im->h;
    e->w = im->w;
    e->c = im->c;
    e->dtype = im->dtype;
    e->rate = im->rate;
    e->len = im->len;
    memcpy(e->data, im->data, im->len);

    struct cache_entry *expected = NULL;
    if (!__atomic_compare_exchange_n(slot, &expected, e, 0, __ATOMIC_RELEASE,
                                     __ATOMIC_ACQUIRE)) {
        /* Someone published first, between the check above and here: keep
         * theirs. Ours stays allocated (slabs are not freed piecemeal) and
         * stays counted. */
        return expected->fingerprint == fingerprint ? expected : NULL;
    }
    ADD(&c->entries, 1);
    ADD(&d->entries, 1);
    ADD(&d->bytes, need);
    return e;
}

void cache_entry_img(const struct cache_entry *e, struct img *im)
{
    memset(im, 0, sizeof(*im));
    im->fmt = IMG_PIXELS;
    im->h = e->h;
    im->w = e->w;
    im->c = e->c;
    im->dtype = e->dtype;
    im->rate = e->rate;
    im->data = (uint8_t *)e->data;
    im->len = e->len;
}

void cache_get_stats(struct cache *c, struct cache_stats *st)
{
    memset(st, 0, sizeof(*st));
    st->budget = c->budget;
    st->bytes = LOAD(&c->bytes);
    st->index_bytes = c->index_bytes;
    st->entries = LOAD(&c->entries);
    for (uint32_t i = 0; i < c->ndatasets; i++) {
        st->rejected += LOAD(&c->ds[i].rejected);
        st->not_admitted += LOAD(&c->ds[i].not_admitted);
    }
}

int cache_add_dataset(struct cache *c, const struct cache_dataset *ds, uint32_t *id)
{
    struct cache_ds *arr = realloc(c->ds, (c->ndatasets + 1) * sizeof(*arr));
    if (!arr)
        return -ENOMEM;
    c->ds = arr;
    struct cache_ds *d = &arr[c->ndatasets];
    memset(d, 0, sizeof(*d));
    d->n = ds->nsamples;
    d->entry_bytes = ds->entry_bytes;
    if (!(d->slot = calloc(d->n ? d->n : 1, sizeof(*d->slot))))
        return -ENOMEM;
    c->index_bytes += (uint64_t)d->n * sizeof(*d->slot);
    c->bytes += (uint64_t)d->n * sizeof(*d->slot);
    *id = c->ndatasets++;
    cache_plan(c);
    return 0;
}

void cache_retire_dataset(struct cache *c, uint32_t id)
{
    if (id >= c->ndatasets)
        return;
    struct cache_ds *d = &c->ds[id];
    c->index_bytes -= (uint64_t)d->n * sizeof(*d->slot);
    c->bytes -= (uint64_t)d->n * sizeof(*d->slot);
    free(d->slot);
    d->slot = NULL;
    d->n = 0; /* lookups miss, puts are refused; the plan leaves it out */
    cache_plan(c);
}

void cache_set_budget(struct cache *c, uint64_t budget)
{
    c->budget = budget;
    cache_plan(c);
}

void cache_clear(struct cache *c, uint64_t *entries, uint64_t *bytes)
{
    *entries = c->entries;
    *bytes = c->bytes - c->index_bytes;
    for (struct cache_slab *sl = c->slabs, *next; sl; sl = next) {
        next = sl->next;
        munmap(sl, sl->size);
    }
    c->slabs = NULL;
    for (uint32_t i = 0; i < c->ndatasets; i++) {
        struct cache_ds *d = &c->ds[i];
        if (d->slot)
            memset(d->slot, 0, d->n * sizeof(*d->slot));
        d->entries = d->bytes = 0;
    }
    c->entries = 0;
    c->bytes = c->index_bytes;
}

void cache_get_dataset_stats(struct cache *c, uint32_t dataset,
                             struct cache_dataset_stats *st)
{
    memset(st, 0, sizeof(*st));
    if (dataset >= c->ndatasets)
        return;
    const struct cache_ds *d = &c->ds[dataset];
    st->entries = LOAD(&d->entries);
    st->bytes = LOAD(&d->bytes);
    st->rejected = LOAD(&d->rejected);
    st->not_admitted = LOAD(&d->not_admitted);
    st->entry_bytes = LOAD(&d->entry_bytes);
    uint64_t thr = LOAD(&d->threshold);
    st->fraction = thr == UINT64_MAX ? 1.0 : (double)thr / 18446744073709551616.0;
}
