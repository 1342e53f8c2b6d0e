/*
 * Configuration loader: libyaml's document API gives every node its line,
 * so errors can name FILE:LINE and the key. Scalar keys are table-driven
 * (cfg_keys below), as redis does it; datasets are parsed by hand.
 */
#include "config.h"
#include "braces.h"
#include "source.h"

#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include <event2/util.h>

#include "log.h"
#include "proto.h"

enum cfg_type {
    CFG_STR, CFG_U32, CFG_U64, CFG_SIZE, CFG_MODE, CFG_LOGLEVEL, CFG_ENUM,
    CFG_GROUP, /* a group name or number, kept as its gid (CONFIG_NO_GROUP: unset) */
    CFG_LISTEN, /* [HOST:]PORT of a TCP listener, or off (a string, NULL: off) */
};

/* What a reload (SIGHUP, RELOAD) does with a changed key: applies it to
 * what comes next (new connections, streams, requests), or leaves it for a
 * restart, because it is built into what runs (the socket, the threads, the
 * disk tier, the I/O rings, the decoders' pixel limit). */
enum cfg_when { CFG_LIVE = 0, CFG_RESTART = 1 };

struct cfg_key {
    const char *section; /* NULL: top level */
    const char *name;
    enum cfg_type type;
    size_t off;
    uint64_t min, max, def;
    const char *const *names; /* CFG_ENUM: value i is names[i] (NULL-terminated) */
    enum cfg_when when;
};

#define KEY_AT(sec, name, type, field, min, max, def, when) \
    {sec, name, type, offsetof(struct config, field), min, max, def, NULL, when}
#define KEY(sec, name, type, field, min, max, def) \
    KEY_AT(sec, name, type, field, min, max, def, CFG_LIVE)
#define ENUM_KEY(sec, name, field, def, names, when) \
    {sec, name, CFG_ENUM, offsetof(struct config, field), 0, 0, def, names, when}

static const char *const io_backends[] = {"auto", "pread", NULL};
static const char *const direct_ios[] = {"false", "true", "auto", NULL}; /* config_direct_io */

static const struct cfg_key cfg_keys[] = {
    KEY_AT(NULL, "socket", CFG_STR, socket_path, 0, 0, 0, CFG_RESTART),
    KEY_AT(NULL, "socket_mode", CFG_MODE, socket_mode, 0, 07777, 0660, CFG_RESTART),
    KEY_AT(NULL, "socket_group", CFG_GROUP, socket_group, 0, 0, CONFIG_NO_GROUP, CFG_RESTART),
    KEY(NULL, "admin_group", CFG_GROUP, admin_group, 0, 0, CONFIG_NO_GROUP),
    KEY_AT(NULL, "workers", CFG_U32, workers, 0, 1024, 0, CFG_RESTART),
    KEY(NULL, "log_level", CFG_LOGLEVEL, log_level, 0, 0, LOG_LEVEL_INFO),
    KEY(NULL, "prefetch", CFG_U32, prefetch, 1, 256, 8),
    KEY("cache", "memory", CFG_SIZE, cache_memory, 0, UINT64_MAX, 0),
    KEY_AT("cache", "dir", CFG_STR, cache_dir, 0, 0, 0, CFG_RESTART),
    KEY_AT("cache", "disk", CFG_SIZE, cache_disk, 0, UINT64_MAX, 0, CFG_RESTART),
    ENUM_KEY("cache", "direct_io", cache_direct_io, CONFIG_DIRECT_AUTO, direct_ios, CFG_RESTART),
    KEY_AT("cache", "segment_size", CFG_SIZE, segment_size, 64ull << 10, 1ull << 40,
           256ull << 20, CFG_RESTART),
    KEY_AT("io", "depth", CFG_U32, io_depth, 1, 4096, 128, CFG_RESTART),
    ENUM_KEY("io", "backend", io_backend, CONFIG_IO_AUTO, io_backends, CFG_RESTART),
    KEY_AT("io", "readahead", CFG_SIZE, io_readahead, 0, 1ull << 40, 64ull << 20, CFG_RESTART),
    KEY("limits", "connections", CFG_U32, max_connections, 1, 65536, 256),
    KEY("limits", "connections_per_user", CFG_U32, max_connections_per_user, 1, 65536, 128),
    KEY("limits", "idle_timeout", CFG_U32, idle_timeout, 1, 86400, 300),
    KEY("limits", "streams_per_connection", CFG_U32, max_streams_per_conn, 1, 1024, 16),
    KEY("limits", "streams_per_user", CFG_U32, max_streams_per_user, 1, 1u << 20, 256),
    KEY("limits", "batch_size", CFG_U32, max_batch_size, 1, 1u << 20, 4096),
    KEY("limits", "prefetch", CFG_U32, max_prefetch, 1, 1024, 64),
    KEY("limits", "frame_size", CFG_SIZE, max_frame_size, 512, 1ull << 20, PROTO_MAX_REQUEST),
    KEY("limits", "output_buffer", CFG_SIZE, max_output_buffer, 64ull << 10, 1ull << 40,
        1ull << 20),
    KEY("limits", "output_timeout", CFG_U32, output_timeout, 1, 86400, 30),
    KEY("limits", "file_size", CFG_SIZE, max_file_size, 1, 1ull << 36, 64ull << 20),
    KEY_AT("limits", "pixels", CFG_U64, max_pixels, 1, 1ull << 40, 100000000, CFG_RESTART),
    KEY_AT("limits", "audio_seconds", CFG_U32, max_audio_seconds, 1, 86400, 600, CFG_RESTART),
    KEY_AT("limits", "audio_channels", CFG_U32, max_audio_channels, 1, 1024, 16, CFG_RESTART),
    KEY("limits", "release_timeout", CFG_U32, release_timeout, 1, 86400, 60),
    KEY("limits", "client_memory", CFG_SIZE, client_memory, 1ull << 20, UINT64_MAX, 0),
    KEY("limits", "user_memory", CFG_SIZE, user_memory, 0, UINT64_MAX, 0),
    KEY("profile", "samples", CFG_U32, profile_samples, 0, 1u << 20, 0),
    KEY("profile", "worker_share", CFG_U32, profile_worker_share, 1, 100, 100),
    KEY("profile", "memory", CFG_SIZE, profile_memory, 1ull << 20, 1ull << 40, 256ull << 20),
    KEY_AT("metrics", "listen", CFG_LISTEN, metrics_listen, 0, 0, 0, CFG_RESTART),
    KEY_AT("source", "endpoint", CFG_STR, source_endpoint, 0, 0, 0, CFG_RESTART),
    KEY_AT("source", "region", CFG_STR, source_region, 0, 0, 0, CFG_RESTART),
    KEY_AT("source", "credentials_file", CFG_STR, source_credentials_file, 0, 0, 0,
           CFG_RESTART),
    KEY_AT("source", "retries", CFG_U32, source_retries, 0, 100, 5, CFG_RESTART),
    KEY_AT("source", "timeout_ms", CFG_U32, source_timeout_ms, 10, 3600000, 30000, CFG_RESTART),
    KEY_AT("source", "connect_timeout_ms", CFG_U32, source_connect_timeout_ms, 10, 600000, 5000,
           CFG_RESTART),
    KEY_AT("source", "page_keys", CFG_U32, source_page_keys, 1, 1000, 1000, CFG_RESTART),
    KEY_AT("source", "index_window", CFG_SIZE, source_index_window, 4096, 64ull << 20, 1ull << 20,
           CFG_RESTART),
};
#define CFG_NKEYS (sizeof(cfg_keys) / sizeof(cfg_keys[0]))

/* Parsing state: the document, the file's name and the error buffer. */
struct cfg_parse {
    yaml_document_t *doc;
    const char *file;
    char *err;
    size_t errlen;
    size_t line[CFG_NKEYS]; /* where each scalar key was set (0: default) */
};

/* Keys and values are quoted verbatim: the message is kept one line, so
 * neither can forge log lines (journald reads a "<N>" prefix per line). */
