/* Unit tests for runner/base: buffers, readers, varints, maps, vectors, errors, time. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "runner/base/alloc.h"
#include "runner/base/arena.h"
#include "runner/base/bg.h"
#include "runner/base/buf.h"
#include "runner/base/err.h"
#include "runner/base/fs.h"
#include "runner/base/http.h"
#include "runner/base/map.h"
#include "runner/base/time.h"
#include "runner/base/vec.h"
#include "tests/unit/fake_loop.h"

static void test_varint_table(void **state)
{
    static const struct {
        const char *name;
        uint64_t value;
        size_t len;
        uint8_t bytes[10];
    } rows[] = {
        { "zero", 0, 1, { 0x00 } },
        { "one", 1, 1, { 0x01 } },
        { "200", 200, 2, { 0xc8, 0x01 } },
        { "1000", 1000, 2, { 0xe8, 0x07 } },
        { "minus one",
          (uint64_t)-1,
          10,
          { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01 } },
    };

    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        sd_buf b;
        uint64_t back;
        sd_buf_init(&b, 0);
        assert_int_equal(sd_buf_put_varint(&b, rows[i].value), SD_OK);
        assert_int_equal(b.len, rows[i].len);
        assert_memory_equal(b.data, rows[i].bytes, rows[i].len);
        assert_int_equal(sd_varint_size(rows[i].value), rows[i].len);
        sd_reader r = sd_reader_make(sd_buf_bytes(&b));
        assert_int_equal(sd_reader_varint(&r, &back), SD_OK);
        assert_true(back == rows[i].value);
        assert_true(sd_reader_done(&r));
        sd_buf_deinit(&b);
    }
}

static void test_reader_bounds(void **state)
{
    const uint8_t trunc[] = { 0x80, 0x80 };
    const uint8_t lp_short[] = { 0x05, 'a', 'b' };
    uint64_t v;
    uint32_t v32;
    sd_bytes out;
    (void)state;
    sd_reader r = sd_reader_make(sd_bytes_make(trunc, sizeof(trunc)));
    assert_int_equal(sd_reader_varint(&r, &v), SD_EPROTO);
    assert_int_equal(sd_reader_left(&r), 2);
    assert_int_equal(sd_reader_be32(&r, &v32), SD_EPROTO);
    r = sd_reader_make(sd_bytes_make(lp_short, sizeof(lp_short)));
    assert_int_equal(sd_reader_lp(&r, &out), SD_EPROTO);
    assert_int_equal(sd_reader_left(&r), 3);
}

/*
 * Readers over empty bytes, with ptr == NULL as protobuf-c gives for every empty bytes field
 * and a zeroed sd_buf gives: every read is a clean SD_EPROTO, a zero-length take succeeds, and
 * nothing computes NULL + 0 (clang's UBSan: "applying zero offset to null pointer").
 */
static void test_reader_empty(void **state)
{
    static const uint8_t one[] = { 0x00 };

    static const struct {
        const char *name;
        sd_bytes bytes;
    } rows[] = {
        { "null", { NULL, 0 } },
        { "zero length, non-null", { one, 0 } },
    };

    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        print_message("row %s\n", rows[i].name);
        uint64_t v = 7;
        uint32_t v32 = 7;
        uint8_t byte = 7;
        sd_bytes out = { one, 1 };
        sd_reader r = sd_reader_make(rows[i].bytes);
        assert_int_equal(sd_reader_left(&r), 0);
        assert_true(sd_reader_done(&r));
        assert_int_equal(sd_reader_varint(&r, &v), SD_EPROTO);
        assert_int_equal(sd_reader_be32(&r, &v32), SD_EPROTO);
        assert_int_equal(sd_reader_be64(&r, &v), SD_EPROTO);
        assert_int_equal(sd_reader_byte(&r, &byte), SD_EPROTO);
        assert_int_equal(sd_reader_lp(&r, &out), SD_EPROTO);
        assert_int_equal(sd_reader_take(&r, 1, &out), SD_EPROTO);
        assert_int_equal(sd_reader_take(&r, 0, &out), SD_OK);
        assert_int_equal(out.len, 0);
        assert_int_equal(sd_reader_left(&r), 0);
        assert_true(sd_reader_done(&r));
        assert_true(v == 7 && v32 == 7 && byte == 7);
    }
    /* A zeroed sd_buf has data == NULL too. */
    sd_buf b;
    sd_buf_init(&b, 0);
    sd_reader r = sd_reader_make(sd_buf_bytes(&b));
    assert_true(sd_reader_done(&r));
    assert_true(sd_bytes_equal(sd_buf_bytes(&b), SD_BYTES_NULL));
    assert_int_equal(sd_bytes_cmp(sd_buf_bytes(&b), SD_BYTES_NULL), 0);
    sd_buf_deinit(&b);
}

