/*
 * Manifests (manifest.h): a line splitter, a CSV row reader and a small
 * strict JSON reader for one object per line; paths go into one arena,
 * labels into labels.h.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "labels.h"
#include "manifest.h"
#include "utf8.h"
#include "vec.h"

#define JSON_DEPTH_MAX 64
#define CSV_FIELDS_MAX 1024

struct manifest_entry {
    uint64_t path; /* offset in arena */
    uint64_t line;
    uint64_t size; /* the row's size column, with etag */
    uint64_t etag; /* offset in arena of the row's ETag, or NO_ETAG */
};

#define NO_ETAG UINT64_MAX

struct manifest {
    struct manifest_entry *e;
    size_t n, cap;
    char *arena;
    size_t arena_len, arena_cap;
    struct labels *labels;
};

struct parser {
    const char *name, *dir;
    uint64_t lineno;
    char *err;
    size_t errlen;
    struct manifest *m;
    /* CSV: the columns */
    int ncols, col_path, col_label, col_size, col_etag;
};

static int fail(struct parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct parser *p, const char *fmt, ...)
{
    int n = snprintf(p->err, p->errlen, "%s:%llu: ", p->name, (unsigned long long)p->lineno);
    if (n >= 0 && (size_t)n < p->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

int manifest_url(const char *path)
{
    return strncmp(path, "http://", 7) == 0 || strncmp(path, "https://", 8) == 0 ||
           strncmp(path, "s3://", 5) == 0;
}

/* "scheme://" of another kind. */
static int other_scheme(const char *s, size_t n)
{
    size_t i = 0;
    if (n == 0 || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z')))
        return 0;
    while (i < n && ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
                     (s[i] >= '0' && s[i] <= '9') || s[i] == '+' || s[i] == '-' ||
                     s[i] == '.'))
        i++;
    return i + 3 <= n && memcmp(s + i, "://", 3) == 0;
}

/* Adds a sample: path (n bytes, not NUL-terminated) and label. */
static int add(struct parser *p, const char *path, size_t n, const char *label, size_t ln,
               enum labels_kind kind)
{
    struct manifest *m = p->m;
    if (n == 0)
        return fail(p, "empty path");
    if (n > MANIFEST_PATH_MAX)
        return fail(p, "path of %zu bytes (at most %d)", n, MANIFEST_PATH_MAX);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)path[i] < 0x20 || path[i] == 0x7f)
            return fail(p, "control character 0x%02x in the path", (unsigned char)path[i]);
    char tmp[MANIFEST_PATH_MAX + 1];
    memcpy(tmp, path, n);
    tmp[n] = '\0';
    int url = manifest_url(tmp);
    if (!url && other_scheme(path, n))
        return fail(p, "path '%.*s': only http://, https:// and s3:// URLs are read",
                    (int)(n < 80 ? n : 80), path);
    char msg[200];
    int rc = labels_add(m->labels, label, ln, kind, msg, sizeof(msg));
    if (rc == -EINVAL)
        return fail(p, "%s", msg);
    if (rc < 0)
        return rc;
    size_t dlen = url || path[0] == '/' || p->dir[0] == '\0' ? 0 : strlen(p->dir);
    size_t need = dlen + (dlen ? 1 : 0) + n + 1;
    char *a = vec_grow(m->arena, &m->arena_cap, m->arena_len + need, 1, 65536);
    if (a == NULL)
        return -ENOMEM;
    m->arena = a;
    struct manifest_entry *e = vec_grow(m->e, &m->cap, m->n + 1, sizeof(*e), 1024);
    if (e == NULL)
        return -ENOMEM;
    m->e = e;
    char *d = m->arena + m->arena_len;
    if (dlen) {
        memcpy(d, p->dir, dlen);
        d[dlen] = '/';
        d += dlen + 1;
    }
    memcpy(d, path, n);
    d[n] = '\0';
    m->e[m->n++] = (struct manifest_entry){.path = m->arena_len, .line = p->lineno,
                                           .etag = NO_ETAG};
    m->arena_len += need;
    return 0;
}

/* The last sample's size and ETag (the object's version the row names),
 * both given or neither (sn and en 0). */
