/* Unit tests for the tar reader (daemon/tar.h) and WebDataset grouping
 * (daemon/wds.h): real archives written by GNU tar (ustar, gnu and pax
 * formats, long names) and Python's tarfile, read member by member with
 * pread as the indexer reads local shards; every member's offset checked
 * against the file's bytes; then hand-made hostile headers (bad checksum,
 * sizes past the end, truncation anywhere, malformed pax, oversized names,
 * base-256 sizes) and the grouping rules (keys, image extensions, .cls
 * labels as integers or class names, what is skipped and counted). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "probecache.h"
#include "shardidx.h"
#include "tar.h"
#include "wds.h"

static char dir[256];

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    int st = system(cmd);
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static const char *python(void)
{
    const char *py = getenv("PYTHON");
    return py && *py ? py : "/usr/bin/python3";
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    struct stat st;
    fstat(fileno(f), &st);
    uint8_t *b = malloc((size_t)st.st_size + 1);
    ck_assert_uint_eq(fread(b, 1, (size_t)st.st_size, f), (size_t)st.st_size);
    fclose(f);
    *len = (size_t)st.st_size;
    return b;
}

/* Reads a shard held in memory the way the indexer reads a local one:
 * exactly the bytes tar_reader_want asks for. Calls on_entry for each
 * entry; returns 0 or the reader's error. */
typedef int (*entry_fn)(void *arg, struct tar_reader *r, const struct tar_entry *e);

static int walk(const uint8_t *buf, size_t len, entry_fn fn, void *arg, char *err,
                size_t errlen, uint64_t *reads)
{
    struct tar_reader *r = malloc(sizeof(*r));
    tar_reader_init(r, len);
    int rc = 0;
    for (;;) {
        uint64_t off;
        size_t want;
        if (tar_reader_want(r, &off, &want))
            break;
        size_t got = off >= len ? 0 : len - off < want ? len - off : want;
        /* a copy of exactly what was read: overreads show under ASan */
        uint8_t *chunk = malloc(got ? got : 1);
        if (got)
            memcpy(chunk, buf + off, got);
        if (reads)
            (*reads)++;
        struct tar_entry e;
        rc = tar_reader_feed(r, chunk, got, &e);
        if (rc == 1 && fn)
            rc = fn(arg, r, &e);
        free(chunk);
        if (rc < 0)
            break;
    }
    if (rc < 0 && err)
        snprintf(err, errlen, "%s", r->err);
    free(r);
    return rc < 0 ? rc : 0;
}

/* ---- real archives ---- */

struct seen {
    const uint8_t *shard;
    char names[64][400];
    uint64_t sizes[64];
    int n;
    int checked;
};

static int check_entry(void *arg, struct tar_reader *r, const struct tar_entry *e)
{
    (void)r;
    struct seen *s = arg;
    if (e->type != TAR_FILE)
        return 0;
    ck_assert_int_lt(s->n, 64);
    snprintf(s->names[s->n], sizeof(s->names[0]), "%s", e->name);
    s->sizes[s->n] = e->size;
    /* Every member's content is "<its name>\n" repeated: check the
     * offset points at it. */
    const char *base = strrchr(e->name, '/');
    base = base ? base + 1 : e->name;
    size_t bl = strlen(base);
    if (e->size >= bl + 1) {
        ck_assert_msg(memcmp(s->shard + e->offset, base, bl) == 0,
                      "%s at %llu: wrong bytes", e->name, (unsigned long long)e->offset);
        ck_assert_int_eq(s->shard[e->offset + e->size - 1], '\n');
        s->checked++;
    }
    s->n++;
    return 0;
}

#define MAKE_FILES                                                                   \
    "cd %s && rm -rf src && mkdir -p src/d && cd src && "                            \
    "for n in a.jpg a.cls b.PNG b.cls d/c.webp d/c.cls e.txt; do "                   \
    "  i=0; while [ $i -lt 7 ]; do echo \"${n##*/}\"; i=$((i+1)); done > $n; done && " \
    "long=$(printf 'x%%.0s' $(seq 1 150)) && mkdir -p $long && "                     \
    "for i in 1 2 3; do echo \"$long.jpg\" > $long/$long.jpg; done && "              \
    "cp $long/$long.jpg $long/$long.jpg.tmp && mv $long/$long.jpg.tmp $long/$long.jpg && " \
    "dd if=/dev/zero bs=1000 count=3 2>/dev/null >> a.jpg && echo a.jpg >> a.jpg"