static void test_buf_limit(void **state)
{
    sd_buf b;
    (void)state;
    sd_buf_init(&b, 4);
    assert_int_equal(sd_buf_append(&b, "abcd", 4), SD_OK);
    assert_int_equal(sd_buf_append_byte(&b, 'e'), SD_ETOOBIG);
    assert_int_equal(b.len, 4);
    sd_buf_deinit(&b);
}

static void test_map_basic(void **state)
{
    sd_map m;
    char keys[200][16];
    (void)state;
    sd_map_init(&m, NULL);
    for (int i = 0; i < 200; i++) {
        snprintf(keys[i], sizeof(keys[i]), "k%d", i);
        assert_int_equal(sd_map_put_str(&m, keys[i], keys[i]), SD_OK);
    }
    assert_int_equal(sd_map_len(&m), 200);
    for (int i = 0; i < 200; i += 2) {
        assert_true(sd_map_remove(&m, sd_bytes_str(keys[i])));
    }
    assert_int_equal(sd_map_len(&m), 100);
    for (int i = 0; i < 200; i++) {
        void *v = sd_map_get_str(&m, keys[i]);
        if (i % 2 == 0) {
            assert_null(v);
        } else {
            assert_ptr_equal(v, keys[i]);
        }
    }
    size_t n;
    sd_bytes *sorted = sd_map_sorted_keys(&m, &n);
    assert_int_equal(n, 100);
    for (size_t i = 1; i < n; i++) {
        assert_true(sd_bytes_cmp(sorted[i - 1], sorted[i]) < 0);
    }
    sd_free(sorted);
    sd_map_deinit(&m);
}

static void test_map_oom_loop(void **state)
{
    (void)state;
    for (long n = 1;; n++) {
        sd_map m;
        sd_status st = SD_OK;
        sd_map_init(&m, sd_free);
        sd_alloc_fail_after(n, 0);
        for (int i = 0; i < 20 && st == SD_OK; i++) {
            char key[8];
            snprintf(key, sizeof(key), "%d", i);
            char *v = sd_strdup("value");
            if (v == NULL) {
                st = SD_ENOMEM;
                break;
            }
            st = sd_map_put_str(&m, key, v);
            if (st != SD_OK) {
                sd_free(v);
            }
        }
        long injected = sd_alloc_injected_failures();
        sd_alloc_fail_after(0, 0);
        sd_map_deinit(&m);
        if (injected == 0) {
            assert_int_equal(st, SD_OK);
            break;
        }
        assert_int_equal(st, SD_ENOMEM);
    }
}

static void test_vec(void **state)
{
    sd_vec v;
    (void)state;
    sd_vec_init(&v, sizeof(int));
    for (int i = 0; i < 100; i++) {
        assert_int_equal(sd_vec_push(&v, &i), SD_OK);
    }
    sd_vec_remove(&v, 0);
    assert_int_equal(v.len, 99);
    assert_int_equal(*SD_VEC_AT(&v, int, 0), 1);
    sd_vec_deinit(&v);
}

static void test_err(void **state)
{
    sd_err err;
    (void)state;
    sd_err_clear(&err);
    assert_int_equal(sd_err_set(&err, SD_EPROTO, "coder %s: bad", "c1"), SD_EPROTO);
    sd_err_set(&err, SD_EINVAL, "second");
    assert_int_equal(err.code, SD_EPROTO);
    sd_err_prefix(&err, "stage %d: ", 3);
    assert_string_equal(sd_err_msg(&err), "stage 3: coder c1: bad");
    assert_string_equal(sd_status_name(SD_ENOTFOUND), "ENOTFOUND");
}

