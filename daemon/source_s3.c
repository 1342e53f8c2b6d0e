/*
 * An S3 bucket as a dataset's source (source.h): root s3://BUCKET/PREFIX,
 * read through objstore.h (libcurl's multi interface on libevent).
 *
 * Indexing: ListObjectsV2 of PREFIX/, page by page (source.page_keys), on
 * the opening thread with an event loop of its own. Keys PREFIX/CLASS/NAME
 * (NAME may hold further '/') make an ImageFolder: classes are the first
 * components, sorted; a class's objects are those with one of
 * torchvision's image extensions, in the order source_dir.c walks a
 * directory (component by component, byte order), so the sample ids equal
 * those of the same files in a local ImageFolder. A sample's identity for
 * the disk tier is its key, its size and its ETag (hashed where a file has
 * its mtime): a changed object is a new record. A bucket that cannot be
 * listed refuses the dataset with the URL and the server's message.
 *
 * Tar shards (a root ending in .tar: one key or a brace pattern of keys):
 * the shards' directory listed for their sizes and ETags, each shard
 * indexed by source_shards_index (source_tar.c: its member list in
 * cache.dir, keyed by its URL, size and ETag, else its headers walked
 * through ranged GETs of source.index_window bytes on this thread (the
 * next ones together: S3_WALK_AHEAD), the first window
 * of every shard fetched at once beforehand); a sample is then its image
 * member's byte range, one ranged GET (neighbours handed over together
 * share one: struct rgroup) with the shard's indexed ETag as If-Match,
 * its identity the member's size and the shard's ETag.
 *
 * A manifest of URLs (source_s3_rows_new): s3:// rows of one bucket, each
 * directory listed once, or http(s):// rows, each probed, all at once.
 *
 * Reads: source_submit hands a request to the source's own thread, which
 * runs an event loop (the objstore's: curl's sockets and timers as
 * libevent events) with io.depth requests in flight over reused
 * connections; each body is written straight into the request's buffer.
 * The worker waits for it with source_wait (a condition variable). Retries
 * (source.retries, backoff with jitter, resumed with If-Match) are the
 * objstore's; a request that fails after its last try ends with -errno,
 * counted by reason in the stats and logged (the first ones, with the URL,
 * the status and S3's message); the dataset's on_error applies.
 *
 * Credentials: source.credentials_file (an AWS credentials file, the
 * profile $AWS_PROFILE or "default"; the dataset's own, or the global
 * key; read only when trusted: creds_open) when set, else AWS_ACCESS_KEY_ID,
 * AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN. They are handed to the
 * objstore (which copies them) and wiped here; never logged, never in
 * the stats.
 *
 * Lock order: r->lock is a leaf (the objstore is the thread's alone).
 */
#define _GNU_SOURCE
#include "source_impl.h"

#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "braces.h"
#include "fileext.h"
#include "hash.h"
#include "io.h"
#include "log.h"
#include "manifest.h"
#include "objstore.h"
#include "probecache.h"
#include "shardidx.h"
#include "stats.h"
#include "trust.h"

/* Failures after the last try logged one by one per source; the rest counted. */
#define S3_FAILS_LOGGED 10
#define S3_SNAPSHOT_MS 250
#define S3_LIST_PAGE_MAX (8ull << 20)

/* A read handed to the source's thread. */
struct rreq {
    struct source_s3 *r;
    struct io_req *q;
    uint64_t off, length; /* a shard member's range; length 0: the whole object */
    uint64_t got; /* body bytes seen (those past q->len are not kept) */
    struct rreq *next;
    /* started: on r->started (under r->lock) until it finishes */
    struct rreq *sprev, *snext;
    int cancel;         /* a waiter took it back: the thread cancels it */
    struct rreq *cnext; /* the thread's list of those to cancel */
    struct rgroup *group; /* read by one GET with its neighbours, or NULL */
    int reprobe; /* a URL row's object replaced since it was probed: read
                    again without If-Match, its pin set from the answer */
};

/* Shard members next to each other (in the order they were handed over:
 * a chunk's samples) read by one GET of the range from the first's start
 * to the last's end: its bytes go to each member's buffer, the gaps
 * between them (tar headers, padding) dropped. */
#define S3_COALESCE_GAP (64u << 10)  /* at most this between two members */
#define S3_COALESCE_SPAN (8u << 20)  /* a group's range at most */
#define S3_COALESCE_MAX 64           /* members a group */
struct rgroup {
    struct source_s3 *r;
    uint64_t off, end, at; /* the range; at: the next byte's offset */
    uint32_t n, first;     /* members; the first one at or after at */
    struct rreq *m[S3_COALESCE_MAX]; /* NULL once finished on its own (cancelled) */
};

struct objstore_result;
static void log_failure(struct source_s3 *r, int rc, const struct rreq *rr,
                        const struct objstore_result *res);

/* A shard as its members' reads name it (an io_req's path is key, so the
 * shard is found from the request): the ETag it was indexed at, sent as
 * If-Match with every read of a member, so a shard replaced since is a
 * clear error, never another version's bytes at this version's offsets. */
struct shard_ref {
    char etag[S3XML_ETAG_MAX];
    int changed; /* logged as replaced (the thread's) */
    char key[];
};

static struct shard_ref *shard_ref_of(const char *key)
{
    return (struct shard_ref *)(void *)(key - offsetof(struct shard_ref, key));
}

struct source_s3 {
    const char *root, *name;
    char *bucket, *prefix; /* prefix "" or ending in '/' */
    int http;              /* an http(s):// root: shards by URL, no bucket */
    char origin[256];      /* "s3://BUCKET" or "http://HOST[:PORT]": for messages */
    uint64_t window; /* source.index_window */
    struct event_base *base;
    struct objstore *os;
    struct event *wake, *tick;
    int efd;
    pthread_t thread;
    int running;
    pthread_mutex_t lock;
    pthread_cond_t done; /* a request became done */
    struct rreq *pending, **pending_tail; /* handed over, not yet started */
    struct rreq *started;                 /* on the objstore, not yet finished */
    unsigned cancels;                     /* started ones taken back, not yet cancelled */
    int stopping;
    struct objstore_stats snap; /* the objstore's, every S3_SNAPSHOT_MS */
    uint64_t logged;            /* failures logged (the thread's) */
    /* tar shards (a root ending in .tar): their keys, each sample's shard
     * and image member offset; NULL for an ImageFolder bucket */
    char **shard_keys;
    struct shard_ref **shards; /* nshards, each shard's key and ETag */
    size_t nshards;
    uint32_t *shard_of;
    uint64_t *offset;
    /* a manifest's http(s) URL rows with a known version: those that
     * name it (size and etag columns), those probed or found in the probe
     * cache (probecache.h); sorted by the row's path pointer in the index;
     * each read asks for that ETag
     * (If-Match). The thread's once it runs (a row re-probed changes its
     * pin: pins_dirty, saved on a tick and at the end). */
    struct row_pin *pins;
    size_t npins;
    struct probecache_id probe_id; /* the manifest's, for the probe cache */
    const char *cache_dir;
    int pins_dirty;
    uint64_t pins_saved_ns;
    uint64_t reprobed; /* relaxed atomic: rows asked again (412) */
};

/* A row's pin: its own (two rows of one URL may name two versions), found
 * by the row's path in the index, which its reads' q->path is. */
struct row_pin {
    const char *url; /* the index's path of the row (set once it is indexed) */
    uint32_t row;
    char *etag;
    uint64_t size;
    int named; /* by the manifest's columns: a replaced object is a bad sample */
};

/* ---- credentials ---- */

struct creds {
    char ak[256], sk[256], token[4096];
};

static void creds_wipe(struct creds *c)
{
    explicit_bzero(c, sizeof(*c));
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

/* Opens a credentials file only if nobody but root and the daemon's user
 * could have written what it says: its directories trusted (trust.h),
 * the file itself a regular file (no link followed) of root's or the
 * user's, writable by neither group nor others. A stream, or NULL with a
 * message. */
static FILE *creds_open(const char *path, char *err, size_t errlen)
{
    char dir[1024], why[512];
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - path) : 1,
             slash ? (slash == path ? "/" : path) : ".");
    struct trust_opts o = {.uid = geteuid(), .flags = TRUST_STICKY_OK};
    int dfd = trust_open_dir(dir, &o, why, sizeof(why));
    if (dfd < 0) {
        snprintf(err, errlen, "source.credentials_file %s: %s%s", path,
                 dfd == -EPERM ? "not trusted: " : "", why);
        return NULL;
    }
    int fd = openat(dfd, base, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
    int rc = fd < 0 ? -errno : 0;
    close(dfd);
    struct stat st;
    if (rc == 0 && fstat(fd, &st) < 0)
        rc = -errno;
    if (rc < 0) {
        snprintf(err, errlen, "source.credentials_file %s: %s", path,
                 rc == -ELOOP ? "a symbolic link (not followed)" : strerror(-rc));
    } else if (!S_ISREG(st.st_mode) || (st.st_uid != 0 && st.st_uid != geteuid()) ||
               (st.st_mode & (S_IWGRP | S_IWOTH))) {
        rc = -EPERM;
        snprintf(err, errlen, "source.credentials_file %s: not trusted: %s", path,
                 !S_ISREG(st.st_mode) ? "not a regular file"
                 : (st.st_mode & (S_IWGRP | S_IWOTH)) ? "writable by its group or others"
                                                        : "owned by another user");
    }
    FILE *f = rc == 0 ? fdopen(fd, "re") : NULL;
    if (rc == 0 && !f)
        snprintf(err, errlen, "source.credentials_file %s: %s", path, strerror(errno));
    if (!f && fd >= 0)
        close(fd);
    return f;
}

