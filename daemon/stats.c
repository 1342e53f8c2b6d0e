/* Counters, gauges and their documents: see stats.h. */
#include "stats.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "json.h"

uint64_t stats_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int stats_percpu_init(struct stats_percpu *pc, unsigned threads, unsigned n)
{
    /* Each thread's counters on cache lines of their own. */
    unsigned stride = (n + 7) & ~7u;
    void *p = NULL;
    memset(pc, 0, sizeof(*pc));
    if (posix_memalign(&p, 64, (size_t)(threads ? threads : 1) * (stride ? stride : 8) * 8) != 0)
        return -ENOMEM;
    memset(p, 0, (size_t)(threads ? threads : 1) * (stride ? stride : 8) * 8);
    pc->v = p;
    pc->n = n;
    pc->stride = stride;
    pc->threads = threads;
    return 0;
}

void stats_percpu_free(struct stats_percpu *pc)
{
    free(pc->v);
    memset(pc, 0, sizeof(*pc));
}

void stats_percpu_sum(const struct stats_percpu *pc, uint64_t *out)
{
    for (unsigned i = 0; i < pc->n; i++)
        out[i] = 0;
    for (unsigned t = 0; t < pc->threads; t++)
        for (unsigned i = 0; i < pc->n; i++)
            out[i] += __atomic_load_n(&pc->v[(size_t)t * pc->stride + i], __ATOMIC_RELAXED);
}

double stats_ratio(uint64_t num, uint64_t den)
{
    return den ? (double)num / (double)den : 0.0;
}

/* ---- documents ---- */

#define STATS_MAX_DEPTH 16
#define STATS_PREFIX_MAX 256
#define STATS_LABELS_MAX 1024

/* A growable text. */
struct text {
    char *buf;
    size_t len, cap;
};

/* A Prometheus metric family: its samples, in the order they came. */
struct family {
    char *name;
    const struct stats_decl *d;
    struct text samples;
};

struct stats_out {
    enum stats_format format;
    int failed;
    struct json j;
    /* Prometheus: the section path's name prefix and labels, with their
     * lengths at each depth. */
    int depth;
    char prefix[STATS_PREFIX_MAX];
    char labels[STATS_LABELS_MAX];
    size_t prefix_at[STATS_MAX_DEPTH], labels_at[STATS_MAX_DEPTH];
    struct family *fam;
    size_t nfam, capfam;
};

static void text_add(struct stats_out *o, struct text *t, const char *s, size_t n)
{
    if (o->failed)
        return;
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->len + n + 1)
            cap *= 2;
        char *b = realloc(t->buf, cap);
        if (!b) {
            o->failed = 1;
            return;
        }
        t->buf = b;
        t->cap = cap;
    }
    memcpy(t->buf + t->len, s, n);
    t->len += n;
    t->buf[t->len] = '\0';
}

static void text_str(struct stats_out *o, struct text *t, const char *s)
{
    text_add(o, t, s, strlen(s));
}

/* s with backslash and newline escaped (and the double quote when quote). */
static void text_escaped(struct stats_out *o, struct text *t, const char *s, int quote)
{
    for (; *s; s++) {
        if (*s == '\\')
            text_add(o, t, "\\\\", 2);
        else if (*s == '\n')
            text_add(o, t, "\\n", 2);
        else if (*s == '"' && quote)
            text_add(o, t, "\\\"", 2);
        else
            text_add(o, t, s, 1);
    }
}

struct stats_out *stats_out_new(enum stats_format format)
{
    struct stats_out *o = calloc(1, sizeof(*o));
    if (!o)
        return NULL;
    o->format = format;
    json_init(&o->j);
    snprintf(o->prefix, sizeof(o->prefix), "presto");
    return o;
}

char *stats_out_finish(struct stats_out *o)
{
    char *doc = NULL;
    if (o->format == STATS_JSON) {
        if (!o->failed && !o->j.failed) {
            doc = o->j.buf;
            o->j.buf = NULL;
        }
        json_free(&o->j);
        free(o);
        return doc;
    }
    struct text t = {0};
    text_add(o, &t, "", 0); /* an empty document is "" */
    for (size_t i = 0; i < o->nfam; i++) {
        const struct family *f = &o->fam[i];
        text_str(o, &t, "# HELP ");
        text_str(o, &t, f->name);
        text_str(o, &t, " ");
        text_escaped(o, &t, f->d->help, 0);
        if (f->d->unit[0]) {
            text_str(o, &t, " (");
            text_escaped(o, &t, strcmp(f->d->unit, "microseconds") == 0 ? "seconds" : f->d->unit,
                         0);
            text_str(o, &t, ")");
        }
        text_str(o, &t, "\n# TYPE ");
        text_str(o, &t, f->name);
        text_str(o, &t, f->d->kind == STATS_COUNTER ? " counter\n" : " gauge\n");
        text_add(o, &t, f->samples.buf, f->samples.len);
    }
    for (size_t i = 0; i < o->nfam; i++) {
        free(o->fam[i].name);
        free(o->fam[i].samples.buf);
    }
    free(o->fam);
    if (o->failed) {
        free(t.buf);
        t.buf = NULL;
    }
    json_free(&o->j);
    free(o);
    return t.buf;
}