static int pin(struct parser *p, const char *size, size_t sn, const char *etag, size_t en)
{
    struct manifest *m = p->m;
    if (sn == 0 && en == 0)
        return 0;
    if (sn == 0 || en == 0)
        return fail(p, "%s without %s (a row gives both or neither)", sn ? "size" : "etag",
                    sn ? "etag" : "size");
    uint64_t v = 0;
    for (size_t i = 0; i < sn; i++) {
        if (size[i] < '0' || size[i] > '9' || v > (UINT64_MAX - 9) / 10)
            return fail(p, "size '%.*s' is not a byte count", (int)(sn < 40 ? sn : 40), size);
        v = v * 10 + (uint64_t)(size[i] - '0');
    }
    if (en >= 2 && etag[0] == '"' && etag[en - 1] == '"') {
        etag++;
        en -= 2;
    }
    if (en == 0 || en > MANIFEST_ETAG_MAX)
        return fail(p, "etag of %zu bytes (1 to %d)", en, MANIFEST_ETAG_MAX);
    for (size_t i = 0; i < en; i++)
        if ((unsigned char)etag[i] < 0x20 || etag[i] == 0x7f || etag[i] == '"')
            return fail(p, "etag with a quote or control character");
    char *a = vec_grow(m->arena, &m->arena_cap, m->arena_len + en + 1, 1, 65536);
    if (a == NULL)
        return -ENOMEM;
    m->arena = a;
    memcpy(a + m->arena_len, etag, en);
    a[m->arena_len + en] = '\0';
    m->e[m->n - 1].size = v;
    m->e[m->n - 1].etag = m->arena_len;
    m->arena_len += en + 1;
    return 0;
}

/* ---- CSV ---- */

struct field {
    const char *s;
    size_t n;
    char *own; /* unescaped copy of a quoted field, or NULL */
};

static void fields_free(struct field *f, int n)
{
    for (int i = 0; i < n; i++)
        free(f[i].own);
}

/* Splits one line into fields; returns their number or -EINVAL. */
static int csv_split(struct parser *p, const char *s, size_t len, struct field *f)
{
    int nf = 0;
    size_t i = 0;
    for (;;) {
        if (nf == CSV_FIELDS_MAX) {
            fields_free(f, nf);
            return fail(p, "more than %d fields", CSV_FIELDS_MAX);
        }
        while (i < len && (s[i] == ' ' || s[i] == '\t'))
            i++;
        struct field *x = &f[nf];
        *x = (struct field){0};
        if (i < len && s[i] == '"') {
            x->own = malloc(len - i);
            if (x->own == NULL) {
                fields_free(f, nf);
                return -ENOMEM;
            }
            size_t k = 0;
            i++;
            for (;;) {
                if (i >= len) {
                    free(x->own);
                    fields_free(f, nf);
                    return fail(p, "unterminated quoted field (fields cannot span lines)");
                }
                if (s[i] == '"') {
                    if (i + 1 < len && s[i + 1] == '"') {
                        x->own[k++] = '"';
                        i += 2;
                        continue;
                    }
                    i++;
                    break;
                }
                x->own[k++] = s[i++];
            }
            x->s = x->own;
            x->n = k;
            while (i < len && (s[i] == ' ' || s[i] == '\t'))
                i++;
            if (i < len && s[i] != ',') {
                free(x->own);
                fields_free(f, nf);
                return fail(p, "text after a closing quote");
            }
        } else {
            size_t start = i;
            while (i < len && s[i] != ',') {
                if (s[i] == '"') {
                    fields_free(f, nf);
                    return fail(p, "a quote inside an unquoted field");
                }
                i++;
            }
            size_t end = i;
            while (end > start && (s[end - 1] == ' ' || s[end - 1] == '\t'))
                end--;
            x->s = s + start;
            x->n = end - start;
        }
        nf++;
        if (i >= len)
            return nf;
        i++; /* the comma */
    }
}

