/* Unit tests for the S3 XML reader (daemon/s3xml.h): listing pages as S3
 * and s3rver write them (entities, unknown elements, comments, CDATA,
 * empty pages, continuation tokens) and error documents, then malformed
 * and hostile documents, each refused with a message: unbalanced tags, a
 * DOCTYPE, a second root, bad entities, nesting past the limit, keys and
 * tokens over their limits, a truncated listing without a token. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s3xml.h"

static int parse(const char *xml, struct s3xml_page *p, char *err, size_t errlen)
{
    err[0] = '\0';
    return s3xml_list(xml, strlen(xml), p, err, errlen);
}

START_TEST(test_page)
{
    const char *xml =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<!-- a comment -->\n"
        "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        "<Name>data</Name><Prefix>train/</Prefix><KeyCount>3</KeyCount>"
        "<MaxKeys>3</MaxKeys><IsTruncated>true</IsTruncated>"
        "<Contents><Key>train/a&amp;b &lt;x&gt;.jpg</Key><LastModified>2024</LastModified>"
        "<ETag>&quot;0123abcd&quot;</ETag><Size>42</Size>"
        "<Owner><ID>x</ID><DisplayName>y</DisplayName></Owner>"
        "<StorageClass>STANDARD</StorageClass></Contents>"
        "<Contents><Key><![CDATA[train/c<d>.png]]></Key><Size>0</Size></Contents>"
        "<Contents>\n  <Key>train/&#233;&#x4E2D;.jpg</Key>\n  <Size>18446744073709551615</Size>\n"
        "</Contents>"
        "<NextContinuationToken>1Yx8g/+abc=</NextContinuationToken>"
        "<Unknown a='1' b=\"2\"><Deeper><X/></Deeper></Unknown>"
        "</ListBucketResult>\n";
    struct s3xml_page p;
    char err[256];
    ck_assert_int_eq(parse(xml, &p, err, sizeof(err)), 0);
    ck_assert_uint_eq(p.n, 3);
    ck_assert_str_eq(p.objects[0].key, "train/a&b <x>.jpg");
    ck_assert_uint_eq(p.objects[0].size, 42);
    ck_assert_str_eq(p.objects[0].etag, "0123abcd");
    ck_assert_str_eq(p.objects[1].key, "train/c<d>.png");
    ck_assert_str_eq(p.objects[2].key, "train/\xc3\xa9\xe4\xb8\xad.jpg");
    ck_assert_uint_eq(p.objects[2].size, UINT64_MAX);
    ck_assert_int_eq(p.truncated, 1);
    ck_assert_str_eq(p.next_token, "1Yx8g/+abc=");
    s3xml_page_free(&p);

    /* an empty, final page */
    ck_assert_int_eq(parse("<ListBucketResult><IsTruncated>false</IsTruncated>"
                           "<KeyCount>0</KeyCount></ListBucketResult>",
                           &p, err, sizeof(err)),
                     0);
    ck_assert_uint_eq(p.n, 0);
    ck_assert_int_eq(p.truncated, 0);
    s3xml_page_free(&p);
}
END_TEST

START_TEST(test_error_doc)
{
    char code[32], msg[128];
    const char *xml = "<?xml version=\"1.0\"?><Error><Code>NoSuchBucket</Code>"
                      "<Message>The specified bucket does not exist</Message>"
                      "<BucketName>x</BucketName></Error>";
    ck_assert_int_eq(s3xml_error(xml, strlen(xml), code, sizeof(code), msg, sizeof(msg)), 0);
    ck_assert_str_eq(code, "NoSuchBucket");
    ck_assert_str_eq(msg, "The specified bucket does not exist");
    /* cut to the buffers */
    ck_assert_int_eq(s3xml_error(xml, strlen(xml), code, 5, msg, 8), 0);
    ck_assert_str_eq(code, "NoSu");
    ck_assert_str_eq(msg, "The spe");
    ck_assert_int_eq(s3xml_error("<html>x</html>", 14, code, sizeof(code), msg, sizeof(msg)),
                     -EBADMSG);
    ck_assert_int_eq(s3xml_error("", 0, code, sizeof(code), msg, sizeof(msg)), -EBADMSG);
}
END_TEST

