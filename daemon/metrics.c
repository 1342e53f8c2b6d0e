/* The /metrics endpoint: see metrics.h. */
#include "metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "stats.h"

#define METRICS_MAX_HEADERS (8u << 10)
#define METRICS_TIMEOUT_S 10

struct metrics {
    struct evhttp *http;
    metrics_doc_fn doc;
    void *arg;
    char address[80]; /* as bound: 127.0.0.1:9100, [::1]:9100 */
    uint64_t requests;
};

static void metrics_on_request(struct evhttp_request *req, void *arg)
{
    struct metrics *m = arg;
    m->requests++; /* counted in the document it gets */
    struct evbuffer *body = evbuffer_new();
    char *doc = m->doc(m->arg);
    if (!body || !doc || evbuffer_add(body, doc, strlen(doc)) < 0) {
        evhttp_send_error(req, HTTP_INTERNAL, "out of memory");
    } else {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                          "text/plain; version=0.0.4; charset=utf-8");
        evhttp_send_reply(req, HTTP_OK, "OK", body);
    }
    free(doc);
    if (body)
        evbuffer_free(body);
}

static void metrics_on_other(struct evhttp_request *req, void *arg)
{
    (void)arg;
    evhttp_send_error(req, HTTP_NOTFOUND, "only /metrics is served here");
}

static int is_loopback(const struct sockaddr_storage *sa)
{
    if (sa->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    return sa->ss_family == AF_INET6 &&
           IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

/* "ADDR:PORT" of a bound socket. */
static void address_of(int fd, char *buf, size_t len)
{
    struct sockaddr_storage sa;
    socklen_t sl = sizeof(sa);
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (getsockname(fd, (struct sockaddr *)&sa, &sl) < 0) {
        snprintf(buf, len, "?");
        return;
    }
    if (sa.ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&sa;
        inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof(host));
        port = ntohs(s6->sin6_port);
        snprintf(buf, len, "[%s]:%u", host, port);
        return;
    }
    const struct sockaddr_in *s4 = (const struct sockaddr_in *)&sa;
    inet_ntop(AF_INET, &s4->sin_addr, host, sizeof(host));
    port = ntohs(s4->sin_port);
    snprintf(buf, len, "%s:%u", host, port);
}

int metrics_create(struct metrics **out, struct event_base *base, const char *listen_at,
                   metrics_doc_fn doc, void *arg, char *err, size_t errlen)
{
    struct sockaddr_storage sa;
    struct metrics *m = NULL;
    int fd = -1, one = 1, rc;

    if (config_parse_listen(listen_at, &sa) < 0) {
        snprintf(err, errlen, "metrics.listen '%s': not PORT or HOST:PORT", listen_at);
        return -EINVAL;
    }
    socklen_t sl = sa.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                             : sizeof(struct sockaddr_in);
    fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(fd, (struct sockaddr *)&sa, sl) < 0 || listen(fd, 16) < 0) {
        rc = -errno;
        snprintf(err, errlen, "metrics.listen %s: %s", listen_at, strerror(errno));
        goto fail;
    }
    if (!(m = calloc(1, sizeof(*m))) || !(m->http = evhttp_new(base))) {
        rc = -ENOMEM;
        snprintf(err, errlen, "metrics: out of memory");
        goto fail;
    }
    m->doc = doc;
    m->arg = arg;
    evhttp_set_allowed_methods(m->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
    evhttp_set_max_headers_size(m->http, METRICS_MAX_HEADERS);
    evhttp_set_max_body_size(m->http, 0);
    evhttp_set_timeout(m->http, METRICS_TIMEOUT_S);
    if (evhttp_set_cb(m->http, "/metrics", metrics_on_request, m) < 0 ||
        !evhttp_accept_socket_with_handle(m->http, fd)) {
        rc = -ENOMEM;
        snprintf(err, errlen, "metrics: cannot serve %s", listen_at);
        goto fail;
    }
    evhttp_set_gencb(m->http, metrics_on_other, m);
    address_of(fd, m->address, sizeof(m->address));
    fd = -1; /* evhttp's now */
    if (is_loopback(&sa))
        log_info("metrics: Prometheus text at http://%s/metrics", m->address);
    else
        log_warn("metrics: Prometheus text at http://%s/metrics: not a loopback address, "
                 "whoever reaches it reads the stats", m->address);
    *out = m;
    return 0;
fail:
    if (fd >= 0)
        close(fd);
    metrics_destroy(m);
    return rc;
}

void metrics_destroy(struct metrics *m)
{
    if (!m)
        return;
    if (m->http)
        evhttp_free(m->http); /* closes the socket it accepted on */
    free(m);
}

static const struct stats_decl metrics_decl[] = {METRICS_STATS(STATS_DECL)};

void metrics_stats(const struct metrics *m, struct stats_out *o)
{
    struct stats_val v[2] = {stats_str(m ? m->address : ""), stats_u64(m ? m->requests : 0)};
    stats_begin(o, "metrics", NULL, NULL, NULL);
    stats_emit(o, metrics_decl, v, 2);
    stats_end(o);
}
