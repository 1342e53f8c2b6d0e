/*
 * WebDataset grouping (wds.h): one pending sample at a time, flushed when
 * the key changes or the shard ends.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fileext.h"
#include "labels.h"
#include "vec.h"
#include "wds.h"

struct wds_entry {
    struct wds_sample s;
    uint64_t key; /* offset of its key in keys */
};

struct wds {
    struct wds_entry *e;
    size_t n, cap;
    char *keys;
    size_t keys_len, keys_cap;
    struct labels *labels;
    struct wds_counts counts;
    /* the sample being gathered */
    int pending;
    uint32_t shard;
    char key[TAR_NAME_MAX + 1];
    int has_image, has_label;
    struct wds_sample image;
    char label[WDS_LABEL_MAX];
    size_t label_len;
    int want_label;
    int audio; /* wds_set_audio */
    char err[320];
};

void wds_set_audio(struct wds *w, int audio)
{
    w->audio = audio;
}

struct wds *wds_new(void)
{
    struct wds *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return NULL;
    w->labels = labels_new();
    if (w->labels == NULL) {
        free(w);
        return NULL;
    }
    return w;
}

void wds_free(struct wds *w)
{
    if (w == NULL)
        return;
    labels_free(w->labels);
    free(w->e);
    free(w->keys);
    free(w);
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

static int append(struct wds *w)
{
    size_t klen = strlen(w->key) + 1;
    struct wds_entry *e = vec_grow(w->e, &w->cap, w->n + 1, sizeof(*e), 1024);
    if (e == NULL)
        return -ENOMEM;
    w->e = e;
    char *k = vec_grow(w->keys, &w->keys_cap, w->keys_len + klen, 1, 65536);
    if (k == NULL)
        return -ENOMEM;
    w->keys = k;
    memcpy(w->keys + w->keys_len, w->key, klen);
    w->e[w->n++] = (struct wds_entry){.s = w->image, .key = w->keys_len};
    w->keys_len += klen;
    return 0;
}

/* Completes the pending sample. */
static int flush(struct wds *w)
{
    if (!w->pending)
        return 0;
    w->pending = 0;
    if (!w->has_image) {
        w->counts.no_image++;
        return 0;
    }
    size_t a = 0, b = w->label_len;
    while (a < b && is_space(w->label[a]))
        a++;
    while (b > a && is_space(w->label[b - 1]))
        b--;
    if (!w->has_label || a == b) {
        w->counts.no_label++;
        return 0;
    }
    char msg[200];
    int rc = labels_add(w->labels, w->label + a, b - a, LABELS_TEXT, msg, sizeof(msg));
    if (rc == -EINVAL)
        snprintf(w->err, sizeof(w->err), "shard %u, sample %.120s: %.180s", w->shard, w->key,
                 msg);
    if (rc < 0)
        return rc;
    rc = append(w);
    if (rc == 0)
        w->counts.images[w->image.ext]++;
    return rc;
}

int wds_member(struct wds *w, uint32_t shard, const struct tar_entry *e)
{
    w->counts.members++;
    w->want_label = 0;
    if (e->type != TAR_FILE) {
        w->counts.not_files++;
        return 0;
    }
    if (tar_name_unsafe(e->name)) {
        w->counts.unsafe_names++;
        return 0;
    }
    /* key: up to the first dot of the last component */
    const char *base = strrchr(e->name, '/');
    base = base ? base + 1 : e->name;
    const char *dot = strchr(base, '.');
    if (dot == NULL || dot == base)
        return 0; /* no key or no extension: webdataset skips it too */
    size_t klen = (size_t)(dot - e->name);
    const char *ext = dot + 1;
    size_t elen = strlen(ext);
    if (w->pending && (shard != w->shard || strlen(w->key) != klen ||
                       memcmp(w->key, e->name, klen) != 0)) {
        int rc = flush(w);
        if (rc < 0)
            return rc;
    }
    if (!w->pending) {
        w->pending = 1;
        w->shard = shard;
        memcpy(w->key, e->name, klen);
        w->key[klen] = '\0';
        w->has_image = w->has_label = 0;
        w->label_len = 0;
    }
    int img = fileext_sample_ext(ext, elen, w->audio);
    if (img >= 0) {
        if (w->has_image) {
            w->counts.extra_images++;
            return 0;
        }
        w->has_image = 1;
        w->image = (struct wds_sample){.shard = shard, .ext = img, .offset = e->offset,
                                       .size = e->size};
        return 0;
    }
    if (elen == 3 && strncasecmp(ext, "cls", 3) == 0 && !w->has_label) {
        if (e->size > WDS_LABEL_MAX) {
            snprintf(w->err, sizeof(w->err), "shard %u, member %s: a label of %llu bytes",
                     shard, e->name, (unsigned long long)e->size);
            return -EINVAL;
        }
        w->want_label = 1;
        return 1;
    }
    return 0;
}

int wds_member_data(struct wds *w, const struct tar_entry *e)
{
    if (!w->want_label || !w->pending || e->size > WDS_LABEL_MAX)
        return -EINVAL;
    w->want_label = 0;
    memcpy(w->label, e->data, (size_t)e->size);
    w->label_len = (size_t)e->size;
    w->has_label = 1;
    return 0;
}

int wds_end_shard(struct wds *w)
{
    return flush(w);
}

int wds_finish(struct wds *w)
{
    int rc = flush(w);
    return rc < 0 ? rc : labels_finish(w->labels);
}

size_t wds_count(const struct wds *w)
{
    return w->n;
}

const struct wds_sample *wds_sample(const struct wds *w, size_t i)
{
    return i < w->n ? &w->e[i].s : NULL;
}

const char *wds_key(const struct wds *w, size_t i)
{
    return i < w->n ? w->keys + w->e[i].key : NULL;
}

uint32_t wds_label(const struct wds *w, size_t i)
{
    return labels_get(w->labels, i);
}

uint32_t wds_nclasses(const struct wds *w)
{
    return labels_nclasses(w->labels);
}

const char *wds_class(const struct wds *w, uint32_t c)
{
    return labels_class(w->labels, c);
}

const struct wds_counts *wds_counts(const struct wds *w)
{
    return &w->counts;
}

const char *wds_error(const struct wds *w)
{
    return w->err;
}
