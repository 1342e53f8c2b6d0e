/* Unit tests for shard-list brace expansion (daemon/braces.h): the lists
 * Python's braceexpand 0.1.7 (WebDataset's; Debian's python3-braceexpand)
 * gives for the same patterns, written out here, plus
 * the refusals: unbalanced braces, lists past the limit, deep nesting. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "braces.h"

static void expect(const char *pattern, const char *joined)
{
    char **v, err[200] = "";
    size_t n;
    int rc = braces_expand(pattern, 100000, &v, &n, err, sizeof(err));
    ck_assert_msg(rc == 0, "%s: %d %s", pattern, rc, err);
    char got[4096] = "";
    for (size_t i = 0; i < n; i++) {
        if (i)
            strcat(got, " ");
        strcat(got, v[i]);
    }
    ck_assert_msg(strcmp(got, joined) == 0, "%s: got '%s', want '%s'", pattern, got, joined);
    braces_free(v, n);
}

static void refuse(const char *pattern, size_t max, int want, const char *words)
{
    char **v = (char **)1, err[200] = "";
    size_t n = 7;
    int rc = braces_expand(pattern, max, &v, &n, err, sizeof(err));
    ck_assert_msg(rc == want, "%s: %d, want %d", pattern, rc, want);
    ck_assert_msg(strstr(err, words) != NULL, "%s: '%s'", pattern, err);
    ck_assert_ptr_null(v);
    ck_assert_uint_eq(n, 0);
}

START_TEST(test_expand)
{
    expect("train.tar", "train.tar");
    expect("train-{000000..000003}.tar",
           "train-000000.tar train-000001.tar train-000002.tar train-000003.tar");
    expect("s-{08..11}", "s-08 s-09 s-10 s-11");
    expect("s-{8..11}", "s-8 s-9 s-10 s-11");
    expect("s-{0..2}", "s-0 s-1 s-2");
    expect("{3..1}", "3 2 1");
    expect("{0..10..5}", "0 5 10");
    expect("{10..0..-4}", "10 6 2");
    expect("{1..3..0}", "1 2 3");
    expect("{-2..1}", "-2 -1 0 1");
    expect("{a..d}", "a b c d");
    expect("{a,b}-{0..1}", "a-0 a-1 b-0 b-1");
    expect("s3://b/{x,y{1,2}}.tar", "s3://b/x.tar s3://b/y1.tar s3://b/y2.tar");
    expect("{x}", "{x}");
    expect("{}", "{}");
    expect("{x{1,2}}", "{x1} {x2}");
    expect("a\\{b\\}", "a{b}");
    expect("{a\\,b,c}", "a,b c");
    expect("{,x}", " x");
    expect("{1..2}{a..b}", "1a 1b 2a 2b");
    expect("{-05..-3}", "-05 -04 -03");
    expect("{00..2}", "00 01 02");
    expect("{-00..2}", "000 001 002");
    expect("{0..-02}", "000 -01 -02");
    expect("{Y..b}", "Y Z a b");
    expect("{b..Z}", "b a Z");
    expect("{z..a..12}", "z n b");
}
END_TEST

START_TEST(test_refuse)
{
    refuse("train-{0..9", 100, -EINVAL, "unbalanced '{'");
    refuse("train-0..9}", 100, -EINVAL, "unbalanced '}'");
    refuse("{0..999999}", 1000, -E2BIG, "more than 1000 names");
    refuse("{0..99}{0..99}", 1000, -E2BIG, "more than 1000 names");
    refuse("{0..9223372036854775}", 1000, -E2BIG, "more than 1000");
    char deep[200] = "";
    for (int i = 0; i < 20; i++)
        strcat(deep, "{a,");
    for (int i = 0; i < 20; i++)
        strcat(deep, "b}");
    refuse(deep, 1000, -EINVAL, "nested");
    char *long_name = malloc(5000);
    memset(long_name, 'x', 4999);
    long_name[4999] = '\0';
    refuse(long_name, 10, -E2BIG, "bytes");
    free(long_name);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("braces");
    TCase *tc = tcase_create("braces");
    tcase_add_test(tc, test_expand);
    tcase_add_test(tc, test_refuse);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