START_TEST(test_gnu_tar_formats)
{
    static const char *const formats[] = {"ustar", "gnu", "pax", "oldgnu"};
    const char *fmt = formats[_i];
    ck_assert_int_eq(sh(MAKE_FILES, dir), 0);
    int rc = sh("cd %s/src && tar --sort=name --format=%s -cf ../%s.tar a.jpg a.cls b.PNG b.cls d e.txt "
                "$(ls -d xxx*) 2>/dev/null",
                dir, fmt, fmt);
    char path[512];
    snprintf(path, sizeof(path), "%s/%s.tar", dir, fmt);
    if (rc != 0) {
        /* ustar cannot hold a 300-byte name: GNU tar refuses the member */
        ck_assert_str_eq(fmt, "ustar");
        ck_assert_int_eq(sh("cd %s/src && tar --sort=name --format=ustar -cf ../ustar.tar a.jpg a.cls "
                            "b.PNG b.cls d e.txt",
                            dir),
                         0);
    }
    size_t len;
    uint8_t *buf = slurp(path, &len);
    struct seen s = {.shard = buf};
    char err[256] = "";
    uint64_t reads = 0;
    ck_assert_msg(walk(buf, len, check_entry, &s, err, sizeof(err), &reads) == 0, "%s: %s",
                  fmt, err);
    int want = strcmp(fmt, "ustar") == 0 && rc != 0 ? 7 : 8;
    ck_assert_int_eq(s.n, want);
    ck_assert_int_eq(s.checked, want);
    ck_assert_str_eq(s.names[0], "a.jpg");
    ck_assert_uint_eq(s.sizes[0], 7 * 6 + 3000 + 6);
    ck_assert_str_eq(s.names[4], "d/c.cls");
    ck_assert_str_eq(s.names[5], "d/c.webp");
    if (want == 8) {
        ck_assert_uint_eq(strlen(s.names[7]), 150 + 1 + 150 + 4);
        ck_assert_str_eq(s.names[7] + 151 + 150, ".jpg");
    }
    /* A header (and a long name) per member, no data reads. */
    ck_assert_uint_le(reads, (uint64_t)want * 4 + 4); /* headers, names: no data */
    printf("%-6s: %d members, %llu reads of %zu bytes\n", fmt, s.n, (unsigned long long)reads,
           len);
    free(buf);
}
END_TEST

START_TEST(test_python_tarfile)
{
    /* Python's tarfile: pax headers for a non-ASCII and a long name, a
     * symlink and a directory entry, and a member of 0 bytes. */
    int rc = sh("cd %s && '%s' -c '"
                "import tarfile, io\n"
                "t = tarfile.open(\"py.tar\", \"w\", format=tarfile.PAX_FORMAT)\n"
                "def add(name, data):\n"
                "    i = tarfile.TarInfo(name); i.size = len(data); t.addfile(i, io.BytesIO(data))\n"
                "add(\"k\\u00e9y.jpg\", b\"x\" * 10)\n"
                "add(\"n\" * 200 + \".cls\", b\"3\")\n"
                "add(\"empty.txt\", b\"\")\n"
                "d = tarfile.TarInfo(\"dir\"); d.type = tarfile.DIRTYPE; t.addfile(d)\n"
                "l = tarfile.TarInfo(\"link.jpg\"); l.type = tarfile.SYMTYPE; l.linkname = \"x\"; "
                "t.addfile(l)\n"
                "t.close()'",
                dir, python());
    ck_assert_int_eq(rc, 0);
    char path[512];
    snprintf(path, sizeof(path), "%s/py.tar", dir);
    size_t len;
    uint8_t *buf = slurp(path, &len);
    struct tar_reader r;
    tar_reader_init(&r, len);
    int files = 0, dirs = 0, others = 0;
    for (;;) {
        uint64_t off;
        size_t want;
        if (tar_reader_want(&r, &off, &want))
            break;
        size_t got = off >= len ? 0 : len - off < want ? len - off : want;
        struct tar_entry e;
        rc = tar_reader_feed(&r, buf + off, got, &e);
        ck_assert_msg(rc >= 0, "%s", r.err);
        if (rc != 1)
            continue;
        if (e.data != NULL) { /* the data asked for: the .cls */
            ck_assert_uint_eq(e.size, 1);
            ck_assert_int_eq(e.data[0], '3');
            continue;
        }
        if (e.type == TAR_FILE) {
            files++;
            if (files == 1) {
                ck_assert_str_eq(e.name, "k\xc3\xa9y.jpg");
                ck_assert_uint_eq(e.size, 10);
                ck_assert_int_eq(buf[e.offset], 'x');
            } else if (files == 2) {
                ck_assert_uint_eq(strlen(e.name), 204);
                ck_assert_int_eq(tar_reader_want_data(&r), 0);
            } else {
                ck_assert_str_eq(e.name, "empty.txt");
                ck_assert_uint_eq(e.size, 0);
            }
        } else {
            e.type == TAR_DIR ? dirs++ : others++;
        }
    }
    ck_assert_int_eq(files, 3);
    ck_assert_int_eq(dirs, 1);
    ck_assert_int_eq(others, 1);
    free(buf);
}
END_TEST