static int csv_line(struct parser *p, const char *s, size_t len)
{
    struct field *f = malloc(CSV_FIELDS_MAX * sizeof(*f));
    if (f == NULL)
        return -ENOMEM;
    int nf = csv_split(p, s, len, f), rc = 0;
    if (nf < 0) {
        free(f);
        return nf;
    }
    if (p->ncols == 0) { /* the header */
        p->col_path = p->col_label = p->col_size = p->col_etag = -1;
        for (int i = 0; i < nf && rc == 0; i++) {
            int *col = f[i].n == 4 && strncasecmp(f[i].s, "path", 4) == 0    ? &p->col_path
                       : f[i].n == 5 && strncasecmp(f[i].s, "label", 5) == 0 ? &p->col_label
                       : f[i].n == 4 && strncasecmp(f[i].s, "size", 4) == 0  ? &p->col_size
                       : f[i].n == 4 && strncasecmp(f[i].s, "etag", 4) == 0  ? &p->col_etag
                                                                            : NULL;
            if (col && *col >= 0)
                rc = fail(p, "column '%.*s' twice", (int)f[i].n, f[i].s);
            else if (col)
                *col = i;
        }
        if (rc == 0 && (p->col_path < 0 || p->col_label < 0))
            rc = fail(p, "the first line names the columns and has no '%s' (want e.g. "
                         "\"path,label\")",
                      p->col_path < 0 ? "path" : "label");
        p->ncols = nf;
    } else if (nf != p->ncols) {
        rc = fail(p, "%d fields, the header has %d", nf, p->ncols);
    } else {
        struct field *pa = &f[p->col_path], *la = &f[p->col_label];
        rc = add(p, pa->s, pa->n, la->s, la->n, LABELS_TEXT);
        if (rc == 0)
            rc = pin(p, p->col_size >= 0 ? f[p->col_size].s : NULL,
                     p->col_size >= 0 ? f[p->col_size].n : 0,
                     p->col_etag >= 0 ? f[p->col_etag].s : NULL,
                     p->col_etag >= 0 ? f[p->col_etag].n : 0);
    }
    fields_free(f, nf);
    free(f);
    return rc;
}

/* ---- JSON ---- */

struct json {
    struct parser *p;
    const char *s;
    size_t len, i;
};

static void ws(struct json *j)
{
    while (j->i < j->len && (j->s[j->i] == ' ' || j->s[j->i] == '\t' || j->s[j->i] == '\r'))
        j->i++;
}

static int hex4(const char *s, uint32_t *v)
{
    *v = 0;
    for (int k = 0; k < 4; k++) {
        char c = s[k];
        int d = c >= '0' && c <= '9' ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return -1;
        *v = *v << 4 | (uint32_t)d;
    }
    return 0;
}

/* A string at j->i (the opening quote); decoded into out (NULL: skipped),
 * whose room is at least the remaining line. */
static int json_string(struct json *j, char *out, size_t *outn)
{
    size_t k = 0;
    j->i++;
    for (;;) {
        if (j->i >= j->len)
            return fail(j->p, "unterminated string");
        unsigned char c = (unsigned char)j->s[j->i++];
        if (c == '"')
            break;
        if (c < 0x20)
            return fail(j->p, "control character in a string");
        if (c != '\\') {
            if (out)
                out[k] = (char)c;
            k++;
            continue;
        }
        if (j->i >= j->len)
            return fail(j->p, "unterminated string");
        c = (unsigned char)j->s[j->i++];
        const char *simple = strchr("\"\\/bfnrt", c);
        if (c && simple) {
            static const char map[] = "\"\\/\b\f\n\r\t";
            if (out)
                out[k] = map[simple - "\"\\/bfnrt"];
            k++;
            continue;
        }
        if (c != 'u' || j->i + 4 > j->len)
            return fail(j->p, "bad escape in a string");
        uint32_t cp, lo;
        if (hex4(j->s + j->i, &cp) < 0)
            return fail(j->p, "bad \\u escape");
        j->i += 4;
        if (cp >= 0xd800 && cp <= 0xdbff) {
            if (j->i + 6 > j->len || j->s[j->i] != '\\' || j->s[j->i + 1] != 'u' ||
                hex4(j->s + j->i + 2, &lo) < 0 || lo < 0xdc00 || lo > 0xdfff)
                return fail(j->p, "unpaired surrogate in a string");
            j->i += 6;
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        } else if (cp >= 0xdc00 && cp <= 0xdfff) {
            return fail(j->p, "unpaired surrogate in a string");
        }
        char u[4];
        size_t un = utf8_encode(cp, u);
        if (out)
            memcpy(out + k, u, un);
        k += un;
    }
    if (outn)
        *outn = k;
    return 0;
}

