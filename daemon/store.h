/*
 * The disk tier: materialized samples (the output of a dataset's offline
 * steps) in append-only segment files under one directory (cache.dir).
 *
 * On disk there is nothing but the segments, seg-NNNNNN.dat (the number
 * grows by one per new segment; at least six digits). The index lives in
 * memory and is rebuilt at store_open() by reading every segment in order
 * and verifying every record, so a crash, a torn write or a flipped bit can
 * never make the store serve wrong bytes. A process holds the directory
 * with flock(2) on the directory itself; a second store_open() of the same
 * directory fails with -EBUSY.
 *
 * Record format, version 2. All integers little-endian (the host order on
 * every supported target; a big-endian host sees bad magic and rebuilds).
 * Records start at 8-byte aligned offsets; a segment is a sequence of
 * records and nothing else.
 *
 *   off size field
 *     0   4  magic        "PSR1" (0x31525350)
 *     4   2  version      1, or 2 when rate is not 0
 *     6   1  encoding     STORE_ENC_RAW (0) or STORE_ENC_ZSTD (1)
 *     7   1  reserved     0
 *     8   4  hdr_crc      CRC32C of the 88 header bytes with hdr_crc = 0
 *    12   4  data_crc     CRC32C of the stored_len payload bytes
 *    16   8  dataset      \
 *    24   8  path          |
 *    32   8  fingerprint   | struct store_key
 *    40   8  src_size      |
 *    48   8  src_mtime_ns /
 *    56   4  raw_len      bytes of the image (h * w * c * dtype size)
 *    60   4  stored_len   payload bytes (== raw_len when raw)
 *    64   4  h
 *    68   4  w
 *    72   4  c
 *    76   4  dtype        PROTO_DTYPE_*
 *    80   4  rate         an audio clip's sample rate (img.rate), else 0
 *                         (version 1: reserved, 0)
 *    84   4  reserved     0
 *    88      payload (stored_len bytes), then zero padding to 8 bytes
 *
 * Versions. Version 2 added the rate (issue 18). A record without one (an
 * image) is still written as version 1, byte for byte what earlier daemons
 * wrote and read, so an image store goes back and forth between versions;
 * a record with a rate is version 2, and a version 1 daemon drops it as
 * damaged (it cannot know better). Both are read here. Later versions keep
 * magic, version and hdr_crc where they are: a header whose checksum holds
 * but whose version is after STORE_VERSION makes store_open fail
 * (-EPROTONOSUPPORT, naming the segment; the disk tier is then off), never
 * a segment truncated or a record dropped.
 *
 * The header has its own checksum so that a record whose payload is
 * damaged (but whose length is trustworthy) is dropped alone at recovery,
 * and the scan goes on with the next record. A bad header (magic, version,
 * hdr_crc, impossible lengths) or a record cut short by the end of the
 * file ends the scan of that segment: the newest segment is truncated
 * there (a torn tail after a crash), an older one keeps its ignored tail
 * as dead bytes until compaction rewrites it. Each damaged segment gets
 * one log line; stats count the records dropped and the bytes torn.
 * Records are never fsynced one by one: a crash loses at most the tail the
 * kernel had not written back, which recovery drops.
 *
 * Keys. A record matches a lookup only when all five key fields are equal:
 * a source file replaced (size or mtime changed) or offline steps changed
 * (fingerprint) simply never match again. Several records of one key may
 * exist; the newest (highest segment, then offset) wins and the others are
 * dead bytes. The dataset and path fields are hash_xxh64() of the
 * dataset name and of the sample's path relative to the dataset root.
 *
 * Encoding. store_put() with a zstd level compresses; when the result is
 * not smaller than the image the record is stored raw instead (reading it
 * back is then a copy, not a decompression).
 *
 * Reads. store_lookup() returns where the newest record of a key is (fd,
 * offset, length) and pins its segment; the caller reads the whole record
 * (batched with others through io_read_batch), calls store_release(), then
 * store_decode(), which checks magic, both checksums and the key again
 * (the index alone is never trusted) and decompresses. -EBADMSG from
 * store_decode means "recompute from the source and store_put() again":
 * the new record supersedes the bad one.
 *
 * Writes. store_put() may be called from any number of threads. It
 * compresses and checksums with no lock held, reserves space at the end of
 * the active segment under the store lock, writes with pwritev() with no
 * lock held (so writers proceed in parallel), and publishes the index
 * entry under the lock only once the write completed: a record is visible
 * only when fully written. A full segment is sealed (never written again)
 * and a new one started. A put that would take the store over its disk
 * budget is refused with -ENOSPC (counted; nothing is written). A failed
 * write (ENOSPC, EIO, EROFS, EDQUOT, EFBIG, ...) puts the store in
 * degraded mode: logged once, store_degraded() returns the errno and every
 * later put returns it at once; lookups of records already written go on
 * working. The daemon then caches in memory only.
 *
 * Dead bytes and compaction. Bytes of superseded records, of records
 * dropped at recovery, of ignored tails and of records whose key is no
 * longer live are dead. store_compact() first asks is_live() about every
 * indexed key (with no store lock held) and forgets those that are not
 * live, then rewrites every sealed segment whose dead fraction is at least
 * STORE_COMPACT_DEAD_PCT: its live records are copied, verbatim, to the
 * active segment, the index is pointed at the copies, the copies are
 * fdatasync()ed, and the old file is unlinked. The active segment is
 * sealed first when it qualifies itself. Compaction writes are not held to
 * the budget (they need at most the live bytes of one segment beyond it,
 * and free more than they take). Forgetting a key is done in memory only:
 * its records that compaction did not rewrite are indexed again by the
 * next store_open() and forgotten again by the next store_compact(); as
 * nobody looks a dead key up (its size, mtime or fingerprint is no longer
 * current), that costs disk space, never correctness. The daemon runs
 * store_compact() after start-up and whenever bytes_dead grows large or
 * puts are refused for the budget.
 *
 * Segment lifetime (lookups racing with compaction): each segment has a
 * reference count, taken by store_lookup() and dropped by store_release(),
 * and a writer count for puts writing outside the lock. Compaction unlinks
 * a rewritten segment's file at once but closes its fd only when both
 * counts are zero, so a reader holding a store_loc always reads the
 * (unchanged) bytes it was pointed at; the space is freed at that close.
 * A segment with writers in progress is never compacted.
 *
 * Lock order (outer first):
 *   1. compact_lock  serializes store_compact(); held through one run
 *   2. lock          index, segment table, accounting, counters
 *   3. zlock         the pool of zstd contexts; a leaf
 * No file I/O is done under `lock` except creating a segment (open) and
 * unlinking/closing a compacted one. is_live() is called with no lock but
 * compact_lock held, so it must not call store_compact().
 */
