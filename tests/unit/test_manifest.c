/* Unit tests for manifests (daemon/manifest.h) and their labels
 * (daemon/labels.h): CSV with quoting and extra columns, JSONL with escapes
 * and other members, relative, absolute and URL paths, integer and
 * class-name labels, and every refusal with its FILE:LINE: bad lines,
 * mixed labels, hostile lengths (a line past the limit, a megabyte of
 * nesting, thousands of fields). */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "labels.h"
#include "manifest.h"

static struct manifest *parse_ok(const char *name, const char *dir, const char *text)
{
    struct manifest *m;
    char err[300] = "";
    int rc = manifest_parse(name, dir, text, strlen(text), &m, err, sizeof(err));
    ck_assert_msg(rc == 0, "%s: %d %s", name, rc, err);
    return m;
}

static void parse_bad(const char *name, const char *text, size_t len, const char *want)
{
    struct manifest *m = (struct manifest *)1;
    char err[300] = "";
    int rc = manifest_parse(name, "/d", text, len, &m, err, sizeof(err));
    ck_assert_msg(rc == -EINVAL, "%s accepted: %.60s", name, text);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(err, want) != NULL, "message '%s', want '%s'", err, want);
}

START_TEST(test_csv)
{
    struct manifest *m = parse_ok(
        "list.csv", "/data/m",
        "\xef\xbb\xbfid,Path,label,note\r\n"
        "1,a/x.jpg,3,hi\r\n"
        "\n"
        "2, \"b,c.png\" ,0,\"say \"\"x\"\"\"\n"
        "3,/abs/y.webp,  12 ,\n"
        "4,https://h/z.jpg?x=1,1,\n"
        "5,s3://bucket/k.jpg,2,\n");
    ck_assert_uint_eq(manifest_count(m), 5);
    ck_assert_str_eq(manifest_path(m, 0), "/data/m/a/x.jpg");
    ck_assert_str_eq(manifest_path(m, 1), "/data/m/b,c.png");
    ck_assert_str_eq(manifest_path(m, 2), "/abs/y.webp");
    ck_assert_str_eq(manifest_path(m, 3), "https://h/z.jpg?x=1");
    ck_assert_str_eq(manifest_path(m, 4), "s3://bucket/k.jpg");
    ck_assert_int_eq(manifest_is_url(m, 0), 0);
    ck_assert_int_eq(manifest_is_url(m, 3), 1);
    ck_assert_int_eq(manifest_is_url(m, 4), 1);
    ck_assert_uint_eq(manifest_line(m, 1), 4);
    static const uint32_t labels[] = {3, 0, 12, 1, 2};
    for (int i = 0; i < 5; i++)
        ck_assert_uint_eq(manifest_label(m, i), labels[i]);
    ck_assert_uint_eq(manifest_nclasses(m), 0);
    manifest_free(m);

    /* class names, sorted; digits are names once names come first */
    m = parse_ok("names.CSV", "", "path,label\nx.jpg,dog\ny.jpg,cat\nz.jpg,7\nw.jpg,dog\n");
    ck_assert_uint_eq(manifest_nclasses(m), 3);
    ck_assert_str_eq(manifest_class(m, 0), "7");
    ck_assert_str_eq(manifest_class(m, 1), "cat");
    ck_assert_str_eq(manifest_class(m, 2), "dog");
    ck_assert_uint_eq(manifest_label(m, 0), 2);
    ck_assert_uint_eq(manifest_label(m, 1), 1);
    ck_assert_uint_eq(manifest_label(m, 2), 0);
    ck_assert_uint_eq(manifest_label(m, 3), 2);
    ck_assert_str_eq(manifest_path(m, 0), "x.jpg");
    manifest_free(m);
}
END_TEST

