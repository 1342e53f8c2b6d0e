/*
 * WebDataset samples from tar shards: members in archive order are grouped
 * by key as webdataset's tariterators do (the key is the name up to the
 * first dot of its last component, directories included: "a/b.c/x.seg.png"
 * is key "a/b.c/x", extension "seg.png"; consecutive members with one key
 * make one sample, and a sample never spans shards). A sample's image is
 * its first member whose extension is one of torchvision's image
 * extensions (fileext.h, case-insensitive); its label is the text of its
 * .cls member (labels.h: an integer, or a class name).
 *
 * Samples without an image or a label, members with an unsafe name
 * (tar_name_unsafe), a second image in one sample, and entries that are
 * not regular files are skipped and counted (struct wds_counts), never a
 * reason to refuse the shard; a malformed label (too long, or breaking
 * labels.h's rule) is an error naming the shard and member.
 *
 * Driving it:
 *     for each shard s, each tar entry e (tar.h):
 *         if (wds_member(w, s, &e) == 1)        // a .cls: wants the text
 *             tar_reader_want_data(...), then wds_member_data(w, &e_with_data)
 *     wds_end_shard(w) after each shard; wds_finish(w) at the end.
 */
#ifndef PRESTO_WDS_H
#define PRESTO_WDS_H

#include <stddef.h>
#include <stdint.h>

#include "fileext.h"
#include "tar.h"

#define WDS_LABEL_MAX 256 /* bytes in a .cls member */

struct wds_sample {
    uint32_t shard;     /* index of the shard, in the order given */
    int32_t ext;        /* fileext_sample index of the image (or audio) member */
    uint64_t offset;    /* the image member's data in the shard */
    uint64_t size;
};

struct wds_counts {
    uint64_t members;        /* tar entries seen */
    uint64_t not_files;      /* directories, links, devices */
    uint64_t unsafe_names;   /* absolute or ".." names */
    uint64_t no_image;       /* samples without an image member */
    uint64_t no_label;       /* samples without a .cls member */
    uint64_t extra_images;   /* a second image member in one sample */
    uint64_t images[FILEEXT_COUNT]; /* samples per extension (fileext_sample) */
};

struct wds;

struct wds *wds_new(void);
void wds_free(struct wds *w);
/* Samples are audio members (.wav .flac .ogg .mp3), not images. */
void wds_set_audio(struct wds *w, int audio);

/* One tar entry of shard (shards in order, entries in archive order).
 * Returns 1 when its data is wanted (a .cls label: give it to
 * wds_member_data), 0, or -errno (-EINVAL with wds_error: a label member
 * over WDS_LABEL_MAX bytes). */
int wds_member(struct wds *w, uint32_t shard, const struct tar_entry *e);
/* The data of the entry wds_member wanted (e->data, e->size bytes). */
int wds_member_data(struct wds *w, const struct tar_entry *e);
/* The shard ended: its last sample is complete. */
int wds_end_shard(struct wds *w);
/* All shards done: labels resolved. 0 or -errno. */
int wds_finish(struct wds *w);

size_t wds_count(const struct wds *w);
const struct wds_sample *wds_sample(const struct wds *w, size_t i);
const char *wds_key(const struct wds *w, size_t i);
uint32_t wds_label(const struct wds *w, size_t i);
/* Class names when the labels are names (labels.h), else 0 / NULL. */
uint32_t wds_nclasses(const struct wds *w);
const char *wds_class(const struct wds *w, uint32_t c);
const struct wds_counts *wds_counts(const struct wds *w);
/* The message of the last -EINVAL. */
const char *wds_error(const struct wds *w);

#endif