START_TEST(test_refused)
{
    static const struct {
        const char *xml, *why;
    } bad[] = {
        {"", "no root"},
        {"<ListBucketResult>", "not closed"},
        {"<ListBucketResult></Other>", "closes"},
        {"<Error/>", "not a ListBucketResult"},
        {"<!DOCTYPE x [<!ENTITY a \"b\">]><ListBucketResult/>", "DOCTYPE"},
        {"<ListBucketResult/><ListBucketResult/>", "second root"},
        {"<ListBucketResult>&nbsp;</ListBucketResult>", "unknown entity"},
        {"<ListBucketResult>&#0;</ListBucketResult>", "character reference"},
        {"<ListBucketResult>&#xD800;</ListBucketResult>", "character reference"},
        {"<ListBucketResult>&#99999999;</ListBucketResult>", "character reference"},
        {"text<ListBucketResult/>", "text outside"},
        {"<ListBucketResult><!-- x </ListBucketResult>", "unterminated comment"},
        {"<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>",
         "without Key"},
        {"<ListBucketResult><Contents><Key>k</Key><Size>-1</Size></Contents></ListBucketResult>",
         "bad Size"},
        {"<ListBucketResult><Contents><Key>k</Key><Size>18446744073709551616</Size>"
         "</Contents></ListBucketResult>",
         "bad Size"},
        {"<ListBucketResult><IsTruncated>yes</IsTruncated></ListBucketResult>",
         "bad IsTruncated"},
        {"<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>",
         "without a NextContinuationToken"},
        {"<ListBucketResult><a b=\"1></ListBucketResult>", "unterminated attribute"},
        {"<ListBucketResult><?pi x?></ListBucketResult>", "processing instruction"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct s3xml_page p;
        char err[256];
        int rc = parse(bad[i].xml, &p, err, sizeof(err));
        ck_assert_msg(rc == -EBADMSG, "%s: accepted", bad[i].xml);
        ck_assert_msg(strstr(err, bad[i].why) != NULL, "%s: '%s', want '%s'", bad[i].xml, err,
                      bad[i].why);
        s3xml_page_free(&p);
    }
}
END_TEST

START_TEST(test_limits)
{
    struct s3xml_page p;
    char err[256];
    /* a key over S3XML_KEY_MAX */
    size_t n = 2 * S3XML_KEY_MAX + 200;
    char *xml = malloc(n + 200);
    strcpy(xml, "<ListBucketResult><Contents><Key>");
    size_t k = strlen(xml);
    memset(xml + k, 'k', S3XML_KEY_MAX + 1);
    strcpy(xml + k + S3XML_KEY_MAX + 1, "</Key><Size>1</Size></Contents></ListBucketResult>");
    ck_assert_int_eq(parse(xml, &p, err, sizeof(err)), -EBADMSG);
    ck_assert_msg(strstr(err, "a key of") != NULL, "%s", err);
    s3xml_page_free(&p);
    free(xml);
    /* nesting past the limit */
    xml = malloc(100 * 4 + 64);
    strcpy(xml, "<ListBucketResult>");
    for (int i = 0; i < 100; i++)
        strcat(xml, "<a>");
    ck_assert_int_eq(parse(xml, &p, err, sizeof(err)), -EBADMSG);
    ck_assert_msg(strstr(err, "nested") != NULL, "%s", err);
    s3xml_page_free(&p);
    free(xml);
    /* many objects: the page grows */
    size_t count = 5000;
    xml = malloc(count * 64 + 64);
    strcpy(xml, "<ListBucketResult>");
    char *w = xml + strlen(xml);
    for (size_t i = 0; i < count; i++)
        w += sprintf(w, "<Contents><Key>k%zu</Key><Size>%zu</Size></Contents>", i, i);
    strcpy(w, "</ListBucketResult>");
    ck_assert_int_eq(parse(xml, &p, err, sizeof(err)), 0);
    ck_assert_uint_eq(p.n, count);
    ck_assert_uint_eq(p.objects[4999].size, 4999);
    s3xml_page_free(&p);
    free(xml);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("s3xml");
    TCase *tc = tcase_create("s3xml");
    tcase_add_test(tc, test_page);
    tcase_add_test(tc, test_error_doc);
    tcase_add_test(tc, test_refused);
    tcase_add_test(tc, test_limits);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
