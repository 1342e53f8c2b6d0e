/*
 * The probe cache of a manifest of http(s):// URL rows (source_s3.c): what
 * each row's object was when it was last asked (its size and its ETag; a
 * row whose server gives no ETag is not kept, and is probed at every
 * start), kept in cache.dir so that a restart indexes the rows without a
 * request.
 *
 * The file is cache.dir/probes-XXXXXXXXXXXXXXXX.idx (XXH64 of the
 * manifest's path); it holds the manifest's path, its size and mtime when
 * the entries were written, and the entries by URL, with an XXH64 of the
 * whole (cachedir_save_blob). It is used only when the path, size and
 * mtime all match: an edited manifest (or one touched: `touch` is how an
 * operator asks for every row to be probed again) is a miss for every row,
 * a URL not in it a miss for that row. A torn or corrupt file, one of
 * another manifest under a colliding name, an unusable cache.dir: no
 * entries, never an error.
 *
 * An entry is a hint, not a promise: the source reads each row with
 * If-Match of the ETag it indexed, and an object replaced since (412) is
 * asked again, that row only, and the cache rewritten.
 *
 * Errors: -errno.
 */
#ifndef PRESTO_PROBECACHE_H
#define PRESTO_PROBECACHE_H

#include <stddef.h>
#include <stdint.h>

struct probecache;

/* The manifest the entries belong to. */
struct probecache_id {
    const char *manifest; /* its path */
    uint64_t size;
    int64_t mtime_ns;
};

struct probecache_entry {
    const char *url, *etag;
    uint64_t size;
};

/* The entries of id from cache_dir: 0 with *out, -ENOENT when there are
 * none (a miss, see above), -ENOMEM. */
int probecache_load(const char *cache_dir, const struct probecache_id *id,
                    struct probecache **out);
/* NULL is fine. */
void probecache_free(struct probecache *pc);
/* url's entry (valid while pc lives), or NULL. */
const struct probecache_entry *probecache_find(const struct probecache *pc, const char *url);
/* Keeps e[0..n) as id's entries (replacing what was there). 0 or -errno. */
int probecache_save(const char *cache_dir, const struct probecache_id *id,
                    const struct probecache_entry *e, size_t n);

#endif