/* An AWS credentials file's profile: aws_access_key_id, ... 0 or -errno
 * with a message (which never quotes a value). */
static int creds_file(const char *path, struct creds *c, char *err, size_t errlen)
{
    const char *profile = getenv("AWS_PROFILE");
    char line[8192], want[300];
    int in = 0, lineno = 0;
    FILE *f = creds_open(path, err, errlen);
    if (!f)
        return -EACCES;
    snprintf(want, sizeof(want), "[%s]", profile && *profile ? profile : "default");
    while (fgets(line, sizeof(line), f)) {
        char *s = trim(line), *eq;
        lineno++;
        if (*s == '#' || *s == ';' || *s == '\0')
            continue;
        if (*s == '[') {
            in = strcmp(s, want) == 0;
            continue;
        }
        if (!in || !(eq = strchr(s, '=')))
            continue;
        *eq = '\0';
        char *k = trim(s), *v = trim(eq + 1);
        char *dst = strcmp(k, "aws_access_key_id") == 0       ? c->ak
                    : strcmp(k, "aws_secret_access_key") == 0 ? c->sk
                    : strcmp(k, "aws_session_token") == 0     ? c->token
                                                              : NULL;
        size_t cap = dst == c->token ? sizeof(c->token) : sizeof(c->ak);
        if (dst && strlen(v) >= cap) {
            snprintf(err, errlen, "source.credentials_file %s:%d: %s is too long", path, lineno,
                     k);
            explicit_bzero(line, sizeof(line));
            fclose(f);
            return -EINVAL;
        }
        if (dst)
            snprintf(dst, cap, "%s", v);
    }
    explicit_bzero(line, sizeof(line));
    fclose(f);
    if (!c->ak[0] || !c->sk[0]) {
        snprintf(err, errlen, "source.credentials_file %s: no aws_access_key_id and "
                 "aws_secret_access_key in profile %s", path, want);
        return -EINVAL;
    }
    return 0;
}

static int creds_get(const struct config_source *cs, struct creds *c, char *err, size_t errlen)
{
    memset(c, 0, sizeof(*c));
    if (cs->credentials_file[0])
        return creds_file(cs->credentials_file, c, err, errlen);
    const char *ak = getenv("AWS_ACCESS_KEY_ID"), *sk = getenv("AWS_SECRET_ACCESS_KEY");
    const char *tok = getenv("AWS_SESSION_TOKEN");
    if (!ak || !*ak || !sk || !*sk) {
        snprintf(err, errlen, "no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                 "(and AWS_SESSION_TOKEN) in prestod's environment, or source.credentials_file");
        return -EACCES;
    }
    if (strlen(ak) >= sizeof(c->ak) || strlen(sk) >= sizeof(c->sk) ||
        (tok && strlen(tok) >= sizeof(c->token))) {
        snprintf(err, errlen, "the AWS_* credentials in the environment are too long");
        return -EINVAL;
    }
    snprintf(c->ak, sizeof(c->ak), "%s", ak);
    snprintf(c->sk, sizeof(c->sk), "%s", sk);
    snprintf(c->token, sizeof(c->token), "%s", tok ? tok : "");
    return 0;
}

/* ---- listing ---- */

/* Byte order, component by component ('/' before any other byte): the
 * order source_dir.c walks a tree in. */
static int cmp_path(const char *a, const char *b)
{
    for (;; a++, b++) {
        unsigned ca = (unsigned char)*a, cb = (unsigned char)*b;
        if (ca == cb) {
            if (ca == 0)
                return 0;
            continue;
        }
        if (ca == '/')
            return cb == 0 ? 1 : -1;
        if (cb == '/')
            return ca == 0 ? -1 : 1;
        return ca < cb ? -1 : 1;
    }
}

static int cmp_obj_key(const void *x, const void *y)
{
    return strcmp(((const struct s3xml_object *)x)->key, ((const struct s3xml_object *)y)->key);
}

static int cmp_obj(const void *x, const void *y)
{
    return cmp_path(((const struct s3xml_object *)x)->key, ((const struct s3xml_object *)y)->key);
}

/* The disk tier's "mtime" of an object: its ETag hashed (0: none). */
static int64_t etag_id(const char *etag)
{
    return etag[0] ? (int64_t)(hash_xxh64(etag, strlen(etag)) >> 1) : 0;
}

/* What objstore reads for key: a URL (http) or the bucket's key. */
static struct objstore_target target_of(const struct source_s3 *r, const char *key)
{
    if (r->http)
        return (struct objstore_target){.url = key};
    return (struct objstore_target){.bucket = r->bucket, .key = key};
}

struct list_wait {
    struct event_base *base;
    int done, rc;
    struct objstore_listing listing;
    char msg[1024];
};

static void list_done(void *arg, int rc, struct objstore_listing *l, const char *message)
{
    struct list_wait *w = arg;
    w->done = 1;
    w->rc = rc;
    if (rc == 0)
        w->listing = *l;
    else
        snprintf(w->msg, sizeof(w->msg), "%s", message ? message : strerror(-rc));
    event_base_loopbreak(w->base);
}

static int s3_index(struct source_s3 *r, const struct config_dataset *cfg, struct index *ix,
                    char *err, size_t errlen)
{
    struct list_wait w = {.base = r->base};
    int rc = objstore_list(r->os, r->bucket, r->prefix, cfg->source.page_keys, list_done, &w);
    if (rc < 0) {
        snprintf(err, errlen, "dataset '%s': root %s: cannot list: %s", cfg->name, cfg->root,
                 strerror(-rc));
        return rc;
    }
    while (!w.done)
        if (event_base_loop(r->base, EVLOOP_ONCE) < 0)
            break;
    if (!w.done || w.rc < 0) {
        rc = w.done ? w.rc : -EIO;
        snprintf(err, errlen, "dataset '%s': root %s: cannot list the bucket: %s", cfg->name,
                 cfg->root, w.done ? w.msg : "the event loop failed");
        return rc;
    }
    struct s3xml_object *o = w.listing.objects;
    size_t n = w.listing.n, plen = strlen(r->prefix);
    uint64_t per_ext[FILEEXT_COUNT] = {0}, ignored = 0;
    if (n > 0) /* an empty listing has no array: qsort(NULL, 0) is undefined */
        qsort(o, n, sizeof(*o), cmp_obj);
    rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const char *rel = o[i].key + plen, *slash = strchr(rel, '/');
        int ext = fileext_sample(rel, source_audio(cfg));
        if (strncmp(o[i].key, r->prefix, plen) != 0 || !slash || slash == rel ||
            slash[1] == '\0' || ext < 0) {
            ignored++;
            continue;
        }
        size_t clen = (size_t)(slash - rel);
        uint32_t label = ix->nclasses;
        if (label == 0 || strlen(ix->classes[label - 1]) != clen ||
            strncmp(ix->classes[label - 1], rel, clen) != 0) {
            char *name = strndup(rel, clen);
            if (!name || (rc = index_add_class(ix, name)) < 0) {
                rc = -ENOMEM;
                break;
            }
        } else {
            label--;
        }
        rc = index_add_sample(ix, o[i].key, label, o[i].size, etag_id(o[i].etag));
        per_ext[ext]++;
    }
    unsigned pages = w.listing.pages;
    objstore_listing_free(&w.listing);
    if ((rc = source_folder_finish(ix, rc, cfg,
                                   source_audio(cfg) ? "PREFIX/CLASS/AUDIO objects"
                                                     : "PREFIX/CLASS/IMAGE objects",
                                   err, errlen)) < 0)
        return rc;
    char exts[256];
    source_ext_summary(per_ext, exts, sizeof(exts));
    log_info("dataset '%s': %u samples in %u classes from %s (%u listing pages; %s; %llu "
             "other keys ignored)", cfg->name, ix->n, ix->nclasses, cfg->root, pages, exts,
             (unsigned long long)ignored);
    return 0;
}

/* ---- tar shards ---- */

#define S3_SHARDS_MAX 1000000
#define S3_WINDOW (1u << 20) /* source.index_window's default */

/* Ranged GETs on the opening thread (before the source's thread runs). */
struct range_wait {
    struct event_base *base;
    size_t *left; /* of the GETs waited for together: the loop stops at 0 */
    int done, rc;
    uint8_t *dst; /* the range's bytes go here */
    size_t cap, got;
    char msg[1024];
};

static int range_sink(void *arg, const uint8_t *data, size_t len)
{
    struct range_wait *w = arg;
    size_t n = w->got + len > w->cap ? w->cap - w->got : len;
    memcpy(w->dst + w->got, data, n);
    w->got += n;
    return 0;
}

static void range_done(void *arg, int rc, struct objstore_result *res)
{
    struct range_wait *w = arg;
    w->done = 1;
    w->rc = rc;
    if (rc < 0)
        snprintf(w->msg, sizeof(w->msg), "%s",
                 res && res->message ? res->message : strerror(-rc));
    if (--*w->left == 0)
        event_base_loopbreak(w->base);
}

/* A shard's header walk reads through a window of r->window bytes: most
 * of a shard's headers and labels come with one GET. Where the walk goes
 * on from the window it has (members smaller than a window: it will need
 * every one), the next S3_WALK_AHEAD windows are asked at once, each its
 * own ranged GET, all in flight together: a shard's later windows cost
 * one round trip per S3_WALK_AHEAD, not one each. A walk that skips (large
 * members) asks one window at a time. */
