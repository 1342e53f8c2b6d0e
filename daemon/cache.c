/* Memory tier: see cache.h. */
#include "cache.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Entries are never freed one by one, so they are carved from large
 * anonymous mappings (slabs) with transparent huge pages: one page fault
 * per 2 MiB instead of one per 4 KiB, and no malloc bookkeeping. */
#define CACHE_SLAB_SIZE (64ull << 20)
#define CACHE_ALIGN 64

struct cache_slab {
    struct cache_slab *next;
    size_t size, used;
};

struct cache_slots {
    struct cache_entry **slot; /* atomic pointers */
    uint32_t n;
};

struct cache {
    uint64_t budget;
    uint64_t bytes;    /* atomic: entries plus the slot arrays */
    uint64_t entries;  /* atomic */
    uint64_t rejected; /* atomic */
    struct cache_slots *ds;
    uint32_t ndatasets;
    pthread_mutex_t slab_lock; /* leaf lock: guards slabs */
    struct cache_slab *slabs;  /* the first has room */
};

/* Bump allocation from the current slab; a new slab when it is full. */
static void *cache_alloc(struct cache *c, size_t need)
{
    void *p = NULL;
    need = (need + CACHE_ALIGN - 1) & ~(size_t)(CACHE_ALIGN - 1);
    pthread_mutex_lock(&c->slab_lock);
    struct cache_slab *sl = c->slabs;
    if (!sl || sl->size - sl->used < need) {
        size_t size = need + CACHE_ALIGN > CACHE_SLAB_SIZE ? need + CACHE_ALIGN : CACHE_SLAB_SIZE;
        void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            goto out;
        madvise(m, size, MADV_HUGEPAGE); /* a hint: fine if refused */
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

int cache_create(struct cache **out, uint64_t budget, const uint32_t *nsamples,
                 uint32_t ndatasets)
{
    struct cache *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->budget = budget;
    c->ndatasets = ndatasets;
    pthread_mutex_init(&c->slab_lock, NULL);
    c->ds = calloc(ndatasets ? ndatasets : 1, sizeof(*c->ds));
    if (!c->ds) {
        free(c);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < ndatasets; i++) {
        c->ds[i].n = nsamples[i];
        c->ds[i].slot = calloc(nsamples[i] ? nsamples[i] : 1, sizeof(*c->ds[i].slot));
        if (!c->ds[i].slot) {
            cache_destroy(c);
            return -ENOMEM;
        }
        c->bytes += (uint64_t)nsamples[i] * sizeof(*c->ds[i].slot);
    }
    *out = c;
    return 0;
}

void cache_destroy(struct cache *c)
{
    if (!c)
        return;
    for (uint32_t i = 0; i < c->ndatasets; i++)
        free(c->ds[i].slot);
    for (struct cache_slab *sl = c->slabs, *next; sl; sl = next) {
        next = sl->next;
        munmap(sl, sl->size);
    }
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

const struct cache_entry *cache_put(struct cache *c, uint32_t dataset,
                                    uint64_t fingerprint, uint32_t sample,
                                    const struct img *im)
{
    struct cache_entry **slot = cache_slot(c, dataset, sample);
    if (!slot || im->fmt != IMG_PIXELS)
        return NULL;
    uint64_t need = (sizeof(struct cache_entry) + im->len + CACHE_ALIGN - 1) &
                    ~(uint64_t)(CACHE_ALIGN - 1);
    /* Reserve budget first, so concurrent writers never overshoot it. */
    uint64_t cur = __atomic_load_n(&c->bytes, __ATOMIC_RELAXED);
    do {
        if (cur + need > c->budget) {
            __atomic_fetch_add(&c->rejected, 1, __ATOMIC_RELAXED);
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
    e->len = im->len;
    memcpy(e->data, im->data, im->len);

    struct cache_entry *expected = NULL;
    if (!__atomic_compare_exchange_n(slot, &expected, e, 0, __ATOMIC_RELEASE,
                                     __ATOMIC_ACQUIRE)) {
        /* Someone published first: keep theirs. Ours stays allocated (slabs
         * are not freed piecemeal) and stays counted. */
        return expected->fingerprint == fingerprint ? expected : NULL;
    }
    __atomic_fetch_add(&c->entries, 1, __ATOMIC_RELAXED);
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
    im->data = (uint8_t *)e->data;
    im->len = e->len;
}

void cache_get_stats(struct cache *c, struct cache_stats *st)
{
    st->budget = c->budget;
    st->bytes = __atomic_load_n(&c->bytes, __ATOMIC_RELAXED);
    st->entries = __atomic_load_n(&c->entries, __ATOMIC_RELAXED);
    st->rejected = __atomic_load_n(&c->rejected, __ATOMIC_RELAXED);
}