/* ---- hand-made headers ---- */

static void header(uint8_t *h, const char *name, uint64_t size, char type)
{
    memset(h, 0, TAR_BLOCK);
    snprintf((char *)h, 100, "%s", name);
    memcpy(h + 100, "0000644", 8);
    snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)size);
    h[156] = (uint8_t)type;
    memcpy(h + 257, "ustar\0" "00", 8);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < TAR_BLOCK; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
}

/* An archive: members (name, size, type), data of 'd' bytes, two zero
 * blocks. Returns its length. */
static size_t build(uint8_t *out, const char *const *names, const uint64_t *sizes,
                    const char *types, int n)
{
    size_t pos = 0;
    for (int i = 0; i < n; i++) {
        header(out + pos, names[i], sizes[i], types[i]);
        pos += TAR_BLOCK;
        memset(out + pos, 'd', (size_t)sizes[i]);
        pos += (size_t)((sizes[i] + 511) & ~511ull);
    }
    memset(out + pos, 0, 2 * TAR_BLOCK);
    return pos + 2 * TAR_BLOCK;
}

START_TEST(test_hostile_headers)
{
    static uint8_t buf[1 << 16];
    const char *names[] = {"a.jpg", "a.cls"};
    uint64_t sizes[] = {700, 1};
    size_t len = build(buf, names, sizes, "00", 2);
    char err[256];

    ck_assert_int_eq(walk(buf, len, NULL, NULL, err, sizeof(err), NULL), 0);
    /* Every truncation: an error or (at a header boundary) a clean end,
     * never a read past what was given. */
    int clean = 0;
    for (size_t cut = 0; cut < len; cut++) {
        int rc = walk(buf, cut, NULL, NULL, err, sizeof(err), NULL);
        ck_assert(rc == 0 || rc == -EBADMSG);
        ck_assert(rc == 0 || err[0] != '\0');
        /* clean ends: nothing, after each member (header boundaries), and
         * anywhere once one zero block is read (tar writers differ) */
        int boundary = cut == 0 || cut == 1536 || cut == 2560 || cut >= 3072;
        ck_assert_msg((rc == 0) == boundary, "cut at %zu: %d %s", cut, rc, err);
        clean += rc == 0;
    }
    ck_assert_int_eq(clean, 3 + 512);

    /* a bad checksum */
    uint8_t bad[4096];
    memcpy(bad, buf, len);
    bad[10] ^= 1;
    ck_assert_int_eq(walk(bad, len, NULL, NULL, err, sizeof(err), NULL), -EBADMSG);
    ck_assert_msg(strstr(err, "checksum") != NULL, "%s", err);

    /* a size past the shard's end */
    const char *big[] = {"a.jpg"};
    uint64_t bigs[] = {1000000};
    header(bad, big[0], bigs[0], '0');
    memset(bad + TAR_BLOCK, 0, 1024);
    ck_assert_int_eq(walk(bad, 2048, NULL, NULL, err, sizeof(err), NULL), -EBADMSG);
    ck_assert_msg(strstr(err, "past the shard's end") != NULL, "%s", err);

    /* a size field of garbage */
    header(bad, "x.jpg", 1, '0');
    memcpy(bad + 124, "12z4", 4);
    memset(bad + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < TAR_BLOCK; i++)
        sum += bad[i];
    snprintf((char *)bad + 148, 8, "%06o", sum);
    ck_assert_int_eq(walk(bad, 2048, NULL, NULL, err, sizeof(err), NULL), -EBADMSG);

    /* base-256 size (GNU), small enough to fit */
    header(bad, "b.jpg", 0, '0');
    memset(bad + 124, 0, 12);
    bad[124] = 0x80;
    bad[135] = 0x05;
    memset(bad + 148, ' ', 8);
    sum = 0;
    for (int i = 0; i < TAR_BLOCK; i++)
        sum += bad[i];
    snprintf((char *)bad + 148, 8, "%06o", sum);
    memset(bad + TAR_BLOCK, 'd', TAR_BLOCK);
    memset(bad + 2 * TAR_BLOCK, 0, 2 * TAR_BLOCK);
    struct seen s = {.shard = bad};
    ck_assert_int_eq(walk(bad, 4 * TAR_BLOCK, NULL, &s, err, sizeof(err), NULL), 0);
    /* negative base-256 */
    bad[124] = 0xff;
    ck_assert_int_eq(walk(bad, 4 * TAR_BLOCK, NULL, NULL, err, sizeof(err), NULL), -EBADMSG);

    /* a GNU long name over TAR_NAME_MAX, and one truncated */
    header(bad, "././@LongLink", TAR_NAME_MAX + 10, 'L');
    ck_assert_int_eq(walk(bad, 4096, NULL, NULL, err, sizeof(err), NULL), -EBADMSG);
    header(bad, "././@LongLink", 300, 'L');
    ck_assert_int_eq(walk(bad, TAR_BLOCK + 100, NULL, NULL, err, sizeof(err), NULL), -EBADMSG);

    /* malformed pax records */
    static const char *const pax[] = {"8 path=x\n", "30 path=x\n", "abc\n", "5 x\n",
                                      "12 size=1z\n"};
    for (size_t i = 0; i < sizeof(pax) / sizeof(pax[0]); i++) {
        memset(bad, 0, sizeof(bad));
        size_t pl = strlen(pax[i]);
        header(bad, "pax", pl, 'x');
        memcpy(bad + TAR_BLOCK, pax[i], pl);
        header(bad + 2 * TAR_BLOCK, "f.jpg", 0, '0');
        ck_assert_msg(walk(bad, 4096, NULL, NULL, err, sizeof(err), NULL) == -EBADMSG,
                      "pax '%s' accepted", pax[i]);
    }
    /* a well-formed one overrides path and size */
    memset(bad, 0, sizeof(bad));
    const char *good = "16 path=p/q.jpg\n12 size=600\n";
    header(bad, "pax", strlen(good), 'x');
    memcpy(bad + TAR_BLOCK, good, strlen(good));
    header(bad + 2 * TAR_BLOCK, "ignored", 0, '0');
    struct tar_reader r;
    tar_reader_init(&r, 4096);
    struct tar_entry e;
    ck_assert_int_eq(tar_reader_feed(&r, bad, TAR_BLOCK, &e), 0);
    uint64_t off;
    size_t want;
    ck_assert_int_eq(tar_reader_want(&r, &off, &want), 0);
    ck_assert_uint_eq(off, TAR_BLOCK);
    ck_assert_uint_eq(want, strlen(good));
    ck_assert_int_eq(tar_reader_feed(&r, bad + off, want, &e), 0);
    tar_reader_want(&r, &off, &want);
    ck_assert_int_eq(tar_reader_feed(&r, bad + off, want, &e), 1);
    ck_assert_str_eq(e.name, "p/q.jpg");
    ck_assert_uint_eq(e.size, 600);
    ck_assert_uint_eq(e.offset, 3 * TAR_BLOCK);
    /* its data is wanted only on request, and only when small */
    ck_assert_int_eq(tar_reader_want_data(&r), 0);
    tar_reader_want(&r, &off, &want);
    ck_assert_uint_eq(off, 3 * TAR_BLOCK);
    ck_assert_uint_eq(want, 600);
    ck_assert_int_eq(tar_reader_feed(&r, bad + off, 599, &e), -EBADMSG);

    /* unsafe names */
    ck_assert_int_eq(tar_name_unsafe("a/b.jpg"), 0);
    ck_assert_int_eq(tar_name_unsafe("a..b/c.jpg"), 0);
    ck_assert_int_eq(tar_name_unsafe("/etc/passwd"), 1);
    ck_assert_int_eq(tar_name_unsafe("../x.jpg"), 1);
    ck_assert_int_eq(tar_name_unsafe("a/../../x.jpg"), 1);
    ck_assert_int_eq(tar_name_unsafe("a/.."), 1);
    ck_assert_int_eq(tar_name_unsafe(""), 1);
}
END_TEST