#define S3_WALK_AHEAD 8
struct shard_win {
    struct source_s3 *r;
    const char *key;
    const char *etag; /* the listing's (or the probe's): the walk reads that version */
    uint64_t size;
    uint64_t off; /* of win's bytes */
    struct img win;
    unsigned gets;
};

/* GETs [off, off + len) of key into out (reserved for len bytes) on the
 * opening thread, in pieces of at least r->window bytes (at most
 * S3_WALK_AHEAD of them) all in flight at once, each with If-Match etag;
 * *gets counts them. 0 (out->len the bytes the server sent: less at the
 * object's end), or -errno with the objstore's message. */
static int range_get(struct source_s3 *r, const char *key, const char *etag, uint64_t off,
                     uint64_t len, struct img *out, unsigned *gets, char *err, size_t errlen)
{
    struct range_wait w[S3_WALK_AHEAD];
    uint64_t n = len / r->window, piece;
    size_t left = 0;
    struct objstore_target t = target_of(r, key);
    int rc = 0;
    n = n < 1 ? 1 : n > S3_WALK_AHEAD ? S3_WALK_AHEAD : n;
    piece = (len + n - 1) / n;
    t.if_match = etag;
    out->len = 0;
    for (uint64_t k = 0; k < n && k * piece < len; k++) {
        uint64_t at = k * piece, l = len - at < piece ? len - at : piece;
        w[k] = (struct range_wait){.base = r->base, .left = &left, .dst = out->data + at,
                                   .cap = (size_t)l};
        left++;
        if ((rc = objstore_get(r->os, &t, off + at, l, range_sink, &w[k], range_done,
                               &w[k])) < 0) {
            left--;
            snprintf(err, errlen, "GET: %s", strerror(-rc));
            break;
        }
        ++*gets;
    }
    while (left)
        if (event_base_loop(r->base, EVLOOP_ONCE) < 0) {
            snprintf(err, errlen, "the event loop failed");
            return -EIO;
        }
    if (rc < 0)
        return rc;
    /* the pieces in order, up to the first one the server cut short */
    for (uint64_t k = 0; k < n && k * piece < len; k++) {
        if (w[k].rc < 0) {
            snprintf(err, errlen, "%s", w[k].msg);
            return w[k].rc;
        }
        out->len += w[k].got;
        if (w[k].got < w[k].cap)
            break;
    }
    return 0;
}

static int shard_read(void *arg, uint64_t off, size_t len, struct img *out, char *err,
                      size_t errlen)
{
    struct shard_win *sw = arg;
    int rc;
    if (off >= sw->size)
        len = 0;
    else if (len > sw->size - off)
        len = (size_t)(sw->size - off);
    if (len && (off < sw->off || off + len > sw->off + sw->win.len)) {
        /* going on from this window (or the first): the next ones too */
        uint64_t window = sw->r->window;
        int on = off >= sw->off && off <= sw->off + sw->win.len + window;
        uint64_t want = len > window ? len : window;
        if (on && want < S3_WALK_AHEAD * window)
            want = S3_WALK_AHEAD * window;
        if (want > sw->size - off)
            want = sw->size - off;
        if ((rc = img_reserve(&sw->win, (size_t)want)) < 0) {
            snprintf(err, errlen, "no memory for %llu bytes", (unsigned long long)want);
            return rc;
        }
        sw->off = off;
        if ((rc = range_get(sw->r, sw->key, sw->etag, off, want, &sw->win, &sw->gets, err,
                            errlen)) < 0) {
            sw->win.len = 0;
            return rc;
        }
        if (len > sw->win.len) /* the server sent less: the shard ends there */
            len = sw->win.len;
    }
    if ((rc = img_reserve(out, len ? len : 1)) < 0)
        return rc;
    if (len)
        memcpy(out->data, sw->win.data + (off - sw->off), len);
    out->len = len;
    out->fmt = IMG_ENCODED;
    return 0;
}

static int cmp_key(const void *k, const void *o)
{
    return strcmp(k, ((const struct s3xml_object *)o)->key);
}

/* Lists the directory of the shards' pattern (its keys up to the last '/'
 * before the first brace) into w, sorted by key. 0 or -errno with a
 * message. */
static int list_shard_dir(struct source_s3 *r, const struct config_dataset *cfg,
                          const char *pattern, struct list_wait *w, char *err, size_t errlen)
{
    const char *brace = strchr(pattern, '{');
    size_t dlen = brace ? (size_t)(brace - pattern) : strlen(pattern);
    while (dlen > 0 && pattern[dlen - 1] != '/')
        dlen--;
    char *dir = strndup(pattern, dlen);
    if (!dir)
        return -ENOMEM;
    int rc = objstore_list(r->os, r->bucket, dir, cfg->source.page_keys, list_done, w);
    free(dir);
    if (rc < 0) {
        snprintf(err, errlen, "dataset '%s': root %s: cannot list: %s", cfg->name, cfg->root,
                 strerror(-rc));
        return rc;
    }
    while (!w->done)
        if (event_base_loop(r->base, EVLOOP_ONCE) < 0)
            break;
    if (!w->done || w->rc < 0) {
        snprintf(err, errlen, "dataset '%s': root %s: cannot list the bucket: %s", cfg->name,
                 cfg->root, w->done ? w->msg : "the event loop failed");
        return w->done ? w->rc : -EIO;
    }
    struct s3xml_object *o = w->listing.objects;
    for (size_t i = 1; i < w->listing.n; i++) /* S3 lists in byte order; a server may not */
        if (strcmp(o[i - 1].key, o[i].key) > 0) {
            qsort(o, w->listing.n, sizeof(*o), cmp_obj_key);
            break;
        }
    return 0;
}


/* Probes of many objects at once (io.depth in flight): each one's size
 * and ETag from a GET of its first byte. */
struct probe_all {
    struct event_base *base;
    size_t left;
};

struct probe_one {
    struct probe_all *all;
    int rc;
    uint64_t size;
    char etag[S3XML_ETAG_MAX];
    char msg[512];
};

/* A shard's size and ETag from the server (http: no listing): what the
 * GET of its first byte (probe_many) said. 0 or -errno with a message. */
static int probed_shard(const struct probe_one *p, const char *url, struct s3xml_object *obj,
                        char *err, size_t errlen)
{
    if (p->rc < 0) {
        snprintf(err, errlen, "%s", p->msg);
        return p->rc;
    }
    if (p->size == 0) {
        snprintf(err, errlen, "GET %s: the response does not say the object's size", url);
        return -EPROTO;
    }
    obj->size = p->size;
    memcpy(obj->etag, p->etag, sizeof(obj->etag));
    return 0;
}

static int probe_sink(void *arg, const uint8_t *data, size_t len)
{
    (void)arg, (void)data, (void)len;
    return 0;
}

static void probe_done(void *arg, int rc, struct objstore_result *res)
{
    struct probe_one *p = arg;
    p->rc = rc;
    if (rc == 0 && res) {
        p->size = res->size;
        snprintf(p->etag, sizeof(p->etag), "%s", res->etag);
    } else {
        snprintf(p->msg, sizeof(p->msg), "%s",
                 res && res->message ? res->message : strerror(-rc));
    }
    if (--p->all->left == 0)
        event_base_loopbreak(p->all->base);
}

/* Probes keys[0..n) (URLs, or the bucket's keys) into out[], all in flight
 * together on the opening thread. 0 (each out[i].rc says how it went), or
 * -errno when the loop failed. */
static int probe_many(struct source_s3 *r, const char *const *keys, size_t n,
                      struct probe_one *out)
{
    struct probe_all all = {.base = r->base, .left = n};
    for (size_t i = 0; i < n; i++) {
        out[i] = (struct probe_one){.all = &all};
        struct objstore_target t = target_of(r, keys[i]);
        int rc = objstore_get(r->os, &t, 0, 1, probe_sink, NULL, probe_done, &out[i]);
        if (rc < 0) {
            out[i].rc = rc;
            snprintf(out[i].msg, sizeof(out[i].msg), "GET %s: %s", keys[i], strerror(-rc));
            all.left--;
        }
    }
    while (all.left)
        if (event_base_loop(r->base, EVLOOP_ONCE) < 0)
            return -EIO;
    return 0;
}

/* A window fetched ahead for a shard's header walk. */
struct win_get {
    struct shard_win *sw;
    size_t *left;
    struct event_base *base;
    int rc;
};

static int win_sink(void *arg, const uint8_t *data, size_t len)
{
    struct win_get *g = arg;
    struct img *w = &g->sw->win;
    size_t n = w->len + len > w->cap ? w->cap - w->len : len;
    memcpy(w->data + w->len, data, n);
    w->len += n;
    return 0;
}

static void win_done(void *arg, int rc, struct objstore_result *res)
{
    struct win_get *g = arg;
    (void)res;
    g->rc = rc;
    if (rc < 0)
        g->sw->win.len = 0; /* the walk asks again, and says what fails */
    if (--*g->left == 0)
        event_base_loopbreak(g->base);
}

/* The first window of every shard in need[] (their lists are not in
 * cache.dir), all in flight at once: the walks that follow start from
 * them instead of one round trip after another. A window that fails is
 * simply asked again by its walk. */
