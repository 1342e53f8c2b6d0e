/* Unit tests for queued replies in the client memory budget
 * (daemon/budget.h): every byte queued is charged to its uid and given
 * back; when a connection's requests wait, and that a uid with no replies
 * of its own queued is never held back by another uid's. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "budget.h"

#define MiB (1ull << 20)

static struct budget *b;

static void setup(void)
{
    /* No event base: nothing to watch, no inotify. */
    ck_assert_int_eq(budget_create(&b, NULL, 10 * MiB, 6 * MiB), 0);
}

static void teardown(void)
{
    budget_destroy(b);
    b = NULL;
}

static int notified;
static void on_freed(void *arg)
{
    (void)arg;
    notified++;
}

/* Charged while queued, given back when written; a closed queue lives
 * until its last bytes go. */
START_TEST(test_charge_and_give_back)
{
    struct budget_queue *q;
    ck_assert_int_eq(budget_queue_new(b, 1000, &q), 0);
    budget_queue_add(q, 3 * MiB);
    ck_assert_uint_eq(budget_used(b, 1000), 3 * MiB);
    ck_assert_uint_eq(budget_queue_bytes(q), 3 * MiB);
    budget_queue_sub(q, MiB);
    ck_assert_uint_eq(budget_used(b, 1000), 2 * MiB);
    budget_queue_close(q); /* the connection went, 2 MiB still in its buffers */
    ck_assert_uint_eq(budget_used(b, 1000), 2 * MiB);
    budget_queue_sub(q, 2 * MiB); /* libevent freed them: q goes too */
    ck_assert_uint_eq(budget_used(b, 1000), 0);
    ck_assert_uint_eq(budget_room(b, 1000, NULL), 6 * MiB);
}
END_TEST

/* Own limit, then the uid's: a connection with nothing queued of its own
 * waits too while its uid is at limits.user_memory with replies queued
 * (else 256 connections would each queue a reply past it); once the uid's
 * replies are written it goes on, even with streams holding its budget. */
START_TEST(test_wait_reasons)
{
    struct budget_queue *q1, *q2;
    ck_assert_int_eq(budget_queue_new(b, 1000, &q1), 0);
    ck_assert_int_eq(budget_queue_new(b, 1000, &q2), 0);
    budget_queue_add(q1, 2 * MiB);
    ck_assert_int_eq(budget_queue_wait(q1, MiB), BUDGET_WAIT_OWN);
    ck_assert_int_eq(budget_queue_wait(q2, MiB), BUDGET_GO);
    ck_assert_int_eq(budget_charge(b, 1000, 4 * MiB), 0); /* its streams: at 6 MiB */
    ck_assert_int_eq(budget_queue_wait(q2, MiB), BUDGET_WAIT_USER);
    budget_queue_sub(q1, 2 * MiB);
    /* Streams alone at the limit hold no connection back (RELEASEs must
     * be read), they only refuse new streams. */
    ck_assert_int_eq(budget_charge(b, 1000, 2 * MiB), 0);
    ck_assert_int_eq(budget_queue_wait(q1, MiB), BUDGET_GO);
    ck_assert_int_eq(budget_queue_wait(q2, MiB), BUDGET_GO);
    budget_uncharge(b, 1000, 6 * MiB);
    budget_queue_close(q1);
    budget_queue_close(q2);
}
END_TEST

/* All clients at limits.client_memory: the uid whose replies fill it
 * waits, another uid with none of its own queued goes on (and waits only
 * while one of its own replies is unread). */
START_TEST(test_other_uid_goes_on)
{
    struct budget_queue *hog[2], *honest;
    ck_assert_int_eq(budget_queue_new(b, 1000, &hog[0]), 0);
    ck_assert_int_eq(budget_queue_new(b, 1001, &hog[1]), 0);
    ck_assert_int_eq(budget_queue_new(b, 0, &honest), 0);
    budget_queue_add(hog[0], 5 * MiB);
    budget_queue_add(hog[1], 5 * MiB); /* 10 MiB: client_memory */
    ck_assert_int_eq(budget_queue_wait(hog[0], 8 * MiB), BUDGET_WAIT_ALL);
    ck_assert_int_eq(budget_queue_wait(hog[1], 8 * MiB), BUDGET_WAIT_ALL);
    ck_assert_int_eq(budget_queue_wait(honest, 8 * MiB), BUDGET_GO);
    budget_queue_add(honest, 4096);
    ck_assert_int_eq(budget_queue_wait(honest, 8 * MiB), BUDGET_WAIT_ALL);
    budget_queue_sub(honest, 4096);
    ck_assert_int_eq(budget_queue_wait(honest, 8 * MiB), BUDGET_GO);
    budget_queue_close(hog[0]);
    budget_queue_close(hog[1]);
    budget_queue_close(honest);
    ck_assert_uint_eq(budget_used(b, 1000), 5 * MiB); /* until libevent frees them */
    budget_queue_sub(hog[0], 5 * MiB);
    budget_queue_sub(hog[1], 5 * MiB);
    ck_assert_uint_eq(budget_used(b, 1000), 0);
    ck_assert_uint_eq(budget_used(b, 1001), 0);
}
END_TEST