static void one_line(char *s)
{
    for (char *p = s; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
}

static void cfg_verror(struct cfg_parse *ps, size_t line, const char *key, const char *fmt,
                       va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (key)
        snprintf(ps->err, ps->errlen, "%s:%zu: key '%s': %s", ps->file, line, key, msg);
    else
        snprintf(ps->err, ps->errlen, "%s:%zu: %s", ps->file, line, msg);
    one_line(ps->err);
}

__attribute__((format(printf, 4, 5)))
static int cfg_error(struct cfg_parse *ps, const yaml_node_t *node, const char *key,
                     const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cfg_verror(ps, node ? node->start_mark.line + 1 : 0, key, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

__attribute__((format(printf, 4, 5)))
static int cfg_error_line(struct cfg_parse *ps, size_t line, const char *key,
                          const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cfg_verror(ps, line, key, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static const char *node_kind(const yaml_node_t *n)
{
    switch (n->type) {
    case YAML_MAPPING_NODE: return "a mapping";
    case YAML_SEQUENCE_NODE: return "a list";
    default: return "a scalar";
    }
}

/* ---- sizes and numbers ---- */

static uint64_t total_ram(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    return pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0;
}

int config_parse_size(const char *s, uint64_t *out)
{
    static const struct { const char *suffix; uint64_t mul; } units[] = {
        {"", 1},           {"b", 1},
        {"k", 1ull << 10}, {"kb", 1ull << 10}, {"kib", 1ull << 10},
        {"m", 1ull << 20}, {"mb", 1ull << 20}, {"mib", 1ull << 20},
        {"g", 1ull << 30}, {"gb", 1ull << 30}, {"gib", 1ull << 30},
        {"t", 1ull << 40}, {"tb", 1ull << 40}, {"tib", 1ull << 40},
    };
    char *end;
    if (!s || !isdigit((unsigned char)*s))
        return -EINVAL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s)
        return -EINVAL;
    while (*end == ' ')
        end++;
    if (strcmp(end, "%") == 0) {
        if (v > 100)
            return -EINVAL;
        *out = (uint64_t)((double)total_ram() * v / 100.0);
        return 0;
    }
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcasecmp(end, units[i].suffix) == 0) {
            double b = v * (double)units[i].mul;
            if (b >= 18446744073709551616.0)
                return -EINVAL;
            *out = (uint64_t)b;
            return 0;
        }
    }
    return -EINVAL;
}

static int parse_uint(const char *s, int base, uint64_t *out)
{
    char *end;
    if (!s || !isdigit((unsigned char)*s))
        return -EINVAL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, base);
    if (errno || *end)
        return -EINVAL;
    *out = v;
    return 0;
}

int config_parse_listen(const char *s, struct sockaddr_storage *out)
{
    char buf[128];
    uint64_t port;
    int len = (int)sizeof(*out);
    const char *colon = strrchr(s, ':');
    memset(out, 0, sizeof(*out));
    if (parse_uint(s, 10, &port) == 0) /* a port alone: loopback */
        snprintf(buf, sizeof(buf), "127.0.0.1:%s", s);
    else if (colon && (size_t)(colon - s) == strlen("localhost") &&
             strncmp(s, "localhost", strlen("localhost")) == 0)
        snprintf(buf, sizeof(buf), "127.0.0.1%s", colon);
    else if (colon && colon[1] && colon > s &&
             (colon[-1] == ']' || strchr(s, ':') == colon)) /* IPv6 in brackets */
        snprintf(buf, sizeof(buf), "%s", s);
    else
        return -EINVAL; /* no port */
    char *pcolon = strrchr(buf, ':');
    if (parse_uint(pcolon + 1, 10, &port) < 0 || port > 65535)
        return -EINVAL;
    snprintf(pcolon + 1, sizeof(buf) - (size_t)(pcolon + 1 - buf), "1"); /* libevent refuses 0 */
    if (evutil_parse_sockaddr_port(buf, (struct sockaddr *)out, &len) < 0)
        return -EINVAL;
    if (out->ss_family == AF_INET6)
        ((struct sockaddr_in6 *)out)->sin6_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in *)out)->sin_port = htons((uint16_t)port);
    return 0;
}

/* ---- scalar keys ---- */

static const struct cfg_key *cfg_find_key(const char *section, const char *name)
{
    for (size_t i = 0; i < CFG_NKEYS; i++) {
        const struct cfg_key *k = &cfg_keys[i];
        if (((!k->section && !section) ||
             (k->section && section && strcmp(k->section, section) == 0)) &&
            strcmp(k->name, name) == 0)
            return k;
    }
    return NULL;
}

/* A group name (getgrnam_r) or number. Returns 0, -ENOENT (no such
 * group), or another negative errno. */
static int cfg_group(const char *s, uint32_t *gid)
{
    uint64_t v;
    if (parse_uint(s, 10, &v) == 0) {
        if (v >= CONFIG_NO_GROUP)
            return -ERANGE;
        *gid = (uint32_t)v;
        return 0;
    }
    long max = sysconf(_SC_GETGR_R_SIZE_MAX);
    size_t len = max > 0 ? (size_t)max : 16384;
    for (;;) {
        struct group gr, *res = NULL;
        char *buf = malloc(len);
        if (!buf)
            return -ENOMEM;
        int rc = getgrnam_r(s, &gr, buf, len, &res);
        if (rc == ERANGE && len < (1u << 20)) {
            free(buf);
            len *= 2;
            continue;
        }
        if (rc == 0 && res)
            *gid = (uint32_t)res->gr_gid;
        free(buf);
        return rc ? -rc : res ? 0 : -ENOENT;
    }
}

static int cfg_set_key(struct cfg_parse *ps, struct config *c, const struct cfg_key *k,
                       const char *keyname, const yaml_node_t *val)
{
    const char *s = scalar(val);
    void *field = (char *)c + k->off;
    uint64_t v = 0;
    int lvl, rc;

    if (!s)
        return cfg_error(ps, val, keyname, "expected a scalar, found %s", node_kind(val));
    ps->line[k - cfg_keys] = val->start_mark.line + 1;
    switch (k->type) {
    case CFG_GROUP:
        if ((rc = cfg_group(s, (uint32_t *)field)) == -ENOMEM)
            return rc;
        if (rc == -ERANGE)
            return cfg_error(ps, val, keyname, "%s is out of range [0, %u]", s,
                             CONFIG_NO_GROUP - 1);
        if (rc < 0)
            return cfg_error(ps, val, keyname, "'%s' is not a group (%s)", s,
                             rc == -ENOENT ? "no such group" : strerror(-rc));
        return 0;
    case CFG_STR: {
        if (!*s)
            return cfg_error(ps, val, keyname, "must not be empty");
        char *dup = strdup(s);
        if (!dup)
            return -ENOMEM;
        free(*(char **)field);
        *(char **)field = dup;
        return 0;
    }
    case CFG_LISTEN: {
        struct sockaddr_storage sa;
        char *dup = NULL;
        if (*s && strcmp(s, "off") != 0) {
            if (config_parse_listen(s, &sa) < 0)
                return cfg_error(ps, val, keyname,
                                 "'%s' is not PORT, HOST:PORT (a numeric address) or off", s);
            if (!(dup = strdup(s)))
                return -ENOMEM;
        }
        free(*(char **)field);
        *(char **)field = dup;
        return 0;
    }
    case CFG_LOGLEVEL:
        lvl = log_level_parse(s);
        if (lvl < 0)
            return cfg_error(ps, val, keyname,
                             "'%s' is not one of error, warn, info, debug", s);
        *(int *)field = lvl;
        return 0;
    case CFG_ENUM:
        for (int i = 0; k->names[i]; i++) {
            if (strcmp(s, k->names[i]) == 0) {
                *(uint32_t *)field = (uint32_t)i;
                return 0;
            }
        }
        {
            char allowed[128] = "";
            for (int i = 0; k->names[i]; i++)
                snprintf(allowed + strlen(allowed), sizeof(allowed) - strlen(allowed), "%s%s",
                         i ? ", " : "", k->names[i]);
            return cfg_error(ps, val, keyname, "'%s' is not one of %s", s, allowed);
        }
    case CFG_MODE:
        if (parse_uint(s, 8, &v) < 0)
            return cfg_error(ps, val, keyname, "'%s' is not an octal mode", s);
        break;
    case CFG_SIZE:
        if (config_parse_size(s, &v) < 0)
            return cfg_error(ps, val, keyname,
                             "'%s' is not a size (e.g. 512MiB, 2GiB, 25%%)", s);
        break;
    case CFG_U32:
    case CFG_U64:
        if (parse_uint(s, 10, &v) < 0)
            return cfg_error(ps, val, keyname, "'%s' is not a non-negative integer", s);
        break;
    }
    if (v < k->min || v > k->max)
        return cfg_error(ps, val, keyname, "%s is out of range [%llu, %llu]", s,
                         (unsigned long long)k->min, (unsigned long long)k->max);
    if (k->type == CFG_U32 || k->type == CFG_MODE)
        *(uint32_t *)field = (uint32_t)v;
    else
        *(uint64_t *)field = v;
    return 0;
}