#ifndef NDEBUG
/* Runs fn in a child process; true when the child was killed by SIGABRT (a failed assert). */
static bool aborts_in_child(void (*fn)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* Quiet the assert's message and any sanitizer report of the abort. */
        if (freopen("/dev/null", "w", stderr) == NULL) {
            _exit(3);
        }
        fn();
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

static void set_ok_failure(void)
{
    sd_err err;
    sd_err_clear(&err);
    (void)sd_err_set(&err, SD_OK, "a failure with status SD_OK");
}

static void failed_ok_failure(void)
{
    sd_err err;
    sd_err_clear(&err);
    (void)sd_err_failed(&err, SD_OK, "the engine");
}
#endif

/* A failure never carries a success status (issue 33: a job failed as "engine: success"). */
static void test_err_never_success(void **state)
{
    sd_err err;
    (void)state;
    /* A message is only asked for a failure: an err holding none never says "success". */
    sd_err_clear(&err);
    assert_null(strstr(sd_err_msg(&err), "success"));
    assert_non_null(strstr(sd_err_msg(&err), "internal error"));

    /* A call that failed without saying why: the status and what failed are named. */
    sd_err_clear(&err);
    assert_int_equal(sd_err_failed(&err, SD_EINVAL, "the engine's scheduler"), SD_EINVAL);
    assert_int_equal(err.code, SD_EINVAL);
    assert_string_equal(sd_err_msg(&err), "the engine's scheduler failed: invalid argument "
                                          "(EINVAL), without saying why (an internal error)");

    /* An error already recorded is kept as it is. */
    sd_err_clear(&err);
    sd_err_set(&err, SD_EPROTO, "coder c1: bad");
    assert_int_equal(sd_err_failed(&err, SD_EINVAL, "the engine"), SD_EPROTO);
    assert_string_equal(sd_err_msg(&err), "coder c1: bad");
    assert_int_equal(sd_err_failed(&err, SD_OK, "the engine"), SD_EPROTO);

    /* Recording a failure with SD_OK is a programmer error: asserted where asserts are on; a
     * release build records SD_EINTERNAL, saying so, and never returns SD_OK. */
#ifdef NDEBUG
    sd_err_clear(&err);
    assert_int_equal(sd_err_set(&err, SD_OK, "window %d", 7), SD_EINTERNAL);
    assert_int_equal(err.code, SD_EINTERNAL);
    assert_string_equal(sd_err_msg(&err), "internal error: a failure was reported with a "
                                          "success status: window 7");
    assert_int_equal(sd_err_set(NULL, SD_OK, "x"), SD_EINTERNAL);
    sd_err_clear(&err);
    assert_int_equal(sd_err_failed(&err, SD_OK, "the engine"), SD_EINTERNAL);
    assert_int_equal(err.code, SD_EINTERNAL);
    assert_string_equal(sd_err_msg(&err),
                        "internal error: the engine reported a failure with a success status");
#else
    assert_true(aborts_in_child(set_ok_failure));
    assert_true(aborts_in_child(failed_ok_failure));
#endif
}

static void test_time(void **state)
{
    (void)state;
    assert_true(sd_time_encode(0) == 0x8000000000000000ULL);
    assert_true(sd_time_encode(-1) == 0x7fffffffffffffffULL);
    assert_true(sd_time_decode(sd_time_encode(SD_TIME_MIN)) == SD_TIME_MIN);
    assert_true(sd_time_add(SD_TIME_MAX, 5) == SD_TIME_MAX);
    assert_true(sd_time_add(SD_TIME_MIN, -5) == SD_TIME_MIN);
    assert_true(SD_TIME_GLOBAL_MAX == SD_TIME_MAX - 86400000);
}

static void test_arena(void **state)
{
    sd_arena a = { 0 };
    (void)state;
    char *small = sd_arena_strdup(&a, "abc");
    void *big = sd_arena_alloc(&a, 100000); /* a one-off block behind the head */
    char *after = sd_arena_printf(&a, "%s-%d", "x", 42);
    assert_string_equal(small, "abc");
    assert_non_null(big);
    assert_string_equal(after, "x-42");
    assert_true(((uintptr_t)big % _Alignof(max_align_t)) == 0); /* malloc's guarantee */
    assert_string_equal(sd_arena_strdup(&a, NULL), "");
    assert_false(a.failed);
    sd_arena_deinit(&a);
    assert_null(a.head);

    /* OOM loop: every failure is reported (NULL + failed) and nothing leaks. */
    for (long n = 1;; n++) {
        sd_arena b = { 0 };
        sd_alloc_fail_after(n, 0);
        bool ok = true;
        for (int i = 0; i < 50 && ok; i++) {
            ok = sd_arena_alloc(&b, i % 7 == 0 ? 20000 : 64) != NULL;
        }
        long injected = sd_alloc_injected_failures();
        sd_alloc_fail_after(0, 0);
        assert_true(ok == !b.failed);
        sd_arena_deinit(&b);
        if (injected == 0) {
            assert_true(ok);
            break;
        }
        assert_false(ok);
    }
}

/* ---------------------------------------------------------------- sd_bg */

typedef struct bg_job {
    int value, result;
    int done_calls;
    bool abandoned;
    pthread_t worker;
    pthread_mutex_t *gate; /* held by the test to keep the work running */
    _Atomic int started;
} bg_job;

static void bg_work(void *arg)
{
    bg_job *j = arg;
    j->worker = pthread_self();
    j->started = 1;
    if (j->gate != NULL) {
        pthread_mutex_lock(j->gate);
        pthread_mutex_unlock(j->gate);
    }
    j->result = j->value * 2;
}

static void bg_done(void *arg, bool abandoned)
{
    bg_job *j = arg;
    j->done_calls++;
    j->abandoned = abandoned;
}

/* sd_mem_discard: the whole pages inside the range read as zeros after, the bytes of pages
 * only partly inside (and everything outside) are kept. */
static void test_mem_discard(void **state)
{
    size_t page = sd_mem_page_size(), len = 8 * page;
    (void)state;
    assert_true(page >= 512 && (page & (page - 1)) == 0);
    uint8_t *p = sd_malloc(len);
    assert_non_null(p);
    memset(p, 0x5a, len);
    size_t from = 100, to = len - 100; /* [from, to): pages wholly inside it go */
    sd_mem_discard(p + from, to - from);
    uintptr_t lo = ((uintptr_t)(p + from) + page - 1) & ~(uintptr_t)(page - 1);
    uintptr_t hi = (uintptr_t)(p + to) & ~(uintptr_t)(page - 1);
    assert_true(hi - lo >= 6 * page);
    for (size_t i = 0; i < len; i++) {
        uintptr_t a = (uintptr_t)(p + i);
        bool gone = a >= lo && a < hi;
#if defined(__linux__)
        assert_int_equal(p[i], gone ? 0 : 0x5a);
#else
        assert_true(p[i] == 0x5a || gone);
#endif
    }
    sd_mem_discard(p, 0); /* nothing */
    sd_free(p);
}

static void test_size_parse(void **state)
{
    static const struct {
        const char *s;
        uint64_t want;
    } good[] = {
        { "0", 0 },
        { "4096", 4096 },
        { "1k", 1024 },
        { "512M", 512ull << 20 },
        { "512MB", 512ull << 20 },
        { "512MiB", 512ull << 20 },
        { "2g", 2ull << 30 },
        { "1TiB", 1ull << 40 },
        { "18446744073709551615", UINT64_MAX },
        { "16777215T", 16777215ull << 40 },
    };

    static const char *const bad[] = { "",          "-1",  "1.5G",
                                       "1 G",       "G",   "1X",
                                       "1GiBs",     "1Gi", "18446744073709551616",
                                       "16777216T", "0x10" };
    uint64_t v;
    (void)state;
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        assert_true(sd_size_parse(good[i].s, &v));
        assert_true(v == good[i].want);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (sd_size_parse(bad[i], &v)) {
            fail_msg("\"%s\" parsed as a size", bad[i]);
        }
    }
    assert_false(sd_size_parse(NULL, &v));
}