START_TEST(test_jsonl)
{
    struct manifest *m = parse_ok(
        "l.jsonl", "rel",
        "{\"path\": \"a.jpg\", \"label\": 4}\n"
        "  {\"x\": [1, {\"y\": null}, -2.5e3, true], \"label\": 0, \"path\": \"b\\u00e9.png\"}\n"
        "\n"
        "{\"path\":\"\\ud83d\\ude00.jpg\",\"label\":1,\"meta\":{\"a\":\"\\\"}\"}}\r\n");
    ck_assert_uint_eq(manifest_count(m), 3);
    ck_assert_str_eq(manifest_path(m, 0), "rel/a.jpg");
    ck_assert_uint_eq(manifest_label(m, 0), 4);
    ck_assert_uint_eq(manifest_label(m, 1), 0);
    ck_assert_str_eq(manifest_path(m, 2), "rel/\xf0\x9f\x98\x80.jpg");
    manifest_free(m);
    /* a tab is a control character in a path: refused */
    parse_bad("l.jsonl", "{\"path\": \"b\\t.png\", \"label\": 0}\n", 33, "l.jsonl:1: control");

    m = parse_ok("n.jsonl", "", "{\"path\": \"a\", \"label\": \"zebra\"}\n"
                                "{\"path\": \"b\", \"label\": \"3\"}\n");
    ck_assert_uint_eq(manifest_nclasses(m), 2);
    ck_assert_uint_eq(manifest_label(m, 0), 1);
    ck_assert_str_eq(manifest_class(m, 0), "3");
    manifest_free(m);
}
END_TEST

START_TEST(test_bad_lines)
{
#define BAD(name, text, want) parse_bad(name, text, strlen(text), want)
    BAD("m.txt", "path,label\n", "a .csv or .jsonl");
    BAD("m.csv", "", "m.csv:1: no samples");
    BAD("m.csv", "path,label\n\n", "m.csv:2: no samples");
    BAD("m.csv", "file,label\na,1\n", "m.csv:1:");
    BAD("m.csv", "path,label,path\n", "m.csv:1: column 'path' twice");
    BAD("m.csv", "path,label\na,1\nb\n", "m.csv:3: 1 fields, the header has 2");
    BAD("m.csv", "path,label\na,1,x\n", "m.csv:2: 3 fields");
    BAD("m.csv", "path,label\n\"a,1\n", "m.csv:2: unterminated quoted field");
    BAD("m.csv", "path,label\n\"a\"x,1\n", "m.csv:2: text after a closing quote");
    BAD("m.csv", "path,label\na\"b,1\n", "m.csv:2: a quote inside");
    BAD("m.csv", "path,label\n,1\n", "m.csv:2: empty path");
    BAD("m.csv", "path,label\na,1\nb,cat\n", "m.csv:3: label 'cat' is not an integer");
    BAD("m.csv", "path,label\na,-1\n", "m.csv:2: label '-1'");
    BAD("m.csv", "path,label\na,99999999999\n", "not an integer");
    BAD("m.csv", "path,label\na,\n", "m.csv:2: class name of 0 bytes");
    BAD("m.csv", "path,label\nftp://h/a.jpg,1\n", "m.csv:2: path 'ftp://h/a.jpg'");
    BAD("m.jsonl", "[1]\n", "m.jsonl:1: not a JSON object");
    BAD("m.jsonl", "{\"path\": \"a\"}\n", "m.jsonl:1: no \"label\"");
    BAD("m.jsonl", "{\"label\": 1}\n", "no \"path\"");
    BAD("m.jsonl", "{\"path\": 1, \"label\": 1}\n", "\"path\" must be a string");
    BAD("m.jsonl", "{\"path\": \"a\", \"label\": 1.5}\n", "label 1.5 is not an integer");
    BAD("m.jsonl", "{\"path\": \"a\", \"label\": 01}\n", "leading zero");
    BAD("m.jsonl", "{\"path\": \"a\", \"label\": 1} x\n", "text after the object");
    BAD("m.jsonl", "{\"path\": \"a\", \"path\": \"b\", \"label\": 1}\n", "\"path\" twice");
    BAD("m.jsonl", "{\"path\": \"a\\ud800\", \"label\": 1}\n", "unpaired surrogate");
    BAD("m.jsonl", "{\"path\": \"a\\x\", \"label\": 1}\n", "bad escape");
    BAD("m.jsonl", "{\"path\": \"a\\u0000\", \"label\": 1}\n", "NUL in the path");
    BAD("m.jsonl", "{\"path\": \"a\", \"label\": 1, \"z\": tru}\n", "bad value");
    BAD("m.jsonl",
        "{\"path\": \"a\", \"label\": 1}\n{\"path\": \"b\", \"label\": \"x\"}\n",
        "m.jsonl:2: label 'x' is a class name, but the first label was an integer");
    BAD("m.jsonl", "{\"path\": \"a\", \"label\": \"x\"}\n{\"path\": \"b\", \"label\": 2}\n",
        "m.jsonl:2: label '2' is an integer, but the first label was a class name");
    parse_bad("m.csv", "path,label\na\0b,1\n", 17, "m.csv:2: NUL");
#undef BAD
}
END_TEST