static void prefetch_windows(struct source_s3 *r, struct shard_win *wins, const uint8_t *need,
                             size_t n)
{
    struct win_get *g = calloc(n ? n : 1, sizeof(*g));
    size_t left = 0;
    if (!g)
        return;
    for (size_t k = 0; k < n; k++) {
        uint64_t want = wins[k].size < r->window ? wins[k].size : r->window;
        if (!need[k] || !want || img_reserve(&wins[k].win, (size_t)want) < 0)
            continue;
        wins[k].win.len = 0;
        wins[k].off = 0;
        g[k] = (struct win_get){.sw = &wins[k], .left = &left, .base = r->base};
        struct objstore_target t = target_of(r, wins[k].key);
        t.if_match = wins[k].etag;
        left++;
        if (objstore_get(r->os, &t, 0, want, win_sink, &g[k], win_done, &g[k]) < 0)
            left--;
        else
            wins[k].gets++;
    }
    while (left)
        if (event_base_loop(r->base, EVLOOP_ONCE) < 0)
            break;
    free(g);
}

/* The shards root names (a key ending in .tar, or a brace pattern of
 * them): listed under their directory for their sizes and ETags, then
 * indexed (source_shards_index: their member lists in cache.dir, else
 * their headers through ranged GETs). */
static int s3_index_shards(struct source_s3 *r, const struct config_dataset *cfg,
                           struct index *ix, char *err, size_t errlen)
{
    const char *pattern = r->http ? cfg->root : cfg->root + 5 + strlen(r->bucket) + 1;
    char msg[300];
    size_t n = 0;
    int rc = braces_expand(pattern, S3_SHARDS_MAX, &r->shard_keys, &n, msg, sizeof(msg));
    if (rc < 0) {
        snprintf(err, errlen, "dataset '%s': root %s: %s", cfg->name, cfg->root, msg);
        return rc;
    }
    r->nshards = n;
    if (!(r->shards = calloc(n ? n : 1, sizeof(*r->shards)))) {
        snprintf(err, errlen, "dataset '%s': out of memory", cfg->name);
        return -ENOMEM;
    }
    struct list_wait w = {.base = r->base};
    if (!r->http && (rc = list_shard_dir(r, cfg, pattern, &w, err, errlen)) < 0)
        return rc;
    struct s3xml_object *o = w.listing.objects;
    size_t no = w.listing.n;
    struct source_shard *shards = calloc(n ? n : 1, sizeof(*shards));
    struct shard_win *wins = calloc(n ? n : 1, sizeof(*wins));
    char **urls = calloc(n ? n : 1, sizeof(*urls));
    uint8_t *need = calloc(n ? n : 1, 1);
    struct probe_one *probes = r->http ? calloc(n ? n : 1, sizeof(struct probe_one)) : NULL;
    rc = shards && wins && urls && need && (probes || !r->http) ? 0 : -ENOMEM;
    if (rc < 0)
        snprintf(err, errlen, "dataset '%s': out of memory", cfg->name);
    /* http: no listing; every shard's size and ETag asked at once */
    if (rc == 0 && r->http && (rc = probe_many(r, (const char *const *)r->shard_keys, n,
                                               probes)) < 0)
        snprintf(err, errlen, "dataset '%s': root %s: the event loop failed", cfg->name,
                 cfg->root);
    for (size_t k = 0; k < n && rc == 0; k++) {
        struct s3xml_object probed;
        const struct s3xml_object *obj =
            no ? bsearch(r->shard_keys[k], o, no, sizeof(*o), cmp_key) : NULL;
        if (r->http && (rc = probed_shard(&probes[k], r->shard_keys[k], &probed, msg,
                                          sizeof(msg))) < 0) {
            snprintf(err, errlen, "dataset '%s': shard %s: %s", cfg->name, r->shard_keys[k],
                     msg);
            break;
        }
        if (r->http)
            obj = &probed;
        if (!obj) {
            rc = -ENOENT;
            snprintf(err, errlen, "dataset '%s': shard s3://%s/%s: no such key", cfg->name,
                     r->bucket, r->shard_keys[k]);
            break;
        }
        struct objstore_target t = target_of(r, r->shard_keys[k]);
        char url[2048];
        objstore_url(r->os, &t, url, sizeof(url));
        size_t klen = strlen(r->shard_keys[k]);
        if (!(urls[k] = strdup(url)) ||
            !(r->shards[k] = calloc(1, sizeof(struct shard_ref) + klen + 1))) {
            rc = -ENOMEM;
            snprintf(err, errlen, "dataset '%s': out of memory", cfg->name);
            break;
        }
        memcpy(r->shards[k]->key, r->shard_keys[k], klen + 1);
        snprintf(r->shards[k]->etag, sizeof(r->shards[k]->etag), "%s", obj->etag);
        wins[k] = (struct shard_win){.r = r, .key = r->shard_keys[k], .etag = obj->etag[0]
                                     ? r->shards[k]->etag : NULL, .size = obj->size};
        shards[k] = (struct source_shard){r->shard_keys[k], urls[k], obj->size,
                                          (uint64_t)etag_id(obj->etag), shard_read, &wins[k]};
        struct shardidx_id id = {urls[k], obj->size, shards[k].version};
        struct shardidx *x = NULL;
        need[k] = !cfg->source.cache_dir[0] || shardidx_load(cfg->source.cache_dir, &id, &x) < 0;
        shardidx_free(x);
    }
    if (!r->http)
        objstore_listing_free(&w.listing);
    if (rc == 0)
        prefetch_windows(r, wins, need, n);
    if (rc == 0 && (rc = source_shards_index(shards, n, cfg, ix, &r->shard_of, &r->offset, err,
                                             errlen)) > 0)
        rc = 0;
    for (size_t k = 0; urls && k < n; k++)
        free(urls[k]);
    for (size_t k = 0; wins && k < n; k++)
        img_free(&wins[k].win);
    free(urls);
    free(wins);
    free(shards);
    free(need);
    free(probes);
    return rc;
}

/* ---- the thread's side ---- */

static void req_finish(struct source_s3 *r, struct rreq *rr, int rc, const char *etag)
{
    struct io_req *q = rr->q;
    pthread_mutex_lock(&r->lock);
    if (rr->sprev)
        rr->sprev->snext = rr->snext;
    else if (r->started == rr)
        r->started = rr->snext;
    if (rr->snext)
        rr->snext->sprev = rr->sprev;
    if (rr->cancel && r->cancels)
        r->cancels--;
    if (rc < 0) {
        q->res = rc;
        q->failed = IO_STEP_OPEN;
    } else {
        q->res = (ssize_t)(rr->got < q->len ? rr->got : q->len);
        q->size = rr->got;
        q->mtime_ns = etag_id(etag ? etag : "");
    }
    __atomic_store_n(&q->state, IO_S_DONE, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&r->done);
    pthread_mutex_unlock(&r->lock);
    free(rr);
}

static int get_sink(void *arg, const uint8_t *data, size_t len)
{
    struct rreq *rr = arg;
    struct io_req *q = rr->q;
    if (rr->got < q->len) {
        size_t n = q->len - rr->got < len ? (size_t)(q->len - rr->got) : len;
        memcpy((uint8_t *)q->buf + rr->got, data, n);
    }
    rr->got += len;
    return 0;
}

static struct row_pin *pin_of(struct source_s3 *r, const char *url);
static void start_one(struct source_s3 *r, struct rreq *rr);

/* A URL row's read refused (412) because its object was replaced since it
 * was probed (its pin came from a probe or the probe cache, not from the
 * manifest): asked again without If-Match, that row only; 1 when it was. */
static int reprobe(struct source_s3 *r, struct rreq *rr, int rc)
{
    struct row_pin *p;
    if (rc != -ESTALE || r->shards || rr->reprobe || !(p = pin_of(r, rr->q->path)) || p->named)
        return 0;
    pthread_mutex_lock(&r->lock);
    int cancel = rr->cancel;
    pthread_mutex_unlock(&r->lock);
    if (cancel)
        return 0;
    if (__atomic_fetch_add(&r->reprobed, 1, __ATOMIC_RELAXED) < S3_FAILS_LOGGED)
        log_info("dataset '%s': %s was replaced since it was probed (ETag \"%s\"): asked "
                 "again, its new version read", r->name, p->url, p->etag);
    rr->reprobe = 1;
    rr->got = 0;
    start_one(r, rr);
    return 1;
}

/* The answer to a re-probe: the row's pin is its object's version now. */
static void repinned(struct source_s3 *r, struct rreq *rr, const struct objstore_result *res)
{
    struct row_pin *p = pin_of(r, rr->q->path);
    char *etag = res && res->etag[0] ? strdup(res->etag) : NULL;
    if (!p || !etag) {
        free(etag);
        return;
    }
    free(p->etag);
    p->etag = etag;
    p->size = res->size ? res->size : rr->got;
    r->pins_dirty = 1;
}

static void get_done(void *arg, int rc, struct objstore_result *res)
{
    struct rreq *rr = arg;
    if (reprobe(rr->r, rr, rc))
        return;
    if (rc == 0 && rr->reprobe)
        repinned(rr->r, rr, res);
    log_failure(rr->r, rc, rr, res);
    req_finish(rr->r, rr, rc, res ? res->etag : NULL);
}

/* A request's failure: the first ones logged with the objstore's message;
 * a replaced shard once. */
