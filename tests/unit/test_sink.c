/* Unit tests for the profiler's sink (daemon/sink.h): every message is
 * answered with its tag, in order, whatever its size; what one pass of
 * the loop queues goes out together; a full queue says -EAGAIN; the sink
 * may be destroyed from within an answer, and with answers unread. */
#include <check.h>
#include <errno.h>
#include <event2/event.h>
#include <stdint.h>
#include <stdlib.h>

#include "sink.h"

static struct event_base *base;
static struct sink *sk;
static uint64_t got[4096];
static unsigned ngot, destroy_at;

static void on_answer(void *arg, uint64_t tag)
{
    (void)arg;
    if (ngot < sizeof(got) / sizeof(got[0]))
        got[ngot] = tag;
    ngot++;
    if (destroy_at && ngot == destroy_at) {
        sink_destroy(sk); /* from within: once this answer's pass is over */
        sk = NULL;
        event_base_loopbreak(base);
    }
}

static void setup(void)
{
    base = event_base_new();
    ck_assert_ptr_nonnull(base);
    ngot = 0;
    destroy_at = 0;
    ck_assert_int_eq(sink_create(&sk, base, on_answer, NULL), 0);
}

static void teardown(void)
{
    sink_destroy(sk);
    sk = NULL;
    event_base_free(base);
}

/* Runs the loop until n answers came (or 5 s went). */
static void wait_answers(unsigned n)
{
    struct timeval tv = {0, 10000};
    for (int i = 0; i < 500 && ngot < n; i++)
        event_base_loopexit(base, &tv), event_base_dispatch(base);
    ck_assert_uint_eq(ngot, n);
}

START_TEST(test_answers_in_order)
{
    /* A header alone, a BATCH_SHM frame's 576 bytes, a large one, one
     * past the largest (sent as the largest), below the smallest. */
    static const size_t sizes[] = {SINK_HEADER, 576, 40000, SINK_MAX_MESSAGE + 5, 3};
    unsigned n = 0;
    for (unsigned round = 0; round < 20; round++) { /* each round within the queue */
        for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++, n++)
            ck_assert_int_eq(sink_send(sk, 1000 + n, sizes[i]), 0);
        wait_answers(n);
    }
    for (unsigned i = 0; i < n; i++)
        ck_assert_uint_eq(got[i], 1000 + i);
    /* Again after the first are answered: the sink goes on. */
    ck_assert_int_eq(sink_send(sk, UINT64_MAX, 64), 0);
    wait_answers(n + 1);
    ck_assert_uint_eq(got[n], UINT64_MAX);
}
END_TEST

/* The queue holds 4 of the largest messages until the loop writes them. */
START_TEST(test_full_queue)
{
    int rc = 0;
    unsigned n = 0;
    while (n < 100 && (rc = sink_send(sk, n, SINK_MAX_MESSAGE)) == 0)
        n++;
    ck_assert_int_eq(rc, -EAGAIN);
    ck_assert_uint_eq(n, 4);
    wait_answers(n);
    ck_assert_int_eq(sink_send(sk, 7, SINK_MAX_MESSAGE), 0);
    wait_answers(n + 1);
}
END_TEST

/* Destroyed by its owner inside an answer, answers still to come: none
 * comes after. */
START_TEST(test_destroy_within_answer)
{
    destroy_at = 3;
    for (unsigned i = 0; i < 50; i++)
        ck_assert_int_eq(sink_send(sk, i, 100), 0);
    struct timeval tv = {5, 0};
    event_base_loopexit(base, &tv);
    event_base_dispatch(base);
    ck_assert_uint_eq(ngot, 3);
    ck_assert_ptr_null(sk);
}
END_TEST

/* Destroyed with messages queued and answers unread: the thread stops. */
START_TEST(test_destroy_unread)
{
    for (unsigned i = 0; i < 50; i++)
        ck_assert_int_eq(sink_send(sk, i, 1000), 0);
    struct timeval tv = {0, 1000};
    event_base_loopexit(base, &tv);
    event_base_dispatch(base);
    sink_destroy(sk);
    sk = NULL;
}
END_TEST

static Suite *sink_suite(void)
{
    Suite *s = suite_create("sink");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_answers_in_order);
    tcase_add_test(tc, test_full_queue);
    tcase_add_test(tc, test_destroy_within_answer);
    tcase_add_test(tc, test_destroy_unread);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(sink_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