/* Iterates a mapping, refusing duplicate and non-scalar keys. */
typedef int (*cfg_pair_fn)(struct cfg_parse *ps, void *arg, const char *key,
                           const yaml_node_t *knode, const yaml_node_t *val);

static int cfg_each_pair(struct cfg_parse *ps, const yaml_node_t *map, const char *where,
                         cfg_pair_fn fn, void *arg)
{
    if (map->type != YAML_MAPPING_NODE)
        return cfg_error(ps, map, where, "expected a mapping, found %s", node_kind(map));
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start;
         p < map->data.mapping.pairs.top; p++) {
        const yaml_node_t *k = yaml_document_get_node(ps->doc, p->key);
        const yaml_node_t *v = yaml_document_get_node(ps->doc, p->value);
        const char *name = scalar(k);
        if (!name)
            return cfg_error(ps, k, where, "keys must be scalars");
        for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < p; q++)
            if (strcmp(scalar(yaml_document_get_node(ps->doc, q->key)), name) == 0)
                return cfg_error(ps, k, name, "duplicate key");
        int rc = fn(ps, arg, name, k, v);
        if (rc < 0)
            return rc;
    }
    return 0;
}

struct section_arg {
    struct config *c;
    const char *section;
};

static int cfg_section_pair(struct cfg_parse *ps, void *arg, const char *key,
                            const yaml_node_t *knode, const yaml_node_t *val)
{
    struct section_arg *sa = arg;
    char full[128];
    snprintf(full, sizeof(full), "%s.%s", sa->section, key);
    const struct cfg_key *k = cfg_find_key(sa->section, key);
    if (!k)
        return cfg_error(ps, knode, full, "unknown key");
    return cfg_set_key(ps, sa->c, k, full, val);
}

/* ---- datasets ---- */

static void default_pipeline(struct config_dataset *d)
{
    char err[64];
    uint32_t bad;
    step_init_simple(&d->steps[0], "decode", NULL, err, sizeof(err));
    step_init_simple(&d->steps[1], "resize", "256", err, sizeof(err));
    step_init_simple(&d->steps[2], "center_crop", "224", err, sizeof(err));
    step_init_simple(&d->steps[3], "random_flip", "0.5", err, sizeof(err));
    d->nsteps = 4;
    d->split = 3;
    config_dataset_chain(d, &bad, err, sizeof(err));
}

/* One parameter's value(s) into a: a scalar, or a list of scalars. */
static int cfg_step_value(struct cfg_parse *ps, const char *key, const yaml_node_t *v,
                          struct step_arg *a)
{
    a->n = 0;
    a->list = v->type == YAML_SEQUENCE_NODE;
    if (v->type == YAML_SCALAR_NODE) {
        a->v[a->n++] = scalar(v);
        return 0;
    }
    if (v->type != YAML_SEQUENCE_NODE)
        return cfg_error(ps, v, key, "expected a value or a list of values, found %s",
                         node_kind(v));
    for (yaml_node_item_t *it = v->data.sequence.items.start;
         it < v->data.sequence.items.top; it++) {
        const yaml_node_t *e = yaml_document_get_node(ps->doc, *it);
        if (!scalar(e))
            return cfg_error(ps, e, key, "list values must be scalars, found %s",
                             node_kind(e));
        if (a->n == STEP_ARG_VALUES_MAX)
            return cfg_error(ps, e, key, "more than %d values", STEP_ARG_VALUES_MAX);
        a->v[a->n++] = scalar(e);
    }
    return 0;
}

/* A step's parameters: `- NAME: VALUE`, `- NAME: [V, ...]` or
 * `- NAME: {KEY: VALUE, ...}` (v is what follows NAME). nodes[i] is where
 * args->a[i] was written. */
static int cfg_step_args(struct cfg_parse *ps, const char *name, const yaml_node_t *v,
                         struct step_args *args, const yaml_node_t **nodes)
{
    char key[96];
    args->n = 0;
    if (v->type == YAML_SCALAR_NODE && v->data.scalar.length == 0)
        return 0; /* `- NAME:` */
    if (v->type != YAML_MAPPING_NODE) {
        const char *param = step_main_param(name);
        snprintf(key, sizeof(key), "steps.%s%s%s", name, param ? "." : "", param ? param : "");
        nodes[0] = v;
        args->n = 1;
        args->a[0].key = NULL;
        return cfg_step_value(ps, key, v, &args->a[0]);
    }
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top;
         p++) {
        const yaml_node_t *k = yaml_document_get_node(ps->doc, p->key);
        const yaml_node_t *val = yaml_document_get_node(ps->doc, p->value);
        const char *kname = scalar(k);
        snprintf(key, sizeof(key), "steps.%s.%s", name, kname ? kname : "?");
        if (!kname)
            return cfg_error(ps, k, "steps", "parameter names must be scalars");
        for (uint32_t i = 0; i < args->n; i++)
            if (strcmp(args->a[i].key, kname) == 0)
                return cfg_error(ps, k, key, "duplicate parameter");
        if (args->n == STEP_ARGS_MAX)
            return cfg_error(ps, k, key, "more than %d parameters", STEP_ARGS_MAX);
        struct step_arg *a = &args->a[args->n];
        a->key = kname;
        nodes[args->n] = val;
        int rc = cfg_step_value(ps, key, val, a);
        if (rc < 0)
            return rc;
        args->n++;
    }
    return 0;
}

static int cfg_steps(struct cfg_parse *ps, struct config_dataset *d, const yaml_node_t *seq)
{
    char err[256], key[96];
    const yaml_node_t *step_nodes[CONFIG_MAX_STEPS];
    if (seq->type != YAML_SEQUENCE_NODE)
        return cfg_error(ps, seq, "steps", "expected a list, found %s", node_kind(seq));
    d->nsteps = 0;
    for (yaml_node_item_t *it = seq->data.sequence.items.start;
         it < seq->data.sequence.items.top; it++) {
        const yaml_node_t *n = yaml_document_get_node(ps->doc, *it);
        const char *name = scalar(n);
        struct step_args args = {.n = 0};
        const yaml_node_t *arg_nodes[STEP_ARGS_MAX];
        int bad = -1, rc;
        if (d->nsteps == CONFIG_MAX_STEPS)
            return cfg_error(ps, n, "steps", "more than %d steps", CONFIG_MAX_STEPS);
        if (!name) {
            if (n->type != YAML_MAPPING_NODE ||
                n->data.mapping.pairs.top - n->data.mapping.pairs.start != 1)
                return cfg_error(ps, n, "steps",
                                 "a step is NAME or a one-key mapping NAME: PARAMETERS");
            const yaml_node_pair_t *p = n->data.mapping.pairs.start;
            name = scalar(yaml_document_get_node(ps->doc, p->key));
            if (!name)
                return cfg_error(ps, n, "steps", "a step's name is a scalar");
            rc = cfg_step_args(ps, name, yaml_document_get_node(ps->doc, p->value), &args,
                               arg_nodes);
            if (rc < 0)
                return rc;
        }
        if (step_init(&d->steps[d->nsteps], name, &args, &bad, err, sizeof(err)) < 0) {
            if (bad < 0)
                return cfg_error(ps, n, "steps", "%s", err);
            const char *pname = args.a[bad].key ? args.a[bad].key
                                                : step_main_param(name);
            snprintf(key, sizeof(key), "steps.%s.%s", name, pname ? pname : "?");
            return cfg_error(ps, arg_nodes[bad], key, "%s", err);
        }
        step_nodes[d->nsteps++] = n;
    }
    if (d->nsteps == 0)
        return cfg_error(ps, seq, "steps", "the pipeline is empty");
    uint32_t bad, written = d->nsteps;
    if (config_dataset_chain(d, &bad, err, sizeof(err)) < 0)
        return cfg_error(ps, step_nodes[bad], "steps", "%s", err);
    for (uint32_t i = 0; i < d->nbatch_steps; i++) /* the tail config_dataset_chain took */
        d->batch_lines[i] = (int)step_nodes[written - d->nbatch_steps + i]->start_mark.line + 1;
    return 0;
}

