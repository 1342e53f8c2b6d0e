/*
 * A stream's client, stood in for by a thread of the daemon: the
 * profiler's trial delivers its batches through it, so that what a
 * stream's transport costs is in the profile's figures as it is in the
 * epochs (see profile.h). Between the event loop and the sink thread a
 * Unix stream socket pair carries messages of the sizes a stream's frames
 * have: the loop sends one (sink_send: a BATCH frame's bytes, an END's)
 * and the thread, woken by it, reads it whole and answers with a small one
 * (a RELEASE, an OPEN), which the loop reads (an event of its own) and
 * hands to the owner's callback with the message's tag. On make bench's
 * 2-core VM each such hop is a wake-up that costs both sides more CPU than
 * the samples of a mel-spectrogram batch (prestoctl epoch of one-sample
 * epochs: 0.07 ms each, their CPU half the daemon's, half the client's).
 *
 * Nothing here is a frame of the protocol and no client is ever on the
 * socket pair; the server stays the one owner of the clients' sockets.
 * Everything but the thread runs on the event loop; errors are -errno.
 */
#ifndef PRESTO_SINK_H
#define PRESTO_SINK_H

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct sink;

/* The answer to the message sent with tag. */
typedef void (*sink_answer_fn)(void *arg, uint64_t tag);

/* The smallest message (and every answer): a length and the tag. */
#define SINK_HEADER 16u
#define SINK_MAX_MESSAGE (64u << 10) /* larger ones are sent as this */

int sink_create(struct sink **out, struct event_base *base, sink_answer_fn fn, void *arg);
/* Queues a message of `bytes` (at least SINK_HEADER, at most
 * SINK_MAX_MESSAGE) that the thread answers with tag. The queue is written
 * once the socket is writable (the loop's next pass: what is queued in one
 * pass goes in one write, as a bufferevent writes a connection's frames).
 * 0, or -errno: -EAGAIN when more than the queue holds waits unwritten,
 * -EPIPE (or another) when the thread is gone. */
int sink_send(struct sink *s, uint64_t tag, size_t bytes);
/* Stops the thread and frees s; answers not yet read are never delivered. */
void sink_destroy(struct sink *s);

#endif
