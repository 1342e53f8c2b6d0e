#include "frame.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "budget.h"

/* A charged frame in the output: its account, its charge, its bytes. */
struct frame_piece {
    struct budget_queue *q;
    uint64_t charge;
    uint8_t data[];
};

/* libevent is done with the piece (written, or the output freed). */
static void frame_piece_free(const void *data, size_t len, void *arg)
{
    struct frame_piece *p = arg;
    (void)data;
    (void)len;
    budget_queue_sub(p->q, p->charge);
    free(p);
}

int frame_queue(struct bufferevent *bev, struct budget_queue *q, const void *data, size_t len)
{
    if (!q)
        return bufferevent_write(bev, data, len) < 0 ? -ENOMEM : 0;
    struct frame_piece *p = malloc(sizeof(*p) + len);
    if (!p)
        return -ENOMEM;
    p->q = q;
    p->charge = sizeof(*p) + len + FRAME_OVERHEAD;
    memcpy(p->data, data, len);
    budget_queue_add(q, p->charge);
    /* On failure libevent does not call the cleanup: done here. */
    if (evbuffer_add_reference(bufferevent_get_output(bev), p->data, len, frame_piece_free,
                               p) < 0) {
        frame_piece_free(p->data, len, p);
        return -ENOMEM;
    }
    return 0;
}

int frame_send(struct bufferevent *bev, struct budget_queue *q, struct proto_wbuf *w)
{
    proto_frame_finish(w);
    if (w->failed)
        return -ENOMEM;
    return frame_queue(bev, q, w->data, w->len);
}

int frame_send_fd(struct bufferevent *bev, struct budget_queue *q, struct proto_wbuf *w, int fd)
{
    proto_frame_finish(w);
    if (w->failed)
        return -ENOMEM;
    if (evbuffer_get_length(bufferevent_get_output(bev)) != 0)
        return -EAGAIN;
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct iovec iov = {w->data, w->len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                         .msg_controllen = sizeof(ctl.buf)};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    memset(&ctl, 0, sizeof(ctl));
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    ssize_t n;
    do
        n = sendmsg(bufferevent_getfd(bev), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK ? -EAGAIN : -errno;
    if ((size_t)n < w->len && frame_queue(bev, q, w->data + n, w->len - (size_t)n) < 0)
        return -ENOMEM;
    return 0;
}

int frame_send_error(struct bufferevent *bev, struct budget_queue *q, uint32_t req_id, int code,
                     const char *msg)
{
    struct proto_wbuf w;
    proto_wbuf_init(&w);
    proto_frame_begin(&w, PROTO_ERROR, req_id);
    proto_put_error(&w, (uint32_t)(code < 0 ? -code : code), msg);
    int rc = frame_send(bev, q, &w);
    proto_wbuf_free(&w);
    return rc;
}

int frame_send_error_now(int sock, int code, const char *msg)
{
    struct proto_wbuf w;
    proto_wbuf_init(&w);
    proto_frame_begin(&w, PROTO_ERROR, 0);
    proto_put_error(&w, (uint32_t)(code < 0 ? -code : code), msg);
    proto_frame_finish(&w);
    int rc = w.failed ? -ENOMEM : 0;
    if (rc == 0 && send(sock, w.data, w.len, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
        rc = -errno;
    proto_wbuf_free(&w);
    return rc;
}