/* ---- WebDataset grouping ---- */

struct drive {
    struct wds *w;
    uint32_t shard;
};

static int to_wds(void *arg, struct tar_reader *r, const struct tar_entry *e)
{
    struct drive *d = arg;
    if (e->data != NULL)
        return wds_member_data(d->w, e);
    int rc = wds_member(d->w, d->shard, e);
    if (rc == 1)
        rc = tar_reader_want_data(r);
    return rc;
}

static void shard(const char *name, const char *body)
{
    int rc = sh("cd %s && '%s' -c '"
                "import tarfile, io\n"
                "t = tarfile.open(\"%s\", \"w\", format=tarfile.GNU_FORMAT)\n"
                "for line in \"\"\"%s\"\"\".split(\";\"):\n"
                "    name, _, data = line.partition(\"=\")\n"
                "    i = tarfile.TarInfo(name.strip())\n"
                "    if data == \"<dir>\": i.type = tarfile.DIRTYPE; t.addfile(i); continue\n"
                "    if data == \"<link>\": i.type = tarfile.SYMTYPE; i.linkname = \"x\"; "
                "t.addfile(i); continue\n"
                "    d = data.encode(); i.size = len(d); t.addfile(i, io.BytesIO(d))\n"
                "t.close()'",
                dir, python(), name, body);
    ck_assert_int_eq(rc, 0);
}

