/*
 * The client memory budget (limits.client_memory, limits.user_memory):
 * what the clients together, and the clients of one uid, can make the
 * daemon hold. Everything a stream can hold is charged to its client's uid
 * when the stream opens, at the most it can ever hold (its plan, its batch
 * buffers or its ring, the frames it can have queued on the socket: see
 * stream_memory), and given back when the last of it is freed, which may
 * be after the stream closed (pieces still queued on the socket) or, for a
 * ring kept for the next stream, when that ring goes. A ring is charged
 * until its last mapping is gone, not until the daemon lets it go: a client
 * may keep the memfd (or its mapping) past its stream and its connection,
 * and its pages stay; budget_linger keeps charging them to the uid until
 * the kernel frees the file (an inotify watch on it hears IN_IGNORED when
 * the last descriptor and mapping went). A stream that does
 * not fit is given a lower prefetch, or refused; a stream that opened never
 * grows past its charge, so the sum never passes the limits.
 *
 * Replies queued on a connection (everything prestod writes to a socket
 * but the batches the streams' charges hold: STATS and DATASETS documents,
 * errors, OPENED, END, ...) are charged to the connection's uid as well,
 * from the moment they are queued until the last of their bytes is written
 * or the connection is gone: a budget_queue per connection. A connection
 * stops taking requests (backpressure, not an error) while budget_queue_wait
 * says so: its own replies are over limits.output_buffer, or its uid has
 * replies queued and is at limits.user_memory, or all clients are at
 * limits.client_memory and its uid has replies queued. A uid is never held
 * back by another uid's queued replies while it has none of its own queued,
 * and its stuck connections hold only itself back. So what a uid makes
 * prestod hold, streams and queued replies together, stays within
 * limits.user_memory plus one reply (the request read last) plus the
 * stream ends and errors its open streams may still queue.
 *
 * Event loop thread only (the server charges, the streams give back).
 */
#ifndef PRESTO_BUDGET_H
#define PRESTO_BUDGET_H

#include <stdint.h>
#include <sys/types.h>

#include "stats.h"

struct budget;
struct event_base;

/* The budget section's fields ("client_memory" in the stats document). */
#define BUDGET_STATS(X)                                                               \
    X(limit, GAUGE, "bytes", "limits.client_memory: what all clients can make prestod hold") \
    X(user_limit, GAUGE, "bytes", "limits.user_memory: what the clients of one uid can")  \
    X(used, GAUGE, "bytes", "charged to clients now (streams, their rings and queued batches)") \
    X(peak, GAUGE, "bytes", "the most charged at once since start")                   \
    X(users, GAUGE, "uids", "uids with memory charged")                                \
    X(lowered, COUNTER, "streams", "streams granted a lower prefetch than asked, to fit") \
    X(rings_left, GAUGE, "rings", "rings prestod let go that a client still maps or holds") \
    X(rings_left_bytes, GAUGE, "bytes", "their bytes, still charged to their uids")  \
    X(queued, GAUGE, "bytes", "replies queued on connections, not yet written (in used)") \
    X(paused, GAUGE, "connections", "connections whose requests wait on queued replies") \
    X(pauses, COUNTER, "times", "connections made to wait on queued replies")          \
    X(pauses_user, COUNTER, "times", "... because their uid was at limits.user_memory") \
    X(pauses_all, COUNTER, "times", "... because all clients were at limits.client_memory") \
    X(pauses_ahead, COUNTER, "times", "... because an OPEN fits once read-ahead is given back") \
    X(read_ahead, GAUGE, "bytes", "chunks read ahead for the streams, not yet run (in used)") \
    X(read_ahead_peak, GAUGE, "bytes", "the most read-ahead charged at once since start")  \
    X(read_ahead_skipped, COUNTER, "batches",                                          \
      "batches not read ahead: their uid's budget had no room (the worker read them)")
#define BUDGET_USER_STATS(X)                                                          \
    X(uid, LABEL, "", "the clients' uid")                                              \
    X(used, GAUGE, "bytes", "charged to the clients of this uid")                      \
    X(peak, GAUGE, "bytes", "the most charged to it at once (while it had an entry)")  \
    X(queued, GAUGE, "bytes", "of that, replies queued on their connections")         \
    X(paused, GAUGE, "connections", "their connections whose requests wait")         \
    X(read_ahead, GAUGE, "bytes", "of used, chunks read ahead for their streams")

/* base: where the rings let go are watched (NULL: they are not, and
 * budget_linger fails). */
int budget_create(struct budget **out, struct event_base *base, uint64_t limit,
                  uint64_t user_limit);
/* Stops watching the rings let go (before the event base goes). */
void budget_stop(struct budget *b);
void budget_destroy(struct budget *b);
/* A reload's limits: for new charges (what is charged stays). */
void budget_set_limits(struct budget *b, uint64_t limit, uint64_t user_limit);
/* Bytes uid may still be charged: the smaller room of the two limits; *by_user
 * (may be NULL) says whether limits.user_memory is the tighter. */
uint64_t budget_room(const struct budget *b, uid_t uid, int *by_user);
/*
 * The grant policy: the most a new stream of uid may be charged, given
 * `floor`, what it needs at its minimum working prefetch (2 batches), and
 * `later`, how many more streams uid may open after it (limits.
 * streams_per_user). The uid's budget is shared out, not first come: a
 * stream may take what is free but a reserve kept for the uid's later
 * streams, their floor each (this stream's floor stands for theirs), at
 * most three quarters of limits.user_memory; a stream that does not fit
 * above the reserve still gets its floor, from the reserve. So a trainer
 * alone gets its whole prefetch whenever it needs at most a quarter of its
 * uid's budget (and more of it, the whole room at most, where few streams
 * may follow), and a burst of streams each gets at least 2 batches as long
 * as floors fit: 1 + 3/4 x user_memory / floor streams at least. What
 * is free is reckoned without the uid's read-ahead (it goes as its batches
 * run), but never past the room (read-ahead included). Returns
 * at least floor, or 0 when not even floor fits in the room (the stream is
 * refused; *by_user says which limit, as budget_room).
 */