/* A number's text at j->i: sets *integer when it has no fraction or
 * exponent. */
static int json_number(struct json *j, size_t *start, size_t *n, int *integer)
{
    size_t i = j->i;
    *start = i;
    *integer = 1;
    if (i < j->len && j->s[i] == '-')
        i++;
    if (i >= j->len || j->s[i] < '0' || j->s[i] > '9')
        return fail(j->p, "bad value");
    if (j->s[i] == '0' && i + 1 < j->len && j->s[i + 1] >= '0' && j->s[i + 1] <= '9')
        return fail(j->p, "a number with a leading zero");
    while (i < j->len && j->s[i] >= '0' && j->s[i] <= '9')
        i++;
    if (i < j->len && j->s[i] == '.') {
        *integer = 0;
        i++;
        if (i >= j->len || j->s[i] < '0' || j->s[i] > '9')
            return fail(j->p, "bad number");
        while (i < j->len && j->s[i] >= '0' && j->s[i] <= '9')
            i++;
    }
    if (i < j->len && (j->s[i] == 'e' || j->s[i] == 'E')) {
        *integer = 0;
        i++;
        if (i < j->len && (j->s[i] == '+' || j->s[i] == '-'))
            i++;
        if (i >= j->len || j->s[i] < '0' || j->s[i] > '9')
            return fail(j->p, "bad number");
        while (i < j->len && j->s[i] >= '0' && j->s[i] <= '9')
            i++;
    }
    *n = i - *start;
    j->i = i;
    return 0;
}

static int json_skip(struct json *j, int depth);

/* After a member or an element: 1 when a ',' says another follows, 0
 * when close ends the container (both consumed), else an error. */
static int json_next(struct json *j, char close)
{
    ws(j);
    if (j->i < j->len && j->s[j->i] == ',') {
        j->i++;
        return 1;
    }
    if (j->i < j->len && j->s[j->i] == close) {
        j->i++;
        return 0;
    }
    return fail(j->p, "missing ',' or '%c'", close);
}

/* Calls member(j, key, keylen, depth, arg) for each member of the object
 * at j->i, with j->i on the member's value; member must consume it. Keys
 * longer than key's room are given as "" (no member wanted here has
 * one). */
typedef int (*json_member_fn)(struct json *j, const char *key, size_t keylen, int depth,
                              void *arg);

static int json_object(struct json *j, int depth, json_member_fn member, void *arg)
{
    j->i++; /* '{' */
    ws(j);
    if (j->i < j->len && j->s[j->i] == '}') {
        j->i++;
        return 0;
    }
    for (;;) {
        ws(j);
        if (j->i >= j->len || j->s[j->i] != '"')
            return fail(j->p, "an object key must be a string");
        char key[8];
        size_t kn = 0, save = j->i;
        int rc = json_string(j, NULL, &kn); /* its length first */
        if (rc < 0)
            return rc;
        if (kn < sizeof(key)) {
            j->i = save;
            json_string(j, key, &kn);
        } else {
            kn = 0;
        }
        key[kn] = '\0';
        ws(j);
        if (j->i >= j->len || j->s[j->i] != ':')
            return fail(j->p, "missing ':'");
        j->i++;
        ws(j);
        rc = member(j, key, kn, depth, arg);
        if (rc == 0)
            rc = json_next(j, '}');
        if (rc <= 0)
            return rc;
    }
}

static int skip_member(struct json *j, const char *key, size_t keylen, int depth, void *arg)
{
    (void)key, (void)keylen, (void)arg;
    return json_skip(j, depth + 1);
}