START_TEST(test_pinned_rows)
{
#define BAD(name, text, want) parse_bad(name, text, strlen(text), want)
    /* rows naming their version: size and etag, both or neither */
    struct manifest *m = parse_ok("p.csv", "/d",
                                  "path,label,size,ETag\n"
                                  "http://h/a.jpg,1,1234,\"\"\"5f-4d2\"\"\"\n"
                                  "http://h/b.jpg,0,,\n"
                                  "http://h/c.jpg,0,0,abc\n");
    uint64_t size = 1;
    const char *etag = NULL;
    ck_assert_int_eq(manifest_pinned(m, 0, &size, &etag), 1);
    ck_assert_uint_eq(size, 1234);
    ck_assert_str_eq(etag, "5f-4d2"); /* its quotes dropped */
    ck_assert_int_eq(manifest_pinned(m, 1, &size, &etag), 0);
    ck_assert_int_eq(manifest_pinned(m, 2, &size, &etag), 1);
    ck_assert_uint_eq(size, 0);
    ck_assert_str_eq(etag, "abc");
    ck_assert_int_eq(manifest_pinned(m, 3, &size, &etag), 0);
    manifest_free(m);
    m = parse_ok("p.jsonl", "/d",
                 "{\"path\": \"http://h/a.jpg\", \"label\": 1, \"size\": 99, \"etag\": \"\\\"e1\\\"\"}\n"
                 "{\"path\": \"http://h/b.jpg\", \"label\": 2}\n");
    ck_assert_int_eq(manifest_pinned(m, 0, &size, &etag), 1);
    ck_assert_uint_eq(size, 99);
    ck_assert_str_eq(etag, "e1");
    ck_assert_int_eq(manifest_pinned(m, 1, &size, &etag), 0);
    manifest_free(m);
    BAD("p.csv", "path,label,size,etag\na,1,12,\n", "p.csv:2: size without etag");
    BAD("p.csv", "path,label,etag\na,1,x\n", "p.csv:2: etag without size");
    BAD("p.csv", "path,label,size,etag\na,1,-3,x\n", "p.csv:2: size '-3' is not a byte count");
    BAD("p.csv", "path,label,size,etag\na,1,99999999999999999999,x\n",
        "p.csv:2: size '99999999999999999999' is not a byte count");
    BAD("p.csv", "path,label,size,etag\na,1,1,\"a\"\"b\"\n", "p.csv:2: etag with a quote");
    BAD("p.csv",
        "path,label,size,etag\na,1,1,"
        "0123456789012345678901234567890123456789012345678901234567890123456789012345678901\n",
        "p.csv:2: etag of 82 bytes (1 to 79)");
    BAD("p.csv", "path,label,size,size\n", "p.csv:1: column 'size' twice");
    BAD("p.jsonl", "{\"path\": \"a\", \"label\": 1, \"size\": 1.5, \"etag\": \"x\"}\n",
        "p.jsonl:1: size 1.5 is not a byte count");
    BAD("p.jsonl", "{\"path\": \"a\", \"label\": 1, \"size\": 2, \"etag\": 3}\n",
        "p.jsonl:1: \"etag\" must be a string");
    BAD("p.jsonl", "{\"path\": \"a\", \"label\": 1, \"etag\": \"\"}\n",
        "p.jsonl:1: etag of 0 bytes");
    BAD("p.jsonl", "{\"path\": \"a\", \"label\": 1, \"size\": 2}\n",
        "p.jsonl:1: size without etag");
    BAD("p.jsonl", "{\"path\": \"a\", \"label\": 1, \"size\": 2, \"size\": 2}\n",
        "p.jsonl:1: \"size\" twice");
#undef BAD
}
END_TEST