/* raw, zstd (level 3), or zstd:LEVEL with LEVEL in 1..19. */
static int cfg_encoding(struct cfg_parse *ps, struct config_dataset *d, const yaml_node_t *val)
{
    const char *s = scalar(val);
    uint64_t lvl;
    if (s && strcmp(s, "raw") == 0) {
        d->zstd_level = 0;
        return 0;
    }
    if (s && strcmp(s, "zstd") == 0) {
        d->zstd_level = 3;
        return 0;
    }
    if (s && strncmp(s, "zstd:", 5) == 0 && parse_uint(s + 5, 10, &lvl) == 0 && lvl >= 1 &&
        lvl <= 19) {
        d->zstd_level = (int)lvl;
        return 0;
    }
    return cfg_error(ps, val, "encoding", "'%s' is not raw, zstd or zstd:LEVEL (1-19)",
                     s ? s : "(not a scalar)");
}

/* ---- batch: how a dataset's samples become a batch (issue 18) ----
 *
 *   batch: {pad: longest, max_length: N}
 *
 * Samples whose time axis varies are padded with zeros to the longest in
 * their batch, their lengths sent beside them; max_length (frames, or a
 * spectrogram's columns) bounds a sample's slot, so a stream's buffers and
 * ring have a fixed size whatever the clips; a longer sample is cropped to
 * it. pad: none (the default) wants a fixed shape (time_crop). */
#define CONFIG_PAD_MAX_LENGTH (1u << 24)

struct batch_arg {
    int pad;                        /* pad: longest */
    uint64_t max_length;            /* 0: not given */
    const yaml_node_t *max_node;
};

static const struct {
    const char *key;
    uint64_t min, max; /* max_length's range; pad is an enum */
} batch_keys[] = {
    {"pad", 0, 1},
    {"max_length", 1, CONFIG_PAD_MAX_LENGTH},
};

static int cfg_batch_pair(struct cfg_parse *ps, void *arg, const char *key,
                          const yaml_node_t *knode, const yaml_node_t *val)
{
    struct batch_arg *ba = arg;
    char full[64];
    const char *s = scalar(val);
    uint64_t v;
    size_t k = 0;
    while (k < sizeof(batch_keys) / sizeof(batch_keys[0]) && strcmp(batch_keys[k].key, key))
        k++;
    snprintf(full, sizeof(full), "batch.%s", key);
    if (k == sizeof(batch_keys) / sizeof(batch_keys[0]))
        return cfg_error(ps, knode, full, "unknown key (batch.pad and batch.max_length are)");
    if (!s)
        return cfg_error(ps, val, full, "expected a scalar, found %s", node_kind(val));
    if (k == 0) {
        if (strcmp(s, "longest") != 0 && strcmp(s, "none") != 0)
            return cfg_error(ps, val, full, "'%s' is not longest or none", s);
        ba->pad = strcmp(s, "longest") == 0;
        return 0;
    }
    if (parse_uint(s, 10, &v) < 0)
        return cfg_error(ps, val, full, "'%s' is not a non-negative integer", s);
    if (v < batch_keys[k].min || v > batch_keys[k].max)
        return cfg_error(ps, val, full, "%s is out of range [%llu, %llu]", s,
                         (unsigned long long)batch_keys[k].min,
                         (unsigned long long)batch_keys[k].max);
    ba->max_length = v;
    ba->max_node = val;
    return 0;
}

static int cfg_batch(struct cfg_parse *ps, struct config_dataset *d, const yaml_node_t *val)
{
    struct batch_arg ba = {0, 0, NULL};
    int rc = cfg_each_pair(ps, val, "batch", cfg_batch_pair, &ba);
    if (rc < 0)
        return rc;
    if (ba.pad && !ba.max_length)
        return cfg_error(ps, val, "batch.max_length", "pad: longest needs max_length, the "
                         "longest sample a batch holds (longer ones are cropped to it)");
    if (!ba.pad && ba.max_length)
        return cfg_error(ps, ba.max_node, "batch.max_length", "max_length is for pad: longest");
    d->pad_max = (uint32_t)ba.max_length;
    d->batch_line = (int)val->start_mark.line + 1;
    return 0;
}

/* Once the steps are known: padding is for samples with a time axis (an
 * audio sample's w), whose other dimensions are fixed. */
static int cfg_batch_check(struct cfg_parse *ps, const struct config_dataset *d)
{
    const struct config_stage *o = &d->chain[d->nsteps];
    char what[96];
    if (!d->pad_max)
        return 0;
    step_type_describe(&o->type, what, sizeof(what));
    if (o->type.domain != STEP_DOMAIN_WAVEFORM && o->type.domain != STEP_DOMAIN_SPECTROGRAM)
        return cfg_error_line(ps, (size_t)d->batch_line, "batch.pad", "pad: longest pads the "
                              "time axis of audio samples (waveform [C, T], spectrogram "
                              "[C, F, T]), but the pipeline gives %s", what);
    if (o->c == 0 || o->h == 0)
        return cfg_error_line(ps, (size_t)d->batch_line, "batch.pad", "pad: longest pads "
                              "only the time axis, but the pipeline's channels vary per file "
                              "(decode_audio with mono: true)");
    if (d->nbatch_steps)
        return cfg_error_line(ps, (size_t)d->batch_line, "batch.pad", "pad: longest and "
                              "batch-level steps (mixup, cutmix) do not go together");
    return 0;
}

struct dataset_arg {
    struct config_dataset *d;
    const yaml_node_t *split; /* resolved after steps are known */
};

/* root: [SHARD.tar, ...]: tar shards listed one by one (local paths, or
 * URLs of one bucket or server), in the list's order, as the brace pattern
 * that names them (braces_join). */
static int cfg_root_list(struct cfg_parse *ps, struct config_dataset *d, const yaml_node_t *val)
{
    const char *names[4096];
    size_t n = 0, dir_len = 0;
    for (yaml_node_item_t *it = val->data.sequence.items.start;
         it < val->data.sequence.items.top; it++) {
        const yaml_node_t *e = yaml_document_get_node(ps->doc, *it);
        const char *v = scalar(e);
        if (!v || !source_name_ends(v, ".tar"))
            return cfg_error(ps, e, "root", "a list root names tar shards: %s does not end in "
                             ".tar", v ? v : "(not a scalar)");
        if (n > 0 && source_kind_of(v) != source_kind_of(names[0]))
            return cfg_error(ps, e, "root", "%s: the shards of a list are all local, all "
                             "s3:// or all http(s)://", v);
        if (n == sizeof(names) / sizeof(names[0]))
            return cfg_error(ps, e, "root", "more than %zu shards in a list (use a brace "
                             "pattern)", n);
        names[n++] = v;
    }
    if (n == 0)
        return cfg_error(ps, val, "root", "an empty list");
    char *root = braces_join(names, n, ".tar", &dir_len);
    if (!root)
        return -ENOMEM;
    const char *sep = strstr(root, "://");
    if (sep && (dir_len <= (size_t)(sep - root) + 3 || !memchr(sep + 3, '/', dir_len -
                                                               (size_t)(sep - root) - 3))) {
        free(root);
        return cfg_error(ps, val, "root", "the shards of a list are in one bucket (or on one "
                         "server)");
    }
    d->root_line = (int)val->start_mark.line + 1;
    free(d->root);
    d->root = root;
    return 0;
}

