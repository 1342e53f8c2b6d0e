/* Sending small frames (replies, END, ERROR) on a connection's bufferevent. */
#ifndef PRESTO_FRAME_H
#define PRESTO_FRAME_H

#include <stdint.h>

#include "proto.h"

struct bufferevent;

/* Queues a frame built with proto_frame_begin()/put_*(); finishes it first.
 * Returns 0 or -ENOMEM. */
int frame_send(struct bufferevent *bev, struct proto_wbuf *w);
int frame_send_error(struct bufferevent *bev, uint32_t req_id, int code, const char *msg);

#endif