/* Waiting connections are counted per uid; charges going down while one
 * waits are told (the server looks at them then), not otherwise. */
START_TEST(test_pause_counts_and_notify)
{
    struct budget_queue *q;
    budget_set_notify(b, on_freed, NULL);
    notified = 0;
    ck_assert_int_eq(budget_queue_new(b, 1000, &q), 0);
    budget_queue_add(q, 2 * MiB);
    budget_queue_sub(q, MiB);
    ck_assert_int_eq(notified, 0);
    budget_queue_pause(q, BUDGET_WAIT_OWN);
    budget_queue_pause(q, BUDGET_WAIT_USER); /* still one waiting */
    budget_queue_sub(q, MiB / 2);
    ck_assert_int_eq(notified, 1);
    budget_queue_close(q); /* stops waiting */
    budget_queue_sub(q, MiB / 2);
    ck_assert_int_eq(notified, 1);
    ck_assert_uint_eq(budget_used(b, 1000), 0);
}
END_TEST

/* Read-ahead: charged to the uid within half of the room its other
 * charges leave, the floor of its largest stream set aside (budget_cap
 * notes it); an OPEN that fits only once read-ahead is given back waits
 * (budget_ahead_blocks), and while it waits nothing is read ahead, so the
 * wait ends; the grant reckons the share without read-ahead. */
START_TEST(test_read_ahead)
{
    struct budget_queue *q;
    ck_assert_int_eq(budget_queue_new(b, 1000, &q), 0);
    ck_assert_int_eq(budget_charge(b, 1000, 2 * MiB), 0);     /* a stream */
    ck_assert_uint_eq(budget_ahead_room(b, 1000), 2 * MiB);   /* (6 - 2) / 2 */
    /* A stream refused (its floor over the room) leaves read-ahead as it
     * was: asking for the impossible stops nobody's read-ahead. */
    ck_assert_uint_eq(budget_cap(b, 1000, 100 * MiB, 0, NULL), 0);
    ck_assert_uint_eq(budget_ahead_room(b, 1000), 2 * MiB);
    ck_assert_uint_eq(budget_ahead_room(b, 2000), 3 * MiB);   /* 6 / 2, under (10 - 2) / 2 */
    /* A stream of floor 1 MiB seen: read-ahead leaves it aside. */
    ck_assert_uint_ge(budget_cap(b, 1000, MiB, 0, NULL), MiB);
    ck_assert_uint_eq(budget_ahead_room(b, 1000), 3 * MiB / 2); /* (6 - 2 - 1) / 2 */
    ck_assert_int_eq(budget_ahead_charge(b, 1000, MiB), 0);
    ck_assert_uint_eq(budget_used(b, 1000), 3 * MiB);
    ck_assert_uint_eq(budget_ahead_room(b, 1000), MiB / 2);
    /* The grant: the share without read-ahead (4 MiB free, no reserve),
     * never past the room (3 MiB). */
    ck_assert_uint_eq(budget_cap(b, 1000, MiB, 0, NULL), 3 * MiB);
    /* Another uid's read-ahead is half of all clients' room at most. */
    ck_assert_uint_eq(budget_ahead_room(b, 2000), (10 * MiB - 2 * MiB - MiB) / 2 - MiB);
    /* Streams take the uid's room to 1.5 MiB: one of floor 2 MiB fits
     * only without the read-ahead: its OPEN waits, nothing is read ahead
     * meanwhile (for anyone), and once it is given back the OPEN fits. */
    ck_assert_int_eq(budget_charge(b, 1000, 3 * MiB / 2), 0);
    ck_assert_uint_eq(budget_room(b, 1000, NULL), 3 * MiB / 2);
    ck_assert_int_eq(budget_ahead_blocks(b, 1000, 2 * MiB), 1);
    ck_assert_int_eq(budget_ahead_blocks(b, 1000, 3 * MiB), 0); /* never fits: refused */
    ck_assert_int_eq(budget_ahead_blocks(b, 1000, MiB), 0);     /* fits now */
    budget_queue_pause(q, BUDGET_WAIT_AHEAD);
    ck_assert_uint_eq(budget_ahead_room(b, 1000), 0);
    ck_assert_uint_eq(budget_ahead_room(b, 2000), 0);
    budget_ahead_uncharge(b, 1000, MiB);
    ck_assert_int_eq(budget_ahead_blocks(b, 1000, 2 * MiB), 0);
    ck_assert_uint_eq(budget_room(b, 1000, NULL), 5 * MiB / 2);
    budget_queue_pause(q, BUDGET_GO);
    ck_assert_uint_gt(budget_ahead_room(b, 2000), 0);
    budget_ahead_skipped(b);
    budget_uncharge(b, 1000, 7 * MiB / 2);
    ck_assert_uint_eq(budget_used(b, 1000), 0);
    budget_queue_close(q);
}
END_TEST

static Suite *budget_queue_suite(void)
{
    Suite *s = suite_create("budget_queue");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_charge_and_give_back);
    tcase_add_test(tc, test_wait_reasons);
    tcase_add_test(tc, test_other_uid_goes_on);
    tcase_add_test(tc, test_pause_counts_and_notify);
    tcase_add_test(tc, test_read_ahead);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(budget_queue_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