#ifndef PRESTO_STORE_H
#define PRESTO_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "img.h"

#define STORE_MAGIC 0x31525350u /* "PSR1" */
#define STORE_VERSION 2u
#define STORE_HEADER_SIZE 88u
#define STORE_ALIGN 8u
#define STORE_DEFAULT_SEGMENT_SIZE (256ull << 20)
#define STORE_MIN_SEGMENT_SIZE (64ull << 10)
/* A record (header, payload, padding) is at most this, and at most the
 * segment size once compressed; a larger one is refused with -EFBIG. */
#define STORE_MAX_RECORD (1ull << 30)
#define STORE_COMPACT_DEAD_PCT 50u

enum store_encoding { STORE_ENC_RAW = 0, STORE_ENC_ZSTD = 1 };

struct store_key {
    uint64_t dataset;     /* hash_xxh64 of the dataset name */
    uint64_t path;        /* hash_xxh64 of the sample's path relative to the root */
    uint64_t fingerprint; /* of the offline steps and their parameters */
    uint64_t src_size;    /* of the source file, bytes */
    int64_t src_mtime_ns; /* of the source file */
};

/* Where a record is. fd, off and len are what to read (the whole record);
 * the rest describes it. Valid until store_release(). */
struct store_loc {
    int fd;
    int dfd;             /* the same file opened O_DIRECT (store_direct_io),
                            or -1: reads through it must be aligned to
                            STORE_DIRECT_ALIGN (offset, length, buffer) */
    uint64_t off;
    uint32_t len;        /* header + payload + padding */
    uint32_t raw_len;    /* bytes of the decoded image */
    uint32_t stored_len; /* payload bytes */
    uint32_t h, w, c, dtype;
    enum store_encoding encoding;
    struct store_seg *seg; /* internal: the pinned segment */
};