/* A dataset's own source keys (`source:` under the dataset), beside the
 * global source.* ones they override for it: which field each fills. */
static const struct {
    const char *name;
    size_t off, len;
} cfg_dataset_source_keys[] = {
    {"endpoint", offsetof(struct config_source, endpoint),
     sizeof(((struct config_source *)0)->endpoint)},
    {"region", offsetof(struct config_source, region),
     sizeof(((struct config_source *)0)->region)},
    {"credentials_file", offsetof(struct config_source, credentials_file),
     sizeof(((struct config_source *)0)->credentials_file)},
};
#define CFG_DS_SOURCE_KEYS 3

static int cfg_dataset_source_pair(struct cfg_parse *ps, void *arg, const char *key,
                                   const yaml_node_t *knode, const yaml_node_t *val)
{
    struct config_dataset *d = arg;
    const char *s = scalar(val);
    char full[64];
    snprintf(full, sizeof(full), "source.%s", key);
    for (int i = 0; i < CFG_DS_SOURCE_KEYS; i++) {
        if (strcmp(key, cfg_dataset_source_keys[i].name) != 0)
            continue;
        size_t cap = cfg_dataset_source_keys[i].len;
        if (!s || !*s)
            return cfg_error(ps, val, full, "expected a non-empty scalar");
        if (strlen(s) >= cap)
            return cfg_error(ps, val, full, "longer than %zu characters", cap - 1);
        snprintf((char *)&d->source + cfg_dataset_source_keys[i].off, cap, "%s", s);
        d->source.own_line[i] = (int)val->start_mark.line + 1;
        return 0;
    }
    return cfg_error(ps, knode, full, "unknown key of a dataset's source (endpoint, region, "
                     "credentials_file; the others are global: source.*)");
}

static int cfg_dataset_pair(struct cfg_parse *ps, void *arg, const char *key,
                            const yaml_node_t *knode, const yaml_node_t *val)
{
    struct dataset_arg *da = arg;
    struct config_dataset *d = da->d;
    const char *s = scalar(val);

    if (strcmp(key, "steps") == 0)
        return cfg_steps(ps, d, val);
    if (strcmp(key, "split") == 0) {
        if (!s)
            return cfg_error(ps, val, key, "expected a step name or a count");
        da->split = val;
        return 0;
    }
    if (strcmp(key, "encoding") == 0)
        return cfg_encoding(ps, d, val);
    if (strcmp(key, "follow_symlinks") == 0) {
        static const char *const yes[] = {"true", "yes", "on"}, *const no[] = {"false", "no", "off"};
        for (int i = 0; s && i < 3; i++) {
            if (strcmp(s, yes[i]) == 0 || strcmp(s, no[i]) == 0) {
                d->follow_symlinks = strcmp(s, yes[i]) == 0;
                return 0;
            }
        }
        return cfg_error(ps, val, key, "'%s' is not true or false", s ? s : "(not a scalar)");
    }
    if (strcmp(key, "root") == 0 && val->type == YAML_SEQUENCE_NODE)
        return cfg_root_list(ps, d, val);
    if (strcmp(key, "batch") == 0)
        return cfg_batch(ps, d, val);
    if (strcmp(key, "source") == 0)
        return cfg_each_pair(ps, val, "source", cfg_dataset_source_pair, d);
    if (strcmp(key, "name") != 0 && strcmp(key, "root") != 0 &&
        strcmp(key, "on_error") != 0)
        return cfg_error(ps, knode, key,
                         "unknown dataset key (name, root, steps, split, on_error, encoding, "
                         "follow_symlinks, batch, source)");
    if (!s || !*s)
        return cfg_error(ps, val, key, "expected a non-empty scalar");
    if (strcmp(key, "name") == 0) {
        if (strlen(s) >= sizeof(d->name))
            return cfg_error(ps, val, key, "longer than %d characters", CONFIG_NAME_MAX - 1);
        for (const char *q = s; *q; q++)
            if (!isalnum((unsigned char)*q) && !strchr("-_.", *q))
                return cfg_error(ps, val, key, "'%s': use letters, digits, '-', '_', '.'", s);
        snprintf(d->name, sizeof(d->name), "%s", s);
    } else if (strcmp(key, "root") == 0) {
        d->root_line = (int)val->start_mark.line + 1;
        free(d->root);
        if (!(d->root = strdup(s)))
            return -ENOMEM;
    } else if (strcmp(s, "skip") == 0) {
        d->on_error = CONFIG_ON_ERROR_SKIP;
    } else if (strcmp(s, "fail") == 0) {
        d->on_error = CONFIG_ON_ERROR_FAIL;
    } else {
        return cfg_error(ps, val, key, "'%s' is not skip or fail", s);
    }
    return 0;
}

/* Split: a count of offline steps, or the name of the last offline step.
 * Absent: every step before the first random or float32 one runs offline
 * (uint8 is a quarter of the cache that float32 would take, and the float
 * conversion costs less than reading 4x the bytes). */
static int cfg_split(struct cfg_parse *ps, struct config_dataset *d, const yaml_node_t *n)
{
    uint32_t split = d->nsteps;
    if (!n) {
        for (uint32_t i = 0; i < d->nsteps; i++)
            if (step_is_random(&d->steps[i]) ||
                (d->chain[i + 1].type.domain == STEP_DOMAIN_IMAGE &&
                 step_out_dtype(&d->steps[i], PROTO_DTYPE_U8) != PROTO_DTYPE_U8)) {
                split = i;
                break;
            }
        /* decode (dct_scale) scales for the random crop after it: online. */
        if (split == 1 && step_split_check(d->steps, d->nsteps, 1, NULL, 0) < 0)
            split = 0;
        d->split = split;
        return 0;
    }
    const char *s = scalar(n);
    uint64_t v;
    if (strcmp(s, "auto") == 0) { /* the profiler chooses; the default until then */
        d->split_auto = 1;
        return cfg_split(ps, d, NULL);
    }
    if (parse_uint(s, 10, &v) == 0) {
        if (v > d->nsteps)
            return cfg_error(ps, n, "split", "%s is more than the %u steps", s, d->nsteps);
        split = (uint32_t)v;
    } else {
        split = UINT32_MAX;
        for (uint32_t i = 0; i < d->nsteps; i++)
            if (strcmp(step_name(d->steps[i].kind), s) == 0)
                split = i + 1;
        if (split == UINT32_MAX)
            return cfg_error(ps, n, "split", "'%s' is not a step of this dataset", s);
    }
    char err[256];
    if (step_split_check(d->steps, d->nsteps, split, err, sizeof(err)) < 0)
        return cfg_error(ps, n, "split", "%s", err);
    d->split = split;
    return 0;
}

struct cfg_name {
    const char *name;
    uint32_t i; /* index in datasets */
};

static int cfg_name_cmp(const void *a, const void *b)
{
    const struct cfg_name *x = a, *y = b;
    int r = strcmp(x->name, y->name);
    return r ? r : (x->i > y->i) - (x->i < y->i);
}

/* Names declared twice, found by sorting (O(n log n): 200,000 datasets
 * load in seconds). The error is the one a scan in file order meets first:
 * at the earliest second declaration of a name, naming the first. */
static int cfg_duplicates(struct cfg_parse *ps, const struct config *c)
{
    uint32_t n = c->ndatasets, dup = UINT32_MAX, first = 0;
    if (n < 2)
        return 0;
    struct cfg_name *v = malloc(n * sizeof(*v));
    if (!v)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++)
        v[i] = (struct cfg_name){c->datasets[i].name, i};
    qsort(v, n, sizeof(*v), cfg_name_cmp);
    for (uint32_t k = 1; k < n; k++) {
        /* v[k] repeats v[k - 1]'s name, and comes second when v[k - 1] is first. */
        if (strcmp(v[k].name, v[k - 1].name) != 0 ||
            (k >= 2 && strcmp(v[k - 2].name, v[k].name) == 0))
            continue;
        if (v[k].i < dup) {
            dup = v[k].i;
            first = v[k - 1].i;
        }
    }
    free(v);
    if (dup == UINT32_MAX)
        return 0;
    return cfg_error_line(ps, (size_t)c->datasets[dup].line, "datasets.name",
                          "'%s' is declared twice (line %d)", c->datasets[dup].name,
                          c->datasets[first].line);
}

