/* Disk tier: see store.h. */
#define _GNU_SOURCE /* O_DIRECT, sync_file_range */
#include "store.h"

#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include "bytes.h"
#include "cachedir.h"
#include "hash.h"
#include "log.h"
#include "stats.h"
#include "proto.h"

#define STORE_SCAN_BUF (4u << 20)  /* read-ahead window of a segment scan */
#define STORE_BEHIND_WINDOW (8ull << 20) /* write_behind's window */
#define STORE_SWEEP_CHUNK 4096u    /* keys asked to is_live per lock hold */
#define STORE_ZPOOL_MAX 64u        /* idle zstd contexts kept */
#define STORE_NAME_MAX 32

_Static_assert(sizeof(struct store_key) == 40, "store_key must have no padding");

/* ---- records ---- */

struct store_hdr {
    uint8_t encoding;
    uint32_t data_crc;
    struct store_key key;
    uint32_t raw_len, stored_len;
    uint32_t h, w, c, dtype;
    uint32_t rate; /* img.rate: an audio clip's sample rate, else 0 */
};

static inline uint32_t rec_size(uint32_t stored_len)
{
    return (STORE_HEADER_SIZE + stored_len + STORE_ALIGN - 1) & ~(STORE_ALIGN - 1);
}

/* raw_len of an image of that shape, or 0 when the shape is not one. */
static uint64_t shape_bytes(uint32_t h, uint32_t w, uint32_t c, uint32_t dtype)
{
    return (uint64_t)h * w * c * proto_dtype_size(dtype);
}

static void hdr_encode(const struct store_hdr *h, uint8_t b[STORE_HEADER_SIZE])
{
    memset(b, 0, STORE_HEADER_SIZE);
    wr32(b + 0, STORE_MAGIC);
    wr16(b + 4, h->rate ? STORE_VERSION : 1); /* images: version 1, as they always were */
    b[6] = h->encoding;
    wr32(b + 12, h->data_crc);
    wr64(b + 16, h->key.dataset);
    wr64(b + 24, h->key.path);
    wr64(b + 32, h->key.fingerprint);
    wr64(b + 40, h->key.src_size);
    wr64(b + 48, (uint64_t)h->key.src_mtime_ns);
    wr32(b + 56, h->raw_len);
    wr32(b + 60, h->stored_len);
    wr32(b + 64, h->h);
    wr32(b + 68, h->w);
    wr32(b + 72, h->c);
    wr32(b + 76, h->dtype);
    wr32(b + 80, h->rate);
    wr32(b + 8, hash_crc32c(0, b, STORE_HEADER_SIZE));
}

/* Decodes and checks a header: 0, -EBADMSG, or -EPROTONOSUPPORT for a
 * sound header of a version after ours (a newer prestod's store). */
static int hdr_decode(const uint8_t b[STORE_HEADER_SIZE], struct store_hdr *h)
{
    uint8_t tmp[STORE_HEADER_SIZE];
    uint16_t version = rd16(b + 4);
    if (rd32(b) != STORE_MAGIC || version == 0)
        return -EBADMSG;
    memcpy(tmp, b, sizeof(tmp));
    memset(tmp + 8, 0, 4);
    if (hash_crc32c(0, tmp, sizeof(tmp)) != rd32(b + 8))
        return -EBADMSG;
    if (version > STORE_VERSION)
        return -EPROTONOSUPPORT;
    /* version 1 has no rate: its bytes 80..88 are reserved, 0 */
    if (b[6] > STORE_ENC_ZSTD || b[7] != 0 || rd32(b + 84) != 0 ||
        (version == 1 && rd32(b + 80) != 0))
        return -EBADMSG;
    h->encoding = b[6];
    h->data_crc = rd32(b + 12);
    h->key.dataset = rd64(b + 16);
    h->key.path = rd64(b + 24);
    h->key.fingerprint = rd64(b + 32);
    h->key.src_size = rd64(b + 40);
    h->key.src_mtime_ns = (int64_t)rd64(b + 48);
    h->raw_len = rd32(b + 56);
    h->stored_len = rd32(b + 60);
    h->h = rd32(b + 64);
    h->w = rd32(b + 68);
    h->c = rd32(b + 72);
    h->dtype = rd32(b + 76);
    h->rate = rd32(b + 80);
    if (h->raw_len == 0 || shape_bytes(h->h, h->w, h->c, h->dtype) != h->raw_len ||
        h->stored_len == 0 || h->stored_len > STORE_MAX_RECORD - STORE_HEADER_SIZE ||
        (h->encoding == STORE_ENC_RAW && h->stored_len != h->raw_len))
        return -EBADMSG;
    return 0;
}

static int key_eq(const struct store_key *a, const struct store_key *b)
{
    return memcmp(a, b, sizeof(*a)) == 0;
}

/* ---- the store ---- */

struct store_seg {
    uint32_t id;
    int fd;
    int dfd;          /* O_DIRECT, for reads (store_direct_io); -1: none */
    uint64_t size;    /* bytes reserved: the file's size once writes finish */
    uint64_t live;    /* bytes of indexed records */
    uint64_t dead;    /* bytes known dead */
    unsigned writers; /* writes in progress outside the lock */
    unsigned refs;    /* store_locs and compaction holding it */
    int sealed;       /* never appended to again */
    int deleted;      /* unlinked; freed when writers == refs == 0 */
    struct store_seg *next_zombie;
};

struct store_ent {
    struct store_key key;
    struct store_seg *seg;
    uint64_t off;
    uint32_t len, raw_len, stored_len;
    uint32_t h, w, c, dtype;
    uint8_t encoding;
};

struct store_zctx {
    ZSTD_CCtx *cctx;
    ZSTD_DCtx *dctx;
    uint8_t *buf;
    size_t cap;
    struct store_zctx *next;
};

/* Counters, updated and read with relaxed atomics. */
struct store_counters {
    uint64_t lookups, hits, decode_errors;
    uint64_t puts, put_budget, put_too_large, put_io, put_other;
    uint64_t recovered, dropped, torn_bytes;
    uint64_t compactions, compact_copied, compact_freed;
};

#define CNT(st, f, v) __atomic_fetch_add(&(st)->n.f, (v), __ATOMIC_RELAXED)

struct store {
    char *dir;
    int dirfd; /* holds the flock */
    uint64_t budget, segsize;
    pthread_mutex_t compact_lock, lock, zlock; /* in this order */

    /* Guarded by lock. The index: entries packed in ents[0..nent), found
     * through an open-addressing table of entry numbers + 1 (0: empty). */
    struct store_ent *ents;
    uint32_t nent, entcap;
    uint32_t *slots;
    uint32_t mask;
    struct store_seg **segs; /* by id; the active one last */
    uint32_t nsegs, segcap;
    struct store_seg *active; /* NULL: the next put creates one */
    struct store_seg *zombies; /* deleted, still pinned */
    uint64_t bytes_disk, bytes_raw, bytes_stored;
    uint32_t next_id;

    /* Guarded by zlock. */
    struct store_zctx *zfree;
    unsigned nzfree;

    int degraded; /* atomic */
    int direct;   /* store_direct_io: segments get an O_DIRECT fd */
    int behind;   /* atomic: written windows leave the page cache (write_behind) */
    struct store_counters n;
};

/* ---- degraded mode ---- */