void stats_begin(struct stats_out *o, const char *key, const char *name, const char *label,
                 const char *value)
{
    if (o->format == STATS_JSON) {
        json_object_begin(&o->j, key);
        return;
    }
    if (o->depth == STATS_MAX_DEPTH) {
        o->failed = 1;
        return;
    }
    o->prefix_at[o->depth] = strlen(o->prefix);
    o->labels_at[o->depth] = strlen(o->labels);
    o->depth++;
    const char *part = name ? name : key;
    if (part && part[0]) {
        size_t n = strlen(o->prefix);
        snprintf(o->prefix + n, sizeof(o->prefix) - n, "_%s", part);
    }
    if (label) {
        struct text t = {0};
        text_str(o, &t, o->labels);
        if (t.len)
            text_str(o, &t, ",");
        text_str(o, &t, label);
        text_str(o, &t, "=\"");
        text_escaped(o, &t, value ? value : "", 1);
        text_str(o, &t, "\"");
        if (t.buf && t.len < sizeof(o->labels))
            memcpy(o->labels, t.buf, t.len + 1);
        else
            o->failed = 1;
        free(t.buf);
    }
}

void stats_end(struct stats_out *o)
{
    if (o->format == STATS_JSON) {
        json_object_end(&o->j);
        return;
    }
    if (o->depth == 0)
        return;
    o->depth--;
    o->prefix[o->prefix_at[o->depth]] = '\0';
    o->labels[o->labels_at[o->depth]] = '\0';
}

void stats_list_begin(struct stats_out *o, const char *key)
{
    if (o->format == STATS_JSON)
        json_array_begin(&o->j, key);
}

void stats_list_end(struct stats_out *o)
{
    if (o->format == STATS_JSON)
        json_array_end(&o->j);
}

/* The family named name (made, with d's HELP and TYPE, on first use). */
static struct family *family(struct stats_out *o, const char *name, const struct stats_decl *d)
{
    for (size_t i = 0; i < o->nfam; i++)
        if (strcmp(o->fam[i].name, name) == 0)
            return &o->fam[i];
    if (o->nfam == o->capfam) {
        size_t cap = o->capfam ? 2 * o->capfam : 64;
        struct family *f = realloc(o->fam, cap * sizeof(*f));
        if (!f)
            return NULL;
        o->fam = f;
        o->capfam = cap;
    }
    struct family *f = &o->fam[o->nfam];
    memset(f, 0, sizeof(*f));
    if (!(f->name = strdup(name)))
        return NULL;
    f->d = d;
    o->nfam++;
    return f;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* One field as a Prometheus sample. */
static void prom_field(struct stats_out *o, const struct stats_decl *d, const struct stats_val *v)
{
    char name[STATS_PREFIX_MAX + 96], num[48];
    const char *extra_label = NULL;
    /* Prometheus wants base units: microseconds go out as seconds. */
    int micro = strcmp(d->unit, "microseconds") == 0;
    if (d->kind == STATS_LABEL)
        return;
    if (d->kind == STATS_INFO) {
        if (v->type != STATS_STR || !v->s[0])
            return;
        snprintf(name, sizeof(name), "%s_%s_info", o->prefix, d->name);
        extra_label = d->name;
        snprintf(num, sizeof(num), "1");
    } else {
        if (v->type == STATS_STR)
            return; /* a gauge that has no value (admin_group "none") */
        const char *base = d->metric[0] ? d->metric : d->name;
        snprintf(name, sizeof(name), "%s_%s%s", o->prefix, base,
                 d->kind == STATS_COUNTER && !ends_with(base, "_total") ? "_total" : "");
        if (micro)
            snprintf(num, sizeof(num), "%.15g",
                     (v->type == STATS_U64 ? (double)v->u : v->f) / 1e6);
        else if (v->type == STATS_U64)
            snprintf(num, sizeof(num), "%llu", (unsigned long long)v->u);
        else if (v->f != v->f)
            snprintf(num, sizeof(num), "NaN");
        else
            snprintf(num, sizeof(num), "%.15g", v->f);
    }
    struct family *f = family(o, name, d);
    if (!f) {
        o->failed = 1;
        return;
    }
    struct text *t = &f->samples;
    text_str(o, t, name);
    if (o->labels[0] || extra_label) {
        text_str(o, t, "{");
        text_str(o, t, o->labels);
        if (extra_label) {
            if (o->labels[0])
                text_str(o, t, ",");
            text_str(o, t, extra_label);
            text_str(o, t, "=\"");
            text_escaped(o, t, v->s, 1);
            text_str(o, t, "\"");
        }
        text_str(o, t, "}");
    }
    text_str(o, t, " ");
    text_str(o, t, num);
    text_str(o, t, "\n");
}

void stats_emit(struct stats_out *o, const struct stats_decl *d, const struct stats_val *v,
                unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        if (o->format == STATS_PROMETHEUS) {
            prom_field(o, &d[i], &v[i]);
            continue;
        }
        switch (v[i].type) {
        case STATS_U64: json_u64(&o->j, d[i].name, v[i].u); break;
        case STATS_F64: json_double(&o->j, d[i].name, v[i].f); break;
        case STATS_STR: json_str(&o->j, d[i].name, v[i].s); break;
        }
    }
}

void stats_emit_u64(struct stats_out *o, const struct stats_decl *d, const uint64_t *v,
                    unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        struct stats_val x = stats_u64(v[i]);
        stats_emit(o, &d[i], &x, 1);
    }
}