static struct wds *index_shards(const char *const *names, int n, int *rc_out, char *err,
                                size_t errlen)
{
    struct drive d = {.w = wds_new()};
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        size_t len;
        uint8_t *buf = slurp(path, &len);
        d.shard = (uint32_t)i;
        rc = walk(buf, len, to_wds, &d, err, errlen, NULL);
        if (rc == 0)
            rc = wds_end_shard(d.w);
        free(buf);
    }
    if (rc == 0)
        rc = wds_finish(d.w);
    if (rc == -EINVAL)
        snprintf(err, errlen, "%s", wds_error(d.w));
    *rc_out = rc;
    return d.w;
}

START_TEST(test_wds_grouping)
{
    shard("s0.tar", "a.jpg=JJJ;a.cls=2;a.json={};"
                    "b.PNG=PP;b.cls= 0\n;"
                    "dir/c.png=SEG;dir/c.cls=1;"
                    "s.seg.png=Q;s.cls=1;"
                    "noimg.cls=1;noimg.txt=t;"
                    "nolabel.webp=W;"
                    "two.jpg=1;two.png=2;two.cls=3;"
                    "d=<dir>;l.jpg=<link>;"
                    "../evil.jpg=E;/abs.jpg=A;"
                    "README=x;.hidden=y");
    shard("s1.tar", "a.jpg=again;a.cls=5;"
                    "x.tiff=T;"
                    "x.cls=4");
    const char *names[] = {"s0.tar", "s1.tar"};
    int rc;
    char err[256] = "";
    struct wds *w = index_shards(names, 2, &rc, err, sizeof(err));
    ck_assert_msg(rc == 0, "%d %s", rc, err);
    ck_assert_uint_eq(wds_count(w), 6);
    static const struct {
        const char *key;
        uint32_t shard, label;
        int ext;
        uint64_t size;
    } want[] = {
        {"a", 0, 2, 0, 3},       {"b", 0, 0, 2, 2},     {"dir/c", 0, 1, 2, 3},
        {"two", 0, 3, 0, 1},     {"a", 1, 5, 0, 5},     {"x", 1, 4, 7, 1},
    };
    for (size_t i = 0; i < 6; i++) {
        const struct wds_sample *s = wds_sample(w, i);
        ck_assert_str_eq(wds_key(w, i), want[i].key);
        ck_assert_uint_eq(s->shard, want[i].shard);
        ck_assert_int_eq(s->ext, want[i].ext);
        ck_assert_uint_eq(s->size, want[i].size);
        ck_assert_uint_eq(wds_label(w, i), want[i].label);
    }
    const struct wds_counts *c = wds_counts(w);
    ck_assert_uint_eq(c->no_image, 2);     /* noimg, and s (its extension is seg.png) */
    ck_assert_uint_eq(c->no_label, 1);     /* nolabel */
    ck_assert_uint_eq(c->extra_images, 1); /* two.png */
    ck_assert_uint_eq(c->not_files, 2);
    ck_assert_uint_eq(c->unsafe_names, 2);
    ck_assert_uint_eq(c->images[0], 3);
    ck_assert_uint_eq(wds_nclasses(w), 0);
    /* the image offsets point at the data */
    char path[512];
    snprintf(path, sizeof(path), "%s/s1.tar", dir);
    size_t len;
    uint8_t *buf = slurp(path, &len);
    ck_assert(memcmp(buf + wds_sample(w, 4)->offset, "again", 5) == 0);
    free(buf);
    wds_free(w);
}
END_TEST