uint64_t budget_cap(struct budget *b, uid_t uid, uint64_t floor, uint64_t later,
                    int *by_user);
/* Bytes charged to uid now. */
uint64_t budget_used(const struct budget *b, uid_t uid);
/* Charges bytes to uid (the caller checked budget_room): 0, or -ENOMEM
 * when no entry for uid could be made (nothing charged). */
int budget_charge(struct budget *b, uid_t uid, uint64_t bytes);
/* Gives back bytes charged to uid. */
void budget_uncharge(struct budget *b, uid_t uid, uint64_t bytes);
/* The daemon lets go of a ring (fd: its memfd, closed by the caller after
 * this): bytes are charged to uid until the file is freed, which may be at
 * once. 0, or -errno when it cannot be watched (nothing charged: the
 * caller frees the pages itself, ring_punch). After budget_stop (the daemon
 * is stopping) 0 with nothing charged or watched: a client still holding
 * batches of the ring keeps them intact, and the pages go with its last
 * mapping. */
int budget_linger(struct budget *b, uid_t uid, uint64_t bytes, int fd);
/* ---- read-ahead (readahead.h) ----
 *
 * A batch's first chunk read ahead on the event loop (its arena and its
 * pipeline_ahead) is charged to its stream's uid from the moment it is
 * armed until the job that ran it is done (back on the event loop), or
 * the stream goes: always on the event loop, so no lock (the worker that
 * runs the chunk only gives its arena back to io.readahead's pool, a leaf
 * lock of its own). Read-ahead is what a stream may go without: it takes
 * at most half of the room a uid's other charges (streams, rings, replies)
 * leave under limits.user_memory once the floor of the largest stream the
 * uid was granted so far is set aside (budget_cap notes it; forgotten when
 * the uid has nothing charged and no connection), and the same of all
 * clients' under limits.client_memory (the largest floor of any uid's
 * set aside; a refused stream's is not). So a new stream always finds
 * at least half the room it would without read-ahead, and one no larger
 * than the uid's largest so far is never refused because of read-ahead
 * (it may get a lower prefetch); a chunk that does not fit is not read
 * ahead (the worker reads it, as with io.readahead 0), never refused. */

/* 1 when a stream of uid needing floor bytes does not fit now but would
 * once the read-ahead charged (uid's, all clients') is given back: its
 * OPEN waits (BUDGET_WAIT_AHEAD) instead of being refused, and while any
 * OPEN waits so no chunk is read ahead (so the wait ends: read-ahead only
 * drains, as its batches run on the workers). */
int budget_ahead_blocks(const struct budget *b, uid_t uid, uint64_t floor);
/* Bytes of read-ahead uid may still be charged now (see above). */
uint64_t budget_ahead_room(const struct budget *b, uid_t uid);
/* Charges a chunk read ahead (bytes within budget_ahead_room): 0, or
 * -ENOMEM (nothing charged). */
int budget_ahead_charge(struct budget *b, uid_t uid, uint64_t bytes);
/* ... it ran, or its stream went: given back. */
void budget_ahead_uncharge(struct budget *b, uid_t uid, uint64_t bytes);
/* A batch was not read ahead for want of room (counted). */
void budget_ahead_skipped(struct budget *b);

/* A stream got a lower prefetch to fit (counted). */
void budget_lowered(struct budget *b);
/* ---- queued replies ---- */

struct budget_queue;

/* Why a connection's requests wait (budget_queue_wait). */
enum budget_wait {
    BUDGET_GO = 0,
    BUDGET_WAIT_OWN,  /* its own queued replies are over its limit */
    BUDGET_WAIT_USER, /* its uid has replies queued and is at limits.user_memory */
    BUDGET_WAIT_ALL,  /* its uid has replies queued, all clients at client_memory */
    BUDGET_WAIT_AHEAD, /* its OPEN fits once read-ahead in flight is given back */
};

/* A connection of uid: its queued replies' account. 0, or -ENOMEM. */
int budget_queue_new(struct budget *b, uid_t uid, struct budget_queue **out);
/* The connection is gone: q goes once its last queued bytes are given
 * back (they may be freed later, with the socket's buffers). */
void budget_queue_close(struct budget_queue *q);
/* Bytes queued on q's connection, charged to its uid (never refused: the
 * caller stops reading requests instead, budget_queue_wait). */
void budget_queue_add(struct budget_queue *q, uint64_t bytes);
/* ... written, or freed with the connection: given back. */
void budget_queue_sub(struct budget_queue *q, uint64_t bytes);
uint64_t budget_queue_bytes(const struct budget_queue *q);
/* Whether q's connection may take a request now: BUDGET_GO, or why not
 * (own: the connection's limit, limits.output_buffer). */
enum budget_wait budget_queue_wait(const struct budget_queue *q, uint64_t own);
/* The connection waits (why != BUDGET_GO) or takes requests again:
 * counted, for the stats. */
void budget_queue_pause(struct budget_queue *q, enum budget_wait why);
/* fn(arg) runs whenever charges went down while connections wait (from
 * within budget_uncharge and budget_queue_sub: it should only schedule
 * a look); NULL: no more. */
void budget_set_notify(struct budget *b, void (*fn)(void *arg), void *arg);

/* The "client_memory" section, with the uids' use under "users". */
void budget_stats(const struct budget *b, struct stats_out *o);

#endif
