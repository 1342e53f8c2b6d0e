/*
 * A tar reader that never reads what it does not need: it says which bytes
 * it wants next (a header block, a GNU long name, a pax header, or a
 * member's data when the caller asks for it) and skips every other
 * member's data, so an indexer can find a shard's member offsets with a
 * few small reads (pread or ranged GETs), or by streaming the shard
 * through it and dropping the bytes it does not ask for.
 *
 * Formats: POSIX ustar (with its name prefix), GNU (long names 'L', long
 * links 'K', base-256 sizes) and pax ('x' records: path, size), old v7
 * headers; checksums verified (unsigned or the historic signed sum). The
 * end is two zero blocks, one zero block at the end of the shard, or the
 * shard's end at a header boundary (tar writers differ).
 *
 * Hostile shards: a header that lies about a size (past the shard's end,
 * when its size is known), a bad checksum, a truncated header or name,
 * names over TAR_NAME_MAX bytes, pax headers over TAR_PAX_MAX bytes,
 * malformed pax records: each is -EBADMSG with a message naming the
 * offset. Names are returned as they are (a name is a key, never a path
 * anything is written to); tar_name_unsafe says whether one is absolute or
 * climbs with "..", for callers that refuse those.
 *
 * Usage:
 *     struct tar_reader r;
 *     tar_reader_init(&r, shard_size);            // UINT64_MAX: unknown
 *     for (;;) {
 *         uint64_t off; size_t len;
 *         if (tar_reader_want(&r, &off, &len))    // 1: the end
 *             break;
 *         read len bytes at off into buf (fewer at the shard's end: got)
 *         struct tar_entry e;
 *         rc = tar_reader_feed(&r, buf, got, &e); // -EBADMSG, 0, or 1: e
 *         if (rc == 1 && wants e's data)
 *             tar_reader_want_data(&r);           // next want: the data;
 *     }                                           // the feed after it sets
 *                                                 // e.data and returns 1
 */
#ifndef PRESTO_TAR_H
#define PRESTO_TAR_H

#include <stddef.h>
#include <stdint.h>

#define TAR_BLOCK 512
#define TAR_NAME_MAX 4096        /* bytes in a member name */
#define TAR_PAX_MAX (1u << 20)   /* bytes in one pax header */
#define TAR_DATA_MAX (1u << 20)  /* bytes tar_reader_want_data can ask for */

enum tar_type {
    TAR_FILE = 0,   /* a regular file ('0', '\0', '7') */
    TAR_DIR,        /* '5' */
    TAR_OTHER,      /* links, devices, FIFOs, GNU specials: no sample */
};

struct tar_entry {
    const char *name;   /* NUL-terminated, valid until the next feed */
    uint64_t offset;    /* of the data in the shard */
    uint64_t size;      /* of the data */
    enum tar_type type;
    const uint8_t *data; /* after tar_reader_want_data: the data (size bytes) */
};

struct tar_reader {
    uint64_t pos;          /* offset of the next header (or data wanted) */
    uint64_t shard_size;   /* UINT64_MAX: unknown */
    int state;
    uint64_t ext_size;     /* bytes of the 'L' or 'x' data wanted */
    int have_long_name, have_pax_path, have_pax_size;
    uint64_t pax_size;
    char name[TAR_NAME_MAX + 1];
    char long_name[TAR_NAME_MAX + 1];
    char pax_path[TAR_NAME_MAX + 1];
    struct tar_entry cur;  /* the last entry returned */
    uint64_t members;      /* entries returned */
    char err[200];
};

void tar_reader_init(struct tar_reader *r, uint64_t shard_size);
/* What to read next: len bytes at off (the caller may give fewer only at
 * the shard's end). Returns 0, or 1 at the end of the archive. */
int tar_reader_want(const struct tar_reader *r, uint64_t *off, size_t *len);
/* Hands over the bytes tar_reader_want asked for (got of them: fewer means
 * the shard ended there). Returns 1 with *e filled when a member's header
 * (or, after tar_reader_want_data, its data) is complete, 0 when more is
 * needed, -EBADMSG (message in r->err) for a corrupt or truncated shard. */
int tar_reader_feed(struct tar_reader *r, const uint8_t *buf, size_t got,
                    struct tar_entry *e);
/* After a feed returned a TAR_FILE entry of at most TAR_DATA_MAX bytes:
 * the next want is its data, and the feed that gets it returns the entry
 * again with data set. Returns 0, or -E2BIG when the entry is larger. */
int tar_reader_want_data(struct tar_reader *r);

/* 1 when name is absolute, empty, or has a ".." component. */
int tar_name_unsafe(const char *name);

#endif