START_TEST(test_wds_class_names)
{
    shard("n0.tar", "a.jpg=1;a.cls=dog;b.jpg=2;b.cls=cat\n;c.jpg=3;c.cls=7");
    shard("n1.tar", "d.jpg=4;d.cls=ant");
    const char *names[] = {"n0.tar", "n1.tar"};
    int rc;
    char err[256] = "";
    struct wds *w = index_shards(names, 2, &rc, err, sizeof(err));
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_uint_eq(wds_nclasses(w), 4);
    /* sorted: 7 ant cat dog */
    ck_assert_str_eq(wds_class(w, 0), "7");
    ck_assert_str_eq(wds_class(w, 3), "dog");
    ck_assert_uint_eq(wds_label(w, 0), 3);
    ck_assert_uint_eq(wds_label(w, 1), 2);
    ck_assert_uint_eq(wds_label(w, 2), 0);
    ck_assert_uint_eq(wds_label(w, 3), 1);
    wds_free(w);

    /* integers first, then a name: refused, naming the sample */
    shard("m.tar", "a.jpg=1;a.cls=1;b.jpg=2;b.cls=bird");
    const char *m[] = {"m.tar"};
    w = index_shards(m, 1, &rc, err, sizeof(err));
    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_msg(strstr(err, "sample b") && strstr(err, "bird"), "%s", err);
    wds_free(w);

    /* a label member that is not a label */
    char body[400] = "a.jpg=1;a.cls=";
    memset(body + strlen(body), '7', 300);
    shard("big.tar", body);
    const char *b[] = {"big.tar"};
    w = index_shards(b, 1, &rc, err, sizeof(err));
    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_msg(strstr(err, "a label of") != NULL, "%s", err);
    wds_free(w);
}
END_TEST

/* A shard's member list in cache.dir (shardidx.h): kept and given back
 * whole; another identity, a flipped byte, a cut file, a planted link are
 * "none" (-ENOENT), never a wrong list. */
static void list_check(const struct shardidx *x)
{
    struct tar_entry e;
    const uint8_t *data;
    size_t dlen;
    ck_assert_uint_eq(shardidx_count(x), 3);
    shardidx_entry(x, 0, &e, &data, &dlen);
    ck_assert_str_eq(e.name, "a/k1.jpg");
    ck_assert_uint_eq(e.offset, 512);
    ck_assert_uint_eq(e.size, 1000);
    ck_assert_int_eq(e.type, TAR_FILE);
    ck_assert_ptr_null(data);
    shardidx_entry(x, 1, &e, &data, &dlen);
    ck_assert_str_eq(e.name, "a/k1.cls");
    ck_assert_uint_eq(dlen, 2);
    ck_assert_int_eq(memcmp(data, "17", 2), 0);
    shardidx_entry(x, 2, &e, &data, &dlen);
    ck_assert_str_eq(e.name, "a/");
    ck_assert_int_eq(e.type, TAR_DIR);
}

