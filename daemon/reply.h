/*
 * How a job (an epoch stream, a warm-up, a profile) answers the request
 * that started it. The server implements it: it is the only owner of
 * sockets and frames, and turns each call into the protocol's frame (see
 * proto.h). Jobs know nothing of either; the message structs of proto.h
 * are only the vocabulary of what they report.
 *
 *   progress  the job started or moved on: a stream's OPENED (with the
 *             descriptor of its shared-memory ring to pass along, or -1),
 *             a warm-up's counts, a profile's phase;
 *   batch     a stream's batch is ready (reply_batch);
 *   done      the job ended well: a stream's END, a warm-up's last counts,
 *             a profile's result;
 *   failed    the job ended with -errno and a message (the server maps
 *             the errno to the protocol's code in one table: server.c).
 *
 * done and failed are a job's last words, and come from the event loop
 * outside any call the owner made into the job: the owner may close the
 * job from within them. A reply whose ops is NULL goes nowhere (a
 * background profile). Everything here runs on the event loop thread.
 *
 * Errors are -errno below the server. A job that stops on a bad sample
 * (on_error: fail, or a profile that could read nothing) fails with
 * -EBADMSG; one over a limit (one warm-up per dataset, one profile at a
 * time, a client that releases nothing) with -EBUSY or -ETIMEDOUT; one cut
 * short by a stopping daemon with -ECANCELED.
 */
#ifndef PRESTO_REPLY_H
#define PRESTO_REPLY_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"

enum reply_kind {
    REPLY_OPENED,           /* progress: a stream's start (opened) */
    REPLY_END,              /* done: a stream's end (end) */
    REPLY_WARM,             /* progress and done: a warm-up's counts (warm) */
    REPLY_PROFILE_PROGRESS, /* progress: a profile's phase (profile_progress) */
    REPLY_PROFILE_RESULT,   /* done: a profile's result (profile) */
};

struct reply_msg {
    enum reply_kind kind;
    union {
        struct proto_opened opened; /* stream_id is the server's to set */
        struct proto_end end;       /* likewise */
        struct proto_progress warm;
        struct proto_profile_progress profile_progress;
        struct {
            const struct proto_profile_result *result;
            const struct proto_profile_strategy *strategies; /* result->count */
            const struct proto_profile_verified *verified; /* result->count, or NULL */
        } profile;
    };
};

/* A reference on memory a batch lends to the receiver (a piece of a job's
 * buffer): release is called once for each piece handed over, when the
 * receiver is done with it (sent, or dropped). */
struct reply_ref {
    void (*release)(struct reply_ref *ref);
};

#define REPLY_PIECES 3

/* A ready batch: n samples of the given shape and their labels. Through
 * the socket the samples are sent without a copy from up to REPLY_PIECES
 * pieces of the jobs' buffers; `room` bytes right before the first piece
 * are free for the receiver to write into (a frame's header). Through
 * shared memory (shm) only the slot and its offset in the ring go out. */
struct reply_batch {
    uint64_t index;
    uint32_t n, h, w, c, dtype;
    const uint8_t *labels; /* the label tensor's n rows (and lengths), wire form */
    size_t labels_len;     /* bytes at labels */
    int shm;
    uint32_t slot;   /* shm */
    uint64_t offset; /* shm */
    struct {
        uint8_t *p;
        size_t len;
        struct reply_ref *ref;
    } piece[REPLY_PIECES];
    unsigned npieces;
    size_t room;
};

struct reply;

struct reply_ops {
    /* 0, or -errno; for OPENED with fd >= 0, -EAGAIN when the descriptor
     * cannot go out now (output is queued before it: nothing was sent). */
    int (*progress)(const struct reply *r, const struct reply_msg *m, int fd);
    /* 0, or -ENOMEM (nothing queued). Either way every piece's reference
     * is the receiver's from the call on. */
    int (*batch)(const struct reply *r, const struct reply_batch *b);
    /* 0, or -ENOMEM when the message could not be queued (the receiver
     * logs it: the job may be gone once this returns). */
    int (*done)(const struct reply *r, const struct reply_msg *m);
    void (*failed)(const struct reply *r, int err, const char *msg);
};

/* A job keeps its reply by value; `to` is the server's (the request). */
struct reply {
    const struct reply_ops *ops;
    void *to;
};

static inline int reply_progress(const struct reply *r, const struct reply_msg *m, int fd)
{
    return r->ops ? r->ops->progress(r, m, fd) : 0;
}

static inline int reply_batch(const struct reply *r, const struct reply_batch *b)
{
    if (r->ops)
        return r->ops->batch(r, b);
    for (unsigned i = 0; i < b->npieces; i++)
        b->piece[i].ref->release(b->piece[i].ref);
    return 0;
}

static inline int reply_done(const struct reply *r, const struct reply_msg *m)
{
    return r->ops ? r->ops->done(r, m) : 0;
}

static inline void reply_failed(const struct reply *r, int err, const char *msg)
{
    if (r->ops)
        r->ops->failed(r, err, msg);
}

#endif
