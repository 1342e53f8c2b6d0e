#include "frame.h"

#include <errno.h>
#include <event2/bufferevent.h>

int frame_send(struct bufferevent *bev, struct proto_wbuf *w)
{
    proto_frame_finish(w);
    if (w->failed)
        return -ENOMEM;
    return bufferevent_write(bev, w->data, w->len) < 0 ? -ENOMEM : 0;
}

int frame_send_error(struct bufferevent *bev, uint32_t req_id, int code, const char *msg)
{
    struct proto_wbuf w;
    proto_wbuf_init(&w);
    proto_frame_begin(&w, PROTO_ERROR, req_id);
    proto_put_error(&w, (uint32_t)(code < 0 ? -code : code), msg);
    int rc = frame_send(bev, &w);
    proto_wbuf_free(&w);
    return rc;
}