/* Writes bytes[0..len) to path with byte off flipped. */
static void write_flipped(const char *path, uint8_t *bytes, size_t len, size_t off)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    bytes[off] ^= 0x20;
    ck_assert_uint_eq(fwrite(bytes, 1, len, f), len);
    bytes[off] ^= 0x20;
    fclose(f);
}

START_TEST(test_shard_lists)
{
    char cdir[300], file[400], name[64], path[400];
    snprintf(cdir, sizeof(cdir), "%s/cache", dir);
    struct shardidx *x = shardidx_new(), *y = NULL;
    struct tar_entry e1 = {"a/k1.jpg", 512, 1000, TAR_FILE, NULL};
    struct tar_entry e2 = {"a/k1.cls", 2048, 2, TAR_FILE, NULL};
    struct tar_entry e2d = {"a/k1.cls", 2048, 2, TAR_FILE, (const uint8_t *)"17"};
    struct tar_entry e3 = {"a/", 3072, 0, TAR_DIR, NULL};
    ck_assert_ptr_nonnull(x);
    ck_assert_int_eq(shardidx_add(x, &e2d), -EINVAL); /* data before any header */
    ck_assert_int_eq(shardidx_add(x, &e1), 0);
    ck_assert_int_eq(shardidx_add(x, &e2), 0);
    ck_assert_int_eq(shardidx_add(x, &e2d), 0);
    ck_assert_int_eq(shardidx_add(x, &e3), 0);
    list_check(x);
    struct shardidx_id id = {"/data/train-000001.tar", 10240, 1234567890123ull};
    ck_assert_int_eq(shardidx_load(cdir, &id, &y), -ENOENT); /* no cache.dir yet */
    ck_assert_int_eq(shardidx_save(cdir, &id, x), 0);
    ck_assert_int_eq(shardidx_load(cdir, &id, &y), 0);
    list_check(y);
    shardidx_free(y);
    /* another identity: none */
    struct shardidx_id other = id;
    other.version++;
    ck_assert_int_eq(shardidx_load(cdir, &other, &y), -ENOENT);
    other = id;
    other.size = 2048; /* the entries would lie past the shard's end */
    ck_assert_int_eq(shardidx_load(cdir, &other, &y), -ENOENT);
    /* the one file in the directory, by name */
    ck_assert_int_eq(sh("test $(ls '%s' | wc -l) = 1", cdir), 0);
    ck_assert_int_eq(sh("ls '%s' | grep -q '^shard-[0-9a-f]\\{16\\}\\.idx$'", cdir), 0);
    ck_assert_int_eq(sh("cd '%s' && cp $(ls) '%s/saved'", cdir, dir), 0);
    snprintf(file, sizeof(file), "%s/saved", dir);
    size_t len;
    uint8_t *saved = slurp(file, &len);
    shardidx_file_name(id.locator, name, sizeof(name));
    snprintf(path, sizeof(path), "%s/%s", cdir, name);
    /* a flipped byte anywhere: none */
    for (size_t off = 0; off < len; off += 3) {
        write_flipped(path, saved, len, off);
        ck_assert_msg(shardidx_load(cdir, &id, &y) == -ENOENT, "byte %zu flipped: used", off);
    }
    free(saved);
    /* cut short: none */
    ck_assert_int_eq(sh("cd '%s' && f=$(ls) && head -c 100 '%s' > $f", cdir, file), 0);
    ck_assert_int_eq(shardidx_load(cdir, &id, &y), -ENOENT);
    /* a link planted under the name: not followed (the target is not read,
     * and saving replaces the link, never writes its target) */
    ck_assert_int_eq(sh("cd '%s' && f=$(ls) && rm $f && ln -s '%s' $f", cdir, file), 0);
    ck_assert_int_eq(shardidx_load(cdir, &id, &y), -ENOENT);
    ck_assert_int_eq(shardidx_save(cdir, &id, x), 0);
    ck_assert_int_eq(sh("cd '%s' && f=$(ls) && test -f $f && ! test -L $f && cmp -s $f '%s'",
                        cdir, file), 0);
    ck_assert_int_eq(shardidx_load(cdir, &id, &y), 0);
    shardidx_free(y);
    shardidx_free(x);
}
END_TEST