static void store_degrade(struct store *st, int err, const char *what)
{
    int zero = 0;
    if (__atomic_compare_exchange_n(&st->degraded, &zero, err, 0, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED))
        log_error("store: %s: %s: %s; disk cache disabled, caching in memory only",
                  st->dir, what, strerror(err));
}

int store_degraded(const struct store *st)
{
    return __atomic_load_n(&st->degraded, __ATOMIC_RELAXED);
}

/* Errors that say nothing about the disk: no reason to give it up. */
static int transient_err(int err)
{
    return err == EMFILE || err == ENFILE || err == ENOMEM || err == EINTR;
}

/* ---- the index (under lock) ---- */

/* The in-memory index's hash of a key: its fields times XXH64's primes,
 * then MurmurHash3's finalizer. */
static uint64_t key_hash(const struct store_key *k)
{
    uint64_t h = k->path ^ k->dataset * 0x9E3779B185EBCA87ull ^
                 k->fingerprint * 0xC2B2AE3D27D4EB4Full ^ k->src_size * 0x165667B19E3779F9ull ^
                 (uint64_t)k->src_mtime_ns * 0x85EBCA77C2B2AE63ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

/* The slot holding key, or the empty slot where it would go. */
static uint32_t idx_slot(const struct store *st, const struct store_key *k)
{
    uint32_t i = (uint32_t)key_hash(k) & st->mask;
    while (st->slots[i] && !key_eq(&st->ents[st->slots[i] - 1].key, k))
        i = (i + 1) & st->mask;
    return i;
}

static struct store_ent *idx_get(const struct store *st, const struct store_key *k)
{
    if (!st->slots)
        return NULL;
    uint32_t s = idx_slot(st, k);
    return st->slots[s] ? &st->ents[st->slots[s] - 1] : NULL;
}

/* Makes room for one more entry; 0 or -ENOMEM. */
static int idx_reserve(struct store *st)
{
    if (st->nent == UINT32_MAX - 1)
        return -ENOMEM;
    if (st->nent == st->entcap) {
        uint32_t cap = st->entcap ? st->entcap * 2 : 1024;
        if (cap < st->entcap || cap > UINT32_MAX - 1)
            cap = UINT32_MAX - 1;
        struct store_ent *e = realloc(st->ents, (size_t)cap * sizeof(*e));
        if (!e)
            return -ENOMEM;
        st->ents = e;
        st->entcap = cap;
    }
    uint64_t nslots = st->slots ? (uint64_t)st->mask + 1 : 0;
    if ((uint64_t)(st->nent + 1) * 10 > nslots * 7) {
        uint64_t n = nslots ? nslots * 2 : 2048;
        if (n > (1ull << 32))
            return -ENOMEM;
        uint32_t *s = calloc(n, sizeof(*s));
        if (!s)
            return -ENOMEM;
        free(st->slots);
        st->slots = s;
        st->mask = (uint32_t)(n - 1);
        for (uint32_t i = 0; i < st->nent; i++)
            st->slots[idx_slot(st, &st->ents[i].key)] = i + 1;
    }
    return 0;
}

static struct store_ent *idx_add(struct store *st, const struct store_ent *e)
{
    if (idx_reserve(st) < 0)
        return NULL;
    uint32_t s = idx_slot(st, &e->key);
    st->ents[st->nent] = *e;
    st->slots[s] = ++st->nent;
    return &st->ents[st->nent - 1];
}

/* Removes e: backward-shift deletion in the table, then the last entry
 * moves into e's place. */
static void idx_del(struct store *st, struct store_ent *e)
{
    uint32_t pos = (uint32_t)(e - st->ents);
    uint32_t i = idx_slot(st, &e->key), j = i;
    for (;;) {
        j = (j + 1) & st->mask;
        if (!st->slots[j])
            break;
        uint32_t home = (uint32_t)key_hash(&st->ents[st->slots[j] - 1].key) & st->mask;
        int stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (!stays) {
            st->slots[i] = st->slots[j];
            i = j;
        }
    }
    st->slots[i] = 0;
    uint32_t last = --st->nent;
    if (pos != last) {
        st->ents[pos] = st->ents[last];
        st->slots[idx_slot(st, &st->ents[pos].key)] = pos + 1;
    }
}

static void ent_account(struct store *st, const struct store_ent *e, int add)
{
    if (add) {
        e->seg->live += e->len;
        st->bytes_raw += e->raw_len;
        st->bytes_stored += e->stored_len;
    } else {
        e->seg->live -= e->len;
        e->seg->dead += e->len;
        st->bytes_raw -= e->raw_len;
        st->bytes_stored -= e->stored_len;
    }
}

static void idx_forget(struct store *st, struct store_ent *e)
{
    ent_account(st, e, 0);
    idx_del(st, e);
}

/* Records later in the files win, as they do at recovery. */
static int ent_newer(const struct store_ent *a, const struct store_ent *b)
{
    return a->seg->id != b->seg->id ? a->seg->id > b->seg->id : a->off > b->off;
}

/* Makes e the entry of its key unless the indexed one is newer (e is then
 * dead on arrival). 0 or -ENOMEM. */
static int idx_publish(struct store *st, const struct store_ent *e)
{
    struct store_ent *cur = idx_get(st, &e->key);
    if (cur && !ent_newer(e, cur)) {
        e->seg->dead += e->len;
        return 0;
    }
    if (cur) {
        ent_account(st, cur, 0);
        *cur = *e;
    } else if (!(cur = idx_add(st, e))) {
        e->seg->dead += e->len;
        return -ENOMEM;
    }
    ent_account(st, cur, 1);
    return 0;
}

/* ---- segments ---- */

static void seg_name(char buf[STORE_NAME_MAX], uint32_t id)
{
    snprintf(buf, STORE_NAME_MAX, "seg-%06u.dat", id);
}

/* seg-<digits>.dat -> id (> 0): 0, or -EINVAL for any other name. */
static int seg_parse(const char *name, uint32_t *id)
{
    if (strncmp(name, "seg-", 4) != 0)
        return -EINVAL;
    const char *p = name + 4;
    uint64_t v = 0;
    if (*p < '0' || *p > '9')
        return -EINVAL;
    for (; *p >= '0' && *p <= '9'; p++) {
        v = v * 10 + (uint64_t)(*p - '0');
        if (v >= UINT32_MAX)
            return -EINVAL;
    }
    if (strcmp(p, ".dat") != 0 || v == 0)
        return -EINVAL;
    *id = (uint32_t)v;
    return 0;
}

static struct store_seg *seg_new(uint32_t id, int fd)
{
    struct store_seg *s = calloc(1, sizeof(*s));
    if (s) {
        s->id = id;
        s->fd = fd;
        s->dfd = -1;
    }
    return s;
}

/* Opens the segment again with O_DIRECT for reads; -errno when refused. */
static int seg_open_direct(struct store *st, struct store_seg *s)
{
    char name[STORE_NAME_MAX];
    seg_name(name, s->id);
    s->dfd = cachedir_open_file(st->dirfd, name, O_RDONLY | O_DIRECT, 0);
    return s->dfd < 0 ? s->dfd : 0;
}

static int segs_append(struct store *st, struct store_seg *s)
{
    if (st->nsegs == st->segcap) {
        uint32_t cap = st->segcap ? st->segcap * 2 : 16;
        struct store_seg **a = realloc(st->segs, cap * sizeof(*a));
        if (!a)
            return -ENOMEM;
        st->segs = a;
        st->segcap = cap;
    }
    st->segs[st->nsegs++] = s;
    return 0;
}

static void seg_free(struct store_seg *s)
{
    if (s->fd >= 0)
        close(s->fd);
    if (s->dfd >= 0)
        close(s->dfd);
    free(s);
}

/* Under lock: frees a deleted segment nobody holds any more. */
static void seg_unpin(struct store *st, struct store_seg *s)
{
    if (!s->deleted || s->refs || s->writers)
        return;
    for (struct store_seg **pp = &st->zombies; *pp; pp = &(*pp)->next_zombie) {
        if (*pp == s) {
            *pp = s->next_zombie;
            break;
        }
    }
    seg_free(s);
}

/* Under lock: a new, empty segment file, appended to segs. */
static int seg_create(struct store *st, struct store_seg **out)
{
    char name[STORE_NAME_MAX];
    int fd = -1, err = EEXIST;
    for (int tries = 0; tries < 16 && err == EEXIST; tries++) {
        seg_name(name, st->next_id++);
        fd = cachedir_open_file(st->dirfd, name, O_RDWR | O_CREAT | O_EXCL, 0640);
        err = fd < 0 ? -fd : 0;
    }
    if (fd < 0)
        return -err;
    struct store_seg *s = seg_new(st->next_id - 1, fd);
    if (!s || segs_append(st, s) < 0) {
        unlinkat(st->dirfd, name, 0);
        close(fd);
        free(s);
        return -ENOMEM;
    }
    /* Records are read one by one in an epoch's random order, as from a
     * segment found at start (seg_load): no read-ahead around them. */
    posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
    if (st->direct && seg_open_direct(st, s) < 0) /* read buffered then */
        log_warn("store: %s/%s: O_DIRECT refused (%s); its records are read buffered",
                 st->dir, name, strerror(errno));
    *out = s;
    return 0;
}

enum { RESERVE_OK = 0, RESERVE_BUDGET = 1 };

/* Under lock: reserves len bytes at the end of the active segment (a new
 * one when it is full) for a writer. budgeted: refuse past the budget.
 * Returns RESERVE_OK, RESERVE_BUDGET, or -errno (degraded, or no new
 * segment could be created). */
static int seg_reserve(struct store *st, uint32_t len, int budgeted, struct store_seg **seg,
                       uint64_t *off)
{
    int deg = store_degraded(st);
    if (deg)
        return -deg;
    if (budgeted && st->budget && st->bytes_disk + len > st->budget)
        return RESERVE_BUDGET;
    struct store_seg *a = st->active;
    if (!a || a->size + len > st->segsize) {
        if (a)
            a->sealed = 1;
        st->active = NULL;
        int rc = seg_create(st, &a);
        if (rc < 0) {
            if (!transient_err(-rc))
                store_degrade(st, -rc, "cannot create a segment");
            return rc;
        }
        st->active = a;
    }
    *off = a->size;
    a->size += len;
    a->writers++;
    st->bytes_disk += len;
    *seg = a;
    return RESERVE_OK;
}

/* Writes the whole iovec at off; 0 or -errno. */
static int pwritev_full(int fd, struct iovec *iov, int cnt, uint64_t off)
{
    while (cnt > 0) {
        ssize_t n = pwritev(fd, iov, cnt, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            return -EIO;
        off += (uint64_t)n;
        while (cnt > 0 && (size_t)n >= iov->iov_len) {
            n -= (ssize_t)iov->iov_len;
            iov++;
            cnt--;
        }
        if (cnt > 0) {
            iov->iov_base = (char *)iov->iov_base + n;
            iov->iov_len -= (size_t)n;
        }
    }
    return 0;
}

/* ---- zstd contexts ---- */

/* A zstd context from st's pool; with st NULL (store_encode without a
 * store), one of its own that zctx_put frees. */
static struct store_zctx *zctx_get(struct store *st)
{
    if (!st)
        return calloc(1, sizeof(struct store_zctx));
    pthread_mutex_lock(&st->zlock);
    struct store_zctx *z = st->zfree;
    if (z) {
        st->zfree = z->next;
        st->nzfree--;
    }
    pthread_mutex_unlock(&st->zlock);
    return z ? z : calloc(1, sizeof(*z));
}

static void zctx_free(struct store_zctx *z)
{
    ZSTD_freeCCtx(z->cctx);
    ZSTD_freeDCtx(z->dctx);
    free(z->buf);
    free(z);
}

static void zctx_put(struct store *st, struct store_zctx *z)
{
    if (!z)
        return;
    if (!st) {
        zctx_free(z);
        return;
    }
    pthread_mutex_lock(&st->zlock);
    if (st->nzfree < STORE_ZPOOL_MAX) {
        z->next = st->zfree;
        st->zfree = z;
        st->nzfree++;
        z = NULL;
    }
    pthread_mutex_unlock(&st->zlock);
    if (z)
        zctx_free(z);
}

/* Compresses src into z->buf; the compressed size, or -errno. */
static ssize_t zctx_compress(struct store_zctx *z, const void *src, size_t len, int level)
{
    if (!z->cctx && !(z->cctx = ZSTD_createCCtx()))
        return -ENOMEM;
    size_t bound = ZSTD_compressBound(len);
    if (z->cap < bound) {
        uint8_t *b = realloc(z->buf, bound);
        if (!b)
            return -ENOMEM;
        z->buf = b;
        z->cap = bound;
    }
    size_t n = ZSTD_compressCCtx(z->cctx, z->buf, z->cap, src, len, level);
    return ZSTD_isError(n) ? -EINVAL : (ssize_t)n;
}

/* ---- put ---- */

static int img_check(const struct img *im)
{
    if (im->fmt != IMG_PIXELS || im->len == 0 || !im->data ||
        shape_bytes(im->h, im->w, im->c, im->dtype) != im->len)
        return -EINVAL;
    return 0;
}

/* A store read with O_DIRECT has no use for its records in the page cache:
 * once a write ends past a STORE_BEHIND_WINDOW boundary of its segment, the
 * window it completed is sent to the disk (SYNC_FILE_RANGE_WRITE: large
 * writes, started now rather than by the flusher later), and the window
 * before that, waited for, leaves the page cache (POSIX_FADV_DONTNEED). The
 * write that crosses a boundary does it, so each window is done once,
 * whatever the writers; a segment keeps at most its last two windows
 * cached (the flusher writes them), a page still dirty is left, and
 * nothing here changes what is durable (segments are fdatasync'd where
 * they were). A first epoch then writes its records through a few
 * recycled pages instead of holding them all: on make bench's VM
 * decode/raw's 1.8 GB first epoch spent 2.0-6.2 s of system time writing
 * into fresh page-cache pages (a fresh page there costs more the more the
 * page cache already holds), and the node's page cache is left to its
 * other users. A kernel or file system that refuses it: writes as before;
 * a write-back that failed degrades the store, as a failed write does. */
static void write_behind(struct store *st, int fd, uint64_t off, uint64_t len)
{
    const uint64_t w = STORE_BEHIND_WINDOW;
    uint64_t k = (off + len) / w;
    if (!__atomic_load_n(&st->behind, __ATOMIC_RELAXED) || k == off / w)
        return;
    /* An error number (0: none), as posix_fadvise returns it. */
    int rc = sync_file_range(fd, (off_t)((k - 1) * w), (off_t)w, SYNC_FILE_RANGE_WRITE) < 0
                 ? errno : 0;
    if (rc == 0 && k >= 2)
        rc = sync_file_range(fd, (off_t)((k - 2) * w), (off_t)w,
                             SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                                 SYNC_FILE_RANGE_WAIT_AFTER) < 0
                 ? errno
                 : posix_fadvise(fd, (off_t)((k - 2) * w), (off_t)w, POSIX_FADV_DONTNEED);
    if (rc == 0)
        return;
    if (rc == EINVAL || rc == ESPIPE || rc == ENOSYS || rc == EOPNOTSUPP) {
        if (__atomic_exchange_n(&st->behind, 0, __ATOMIC_RELAXED))
            log_info("store: writing behind refused (%s): written records stay in the page "
                     "cache", strerror(rc));
        return;
    }
    /* A failed write-back (EIO, ENOSPC) is reported here, once: the
     * fdatasync after it would not see it again. */
    store_degrade(st, rc, "write-back failed");
}

/* Writes one prepared record (iov: header, payload, padding) and publishes
 * it, or (compaction) repoints the index from (from, from_off). Returns 0,
 * RESERVE_BUDGET, or -errno. */
static int store_append(struct store *st, struct iovec *iov, int cnt, struct store_ent *e,
                        int budgeted, const struct store_seg *from, uint64_t from_off)
{
    struct store_seg *seg;
    uint64_t off;
    pthread_mutex_lock(&st->lock);
    int rc = seg_reserve(st, e->len, budgeted, &seg, &off);
    pthread_mutex_unlock(&st->lock);
    if (rc != RESERVE_OK)
        return rc;

    rc = pwritev_full(seg->fd, iov, cnt, off);
    if (rc == 0)
        write_behind(st, seg->fd, off, e->len);

    pthread_mutex_lock(&st->lock);
    seg->writers--;
    e->seg = seg;
    e->off = off;
    if (rc < 0) {
        seg->dead += e->len;
    } else if (!from) {
        rc = idx_publish(st, e);
    } else {
        struct store_ent *cur = idx_get(st, &e->key);
        if (cur && cur->seg == from && cur->off == from_off) {
            ent_account(st, cur, 0);
            cur->seg = seg;
            cur->off = off;
            ent_account(st, cur, 1);
        } else {
            seg->dead += e->len; /* superseded while it was copied */
        }
    }
    pthread_mutex_unlock(&st->lock);
    if (rc < 0 && !transient_err(-rc))
        store_degrade(st, -rc, "write failed");
    return rc;
}

/* A record of im under key, ready to write: *h its header (data_crc set),
 * *payload its payload (im's pixels, or *z's buffer when zstd made it
 * smaller: the caller gives *z back with zctx_put). Returns 0, or -EINVAL
 * (not pixels), -EFBIG (over STORE_MAX_RECORD), -ENOMEM or a zstd error;
 * *z is NULL then. */
static int rec_build(struct store *st, const struct store_key *key, const struct img *im,
                     int zstd_level, struct store_hdr *h, const void **payload,
                     struct store_zctx **z)
{
    *z = NULL;
    if (img_check(im) < 0)
        return -EINVAL;
    if (im->len > STORE_MAX_RECORD - STORE_HEADER_SIZE - STORE_ALIGN)
        return -EFBIG;
    *h = (struct store_hdr){
        .encoding = STORE_ENC_RAW,
        .key = *key,
        .raw_len = (uint32_t)im->len,
        .stored_len = (uint32_t)im->len,
        .h = im->h,
        .w = im->w,
        .c = im->c,
        .dtype = im->dtype,
        .rate = im->rate,
    };
    *payload = im->data;
    if (zstd_level != 0) {
        ssize_t n = (*z = zctx_get(st)) ? zctx_compress(*z, im->data, im->len, zstd_level)
                                        : -ENOMEM;
        if (n < 0) {
            zctx_put(st, *z);
            *z = NULL;
            return (int)n;
        }
        if ((size_t)n < im->len) { /* else raw is smaller: store that */
            *payload = (*z)->buf;
            h->stored_len = (uint32_t)n;
            h->encoding = STORE_ENC_ZSTD;
        }
    }
    h->data_crc = hash_crc32c(0, *payload, h->stored_len);
    return 0;
}

int store_put(struct store *st, const struct store_key *key, const struct img *im,
              int zstd_level)
{
    int rc = store_degraded(st);
    if (rc) {
        CNT(st, put_io, 1);
        return -rc;
    }
    struct store_hdr h;
    const void *payload;
    struct store_zctx *z;
    if ((rc = rec_build(st, key, im, zstd_level, &h, &payload, &z)) < 0) {
        if (rc == -EFBIG)
            CNT(st, put_too_large, 1);
        else
            CNT(st, put_other, 1);
        return rc;
    }
    if (rec_size(h.stored_len) > st->segsize) {
        CNT(st, put_too_large, 1);
        zctx_put(st, z);
        return -EFBIG;
    }
    uint8_t hdr[STORE_HEADER_SIZE];
    static const uint8_t pad[STORE_ALIGN];
    hdr_encode(&h, hdr);
    struct store_ent e = {
        .key = *key,
        .len = rec_size(h.stored_len),
        .raw_len = h.raw_len,
        .stored_len = h.stored_len,
        .h = h.h,
        .w = h.w,
        .c = h.c,
        .dtype = h.dtype,
        .encoding = h.encoding,
    };
    struct iovec iov[3] = {
        {hdr, sizeof(hdr)},
        {(void *)payload, h.stored_len},
        {(void *)pad, e.len - STORE_HEADER_SIZE - h.stored_len},
    };
    rc = store_append(st, iov, iov[2].iov_len ? 3 : 2, &e, 1, NULL, 0);
    zctx_put(st, z);
    if (rc == RESERVE_BUDGET) {
        CNT(st, put_budget, 1);
        rc = -ENOSPC;
    } else if (rc == 0)
        CNT(st, puts, 1);
    else if (transient_err(-rc))
        CNT(st, put_other, 1);
    else
        CNT(st, put_io, 1);
    return rc;
}

ssize_t store_encode(struct store *st, const struct store_key *key, const struct img *im,
                     int zstd_level, uint8_t **buf, size_t *cap)
{
    struct store_hdr h;
    const void *payload;
    struct store_zctx *z;
    int rc = rec_build(st, key, im, zstd_level, &h, &payload, &z);
    if (rc < 0)
        return rc;
    size_t len = STORE_HEADER_SIZE + (size_t)h.stored_len;
    if (*cap < len) {
        uint8_t *b = realloc(*buf, len);
        if (!b) {
            zctx_put(st, z);
            return -ENOMEM;
        }
        *buf = b;
        *cap = len;
    }
    hdr_encode(&h, *buf);
    memcpy(*buf + STORE_HEADER_SIZE, payload, h.stored_len);
    zctx_put(st, z);
    return (ssize_t)len;
}

/* ---- lookup and decode ---- */

int store_lookup(struct store *st, const struct store_key *key, struct store_loc *loc)
{
    CNT(st, lookups, 1);
    pthread_mutex_lock(&st->lock);
    const struct store_ent *e = idx_get(st, key);
    if (e) {
        e->seg->refs++;
        loc->seg = e->seg;
        loc->fd = e->seg->fd;
        loc->dfd = e->seg->dfd;
        loc->off = e->off;
        loc->len = e->len;
        loc->raw_len = e->raw_len;
        loc->stored_len = e->stored_len;
        loc->h = e->h;
        loc->w = e->w;
        loc->c = e->c;
        loc->dtype = e->dtype;
        loc->encoding = (enum store_encoding)e->encoding;
    }
    pthread_mutex_unlock(&st->lock);
    if (!e)
        return -ENOENT;
    CNT(st, hits, 1);
    return 0;
}

void store_release(struct store *st, struct store_loc *loc)
{
    if (!loc->seg)
        return;
    pthread_mutex_lock(&st->lock);
    loc->seg->refs--;
    seg_unpin(st, loc->seg);
    pthread_mutex_unlock(&st->lock);
    loc->seg = NULL;
    loc->fd = -1;
    loc->dfd = -1;
}

/* The checks of store_check but the payload's checksum, with the header
 * decoded into *h. */
static int rec_check_header(const struct store_key *key, const uint8_t *rec, size_t len,
                            struct store_hdr *h)
{
    if (len < STORE_HEADER_SIZE || hdr_decode(rec, h) < 0 || !key_eq(&h->key, key) ||
        len < (size_t)STORE_HEADER_SIZE + h->stored_len)
        return -EBADMSG;
    return 0;
}

/* The checks of store_check, with the header decoded into *h. */
static int rec_check(const struct store_key *key, const uint8_t *rec, size_t len,
                     struct store_hdr *h)
{
    if (rec_check_header(key, rec, len, h) < 0 ||
        hash_crc32c(0, rec + STORE_HEADER_SIZE, h->stored_len) != h->data_crc)
        return -EBADMSG;
    return 0;
}

int store_check(const struct store_key *key, const void *record, size_t len)
{
    struct store_hdr h;
    return rec_check(key, record, len, &h);
}

/* *view: a raw record's payload in place (read only), as its header h says. */
static void raw_view(const struct store_hdr *h, const uint8_t *rec, struct img *view)
{
    *view = (struct img){.fmt = IMG_PIXELS, .h = h->h, .w = h->w, .c = h->c, .dtype = h->dtype,
                         .rate = h->rate, .len = h->raw_len, .cap = h->raw_len, .borrowed = 1};
    view->data = (uint8_t *)(uintptr_t)(rec + STORE_HEADER_SIZE);
}

void store_count_bad(struct store *st)
{
    if (st)
        CNT(st, decode_errors, 1);
}

/* store_decode, and with view a raw record's payload is not copied: *view
 * is set to it in place and out is left alone. */
static int decode_record(struct store *st, const struct store_key *key, const void *record,
                         size_t len, struct img *out, struct img *view)
{
    const uint8_t *rec = record;
    struct store_hdr h;
    if (rec_check(key, rec, len, &h) < 0)
        goto bad;
    if (view && h.encoding == STORE_ENC_RAW) {
        raw_view(&h, rec, view);
        return 0;
    }
    if (img_reserve(out, h.raw_len) < 0)
        return -ENOMEM;
    if (h.encoding == STORE_ENC_RAW) {
        memcpy(out->data, rec + STORE_HEADER_SIZE, h.raw_len);
    } else {
        struct store_zctx *z = zctx_get(st);
        if (!z || (!z->dctx && !(z->dctx = ZSTD_createDCtx()))) {
            zctx_put(st, z);
            return -ENOMEM;
        }
        size_t n = ZSTD_decompressDCtx(z->dctx, out->data, h.raw_len,
                                       rec + STORE_HEADER_SIZE, h.stored_len);
        zctx_put(st, z);
        if (ZSTD_isError(n) || n != h.raw_len)
            goto bad;
    }
    out->fmt = IMG_PIXELS;
    out->h = h.h;
    out->w = h.w;
    out->c = h.c;
    out->dtype = h.dtype;
    out->rate = h.rate;
    out->len = h.raw_len;
    if (view) {
        *view = *out;
        view->borrowed = 1;
    }
    return 0;
bad:
    store_count_bad(st);
    return -EBADMSG;
}

int store_view_unchecked(struct store *st, const struct store_key *key, const void *record,
                         size_t len, struct img *view, uint32_t *data_crc)
{
    const uint8_t *rec = record;
    struct store_hdr h;
    if (rec_check_header(key, rec, len, &h) < 0) {
        store_count_bad(st);
        return -EBADMSG;
    }
    if (h.encoding != STORE_ENC_RAW)
        return -EAGAIN;
    raw_view(&h, rec, view);
    *data_crc = h.data_crc;
    return 0;
}

int store_decode(struct store *st, const struct store_key *key, const void *record,
                 size_t len, struct img *out)
{
    return decode_record(st, key, record, len, out, NULL);
}

int store_decode_view(struct store *st, const struct store_key *key, const void *record,
                      size_t len, struct img *out, struct img *view)
{
    return decode_record(st, key, record, len, out, view);
}

/* ---- reading segments (recovery and compaction) ---- */

struct seg_reader {
    int fd;
    uint64_t fsize;
    uint8_t *buf;
    size_t cap;
    uint64_t wstart; /* file offset of buf[0] */
    size_t wlen;     /* valid bytes in buf */
};

/* Points *p at [off, off + need) of the file (off + need <= fsize). */
static int rd_get(struct seg_reader *rd, uint64_t off, size_t need, const uint8_t **p)
{
    if (off >= rd->wstart && off + need <= rd->wstart + rd->wlen) {
        *p = rd->buf + (off - rd->wstart);
        return 0;
    }
    size_t want = need > STORE_SCAN_BUF ? need : STORE_SCAN_BUF;
    if (want > rd->fsize - off)
        want = (size_t)(rd->fsize - off);
    if (want > rd->cap) {
        uint8_t *b = realloc(rd->buf, want);
        if (!b)
            return -ENOMEM;
        rd->buf = b;
        rd->cap = want;
    }
    size_t got = 0;
    rd->wlen = 0;
    while (got < want) {
        ssize_t n = pread(rd->fd, rd->buf + got, want - got, (off_t)(off + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            break;
        got += (size_t)n;
    }
    rd->wstart = off;
    rd->wlen = got;
    if (got < need)
        return -EIO; /* the file is shorter than it was */
    *p = rd->buf;
    return 0;
}

enum rec_status { REC_OK, REC_BAD_DATA, REC_BAD_HEADER, REC_TORN, REC_END };

/* Reads the record at off: its status (or -errno), header, bytes, length. */
static int rd_next(struct seg_reader *rd, uint64_t off, struct store_hdr *h,
                   const uint8_t **rec, uint32_t *len)
{
    const uint8_t *p;
    if (off >= rd->fsize)
        return REC_END;
    if (rd->fsize - off < STORE_HEADER_SIZE)
        return REC_TORN;
    int rc = rd_get(rd, off, STORE_HEADER_SIZE, &p);
    if (rc < 0)
        return rc;
    if ((rc = hdr_decode(p, h)) < 0)
        return rc == -EPROTONOSUPPORT ? rc : REC_BAD_HEADER;
    *len = rec_size(h->stored_len);
    if (*len > rd->fsize - off)
        return REC_TORN;
    if ((rc = rd_get(rd, off, *len, &p)) < 0)
        return rc;
    *rec = p;
    if (hash_crc32c(0, p + STORE_HEADER_SIZE, h->stored_len) != h->data_crc)
        return REC_BAD_DATA;
    return REC_OK;
}

/* Loads segment id at open: verifies every record, indexes the good ones,
 * truncates the newest segment after its last good record. 0, or -errno
 * for what must stop the open (no memory). */
static int seg_load(struct store *st, uint32_t id, int newest, struct seg_reader *rd)
{
    char name[STORE_NAME_MAX];
    seg_name(name, id);
    /* A planted link or a file not the daemon's own is skipped, never
     * read, written or truncated (cachedir.h). */
    int fd = cachedir_open_file(st->dirfd, name, newest ? O_RDWR : O_RDONLY, 0);
    if (fd < 0 && newest && (fd == -EROFS || fd == -EACCES)) {
        store_degrade(st, -fd, "cannot open the newest segment for writing");
        fd = cachedir_open_file(st->dirfd, name, O_RDONLY, 0);
        newest = 0;
    }
    struct stat sb;
    if (fd >= 0 && fstat(fd, &sb) < 0) {
        int e = -errno;
        close(fd);
        fd = e;
    }
    if (fd < 0) {
        log_error("store: %s/%s: %s; segment skipped", st->dir, name,
                  fd == -ELOOP ? "a symbolic link"
                  : fd == -EINVAL ? "not a regular file"
                  : fd == -EPERM ? "not the daemon's own file, or hard-linked"
                                 : strerror(-fd));
        return 0;
    }
    struct store_seg *s = seg_new(id, fd);
    if (!s || segs_append(st, s) < 0) {
        close(fd);
        free(s);
        return -ENOMEM;
    }
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    rd->fd = fd;
    rd->fsize = (uint64_t)sb.st_size;
    rd->wstart = rd->wlen = 0;

    uint64_t off = 0, dropped = 0, records = 0;
    int status, ioerr = 0;
    for (;;) {
        struct store_hdr h;
        const uint8_t *rec;
        uint32_t len = 0;
        status = rd_next(rd, off, &h, &rec, &len);
        if (status == REC_OK) {
            struct store_ent e = {
                .key = h.key, .seg = s, .off = off, .len = len, .raw_len = h.raw_len,
                .stored_len = h.stored_len, .h = h.h, .w = h.w, .c = h.c,
                .dtype = h.dtype, .encoding = h.encoding,
            };
            if (idx_publish(st, &e) < 0)
                return -ENOMEM;
            records++;
        } else if (status == REC_BAD_DATA) {
            s->dead += len;
            dropped++;
        } else {
            if (status < 0)
                ioerr = status;
            if (status == -ENOMEM || status == -EPROTONOSUPPORT)
                return status; /* a newer store: refused whole, nothing truncated */
            break;
        }
        off += len;
    }
    uint64_t torn = rd->fsize - off;
    s->size = rd->fsize;
    dropped += status != REC_END;
    CNT(st, recovered, records);
    CNT(st, dropped, dropped);
    CNT(st, torn_bytes, torn);
    s->sealed = !newest;
    if (torn && newest && !ioerr && ftruncate(fd, (off_t)off) == 0) {
        s->size = off;
        log_warn("store: %s/%s: %llu damaged records dropped, truncated from %llu to %llu "
                 "bytes", st->dir, name, (unsigned long long)dropped,
                 (unsigned long long)rd->fsize, (unsigned long long)off);
    } else if (dropped) {
        if (torn) {
            s->dead += torn;
            s->sealed = 1; /* never append after bytes that are not records */
        }
        if (torn)
            log_warn("store: %s/%s: %llu damaged records dropped, %llu bytes ignored at "
                     "the end%s%s", st->dir, name, (unsigned long long)dropped,
                     (unsigned long long)torn, ioerr ? ": " : "",
                     ioerr ? strerror(-ioerr) : "");
        else
            log_warn("store: %s/%s: %llu damaged records dropped", st->dir, name,
                     (unsigned long long)dropped);
    }
    posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
    return 0;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* The segment ids in the directory, sorted. */
static int list_segments(int dirfd, uint32_t **ids, uint32_t *n)
{
    int fd = dup(dirfd);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (!d) {
        int err = errno;
        if (fd >= 0)
            close(fd);
        return -err;
    }
    uint32_t cap = 0, cnt = 0, *a = NULL;
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d))) {
        uint32_t id;
        if (seg_parse(de->d_name, &id) < 0)
            continue;
        if (cnt == cap) {
            cap = cap ? cap * 2 : 64;
            uint32_t *b = realloc(a, cap * sizeof(*b));
            if (!b) {
                rc = -ENOMEM;
                break;
            }
            a = b;
        }
        a[cnt++] = id;
    }
    closedir(d);
    if (rc < 0) {
        free(a);
        return rc;
    }
    if (cnt)
        qsort(a, cnt, sizeof(*a), cmp_u32);
    *ids = a;
    *n = cnt;
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int store_open(struct store **out, const char *dir, uint64_t disk_budget,
               uint64_t segment_size, char *err, size_t errlen)
{
    if (segment_size == 0)
        segment_size = STORE_DEFAULT_SEGMENT_SIZE;
    if (segment_size < STORE_MIN_SEGMENT_SIZE) {
        snprintf(err, errlen, "store: segment size %llu is under the minimum %llu",
                 (unsigned long long)segment_size,
                 (unsigned long long)STORE_MIN_SEGMENT_SIZE);
        return -EINVAL;
    }
    struct store *st = calloc(1, sizeof(*st));
    if (!st || !(st->dir = strdup(dir))) {
        free(st);
        snprintf(err, errlen, "store: out of memory");
        return -ENOMEM;
    }
    st->dirfd = -1;
    st->budget = disk_budget;
    st->segsize = segment_size;
    st->next_id = 1;
    pthread_mutex_init(&st->compact_lock, NULL);
    pthread_mutex_init(&st->lock, NULL);
    pthread_mutex_init(&st->zlock, NULL);
    double t0 = now_s();
    uint32_t *ids = NULL, nids = 0;
    struct seg_reader rd = {0};

    /* Made (0750) when missing; refused unless only its user and root can
     * change it (cachedir.h). */
    int rc = st->dirfd = cachedir_open(dir, 1, err, errlen);
    if (rc < 0)
        goto fail;
    if (flock(st->dirfd, LOCK_EX | LOCK_NB) < 0) {
        rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
        snprintf(err, errlen, "store: %s: %s", dir,
                 rc == -EBUSY ? "in use by another process" : strerror(-rc));
        goto fail;
    }
    if ((rc = list_segments(st->dirfd, &ids, &nids)) < 0) {
        snprintf(err, errlen, "store: cannot list %s: %s", dir, strerror(-rc));
        goto fail;
    }
    for (uint32_t i = 0; i < nids; i++) {
        if ((rc = seg_load(st, ids[i], i + 1 == nids, &rd)) < 0) {
            char name[STORE_NAME_MAX];
            seg_name(name, ids[i]);
            if (rc == -EPROTONOSUPPORT)
                snprintf(err, errlen, "store: %s/%s holds records of a format after version "
                         "%u, written by a newer prestod: left as it is (use that prestod, "
                         "or another cache.dir)", dir, name, STORE_VERSION);
            else
                snprintf(err, errlen, "store: %s: %s", dir, strerror(-rc));
            goto fail;
        }
    }
    if (nids)
        st->next_id = ids[nids - 1] + 1;
    for (uint32_t i = 0; i < st->nsegs; i++)
        st->bytes_disk += st->segs[i]->size;
    if (st->nsegs && !st->segs[st->nsegs - 1]->sealed)
        st->active = st->segs[st->nsegs - 1];
    free(ids);
    free(rd.buf);
    /* An empty directory (a new cache, a profiler's trial store) says it at debug. */
    log_at(st->nsegs ? LOG_LEVEL_INFO : LOG_LEVEL_DEBUG,
           "store: %s: %u segments, %u records, %llu bytes, read in %.2f s", dir, st->nsegs,
           st->nent, (unsigned long long)st->bytes_disk, now_s() - t0);
    if (st->budget && st->bytes_disk > st->budget)
        log_warn("store: %s: %llu bytes on disk are over the budget of %llu; new records "
                 "are refused until compaction frees space", dir,
                 (unsigned long long)st->bytes_disk, (unsigned long long)st->budget);
    *out = st;
    return 0;
fail:
    free(ids);
    free(rd.buf);
    store_close(st);
    return rc;
}

int store_direct_io(struct store *st)
{
    /* A probe file first: the file system may refuse O_DIRECT (tmpfs
     * before 6.6, some FUSE mounts) with EINVAL at open. */
    static const char probe[] = "direct-io-probe.tmp";
    unlinkat(st->dirfd, probe, 0); /* whatever was left under the name, a link included */
    int fd = cachedir_open_file(st->dirfd, probe, O_RDWR | O_CREAT | O_EXCL | O_DIRECT, 0600);
    int rc = fd < 0 ? fd : 0;
    if (fd >= 0)
        close(fd);
    unlinkat(st->dirfd, probe, 0);
    for (uint32_t i = 0; rc == 0 && i < st->nsegs; i++)
        rc = seg_open_direct(st, st->segs[i]);
    if (rc < 0) { /* all or nothing */
        for (uint32_t i = 0; i < st->nsegs; i++) {
            if (st->segs[i]->dfd >= 0)
                close(st->segs[i]->dfd);
            st->segs[i]->dfd = -1;
        }
        return rc;
    }
    st->direct = 1;
    __atomic_store_n(&st->behind, 1, __ATOMIC_RELAXED);
    return 0;
}

void store_close(struct store *st)
{
    if (!st)
        return;
    for (uint32_t i = 0; i < st->nsegs; i++)
        seg_free(st->segs[i]);
    while (st->zombies) {
        struct store_seg *s = st->zombies;
        st->zombies = s->next_zombie;
        seg_free(s);
    }
    while (st->zfree) {
        struct store_zctx *z = st->zfree;
        st->zfree = z->next;
        zctx_free(z);
    }
    free(st->segs);
    free(st->ents);
    free(st->slots);
    if (st->dirfd >= 0)
        close(st->dirfd);
    pthread_mutex_destroy(&st->compact_lock);
    pthread_mutex_destroy(&st->lock);
    pthread_mutex_destroy(&st->zlock);
    free(st->dir);
    free(st);
}

/* ---- compaction ---- */

/* Forgets the keys is_live() rejects. The index is walked from the end in
 * chunks; a chunk's keys are copied under the lock and judged without it.
 * Only the sweep removes entries (puts replace in place or append), so the
 * positions of a chunk still hold its keys, and removing in descending
 * order moves only entries already judged (or newer) into freed places. */
static int store_sweep(struct store *st, store_live_fn is_live, void *arg)
{
    struct store_key *keys = malloc(STORE_SWEEP_CHUNK * sizeof(*keys));
    uint8_t *dead = malloc(STORE_SWEEP_CHUNK);
    if (!keys || !dead) {
        free(keys);
        free(dead);
        return -ENOMEM;
    }
    pthread_mutex_lock(&st->lock);
    uint32_t hi = st->nent;
    pthread_mutex_unlock(&st->lock);
    while (hi > 0) {
        uint32_t lo = hi > STORE_SWEEP_CHUNK ? hi - STORE_SWEEP_CHUNK : 0;
        pthread_mutex_lock(&st->lock);
        for (uint32_t p = lo; p < hi; p++)
            keys[p - lo] = st->ents[p].key;
        pthread_mutex_unlock(&st->lock);
        for (uint32_t k = 0; k < hi - lo; k++)
            dead[k] = !is_live(&keys[k], arg);
        pthread_mutex_lock(&st->lock);
        for (uint32_t k = hi - lo; k-- > 0;) {
            if (!dead[k])
                continue;
            uint32_t p = lo + k;
            struct store_ent *e = p < st->nent && key_eq(&st->ents[p].key, &keys[k])
                                      ? &st->ents[p]
                                      : idx_get(st, &keys[k]);
            if (e)
                idx_forget(st, e);
        }
        pthread_mutex_unlock(&st->lock);
        hi = lo;
    }
    free(keys);
    free(dead);
    return 0;
}

static int seg_worth_compacting(const struct store_seg *s)
{
    return s->dead * 100 >= s->size * STORE_COMPACT_DEAD_PCT;
}

/* Segments written by one compaction, to fdatasync before deleting. */
struct seg_set {
    struct store_seg *s[8];
    unsigned n;
};

/* Copies v's live records to the active segment, syncs the copies, and
 * deletes v (records found unreadable are forgotten). 1 when v was
 * deleted, -errno on a failure (v is then kept, every record readable). */
static int seg_rewrite(struct store *st, struct store_seg *v)
{
    char name[STORE_NAME_MAX];
    struct stat sb;
    struct seg_reader rd = {.fd = v->fd, .fsize = v->size};
    struct seg_set dst = {.n = 0};
    uint64_t off = 0;
    int rc = 0;

    seg_name(name, v->id);
    if (fstat(v->fd, &sb) == 0 && (uint64_t)sb.st_size < rd.fsize)
        rd.fsize = (uint64_t)sb.st_size; /* a write into it failed */
    for (;;) {
        struct store_hdr h;
        const uint8_t *rec;
        uint32_t len = 0;
        int status = rd_next(&rd, off, &h, &rec, &len);
        if (status == -ENOMEM) {
            rc = -ENOMEM;
            break;
        }
        if (status != REC_OK && status != REC_BAD_DATA) {
            if (status != REC_END)
                log_warn("store: %s/%s: unreadable from offset %llu on (%s)", st->dir, name,
                         (unsigned long long)off,
                         status < 0 ? strerror(-status) : "damaged record");
            break;
        }
        pthread_mutex_lock(&st->lock);
        struct store_ent *e = idx_get(st, &h.key);
        int live = e && e->seg == v && e->off == off;
        struct store_ent copy;
        if (live && status == REC_BAD_DATA) {
            idx_forget(st, e); /* damaged since it was indexed */
            live = 0;
        } else if (live) {
            copy = *e;
        }
        pthread_mutex_unlock(&st->lock);
        if (live) {
            struct iovec iov = {(void *)rec, len};
            rc = store_append(st, &iov, 1, &copy, 0, v, off);
            if (rc < 0)
                break;
            CNT(st, compact_copied, len);
            if (dst.n == 0 || dst.s[dst.n - 1] != copy.seg) {
                if (dst.n == sizeof(dst.s) / sizeof(dst.s[0])) {
                    rc = -E2BIG; /* a segment rolls at most a few times per victim */
                    break;
                }
                pthread_mutex_lock(&st->lock);
                copy.seg->refs++;
                pthread_mutex_unlock(&st->lock);
                dst.s[dst.n++] = copy.seg;
            }
        }
        off += len;
    }
    free(rd.buf);
    for (unsigned i = 0; i < dst.n; i++)
        if (rc == 0 && fdatasync(dst.s[i]->fd) < 0) {
            rc = -errno;
            store_degrade(st, -rc, "fdatasync failed");
        }

    pthread_mutex_lock(&st->lock);
    for (unsigned i = 0; i < dst.n; i++) {
        dst.s[i]->refs--;
        seg_unpin(st, dst.s[i]);
    }
    int deleted = 0;
    if (rc == 0 && v->live > 0) {
        /* What is still indexed here could not be read (damaged since it
         * was indexed): forget it, to be recomputed. Backwards, so that
         * idx_del only moves entries already looked at. */
        uint64_t lost = 0;
        for (uint32_t i = st->nent; i-- > 0;) {
            if (st->ents[i].seg == v) {
                idx_forget(st, &st->ents[i]);
                lost++;
            }
        }
        log_warn("store: %s/%s: %llu unreadable records forgotten", st->dir, name,
                 (unsigned long long)lost);
    }
    if (rc == 0) {
        uint32_t i = 0;
        while (i < st->nsegs && st->segs[i] != v)
            i++;
        memmove(&st->segs[i], &st->segs[i + 1], (st->nsegs - i - 1) * sizeof(*st->segs));
        st->nsegs--;
        st->bytes_disk -= v->size;
        v->deleted = 1;
        v->next_zombie = st->zombies;
        st->zombies = v;
        if (unlinkat(st->dirfd, name, 0) < 0)
            log_warn("store: %s/%s: unlink: %s", st->dir, name, strerror(errno));
        CNT(st, compact_freed, v->size);
        CNT(st, compactions, 1);
        deleted = 1;
    }
    pthread_mutex_unlock(&st->lock);
    return rc < 0 ? rc : deleted;
}

int store_compact(struct store *st, store_live_fn is_live, void *arg)
{
    pthread_mutex_lock(&st->compact_lock);
    int rc = is_live ? store_sweep(st, is_live, arg) : 0;
    struct store_seg **victims = NULL;
    uint32_t nv = 0;
    if (rc < 0)
        goto out;

    pthread_mutex_lock(&st->lock);
    struct store_seg *a = st->active;
    if (a && a->writers == 0 && a->size > 0 && seg_worth_compacting(a)) {
        a->sealed = 1;
        st->active = NULL;
    }
    victims = malloc((st->nsegs ? st->nsegs : 1) * sizeof(*victims));
    if (victims) {
        for (uint32_t i = 0; i < st->nsegs; i++) {
            struct store_seg *s = st->segs[i];
            if (s->sealed && s->writers == 0 && seg_worth_compacting(s)) {
                s->refs++;
                victims[nv++] = s;
            }
        }
    }
    pthread_mutex_unlock(&st->lock);
    if (!victims) {
        rc = -ENOMEM;
        goto out;
    }

    int done = 0;
    for (uint32_t i = 0; i < nv; i++) {
        int r = rc < 0 ? 0 : seg_rewrite(st, victims[i]);
        if (r < 0)
            rc = r;
        else
            done += r;
        pthread_mutex_lock(&st->lock);
        victims[i]->refs--;
        seg_unpin(st, victims[i]);
        pthread_mutex_unlock(&st->lock);
    }
    if (rc == 0)
        rc = done;
out:
    free(victims);
    pthread_mutex_unlock(&st->compact_lock);
    return rc;
}

/* ---- stats ---- */

#define LOAD(st, f) __atomic_load_n(&(st)->n.f, __ATOMIC_RELAXED)

void store_get_stats(struct store *st, struct store_stats *o)
{
    memset(o, 0, sizeof(*o));
    pthread_mutex_lock(&st->lock);
    o->segments = st->nsegs;
    o->records = st->nent;
    o->direct_io = st->direct;
    o->write_behind = __atomic_load_n(&st->behind, __ATOMIC_RELAXED);
    o->bytes_disk = st->bytes_disk;
    for (uint32_t i = 0; i < st->nsegs; i++) {
        o->bytes_live += st->segs[i]->live;
        o->bytes_dead += st->segs[i]->dead;
    }
    o->bytes_raw = st->bytes_raw;
    o->bytes_stored = st->bytes_stored;
    o->index_bytes = (uint64_t)st->entcap * sizeof(struct store_ent) +
                     (st->slots ? ((uint64_t)st->mask + 1) * sizeof(uint32_t) : 0);
    pthread_mutex_unlock(&st->lock);
    o->budget = st->budget;
    o->segment_size = st->segsize;
    o->lookups = LOAD(st, lookups);
    o->hits = LOAD(st, hits);
    o->decode_errors = LOAD(st, decode_errors);
    o->puts = LOAD(st, puts);
    o->put_budget = LOAD(st, put_budget);
    o->put_too_large = LOAD(st, put_too_large);
    o->put_io = LOAD(st, put_io);
    o->put_other = LOAD(st, put_other);
    o->recovered = LOAD(st, recovered);
    o->dropped = LOAD(st, dropped);
    o->torn_bytes = LOAD(st, torn_bytes);
    o->compactions = LOAD(st, compactions);
    o->compact_copied = LOAD(st, compact_copied);
    o->compact_freed = LOAD(st, compact_freed);
    o->degraded = store_degraded(st);
}

static const struct stats_decl store_decl[] = {STORE_STATS(STATS_DECL)};

void store_stats_emit(struct store *st, struct stats_out *o)
{
    struct store_stats ss;
    memset(&ss, 0, sizeof(ss));
    if (st)
        store_get_stats(st, &ss);
    struct stats_val v[] = {
        stats_u64(ss.degraded != 0),
        stats_str(ss.degraded ? strerror(ss.degraded) : ""),
        stats_u64(ss.direct_io != 0),
        stats_u64(ss.write_behind != 0),
        stats_u64(ss.budget),
        stats_u64(ss.segment_size),
        stats_u64(ss.segments),
        stats_u64(ss.records),
        stats_u64(ss.bytes_disk),
        stats_u64(ss.bytes_live),
        stats_u64(ss.bytes_dead),
        stats_u64(ss.bytes_raw),
        stats_u64(ss.bytes_stored),
        stats_f64(stats_ratio(ss.bytes_raw, ss.bytes_stored)),
        stats_u64(ss.decode_errors),
        stats_u64(ss.puts),
        stats_u64(ss.put_budget),
        stats_u64(ss.put_too_large),
        stats_u64(ss.put_io + ss.put_other),
        stats_u64(ss.recovered),
        stats_u64(ss.dropped),
        stats_u64(ss.torn_bytes),
        stats_u64(ss.compactions),
        stats_u64(ss.compact_copied),
        stats_u64(ss.compact_freed),
    };
    stats_emit(o, store_decl, v, sizeof(v) / sizeof(v[0]));
}