static int json_skip(struct json *j, int depth)
{
    if (depth > JSON_DEPTH_MAX)
        return fail(j->p, "JSON nested more than %d deep", JSON_DEPTH_MAX);
    ws(j);
    if (j->i >= j->len)
        return fail(j->p, "missing value");
    char c = j->s[j->i];
    if (c == '"')
        return json_string(j, NULL, NULL);
    if (c == '{')
        return json_object(j, depth, skip_member, NULL);
    if (c == '[') {
        j->i++;
        ws(j);
        if (j->i < j->len && j->s[j->i] == ']') {
            j->i++;
            return 0;
        }
        for (;;) {
            int rc = json_skip(j, depth + 1);
            if (rc == 0)
                rc = json_next(j, ']');
            if (rc <= 0)
                return rc;
        }
    }
    static const char *const words[] = {"true", "false", "null"};
    for (int k = 0; k < 3; k++) {
        size_t wl = strlen(words[k]);
        if (j->len - j->i >= wl && memcmp(j->s + j->i, words[k], wl) == 0) {
            j->i += wl;
            return 0;
        }
    }
    size_t st, n;
    int integer;
    return json_number(j, &st, &n, &integer);
}

/* One line's sample, as its members arrive. */
struct sample_line {
    char *path, *label, *etag; /* room for the whole line each */
    size_t pn, ln, en, sst, sn; /* sst, sn: the size's digits in the line */
    int have_path, have_label, have_size, have_etag;
    enum labels_kind kind;
};

static int sample_member(struct json *j, const char *key, size_t keylen, int depth, void *arg)
{
    struct sample_line *sl = arg;
    int is_path = keylen == 4 && memcmp(key, "path", 4) == 0;
    int is_label = keylen == 5 && memcmp(key, "label", 5) == 0;
    int is_size = keylen == 4 && memcmp(key, "size", 4) == 0;
    int is_etag = keylen == 4 && memcmp(key, "etag", 4) == 0;
    if ((is_path && sl->have_path) || (is_label && sl->have_label) ||
        (is_size && sl->have_size) || (is_etag && sl->have_etag))
        return fail(j->p, "\"%.*s\" twice", (int)keylen, key);
    if (is_etag) {
        if (j->i >= j->len || j->s[j->i] != '"')
            return fail(j->p, "\"etag\" must be a string");
        sl->have_etag = 1;
        return json_string(j, sl->etag, &sl->en);
    }
    if (is_size) {
        int integer;
        int rc = json_number(j, &sl->sst, &sl->sn, &integer);
        if (rc == 0 && (!integer || j->s[sl->sst] == '-'))
            rc = fail(j->p, "size %.*s is not a byte count", (int)(sl->sn < 40 ? sl->sn : 40),
                      j->s + sl->sst);
        sl->have_size = 1;
        return rc;
    }
    if (is_path) {
        if (j->i >= j->len || j->s[j->i] != '"')
            return fail(j->p, "\"path\" must be a string");
        sl->have_path = 1;
        return json_string(j, sl->path, &sl->pn);
    }
    if (!is_label)
        return json_skip(j, depth + 1);
    sl->have_label = 1;
    if (j->i < j->len && j->s[j->i] == '"') {
        sl->kind = LABELS_NAME;
        return json_string(j, sl->label, &sl->ln);
    }
    size_t st;
    int integer;
    int rc = json_number(j, &st, &sl->ln, &integer);
    if (rc < 0)
        return rc;
    if (!integer)
        return fail(j->p, "label %.*s is not an integer", (int)(sl->ln < 40 ? sl->ln : 40),
                    j->s + st);
    memcpy(sl->label, j->s + st, sl->ln);
    sl->kind = LABELS_INT;
    return 0;
}

