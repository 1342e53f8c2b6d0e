/*
 * libFuzzer target: the parsers a source runs on what a dataset or a
 * server hands it (daemon/manifest.c, tar.c with wds.c, braces.c,
 * s3xml.c). Input: one knob byte, then the text. Knob % 6 picks:
 *   0 a .csv manifest   1 a .jsonl manifest   2 a tar shard (its every
 *   member's header read as the indexer reads it, .cls data fetched, then
 *   grouped as WebDataset samples)   3 a brace pattern (at most 1000 names)
 *   4 a ListObjectsV2 page   5 an S3 error document
 * Checks besides "no crash, no sanitizer report": every result within
 * what the headers promise (manifest labels below the class count when
 * they are names; tar members inside the shard, at block boundaries;
 * sample offsets inside the shard; at most 1000 expanded names; error
 * messages set on every refusal).
 */
#include <errno.h>
#include <string.h>

#include "braces.h"
#include "fuzz.h"
#include "manifest.h"
#include "s3xml.h"
#include "tar.h"
#include "wds.h"

static void manifest(const char *name, const char *text, size_t len)
{
    struct manifest *m;
    char err[300] = "";
    int rc = manifest_parse(name, "/base", text, len, &m, err, sizeof(err));
    if (rc < 0) {
        FUZZ_CHECK(rc == -EINVAL || rc == -ENOMEM);
        FUZZ_CHECK(rc == -ENOMEM || strncmp(err, name, strlen(name)) == 0);
        return;
    }
    FUZZ_CHECK(manifest_count(m) > 0);
    uint32_t nc = manifest_nclasses(m);
    for (size_t i = 0; i < manifest_count(m); i++) {
        const char *p = manifest_path(m, i);
        FUZZ_CHECK(p != NULL && p[0] != '\0');
        if (nc)
            FUZZ_CHECK(manifest_label(m, i) < nc);
        FUZZ_CHECK(manifest_line(m, i) >= 1);
    }
    for (uint32_t c = 1; c < nc; c++)
        FUZZ_CHECK(strcmp(manifest_class(m, c - 1), manifest_class(m, c)) < 0);
    manifest_free(m);
}

static void shard(const uint8_t *buf, size_t len)
{
    struct tar_reader r;
    struct wds *w = wds_new();
    FUZZ_CHECK(w != NULL);
    tar_reader_init(&r, len);
    for (int steps = 0; steps < 100000; steps++) {
        uint64_t off;
        size_t want;
        if (tar_reader_want(&r, &off, &want))
            break;
        size_t got = off >= len ? 0 : len - off < want ? len - off : want;
        /* exactly the bytes read, in a buffer of their size */
        uint8_t *chunk = malloc(got ? got : 1);
        FUZZ_CHECK(chunk != NULL);
        if (got)
            memcpy(chunk, buf + off, got);
        struct tar_entry e;
        int rc = tar_reader_feed(&r, chunk, got, &e);
        if (rc == 1 && e.data == NULL) {
            FUZZ_CHECK(e.offset % TAR_BLOCK == 0);
            FUZZ_CHECK(e.offset <= len && e.size <= len - e.offset);
            rc = wds_member(w, 0, &e);
            if (rc == 1)
                rc = tar_reader_want_data(&r);
            else if (rc == -EINVAL)
                FUZZ_CHECK(wds_error(w)[0] != '\0');
        } else if (rc == 1) {
            rc = wds_member_data(w, &e);
        } else if (rc < 0) {
            FUZZ_CHECK(rc == -EBADMSG && r.err[0] != '\0');
        }
        free(chunk);
        if (rc < 0)
            break;
    }
    if (wds_end_shard(w) == 0 && wds_finish(w) == 0) {
        for (size_t i = 0; i < wds_count(w); i++) {
            const struct wds_sample *s = wds_sample(w, i);
            FUZZ_CHECK(s->offset <= len && s->size <= len - s->offset);
            if (wds_nclasses(w))
                FUZZ_CHECK(wds_label(w, i) < wds_nclasses(w));
        }
    }
    wds_free(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t len = size - 1;
    char *text = malloc(len + 1);
    FUZZ_CHECK(text != NULL);
    memcpy(text, data + 1, len);
    text[len] = '\0';
    switch (data[0] % 6) {
    case 0:
        manifest("m.csv", text, len);
        break;
    case 1:
        manifest("m.jsonl", text, len);
        break;
    case 2:
        shard((const uint8_t *)text, len);
        break;
    case 3: {
        char **v, err[200] = "";
        size_t n;
        int rc = braces_expand(text, 1000, &v, &n, err, sizeof(err));
        if (rc == 0) {
            FUZZ_CHECK(n >= 1 && n <= 1000);
            braces_free(v, n);
        } else {
            FUZZ_CHECK(err[0] != '\0' && v == NULL && n == 0);
        }
        break;
    }
    case 4: {
        struct s3xml_page p;
        char err[256] = "";
        int rc = s3xml_list(text, len, &p, err, sizeof(err));
        FUZZ_CHECK(rc == 0 || rc == -ENOMEM || (rc == -EBADMSG && err[0]));
        for (size_t i = 0; rc == 0 && i < p.n; i++)
            FUZZ_CHECK(strlen(p.objects[i].key) <= S3XML_KEY_MAX);
        s3xml_page_free(&p);
        break;
    }
    default: {
        char code[64], msg[128];
        s3xml_error(text, len, code, sizeof(code), msg, sizeof(msg));
        FUZZ_CHECK(strlen(code) < sizeof(code) && strlen(msg) < sizeof(msg));
        break;
    }
    }
    free(text);
    return 0;
}
