/*
 * A strict little XML walker for S3's list and error documents
 * (s3xml.h): it reports each element's end with its path from the root
 * and its decoded text; the two readers keep what they need.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s3xml.h"
#include "utf8.h"
#include "vec.h"

#define DEPTH_MAX 32
#define NAME_LEN 48
#define TEXT_MAX 8192

struct walk {
    const char *s;
    size_t len, i;
    char path[DEPTH_MAX][NAME_LEN]; /* names, cut to NAME_LEN - 1 */
    int depth;
    char text[TEXT_MAX + 4];
    size_t tlen;
    int overflow;
    int (*on_end)(struct walk *w, void *arg);
    void *arg;
    char *err;
    size_t errlen;
};

static int fail(struct walk *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct walk *w, const char *fmt, ...)
{
    if (w->err && w->errlen) {
        int n = snprintf(w->err, w->errlen, "XML at byte %zu: ", w->i);
        if (n >= 0 && (size_t)n < w->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(w->err + n, w->errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return -EBADMSG;
}

static int starts(const struct walk *w, const char *lit)
{
    size_t n = strlen(lit);
    return w->len - w->i >= n && memcmp(w->s + w->i, lit, n) == 0;
}

/* Moves past the next occurrence of end; -EBADMSG when there is none. */
static int skip_past(struct walk *w, const char *end, const char *what)
{
    size_t n = strlen(end);
    for (size_t k = w->i; k + n <= w->len; k++) {
        if (memcmp(w->s + k, end, n) == 0) {
            w->i = k + n;
            return 0;
        }
    }
    return fail(w, "unterminated %s", what);
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static int is_name(char c)
{
    return c && !is_space(c) && !strchr("<>/=\"'&!?", c);
}

static void put_text(struct walk *w, const char *p, size_t n)
{
    if (w->tlen + n > TEXT_MAX) {
        w->overflow = 1;
        n = w->tlen < TEXT_MAX ? TEXT_MAX - w->tlen : 0;
    }
    memcpy(w->text + w->tlen, p, n);
    w->tlen += n;
}

static int entity(struct walk *w)
{
    static const struct {
        const char *name;
        char c;
    } named[] = {{"amp;", '&'}, {"lt;", '<'}, {"gt;", '>'}, {"quot;", '"'}, {"apos;", '\''}};
    w->i++; /* '&' */
    for (size_t k = 0; k < sizeof(named) / sizeof(named[0]); k++) {
        if (starts(w, named[k].name)) {
            put_text(w, &named[k].c, 1);
            w->i += strlen(named[k].name);
            return 0;
        }
    }
    if (!starts(w, "#"))
        return fail(w, "unknown entity");
    w->i++;
    int hex = starts(w, "x");
    w->i += (size_t)hex;
    uint32_t cp = 0;
    size_t digits = 0;
    for (; w->i < w->len && w->s[w->i] != ';'; w->i++, digits++) {
        char c = w->s[w->i];
        int d = c >= '0' && c <= '9'                ? c - '0'
                : hex && c >= 'a' && c <= 'f'       ? c - 'a' + 10
                : hex && c >= 'A' && c <= 'F'       ? c - 'A' + 10
                                                    : -1;
        if (d < 0 || digits > 7)
            return fail(w, "bad character reference");
        cp = cp * (hex ? 16u : 10u) + (uint32_t)d;
    }
    if (w->i >= w->len || digits == 0 || cp == 0 || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return fail(w, "bad character reference");
    w->i++; /* ';' */
    char u[4];
    put_text(w, u, utf8_encode(cp, u));
    return 0;
}

static int start_tag(struct walk *w, int *closed)
{
    w->i++; /* '<' */
    size_t st = w->i;
    while (w->i < w->len && is_name(w->s[w->i]))
        w->i++;
    size_t n = w->i - st;
    if (n == 0)
        return fail(w, "bad tag");
    if (w->depth >= DEPTH_MAX)
        return fail(w, "nested more than %d deep", DEPTH_MAX);
    char *name = w->path[w->depth];
    size_t keep = n < NAME_LEN - 1 ? n : NAME_LEN - 1;
    memcpy(name, w->s + st, keep);
    name[keep] = '\0';
    /* attributes: skipped, quotes respected */
    for (;;) {
        if (w->i >= w->len)
            return fail(w, "unterminated tag");
        char c = w->s[w->i];
        if (c == '>') {
            w->i++;
            *closed = 0;
            break;
        }
        if (c == '/' && starts(w, "/>")) {
            w->i += 2;
            *closed = 1;
            break;
        }
        if (c == '"' || c == '\'') {
            const char *q = memchr(w->s + w->i + 1, c, w->len - w->i - 1);
            if (q == NULL)
                return fail(w, "unterminated attribute");
            w->i = (size_t)(q - w->s) + 1;
            continue;
        }
        if (c == '<')
            return fail(w, "'<' in a tag");
        w->i++;
    }
    w->depth++;
    w->tlen = 0;
    w->overflow = 0;
    return 0;
}

static int end_tag(struct walk *w)
{
    w->i += 2; /* "</" */
    size_t st = w->i;
    while (w->i < w->len && is_name(w->s[w->i]))
        w->i++;
    size_t n = w->i - st;
    while (w->i < w->len && is_space(w->s[w->i]))
        w->i++;
    if (w->i >= w->len || w->s[w->i] != '>')
        return fail(w, "bad end tag");
    w->i++;
    if (w->depth == 0)
        return fail(w, "end tag without a start");
    const char *open = w->path[w->depth - 1];
    size_t keep = n < NAME_LEN - 1 ? n : NAME_LEN - 1;
    if (strlen(open) != keep || memcmp(open, w->s + st, keep) != 0)
        return fail(w, "</%.*s> closes <%s>", (int)keep, w->s + st, open);
    w->text[w->tlen] = '\0';
    int rc = w->on_end(w, w->arg);
    w->depth--;
    w->tlen = 0;
    w->overflow = 0;
    return rc;
}

static int walk_doc(struct walk *w)
{
    int seen_root = 0;
    while (w->i < w->len) {
        char c = w->s[w->i];
        int rc = 0;
        if (w->depth == 0 && is_space(c)) {
            w->i++;
            continue;
        }
        if (starts(w, "<?")) {
            if (seen_root || w->depth)
                return fail(w, "processing instruction");
            rc = skip_past(w, "?>", "declaration");
        } else if (starts(w, "<!--")) {
            rc = skip_past(w, "-->", "comment");
        } else if (starts(w, "<![CDATA[")) {
            if (w->depth == 0)
                return fail(w, "CDATA outside the root");
            w->i += 9;
            size_t st = w->i;
            rc = skip_past(w, "]]>", "CDATA");
            if (rc == 0)
                put_text(w, w->s + st, w->i - 3 - st);
        } else if (starts(w, "<!")) {
            return fail(w, "DOCTYPE and declarations are not read");
        } else if (starts(w, "</")) {
            rc = end_tag(w);
        } else if (c == '<') {
            if (w->depth == 0 && seen_root)
                return fail(w, "a second root element");
            int closed = 0;
            rc = start_tag(w, &closed);
            seen_root = 1;
            if (rc == 0 && closed) {
                w->text[0] = '\0';
                rc = w->on_end(w, w->arg);
                w->depth--;
            }
        } else if (w->depth == 0) {
            return fail(w, "text outside the root");
        } else if (c == '&') {
            rc = entity(w);
        } else {
            size_t st = w->i;
            while (w->i < w->len && w->s[w->i] != '<' && w->s[w->i] != '&')
                w->i++;
            put_text(w, w->s + st, w->i - st);
        }
        if (rc < 0)
            return rc;
    }
    if (!seen_root)
        return fail(w, "no root element");
    if (w->depth)
        return fail(w, "<%s> is not closed", w->path[w->depth - 1]);
    return 0;
}

static int at(const struct walk *w, int depth, const char *a, const char *b, const char *c)
{
    if (w->depth != depth)
        return 0;
    const char *names[3] = {a, b, c};
    for (int k = 0; k < depth; k++)
        if (strcmp(w->path[k], names[k]) != 0)
            return 0;
    return 1;
}

/* ---- ListBucketResult ---- */

struct list_state {
    struct s3xml_page *page;
    size_t cap;
    struct s3xml_object cur;
    int have_key, have_size;
};

static int parse_u64(const char *s, uint64_t *v)
{
    uint64_t x = 0;
    if (*s == '\0')
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        uint64_t d = (uint64_t)(*s - '0');
        if (x > UINT64_MAX / 10 || (x == UINT64_MAX / 10 && d > UINT64_MAX % 10))
            return -1;
        x = x * 10 + d;
    }
    *v = x;
    return 0;
}

static int list_end(struct walk *w, void *arg)
{
    struct list_state *st = arg;
    struct s3xml_page *p = st->page;
    if (w->depth == 1 && strcmp(w->path[0], "ListBucketResult") != 0)
        return fail(w, "not a ListBucketResult (root <%s>)", w->path[0]);
    if (at(w, 3, "ListBucketResult", "Contents", "Key")) {
        if (w->overflow || w->tlen > S3XML_KEY_MAX || w->tlen == 0 ||
            memchr(w->text, '\0', w->tlen))
            return fail(w, "a key of %zu bytes", w->tlen);
        free(st->cur.key);
        st->cur.key = strdup(w->text);
        if (st->cur.key == NULL)
            return -ENOMEM;
        st->have_key = 1;
    } else if (at(w, 3, "ListBucketResult", "Contents", "Size")) {
        if (parse_u64(w->text, &st->cur.size) < 0)
            return fail(w, "bad Size '%.40s'", w->text);
        st->have_size = 1;
    } else if (at(w, 3, "ListBucketResult", "Contents", "ETag")) {
        const char *t = w->text;
        size_t n = w->tlen;
        if (n >= 2 && t[0] == '"' && t[n - 1] == '"')
            t++, n -= 2;
        if (n >= S3XML_ETAG_MAX)
            return fail(w, "an ETag of %zu bytes", n);
        memcpy(st->cur.etag, t, n);
        st->cur.etag[n] = '\0';
    } else if (at(w, 2, "ListBucketResult", "Contents", NULL)) {
        if (!st->have_key || !st->have_size)
            return fail(w, "Contents without %s", st->have_key ? "Size" : "Key");
        struct s3xml_object *o = vec_grow(p->objects, &st->cap, p->n + 1, sizeof(*o), 64);
        if (o == NULL)
            return -ENOMEM;
        p->objects = o;
        p->objects[p->n++] = st->cur;
        memset(&st->cur, 0, sizeof(st->cur));
        st->have_key = st->have_size = 0;
    } else if (at(w, 2, "ListBucketResult", "IsTruncated", NULL)) {
        if (strcmp(w->text, "true") != 0 && strcmp(w->text, "false") != 0)
            return fail(w, "bad IsTruncated '%.20s'", w->text);
        p->truncated = w->text[0] == 't';
    } else if (at(w, 2, "ListBucketResult", "NextContinuationToken", NULL)) {
        if (w->overflow || w->tlen > S3XML_TOKEN_MAX)
            return fail(w, "a continuation token of %zu bytes", w->tlen);
        memcpy(p->next_token, w->text, w->tlen + 1);
    }
    return 0;
}

int s3xml_list(const char *xml, size_t len, struct s3xml_page *page, char *err, size_t errlen)
{
    memset(page, 0, sizeof(*page));
    struct list_state st = {.page = page};
    struct walk *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return -ENOMEM;
    *w = (struct walk){.s = xml, .len = len, .on_end = list_end, .arg = &st, .err = err,
                       .errlen = errlen};
    int rc = walk_doc(w);
    free(st.cur.key);
    free(w);
    if (rc == 0 && page->truncated && page->next_token[0] == '\0') {
        snprintf(err, errlen, "a truncated listing without a NextContinuationToken");
        rc = -EBADMSG;
    }
    return rc;
}

void s3xml_objects_free(struct s3xml_object *objects, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(objects[i].key);
    free(objects);
}

void s3xml_page_free(struct s3xml_page *page)
{
    s3xml_objects_free(page->objects, page->n);
    memset(page, 0, sizeof(*page));
}

/* ---- Error ---- */

struct error_state {
    char *code, *message;
    size_t codelen, messagelen;
};

static int error_end(struct walk *w, void *arg)
{
    struct error_state *st = arg;
    if (w->depth == 1 && strcmp(w->path[0], "Error") != 0)
        return fail(w, "not an Error document");
    if (at(w, 2, "Error", "Code", NULL))
        snprintf(st->code, st->codelen, "%s", w->text);
    else if (at(w, 2, "Error", "Message", NULL))
        snprintf(st->message, st->messagelen, "%s", w->text);
    return 0;
}

int s3xml_error(const char *xml, size_t len, char *code, size_t codelen, char *message,
                size_t messagelen)
{
    struct error_state st = {code, message, codelen, messagelen};
    code[0] = message[0] = '\0';
    struct walk *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return -ENOMEM;
    *w = (struct walk){.s = xml, .len = len, .on_end = error_end, .arg = &st};
    int rc = walk_doc(w);
    free(w);
    return rc;
}