static void test_bg_inline(void **state)
{
    (void)state;
    sd_bg *bg = NULL;
    assert_int_equal(sd_bg_create(2, NULL, NULL, &bg), SD_OK);
    bg_job j = { .value = 21 };
    assert_int_equal(sd_bg_submit(bg, bg_work, bg_done, &j), SD_OK);
    /* No loop to post to: work and done ran at once, here. */
    assert_int_equal(j.result, 42);
    assert_int_equal(j.done_calls, 1);
    assert_false(j.abandoned);
    assert_true(pthread_equal(j.worker, pthread_self()));
    assert_int_equal(sd_bg_pending(bg), 0);
    sd_bg_close(bg);
}

static void test_bg_threads_and_close(void **state)
{
    (void)state;
    fake_loop l;
    fake_loop_init(&l);
    sd_bg *bg = NULL;
    assert_int_equal(sd_bg_create(1, fake_post, &l, &bg), SD_OK);

    /* Work runs on a pool thread; done only when the loop runs the posted task. */
    bg_job a = { .value = 5 };
    assert_int_equal(sd_bg_submit(bg, bg_work, bg_done, &a), SD_OK);
    assert_int_equal(sd_bg_pending(bg), 1);
    fake_run(&l);
    assert_int_equal(a.result, 10);
    assert_int_equal(a.done_calls, 1);
    assert_false(a.abandoned);
    assert_false(pthread_equal(a.worker, pthread_self()));
    assert_int_equal(sd_bg_pending(bg), 0);

    /* One thread: b runs (held at the gate), c waits in the queue. Closing abandons c at
     * once on this thread, and b on its pool thread when its work returns. */
    pthread_mutex_t gate;
    pthread_mutex_init(&gate, NULL);
    pthread_mutex_lock(&gate);
    bg_job b = { .value = 1, .gate = &gate };
    bg_job c = { .value = 2 };
    assert_int_equal(sd_bg_submit(bg, bg_work, bg_done, &b), SD_OK);
    assert_int_equal(sd_bg_submit(bg, bg_work, bg_done, &c), SD_OK);
    assert_int_equal(sd_bg_pending(bg), 2);
    for (int i = 0; i < 2000 && !b.started; i++) {
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
    }
    assert_true(b.started);
    sd_bg_close(bg);
    assert_int_equal(c.done_calls, 1);
    assert_true(c.abandoned);
    assert_int_equal(c.result, 0); /* never worked */
    pthread_mutex_unlock(&gate);
    for (int i = 0; i < 2000 && b.done_calls == 0; i++) {
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
    }
    assert_int_equal(b.done_calls, 1);
    assert_true(b.abandoned);
    assert_int_equal(b.result, 2);
    assert_int_equal(l.n, 0); /* nothing was posted for abandoned work */
    /* Give the pool thread time to drop its reference and free bg (LSan checks). */
    struct timespec ts = { 0, 20000000 };
    nanosleep(&ts, NULL);
    pthread_mutex_destroy(&gate);
    fake_loop_deinit(&l);
}

