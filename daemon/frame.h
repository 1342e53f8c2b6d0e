/* Sending small frames (replies, END, ERROR) on a connection's bufferevent.
 *
 * A frame queued with a budget_queue (budget.h) is charged to it, bytes and
 * FRAME_OVERHEAD, until its last byte is written or the connection's
 * buffers are freed: it goes into the output as a piece of its own, by
 * reference, and its cleanup gives the charge back. q NULL: copied into the
 * output uncharged (frames a stream's charge already holds: BATCH_SHM). */
#ifndef PRESTO_FRAME_H
#define PRESTO_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"

struct bufferevent;
struct budget_queue;

/* What a queued frame is charged beyond its bytes: its piece's header and
 * libevent's chain for it, with the allocator's overhead of both. */
#define FRAME_OVERHEAD 128

/* Queues a frame built with proto_frame_begin()/put_*(); finishes it first.
 * Returns 0 or -ENOMEM. */
int frame_send(struct bufferevent *bev, struct budget_queue *q, struct proto_wbuf *w);
/* Queues len bytes (charged to q as frame_send does). 0 or -ENOMEM. */
int frame_queue(struct bufferevent *bev, struct budget_queue *q, const void *data, size_t len);
/* Sends a frame with a file descriptor attached (SCM_RIGHTS, on its first
 * byte), straight to the socket: only when nothing is queued before it and
 * the socket takes at least that first byte now, else -EAGAIN and nothing
 * is sent (the caller does without the descriptor). What the socket does
 * not take at once is queued behind (charged to q). Returns 0, -EAGAIN or
 * -ENOMEM/-errno. */
int frame_send_fd(struct bufferevent *bev, struct budget_queue *q, struct proto_wbuf *w, int fd);
int frame_send_error(struct bufferevent *bev, struct budget_queue *q, uint32_t req_id, int code,
                     const char *msg);
/* A connection-wide ERROR (request id 0) straight to the socket, without
 * waiting, for a connection about to be closed: the peer reads it after the
 * close. Returns 0, or a negative errno (a full socket: -EAGAIN). */
int frame_send_error_now(int sock, int code, const char *msg);

#endif