static void log_failure(struct source_s3 *r, int rc, const struct rreq *rr,
                        const struct objstore_result *res)
{
    if (rc == -ESTALE && r->shards && !shard_ref_of(rr->q->path)->changed) {
        struct shard_ref *sh = shard_ref_of(rr->q->path);
        sh->changed = 1;
        log_warn("dataset '%s': shard %s was replaced since it was indexed (ETag \"%s\" "
                 "asked for): its samples fail until it is indexed again (a restart of "
                 "prestod indexes it)", r->name, sh->key, sh->etag);
    }
    if (rc < 0 && rc != -ECANCELED && r->logged++ < S3_FAILS_LOGGED)
        log_warn("dataset '%s': %s (after %u tries)%s", r->name,
                 res && res->message ? res->message : strerror(-rc), res ? res->attempts : 0,
                 r->logged == S3_FAILS_LOGGED ? "; further failures are only counted" : "");
}

static int group_sink(void *arg, const uint8_t *data, size_t len)
{
    struct rgroup *g = arg;
    uint64_t from = g->at, to = g->at + len;
    for (uint32_t i = g->first; i < g->n; i++) {
        struct rreq *rr = g->m[i];
        uint64_t moff = g->m[i] ? rr->off : 0, mend = rr ? rr->off + rr->length : 0;
        if (!rr)
            continue;
        if (mend <= from) {
            if (i == g->first)
                g->first++;
            continue;
        }
        if (moff >= to)
            break;
        uint64_t a = moff > from ? moff : from, b = mend < to ? mend : to;
        struct io_req *q = rr->q;
        uint64_t pos = a - moff; /* within the member */
        if (pos < q->len) {
            size_t n = (size_t)((b - a) < q->len - pos ? (b - a) : q->len - pos);
            memcpy((uint8_t *)q->buf + pos, data + (a - from), n);
        }
        rr->got = b - moff;
    }
    g->at = to;
    return 0;
}

static void group_done(void *arg, int rc, struct objstore_result *res)
{
    struct rgroup *g = arg;
    struct source_s3 *r = g->r;
    for (uint32_t i = 0; i < g->n; i++) {
        struct rreq *rr = g->m[i];
        if (!rr)
            continue;
        if (rc < 0)
            log_failure(r, rc, rr, res);
        int mrc = rc;
        if (rc == 0 && rr->got < rr->length) /* the shard ended before it */
            mrc = -ECONNRESET;
        req_finish(r, rr, mrc, res ? res->etag : NULL);
    }
    free(g);
}

/* Starts list's first request, with the neighbours after it that make a
 * group; returns the first request not taken. */
static struct rreq *start_group(struct source_s3 *r, struct rreq *list)
{
    struct rreq *rr = list, *next = rr->next;
    uint64_t end = rr->off + rr->length;
    uint32_t n = 1;
    for (struct rreq *x = next; r->shards && x && n < S3_COALESCE_MAX; x = x->next, n++)
        if (x->q->path != rr->q->path || x->off < end || x->off - end > S3_COALESCE_GAP ||
            x->off + x->length - rr->off > S3_COALESCE_SPAN)
            break;
        else
            end = x->off + x->length;
    if (n == 1) {
        start_one(r, rr);
        return next;
    }
    struct rgroup *g = calloc(1, sizeof(*g));
    if (!g) {
        start_one(r, rr);
        return next;
    }
    g->r = r;
    g->off = g->at = rr->off;
    g->end = end;
    for (struct rreq *x = rr; g->n < n; x = next) {
        next = x->next;
        x->group = g;
        g->m[g->n++] = x;
    }
    struct objstore_target t = target_of(r, rr->q->path);
    t.if_match = shard_ref_of(rr->q->path)->etag;
    int rc = objstore_get(r->os, &t, g->off, g->end - g->off, group_sink, g, group_done, g);
    if (rc < 0)
        group_done(g, rc, NULL);
    return next;
}

static int cmp_pin(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const struct row_pin *)a)->url;
    uintptr_t y = (uintptr_t)((const struct row_pin *)b)->url;
    return x < y ? -1 : x > y;
}

static struct row_pin *pin_of(struct source_s3 *r, const char *url)
{
    struct row_pin key = {.url = url};
    return r->npins ? bsearch(&key, r->pins, r->npins, sizeof(key), cmp_pin) : NULL;
}