static void test_bg_submit_after_close_refused(void **state)
{
    (void)state;
    sd_bg *bg = NULL;
    assert_int_equal(sd_bg_create(1, NULL, NULL, &bg), SD_OK);
    assert_int_equal(sd_bg_submit(NULL, bg_work, bg_done, NULL), SD_ESTATE);
    sd_bg_close(bg);
    sd_bg_close(NULL);
}

/* ---------------------------------------------------------------- safe directories (fs.c) */

static bool exists(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0;
}

/* A private directory with a file and a symlink to a file outside it: sd_rmtree removes the
 * tree, the link and not its target. */
static void test_private_tmpdir_and_rmtree(void **state)
{
    (void)state;
    char *dir = NULL, *outside = NULL;
    sd_err err;
    sd_err_clear(&err);
    assert_int_equal(sd_private_tmpdir("sundial-test", &dir, &err), SD_OK);
    assert_int_equal(sd_private_tmpdir("sundial-test", &outside, &err), SD_OK);
    struct stat sb;
    assert_int_equal(lstat(dir, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    assert_int_equal(sb.st_mode & 0777, 0700);
    char *target = sd_asprintf("%s/keep", outside), *file = sd_asprintf("%s/a", dir),
         *link = sd_asprintf("%s/link", dir), *sub = sd_asprintf("%s/sub", dir);
    FILE *f = fopen(target, "w");
    assert_non_null(f);
    fclose(f);
    f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(symlink(outside, link), 0);
    assert_int_equal(mkdir(sub, 0700), 0);
    /* A symlink is refused as a private directory; the real one passes. */
    assert_int_equal(sd_private_dir(link, &err), SD_EIO);
    assert_non_null(strstr(sd_err_msg(&err), "symlink"));
    assert_int_equal(sd_private_dir(dir, &err), SD_OK);
    sd_rmtree(dir);
    assert_false(exists(dir));
    assert_true(exists(target)); /* the link's target survived */
    sd_rmtree(outside);
    assert_false(exists(outside));
    sd_free(target);
    sd_free(file);
    sd_free(link);
    sd_free(sub);
    sd_free(dir);
    sd_free(outside);
}

/* sd_remove_when_gone: a process that arranged it and is then killed with SIGKILL (no cleanup
 * of its own can run) still has its directory removed, by the janitor. */
static void test_remove_when_gone_after_sigkill(void **state)
{
    (void)state;
    char *dir = NULL;
    sd_err err;
    sd_err_clear(&err);
    assert_int_equal(sd_private_tmpdir("sundial-test", &dir, &err), SD_OK);
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(ready[0]);
        sd_err e;
        sd_err_clear(&e);
        char c = sd_remove_when_gone(dir, &e) == SD_OK ? 'y' : 'n';
        (void)!write(ready[1], &c, 1);
        for (;;) {
            pause(); /* until killed */
        }
    }
    close(ready[1]);
    char c = 0;
    assert_int_equal(read(ready[0], &c, 1), 1);
    close(ready[0]);
    assert_int_equal(c, 'y');
    assert_true(exists(dir)); /* the process lives: nothing removed */
    kill(pid, SIGKILL);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    for (int i = 0; i < 500 && exists(dir); i++) {
        struct timespec ts = { 0, 10000000 };
        nanosleep(&ts, NULL);
    }
    assert_false(exists(dir));
    sd_free(dir);
}

/* ------------------------------------------------------------------------------------------ */
/* http.c: the blocking client, against a one-shot server on loopback                        */
/* ------------------------------------------------------------------------------------------ */

typedef struct one_shot {
    int listen_fd;
    const char *answer; /* written whole, then the connection is closed */
    char request[2048]; /* what the client sent (its head) */
} one_shot;

static void *one_shot_serve(void *arg)
{
    one_shot *o = arg;
    int fd = accept(o->listen_fd, NULL, NULL);
    if (fd < 0) {
        return NULL;
    }
    size_t got = 0;
    while (got + 1 < sizeof(o->request)) {
        ssize_t n = read(fd, o->request + got, sizeof(o->request) - 1 - got);
        if (n <= 0) {
            break;
        }
        got += (size_t)n;
        o->request[got] = '\0';
        if (strstr(o->request, "\r\n\r\n") != NULL) {
            break;
        }
    }
    size_t len = strlen(o->answer);
    if (write(fd, o->answer, len) != (ssize_t)len) {
        o->request[0] = '\0';
    }
    close(fd);
    return NULL;
}

/* A listener on 127.0.0.1:0; OUT: its port as text. */
static int one_shot_listen(char *port, size_t n)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(fd, 1), 0);
    socklen_t al = sizeof(a);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &al), 0);
    snprintf(port, n, "%u", (unsigned)ntohs(a.sin_port));
    return fd;
}