/* A manifest's URL rows' probes in cache.dir (probecache.h): given back
 * by URL under the same manifest (path, size, mtime), none under an edited
 * or touched one, none from a file with a byte flipped or cut short. */
START_TEST(test_probe_cache)
{
    char cdir[300], path[400];
    snprintf(cdir, sizeof(cdir), "%s/pcache", dir);
    struct probecache_entry e[] = {{"http://h/b.jpg", "etag-b", 200},
                                   {"http://h/a.jpg", "\"quoted\"", 100},
                                   {"http://h/c.jpg", "", 5}};
    struct probecache_id id = {"/data/urls.csv", 4096, 1700000000123456789ll};
    struct probecache *pc = NULL;
    ck_assert_int_eq(probecache_load(cdir, &id, &pc), -ENOENT); /* no cache.dir yet */
    ck_assert_int_eq(probecache_save(cdir, &id, e, 3), 0);
    ck_assert_int_eq(probecache_load(cdir, &id, &pc), 0);
    for (int i = 0; i < 3; i++) {
        const struct probecache_entry *f = probecache_find(pc, e[i].url);
        ck_assert_ptr_nonnull(f);
        ck_assert_str_eq(f->etag, e[i].etag);
        ck_assert_uint_eq(f->size, e[i].size);
    }
    ck_assert_ptr_null(probecache_find(pc, "http://h/d.jpg"));
    probecache_free(pc);
    struct probecache_id other = id;
    other.mtime_ns++; /* touched */
    ck_assert_int_eq(probecache_load(cdir, &other, &pc), -ENOENT);
    other = id;
    other.size++; /* edited */
    ck_assert_int_eq(probecache_load(cdir, &other, &pc), -ENOENT);
    other = id;
    other.manifest = "/data/other.csv"; /* another manifest's name */
    ck_assert_int_eq(probecache_load(cdir, &other, &pc), -ENOENT);
    ck_assert_int_eq(sh("test $(ls '%s' | wc -l) = 1 && ls '%s' | grep -q "
                        "'^probes-[0-9a-f]\\{16\\}\\.idx$'", cdir, cdir), 0);
    snprintf(path, sizeof(path), "%s/saved-probes", dir);
    ck_assert_int_eq(sh("cd '%s' && cp $(ls) '%s' && ls > '%s.name'", cdir, path, path), 0);
    char name_file[420], name[64] = "", file[400];
    snprintf(name_file, sizeof(name_file), "%s.name", path);
    FILE *nf = fopen(name_file, "r");
    ck_assert_ptr_nonnull(nf);
    ck_assert_ptr_nonnull(fgets(name, sizeof(name), nf));
    fclose(nf);
    name[strcspn(name, "\n")] = 0;
    snprintf(file, sizeof(file), "%s/%s", cdir, name);
    size_t len;
    uint8_t *saved = slurp(path, &len);
    /* a flipped byte anywhere: none */
    for (size_t off = 0; off < len; off += 3) {
        write_flipped(file, saved, len, off);
        ck_assert_msg(probecache_load(cdir, &id, &pc) == -ENOENT, "byte %zu flipped: used", off);
    }
    /* cut short: none */
    ck_assert_int_eq(sh("head -c %zu '%s' > '%s'", len - 1, path, file), 0);
    ck_assert_int_eq(probecache_load(cdir, &id, &pc), -ENOENT);
    free(saved);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("tar");
    TCase *tc = tcase_create("tar");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_gnu_tar_formats, 0, 4);
    tcase_add_test(tc, test_python_tarfile);
    tcase_add_test(tc, test_hostile_headers);
    tcase_add_test(tc, test_wds_grouping);
    tcase_add_test(tc, test_wds_class_names);
    tcase_add_test(tc, test_shard_lists);
    tcase_add_test(tc, test_probe_cache);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/presto-test-tar-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    if (sh("tar --version >/dev/null 2>&1 && '%s' -c 'import tarfile' 2>/dev/null", python()) !=
        0) {
        printf("SKIP: needs GNU tar and %s\n", python());
        sh("rm -rf '%s'", dir);
        return 77;
    }
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    sh("rm -rf '%s'", dir);
    return failed ? 1 : 0;
}