static int cfg_datasets(struct cfg_parse *ps, struct config *c, const yaml_node_t *seq)
{
    if (seq->type != YAML_SEQUENCE_NODE)
        return cfg_error(ps, seq, "datasets", "expected a list, found %s", node_kind(seq));
    for (yaml_node_item_t *it = seq->data.sequence.items.start;
         it < seq->data.sequence.items.top; it++) {
        const yaml_node_t *n = yaml_document_get_node(ps->doc, *it);
        /* Room doubles at each power of two: one more at a time would move
         * the whole array (its page tables, at least) per dataset. */
        if ((c->ndatasets & (c->ndatasets - 1)) == 0) {
            size_t cap = c->ndatasets ? 2 * (size_t)c->ndatasets : 1;
            struct config_dataset *arr = realloc(c->datasets, cap * sizeof(*arr));
            if (!arr)
                return -ENOMEM;
            c->datasets = arr;
        }
        struct config_dataset *d = &c->datasets[c->ndatasets++];
        memset(d, 0, sizeof(*d));
        default_pipeline(d);
        d->line = (int)n->start_mark.line + 1;

        struct dataset_arg da = {d, NULL};
        int rc = cfg_each_pair(ps, n, "datasets", cfg_dataset_pair, &da);
        if (rc < 0)
            return rc;
        if (!d->name[0])
            return cfg_error(ps, n, "datasets.name", "a dataset needs a name");
        if (!d->root)
            return cfg_error(ps, n, "datasets.root", "dataset '%s' needs a root", d->name);
        if ((rc = cfg_split(ps, d, da.split)) < 0)
            return rc;
        if ((rc = cfg_batch_check(ps, d)) < 0)
            return rc;
    }
    return cfg_duplicates(ps, c);
}

/* ---- cluster ---- */

/* cluster.memcached (a list of HOST:PORT, or one), cluster.timeout_ms,
 * cluster.item_max (a size): cluster.c checks the values. */
static int cfg_cluster_pair(struct cfg_parse *ps, void *arg, const char *key,
                            const yaml_node_t *knode, const yaml_node_t *val)
{
    struct config *c = arg;
    char full[64], why[256], num[32];
    snprintf(full, sizeof(full), "cluster.%s", key);
    if (strcmp(key, "memcached") == 0) {
        const yaml_node_t *one = val, *items = NULL;
        size_t n = 1;
        cluster_config_free(&c->cluster); /* a later key replaces the list */
        if (val->type == YAML_SEQUENCE_NODE) {
            items = val;
            n = (size_t)(val->data.sequence.items.top - val->data.sequence.items.start);
        }
        for (size_t i = 0; i < n; i++) {
            if (items)
                one = yaml_document_get_node(ps->doc, items->data.sequence.items.start[i]);
            const char *v = scalar(one);
            if (!v)
                return cfg_error(ps, one, full, "expected HOST:PORT, found %s", node_kind(one));
            for (uint32_t k = 0; k < c->cluster.nservers; k++)
                if (strcmp(c->cluster.servers[k], v) == 0)
                    return cfg_error(ps, one, full, "'%s' is listed twice", v);
            int rc = cluster_config_set(&c->cluster, key, v, why, sizeof(why));
            if (rc == -ENOMEM)
                return rc;
            if (rc < 0)
                return cfg_error(ps, one, full, "%s", why);
        }
        return 0;
    }
    if (strcmp(key, "timeout_ms") != 0 && strcmp(key, "item_max") != 0)
        return cfg_error(ps, knode, full, "unknown key (cluster.memcached, cluster.timeout_ms "
                         "and cluster.item_max are)");
    const char *v = scalar(val);
    if (!v)
        return cfg_error(ps, val, full, "expected a scalar, found %s", node_kind(val));
    if (strcmp(key, "item_max") == 0) { /* a size: 1MiB */
        uint64_t sz;
        if (config_parse_size(v, &sz) < 0)
            return cfg_error(ps, val, full, "'%s' is not a size", v);
        snprintf(num, sizeof(num), "%llu", (unsigned long long)sz);
        v = num;
    }
    int rc = cluster_config_set(&c->cluster, key, v, why, sizeof(why));
    if (rc == -ENOMEM)
        return rc;
    return rc < 0 ? cfg_error(ps, val, full, "%s", why) : 0;
}

/* cluster.* as one line, for config_diff. */
static void cfg_cluster_format(const struct config *c, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < c->cluster.nservers && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%s", i ? "," : "", c->cluster.servers[i]);
    if (at < len)
        snprintf(buf + at, len - at, " timeout_ms %u item_max %llu", c->cluster.timeout_ms,
                 (unsigned long long)c->cluster.item_max);
}

/* 1 when key is a section of the table (cache, io, limits, ...). */
static int cfg_is_section(const char *key)
{
    for (size_t i = 0; i < CFG_NKEYS; i++)
        if (cfg_keys[i].section && strcmp(cfg_keys[i].section, key) == 0)
            return 1;
    return 0;
}

static int cfg_top_pair(struct cfg_parse *ps, void *arg, const char *key,
                        const yaml_node_t *knode, const yaml_node_t *val)
{
    struct config *c = arg;
    if (cfg_is_section(key)) {
        struct section_arg sa = {c, key};
        return cfg_each_pair(ps, val, key, cfg_section_pair, &sa);
    }
    if (strcmp(key, "datasets") == 0)
        return cfg_datasets(ps, c, val);
    if (strcmp(key, "cluster") == 0)
        return cfg_each_pair(ps, val, key, cfg_cluster_pair, c);
    const struct cfg_key *k = cfg_find_key(NULL, key);
    if (!k)
        return cfg_error(ps, knode, key, "unknown key");
    return cfg_set_key(ps, c, k, key, val);
}

/* Rules across keys, checked once the whole file is read; the error names
 * the key the file set last of the two (the other may be a default). */
static int cfg_check(struct cfg_parse *ps, const struct config *c)
{
    const struct cfg_key *pf = cfg_find_key(NULL, "prefetch");
    const struct cfg_key *lim = cfg_find_key("limits", "prefetch");
    size_t lpf = ps->line[pf - cfg_keys], llim = ps->line[lim - cfg_keys];
    if (c->prefetch > c->max_prefetch) {
        if (lpf >= llim)
            return cfg_error_line(ps, lpf, "prefetch", "%u is over limits.prefetch (%u)",
                                  c->prefetch, c->max_prefetch);
        return cfg_error_line(ps, llim, "limits.prefetch", "%u is under prefetch (%u)",
                              c->max_prefetch, c->prefetch);
    }
    return 0;
}

/* cache.dir into a dataset's source; one too long for the copy keeps no
 * shard index (never an error). */
static void cfg_source_cache_dir(struct config_source *s, const char *path)
{
    if (path && strlen(path) < sizeof(s->cache_dir))
        snprintf(s->cache_dir, sizeof(s->cache_dir), "%s", path);
    else
        s->cache_dir[0] = 0;
}

/* The source.* keys into d (fixed buffers: a dataset's copy outlives c). */
static int cfg_dataset_source(struct cfg_parse *ps, const struct config *c,
                              struct config_dataset *d)
{
    static const char *const names[] = {"endpoint", "region", "credentials_file"};
    const char *vals[] = {c->source_endpoint, c->source_region, c->source_credentials_file};
    char *dst[] = {d->source.endpoint, d->source.region, d->source.credentials_file};
    size_t lens[] = {sizeof(d->source.endpoint), sizeof(d->source.region),
                     sizeof(d->source.credentials_file)};
    for (int i = 0; i < 3; i++) {
        if (d->source.own_line[i]) /* the dataset's own */
            continue;
        if (strlen(vals[i] ? vals[i] : "") < lens[i]) {
            snprintf(dst[i], lens[i], "%s", vals[i] ? vals[i] : "");
            continue;
        }
        if (!ps)
            return -EINVAL;
        const struct cfg_key *k = cfg_find_key("source", names[i]);
        char key[64];
        snprintf(key, sizeof(key), "source.%s", names[i]);
        return cfg_error_line(ps, ps->line[k - cfg_keys], key, "longer than %zu characters",
                              lens[i] - 1);
    }
    d->source.retries = c->source_retries;
    d->source.timeout_ms = c->source_timeout_ms;
    d->source.connect_timeout_ms = c->source_connect_timeout_ms;
    d->source.page_keys = c->source_page_keys;
    d->source.index_window = c->source_index_window;
    d->source.depth = c->io_depth;
    d->source.max_bytes = c->max_file_size;
    cfg_source_cache_dir(&d->source, c->cache_dir);
    return 0;
}