/* One request against an answer; OUT: status, body; returns the client's status. */
static sd_status
one_request(const char *answer, one_shot *o, int *status, sd_buf *body, sd_err *err)
{
    char port[16], url[64];
    o->answer = answer;
    o->request[0] = '\0';
    o->listen_fd = one_shot_listen(port, sizeof(port));
    snprintf(url, sizeof(url), "http://127.0.0.1:%s/", port);
    sd_http_target t;
    assert_int_equal(sd_http_target_parse(url, &t, err), SD_OK);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, one_shot_serve, o), 0);
    sd_status st = sd_http_request(&t, "POST", "/api/jobs/job-1/step?events=1", status, body, err);
    pthread_join(th, NULL);
    close(o->listen_fd);
    return st;
}

static void test_http_client(void **state)
{
    (void)state;
    sd_http_target t;
    sd_err err;
    sd_err_clear(&err);
    /* URLs */
    assert_int_equal(sd_http_target_parse("http://127.0.0.1:8074/", &t, &err), SD_OK);
    assert_string_equal(t.host, "127.0.0.1");
    assert_string_equal(t.port, "8074");
    assert_int_equal(sd_http_target_parse("localhost", &t, &err), SD_OK);
    assert_string_equal(t.host, "localhost");
    assert_string_equal(t.port, "80");
    assert_int_equal(sd_http_target_parse("http://:8074/", &t, &err), SD_EINVAL);
    assert_non_null(strstr(sd_err_msg(&err), "http://:8074/ is not a web UI URL"));
    sd_err_clear(&err);
    assert_int_equal(sd_http_target_parse("http://h:80x/", &t, &err), SD_EINVAL);
    assert_non_null(strstr(sd_err_msg(&err), "bad port"));
    sd_err_clear(&err);
    assert_int_equal(sd_http_target_parse(NULL, &t, &err), SD_EINVAL);
    sd_err_clear(&err);

    /* escaping */
    sd_buf b;
    sd_buf_init(&b, 0);
    assert_int_equal(sd_http_put_escaped(&b, "Sessions/Out a&b=c~d_e.f-\xc3\xa7"), SD_OK);
    assert_int_equal(sd_buf_append_byte(&b, '\0'), SD_OK);
    assert_string_equal((const char *)b.data, "Sessions%2FOut%20a%26b%3Dc~d_e.f-%C3%A7");
    sd_buf_deinit(&b);

    /* a request and its answer: the status, the body, the guard header sent */
    one_shot o;
    int status = 0;
    sd_buf body;
    sd_buf_init(&body, 0);
    assert_int_equal(one_request("HTTP/1.1 409 Conflict\r\nContent-Type: application/json\r\n\r\n"
                                 "{\"error\":\"not paused\"}",
                                 &o, &status, &body, &err),
                     SD_OK);
    assert_int_equal(status, 409);
    assert_string_equal((const char *)body.data, "{\"error\":\"not paused\"}");
    assert_non_null(strstr(o.request, "POST /api/jobs/job-1/step?events=1 HTTP/1.1\r\n"));
    assert_non_null(strstr(o.request, "\r\nX-Sundial-Action: 1\r\n"));
    assert_non_null(strstr(o.request, "\r\nConnection: close\r\n"));
    sd_buf_deinit(&body);

    /* an answer that is not HTTP */
    sd_buf_init(&body, 0);
    assert_int_equal(one_request("SSH-2.0-OpenSSH\r\n", &o, &status, &body, &err), SD_EPROTO);
    assert_non_null(strstr(sd_err_msg(&err), "is not HTTP"));
    sd_err_clear(&err);
    sd_buf_deinit(&body);

    /* nobody listening: the port of a listener just closed */
    char port[16];
    close(one_shot_listen(port, sizeof(port)));
    snprintf(t.host, sizeof(t.host), "127.0.0.1");
    snprintf(t.port, sizeof(t.port), "%s", port);
    sd_buf_init(&body, 0);
    assert_int_equal(sd_http_request(&t, "GET", "/api/jobs", &status, &body, &err), SD_EIO);
    assert_non_null(strstr(sd_err_msg(&err), "cannot be reached"));
    assert_non_null(strstr(sd_err_msg(&err), port));
    sd_buf_deinit(&body);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_varint_table),
        cmocka_unit_test(test_mem_discard),
        cmocka_unit_test(test_err_never_success),
        cmocka_unit_test(test_reader_bounds),
        cmocka_unit_test(test_reader_empty),
        cmocka_unit_test(test_buf_limit),
        cmocka_unit_test(test_map_basic),
        cmocka_unit_test(test_map_oom_loop),
        cmocka_unit_test(test_vec),
        cmocka_unit_test(test_err),
        cmocka_unit_test(test_time),
        cmocka_unit_test(test_arena),
        cmocka_unit_test(test_size_parse),
        cmocka_unit_test(test_bg_inline),
        cmocka_unit_test(test_bg_threads_and_close),
        cmocka_unit_test(test_bg_submit_after_close_refused),
        cmocka_unit_test(test_private_tmpdir_and_rmtree),
        cmocka_unit_test(test_remove_when_gone_after_sigkill),
        cmocka_unit_test(test_http_client),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