struct store_stats {
    uint64_t budget;        /* disk budget, bytes (0: none) */
    uint64_t segment_size;
    uint64_t segments;      /* files, the active one included */
    uint64_t records;       /* indexed (live) records */
    uint64_t bytes_disk;    /* sum of segment file sizes */
    uint64_t bytes_live;    /* of indexed records (whole records) */
    uint64_t bytes_dead;    /* superseded, dropped, forgotten, ignored tails */
    uint64_t bytes_raw;     /* decoded size of the indexed records */
    uint64_t bytes_stored;  /* payload size of the indexed records */
    uint64_t index_bytes;   /* memory held by the index */
    uint64_t lookups, hits; /* store_lookup calls and finds */
    uint64_t decode_errors; /* store_decode -EBADMSG */
    uint64_t puts;          /* records written */
    uint64_t put_budget;    /* puts refused: over the disk budget */
    uint64_t put_too_large; /* puts refused: record over a segment */
    uint64_t put_io;        /* puts failed: write error or degraded */
    uint64_t put_other;     /* puts failed: bad image, no memory, zstd */
    uint64_t recovered;     /* records indexed by store_open */
    uint64_t dropped;       /* records dropped at store_open: corrupt or torn */
    uint64_t torn_bytes;    /* bytes cut or ignored at segment ends at store_open */
    uint64_t compactions;   /* segments rewritten */
    uint64_t compact_copied;/* bytes copied by compaction */
    uint64_t compact_freed; /* bytes of files deleted by compaction */
    int degraded;           /* errno of the write failure, 0 when healthy */
    int direct_io;          /* records are read with O_DIRECT */
    int write_behind;       /* written records leave the page cache (store.c write_behind) */
};

struct store;
struct store_seg;
struct stats_out;

/* What the store says in the stats document's "disk" section (the tiers
 * add theirs). "entries" is the family the memory tier's entries are in
 * too (presto_tier_entries). */
#define STORE_STATS(X)                                                                 \
    X(degraded, GAUGE, "", "1 when a write failed: the disk tier takes no more puts")   \
    X(degraded_reason, INFO, "", "the error that degraded the disk tier")              \
    X(direct_io, GAUGE, "", "1 when records are read with O_DIRECT (cache.direct_io)")  \
    X(write_behind, GAUGE, "", "1 when written records leave the page cache once on disk (read with O_DIRECT)") \
    X(budget, GAUGE, "bytes", "cache.disk, the disk tier's budget")                     \
    X(segment_size, GAUGE, "bytes", "cache.segment_size")                               \
    X(segments, GAUGE, "files", "segment files, the active one included")               \
    X(entries, GAUGE, "entries", "entries the tier holds")                              \
    X(bytes, GAUGE, "bytes", "bytes of the segment files")                              \
    X(bytes_live, GAUGE, "bytes", "bytes of the indexed records")                       \
    X(bytes_dead, GAUGE, "bytes", "bytes of superseded, dropped and forgotten records")  \
    X(bytes_raw, GAUGE, "bytes", "decoded bytes of the indexed records")               \
    X(bytes_stored, GAUGE, "bytes", "stored (payload) bytes of the indexed records")    \
    X(compression_ratio, GAUGE, "", "bytes_raw over bytes_stored")                      \
    X(decode_errors, COUNTER, "records", "records read back that failed their checks")  \
    X(puts, COUNTER, "records", "records written")                                     \
    X(put_refused_budget, COUNTER, "records", "puts refused: over the disk budget")     \
    X(put_too_large, COUNTER, "records", "puts refused: a record larger than a segment") \
    X(put_failed, COUNTER, "records", "puts failed: a write error, no memory or zstd")   \
    X(recovered, COUNTER, "records", "records indexed at start-up")                    \
    X(dropped, COUNTER, "records", "records dropped at start-up: corrupt or torn")      \
    X(torn_bytes, COUNTER, "bytes", "bytes cut or ignored at segment ends at start-up") \
    X(compactions, COUNTER, "segments", "segments rewritten by compaction")             \
    X(compact_copied, COUNTER, "bytes", "bytes copied by compaction")                   \
    X(compact_freed, COUNTER, "bytes", "bytes of files deleted by compaction")
/* The fields of STORE_STATS (zero when st is NULL: no disk tier). */
void store_stats_emit(struct store *st, struct stats_out *o);

/* Opens (creating with mode 0750, parents included) the store in dir and
 * rebuilds its index. disk_budget: bytes the segment files may take (0: no
 * limit). segment_size: 0 for STORE_DEFAULT_SEGMENT_SIZE, at least
 * STORE_MIN_SEGMENT_SIZE. Returns 0, or a negative errno with a message in
 * err (-EBUSY: another process has the directory open). */
int store_open(struct store **out, const char *dir, uint64_t disk_budget,
               uint64_t segment_size, char *err, size_t errlen);
/* No other call may be in progress, and no store_loc outstanding. NULL is fine. */
void store_close(struct store *st);