static void start_one(struct source_s3 *r, struct rreq *rr)
{
    struct objstore_target t = target_of(r, rr->q->path);
    if (r->shards) {
        t.if_match = shard_ref_of(rr->q->path)->etag;
    } else if (r->npins && !rr->reprobe) {
        const struct row_pin *p = pin_of(r, rr->q->path);
        t.if_match = p && p->etag[0] ? p->etag : NULL;
    }
    int rc = objstore_get(r->os, &t, rr->off, rr->length, get_sink, rr, get_done, rr);
    if (rc < 0)
        req_finish(r, rr, rc, NULL);
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    struct source_s3 *r = arg;
    uint64_t v;
    (void)what;
    if (read(fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
        log_warn("dataset '%s': source wake-up: %s", r->name, strerror(errno));
    pthread_mutex_lock(&r->lock);
    struct rreq *list = r->pending, *cancel = NULL;
    int stopping = r->stopping;
    r->pending = NULL;
    r->pending_tail = &r->pending;
    for (struct rreq *rr = list; rr && !stopping; rr = rr->next) {
        rr->sprev = NULL;
        rr->snext = r->started;
        if (r->started)
            r->started->sprev = rr;
        r->started = rr;
    }
    /* Started ones a waiter took back: only this thread finishes a
     * request, so each stays valid until objstore_cancel finishes it. */
    for (struct rreq *rr = r->started; rr && r->cancels; rr = rr->snext)
        if (rr->cancel == 1) {
            rr->cancel = 2;
            rr->cnext = cancel;
            cancel = rr;
        }
    pthread_mutex_unlock(&r->lock);
    while (cancel) {
        struct rreq *rr = cancel;
        cancel = rr->cnext;
        struct rgroup *g = rr->group;
        if (!g) {
            objstore_cancel(r->os, rr); /* -ENOENT: failing already, done soon */
            continue;
        }
        /* one of a group: finished alone, the GET goes on for the others
         * (cancelled once none is left) */
        uint32_t live = 0;
        for (uint32_t i = 0; i < g->n; i++) {
            if (g->m[i] == rr)
                g->m[i] = NULL;
            live += g->m[i] != NULL;
        }
        req_finish(r, rr, -ECANCELED, NULL);
        if (!live)
            objstore_cancel(r->os, g);
    }
    while (list) {
        struct rreq *rr = list;
        if (stopping) {
            list = rr->next;
            req_finish(r, rr, -ECANCELED, NULL);
        } else {
            list = start_group(r, rr);
        }
    }
    if (stopping)
        event_base_loopbreak(r->base);
}

static void snapshot(struct source_s3 *r)
{
    struct objstore_stats st;
    objstore_stats(r->os, &st);
    pthread_mutex_lock(&r->lock);
    r->snap = st;
    pthread_mutex_unlock(&r->lock);
}

#define S3_PINS_SAVE_NS (5ull * 1000000000ull) /* the probe cache rewritten at most so often */

/* The URL rows' pins that came from the server (probed, re-probed or from
 * the probe cache) kept as the manifest's probe cache. */
static void pins_save(struct source_s3 *r)
{
    struct probecache_entry *e = calloc(r->npins ? r->npins : 1, sizeof(*e));
    size_t n = 0;
    if (!e)
        return;
    for (size_t k = 0; k < r->npins; k++)
        if (!r->pins[k].named && r->pins[k].etag[0])
            e[n++] = (struct probecache_entry){r->pins[k].url, r->pins[k].etag, r->pins[k].size};
    int rc = probecache_save(r->cache_dir, &r->probe_id, e, n);
    free(e);
    if (rc < 0 && rc != -ENOENT)
        log_warn("dataset '%s': keeping the URL rows' probes in cache.dir: %s", r->name,
                 strerror(-rc));
    r->pins_dirty = 0;
    r->pins_saved_ns = stats_now_ns();
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct source_s3 *r = arg;
    (void)fd;
    (void)what;
    snapshot(r);
    if (r->pins_dirty && stats_now_ns() - r->pins_saved_ns >= S3_PINS_SAVE_NS)
        pins_save(r);
}

static void *s3_thread(void *arg)
{
    struct source_s3 *r = arg;
    event_base_loop(r->base, EVLOOP_NO_EXIT_ON_EMPTY);
    return NULL;
}

/* ---- the source ---- */

static void s3_free(struct source_s3 *r)
{
    if (r->running) {
        uint64_t one = 1;
        pthread_mutex_lock(&r->lock);
        r->stopping = 1;
        pthread_mutex_unlock(&r->lock);
        if (write(r->efd, &one, sizeof(one)) < 0)
            log_warn("dataset '%s': source stop: %s", r->name, strerror(errno));
        pthread_join(r->thread, NULL);
    }
    /* Requests queued after the stop, and those in flight: -ECANCELED. */
    struct rreq *list = r->pending;
    r->pending = NULL;
    while (list) {
        struct rreq *rr = list;
        list = rr->next;
        req_finish(r, rr, -ECANCELED, NULL);
    }
    objstore_free(r->os);
    if (r->wake)
        event_free(r->wake);
    if (r->tick)
        event_free(r->tick);
    if (r->base)
        event_base_free(r->base);
    if (r->efd >= 0)
        close(r->efd);
    pthread_cond_destroy(&r->done);
    pthread_mutex_destroy(&r->lock);
    if (r->pins_dirty)
        pins_save(r);
    for (size_t k = 0; k < r->npins; k++) {
        free(r->pins[k].etag);
    }
    free(r->pins);
    for (size_t k = 0; r->shards && k < r->nshards; k++)
        free(r->shards[k]);
    free(r->shards);
    if (r->shard_keys)
        braces_free(r->shard_keys, r->nshards);
    free(r->shard_of);
    free(r->offset);
    free(r->bucket);
    free(r->prefix);
    free(r);
}

static void s3_close(struct source *s)
{
    s3_free(s->impl);
    s->impl = NULL;
}

static void s3_open_error(const struct source *s, int rc, char *err, size_t errlen)
{
    const struct source_s3 *r = s->impl;
    const char *what = rc == -EACCES         ? "access denied (HTTP 403)"
                       : rc == -ENOENT       ? "no such key (HTTP 404)"
                       : rc == -ESTALE && r->shards
                           ? "the shard was replaced since it was indexed (If-Match failed)"
                       : rc == -ESTALE       ? "the object changed while it was read"
                       : rc == -EFBIG        ? "the object is over the size limit"
                       : rc == -ETIMEDOUT    ? "timed out"
                       : rc == -ECONNREFUSED ? "connection refused"
                       : rc == -ECONNRESET   ? "connection reset or cut short"
                       : rc == -EIO          ? "server error"
                       : rc == -ECANCELED    ? "cancelled (the source is closing)"
                                             : strerror(-rc);
    snprintf(err, errlen, "GET from %s: %s%s", r->origin, what,
             rc == -ECANCELED || rc == -EACCES || rc == -ENOENT ? ""
                                                                : " after the last retry");
}

static int s3_open_file(const struct source *s, const struct index *ix, uint32_t sample,
                        uint64_t max_size, struct source_file *f, char *err, size_t errlen)
{
    (void)s, (void)ix, (void)sample, (void)max_size;
    f->fd = -1;
    snprintf(err, errlen, "an S3 object is not a file");
    return -EOPNOTSUPP;
}

static void s3_req(const struct source *s, const struct index *ix, uint32_t sample, void *buf,
                   size_t len, struct io_req *q)
{
    const struct source_s3 *r = s->impl;
    q->fd = -1;
    q->buf = buf;
    q->len = len;
    q->off = 0;
    q->path = index_path(ix, sample); /* the key: fixed while the index lives */
    q->real_root = NULL;
    q->direct = 0;
    q->size = 0;
    if (r->shard_keys) { /* a shard member: its byte range of the shard */
        const struct index_sample *is = &ix->samples[sample];
        q->path = r->shards[r->shard_of[sample]]->key;
        q->off = r->offset[sample];
        q->size = is->size;
        if (q->len > is->size)
            q->len = (size_t)is->size;
    }
}

/* A worker's requests are staged (on its own thread) until it kicks them
 * off, or waits: a chunk's reads reach the source's thread together, in
 * order, so neighbours can share a GET whatever the other workers do. */
static __thread struct {
    struct source_s3 *r;
    struct rreq *head, **tail;
} stage;

static void stage_flush(void)
{
    struct source_s3 *r = stage.r;
    uint64_t one = 1;
    if (!r)
        return;
    stage.r = NULL;
    if (!stage.head)
        return;
    pthread_mutex_lock(&r->lock);
    int first = r->pending == NULL;
    *r->pending_tail = stage.head;
    r->pending_tail = stage.tail;
    pthread_mutex_unlock(&r->lock);
    if (first && write(r->efd, &one, sizeof(one)) < 0)
        log_warn("dataset '%s': source wake-up: %s", r->name, strerror(errno));
}

static void s3_submit(const struct source *s, struct io_req *q)
{
    struct source_s3 *r = s->impl;
    struct rreq *rr = calloc(1, sizeof(*rr));
    uint64_t length = q->size; /* a shard member's (s3_req) */
    q->res = 0;
    q->failed = IO_STEP_NONE;
    q->size = 0;
    q->mtime_ns = 0;
    if (!rr) {
        q->res = -ENOMEM;
        q->failed = IO_STEP_OPEN;
        __atomic_store_n(&q->state, IO_S_DONE, __ATOMIC_RELEASE);
        return;
    }
    rr->r = r;
    rr->q = q;
    if (r->shard_keys) {
        rr->off = q->off;
        rr->length = length ? length : 1; /* never 0: that is the whole shard */
    }
    __atomic_store_n(&q->state, IO_S_QUEUED, __ATOMIC_RELAXED);
    if (stage.r != r)
        stage_flush();
    if (!stage.r) {
        stage.r = r;
        stage.head = NULL;
        stage.tail = &stage.head;
    }
    *stage.tail = rr;
    stage.tail = &rr->next;
}

/* The requests this thread staged for r go to its thread. */
static void s3_kick(const struct source *s)
{
    if (stage.r == s->impl)
        stage_flush();
}

/* Takes q back under r->lock: out of the queue when not started (done
 * now); else marked for the thread to cancel (1 when it must be woken). */
static int take_back(struct source_s3 *r, struct io_req *q)
{
    for (struct rreq **pp = &r->pending; *pp; pp = &(*pp)->next) {
        struct rreq *rr = *pp;
        if (rr->q != q)
            continue;
        *pp = rr->next;
        if (r->pending_tail == &rr->next)
            r->pending_tail = pp;
        free(rr);
        q->res = -ECANCELED;
        q->failed = IO_STEP_OPEN;
        __atomic_store_n(&q->state, IO_S_DONE, __ATOMIC_RELEASE);
        return 0;
    }
    for (struct rreq *rr = r->started; rr; rr = rr->snext)
        if (rr->q == q && !rr->cancel) {
            rr->cancel = 1;
            r->cancels++;
            return 1;
        }
    return 0;
}

/* Waits for q; once *stop (may be NULL) is set, takes it back first. */
static ssize_t s3_wait(const struct source *s, struct io_req *q, const int *stop)
{
    struct source_s3 *r = s->impl;
    int asked = 0;
    uint64_t one = 1;
    if (stage.r == r)
        stage_flush();
    pthread_mutex_lock(&r->lock);
    while (__atomic_load_n(&q->state, __ATOMIC_ACQUIRE) != IO_S_DONE) {
        if (!asked && stop && __atomic_load_n(stop, __ATOMIC_ACQUIRE)) {
            asked = 1;
            if (take_back(r, q) && write(r->efd, &one, sizeof(one)) < 0)
                log_warn("dataset '%s': source wake-up: %s", r->name, strerror(errno));
            continue;
        }
        pthread_cond_wait(&r->done, &r->lock);
    }
    pthread_mutex_unlock(&r->lock);
    return q->res;
}

/* Not started yet: taken out of the queue; in flight: the thread cancels
 * it (its transfer dropped), and its end is waited for (the thread writes
 * into its buffer until then). */
static void s3_cancel(const struct source *s, struct io_req *q)
{
    static const int now = 1;
    if (__atomic_load_n(&q->state, __ATOMIC_ACQUIRE) == IO_S_IDLE)
        return;
    s3_wait(s, q, &now);
}

/* A waiter's stop flag was set (its stream went away): waiters look at
 * theirs again. */
static void s3_wake(const struct source *s)
{
    struct source_s3 *r = s->impl;
    pthread_mutex_lock(&r->lock);
    pthread_cond_broadcast(&r->done);
    pthread_mutex_unlock(&r->lock);
}

static int s3_read(const struct source *s, const struct index *ix, uint32_t sample,
                   uint64_t max_size, struct img *out, struct source_file *f, char *err,
                   size_t errlen)
{
    uint64_t want = ix->samples[sample].size;
    for (int round = 0; round < 2; round++) {
        if (want > max_size)
            want = max_size;
        int rc = img_reserve(out, want ? (size_t)want : 1);
        if (rc < 0) {
            snprintf(err, errlen, "no memory for %llu bytes", (unsigned long long)want);
            return rc;
        }
        struct io_req q = {0};
        s3_req(s, ix, sample, out->data, (size_t)want, &q);
        s3_submit(s, &q);
        ssize_t got = s3_wait(s, &q, NULL);
        if (got < 0) {
            s3_open_error(s, (int)got, err, errlen);
            return (int)got;
        }
        if (q.size > max_size) {
            snprintf(err, errlen, "object is %llu bytes, over the limit of %llu",
                     (unsigned long long)q.size, (unsigned long long)max_size);
            return -EFBIG;
        }
        if (q.size <= want) {
            out->fmt = IMG_ENCODED;
            out->len = (size_t)got;
            if (f)
                *f = (struct source_file){.fd = -1, .size = q.size, .mtime_ns = q.mtime_ns};
            return 0;
        }
        want = q.size; /* grew since indexing */
    }
    snprintf(err, errlen, "the object keeps growing while it is read");
    return -ESTALE;
}

static const struct stats_decl s3_decl[] = {SOURCE_REMOTE_STATS(STATS_DECL)};

static void s3_stats(const struct source *s, struct stats_out *o)
{
    struct source_s3 *r = s->impl;
    pthread_mutex_lock(&r->lock);
    struct objstore_stats st = r->snap;
    pthread_mutex_unlock(&r->lock);
    uint64_t v[] = {st.in_flight, st.queued, st.waiting, st.depth, st.requests, st.attempts,
                    st.retries, st.completed, st.failed, st.failed_http, st.failed_timeout,
                    st.failed_connect, st.failed_changed, st.cancelled, st.status_5xx, st.status_429, st.status_4xx, st.bytes,
                    st.bytes_per_s, st.lat_p50_us, st.lat_p99_us, st.lat_max_us,
                    __atomic_load_n(&r->reprobed, __ATOMIC_RELAXED)};
    stats_emit_u64(o, s3_decl, v, sizeof(v) / sizeof(v[0]));
}

static const struct source_ops s3_ops = {
    .close = s3_close,
    .open_error = s3_open_error,
    .open_file = s3_open_file,
    .req = s3_req,
    .read = s3_read,
    .submit = s3_submit,
    .wait = s3_wait,
    .kick = s3_kick,
    .wake = s3_wake,
    .cancel = s3_cancel,
    .stats = s3_stats,
};

static int s3_client(struct source_s3 *r, const struct config_dataset *cfg, char *err,
                     size_t errlen);
static int s3_start(struct source *s, struct source_s3 *r, const struct config_dataset *cfg,
                    char *err, size_t errlen);

static struct source_s3 *s3_alloc(const struct config_dataset *cfg)
{
    struct source_s3 *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->root = cfg->root;
    r->name = cfg->name;
    r->window = cfg->source.index_window ? cfg->source.index_window : S3_WINDOW;
    r->efd = -1;
    r->pending_tail = &r->pending;
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->done, NULL);
    return r;
}

int source_s3_new(struct source *s, const struct config_dataset *cfg, struct index *ix,
                  char *err, size_t errlen)
{
    struct source_s3 *r = s3_alloc(cfg);
    int rc;

    if (!r) {
        snprintf(err, errlen, "dataset '%s': out of memory", cfg->name);
        return -ENOMEM;
    }
    r->http = s->kind == SOURCE_HTTP;
    const char *b = cfg->root + (r->http ? strcspn(cfg->root, ":") + 3 : 5);
    const char *slash = strchr(b, '/');
    size_t blen = slash ? (size_t)(slash - b) : strlen(b);
    const char *p = slash ? slash + 1 : "";
    size_t plen = strlen(p);
    r->bucket = strndup(b, blen);
    r->prefix = malloc(plen + 2);
    if (!r->bucket || !r->prefix) {
        snprintf(err, errlen, "dataset '%s': out of memory", cfg->name);
        s3_free(r);
        return -ENOMEM;
    }
    snprintf(r->prefix, plen + 2, "%s%s", p, plen && p[plen - 1] != '/' ? "/" : "");
    snprintf(r->origin, sizeof(r->origin), "%.*s", (int)(b - cfg->root + blen), cfg->root);
    if (r->http && (!slash || !source_name_ends(cfg->root, ".tar"))) {
        snprintf(err, errlen, "dataset '%s': root %s: an http(s):// root names tar shards "
                 "(URL.tar, or a brace pattern of them)", cfg->name, cfg->root);
        s3_free(r);
        return -EINVAL;
    }
    if (!r->http && (blen == 0 || blen > 63 ||
                     strspn(r->bucket, "abcdefghijklmnopqrstuvwxyz0123456789.-") != blen)) {
        snprintf(err, errlen, "dataset '%s': root %s: not s3://BUCKET/PREFIX (a bucket name is "
                 "3 to 63 lowercase letters, digits, '.' and '-')", cfg->name, cfg->root);
        s3_free(r);
        return -EINVAL;
    }
    if ((rc = s3_client(r, cfg, err, errlen)) < 0) {
        s3_free(r);
        return rc;
    }
    if ((rc = slash && source_name_ends(cfg->root, ".tar")
                  ? s3_index_shards(r, cfg, ix, err, errlen)
                                                  : s3_index(r, cfg, ix, err, errlen)) < 0) {
        s3_free(r);
        return rc;
    }
    return s3_start(s, r, cfg, err, errlen);
}

/* r's objstore (r->base's), with the dataset's credentials (none for
 * http). 0 or -errno with a message. */
static int s3_client(struct source_s3 *r, const struct config_dataset *cfg, char *err,
                     size_t errlen)
{
    const struct config_source *cs = &cfg->source;
    struct creds c;
    char why[2048];
    int rc;
    if (r->http)
        memset(&c, 0, sizeof(c)); /* plain HTTP: no credentials */
    else if ((rc = creds_get(cs, &c, why, sizeof(why))) < 0) {
        snprintf(err, errlen, "dataset '%s': root %s: %s", cfg->name, cfg->root, why);
        creds_wipe(&c);
        return rc;
    }
    struct objstore_config oc = {
        .s3 = !r->http,
        .endpoint = r->http ? NULL : cs->endpoint,
        .region = cs->region,
        .access_key = r->http ? NULL : c.ak,
        .secret_key = r->http ? NULL : c.sk,
        .session_token = c.token[0] ? c.token : NULL,
        .depth = cs->depth,
        .retries = cs->retries,
        .timeout_ms = cs->timeout_ms,
        .connect_timeout_ms = cs->connect_timeout_ms,
        /* A larger object is refused, not downloaded; never under what a
         * listing page of 1000 long keys takes. */
        .max_bytes = cs->max_bytes > S3_LIST_PAGE_MAX ? cs->max_bytes : S3_LIST_PAGE_MAX,
    };
    if (!(r->base = event_base_new())) {
        rc = -ENOMEM;
        snprintf(why, sizeof(why), "cannot make an event loop");
    } else {
        rc = objstore_new(r->base, &oc, &r->os, why, sizeof(why));
    }
    creds_wipe(&c);
    explicit_bzero(&oc, sizeof(oc));
    if (rc < 0)
        snprintf(err, errlen, "dataset '%s': root %s: %s", cfg->name, cfg->root, why);
    return rc;
}

/* The source's thread (r indexed): s serves through it from now on.
 * Frees r on failure. */
static int s3_start(struct source *s, struct source_s3 *r, const struct config_dataset *cfg,
                    char *err, size_t errlen)
{
    int rc = 0;
    struct timeval tv = {0, S3_SNAPSHOT_MS * 1000};
    r->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (r->efd >= 0)
        r->wake = event_new(r->base, r->efd, EV_READ | EV_PERSIST, on_wake, r);
    r->tick = event_new(r->base, -1, EV_PERSIST, on_tick, r);
    snapshot(r); /* before the thread owns the loop: the listing's counts */
    if (r->efd < 0 || !r->wake || !r->tick || event_add(r->wake, NULL) < 0 ||
        event_add(r->tick, &tv) < 0 ||
        (rc = pthread_create(&r->thread, NULL, s3_thread, r)) != 0) {
        snprintf(err, errlen, "dataset '%s': root %s: cannot start its reader: %s", cfg->name,
                 cfg->root, strerror(rc > 0 ? rc : ENOMEM));
        s3_free(r);
        return rc > 0 ? -rc : -ENOMEM;
    }
    r->running = 1;
    s->ops = &s3_ops;
    s->impl = r;
    return 0;
}

/* ---- a manifest of URLs ---- */

/* Lists every directory (key up to its last '/') the keys lie in, merged
 * into *objs sorted by key. 0 or -errno with a message. */
static int list_dirs(struct source_s3 *r, const struct config_dataset *cfg,
                     const char *const *keys, size_t n, struct s3xml_object **objs,
                     size_t *nobjs, unsigned *listings, char *err, size_t errlen)
{
    char **dirs = calloc(n ? n : 1, sizeof(*dirs));
    size_t nd = 0;
    int rc = dirs ? 0 : -ENOMEM;
    *objs = NULL;
    *nobjs = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const char *slash = strrchr(keys[i], '/');
        size_t len = slash ? (size_t)(slash - keys[i]) + 1 : 0;
        if (nd && strlen(dirs[nd - 1]) == len && strncmp(dirs[nd - 1], keys[i], len) == 0)
            continue; /* rows of one directory usually come together */
        int seen = 0;
        for (size_t k = 0; k < nd && !seen; k++)
            seen = strlen(dirs[k]) == len && strncmp(dirs[k], keys[i], len) == 0;
        if (!seen && !(dirs[nd++] = strndup(keys[i], len)))
            rc = -ENOMEM;
    }
    for (size_t k = 0; k < nd && rc == 0; k++) {
        struct list_wait w = {.base = r->base};
        if ((rc = objstore_list(r->os, r->bucket, dirs[k], cfg->source.page_keys, list_done,
                                &w)) < 0)
            break;
        while (!w.done)
            if (event_base_loop(r->base, EVLOOP_ONCE) < 0)
                break;
        if (!w.done || w.rc < 0) {
            rc = w.done ? w.rc : -EIO;
            snprintf(err, errlen, "dataset '%s': root %s: cannot list s3://%s/%s: %s",
                     cfg->name, cfg->root, r->bucket, dirs[k],
                     w.done ? w.msg : "the event loop failed");
            break;
        }
        (*listings)++;
        struct s3xml_object *grown =
            realloc(*objs, (*nobjs + w.listing.n + 1) * sizeof(**objs));
        if (!grown) {
            rc = -ENOMEM;
        } else {
            *objs = grown;
            memcpy(*objs + *nobjs, w.listing.objects, w.listing.n * sizeof(**objs));
            *nobjs += w.listing.n;
            w.listing.n = 0; /* the keys are *objs' now */
        }
        objstore_listing_free(&w.listing);
    }
    for (size_t k = 0; k < nd; k++)
        free(dirs[k]);
    free(dirs);
    if (rc == -ENOMEM)
        snprintf(err, errlen, "dataset '%s': out of memory", cfg->name);
    else if (rc < 0 && !err[0])
        snprintf(err, errlen, "dataset '%s': root %s: cannot list: %s", cfg->name, cfg->root,
                 strerror(-rc));
    if (rc == 0 && *nobjs)
        qsort(*objs, *nobjs, sizeof(**objs), cmp_obj_key);
    return rc;
}

