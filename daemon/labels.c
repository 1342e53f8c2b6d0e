/*
 * Labels: integers, or class names indexed in sorted order (labels.h).
 * Names are kept once each in a table (open addressing) while samples
 * arrive, then sorted; each sample holds its name's first-seen number
 * until labels_finish maps it to the sorted index.
 */
#define _GNU_SOURCE /* qsort_r */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "labels.h"
#include "vec.h"

#define LABEL_NAME_MAX 1024

struct labels {
    uint32_t *v;        /* per sample: the integer, or the name's number */
    size_t n, cap;
    int decided, names;
    char **name;        /* names by first-seen number */
    uint32_t nnames;
    size_t name_cap;
    uint32_t *slots;    /* hash table of name numbers + 1 (0: empty) */
    uint32_t nslots;
    uint32_t *order;    /* name number -> sorted index, after finish */
};

struct labels *labels_new(void)
{
    return calloc(1, sizeof(struct labels));
}

void labels_free(struct labels *l)
{
    if (l == NULL)
        return;
    for (uint32_t i = 0; i < l->nnames; i++)
        free(l->name[i]);
    free(l->name);
    free(l->slots);
    free(l->order);
    free(l->v);
    free(l);
}

static int grow_slots(struct labels *l)
{
    uint32_t n = l->nslots ? l->nslots * 2 : 64;
    uint32_t *s = calloc(n, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    for (uint32_t i = 0; i < l->nslots; i++) {
        if (!l->slots[i])
            continue;
        const char *name = l->name[l->slots[i] - 1];
        uint32_t k = (uint32_t)hash_xxh64(name, strlen(name)) & (n - 1);
        while (s[k])
            k = (k + 1) & (n - 1);
        s[k] = l->slots[i];
    }
    free(l->slots);
    l->slots = s;
    l->nslots = n;
    return 0;
}

/* The number of name (len bytes), added when new; -ENOMEM. */
static int64_t intern(struct labels *l, const char *text, size_t len)
{
    if ((uint64_t)(l->nnames + 1) * 2 > l->nslots && grow_slots(l) < 0)
        return -ENOMEM;
    uint32_t k = (uint32_t)hash_xxh64(text, len) & (l->nslots - 1);
    while (l->slots[k]) {
        const char *name = l->name[l->slots[k] - 1];
        if (strlen(name) == len && memcmp(name, text, len) == 0)
            return l->slots[k] - 1;
        k = (k + 1) & (l->nslots - 1);
    }
    char **names = vec_grow(l->name, &l->name_cap, (size_t)l->nnames + 1, sizeof(*names), 16);
    if (names == NULL)
        return -ENOMEM;
    l->name = names;
    char *copy = malloc(len + 1);
    if (copy == NULL)
        return -ENOMEM;
    memcpy(copy, text, len);
    copy[len] = '\0';
    l->name[l->nnames] = copy;
    l->slots[k] = ++l->nnames;
    return l->nnames - 1;
}

/* A decimal integer 0..2^31-1, or -1. */
static int64_t integer(const char *s, size_t n)
{
    if (n == 0 || n > 10)
        return -1;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v <= INT32_MAX ? v : -1;
}

/* Text that reads as a number: an optional '-', then only digits. */
static int numeric(const char *s, size_t n)
{
    size_t i = n && s[0] == '-' ? 1 : 0;
    if (i >= n)
        return 0;
    for (; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    return 1;
}

int labels_add(struct labels *l, const char *text, size_t len, enum labels_kind kind,
               char *err, size_t errlen)
{
    int64_t iv = kind == LABELS_NAME ? -1 : integer(text, len);
    if (kind == LABELS_TEXT && iv < 0 && numeric(text, len)) {
        snprintf(err, errlen, "label '%.*s' is not an integer in 0..2147483647",
                 (int)(len < 64 ? len : 64), text);
        return -EINVAL;
    }
    int name;
    if (kind != LABELS_TEXT)
        name = kind == LABELS_NAME;
    else
        name = l->decided ? l->names : iv < 0; /* text: the first label decides */
    if (!l->decided) {
        l->decided = 1;
        l->names = name;
    }
    if (name != l->names) {
        snprintf(err, errlen, "label '%.*s' is %s, but the first label was %s",
                 (int)(len < 64 ? len : 64), text, name ? "a class name" : "an integer",
                 l->names ? "a class name" : "an integer");
        return -EINVAL;
    }
    if (!name && iv < 0) {
        snprintf(err, errlen, "label '%.*s' is not an integer in 0..2147483647",
                 (int)(len < 64 ? len : 64), text);
        return -EINVAL;
    }
    if (name && (len == 0 || len > LABEL_NAME_MAX || memchr(text, '\0', len) != NULL)) {
        snprintf(err, errlen, "class name of %zu bytes (1..%d, no NUL)", len, LABEL_NAME_MAX);
        return -EINVAL;
    }
    uint32_t *v = vec_grow(l->v, &l->cap, l->n + 1, sizeof(*v), 256);
    if (v == NULL)
        return -ENOMEM;
    l->v = v;
    if (name) {
        int64_t id = intern(l, text, len);
        if (id < 0)
            return (int)id;
        l->v[l->n++] = (uint32_t)id;
    } else {
        l->v[l->n++] = (uint32_t)iv;
    }
    return 0;
}

static int by_name(const void *a, const void *b, void *arg)
{
    const struct labels *l = arg;
    return strcmp(l->name[*(const uint32_t *)a], l->name[*(const uint32_t *)b]);
}

int labels_finish(struct labels *l)
{
    if (!l->names || l->order != NULL)
        return 0;
    uint32_t *ids = malloc((l->nnames ? l->nnames : 1) * sizeof(*ids));
    l->order = malloc((l->nnames ? l->nnames : 1) * sizeof(*l->order));
    char **sorted = malloc((l->nnames ? l->nnames : 1) * sizeof(*sorted));
    if (ids == NULL || l->order == NULL || sorted == NULL) {
        free(ids);
        free(sorted);
        free(l->order);
        l->order = NULL;
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < l->nnames; i++)
        ids[i] = i;
    qsort_r(ids, l->nnames, sizeof(*ids), by_name, l);
    for (uint32_t i = 0; i < l->nnames; i++) {
        l->order[ids[i]] = i;
        sorted[i] = l->name[ids[i]];
    }
    for (size_t i = 0; i < l->n; i++)
        l->v[i] = l->order[l->v[i]];
    free(l->name);
    l->name = sorted;
    free(ids);
    return 0;
}

size_t labels_count(const struct labels *l)
{
    return l->n;
}

uint32_t labels_get(const struct labels *l, size_t i)
{
    return i < l->n ? l->v[i] : 0;
}

uint32_t labels_nclasses(const struct labels *l)
{
    return l->names ? l->nnames : 0;
}

const char *labels_class(const struct labels *l, uint32_t c)
{
    return l->names && l->order != NULL && c < l->nnames ? l->name[c] : NULL;
}

int labels_are_names(const struct labels *l)
{
    return l->names;
}
