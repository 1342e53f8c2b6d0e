/* Sending small frames (replies, END, ERROR) on a connection's bufferevent. */
#ifndef PRESTO_FRAME_H
#define PRESTO_FRAME_H

#include <stdint.h>

#include "proto.h"

struct bufferevent;

/* Queues a frame built with proto_frame_begin()/put_*(); finishes it first.
 * Returns 0 or -ENOMEM. */
int frame_send(struct bufferevent *bev, struct proto_wbuf *w);
/* Sends a frame with a file descriptor attached (SCM_RIGHTS, on its first
 * byte), straight to the socket: only when nothing is queued before it and
 * the socket takes at least that first byte now, else -EAGAIN and nothing
 * is sent (the caller does without the descriptor). What the socket does
 * not take at once is queued behind. Returns 0, -EAGAIN or -ENOMEM/-errno. */
int frame_send_fd(struct bufferevent *bev, struct proto_wbuf *w, int fd);
int frame_send_error(struct bufferevent *bev, uint32_t req_id, int code, const char *msg);
/* A connection-wide ERROR (request id 0) straight to the socket, without
 * waiting, for a connection about to be closed: the peer reads it after the
 * close. Returns 0, or a negative errno (a full socket: -EAGAIN). */
int frame_send_error_now(int sock, int code, const char *msg);

#endif
