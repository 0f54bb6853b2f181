/*
 * The C SDK worker's inbox: the order in which a bundle's input reaches the bundle processor.
 *
 * A runner's Elements message may carry a bundle's data and its fired timers together. The
 * timers were due when the runner built the bundle, so they go first: a timer that fires for a
 * key must see the state as it was before the elements that came after it, and must not fire
 * after one of those elements reset it (then it would fire on the new state, before the time
 * the element set, and the reset timer would fire a second time on an empty state). Beam's
 * Python SDK files a message's timers before its data too. Found by tools/soak.sh (issue 33).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "proto/pb.h"
#include "runner/base/alloc.h"
#include "sdk-harness/src/worker_int.h"

static void free_inbox(void *v)
{
    inbox *ib = v;
    for (chunk *c = ib->head; c != NULL;) {
        chunk *n = c->next;
        sd__worker_chunk_destroy(c);
        c = n;
    }
    sd_free(ib);
}

static void test_timers_before_data(void **state)
{
    (void)state;
    sd__worker w;
    memset(&w, 0, sizeof(w));
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    sd_map_init(&w.inboxes, free_inbox);

    pb_Elements el = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ELEMENTS__INIT;
    pb_Elements_Data d = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ELEMENTS__DATA__INIT;
    pb_Elements_Data end = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ELEMENTS__DATA__INIT;
    pb_Elements_Timers t = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ELEMENTS__TIMERS__INIT;
    pb_Elements_Timers tend = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ELEMENTS__TIMERS__INIT;
    uint8_t elem[] = { 1, 2, 3 }, timer[] = { 9 };
    d.instruction_id = end.instruction_id = t.instruction_id = tend.instruction_id = "b1";
    d.transform_id = end.transform_id = "source";
    d.data.data = elem;
    d.data.len = sizeof(elem);
    end.is_last = 1;
    t.transform_id = tend.transform_id = "pardo";
    t.timer_family_id = tend.timer_family_id = "quiet";
    t.timers.data = timer;
    t.timers.len = sizeof(timer);
    tend.is_last = 1;
    pb_Elements_Data *datas[2] = { &d, &end };
    pb_Elements_Timers *timers[2] = { &t, &tend };
    el.n_data = 2;
    el.data = datas;
    el.n_timers = 2;
    el.timers = timers;

    sd__worker_inbox_add(&w, &el, NULL);
    inbox *ib = sd_map_get_str(&w.inboxes, "b1");
    assert_non_null(ib);
    const chunk *c = ib->head;
    /* the fired timer, the timer family's end, then the data and the data's end */
    assert_non_null(c);
    assert_true(c->timer);
    assert_int_equal(c->len, 1);
    assert_false(c->is_last);
    c = c->next;
    assert_non_null(c);
    assert_true(c->timer);
    assert_true(c->is_last);
    c = c->next;
    assert_non_null(c);
    assert_false(c->timer);
    assert_int_equal(c->len, 3);
    c = c->next;
    assert_non_null(c);
    assert_false(c->timer);
    assert_true(c->is_last);
    assert_null(c->next);

    sd_map_deinit(&w.inboxes);
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
}

/*
 * Out of memory while a message is filed: every allocation of sd__worker_inbox_add failed in
 * turn. Either all four chunks are there, or the loss is marked (the bundle then fails: see
 * next_chunk); never a bundle that silently runs on part of its input.
 */
static void test_lost_chunk_is_marked(void **state)
{
    (void)state;
    int marked = 0;
    for (long n = 1; n < 40; n++) {
        sd__worker w;
        memset(&w, 0, sizeof(w));
        w.id = "w";
        pthread_mutex_init(&w.mu, NULL);
        pthread_cond_init(&w.cv, NULL);
        sd_map_init(&w.inboxes, free_inbox);
        pb_Elements el = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ELEMENTS__INIT;
        pb_Elements_Data d = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ELEMENTS__DATA__INIT;
        pb_Elements_Timers t = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ELEMENTS__TIMERS__INIT;
        uint8_t elem[] = { 1, 2, 3 }, timer[] = { 9 };
        d.instruction_id = t.instruction_id = "b1";
        d.transform_id = "source";
        d.data.data = elem;
        d.data.len = sizeof(elem);
        t.transform_id = "pardo";
        t.timer_family_id = "quiet";
        t.timers.data = timer;
        t.timers.len = sizeof(timer);
        pb_Elements_Data *datas[1] = { &d };
        pb_Elements_Timers *timers[1] = { &t };
        el.n_data = 1;
        el.data = datas;
        el.n_timers = 1;
        el.timers = timers;

        sd_alloc_fail_after(n, 0);
        sd__worker_inbox_add(&w, &el, NULL);
        long failed = sd_alloc_injected_failures();
        sd_alloc_fail_after(0, 0);
        inbox *ib = sd_map_get_str(&w.inboxes, "b1");
        size_t chunks = 0;
        for (const chunk *c = ib != NULL ? ib->head : NULL; c != NULL; c = c->next) {
            chunks++;
        }
        bool lost = w.inbox_lost || (ib != NULL && ib->lost);
        if (failed == 0) {
            assert_int_equal(chunks, 2);
            assert_false(lost);
        } else if (!lost) {
            fail_msg("allocation %ld failed: %zu of 2 chunks filed and no loss marked", n, chunks);
        } else {
            marked++;
        }
        sd_map_deinit(&w.inboxes);
        pthread_cond_destroy(&w.cv);
        pthread_mutex_destroy(&w.mu);
        if (failed == 0) {
            break;
        }
    }
    assert_true(marked > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timers_before_data),
        cmocka_unit_test(test_lost_chunk_is_marked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