/* The rows' kind: "s3://BUCKET/KEY" rows of one bucket, or http(s) URLs;
 * r->http and r->bucket set from the first, every other row checked
 * (FILE:LINE). keys[i]: the row's key in the bucket, or its URL. */
static int rows_check(struct source_s3 *r, const struct config_dataset *cfg,
                      const struct manifest *m, const char **keys, char *err, size_t errlen)
{
    size_t n = manifest_count(m);
    for (size_t i = 0; i < n; i++) {
        const char *u = manifest_path(m, i);
        int http = strncmp(u, "s3://", 5) != 0;
        const char *why = NULL;
        if (i == 0) {
            r->http = http;
            if (!http) {
                size_t blen = strcspn(u + 5, "/");
                if (!(r->bucket = strndup(u + 5, blen)))
                    return -ENOMEM;
                snprintf(r->origin, sizeof(r->origin), "s3://%s", r->bucket);
            } else {
                const char *h = u + strcspn(u, ":") + 3;
                snprintf(r->origin, sizeof(r->origin), "%.*s", (int)(h - u + strcspn(h, "/")),
                         u);
            }
        }
        if (http != r->http) {
            why = "the rows are all s3:// URLs or all http(s):// ones";
        } else if (!http) {
            size_t blen = strlen(r->bucket);
            if (strncmp(u + 5, r->bucket, blen) != 0 || u[5 + blen] != '/')
                why = "another bucket than the first row's (one bucket a dataset)";
            else if (!u[6 + blen])
                why = "no key after the bucket";
            keys[i] = u + 6 + blen;
        } else {
            keys[i] = u;
        }
        if (why) {
            snprintf(err, errlen, "dataset '%s': %s:%llu: %s: %s", cfg->name, cfg->root,
                     (unsigned long long)manifest_line(m, i), u, why);
            return -EINVAL;
        }
    }
    return 0;
}