int config_set_cache_dir(struct config *c, const char *path)
{
    char *p = strdup(path);
    if (!p)
        return -ENOMEM;
    free(c->cache_dir);
    c->cache_dir = p;
    for (uint32_t i = 0; i < c->ndatasets; i++)
        cfg_source_cache_dir(&c->datasets[i].source, path);
    return 0;
}

/* ---- public ---- */

int config_defaults(struct config *c)
{
    char path[4096];
    memset(c, 0, sizeof(*c));
    for (size_t i = 0; i < CFG_NKEYS; i++) {
        const struct cfg_key *k = &cfg_keys[i];
        void *field = (char *)c + k->off;
        if (k->type == CFG_U32 || k->type == CFG_MODE || k->type == CFG_ENUM ||
            k->type == CFG_GROUP)
            *(uint32_t *)field = (uint32_t)k->def;
        else if (k->type == CFG_U64 || k->type == CFG_SIZE)
            *(uint64_t *)field = k->def;
        else if (k->type == CFG_LOGLEVEL)
            *(int *)field = (int)k->def;
    }
    cluster_config_init(&c->cluster);
    c->cache_memory = total_ram() / 4;
    if (c->cache_memory == 0)
        c->cache_memory = 1ull << 30;
    c->client_memory = c->cache_memory; /* a quarter of RAM */
    c->user_memory = c->client_memory / 2;

    if (proto_default_socket(path, sizeof(path)) < 0)
        return -ENAMETOOLONG;
    if (!(c->socket_path = strdup(path)))
        return -ENOMEM;

    const char *sd = getenv("CACHE_DIRECTORY"), *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    if (sd && *sd)
        snprintf(path, sizeof(path), "%s", sd);
    else if (xdg && *xdg)
        snprintf(path, sizeof(path), "%s/presto", xdg);
    else if (home && *home)
        snprintf(path, sizeof(path), "%s/.cache/presto", home);
    else
        snprintf(path, sizeof(path), "/tmp/presto-%u/cache", (unsigned)getuid());
    if (!(c->cache_dir = strdup(path)))
        return -ENOMEM;
    return 0;
}

int config_load_string(struct config *c, const char *yaml, size_t len,
                       const char *name, char *err, size_t errlen)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    struct cfg_parse ps = {&doc, name, err, errlen};
    int rc = config_defaults(c);

    if (rc < 0)
        return rc;
    c->user_memory = 0; /* half of the file's client_memory unless it says */
    if (!yaml_parser_initialize(&parser))
        return -ENOMEM;
    yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);
    if (!yaml_parser_load(&parser, &doc)) {
        snprintf(err, errlen, "%s:%zu: YAML syntax: %s%s%s", name,
                 parser.problem_mark.line + 1, parser.problem ? parser.problem : "error",
                 parser.context ? " " : "", parser.context ? parser.context : "");
        one_line(err);
        yaml_parser_delete(&parser);
        return -EINVAL;
    }
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root && !(root->type == YAML_SCALAR_NODE && root->data.scalar.length == 0))
        rc = cfg_each_pair(&ps, root, "(top level)", cfg_top_pair, c);
    if (rc == 0)
        rc = cfg_check(&ps, c);
    if (rc == 0 && c->user_memory == 0) /* unset, or 0: half of client_memory */
        c->user_memory = c->client_memory / 2;
    for (uint32_t i = 0; rc == 0 && i < c->ndatasets; i++)
        rc = cfg_dataset_source(&ps, c, &c->datasets[i]);
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return rc;
}

int config_load(struct config *c, const char *path, char *err, size_t errlen)
{
    if (!path)
        return config_defaults(c);
    memset(c, 0, sizeof(*c));
    FILE *f = fopen(path, "r");
    if (!f) {
        int rc = -errno;
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return rc;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int rc = 0;
    for (;;) {
        if (cap - len < 4096) {
            if (cap >= (16u << 20)) {
                snprintf(err, errlen, "%s: larger than 16 MiB", path);
                rc = -EFBIG;
                break;
            }
            char *nb = realloc(buf, cap = cap ? cap * 2 : 8192);
            if (!nb) {
                rc = -ENOMEM;
                break;
            }
            buf = nb;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0)
            break;
    }
    if (rc == 0 && ferror(f)) {
        snprintf(err, errlen, "%s: read error", path);
        rc = -EIO;
    }
    fclose(f);
    if (rc == 0)
        rc = config_load_string(c, buf, len, path, err, errlen);
    if (rc == 0 && !(c->path = strdup(path)))
        rc = -ENOMEM;
    free(buf);
    return rc;
}

int config_add_dataset_arg(struct config *c, const char *arg, char *err, size_t errlen)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg || !eq[1] || (size_t)(eq - arg) >= CONFIG_NAME_MAX) {
        snprintf(err, errlen, "--dataset '%s': expected NAME=DIR", arg);
        return -EINVAL;
    }
    char name[CONFIG_NAME_MAX];
    snprintf(name, sizeof(name), "%.*s", (int)(eq - arg), arg);
    if (config_find_dataset(c, name)) {
        snprintf(err, errlen, "--dataset '%s': dataset '%s' already exists", arg, name);
        return -EINVAL;
    }
    struct config_dataset *arr = realloc(c->datasets, (c->ndatasets + 1) * sizeof(*arr));
    if (!arr)
        return -ENOMEM;
    c->datasets = arr;
    struct config_dataset *d = &arr[c->ndatasets];
    memset(d, 0, sizeof(*d));
    memcpy(d->name, name, sizeof(d->name));
    if (!(d->root = strdup(eq + 1)))
        return -ENOMEM;
    default_pipeline(d);
    if (cfg_dataset_source(NULL, c, d) < 0) {
        snprintf(err, errlen, "--dataset '%s': source.* keys too long", arg);
        free(d->root);
        return -EINVAL;
    }
    c->ndatasets++;
    return 0;
}

int config_check_roots(const struct config *c, char *err, size_t errlen)
{
    for (uint32_t i = 0; i < c->ndatasets; i++) {
        const struct config_dataset *d = &c->datasets[i];
        struct stat sb;
        /* A directory, or a manifest or tar shard file (source.h); URLs and
         * shard patterns are the source's to check when it opens. */
        enum source_kind kind = source_kind_of(d->root);
        if (kind == SOURCE_HTTP || kind == SOURCE_S3 || strchr(d->root, '{'))
            continue;
        const char *why = stat(d->root, &sb) < 0 ? strerror(errno)
                          : kind == SOURCE_DIR && !S_ISDIR(sb.st_mode)
                              ? "not a directory (nor a .csv, .jsonl or .tar file)"
                          : kind != SOURCE_DIR && !S_ISREG(sb.st_mode) ? "not a regular file"
                                                                       : NULL;
        if (!why)
            continue;
        if (d->root_line > 0 && c->path)
            snprintf(err, errlen, "%s:%d: key 'datasets.root': dataset '%s': %s: %s", c->path,
                     d->root_line, d->name, d->root, why);
        else
            snprintf(err, errlen, "--dataset %s=%s: %s", d->name, d->root, why);
        one_line(err);
        return -EINVAL;
    }
    return 0;
}

