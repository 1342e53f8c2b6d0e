/*
 * A tar shard's member list, kept in cache.dir so that a restart does not
 * read the shard again to index it (source_tar.c).
 *
 * What is kept is what the tar reader (tar.h) gave the WebDataset grouping
 * (wds.h) while it walked the shard: every entry in archive order (type,
 * name, data offset and size) and the data of the entries wds wanted (the
 * .cls labels). Replaying them into a fresh wds gives the samples, labels
 * and counts a walk of the shard gives, exactly.
 *
 * A shard is known by its locator (its path, or its URL) and its identity:
 * its size and a version, the mtime in nanoseconds of a local file or the
 * XXH64 of a remote object's ETag. The file is
 * cache.dir/shard-XXXXXXXXXXXXXXXX.idx (XXH64 of the locator); it holds the
 * locator, the identity and an XXH64 of its whole content, and is used only
 * when all of them match and every entry lies inside the shard: a shard
 * rewritten (another size or version), a torn or corrupt file, a file of
 * another shard under a colliding name are all "none", and the shard is
 * read again and its file replaced (written under a temporary name, then
 * renamed over the old one, so a reader never sees half a file).
 *
 * Files under cache.dir are opened as cachedir.h opens them (by name from
 * the directory's descriptor, no links, the daemon's own regular files);
 * an untrusted or unusable cache.dir means no shard index, never an error.
 *
 * Errors: -errno.
 */
#ifndef PRESTO_SHARDIDX_H
#define PRESTO_SHARDIDX_H

#include <stddef.h>
#include <stdint.h>

#include "tar.h"

struct shardidx;

struct shardidx_id {
    const char *locator; /* the shard's path or URL */
    uint64_t size;       /* bytes */
    uint64_t version;    /* mtime_ns (local) or XXH64 of the ETag (remote) */
};

struct shardidx *shardidx_new(void);
void shardidx_free(struct shardidx *x);

/* Records an entry the tar reader returned: a header (e->data NULL) is a
 * new entry, an entry with data is the data of the last header recorded.
 * 0, -ENOMEM, or -EINVAL (data with no header before it). */
int shardidx_add(struct shardidx *x, const struct tar_entry *e);

size_t shardidx_count(const struct shardidx *x);
/* Entry i as a header (data NULL) in *e; *data and *data_len its recorded
 * data (NULL, 0 when none). Valid while x lives. */
void shardidx_entry(const struct shardidx *x, size_t i, struct tar_entry *e,
                    const uint8_t **data, size_t *data_len);

/* The name of locator's file in cache.dir ("shard-%016llx.idx"; 24 bytes
 * and the NUL). */
void shardidx_file_name(const char *locator, char *buf, size_t len);

/* The member list of the shard id from cache_dir: 0 with *out, -ENOENT
 * when there is none that matches id (or it is corrupt, or cache.dir is
 * not usable), another -errno on failure. */
int shardidx_load(const char *cache_dir, const struct shardidx_id *id, struct shardidx **out);
/* Keeps x as the member list of the shard id in cache_dir. 0 or -errno
 * (nothing is left behind on failure). */
int shardidx_save(const char *cache_dir, const struct shardidx_id *id, const struct shardidx *x);

#endif