START_TEST(test_hostile_sizes)
{
    /* a line past MANIFEST_LINE_MAX */
    size_t n = MANIFEST_LINE_MAX + 100;
    char *t = malloc(n + 32);
    strcpy(t, "path,label\n");
    size_t k = strlen(t);
    memset(t + k, 'a', n);
    strcpy(t + k + n, ",1\n");
    parse_bad("m.csv", t, strlen(t), "m.csv:2: line of");
    /* a path just over MANIFEST_PATH_MAX */
    strcpy(t, "path,label\n");
    memset(t + k, 'a', MANIFEST_PATH_MAX + 1);
    strcpy(t + k + MANIFEST_PATH_MAX + 1, ",1\n");
    parse_bad("m.csv", t, strlen(t), "path of 4097 bytes");
    /* JSON nested past the limit, within one line */
    strcpy(t, "{\"path\": \"a\", \"label\": 1, \"x\": ");
    k = strlen(t);
    for (int i = 0; i < 10000; i++)
        t[k++] = '[';
    t[k++] = '\n';
    parse_bad("m.jsonl", t, k, "nested more than 64");
    /* a row of thousands of fields */
    strcpy(t, "path,label\n");
    k = strlen(t);
    for (int i = 0; i < 5000; i++)
        t[k++] = ',';
    t[k++] = '\n';
    parse_bad("m.csv", t, k, "more than 1024 fields");
    free(t);
}
END_TEST

START_TEST(test_labels_direct)
{
    struct labels *l = labels_new();
    char err[200];
    ck_assert_int_eq(labels_add(l, "10", 2, LABELS_TEXT, err, sizeof(err)), 0);
    ck_assert_int_eq(labels_add(l, "2147483647", 10, LABELS_TEXT, err, sizeof(err)), 0);
    ck_assert_int_eq(labels_add(l, "2147483648", 10, LABELS_TEXT, err, sizeof(err)), -EINVAL);
    ck_assert_int_eq(labels_finish(l), 0);
    ck_assert_uint_eq(labels_get(l, 1), 2147483647u);
    ck_assert_uint_eq(labels_nclasses(l), 0);
    ck_assert_ptr_null(labels_class(l, 0));
    labels_free(l);
    /* many classes: the table grows, indices stay sorted */
    l = labels_new();
    char name[16];
    for (int i = 999; i >= 0; i--) {
        int len = snprintf(name, sizeof(name), "c%04d", i);
        ck_assert_int_eq(labels_add(l, name, (size_t)len, LABELS_NAME, err, sizeof(err)), 0);
        ck_assert_int_eq(labels_add(l, name, (size_t)len, LABELS_NAME, err, sizeof(err)), 0);
    }
    ck_assert_int_eq(labels_finish(l), 0);
    ck_assert_uint_eq(labels_nclasses(l), 1000);
    ck_assert_uint_eq(labels_count(l), 2000);
    ck_assert_uint_eq(labels_get(l, 0), 999);
    ck_assert_uint_eq(labels_get(l, 1999), 0);
    ck_assert_str_eq(labels_class(l, 7), "c0007");
    labels_free(l);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("manifest");
    TCase *tc = tcase_create("manifest");
    tcase_add_test(tc, test_csv);
    tcase_add_test(tc, test_jsonl);
    tcase_add_test(tc, test_bad_lines);
    tcase_add_test(tc, test_pinned_rows);
    tcase_add_test(tc, test_hostile_sizes);
    tcase_add_test(tc, test_labels_direct);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