int config_dataset_chain(struct config_dataset *d, uint32_t *bad, char *err, size_t errlen)
{
    int rc = step_chain_init(d->steps, d->nsteps, bad, err, errlen);
    if (rc < 0)
        return rc;
    /* The batch-level steps (last, step_chain_init saw to it) leave the
     * samples' pipeline. */
    uint32_t k = 0;
    while (k < d->nsteps && !step_is_batch(&d->steps[k]))
        k++;
    if (k < d->nsteps) {
        if (k == 0 || d->nsteps - k > CONFIG_MAX_BATCH_STEPS) { /* the chain check refuses these */
            *bad = k;
            snprintf(err, errlen, "mixup and cutmix come after the samples' steps");
            return -EINVAL;
        }
        d->nbatch_steps = d->nsteps - k;
        memcpy(d->batch_steps, d->steps + k, d->nbatch_steps * sizeof(d->steps[0]));
        memset(d->batch_lines, 0, sizeof(d->batch_lines));
        d->nsteps = k;
    }
    struct config_stage st = {0, 0, 0, PROTO_DTYPE_U8, STEP_LAYOUT_NHWC,
                              0xcbf29ce484222325ull, 0, step_type_source};
    for (uint32_t i = 0; i < d->nsteps; i++) {
        const struct step *s = &d->steps[i];
        st.step_fp = step_fingerprint(s, 0xcbf29ce484222325ull);
        d->chain[i] = st;
        step_out_shape(s, st.h, st.w, st.c, &st.h, &st.w, &st.c);
        st.dtype = step_out_dtype(s, st.dtype);
        st.layout = step_out_layout(s, st.layout);
        step_gives(s, &st.type, &st.type);
        st.fingerprint = step_fingerprint(s, st.fingerprint);
    }
    st.step_fp = 0;
    d->chain[d->nsteps] = st;
    return 0;
}

struct proto_labels config_dataset_labels(const struct config_dataset *d)
{
    for (uint32_t i = 0; i < d->nbatch_steps; i++)
        if (step_soft_classes(&d->batch_steps[i]))
            return (struct proto_labels){PROTO_DTYPE_F32,
                                         step_soft_classes(&d->batch_steps[i]), 0};
    struct proto_labels l = PROTO_LABELS_INT64;
    l.lengths = d->pad_max > 0; /* batch: {pad: longest} */
    return l;
}

const struct config_dataset *config_find_dataset(const struct config *c, const char *name)
{
    for (uint32_t i = 0; i < c->ndatasets; i++)
        if (strcmp(c->datasets[i].name, name) == 0)
            return &c->datasets[i];
    return NULL;
}

int config_dataset_copy(struct config_dataset *dst, const struct config_dataset *src)
{
    *dst = *src;
    dst->root = strdup(src->root);
    return dst->root ? 0 : -ENOMEM;
}

void config_dataset_free(struct config_dataset *d)
{
    free(d->root);
    d->root = NULL;
}

int config_dataset_same(const struct config_dataset *a, const struct config_dataset *b)
{
    if (strcmp(a->name, b->name) != 0 || strcmp(a->root, b->root) != 0 ||
        a->nsteps != b->nsteps || a->split != b->split || a->on_error != b->on_error ||
        a->zstd_level != b->zstd_level || a->follow_symlinks != b->follow_symlinks ||
        a->split_auto != b->split_auto || a->pad_max != b->pad_max ||
        strcmp(a->source.endpoint, b->source.endpoint) != 0 ||
        strcmp(a->source.region, b->source.region) != 0 ||
        strcmp(a->source.credentials_file, b->source.credentials_file) != 0)
        return 0;
    /* A step's fingerprint covers every parameter, at full precision. */
    for (uint32_t i = 0; i < a->nsteps; i++)
        if (a->steps[i].kind != b->steps[i].kind ||
            step_fingerprint(&a->steps[i], 0) != step_fingerprint(&b->steps[i], 0))
            return 0;
    if (a->nbatch_steps != b->nbatch_steps)
        return 0;
    for (uint32_t i = 0; i < a->nbatch_steps; i++)
        if (step_fingerprint(&a->batch_steps[i], 0) != step_fingerprint(&b->batch_steps[i], 0))
            return 0;
    return 1;
}

/* A key's value in c as text. */
static void cfg_format(const struct config *c, const struct cfg_key *k, char *buf, size_t len)
{
    const void *field = (const char *)c + k->off;
    static const char *const levels[] = {"error", "warn", "info", "debug"};
    uint32_t u32 = 0;
    if (k->type == CFG_U32 || k->type == CFG_MODE || k->type == CFG_ENUM ||
        k->type == CFG_GROUP)
        u32 = *(const uint32_t *)field;
    switch (k->type) {
    case CFG_STR:
        snprintf(buf, len, "%s", *(char *const *)field ? *(char *const *)field : "");
        break;
    case CFG_LISTEN:
        snprintf(buf, len, "%s", *(char *const *)field ? *(char *const *)field : "off");
        break;
    case CFG_LOGLEVEL: {
        int lvl = *(const int *)field;
        snprintf(buf, len, "%s", lvl >= 0 && lvl <= LOG_LEVEL_DEBUG ? levels[lvl] : "?");
        break;
    }
    case CFG_ENUM:
        snprintf(buf, len, "%s", k->names[u32]);
        break;
    case CFG_MODE:
        snprintf(buf, len, "0%o", u32);
        break;
    case CFG_GROUP:
        if (u32 == CONFIG_NO_GROUP)
            snprintf(buf, len, "none");
        else
            snprintf(buf, len, "%u", u32);
        break;
    case CFG_U32:
        snprintf(buf, len, "%u", u32);
        break;
    case CFG_U64:
    case CFG_SIZE:
        snprintf(buf, len, "%llu", (unsigned long long)*(const uint64_t *)field);
        break;
    }
}

void config_diff(const struct config *a, const struct config *b, config_diff_fn fn, void *arg)
{
    for (size_t i = 0; i < CFG_NKEYS; i++) {
        const struct cfg_key *k = &cfg_keys[i];
        char was[256], now[256], name[96];
        cfg_format(a, k, was, sizeof(was));
        cfg_format(b, k, now, sizeof(now));
        if (strcmp(was, now) == 0)
            continue;
        snprintf(name, sizeof(name), "%s%s%s", k->section ? k->section : "",
                 k->section ? "." : "", k->name);
        fn(arg, name, was, now, k->when == CFG_LIVE);
    }
    char was[1024], now[1024];
    cfg_cluster_format(a, was, sizeof(was));
    cfg_cluster_format(b, now, sizeof(now));
    if (strcmp(was, now) != 0)
        fn(arg, "cluster", was, now, 0);
}

int config_keep_restart_keys(struct config *c, const struct config *running)
{
    struct cluster_config cl = running->cluster;
    cl.servers = NULL;
    cl.nservers = 0;
    for (uint32_t i = 0; i < running->cluster.nservers; i++)
        if (cluster_config_set(&cl, "memcached", running->cluster.servers[i], NULL, 0) < 0) {
            cluster_config_free(&cl);
            return -ENOMEM;
        }
    cluster_config_free(&c->cluster);
    c->cluster = cl;
    for (size_t i = 0; i < CFG_NKEYS; i++) {
        const struct cfg_key *k = &cfg_keys[i];
        void *dst = (char *)c + k->off;
        const void *src = (const char *)running + k->off;
        if (k->when != CFG_RESTART)
            continue;
        switch (k->type) {
        case CFG_STR:
        case CFG_LISTEN: {
            const char *v = *(char *const *)src;
            char *dup = v ? strdup(v) : NULL;
            if (v && !dup)
                return -ENOMEM;
            free(*(char **)dst);
            *(char **)dst = dup;
            break;
        }
        case CFG_LOGLEVEL:
            *(int *)dst = *(const int *)src;
            break;
        case CFG_U64:
        case CFG_SIZE:
            *(uint64_t *)dst = *(const uint64_t *)src;
            break;
        default:
            *(uint32_t *)dst = *(const uint32_t *)src;
        }
    }
    return 0;
}

void config_free(struct config *c)
{
    for (uint32_t i = 0; i < c->ndatasets; i++)
        free(c->datasets[i].root);
    free(c->datasets);
    free(c->path);
    free(c->socket_path);
    free(c->metrics_listen);
    free(c->cache_dir);
    free(c->source_endpoint);
    free(c->source_region);
    free(c->source_credentials_file);
    cluster_config_free(&c->cluster);
    memset(c, 0, sizeof(*c));
}