int source_s3_rows_new(struct source *s, const struct config_dataset *cfg,
                       const struct manifest *m, struct index *ix, char *err, size_t errlen)
{
    size_t n = manifest_count(m);
    struct source_s3 *r = s3_alloc(cfg);
    const char **keys = calloc(n ? n : 1, sizeof(*keys));
    struct probe_one *probes = NULL;
    struct s3xml_object *objs = NULL;
    size_t nobjs = 0;
    unsigned listings = 0;
    uint64_t missing = 0;
    uint32_t max_label = 0;
    int rc = r && keys ? 0 : -ENOMEM;
    err[0] = 0;
    if (rc == 0 && (r->prefix = strdup("")) == NULL)
        rc = -ENOMEM;
    if (rc == 0)
        rc = rows_check(r, cfg, m, keys, err, errlen);
    if (rc == 0)
        rc = s3_client(r, cfg, err, errlen);
    size_t nprobes = 0, ncached = 0, nnamed = 0;
    struct probecache *pc = NULL;
    /* each row's version: 'n' named by the row, 'c' from the probe
     * cache, 'p' probed */
    char *how_known = calloc(n ? n : 1, 1);
    if (rc == 0 && !how_known)
        rc = -ENOMEM;
    if (rc == 0 && r->http) { /* no listing: each URL probed, all at once, but those
                                 whose row names its size and ETag and those the
                                 probe cache knows */
        struct stat mst;
        const char **ask = calloc(n ? n : 1, sizeof(*ask));
        probes = calloc(n ? n : 1, sizeof(*probes));
        r->pins = calloc(n ? n : 1, sizeof(*r->pins));
        rc = ask && probes && r->pins ? 0 : -ENOMEM;
        if (rc == 0 && cfg->source.cache_dir[0] && stat(cfg->root, &mst) == 0) {
            r->cache_dir = cfg->source.cache_dir;
            r->probe_id = (struct probecache_id){cfg->root, (uint64_t)mst.st_size,
                                                 (int64_t)mst.st_mtim.tv_sec * 1000000000 +
                                                     mst.st_mtim.tv_nsec};
            if (probecache_load(r->cache_dir, &r->probe_id, &pc) == -ENOMEM)
                rc = -ENOMEM;
        }
        for (size_t i = 0; i < n && rc == 0; i++) {
            uint64_t size;
            const char *etag;
            const struct probecache_entry *ce = NULL;
            int named = manifest_pinned(m, i, &size, &etag);
            if (!named && !(ce = probecache_find(pc, keys[i]))) {
                how_known[i] = 'p';
                ask[nprobes++] = keys[i];
                continue;
            }
            how_known[i] = named ? 'n' : 'c';
            nnamed += named;
            ncached += !named;
            struct row_pin *p = &r->pins[r->npins++];
            p->row = (uint32_t)i;
            p->etag = strdup(named ? etag : ce->etag);
            p->size = named ? size : ce->size;
            p->named = named;
            rc = p->etag ? 0 : -ENOMEM;
        }
        if (rc == 0)
            rc = probe_many(r, ask, nprobes, probes);
        for (size_t i = 0, k = 0; i < n && rc == 0; i++) { /* the probed rows' versions */
            if (how_known[i] != 'p')
                continue;
            const struct probe_one *pr = &probes[k++];
            if (pr->rc < 0 || !pr->etag[0])
                continue;
            struct row_pin *p = &r->pins[r->npins++];
            p->row = (uint32_t)i;
            p->etag = strdup(pr->etag);
            p->size = pr->size;
            rc = p->etag ? 0 : -ENOMEM;
        }
        free(ask);
    } else if (rc == 0) {
        rc = list_dirs(r, cfg, keys, n, &objs, &nobjs, &listings, err, errlen);
    }
    for (uint32_t c = 0; c < manifest_nclasses(m) && rc == 0; c++) {
        char *name = strdup(manifest_class(m, c));
        rc = name ? index_add_class(ix, name) : -ENOMEM;
    }
    size_t failed_connect = 0, asked = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        uint64_t size = 0;
        const char *etag = "";
        const char *why = "no such key";
        if (how_known[i] == 'n') {
            manifest_pinned(m, i, &size, &etag);
            why = NULL; /* the row's own: not asked */
        } else if (how_known[i] == 'c') {
            const struct probecache_entry *ce = probecache_find(pc, keys[i]);
            size = ce->size;
            etag = ce->etag;
            why = NULL; /* the probe cache's: not asked */
        } else if (probes) {
            const struct probe_one *pr = &probes[asked++];
            if (pr->rc == 0) {
                size = pr->size;
                etag = pr->etag;
                why = NULL;
            } else {
                why = pr->msg;
                failed_connect += pr->rc == -ECONNREFUSED || pr->rc == -ECONNRESET ||
                                  pr->rc == -ETIMEDOUT || pr->rc == -EHOSTUNREACH;
            }
        } else {
            struct s3xml_object key = {.key = (char *)keys[i]};
            const struct s3xml_object *o =
                nobjs ? bsearch(&key, objs, nobjs, sizeof(*objs), cmp_obj_key) : NULL;
            if (o) {
                size = o->size;
                etag = o->etag;
                why = NULL;
            }
        }
        if (why && missing++ < 5)
            log_warn("dataset '%s': %s:%llu: %s: %s (a bad sample when read)", cfg->name,
                     cfg->root, (unsigned long long)manifest_line(m, i), manifest_path(m, i),
                     why);
        uint32_t label = manifest_label(m, i);
        if (label > max_label)
            max_label = label;
        rc = index_add_sample(ix, keys[i], label, size, etag_id(etag));
    }
    if (rc == 0 && nprobes && failed_connect == nprobes) { /* nothing reached: not there */
        rc = -ECONNREFUSED;
        snprintf(err, errlen, "dataset '%s': root %s: no URL could be read: %s", cfg->name,
                 cfg->root, probes[0].msg);
    }
    if (rc == 0 && manifest_nclasses(m) == 0)
        rc = source_int_classes(ix, max_label + 1);
    if (rc == 0)
        rc = index_finish(ix);
    if (rc == 0 && r->npins) { /* the rows' pins found by their paths now fixed */
        for (size_t k = 0; k < r->npins; k++)
            r->pins[k].url = index_path(ix, r->pins[k].row);
        qsort(r->pins, r->npins, sizeof(*r->pins), cmp_pin);
        if (nprobes && r->cache_dir)
            pins_save(r);
    }
    if (rc < 0 && !err[0])
        snprintf(err, errlen, "dataset '%s': indexing %s: %s", cfg->name, cfg->root,
                 rc == -E2BIG ? SOURCE_INT_CLASSES_MSG : strerror(-rc));
    if (rc == 0) {
        char how[128];
        if (r->http && (nnamed || ncached))
            snprintf(how, sizeof(how), "%zu probes, %zu from the probe cache, %zu rows naming "
                     "their version", nprobes, ncached, nnamed);
        else if (r->http)
            snprintf(how, sizeof(how), "%zu probes", nprobes);
        else
            snprintf(how, sizeof(how), "%u listings", listings);
        log_info("dataset '%s': %u samples in %u classes from the manifest %s (URLs of %s; "
                 "%s)%s", cfg->name, ix->n, ix->nclasses, cfg->root, r->origin, how,
                 missing ? "; some objects missing: see above" : "");
    }
    free(probes);
    free(how_known);
    probecache_free(pc);
    for (size_t k = 0; k < nobjs; k++)
        free(objs[k].key);
    free(objs);
    free(keys);
    if (rc < 0) {
        if (r)
            s3_free(r);
        return rc;
    }
    /* keys point into m; the index keeps its own copies */
    return s3_start(s, r, cfg, err, errlen);
}