static int jsonl_line(struct parser *p, const char *s, size_t len)
{
    struct json j = {.p = p, .s = s, .len = len};
    struct sample_line sl = {.path = malloc(len + 1), .label = malloc(len + 1),
                             .etag = malloc(len + 1)};
    int rc;
    if (sl.path == NULL || sl.label == NULL || sl.etag == NULL) {
        rc = -ENOMEM;
    } else {
        ws(&j);
        rc = j.i < len && s[j.i] == '{' ? json_object(&j, 0, sample_member, &sl)
                                        : fail(p, "not a JSON object");
        ws(&j);
        if (rc == 0 && j.i < len)
            rc = fail(p, "text after the object");
        if (rc == 0 && (!sl.have_path || !sl.have_label))
            rc = fail(p, "no \"%s\"", sl.have_path ? "label" : "path");
        if (rc == 0 && memchr(sl.path, '\0', sl.pn) != NULL)
            rc = fail(p, "NUL in the path");
        if (rc == 0)
            rc = add(p, sl.path, sl.pn, sl.label, sl.ln, sl.kind);
        if (rc == 0 && sl.have_etag && sl.en == 0)
            rc = fail(p, "etag of 0 bytes (1 to %d)", MANIFEST_ETAG_MAX);
        if (rc == 0 && sl.have_size && !sl.have_etag)
            rc = fail(p, "size without etag (a row gives both or neither)");
        if (rc == 0)
            rc = pin(p, s + sl.sst, sl.have_size ? sl.sn : 0, sl.etag, sl.have_etag ? sl.en : 0);
    }
    free(sl.path);
    free(sl.label);
    free(sl.etag);
    return rc;
}

/* ---- the file ---- */

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcasecmp(s + n - k, suffix) == 0;
}

void manifest_free(struct manifest *m)
{
    if (m == NULL)
        return;
    labels_free(m->labels);
    free(m->e);
    free(m->arena);
    free(m);
}

int manifest_parse(const char *name, const char *dir, const char *text, size_t len,
                   struct manifest **out, char *err, size_t errlen)
{
    int csv = ends_with(name, ".csv"), jsonl = ends_with(name, ".jsonl");
    *out = NULL;
    if (!csv && !jsonl) {
        snprintf(err, errlen, "%s: a manifest is a .csv or .jsonl file", name);
        return -EINVAL;
    }
    struct manifest *m = calloc(1, sizeof(*m));
    if (m == NULL || (m->labels = labels_new()) == NULL) {
        free(m);
        return -ENOMEM;
    }
    struct parser p = {.name = name, .dir = dir ? dir : "", .err = err, .errlen = errlen,
                       .m = m};
    size_t i = 0;
    if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0)
        i = 3;
    int rc = 0;
    while (i < len && rc == 0) {
        p.lineno++;
        const char *nl = memchr(text + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - text) : len;
        size_t n = end - i;
        if (n > MANIFEST_LINE_MAX) {
            rc = fail(&p, "line of %zu bytes (at most %d)", n, MANIFEST_LINE_MAX);
            break;
        }
        if (n && text[i + n - 1] == '\r')
            n--;
        size_t k = 0;
        while (k < n && (text[i + k] == ' ' || text[i + k] == '\t'))
            k++;
        if (k < n) {
            if (memchr(text + i, '\0', n) != NULL)
                rc = fail(&p, "NUL byte in the line");
            else
                rc = csv ? csv_line(&p, text + i, n) : jsonl_line(&p, text + i, n);
        }
        i = end + 1;
    }
    if (rc == 0 && m->n == 0) {
        p.lineno = p.lineno ? p.lineno : 1;
        rc = fail(&p, "no samples");
    }
    if (rc == 0)
        rc = labels_finish(m->labels);
    if (rc < 0) {
        manifest_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

size_t manifest_count(const struct manifest *m)
{
    return m->n;
}

const char *manifest_path(const struct manifest *m, size_t i)
{
    return i < m->n ? m->arena + m->e[i].path : NULL;
}

int manifest_is_url(const struct manifest *m, size_t i)
{
    return i < m->n && manifest_url(m->arena + m->e[i].path);
}

int manifest_pinned(const struct manifest *m, size_t i, uint64_t *size, const char **etag)
{
    if (i >= m->n || m->e[i].etag == NO_ETAG)
        return 0;
    *size = m->e[i].size;
    *etag = m->arena + m->e[i].etag;
    return 1;
}

uint64_t manifest_line(const struct manifest *m, size_t i)
{
    return i < m->n ? m->e[i].line : 0;
}

uint32_t manifest_label(const struct manifest *m, size_t i)
{
    return labels_get(m->labels, i);
}

uint32_t manifest_nclasses(const struct manifest *m)
{
    return labels_nclasses(m->labels);
}

const char *manifest_class(const struct manifest *m, uint32_t c)
{
    return labels_class(m->labels, c);
}
