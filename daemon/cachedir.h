/*
 * The cache directory (cache.dir) and what the daemon keeps in it: the disk
 * tier's segments and its flock (store.h), the profiler's trial
 * directories and its records of split: auto choices (profile.h).
 *
 * cache.dir is trusted only when no one but the daemon's user and root can
 * change it (trust.h): it belongs to the daemon's effective uid and is not
 * writable by its group or others, and every directory on the way belongs
 * to root or that user and is not writable by others unless sticky (/tmp).
 * An untrusted cache.dir stops prestod at start-up where it would be used
 * (cache.disk > 0, or a split: auto dataset; prestod --check-config says
 * the same), and fails a profile asked for later; an unusable one (not a
 * directory, cannot be created) leaves the daemon caching in memory only,
 * as before.
 *
 * Everything under it is reached from the directory's descriptor, by name:
 * files are opened with O_NOFOLLOW and must be regular files of the
 * daemon's user with a single link (a planted link, symbolic or hard, is
 * refused, never followed: its target is neither read, written nor
 * truncated); removal is unlinkat() on names, and a trial directory is
 * emptied one level deep, never recursively, so a link is removed itself,
 * never what it points to.
 */
#ifndef PRESTO_CACHEDIR_H
#define PRESTO_CACHEDIR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The directory path (created, mode 0750, when create and missing) after
 * the checks above: an O_RDONLY descriptor, or a negative errno with
 * "cache.dir PATH: why" in err: -EPERM when it is not trusted, -ENOENT when
 * missing (not create), or what the file system said. */
int cachedir_open(const char *path, int create, char *err, size_t errlen);
/* What start-up and --check-config ask: 0 when path is trusted or missing
 * under trusted directories (it will be made), -EPERM with the reason
 * otherwise; other errors (unusable) are left to the disk tier: 0. */
int cachedir_check(const char *path, char *err, size_t errlen);
/* openat(dir, name, flags | O_NOFOLLOW | O_CLOEXEC, mode), then a regular
 * file of the daemon's user with one link, or refused: the descriptor, or
 * -ELOOP (a symbolic link), -EINVAL (not a regular file), -EPERM (another
 * owner, or hard links), or the errno of the open. */
int cachedir_open_file(int dir, const char *name, int flags, mode_t mode);
/* Removes the directory name of dir and the files in it, by name (a
 * link is removed, not followed; a subdirectory is left, and so is the
 * directory then): 0. A name that is not a directory (a symbolic link to
 * one included) is removed itself: 1. Else a negative errno. */
int cachedir_remove_dir(int dir, const char *name);

/* A small file of the daemon's own in cache.dir (shard member lists,
 * probe caches), keyed: what it is (magic, format), what it describes (a
 * locator: a path or URL) and that thing's version (size, version), then
 * count records in a body. The file is
 *     magic (8 bytes), u32 format, u32 locator_len, u64 size, u64 version,
 *     u64 count, u64 body_len, the locator, the body, u64 XXH64 of it all
 * (host byte order: this machine's cache), written whole under a
 * temporary name of this process's and renamed over its name, so a reader
 * never sees half a file. Its name is PREFIX-XXXXXXXXXXXXXXXX.idx, the
 * XXH64 of the locator (cachedir_blob_name). */
struct cachedir_key {
    const char *prefix; /* of the file's name: "shard", "probes" */
    const char *magic;  /* 8 bytes */
    uint32_t format;
    const char *locator;
    uint64_t size, version;
};
/* key's file name (at most 40 bytes and the NUL). */
void cachedir_blob_name(const struct cachedir_key *key, char *buf, size_t len);
/* key's body when the file's key equals it, its sum matches and it is at most
 * max bytes: 0 with *file (malloc'ed: the caller frees it), *body (in it),
 * *len and *count; -ENOENT when there is none, it is another key's, torn
 * or corrupt, or cache.dir is not usable; -ENOMEM. */
int cachedir_load_blob(const char *path, const struct cachedir_key *key, size_t max, unsigned char **file, const unsigned char **body,
                       size_t *len, uint64_t *count);
/* Keeps body (len bytes, count records) under key. 0 or -errno
 * (nothing left behind on failure). */
int cachedir_save_blob(const char *path, const struct cachedir_key *key, uint64_t count,
                       const void *body, size_t len);

#endif