/* Reads with O_DIRECT (cache.direct_io): every segment, and every one made
 * from now on, gets a second descriptor opened O_DIRECT, given in
 * store_loc.dfd, so record reads bypass the page cache (which a disk tier
 * larger than memory only churns). Right after store_open, before other
 * calls. Returns 0, or -errno (-EINVAL: the file system refuses O_DIRECT)
 * and the store reads through the page cache as before. */
#define STORE_DIRECT_ALIGN 4096u
int store_direct_io(struct store *st);

/* Appends a record of im (IMG_PIXELS) under key; zstd_level 0 stores raw,
 * anything else is a zstd level (negative: zstd's fast levels). Thread-safe.
 * Returns 0, or -EINVAL (not pixels, shape and length disagree),
 * -EFBIG (the record, compressed, over the segment size), -ENOSPC (over the disk budget:
 * nothing written, the store stays healthy), -ENOMEM, or the degraded
 * errno (the write failed, now or before). */
int store_put(struct store *st, const struct store_key *key, const struct img *im,
              int zstd_level);

/* The record store_put would write for im under key (header and payload,
 * without the padding), built into *buf (grown with realloc; *cap is its
 * size) for a tier that keeps records elsewhere (the cluster tier). st
 * lends its zstd contexts; NULL (no disk tier) uses one for this call.
 * Returns the record's length, or -EINVAL, -EFBIG, -ENOMEM. Thread-safe. */
ssize_t store_encode(struct store *st, const struct store_key *key, const struct img *im,
                     int zstd_level, uint8_t **buf, size_t *cap);
/* store_decode's checks alone (magic, version, both checksums, the key
 * equal to key, the lengths), for records that come from elsewhere: 0, or
 * -EBADMSG. Thread-safe; counts nothing. */
int store_check(const struct store_key *key, const void *record, size_t len);

/* Finds the newest record of key and pins its segment. Returns 0, or
 * -ENOENT. Call store_release(st, loc) once the record has been read. */
int store_lookup(struct store *st, const struct store_key *key, struct store_loc *loc);
void store_release(struct store *st, struct store_loc *loc);

/* Verifies the record bytes read at a store_loc (magic, version, header and
 * payload checksums, key equal to key, lengths, len covering the record) and
 * decodes the image into out (grown with img_reserve; fmt, shape and len
 * set). Returns 0, -EBADMSG on any mismatch, or -ENOMEM. Thread-safe. st
 * may be NULL for a record from elsewhere (store_encode) with no disk
 * tier: nothing is counted then. */
int store_decode(struct store *st, const struct store_key *key, const void *record,
                 size_t len, struct img *out);
/* store_decode without the copy of a raw record: *view is set to a borrowed
 * image of the payload inside record (valid as long as record is) and out
 * is not touched; a compressed record is decoded into out, and *view is a
 * borrowed image of out. Same checks and returns. */
int store_decode_view(struct store *st, const struct store_key *key, const void *record,
                      size_t len, struct img *out, struct img *view);

/* store_decode_view's checks of a raw record but the payload's checksum,
 * for a caller that checks the payload while it copies it (one pass over
 * its bytes): *view is the payload in place, NOT yet to be trusted, and
 * *data_crc the CRC32C (hash_crc32c) it must have; a mismatch is the
 * caller's to count (store_count_bad) and its copy never to be used.
 * Returns 0, -EBADMSG (counted), or -EAGAIN for a compressed record
 * (nothing counted or set: decode it with store_decode_view). */
int store_view_unchecked(struct store *st, const struct store_key *key, const void *record,
                         size_t len, struct img *view, uint32_t *data_crc);
/* Counts a record that failed its checks elsewhere (decode_errors). */
void store_count_bad(struct store *st);

/* Returns 1 when key is still wanted (its dataset is served, its path
 * exists with that size and mtime, the fingerprint is current). */
typedef int (*store_live_fn)(const struct store_key *key, void *arg);

/* Forgets keys is_live() rejects (NULL: none) and rewrites the segments
 * that are at least STORE_COMPACT_DEAD_PCT percent dead. Safe while other
 * threads look up, read and put. Returns the number of segments rewritten,
 * or a negative errno (the store is then unchanged but for what was done;
 * every record stays readable). */
int store_compact(struct store *st, store_live_fn is_live, void *arg);

/* 0, or the errno that put the store in degraded mode. */
int store_degraded(const struct store *st);
void store_get_stats(struct store *st, struct store_stats *out);

#endif
